// Token-level grammar matching for constrained decoding (docs/ARCHITECTURE.md, "Constrained
// decoding").
//
// * VocabTrie: the model's tokens as byte strings in a trie laid out in depth-first order, built
//   once per tokenizer. Special tokens are left out (they are never grammar text), except
//   those a caller names (the tags of a tool-call syntax, which some tokenizers mark special):
//   they stand for their text. The end-of-sequence ids are kept apart and allowed exactly when
//   the grammar is complete.
// * GrammarAutomaton: the grammar's pushdown automaton over bytes, determinised lazily. A
//   configuration is a set of stacks of grammar positions (llama.cpp's grammar stacks);
//   stacks are hash-consed linked lists (a frame whose alternative is finished is never kept,
//   so right recursion such as x* does not grow them), and each distinct set of stacks is one
//   interned state id. Byte transitions between state ids are memoised in a table, and the
//   allowed-token mask of a state is computed once by walking the trie through that table
//   (a subtree is skipped as soon as its prefix is dead) and kept in an LRU cache. A state
//   seen for the first time mostly differs from known ones only in the part of its stacks they
//   all share (the same string content inside another property): its mask is split into the
//   tokens decided by the stacks above that shared part alone (cached per truncated state, so
//   shared by all such states) and the trie subtrees whose bytes reach into the shared part,
//   walked again from the real state.
//   Shared by every matcher of one grammar and vocabulary; thread-safe (one mutex).
// * GrammarMatcher: one sequence's position, which is just a state id plus the ids after each
//   accepted token, so rolling back rejected speculative drafts is exact and costs nothing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/grammar/gbnf.h"

namespace rw {

class ThreadPool;
class Tokenizer;

// A set of token ids, bit i of word i / 64.
using TokenMask = std::vector<uint64_t>;

inline bool mask_test(const uint64_t* mask, int32_t id) {
  return (mask[id >> 6] >> (id & 63)) & 1;
}

// Sets logits[i] to -infinity for every token the mask leaves out. Cost: one pass over the
// mask words; a full word (every token allowed) is skipped.
void apply_token_mask(const uint64_t* mask, float* logits, int32_t n_vocab);

class VocabTrie {
 public:
  // token_bytes[id] is the token's text as bytes; an empty string leaves the id out (holes,
  // special tokens). eos_ids end a finished grammar and are never grammar text.
  VocabTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids);
  // Every token of the tokenizer except special ones, by Tokenizer::token_bytes; a special
  // token whose text is one of `keep_special` stays, as that text (a tool-call tag: the
  // grammar spells the tag, and the model writes it as its one special token).
  static VocabTrie from_tokenizer(const Tokenizer& tok, std::vector<int32_t> eos_ids,
                                  const std::vector<std::string>& keep_special = {});

  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_words() const { return (n_vocab_ + 63) / 64; }
  size_t n_nodes() const { return byte_.size(); }
  const std::vector<int32_t>& eos_ids() const { return eos_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_eos(int32_t id) const;
  size_t memory_bytes() const;
  // An upper bound of memory_bytes() for from_tokenizer(tok, ...) whatever it keeps, without
  // building it.
  static size_t memory_bound(const Tokenizer& tok);

 private:
  friend class GrammarAutomaton;
  int32_t n_vocab_ = 0;
  std::vector<std::string> bytes_;  // id -> bytes ("" when left out)
  std::vector<int32_t> eos_;
  // Nodes in depth-first order (the root is implicit): the byte on the edge into the node,
  // its depth (1 for a child of the root), the index just past its subtree, and the tokens
  // whose bytes end at it, tok_ids_[tok_begin_[i] .. tok_begin_[i + 1]).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> skip_;
  std::vector<int32_t> tok_begin_;
  std::vector<int32_t> tok_ids_;
  int32_t max_depth_ = 0;
  // Node ranges of about equal size, each a run of whole subtrees of the root's children:
  // the parts of a whole-trie walk that threads share.
  std::vector<int32_t> chunk_begin_;
};

// A byte cap shared by several automata (a GrammarCache's): each charges what it holds
// (states, frames, transitions, cached masks) and gives it back when it shrinks or is
// destroyed. An automaton at the cap drops its own cached masks before it grows, computes a
// mask it cannot keep without caching it, and refuses a new state (an error) only when its
// masks are all gone and the cap is still passed.
struct GrammarMemoryBudget {
  explicit GrammarMemoryBudget(size_t cap_bytes) : cap(cap_bytes) {}
  const size_t cap;
  std::atomic<size_t> used{0};
};

struct AutomatonLimits {
  int32_t max_states = 1 << 16;     // interned states (each holds a 1 KiB transition row)
  int32_t max_stacks = 1 << 21;     // interned stack frames
  int32_t max_state_stacks = 4096;  // stacks in one state (ambiguous grammars)
  // LRU budget for allowed-token masks; their context-free parts take up to half as much
  // again (dropped all at once when full).
  size_t mask_cache_bytes = size_t{256} << 20;
  // Shared byte cap (null: only the limits above).
  std::shared_ptr<GrammarMemoryBudget> budget;
};

struct AutomatonStats {
  int64_t states = 0, stacks = 0, transitions = 0;
  int64_t mask_hits = 0, mask_misses = 0;
  int64_t split_hits = 0, split_misses = 0;  // context-free parts of masks
  int64_t uncached = 0;    // masks computed but not kept (the shared budget was full)
  int64_t prefetched = 0;  // masks computed by prefetch (among mask_misses)
  size_t mask_bytes = 0, split_bytes = 0;
  size_t memory_bytes = 0;  // all of it (memory_bytes())
};

class GrammarAutomaton {
 public:
  static constexpr int32_t kDead = 0;   // no stack survives
  static constexpr int32_t kEnded = 1;  // an end-of-sequence token was accepted
  // How deep split_state looks for the frame all stacks of a state share.
  static constexpr int kSplitSearch = 64;

