#include "rewind/cache/prefix_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "rewind/base/check.h"

namespace rw {

const char* hit_kind_name(HitKind k) {
  switch (k) {
    case HitKind::Miss:
      return "miss";
    case HitKind::Exact:
      return "exact";
    case HitKind::Extension:
      return "extension";
    case HitKind::Checkpoint:
      return "checkpoint";
  }
  return "?";
}

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

namespace detail {

// LRU order: (class, tick, kind, id). Class 0: dead leaves (hybrid cache, no snapshot), evicted
// first; class 1: everything else. Kind 0 a snapshot, 1 a node: at one tick (what one insert or
// lookup touched) snapshots go before nodes, the shallower first, so a leaf whose budget holds
// only some of its snapshots keeps its deepest rather than going whole. Ids are unique, so keys
// are too.
using LruKey = std::tuple<int, uint64_t, int, uint64_t>;

struct CacheSnap {
  std::shared_ptr<const Snapshot> snap;
  CacheNode* owner = nullptr;
  uint64_t id = 0;
  uint64_t tick = 0;
  int pins = 0;
  bool anchor = false;
  bool listed = false;
  uint8_t kinds = 0;  // CheckpointKind bits (display only)
  LruKey key{};
  int64_t pos() const { return snap->pos; }
};

struct CacheNode {
  CacheNode* parent = nullptr;
  int64_t start = 0, end = 0;  // edge positions [start, end)
  // Tokens: position q holds (*toks)[q - toks_base]; split halves share the buffer.
  std::shared_ptr<const std::vector<int32_t>> toks;
  int64_t toks_base = 0;
  std::deque<PagePtr> pages;                     // page indices start/PT .. ceil(end/PT)-1
  std::deque<std::unique_ptr<CacheSnap>> snaps;  // ascending pos, start < pos <= end
  std::unordered_map<int32_t, std::unique_ptr<CacheNode>> children;  // keyed by first token
  uint64_t id = 0;
  uint64_t tick = 0;
  int pins = 0;
  bool terminal = false;  // some inserted history ends at `end`
  bool listed = false;
  LruKey key{};

  int64_t len() const { return end - start; }
  int32_t tok(int64_t q) const { return (*toks)[static_cast<size_t>(q - toks_base)]; }
};

struct Victim {
  CacheNode* node = nullptr;
  CacheSnap* snap = nullptr;
};

struct CacheCore {
  PrefixCache::Options opt;
  int64_t pt;  // page_tokens
  std::unique_ptr<CacheNode> root;
  std::map<LruKey, Victim> lru;
  std::unordered_map<const KvPage*, int> page_refs;  // tree references per distinct page
  CacheStats st;
  uint64_t tick = 0;
  uint64_t next_id = 1;
  uint64_t epoch = 0;
  uint64_t version = 0;               // bumped by every change a dump would show
  ContentKey tier_root;               // the chain hash's start (Options::tier's fingerprint)
  std::vector<ContentKey> tier_keys;  // scratch: the keys of a history's prefixes

  explicit CacheCore(const PrefixCache::Options& o) : opt(o), pt(o.page_tokens) {
    REWIND_CHECK(pt > 0);
    REWIND_CHECK(o.has_attention || o.has_recurrent);
    st.budget_bytes = o.budget_bytes;
    root = std::make_unique<CacheNode>();
    if (o.tier) {
      REWIND_CHECK(o.shape.page_tokens == pt);
      tier_root = chain_root(o.tier->fingerprint());
    }
  }
  ~CacheCore() { destroy_subtrees(); }

  size_t bytes() const { return st.bytes_pages + st.bytes_snapshots; }

  // --- pages -------------------------------------------------------------------------------
  void ref_page(const PagePtr& p) {
    int& c = page_refs[p.get()];
    if (c++ == 0) {
      st.bytes_pages += p->bytes();
      ++st.n_pages;
    }
  }
  void unref_page(const PagePtr& p) {
    auto it = page_refs.find(p.get());
    REWIND_CHECK(it != page_refs.end() && it->second > 0);
    if (--it->second == 0) {
      st.bytes_pages -= p->bytes();
      --st.n_pages;
      page_refs.erase(it);
    }
  }

  // --- LRU listing -------------------------------------------------------------------------
  bool dead(const CacheNode* c) const { return opt.has_recurrent && c->snaps.empty(); }
  void unlist(CacheNode* c) {
    if (c->listed) lru.erase(c->key);
    c->listed = false;
  }
  void unlist(CacheSnap* s) {
    if (s->listed) lru.erase(s->key);
    s->listed = false;
  }
  void relist(CacheNode* c) {
    unlist(c);
    if (c == root.get() || c->pins > 0 || !c->children.empty()) return;
    c->key = LruKey{dead(c) ? 0 : 1, c->tick, 1, c->id};
    lru.emplace(c->key, Victim{c, nullptr});
    c->listed = true;
  }
  void relist(CacheSnap* s) {
    unlist(s);
    if (s->pins > 0) return;
    s->key = LruKey{1, s->tick, 0, s->id};
    lru.emplace(s->key, Victim{nullptr, s});
    s->listed = true;
  }
  void touch(CacheNode* c) {
    c->tick = tick;
    if (c->listed) relist(c);
  }
  void touch(CacheSnap* s) {
    s->tick = tick;
    if (s->listed) relist(s);
  }

