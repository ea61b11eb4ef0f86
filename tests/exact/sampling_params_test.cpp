// Sampling parameters in the engine: penalties and logit_bias compose with speculative decoding
// (greedy output token for token identical with speculation on and off, for every SpecKind,
// with drafts rejected and their penalty counts rolled back), rows are batch-invariant, and
// Request::n prefills the prompt once and forks the choices (choice i equal to a single request
// with seed + i; the forked choices re-run no token).
#include <gtest/gtest.h>

#include "event_collector.h"
#include "rewind/base/thread_pool.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/engine/engine.h"
#include "test_util.h"

namespace rw {
namespace {

using test::Collector;

SamplingParams penalised(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.repetition_penalty = 1.3f;
  p.repeat_last_n = 16;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.3f;
  p.logit_bias = {{5, 0.75f}, {7, -2.0f}};
  return p;
}

struct Out {
  std::vector<int32_t> tokens;
  RequestReport report;
};

Out run(Model& m, const std::vector<int32_t>& prompt, int32_t max_tokens, const SamplingParams& sp,
        std::optional<SpecConfig> spec = std::nullopt, ThreadPool* pool = nullptr) {
  EngineOptions o;
  o.cache_enabled = false;
  Engine e(m, pool, o);
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling = sp;
  r.spec = spec;
  auto g = e.generate(r);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error_message());
  if (!g.ok()) return {};
  return {g->tokens, g->report};
}

// A prompt that repeats itself, so n-gram drafts find matches.
std::vector<int32_t> repetitive_prompt(std::mt19937_64& rng, int64_t V) {
  const auto block = test::random_tokens(rng, 12, V);
  std::vector<int32_t> p;
  for (int r = 0; r < 3; ++r) p.insert(p.end(), block.begin(), block.end());
  return p;
}

// A drafter that knows the reference output and corrupts some drafts: rounds accept 0..k.
SpecConfig oracle(const std::vector<int32_t>& ref, size_t n_prompt, int64_t V) {
  SpecConfig sc;
  sc.kind = SpecKind::Custom;
  sc.k = 4;
  sc.custom = [ref, n_prompt, V](std::span<const int32_t> c, int32_t k) {
    std::vector<int32_t> d;
    for (size_t j = c.size() - n_prompt; j < ref.size() && static_cast<int32_t>(d.size()) < k; ++j)
      d.push_back(j % 3 == 1 ? static_cast<int32_t>((ref[j] + 1) % V) : ref[j]);
    return d;
  };
  return sc;
}

TEST(SamplingParams, PenaltiesChangeGreedyOutput) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  std::mt19937_64 rng(3);
  const auto prompt = repetitive_prompt(rng, m.config().vocab_size);
  const Out plain = run(m, prompt, 24, SamplingParams{});
  const Out pen = run(m, prompt, 24, penalised(0.0f, 0));
  EXPECT_NE(plain.tokens, pen.tokens);  // else the identity tests below would prove nothing
  // A +100 bias forces its token at every step.
  SamplingParams force;
  force.logit_bias = {{11, 100.0f}};
  EXPECT_EQ(run(m, prompt, 6, force).tokens, std::vector<int32_t>(6, 11));
}

class PenaltySpec : public ::testing::TestWithParam<std::string> {};

