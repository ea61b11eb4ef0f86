// ThreadPool: parallel_for's static split and parallel_guided's dynamic chunks each cover every
// item exactly once, with the promised boundaries, over many back-to-back jobs (the spin and
// sleep hand-offs between generations) and for every thread count; shares of late workers are
// run by whoever is free, a share's index is never in use twice at once, small jobs run on the
// caller, and a caller held up by a stalled worker runs the next jobs alone. Lanes (several
// callers on one pool's threads) take turns and give every caller its own exact results.
#include "rewind/base/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace rw {
namespace {

TEST(ThreadPool, SplitRangeIsContiguousOnGrainBoundaries) {
  for (int64_t n : {0, 1, 5, 16, 17, 100, 1000})
    for (int64_t grain : {1, 3, 16})
      for (int parts : {1, 2, 3, 7}) {
        int64_t expect_begin = 0;
        for (int i = 0; i < parts; ++i) {
          int64_t b, e;
          split_range(n, grain, parts, i, &b, &e);
          EXPECT_EQ(b, expect_begin) << n << " " << grain << " " << parts << " " << i;
          EXPECT_LE(b, e);
          if (e < n) {
            EXPECT_EQ(e % grain, 0);
          }
          expect_begin = e;
        }
        EXPECT_EQ(expect_begin, n);
      }
}

struct Coverage {
  std::vector<std::atomic<int>> hits;
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<int> threads;
  explicit Coverage(int64_t n) : hits(static_cast<size_t>(n)) {}
  void record(int t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(b, e);
    threads.push_back(t);
  }
};

TEST(ThreadPool, ParallelForCoversEachItemOnceInOneRangePerThread) {
  for (int nt : {1, 2, 3, 4}) {
    ThreadPool pool(nt);
    for (int64_t n : {1, 2, 15, 16, 33, 1000})
      for (int64_t grain : {1, 16}) {
        Coverage c(n);
        pool.parallel_for(n, grain, [&](int t, int64_t b, int64_t e) { c.record(t, b, e); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c.hits[static_cast<size_t>(i)].load(), 1) << i;
        ASSERT_LE(c.ranges.size(), static_cast<size_t>(nt));
        for (size_t j = 0; j < c.ranges.size(); ++j) {
          EXPECT_GE(c.threads[j], 0);
          EXPECT_LT(c.threads[j], nt);
          int64_t b, e;
          split_range(n, grain, n <= grain ? 1 : nt, c.threads[j], &b, &e);
          EXPECT_EQ(c.ranges[j], std::make_pair(b, e)) << "static split, thread " << c.threads[j];
        }
      }
  }
}

TEST(ThreadPool, ParallelGuidedCoversEachItemOnceInShrinkingChunks) {
  for (int nt : {1, 2, 3, 4}) {
    // No back-off: on a loaded host a long wait would make later jobs run alone, in one range.
    ThreadPool pool(nt, ThreadPool::kMinParallelWork, /*back_off=*/false);
    for (int64_t n : {1, 7, 64, 65, 1000, 4099})
      for (auto [grain, min_chunk] :
           {std::pair<int64_t, int64_t>{1, 1}, {1, 8}, {16, 16}, {16, 64}, {8, 2000}}) {
        Coverage c(n);
        pool.parallel_guided(n, grain, min_chunk,
                             [&](int t, int64_t b, int64_t e) { c.record(t, b, e); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c.hits[static_cast<size_t>(i)].load(), 1) << i;
        std::sort(c.ranges.begin(), c.ranges.end());
        int64_t prev_len = n;
        for (size_t j = 0; j < c.ranges.size(); ++j) {
          const auto [b, e] = c.ranges[j];
          EXPECT_EQ(b % grain, 0);
          if (n <= min_chunk || nt == 1) {  // one range on the caller
            EXPECT_EQ(c.ranges.size(), 1u);
            EXPECT_EQ(e - b, n);
            continue;
          }
          // Sized from the items left at b: (n - b) / (2 nt) up to a multiple of grain, at
          // least min_chunk, cut at n; so never growing along the items.
          const int64_t share = (n - b) / (2 * nt);
          const int64_t want = std::max(min_chunk, (share + grain - 1) / grain * grain);
          EXPECT_EQ(e, std::min(n, b + want)) << "n=" << n << " b=" << b;
          EXPECT_LE(e - b, prev_len);
          prev_len = e - b;
        }
        for (int t : c.threads) {
          EXPECT_GE(t, 0);
          EXPECT_LT(t, nt);
        }
      }
  }
}

TEST(ThreadPool, ParallelGuidedSpreadsAcrossThreadsWhenOneIsSlow) {
  // The caller (thread 0) stalls in its first chunk until the worker has taken every other
  // chunk (or 10 s pass): a static split would leave it half the items, so this fails there.
  // (A quick worker may take all chunks before the caller asks for one: then it runs none.)
  // With 64 items and min_chunk 1 the chunks are 16, 12, 9, 7, 5, 4, 3, 2, 2, 1, 1, 1, 1.
  ThreadPool pool(2);
  std::atomic<int> by_worker{0}, by_caller{0}, caller_chunks{0};
  pool.parallel_guided(64, 1, 1, [&](int t, int64_t b, int64_t e) {
    const int len = static_cast<int>(e - b);
    if (t != 0) {
      by_worker.fetch_add(len);
    } else {
      const bool first = caller_chunks.fetch_add(1) == 0;
      by_caller.fetch_add(len);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (first && by_worker.load() + by_caller.load() < 64 &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_LE(caller_chunks.load(), 1);
  EXPECT_LE(by_caller.load(), 16);  // at most the first chunk
  EXPECT_EQ(by_worker.load() + by_caller.load(), 64);
}

TEST(ThreadPool, BackToBackJobsOfBothKindsAndIdleGaps) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  int64_t want = 0;
  for (int rep = 0; rep < 3000; ++rep) {
    const int64_t n = 1 + rep % 37;
    want += n * (n - 1) / 2;
    auto add = [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    };
    const int64_t grain = 1 + rep % 5;
    if (rep % 2)
      pool.parallel_guided(n, grain, grain * (1 + rep % 3), add);
    else
      pool.parallel_for(n, 1 + rep % 3, add);
    // Now and then long enough for the workers to stop spinning and sleep.
    if (rep % 1000 == 999) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(sum.load(), want);
}

TEST(ThreadPool, SmallStepRunsOnTheCallerAlone) {
  ThreadPool pool(2);  // the default thresholds
  const auto caller = std::this_thread::get_id();
  auto jobs_off_caller = [&] {
    std::atomic<int> off{0};
    for (int rep = 0; rep < 200; ++rep)
      pool.parallel_for(
          64, 1,
          [&](int, int64_t, int64_t) {
            if (std::this_thread::get_id() != caller) off.fetch_add(1);
            std::this_thread::sleep_for(std::chrono::microseconds(20));
          },
          ThreadPool::kMinParallelWork);
    return off.load();
  };
  {
    const ThreadPool::StepScope step(
        &pool, ThreadPool::kStepWorkFactor * ThreadPool::kMinParallelWork - 1);
    EXPECT_EQ(jobs_off_caller(), 0);
    EXPECT_EQ(pool.steps_alone(), 1);
    const ThreadPool::StepScope nested(&pool, 0);  // already alone: not counted again
    EXPECT_EQ(pool.steps_alone(), 1);
  }
  {
    const ThreadPool::StepScope step(&pool,
                                     ThreadPool::kStepWorkFactor * ThreadPool::kMinParallelWork);
    EXPECT_EQ(pool.steps_alone(), 1);  // shared as usual (which thread runs what varies)
  }
  ThreadPool every_job_shared(2, 0);  // tests' pools: never alone
  const ThreadPool::StepScope step(&every_job_shared, 0);
  EXPECT_EQ(every_job_shared.steps_alone(), 0);
  EXPECT_EQ(pool.steps_alone(), 1);
}

TEST(ThreadPool, GuidedJobRightAfterStaticJobsRunsEachItemOnce) {
  // A static job's exhausted cursor (its share count) is a valid guided position: a worker
  // that read it just before the next job's fields changed must not claim items with it.
  ThreadPool pool(3, 0);
  std::atomic<int64_t> sum{0};
  int64_t want = 0;
  auto add = [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum.fetch_add(i + 1);
  };
  for (int rep = 0; rep < 200000; ++rep) {
    const int64_t n = rep % 2 ? 24 : 6;
    want += n * (n + 1) / 2;
    if (rep % 2)
      pool.parallel_guided(n, 1, 1, add);
    else
      pool.parallel_for(n, 1, add);
  }
  EXPECT_EQ(sum.load(), want);
}

// Pins the calling thread (and the threads it starts afterwards) to its current CPU while alive,
// so that the pool's threads take turns on one core: workers are late for most jobs, as on a
// machine where another process holds the other core.
class OneCpu {
 public:
  OneCpu() {
    pinned_ = sched_getaffinity(0, sizeof(old_), &old_) == 0;
    if (!pinned_) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    const int cpu = sched_getcpu();
    CPU_SET(cpu >= 0 ? cpu : 0, &one);
    pinned_ = sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~OneCpu() {
    if (pinned_) sched_setaffinity(0, sizeof(old_), &old_);
  }

 private:
  cpu_set_t old_;
  bool pinned_ = false;
};

// y[i] = a chain of float operations on i: per-item outputs, as the kernels write them.
float item_value(int64_t i) {
  float v = static_cast<float>(i) * 0.37f + 1.0f;
  for (int k = 0; k < 20; ++k) v = std::sqrt(v * 1.618f + static_cast<float>(k));
  return v;
}

TEST(ThreadPool, ResultsAreTheSameForOneTwoAndThreeThreadsWhenWorkersAreLate) {
  const OneCpu pin;  // workers come late or not at all; the caller runs what they leave
  std::vector<std::vector<float>> outs;
  for (int nt : {1, 2, 3}) {
    ThreadPool pool(nt);
    std::vector<float> y;
    for (int rep = 0; rep < 400; ++rep) {
      const int64_t n = 1 + (rep * 7919) % 301;
      std::vector<float> part(static_cast<size_t>(n), NAN);
      auto fill = [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) part[static_cast<size_t>(i)] = item_value(i + rep);
      };
      if (rep % 2)
        pool.parallel_guided(n, 1 + rep % 3, (1 + rep % 3) * (1 + rep % 4), fill);
      else
        pool.parallel_for(n, 1 + rep % 5, fill);
      y.insert(y.end(), part.begin(), part.end());
    }
    outs.push_back(std::move(y));
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    ASSERT_EQ(outs[i].size(), outs[0].size());
    EXPECT_EQ(std::memcmp(outs[i].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0)
        << "threads " << i + 1;
  }
}

TEST(ThreadPool, ShareIndexIsNeverInUseTwiceAtOnce) {
  // parallel_for's index names the share, whichever thread runs it (callers may keep scratch
  // per index): each call's range is its share's, and no index runs twice at the same time,
  // also when one thread runs a late worker's share.
  for (int nt : {2, 3, 4}) {
    ThreadPool pool(nt);
    std::vector<std::atomic<int>> busy(static_cast<size_t>(nt));
    std::atomic<int> clashes{0}, wrong_range{0};
    std::mt19937 rng(static_cast<unsigned>(nt));
    for (int rep = 0; rep < 300; ++rep) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 200), grain = 1 + rng() % 4;
      const int sleepy = static_cast<int>(rng() % static_cast<unsigned>(nt));
      pool.parallel_for(n, grain, [&](int t, int64_t b, int64_t e) {
        if (busy[static_cast<size_t>(t)].exchange(1) != 0) clashes.fetch_add(1);
        int64_t sb, se;
        split_range(n, grain, n <= grain ? 1 : nt, t, &sb, &se);
        if (sb != b || se != e) wrong_range.fetch_add(1);
        if (t == sleepy && rep % 10 == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(300));
        busy[static_cast<size_t>(t)].store(0);
      });
    }
    EXPECT_EQ(clashes.load(), 0) << nt;
    EXPECT_EQ(wrong_range.load(), 0) << nt;
  }
}

TEST(ThreadPool, SmallWorkRunsOnTheCaller) {
  ThreadPool pool(2);
  const std::thread::id me = std::this_thread::get_id();
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> calls;
  bool elsewhere = false;
  auto record = [&](int t, int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    calls.emplace_back(b, e);
    elsewhere = elsewhere || t != 0 || std::this_thread::get_id() != me;
  };
  // Below the threshold: guided in one range, static share by share in order, all on the
  // caller.
  const int64_t small = ThreadPool::kMinParallelWork - 1;
  pool.parallel_guided(100, 1, 1, record, small);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{100}));
  calls.clear();
  std::vector<int> order;
  pool.parallel_for(
      100, 1,
      [&](int t, int64_t b, int64_t e) {
        order.push_back(t);
        elsewhere = elsewhere || std::this_thread::get_id() != me;
        calls.emplace_back(b, e);
      },
      small);
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{50}));
  EXPECT_EQ(calls[1], std::make_pair(int64_t{50}, int64_t{100}));
  EXPECT_FALSE(elsewhere);
  // At the threshold (or with no hint) the job is shared out; the same calls, whoever runs them.
  for (int64_t work : {ThreadPool::kMinParallelWork, int64_t{-1}}) {
    calls.clear();
    pool.parallel_for(100, 1, record, work);
    std::sort(calls.begin(), calls.end());
    ASSERT_EQ(calls.size(), 2u) << work;
    EXPECT_EQ(calls[0], std::make_pair(int64_t{0}, int64_t{50}));
    EXPECT_EQ(calls[1], std::make_pair(int64_t{50}, int64_t{100}));
  }
}

TEST(ThreadPool, WorkerStalledInItsShareMakesTheCallerRunTheNextJobsAlone) {
  // The worker takes share 1 (the caller waits in share 0 until it has) and stalls there for
  // 300 ms, as if descheduled: the job still ends with every item done once, and the jobs that
  // follow run on the caller alone (guided: in one range) for at least as long as it waited.
  ThreadPool pool(2);
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<bool> worker_in{false};
  std::vector<std::atomic<int>> hits(64);
  pool.parallel_for(64, 1, [&](int t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    if (std::this_thread::get_id() != me) {
      worker_in.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    } else if (t == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!worker_in.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  ASSERT_TRUE(worker_in.load()) << "the worker never took its share";
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  int calls = 0;
  bool elsewhere = false;
  pool.parallel_guided(64, 1, 1, [&](int, int64_t b, int64_t e) {
    ++calls;
    elsewhere = elsewhere || std::this_thread::get_id() != me || b != 0 || e != 64;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(elsewhere);
  std::vector<int> shares;
  pool.parallel_for(64, 1, [&](int t, int64_t, int64_t) {
    shares.push_back(t);
    elsewhere = elsewhere || std::this_thread::get_id() != me;
  });
  EXPECT_EQ(shares, (std::vector<int>{0, 1}));
  EXPECT_FALSE(elsewhere);
}

TEST(ThreadPool, BackToBackJobsWithStallsCoverEachItemOnce) {
  // Parts that now and then take long (a thread descheduled in the middle of one), on one core
  // and on all: every job covers its items once, never touching an earlier or later job's.
  for (bool one_cpu : {true, false}) {
    std::unique_ptr<OneCpu> pin;
    if (one_cpu) pin = std::make_unique<OneCpu>();
    ThreadPool pool(3);
    std::mt19937 rng(one_cpu ? 1u : 2u);
    for (int rep = 0; rep < 500; ++rep) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 400);
      const int64_t stall_at = static_cast<int64_t>(rng() % static_cast<unsigned>(4 * n));
      Coverage c(n);
      auto fn = [&](int t, int64_t b, int64_t e) {
        if (stall_at >= b && stall_at < e)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        c.record(t, b, e);
      };
      if (rep % 2)
        pool.parallel_guided(n, 1, 1 + rep % 7, fn);
      else
        pool.parallel_for(n, 1 + rep % 3, fn);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(c.hits[static_cast<size_t>(i)].load(), 1) << "rep " << rep << " item " << i;
    }
  }
}

// StepChooser, fed simulated step times: ns per unit of work for a shared and an alone step,
// and the caller's waiting fraction in shared steps. Returns the steps that ran alone.
struct SimHost {
  double shared = 1.0, alone = 1.8, wait = 0.05;
};
int64_t run_steps(StepChooser& ch, const SimHost& h, int steps, int64_t work = 1 << 24) {
  int64_t alone_steps = 0;
  for (int i = 0; i < steps; ++i) {
    const bool a = ch.alone(work);
    alone_steps += a;
    const double ns = (a ? h.alone : h.shared) * static_cast<double>(work);
    ch.record(work, a, static_cast<int64_t>(ns), a ? 0 : static_cast<int64_t>(h.wait * ns));
  }
  return alone_steps;
}

TEST(StepChooser, IdleHostKeepsSharingWithoutTrials) {
  StepChooser ch;
  EXPECT_EQ(run_steps(ch, {1.0, 1.8, 0.05}, 3000), 0);
  EXPECT_EQ(ch.switches(), 0);
}

TEST(StepChooser, CoreTakenByAnotherProcessRunsAloneAndRetriesSharingRarely) {
  StepChooser ch;
  const SimHost busy{1.3, 1.0, 0.4};
  EXPECT_EQ(run_steps(ch, busy, StepChooser::kPeriodMin), 0);  // shared until judged
  const int64_t alone = run_steps(ch, busy, 3000);
  EXPECT_EQ(ch.switches(), 1);
  // Sharing is re-tried kTrial steps at a time, ever more rarely.
  EXPECT_GT(alone, 3000 - 20 * StepChooser::kTrial);
  EXPECT_LT(alone, 3000);
}

TEST(StepChooser, SharesAgainWhenTheOtherProcessStops) {
  StepChooser ch;
  run_steps(ch, {1.3, 1.0, 0.4}, 3000);
  ASSERT_EQ(ch.switches(), 1);  // running alone
  run_steps(ch, {1.0, 1.8, 0.05}, StepChooser::kPeriodMax + StepChooser::kTrial);
  EXPECT_EQ(ch.switches(), 2);
  EXPECT_EQ(run_steps(ch, {1.0, 1.8, 0.05}, 2000), 0);
}

TEST(StepChooser, AloneTrialThatLosesIsRetriedEverMoreRarely) {
  StepChooser ch;
  // Long waits, yet sharing is still faster (uneven shares on an idle host).
  const int64_t alone = run_steps(ch, {1.0, 1.5, 0.3}, 3000);
  EXPECT_EQ(ch.switches(), 0);
  EXPECT_GT(alone, 0);
  EXPECT_LE(alone, 10 * StepChooser::kTrial);  // periods 16, 32, .., 512, then every 512
}

TEST(StepChooser, StepsOfDifferentSizesAreJudgedApart) {
  StepChooser ch;
  const int64_t decode = 1 << 22, prefill = int64_t{1} << 32;
  int decode_alone = 0;
  for (int i = 0; i < 2000; ++i) {  // small steps lose to a busy core, large ones do not
    const bool a = ch.alone(decode);
    decode_alone += a;
    const double ns = (a ? 1.0 : 1.4) * decode;
    ch.record(decode, a, static_cast<int64_t>(ns), a ? 0 : static_cast<int64_t>(0.5 * ns));
    const bool b = ch.alone(prefill);
    const double ps = (b ? 1.9 : 1.0) * static_cast<double>(prefill);
    ch.record(prefill, b, static_cast<int64_t>(ps), b ? 0 : static_cast<int64_t>(0.02 * ps));
  }
  EXPECT_GT(decode_alone, 2000 - 20 * StepChooser::kTrial);
  EXPECT_EQ(ch.switches(), 1);
  EXPECT_FALSE(ch.alone(prefill));
}

TEST(ThreadPool, StepsAboveTheThresholdAreTimedForTheChooser) {
  ThreadPool pool(2);
  ThreadPool tests_pool(2, 0);
  const int64_t big = ThreadPool::kStepWorkFactor * ThreadPool::kMinParallelWork;
  for (int i = 0; i < 50; ++i) {
    const ThreadPool::StepScope step(&pool, big);
    pool.parallel_for(
        64, 1, [](int, int64_t, int64_t) {}, big);
    const ThreadPool::StepScope tests_step(&tests_pool, big);
  }
  // Nothing to wait for in these steps: sharing kept, never tried alone.
  EXPECT_EQ(pool.steps_alone(), 0);
  EXPECT_EQ(pool.chooser().switches(), 0);
  EXPECT_EQ(tests_pool.steps_alone(), 0);
}

TEST(ThreadPool, LanesTakeTurnsOnTheSameThreadsAndGiveEachCallerItsResults) {
  // Three callers at once on one pool's threads (three lanes, as the engines of three served
  // models): every job covers its items once with the values one thread gives, and no more
  // than n_threads threads ever run job parts at once. The pool is destroyed while its lanes
  // still work: they keep the threads.
  for (int nt : {2, 3}) {
    auto pool = std::make_unique<ThreadPool>(nt, 0, /*back_off=*/false);
    std::unique_ptr<ThreadPool> lane0 = pool->lane(), lane1 = pool->lane(), lane2 = pool->lane();
    EXPECT_EQ(lane1->n_threads(), nt);
    std::atomic<int> running{0}, most{0}, wrong{0}, jobs{0};
    auto caller = [&](ThreadPool* p, unsigned seed) {
      std::mt19937 rng(seed);
      for (int rep = 0; rep < 300; ++rep) {
        const int64_t n = 8 + static_cast<int64_t>(rng() % 250);  // above every min_chunk here
        const int64_t base = static_cast<int64_t>(seed) * 100000 + rep;
        std::vector<float> out(static_cast<size_t>(n), NAN);
        auto fill = [&](int, int64_t b, int64_t e) {
          const int now = running.fetch_add(1) + 1;
          for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
          }
          for (int64_t i = b; i < e; ++i) {
            if (!std::isnan(out[static_cast<size_t>(i)])) wrong.fetch_add(1);
            out[static_cast<size_t>(i)] = item_value(i + base);
          }
          running.fetch_sub(1);
        };
        if (rep % 2)
          p->parallel_guided(n, 1, 1 + rep % 4, fill);
        else
          p->parallel_for(n, 1 + rep % 3, fill);
        for (int64_t i = 0; i < n; ++i) {
          const float want = item_value(i + base);
          if (std::memcmp(&out[static_cast<size_t>(i)], &want, sizeof want) != 0)
            wrong.fetch_add(1);
        }
        jobs.fetch_add(1);
        if (seed == 3 && rep == 150) pool.reset();  // mid-run
      }
    };
    std::thread t1(caller, lane1.get(), 1u), t2(caller, lane2.get(), 2u);
    caller(lane0.get(), 3u);
    t1.join();
    t2.join();
    EXPECT_EQ(pool, nullptr);
    EXPECT_EQ(jobs.load(), 900);
    EXPECT_EQ(wrong.load(), 0) << nt;
    EXPECT_LE(most.load(), nt) << "more threads in jobs at once than the pool has";
    EXPECT_GE(most.load(), 1);
  }
}

TEST(ThreadPool, LanesHaveTheirOwnStepScope) {
  ThreadPool pool(2, ThreadPool::kMinParallelWork, /*back_off=*/false);
  std::unique_ptr<ThreadPool> lane = pool.lane();
  {
    const ThreadPool::StepScope small(lane.get(), 1);  // a tiny step: that lane runs alone
    EXPECT_EQ(lane->steps_alone(), 1);
    EXPECT_EQ(pool.steps_alone(), 0);
    std::atomic<int> workers_ran{0};
    // The other caller still shares its jobs: a part a worker runs has thread_index > 0.
    for (int rep = 0; rep < 200 && workers_ran.load() == 0; ++rep)
      pool.parallel_guided(
          64, 1, 1,
          [&](int t, int64_t, int64_t) {
            if (t > 0) workers_ran.fetch_add(1);
            std::this_thread::sleep_for(std::chrono::microseconds(20));
          },
          /*work=*/int64_t{1} << 30);
    EXPECT_GT(workers_ran.load(), 0);
  }
  EXPECT_EQ(pool.steps_alone(), 0);
}

}  // namespace
}  // namespace rw
