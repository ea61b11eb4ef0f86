// The batched engine's step plan: which rows go into one ragged forward, with which tokens, and
// where a checkpoint falls. A pure function of the running sequences' positions, so the
// scheduling rules are tested without a model (tests/unit/step_plan_test.cpp); the engine then
// applies the plan (forward, snapshots, sampling, events).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rw {

// The planner's view of one running sequence.
struct PlanSeq {
  bool decoding = false;          // past its prompt: one decode row this step
  int32_t decode_tokens = 1;      // that row's tokens: 1, or drafts + 1 in a speculative round
  int64_t pos = 0;                // prefilling: the next prompt position to run
  int64_t prompt_tokens = 0;      // prefilling: the prompt's length
  std::span<const int64_t> cuts;  // prefilling: checkpoint positions, ascending
};

struct PlannedRow {
  size_t seq = 0;  // index into the planned sequences
  bool decode = false;
  int64_t begin = 0, end = 0;  // prefill: prompt positions [begin, end)
  bool logits = false;         // the row's last token gives logits (every decode row; a
                               // prefill chunk that ends the prompt)
  bool checkpoint = false;     // prefill: `end` is a checkpoint position (snapshot after it)
};

struct StepPlan {
  std::vector<PlannedRow> rows;  // decode rows first (sequence order), then prefill chunks
  int64_t tokens = 0;            // tokens in the forward
  int64_t prefill_tokens = 0;
};

// The prefill tokens a step runs at least while a prompt waits, however many tokens its decode
// rows take: a quarter of `step_tokens` (at least 1). So speculative drafts cannot starve a
// prefill, and a step never holds more than step_tokens of prefill.
int64_t min_prefill_tokens(int64_t step_tokens);

// Every decoding sequence gets its decode row (they are never starved, even past the budget);
// prefill chunks get what is left of the budget, but at least min_prefill_tokens() of it,
// visiting the prefilling sequences round-robin from index `first % seqs.size()` (the caller
// rotates it each step, so long prefills progress fairly). The budget is `step_tokens`, or
// min(step_tokens, mixed_tokens) when a sequence decodes this step. A chunk runs from pos up to
// the budget, the prompt's end or the first checkpoint after pos, whichever comes first.
StepPlan plan_step(std::span<const PlanSeq> seqs, int64_t step_tokens, size_t first,
                   int64_t mixed_tokens);

}  // namespace rw
