// ThreadPool: parallel_for's static split and parallel_guided's dynamic chunks each cover every
// item exactly once, with the promised boundaries, over many back-to-back jobs (the spin and
// sleep hand-offs between generations) and for every thread count.
#include "rewind/base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
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
    ThreadPool pool(nt);
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

}  // namespace
}  // namespace rw
