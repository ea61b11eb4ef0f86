// GBNF parser and lowering (gbnf.h): a recursive-descent parser in llama.cpp's grammar syntax
// that writes the lowered form directly (groups, repetitions and non-ASCII classes become
// generated rules), then checks references, productivity and left recursion.
#include "rewind/grammar/gbnf.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <unordered_map>
#include <utility>

#include "rewind/tokenizer/text.h"

namespace rw {

namespace {

using text::append_utf8;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxNesting = 256;  // groups inside groups; bounds the parser's recursion

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

using ByteRange = std::pair<uint8_t, uint8_t>;

// The code points [lo, hi] (one encoded length, no surrogates inside) as UTF-8 byte-range
// sequences: each sequence is a list of per-byte ranges, and together they match exactly the
// encodings of [lo, hi]. The split rule keeps every sequence a product of byte ranges.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  if (lo > hi) return;
  for (uint32_t b : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= b && b < hi) {
      utf8_sequences(lo, b, out);
      utf8_sequences(b + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  const int n = static_cast<int>(a.size());
  for (int k = 1; k < n; ++k) {
    const uint32_t m = (1u << (6 * k)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::vector<ByteRange> seq;
  for (int i = 0; i < n; ++i)
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

struct ParsedRule {
  std::string name;
  std::vector<std::vector<GrammarElement>> alts;
  bool defined = false;
  size_t def_off = 0;  // where it was defined (generated: where its item was)
  size_t ref_off = 0;  // its first reference (for "undefined rule")
  int32_t n_children = 0;
};

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view s) : s_(s) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<Grammar> run(std::string_view root_name);

 private:
  Error fail(size_t off, const std::string& msg) const {
    return make_error("grammar " + where(off) + ": " + msg);
  }
  std::string where(size_t off) const {
    const size_t line =
        std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - line_starts_.begin();
    return std::to_string(line) + ":" + std::to_string(off - line_starts_[line - 1] + 1);
  }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  std::string shown(size_t off) const {
    if (off >= s_.size()) return "the end of the grammar";
    const unsigned char c = static_cast<unsigned char>(s_[off]);
    if (c == '\n' || c == '\r') return "a line break";
    if (c < 0x20 || c >= 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
    }
    return std::string("'") + static_cast<char>(c) + "'";
  }

  void skip_space(bool newline_ok) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') ++i_;
      } else if ((c == '\n' || c == '\r') && newline_ok) {
        ++i_;
      } else {
        break;
      }
    }
  }

  int32_t rule_id(const std::string& name, size_t off) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(rules_.size());
    rules_.push_back({});
    rules_.back().name = name;
    rules_.back().ref_off = off;
    by_name_.emplace(name, id);
    return id;
  }

  int32_t new_rule(int32_t parent, size_t off) {
    const int32_t id = static_cast<int32_t>(rules_.size());
    ParsedRule r;
    r.name = rules_[parent].name + "_" + std::to_string(++rules_[parent].n_children);
    r.defined = true;
    r.def_off = r.ref_off = off;
    rules_.push_back(std::move(r));
    return id;
  }

  int32_t byte_set(const ByteSet& bs) {
    auto [it, fresh] = set_index_.emplace(bs.w, static_cast<int32_t>(sets_.size()));
    if (fresh) sets_.push_back(bs);
    return it->second;
  }

  Result<uint32_t> parse_char(bool in_literal);
  Status parse_rule();
  Status parse_alternates(int32_t rule, bool nested, int depth);
  Status parse_sequence(int32_t rule, std::vector<GrammarElement>& out, bool nested, int depth);
  Status parse_repeat_bounds(size_t off, bool nested, int32_t& m, int32_t& n);
  Status apply_repeat(int32_t rule, std::vector<GrammarElement>& out, size_t last_start, int32_t m,
                      int32_t n, size_t off);
  int32_t lower_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate, int32_t rule,
                      size_t off, bool& is_rule);
  Status finish(Grammar& g, std::string_view root_name);

  std::string_view s_;
  size_t i_ = 0;
  std::vector<size_t> line_starts_;
  std::vector<ParsedRule> rules_;
  std::unordered_map<std::string, int32_t> by_name_;
  std::map<std::array<uint64_t, 4>, int32_t> set_index_;
  std::vector<ByteSet> sets_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, int32_t> class_rules_;
  size_t n_elements_ = 0;  // grows with every alternative stored
};

