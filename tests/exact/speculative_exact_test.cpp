// Speculative decoding's exactness contract (engine/speculative.h): greedy speculative output
// equals greedy plain output token for token, and the final sequence state is bit-identical,
// whatever the drafts were: rejection at position 0, at the first, a middle or the last draft,
// all accepted, many rounds in a row; for n-gram drafts, draft models (recurrent and
// attention-only drafts) and forced patterns; and a failing round leaves the sequence at its
// committed state with the prefix cache usable.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>

#include "engine_run.h"
#include "rewind/base/thread_pool.h"
#include "rewind/engine/engine.h"
#include "test_util.h"

namespace rw {
namespace {

using test::Gen;
using test::generate;

EngineOptions no_cache() {
  EngineOptions o;
  o.cache_enabled = false;
  return o;
}

// A drafter that proposes the known plain output `ref` (the tokens after a prompt of n_prompt
// tokens), with draft j of the reply replaced by (ref[j] + 1) % vocab where wrong(j) says so.
SpecConfig reference_drafter(const std::vector<int32_t>& ref, size_t n_prompt, int64_t vocab,
                             int32_t k, std::function<bool(size_t)> wrong = nullptr) {
  SpecConfig sc;
  sc.kind = SpecKind::Custom;
  sc.k = k;
  sc.custom = [ref, n_prompt, vocab, wrong](std::span<const int32_t> c, int32_t kk) {
    std::vector<int32_t> d;
    for (size_t j = c.size() - n_prompt; j < ref.size() && static_cast<int32_t>(d.size()) < kk; ++j)
      d.push_back(wrong && wrong(j) ? static_cast<int32_t>((ref[j] + 1) % vocab) : ref[j]);
    return d;
  };
  return sc;
}

// Drafts from the known plain output, corrupted where the pattern says: the oracle that lets
// a test choose exactly which draft position is rejected.
struct Oracle {
  std::vector<int32_t> ref;  // plain greedy output
  size_t n_prompt = 0;
  int64_t vocab = 0;
  std::mt19937_64 rng{7};
  int64_t rounds = 0, full = 0, reject_first = 0, reject_mid = 0, reject_last = 0;
  std::vector<int32_t> operator()(std::span<const int32_t> ctx, int32_t k) {
    const size_t j = ctx.size() - n_prompt;  // ref index of the token after `last`
    std::vector<int32_t> d;
    for (int32_t i = 0; i < k; ++i)
      d.push_back(j + i < ref.size() ? ref[j + i] : static_cast<int32_t>(rng() % vocab));
    ++rounds;
    const int mode = static_cast<int>(rng() % 4);  // 0: all right; else reject at a position
    if (mode == 0 || k == 0) {
      ++full;
      return d;
    }
    const int32_t at = mode == 1 ? 0 : mode == 2 ? static_cast<int32_t>(rng() % k) : k - 1;
    (at == 0 ? reject_first : at == k - 1 ? reject_last : reject_mid)++;
    d[at] = static_cast<int32_t>((d[at] + 1) % vocab);
    return d;
  }
};

class SpecExact : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecExact, ForcedRejectionPatternsMatchPlainGreedy) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  ThreadPool pool(2, 0);  // every job shared, however small
  Engine e(m, &pool, no_cache());
  std::mt19937_64 rng(std::hash<std::string>()(test::param_family(GetParam())) + 1);
  Oracle total;
  for (int trial = 0; trial < 6; ++trial) {
    const auto prompt = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 70), V);
    const int32_t max_tokens = 8 + static_cast<int32_t>(rng() % 30);
    Gen plain = generate(e, prompt, max_tokens);
    auto oracle = std::make_shared<Oracle>();
    oracle->ref = plain.out;
    oracle->n_prompt = prompt.size();
    oracle->vocab = V;
    oracle->rng.seed(rng());
    SpecConfig sc;
    sc.kind = SpecKind::Custom;
    sc.k = 1 + static_cast<int32_t>(rng() % 6);
    sc.adaptive = trial % 2 == 1;
    sc.custom = [oracle](std::span<const int32_t> c, int32_t k) { return (*oracle)(c, k); };
    Gen spec = generate(e, prompt, max_tokens, sc);
    ASSERT_EQ(spec.out, plain.out) << "trial " << trial << " k " << sc.k;
    EXPECT_TRUE(spec.state.same_contents(plain.state)) << "trial " << trial;
    EXPECT_GT(spec.rep.spec.rounds, 0);
    EXPECT_EQ(spec.rep.spec.drafted >= spec.rep.spec.accepted, true);
    total.rounds += oracle->rounds;
    total.full += oracle->full;
    total.reject_first += oracle->reject_first;
    total.reject_mid += oracle->reject_mid;
    total.reject_last += oracle->reject_last;
  }
  // Every pattern was exercised.
  EXPECT_GT(total.full, 0);
  EXPECT_GT(total.reject_first, 0);
  EXPECT_GT(total.reject_mid + total.reject_last, 0);
}