  // --- structure ---------------------------------------------------------------------------
  // Splits c at absolute position m (c->start < m < c->end): a new node takes [start, m) and
  // c's place under its parent; c keeps [m, end), its children, pins and terminal flag.
  // Returns the new upper node. O(pages and snapshots of [start, m)).
  CacheNode* split(CacheNode* c, int64_t m) {
    REWIND_CHECK(c->start < m && m < c->end);
    CacheNode* parent = c->parent;
    auto u = std::make_unique<CacheNode>();
    u->id = next_id++;
    u->parent = parent;
    u->start = c->start;
    u->end = m;
    u->toks = c->toks;
    u->toks_base = c->toks_base;
    u->tick = c->tick;
    if (opt.has_attention) {
      const int64_t first = c->start / pt;
      const int64_t upper_last = (m + pt - 1) / pt;  // exclusive
      const int64_t lower_first = m / pt;
      for (int64_t i = first; i < upper_last; ++i) u->pages.push_back(c->pages[i - first]);
      for (int64_t i = first; i < lower_first; ++i) c->pages.pop_front();
      if (m % pt != 0) ref_page(c->pages.front());  // the boundary page, now in both
    }
    while (!c->snaps.empty() && c->snaps.front()->pos() <= m) {
      u->snaps.push_back(std::move(c->snaps.front()));
      c->snaps.pop_front();
      u->snaps.back()->owner = u.get();
    }
    const int32_t key_u = c->tok(c->start);
    const int32_t key_c = c->tok(m);
    c->start = m;
    c->parent = u.get();
    auto slot = parent->children.find(key_u);
    REWIND_CHECK(slot != parent->children.end() && slot->second.get() == c);
    u->children.emplace(key_c, std::move(slot->second));
    CacheNode* up = u.get();
    slot->second = std::move(u);
    ++st.n_nodes;
    relist(c);  // its dead/alive class may have changed
    return up;
  }

  CacheNode* add_leaf(CacheNode* parent, int64_t pos, std::span<const int32_t> tokens,
                      const std::vector<PagePtr>& pages) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    auto c = std::make_unique<CacheNode>();
    c->id = next_id++;
    c->parent = parent;
    c->start = pos;
    c->end = n;
    c->toks = std::make_shared<const std::vector<int32_t>>(tokens.begin() + pos, tokens.end());
    c->toks_base = pos;
    c->tick = tick;
    if (opt.has_attention)
      for (int64_t i = pos / pt; i < (n + pt - 1) / pt; ++i) {
        c->pages.push_back(pages[static_cast<size_t>(i)]);
        ref_page(c->pages.back());
      }
    CacheNode* raw = c.get();
    auto [it, fresh] = parent->children.emplace(tokens[static_cast<size_t>(pos)], std::move(c));
    REWIND_CHECK(fresh);
    ++st.n_nodes;
    relist(parent);  // no longer a leaf
    relist(raw);
    return raw;
  }

  void drop_snap_record(CacheSnap* s) {
    REWIND_CHECK(s->pins == 0);
    unlist(s);
    st.bytes_snapshots -= s->snap->bytes();
    --st.n_snapshots;
  }

  // Removes one unpinned snapshot from the tree.
  void remove_snap(CacheSnap* s) {
    CacheNode* c = s->owner;
    drop_snap_record(s);
    auto it = std::find_if(c->snaps.begin(), c->snaps.end(),
                           [&](const std::unique_ptr<CacheSnap>& r) { return r.get() == s; });
    REWIND_CHECK(it != c->snaps.end());
    c->snaps.erase(it);
    relist(c);  // may have become dead
  }

  // Removes an unpinned leaf with its snapshots and page references. Returns the number of
  // snapshots dropped with it.
  int64_t remove_leaf(CacheNode* c) {
    REWIND_CHECK(c != root.get() && c->children.empty() && c->pins == 0);
    const int64_t n_snaps = static_cast<int64_t>(c->snaps.size());
    for (auto& s : c->snaps) drop_snap_record(s.get());
    for (auto& p : c->pages) unref_page(p);
    unlist(c);
    CacheNode* parent = c->parent;
    const size_t erased = parent->children.erase(c->tok(c->start));
    REWIND_CHECK(erased == 1);
    --st.n_nodes;
    relist(parent);
    return n_snaps;
  }

  void evict_to_budget() {
    while (bytes() > opt.budget_bytes && !lru.empty()) {
      const Victim v = lru.begin()->second;
      if (v.snap) {
        remove_snap(v.snap);
        ++st.evictions_snapshots;
      } else {
        st.evictions_snapshots += remove_leaf(v.node);
        ++st.evictions_nodes;
      }
    }
    if (bytes() > opt.budget_bytes) ++st.over_budget_events;
  }

  // Destroys every node below the root iteratively (a long conversation is a deep chain).
  void destroy_subtrees() {
    if (!root) return;
    std::vector<std::unique_ptr<CacheNode>> stack;
    for (auto& [k, c] : root->children) stack.push_back(std::move(c));
    root->children.clear();
    while (!stack.empty()) {
      std::unique_ptr<CacheNode> c = std::move(stack.back());
      stack.pop_back();
      for (auto& [k, ch] : c->children) stack.push_back(std::move(ch));
      c->children.clear();
    }
  }

