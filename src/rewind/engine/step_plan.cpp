#include "rewind/engine/step_plan.h"

#include <algorithm>

namespace rw {

int64_t min_prefill_tokens(int64_t step_tokens) {
  return std::max<int64_t>(1, step_tokens / 4);
}

StepPlan plan_step(std::span<const PlanSeq> seqs, int64_t step_tokens, size_t first,
                   int64_t mixed_tokens) {
  StepPlan plan;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].decoding) continue;
    PlannedRow r;
    r.seq = i;
    r.decode = true;
    r.logits = true;
    plan.rows.push_back(r);
    plan.tokens += seqs[i].decode_tokens;
  }
  // plan.rows holds the decode rows so far: a step that decodes takes the mixed budget.
  const int64_t total =
      plan.rows.empty() ? step_tokens : std::max<int64_t>(1, std::min(step_tokens, mixed_tokens));
  int64_t budget = std::max(total - plan.tokens, min_prefill_tokens(total));
  const size_t n = seqs.size();
  for (size_t k = 0; k < n && budget > 0; ++k) {
    const size_t i = (first + k) % n;
    const PlanSeq& s = seqs[i];
    if (s.decoding || s.pos >= s.prompt_tokens) continue;
    int64_t end = std::min(s.prompt_tokens, s.pos + budget);
    const auto cut = std::upper_bound(s.cuts.begin(), s.cuts.end(), s.pos);
    bool checkpoint = false;
    if (cut != s.cuts.end() && *cut <= end) {
      end = *cut;
      checkpoint = true;
    }
    PlannedRow r;
    r.seq = i;
    r.begin = s.pos;
    r.end = end;
    r.logits = end == s.prompt_tokens;
    r.checkpoint = checkpoint;
    plan.rows.push_back(r);
    plan.tokens += end - s.pos;
    plan.prefill_tokens += end - s.pos;
    budget -= end - s.pos;
  }
  return plan;
}

}  // namespace rw