TEST_P(SpecExact, AllAcceptedManyRoundsNeedNoReplay) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  Engine e(m, nullptr, no_cache());
  std::mt19937_64 rng(11);
  const auto prompt = test::random_tokens(rng, 33, V);
  Gen plain = generate(e, prompt, 40);
  SpecConfig sc = reference_drafter(plain.out, prompt.size(), V, 4);
  Gen spec = generate(e, prompt, 40, sc);
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_TRUE(spec.state.same_contents(plain.state));
  EXPECT_EQ(spec.rep.spec.accepted, spec.rep.spec.drafted);
  EXPECT_GE(spec.rep.spec.rounds, 7);
  // Only the budget-cut final round can need a replay (a cut run keeps fewer than k+1 tokens).
  EXPECT_LE(spec.rep.spec.replayed, 4);
}

TEST_P(SpecExact, NgramOnRepetitiveTextMatchesPlain) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  Engine e(m, nullptr, no_cache());
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 3; ++trial) {
    const auto block = test::random_tokens(rng, 12 + trial * 5, V);
    std::vector<int32_t> prompt;
    for (int r = 0; r < 4; ++r) prompt.insert(prompt.end(), block.begin(), block.end());
    prompt.resize(prompt.size() - 5);  // the lookup continues the block
    Gen plain = generate(e, prompt, 30);
    SpecConfig sc;
    sc.kind = SpecKind::Ngram;
    sc.k = 3 + trial;
    Gen spec = generate(e, prompt, 30, sc);
    EXPECT_EQ(spec.out, plain.out);
    EXPECT_TRUE(spec.state.same_contents(plain.state));
    EXPECT_GT(spec.rep.spec.drafted, 0);
  }
}

TEST_P(SpecExact, DraftModelsMatchPlain) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  Engine e(m, nullptr, no_cache());
  std::mt19937_64 rng(17);
  // The target as its own draft (every draft accepted) and another family's recurrent model
  // (mostly rejected): both must give exactly the plain output.
  for (const std::string& other : test::fixture_variants()) {
    Model& d =
        test::cached_model(test::fixture_dir(other), WeightStore::Auto, test::param_kv(GetParam()));
    const auto prompt = test::random_tokens(rng, 20 + static_cast<int64_t>(rng() % 40), V);
    Gen plain = generate(e, prompt, 25);
    SpecConfig sc;
    sc.kind = SpecKind::Draft;
    sc.draft = &d;
    sc.k = 4;
    Gen spec = generate(e, prompt, 25, sc);
    EXPECT_EQ(spec.out, plain.out) << "draft " << other;
    EXPECT_TRUE(spec.state.same_contents(plain.state)) << "draft " << other;
    if (other == test::param_family(GetParam())) {
      EXPECT_EQ(spec.rep.spec.accepted, spec.rep.spec.drafted);
    }
  }
}

TEST_P(SpecExact, FailingRoundLeavesCommittedStateAndCacheUsable) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  EngineOptions opt;
  opt.cache.policy.interval = 16;
  Engine cached(m, nullptr, opt);
  Engine cold(m, nullptr, no_cache());
  std::mt19937_64 rng(23);
  for (const char* stage : {"draft", "verify"}) {
    const auto prompt = test::random_tokens(rng, 40, V);
    Gen plain = generate(cold, prompt, 30);
    const size_t n = prompt.size();
    SpecConfig sc = reference_drafter(plain.out, n, V, 3, [](size_t j) { return j % 3 == 0; });
    int calls = 0;
    sc.fault = [&](const char* s) {
      if (std::string(s) == stage && ++calls == 4) throw std::runtime_error("injected fault");
    };
    Request r;
    r.prompt = prompt;
    r.max_tokens = 30;
    r.spec = sc;
    auto rep = cached.generate(r);
    ASSERT_FALSE(rep.ok()) << stage;
    EXPECT_NE(rep.error_message().find("injected fault"), std::string::npos);
    // The state is at its last committed position, bit for bit what plain decoding gives.
    const SequenceState* st = cached.last_state();
    ASSERT_NE(st, nullptr);
    const int64_t consumed = st->n_pos() - static_cast<int64_t>(n);
    ASSERT_GT(consumed, 0);
    Gen plain_at = generate(cold, prompt, static_cast<int32_t>(consumed + 1));
    EXPECT_TRUE(st->same_contents(plain_at.state)) << stage << " at " << st->n_pos();
    // The cache still serves: the same request without the fault gives the plain output.
    sc.fault = nullptr;
    Gen again = generate(cached, prompt, 30, sc);
    EXPECT_EQ(again.out, plain.out) << stage;
    EXPECT_TRUE(again.state.same_contents(plain.state)) << stage;
  }
}

