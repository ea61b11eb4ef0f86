// The naive reference for the grammar matcher (matcher.h): an Earley recogniser over the
// lowered grammar's bytes, with no automaton, interning or cache. Tests compare allowed-token
// masks against it token by token. Cost: O(n^3) in the bytes at worst; for tests only.
#pragma once

#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "rewind/grammar/gbnf.h"

namespace rw {

struct EarleyResult {
  bool viable = false;    // some string of the grammar starts with the bytes
  bool complete = false;  // the bytes are a string of the grammar
};

// Every rule of a Grammar from parse_gbnf is productive, so a non-empty last Earley set means
// the bytes extend to a complete string.
inline EarleyResult earley_recognise(const Grammar& g, std::string_view bytes) {
  using Item = std::tuple<int32_t, int32_t, int32_t>;  // rule, dot (element index), origin
  const size_t n = bytes.size();
  std::vector<std::set<Item>> chart(n + 1);
  std::vector<std::vector<Item>> work(n + 1);
  auto add = [&](size_t i, Item it) {
    if (chart[i].insert(it).second) work[i].push_back(it);
  };
  for (int32_t alt : g.rules[g.root].alts) add(0, {g.root, alt, 0});
  for (size_t i = 0; i <= n; ++i) {
    while (!work[i].empty()) {
      const auto [rule, dot, origin] = work[i].back();
      work[i].pop_back();
      const GrammarElement& e = g.elements[dot];
      if (e.kind == GrammarElem::kEnd) {  // complete: advance the items waiting for `rule`
        std::vector<Item> waiting(chart[origin].begin(), chart[origin].end());
        for (const auto& [r2, d2, o2] : waiting) {
          const GrammarElement& w = g.elements[d2];
          if (w.kind == GrammarElem::kRule && w.arg == rule) add(i, {r2, d2 + 1, o2});
        }
      } else if (e.kind == GrammarElem::kRule) {  // predict (and skip a rule that can be empty)
        for (int32_t alt : g.rules[e.arg].alts) add(i, {e.arg, alt, static_cast<int32_t>(i)});
        if (g.rule_min[e.arg] == 0) add(i, {rule, dot + 1, origin});
      } else if (i < n && g.byte_sets[e.arg].test(static_cast<uint8_t>(bytes[i]))) {
        add(i + 1, {rule, dot + 1, origin});
      }
    }
  }
  EarleyResult r;
  r.viable = !chart[n].empty();
  for (const auto& [rule, dot, origin] : chart[n])
    if (rule == g.root && origin == 0 && g.elements[dot].kind == GrammarElem::kEnd)
      r.complete = true;
  return r;
}

}  // namespace rw
