// Where recurrent-state checkpoints (snapshots) are taken, and which ones a path keeps.
//
// A model with recurrent layers can only resume a cached prompt at a position where a snapshot
// exists, so prefill stops at a few chosen positions to take one. This object names every rule
// as an option with a default (docs/DESIGN.md section 3):
//   - a grid of absolute positions, multiples of `interval`;
//   - boundaries the caller reports (the chat template's anchor = end of the system prompt, turn
//     starts, the end of a generated reply);
//   - the prompt end n-1, so an exact repeat of the prompt re-runs one token only;
//   - at most `max_per_branch` snapshots along one root-to-leaf path of the prefix cache, with
//     thinning (below) deciding which to drop.
// Where checkpoints go is purely a cost question: a resumed request is bit-identical to a cold
// one wherever it resumed (docs/ARCHITECTURE.md), so nothing here affects results.
//
// Thinning. When a path holds more than max_per_branch snapshots, snapshots are dropped one at a
// time until it fits. The newest (largest position) and every protected one (the anchor, and in
// the cache any snapshot pinned by a running request) are never dropped. Of the others, each
// snapshot s with neighbours prev and next still on the path (prev = position 0 when s is the
// first: resuming at 0 needs no snapshot) scores
//     score(s) = (next.pos - prev.pos) / (tip - s.pos)
// i.e. the gap its removal would leave, divided by its distance from the tip (the path's end).
// The smallest score is dropped first (ties: the older one). A gap far back is cheap to lose,
// one near the tip expensive, so the survivors settle into spacing roughly proportional to the
// distance from the tip: dense near the tip, where the next edit is likely, sparse far back.
//
// Grid spacing by state size. A snapshot costs the model's whole recurrent state, whatever the
// interval; the KV of a grid step costs interval x the KV bytes of a token. Where the state is
// large (Mamba2 hybrids: 55 MiB for granite-4.0-h-tiny, the KV of ~3.5k tokens), a 512-token grid
// would spend most of the budget on snapshots that each save at most 512 tokens of prefill.
// size_grid widens the grid until a snapshot costs at most kSnapshotToStepKv times the KV its
// step adds (rounded up to a multiple of the configured interval, which stays the floor).
// Boundaries (turn starts, the anchor) and the prompt end are kept whatever the grid, so edits
// at turn starts still resume exactly there.
//
// Value type; no state beyond its options; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rw {

// What a checkpoint is for, as bits (one position can be several: a grid point that is also a
// turn start). The cache keeps them with each snapshot for /v1/cache/tree; they change nothing
// about lookup, eviction or thinning.
enum CheckpointKind : uint8_t {
  kCheckpointGrid = 1,       // a multiple of the grid interval
  kCheckpointBoundary = 2,   // a message start the chat template reported
  kCheckpointAnchor = 4,     // the end of the system prompt (never thinned)
  kCheckpointPromptEnd = 8,  // n-1 of a prompt
  kCheckpointReplyEnd = 16,  // the end of a generated reply
};

struct CheckpointPolicy {
  int64_t interval = 512;  // grid: positions that are multiples of interval (absolute); <= 0: none
  int64_t max_per_branch = 32;  // limit of snapshots along one root-to-leaf path; <= 0: no limit
  bool at_prompt_end = true;    // snapshot at n-1 (so an exact repeat re-runs one token)
  // Widen `interval` by size_grid when the engine starts. serve and cache-bench set it unless
  // the user gave the interval; library users (and tests) get the interval exactly as set.
  bool size_by_state = false;
  // What sizing chose and why, for /v1/cache and cache-bench ("" before sizing).
  std::string grid_note;

  // A snapshot may cost at most this many times the KV of the grid step it ends.
  static constexpr double kSnapshotToStepKv = 2.0;
  // The grid interval for a model whose snapshot is `snapshot_bytes` and whose KV grows by
  // `kv_bytes_per_token`: the smallest multiple of `base` (> 0) with
  // snapshot_bytes <= kSnapshotToStepKv * interval * kv_bytes_per_token; `base` when there is no
  // recurrent state or no KV (a pure recurrent model: nothing to weigh against). `note`
  // (optional) receives one line saying why.
  static int64_t size_grid(int64_t base, size_t snapshot_bytes, size_t kv_bytes_per_token,
                           std::string* note = nullptr);

  // Positions (in (0, n-1], ascending, unique) where a prefill of prompt tokens [from, n) must
  // stop to take a snapshot: grid points in (from, n-1]; the given boundaries, each clamped to
  // at most n-1 and kept only if > from (in any order, duplicates allowed); and n-1 when
  // at_prompt_end. Empty when n - 1 <= from. Precondition: 0 <= from, from <= n (checked).
  // Cost: O((n - from) / interval + boundaries log boundaries).
  std::vector<int64_t> cut_points(int64_t from, int64_t n,
                                  std::span<const int64_t> boundaries) const;

  // Thinning (see the header comment). `positions`: the snapshots on one path, ascending and
  // unique, all > 0. `keep`: same length, non-zero marks a snapshot that must stay (anchor,
  // pinned). `tip`: the path's end position, >= every position. Returns the indices (into
  // `positions`, ascending) to drop so that at most max_per_branch remain; fewer are dropped
  // when protected snapshots alone exceed the limit. Cost: O(k log k) for k positions.
  std::vector<size_t> thin(std::span<const int64_t> positions, std::span<const uint8_t> keep,
                           int64_t tip) const;

  // The CheckpointKind bits of a checkpoint at q for a request of `n` prompt tokens with these
  // boundaries (clamped to n-1 as cut_points does) and anchor (-1: none), whose reply ended at
  // `reply_end` (-1: no reply). 0 when no rule put one there. Cost: O(boundaries).
  uint8_t kinds_at(int64_t q, int64_t n, std::span<const int64_t> boundaries, int64_t anchor,
                   int64_t reply_end) const;
};

}  // namespace rw
