// VocabTrie, GrammarAutomaton and GrammarMatcher (matcher.h).
#include "rewind/grammar/matcher.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>

#include "rewind/base/thread_pool.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

void apply_token_mask(const uint64_t* mask, float* logits, int32_t n_vocab) {
  // Per byte of a mask word, eight lane masks (all ones: keep the logit); a refused logit gets
  // the bits of -infinity. Branch-free over eight floats, so the loop vectorises.
  static const auto kLanes = [] {
    std::array<std::array<uint32_t, 8>, 256> t{};
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k) t[b][k] = (b >> k) & 1 ? 0xFFFFFFFFu : 0u;
    return t;
  }();
  const uint32_t neg_bits = std::bit_cast<uint32_t>(-INFINITY);
  const int32_t n_words = (n_vocab + 63) / 64;
  for (int32_t w = 0; w < n_words; ++w) {
    const uint64_t m = mask[w];
    if (m == ~uint64_t{0}) continue;
    float* row = logits + static_cast<ptrdiff_t>(w) * 64;
    const int32_t lim = std::min<int32_t>(64, n_vocab - w * 64);
    if (m == 0) {  // nothing allowed: a plain fill
      std::fill(row, row + lim, -INFINITY);
      continue;
    }
    for (int32_t j = 0; j < lim; j += 8) {
      const uint32_t bits = static_cast<uint32_t>(m >> j) & 0xFF;
      if (bits == 0xFF) continue;
      const auto& keep = kLanes[bits];
      if (j + 8 <= lim) {
        uint32_t u[8];
        std::memcpy(u, row + j, sizeof(u));
        for (int k = 0; k < 8; ++k) u[k] = (u[k] & keep[k]) | (neg_bits & ~keep[k]);
        std::memcpy(row + j, u, sizeof(u));
      } else {
        for (int32_t k = 0; j + k < lim; ++k)
          if (!keep[k]) row[j + k] = -INFINITY;
      }
    }
  }
}

// ---- VocabTrie ----

VocabTrie::VocabTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids)
    : bytes_(token_bytes), eos_(std::move(eos_ids)) {
  n_vocab_ = static_cast<int32_t>(bytes_.size());
  for (int32_t id : eos_) {
    REWIND_CHECK(id >= 0);
    n_vocab_ = std::max(n_vocab_, id + 1);
  }
  bytes_.resize(static_cast<size_t>(n_vocab_));
  for (int32_t id : eos_) bytes_[id].clear();
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab_; ++id)
    if (!bytes_[id].empty() && bytes_[id].size() <= 0xFFFF) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[a].compare(bytes_[b]);
    return c < 0 || (c == 0 && a < b);
  });
  std::vector<int32_t> open;      // the node at each depth on the current path
  std::vector<int32_t> tok_node;  // per entry of order: the node its bytes end at
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& b = bytes_[id];
    size_t lcp = 0;
    if (prev) {
      const size_t lim = std::min({b.size(), prev->size(), open.size()});
      while (lcp < lim && b[lcp] == (*prev)[lcp]) ++lcp;
    }
    while (open.size() > lcp) {
      skip_[open.back()] = static_cast<int32_t>(byte_.size());
      open.pop_back();
    }
    for (size_t k = lcp; k < b.size(); ++k) {
      open.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(b[k]));
      depth_.push_back(static_cast<uint16_t>(k + 1));
      skip_.push_back(0);
    }
    tok_node.push_back(open.back());
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(b.size()));
    prev = &b;
  }
  while (!open.empty()) {
    skip_[open.back()] = static_cast<int32_t>(byte_.size());
    open.pop_back();
  }
  // Tokens come out in node order (a node's own tokens sort before its descendants').
  tok_begin_.assign(byte_.size() + 1, 0);
  for (int32_t node : tok_node) ++tok_begin_[node + 1];
  std::partial_sum(tok_begin_.begin(), tok_begin_.end(), tok_begin_.begin());
  tok_ids_ = order;
  // About 64 chunks, cut only between subtrees of the root's children.
  const int32_t n_nodes = static_cast<int32_t>(byte_.size());
  const int32_t target = std::max<int32_t>(n_nodes / 64, 1024);
  for (int32_t i = 0; i < n_nodes; i = skip_[i])
    if (chunk_begin_.empty() || i - chunk_begin_.back() >= target) chunk_begin_.push_back(i);
  chunk_begin_.push_back(n_nodes);
}

VocabTrie VocabTrie::from_tokenizer(const Tokenizer& tok, std::vector<int32_t> eos_ids,
                                    const std::vector<std::string>& keep_special) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_special(id)) {
      bytes[id] = tok.token_bytes(id);
    } else if (std::find(keep_special.begin(), keep_special.end(), tok.token_text(id)) !=
               keep_special.end()) {
      bytes[id] = tok.token_text(id);  // an added token's text is its content
    }
  }
  return VocabTrie(bytes, std::move(eos_ids));
}

