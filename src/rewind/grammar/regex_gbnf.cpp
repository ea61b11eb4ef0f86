// ECMA-262 patterns to GBNF (regex_gbnf.h): a recursive-descent parser into a small tree of
// code point sets, sequences, alternatives and repetitions, then written out with each
// character in its JSON spelling.
#include "rewind/grammar/regex_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "rewind/grammar/gbnf.h"
#include "rewind/tokenizer/text.h"

namespace rw {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;
constexpr int kMaxDepth = 64;

// A set of code points: sorted, disjoint, non-adjacent ranges.
using CpSet = std::vector<std::pair<uint32_t, uint32_t>>;

CpSet normalised(CpSet s) {
  std::sort(s.begin(), s.end());
  CpSet out;
  for (const auto& r : s) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CpSet complement(const CpSet& s) {
  CpSet out;
  uint32_t next = 0;
  for (const auto& r : s) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return out;
}

CpSet minus(const CpSet& a, const CpSet& b) {
  CpSet both = complement(a);
  both.insert(both.end(), b.begin(), b.end());
  return complement(normalised(std::move(both)));
}

const CpSet kDigit = {{'0', '9'}};
const CpSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CpSet kSpace = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                      {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                      {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const CpSet kLineTerminators = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};
const CpSet kSurrogates = {{0xD800, 0xDFFF}};

bool single(const CpSet& s) {
  return s.size() == 1 && s[0].first == s[0].second;
}

// Alternatives in a group when there are several.
std::string group(const std::vector<std::string>& alts) {
  const std::string out = gbnf_alternatives(alts);
  return alts.size() > 1 ? "( " + out + " )" : out;
}

struct Node {
  enum Kind { kSet, kSeq, kAlt, kRepeat, kStart, kEnd } kind;
  CpSet set;                  // kSet
  std::vector<Node> kids;     // kSeq, kAlt; kRepeat: one
  int32_t min = 0, max = -1;  // kRepeat; max -1: unbounded
  size_t offset = 0;          // where it was written, for errors
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Result<Node> parse() {
    REWIND_TRY(Node n, alternatives(0));
    if (i_ < p_.size()) return fail("unmatched ')'");
    return n;
  }

 private:
  Error fail(const std::string& what, size_t at) const {
    return make_error("pattern: " + what + " at offset " + std::to_string(at));
  }
  Error fail(const std::string& what) const { return fail(what, i_); }

  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  Result<uint32_t> code_point() {
    const text::Utf8Step st = text::utf8_step(p_, i_);
    if (st.kind != text::Utf8Step::kValid) return fail("invalid UTF-8");
    i_ += static_cast<size_t>(st.len);
    return static_cast<uint32_t>(st.cp);
  }

  Result<uint32_t> hex_digits(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!more()) return fail("a truncated escape");
      const char c = peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return fail("a malformed hexadecimal escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  // After the backslash: one code point, or a set for \d \D \w \W \s \S. in_class: \b is a
  // backspace and \- a hyphen.
  Result<CpSet> escape(bool in_class) {
    const size_t at = i_ - 1;
    if (!more()) return fail("a pattern that ends in a backslash", at);
    const char c = peek();
    ++i_;
    auto one = [](uint32_t cp) { return CpSet{{cp, cp}}; };
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return complement(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return complement(kSpace);
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'v':
        return one('\v');
      case 'f':
        return one('\f');
      case '0':
        if (more() && peek() >= '0' && peek() <= '9')
          return fail("octal escapes and backreferences are not supported", at);
        return one(0);
      case 'x': {
        REWIND_TRY(const uint32_t v, hex_digits(2));
        return one(v);
      }
      case 'c': {
        if (!more() || !((peek() >= 'a' && peek() <= 'z') || (peek() >= 'A' && peek() <= 'Z')))
          return fail("\\c must be followed by a letter", at);
        return one(static_cast<uint32_t>(p_[i_++]) % 32);
      }
      case 'u': {
        if (more() && peek() == '{') {
          ++i_;
          uint32_t v = 0;
          int n = 0;
          for (; more() && peek() != '}'; ++n) {
            if (n >= 6) return fail("a code point escape past U+10FFFF", at);
            REWIND_TRY(const uint32_t d, hex_digits(1));
            v = v * 16 + d;
          }
          if (!more() || n == 0) return fail("a malformed \\u{...} escape", at);
          ++i_;
          if (v > kMaxCp) return fail("a code point escape past U+10FFFF", at);
          return one(v);
        }
        REWIND_TRY(uint32_t v, hex_digits(4));
        // A high surrogate followed by an escaped low one is one code point (the u flag).
        if (v >= 0xD800 && v <= 0xDBFF && i_ + 6 <= p_.size() && p_[i_] == '\\' &&
            p_[i_ + 1] == 'u') {
          const size_t save = i_;
          i_ += 2;
          auto lo = hex_digits(4);
          if (lo.ok() && *lo >= 0xDC00 && *lo <= 0xDFFF)
            v = 0x10000 + ((v - 0xD800) << 10) + (*lo - 0xDC00);
          else
            i_ = save;
        }
        return one(v);
      }
      case 'b':
        if (in_class) return one(0x08);
        return fail("word boundaries (\\b) are not supported", at);
      case 'B':
        return fail("word boundaries (\\B) are not supported", at);
      case 'k':
        return fail("backreferences (\\k) are not supported", at);
      case 'p':
      case 'P':
        return fail("Unicode property escapes are not supported", at);
      case '-':
        if (in_class) return one('-');
        break;
      default:
        break;
    }
    if (c >= '1' && c <= '9') return fail("backreferences are not supported", at);
    if (std::string_view("^$\\.*+?()[]{}|/").find(c) != std::string_view::npos) return one(c);
    return fail(std::string("an unknown escape \\") + c, at);
  }

  // After '[': the class up to and including ']'.
  Result<Node> char_class() {
    const size_t at = i_ - 1;
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++i_;
    }
    CpSet set;
    for (;;) {
      if (!more()) return fail("an unterminated character class", at);
      if (peek() == ']') {
        ++i_;
        break;
      }
      const size_t item = i_;
      REWIND_TRY(const CpSet lo, class_atom());
      if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        REWIND_TRY(const CpSet hi, class_atom());
        if (!single(lo) || !single(hi))
          return fail("a range with a class escape (\\d, \\w, \\s) as an end", item);
        if (lo[0].first > hi[0].first) return fail("a range out of order", item);
        set.emplace_back(lo[0].first, hi[0].first);
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    set = normalised(std::move(set));
    if (negated) set = complement(set);
    Node n{Node::kSet, std::move(set), {}, 0, -1, at};
    return n;
  }

  Result<CpSet> class_atom() {
    if (peek() == '\\') {
      ++i_;
      return escape(true);
    }
    REWIND_TRY(const uint32_t cp, code_point());
    return CpSet{{cp, cp}};
  }

  // {m}, {m,}, {m,n} at i_ (on '{'): true and the bounds when it is one; otherwise i_ is kept
  // and '{' is a literal (Annex B).
  Result<bool> braces(int32_t& lo, int32_t& hi) {
    const size_t save = i_;
    ++i_;
    auto number = [&](int32_t& v) {
      const size_t start = i_;
      int64_t x = 0;
      while (more() && peek() >= '0' && peek() <= '9') {
        x = std::min<int64_t>(x * 10 + (peek() - '0'), int64_t{1} << 40);
        ++i_;
      }
      v = static_cast<int32_t>(std::min<int64_t>(x, INT32_MAX));
      return i_ > start;
    };
    if (!number(lo)) {
      i_ = save;
      return false;
    }
    hi = lo;
    if (more() && peek() == ',') {
      ++i_;
      if (!number(hi)) hi = -1;
    }
    if (!more() || peek() != '}') {
      i_ = save;
      return false;
    }
    ++i_;
    if (hi >= 0 && hi < lo) return fail("a repetition {m,n} with n below m", save);
    if (lo > kGbnfMaxRepeat || hi > kGbnfMaxRepeat)
      return fail("a repetition count above " + std::to_string(kGbnfMaxRepeat), save);
    return true;
  }

  Result<Node> alternatives(int depth) {
    if (depth > kMaxDepth) return fail("groups nested deeper than " + std::to_string(kMaxDepth));
    Node alt{Node::kAlt, {}, {}, 0, -1, i_};
    for (;;) {
      REWIND_TRY(Node seq, sequence(depth));
      alt.kids.push_back(std::move(seq));
      if (!more() || peek() != '|') break;
      ++i_;
    }
    return alt;
  }

  Result<Node> sequence(int depth) {
    Node seq{Node::kSeq, {}, {}, 0, -1, i_};
    while (more() && peek() != '|' && peek() != ')') {
      const size_t at = i_;
      const char c = peek();
      Node atom{Node::kSeq, {}, {}, 0, -1, at};
      if (c == '(') {
        ++i_;
        if (more() && peek() == '?') {
          ++i_;
          if (more() && peek() == ':') {
            ++i_;
          } else if (more() && peek() == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' &&
                     p_[i_ + 1] != '!') {
            const size_t close = p_.find('>', i_);
            if (close == std::string_view::npos) return fail("an unterminated group name", at);
            // An identifier (ASCII here): a letter, '_' or '$', then those and digits.
            const std::string_view name = p_.substr(i_ + 1, close - i_ - 1);
            auto start = [](char ch) {
              return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '$';
            };
            if (name.empty() || !start(name[0]) ||
                !std::all_of(name.begin(), name.end(),
                             [&](char ch) { return start(ch) || (ch >= '0' && ch <= '9'); }))
              return fail("a malformed group name", at);
            i_ = close + 1;
          } else {
            return fail("lookaround and other (?...) groups are not supported", at);
          }
        }
        REWIND_TRY(atom, alternatives(depth + 1));
        if (!more() || peek() != ')') return fail("an unterminated group", at);
        ++i_;
      } else if (c == '[') {
        ++i_;
        REWIND_TRY(atom, char_class());
      } else if (c == '.') {
        ++i_;
        atom = Node{Node::kSet, complement(kLineTerminators), {}, 0, -1, at};
      } else if (c == '^' || c == '$') {
        ++i_;
        atom = Node{c == '^' ? Node::kStart : Node::kEnd, {}, {}, 0, -1, at};
      } else if (c == '*' || c == '+' || c == '?') {
        return fail("nothing to repeat", at);
      } else if (c == '\\') {
        ++i_;
        REWIND_TRY(CpSet s, escape(false));
        atom = Node{Node::kSet, std::move(s), {}, 0, -1, at};
      } else {
        if (c == '{') {
          int32_t lo = 0, hi = 0;
          REWIND_TRY(const bool q, braces(lo, hi));
          if (q) return fail("nothing to repeat", at);
        }
        REWIND_TRY(const uint32_t cp, code_point());
        atom = Node{Node::kSet, {{cp, cp}}, {}, 0, -1, at};
      }
      atom.offset = at;
      // At most one quantifier (and its lazy '?').
      if (more()) {
        int32_t lo = -2, hi = -1;
        const size_t q = i_;
        if (peek() == '*') {
          lo = 0;
          ++i_;
        } else if (peek() == '+') {
          lo = 1;
          ++i_;
        } else if (peek() == '?') {
          lo = 0;
          hi = 1;
          ++i_;
        } else if (peek() == '{') {
          REWIND_TRY(const bool b, braces(lo, hi));
          if (!b) lo = -2;
        }
        if (lo != -2) {
          if (atom.kind == Node::kStart || atom.kind == Node::kEnd)
            return fail("a quantifier on an anchor", q);
          if (more() && peek() == '?') ++i_;  // lazy: the same strings
          if (more() && (peek() == '*' || peek() == '+' || peek() == '?' ||
                         (peek() == '{' && braces_ahead())))
            return fail("nothing to repeat", i_);
          Node rep{Node::kRepeat, {}, {}, lo, hi, q};
          rep.kids.push_back(std::move(atom));
          atom = std::move(rep);
        }
      }
      seq.kids.push_back(std::move(atom));
    }
    return seq;
  }

  bool braces_ahead() {
    const size_t save = i_;
    int32_t lo = 0, hi = 0;
    auto r = braces(lo, hi);
    const bool q = !r.ok() || *r;
    i_ = save;
    return q;
  }

  std::string_view p_;
  size_t i_ = 0;
};

// The JSON text of one code point inside a string.
std::string json_char(uint32_t cp) {
  static const char* hex = "0123456789abcdef";
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case 0x08:
      return "\\b";
    case 0x0C:
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (cp < 0x20) return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
  std::string out;
  text::append_utf8(out, static_cast<char32_t>(cp));
  return out;
}

std::string class_bound(uint32_t cp) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "\\U";
  for (int sh = 28; sh >= 0; sh -= 4) out += hex[(cp >> sh) & 15];
  return out;
}

// out, a space and x (no space first).
void append_item(std::string& out, const std::string& x) {
  if (!out.empty()) out += ' ';
  out += x;
}

class Writer {
 public:
  Result<std::string> top(const Node& alt) {
    std::vector<std::string> alts;
    for (const Node& seq : alt.kids) {
      size_t b = 0, e = seq.kids.size();
      const bool start = e > 0 && seq.kids[0].kind == Node::kStart;
      if (start) ++b;
      const bool end = e > b && seq.kids[e - 1].kind == Node::kEnd;
      if (end) --e;
      std::string body = start ? "" : "char*";
      REWIND_TRY(const std::string mid, items(seq, b, e));
      if (!mid.empty()) append_item(body, mid);
      if (!end) append_item(body, "char*");
      alts.push_back(body.empty() ? "\"\"" : body);
    }
    return bounded(group(alts), alt);
  }

 private:
  // The most bytes a written expression may take: nested repeats of items that can match
  // nothing ((b?(b?a?)*)*) write their non-empty strings out again at every level, doubling
  // each time, so a short pattern could otherwise take minutes and gigabytes.
  static constexpr size_t kMaxBytes = size_t{256} << 10;

  static Error fail(const std::string& what, size_t at) {
    return make_error("pattern: " + what + " at offset " + std::to_string(at));
  }
  static Error too_big(const Node& n) {
    return fail(
        "a pattern whose grammar passes 256 KiB (nested repeats of items that can "
        "match nothing)",
        n.offset);
  }
  static Result<std::string> bounded(std::string s, const Node& n) {
    if (s.size() > kMaxBytes) return too_big(n);
    return s;
  }

  // The sequence's items [b, e), consecutive single characters as one literal.
  Result<std::string> items(const Node& seq, size_t b, size_t e) {
    std::string out, lit;
    auto flush = [&] {
      if (lit.empty()) return;
      append_item(out, gbnf_literal(lit));
      lit.clear();
    };
    for (size_t k = b; k < e; ++k) {
      const Node& n = seq.kids[k];
      if (n.kind == Node::kSet) {
        const CpSet s = minus(n.set, kSurrogates);
        if (single(s)) {
          lit += json_char(s[0].first);
          continue;
        }
      }
      flush();
      REWIND_TRY(const std::string x, node(n));
      append_item(out, x);
      if (out.size() > kMaxBytes) return too_big(n);
    }
    flush();
    return bounded(std::move(out), seq);
  }

  Result<std::string> node(const Node& n) {
    switch (n.kind) {
      case Node::kStart:
      case Node::kEnd:
        return fail(std::string("an anchor (") + (n.kind == Node::kStart ? "^" : "$") +
                        ") that is not at an end of the pattern or of a top-level alternative",
                    n.offset);
      case Node::kSet:
        return set(n);
      case Node::kSeq: {
        REWIND_TRY(const std::string s, items(n, 0, n.kids.size()));
        return s.empty() ? std::string("\"\"") : "( " + s + " )";
      }
      case Node::kAlt: {
        std::vector<std::string> alts;
        size_t bytes = 0;
        for (const Node& k : n.kids) {
          REWIND_TRY(const std::string x, node(k));
          if ((bytes += x.size()) > kMaxBytes) return too_big(k);
          alts.push_back(x);
        }
        return bounded(group(alts), n);
      }
      case Node::kRepeat: {
        // An item that can match nothing is repeated as its other strings from zero times (the
        // same strings): GBNF refuses a repetition of an empty string as left recursion.
        REWIND_TRY(const std::optional<std::string> e, nonempty(n.kids[0]));
        if (!e || n.max == 0) return std::string("\"\"");
        return repeat("( " + *e + " )", nullable(n.kids[0]) ? 0 : n.min, n.max);
      }
    }
    return fail("an unknown node", n.offset);
  }

  static std::string repeat(const std::string& g, int32_t min, int32_t max) {
    if (min == 0 && max == -1) return g + "*";
    if (min == 1 && max == -1) return g + "+";
    if (min == 0 && max == 1) return g + "?";
    if (max == -1) return g + "{" + std::to_string(min) + ",}";
    if (min == max) return g + "{" + std::to_string(min) + "}";
    return g + "{" + std::to_string(min) + "," + std::to_string(max) + "}";
  }

  // Whether n matches the empty string (anchors included: they are refused when written).
  static bool nullable(const Node& n) {
    switch (n.kind) {
      case Node::kSet:
        return false;
      case Node::kSeq:
        return std::all_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return nullable(k); });
      case Node::kAlt:
        return std::any_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return nullable(k); });
      case Node::kRepeat:
        return n.min == 0 || nullable(n.kids[0]);
      case Node::kStart:
      case Node::kEnd:
        return true;
    }
    return true;
  }

  // n's strings but the empty one: none when the empty one is all there is.
  Result<std::optional<std::string>> nonempty(const Node& n) {
    using Out = std::optional<std::string>;
    if (!nullable(n) || n.kind == Node::kStart || n.kind == Node::kEnd) {
      REWIND_TRY(const std::string e, node(n));  // an anchor: its error
      return Out{e};
    }
    std::vector<std::string> alts;
    switch (n.kind) {
      case Node::kSet:
      case Node::kStart:
      case Node::kEnd:
        break;            // above
      case Node::kSeq: {  // every item nullable: the first non-empty one, then the rest as is
        size_t bytes = 0;
        for (size_t i = 0; i < n.kids.size(); ++i) {
          REWIND_TRY(const Out head, nonempty(n.kids[i]));
          if (!head) continue;
          REWIND_TRY(const std::string rest, items(n, i + 1, n.kids.size()));
          alts.push_back(rest.empty() ? *head : *head + " " + rest);
          if ((bytes += alts.back().size()) > kMaxBytes) return too_big(n);
        }
        break;
      }
      case Node::kAlt:
        for (const Node& k : n.kids) {
          REWIND_TRY(const Out e, nonempty(k));
          if (e) alts.push_back(*e);
        }
        break;
      case Node::kRepeat: {
        REWIND_TRY(const Out e, nonempty(n.kids[0]));
        if (!e || n.max == 0) return Out{};
        return Out{repeat("( " + *e + " )", 1, n.max)};
      }
    }
    if (alts.empty()) return Out{};
    REWIND_TRY(std::string e, bounded("( " + gbnf_alternatives(alts) + " )", n));
    return Out{std::move(e)};
  }

  // A set of code points: a class of those written as themselves, and each one JSON escapes.
  static Result<std::string> set(const Node& n) {
    const CpSet s = minus(n.set, kSurrogates);
    if (s.empty()) return fail("a character class that matches no character", n.offset);
    const CpSet escaped = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    const CpSet plain = minus(s, escaped);
    std::vector<std::string> alts;
    if (!plain.empty()) {
      std::string c = "[";
      for (const auto& r : plain)
        c += r.first == r.second ? class_bound(r.first)
                                 : class_bound(r.first) + "-" + class_bound(r.second);
      alts.push_back(c + "]");
    }
    for (const auto& r : minus(s, plain))
      for (uint32_t cp = r.first; cp <= r.second; ++cp) alts.push_back(gbnf_literal(json_char(cp)));
    return group(alts);
  }
};

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view pattern) {
  Parser p(pattern);
  REWIND_TRY(const Node tree, p.parse());
  Writer w;
  return w.top(tree);
}

}  // namespace rw
