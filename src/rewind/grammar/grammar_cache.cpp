#include "rewind/grammar/grammar_cache.h"

#include <algorithm>

namespace rw {

GrammarCache::GrammarCache(std::shared_ptr<const VocabTrie> vocab, size_t max_entries,
                           AutomatonLimits limits, size_t max_bytes)
    : vocab_(std::move(vocab)), max_entries_(std::max<size_t>(max_entries, 1)), limits_(limits) {
  limits_.budget = max_bytes > 0 ? std::make_shared<GrammarMemoryBudget>(max_bytes) : nullptr;
}

void GrammarCache::evict_idle_locked(const std::string& keep) {
  if (!limits_.budget) return;
  const size_t high = limits_.budget->cap / 4 * 3;
  for (auto it = lru_.end(); it != lru_.begin() && limits_.budget->used.load() >= high;) {
    --it;
    auto e = map_.find(*it);
    if (*it == keep || e->second.automaton.use_count() > 1) continue;  // in use: kept
    map_.erase(e);
    it = lru_.erase(it);
  }
}

Result<std::shared_ptr<GrammarAutomaton>> GrammarCache::get(const std::string& gbnf,
                                                            const std::string& root) {
  const std::string key = root + '\n' + gbnf;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++hits_;
      evict_idle_locked(key);
      return it->second.automaton;
    }
  }
  REWIND_TRY(Grammar g, parse_gbnf(gbnf, root));
  REWIND_TRY(auto a, GrammarAutomaton::create(std::make_shared<const Grammar>(std::move(g)), vocab_,
                                              limits_));
  std::lock_guard<std::mutex> lock(mu_);
  ++misses_;
  auto it = map_.find(key);  // another thread may have compiled it meanwhile
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.automaton;
  }
  lru_.push_front(key);
  map_.emplace(key, Entry{a, lru_.begin()});
  while (map_.size() > max_entries_) {
    map_.erase(lru_.back());  // running requests keep their automaton alive by shared_ptr
    lru_.pop_back();
  }
  evict_idle_locked(key);
  return a;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

size_t GrammarCache::memory_bytes() const {
  return limits_.budget ? limits_.budget->used.load() : 0;
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace rw