  // --- pins --------------------------------------------------------------------------------
  void pin(CacheLease& l, const std::shared_ptr<CacheCore>& self, CacheNode* c, CacheSnap* s) {
    l.core_ = self;
    l.epoch_ = epoch;
    l.node_ = c;
    l.snap_ = s;
    ++c->pins;
    relist(c);
    if (s) {
      ++s->pins;
      relist(s);
    }
    ++st.active_leases;
  }
  void unpin(CacheNode* c, CacheSnap* s) {
    ++version;
    REWIND_CHECK(c->pins > 0);
    --c->pins;
    relist(c);
    if (s) {
      REWIND_CHECK(s->pins > 0);
      --s->pins;
      relist(s);
    }
    --st.active_leases;
    if (bytes() > opt.budget_bytes) evict_to_budget();
  }

  // --- operations --------------------------------------------------------------------------
  // The nodes entered along t (root excluded); returns L, the tokens matched.
  int64_t walk(std::span<const int32_t> t, std::vector<CacheNode*>* path) const {
    const int64_t n = static_cast<int64_t>(t.size());
    CacheNode* node = root.get();
    int64_t pos = 0;
    while (pos < n) {
      auto it = node->children.find(t[static_cast<size_t>(pos)]);
      if (it == node->children.end()) break;
      CacheNode* c = it->second.get();
      const int64_t lim = std::min(c->len(), n - pos);
      int64_t m = 1;  // the first token matched through the key
      while (m < lim && c->tok(c->start + m) == t[static_cast<size_t>(pos + m)]) ++m;
      path->push_back(c);
      pos += m;
      if (m < c->len()) break;
      node = c;
    }
    return pos;
  }

  // The deepest snapshot at a position <= lp on the path, or null.
  static CacheSnap* deepest_snap(const std::vector<CacheNode*>& path, int64_t lp) {
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      CacheNode* c = *it;
      if (c->start >= lp) continue;  // every snapshot here is past lp
      auto ub = std::upper_bound(
          c->snaps.begin(), c->snaps.end(), lp,
          [](int64_t v, const std::unique_ptr<CacheSnap>& s) { return v < s->pos(); });
      if (ub != c->snaps.begin()) return std::prev(ub)->get();
    }
    return nullptr;
  }

  LookupResult lookup(std::span<const int32_t> t, const std::shared_ptr<CacheCore>& self) {
    const int64_t from_tier = opt.tier && t.size() > 1 ? promote_from_tier(t) : 0;
    ++tick;
    ++version;
    ++st.lookups;
    const int64_t n = static_cast<int64_t>(t.size());
    std::vector<CacheNode*> path;  // nodes entered, root excluded
    const int64_t L = walk(t, &path);
    const int64_t lp = n > 0 ? std::min(L, n - 1) : 0;

    LookupResult r;
    r.common_prefix = L;
    CacheSnap* used = nullptr;
    int64_t p = 0;
    if (!opt.has_recurrent) {
      p = lp;
    } else {
      used = deepest_snap(path, lp);
      p = used ? used->pos() : 0;
    }
    r.resume_pos = p;
    r.tier_tokens = std::min(from_tier, p);
    if (used) r.snapshot = used->snap;

    // Page i from the node holding position min((i+1)*pt, p) - 1: the deepest one intersecting.
    CacheNode* holder = nullptr;  // the node with start < p <= end
    if (p > 0) {
      size_t k = 0;
      const int64_t n_pages = opt.has_attention ? (p + pt - 1) / pt : 0;
      r.pages.reserve(static_cast<size_t>(n_pages));
      for (int64_t i = 0; i < n_pages; ++i) {
        const int64_t q = std::min((i + 1) * pt, p) - 1;
        while (path[k]->end <= q) ++k;
        CacheNode* c = path[k];
        r.pages.push_back(c->pages[static_cast<size_t>(i - c->start / pt)]);
      }
      while (path[k]->end < p) ++k;
      holder = path[k];
      REWIND_CHECK(holder->start < p && p <= holder->end);
    }

    for (CacheNode* c : path) touch(c);
    if (used) touch(used);

    if (p == 0)
      r.kind = HitKind::Miss;
    else if (L == n)
      r.kind = HitKind::Exact;
    else if (!path.empty() && L == path.back()->end && path.back()->terminal)
      r.kind = HitKind::Extension;
    else
      r.kind = HitKind::Checkpoint;
    switch (r.kind) {
      case HitKind::Miss:
        ++st.misses;
        break;
      case HitKind::Exact:
        ++st.hits_exact;
        break;
      case HitKind::Extension:
        ++st.hits_extension;
        break;
      case HitKind::Checkpoint:
        ++st.hits_checkpoint;
        break;
    }
    st.tokens_reused += p;
    st.tokens_rerun += n - p;
    st.lost_to_spacing += lp - p;

    if (holder) pin(r.lease, self, holder, used);
    return r;
  }

