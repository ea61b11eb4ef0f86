// The prefix cache: a radix tree over token ids that remembers, for token histories computed
// before, the KV pages covering them and recurrent-state snapshots taken along them, so a new
// prompt can resume at the deepest usable position instead of being prefilled from 0
// (docs/DESIGN.md section 3). It knows tokens, pages and snapshots, never models.
//
// Structure. Every node but the root owns one edge: the tokens of positions [start, end) and
// the KV pages covering them (page i covers positions [i*page_tokens, (i+1)*page_tokens); a
// node references pages start/page_tokens .. ceil(end/page_tokens)-1, shared with sequences
// and other nodes, never copied). Where an edge starts or ends inside a page, that page is
// referenced by both nodes; when the later branch wrote into its own copy of that page
// (copy-on-write in SequenceState), its node holds the copy. Resuming at p takes page i from
// the deepest node on the path whose range intersects [i*page_tokens, min((i+1)*page_tokens,
// p)): that node's copy holds every valid row of the prefix. Snapshots hang on the node whose
// range (start, end] holds their position, so a snapshot never outlives the pages below it:
// evicting a node drops its snapshots, and a node exists only while its ancestors do. Children
// sit in a hash map keyed by their first token, so a lookup costs O(prompt length), not
// O(cache size).
//
// Lookup of n tokens: walk to the longest common prefix L; resume at the deepest snapshot at
// p <= min(L, n-1) on that path (never one past the divergence or on another branch). Without
// recurrent layers p = min(L, n-1), no snapshot. At least one prompt token is always left to
// run, so there are logits to sample. The result holds the pages of [0, p), the snapshot at p
// and a lease that pins both until the request is done.
//
// Budget and eviction. One byte budget covers pages (KvPage::bytes(), counted once per
// distinct page object the tree references) plus snapshots (Snapshot::bytes()). After each
// insert (and when a lease is released) the cache evicts while over budget, least recently
// used first, among unpinned leaves and unpinned snapshots (what one insert or lookup touched
// goes snapshots first, the shallower first, then nodes: a fresh leaf over budget keeps its
// deepest snapshot rather than going whole). Evicting a snapshot frees its
// bytes; evicting a leaf frees its snapshots and the pages no other node references, and may
// turn its parent into a leaf. With recurrent layers a leaf without snapshots can never be a
// resume point (its pages lie past every snapshot on its path), so such dead leaves go first,
// before any LRU order. Pinned nodes and snapshots are never evicted: if everything left is
// pinned, the cache stays over budget (CacheStats::over_budget) rather than break a request.
// "Used" means: a lookup touches every node on the matched path and the snapshot it resumed
// from; an insert touches the inserted path and its snapshots. Token ids (4 bytes a token,
// shared between the halves of a split edge) and tree bookkeeping are not in the budget.
//
// Thinning. An insert keeps at most policy.max_per_branch snapshots on the inserted path
// (root to the history's end), dropping per CheckpointPolicy::thin; the anchor and pinned
// snapshots are never thinned. Only the inserted path is thinned: another branch that shares
// the prefix where new snapshots landed may hold more until it is inserted again.
//
// Ownership and thread-safety: single-threaded, owned by the engine thread; leases must be
// released on that thread. The tree shares pages and snapshots by shared_ptr, so anything
// handed out (LookupResult::pages/snapshot) stays valid after eviction or clear(); eviction
// only decides what the tree keeps. Pages handed to insert must not be written afterwards
// except through copy-on-write (SequenceState::prepare_append does this: the tree's reference
// makes them shared). A lease may outlive the cache (its release is then a no-op).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "rewind/cache/cache_tier.h"
#include "rewind/cache/checkpoint_policy.h"
#include "rewind/state/sequence_state.h"

