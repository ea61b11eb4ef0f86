// The batched engine's scheduling rules, checked on the plan alone (no model runs).
#include "rewind/engine/step_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace rw {
namespace {

PlanSeq decoding(int32_t tokens = 1) {
  PlanSeq s;
  s.decoding = true;
  s.decode_tokens = tokens;
  return s;
}

PlanSeq prefilling(int64_t pos, int64_t n, const std::vector<int64_t>* cuts = nullptr) {
  PlanSeq s;
  s.pos = pos;
  s.prompt_tokens = n;
  if (cuts) s.cuts = *cuts;
  return s;
}

// A step that decodes takes the smaller mixed budget: the decoding rows wait on a shorter
// prefill chunk. With nothing decoding, a prefill gets the whole step budget.
TEST(StepPlan, MixedStepsTakeTheMixedBudget) {
  std::vector<PlanSeq> seqs = {prefilling(0, 1000), decoding(), decoding()};
  const StepPlan p = plan_step(seqs, 512, 0, 128);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.tokens, 128);
  EXPECT_EQ(p.prefill_tokens, 126);
  std::vector<PlanSeq> alone = {prefilling(0, 1000)};
  EXPECT_EQ(plan_step(alone, 512, 0, 128).prefill_tokens, 512);
  // The mixed budget never exceeds the step budget, and a prefill still gets a quarter of it
  // however many tokens the decode rows take.
  EXPECT_EQ(plan_step(seqs, 64, 0, 128).tokens, 64);
  std::vector<PlanSeq> drafts = {prefilling(0, 1000), decoding(100), decoding(100)};
  EXPECT_EQ(plan_step(drafts, 512, 0, 128).prefill_tokens, 32);
}

TEST(StepPlan, DecodeRowsFirstThenPrefillWithTheRestOfTheBudget) {
  std::vector<PlanSeq> seqs = {prefilling(0, 100), decoding(), decoding(3)};
  const StepPlan p = plan_step(seqs, 10, 0, 10);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_TRUE(p.rows[0].decode);
  EXPECT_EQ(p.rows[0].seq, 1u);
  EXPECT_TRUE(p.rows[1].decode);
  EXPECT_EQ(p.rows[1].seq, 2u);
  EXPECT_FALSE(p.rows[2].decode);
  EXPECT_EQ(p.rows[2].seq, 0u);
  EXPECT_EQ(p.rows[2].begin, 0);
  EXPECT_EQ(p.rows[2].end, 6);     // 10 - 1 - 3
  EXPECT_FALSE(p.rows[2].logits);  // the prompt is not finished
  EXPECT_EQ(p.tokens, 10);
  EXPECT_EQ(p.prefill_tokens, 6);
}

TEST(StepPlan, DecodeRowsAreNeverStarvedByTheBudget) {
  std::vector<PlanSeq> seqs = {decoding(5), decoding(5), prefilling(0, 8)};
  const StepPlan p = plan_step(seqs, 4, 0, 4);
  ASSERT_EQ(p.rows.size(), 3u);  // both decode rows whole, past the budget
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(p.rows[i].decode);
    EXPECT_TRUE(p.rows[i].logits);
  }
  EXPECT_EQ(p.prefill_tokens, 1);  // and the prefill's minimum share
  EXPECT_EQ(p.tokens, 11);
}