  // The automaton of `grammar` over `vocab`, with its initial state made. Errors: a limit of
  // `limits` passed by the initial state alone (such as max_state_stacks, for a grammar whose
  // first byte may start thousands of alternatives).
  static Result<std::shared_ptr<GrammarAutomaton>> create(std::shared_ptr<const Grammar> grammar,
                                                          std::shared_ptr<const VocabTrie> vocab,
                                                          AutomatonLimits limits = {});
  struct Key {  // create()'s alone: make_shared needs a public constructor
   private:
    Key() = default;
    friend class GrammarAutomaton;
  };
  GrammarAutomaton(Key, std::shared_ptr<const Grammar> grammar,
                   std::shared_ptr<const VocabTrie> vocab, AutomatonLimits limits);
  ~GrammarAutomaton();
  GrammarAutomaton(const GrammarAutomaton&) = delete;
  GrammarAutomaton& operator=(const GrammarAutomaton&) = delete;

  int32_t initial_state() const { return initial_; }
  const VocabTrie& vocab() const { return *vocab_; }
  const Grammar& grammar() const { return *grammar_; }

  // The state after `bytes` from `state` (kDead when the grammar cannot continue so). Errors
  // only when a limit is reached.
  Result<int32_t> step_bytes(int32_t state, std::string_view bytes);
  // The state after token `id`: its bytes, or kEnded for an end-of-sequence id in an accepting
  // state (kDead otherwise).
  Result<int32_t> step_token(int32_t state, int32_t id);
  // The tokens allowed in `state` into out[0 .. vocab().n_words()): every token whose bytes
  // keep some stack alive, plus the end-of-sequence ids when the state is accepting.
  // With `pool` (its one caller being this caller) a mask that needs a walk of the whole trie
  // is computed by its threads: the same bits whatever the thread count.
  Status allowed(int32_t state, uint64_t* out, ThreadPool* pool = nullptr);
  // Applies the allowed mask of `state` to one row of logits (apply_token_mask).
  Status mask_logits(int32_t state, float* logits, ThreadPool* pool = nullptr);
  // Computes the masks of `states` (one decode step's rows) that are not cached yet all at
  // once, the pool's threads sharing the trie walks of every state (bits as allowed() gives
  // them), and caches them as room allows: the rows' allowed() / mask_logits() calls then find
  // them. Without a pool of several threads, or with fewer than two masks missing, nothing is
  // done here (allowed() splits one mask's walk by itself).
  Status prefetch(const std::vector<int32_t>& states, ThreadPool* pool);
  bool is_accepting(int32_t state);
  // The fewest bytes that complete the grammar from `state` (0 when accepting).
  uint32_t min_bytes_to_accept(int32_t state);
  AutomatonStats stats();
  // Bytes this automaton holds (vector capacities, hash-map entries estimated, cached masks);
  // what it has charged to limits.budget.
  size_t memory_bytes();

