// PrefixCache: the radix tree over token histories, its resume points (deepest usable
// snapshot, at least one token left), page selection at branch boundaries, budget, LRU
// eviction, pins, thinning, stats; and a randomized property test with fake sequence states
// whose every KV row and recurrent state encode the exact token history that produced them,
// so any wrong page, wrong snapshot or wrong resume point shows up as different bytes.
#include "rewind/cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace rw {
namespace {

using Tokens = std::vector<int32_t>;
using SnapList = std::vector<std::shared_ptr<const Snapshot>>;
constexpr int64_t kPT = 4;  // page_tokens in the fake states

// ---- A fake model ------------------------------------------------------------------------
// Hybrid shape: 1 attention layer (kv_dim 2), 1 recurrent layer whose conv window holds a
// rolling hash of the tokens consumed and whose SSM holds the position. Each token's K/V row
// holds the hash of the history up to and including it. The hybrid model derives rows from
// its recurrent state (a wrong snapshot spreads into every later row), the pure-attention one
// from the tokens.
struct Sim {
  StateShape shape;
  bool recurrent;

  explicit Sim(bool rec) : recurrent(rec) {
    shape.n_attn_layers = 1;
    shape.kv_dim = 2;
    shape.n_rec_layers = rec ? 1 : 0;
    shape.conv_rows = 1;
    shape.conv_dim = 15;
    shape.ssm_layer_floats = 1;  // [1, 1, 1]
    shape.page_tokens = kPT;
  }

  static uint32_t step(uint32_t h, int32_t tok) {
    uint64_t x = (static_cast<uint64_t>(h) << 32) ^ static_cast<uint32_t>(tok + 1);
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return static_cast<uint32_t>(x ^ (x >> 31));
  }
  static uint32_t hash(std::span<const int32_t> t, int64_t q) {  // of tokens [0, q)
    uint32_t h = 0;
    for (int64_t i = 0; i < q; ++i) h = step(h, t[static_cast<size_t>(i)]);
    return h;
  }
  static void put(float* dst, uint32_t u) { std::memcpy(dst, &u, 4); }
  static uint32_t get(const float* src) {
    uint32_t u;
    std::memcpy(&u, src, 4);
    return u;
  }
  static void row_k(float* r, uint32_t h, int64_t q) {
    put(r, h);
    put(r + 1, static_cast<uint32_t>(q));
  }
  static void row_v(float* r, uint32_t h, int64_t q) {
    put(r, h ^ 0x5bd1e995u);
    put(r + 1, static_cast<uint32_t>(q) * 3 + 1);
  }

  // Runs tokens [st.n_pos(), to) of t.
  void run(SequenceState& st, std::span<const int32_t> t, int64_t to) const {
    const int64_t from = st.n_pos();
    if (to == from) return;
    uint32_t h = recurrent ? get(st.conv(0)) : hash(t, from);
    if (recurrent) {
      EXPECT_EQ(get(st.ssm(0)), static_cast<uint32_t>(from));
    }
    st.prepare_append(to - from);
    for (int64_t q = from; q < to; ++q) {
      h = step(h, t[static_cast<size_t>(q)]);
      float k[2], v[2];
      row_k(k, h, q);
      row_v(v, h, q);
      st.write_kv(0, q, k, v);
    }
    if (recurrent) {
      put(st.conv(0), h);
      put(st.ssm(0), static_cast<uint32_t>(to));
    }
    st.commit_append(to - from);
  }

  SequenceState cold(std::span<const int32_t> t) const {
    SequenceState st(shape);
    run(st, t, static_cast<int64_t>(t.size()));
    return st;
  }

