// BatchEngine: the engine. Continuous batching of requests over one Model, through the prefix
// cache of recurrent-state checkpoints (docs/ARCHITECTURE.md, engine loop). Each step plans one
// ragged forward (engine/step_plan.h: the decode tokens of running sequences plus prefill
// chunks cut at checkpoint positions, up to a token budget), runs it, then applies it: snapshots
// where a sequence reached a checkpoint, sampling, events, and publishing finished prompts and
// replies into the prefix tree. A cancelled request is dropped at the next step boundary and its
// pins are released at once. Because the forward is bit-exact however the work is cut, a
// resumed or batched request produces exactly the bits of a cold one run alone.
//
// Threading: with EngineThread::Own (the server) one engine thread runs the steps and alone
// mutates model state and the cache; submit, cancel, metrics and shutdown are thread-safe.
// With EngineThread::Caller nothing runs until the caller calls run_until_idle(), which runs the
// steps on the calling thread (engine/engine.h, the synchronous front).
//
// Events are delivered through the request's callback on the thread that runs the steps:
// callbacks must be quick and must not call back into the engine except cancel().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rewind/base/memory.h"
#include "rewind/base/result.h"
#include "rewind/engine/request.h"
#include "rewind/model/model.h"

namespace rw {

class ThreadPool;
struct StepPlan;

struct EngineMetrics {
  int64_t requests_submitted = 0, requests_finished = 0, requests_cancelled = 0,
          requests_rejected = 0, requests_failed = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, prefill_tokens_run = 0;
  int64_t steps = 0;
  // The step-time line of StepBudget (all 0 before it has one) and the prefill tokens it last
  // gave a step that decoded beside a prefill (0: none yet, or no target).
  StepBudget::Fit step_fit;
  int64_t mixed_prefill_budget = 0;
  int32_t running = 0, queued = 0;
  SpecStats spec;  // speculative rounds of finished requests
  int64_t spec_failed_rounds = 0;
  CacheStats cache;
  std::vector<double> ttft_ms, request_ms;  // recent values (bounded), for histograms
  struct RecentRequest {
    uint64_t id;
    int64_t prompt_tokens, diverged_at, resumed_at, rerun_tokens, lost_to_spacing;
    std::string hit;
  };
  std::deque<RecentRequest> recent;  // newest last, at most 32
  // Bytes by kind now (docs/ARCHITECTURE.md, "Memory"): weights (packed), weights_mapped (the
  // checkpoint's mapping), kv_pages and snapshots (every one alive, in the cache or in running
  // sequences), state_pool (freed ones kept for reuse, StateBufferPool), activations (the
  // forward's reusable buffers), logits (the step's logit rows).
  MemoryReport memory;
  // The terms of the memory bound: engine_memory_bound() plus what the owner added
  // (set_memory_bound); empty until set.
  MemoryReport memory_bound;
};

enum class EngineThread { Own, Caller };

// A picture of the prefix tree for people (PrefixCache::dump), its path being the history the
// last finished request published, with that request's resume figures.
struct CacheTreeReport {
  bool enabled = false;  // false: the cache is off (the tree is empty)
  CacheTree tree;
  uint64_t last_id = 0;  // the last published request's engine id; 0: none yet
  int64_t last_prompt_tokens = 0, last_diverged_at = 0, last_resumed_at = 0;
  int64_t last_history_tokens = 0;  // prompt + reply tokens it published
  CacheStats stats;                 // the cache's figures at the same moment
};

class BatchEngine {
 public:
  BatchEngine(Model& model, ThreadPool* pool, const EngineOptions& opt,
              EngineThread threading = EngineThread::Own);
  ~BatchEngine();  // stops the engine thread; in-flight requests finish as Cancelled
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Thread-safe. Validates (token ids, sizes against ctx_size, queue depth, speculation) before
  // anything changes; an invalid request changes nothing. Errors: "queue full", "prompt too
  // long: ...", ...
  Result<uint64_t> submit(Request req, EventCallback cb);
  // Thread-safe; idempotent; unknown ids are ignored. The request ends with
  // FinishReason::Cancelled.
  void cancel(uint64_t id);
  // Thread-safe copy of the counters.
  EngineMetrics metrics() const;
  // Thread-safe: the memory bound's terms that metrics() reports from now on.
  void set_memory_bound(MemoryReport terms);
  // Thread-safe: asks for a CacheTreeReport listing about max_nodes (>= 1) nodes. `done` runs
  // once with it: with EngineThread::Own on the engine thread at the next step boundary (at
  // once when idle; on the calling thread once the engine thread has stopped), with
  // EngineThread::Caller on the calling thread before this returns. `done` must be quick and
  // must not call into the engine. Cost: O(cache size) on the engine thread.
  void cache_tree(int64_t max_nodes, std::function<void(CacheTreeReport)> done);
  // Thread-safe: empties the prefix cache's RAM tier (PrefixCache::clear: what running requests
  // leased stays valid; a disk or shared tier keeps its entries, and counters are kept). `done`
  // runs once with the stats from just before, on the threads cache_tree's would; with the cache
  // off, with empty stats.
  void clear_cache(std::function<void(CacheStats)> done);
  // Stop accepting; `drain`: let in-flight requests finish, else cancel them. Blocks until the
  // engine thread has stopped. Idempotent.
  void shutdown(bool drain);
  // EngineThread::Caller only: runs steps on the calling thread until nothing is queued or
  // running. `stop` (may be null) is read before every step; once it is true, every request
  // still queued or running is cancelled (it ends as Cancelled at that step, publishing what it
  // computed). Setting it is one lock-free atomic store, so a signal handler may do it.
  void run_until_idle(const std::atomic<bool>* stop = nullptr);