 private:
  struct Frame {
    int32_t pos;     // element index: the next element to match in this frame
    int32_t parent;  // frame below, or 0 for the empty stack
  };
  struct StateInfo {
    int32_t begin, count;  // leaves_[begin .. begin + count): stacks whose top is a byte set
    bool accepting;
    bool hole;  // has kHoleFrame, the truncated part, as a leaf (split states only)
    uint32_t min_bytes;
    int32_t split = -1;  // the truncated state (-1 unknown; the state itself: none)
  };
  struct CachedMask {
    TokenMask words;
    std::list<int32_t>::iterator lru;
  };
  // The part of a mask that a truncated state decides: tokens allowed whatever lies below
  // the truncation, and the trie subtrees (their root nodes) that reach below it.
  struct SplitMask {
    TokenMask allowed;
    std::vector<int32_t> context_roots;
  };

  Result<int32_t> frame(int32_t pos, int32_t parent);
  Status init();  // create()'s: the fixed frames and states, then the initial state
  Status expand(int32_t frame, std::vector<int32_t>& leaves, bool& accepting);
  Result<int32_t> intern_state(std::vector<int32_t>& leaves, bool accepting);
  Result<int32_t> transition(int32_t state, uint8_t byte);
  Result<const TokenMask*> mask_locked(int32_t state, ThreadPool* pool);
  Status compute_mask(int32_t state, TokenMask& words, ThreadPool* pool);
  Result<int32_t> split_state(int32_t state);
  Result<const SplitMask*> split_mask(int32_t truncated, ThreadPool* pool);
  // Keeps a computed mask (or context-free part) in its cache when the budgets allow; the
  // pointer is to the kept copy or, without room, to a scratch valid until the next call.
  const TokenMask* store_mask(int32_t state, TokenMask&& words);
  const SplitMask* store_split(int32_t truncated, SplitMask&& sm);
  // Trie walks on the pool's threads, several masks at once: threads read the transition
  // table only, leaving each unknown transition's subtree to the caller, which computes those
  // transitions alone and hands the subtrees out again, until none is left. A task walks the
  // nodes [begin, end) (one subtree, or whole subtrees of the root's children) from the state
  // before node begin's byte, into walk `job`'s words; a job with roots (a split walk) puts a
  // node whose state holds only the hole there instead.
  struct WalkTask {
    int32_t begin, end, at, job;
  };
  struct WalkJob {
    TokenMask* words;
    std::vector<int32_t>* roots;  // null: not a split walk
  };
  Status walk_many(std::vector<WalkTask> tasks, const std::vector<WalkJob>& jobs, ThreadPool* pool);
  // One whole-trie walk from `state` (walk_many with one job).
  Status walk_parallel(int32_t state, TokenMask& words, std::vector<int32_t>* roots,
                       ThreadPool* pool);
  // The tasks of a whole-trie walk from `state` for job `job`.
  void whole_trie_tasks(int32_t state, int32_t job, std::vector<WalkTask>& tasks) const;
  // Sets the bits of the tokens in trie nodes [node, end) reachable from `at` (the state
  // after node `node`'s bytes; node's own tokens included).
  Status walk_subtree(int32_t node, int32_t end, int32_t at, TokenMask& words);
  // Recomputes the footprint and charges (or gives back) the change to the budget.
  void sync_budget();
  size_t footprint() const;
  bool over_budget() const {
    return limits_.budget &&
           limits_.budget->used.load(std::memory_order_relaxed) > limits_.budget->cap;
  }
  // Drops cached masks (LRU first) and, if that is not enough, the context-free parts, until
  // `want` more bytes fit the budget; false when they still do not.
  bool make_room(size_t want);
  void new_epoch() {
    if (++seen_epoch_ == 0) {  // wrapped: old marks could match again
      std::fill(seen_mark_.begin(), seen_mark_.end(), 0);
      seen_epoch_ = 1;
    }
  }

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> vocab_;
  AutomatonLimits limits_;
  std::mutex mu_;
  std::vector<Frame> frames_;        // 0: the empty stack
  std::vector<uint32_t> frame_min_;  // per frame: bytes to finish its stack
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<StateInfo> states_;
  std::vector<int32_t> leaves_;
  std::unordered_map<std::string, int32_t> state_ids_;
  std::vector<int32_t> trans_;  // [states, 256]: -1 unknown
  int32_t initial_ = kDead;
  std::unordered_map<int32_t, CachedMask> masks_;
  std::list<int32_t> lru_;  // most recent first
  size_t mask_bytes_ = 0;
  std::unordered_map<int32_t, SplitMask> splits_;  // dropped together past half the budget
  size_t split_bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0, n_transitions_ = 0, split_hits_ = 0, split_misses_ = 0;
  int64_t uncached_ = 0, prefetched_ = 0;
  size_t charged_ = 0;          // bytes charged to limits_.budget
  size_t state_key_bytes_ = 0;  // heap bytes of state_ids_'s keys
  TokenMask scratch_mask_;      // a mask the budget had no room to keep
  SplitMask scratch_split_;     // likewise, a context-free part
  // Scratch for expand: frames seen in the current closure.
  std::vector<uint32_t> seen_mark_;
  uint32_t seen_epoch_ = 0;
  std::vector<int32_t> walk_states_;  // per trie depth
};

// One sequence's grammar position. Copyable (a copy is an independent sequence). Not
// thread-safe by itself; its automaton is.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<GrammarAutomaton> automaton);