// Greedy with penalties: speculation on (n-gram, the target as its own draft model, a custom
// drafter that rejects often) gives the plain penalised output token for token.
TEST_P(PenaltySpec, GreedyIdenticalWithSpeculationOnAndOff) {
  Model& m = test::cached_model(test::fixture_dir(GetParam()));
  const int64_t V = m.config().vocab_size;
  ThreadPool pool(2, 0);
  std::mt19937_64 rng(std::hash<std::string>()(GetParam()));
  for (int trial = 0; trial < 3; ++trial) {
    const auto prompt = repetitive_prompt(rng, V);
    const SamplingParams sp = penalised(0.0f, 0);
    const Out plain = run(m, prompt, 30, sp, std::nullopt, &pool);
    SpecConfig ngram;
    ngram.kind = SpecKind::Ngram;
    ngram.k = 4;
    SpecConfig draft;
    draft.kind = SpecKind::Draft;
    draft.k = 3;
    draft.draft = &m;  // drafts the unpenalised argmax: rejected where the penalties bite
    for (const SpecConfig& sc : {ngram, draft, oracle(plain.tokens, prompt.size(), V)}) {
      const Out spec = run(m, prompt, 30, sp, sc, &pool);
      EXPECT_EQ(spec.tokens, plain.tokens) << spec_kind_name(sc.kind) << " trial " << trial;
      if (sc.kind != SpecKind::Ngram) {
        EXPECT_GT(spec.report.spec.drafted, 0) << spec_kind_name(sc.kind);
        EXPECT_LT(spec.report.spec.accepted, spec.report.spec.drafted) << spec_kind_name(sc.kind);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PenaltySpec, ::testing::ValuesIn(test::all_families()));

// The MTP head drafts greedily from the unpenalised state: the penalised output is unchanged.
TEST(PenaltySpecMtp, GreedyIdenticalWithMtpSpeculation) {
  const std::string dir = test::scratch_dir("sampling_params_mtp");
  int rc = 0;
  const std::string log =
      test::run_command(std::string(REWIND_BINARY) +
                            " make-model --preset tiny --mtp --seed 8 --out " + dir + " 2>&1",
                        &rc);
  ASSERT_EQ(rc, 0) << log;
  LoadOptions lo;
  lo.mtp = true;
  auto loaded = Model::load(dir, lo);
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  Model& m = **loaded;
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 3; ++trial) {
    const auto prompt = repetitive_prompt(rng, 400);
    const SamplingParams sp = penalised(0.0f, 0);
    const Out plain = run(m, prompt, 30, sp);
    SpecConfig mtp;
    mtp.kind = SpecKind::Mtp;
    mtp.k = 3;
    const Out spec = run(m, prompt, 30, sp, mtp);
    EXPECT_EQ(spec.tokens, plain.tokens) << "trial " << trial;
    EXPECT_GT(spec.report.spec.drafted, 0);
  }
}

// Rows with different penalties, biases and temperatures in one batch: each equals its request
// run alone (with and without speculation in the batch).
TEST(SamplingParams, PenalisedRowsAreBatchInvariant) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(17);
  std::vector<Request> reqs;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = repetitive_prompt(rng, V);
    r.max_tokens = 10 + i;
    r.sampling = penalised(i % 2 ? 0.8f : 0.0f, 100 + static_cast<uint64_t>(i));
    r.sampling.frequency_penalty = 0.2f * static_cast<float>(i);
    if (i == 3) r.sampling.logit_bias.clear();
    if (i % 3 == 2) {
      r.spec_kind = SpecKind::Ngram;
      r.spec_k = 3;
    }
    SpecConfig sc;
    sc.kind = r.spec_kind.value_or(SpecKind::Off);
    sc.k = 3;
    want.push_back(run(m, r.prompt, r.max_tokens, r.sampling, sc).tokens);
    reqs.push_back(r);
  }
  EngineOptions o;
  o.max_running = 6;
  o.step_tokens = 23;
  BatchEngine eng(m, nullptr, o, EngineThread::Caller);
  Collector col;
  std::vector<uint64_t> ids;
  for (auto& r : reqs) {
    auto id = eng.submit(r, col.cb());
    ASSERT_TRUE(id.ok()) << id.error_message();
    ids.push_back(*id);
  }
  eng.run_until_idle();
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(col.tokens[ids[i]], want[i]) << "request " << i;
}