  // The resume point handed out equals a cold computation of prompt[0, p).
  void expect_exact(const LookupResult& r, std::span<const int32_t> prompt) const {
    const int64_t p = r.resume_pos;
    ASSERT_EQ(static_cast<int64_t>(r.pages.size()), (p + kPT - 1) / kPT);
    uint32_t h = 0;
    for (int64_t q = 0; q < p; ++q) {
      h = step(h, prompt[static_cast<size_t>(q)]);
      float k[2], v[2];
      row_k(k, h, q);
      row_v(v, h, q);
      const KvPage& pg = *r.pages[static_cast<size_t>(q / kPT)];
      float kr[2], vr[2];
      pg.read_k(0, q % kPT, kr);
      pg.read_v(0, q % kPT, vr);
      ASSERT_EQ(std::memcmp(kr, k, 8), 0) << "K row " << q << " of p " << p;
      ASSERT_EQ(std::memcmp(vr, v, 8), 0) << "V row " << q << " of p " << p;
    }
    if (!recurrent || p == 0) {
      EXPECT_EQ(r.snapshot, nullptr);
      return;
    }
    ASSERT_NE(r.snapshot, nullptr);
    EXPECT_EQ(r.snapshot->pos, p);
    EXPECT_EQ(get(r.snapshot->rec.data()), h);
    EXPECT_EQ(get(r.snapshot->rec.data() + shape.conv_floats()), static_cast<uint32_t>(p));
  }
};

PrefixCache::Options opts(bool recurrent, size_t budget = size_t{1} << 30) {
  PrefixCache::Options o;
  o.budget_bytes = budget;
  o.page_tokens = kPT;
  o.has_recurrent = recurrent;
  o.policy.interval = 2;
  o.policy.max_per_branch = 0;
  return o;
}

int64_t lcp(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs `prompt` as the engine would: lookup, resume, prefill cut at `cuts` (snapshot at each),
// then insert with the snapshots. Returns the sequence state (for page identity checks).
struct Served {
  LookupResult r;
  SequenceState st;
  SnapList snaps;
};
Served serve(const Sim& sim, PrefixCache& cache, const Tokens& prompt, std::vector<int64_t> cuts,
             int64_t anchor = -1) {
  Served s{cache.lookup(prompt), SequenceState(sim.shape), {}};
  sim.expect_exact(s.r, prompt);
  s.st.resume(s.r.pages, s.r.snapshot.get(), s.r.resume_pos);
  for (int64_t c : cuts) {
    if (c <= s.st.n_pos()) continue;
    sim.run(s.st, prompt, c);
    if (sim.recurrent) s.snaps.push_back(s.st.take_snapshot());
  }
  sim.run(s.st, prompt, static_cast<int64_t>(prompt.size()));
  EXPECT_TRUE(s.st.same_contents(sim.cold(prompt)));
  cache.insert(prompt, s.st.pages(), s.snaps, anchor);
  cache.check_invariants();
  EXPECT_EQ(cache.bytes(), cache.bytes_by_walk());
  return s;
}

// Inserts `t` computed cold, with snapshots at `at`.
void insert_cold(const Sim& sim, PrefixCache& cache, const Tokens& t, std::vector<int64_t> at,
                 int64_t anchor = -1) {
  SequenceState st(sim.shape);
  SnapList snaps;
  for (int64_t q : at) {
    sim.run(st, t, q);
    snaps.push_back(st.take_snapshot());
  }
  sim.run(st, t, static_cast<int64_t>(t.size()));
  cache.insert(t, st.pages(), snaps, anchor);
  cache.check_invariants();
}

const Tokens kA{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 10 tokens, 3 pages

// ---- Resume points -------------------------------------------------------------------------

TEST(PrefixCache, PureAttentionResumesAtLWithoutSnapshot) {
  Sim sim(false);
  PrefixCache cache(opts(false));
  insert_cold(sim, cache, kA, {});
  const Tokens edit{1, 2, 3, 4, 5, 6, 7, 99, 98};
  auto r = cache.lookup(edit);
  EXPECT_EQ(r.common_prefix, 7);
  EXPECT_EQ(r.resume_pos, 7);
  EXPECT_EQ(r.kind, HitKind::Checkpoint);
  EXPECT_EQ(r.pages.size(), 2u);
  sim.expect_exact(r, edit);
  // Exact repeat: one token left to run.
  r = cache.lookup(kA);
  EXPECT_EQ(r.common_prefix, 10);
  EXPECT_EQ(r.resume_pos, 9);
  EXPECT_EQ(r.kind, HitKind::Exact);
  sim.expect_exact(r, kA);
  // Extension: everything cached is reused.
  const Tokens ext = concat(kA, {11, 12});
  r = cache.lookup(ext);
  EXPECT_EQ(r.resume_pos, 10);
  EXPECT_EQ(r.kind, HitKind::Extension);
  sim.expect_exact(r, ext);
  // A prompt that is a prefix of the cached one.
  const Tokens pre{1, 2, 3, 4, 5};
  r = cache.lookup(pre);
  EXPECT_EQ(r.common_prefix, 5);
  EXPECT_EQ(r.resume_pos, 4);
  EXPECT_EQ(r.kind, HitKind::Exact);
  // Miss.
  const Tokens other{50, 1, 2};
  r = cache.lookup(other);
  EXPECT_EQ(r.common_prefix, 0);
  EXPECT_EQ(r.resume_pos, 0);
  EXPECT_EQ(r.kind, HitKind::Miss);
  EXPECT_TRUE(r.pages.empty());
  EXPECT_FALSE(r.lease.active());
  // A one-token prompt has nothing to reuse: its only token must run.
  const Tokens one{1};
  EXPECT_EQ(cache.lookup(one).resume_pos, 0);
  EXPECT_EQ(cache.lookup(Tokens{}).resume_pos, 0);
}

TEST(PrefixCache, HybridPicksDeepestUsableSnapshot) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  insert_cold(sim, cache, kA, {2, 4, 6, 8, 10});
  auto r = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 7, 99});  // diverges at 7
  EXPECT_EQ(r.common_prefix, 7);
  EXPECT_EQ(r.resume_pos, 6);
  EXPECT_EQ(r.kind, HitKind::Checkpoint);
  sim.expect_exact(r, Tokens{1, 2, 3, 4, 5, 6, 7, 99});
  r = cache.lookup(Tokens{1, 2, 3, 4, 99});  // diverges exactly at a snapshot
  EXPECT_EQ(r.resume_pos, 4);
  // Exact repeat: the snapshot at 10 would leave nothing to run; 9 has none, so 8.
  r = cache.lookup(kA);
  EXPECT_EQ(r.resume_pos, 8);
  EXPECT_EQ(r.kind, HitKind::Exact);
  EXPECT_EQ(cache.stats().lost_to_spacing, 1 + 0 + 1);
  // Extension: resumes at the end of the cached history.
  const Tokens ext = concat(kA, {11});
  r = cache.lookup(ext);
  EXPECT_EQ(r.resume_pos, 10);
  EXPECT_EQ(r.kind, HitKind::Extension);
  sim.expect_exact(r, ext);
  // Before the first snapshot: nothing usable.
  r = cache.lookup(Tokens{1, 99});
  EXPECT_EQ(r.common_prefix, 1);
  EXPECT_EQ(r.resume_pos, 0);
  EXPECT_EQ(r.kind, HitKind::Miss);
  EXPECT_EQ(r.snapshot, nullptr);
}

TEST(PrefixCache, ExactRepeatRerunsOneTokenWhenPromptEndIsSnapshotted) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  CheckpointPolicy pol;
  pol.interval = 4;
  const auto cuts = pol.cut_points(0, static_cast<int64_t>(kA.size()), {});
  EXPECT_EQ(cuts, (std::vector<int64_t>{4, 8, 9}));
  auto first = serve(sim, cache, kA, cuts);
  EXPECT_EQ(first.r.kind, HitKind::Miss);
  auto again = serve(sim, cache, kA, pol.cut_points(9, 10, {}));
  EXPECT_EQ(again.r.resume_pos, 9);
  EXPECT_EQ(again.r.kind, HitKind::Exact);
  const auto s = cache.stats();
  EXPECT_EQ(s.tokens_reused, 9);
  EXPECT_EQ(s.tokens_rerun, 10 + 1);
}