// One character of a literal or class at i_: an escape or one UTF-8 encoded code point.
Result<uint32_t> GbnfParser::parse_char(bool in_literal) {
  const size_t off = i_;
  const unsigned char c = static_cast<unsigned char>(s_[i_]);
  uint32_t cp = 0;
  if (c == '\\') {
    if (i_ + 1 >= s_.size()) return fail(off, "unfinished escape");
    const char e = s_[i_ + 1];
    int digits = 0;
    switch (e) {
      case 'x':
        digits = 2;
        break;
      case 'u':
        digits = 4;
        break;
      case 'U':
        digits = 8;
        break;
      case 't':
        i_ += 2;
        return uint32_t{'\t'};
      case 'r':
        i_ += 2;
        return uint32_t{'\r'};
      case 'n':
        i_ += 2;
        return uint32_t{'\n'};
      case '\\':
      case '"':
      case '[':
      case ']':
        i_ += 2;
        return static_cast<uint32_t>(e);
      default:
        return fail(off, "unknown escape '\\" + std::string(1, e) + "'");
    }
    i_ += 2;
    uint64_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = i_ < s_.size() ? hex_value(s_[i_]) : -1;
      if (h < 0)
        return fail(off, "escape '\\" + std::string(1, e) + "' needs " + std::to_string(digits) +
                             " hex digits");
      v = v * 16 + static_cast<uint64_t>(h);
      ++i_;
    }
    if (v > kMaxCodePoint) return fail(off, "code point past U+10FFFF");
    cp = static_cast<uint32_t>(v);
  } else if (c < 0x80) {
    ++i_;
    return uint32_t{c};
  } else {
    int len = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return fail(off, "invalid UTF-8");
    }
    if (i_ + len > s_.size()) return fail(off, "invalid UTF-8");
    for (int k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s_[i_ + k]);
      if ((d & 0xC0) != 0x80) return fail(off, "invalid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > kMaxCodePoint)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return fail(off, "invalid UTF-8");
    i_ += len;
    return cp;
  }
  if (in_literal && cp >= 0xD800 && cp <= 0xDFFF)
    return fail(off, "a surrogate code point has no UTF-8 encoding");
  return cp;
}

Status GbnfParser::parse_rule() {
  const size_t name_off = i_;
  std::string name;
  while (i_ < s_.size() && is_word_char(s_[i_])) name += s_[i_++];
  if (name.empty()) return fail(name_off, "expected a rule name, found " + shown(name_off));
  skip_space(false);
  if (s_.substr(i_, 3) != "::=")
    return fail(i_, "expected '::=' after rule name '" + name + "', found " + shown(i_));
  i_ += 3;
  skip_space(true);
  const int32_t id = rule_id(name, name_off);
  if (rules_[id].defined)
    return fail(name_off, "rule '" + name + "' is defined twice (first at " +
                              where(rules_[id].def_off) + ")");
  rules_[id].defined = true;
  rules_[id].def_off = name_off;
  REWIND_TRY_STATUS(parse_alternates(id, false, 0));
  if (i_ < s_.size()) {
    if (s_[i_] == '\r') ++i_;
    if (i_ < s_.size() && s_[i_] == '\n') {
      ++i_;
    } else if (i_ < s_.size()) {
      return fail(i_, "unexpected " + shown(i_) + " in rule '" + name + "'");
    }
  }
  skip_space(true);
  return Ok{};
}

Status GbnfParser::parse_alternates(int32_t rule, bool nested, int depth) {
  if (depth > kMaxNesting) return fail(i_, "groups nested deeper than 256");
  std::vector<GrammarElement> alt;
  REWIND_TRY_STATUS(parse_sequence(rule, alt, nested, depth));
  n_elements_ += alt.size() + 1;
  rules_[rule].alts.push_back(std::move(alt));
  while (at('|')) {
    ++i_;
    skip_space(true);
    std::vector<GrammarElement> next;
    REWIND_TRY_STATUS(parse_sequence(rule, next, nested, depth));
    n_elements_ += next.size() + 1;
    rules_[rule].alts.push_back(std::move(next));
  }
  if (n_elements_ > static_cast<size_t>(kGbnfMaxElements))
    return fail(i_, "grammar larger than " + std::to_string(kGbnfMaxElements) + " elements");
  return Ok{};
}

