// Speculative decoding inside continuous batching: speculative and plain rows share each ragged
// step, every row with its own k and its own accepted count, and every request's greedy output
// equals the same request run alone without speculation. A stream closed early leaves a
// committed state that the prefix cache reuses exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "event_collector.h"
#include "rewind/base/thread_pool.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/engine/engine.h"
#include "test_util.h"

namespace rw {
namespace {

using test::Collector;

std::vector<int32_t> alone(Model& m, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  EngineOptions off;
  off.cache_enabled = false;
  Engine e(m, nullptr, off);
  Request g;
  g.prompt = prompt;
  g.max_tokens = max_tokens;
  auto out = e.generate(g);
  EXPECT_TRUE(out.ok());
  return out.ok() ? out->tokens : std::vector<int32_t>{};
}

class SpecBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecBatch, MixedRowsWithTheirOwnKAndAcceptanceEqualAlone) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(41);
  struct Req {
    std::vector<int32_t> prompt, want;
    int32_t max_tokens;
  };
  std::vector<Req> reqs;
  for (int i = 0; i < 8; ++i) {
    Req r;
    r.prompt = test::random_tokens(rng, 5 + static_cast<int64_t>(rng() % 60), V);
    r.max_tokens = 6 + static_cast<int32_t>(rng() % 20);
    r.want = alone(m, r.prompt, r.max_tokens);
    reqs.push_back(r);
  }
  // The engine's drafter knows every request's plain output and corrupts drafts at random
  // positions, so rows accept different counts in the same step.
  auto rng2 = std::make_shared<std::mt19937_64>(5);
  EngineOptions opt;
  opt.max_running = 8;
  opt.step_tokens = 41;
  opt.cache.policy.interval = 8;
  opt.spec.kind = SpecKind::Custom;
  opt.spec.k = 3;
  opt.spec.custom = [&reqs, rng2](std::span<const int32_t> ctx, int32_t k) {
    std::vector<int32_t> d;
    for (const Req& r : reqs) {
      if (ctx.size() <= r.prompt.size() ||
          !std::equal(r.prompt.begin(), r.prompt.end(), ctx.begin()))
        continue;
      const size_t j = ctx.size() - r.prompt.size();
      for (size_t i = j; i < r.want.size() && static_cast<int32_t>(d.size()) < k; ++i)
        d.push_back(r.want[i]);
      if (!d.empty() && (*rng2)() % 2) d[(*rng2)() % d.size()] ^= 1;
      break;
    }
    return d;
  };
  ThreadPool pool(2, 0);  // every job shared, however small
  BatchEngine eng(m, &pool, opt);
  Collector col;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request s;
    s.prompt = reqs[i].prompt;
    s.max_tokens = reqs[i].max_tokens;
    if (i % 4 == 3)
      s.spec_kind = SpecKind::Off;  // plain rows in the same steps
    else
      s.spec_k = 1 + static_cast<int32_t>(i % 4);  // k = 1, 2, 3
    auto id = eng.submit(s, col.cb());
    ASSERT_TRUE(id.ok()) << id.error_message();
    ids.push_back(*id);
  }
  col.wait(ids.size());
  int64_t drafted = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(col.tokens[ids[i]], reqs[i].want) << "request " << i;
    EXPECT_NE(col.final_ev[ids[i]].finish, FinishReason::Error) << col.final_ev[ids[i]].error;
    drafted += col.final_ev[ids[i]].report.spec.drafted;
    if (i % 4 == 3) {
      EXPECT_EQ(col.final_ev[ids[i]].report.spec.drafted, 0);
    }
  }
  const EngineMetrics em = eng.metrics();
  EXPECT_EQ(em.spec.drafted, drafted);
  EXPECT_GT(em.spec.accepted, 0);
  EXPECT_LT(em.spec.accepted, em.spec.drafted);  // some rejected
  EXPECT_GT(em.spec.replayed, 0);
}

TEST_P(SpecBatch, EarlyCloseThenTheCacheServesTheSamePrompt) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(43);
  // Repetitive prompt: n-gram drafts happen.
  const auto block = test::random_tokens(rng, 16, V);
  std::vector<int32_t> prompt;
  for (int r = 0; r < 4; ++r) prompt.insert(prompt.end(), block.begin(), block.end());
  const std::vector<int32_t> want = alone(m, prompt, 30);
  EngineOptions opt;
  opt.cache.policy.interval = 8;
  opt.spec.kind = SpecKind::Ngram;
  opt.spec.k = 4;
  BatchEngine eng(m, nullptr, opt);
  Collector col;
  BatchEngine* ep = &eng;
  Request s;
  s.prompt = prompt;
  s.max_tokens = 30;
  // The client goes away after its third token (cancel from the callback, as a dropped
  // connection does).
  col.also = [&](const TokenEvent& ev) {
    if (ev.finish == FinishReason::None && col.tokens[ev.id].size() == 3) ep->cancel(ev.id);
  };
  auto id = eng.submit(s, col.cb());
  ASSERT_TRUE(id.ok());
  col.wait(1);
  EXPECT_EQ(col.final_ev[*id].finish, FinishReason::Cancelled);
  const auto& got = col.tokens[*id];
  ASSERT_GE(got.size(), 3u);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
  col.also = nullptr;
  // The same prompt again: resumed from the cache, the same full output.
  auto id2 = eng.submit(s, col.cb());
  ASSERT_TRUE(id2.ok());
  col.wait(2);
  EXPECT_EQ(col.tokens[*id2], want);
  EXPECT_GT(col.final_ev[*id2].report.resumed_at, 0);
}