TEST(PrefixCache, NeverASnapshotFromAnotherBranch) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  insert_cold(sim, cache, kA, {2, 4, 6, 8});
  const Tokens b{1, 2, 3, 4, 5, 60, 61, 62, 63, 64};  // shares [0, 5) with kA
  insert_cold(sim, cache, b, {6, 7, 8});
  EXPECT_EQ(cache.stats().n_nodes, 3);
  // Diverges from both at 6 along kA: b's snapshot at 6 holds other tokens.
  const Tokens c{1, 2, 3, 4, 5, 6, 70};
  auto r = cache.lookup(c);
  EXPECT_EQ(r.common_prefix, 6);
  EXPECT_EQ(r.resume_pos, 6);
  sim.expect_exact(r, c);
  const Tokens d{1, 2, 3, 4, 5, 60, 61, 70};
  r = cache.lookup(d);
  EXPECT_EQ(r.resume_pos, 7);
  sim.expect_exact(r, d);
  const Tokens e{1, 2, 3, 4, 5, 70};  // diverges at the branch point: kA's snapshot at 4
  r = cache.lookup(e);
  EXPECT_EQ(r.common_prefix, 5);
  EXPECT_EQ(r.resume_pos, 4);
  sim.expect_exact(r, e);
}

// ---- Pages at branch boundaries ------------------------------------------------------------

TEST(PrefixCache, BoundaryPageComesFromTheDeepestNode) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  auto a = serve(sim, cache, kA, {2, 4, 6, 8, 9});
  // b resumes at 6 (inside page 1 = positions [4, 8)), so its first write copies page 1.
  const Tokens b{1, 2, 3, 4, 5, 6, 40, 41, 42, 43, 44};
  auto sb = serve(sim, cache, b, {8, 10});
  EXPECT_EQ(sb.r.resume_pos, 6);
  ASSERT_EQ(sb.st.pages().size(), 3u);
  EXPECT_EQ(sb.st.pages()[0], a.st.pages()[0]);  // shared, untouched
  EXPECT_NE(sb.st.pages()[1], a.st.pages()[1]);  // copied on write
  // The tree now holds both copies of page 1: [0,6) and kA's [6,10) reference a's, b's
  // [6,11) its own. Positions 6 and 7 differ between them.
  EXPECT_EQ(cache.stats().n_pages, 3 + 2);
  // Resuming b at 8 needs b's copy of page 1 (rows 6, 7 are b's).
  auto r = cache.lookup(b);
  EXPECT_EQ(r.resume_pos, 10);
  EXPECT_EQ(r.pages[1], sb.st.pages()[1]);
  sim.expect_exact(r, b);
  r = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 40, 41, 42, 99});
  EXPECT_EQ(r.resume_pos, 8);
  EXPECT_EQ(r.pages[1], sb.st.pages()[1]);
  sim.expect_exact(r, Tokens{1, 2, 3, 4, 5, 6, 40, 41, 42, 99});
  // Resuming kA at 8 needs a's copy.
  r = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 99});
  EXPECT_EQ(r.resume_pos, 9);
  EXPECT_EQ(r.pages[1], a.st.pages()[1]);
  EXPECT_EQ(r.pages[2], a.st.pages()[2]);
  sim.expect_exact(r, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 99});
  // Resuming at the branch point 6: page 1 from the shared node [0, 6), a's copy.
  r = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 77, 78});
  EXPECT_EQ(r.resume_pos, 6);
  EXPECT_EQ(r.pages[1], a.st.pages()[1]);
  sim.expect_exact(r, Tokens{1, 2, 3, 4, 5, 6, 77, 78});
}

TEST(PrefixCache, CommonPrefixReusesTreeNodesAndPages) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  insert_cold(sim, cache, kA, {4, 8});
  const size_t bytes = cache.bytes();
  const auto before = cache.stats();
  // The same history computed again (distinct page and snapshot objects, same bits): the
  // tree keeps its own, adds nothing.
  insert_cold(sim, cache, kA, {4, 8});
  const auto after = cache.stats();
  EXPECT_EQ(cache.bytes(), bytes);
  EXPECT_EQ(after.n_nodes, before.n_nodes);
  EXPECT_EQ(after.n_snapshots, before.n_snapshots);
  EXPECT_EQ(after.n_pages, 3);
  // A prefix of it splits the edge: one more node, no more bytes (the boundary page is
  // referenced by both halves, counted once).
  const Tokens pre{1, 2, 3, 4, 5, 6};
  insert_cold(sim, cache, pre, {4});
  EXPECT_EQ(cache.stats().n_nodes, 2);
  EXPECT_EQ(cache.bytes(), bytes);
  auto r = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 50});
  EXPECT_EQ(r.kind, HitKind::Extension);  // pre's full length
  EXPECT_EQ(r.resume_pos, 4);
  EXPECT_EQ(cache.stats().lost_to_spacing, 2);
}

// ---- Budget, eviction, pins ----------------------------------------------------------------

size_t page_bytes(const Sim& sim) {
  return KvPage(sim.shape).bytes();
}
size_t snap_bytes(const Sim& sim) {
  return SequenceState(sim.shape).recurrent_bytes();
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeaf) {
  Sim sim(false);
  const Tokens a{1, 1, 1, 1, 1, 1, 1, 1};  // 2 pages each, no shared tokens
  const Tokens b{2, 2, 2, 2, 2, 2, 2, 2};
  const Tokens c{3, 3, 3, 3, 3, 3, 3, 3};
  PrefixCache cache(opts(false, 4 * page_bytes(sim)));
  insert_cold(sim, cache, a, {});
  insert_cold(sim, cache, b, {});
  EXPECT_EQ(cache.bytes(), 4 * page_bytes(sim));
  EXPECT_EQ(cache.lookup(a).resume_pos, 7);  // a is now more recent than b
  insert_cold(sim, cache, c, {});
  const auto s = cache.stats();
  EXPECT_EQ(s.evictions_nodes, 1);
  EXPECT_EQ(s.n_nodes, 2);
  EXPECT_LE(cache.bytes(), 4 * page_bytes(sim));
  EXPECT_EQ(cache.lookup(a).resume_pos, 7);
  EXPECT_EQ(cache.lookup(b).resume_pos, 0);
  EXPECT_EQ(cache.lookup(c).resume_pos, 7);
}

