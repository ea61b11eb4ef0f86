#include "rewind/grammar/grammar_cache.h"

#include <algorithm>

namespace rw {

GrammarCache::GrammarCache(std::shared_ptr<const VocabTrie> vocab, size_t max_entries,
                           AutomatonLimits limits)
    : vocab_(std::move(vocab)), max_entries_(std::max<size_t>(max_entries, 1)), limits_(limits) {}

Result<std::shared_ptr<GrammarAutomaton>> GrammarCache::get(const std::string& gbnf,
                                                            const std::string& root) {
  const std::string key = root + '\n' + gbnf;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++hits_;
      return it->second.automaton;
    }
  }
  REWIND_TRY(Grammar g, parse_gbnf(gbnf, root));
  auto a = std::make_shared<GrammarAutomaton>(std::make_shared<const Grammar>(std::move(g)), vocab_,
                                              limits_);
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
  return a;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
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
