#include "rewind/base/thread_pool.h"

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

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  REWIND_CHECK(n_threads >= 1);
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n_items, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items <= grain) {
    fn(0, 0, n_items);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_items_ = n_items;
    job_grain_ = grain;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  int64_t b, e;
  split_range(n_items, grain, n_threads_, 0, &b, &e);
  if (b < e) fn(0, b, e);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int64_t, int64_t)>* job;
    int64_t items, grain;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      items = job_items_;
      grain = job_grain_;
    }
    int64_t b, e;
    split_range(items, grain, n_threads_, index, &b, &e);
    if (b < e) (*job)(index, b, e);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

}  // namespace rw