  // from_tier: a prefix brought back from the tier (not an inserted history: no terminal mark,
  // not counted as an insert, not written back).
  void insert(std::span<const int32_t> t, const std::vector<PagePtr>& pages,
              std::span<const std::shared_ptr<const Snapshot>> snaps, int64_t anchor,
              std::span<const uint8_t> kinds, bool from_tier = false) {
    const int64_t n = static_cast<int64_t>(t.size());
    REWIND_CHECK(kinds.empty() || kinds.size() == snaps.size());
    if (opt.has_attention) {
      REWIND_CHECK_MSG(static_cast<int64_t>(pages.size()) == (n + pt - 1) / pt,
                       "insert of " + std::to_string(n) + " tokens with " +
                           std::to_string(pages.size()) + " pages");
      for (auto& p : pages) REWIND_CHECK(p != nullptr);
    } else {
      REWIND_CHECK(pages.empty());
    }
    REWIND_CHECK_MSG(opt.has_recurrent || snaps.empty(), "snapshots for a pure-attention cache");
    for (size_t i = 0; i < snaps.size(); ++i) {
      REWIND_CHECK(snaps[i] != nullptr);
      REWIND_CHECK_MSG(
          snaps[i]->pos >= 0 && snaps[i]->pos <= n,
          "snapshot at " + std::to_string(snaps[i]->pos) + " for " + std::to_string(n) + " tokens");
      REWIND_CHECK(i == 0 || snaps[i - 1]->pos <= snaps[i]->pos);
    }
    ++tick;
    ++version;
    if (!from_tier) ++st.inserts;
    if (n == 0) return;

    std::vector<CacheNode*> path;
    CacheNode* node = root.get();
    int64_t pos = 0;
    while (pos < n) {
      auto it = node->children.find(t[static_cast<size_t>(pos)]);
      if (it == node->children.end()) {
        node = add_leaf(node, pos, t, pages);
        path.push_back(node);
        pos = n;
        break;
      }
      CacheNode* c = it->second.get();
      const int64_t lim = std::min(c->len(), n - pos);
      int64_t m = 1;
      while (m < lim && c->tok(c->start + m) == t[static_cast<size_t>(pos + m)]) ++m;
      if (m < c->len()) c = split(c, c->start + m);
      path.push_back(c);
      node = c;
      pos += m;
    }
    if (!from_tier) node->terminal = true;
    for (CacheNode* c : path) touch(c);

    // Snapshots: reuse one already at the same position, else add.
    size_t k = 0;
    for (size_t si = 0; si < snaps.size(); ++si) {
      const std::shared_ptr<const Snapshot>& s = snaps[si];
      const uint8_t kind = kinds.empty() ? 0 : kinds[si];
      const int64_t q = s->pos;
      if (q == 0) continue;
      while (path[k]->end < q) ++k;
      CacheNode* c = path[k];
      auto lb = std::lower_bound(
          c->snaps.begin(), c->snaps.end(), q,
          [](const std::unique_ptr<CacheSnap>& r, int64_t v) { return r->pos() < v; });
      if (lb != c->snaps.end() && (*lb)->pos() == q) {
        (*lb)->kinds |= kind;
        touch(lb->get());
        continue;
      }
      auto rec = std::make_unique<CacheSnap>();
      rec->snap = s;
      rec->kinds = kind;
      rec->owner = c;
      rec->id = next_id++;
      rec->tick = tick;
      CacheSnap* raw = rec.get();
      c->snaps.insert(lb, std::move(rec));
      st.bytes_snapshots += s->bytes();
      ++st.n_snapshots;
      relist(raw);
      relist(c);  // alive now
    }
    if (anchor > 0 && anchor <= n) {
      size_t j = 0;
      while (path[j]->end < anchor) ++j;
      for (auto& s : path[j]->snaps)
        if (s->pos() == anchor) {
          s->anchor = true;
          s->kinds |= kCheckpointAnchor;
        }
    }

    thin(path, n);
    // Every snapshot on the path goes to the tier, not only this request's: one the tier lost
    // (a shared tier restarted empty) is offered again; those it holds are only touched.
    std::vector<std::shared_ptr<const Snapshot>> on_path;
    if (opt.tier && !from_tier)
      for (CacheNode* c : path)
        for (const auto& s : c->snaps)
          if (s->pos() <= n) on_path.push_back(s->snap);
    evict_to_budget();
    if (opt.tier && !from_tier) write_behind(t, pages, on_path);
  }

  // --- the tier (cache/cache_tier.h) -------------------------------------------------------
  size_t page_bytes() const { return static_cast<size_t>(opt.shape.page_bytes()); }
  size_t rec_bytes() const { return static_cast<size_t>(opt.shape.rec_floats()) * sizeof(float); }
  TierLayout page_layout() const { return TierLayout{0, page_bytes()}; }
  TierLayout ckpt_layout(int64_t q) const {
    return TierLayout{opt.has_recurrent ? rec_bytes() : 0,
                      opt.has_attention && q % pt != 0 ? page_bytes() : 0};
  }
  // keys[k] = the content key of t[0, k), k = 0..upto.
  void chain_keys(std::span<const int32_t> t, int64_t upto, std::vector<ContentKey>* keys) const {
    keys->resize(static_cast<size_t>(upto) + 1);
    (*keys)[0] = tier_root;
    for (int64_t k = 0; k < upto; ++k)
      (*keys)[static_cast<size_t>(k) + 1] =
          chain_next((*keys)[static_cast<size_t>(k)], t[static_cast<size_t>(k)]);
  }

