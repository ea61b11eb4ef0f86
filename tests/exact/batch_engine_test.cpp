// BatchEngine (continuous batching on one engine thread): greedy outputs of concurrent requests
// equal each request run alone (batch invariance end to end), with the prefix cache on;
// cancellation frees the sequence; limits refuse bad requests without changing anything.
#include "rewind/engine/batch_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "event_collector.h"
#include "rewind/base/thread_pool.h"
#include "rewind/engine/engine.h"
#include "test_util.h"

namespace rw {
namespace {

using test::Collector;

class BatchEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchEngineTest, ConcurrentGreedyEqualsAlone) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(21);
  auto shared = test::random_tokens(rng, 70, V);
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.prompt = i % 2 ? shared : std::vector<int32_t>{};
    auto tail = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 90), V);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 3 + static_cast<int32_t>(rng() % 10);
    reqs.push_back(r);
  }
  // Alone: one at a time, cache off.
  EngineOptions off;
  off.cache_enabled = false;
  Engine alone(m, nullptr, off);
  std::vector<std::vector<int32_t>> want;
  for (auto& r : reqs) {
    Request g;
    g.prompt = r.prompt;
    g.max_tokens = r.max_tokens;
    auto out = alone.generate(g);
    ASSERT_TRUE(out.ok());
    want.push_back(out->tokens);
  }
  ThreadPool pool(2, 0);  // every job shared, however small
  EngineOptions opt;
  opt.max_running = 8;
  opt.step_tokens = 37;  // small steps: prefills interleave with decodes
  opt.cache.policy.interval = 16;
  BatchEngine eng(m, &pool, opt);
  Collector col;
  std::vector<uint64_t> ids;
  for (int round = 0; round < 2; ++round) {  // the second round hits the cache
    ids.clear();
    for (auto& r : reqs) {
      auto id = eng.submit(r, col.cb());
      ASSERT_TRUE(id.ok()) << id.error_message();
      ids.push_back(id.value());
    }
    col.wait(static_cast<size_t>(8 * (round + 1)));
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::lock_guard<std::mutex> lock(col.mu);
      EXPECT_EQ(col.tokens[ids[i]], want[i]) << "request " << i << " round " << round;
      EXPECT_EQ(col.final_ev[ids[i]].finish, FinishReason::Length);
      if (round == 1) {
        EXPECT_GT(col.final_ev[ids[i]].report.resumed_at, 0) << i;
      }
    }
  }
  auto met = eng.metrics();
  EXPECT_EQ(met.requests_finished, 16);
  EXPECT_GT(met.cache.hits_exact + met.cache.hits_checkpoint + met.cache.hits_extension, 0);
}

// on_prefill reports each chunk's end, ascending, ending at the prompt's length; a request
// resumed from the cache starts its reports past the resumed tokens.
TEST_P(BatchEngineTest, PrefillProgressReportsEachChunk) {
  Model& m = test::param_model(GetParam());
  std::mt19937_64 rng(5);
  EngineOptions opt;
  opt.step_tokens = 16;
  opt.cache.policy.interval = 16;
  Engine eng(m, nullptr, opt);
  Request r;
  r.prompt = test::random_tokens(rng, 70, m.config().vocab_size);
  r.max_tokens = 2;
  std::vector<std::pair<int64_t, int64_t>> seen;
  r.on_prefill = [&](int64_t done, int64_t total) { seen.emplace_back(done, total); };
  ASSERT_TRUE(eng.generate(r).ok());
  ASSERT_FALSE(seen.empty());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].second, 70);
    if (i) {
      EXPECT_GT(seen[i].first, seen[i - 1].first);
    }
    EXPECT_LE(seen[i].first - (i ? seen[i - 1].first : 0), 16);
  }
  EXPECT_EQ(seen.back().first, 70);
  // The same prompt plus a tail: resumed from a checkpoint, only the rest is reported.
  auto tail = test::random_tokens(rng, 20, m.config().vocab_size);
  r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
  seen.clear();
  auto g = eng.generate(r);
  ASSERT_TRUE(g.ok());
  ASSERT_GT(g->report.resumed_at, 0);
  ASSERT_FALSE(seen.empty());
  EXPECT_GT(seen.front().first, g->report.resumed_at);
  EXPECT_EQ(seen.back().first, 90);
}