bool VocabTrie::is_eos(int32_t id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

size_t VocabTrie::memory_bytes() const {
  size_t n = byte_.capacity() + depth_.capacity() * 2 + skip_.capacity() * 4 +
             tok_begin_.capacity() * 4 + tok_ids_.capacity() * 4 + eos_.capacity() * 4;
  for (const std::string& b : bytes_)
    n += sizeof(std::string) + (b.capacity() > 15 ? b.capacity() + 1 : 0);
  return n;
}

size_t VocabTrie::memory_bound(const Tokenizer& tok) {
  // At most one node per byte of every token (node arrays grown by doubling: twice that),
  // the tokens' strings as copied, the id arrays, and a few end-of-sequence ids.
  const size_t n = static_cast<size_t>(tok.vocab_size()) + 64;
  size_t bytes = 0, strings = n * sizeof(std::string);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    // A special token counts as kept (its text), whatever the caller keeps.
    const size_t len = tok.is_special(id) ? tok.token_text(id).size() : tok.token_bytes(id).size();
    bytes += len;
    if (len > 15) strings += 2 * len + 1;
  }
  return 2 * (bytes + 1) * (1 + 2 + 4 + 4) + 2 * n * 4 * 2 + strings;
}

// ---- GrammarAutomaton ----

namespace {
// Estimated bytes of one hash-map or list entry beyond its key and value (node, bucket).
constexpr size_t kNodeBytes = 48;
constexpr int32_t kEmptyFrame = 0;
// Room in `v` for `extra` more elements: twice its capacity when `room` grants the bytes,
// else only `step` more; false when not even that is granted.
template <class V, class Room>
bool grow(V& v, size_t extra, size_t step, size_t elem_bytes, Room&& room) {
  if (v.size() + extra <= v.capacity()) return true;
  const size_t doubled = std::max(v.capacity() * 2, v.size() + extra);
  if (room((doubled - v.capacity()) * elem_bytes)) {
    v.reserve(doubled);
    return true;
  }
  const size_t small = v.size() + std::max(extra, step);
  if (!room((small - v.capacity()) * elem_bytes)) return false;
  v.reserve(small);
  return true;
}
constexpr int32_t kHoleFrame = 1;  // a leaf of its own: accepts every byte, stays itself
}  // namespace

GrammarAutomaton::GrammarAutomaton(Key, std::shared_ptr<const Grammar> grammar,
                                   std::shared_ptr<const VocabTrie> vocab, AutomatonLimits limits)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), limits_(limits) {}

Result<std::shared_ptr<GrammarAutomaton>> GrammarAutomaton::create(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> vocab,
    AutomatonLimits limits) {
  auto a = std::make_shared<GrammarAutomaton>(Key{}, std::move(grammar), std::move(vocab), limits);
  REWIND_TRY_STATUS(a->init());
  return a;
}

Status GrammarAutomaton::init() {
  frames_.push_back({-1, -1});  // kEmptyFrame: the root's rule finished
  frame_min_.push_back(0);
  frames_.push_back({-2, -1});  // kHoleFrame: what lies below a truncated stack
  frame_min_.push_back(0);
  // kDead and kEnded: no stacks, every byte leads to kDead.
  for (int k = 0; k < 2; ++k) {
    states_.push_back({0, 0, false, false, kGrammarInf, k});
    trans_.insert(trans_.end(), 256, kDead);
  }
  walk_states_.resize(static_cast<size_t>(vocab_->max_depth_) + 1);
  // The initial state is made whatever the shared budget holds (charged just after). Its
  // limits still hold: an initial state of too many stacks (an enum of thousands of values)
  // is an error for the request that asked for it.
  std::shared_ptr<GrammarMemoryBudget> budget = std::move(limits_.budget);
  std::vector<int32_t> leaves;
  bool accepting = false;
  new_epoch();
  Status st = Ok{};
  for (int32_t alt : grammar_->rules[grammar_->root].alts) {
    auto f = frame(alt, 0);
    st = f.ok() ? expand(*f, leaves, accepting) : Status(f.error());
    if (!st.ok()) break;
  }
  Result<int32_t> s = st.ok() ? intern_state(leaves, accepting) : Result<int32_t>(st.error());
  limits_.budget = std::move(budget);
  charged_ = 0;
  sync_budget();
  if (!s.ok()) return s.error();
  initial_ = *s;
  return Ok{};
}

GrammarAutomaton::~GrammarAutomaton() {
  if (limits_.budget) limits_.budget->used.fetch_sub(charged_, std::memory_order_relaxed);
}