TEST(PrefixCache, EvictingALeafFreesOnlyPagesNoOtherNodeHolds) {
  Sim sim(false);
  PrefixCache cache(opts(false));
  insert_cold(sim, cache, kA, {});                            // pages 0, 1, 2
  insert_cold(sim, cache, Tokens{1, 2, 3, 4, 5, 6, 70}, {});  // shares page 0, own copy of 1
  EXPECT_EQ(cache.stats().n_pages, 3 + 1);
  // Budget for 3 pages: one leaf must go. kA's leaf [6, 10) is older; its page 1 is still
  // referenced by the node [0, 6), so only page 2 is freed.
  cache.set_budget_bytes(3 * page_bytes(sim));
  cache.check_invariants();
  const auto s = cache.stats();
  EXPECT_EQ(s.evictions_nodes, 1);
  EXPECT_EQ(s.n_pages, 3);
  EXPECT_EQ(cache.lookup(kA).common_prefix, 6);
  // The parent became a leaf with one child; evicting further walks up.
  cache.set_budget_bytes(0);
  cache.check_invariants();
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.stats().n_nodes, 0);
}

TEST(PrefixCache, SnapshotEvictedAloneBeforeItsNode) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  const Tokens a{1, 2, 3, 4, 5, 6, 7, 8};
  insert_cold(sim, cache, a, {4, 7});
  EXPECT_EQ(cache.bytes(), 2 * page_bytes(sim) + 2 * snap_bytes(sim));
  EXPECT_EQ(cache.lookup(a).resume_pos, 7);  // touches the node and the snapshot at 7
  cache.set_budget_bytes(2 * page_bytes(sim) + snap_bytes(sim));
  cache.check_invariants();
  auto s = cache.stats();
  EXPECT_EQ(s.evictions_snapshots, 1);
  EXPECT_EQ(s.evictions_nodes, 0);
  EXPECT_EQ(s.n_snapshots, 1);
  EXPECT_EQ(s.bytes_snapshots, snap_bytes(sim));
  EXPECT_EQ(cache.lookup(a).resume_pos, 7);                         // the used one stayed
  EXPECT_EQ(cache.lookup(Tokens{1, 2, 3, 4, 5, 9}).resume_pos, 0);  // 4 went
  // Then the snapshot at 7 (used before the last lookup touched the node), then the node,
  // dead without snapshots.
  cache.set_budget_bytes(snap_bytes(sim));
  cache.check_invariants();
  s = cache.stats();
  EXPECT_EQ(s.n_nodes, 0);
  EXPECT_EQ(s.n_snapshots, 0);
  EXPECT_EQ(s.evictions_snapshots, 2);
  EXPECT_EQ(s.evictions_nodes, 1);
  EXPECT_EQ(cache.bytes(), 0u);
  // Evicting a leaf takes its snapshots with it.
  PrefixCache fresh(opts(true));
  insert_cold(sim, fresh, a, {4, 7});
  fresh.set_budget_bytes(0);
  fresh.check_invariants();
  s = fresh.stats();
  EXPECT_EQ(s.evictions_nodes, 1);
  EXPECT_EQ(s.evictions_snapshots, 2);
  EXPECT_EQ(s.n_snapshots, 0);
  EXPECT_EQ(fresh.bytes(), 0u);
}

// A budget that holds a fresh leaf's pages and one of its snapshots keeps the deepest one (a
// Mamba2 state is tens of MiB: under a small --cache-ram the whole leaf used to go, as the
// node came before its own snapshots of the same insert).
TEST(PrefixCache, FreshLeafOverBudgetKeepsItsDeepestSnapshot) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  cache.set_budget_bytes(2 * page_bytes(sim) + snap_bytes(sim));
  const Tokens a{1, 2, 3, 4, 5, 6, 7, 8};
  insert_cold(sim, cache, a, {2, 4, 7});
  cache.check_invariants();
  const auto s = cache.stats();
  EXPECT_EQ(s.evictions_snapshots, 2);
  EXPECT_EQ(s.evictions_nodes, 0);
  EXPECT_EQ(s.n_snapshots, 1);
  const LookupResult r = cache.lookup(a);
  EXPECT_EQ(r.resume_pos, 7);
  sim.expect_exact(r, a);
}

TEST(PrefixCache, HybridLeafWithoutSnapshotIsEvictedFirst) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  const Tokens a{1, 1, 1, 1, 1, 1, 1, 1};
  const Tokens b{2, 2, 2, 2, 2, 2, 2, 2};
  insert_cold(sim, cache, a, {4});
  insert_cold(sim, cache, b, {});            // can never be resumed from: no snapshot on its path
  EXPECT_EQ(cache.lookup(b).resume_pos, 0);  // used more recently than a, still dead
  cache.set_budget_bytes(cache.bytes() - 1);
  cache.check_invariants();
  EXPECT_EQ(cache.lookup(b).common_prefix, 0);
  EXPECT_EQ(cache.lookup(a).resume_pos, 4);
}

