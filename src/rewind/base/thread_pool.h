// A fixed pool of worker threads for data-parallel loops. Threads split *outputs*, never
// reductions (docs/ARCHITECTURE.md, "bit-exact"): parallel_for hands each worker a disjoint
// range of items, so results never depend on the thread count.
//
// Thread-safety: one caller at a time (the engine thread). parallel_for blocks until done.
// Waiting: workers and the caller spin briefly (about a millisecond) before sleeping on a
// condition variable, so back-to-back calls (a decode step is dozens of matmuls) cost about a
// microsecond each instead of a futex round trip; idle workers then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rw {

class ThreadPool {
 public:
  // n_threads >= 1; the calling thread is one of them (n_threads - 1 workers are spawned).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread_index, begin, end) on a static, contiguous split of [0, n_items) into
  // n_threads parts (granularity `grain`: every boundary but the last is a multiple of it).
  void parallel_for(int64_t n_items, int64_t grain,
                    const std::function<void(int, int64_t, int64_t)>& fn);

  // Calls fn(thread_index, begin, end) on consecutive chunks, each taken by whichever thread is
  // free next: for loops whose threads run at uneven speeds (a shared machine, where one core
  // is often slower than the other for a while), which a static split leaves waiting for the
  // slowest: decode's memory-bound matmuls, prefill's matmuls and per-row and per-head passes.
  // The chunks shrink as the work runs out ("guided"): each is the items left / (2 *
  // n_threads), rounded up to a multiple of grain, and at least min_chunk items (a multiple of
  // grain; the last chunk may be shorter). Big chunks first keep the count of chunk starts
  // low; small ones last keep the threads' finishing times close. Which thread runs a chunk,
  // and where the chunks begin, vary from run to run, so fn's results must not depend on them
  // (outputs per item, as everywhere here).
  void parallel_guided(int64_t n_items, int64_t grain, int64_t min_chunk,
                       const std::function<void(int, int64_t, int64_t)>& fn);

 private:
  void worker(int index);
  enum class Split { kStatic, kGuided };
  void run(int64_t n_items, int64_t grain, int64_t min_chunk, Split split,
           const std::function<void(int, int64_t, int64_t)>& fn);
  void run_share(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  // The job: written by the caller before generation_ is bumped (release), read by workers
  // after they see the new generation (acquire).
  const std::function<void(int, int64_t, int64_t)>* job_ = nullptr;
  int64_t job_items_ = 0;
  int64_t job_grain_ = 1;  // the split's granularity
  int64_t job_min_ = 1;    // guided: the smallest chunk
  Split job_split_ = Split::kStatic;
  std::atomic<int64_t> next_chunk_{0};  // guided: the next chunk's first item
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

// Split [0, n_items) into `parts` contiguous ranges whose inner boundaries are multiples of
// grain. Returns the range of part `index`.
void split_range(int64_t n_items, int64_t grain, int parts, int index, int64_t* begin,
                 int64_t* end);

}  // namespace rw
