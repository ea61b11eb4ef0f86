#include "rewind/cache/checkpoint_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "rewind/base/check.h"

namespace rw {

std::vector<int64_t> CheckpointPolicy::cut_points(int64_t from, int64_t n,
                                                  std::span<const int64_t> boundaries) const {
  REWIND_CHECK_MSG(from >= 0 && from <= n,
                   "cut_points(from " + std::to_string(from) + ", n " + std::to_string(n) + ")");
  std::vector<int64_t> out;
  const int64_t last = n - 1;  // the deepest position a prefill of [from, n) may stop at
  if (last <= from) return out;
  if (interval > 0)
    for (int64_t q = (from / interval + 1) * interval; q <= last; q += interval) out.push_back(q);
  for (int64_t b : boundaries) {
    const int64_t q = std::min(b, last);
    if (q > from) out.push_back(q);
  }
  if (at_prompt_end) out.push_back(last);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t CheckpointPolicy::size_grid(int64_t base, size_t snapshot_bytes, size_t kv_bytes_per_token,
                                    std::string* note) {
  REWIND_CHECK(base > 0);
  auto mib = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
    return std::string(buf);
  };
  if (snapshot_bytes == 0 || kv_bytes_per_token == 0) {
    if (note)
      *note = "interval " + std::to_string(base) + " as configured (" +
              (snapshot_bytes == 0 ? "no recurrent state" : "no attention KV to weigh against") +
              ")";
    return base;
  }
  // Tokens whose KV equals one snapshot, then the step that makes the snapshot at most
  // kSnapshotToStepKv times its step's KV, in whole multiples of the base.
  const double tokens =
      static_cast<double>(snapshot_bytes) / static_cast<double>(kv_bytes_per_token);
  const int64_t need = static_cast<int64_t>(std::ceil(tokens / kSnapshotToStepKv));
  const int64_t interval = std::max<int64_t>(1, (need + base - 1) / base) * base;
  if (note)
    *note = "interval " + std::to_string(interval) + ": a snapshot is " +
            mib(static_cast<double>(snapshot_bytes)) + ", the KV of " +
            std::to_string(static_cast<int64_t>(tokens)) + " tokens; grid steps of at least " +
            std::to_string(need) + " tokens keep it under " +
            std::to_string(static_cast<int>(kSnapshotToStepKv)) + "x their KV (configured floor " +
            std::to_string(base) + "; turn boundaries are kept regardless)";
  return interval;
}

namespace {

// One droppable snapshot and its current score gap / dist.
struct Cand {
  int64_t gap;   // next.pos - prev.pos: the gap its removal leaves
  int64_t dist;  // tip - pos, >= 1
  size_t idx;
};

struct CandLess {
  bool operator()(const Cand& a, const Cand& b) const {
    // a.gap / a.dist < b.gap / b.dist, exactly.
    const __int128 l = static_cast<__int128>(a.gap) * b.dist;
    const __int128 r = static_cast<__int128>(b.gap) * a.dist;
    if (l != r) return l < r;
    return a.idx < b.idx;  // older first
  }
};

}  // namespace

std::vector<size_t> CheckpointPolicy::thin(std::span<const int64_t> positions,
                                           std::span<const uint8_t> keep, int64_t tip) const {
  const size_t k = positions.size();
  REWIND_CHECK(keep.size() == k);
  std::vector<size_t> dropped;
  if (max_per_branch <= 0 || static_cast<int64_t>(k) <= max_per_branch) return dropped;
  for (size_t i = 0; i < k; ++i) {
    REWIND_CHECK(positions[i] > 0 && positions[i] <= tip);
    REWIND_CHECK(i == 0 || positions[i - 1] < positions[i]);
  }
  // Doubly linked list over the survivors; prev of the first is the virtual position 0.
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> prev(k), next(k);
  for (size_t i = 0; i < k; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == k ? kNone : i + 1;
  }
  auto droppable = [&](size_t i) { return !keep[i] && i + 1 != k; };  // k-1: the newest
  auto cand = [&](size_t i) {
    const int64_t lo = prev[i] == kNone ? 0 : positions[prev[i]];
    return Cand{positions[next[i]] - lo, tip - positions[i], i};
  };
  std::set<Cand, CandLess> heap;
  std::vector<Cand> cur(k);
  for (size_t i = 0; i < k; ++i)
    if (droppable(i)) heap.insert(cur[i] = cand(i));

  size_t alive = k;
  while (static_cast<int64_t>(alive) > max_per_branch && !heap.empty()) {
    const size_t i = heap.begin()->idx;
    heap.erase(heap.begin());
    dropped.push_back(i);
    --alive;
    const size_t p = prev[i], q = next[i];  // q exists: the newest is never dropped
    if (p != kNone) next[p] = q;
    prev[q] = p;
    for (size_t j : {p, q}) {
      if (j == kNone || !droppable(j)) continue;
      heap.erase(cur[j]);
      heap.insert(cur[j] = cand(j));
    }
  }
  std::sort(dropped.begin(), dropped.end());
  return dropped;
}

uint8_t CheckpointPolicy::kinds_at(int64_t q, int64_t n, std::span<const int64_t> boundaries,
                                   int64_t anchor, int64_t reply_end) const {
  uint8_t k = 0;
  if (q <= 0) return k;
  if (interval > 0 && q % interval == 0) k |= kCheckpointGrid;
  for (int64_t b : boundaries)
    if (std::min(b, n - 1) == q) k |= kCheckpointBoundary;
  if (anchor > 0 && q == anchor) k |= kCheckpointAnchor;
  if (at_prompt_end && q == n - 1) k |= kCheckpointPromptEnd;
  if (reply_end > 0 && q == reply_end) k |= kCheckpointReplyEnd;
  return k;
}

}  // namespace rw
