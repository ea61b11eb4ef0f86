// BatchEngine: continuous batching on one engine thread (docs/ARCHITECTURE.md, engine loop).
// Requests are submitted and cancelled from any thread; the engine thread alone mutates model
// state and the prefix cache. Each step gathers the decode tokens of running sequences plus
// prefill chunks (cut at checkpoint positions) up to a token budget, runs one ragged forward,
// samples, takes snapshots where a sequence reached a checkpoint position, and publishes
// finished prompts and replies into the prefix tree. A cancelled request (client gone) is
// dropped at the next step boundary and its pins are released at once.
//
// Events are delivered through the request's callback ON THE ENGINE THREAD: callbacks must be
// quick and must not call back into the engine except cancel().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/cache/prefix_cache.h"
#include "rewind/engine/speculative.h"
#include "rewind/model/model.h"
#include "rewind/sample/sampler.h"

namespace rw {

class ThreadPool;

struct BatchEngineOptions {
  int32_t max_running = 4;        // sequences decoding/prefilling at once (--parallel)
  int32_t max_queued = 64;        // waiting requests beyond that are refused (queue full)
  int64_t ctx_size = 32768;       // prompt + max_tokens must fit
  int64_t step_tokens = 512;      // token budget of one forward step
  int32_t sample_vocab = 0;       // ids >= this are never sampled (tokenizer size); 0: all
  bool cache_enabled = true;
  PrefixCache::Options cache;     // budget, checkpoint policy
  // Speculative decoding: what requests get unless they say otherwise (kind Off: plain). Its
  // draft model, when kind is Draft, is the one every request's drafts come from.
  SpecConfig spec;
};

struct SubmitRequest {
  std::vector<int32_t> prompt;
  std::vector<int64_t> boundaries;  // checkpoint positions from the chat template
  int64_t anchor = -1;
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::set<int32_t> stop_ids;
  int32_t top_logprobs = 0;         // alternatives reported per token (0: none)
  bool logprobs = false;            // report the chosen token's log-probability
  // Per-request speculation: unset takes BatchEngineOptions::spec; a request may turn it off,
  // change k, or pick ngram (a draft model or MTP only when the engine has one).
  std::optional<SpecKind> spec_kind;
  int32_t spec_k = 0;               // 0: the engine's k
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;     // p: prompt tokens resumed from the cache
  int64_t diverged_at = 0;       // L
  int64_t lost_to_spacing = 0;   // min(L, n-1) - p
  HitKind hit = HitKind::Miss;
  double queue_ms = 0;
  double ttft_ms = 0;            // submit to first token
  double total_ms = 0;
  int64_t spec_drafted = 0;      // draft tokens proposed for this request
  int64_t spec_accepted = 0;     // of which accepted
};

struct TokenEvent {
  uint64_t id = 0;
  int32_t token = -1;            // -1 on a final event that carries no token (cancel, error)
  float logprob = 0;             // of `token` under the sampling distribution's logits (log-softmax)
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
  FinishReason finish = FinishReason::None;    // set on the last event of a request
  std::string error;             // for FinishReason::Error
  RequestUsage usage;            // complete on the last event
};

using EventCallback = std::function<void(const TokenEvent&)>;

struct EngineMetrics {
  int64_t requests_submitted = 0, requests_finished = 0, requests_cancelled = 0,
          requests_rejected = 0, requests_failed = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, prefill_tokens_run = 0;
  int64_t steps = 0;
  int32_t running = 0, queued = 0;
  SpecStats spec;              // speculative rounds of finished requests
  int64_t spec_failed_rounds = 0;
  CacheStats cache;
  std::vector<double> ttft_ms, request_ms;  // recent values (bounded), for histograms
  struct RecentRequest {
    uint64_t id;
    int64_t prompt_tokens, diverged_at, resumed_at, rerun_tokens, lost_to_spacing;
    std::string hit;
  };
  std::deque<RecentRequest> recent;  // newest last, at most 32
};

class BatchEngine {
 public:
  BatchEngine(Model& model, ThreadPool* pool, const BatchEngineOptions& opt);
  ~BatchEngine();  // stops the engine thread; in-flight requests finish as Cancelled
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Thread-safe. Validates (token ids, sizes against ctx_size, queue depth) before anything
  // changes; an invalid request changes nothing. Errors: "queue full", "prompt too long", ...
  Result<uint64_t> submit(SubmitRequest req, EventCallback cb);
  // Thread-safe; idempotent; unknown ids are ignored. The request ends with FinishReason::Cancelled.
  void cancel(uint64_t id);
  // Thread-safe copy of the counters.
  EngineMetrics metrics() const;
  // Stop accepting; `drain`: let in-flight requests finish, else cancel them. Blocks until the
  // engine thread has stopped. Idempotent.
  void shutdown(bool drain);

  const Model& model() const { return model_; }
  const BatchEngineOptions& options() const { return opt_; }

  struct Seq;

 private:
  void loop();
  void step();

  Model& model_;
  ThreadPool* pool_;
  BatchEngineOptions opt_;
  std::unique_ptr<PrefixCache> cache_;  // engine thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> queue_;   // guarded by mu_
  std::set<uint64_t> cancelled_;             // guarded by mu_
  bool stopping_ = false, drain_ = false;    // guarded by mu_
  uint64_t next_id_ = 1;                     // guarded by mu_
  EngineMetrics metrics_;                    // guarded by mu_
  std::vector<std::unique_ptr<Seq>> running_;  // engine thread only
  size_t rr_ = 0;                              // engine thread only: prefill round-robin
  std::thread thread_;
};

// The speculation a request gets: its own choice over the engine's default. Errors: a kind the
// engine cannot serve (a draft model or MTP it does not have), k out of range.
Result<SpecConfig> resolve_spec(const Model& model, const SpecConfig& engine_default,
                                const SubmitRequest& req);

}  // namespace rw
