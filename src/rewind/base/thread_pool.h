// A fixed pool of worker threads for data-parallel loops. Threads split *outputs*, never
// reductions (docs/ARCHITECTURE.md, "bit-exact"): every item's result is computed by one call
// of fn whichever thread makes it, so results never depend on the thread count.
//
// Thread-safety: one caller at a time per ThreadPool object (the engine thread). A call blocks
// until its items are done. Several callers (the engines of several served models) share one
// set of threads through lanes (lane()): their jobs take turns, each on every thread.
// Work is claimed, never assigned: the caller publishes a job and takes parts of it itself, and
// each worker takes parts when it gets to run. A worker that is late (asleep, or descheduled on
// a machine shared with other processes) leaves its parts to the caller, which never waits for
// a thread that has not started; it waits only for parts already being run.
// Waiting: a worker spins briefly for the next job (back-to-back calls, a decode step's dozens
// of matmuls, then cost well under a microsecond), yielding its core after 20 us, and sleeps on
// a futex after 200 us; the caller spins 20 us for parts other threads are running, then
// sleeps. A worker descheduled in the middle of its part can still hold the caller for a time
// slice of the other process; after such a wait (over 200 us, and longer than the caller's own
// parts took) the caller runs jobs alone for at least as long, doubling while it recurs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace rw {

// Picks, step by step, whether a forward pass is shared among the pool's threads or run by
// the caller alone, whichever its measured times say is faster. On a machine shared with other
// processes two threads can be slower than one: a worker that shares a core with the caller
// only takes turns with it, and one descheduled mid-job holds the step. Steps are grouped by
// work (powers of two); within a group, time per unit of work is compared between the modes.
// Sharing is the default; running alone is tried when the caller spends over kWaitTrigger of
// shared steps waiting for workers or backing off from them (ThreadPool::run), and then kept
// while it stays faster, sharing being re-tried after kPeriodMin, doubling up to kPeriodMax,
// steps. Pure logic, no clock: the pool feeds it times (tests feed their own).
class StepChooser {
 public:
  static constexpr int kTrial = 4;       // steps a tried mode runs before it is judged
  static constexpr int kPeriodMin = 16;  // steps before the other mode is tried again
  static constexpr int kPeriodMax = 512;
  static constexpr double kWaitTrigger = 0.2;
  static constexpr double kMargin = 0.05;  // a switch needs this much gain

  // Whether the next step of `work` runs alone.
  bool alone(int64_t work);
  // The step just run (alone as returned by alone()) took ns, of which the caller waited
  // wait_ns for workers' parts (shared steps).
  void record(int64_t work, bool alone, int64_t ns, int64_t wait_ns);
  // Steps that ran alone by choice, and the switches made, for reports and tests.
  int64_t chosen_alone() const { return chosen_alone_; }
  int64_t switches() const { return switches_; }

 private:
  struct Group {
    bool alone = false;   // the mode kept
    int trial = 0;        // > 0: steps left of a trial of the other mode
    double trial_ns = 0;  // the trial's time and work so far
    double trial_work = 0;
    double kept = 0;  // the kept mode's ns per unit of work (moving average), 0 unknown
    double wait = 0;  // shared steps' moving-average waiting fraction
    int since = 0;    // steps in the kept mode since the last trial
    int period = kPeriodMin;
  };
  static int group_of(int64_t work);
  Group groups_[64];
  int64_t chosen_alone_ = 0;
  int64_t switches_ = 0;
};

class ThreadPool {
 public:
  using Fn = std::function<void(int, int64_t, int64_t)>;