// Decode rows with drafts that fill the budget (and more) still leave a waiting prefill its
// minimum share, step after step: its prompt ends in a bounded number of steps.
TEST(StepPlan, DraftingRowsNeverStarveAWaitingPrefill) {
  EXPECT_EQ(min_prefill_tokens(1), 1);
  EXPECT_EQ(min_prefill_tokens(7), 1);
  EXPECT_EQ(min_prefill_tokens(512), 128);
  const std::vector<int64_t> cuts = {64};
  std::vector<PlanSeq> seqs = {decoding(17), decoding(17), prefilling(0, 100, &cuts)};
  int64_t steps = 0;
  for (size_t first = 0; seqs[2].pos < seqs[2].prompt_tokens; ++first, ++steps) {
    ASSERT_LT(steps, 100) << "the prefill does not progress";
    const StepPlan p = plan_step(seqs, 32, first, 32);
    ASSERT_EQ(p.rows.size(), 3u);
    const PlannedRow& r = p.rows[2];
    EXPECT_FALSE(r.decode);
    EXPECT_EQ(r.begin, seqs[2].pos);
    EXPECT_EQ(r.end, std::min<int64_t>(r.begin + 8, 100));  // a quarter of 32, every step
    EXPECT_EQ(r.checkpoint, r.end == 64);
    EXPECT_EQ(p.tokens, 34 + p.prefill_tokens);
    seqs[2].pos = r.end;
  }
  EXPECT_EQ(steps, 13);  // 8 chunks to the checkpoint at 64, then 36 tokens in 5
  // Decode rows that leave more than the minimum: the prefill takes all that is left.
  seqs[2].pos = 0;
  const StepPlan q = plan_step(seqs, 64, 0, 64);
  EXPECT_EQ(q.prefill_tokens, 30);
}

TEST(StepPlan, PrefillEndsAtTheFirstCheckpointAfterItsPosition) {
  const std::vector<int64_t> cuts = {5, 20, 40};
  std::vector<PlanSeq> seqs = {prefilling(20, 50, &cuts)};
  const StepPlan p = plan_step(seqs, 512, 0, 512);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].begin, 20);
  EXPECT_EQ(p.rows[0].end, 40);  // 20 is behind: the next cut is 40
  EXPECT_TRUE(p.rows[0].checkpoint);
  EXPECT_FALSE(p.rows[0].logits);
}

TEST(StepPlan, ACheckpointAtTheBudgetsEndIsStillTaken) {
  const std::vector<int64_t> cuts = {16};
  std::vector<PlanSeq> seqs = {prefilling(0, 50, &cuts)};
  const StepPlan p = plan_step(seqs, 16, 0, 16);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].end, 16);
  EXPECT_TRUE(p.rows[0].checkpoint);
  const StepPlan q = plan_step(seqs, 15, 0, 15);
  EXPECT_EQ(q.rows[0].end, 15);
  EXPECT_FALSE(q.rows[0].checkpoint);
}

TEST(StepPlan, TheLastChunkOfAPromptGivesLogits) {
  const std::vector<int64_t> cuts = {49};
  std::vector<PlanSeq> seqs = {prefilling(49, 50, &cuts)};
  const StepPlan p = plan_step(seqs, 512, 0, 512);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].begin, 49);
  EXPECT_EQ(p.rows[0].end, 50);
  EXPECT_TRUE(p.rows[0].logits);
  EXPECT_FALSE(p.rows[0].checkpoint);
}

TEST(StepPlan, PrefillsRotateFromTheGivenSequence) {
  std::vector<PlanSeq> seqs = {prefilling(0, 100), prefilling(0, 100), prefilling(0, 100)};
  for (size_t first = 0; first < 6; ++first) {
    const StepPlan p = plan_step(seqs, 30, first, 30);
    ASSERT_EQ(p.rows.size(), 1u) << first;  // the whole budget goes to the first one visited
    EXPECT_EQ(p.rows[0].seq, first % 3);
    EXPECT_EQ(p.rows[0].end, 30);
  }
  // A short prompt leaves budget to the next sequence in turn.
  seqs[1] = prefilling(90, 100);
  const StepPlan p = plan_step(seqs, 30, 1, 30);
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0].seq, 1u);
  EXPECT_EQ(p.rows[0].end, 100);
  EXPECT_TRUE(p.rows[0].logits);
  EXPECT_EQ(p.rows[1].seq, 2u);
  EXPECT_EQ(p.rows[1].end, 20);
  EXPECT_EQ(p.tokens, 30);
}

TEST(StepPlan, NothingToRun) {
  EXPECT_TRUE(plan_step({}, 512, 3, 512).rows.empty());
  std::vector<PlanSeq> seqs = {prefilling(10, 10)};  // nothing left to prefill
  EXPECT_TRUE(plan_step(seqs, 512, 0, 512).rows.empty());
}

}  // namespace
}  // namespace rw