  // The allowed tokens now into out[0 .. n_words): see GrammarAutomaton::allowed. Nothing is
  // allowed once an end-of-sequence token was accepted.
  Status allowed(uint64_t* out, ThreadPool* pool = nullptr) const {
    return automaton_->allowed(state(), out, pool);
  }
  Status mask_logits(float* logits, ThreadPool* pool = nullptr) const {
    return automaton_->mask_logits(state(), logits, pool);
  }
  // Advances by one token. An error (token not allowed, or an automaton limit) changes nothing.
  Status accept(int32_t id);
  // Advances by several tokens (a speculative draft); stops at the first that is not allowed
  // and returns how many were accepted (errors only for automaton limits).
  Result<size_t> accept_prefix(const std::vector<int32_t>& ids);
  bool is_accepting() const { return automaton_->is_accepting(state()); }
  bool is_ended() const { return state() == GrammarAutomaton::kEnded; }
  uint32_t min_bytes_to_accept() const { return automaton_->min_bytes_to_accept(state()); }

  // Tokens accepted so far; rollback(n) undoes the last n of them exactly (n <= n_accepted()).
  size_t n_accepted() const { return history_.size() - 1; }
  void rollback(size_t n);
  int32_t state() const { return history_.back(); }
  // The state n tokens ago (n <= n_accepted()): state_back(0) == state(). A speculative round
  // masks each verified row with the state after the drafts before it.
  int32_t state_back(size_t n) const { return history_[history_.size() - 1 - n]; }
  GrammarAutomaton& automaton() const { return *automaton_; }

 private:
  std::shared_ptr<GrammarAutomaton> automaton_;
  std::vector<int32_t> history_;  // state before any token, then after each accepted one
};

}  // namespace rw