  // Queues the history's full pages and its checkpoints for the tier, deepest first (so the
  // pages near the root are the most recently used); what the tier holds is only touched.
  // A page whose last row is the history's last position is left out when the MTP head lags
  // (its slot there is not defined yet); a checkpoint carries its partial page instead.
  void write_behind(std::span<const int32_t> t, const std::vector<PagePtr>& pages,
                    std::span<const std::shared_ptr<const Snapshot>> snaps) {
    const int64_t n = static_cast<int64_t>(t.size());
    chain_keys(t, n, &tier_keys);
    const int64_t lag = opt.shape.lagged_attn_layers > 0 ? 1 : 0;
    struct Obj {
      int64_t pos;
      TierKind kind;
      size_t index;  // page index or snapshot index
    };
    std::vector<Obj> objs;
    if (opt.has_attention)
      for (int64_t i = 0; (i + 1) * pt + lag <= n; ++i)
        objs.push_back({(i + 1) * pt, TierKind::Page, static_cast<size_t>(i)});
    for (size_t i = 0; i < snaps.size(); ++i)
      if (snaps[i]->pos > 0) objs.push_back({snaps[i]->pos, TierKind::Checkpoint, i});
    std::stable_sort(objs.begin(), objs.end(),
                     [](const Obj& a, const Obj& b) { return a.pos > b.pos; });
    CacheTier& tier = *opt.tier;
    for (const Obj& o : objs) {
      const ContentKey& key = tier_keys[static_cast<size_t>(o.pos)];
      if (tier.contains(key, o.kind)) {
        tier.touch(key, o.kind);
        continue;
      }
      TierPut put;
      put.key = key;
      put.kind = o.kind;
      put.pos = o.pos;
      if (o.kind == TierKind::Page) {
        const PagePtr& pg = pages[o.index];
        put.layout = page_layout();
        put.parts.push_back(std::span<const std::byte>(pg->raw(), pg->bytes()));
        put.owner = pg;
      } else {
        const std::shared_ptr<const Snapshot>& sn = snaps[o.index];
        put.layout = ckpt_layout(o.pos);
        put.page_tokens = pt;
        put.page_start = tier_keys[static_cast<size_t>(o.pos / pt * pt)];
        if (put.layout.rec_bytes > 0)
          put.parts.push_back(
              std::as_bytes(std::span<const float>(sn->rec.data(), sn->rec.size())));
        PagePtr pg;
        if (put.layout.kv_bytes > 0) {
          pg = pages[static_cast<size_t>(o.pos / pt)];
          put.parts.push_back(std::span<const std::byte>(pg->raw(), pg->bytes()));
        }
        put.owner = std::make_shared<std::pair<std::shared_ptr<const Snapshot>, PagePtr>>(sn, pg);
      }
      tier.put(std::move(put));
    }
  }

  // Before a lookup of t: when the tier holds a resume point deeper than RAM's, reads its pages
  // and checkpoint back and inserts them into the tree, so the lookup resumes there. Returns
  // the tokens it added to RAM's resume point (0: nothing deeper, or nothing readable).
  // A damaged object is skipped (the tier forgets it) and the next deepest point is tried.
  int64_t promote_from_tier(std::span<const int32_t> t) {
    const int64_t n = static_cast<int64_t>(t.size());
    std::vector<CacheNode*> path;
    const int64_t L = walk(t, &path);
    const int64_t lp = std::min(L, n - 1);
    int64_t p_ram = lp;
    if (opt.has_recurrent) {
      const CacheSnap* s = deepest_snap(path, lp);
      p_ram = s ? s->pos() : 0;
    }
    if (p_ram >= n - 1) return 0;
    const double t0 = now_ms();
    CacheTier& tier = *opt.tier;
    chain_keys(t, n - 1, &tier_keys);
    auto key = [&](int64_t k) -> const ContentKey& { return tier_keys[static_cast<size_t>(k)]; };
    tier.probe(tier_keys, pt, p_ram);  // a remote tier learns what it holds in one round trip
    // Full pages 0 .. full-1 are at hand: RAM holds those inside [0, L), the tier the others.
    int64_t full = 0;
    if (opt.has_attention)
      while ((full + 1) * pt <= n - 1 &&
             ((full + 1) * pt <= L || tier.contains(key((full + 1) * pt), TierKind::Page)))
        ++full;
    int64_t hi = opt.has_attention ? std::min(n - 1, full * pt + pt - 1) : n - 1;
    for (int attempt = 0; attempt < 4 && hi > p_ram; ++attempt) {
      int64_t q = 0;
      for (int64_t c = hi; c > p_ram && q == 0; --c)
        if (tier.contains(key(c), TierKind::Checkpoint) || (!opt.has_recurrent && c % pt == 0))
          q = c;
      if (q == 0) break;
      // The pages below q: RAM's where it has them, else read back.
      std::vector<PagePtr> pages;
      bool ok = true;
      if (opt.has_attention) {
        size_t k = 0;
        for (int64_t i = 0; i < q / pt && ok; ++i) {
          if ((i + 1) * pt <= L) {
            while (path[k]->end < (i + 1) * pt) ++k;
            CacheNode* c = path[k];
            pages.push_back(c->pages[static_cast<size_t>(i - c->start / pt)]);
            continue;
          }
          auto pg = std::make_shared<KvPage>(opt.shape);
          if (!tier.get(key((i + 1) * pt), TierKind::Page, page_layout(),
                        std::span<std::byte>(pg->raw(), pg->bytes()))) {
            hi = std::min(hi, i * pt + pt - 1);  // page i is gone: resume inside it at most
            ok = false;
            break;
          }
          pages.push_back(std::move(pg));
        }
      }
      if (!ok) continue;
      std::vector<std::shared_ptr<const Snapshot>> snaps;
      const TierLayout lay = ckpt_layout(q);
      if (lay.total() > 0) {
        std::vector<std::byte> buf(lay.total());
        if (!tier.get(key(q), TierKind::Checkpoint, lay, buf)) {
          hi = q - 1;
          continue;
        }
        if (lay.rec_bytes > 0) {
          AlignedBuffer<float> rec(lay.rec_bytes / sizeof(float));
          std::memcpy(rec.data(), buf.data(), lay.rec_bytes);
          snaps.push_back(std::make_shared<const Snapshot>(q, std::move(rec)));
        }
        if (lay.kv_bytes > 0) {
          auto pg = std::make_shared<KvPage>(opt.shape);
          std::memcpy(pg->raw(), buf.data() + lay.rec_bytes, lay.kv_bytes);
          pages.push_back(std::move(pg));
        }
      }
      insert(t.first(static_cast<size_t>(q)), pages, snaps, -1, {}, true);
      ++st.tier_hits;
      st.tier_tokens += q - p_ram;
      st.tier_load_ms += now_ms() - t0;
      return q - p_ram;
    }
    ++st.tier_misses;
    st.tier_load_ms += now_ms() - t0;
    return 0;
  }