size_t GrammarAutomaton::footprint() const {
  size_t n = frames_.capacity() * sizeof(Frame) + frame_min_.capacity() * sizeof(uint32_t) +
             frame_ids_.size() * (kNodeBytes + 16) + states_.capacity() * sizeof(StateInfo) +
             leaves_.capacity() * sizeof(int32_t) + state_key_bytes_ +
             state_ids_.size() * (kNodeBytes + sizeof(std::string)) +
             trans_.capacity() * sizeof(int32_t) + seen_mark_.capacity() * sizeof(uint32_t) +
             walk_states_.capacity() * sizeof(int32_t) +
             scratch_mask_.capacity() * sizeof(uint64_t);
  n += mask_bytes_ + masks_.size() * (2 * kNodeBytes + sizeof(CachedMask));
  n += split_bytes_ + splits_.size() * (kNodeBytes + sizeof(SplitMask));
  return n;
}

void GrammarAutomaton::sync_budget() {
  const size_t now = footprint();
  if (limits_.budget) {
    if (now > charged_)
      limits_.budget->used.fetch_add(now - charged_, std::memory_order_relaxed);
    else
      limits_.budget->used.fetch_sub(charged_ - now, std::memory_order_relaxed);
  }
  charged_ = now;
}

bool GrammarAutomaton::make_room(size_t want) {
  if (!limits_.budget) return true;
  sync_budget();
  const size_t cap = limits_.budget->cap;
  auto fits = [&] { return limits_.budget->used.load(std::memory_order_relaxed) + want <= cap; };
  while (!fits() && !lru_.empty()) {
    auto old = masks_.find(lru_.back());
    mask_bytes_ -= old->second.words.size() * sizeof(uint64_t);
    masks_.erase(old);
    lru_.pop_back();
    sync_budget();
  }
  if (!fits() && !splits_.empty()) {
    splits_.clear();
    split_bytes_ = 0;
    sync_budget();
  }
  return fits();
}

Result<int32_t> GrammarAutomaton::frame(int32_t pos, int32_t parent) {
  if (grammar_->elements[pos].kind == GrammarElem::kEnd) return parent;  // a finished frame
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(parent);
  auto it = frame_ids_.find(key);
  if (it != frame_ids_.end()) return it->second;
  if (static_cast<int64_t>(frames_.size()) >= limits_.max_stacks)
    return make_error("grammar: matcher exceeded its limit of " +
                      std::to_string(limits_.max_stacks) + " stack frames");
  // frames_, frame_min_ and seen_mark_ grow together (seen_mark_ to frames_'s capacity).
  auto room = [this](size_t b) { return make_room(b); };
  if (!make_room(kNodeBytes + 16) ||
      !grow(frames_, 1, 64, sizeof(Frame) + 2 * sizeof(uint32_t), room))
    return make_error("grammar: the grammar cache's memory cap of " +
                      std::to_string(limits_.budget->cap >> 20) + " MiB is reached");
  frame_min_.reserve(frames_.capacity());
  const int32_t id = static_cast<int32_t>(frames_.size());
  frames_.push_back({pos, parent});
  const uint64_t m = uint64_t{grammar_->suffix_min[pos]} + frame_min_[parent];
  frame_min_.push_back(static_cast<uint32_t>(std::min<uint64_t>(m, kGrammarInf - 1)));
  frame_ids_.emplace(key, id);
  return id;
}

// Adds to `leaves` every stack reachable from frame `f` by entering rules without reading a
// byte (tops are byte sets); an emptied stack makes the state accepting. Terminates because
// the grammar has no left recursion; frames seen in this closure are skipped.
Status GrammarAutomaton::expand(int32_t f, std::vector<int32_t>& leaves, bool& accepting) {
  std::vector<int32_t> todo = {f};
  const Grammar& g = *grammar_;
  while (!todo.empty()) {
    const int32_t x = todo.back();
    todo.pop_back();
    if (x == kEmptyFrame) {
      accepting = true;
      continue;
    }
    if (x == kHoleFrame) {
      leaves.push_back(kHoleFrame);
      continue;
    }
    if (seen_mark_.size() < frames_.size()) seen_mark_.resize(frames_.capacity(), 0);
    if (seen_mark_[x] == seen_epoch_) continue;
    seen_mark_[x] = seen_epoch_;
    const Frame fr = frames_[x];
    const GrammarElement& el = g.elements[fr.pos];
    if (el.kind == GrammarElem::kBytes) {
      leaves.push_back(x);
      continue;
    }
    REWIND_TRY(const int32_t ret, frame(fr.pos + 1, fr.parent));
    for (int32_t alt : g.rules[el.arg].alts) {
      REWIND_TRY(const int32_t child, frame(alt, ret));
      todo.push_back(child);
    }
  }
  return Ok{};
}