  const Model& model() const { return model_; }
  const EngineOptions& options() const { return opt_; }
  // The prefix cache (null when off). Only for the thread that runs the steps, between steps.
  const PrefixCache* cache() const { return cache_.get(); }

  struct Seq;

 private:
  void loop();
  void step();
  void admit(Seq& s);
  // Opens the speculative rounds of decoding sequences; those that fail to open finish.
  void open_spec_rounds();
  // s's speculation state, made on first use (with s's grammar, when it has one).
  SpecSequence& spec_of(Seq& s);
  // Ends a request: publishes what it consumed (unless it failed), releases its lease, counts
  // it and delivers its final event. Resets `sp`.
  void finish(std::unique_ptr<Seq>& sp, FinishReason why, std::string err, TokenEvent ev);
  void finish_marked();  // finishes the sequences marked done during a step
  // Choice `choice` of s's request, forked from s at the end of its prompt (Request::n).
  std::unique_ptr<Seq> fork(const Seq& s, int32_t choice);
  // The final event of a choice that never started (its request ended before the fork).
  void end_unstarted(const Seq& s, int32_t choice, FinishReason why, const std::string& err);
  // Constrained decoding: whether a row of `s` is masked only when its argmax is refused;
  // the rows of an open speculative round constrained along its drafts (the matcher is left
  // *advanced tokens further, for the caller to roll back).
  bool lazy_grammar(const Seq& s) const;
  // Whether a plain (not speculative) sampled row of `s` is drawn whole first and masked only
  // when the draw is refused (the same distribution as masking first).
  bool lazy_sampling(const Seq& s) const;
  // Whether the request reports log-probabilities (logprobs or top_logprobs).
  bool reports_logprobs(const Seq& s) const;
  Status constrain_spec_rows(Seq& s, float* lg, size_t* advanced);
  // Before a step's rows are sampled: the grammar masks they will need that are not cached
  // yet, computed together on the pool (GrammarAutomaton::prefetch), and argmax_hint_ for the
  // greedy rows checked here. Only a cache fill: the rows are constrained as without it.
  void prefetch_masks(const StepPlan& plan);
  // Before a step's rows are sampled: the argmax of every plain greedy row (no grammar, no
  // logit adjustment, no speculation), the rows shared out on the pool into argmax_hint_; the
  // engine thread would otherwise scan them one after another while the other threads idle.
  void greedy_argmax(const StepPlan& plan);
  // The argmax of logits row `row` when prefetch_masks took it (the row unchanged since), else
  // -1; by a pointer into logits_.
  int32_t argmax_hint(const float* row) const;
  void update_memory();         // engine thread, mu_ held: metrics_.memory
  void maybe_release_memory();  // engine thread: release_free_memory() once when idle
  CacheTreeReport tree_report(int64_t max_nodes) const;  // the thread that runs the steps
  void answer_engine_asks();  // engine thread: the cache_tree() / clear_cache() requests waiting
  // Runs `ask` on the engine thread at the next step boundary, or here when none runs steps.
  void on_engine_thread(std::function<void()> ask);