  void thin(const std::vector<CacheNode*>& path, int64_t tip) {
    if (opt.policy.max_per_branch <= 0) return;
    std::vector<CacheSnap*> recs;
    for (CacheNode* c : path)
      for (auto& s : c->snaps) recs.push_back(s.get());
    if (static_cast<int64_t>(recs.size()) <= opt.policy.max_per_branch) return;
    std::vector<int64_t> pos(recs.size());
    std::vector<uint8_t> keep(recs.size());
    for (size_t i = 0; i < recs.size(); ++i) {
      pos[i] = recs[i]->pos();
      keep[i] = recs[i]->anchor || recs[i]->pins > 0;
    }
    for (size_t i : opt.policy.thin(pos, keep, tip)) {
      remove_snap(recs[i]);
      ++st.thinned_snapshots;
    }
  }

  void clear() {
    ++version;
    destroy_subtrees();
    root = std::make_unique<CacheNode>();
    lru.clear();
    page_refs.clear();
    st.bytes_pages = st.bytes_snapshots = 0;
    st.n_pages = st.n_snapshots = st.n_nodes = 0;
    st.active_leases = 0;
    ++epoch;
  }

  template <typename F>
  void for_each_node(F&& f) const {  // pre-order, root excluded, iterative
    std::vector<const CacheNode*> stack{root.get()};
    while (!stack.empty()) {
      const CacheNode* c = stack.back();
      stack.pop_back();
      if (c != root.get()) f(c);
      for (auto& [k, ch] : c->children) stack.push_back(ch.get());
    }
  }