Status GbnfParser::parse_repeat_bounds(size_t off, bool nested, int32_t& m, int32_t& n) {
  auto number = [&](int32_t& v) -> Status {
    const size_t start = i_;
    int64_t x = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      x = x * 10 + (s_[i_++] - '0');
      if (x > kGbnfMaxRepeat)
        return fail(start, "repetition bound larger than " + std::to_string(kGbnfMaxRepeat));
    }
    if (i_ == start) return fail(start, "expected a number in '{m,n}', found " + shown(start));
    v = static_cast<int32_t>(x);
    return Ok{};
  };
  ++i_;  // '{'
  skip_space(nested);
  REWIND_TRY_STATUS(number(m));
  skip_space(nested);
  n = m;
  if (at(',')) {
    ++i_;
    skip_space(nested);
    if (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      REWIND_TRY_STATUS(number(n));
      skip_space(nested);
    } else {
      n = -1;
    }
  }
  if (!at('}'))
    return fail(i_, "expected '}' to close '{' at " + where(off) + ", found " + shown(i_));
  ++i_;
  if (n >= 0 && n < m) return fail(off, "repetition {m,n} with n < m");
  return Ok{};
}

// Replaces the item at out[last_start..] by its repetition m..n times (n < 0: unbounded):
// m copies, then a right-recursive rule for x* or a chain of optional rules for the rest.
Status GbnfParser::apply_repeat(int32_t rule, std::vector<GrammarElement>& out, size_t last_start,
                                int32_t m, int32_t n, size_t off) {
  std::vector<GrammarElement> sym(out.begin() + static_cast<ptrdiff_t>(last_start), out.end());
  out.resize(last_start);
  if (sym.size() != 1) {
    const int32_t aux = new_rule(rule, off);
    n_elements_ += sym.size() + 1;
    rules_[aux].alts.push_back(std::move(sym));
    sym = {{GrammarElem::kRule, aux}};
  }
  const size_t extra = static_cast<size_t>(m) + 3 * static_cast<size_t>(n < 0 ? 1 : n - m);
  if (n_elements_ + extra > static_cast<size_t>(kGbnfMaxElements))
    return fail(off, "grammar larger than " + std::to_string(kGbnfMaxElements) + " elements");
  n_elements_ += extra;
  for (int32_t k = 0; k < m; ++k) out.push_back(sym[0]);
  if (n < 0) {
    const int32_t star = new_rule(rule, off);
    rules_[star].alts = {{sym[0], {GrammarElem::kRule, star}}, {}};
    out.push_back({GrammarElem::kRule, star});
  } else if (n > m) {
    int32_t next = -1;
    for (int32_t k = n - m; k >= 1; --k) {
      const int32_t r = new_rule(rule, off);
      std::vector<GrammarElement> alt = {sym[0]};
      if (next >= 0) alt.push_back({GrammarElem::kRule, next});
      rules_[r].alts = {std::move(alt), {}};
      next = r;
    }
    out.push_back({GrammarElem::kRule, next});
  }
  return Ok{};
}

