#include "rewind/base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "rewind/base/check.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

using Clock = std::chrono::steady_clock;

// Waiting (measured in docs/PERFORMANCE.md, "Threads on a shared machine"): a worker pauses
// for kSpinNs, then yields its core until kYieldNs, then sleeps; the caller pauses for kSpinNs,
// then sleeps. A caller that waited longer than kLongWaitNs, and longer than its own share took,
// for a part a worker had claimed runs jobs alone for a while: kSoloMinNs .. kSoloMaxNs.
constexpr int64_t kSpinNs = 20'000;
constexpr int64_t kYieldNs = 200'000;
constexpr int64_t kLongWaitNs = 200'000;
constexpr int64_t kSoloMinNs = 1'000'000;
constexpr int64_t kSoloMaxNs = 64'000'000;
// A lane waiting for its turn pauses this long, then sleeps: it must not spin on a core the
// running job's threads need.
constexpr int64_t kTurnSpinNs = 2'000;

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

inline void yield_core() {
#if defined(__linux__)
  sched_yield();
#else
  std::this_thread::yield();
#endif
}

// Sleeps while *a == expected (or until woken; callers re-check).
inline void futex_wait(std::atomic<uint32_t>* a, uint32_t expected) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr,
          0);
#else
  a->wait(expected);
#endif
}

inline void futex_wake_all(std::atomic<uint32_t>* a) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
#else
  a->notify_all();
#endif
}

// Spins until ready() (pausing for spin_ns, then yielding the core until yield_ns), then
// returns false so the caller can sleep; true as soon as ready().
template <class Ready>
bool spin_until(Ready ready, int64_t spin_ns, int64_t yield_ns) {
  if (ready()) return true;
  if (yield_ns <= 0 && spin_ns <= 0) return false;
  const Clock::time_point t0 = Clock::now();
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    if (ns >= yield_ns && ns >= spin_ns) return ready();
    if (ns >= spin_ns) yield_core();
  }
}

constexpr uint64_t kGenShift = 32;
constexpr uint64_t kLowMask = (uint64_t{1} << kGenShift) - 1;
// A cursor past every job's end (jobs have fewer than 2^31 items): no part can be claimed.
constexpr uint64_t kClosed = kLowMask;

}  // namespace

// The threads and the job slot. A job's fields are written by the caller that holds the turn;
// a late worker may read them while the next job's caller writes, hence the atomics: it uses
// what it read only once its claim on the job succeeded (the claim's acquire orders them after
// the caller's writes, and a job cannot end while a claim on it is possible). The caller closes
// the cursor under the new generation before it writes a job's fields, so a claim made with
// fields read from a newer job fails.
struct ThreadPool::Core {
  explicit Core(int n) : n_threads(n) {
    for (int i = 1; i < n; ++i) workers.emplace_back([this, i] { worker(i); });
  }
  ~Core() {
    stop.store(true);
    generation.fetch_add(1);
    futex_wake_all(&generation);
    for (auto& t : workers) t.join();
  }
  void worker(int index);
  // Claims and runs parts of job `gen` until none is left (or a newer job replaced it).
  void help(uint32_t gen, int index);
  // The turn: one shared job at a time across the pool and its lanes, first come first served.
  void lock();
  void unlock();

  const int n_threads;
  std::vector<std::thread> workers;
  std::atomic<const Fn*> job_fn{nullptr};
  std::atomic<int64_t> job_items{0};
  std::atomic<int64_t> job_grain{1};  // the split's granularity
  std::atomic<int64_t> job_min{1};    // guided: the smallest chunk
  std::atomic<Split> job_split{Split::kStatic};
  // generation << 32 | the next share (static) or the next item (guided): one word, so a claim
  // is one compare-exchange that fails once the job it read has been replaced.
  std::atomic<uint64_t> cursor{0};
  std::atomic<uint32_t> generation{0};  // the current job's number; sleeping workers wait on it
  std::atomic<uint32_t> done{0};        // items of the current job finished; the caller waits on it
  std::atomic<int> sleepers{0};         // workers asleep (or about to be) on generation
  std::atomic<int> caller_asleep{0};    // the caller asleep (or about to be) on done
  std::atomic<bool> stop{false};
  // A ticket lock: a caller takes a ticket and runs its job when `serving` reaches it.
  std::atomic<uint32_t> next_ticket{0};
  std::atomic<uint32_t> serving{0};
  std::atomic<int> turn_waiters{0};  // callers asleep (or about to be) on serving
};