  CacheTree dump(int64_t max_nodes, std::span<const int32_t> hl) const {
    CacheTree t;
    t.version = version;
    t.total_nodes = st.n_nodes;
    // Eviction order: the LRU listing's rank of each candidate (1 = next).
    std::unordered_map<const void*, int64_t> rank;
    int64_t r = 0;
    for (const auto& [k, v] : lru)
      rank[v.snap ? static_cast<const void*>(v.snap) : static_cast<const void*>(v.node)] = ++r;
    auto rank_of = [&](const void* p) {
      auto it = rank.find(p);
      return it == rank.end() ? int64_t{0} : it->second;
    };
    // Children oldest first (stable drawing), subtree totals bottom-up.
    struct Info {
      std::vector<const CacheNode*> kids;
      int64_t nodes = 0, tokens = 0, snaps = 0, pins = 0, deepest = 0;
      size_t bytes = 0;
    };
    std::unordered_map<const CacheNode*, Info> info;
    std::vector<const CacheNode*> order;  // pre-order, root first
    std::vector<const CacheNode*> stack{root.get()};
    while (!stack.empty()) {
      const CacheNode* c = stack.back();
      stack.pop_back();
      order.push_back(c);
      Info& in = info[c];
      for (const auto& [key, ch] : c->children) in.kids.push_back(ch.get());
      std::sort(in.kids.begin(), in.kids.end(),
                [](const CacheNode* a, const CacheNode* b) { return a->id < b->id; });
      for (const CacheNode* ch : in.kids) stack.push_back(ch);
    }
    auto kv_bytes = [](const CacheNode* c) {
      size_t b = 0;
      for (const auto& p : c->pages) b += p->bytes();
      return b;
    };
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const CacheNode* c = *it;
      Info& in = info[c];
      in.deepest = c->end;
      if (c != root.get()) {
        for (const auto& s : c->snaps) {
          size_t k = 5;
          for (size_t b = 0; b < 5; ++b)
            if (s->kinds & (1u << b)) k = b;
          t.snapshot_bytes_by_kind[k] += s->snap->bytes();
        }
        in.nodes = 1;
        in.tokens = c->len();
        in.snaps = static_cast<int64_t>(c->snaps.size());
        in.pins = c->pins;
        in.bytes = kv_bytes(c);
        for (const auto& s : c->snaps) in.bytes += s->snap->bytes();
      }
      for (const CacheNode* ch : in.kids) {
        const Info& ci = info[ch];
        in.nodes += ci.nodes;
        in.tokens += ci.tokens;
        in.snaps += ci.snaps;
        in.pins += ci.pins;
        in.bytes += ci.bytes;
        in.deepest = std::max(in.deepest, ci.deepest);
      }
    }
    // The highlighted path, then the biggest subtrees (by tokens) until max_nodes are listed.
    std::unordered_set<const CacheNode*> chosen;
    std::vector<const CacheNode*> path;
    {
      const CacheNode* node = root.get();
      const int64_t n = static_cast<int64_t>(hl.size());
      int64_t pos = 0;
      while (pos < n) {
        auto it = node->children.find(hl[static_cast<size_t>(pos)]);
        if (it == node->children.end()) break;
        const CacheNode* c = it->second.get();
        const int64_t lim = std::min(c->len(), n - pos);
        int64_t m = 1;
        while (m < lim && c->tok(c->start + m) == hl[static_cast<size_t>(pos + m)]) ++m;
        path.push_back(c);
        chosen.insert(c);
        pos += m;
        if (m < c->len()) break;
        node = c;
      }
      t.path_matched = pos;
    }
    using Cand = std::pair<int64_t, uint64_t>;  // (tokens, -id: older first on ties)
    std::priority_queue<std::pair<Cand, const CacheNode*>> frontier;
    auto offer = [&](const CacheNode* c) {
      for (const CacheNode* ch : info[c].kids)
        if (!chosen.count(ch)) frontier.push({{info[ch].tokens, ~ch->id}, ch});
    };
    offer(root.get());
    for (const CacheNode* c : path) offer(c);
    while (static_cast<int64_t>(chosen.size()) < max_nodes && !frontier.empty()) {
      const CacheNode* c = frontier.top().second;
      frontier.pop();
      if (!chosen.insert(c).second) continue;
      offer(c);
    }
    // Listing: pre-order over the chosen nodes; each parent's other children folded into one.
    std::unordered_map<const CacheNode*, int64_t> index;
    std::vector<std::pair<const CacheNode*, int64_t>> todo{{root.get(), -1}};
    while (!todo.empty()) {
      auto [c, parent] = todo.back();
      todo.pop_back();
      int64_t self = -1;
      if (c != root.get()) {
        const Info& in = info[c];
        CacheTreeNode e;
        e.id = c->id;
        e.parent = parent;
        e.start = c->start;
        e.end = c->end;
        e.n_pages = static_cast<int64_t>(c->pages.size());
        for (const auto& p : c->pages)
          if (page_refs.at(p.get()) > 1) ++e.shared_pages;
        e.kv_bytes = kv_bytes(c);
        for (const auto& s : c->snaps)
          e.snaps.push_back(
              {s->pos(), s->kinds, s->snap->bytes(), s->pins, tick - s->tick, rank_of(s.get())});
        e.pins = c->pins;
        e.pinned = in.pins > 0;
        e.age = tick - c->tick;
        e.evict_rank = rank_of(c);
        e.terminal = c->terminal;
        e.sub_nodes = in.nodes;
        e.sub_tokens = in.tokens;
        e.sub_snapshots = in.snaps;
        e.sub_bytes = in.bytes;
        self = static_cast<int64_t>(t.nodes.size());
        index[c] = self;
        t.nodes.push_back(std::move(e));
      }
      const std::vector<const CacheNode*>& kids = info[c].kids;
      CacheTreeNode agg;
      agg.aggregate = true;
      agg.parent = self;
      agg.start = agg.end = c->end;
      for (const CacheNode* ch : kids) {
        if (chosen.count(ch)) continue;
        const Info& ci = info[ch];
        agg.sub_nodes += ci.nodes;
        agg.sub_tokens += ci.tokens;
        agg.sub_snapshots += ci.snaps;
        agg.sub_bytes += ci.bytes;
        agg.pinned = agg.pinned || ci.pins > 0;
        agg.end = std::max(agg.end, ci.deepest);
      }
      if (agg.sub_nodes > 0) t.nodes.push_back(std::move(agg));
      for (auto it = kids.rbegin(); it != kids.rend(); ++it)
        if (chosen.count(*it)) todo.push_back({*it, self});
    }
    t.listed_nodes = static_cast<int64_t>(chosen.size());
    for (const CacheNode* c : path) t.path.push_back(index.at(c));
    return t;
  }

  size_t bytes_by_walk() const {
    std::unordered_set<const KvPage*> seen_pages;
    std::unordered_set<const Snapshot*> seen_snaps;
    size_t b = 0;
    for_each_node([&](const CacheNode* c) {
      for (auto& p : c->pages)
        if (seen_pages.insert(p.get()).second) b += p->bytes();
      for (auto& s : c->snaps)
        if (seen_snaps.insert(s->snap.get()).second) b += s->snap->bytes();
    });
    return b;
  }

  void check_invariants() const {
    std::unordered_map<const KvPage*, int> refs;
    int64_t n_nodes = 0, n_snaps = 0;
    size_t listed = 0, snap_bytes = 0;
    REWIND_CHECK(root->pages.empty() && root->snaps.empty() && !root->listed);
    for_each_node([&](const CacheNode* c) {
      ++n_nodes;
      const CacheNode* par = c->parent;
      REWIND_CHECK(par != nullptr && c->start == par->end && c->end > c->start);
      REWIND_CHECK(c->toks && c->toks_base <= c->start &&
                   c->end - c->toks_base <= static_cast<int64_t>(c->toks->size()));
      auto it = par->children.find(c->tok(c->start));
      REWIND_CHECK(it != par->children.end() && it->second.get() == c);
      if (opt.has_attention) {
        REWIND_CHECK(static_cast<int64_t>(c->pages.size()) ==
                     (c->end + pt - 1) / pt - c->start / pt);
      } else {
        REWIND_CHECK(c->pages.empty());
      }
      for (auto& p : c->pages) {
        REWIND_CHECK(p != nullptr);
        ++refs[p.get()];
      }
      int64_t last = c->start;
      for (auto& s : c->snaps) {
        REWIND_CHECK(s->owner == c && s->snap && s->pos() > last && s->pos() <= c->end);
        REWIND_CHECK(s->pins >= 0);
        REWIND_CHECK(s->listed == (s->pins == 0));
        if (s->listed) {
          REWIND_CHECK(s->key == (LruKey{1, s->tick, 0, s->id}));
          auto l = lru.find(s->key);
          REWIND_CHECK(l != lru.end() && l->second.snap == s.get() && !l->second.node);
          ++listed;
        }
        last = s->pos();
        ++n_snaps;
        snap_bytes += s->snap->bytes();
      }
      REWIND_CHECK(c->pins >= 0);
      const bool cand = c->pins == 0 && c->children.empty();
      REWIND_CHECK(c->listed == cand);
      if (c->listed) {
        REWIND_CHECK(c->key == (LruKey{dead(c) ? 0 : 1, c->tick, 1, c->id}));
        auto l = lru.find(c->key);
        REWIND_CHECK(l != lru.end() && l->second.node == c && !l->second.snap);
        ++listed;
      }
    });
    REWIND_CHECK(listed == lru.size());
    REWIND_CHECK(refs.size() == page_refs.size());
    size_t page_bytes = 0;
    for (auto& [p, n] : refs) {
      auto it = page_refs.find(p);
      REWIND_CHECK(it != page_refs.end() && it->second == n);
      page_bytes += p->bytes();
    }
    REWIND_CHECK(page_bytes == st.bytes_pages && snap_bytes == st.bytes_snapshots);
    REWIND_CHECK(n_nodes == st.n_nodes && n_snaps == st.n_snapshots);
    REWIND_CHECK(static_cast<int64_t>(refs.size()) == st.n_pages);
    REWIND_CHECK(bytes() == bytes_by_walk());
  }
};

}  // namespace detail