// A class over code points as one byte terminal (ASCII only; is_rule false) or a rule whose
// alternatives are UTF-8 byte-range sequences (is_rule true). Returns the set or rule index.
int32_t GbnfParser::lower_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate,
                                int32_t rule, size_t off, bool& is_rule) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> comp;
    uint32_t next = 0;
    for (const auto& r : merged) {
      if (r.first > next) comp.emplace_back(next, r.first - 1);
      next = r.second + 1;
    }
    if (next <= kMaxCodePoint) comp.emplace_back(next, kMaxCodePoint);
    merged = std::move(comp);
  }
  std::vector<std::pair<uint32_t, uint32_t>> cps;  // without surrogates
  for (const auto& r : merged) {
    if (r.first < 0xD800 && r.second >= 0xD800) {
      cps.emplace_back(r.first, 0xD7FF);
      if (r.second > 0xDFFF) cps.emplace_back(0xE000, r.second);
    } else if (r.first >= 0xD800 && r.first <= 0xDFFF) {
      if (r.second > 0xDFFF) cps.emplace_back(0xE000, r.second);
    } else {
      cps.push_back(r);
    }
  }
  ByteSet ascii;
  bool wide = false;
  for (const auto& r : cps) {
    if (r.first < 0x80)
      ascii.set_range(static_cast<uint8_t>(r.first),
                      static_cast<uint8_t>(std::min(r.second, 0x7Fu)));
    if (r.second >= 0x80) wide = true;
  }
  if (!wide) {
    is_rule = false;
    return byte_set(ascii);
  }
  is_rule = true;
  auto cached = class_rules_.find(cps);
  if (cached != class_rules_.end()) return cached->second;
  const int32_t aux = new_rule(rule, off);
  if (!ascii.empty()) rules_[aux].alts.push_back({{GrammarElem::kBytes, byte_set(ascii)}});
  std::vector<std::vector<ByteRange>> seqs;
  for (const auto& r : cps)
    if (r.second >= 0x80) utf8_sequences(std::max(r.first, 0x80u), r.second, seqs);
  for (const auto& seq : seqs) {
    std::vector<GrammarElement> alt;
    for (const ByteRange& br : seq) {
      ByteSet bs;
      bs.set_range(br.first, br.second);
      alt.push_back({GrammarElem::kBytes, byte_set(bs)});
    }
    n_elements_ += alt.size() + 1;
    rules_[aux].alts.push_back(std::move(alt));
  }
  class_rules_.emplace(std::move(cps), aux);
  return aux;
}

Status GbnfParser::parse_sequence(int32_t rule, std::vector<GrammarElement>& out, bool nested,
                                  int depth) {
  size_t last_start = std::string::npos;  // where the previous item's elements begin
  while (i_ < s_.size()) {
    const size_t off = i_;
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      last_start = out.size();
      for (;;) {
        if (i_ >= s_.size()) return fail(off, "unterminated string literal");
        if (s_[i_] == '"') {
          ++i_;
          break;
        }
        REWIND_TRY(const uint32_t cp, parse_char(/*in_literal=*/true));
        std::string bytes;
        append_utf8(bytes, cp);
        for (char b : bytes) {
          ByteSet bs;
          bs.set(static_cast<uint8_t>(b));
          out.push_back({GrammarElem::kBytes, byte_set(bs)});
        }
      }
    } else if (c == '[') {
      ++i_;
      bool negate = false;
      if (at('^')) {
        negate = true;
        ++i_;
      }
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      for (;;) {
        if (i_ >= s_.size()) return fail(off, "unterminated character class");
        if (s_[i_] == ']') {
          ++i_;
          break;
        }
        const size_t item = i_;
        REWIND_TRY(const uint32_t lo, parse_char(false));
        uint32_t hi = lo;
        if (at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
          ++i_;
          if (i_ >= s_.size()) return fail(off, "unterminated character class");
          REWIND_TRY(hi, parse_char(false));
          if (hi < lo) return fail(item, "character range ends before it starts");
        }
        ranges.emplace_back(lo, hi);
      }
      bool is_rule = false;
      const int32_t v = lower_class(std::move(ranges), negate, rule, off, is_rule);
      last_start = out.size();
      out.push_back({is_rule ? GrammarElem::kRule : GrammarElem::kBytes, v});
    } else if (c == '.') {
      ++i_;
      bool is_rule = false;
      const int32_t v = lower_class({{0, kMaxCodePoint}}, false, rule, off, is_rule);
      last_start = out.size();
      out.push_back({GrammarElem::kRule, v});
    } else if (is_word_char(c)) {
      std::string name;
      while (i_ < s_.size() && is_word_char(s_[i_])) name += s_[i_++];
      last_start = out.size();
      out.push_back({GrammarElem::kRule, rule_id(name, off)});
    } else if (c == '(') {
      ++i_;
      skip_space(true);
      const int32_t aux = new_rule(rule, off);
      REWIND_TRY_STATUS(parse_alternates(aux, true, depth + 1));
      if (!at(')'))
        return fail(i_,
                    "expected ')' to close the group at " + where(off) + ", found " + shown(i_));
      ++i_;
      last_start = out.size();
      out.push_back({GrammarElem::kRule, aux});
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last_start == std::string::npos)
        return fail(off, "'" + std::string(1, c) + "' must follow an item");
      int32_t m = 0, n = -1;
      if (c == '{') {
        REWIND_TRY_STATUS(parse_repeat_bounds(off, nested, m, n));
      } else {
        ++i_;
        if (c == '+') m = 1;
        if (c == '?') n = 1;
      }
      REWIND_TRY_STATUS(apply_repeat(rule, out, last_start, m, n, off));
    } else if (c == '<') {
      return fail(off, "token references (<...>) are not supported");
    } else {
      break;
    }
    skip_space(nested);
  }
  return Ok{};
}

