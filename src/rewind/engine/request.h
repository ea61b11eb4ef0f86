// What the engine is asked (Request), what it reports (RequestReport, TokenEvent) and how it is
// configured (EngineOptions): one set of types for the batched engine and its synchronous front.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rewind/cache/prefix_cache.h"
#include "rewind/engine/speculative.h"
#include "rewind/engine/step_budget.h"
#include "rewind/sample/sampler.h"
#include "rewind/state/sequence_state.h"

namespace rw {

class GrammarAutomaton;

struct EngineOptions {
  int32_t max_running = 4;    // sequences decoding/prefilling at once (--parallel)
  int32_t max_queued = 64;    // waiting requests beyond that are refused (queue full)
  int64_t ctx_size = 32768;   // prompt + max_tokens must fit
  int64_t step_tokens = 512;  // token budget of one forward step (prefill chunk size)
  // The budget of a step that also decodes (at most step_tokens; 0: step_tokens): a smaller
  // prefill chunk beside decoding sequences shortens their wait (--mixed-chunk).
  int64_t mixed_step_tokens = 0;
  // Off by default: a step that decodes beside a prefill sizes its prefill chunk from the
  // measured step times to aim at this target (engine/step_budget.h; --itl-target), within
  // the token budgets above.
  StepTarget step_target;
  int32_t sample_vocab = 0;  // ids >= this are never sampled (tokenizer size); 0: all
  bool cache_enabled = true;
  PrefixCache::Options cache;  // budget, checkpoint policy
  // Speculative decoding: what requests get unless they say otherwise (kind Off: plain). Its
  // draft model, when kind is Draft, is the one every request's drafts come from.
  SpecConfig spec;
};

struct Request {
  std::vector<int32_t> prompt;
  // Checkpoint positions supplied with the request (chat template: end of the system prompt,
  // each message start). A position is a token count: a snapshot at p holds the state after p
  // tokens. `anchor` is the one that thinning never drops (-1: none).
  std::vector<int64_t> boundaries;
  int64_t anchor = -1;
  int32_t max_tokens = 256;
  // Sampling, with its logit adjustments (penalties, logit_bias: sample/logit_adjust.h), and
  // the choices (OpenAI's n): the prompt is prefilled once, by choice 0; at its end the
  // sequence forks into n (state clones sharing its KV pages and snapshots, nothing re-run),
  // choice i sampling with seed + i, so choice i equals a single request with that seed.
  // Choice i has engine id submit()'s id + i and its own events, stop and cancel. 1..kMaxChoices,
  // and at most max_running: a request is admitted when its n sequences fit.
  SamplingParams sampling;
  int32_t n = 1;
  static constexpr int32_t kMaxChoices = 8;
  std::set<int32_t> stop_ids;
  int32_t top_logprobs = 0;  // alternatives reported per token (0: none)
  bool logprobs = false;     // report the chosen token's log-probability
  // Speculation: `spec` replaces the engine's default configuration as a whole (an embedding
  // program's own drafter, tests); spec_kind / spec_k then override its kind and k (the server's
  // per-request fields). A draft model or MTP only when the engine has one.
  std::optional<SpecConfig> spec;
  std::optional<SpecKind> spec_kind;
  int32_t spec_k = 0;              // 0: keep k
  bool publish = true;             // publish prompt + reply into the prefix cache
  bool keep_first_logits = false;  // the final event carries the first token's logits
  bool keep_state = false;         // the final event carries the sequence's final state
  // Called on the engine thread after each prefill chunk with the prompt tokens the state has
  // consumed (resumed ones included) and the prompt's length: progress for long prompts.
  std::function<void(int64_t done, int64_t total)> on_prefill;
  // Constrained decoding (engine/constrained.h): every generated token is one this grammar
  // allows; the reply ends with one of its end-of-sequence ids (stop ids for this request) once
  // the grammar is complete. One automaton per grammar text, shared by the requests that use
  // it (its mask cache with them); the sequence's GrammarMatcher starts at admission.
  std::shared_ptr<GrammarAutomaton> grammar;
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

// One request's account: where it resumed from the cache, what it ran, how long it took.
struct RequestReport {
  int64_t prompt_tokens = 0;  // n
  int64_t completion_tokens = 0;
  int64_t diverged_at = 0;      // L, the common prefix with the cache
  int64_t resumed_at = 0;       // p: prompt tokens resumed from the cache ("cached tokens")
  int64_t rerun_tokens = 0;     // n - p
  int64_t lost_to_spacing = 0;  // min(L, n-1) - p
  int64_t tier_tokens = 0;      // of p, tokens read back from a tier (disk, Redis) for it
  HitKind hit = HitKind::Miss;
  int64_t snapshots_taken = 0;  // checkpoints this request took
  double snapshot_ms = 0;       // time spent taking them
  double queue_ms = 0;          // submit to admission
  double ttft_ms = 0;           // submit to first token
  double total_ms = 0;          // submit to the final event
  SpecStats spec;               // speculative rounds (all zero when off)
  bool forked = false;          // a choice > 0: forked at the prompt's end (resumed_at = n)
};

struct TokenEvent {
  uint64_t id = 0;
  int32_t choice = 0;  // Request::n: which choice (id = submit()'s id + choice)
  int32_t token = -1;  // -1 on a final event that carries no token (cancel, error)
  // Of `token` under the row's logits after the logit adjustments (log-softmax), before
  // temperature and the filters.
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
  FinishReason finish = FinishReason::None;    // set on the last event of a request
  std::string error;                           // for FinishReason::Error
  RequestReport report;                        // complete on the last event
  // On the last event only, when the request asked for them (the logits after the adjustments).
  std::vector<float> first_logits;
  std::shared_ptr<SequenceState> state;
};

using EventCallback = std::function<void(const TokenEvent&)>;

}  // namespace rw