Result<int32_t> GrammarAutomaton::intern_state(std::vector<int32_t>& leaves, bool accepting) {
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  if (leaves.empty() && !accepting) return kDead;
  if (static_cast<int64_t>(leaves.size()) > limits_.max_state_stacks)
    return make_error("grammar: matcher exceeded its limit of " +
                      std::to_string(limits_.max_state_stacks) + " stacks in one state");
  std::string key(reinterpret_cast<const char*>(leaves.data()), leaves.size() * sizeof(int32_t));
  key += accepting ? '\1' : '\0';
  auto it = state_ids_.find(key);
  if (it != state_ids_.end()) return it->second;
  if (static_cast<int64_t>(states_.size()) >= limits_.max_states ||
      static_cast<int64_t>(leaves_.size() + leaves.size()) > limits_.max_stacks)
    return make_error("grammar: matcher exceeded its limit of " +
                      std::to_string(limits_.max_states) + " states");
  sync_budget();
  auto room = [this](size_t b) { return make_room(b); };
  if (!make_room(key.size() + 1 + kNodeBytes + sizeof(std::string)) ||
      !grow(trans_, 256, 256 * 16, sizeof(int32_t), room) ||
      !grow(states_, 1, 16, sizeof(StateInfo), room) ||
      !grow(leaves_, leaves.size(), 1024, sizeof(int32_t), room))
    return make_error("grammar: the grammar cache's memory cap of " +
                      std::to_string(limits_.budget->cap >> 20) + " MiB is reached");
  uint32_t min_bytes = accepting ? 0 : kGrammarInf;
  for (int32_t l : leaves)
    if (l != kHoleFrame) min_bytes = std::min(min_bytes, frame_min_[l]);
  const int32_t id = static_cast<int32_t>(states_.size());
  states_.push_back({static_cast<int32_t>(leaves_.size()), static_cast<int32_t>(leaves.size()),
                     accepting, !leaves.empty() && leaves[0] == kHoleFrame, min_bytes, -1});
  leaves_.insert(leaves_.end(), leaves.begin(), leaves.end());
  trans_.insert(trans_.end(), 256, -1);
  state_key_bytes_ += key.capacity() > 15 ? key.capacity() + 1 : 0;
  state_ids_.emplace(std::move(key), id);
  sync_budget();
  return id;
}

Result<int32_t> GrammarAutomaton::transition(int32_t state, uint8_t byte) {
  const int32_t known = trans_[static_cast<size_t>(state) * 256 + byte];
  if (known >= 0) return known;
  const Grammar& g = *grammar_;
  std::vector<int32_t> leaves;
  bool accepting = false;
  new_epoch();
  const StateInfo info = states_[state];
  for (int32_t k = 0; k < info.count; ++k) {
    if (leaves_[info.begin + k] == kHoleFrame) {
      leaves.push_back(kHoleFrame);
      continue;
    }
    const Frame fr = frames_[leaves_[info.begin + k]];
    if (!g.byte_sets[g.elements[fr.pos].arg].test(byte)) continue;
    REWIND_TRY(const int32_t next, frame(fr.pos + 1, fr.parent));
    REWIND_TRY_STATUS(expand(next, leaves, accepting));
  }
  REWIND_TRY(const int32_t id, intern_state(leaves, accepting));
  trans_[static_cast<size_t>(state) * 256 + byte] = id;
  ++n_transitions_;
  return id;
}

Status GrammarAutomaton::walk_subtree(int32_t node, int32_t end, int32_t at, TokenMask& words) {
  const VocabTrie& v = *vocab_;
  auto set_tokens = [&](int32_t i) {
    for (int32_t k = v.tok_begin_[i]; k < v.tok_begin_[i + 1]; ++k) {
      const int32_t id = v.tok_ids_[k];
      words[id >> 6] |= uint64_t{1} << (id & 63);
    }
  };
  int32_t i = node;
  if (node >= 0) {  // the subtree's root itself
    set_tokens(node);
    walk_states_[v.depth_[node]] = at;
    ++i;
  } else {
    walk_states_[0] = at;
    i = 0;
  }
  while (i < end) {
    const int32_t d = v.depth_[i];
    const int32_t from = walk_states_[d - 1];
    int32_t to = trans_[static_cast<size_t>(from) * 256 + v.byte_[i]];
    if (to < 0) {
      REWIND_TRY(to, transition(from, v.byte_[i]));
    }
    if (to == kDead) {
      i = v.skip_[i];
      continue;
    }
    walk_states_[d] = to;
    set_tokens(i);
    ++i;
  }
  return Ok{};
}

void GrammarAutomaton::whole_trie_tasks(int32_t state, int32_t job,
                                        std::vector<WalkTask>& tasks) const {
  const VocabTrie& v = *vocab_;
  for (size_t c = 0; c + 1 < v.chunk_begin_.size(); ++c)
    tasks.push_back({v.chunk_begin_[c], v.chunk_begin_[c + 1], state, job});
}

Status GrammarAutomaton::walk_parallel(int32_t state, TokenMask& words, std::vector<int32_t>* roots,
                                       ThreadPool* pool) {
  std::vector<WalkTask> tasks;
  whole_trie_tasks(state, 0, tasks);
  return walk_many(std::move(tasks), {{&words, roots}}, pool);
}