Status GbnfParser::finish(Grammar& g, std::string_view root_name) {
  for (const ParsedRule& r : rules_)
    if (!r.defined) return fail(r.ref_off, "undefined rule '" + r.name + "'");
  auto root = by_name_.find(std::string(root_name));
  if (root == by_name_.end())
    return make_error("grammar: no rule named '" + std::string(root_name) + "'");
  const size_t nr = rules_.size();
  g.byte_sets = sets_;
  g.root = root->second;
  g.rules.resize(nr);
  std::vector<std::vector<int32_t>> all_alts(nr);
  for (size_t r = 0; r < nr; ++r) {
    g.rules[r].name = rules_[r].name;
    const std::string w = where(rules_[r].def_off);
    g.rules[r].line = std::stoi(w.substr(0, w.find(':')));
    g.rules[r].col = std::stoi(w.substr(w.find(':') + 1));
    for (auto& alt : rules_[r].alts) {
      all_alts[r].push_back(static_cast<int32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), alt.begin(), alt.end());
      g.elements.push_back({GrammarElem::kEnd, 0});
    }
  }
  if (g.elements.size() > static_cast<size_t>(kGbnfMaxElements))
    return make_error("grammar: larger than " + std::to_string(kGbnfMaxElements) + " elements");

  // Shortest derivations by fixpoint (rules reference later ids mostly, so descending order
  // converges in few passes).
  auto alt_min = [&](int32_t start) -> uint32_t {
    uint64_t sum = 0;
    for (int32_t e = start; g.elements[e].kind != GrammarElem::kEnd; ++e) {
      const GrammarElement& el = g.elements[e];
      const uint32_t v = el.kind == GrammarElem::kBytes
                             ? (g.byte_sets[el.arg].empty() ? kGrammarInf : 1u)
                             : g.rule_min[el.arg];
      if (v == kGrammarInf) return kGrammarInf;
      sum += v;
    }
    return static_cast<uint32_t>(std::min<uint64_t>(sum, kGrammarInf - 1));
  };
  g.rule_min.assign(nr, kGrammarInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = nr; r-- > 0;) {
      for (int32_t a : all_alts[r]) {
        const uint32_t v = alt_min(a);
        if (v < g.rule_min[r]) {
          g.rule_min[r] = v;
          changed = true;
        }
      }
    }
  }
  g.suffix_min.assign(g.elements.size(), 0);
  for (size_t e = g.elements.size(); e-- > 0;) {
    const GrammarElement& el = g.elements[e];
    if (el.kind == GrammarElem::kEnd) continue;
    const uint32_t v = el.kind == GrammarElem::kBytes
                           ? (g.byte_sets[el.arg].empty() ? kGrammarInf : 1u)
                           : g.rule_min[el.arg];
    const uint32_t rest = g.suffix_min[e + 1];
    g.suffix_min[e] =
        (v == kGrammarInf || rest == kGrammarInf)
            ? kGrammarInf
            : static_cast<uint32_t>(std::min<uint64_t>(uint64_t{v} + rest, kGrammarInf - 1));
  }

  // Every rule reachable from the start (through any alternative) must derive something.
  std::vector<char> seen(nr, 0);
  std::vector<int32_t> todo = {g.root};
  seen[g.root] = 1;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    if (g.rule_min[r] == kGrammarInf)
      return fail(rules_[r].def_off, "rule '" + rules_[r].name + "' derives no finite string");
    for (int32_t a : all_alts[r])
      for (int32_t e = a; g.elements[e].kind != GrammarElem::kEnd; ++e)
        if (g.elements[e].kind == GrammarElem::kRule && !seen[g.elements[e].arg]) {
          seen[g.elements[e].arg] = 1;
          todo.push_back(g.elements[e].arg);
        }
  }
  for (size_t r = 0; r < nr; ++r)
    for (int32_t a : all_alts[r])
      if (g.suffix_min[a] != kGrammarInf) g.rules[r].alts.push_back(a);

  // Left recursion: a cycle among "r can start with s" edges (s at the front of an
  // alternative of r, or after elements that can be empty). Iterative three-colour DFS.
  std::vector<std::vector<int32_t>> left(nr);
  for (size_t r = 0; r < nr; ++r)
    for (int32_t a : g.rules[r].alts)
      for (int32_t e = a; g.elements[e].kind == GrammarElem::kRule; ++e) {
        left[r].push_back(g.elements[e].arg);
        if (g.rule_min[g.elements[e].arg] != 0) break;
      }
  std::vector<uint8_t> colour(nr, 0);  // 0 new, 1 on the path, 2 done
  std::vector<int32_t> parent(nr, -1);
  for (size_t s = 0; s < nr; ++s) {
    if (colour[s]) continue;
    std::vector<std::pair<int32_t, size_t>> stack = {{static_cast<int32_t>(s), 0}};
    colour[s] = 1;
    while (!stack.empty()) {
      auto& [r, k] = stack.back();
      if (k == left[r].size()) {
        colour[r] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t t = left[r][k++];
      if (colour[t] == 1) {
        std::string path = rules_[t].name;
        std::vector<std::string> names;
        for (int32_t x = r; x != t && x >= 0; x = parent[x]) names.push_back(rules_[x].name);
        for (size_t q = names.size(); q-- > 0;) path += " -> " + names[q];
        path += " -> " + rules_[t].name;
        return fail(rules_[t].def_off,
                    "rule '" + rules_[t].name + "' is left-recursive (" + path + ")");
      }
      if (colour[t] == 0) {
        colour[t] = 1;
        parent[t] = r;
        stack.push_back({t, 0});
      }
    }
  }
  return Ok{};
}

