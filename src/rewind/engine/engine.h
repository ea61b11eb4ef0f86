// The engine: runs generation requests against one Model, with the prefix cache of
// recurrent-state checkpoints (cache/prefix_cache.h) on or off. This engine runs one
// request at a time on the calling thread (the server issue adds continuous batching on an
// engine thread); the model's forward is already ragged-batch capable.
//
// A request: lookup (longest common prefix L, resume point p = deepest snapshot <= min(L, n-1)),
// resume (share KV pages [0, p), copy the snapshot), prefill [p, n) cut at the checkpoint
// positions of the policy and the request's boundaries (a snapshot is taken at each), sample,
// decode, then publish the consumed token history with its pages and snapshots. Because the
// forward pass is bit-exact however the work is cut, a resumed request produces exactly the
// bits of a cold one.
//
// Thread-safety: one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/cache/prefix_cache.h"
#include "rewind/engine/speculative.h"
#include "rewind/model/model.h"
#include "rewind/sample/sampler.h"

namespace rw {

class ThreadPool;

struct EngineOptions {
  bool cache_enabled = true;
  PrefixCache::Options cache;   // budget, page size, checkpoint policy
  int64_t prefill_chunk = 512;  // max tokens per forward during prefill
  int32_t sample_vocab = 0;     // ids >= this are never sampled (tokenizer size); 0: all
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  // Checkpoint positions supplied with the request (chat template: end of the system prompt,
  // each message start, ...). Positions are token counts (a snapshot at p holds the state after
  // p tokens). `anchor` is the one thinning never drops (-1: none).
  std::vector<int64_t> boundaries;
  int64_t anchor = -1;
  int32_t max_tokens = 16;
  SamplingParams sampling;
  std::set<int32_t> stop_ids;
  bool publish = true;      // publish prompt + reply into the cache
  bool keep_first_logits = false;
  SpecConfig spec;          // speculative decoding (kind Off: plain decoding)
  // Called on the calling thread with each generated token, in order, as soon as it is final
  // (streaming). May be empty.
  std::function<void(int32_t)> on_token;
};

struct RequestReport {
  int64_t prompt_tokens = 0;
  int64_t diverged_at = 0;      // L, the common prefix with the cache
  int64_t resumed_at = 0;       // p
  int64_t rerun_tokens = 0;     // n - p
  int64_t lost_to_spacing = 0;  // min(L, n-1) - p
  HitKind kind = HitKind::Miss;
  int64_t snapshots_taken = 0;
  double ttft_ms = 0;           // request start to first sampled token (prefill included)
  double total_ms = 0;
  double snapshot_ms = 0;       // time spent taking snapshots
  std::vector<int32_t> output;  // generated tokens (the stop token included if hit)
  std::vector<float> first_logits;  // logits the first token was sampled from (if asked)
  SpecStats spec;                   // speculative rounds (all zero when off)
};

class Engine {
 public:
  Engine(Model& model, ThreadPool* pool, const EngineOptions& opt);
  Result<RequestReport> generate(const GenerateRequest& req);
  // The state of the last generate() call's sequence (after its last consumed token), for
  // tests that compare states bit for bit; null before the first call.
  const SequenceState* last_state() const { return last_state_ ? &*last_state_ : nullptr; }
  // Null when the cache is off.
  const PrefixCache* cache() const { return cache_.get(); }
  const EngineOptions& options() const { return opt_; }

 private:
  Model& model_;
  ThreadPool* pool_;
  EngineOptions opt_;
  std::unique_ptr<PrefixCache> cache_;
  std::optional<SequenceState> last_state_;
};

}  // namespace rw