namespace rw {

// Exact: L == n (the prompt is a repeat or a prefix of a cached history). Extension: L equals
// the full length of an inserted history, L < n. Checkpoint: any other hit (resumed from a
// snapshot inside, or at, a path that diverged). Miss: p == 0 (takes precedence).
enum class HitKind { Miss, Exact, Extension, Checkpoint };
const char* hit_kind_name(HitKind k);

struct CacheStats {
  // Counters (cumulative; clear() keeps them).
  int64_t lookups = 0;
  int64_t hits_exact = 0;
  int64_t hits_extension = 0;
  int64_t hits_checkpoint = 0;
  int64_t misses = 0;
  int64_t tokens_reused = 0;  // sum of p
  int64_t tokens_rerun = 0;   // sum of n - p
  int64_t lost_to_spacing =
      0;  // sum of min(L, n-1) - p: tokens matched but re-run for want of a snapshot
  int64_t evictions_nodes = 0;
  int64_t evictions_snapshots = 0;  // snapshots evicted alone or with their leaf (budget)
  int64_t thinned_snapshots = 0;    // snapshots dropped by thinning (max_per_branch)
  int64_t inserts = 0;
  int64_t over_budget_events = 0;  // inserts/releases that ended over budget (all pinned)
  // The tier under RAM (Options::tier): lookups it served with a deeper resume point than RAM
  // had, lookups it could not improve, the tokens it added to resume points, time spent loading.
  int64_t tier_hits = 0;
  int64_t tier_misses = 0;
  int64_t tier_tokens = 0;
  double tier_load_ms = 0;
  std::vector<TierStats> tiers;  // every tier's own figures, top first (disk, redis; tier_named)
  // Gauges (now).
  size_t bytes_pages = 0;
  size_t bytes_snapshots = 0;
  size_t budget_bytes = 0;
  int64_t n_pages = 0;  // distinct page objects referenced by the tree
  int64_t n_snapshots = 0;
  int64_t n_nodes = 0;  // excluding the root
  int64_t active_leases = 0;
  bool over_budget = false;  // bytes() > budget_bytes
};

// A bounded picture of the tree for people (/v1/cache/tree): every node with its edge, pages,
// snapshots and LRU standing, or, past `max_nodes`, the biggest subtrees with the rest of each
// parent's children folded into one aggregate entry.
struct CacheTreeSnapshot {
  int64_t pos = 0;
  uint8_t kinds = 0;  // CheckpointKind bits (0: inserted without kinds)
  size_t bytes = 0;
  int pins = 0;            // running requests resumed from it
  uint64_t age = 0;        // cache operations (lookups and inserts) since it was last used
  int64_t evict_rank = 0;  // 1: the next thing eviction takes; 0: pinned, never evicted now
};

struct CacheTreeNode {
  uint64_t id = 0;      // stable while the node exists (a split gives the upper half a new id)
  int64_t parent = -1;  // index into CacheTree::nodes; -1: a child of the root
  int64_t start = 0, end = 0;  // the edge's positions [start, end)
  int64_t n_pages = 0;         // pages the node references (none for an aggregate)
  int64_t shared_pages = 0;    // of those, pages another node references too (split boundaries)
  size_t kv_bytes = 0;         // bytes of the node's pages (a shared page counts in each node)
  std::vector<CacheTreeSnapshot> snaps;  // ascending positions
  int pins = 0;                          // leases whose resume point lies on this node
  bool pinned = false;     // a lease lies here or below: the node cannot be evicted now
  uint64_t age = 0;        // as CacheTreeSnapshot::age
  int64_t evict_rank = 0;  // as CacheTreeSnapshot::evict_rank (only leaves can be evicted)
  bool terminal = false;   // an inserted history ends at `end`
  // The subtree rooted here: nodes, tokens (sum of edge lengths), snapshots, bytes (pages by
  // reference, as kv_bytes, plus snapshots). For an aggregate: the folded subtrees together.
  int64_t sub_nodes = 0, sub_tokens = 0, sub_snapshots = 0;
  size_t sub_bytes = 0;
  // An aggregate stands for `sub_nodes` nodes under `parent` that are not listed; its start is
  // the parent's end and its end the deepest position among them. id 0.
  bool aggregate = false;
};

struct CacheTree {
  std::vector<CacheTreeNode> nodes;  // pre-order (a parent before its children; older first)
  int64_t total_nodes = 0;           // in the tree, root excluded
  int64_t listed_nodes = 0;          // of them, listed one by one
  uint64_t version = 0;              // changes whenever the tree or its LRU standing does
  // Bytes of every snapshot in the tree by its main kind: index i for the highest set bit
  // (1 << i) of its CheckpointKind bits (reply end over prompt end over anchor over boundary
  // over grid), index 5 for none.
  std::array<size_t, 6> snapshot_bytes_by_kind{};
  // The path of the `highlight` tokens: listed node indices from the root down, and how many
  // tokens of them the tree holds.
  std::vector<int64_t> path;
  int64_t path_matched = 0;
};

namespace detail {
struct CacheCore;
struct CacheNode;
struct CacheSnap;
}  // namespace detail

// RAII pin: while alive, the nodes on the leased path [0, p) and the snapshot used are not
// evicted (nor thinned). Move-only; release() is idempotent and also runs in the destructor.
// Empty (pins nothing) for a miss. Must be released on the engine thread.
class CacheLease {
 public:
  CacheLease() = default;
  ~CacheLease() { release(); }
  CacheLease(CacheLease&& o) noexcept { *this = std::move(o); }
  CacheLease& operator=(CacheLease&& o) noexcept;
  CacheLease(const CacheLease&) = delete;
  CacheLease& operator=(const CacheLease&) = delete;

  void release();
  bool active() const { return node_ != nullptr; }

