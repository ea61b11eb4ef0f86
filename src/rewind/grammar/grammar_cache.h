// Compiled grammars by text: the GrammarAutomaton of each distinct GBNF text over one
// vocabulary, kept in a small LRU so that requests with the same schema share states and mask
// caches (a fresh automaton computes every mask again). The vocabulary is fixed per cache, so
// the text alone is the key. With a byte cap every automaton it makes shares one
// GrammarMemoryBudget (matcher.h), so what they hold together never passes the cap, and whole
// automata that no request uses are evicted (LRU) when it is three quarters full.
// Thread-safe (one mutex; compiling happens outside it).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rewind/base/result.h"
#include "rewind/grammar/matcher.h"

namespace rw {

class GrammarCache {
 public:
  // At most max_entries automata (>= 1), each built with `limits` (its mask cache budget
  // among them). max_bytes > 0: the automata made here (cached or evicted but still running)
  // hold at most max_bytes together (limits.budget is replaced by the cache's own); 0: no cap,
  // about max_entries x 1.5 x the mask budget plus the automata's states.
  GrammarCache(std::shared_ptr<const VocabTrie> vocab, size_t max_entries = 8,
               AutomatonLimits limits = {}, size_t max_bytes = 0);

  // The automaton of `gbnf` starting at rule `root`, compiled on first use. Errors: the
  // grammar's parse error (one line with line:column).
  Result<std::shared_ptr<GrammarAutomaton>> get(const std::string& gbnf,
                                                const std::string& root = "root");

  const VocabTrie& vocab() const { return *vocab_; }
  std::shared_ptr<const VocabTrie> vocab_ptr() const { return vocab_; }
  size_t size() const;
  // Bytes the automata made here hold now (0 without a cap; the vocabulary not included).
  size_t memory_bytes() const;
  size_t max_bytes() const { return limits_.budget ? limits_.budget->cap : 0; }
  int64_t hits() const;
  int64_t misses() const;

 private:
  struct Entry {
    std::shared_ptr<GrammarAutomaton> automaton;
    std::list<std::string>::iterator lru;
  };
  std::shared_ptr<const VocabTrie> vocab_;
  size_t max_entries_;
  AutomatonLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;
  std::list<std::string> lru_;  // most recent first
  int64_t hits_ = 0, misses_ = 0;
  // Evicts LRU automata no request uses (never `keep`) while the budget is 3/4 full; mu_ held.
  void evict_idle_locked(const std::string& keep);
};

}  // namespace rw