TEST(PrefixCache, LeasePinsPathAndSnapshot) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  insert_cold(sim, cache, kA, {4, 8});
  LookupResult held = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 50});
  ASSERT_EQ(held.resume_pos, 8);
  EXPECT_TRUE(held.lease.active());
  EXPECT_EQ(cache.stats().active_leases, 1);
  cache.set_budget_bytes(0);  // everything unpinned goes; the leased path stays
  cache.check_invariants();
  auto s = cache.stats();
  EXPECT_TRUE(s.over_budget);
  EXPECT_GE(s.over_budget_events, 1);
  EXPECT_EQ(s.n_snapshots, 1);  // 4 was not pinned
  auto again = cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 50});
  EXPECT_EQ(again.resume_pos, 8);
  EXPECT_EQ(again.snapshot, held.snapshot);
  again.lease.release();
  // Moving a lease moves the pin; releasing twice is harmless.
  CacheLease moved = std::move(held.lease);
  EXPECT_FALSE(held.lease.active());
  EXPECT_TRUE(moved.active());
  held.lease.release();
  EXPECT_EQ(cache.stats().n_snapshots, 1);
  moved.release();
  moved.release();
  // Released: the budget applies again.
  cache.check_invariants();
  s = cache.stats();
  EXPECT_EQ(s.active_leases, 0);
  EXPECT_FALSE(s.over_budget);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(s.n_nodes, 0);
}

TEST(PrefixCache, PinnedNodeSurvivesSplitsAndInserts) {
  Sim sim(true);
  PrefixCache cache(opts(true, 0));
  // Budget 0: everything unpinned is evicted right after each insert.
  insert_cold(sim, cache, kA, {8});
  EXPECT_EQ(cache.stats().n_nodes, 0);
  cache.set_budget_bytes(size_t{1} << 30);
  insert_cold(sim, cache, kA, {8});
  auto held = cache.lookup(concat(kA, {11}));
  ASSERT_EQ(held.resume_pos, 8);
  cache.set_budget_bytes(0);
  // Split the pinned edge above and below p and add branches: all evicted but the path to p.
  insert_cold(sim, cache, Tokens{1, 2, 3, 30}, {2});
  insert_cold(sim, cache, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 40}, {9});
  cache.check_invariants();
  auto r = cache.lookup(concat(kA, {11}));
  EXPECT_EQ(r.resume_pos, 8);
  sim.expect_exact(r, concat(kA, {11}));
  r.lease.release();
  held.lease.release();
  cache.check_invariants();
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(PrefixCache, LeaseOutlivesClearAndCache) {
  Sim sim(true);
  LookupResult held;
  {
    PrefixCache cache(opts(true));
    insert_cold(sim, cache, kA, {4});
    held = cache.lookup(kA);
    ASSERT_EQ(held.resume_pos, 4);
    cache.clear();
    EXPECT_EQ(cache.bytes(), 0u);
    EXPECT_EQ(cache.stats().n_nodes, 0);
    EXPECT_EQ(cache.stats().active_leases, 0);
    held.lease.release();  // from before clear(): releases nothing
    cache.check_invariants();
    insert_cold(sim, cache, kA, {4});
    held = cache.lookup(kA);
    sim.expect_exact(held, kA);
  }
  // The cache is gone: the lease releases nothing, the handed-out state is still valid.
  held.lease.release();
  sim.expect_exact(held, kA);
}

// ---- Thinning, stats, sizes ----------------------------------------------------------------

TEST(PrefixCache, ThinningKeepsAnchorAndNewest) {
  Sim sim(true);
  auto o = opts(true);
  o.policy.max_per_branch = 8;
  PrefixCache cache(o);
  Tokens t;
  for (int32_t i = 0; i < 100; ++i) t.push_back(i);
  std::vector<int64_t> at;
  for (int64_t q = 2; q <= 99; q += 2) at.push_back(q);  // 49 snapshots, the anchor at 10
  insert_cold(sim, cache, t, at, /*anchor=*/10);
  auto s = cache.stats();
  EXPECT_EQ(s.n_snapshots, 8);
  EXPECT_EQ(s.thinned_snapshots, 49 - 8);
  auto r = cache.lookup(Tokens{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 500});
  EXPECT_EQ(r.resume_pos, 10);  // the anchor
  r = cache.lookup(concat(t, {500}));
  EXPECT_EQ(r.resume_pos, 98);  // the newest
  r = cache.lookup(Tokens(t.begin(), t.begin() + 97));
  EXPECT_GE(r.resume_pos, 90);  // dense near the tip
  // Without the anchor flag the early snapshot would have been thinned.
  PrefixCache plain(o);
  insert_cold(sim, plain, t, at);
  EXPECT_LT(plain.lookup(Tokens{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 500}).resume_pos, 10);
}

TEST(PrefixCache, CountsHitsByKind) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  insert_cold(sim, cache, kA, {4, 9, 10});
  cache.lookup(kA);                           // exact: p 9
  cache.lookup(concat(kA, {11, 12}));         // extension: p 10
  cache.lookup(Tokens{1, 2, 3, 4, 5, 6, 0});  // checkpoint: L 6, p 4
  cache.lookup(Tokens{7, 7});                 // miss
  cache.lookup(Tokens{1, 2, 3, 0});           // miss: L 3, no snapshot below
  const auto s = cache.stats();
  EXPECT_EQ(s.lookups, 5);
  EXPECT_EQ(s.hits_exact, 1);
  EXPECT_EQ(s.hits_extension, 1);
  EXPECT_EQ(s.hits_checkpoint, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.tokens_reused, 9 + 10 + 4);
  EXPECT_EQ(s.tokens_rerun, (10 - 9) + (12 - 10) + (7 - 4) + 2 + 4);
  EXPECT_EQ(s.lost_to_spacing, 0 + 0 + 2 + 0 + 3);
  EXPECT_EQ(s.inserts, 1);
  EXPECT_EQ(s.n_nodes, 1);
  EXPECT_EQ(s.n_snapshots, 3);
  EXPECT_EQ(s.n_pages, 3);
  EXPECT_EQ(s.bytes_pages, 3 * page_bytes(sim));
  EXPECT_EQ(s.bytes_snapshots, 3 * snap_bytes(sim));
  EXPECT_EQ(std::string(hit_kind_name(HitKind::Checkpoint)), "checkpoint");
}

