// Grammars for constrained decoding: llama.cpp's GBNF syntax parsed into a context-free grammar
// over bytes. Character classes and `.` (code points) are lowered to alternatives of UTF-8 byte
// sequences, so the matcher (grammar/matcher.h) runs on bytes and a multi-byte character split
// across tokens needs nothing special; every string the grammar derives is valid UTF-8 when
// its literals are.
//
// Syntax (llama.cpp's GBNF, as its grammar documentation describes it):
//   rule-name ::= alternatives            one rule per line; names are [a-zA-Z0-9-]+
//   a b          sequence                 a | b   alternation (| may not start a line at top level)
//   ( ... )      group (newlines allowed inside)
//   x*  x+  x?  x{m}  x{m,}  x{m,n}       repetition of the previous item
//   "text"       literal (UTF-8)          [a-z0-9_]  [^"\\]  character classes over code points
//   .            any code point           # comment to the end of the line
//   escapes in literals and classes: \xHH \uHHHH \UHHHHHHHH (code points) \t \r \n \\ \" \[ \]
// The start rule is `root` unless another name is given. Rejected, with a message naming the
// line and column: syntax errors, unknown escapes, invalid UTF-8, code points past U+10FFFF or
// surrogates in literals, undefined or twice-defined rules, token references (<...>),
// repetition bounds past kGbnfMaxRepeat, a grammar past kGbnfMaxElements, left recursion
// (A ::= A ..., also through rules that can be empty), and rules reachable from the start
// that derive no finite string. Alternatives that can never finish (an empty class) are
// dropped, so every stack the matcher holds can still reach the end of the grammar.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

inline constexpr int32_t kGbnfMaxRepeat = 10000;      // largest m or n of x{m,n}
inline constexpr int32_t kGbnfMaxElements = 1 << 20;  // lowered grammar elements
inline constexpr uint32_t kGrammarInf = 0xFFFFFFFFu;  // "derives no finite string"

// A set of bytes (one terminal of the lowered grammar).
struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool test(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

enum class GrammarElem : uint8_t {
  kEnd,    // end of an alternative
  kBytes,  // one byte from byte_sets[arg]
  kRule,   // a derivation of rules[arg]
};

struct GrammarElement {
  GrammarElem kind;
  int32_t arg;
};

struct GrammarRule {
  std::string name;           // as written, or `<parent>_<n>` for groups, repetitions, classes
  std::vector<int32_t> alts;  // index of each alternative's first element (productive ones)
  int32_t line = 0, col = 0;  // where it was defined (generated rules: where their item was)
};

// The lowered grammar. Immutable once built; matchers share it.
struct Grammar {
  std::vector<GrammarElement> elements;  // alternatives back to back, each ending in kEnd
  std::vector<ByteSet> byte_sets;
  std::vector<GrammarRule> rules;
  int32_t root = 0;
  // Per element: the fewest bytes that finish its alternative from it (kGrammarInf: none).
  std::vector<uint32_t> suffix_min;
  std::vector<uint32_t> rule_min;  // per rule: its shortest derivation in bytes

  // The lowered grammar as GBNF-like text (byte sets as [\xHH-\xHH]), for debugging.
  std::string to_string() const;
};

// Parses GBNF text. Errors: "grammar L:C: what" (L, C from 1; C counts bytes).
Result<Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

// `text` as a GBNF string literal ("..." with \" \\ and control bytes escaped; other bytes,
// UTF-8 included, as they are).
std::string gbnf_literal(std::string_view text);

// GBNF alternatives joined: "a | b | c" (empty for none).
std::string gbnf_alternatives(const std::vector<std::string>& alts);

}  // namespace rw