// A prompt waiting beside a row whose drafts take the whole step budget (8 drafts + 1 against
// step_tokens 8): it still gets its minimum share (engine/step_plan.h) in every step, so its
// prefill advances once per step of the drafting row, and both outputs equal their plain runs.
TEST_P(SpecBatch, DraftingRowsNeverStarveAWaitingPrefill) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(53);
  const std::vector<int32_t> p1 = test::random_tokens(rng, 4, V);
  const std::vector<int32_t> p2 = test::random_tokens(rng, 30, V);
  const std::vector<int32_t> want1 = alone(m, p1, 40), want2 = alone(m, p2, 2);
  ASSERT_EQ(want1.size(), 40u);
  EngineOptions opt;
  opt.max_running = 2;
  opt.step_tokens = 8;
  opt.cache_enabled = false;
  opt.spec.kind = SpecKind::Custom;
  opt.spec.k = 8;
  opt.spec.adaptive = false;
  // Always 8 drafts, the first one wrong: each round emits one token, so a step of the drafting
  // row is one token event.
  opt.spec.custom = [&](std::span<const int32_t> ctx, int32_t k) {
    const size_t j = ctx.size() - p1.size();
    const int32_t next = j < want1.size() ? want1[j] : 0;
    return std::vector<int32_t>(static_cast<size_t>(k), static_cast<int32_t>((next + 1) % V));
  };
  BatchEngine eng(m, nullptr, opt, EngineThread::Caller);
  Collector col;
  // The drafting request's token count at each of the waiting prompt's prefill chunks.
  std::vector<size_t> at_chunk;
  Request r1;
  r1.prompt = p1;
  r1.max_tokens = 40;
  auto s1 = eng.submit(r1, col.cb());
  ASSERT_TRUE(s1.ok());
  const uint64_t id1 = *s1;
  Request r2;
  r2.prompt = p2;
  r2.max_tokens = 2;
  r2.spec_kind = SpecKind::Off;
  r2.on_prefill = [&](int64_t, int64_t) { at_chunk.push_back(col.tokens[id1].size()); };
  auto s2 = eng.submit(r2, col.cb());
  ASSERT_TRUE(s2.ok());
  eng.run_until_idle();
  ASSERT_EQ(col.final_ev.size(), 2u);
  EXPECT_EQ(col.tokens[id1], want1);
  EXPECT_EQ(col.tokens[*s2], want2);
  EXPECT_GE(col.final_ev[id1].report.spec.drafted, 8 * 30);  // 8 a round until the last few
  // One chunk per step while the other row drafts: its token count grows by one per chunk.
  ASSERT_GE(at_chunk.size(), 3u);
  for (size_t i = 1; i < at_chunk.size(); ++i)
    EXPECT_LE(at_chunk[i] - at_chunk[i - 1], 1u)
        << "chunk " << i << " waited for " << at_chunk[i] - at_chunk[i - 1] << " steps";
}

TEST(SpecBatchMtp, MtpRowsAndPlainRowsShareStepsAndEqualAlone) {
  for (const char* preset : {"tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"}) {
    const std::string dir = test::scratch_dir(std::string("specbatch_mtp_") + preset);
    int rc = 0;
    const std::string log = test::run_command(std::string(REWIND_BINARY) + " make-model --preset " +
                                                  preset + " --mtp --seed 8 --out " + dir + " 2>&1",
                                              &rc);
    ASSERT_EQ(rc, 0) << log;
    LoadOptions lo;
    lo.mtp = true;
    auto loaded = Model::load(dir, lo);
    ASSERT_TRUE(loaded.ok()) << loaded.error_message();
    Model& m = **loaded;
    ASSERT_TRUE(m.mtp_loaded());
    std::mt19937_64 rng(47);
    std::vector<Request> subs;
    std::vector<std::vector<int32_t>> want;
    for (int i = 0; i < 6; ++i) {
      Request s;
      s.prompt = test::random_tokens(rng, 4 + static_cast<int64_t>(rng() % 50), 400);
      s.max_tokens = 5 + static_cast<int32_t>(rng() % 15);
      if (i % 3 == 2)
        s.spec_kind = SpecKind::Off;
      else
        s.spec_k = 1 + i % 3;
      want.push_back(alone(m, s.prompt, s.max_tokens));
      subs.push_back(s);
    }
    EngineOptions opt;
    opt.max_running = 6;
    opt.step_tokens = 29;
    opt.cache.policy.interval = 8;
    opt.spec.kind = SpecKind::Mtp;
    opt.spec.k = 3;
    BatchEngine eng(m, nullptr, opt);
    Collector col;
    std::vector<uint64_t> ids;
    for (int round = 0; round < 2; ++round)  // the second round resumes from the cache
      for (auto& s : subs) {
        auto id = eng.submit(s, col.cb());
        ASSERT_TRUE(id.ok()) << id.error_message();
        ids.push_back(*id);
      }
    col.wait(ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(col.tokens[ids[i]], want[i % subs.size()]) << preset << " request " << i;
    EXPECT_GT(eng.metrics().spec.drafted, 0) << preset;
  }
}

TEST(SpecBatchRefusals, RequestsTheEngineCannotServeAreRefusedUpFront) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  EngineOptions opt;
  BatchEngine eng(m, nullptr, opt);
  Request s;
  s.prompt = {1, 2, 3};
  s.spec_kind = SpecKind::Draft;  // no draft model loaded
  auto r = eng.submit(s, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("draft model"), std::string::npos);
  s.spec_kind = SpecKind::Ngram;
  s.spec_k = 99;
  EXPECT_FALSE(eng.submit(s, nullptr).ok());
  EXPECT_EQ(eng.metrics().requests_submitted, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, SpecBatch,
                         ::testing::ValuesIn(test::with_kv_types(test::all_families())),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace rw