TEST(PrefixCache, Qwen35SnapshotCostsExactlyItsRecurrentBytes) {
  StateShape q;  // qwen3.5-0.8b: 24 layers, 6 full attention, 18 Gated DeltaNet
  q.n_attn_layers = 6;
  q.kv_dim = 2 * 256;
  q.n_rec_layers = 18;
  q.conv_rows = 3;
  q.conv_dim = 6144;
  q.ssm_layer_floats = 262144;  // [16, 128, 128]
  q.page_tokens = 64;
  PrefixCache::Options o;
  o.page_tokens = 64;
  PrefixCache cache(o);
  SequenceState st(q);
  st.prepare_append(1);
  st.commit_append(1);
  const SnapList snaps{st.take_snapshot()};
  const Tokens t{42};
  cache.insert(t, st.pages(), snaps);
  const size_t want = size_t{18} * (3 * 6144 + 16 * 128 * 128) * 4;
  EXPECT_EQ(want, 20201472u);
  const auto s = cache.stats();
  EXPECT_EQ(s.bytes_snapshots, want);
  EXPECT_EQ(s.bytes_pages, size_t{6} * 2 * 64 * 512 * 4);
  EXPECT_EQ(cache.bytes(), want + s.bytes_pages);
  EXPECT_EQ(cache.bytes(), cache.bytes_by_walk());
}

TEST(PrefixCacheDeath, InsertPreconditions) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  SequenceState st = sim.cold(kA);
  auto few = st.pages();
  few.pop_back();
  EXPECT_DEATH(cache.insert(kA, few, {}), "pages");
  SequenceState past = sim.cold(concat(kA, {11}));
  const SnapList beyond{past.take_snapshot()};
  EXPECT_DEATH(cache.insert(kA, st.pages(), beyond), "snapshot at 11");
  SequenceState s4 = sim.cold(Tokens{1, 2, 3, 4});
  const SnapList desc{st.take_snapshot(), s4.take_snapshot()};
  EXPECT_DEATH(cache.insert(kA, st.pages(), desc), "pos");
  PrefixCache attn(opts(false));
  const SnapList one{s4.take_snapshot()};
  EXPECT_DEATH(attn.insert(kA, st.pages(), one), "pure-attention");
}

// ---- Property test ---------------------------------------------------------------------

struct PropertyConfig {
  bool recurrent;
  size_t budget;           // bytes
  int64_t max_per_branch;  // 0: no thinning
  bool strict;             // nothing evicted or thinned: L and p are known exactly
  uint64_t seed;
  int iters;
};

void run_property(const PropertyConfig& cfg) {
  Sim sim(cfg.recurrent);
  auto o = opts(cfg.recurrent, cfg.budget);
  o.policy.interval = 8;
  o.policy.max_per_branch = cfg.max_per_branch;
  PrefixCache cache(o);
  std::mt19937_64 rng(cfg.seed);
  auto uni = [&](int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto rand_tokens = [&](int64_t n) {
    Tokens t;
    for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(uni(0, 4)));
    return t;
  };
  struct Inserted {
    Tokens t;
    std::vector<int64_t> snap_pos;
  };
  std::vector<Inserted> hist;
  struct Held {
    Tokens prompt;
    LookupResult r;
  };
  std::vector<Held> held;

  for (int it = 0; it < cfg.iters; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    // A prompt: fresh, an edit, a repeat, a prefix or an extension of a history.
    Tokens prompt;
    const int64_t kind = hist.empty() ? 0 : uni(0, 9);
    const Tokens* h =
        hist.empty() ? nullptr
                     : &hist[static_cast<size_t>(uni(0, static_cast<int64_t>(hist.size()) - 1))].t;
    if (kind <= 1) {
      prompt = rand_tokens(uni(1, 40));
    } else if (kind <= 4) {
      prompt.assign(h->begin(), h->begin() + uni(0, static_cast<int64_t>(h->size())));
      prompt = concat(prompt, rand_tokens(uni(1, 20)));
    } else if (kind <= 5) {
      prompt = *h;
    } else if (kind <= 6) {
      prompt.assign(h->begin(), h->begin() + uni(1, static_cast<int64_t>(h->size())));
    } else {
      prompt = concat(*h, rand_tokens(uni(1, 20)));
    }
    const int64_t n = static_cast<int64_t>(prompt.size());

    // Lookup, checked against what was inserted.
    LookupResult r = cache.lookup(prompt);
    const int64_t L = r.common_prefix, p = r.resume_pos;
    int64_t true_l = 0, best_p = 0;
    for (auto& x : hist) {
      const int64_t l = lcp(prompt, x.t);
      true_l = std::max(true_l, l);
      const int64_t lim = std::min(l, n - 1);
      if (!cfg.recurrent) best_p = std::max(best_p, lim);
      for (int64_t q : x.snap_pos)
        if (q <= lim) best_p = std::max(best_p, q);
    }
    EXPECT_LE(L, true_l);
    EXPECT_LE(p, std::min(L, n - 1));
    EXPECT_LE(p, best_p);
    if (cfg.strict) {
      EXPECT_EQ(L, true_l);
      EXPECT_EQ(p, best_p);
    }
    EXPECT_EQ(r.kind == HitKind::Miss, p == 0);
    if (p > 0) {
      EXPECT_EQ(r.kind == HitKind::Exact, L == n);
    }
    ASSERT_NO_FATAL_FAILURE(sim.expect_exact(r, prompt));

    // Run it like the engine: resume, prefill cut at the policy's points (with a random turn
    // boundary as anchor), generate a few tokens, snapshot at the end of the reply, insert.
    std::vector<int64_t> bounds;
    if (n > 2 && uni(0, 1)) bounds.push_back(uni(1, n - 1));
    const int64_t anchor = bounds.empty() ? -1 : bounds[0];
    SequenceState st(sim.shape);
    st.resume(r.pages, r.snapshot.get(), p);
    SnapList snaps;
    Inserted ins;
    for (int64_t c : o.policy.cut_points(p, n, bounds)) {
      sim.run(st, prompt, c);
      if (cfg.recurrent) snaps.push_back(st.take_snapshot());
    }
    sim.run(st, prompt, n);
    Tokens full = concat(prompt, rand_tokens(uni(0, 6)));
    for (int64_t q = n; q < static_cast<int64_t>(full.size()); ++q) sim.run(st, full, q + 1);
    if (cfg.recurrent && static_cast<int64_t>(full.size()) > n) snaps.push_back(st.take_snapshot());
    ASSERT_TRUE(st.same_contents(sim.cold(full)));
    for (auto& s : snaps) ins.snap_pos.push_back(s->pos);
    ins.t = full;
    // Keep the lease across the insert (as a running request does) or drop it first.
    if (uni(0, 1)) r.lease.release();
    cache.insert(full, st.pages(), snaps, anchor);
    hist.push_back(std::move(ins));
    cache.check_invariants();
    ASSERT_EQ(cache.bytes(), cache.bytes_by_walk());
    const auto s = cache.stats();
    if (!cfg.strict) {
      EXPECT_TRUE(!s.over_budget || s.active_leases > 0);
    }
    if (cfg.strict) {
      EXPECT_EQ(s.evictions_nodes + s.evictions_snapshots + s.thinned_snapshots, 0);
    }

    // Leases keep their path and snapshot: a new lookup resumes at least as deep.
    for (auto& hd : held) {
      LookupResult again = cache.lookup(hd.prompt);
      EXPECT_GE(again.resume_pos, hd.r.resume_pos);
      ASSERT_NO_FATAL_FAILURE(sim.expect_exact(again, hd.prompt));
    }
    if (r.lease.active() && uni(0, 3) == 0) held.push_back({prompt, std::move(r)});
    if (!held.empty() && uni(0, 2) == 0)
      held.erase(held.begin() + uni(0, static_cast<int64_t>(held.size()) - 1));
    cache.check_invariants();
  }
  held.clear();
  cache.check_invariants();
  const auto s = cache.stats();
  EXPECT_EQ(s.active_leases, 0);
  EXPECT_LE(cache.bytes(), cfg.budget);
  EXPECT_EQ(s.lookups, s.hits_exact + s.hits_extension + s.hits_checkpoint + s.misses);
  if (!cfg.strict) {
    EXPECT_GT(s.evictions_nodes, 0);
  }
  EXPECT_GT(s.hits_exact, 0);
  EXPECT_GT(s.hits_extension, 0);
  EXPECT_GT(s.hits_checkpoint, 0);
}