// n = 3 with sampling: the prompt runs once (prefill_tokens_run counts it once), the forked
// choices re-run no token, choices differ, and choice i equals a single request with seed + i
// (speculation off and on).
TEST(SamplingParams, ChoicesForkOnceAndEqualSingleRequestsWithSeedPlusI) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(23);
  const auto prompt = test::random_tokens(rng, 150, V);  // several prefill chunks
  for (SpecKind kind : {SpecKind::Off, SpecKind::Ngram}) {
    const uint64_t seed = 4242;
    SamplingParams sp = penalised(0.9f, seed);
    SpecConfig sc;
    sc.kind = kind;
    sc.k = 3;
    EngineOptions o;
    o.max_running = 4;
    o.step_tokens = 64;
    o.cache.policy.interval = 64;
    BatchEngine eng(m, nullptr, o, EngineThread::Caller);
    Collector col;
    Request r;
    r.prompt = prompt;
    r.max_tokens = 16;
    r.sampling = sp;
    r.spec_kind = kind;
    r.n = 3;
    auto id = eng.submit(r, col.cb());
    ASSERT_TRUE(id.ok()) << id.error_message();
    eng.run_until_idle();
    ASSERT_EQ(col.final_ev.size(), 3u);
    std::set<std::vector<int32_t>> distinct;
    for (int32_t c = 0; c < 3; ++c) {
      const uint64_t cid = *id + static_cast<uint64_t>(c);
      const TokenEvent& fin = col.final_ev[cid];
      EXPECT_EQ(fin.choice, c);
      EXPECT_NE(fin.finish, FinishReason::Error) << fin.error;
      SamplingParams one = sp;
      one.seed = seed + static_cast<uint64_t>(c);
      EXPECT_EQ(col.tokens[cid], run(m, prompt, 16, one, sc).tokens) << "choice " << c;
      distinct.insert(col.tokens[cid]);
      // Re-run tokens per choice: the prompt for choice 0 (a cold cache), none for the others.
      EXPECT_EQ(fin.report.prompt_tokens, 150);
      EXPECT_EQ(fin.report.rerun_tokens, c == 0 ? 150 : 0) << "choice " << c;
      EXPECT_EQ(fin.report.forked, c > 0);
    }
    EXPECT_GE(distinct.size(), 2u);
    const EngineMetrics em = eng.metrics();
    EXPECT_EQ(em.prefill_tokens_run, 150);  // the prompt ran once for the three choices
    EXPECT_EQ(em.requests_finished, 1);
    EXPECT_EQ(em.prompt_tokens, 150);
    EXPECT_EQ(em.generated_tokens,
              static_cast<int64_t>(col.tokens[*id].size() + col.tokens[*id + 1].size() +
                                   col.tokens[*id + 2].size()));
  }
}

// A request takes a slot per choice; n beyond the slots or kMaxChoices, and bad adjustments,
// are refused at submit. Cancelling one choice leaves the others running; cancelling a request
// still queued ends every choice.
TEST(SamplingParams, ChoiceLimitsAndCancels) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  EngineOptions o;
  o.max_running = 3;
  BatchEngine eng(m, nullptr, o, EngineThread::Caller);
  Request r;
  r.prompt = {1, 2, 3, 4, 5};
  r.max_tokens = 8;
  r.sampling.temperature = 1.0f;
  for (int32_t bad : {0, 4, 9}) {
    r.n = bad;
    auto e = eng.submit(r, nullptr);
    EXPECT_FALSE(e.ok()) << bad;
  }
  r.n = 1;
  r.sampling.logit_bias = {{static_cast<int32_t>(m.config().vocab_size), 1.0f}};
  EXPECT_FALSE(eng.submit(r, nullptr).ok());
  r.sampling.logit_bias = {{1, 1.0f}, {1, 2.0f}};
  EXPECT_FALSE(eng.submit(r, nullptr).ok());
  r.sampling.logit_bias.clear();
  r.sampling.repetition_penalty = 0.0f;
  EXPECT_FALSE(eng.submit(r, nullptr).ok());
  r.sampling.repetition_penalty = 1.0f;
  EXPECT_EQ(eng.metrics().requests_submitted, 0);

  Collector col;
  r.n = 3;
  auto a = eng.submit(r, col.cb());
  auto b = eng.submit(r, col.cb());  // waits: its 3 choices do not fit beside a's
  ASSERT_TRUE(a.ok() && b.ok());
  eng.cancel(*a + 2);  // before the fork: choice 2 never starts
  eng.cancel(*b);      // still queued: all its choices end
  eng.run_until_idle();
  ASSERT_EQ(col.final_ev.size(), 6u);
  EXPECT_EQ(col.final_ev[*a + 2].finish, FinishReason::Cancelled);
  EXPECT_TRUE(col.tokens[*a + 2].empty());
  EXPECT_EQ(col.tokens[*a].size(), 8u);
  EXPECT_EQ(col.tokens[*a + 1].size(), 8u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(col.final_ev[*b + static_cast<uint64_t>(c)].finish, FinishReason::Cancelled);
    EXPECT_EQ(col.final_ev[*b + static_cast<uint64_t>(c)].choice, c);
  }
}

}  // namespace
}  // namespace rw
