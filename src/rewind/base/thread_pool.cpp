#include "rewind/base/thread_pool.h"

#include <algorithm>

#include "rewind/base/check.h"

namespace rw {

void split_range(int64_t n_items, int64_t grain, int parts, int index, int64_t* begin,
                 int64_t* end) {
  REWIND_CHECK(grain >= 1 && parts >= 1 && index >= 0 && index < parts);
  const int64_t n_grains = (n_items + grain - 1) / grain;
  const int64_t per = n_grains / parts;
  const int64_t extra = n_grains % parts;
  const int64_t g0 = index * per + (index < extra ? index : extra);
  const int64_t g1 = g0 + per + (index < extra ? 1 : 0);
  *begin = std::min(n_items, g0 * grain);
  *end = std::min(n_items, g1 * grain);
}

namespace {
constexpr int kSpinIters = 20000;  // with a pause each: on the order of a millisecond
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  REWIND_CHECK(n_threads >= 1);
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n_items, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  REWIND_CHECK(grain >= 1);
  run(n_items, grain, grain, Split::kStatic, fn);
}

void ThreadPool::parallel_guided(int64_t n_items, int64_t grain, int64_t min_chunk,
                                 const std::function<void(int, int64_t, int64_t)>& fn) {
  REWIND_CHECK(grain >= 1 && min_chunk >= grain && min_chunk % grain == 0);
  run(n_items, grain, min_chunk, Split::kGuided, fn);
}

// Thread `index`'s part of the current job.
void ThreadPool::run_share(int index) {
  if (job_split_ == Split::kStatic) {
    int64_t b, e;
    split_range(job_items_, job_grain_, n_threads_, index, &b, &e);
    if (b < e) (*job_)(index, b, e);
    return;
  }
  // Guided: the chunk at the cursor, sized from what is left there, taken by moving the cursor.
  int64_t b = next_chunk_.load(std::memory_order_relaxed);
  while (b < job_items_) {
    const int64_t share = (job_items_ - b) / (2 * n_threads_);
    const int64_t len = std::max(job_min_, (share + job_grain_ - 1) / job_grain_ * job_grain_);
    const int64_t e = std::min(job_items_, b + len);
    if (next_chunk_.compare_exchange_weak(b, e, std::memory_order_relaxed)) {
      (*job_)(index, b, e);
      b = next_chunk_.load(std::memory_order_relaxed);
    }  // else b now holds where another thread moved the cursor
  }
}

void ThreadPool::run(int64_t n_items, int64_t grain, int64_t min_chunk, Split split,
                     const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items <= min_chunk) {  // on this thread, in one range
    fn(0, 0, n_items);
    return;
  }
  job_ = &fn;
  job_items_ = n_items;
  job_grain_ = grain;
  job_min_ = min_chunk;
  job_split_ = split;
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Under the lock so that a worker deciding to sleep cannot miss the new generation.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_start_.notify_all();
  run_share(0);
  for (int i = 0; i < kSpinIters && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinIters && generation_.load(std::memory_order_acquire) == seen; ++i)
      cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_start_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_share(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
  }
}

}  // namespace rw
