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
  run(n_items, grain, false, fn);
}

void ThreadPool::parallel_chunks(int64_t n_items, int64_t chunk,
                                 const std::function<void(int, int64_t, int64_t)>& fn) {
  REWIND_CHECK(chunk >= 1);
  run(n_items, chunk, true, fn);
}

// Thread `index`'s part of the current job.
void ThreadPool::run_share(int index) {
  if (!job_dynamic_) {
    int64_t b, e;
    split_range(job_items_, job_grain_, n_threads_, index, &b, &e);
    if (b < e) (*job_)(index, b, e);
    return;
  }
  for (;;) {
    const int64_t b = next_chunk_.fetch_add(1, std::memory_order_relaxed) * job_grain_;
    if (b >= job_items_) return;
    (*job_)(index, b, std::min(job_items_, b + job_grain_));
  }
}

void ThreadPool::run(int64_t n_items, int64_t grain, bool dynamic,
                     const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items <= grain) {  // on this thread: one range, or every chunk
    const int64_t step = dynamic ? grain : n_items;
    for (int64_t b = 0; b < n_items; b += step) fn(0, b, std::min(n_items, b + step));
    return;
  }
  job_ = &fn;
  job_items_ = n_items;
  job_grain_ = grain;
  job_dynamic_ = dynamic;
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