ThreadPool::ThreadPool(int n_threads, int64_t min_parallel_work, bool back_off)
    : ThreadPool(std::make_shared<Core>(n_threads), min_parallel_work, back_off) {
  REWIND_CHECK(n_threads >= 1);
}

ThreadPool::ThreadPool(std::shared_ptr<Core> core, int64_t min_parallel_work, bool back_off)
    : core_(std::move(core)),
      n_threads_(core_->n_threads),
      min_parallel_work_(min_parallel_work),
      back_off_(back_off) {
  REWIND_CHECK(n_threads_ >= 1 && min_parallel_work >= 0);
}

ThreadPool::~ThreadPool() = default;

std::unique_ptr<ThreadPool> ThreadPool::lane() const {
  return std::unique_ptr<ThreadPool>(new ThreadPool(core_, min_parallel_work_, back_off_));
}

void ThreadPool::Core::lock() {
  const uint32_t ticket = next_ticket.fetch_add(1);
  auto mine = [&] { return serving.load(std::memory_order_acquire) == ticket; };
  if (spin_until(mine, kTurnSpinNs, 0)) return;
  turn_waiters.fetch_add(1);
  for (uint32_t s; (s = serving.load()) != ticket;) futex_wait(&serving, s);
  turn_waiters.fetch_sub(1);
}

void ThreadPool::Core::unlock() {
  serving.fetch_add(1);
  if (turn_waiters.load() > 0) futex_wake_all(&serving);
}

int StepChooser::group_of(int64_t work) {
  return work <= 1 ? 0 : 63 - __builtin_clzll(static_cast<uint64_t>(work));
}

bool StepChooser::alone(int64_t work) {
  const Group& g = groups_[group_of(work)];
  return g.trial > 0 ? !g.alone : g.alone;
}

void StepChooser::record(int64_t work, bool alone, int64_t ns, int64_t wait_ns) {
  Group& g = groups_[group_of(work)];
  const double w = static_cast<double>(std::max<int64_t>(work, 1));
  const double t = static_cast<double>(std::max<int64_t>(ns, 1));
  if (alone) ++chosen_alone_;
  if (g.trial > 0 && alone != g.alone) {  // a step of the other mode's trial
    g.trial_ns += t;
    g.trial_work += w;
    if (--g.trial > 0) return;
    const double tried = g.trial_ns / g.trial_work;
    if (tried < g.kept * (1 - kMargin)) {  // the other mode is faster: keep it
      g.alone = !g.alone;
      g.kept = tried;
      g.wait = 0;
      g.period = kPeriodMin;
      ++switches_;
    } else {
      g.period = std::min(2 * g.period, kPeriodMax);
    }
    g.since = 0;
    g.trial_ns = g.trial_work = 0;
    return;
  }
  const bool first = g.kept == 0;
  g.kept = first ? t / w : g.kept + (t / w - g.kept) / 8;
  if (!alone) {
    const double frac = static_cast<double>(wait_ns) / t;
    g.wait = first ? frac : g.wait + (frac - g.wait) / 8;
  }
  // Try the other mode: sharing again after a period alone; running alone after a period of
  // shared steps whose caller waited long for workers (a core taken by another process).
  if (++g.since >= (g.alone ? g.period : std::max(kTrial, g.period)) &&
      (g.alone || g.wait > kWaitTrigger))
    g.trial = kTrial;
}