TEST_P(SpecExact, CheckpointsCrossedInsideAcceptedRunsAreExact) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  EngineOptions opt;
  opt.cache.policy.interval = 5;  // many grid positions fall inside accepted runs
  opt.cache.policy.max_per_branch = 64;
  Engine plain_e(m, nullptr, opt);
  Engine spec_e(m, nullptr, opt);
  std::mt19937_64 rng(29);
  const auto prompt = test::random_tokens(rng, 23, V);
  Gen plain = generate(plain_e, prompt, 36);
  const std::vector<int32_t> ref = plain.out;
  SpecConfig sc = reference_drafter(ref, prompt.size(), V, 6, [](size_t j) { return j % 7 == 5; });
  sc.adaptive = false;
  Gen spec = generate(spec_e, prompt, 36, sc);
  ASSERT_EQ(spec.out, plain.out);
  EXPECT_EQ(spec.rep.snapshots_taken, plain.rep.snapshots_taken);
  // Every grid snapshot of the reply is bit-identical in both caches.
  std::vector<int32_t> hist = prompt;
  hist.insert(hist.end(), ref.begin(), ref.end() - 1);
  int64_t compared = 0;
  for (int64_t c = 25; c < static_cast<int64_t>(hist.size()); c += 5) {
    std::vector<int32_t> probe(hist.begin(), hist.begin() + c);
    probe.push_back(static_cast<int32_t>((hist[c] + 1) % V));  // diverge right after c
    // lookup() only touches LRU order and leases here.
    auto a = const_cast<PrefixCache*>(plain_e.cache())->lookup(probe);
    auto b = const_cast<PrefixCache*>(spec_e.cache())->lookup(probe);
    ASSERT_EQ(a.resume_pos, c);
    ASSERT_EQ(b.resume_pos, c);
    ASSERT_TRUE(a.snapshot && b.snapshot);
    ASSERT_EQ(a.snapshot->rec.size(), b.snapshot->rec.size());
    EXPECT_EQ(std::memcmp(a.snapshot->rec.data(), b.snapshot->rec.data(), a.snapshot->bytes()), 0)
        << "snapshot at " << c;
    ++compared;
  }
  EXPECT_GE(compared, 5);
}

INSTANTIATE_TEST_SUITE_P(Families, SpecExact,
                         ::testing::ValuesIn(test::with_kv_types(test::all_families())),
                         [](const auto& info) { return test::param_name(info.param); });

std::string make_model_dir(const std::string& args, const std::string& tag) {
  const std::string dir = test::scratch_dir("spec_" + tag);
  std::filesystem::remove_all(dir);
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " make-model " + args + " --out " + dir + " 2>&1", &rc);
  EXPECT_EQ(rc, 0) << out;
  return dir;
}

TEST(SpecDraft, AttentionOnlyAndNoisyDraftsWithAHybridTarget) {
  // Hybrid target (tiny: 3 GDN + 1 attention), an attention-only draft with the same
  // tokenizer (tiny-dense), and a draft made of the target's own weights plus noise.
  const std::string target_dir = make_model_dir("--preset tiny --seed 3", "target");
  const std::string dense_dir = make_model_dir("--preset tiny-dense --seed 4", "dense");
  const std::string noisy_dir =
      make_model_dir("--from " + target_dir + " --noise 0.02 --seed 5", "noisy");
  auto load = [](const std::string& d) {
    auto m = Model::load(d, LoadOptions{});
    EXPECT_TRUE(m.ok()) << m.error_message();
    return std::move(m).value();
  };
  auto target = load(target_dir), dense = load(dense_dir), noisy = load(noisy_dir);
  ASSERT_EQ(dense->config().n_recurrent_layers(), 0);
  ASSERT_GT(target->config().n_recurrent_layers(), 0);
  ThreadPool pool(2, 0);  // every job shared, however small
  Engine e(*target, &pool, no_cache());
  std::mt19937_64 rng(31);
  int64_t noisy_acc = 0, noisy_drafted = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const auto prompt = test::random_tokens(rng, 10 + static_cast<int64_t>(rng() % 50), 400);
    Gen plain = generate(e, prompt, 40);
    for (Model* d : {dense.get(), noisy.get()}) {
      SpecConfig sc;
      sc.kind = SpecKind::Draft;
      sc.draft = d;
      sc.k = 2 + trial;
      Gen spec = generate(e, prompt, 40, sc);
      EXPECT_EQ(spec.out, plain.out)
          << (d == dense.get() ? "dense" : "noisy") << " trial " << trial;
      EXPECT_TRUE(spec.state.same_contents(plain.state));
      EXPECT_GT(spec.rep.spec.drafted, 0);
      if (d == noisy.get()) {
        noisy_acc += spec.rep.spec.accepted;
        noisy_drafted += spec.rep.spec.drafted;
      }
    }
  }
  // The noisy copy agrees with its target for real reasons: most drafts are accepted.
  EXPECT_GT(noisy_acc * 2, noisy_drafted);
}