// With an inter-token target, a prompt that arrives while others decode runs in chunks sized
// from the measured step times (engine/step_budget.h), far below the fixed budget for a target
// of barely more than a decode step; its reply and theirs are still the tokens of each alone.
TEST_P(BatchEngineTest, AnItlTargetShortensMixedChunksAndKeepsTheTokens) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(9);
  Request shortr;
  shortr.max_tokens = 400;  // decoding well past the long prompt's prefill
  Request longr;
  longr.prompt = test::random_tokens(rng, 400, V);
  longr.max_tokens = 3;
  EngineOptions off;
  off.cache_enabled = false;
  Engine alone(m, nullptr, off);
  std::vector<Request> shorts;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 2; ++i) {
    shorts.push_back(shortr);
    shorts.back().prompt = test::random_tokens(rng, 12, V);
    want.push_back(alone.generate(shorts.back())->tokens);
  }
  const auto want_long = alone.generate(longr)->tokens;

  EngineOptions opt;
  opt.step_tokens = 256;
  opt.step_target = parse_step_target("1.01x").value();
  BatchEngine eng(m, nullptr, opt);
  Collector col;
  std::vector<uint64_t> ids;
  for (const Request& r : shorts) ids.push_back(eng.submit(r, col.cb()).value());
  for (int i = 0; i < 20000; ++i) {  // both decode before the long prompt arrives
    {
      std::lock_guard<std::mutex> lock(col.mu);
      if (!col.tokens[ids[0]].empty() && !col.tokens[ids[1]].empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::vector<int64_t> chunks, decoded_at;
  int64_t last = 0;
  longr.on_prefill = [&](int64_t done, int64_t) {  // the engine thread, between steps
    chunks.push_back(done - last);
    last = done;
    std::lock_guard<std::mutex> lock(col.mu);
    decoded_at.push_back(static_cast<int64_t>(col.tokens[ids[0]].size()));
  };
  const uint64_t long_id = eng.submit(longr, col.cb()).value();
  col.wait(3);
  std::lock_guard<std::mutex> lock(col.mu);
  EXPECT_EQ(col.tokens[ids[0]], want[0]);
  EXPECT_EQ(col.tokens[ids[1]], want[1]);
  EXPECT_EQ(col.tokens[long_id], want_long);
  ASSERT_FALSE(chunks.empty());
  // The chunks of steps in which the short ones decoded: the fixed budget would give 254 each;
  // a step the host delayed may let one run longer, so the median is what must stay small.
  std::vector<int64_t> beside;
  for (size_t i = 0; i < chunks.size(); ++i)
    if (decoded_at[i] < shortr.max_tokens) beside.push_back(chunks[i]);
  ASSERT_GE(beside.size(), 3u);
  std::nth_element(beside.begin(), beside.begin() + beside.size() / 2, beside.end());
  EXPECT_LE(beside[beside.size() / 2], 64);
  const EngineMetrics met = eng.metrics();
  EXPECT_GE(met.mixed_prefill_budget, StepBudget::kFloorTokens);
  EXPECT_GT(met.step_fit.prefill_ms_per_token, 0);
}

TEST_P(BatchEngineTest, CancelFreesAndOthersContinue) {
  Model& m = test::param_model(GetParam());
  std::mt19937_64 rng(5);
  EngineOptions opt;
  opt.max_running = 2;
  BatchEngine eng(m, nullptr, opt);
  Collector col;
  Request longr;
  longr.prompt = test::random_tokens(rng, 50, m.config().vocab_size);
  longr.max_tokens = 4000;
  Request shortr = longr;
  shortr.max_tokens = 5;
  auto a = eng.submit(longr, col.cb());
  auto b = eng.submit(shortr, col.cb());
  ASSERT_TRUE(a.ok() && b.ok());
  // Cancel while it is running (it has produced tokens), not while it waits in the queue.
  for (int i = 0; i < 20000; ++i) {
    {
      std::lock_guard<std::mutex> lock(col.mu);
      if (!col.tokens[a.value()].empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  eng.cancel(a.value());
  col.wait(2);
  std::unique_lock<std::mutex> lock(col.mu);
  EXPECT_EQ(col.final_ev[a.value()].finish, FinishReason::Cancelled);
  EXPECT_FALSE(col.tokens[a.value()].empty());
  EXPECT_LT(col.tokens[a.value()].size(), 4000u);
  EXPECT_EQ(col.final_ev[b.value()].finish, FinishReason::Length);
  EXPECT_EQ(col.tokens[b.value()].size(), 5u);
  lock.unlock();
  EXPECT_EQ(eng.metrics().requests_cancelled, 1);
  // The running gauge is updated at the end of the engine step that finished them.
  for (int i = 0; i < 2000 && eng.metrics().running != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(eng.metrics().running, 0);
}

// Engine::generate's stop flag (what `rewind chat` sets from its SIGINT handler): set from the
// token callback after the third token, the request ends Cancelled with exactly those tokens,
// which equal the first three of an uninterrupted run; what it computed is published, so the
// conversation continued with that partial reply resumes from the cache. Set before the call,
// nothing is generated.
TEST_P(BatchEngineTest, StopFlagCancelsGenerate) {
  Model& m = test::param_model(GetParam());
  std::mt19937_64 rng(9);
  Request r;
  r.prompt = test::random_tokens(rng, 40, m.config().vocab_size);
  r.max_tokens = 12;
  EngineOptions off;
  off.cache_enabled = false;
  Engine plain(m, nullptr, off);
  auto want = plain.generate(r);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(want->tokens.size(), 12u);

  EngineOptions opt;
  opt.cache.policy.interval = 16;
  Engine eng(m, nullptr, opt);
  std::atomic<bool> stop{false};
  size_t seen = 0;
  auto cut = eng.generate(
      r,
      [&](int32_t) {
        if (++seen == 3) stop.store(true);
      },
      &stop);
  ASSERT_TRUE(cut.ok()) << cut.error_message();
  EXPECT_EQ(cut->finish, FinishReason::Cancelled);
  ASSERT_EQ(cut->tokens.size(), 3u);
  EXPECT_TRUE(std::equal(cut->tokens.begin(), cut->tokens.end(), want->tokens.begin()));
  EXPECT_TRUE(stop.load());  // generate() leaves the flag to its owner

  // Still set: the next request is cancelled before it runs a step.
  auto none = eng.generate(r, {}, &stop);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->finish, FinishReason::Cancelled);
  EXPECT_TRUE(none->tokens.empty());

  // Cleared: the prompt extended by the partial reply resumes past the original prompt.
  stop.store(false);
  Request next = r;
  next.prompt.insert(next.prompt.end(), cut->tokens.begin(), cut->tokens.end());
  next.prompt.push_back(1);
  next.max_tokens = 2;
  auto more = eng.generate(next, {}, &stop);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->finish, FinishReason::Length);
  EXPECT_GE(more->report.resumed_at, static_cast<int64_t>(r.prompt.size()));
}

// One sequence at a time in a 100-token context, with max_queued requests waiting beyond it.
EngineOptions one_slot(int32_t max_queued) {
  EngineOptions opt;
  opt.ctx_size = 100;
  opt.max_running = 1;
  opt.max_queued = max_queued;
  return opt;
}

TEST_P(BatchEngineTest, LimitsRefuseWithoutChangingAnything) {
  Model& m = test::param_model(GetParam());
  BatchEngine eng(m, nullptr, one_slot(1));
  Request r;
  r.prompt = std::vector<int32_t>(90, 1);
  r.max_tokens = 20;
  auto too_long = eng.submit(r, nullptr);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.error_message().find("context size"), std::string::npos);
  r.prompt = {1, 2, static_cast<int32_t>(m.config().vocab_size)};
  r.max_tokens = 1;
  EXPECT_FALSE(eng.submit(r, nullptr).ok());
  r.prompt = {};
  EXPECT_FALSE(eng.submit(r, nullptr).ok());
  EXPECT_EQ(eng.metrics().requests_rejected, 3);
  EXPECT_EQ(eng.metrics().requests_submitted, 0);
  EXPECT_EQ(eng.metrics().cache.lookups, 0);
  // Queue full: one running plus max_queued (1) waiting. The running request's first token
  // callback holds the engine thread until the burst is done, so none of the burst can start
  // or finish in between (without the hold, a fast request could finish mid-burst and let a
  // third one in): exactly one more is accepted, the rest are refused and change nothing.
  r.prompt = std::vector<int32_t>(60, 2);
  r.max_tokens = 39;
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first_event = true;
  auto hold = [&](const TokenEvent&) {
    if (!std::exchange(first_event, false)) return;
    entered.set_value();
    released.wait();
  };
  auto running = eng.submit(r, hold);
  ASSERT_TRUE(running.ok()) << running.error_message();
  entered.get_future().wait();  // admitted and decoding
  std::vector<uint64_t> accepted{*running};
  int full = 0;
  for (int i = 0; i < 3; ++i) {
    auto id = eng.submit(r, nullptr);
    if (id.ok()) {
      accepted.push_back(*id);
    } else {
      EXPECT_EQ(id.error_message(), "queue full");
      ++full;
    }
  }
  release.set_value();
  EXPECT_EQ(full, 2);
  EXPECT_EQ(accepted.size(), 2u);
  EXPECT_EQ(eng.metrics().requests_rejected, 3 + full);
  eng.shutdown(true);  // the accepted ones finish
  EXPECT_EQ(eng.metrics().requests_finished, static_cast<int64_t>(accepted.size()));
}

// A request's slot is free before its final event reaches its client: a client that sends
// its next request from that event (or right after it) is never refused for a full engine,
// whether the request ended by itself or was cancelled (a stop string, a gone client).
TEST_P(BatchEngineTest, AFinishedRequestsSlotIsFreeAtItsFinalEvent) {
  Model& m = test::param_model(GetParam());
  for (const bool cancel : {false, true}) {
    BatchEngine eng(m, nullptr, one_slot(0));
    Request r;
    r.prompt = {1, 2, 3};
    r.max_tokens = cancel ? 60 : 2;
    std::promise<void> started, ended;
    bool next_ok = false, seen = false;
    auto follow = [&](const TokenEvent& ev) {
      if (!std::exchange(seen, true)) started.set_value();
      if (ev.finish == FinishReason::None) return;
      Request next = r;
      next.max_tokens = 1;
      next_ok = eng.submit(next, nullptr).ok();  // from the final event itself
      ended.set_value();
    };
    auto id = eng.submit(r, follow);
    ASSERT_TRUE(id.ok()) << id.error_message();
    started.get_future().wait();
    if (cancel) eng.cancel(*id);  // ends Cancelled, as a stop string or a gone client does
    ended.get_future().wait();
    EXPECT_TRUE(next_ok) << (cancel ? "cancelled" : "finished");
    eng.shutdown(true);
    EXPECT_EQ(eng.metrics().requests_finished + eng.metrics().requests_cancelled, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, BatchEngineTest,
                         ::testing::ValuesIn(test::with_kv_types(test::all_families())),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace rw