TEST(PrefixCacheProperty, HybridNothingEvicted) {
  run_property({true, size_t{1} << 30, 0, true, 1, 400});
}
TEST(PrefixCacheProperty, PureAttentionNothingEvicted) {
  run_property({false, size_t{1} << 30, 0, true, 2, 400});
}
TEST(PrefixCacheProperty, HybridSmallBudgetAndThinning) {
  for (uint64_t seed = 10; seed < 14; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_property({true, 8000, 4, false, seed, 400});
  }
}
TEST(PrefixCacheProperty, PureAttentionSmallBudget) {
  for (uint64_t seed = 20; seed < 24; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_property({false, 5000, 0, false, seed, 400});
  }
}

// ---- dump (the picture /v1/cache/tree draws) ----------------------------------------------

// Inserts `t` computed cold with snapshots at `at` carrying `kinds`.
void insert_kinds(const Sim& sim, PrefixCache& cache, const Tokens& t, std::vector<int64_t> at,
                  std::vector<uint8_t> kinds) {
  SequenceState st(sim.shape);
  SnapList snaps;
  for (int64_t q : at) {
    sim.run(st, t, q);
    snaps.push_back(st.take_snapshot());
  }
  sim.run(st, t, static_cast<int64_t>(t.size()));
  cache.insert(t, st.pages(), snaps, -1, kinds);
  cache.check_invariants();
}