Result<Grammar> GbnfParser::run(std::string_view root_name) {
  skip_space(true);
  while (i_ < s_.size()) REWIND_TRY_STATUS(parse_rule());
  Grammar g;
  REWIND_TRY_STATUS(finish(g, root_name));
  return g;
}

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  GbnfParser p(text);
  return p.run(root);
}

std::string gbnf_literal(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "\"";
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string gbnf_alternatives(const std::vector<std::string>& alts) {
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out += " | ";
    out += alts[i];
  }
  return out;
}

std::string Grammar::to_string() const {
  static const char* hex = "0123456789ABCDEF";
  auto set_text = [&](const ByteSet& bs) {
    std::string s = "[";
    for (int b = 0; b < 256;) {
      if (!bs.test(static_cast<uint8_t>(b))) {
        ++b;
        continue;
      }
      int e = b;
      while (e + 1 < 256 && bs.test(static_cast<uint8_t>(e + 1))) ++e;
      auto one = [&](int v) {
        if (v > 0x20 && v < 0x7F && v != ']' && v != '\\' && v != '-' && v != '^')
          s += static_cast<char>(v);
        else
          s += std::string("\\x") + hex[v >> 4] + hex[v & 15];
      };
      one(b);
      if (e > b) {
        s += '-';
        one(e);
      }
      b = e + 1;
    }
    return s + "]";
  };
  std::string out;
  for (const GrammarRule& r : rules) {
    out += r.name + " ::=";
    for (size_t k = 0; k < r.alts.size(); ++k) {
      if (k) out += " |";
      for (int32_t e = r.alts[k]; elements[e].kind != GrammarElem::kEnd; ++e)
        out += " " + (elements[e].kind == GrammarElem::kBytes ? set_text(byte_sets[elements[e].arg])
                                                              : rules[elements[e].arg].name);
      if (elements[r.alts[k]].kind == GrammarElem::kEnd) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace rw