Status GrammarAutomaton::walk_many(std::vector<WalkTask> tasks, const std::vector<WalkJob>& jobs,
                                   ThreadPool* pool) {
  const VocabTrie& v = *vocab_;
  struct Pending {
    int32_t job, node, from;  // node's byte from state `from`: a transition not known yet
  };
  struct Part {                    // one thread's output
    std::vector<TokenMask> words;  // per job, allocated when first written
    std::vector<Pending> pending;
    std::vector<std::pair<int32_t, int32_t>> roots;  // (job, node)
    std::vector<int32_t> states;                     // per depth
  };
  const size_t n_words = static_cast<size_t>(v.n_words());
  const int n_threads = pool->n_threads();
  std::vector<Part> parts(static_cast<size_t>(n_threads));
  for (Part& p : parts) {
    p.words.resize(jobs.size());
    p.states.assign(static_cast<size_t>(v.max_depth_) + 1, 0);
  }
  const int32_t* trans = trans_.data();
  const StateInfo* infos = states_.data();
  // Reads only: the table is not written until every thread is done.
  auto walk = [&](Part& p, const WalkTask& t) {
    const bool split = jobs[static_cast<size_t>(t.job)].roots != nullptr;
    TokenMask& out = p.words[static_cast<size_t>(t.job)];
    if (out.empty()) out.assign(n_words, 0);
    const int32_t base = v.depth_[t.begin] - 1;
    p.states[static_cast<size_t>(base)] = t.at;
    for (int32_t i = t.begin; i < t.end;) {
      const int32_t d = v.depth_[i];
      const int32_t from = p.states[static_cast<size_t>(d - 1)];
      const int32_t to = trans[static_cast<size_t>(from) * 256 + v.byte_[i]];
      if (to < 0) p.pending.push_back({t.job, i, from});
      if (to <= kDead) {
        i = v.skip_[i];
        continue;
      }
      if (split && infos[to].hole && infos[to].count == 1 && !infos[to].accepting) {
        p.roots.push_back({t.job, i});
        i = v.skip_[i];
        continue;
      }
      p.states[static_cast<size_t>(d)] = to;
      for (int32_t k = v.tok_begin_[i]; k < v.tok_begin_[i + 1]; ++k) {
        const int32_t id = v.tok_ids_[k];
        out[id >> 6] |= uint64_t{1} << (id & 63);
      }
      ++i;
    }
  };
  while (!tasks.empty()) {
    trans = trans_.data();
    infos = states_.data();
    int64_t nodes = 0;
    for (const WalkTask& t : tasks) nodes += t.end - t.begin;
    pool->parallel_guided(
        static_cast<int64_t>(tasks.size()), 1, 1,
        [&](int thread, int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) walk(parts[static_cast<size_t>(thread)], tasks[k]);
        },
        nodes * 8);
    // The unknown transitions, alone and in a fixed order (the same states are made whatever
    // the thread count); each live one is a subtree to walk next round.
    std::vector<Pending> pending;
    for (Part& p : parts) {
      pending.insert(pending.end(), p.pending.begin(), p.pending.end());
      p.pending.clear();
    }
    std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
      return a.job != b.job ? a.job < b.job : a.node < b.node;
    });
    tasks.clear();
    for (const Pending& q : pending) {
      REWIND_TRY(const int32_t to, transition(q.from, v.byte_[q.node]));
      if (to == kDead) continue;
      const WalkJob& job = jobs[static_cast<size_t>(q.job)];
      const StateInfo& at = states_[to];
      if (job.roots && at.hole && at.count == 1 && !at.accepting) {
        job.roots->push_back(q.node);
        continue;
      }
      TokenMask& words = *job.words;
      for (int32_t k = v.tok_begin_[q.node]; k < v.tok_begin_[q.node + 1]; ++k) {
        const int32_t id = v.tok_ids_[k];
        words[id >> 6] |= uint64_t{1} << (id & 63);
      }
      if (q.node + 1 < v.skip_[q.node]) tasks.push_back({q.node + 1, v.skip_[q.node], to, q.job});
    }
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    TokenMask& words = *jobs[j].words;
    for (Part& p : parts) {
      if (p.words[j].empty()) continue;
      for (size_t w = 0; w < n_words; ++w) words[w] |= p.words[j][w];
    }
  }
  for (Part& p : parts)
    for (const auto& [job, node] : p.roots) jobs[static_cast<size_t>(job)].roots->push_back(node);
  for (const WalkJob& j : jobs)
    if (j.roots) std::sort(j.roots->begin(), j.roots->end());
  return Ok{};
}