ThreadPool::StepScope::StepScope(ThreadPool* pool, int64_t work) {
  if (!pool || pool->n_threads_ == 1 || pool->in_step_) return;
  pool_ = pool;
  pool->in_step_ = true;
  work_ = work;
  if (work < kStepWorkFactor * pool->min_parallel_work_) {
    alone_ = true;
  } else if (pool->back_off_ && pool->min_parallel_work_ > 0) {  // not tests' pools
    timed_ = true;
    alone_ = pool->chooser_.alone(work);
  }
  if (alone_) {
    pool->step_alone_ = true;
    ++pool->steps_alone_;
  }
  if (timed_) {
    pool->step_wait_ns_ = 0;
    t0_ = Clock::now();
  }
}

ThreadPool::StepScope::~StepScope() {
  if (!pool_) return;
  if (timed_) {
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    pool_->chooser_.record(work_, alone_, ns, pool_->step_wait_ns_);
  }
  pool_->step_alone_ = false;
  pool_->in_step_ = false;
}

void ThreadPool::parallel_for(int64_t n_items, int64_t grain, const Fn& fn, int64_t work) {
  REWIND_CHECK(grain >= 1);
  run(n_items, grain, grain, Split::kStatic, work, fn);
}

void ThreadPool::parallel_guided(int64_t n_items, int64_t grain, int64_t min_chunk, const Fn& fn,
                                 int64_t work) {
  REWIND_CHECK(grain >= 1 && min_chunk >= grain && min_chunk % grain == 0);
  run(n_items, grain, min_chunk, Split::kGuided, work, fn);
}

void ThreadPool::run_alone(int64_t n_items, int64_t grain, Split split, const Fn& fn) const {
  if (split == Split::kGuided) {
    fn(0, 0, n_items);
    return;
  }
  for (int s = 0; s < n_threads_; ++s) {  // each share one call, with its index
    int64_t b, e;
    split_range(n_items, grain, n_threads_, s, &b, &e);
    if (b < e) fn(s, b, e);
  }
}

void ThreadPool::Core::help(uint32_t gen, int index) {
  for (;;) {
    uint64_t w = cursor.load(std::memory_order_acquire);
    if ((w >> kGenShift) != gen) return;  // a newer job replaced it
    const int64_t c = static_cast<int64_t>(w & kLowMask);
    const int64_t n = job_items.load(std::memory_order_relaxed);
    const int64_t grain = job_grain.load(std::memory_order_relaxed);
    const bool guided = job_split.load(std::memory_order_relaxed) == Split::kGuided;
    int64_t next;
    if (!guided) {
      if (c >= n_threads) return;
      next = c + 1;
    } else {
      if (c >= n) return;
      // The chunk at the cursor, sized from what is left there.
      const int64_t share = (n - c) / (2 * n_threads);
      const int64_t len =
          std::max(job_min.load(std::memory_order_relaxed), (share + grain - 1) / grain * grain);
      next = std::min(n, c + len);
    }
    // Pairs with run()'s fence: fields read from a newer job make this claim fail.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!cursor.compare_exchange_weak(w, (w & ~kLowMask) | static_cast<uint64_t>(next),
                                      std::memory_order_acq_rel, std::memory_order_relaxed))
      continue;
    // Claimed: the job cannot end before this part is counted done, so what was read is its.
    int64_t b = c, e = next;
    int idx = index;
    if (!guided) {
      split_range(n, grain, n_threads, static_cast<int>(c), &b, &e);
      idx = static_cast<int>(c);
    }
    if (b >= e) continue;
    (*job_fn.load(std::memory_order_relaxed))(idx, b, e);
    const uint32_t d = done.fetch_add(static_cast<uint32_t>(e - b)) + static_cast<uint32_t>(e - b);
    if (d == static_cast<uint32_t>(n) && caller_asleep.load() != 0) futex_wake_all(&done);
  }
}