 private:
  friend struct detail::CacheCore;
  std::weak_ptr<detail::CacheCore> core_;
  uint64_t epoch_ = 0;                 // a lease from before clear() releases nothing
  detail::CacheNode* node_ = nullptr;  // the node holding position p (pins its whole path)
  detail::CacheSnap* snap_ = nullptr;  // the snapshot at p, or null
};

struct LookupResult {
  int64_t common_prefix = 0;  // L: longest common prefix with any cached path
  int64_t resume_pos = 0;     // p: deepest usable snapshot position <= min(L, n-1)
  HitKind kind = HitKind::Miss;
  std::vector<PagePtr> pages;                // pages covering [0, p): ceil(p/page_tokens) entries
  std::shared_ptr<const Snapshot> snapshot;  // at p (null if p == 0 or no recurrent layers)
  CacheLease lease;
  int64_t tier_tokens = 0;  // of p, tokens brought back from the tier by this lookup (0: RAM)
};

class PrefixCache {
 public:
  struct Options {
    size_t budget_bytes = 1ull << 30;
    int64_t page_tokens = 64;
    bool has_recurrent = true;  // false: pure attention, resume anywhere without snapshots
    bool has_attention = true;  // false: no KV pages (insert takes none, lookup returns none)
    CheckpointPolicy policy;
    // A tier under RAM (cache/cache_tier.h), or null. Every published page and checkpoint is
    // written behind to it, so what eviction drops from RAM stays there; a lookup that finds a
    // deeper resume point in the tier than in RAM loads it back into the tree first. `shape`
    // (required with a tier) lays out what is read back.
    std::shared_ptr<CacheTier> tier;
    StateShape shape;
    // What a page holds, for reports only (the budget counts each page's own bytes()): its K/V
    // types and bytes (StateShape::page_bytes).
    KvTypes kv_types;
    size_t page_bytes = 0;
  };

  explicit PrefixCache(const Options& opt);
  ~PrefixCache();
  PrefixCache(PrefixCache&&) noexcept;
  PrefixCache& operator=(PrefixCache&&) noexcept;
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  const Options& options() const;

  // The resume point for a prompt (see the header comment). O(n + pages of [0, p)); touches the
  // matched path (LRU) and counts the lookup in the stats.
  LookupResult lookup(std::span<const int32_t> tokens);

  // Publishes a sequence's token history [0, n) with its page table (valid for [0, n),
  // ceil(n/page_tokens) entries, shared, never copied) and the snapshots taken for it (any
  // positions in [0, n], ascending; each snapshot->pos is its position; position 0 is ignored:
  // resuming at 0 needs none). `anchor` (or -1) is the position of the anchor checkpoint (end
  // of the system prompt) that thinning never drops; it marks the snapshot at that position
  // if there is one. Nodes and snapshots already on the common prefix are reused (a snapshot
  // at a position that already has one is not replaced: both hold the same bits). New nodes
  // and snapshots are added, the path is thinned, then eviction runs to fit the budget.
  // Preconditions (checked): page count, non-null pages and snapshots, snapshots ascending and
  // <= n, no snapshots when has_recurrent is false. O(n + snapshots on the path * log).
  // `kinds` (empty, or one entry per snapshot): CheckpointKind bits kept for dump(); a
  // snapshot that already exists gains the new bits.
  void insert(std::span<const int32_t> tokens, const std::vector<PagePtr>& pages,
              std::span<const std::shared_ptr<const Snapshot>> snaps, int64_t anchor = -1,
              std::span<const uint8_t> kinds = {});

  CacheStats stats() const;
  // The tree for display (CacheTree): at most about max_nodes listed (the path of `highlight`
  // is always listed, so it may pass that by the path's length), the rest aggregated. Changes
  // nothing (no LRU touch). O(cache size + listed log listed).
  CacheTree dump(int64_t max_nodes, std::span<const int32_t> highlight = {}) const;
  // Bytes of distinct pages referenced by the tree + bytes of the snapshots in it, exactly. O(1).
  size_t bytes() const;
  // Changes the budget and evicts down to it (as after an insert).
  void set_budget_bytes(size_t budget);
  // Drops every node and snapshot (pinned ones too: outstanding leases become no-ops; what
  // they handed out stays valid). Cumulative counters are kept.
  void clear();

  // For tests: bytes() recomputed by walking the tree (distinct page objects + distinct
  // snapshots). O(cache size).
  size_t bytes_by_walk() const;
  // For tests: checks every structural invariant (ranges, keys, page counts and reference
  // counts, snapshot placement, LRU listing, byte and node counts) with REWIND_CHECK.
  // O(cache size).
  void check_invariants() const;

 private:
  std::shared_ptr<detail::CacheCore> core_;  // sole owner; leases hold weak references
};

}  // namespace rw