TEST(PrefixCacheDump, ListsNodesPagesSnapshotsKindsAndPath) {
  Sim sim(true);
  PrefixCache cache(opts(true));
  insert_kinds(sim, cache, kA, {4, 8}, {kCheckpointBoundary, kCheckpointPromptEnd});
  const Tokens b{1, 2, 3, 4, 5, 6, 99, 98, 97};
  insert_kinds(sim, cache, b, {4, 8}, {kCheckpointGrid, kCheckpointReplyEnd});
  const CacheTree t = cache.dump(100, b);
  ASSERT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.total_nodes, 3);
  EXPECT_EQ(t.listed_nodes, 3);
  const CacheTreeNode& up = t.nodes[0];
  EXPECT_EQ(up.parent, -1);
  EXPECT_EQ(up.start, 0);
  EXPECT_EQ(up.end, 6);
  ASSERT_EQ(up.snaps.size(), 1u);
  EXPECT_EQ(up.snaps[0].pos, 4);
  // The second insert found the snapshot at 4 and added its kind.
  EXPECT_EQ(up.snaps[0].kinds, kCheckpointBoundary | kCheckpointGrid);
  EXPECT_EQ(up.n_pages, 2);
  EXPECT_EQ(up.shared_pages, 1);  // page [4, 8) is also the first page of kA's tail
  EXPECT_EQ(up.kv_bytes, 2 * KvPage(sim.shape).bytes());
  EXPECT_EQ(up.sub_nodes, 3);
  EXPECT_EQ(up.sub_tokens, 10 + 3);
  EXPECT_EQ(up.sub_snapshots, 3);
  EXPECT_EQ(up.evict_rank, 0);  // not a leaf
  // Children oldest first: kA's tail (the node split off) before b's.
  const CacheTreeNode& a_tail = t.nodes[1];
  const CacheTreeNode& b_tail = t.nodes[2];
  EXPECT_EQ(a_tail.parent, 0);
  EXPECT_EQ(b_tail.parent, 0);
  EXPECT_EQ(a_tail.end, 10);
  EXPECT_EQ(b_tail.end, 9);
  EXPECT_LT(a_tail.id, b_tail.id);
  EXPECT_TRUE(a_tail.terminal && b_tail.terminal);
  ASSERT_EQ(a_tail.snaps.size(), 1u);
  EXPECT_EQ(a_tail.snaps[0].kinds, kCheckpointPromptEnd);
  ASSERT_EQ(b_tail.snaps.size(), 1u);
  EXPECT_EQ(b_tail.snaps[0].kinds, kCheckpointReplyEnd);
  EXPECT_EQ(a_tail.shared_pages, 1);
  EXPECT_EQ(b_tail.shared_pages, 0);  // b ran cold: its boundary page is its own
  EXPECT_EQ(t.path, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(t.path_matched, 9);
  const size_t snap = up.snaps[0].bytes;
  EXPECT_EQ(t.snapshot_bytes_by_kind[1], snap);  // boundary over grid
  EXPECT_EQ(t.snapshot_bytes_by_kind[3], snap);  // prompt end
  EXPECT_EQ(t.snapshot_bytes_by_kind[4], snap);  // reply end
  EXPECT_EQ(t.snapshot_bytes_by_kind[0] + t.snapshot_bytes_by_kind[2] + t.snapshot_bytes_by_kind[5],
            0u);
  // A prompt that leaves the tree inside a node: the path stops there.
  const CacheTree u = cache.dump(100, Tokens{1, 2, 3, 7});
  EXPECT_EQ(u.path, (std::vector<int64_t>{0}));
  EXPECT_EQ(u.path_matched, 3);
  EXPECT_TRUE(cache.dump(100, Tokens{42}).path.empty());
}

TEST(PrefixCacheDump, FoldsSmallBranchesPastMaxNodesButKeepsThePath) {
  Sim sim(false);
  PrefixCache cache(opts(false));
  std::vector<Tokens> tails;
  for (int32_t k = 1; k <= 10; ++k) {
    Tokens t{1, 2, 3, 4};
    for (int32_t j = 0; j < k; ++j) t.push_back(100 * k + j);
    insert_cold(sim, cache, t, {});
    tails.push_back(t);
  }
  const CacheTree all = cache.dump(1000);
  EXPECT_EQ(all.nodes.size(), 11u);
  EXPECT_EQ(all.listed_nodes, 11);
  for (const auto& n : all.nodes) EXPECT_FALSE(n.aggregate);

  const CacheTree t = cache.dump(4, tails[0]);  // the smallest branch highlighted
  EXPECT_EQ(t.total_nodes, 11);
  EXPECT_EQ(t.listed_nodes, 4);
  std::vector<int64_t> listed_ends;
  const CacheTreeNode* agg = nullptr;
  for (const auto& n : t.nodes) {
    if (n.aggregate) {
      EXPECT_EQ(agg, nullptr);
      agg = &n;
    } else if (n.parent == 0) {
      listed_ends.push_back(n.end);
    }
  }
  std::sort(listed_ends.begin(), listed_ends.end());
  EXPECT_EQ(listed_ends, (std::vector<int64_t>{5, 13, 14}));  // the path's, then the 2 largest
  ASSERT_NE(agg, nullptr);
  EXPECT_EQ(agg->parent, 0);
  EXPECT_EQ(agg->sub_nodes, 7);
  EXPECT_EQ(agg->sub_tokens, 2 + 3 + 4 + 5 + 6 + 7 + 8);
  EXPECT_EQ(agg->start, 4);
  EXPECT_EQ(agg->end, 12);  // the deepest folded branch
  ASSERT_EQ(t.path.size(), 2u);
  EXPECT_EQ(t.nodes[static_cast<size_t>(t.path[1])].end, 5);
  // Sums over the listed nodes and the aggregate cover the tree.
  EXPECT_EQ(t.nodes[0].sub_nodes, 11);
}

TEST(PrefixCacheDump, ShowsAgeEvictionOrderPinsAndVersion) {
  Sim sim(false);
  PrefixCache cache(opts(false));
  const Tokens a{1, 1, 1, 1, 1, 1, 1, 1};
  const Tokens b{2, 2, 2, 2, 2, 2, 2, 2};
  insert_cold(sim, cache, a, {});
  insert_cold(sim, cache, b, {});
  const uint64_t v0 = cache.dump(10).version;
  EXPECT_EQ(cache.dump(10).version, v0);  // dumping changes nothing
  LookupResult held = cache.lookup(a);    // a used last, and pinned
  const CacheTree t = cache.dump(10);
  EXPECT_NE(t.version, v0);
  ASSERT_EQ(t.nodes.size(), 2u);
  const CacheTreeNode& na = t.nodes[0];  // children oldest first: a, then b
  const CacheTreeNode& nb = t.nodes[1];
  EXPECT_LT(na.id, nb.id);
  EXPECT_EQ(na.age, 0u);
  EXPECT_GT(nb.age, 0u);
  EXPECT_TRUE(na.pinned);
  EXPECT_EQ(na.pins, 1);
  EXPECT_EQ(na.evict_rank, 0);
  EXPECT_FALSE(nb.pinned);
  EXPECT_EQ(nb.evict_rank, 1);
  held.lease.release();
  const CacheTree r = cache.dump(10);
  EXPECT_NE(r.version, t.version);
  for (const auto& n : r.nodes) {
    EXPECT_FALSE(n.pinned);
    EXPECT_EQ(n.evict_rank, n.age == 0 ? 2 : 1);  // least recently used first
  }
}

}  // namespace
}  // namespace rw