void ThreadPool::run(int64_t n_items, int64_t grain, int64_t min_chunk, Split split, int64_t work,
                     const Fn& fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items <= min_chunk) {  // on this thread, in one range
    fn(0, 0, n_items);
    return;
  }
  if (step_alone_ || (work >= 0 && work < min_parallel_work_)) {
    run_alone(n_items, grain, split, fn);
    return;
  }
  if (solo_ns_ > 0) {
    const Clock::time_point now = Clock::now();
    if (now < solo_until_) {  // backing off: counts as waiting, for the step chooser
      run_alone(n_items, grain, split, fn);
      if (in_step_)
        step_wait_ns_ +=
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - now).count();
      return;
    }
  }
  REWIND_CHECK_MSG(n_items < (int64_t{1} << 31), "thread pool: too many items for one job");
  Core& c = *core_;
  c.lock();
  struct Turn {
    Core* c;
    ~Turn() { c->unlock(); }  // also when fn throws on this thread
  } turn{&c};
  const uint32_t gen = c.generation.load(std::memory_order_relaxed) + 1;
  // Close the cursor under the new generation before the job's fields change: a late thread
  // that read the old job's exhausted cursor and then this job's fields (a guided job's items
  // after a static job's shares) would otherwise claim a part under the old generation.
  c.cursor.store(static_cast<uint64_t>(gen) << kGenShift | kClosed, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  c.job_fn.store(&fn, std::memory_order_relaxed);
  c.job_items.store(n_items, std::memory_order_relaxed);
  c.job_grain.store(grain, std::memory_order_relaxed);
  c.job_min.store(min_chunk, std::memory_order_relaxed);
  c.job_split.store(split, std::memory_order_relaxed);
  c.done.store(0, std::memory_order_relaxed);
  c.cursor.store(static_cast<uint64_t>(gen) << kGenShift, std::memory_order_release);
  c.generation.store(gen);
  if (c.sleepers.load() > 0) futex_wake_all(&c.generation);
  const Clock::time_point t0 = Clock::now();
  c.help(gen, 0);
  const uint32_t n = static_cast<uint32_t>(n_items);
  auto finished = [&] { return c.done.load(std::memory_order_acquire) == n; };
  if (finished()) return;
  const Clock::time_point t1 = Clock::now();  // the caller's parts are done
  if (!spin_until(finished, kSpinNs, 0)) {
    c.caller_asleep.store(1);
    for (uint32_t d; (d = c.done.load()) != n;) futex_wait(&c.done, d);
    c.caller_asleep.store(0, std::memory_order_relaxed);
  }
  // A wait far longer than the caller's own parts: a worker was descheduled in the middle of
  // its part (another process took its core). Run alone for a while, longer each time.
  const Clock::time_point t2 = Clock::now();
  const int64_t own = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  const int64_t wait = std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count();
  step_wait_ns_ += wait;
  if (back_off_ && wait > kLongWaitNs && wait > own) {
    // As long as the wait, at least; twice the last back-off when it ended recently.
    const bool again = solo_ns_ > 0 && t2 - solo_until_ < std::chrono::nanoseconds(4 * solo_ns_);
    solo_ns_ =
        std::clamp<int64_t>(std::max(wait, again ? 2 * solo_ns_ : 0), kSoloMinNs, kSoloMaxNs);
    solo_until_ = t2 + std::chrono::nanoseconds(solo_ns_);
  }
}

void ThreadPool::Core::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    auto fresh = [&] { return generation.load(std::memory_order_acquire) != seen; };
    if (!spin_until(fresh, kSpinNs, kYieldNs)) {
      sleepers.fetch_add(1);
      while (generation.load() == seen) futex_wait(&generation, seen);
      sleepers.fetch_sub(1);
    }
    seen = generation.load(std::memory_order_acquire);
    if (stop.load()) return;
    help(seen, index);
  }
}

}  // namespace rw