TEST(SpecRollback, DeeperThanRecordedFailsLoudly) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  SequenceState st = m.new_state();
  RecCapture cap;
  std::vector<int32_t> toks = {1, 2, 3};
  SeqInput in{&st, toks, {}, &cap};
  std::vector<float> logits;
  ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
  ASSERT_EQ(cap.n, 3);
  EXPECT_DEATH(m.replay_recurrent(&st, cap, 0, 4, nullptr), "to <= cap.n");
}

TEST(SpecCheck, RefusesBeforeAnyRound) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  SpecConfig sc;
  sc.kind = SpecKind::Ngram;
  sc.k = 0;
  EXPECT_FALSE(spec_check(m, sc).ok());
  sc.k = SpecConfig::kMaxDraft + 1;
  EXPECT_FALSE(spec_check(m, sc).ok());
  sc.k = 4;
  EXPECT_TRUE(spec_check(m, sc).ok());
  sc.kind = SpecKind::Draft;
  EXPECT_FALSE(spec_check(m, sc).ok());  // no draft model
  sc.kind = SpecKind::Custom;
  EXPECT_FALSE(spec_check(m, sc).ok());  // no drafter
  // A fresh engine refuses the request before running anything.
  Engine e(m, nullptr, no_cache());
  Request r;
  r.prompt = {1, 2, 3};
  r.spec = SpecConfig{};
  r.spec->kind = SpecKind::Draft;
  auto rep = e.generate(r);
  EXPECT_FALSE(rep.ok());
  EXPECT_EQ(e.last_state(), nullptr);
}

// A draft model catches up on the prompt when the target's prefill ends (warm), so that the
// first round drafts from a lag of at most 2 * kMaxDraft tokens; other drafters do nothing.
TEST(SpecWarm, DraftCatchesUpOnThePromptBeforeTheFirstRound) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  std::mt19937_64 rng(5);
  const auto history = test::random_tokens(rng, 200, m.config().vocab_size);
  SpecConfig sc;
  sc.kind = SpecKind::Draft;
  sc.draft = &m;
  SpecSequence draft(m, sc);
  EXPECT_EQ(draft.draft_consumed(), 0);
  ASSERT_TRUE(draft.warm(history, nullptr).ok());
  EXPECT_GE(draft.draft_consumed(), 200 - 2 * SpecConfig::kMaxDraft);
  EXPECT_LE(draft.draft_consumed(), 200);
  SpecConfig ng;
  ng.kind = SpecKind::Ngram;
  SpecSequence ngram(m, ng);
  ASSERT_TRUE(ngram.warm(history, nullptr).ok());
  EXPECT_EQ(ngram.draft_consumed(), 0);
}

TEST(NgramLookup, LongestSuffixMostRecentOccurrence) {
  const std::vector<int32_t> c = {1, 2, 3, 9, 1, 2, 3, 4, 5, 7, 2, 3};
  // Suffix [2,3] last occurred at 5..6, followed by 4, 5, 7.
  EXPECT_EQ(ngram_lookup(c, 3, 1, 4), (std::vector<int32_t>{4, 5, 7}));
  EXPECT_EQ(ngram_lookup(c, 2, 1, 4), (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(ngram_lookup(std::vector<int32_t>{1, 2, 3}, 3, 1, 3).empty());
  // A match right before the suffix proposes the suffix itself (period-1 repetition).
  EXPECT_EQ(ngram_lookup(std::vector<int32_t>{5, 5, 5}, 4, 1, 2), (std::vector<int32_t>{5}));
}

}  // namespace
}  // namespace rw