  Model& model_;
  ThreadPool* pool_;
  EngineOptions opt_;
  bool recurrent_ = false;
  std::unique_ptr<PrefixCache> cache_;  // engine thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> queue_;  // guarded by mu_
  // Guarded by mu_: the running sequences' slots, counted at admission and at each step's end,
  // less those of sequences finished since (freed before their final event goes out).
  int32_t slots_used_ = 0;
  std::set<uint64_t> cancelled_;           // guarded by mu_
  bool stopping_ = false, drain_ = false;  // guarded by mu_
  bool own_thread_ = false;                // EngineThread::Own (fixed at construction)
  bool loop_done_ = false;                 // guarded by mu_: the engine thread has stopped
  // cache_tree() and clear_cache() requests waiting for the engine thread; guarded by mu_.
  std::vector<std::function<void()>> engine_asks_;
  // The last published request (engine thread only): its history and report, for cache_tree.
  std::vector<int32_t> last_history_;
  RequestReport last_report_;
  uint64_t last_id_ = 0;
  uint64_t next_id_ = 1;                       // guarded by mu_
  EngineMetrics metrics_;                      // guarded by mu_
  std::vector<std::unique_ptr<Seq>> running_;  // engine thread only
  size_t rr_ = 0;                              // engine thread only: prefill round-robin
  StepBudget step_budget_;                     // engine thread only: mixed steps' prefill
  std::vector<float> logits_;                  // engine thread only: the step's logit rows
  std::vector<int32_t> argmax_hint_;  // engine thread only: per logits row, -1 when not known
  bool trimmed_ = true;        // engine thread only: free memory handed back since the last step
  int64_t pool_capacity_ = 0;  // what this engine added to StateBufferPool's capacity
  std::thread thread_;
};

// The engine's terms of the memory bound for `model` under `opt` with a pool of `threads`
// (docs/ARCHITECTURE.md, "Memory"): weights, weights_mapped, cache (the budget),
// slots (max_running x the working memory of one sequence at ctx_size), activations (the
// forward's buffers for the largest step, the attention's score rows, the logit rows).
MemoryReport engine_memory_bound(const Model& model, const EngineOptions& opt, int threads);

// A request's prefill checkpoints (ascending), capped at max_per_branch (0: no cap; else at
// least 2) so that a running request holds a bounded number of snapshots however many message
// boundaries its prompt has: the anchor when present and the newest others (the prompt end
// among them), as the cache's thinning would keep them once published.
std::vector<int64_t> cap_cuts(std::vector<int64_t> cuts, int64_t anchor, int64_t max_per_branch);

// The speculation a request gets: its own choice over the engine's default. Errors: a kind the
// engine cannot serve (a draft model or MTP it does not have), k out of range.
Result<SpecConfig> resolve_spec(const Model& model, const SpecConfig& engine_default,
                                const Request& req);

}  // namespace rw
