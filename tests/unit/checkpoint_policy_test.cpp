// CheckpointPolicy: where a prefill stops to take snapshots (cut_points) and which snapshots a
// path keeps when it holds too many (thin).
#include "rewind/cache/checkpoint_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace rw {
namespace {

using V = std::vector<int64_t>;

TEST(CheckpointPolicy, GridPlusPromptEnd) {
  CheckpointPolicy p;  // interval 512, at_prompt_end
  EXPECT_EQ(p.cut_points(0, 1500, {}), (V{512, 1024, 1499}));
  // A grid point that is also n-1 appears once.
  EXPECT_EQ(p.cut_points(0, 1025, {}), (V{512, 1024}));
  // Short prompts: only the end; n == 1 has no position in (0, n-1].
  EXPECT_EQ(p.cut_points(0, 10, {}), (V{9}));
  EXPECT_EQ(p.cut_points(0, 2, {}), (V{1}));
  EXPECT_EQ(p.cut_points(0, 1, {}), V{});
  EXPECT_EQ(p.cut_points(0, 0, {}), V{});
}

TEST(CheckpointPolicy, OnlyPositionsAfterFrom) {
  CheckpointPolicy p;
  // The grid is absolute: resuming at 512 does not re-take 512, and a resume at 700 still
  // stops at 1024, not at 700 + 512.
  EXPECT_EQ(p.cut_points(512, 1500, {}), (V{1024, 1499}));
  EXPECT_EQ(p.cut_points(700, 1500, {}), (V{1024, 1499}));
  EXPECT_EQ(p.cut_points(1024, 1500, {}), (V{1499}));
  // Resumed at n-1 (an exact repeat): nothing left to snapshot.
  EXPECT_EQ(p.cut_points(1499, 1500, {}), V{});
  EXPECT_EQ(p.cut_points(1500, 1500, {}), V{});
}

TEST(CheckpointPolicy, BoundariesClampedDedupedSorted) {
  CheckpointPolicy p;
  const V b{2000, 700, 100, 1024, 0, -5, 700};
  // 2000 clamps to n-1; 0 and -5 are not > from; duplicates and grid overlaps appear once.
  EXPECT_EQ(p.cut_points(0, 1500, b), (V{100, 512, 700, 1024, 1499}));
  EXPECT_EQ(p.cut_points(100, 1500, b), (V{512, 700, 1024, 1499}));
  p.at_prompt_end = false;
  EXPECT_EQ(p.cut_points(0, 1500, {}), (V{512, 1024}));
  EXPECT_EQ(p.cut_points(0, 1500, b), (V{100, 512, 700, 1024, 1499}));  // 2000 -> 1499
  const V inside{300};
  EXPECT_EQ(p.cut_points(0, 1500, inside), (V{300, 512, 1024}));
  p.interval = 0;  // no grid
  EXPECT_EQ(p.cut_points(0, 1500, inside), (V{300}));
  p.at_prompt_end = true;
  EXPECT_EQ(p.cut_points(0, 1500, inside), (V{300, 1499}));
}

TEST(CheckpointPolicyDeath, FromOutsidePrompt) {
  CheckpointPolicy p;
  EXPECT_DEATH(p.cut_points(11, 10, {}), "cut_points");
  EXPECT_DEATH(p.cut_points(-1, 10, {}), "cut_points");
}

std::vector<uint8_t> none(size_t k) {
  return std::vector<uint8_t>(k, 0);
}

TEST(CheckpointPolicy, ThinNothingUnderTheLimit) {
  CheckpointPolicy p;
  p.max_per_branch = 4;
  const V pos{10, 20, 30, 40};
  EXPECT_TRUE(p.thin(pos, none(4), 50).empty());
  p.max_per_branch = 0;  // no limit
  const V many{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(p.thin(many, none(8), 8).empty());
}

TEST(CheckpointPolicy, ThinDropsWhatLosesLeast) {
  CheckpointPolicy p;
  p.max_per_branch = 3;
  // 21 sits next to 20 and 22: removing it leaves a gap of 2, far less than any other.
  const V pos{20, 21, 22, 100};
  EXPECT_EQ(p.thin(pos, none(4), 100), (std::vector<size_t>{1}));
  // Even spacing: the one farthest from the tip goes first, then the next.
  const V even{10, 20, 30, 40};
  EXPECT_EQ(p.thin(even, none(4), 40), (std::vector<size_t>{0}));
  p.max_per_branch = 2;
  EXPECT_EQ(p.thin(even, none(4), 40), (std::vector<size_t>{0, 1}));
}

TEST(CheckpointPolicy, ThinKeepsAnchorAndNewest) {
  CheckpointPolicy p;
  p.max_per_branch = 32;
  V pos;
  for (int64_t i = 1; i <= 40; ++i) pos.push_back(512 * i);
  auto keep = none(pos.size());
  keep[2] = 1;  // the anchor at 1536
  const int64_t tip = 40 * 512 + 100;
  const auto drop = p.thin(pos, keep, tip);
  ASSERT_EQ(drop.size(), 8u);
  EXPECT_TRUE(std::is_sorted(drop.begin(), drop.end()));
  for (size_t i : drop) {
    EXPECT_NE(i, 2u);              // anchor
    EXPECT_NE(i, pos.size() - 1);  // newest
    EXPECT_LT(i, 20u);             // the older half pays, the recent half stays dense
  }
  // With only protected snapshots over the limit nothing can go.
  p.max_per_branch = 2;
  const V few{5, 6, 7, 8};
  std::vector<uint8_t> all{1, 1, 1, 0};
  EXPECT_TRUE(p.thin(few, all, 9).empty());  // 8 is the newest: kept anyway
}

TEST(CheckpointPolicy, ThinSpacingGrowsWithDistanceFromTip) {
  CheckpointPolicy p;
  p.max_per_branch = 16;
  V pos;
  for (int64_t i = 1; i <= 400; ++i) pos.push_back(64 * i);
  const int64_t tip = pos.back();
  const auto drop = p.thin(pos, none(pos.size()), tip);
  ASSERT_EQ(pos.size() - drop.size(), 16u);
  V kept;
  for (size_t i = 0, d = 0; i < pos.size(); ++i) {
    if (d < drop.size() && drop[d] == i) {
      ++d;
      continue;
    }
    kept.push_back(pos[i]);
  }
  // Gaps between survivors (from position 0) never shrink going back from the tip.
  V gaps;
  int64_t prev = 0;
  for (int64_t q : kept) gaps.push_back(q - std::exchange(prev, q));
  for (size_t i = 1; i < gaps.size(); ++i) EXPECT_GE(gaps[i - 1], gaps[i]) << "gap " << i;
  EXPECT_GT(gaps.front(), 8 * gaps.back());  // sparse far back, dense near the tip
}

TEST(CheckpointPolicyDeath, ThinRejectsBadInput) {
  CheckpointPolicy p;
  p.max_per_branch = 1;
  const V unsorted{20, 10};
  EXPECT_DEATH(p.thin(unsorted, none(2), 30), "positions");
  const V ok{10, 20};
  EXPECT_DEATH(p.thin(ok, none(1), 30), "keep");
  EXPECT_DEATH(p.thin(ok, none(2), 15), "tip");
}

// The grid widens with the state: a snapshot costs at most 2x the KV of its grid step, in
// multiples of the configured interval, which stays the floor.
TEST(CheckpointPolicy, GridSizedByStateBytes) {
  const size_t MiB = size_t{1} << 20;
  std::string note;
  // Qwen3.5-0.8B: 20.2 MB of state, 24 KiB of KV a token (6 attention layers): 512 stays.
  EXPECT_EQ(CheckpointPolicy::size_grid(512, 20201472, 6 * 2 * 512 * 4, &note), 512);
  // granite-4.0-h-tiny: 55.4 MiB of state, 16 KiB of KV a token: the KV of 3543 tokens, so
  // steps of at least 1772 tokens, 2048 in multiples of 512.
  EXPECT_EQ(CheckpointPolicy::size_grid(512, 58060800, 16384, &note), 2048);
  EXPECT_NE(note.find("interval 2048"), std::string::npos) << note;
  EXPECT_NE(note.find("55.4 MiB"), std::string::npos) << note;
  EXPECT_NE(note.find("3543 tokens"), std::string::npos) << note;
  // Nemotron-Nano-9B-v2: 138.8 MiB, 32 KiB a token: 2221 -> 2560.
  EXPECT_EQ(CheckpointPolicy::size_grid(512, 145539072, 32768), 2560);
  // Exactly at the ratio: 2 x 512 tokens of KV equals the snapshot, 512 suffices.
  EXPECT_EQ(CheckpointPolicy::size_grid(512, 2 * 512 * 100, 100), 512);
  EXPECT_EQ(CheckpointPolicy::size_grid(512, 2 * 512 * 100 + 1, 100), 1024);
  // Nothing to weigh: the base as configured.
  EXPECT_EQ(CheckpointPolicy::size_grid(64, 0, 100, &note), 64);
  EXPECT_NE(note.find("no recurrent state"), std::string::npos) << note;
  EXPECT_EQ(CheckpointPolicy::size_grid(64, MiB, 0, &note), 64);
  EXPECT_NE(note.find("no attention KV"), std::string::npos) << note;
  EXPECT_DEATH(CheckpointPolicy::size_grid(0, MiB, 100), "base > 0");
}

TEST(CheckpointPolicy, KindsOfAPosition) {
  CheckpointPolicy pol;
  pol.interval = 8;
  const V bounds{3, 8, 40};  // 40 lies past the prompt: clamped to n-1 as cut_points does
  const int64_t n = 20, anchor = 3, reply_end = 27;
  EXPECT_EQ(pol.kinds_at(3, n, bounds, anchor, reply_end), kCheckpointBoundary | kCheckpointAnchor);
  EXPECT_EQ(pol.kinds_at(8, n, bounds, anchor, reply_end), kCheckpointGrid | kCheckpointBoundary);
  EXPECT_EQ(pol.kinds_at(16, n, bounds, anchor, reply_end), kCheckpointGrid);
  EXPECT_EQ(pol.kinds_at(19, n, bounds, anchor, reply_end),
            kCheckpointBoundary | kCheckpointPromptEnd);
  EXPECT_EQ(pol.kinds_at(24, n, bounds, anchor, reply_end), kCheckpointGrid);
  EXPECT_EQ(pol.kinds_at(27, n, bounds, anchor, reply_end), kCheckpointReplyEnd);
  EXPECT_EQ(pol.kinds_at(5, n, bounds, anchor, reply_end), 0);
  EXPECT_EQ(pol.kinds_at(0, n, bounds, anchor, reply_end), 0);
  pol.at_prompt_end = false;
  pol.interval = 0;
  EXPECT_EQ(pol.kinds_at(19, n, {}, -1, -1), 0);
  EXPECT_EQ(pol.kinds_at(16, n, {}, -1, -1), 0);
}

}  // namespace
}  // namespace rw