// The state with its stacks cut just above the deepest frame they all share (the context they
// have in common) and kHoleFrame put there; the state itself when there is no such frame within
// kSplitSearch frames. A cut that would leave only the hole moves one frame down.
Result<int32_t> GrammarAutomaton::split_state(int32_t state) {
  if (states_[state].split >= 0) return states_[state].split;
  const StateInfo info = states_[state];
  if (info.count == 0) {  // only the end of the grammar: nothing to split
    states_[state].split = state;
    return state;
  }
  std::unordered_map<int32_t, int32_t> count;  // frame -> stacks through it
  for (int32_t k = 0; k < info.count; ++k) {
    int32_t f = leaves_[info.begin + k];
    for (int n = 0; n < kSplitSearch && f > kHoleFrame; ++n, f = frames_[f].parent) ++count[f];
  }
  int32_t common = kEmptyFrame;
  for (int32_t f = leaves_[info.begin], n = 0; n < kSplitSearch && f > kHoleFrame;
       ++n, f = frames_[f].parent) {
    if (count[f] == info.count) {
      common = f;
      break;
    }
  }
  int32_t id = state;
  std::vector<int32_t> leaves;
  while (common > kHoleFrame) {
    leaves.clear();
    bool only_hole = true;
    for (int32_t k = 0; k < info.count; ++k) {
      std::vector<int32_t> pos;  // the frames above `common`, top first
      for (int32_t f = leaves_[info.begin + k]; f != common; f = frames_[f].parent)
        pos.push_back(frames_[f].pos);
      int32_t g = kHoleFrame;
      for (size_t j = pos.size(); j-- > 0;) {
        REWIND_TRY(g, frame(pos[j], g));
      }
      only_hole &= g == kHoleFrame;
      leaves.push_back(g);
    }
    if (!only_hole) {
      REWIND_TRY(id, intern_state(leaves, false));
      break;
    }
    common = frames_[common].parent;
  }
  states_[state].split = id;
  states_[id].split = id;
  return id;
}

