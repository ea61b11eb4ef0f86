// Engine: the synchronous front over BatchEngine, for programs that run one request at a time
// on their own thread (rewind run, cache-bench, spec-bench, tests). generate() submits a Request
// and runs the engine's steps on the calling thread until it ends, so there is one
// implementation of lookup -> resume -> prefill cut at checkpoints -> snapshot -> decode ->
// publish, and the same bits as the server's engine.
//
// Thread-safety: one caller at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/engine/batch_engine.h"

namespace rw {

class ThreadPool;

// What one generate() call produced.
struct Generation {
  std::vector<int32_t> tokens;  // generated tokens (the stop token included if hit)
  FinishReason finish = FinishReason::None;
  RequestReport report;
  std::vector<float> first_logits;  // logits the first token was sampled from (if asked)
};

class Engine {
 public:
  Engine(Model& model, ThreadPool* pool, const EngineOptions& opt);
  // Runs `req` to its end. `on_token` (may be empty) is called on the calling thread with each
  // generated token, in order, as soon as it is final. Errors: the request refused (Request
  // validation, speculation it cannot run) or failed while running.
  // `stop` (may be null): the cancellation hook. It is read before every engine step (one
  // decoded token, or one prefill chunk of at most step_tokens); once it is true the request
  // ends with FinishReason::Cancelled and the tokens generated so far, and what it computed is
  // published to the prefix cache as for any cancelled request. A signal handler may set it
  // (one lock-free atomic store); generate() never clears it.
  Result<Generation> generate(const Request& req, const std::function<void(int32_t)>& on_token = {},
                              const std::atomic<bool>* stop = nullptr);
  // The state of the last generate() call's sequence (after its last consumed token; after a
  // failed speculative round, its last committed state), for tests that compare states bit for
  // bit; null before the first request that ran.
  const SequenceState* last_state() const { return last_state_.get(); }
  // Null when the cache is off.
  const PrefixCache* cache() const { return core_.cache(); }
  const EngineOptions& options() const { return core_.options(); }

 private:
  BatchEngine core_;
  std::shared_ptr<SequenceState> last_state_;
};

}  // namespace rw