  // n_threads >= 1; the calling thread is one of them (n_threads - 1 workers are spawned).
  // Jobs whose work hint is below min_parallel_work run on the caller alone (tests pass 0, so
  // that tiny fixtures still exercise the shared paths).
  // back_off: after a long wait for a descheduled worker, run jobs alone for a while (off only
  // in tests that check how a shared job is split).
  explicit ThreadPool(int n_threads, int64_t min_parallel_work = kMinParallelWork,
                      bool back_off = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Another caller's handle on this pool's threads, for a second engine thread: the engines of
  // several served models each take a lane of one pool, so that together they never run more
  // than n_threads threads on shared jobs, while one busy engine alone still gets them all.
  // Shared jobs of different lanes run one at a time, in the order they were asked for (a FIFO
  // lock; a waiting caller sleeps), each on every thread; a job a lane runs on its caller alone
  // (small work, StepScope, back-off) takes no turn. Back-off and StepScope are per lane. The
  // pool and its lanes may each be used from its own thread at once, and destroyed in any
  // order (the threads end with the last of them). Results never depend on it: each item is
  // still one call of fn.
  std::unique_ptr<ThreadPool> lane() const;

  // The default least work hint (operations: multiply-adds, or element operations of
  // comparable cost) for which a job is shared: about 10 us of work. Below it, what sharing
  // saves (a few us) is worth less than what a worker descheduled in its share costs on a
  // shared machine (docs/PERFORMANCE.md, "Threads on a shared machine").
  static constexpr int64_t kMinParallelWork = int64_t{1} << 17;

  // A whole step (a forward pass) whose work is below kStepWorkFactor x min_parallel_work (1M
  // multiply-adds by default, well under a tenth of a millisecond) is not worth waking workers
  // for, job by job: while a StepScope made with such a work hint is alive, every job runs on
  // the caller alone. Larger steps gain from two threads even on small models (1.6-1.8x on an
  // idle host at 4-16M; docs/PERFORMANCE.md). Results are unchanged whichever thread runs.
  // Larger steps are shared or run alone as StepChooser (above) finds faster, step by step.
  static constexpr int64_t kStepWorkFactor = 8;
  class StepScope {
   public:
    StepScope(ThreadPool* pool, int64_t work);
    ~StepScope();
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;

   private:
    ThreadPool* pool_ = nullptr;  // set when this scope is the pool's outermost step
    bool alone_ = false;          // this scope made the pool run alone
    bool timed_ = false;          // this step's time goes to the chooser
    int64_t work_ = 0;
    std::chrono::steady_clock::time_point t0_{};
  };
  // Steps run alone since the pool was made (StepScope: below the threshold, or chosen), for
  // reports.
  int64_t steps_alone() const { return steps_alone_; }
  const StepChooser& chooser() const { return chooser_; }

  // Calls fn(index, begin, end) once for each non-empty share of a static, contiguous split of
  // [0, n_items) into n_threads shares (granularity `grain`: every boundary but the last is a
  // multiple of it); index is the share's number, whichever thread runs it, so no two calls
  // running at once get the same index (per-index scratch stays valid). A late worker's share
  // is run by a thread that is free. `work`: the job's total cost in operations, or < 0 when
  // not known; below min_parallel_work the caller runs the shares itself, in order.
  void parallel_for(int64_t n_items, int64_t grain, const Fn& fn, int64_t work = -1);

  // Calls fn(thread_index, begin, end) on consecutive chunks, each taken by whichever thread is
  // free next: for loops whose threads run at uneven speeds (a shared machine, where one core
  // is often slower than the other for a while), which a static split leaves waiting for the
  // slowest: decode's memory-bound matmuls, prefill's matmuls and per-row and per-head passes.
  // The chunks shrink as the work runs out ("guided"): each is the items left / (2 *
  // n_threads), rounded up to a multiple of grain, and at least min_chunk items (a multiple of
  // grain; the last chunk may be shorter). Big chunks first keep the count of chunk starts
  // low; small ones last keep the threads' finishing times close. thread_index is the running
  // thread's (0 the caller). Which thread runs a chunk, and where the chunks begin, vary from
  // run to run, so fn's results must not depend on them (outputs per item, as everywhere
  // here). `work` as for parallel_for; a job the caller runs alone is one call fn(0, 0, n).
  void parallel_guided(int64_t n_items, int64_t grain, int64_t min_chunk, const Fn& fn,
                       int64_t work = -1);

 private:
  enum class Split : int { kStatic, kGuided };
  struct Core;  // the threads, the job slot and the turn lock, shared by a pool and its lanes
  ThreadPool(std::shared_ptr<Core> core, int64_t min_parallel_work, bool back_off);
  void run(int64_t n_items, int64_t grain, int64_t min_chunk, Split split, int64_t work,
           const Fn& fn);
  // The job on the calling thread: parallel_for's shares in order, parallel_guided's items in
  // one range.
  void run_alone(int64_t n_items, int64_t grain, Split split, const Fn& fn) const;

  std::shared_ptr<Core> core_;
  int n_threads_;
  int64_t min_parallel_work_;
  // The caller's back-off: after a long wait for a descheduled worker, jobs run on the caller
  // alone until solo_until_, for solo_ns_ (doubling on each long wait).
  bool back_off_ = true;
  int64_t solo_ns_ = 0;
  bool step_alone_ = false;  // a StepScope that runs its step alone is alive
  bool in_step_ = false;     // a StepScope is alive
  int64_t steps_alone_ = 0;
  int64_t step_wait_ns_ = 0;  // the caller's waits for workers' parts in the current step
  StepChooser chooser_;
  std::chrono::steady_clock::time_point solo_until_{};
};

// Split [0, n_items) into `parts` contiguous ranges whose inner boundaries are multiples of
// grain. Returns the range of part `index`.
void split_range(int64_t n_items, int64_t grain, int parts, int index, int64_t* begin,
                 int64_t* end);

}  // namespace rw