Result<const GrammarAutomaton::SplitMask*> GrammarAutomaton::split_mask(int32_t truncated,
                                                                        ThreadPool* pool) {
  auto it = splits_.find(truncated);
  if (it != splits_.end()) {
    ++split_hits_;
    return &it->second;
  }
  ++split_misses_;
  const VocabTrie& v = *vocab_;
  SplitMask sm;
  sm.allowed.assign(static_cast<size_t>(v.n_words()), 0);
  walk_states_[0] = truncated;
  const int32_t n = static_cast<int32_t>(v.byte_.size());
  if (pool && pool->n_threads() > 1) {
    REWIND_TRY_STATUS(walk_parallel(truncated, sm.allowed, &sm.context_roots, pool));
  }
  for (int32_t i = (pool && pool->n_threads() > 1) ? n : 0; i < n;) {
    const int32_t d = v.depth_[i];
    const int32_t from = walk_states_[d - 1];
    int32_t to = trans_[static_cast<size_t>(from) * 256 + v.byte_[i]];
    if (to < 0) {
      REWIND_TRY(to, transition(from, v.byte_[i]));
    }
    if (to == kDead) {
      i = v.skip_[i];
      continue;
    }
    const StateInfo& at = states_[to];
    if (at.hole && at.count == 1 && !at.accepting) {  // only what lies below can go on
      sm.context_roots.push_back(i);
      i = v.skip_[i];
      continue;
    }
    walk_states_[d] = to;
    for (int32_t k = v.tok_begin_[i]; k < v.tok_begin_[i + 1]; ++k) {
      const int32_t id = v.tok_ids_[k];
      sm.allowed[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
  return store_split(truncated, std::move(sm));
}

const GrammarAutomaton::SplitMask* GrammarAutomaton::store_split(int32_t truncated,
                                                                 SplitMask&& sm) {
  const size_t bytes =
      sm.allowed.size() * sizeof(uint64_t) + sm.context_roots.size() * sizeof(int32_t);
  if (split_bytes_ + bytes > limits_.mask_cache_bytes / 2) {
    splits_.clear();
    split_bytes_ = 0;
    sync_budget();
  }
  if (!make_room(bytes + kNodeBytes + sizeof(SplitMask))) {
    ++uncached_;
    scratch_split_ = std::move(sm);
    return &scratch_split_;
  }
  split_bytes_ += bytes;
  const SplitMask* kept = &(splits_[truncated] = std::move(sm));
  sync_budget();
  return kept;
}

Status GrammarAutomaton::compute_mask(int32_t state, TokenMask& words, ThreadPool* pool) {
  const VocabTrie& v = *vocab_;
  words.assign(static_cast<size_t>(v.n_words()), 0);
  if (state == kDead || state == kEnded) return Ok{};
  REWIND_TRY(const int32_t truncated, split_state(state));
  if (truncated == state && pool && pool->n_threads() > 1) {
    REWIND_TRY_STATUS(walk_parallel(state, words, nullptr, pool));
  } else if (truncated == state) {
    REWIND_TRY_STATUS(walk_subtree(-1, static_cast<int32_t>(v.byte_.size()), state, words));
  } else {
    REWIND_TRY(const SplitMask* sm, split_mask(truncated, pool));
    words = sm->allowed;
    const std::vector<int32_t> roots = sm->context_roots;  // split_mask may run again below
    for (int32_t r : roots) {
      // The root's bytes: a prefix of the first token in its subtree.
      const std::string& first = v.bytes_[v.tok_ids_[v.tok_begin_[r]]];
      int32_t at = state;
      for (int32_t k = 0; k < v.depth_[r] && at != kDead; ++k) {
        REWIND_TRY(at, transition(at, static_cast<uint8_t>(first[k])));
      }
      if (at != kDead) REWIND_TRY_STATUS(walk_subtree(r, v.skip_[r], at, words));
    }
  }
  if (states_[state].accepting)
    for (int32_t id : v.eos_) words[id >> 6] |= uint64_t{1} << (id & 63);
  return Ok{};
}

Result<const TokenMask*> GrammarAutomaton::mask_locked(int32_t state, ThreadPool* pool) {
  auto it = masks_.find(state);
  if (it != masks_.end()) {
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return &it->second.words;
  }
  ++misses_;
  TokenMask words;
  REWIND_TRY_STATUS(compute_mask(state, words, pool));
  return store_mask(state, std::move(words));
}

const TokenMask* GrammarAutomaton::store_mask(int32_t state, TokenMask&& words) {
  const size_t bytes = words.size() * sizeof(uint64_t);
  while (!lru_.empty() && mask_bytes_ + bytes > limits_.mask_cache_bytes) {
    auto old = masks_.find(lru_.back());
    mask_bytes_ -= old->second.words.size() * sizeof(uint64_t);
    masks_.erase(old);
    lru_.pop_back();
  }
  if (!make_room(bytes + 2 * kNodeBytes + sizeof(CachedMask))) {
    ++uncached_;  // used once, for this call
    scratch_mask_ = std::move(words);
    sync_budget();
    return &scratch_mask_;
  }
  lru_.push_front(state);
  auto& entry = masks_[state];
  entry.words = std::move(words);
  entry.lru = lru_.begin();
  mask_bytes_ += bytes;
  sync_budget();
  return &entry.words;
}

Status GrammarAutomaton::prefetch(const std::vector<int32_t>& states, ThreadPool* pool) {
  if (!pool || pool->n_threads() < 2) return Ok{};
  std::lock_guard<std::mutex> lock(mu_);
  const VocabTrie& v = *vocab_;
  std::vector<int32_t> todo;  // distinct states whose masks are not cached
  for (int32_t st : states)
    if (st != kDead && st != kEnded && !masks_.count(st) &&
        std::find(todo.begin(), todo.end(), st) == todo.end())
      todo.push_back(st);
  if (todo.size() < 2) return Ok{};
  misses_ += static_cast<int64_t>(todo.size());
  prefetched_ += static_cast<int64_t>(todo.size());
  // Each state's mask is a walk of the whole trie, or (a split state) its truncated state's
  // context-free part and then walks of that part's context roots from the state itself
  // (compute_mask). First every whole walk at once: the unsplit states' and the context-free
  // parts not cached yet.
  std::vector<int32_t> truncated(todo.size());
  for (size_t k = 0; k < todo.size(); ++k) {
    REWIND_TRY(truncated[k], split_state(todo[k]));
  }
  std::vector<TokenMask> words(todo.size());
  std::vector<int32_t> new_parts;  // truncated states whose parts are computed here
  std::vector<SplitMask> parts;    // their parts
  std::vector<WalkJob> jobs;
  std::vector<WalkTask> tasks;
  for (size_t k = 0; k < todo.size(); ++k) {
    words[k].assign(static_cast<size_t>(v.n_words()), 0);
    if (truncated[k] != todo[k]) {
      if (splits_.count(truncated[k]) ||
          std::find(new_parts.begin(), new_parts.end(), truncated[k]) != new_parts.end())
        continue;
      new_parts.push_back(truncated[k]);
    }
  }
  parts.resize(new_parts.size());
  for (size_t k = 0; k < todo.size(); ++k) {
    if (truncated[k] != todo[k]) continue;
    whole_trie_tasks(todo[k], static_cast<int32_t>(jobs.size()), tasks);
    jobs.push_back({&words[k], nullptr});
  }
  for (size_t j = 0; j < new_parts.size(); ++j) {
    parts[j].allowed.assign(static_cast<size_t>(v.n_words()), 0);
    whole_trie_tasks(new_parts[j], static_cast<int32_t>(jobs.size()), tasks);
    jobs.push_back({&parts[j].allowed, &parts[j].context_roots});
  }
  split_misses_ += static_cast<int64_t>(new_parts.size());
  if (!tasks.empty()) REWIND_TRY_STATUS(walk_many(std::move(tasks), jobs, pool));
  // Then the split states: their part, and their context roots' subtrees all at once.
  jobs.clear();
  tasks.clear();
  for (size_t k = 0; k < todo.size(); ++k) {
    if (truncated[k] == todo[k]) continue;
    const size_t j =
        std::find(new_parts.begin(), new_parts.end(), truncated[k]) - new_parts.begin();
    const SplitMask* sm = nullptr;
    if (j < new_parts.size()) {
      sm = &parts[j];
    } else {  // cached before (or dropped since for room: computed again)
      REWIND_TRY(sm, split_mask(truncated[k], pool));
    }
    words[k] = sm->allowed;
    const std::vector<int32_t> roots = sm->context_roots;  // transition() may drop the cache
    const int32_t job = static_cast<int32_t>(jobs.size());
    jobs.push_back({&words[k], nullptr});
    for (int32_t r : roots) {
      // The state before the root's own byte: its first depth - 1 bytes from the state itself.
      const std::string& first = v.bytes_[v.tok_ids_[v.tok_begin_[r]]];
      int32_t at = todo[k];
      for (int32_t b = 0; b + 1 < v.depth_[r] && at != kDead; ++b) {
        REWIND_TRY(at, transition(at, static_cast<uint8_t>(first[b])));
      }
      if (at != kDead) tasks.push_back({r, v.skip_[r], at, job});
    }
  }
  if (!tasks.empty()) REWIND_TRY_STATUS(walk_many(std::move(tasks), jobs, pool));
  for (size_t j = 0; j < new_parts.size(); ++j) store_split(new_parts[j], std::move(parts[j]));
  for (size_t k = 0; k < todo.size(); ++k) {
    if (states_[todo[k]].accepting)
      for (int32_t id : v.eos_) words[k][id >> 6] |= uint64_t{1} << (id & 63);
    if (masks_.count(todo[k])) continue;
    const TokenMask* kept = store_mask(todo[k], std::move(words[k]));
    if (kept == &scratch_mask_) break;  // no room: the rest are computed when asked for
  }
  return Ok{};
}

Status GrammarAutomaton::allowed(int32_t state, uint64_t* out, ThreadPool* pool) {
  std::lock_guard<std::mutex> lock(mu_);
  REWIND_TRY(const TokenMask* m, mask_locked(state, pool));
  std::memcpy(out, m->data(), m->size() * sizeof(uint64_t));
  return Ok{};
}

Status GrammarAutomaton::mask_logits(int32_t state, float* logits, ThreadPool* pool) {
  std::lock_guard<std::mutex> lock(mu_);
  REWIND_TRY(const TokenMask* m, mask_locked(state, pool));
  apply_token_mask(m->data(), logits, vocab_->n_vocab());
  return Ok{};
}

Result<int32_t> GrammarAutomaton::step_bytes(int32_t state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (char c : bytes) {
    if (state == kDead) break;
    REWIND_TRY(state, transition(state, static_cast<uint8_t>(c)));
  }
  return state;
}

Result<int32_t> GrammarAutomaton::step_token(int32_t state, int32_t id) {
  if (id < 0 || id >= vocab_->n_vocab()) return kDead;
  if (vocab_->is_eos(id)) return is_accepting(state) && state != kEnded ? kEnded : kDead;
  const std::string& b = vocab_->bytes(id);
  if (b.empty() || state == kEnded) return kDead;
  return step_bytes(state, b);
}

bool GrammarAutomaton::is_accepting(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return states_[state].accepting;
}

uint32_t GrammarAutomaton::min_bytes_to_accept(int32_t state) {
  std::lock_guard<std::mutex> lock(mu_);
  return states_[state].min_bytes;
}

AutomatonStats GrammarAutomaton::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  AutomatonStats s;
  s.states = static_cast<int64_t>(states_.size());
  s.stacks = static_cast<int64_t>(frames_.size());
  s.transitions = n_transitions_;
  s.mask_hits = hits_;
  s.mask_misses = misses_;
  s.mask_bytes = mask_bytes_;
  s.split_hits = split_hits_;
  s.split_misses = split_misses_;
  s.split_bytes = split_bytes_;
  s.uncached = uncached_;
  s.prefetched = prefetched_;
  s.memory_bytes = footprint();
  return s;
}

size_t GrammarAutomaton::memory_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return footprint();
}

// ---- GrammarMatcher ----

GrammarMatcher::GrammarMatcher(std::shared_ptr<GrammarAutomaton> automaton)
    : automaton_(std::move(automaton)) {
  history_.push_back(automaton_->initial_state());
}

Status GrammarMatcher::accept(int32_t id) {
  REWIND_TRY(const int32_t next, automaton_->step_token(state(), id));
  if (next == GrammarAutomaton::kDead)
    return make_error("grammar: token " + std::to_string(id) + " is not allowed here");
  history_.push_back(next);
  return Ok{};
}

Result<size_t> GrammarMatcher::accept_prefix(const std::vector<int32_t>& ids) {
  size_t n = 0;
  for (int32_t id : ids) {
    REWIND_TRY(const int32_t next, automaton_->step_token(state(), id));
    if (next == GrammarAutomaton::kDead) break;
    history_.push_back(next);
    ++n;
  }
  return n;
}

void GrammarMatcher::rollback(size_t n) {
  REWIND_CHECK_MSG(n <= n_accepted(), "grammar rollback past the first token");
  history_.resize(history_.size() - n);
}

}  // namespace rw