// --- CacheLease ------------------------------------------------------------------------------

CacheLease& CacheLease::operator=(CacheLease&& o) noexcept {
  if (this != &o) {
    release();
    core_ = std::move(o.core_);
    epoch_ = o.epoch_;
    node_ = std::exchange(o.node_, nullptr);
    snap_ = std::exchange(o.snap_, nullptr);
    o.core_.reset();
  }
  return *this;
}

void CacheLease::release() {
  if (!node_) return;
  detail::CacheNode* node = std::exchange(node_, nullptr);
  detail::CacheSnap* snap = std::exchange(snap_, nullptr);
  std::shared_ptr<detail::CacheCore> core = core_.lock();
  core_.reset();
  if (core && core->epoch == epoch_) core->unpin(node, snap);
}

// --- PrefixCache -----------------------------------------------------------------------------

PrefixCache::PrefixCache(const Options& opt) : core_(std::make_shared<detail::CacheCore>(opt)) {}
PrefixCache::~PrefixCache() = default;
PrefixCache::PrefixCache(PrefixCache&&) noexcept = default;
PrefixCache& PrefixCache::operator=(PrefixCache&&) noexcept = default;

const PrefixCache::Options& PrefixCache::options() const {
  return core_->opt;
}

LookupResult PrefixCache::lookup(std::span<const int32_t> tokens) {
  return core_->lookup(tokens, core_);
}

void PrefixCache::insert(std::span<const int32_t> tokens, const std::vector<PagePtr>& pages,
                         std::span<const std::shared_ptr<const Snapshot>> snaps, int64_t anchor,
                         std::span<const uint8_t> kinds) {
  core_->insert(tokens, pages, snaps, anchor, kinds);
}

CacheTree PrefixCache::dump(int64_t max_nodes, std::span<const int32_t> highlight) const {
  return core_->dump(max_nodes, highlight);
}

CacheStats PrefixCache::stats() const {
  CacheStats s = core_->st;
  s.budget_bytes = core_->opt.budget_bytes;
  s.over_budget = core_->bytes() > core_->opt.budget_bytes;
  if (core_->opt.tier) s.tiers = core_->opt.tier->all_stats();
  return s;
}

size_t PrefixCache::bytes() const {
  return core_->bytes();
}

void PrefixCache::set_budget_bytes(size_t budget) {
  ++core_->version;
  core_->opt.budget_bytes = budget;
  core_->evict_to_budget();
}

void PrefixCache::clear() {
  core_->clear();
}

size_t PrefixCache::bytes_by_walk() const {
  return core_->bytes_by_walk();
}

void PrefixCache::check_invariants() const {
  core_->check_invariants();
}

}  // namespace rw
