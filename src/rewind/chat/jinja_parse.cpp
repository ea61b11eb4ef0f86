// Lexer and parser of the Jinja subset (jinja.h). The lexer follows jinja2's lexer with
// trim_blocks and lstrip_blocks on: `-` strips all whitespace on that side of a tag, `+`
// turns lstrip_blocks (before a tag) or trim_blocks (after a block tag) off, a block or
// comment tag eats one newline after it, and spaces and tabs between a line start and a block
// or comment tag are dropped. The parser is recursive descent with jinja2's precedence:
// `x if c else y` < or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + <
// postfix (. [] ()) < filters and tests. Nesting is bounded (kMaxNesting, kMaxHeight) so that
// parsing and rendering cannot overflow the stack.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "rewind/chat/jinja_internal.h"
#include "rewind/tokenizer/text.h"

namespace rw::jinja {

namespace {

constexpr int kMaxNesting = 100;  // recursion of blocks, parentheses and unary chains
constexpr int kMaxHeight = 150;   // height of one expression tree

enum class Tok : uint8_t {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof,
};

struct Token {
  Tok t = Tok::kEof;
  std::string text;  // data, name, decoded string, operator
  int64_t i = 0;
  double f = 0;
  size_t off = 0;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
// Python's \s without line breaks (what lstrip_blocks may remove before a tag).
bool is_inline_space(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1f');
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  rw::text::append_utf8(out, static_cast<char32_t>(cp));
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Line and column (1-based; the column counts code points) of byte offsets.
class LineIndex {
 public:
  explicit LineIndex(const std::string& s) : s_(s) {
    starts_.push_back(0);
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == '\n') starts_.push_back(i + 1);
  }
  void locate(size_t off, int* line, int* col) const {
    if (off > s_.size()) off = s_.size();
    size_t lo = 0, hi = starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (starts_[mid] <= off)
        lo = mid;
      else
        hi = mid;
    }
    int c = 1;
    for (size_t i = starts_[lo]; i < off; ++i)
      if ((static_cast<unsigned char>(s_[i]) & 0xC0) != 0x80) ++c;
    *line = static_cast<int>(lo + 1);
    *col = c;
  }

 private:
  const std::string& s_;
  std::vector<size_t> starts_;
};

class Lexer {
 public:
  Lexer(const std::string& s, const LineIndex& li) : s_(s), li_(li) {}

  std::vector<Token> run() {
    const size_t n = s_.size();
    size_t pos = 0;
    while (pos < n) {
      size_t p = pos;
      for (;;) {
        p = s_.find('{', p);
        if (p == std::string::npos || p + 1 >= n) {
          p = std::string::npos;
          break;
        }
        const char c = s_[p + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++p;
      }
      if (p == std::string::npos) {
        push_data(pos, s_.substr(pos));
        break;
      }
      const char kind = s_[p + 1];
      const char sign = (p + 2 < n && (s_[p + 2] == '-' || s_[p + 2] == '+')) ? s_[p + 2] : 0;
      const size_t q = p + 2 + (sign ? 1 : 0);
      std::string data = s_.substr(pos, p - pos);
      strip_before(data, pos, sign, kind != '{');
      push_data(pos, std::move(data));
      size_t raw_body = 0;
      if (kind == '%' && match_raw_open(q, &raw_body)) {
        pos = lex_raw(p, raw_body);
      } else if (kind == '#') {
        pos = lex_comment(p, q);
      } else {
        pos = lex_tag(p, q, kind == '{');
      }
    }
    Token eof;
    eof.t = Tok::kEof;
    eof.off = n;
    toks_.push_back(std::move(eof));
    return std::move(toks_);
  }

 private:
  [[noreturn]] void fail_at(size_t off, const std::string& msg) const {
    JinjaError e;
    e.message = msg;
    li_.locate(off, &e.line, &e.col);
    throw e;
  }

  void push(Tok t, size_t off, std::string text = {}) {
    Token k;
    k.t = t;
    k.off = off;
    k.text = std::move(text);
    toks_.push_back(std::move(k));
  }
  void push_data(size_t off, std::string data) {
    if (!data.empty()) push(Tok::kData, off, std::move(data));
  }

  // Whitespace control on the text before a tag that starts at `data_off + data.size()`.
  void strip_before(std::string& data, size_t data_off, char sign, bool block_or_comment) const {
    if (sign == '-') {
      size_t e = data.size();
      while (e > 0 && is_space(data[e - 1])) --e;
      data.resize(e);
      return;
    }
    if (sign == '+' || !block_or_comment) return;
    const size_t nl = data.rfind('\n');
    const size_t l = nl == std::string::npos ? 0 : nl + 1;
    const bool line_start = l > 0 || data_off == 0 || s_[data_off - 1] == '\n';
    if (!line_start || l >= data.size()) return;
    for (size_t i = l; i < data.size(); ++i)
      if (!is_inline_space(data[i])) return;
    data.resize(l);
  }

  size_t skip_space(size_t q) const {
    while (q < s_.size() && is_space(s_[q])) ++q;
    return q;
  }
  bool at(size_t q, const char* lit) const { return s_.compare(q, std::strlen(lit), lit) == 0; }

  // `{% raw %}` / `{%- raw -%}`: *body gets where the raw text starts.
  bool match_raw_open(size_t q, size_t* body) const {
    q = skip_space(q);
    if (!at(q, "raw")) return false;
    q = skip_space(q + 3);
    if (at(q, "-%}")) {
      *body = skip_space(q + 3);
      return true;
    }
    if (at(q, "%}")) {  // jinja2 does not apply trim_blocks to the raw opening tag
      *body = q + 2;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t open, size_t body) {
    size_t p = body;
    for (;;) {
      p = s_.find("{%", p);
      if (p == std::string::npos) fail_at(open, "unclosed '{% raw %}' (expected '{% endraw %}')");
      size_t q = p + 2;
      const char sign = (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ? s_[q] : 0;
      if (sign) ++q;
      q = skip_space(q);
      if (!at(q, "endraw")) {
        p += 2;
        continue;
      }
      q = skip_space(q + 6);
      size_t after;
      if (at(q, "+%}")) {
        after = q + 3;
      } else if (at(q, "-%}")) {
        after = skip_space(q + 3);
      } else if (at(q, "%}")) {
        after = q + 2;
        if (after < s_.size() && s_[after] == '\n') ++after;
      } else {
        p += 2;
        continue;
      }
      std::string data = s_.substr(body, p - body);
      strip_before(data, body, sign, true);
      push_data(body, std::move(data));
      return after;
    }
  }

  size_t lex_comment(size_t open, size_t q) const {
    const size_t e = s_.find("#}", q);
    if (e == std::string::npos) fail_at(open, "unclosed comment (expected '#}')");
    const char before = e > q ? s_[e - 1] : 0;
    size_t next = e + 2;
    if (before == '-') {
      next = skip_space(next);
    } else if (before != '+' && next < s_.size() && s_[next] == '\n') {
      ++next;
    }
    return next;
  }

  size_t lex_tag(size_t open, size_t q, bool is_var) {
    push(is_var ? Tok::kVarBegin : Tok::kBlockBegin, open);
    std::vector<char> closers;
    const size_t n = s_.size();
    for (;;) {
      q = skip_space(q);
      if (q >= n)
        fail_at(open, is_var ? "unclosed '{{' (expected '}}')" : "unclosed '{%' (expected '%}')");
      if (closers.empty()) {
        if (is_var) {
          if (at(q, "-}}")) {
            push(Tok::kVarEnd, q);
            return skip_space(q + 3);
          }
          if (at(q, "}}")) {
            push(Tok::kVarEnd, q);
            return q + 2;
          }
        } else {
          if (at(q, "+%}")) {
            push(Tok::kBlockEnd, q);
            return q + 3;
          }
          if (at(q, "-%}")) {
            push(Tok::kBlockEnd, q);
            return skip_space(q + 3);
          }
          if (at(q, "%}")) {
            push(Tok::kBlockEnd, q);
            return (q + 2 < n && s_[q + 2] == '\n') ? q + 3 : q + 2;
          }
        }
      }
      const char c = s_[q];
      if (is_digit(c)) {
        q = lex_number(q);
      } else if (is_name_start(c)) {
        size_t e = q;
        while (e < n && is_name_char(s_[e])) ++e;
        push(Tok::kName, q, s_.substr(q, e - q));
        q = e;
      } else if (c == '\'' || c == '"') {
        q = lex_string(q);
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : kTwo)
          if (at(q, t)) op = t;
        if (op.empty()) {
          if (!std::strchr("+-/*%~<>=.,:|()[]{};", c))
            fail_at(q, std::string("unexpected character '") + c + "' in tag");
          op = std::string(1, c);
          if (c == '(') closers.push_back(')');
          if (c == '[') closers.push_back(']');
          if (c == '{') closers.push_back('}');
          if (c == ')' || c == ']' || c == '}') {
            if (closers.empty()) fail_at(q, std::string("unexpected '") + c + "'");
            if (closers.back() != c)
              fail_at(q, std::string("unexpected '") + c + "', expected '" + closers.back() + "'");
            closers.pop_back();
          }
        }
        push(Tok::kOp, q, op);
        q += op.size();
      }
    }
  }

  size_t lex_number(size_t q) {
    const size_t n = s_.size();
    const size_t st = q;
    auto digits = [&](size_t p, auto pred) {
      while (p < n && (pred(s_[p]) || (s_[p] == '_' && p + 1 < n && pred(s_[p + 1])))) ++p;
      return p;
    };
    if (s_[q] == '0' && q + 1 < n && std::strchr("xXoObB", s_[q + 1]) && s_[q + 1] != 0) {
      const char k = static_cast<char>(s_[q + 1] | 0x20);
      const int base = k == 'x' ? 16 : k == 'o' ? 8 : 2;
      auto ok = [base](char c) {
        const int v = hex_value(c);
        return v >= 0 && v < base;
      };
      size_t e = q + 2;
      if (e < n && s_[e] == '_') ++e;
      e = digits(e, ok);
      std::string text;
      for (size_t i = q + 2; i < e; ++i)
        if (s_[i] != '_') text += s_[i];
      if (text.empty()) fail_at(q, "invalid number literal");
      Token t;
      t.t = Tok::kInt;
      t.off = q;
      auto r = std::from_chars(text.data(), text.data() + text.size(), t.i, base);
      if (r.ec != std::errc()) fail_at(q, "integer literal too large");
      toks_.push_back(std::move(t));
      return e;
    }
    size_t e = digits(q, is_digit);
    bool is_float = false;
    if (e + 1 < n && s_[e] == '.' && is_digit(s_[e + 1])) {
      e = digits(e + 1, is_digit);
      is_float = true;
    }
    if (e < n && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < n && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < n && is_digit(s_[x])) {
        e = digits(x, is_digit);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = st; i < e; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t;
    t.off = st;
    if (is_float) {
      t.t = Tok::kFloat;
      auto r = std::from_chars(text.data(), text.data() + text.size(), t.f);
      if (r.ec == std::errc::result_out_of_range)
        t.f = text.find("e-") != std::string::npos || text.find("E-") != std::string::npos
                  ? 0.0
                  : HUGE_VAL;
      else if (r.ec != std::errc())
        fail_at(st, "invalid number literal");
    } else {
      t.t = Tok::kInt;
      auto r = std::from_chars(text.data(), text.data() + text.size(), t.i);
      if (r.ec != std::errc()) fail_at(st, "integer literal too large");
    }
    toks_.push_back(std::move(t));
    return e;
  }

  // A quoted string with Python's escapes (\n \t \\ \' \" \xhh \uhhhh \Uhhhhhhhh \ooo ...);
  // an unknown escape keeps its backslash, as Python does.
  size_t lex_string(size_t q) {
    const size_t n = s_.size();
    const char quote = s_[q];
    std::string out;
    size_t j = q + 1;
    while (j < n && s_[j] != quote) {
      if (s_[j] != '\\') {
        out += s_[j++];
        continue;
      }
      if (j + 1 >= n) break;
      const char e = s_[j + 1];
      j += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          int k = 0;
          for (; k < len && j + k < n && hex_value(s_[j + k]) >= 0; ++k)
            cp = cp * 16 + static_cast<uint32_t>(hex_value(s_[j + k]));
          if (k != len) fail_at(j - 2, "invalid \\" + std::string(1, e) + " escape in string");
          j += len;
          if (e == 'u' && cp >= 0xD800 && cp <= 0xDBFF && j + 6 <= n && s_[j] == '\\' &&
              s_[j + 1] == 'u') {
            uint32_t lo = 0;
            int m = 0;
            for (; m < 4 && hex_value(s_[j + 2 + m]) >= 0; ++m)
              lo = lo * 16 + static_cast<uint32_t>(hex_value(s_[j + 2 + m]));
            if (m == 4 && lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              j += 6;
            }
          }
          append_utf8(out, cp);
          break;
        }
        case 'N':  // \N{NAME} needs the Unicode name database
          fail_at(j - 2, "\\N{...} escapes in strings are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && j < n && s_[j] >= '0' && s_[j] <= '7'; ++k, ++j)
              cp = cp * 8 + static_cast<uint32_t>(s_[j] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    if (j >= n) fail_at(q, "unterminated string literal");
    push(Tok::kString, q, std::move(out));
    return j + 1;
  }

  const std::string& s_;
  const LineIndex& li_;
  std::vector<Token> toks_;
};

class Parser {
 public:
  Parser(std::vector<Token> toks, const LineIndex& li) : toks_(std::move(toks)), li_(li) {}

  NodeList parse_template() {
    std::string stopped;
    NodeList body = parse_body({}, &stopped, toks_.front(), "");
    return body;
  }

 private:
  struct Guard {
    Guard(Parser* p, const Token& t) : p_(p) {
      if (++p_->depth_ > kMaxNesting) p_->fail(t, "template nested too deeply");
    }
    ~Guard() { --p_->depth_; }
    Parser* p_;
  };

  [[noreturn]] void fail(const Token& t, const std::string& msg) const {
    JinjaError e;
    e.message = msg;
    li_.locate(t.off, &e.line, &e.col);
    throw e;
  }

  const Token& peek(size_t k = 0) const {
    const size_t i = std::min(pos_ + k, toks_.size() - 1);
    return toks_[i];
  }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op, size_t k = 0) const {
    return peek(k).t == Tok::kOp && peek(k).text == op;
  }
  bool is_name(const char* nm, size_t k = 0) const {
    return peek(k).t == Tok::kName && peek(k).text == nm;
  }
  static std::string describe(const Token& t) {
    switch (t.t) {
      case Tok::kData:
        return "text";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kName:
        return "'" + t.text + "'";
      case Tok::kString:
        return "a string";
      case Tok::kInt:
      case Tok::kFloat:
        return "a number";
      case Tok::kOp:
        return "'" + t.text + "'";
      case Tok::kEof:
        return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  void expect(Tok t, const char* what) {
    if (peek().t != t) fail(peek(), std::string("expected ") + what + ", got " + describe(peek()));
    next();
  }
  void expect_block_end() { expect(Tok::kBlockEnd, "'%}'"); }
  std::string expect_name() {
    if (peek().t != Tok::kName) fail(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }

  template <typename T>
  std::unique_ptr<T> make(const Token& at) {
    auto x = std::make_unique<T>();
    li_.locate(at.off, &x->line, &x->col);
    return x;
  }
  ExprP make_expr(ExprKind k, const Token& at) {
    ExprP e = make<Expr>(at);
    e->kind = k;
    return e;
  }
  // Checks the height of a finished expression node (children already checked).
  ExprP seal(ExprP e, const Token& at) {
    int h = 0;
    auto see = [&](const ExprP& c) {
      if (c) h = std::max(h, c->height);
    };
    for (const auto& c : e->args) see(c);
    for (const auto& kv : e->kwargs) see(kv.second);
    if (h + 1 > kMaxHeight) fail(at, "expression too deeply nested");
    e->height = h + 1;
    return e;
  }

  // ---- statements ----------------------------------------------------------------------

  NodeList parse_body(std::initializer_list<const char*> stops, std::string* stopped,
                      const Token& opener, const char* opener_name) {
    Guard g(this, peek());
    NodeList out;
    for (;;) {
      const Token& t = peek();
      switch (t.t) {
        case Tok::kData: {
          auto n = make<Node>(t);
          n->kind = NodeKind::kText;
          n->text = t.text;
          out.push_back(std::move(n));
          next();
          break;
        }
        case Tok::kVarBegin: {
          next();
          auto n = make<Node>(t);
          n->kind = NodeKind::kOutput;
          n->expr = parse_expression(true);
          expect(Tok::kVarEnd, "'}}'");
          out.push_back(std::move(n));
          break;
        }
        case Tok::kBlockBegin: {
          const Token& kw = peek(1);
          if (kw.t != Tok::kName) fail(kw, "expected a tag name, got " + describe(kw));
          for (const char* s : stops) {
            if (kw.text == s) {
              next();
              next();
              *stopped = s;
              return out;
            }
          }
          const Token& open = next();
          parse_statement(out, open);
          break;
        }
        case Tok::kEof: {
          if (stops.size() == 0) return out;
          std::string expect;
          for (const char* s : stops)
            expect += std::string(expect.empty() ? "" : " or ") + "'{% " + s + " %}'";
          fail(opener,
               std::string("unclosed '{% ") + opener_name + " %}' (expected " + expect + ")");
        }
        default:
          fail(t, "unexpected " + describe(t));
      }
    }
  }

  // After '{%' (`open`, which names the statement in errors about unclosed blocks).
  void parse_statement(NodeList& out, const Token& open) {
    const Token& kw = next();  // the tag name
    const std::string& k = kw.text;
    if (k == "if") return out.push_back(parse_if(open));
    if (k == "for") return out.push_back(parse_for(open));
    if (k == "set") return out.push_back(parse_set(open));
    if (k == "macro") return out.push_back(parse_macro(open));
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail(kw, "'" + k + "' outside a loop");
      auto n = make<Node>(kw);
      n->kind = k == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      expect_block_end();
      return out.push_back(std::move(n));
    }
    if (k == "generation") {
      auto n = make<Node>(open);
      n->kind = NodeKind::kGeneration;
      expect_block_end();
      std::string stopped;
      n->bodies.push_back(parse_body({"endgeneration"}, &stopped, open, "generation"));
      expect_block_end();
      return out.push_back(std::move(n));
    }
    if (k.rfind("end", 0) == 0 || k == "elif" || k == "else")
      fail(kw, "unexpected '{% " + k + " %}' (no matching block is open)");
    static const char* const kUnsupported[] = {"extends",    "include", "import", "from",
                                               "block",      "call",    "filter", "with",
                                               "autoescape", "do",      "trans"};
    for (const char* u : kUnsupported)
      if (k == u) fail(kw, "unsupported tag '" + k + "'");
    fail(kw, "unknown tag '" + k + "'");
  }

  std::unique_ptr<Node> parse_if(const Token& kw) {
    auto n = make<Node>(kw);
    n->kind = NodeKind::kIf;
    n->conds.push_back(parse_expression(true));
    expect_block_end();
    for (;;) {
      std::string stopped;
      n->bodies.push_back(parse_body({"elif", "else", "endif"}, &stopped, kw, "if"));
      if (stopped == "elif") {
        n->conds.push_back(parse_expression(true));
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (stopped == "else") {
        n->bodies.push_back(parse_body({"endif"}, &stopped, kw, "if"));
        expect_block_end();
      }
      return n;
    }
  }

  std::unique_ptr<Node> parse_for(const Token& kw) {
    auto n = make<Node>(kw);
    n->kind = NodeKind::kFor;
    const bool paren = is_op("(");
    if (paren) next();
    n->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      if (paren && is_op(")")) break;
      n->targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
    if (!is_name("in")) fail(peek(), "expected 'in', got " + describe(peek()));
    next();
    n->expr = parse_expression(false);
    if (is_name("if")) {
      next();
      n->filter = parse_expression(true);
    }
    if (is_name("recursive")) fail(peek(), "recursive loops are not supported");
    expect_block_end();
    std::string stopped;
    ++loop_depth_;
    n->bodies.push_back(parse_body({"else", "endfor"}, &stopped, kw, "for"));
    --loop_depth_;
    expect_block_end();
    if (stopped == "else") {
      n->bodies.push_back(parse_body({"endfor"}, &stopped, kw, "for"));
      expect_block_end();
    }
    return n;
  }

  std::unique_ptr<Node> parse_set(const Token& kw) {
    auto n = make<Node>(kw);
    const std::string first = expect_name();
    if (is_op(".")) {
      next();
      n->kind = NodeKind::kSetAttr;
      n->targets.push_back(first);
      n->text = expect_name();
      expect_op("=");
      n->expr = parse_tuple_expression();
      expect_block_end();
      return n;
    }
    n->targets.push_back(first);
    while (is_op(",")) {
      next();
      n->targets.push_back(expect_name());
    }
    if (is_op("=")) {
      next();
      n->kind = NodeKind::kSet;
      n->expr = parse_tuple_expression();
      expect_block_end();
      return n;
    }
    if (n->targets.size() == 1 && peek().t == Tok::kBlockEnd) {
      next();
      n->kind = NodeKind::kSetBlock;
      std::string stopped;
      n->bodies.push_back(parse_body({"endset"}, &stopped, kw, "set"));
      expect_block_end();
      return n;
    }
    fail(peek(), "expected '=' in set, got " + describe(peek()));
  }

  std::unique_ptr<Node> parse_macro(const Token& kw) {
    auto n = make<Node>(kw);
    n->kind = NodeKind::kMacro;
    n->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      std::string name = expect_name();
      ExprP def;
      if (is_op("=")) {
        next();
        def = parse_expression(true);
      }
      n->params.emplace_back(std::move(name), std::move(def));
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string stopped;
    n->bodies.push_back(parse_body({"endmacro"}, &stopped, kw, "macro"));
    loop_depth_ = saved;
    if (peek().t == Tok::kName && peek().text == n->text) next();
    expect_block_end();
    return n;
  }

  // ---- expressions -----------------------------------------------------------------------

  ExprP parse_tuple_expression() {
    const Token& at = peek();
    ExprP e = parse_expression(true);
    if (!is_op(",")) return e;
    ExprP t = make_expr(ExprKind::kTuple, at);
    t->args.push_back(std::move(e));
    while (is_op(",")) {
      next();
      if (peek().t == Tok::kBlockEnd) break;
      t->args.push_back(parse_expression(true));
    }
    return seal(std::move(t), at);
  }

  ExprP parse_expression(bool with_cond) {
    const Token& at = peek();
    Guard g(this, at);
    ExprP e = parse_or();
    if (!with_cond) return e;
    while (is_name("if")) {
      const Token& kw = next();
      ExprP c = make_expr(ExprKind::kCond, kw);
      ExprP cond = parse_or();
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      if (is_name("else")) {
        next();
        c->args.push_back(parse_expression(true));
      }
      e = seal(std::move(c), kw);
    }
    return e;
  }

  ExprP parse_or() {
    ExprP e = parse_and();
    while (is_name("or")) {
      const Token& kw = next();
      ExprP o = make_expr(ExprKind::kOr, kw);
      o->args.push_back(std::move(e));
      o->args.push_back(parse_and());
      e = seal(std::move(o), kw);
    }
    return e;
  }

  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) {
      const Token& kw = next();
      ExprP o = make_expr(ExprKind::kAnd, kw);
      o->args.push_back(std::move(e));
      o->args.push_back(parse_not());
      e = seal(std::move(o), kw);
    }
    return e;
  }

  ExprP parse_not() {
    if (is_name("not")) {
      const Token& kw = next();
      Guard g(this, kw);
      ExprP o = make_expr(ExprKind::kNot, kw);
      o->args.push_back(parse_not());
      return seal(std::move(o), kw);
    }
    return parse_compare();
  }

  ExprP parse_compare() {
    const Token& at = peek();
    ExprP e = parse_math1();
    ExprP c;
    for (;;) {
      CmpOp op;
      if (is_op("=="))
        op = CmpOp::kEq;
      else if (is_op("!="))
        op = CmpOp::kNe;
      else if (is_op("<"))
        op = CmpOp::kLt;
      else if (is_op("<="))
        op = CmpOp::kLe;
      else if (is_op(">"))
        op = CmpOp::kGt;
      else if (is_op(">="))
        op = CmpOp::kGe;
      else if (is_name("in"))
        op = CmpOp::kIn;
      else if (is_name("not") && is_name("in", 1))
        op = CmpOp::kNotIn;
      else
        break;
      if (op == CmpOp::kNotIn) next();
      next();
      if (!c) {
        c = make_expr(ExprKind::kCompare, at);
        c->args.push_back(std::move(e));
      }
      c->cmp.push_back(op);
      c->args.push_back(parse_math1());
    }
    return c ? seal(std::move(c), at) : std::move(e);
  }

  ExprP binary(ExprP l, BinOp op, const Token& at, ExprP r) {
    ExprP b = make_expr(ExprKind::kBinary, at);
    b->op = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return seal(std::move(b), at);
  }

  ExprP parse_math1() {
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(std::move(e), t.text == "+" ? BinOp::kAdd : BinOp::kSub, t, parse_concat());
    }
    return e;
  }

  ExprP parse_concat() {
    ExprP e = parse_math2();
    while (is_op("~")) {
      const Token& t = next();
      e = binary(std::move(e), BinOp::kConcat, t, parse_math2());
    }
    return e;
  }

  ExprP parse_math2() {
    ExprP e = parse_pow();
    for (;;) {
      BinOp op;
      if (is_op("*"))
        op = BinOp::kMul;
      else if (is_op("/"))
        op = BinOp::kDiv;
      else if (is_op("//"))
        op = BinOp::kFloorDiv;
      else if (is_op("%"))
        op = BinOp::kMod;
      else
        break;
      const Token& t = next();
      e = binary(std::move(e), op, t, parse_pow());
    }
    return e;
  }

  ExprP parse_pow() {
    ExprP e = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next();
      e = binary(std::move(e), BinOp::kPow, t, parse_unary(true));
    }
    return e;
  }

  ExprP parse_unary(bool with_filter) {
    const Token& at = peek();
    Guard g(this, at);
    ExprP e;
    if (is_op("-") || is_op("+")) {
      next();
      e = make_expr(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
      e->args.push_back(parse_unary(false));
      e = seal(std::move(e), at);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprP literal(const Token& at, Value v) {
    ExprP e = make_expr(ExprKind::kLiteral, at);
    e->lit = v;
    return seal(std::move(e), at);
  }

  ExprP parse_primary() {
    const Token& t = peek();
    switch (t.t) {
      case Tok::kName: {
        next();
        if (t.text == "true" || t.text == "True") return literal(t, Value::boolean(true));
        if (t.text == "false" || t.text == "False") return literal(t, Value::boolean(false));
        if (t.text == "none" || t.text == "None") return literal(t, Value::none());
        ExprP e = make_expr(ExprKind::kName, t);
        e->text = t.text;
        return seal(std::move(e), t);
      }
      case Tok::kString: {
        ExprP e = make_expr(ExprKind::kLiteral, t);
        while (peek().t == Tok::kString) e->text += next().text;
        e->lit = Value::str(&e->text);
        return seal(std::move(e), t);
      }
      case Tok::kInt:
        next();
        return literal(t, Value::integer(t.i));
      case Tok::kFloat:
        next();
        return literal(t, Value::real(t.f));
      case Tok::kOp:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return seal(make_expr(ExprKind::kTuple, t), t);
          }
          ExprP e = parse_expression(true);
          if (!is_op(",")) {
            expect_op(")");
            return e;
          }
          ExprP tu = make_expr(ExprKind::kTuple, t);
          tu->args.push_back(std::move(e));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tu->args.push_back(parse_expression(true));
          }
          expect_op(")");
          return seal(std::move(tu), t);
        }
        if (t.text == "[") {
          next();
          ExprP l = make_expr(ExprKind::kList, t);
          while (!is_op("]")) {
            l->args.push_back(parse_expression(true));
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return seal(std::move(l), t);
        }
        if (t.text == "{") {
          next();
          ExprP d = make_expr(ExprKind::kDict, t);
          while (!is_op("}")) {
            d->args.push_back(parse_expression(true));
            expect_op(":");
            d->args.push_back(parse_expression(true));
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return seal(std::move(d), t);
        }
        break;
      default:
        break;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprP parse_postfix(ExprP e) {
    for (;;) {
      const Token& t = peek();
      if (is_op(".")) {
        next();
        const Token& a = peek();
        if (a.t == Tok::kName) {
          next();
          ExprP x = make_expr(ExprKind::kAttr, t);
          at_start_of(*x, *e);
          x->text = a.text;
          x->args.push_back(std::move(e));
          e = seal(std::move(x), t);
        } else if (a.t == Tok::kInt) {
          next();
          ExprP x = make_expr(ExprKind::kItem, t);
          at_start_of(*x, *e);
          x->args.push_back(std::move(e));
          x->args.push_back(literal(a, Value::integer(a.i)));
          e = seal(std::move(x), t);
        } else {
          fail(a, "expected an attribute name after '.', got " + describe(a));
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), t);
      } else {
        return e;
      }
    }
  }

  // Postfix nodes (attribute, item, slice, call) report errors where their object starts.
  static void at_start_of(Expr& x, const Expr& obj) {
    x.line = obj.line;
    x.col = obj.col;
  }

  ExprP parse_subscript(ExprP obj, const Token& at) {
    const int line = obj->line, col = obj->col;
    ExprP start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (is_op("]")) {
        next();
        ExprP x = make_expr(ExprKind::kItem, at);
        x->line = line;
        x->col = col;
        x->args.push_back(std::move(obj));
        x->args.push_back(std::move(start));
        return seal(std::move(x), at);
      }
      if (!is_op(":")) fail(peek(), "expected ']' or ':', got " + describe(peek()));
    }
    next();  // ':'
    ExprP stop, step;
    if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
    if (is_op(":")) {
      next();
      if (!is_op("]")) step = parse_expression(true);
    }
    expect_op("]");
    ExprP x = make_expr(ExprKind::kSlice, at);
    x->line = line;
    x->col = col;
    x->args.push_back(std::move(obj));
    x->args.push_back(std::move(start));
    x->args.push_back(std::move(stop));
    x->args.push_back(std::move(step));
    return seal(std::move(x), at);
  }

  // Arguments `( a, b, name=c )` appended to e->args / e->kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(peek(), "'*' and '**' arguments are not supported");
      if (peek().t == Tok::kName && is_op("=", 1)) {
        std::string name = next().text;
        next();
        e.kwargs.emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail(peek(), "positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprP parse_call(ExprP callee, const Token& at) {
    ExprP c = make_expr(ExprKind::kCall, at);
    at_start_of(*c, *callee);
    c->args.push_back(std::move(callee));
    parse_args(*c);
    return seal(std::move(c), at);
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek(1).t == Tok::kName) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  ExprP parse_filter_expr(ExprP e) {
    for (;;) {
      const Token& t = peek();
      if (is_op("|")) {
        next();
        const Token& nt = peek();
        ExprP f = make_expr(ExprKind::kFilter, nt);
        f->text = dotted_name();
        f->builtin = find_filter(f->text);
        if (f->builtin < 0) fail(nt, "no filter named '" + f->text + "'");
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_args(*f);
        e = seal(std::move(f), nt);
      } else if (is_name("is")) {
        next();
        bool negated = false;
        if (is_name("not")) {
          next();
          negated = true;
        }
        const Token& nt = peek();
        ExprP x = make_expr(ExprKind::kTest, nt);
        x->negated = negated;
        x->text = dotted_name();
        x->builtin = find_test(x->text);
        if (x->builtin < 0) fail(nt, "no test named '" + x->text + "'");
        x->args.push_back(std::move(e));
        const Token& a = peek();
        if (is_op("(")) {
          parse_args(*x);
        } else if ((a.t == Tok::kName || a.t == Tok::kString || a.t == Tok::kInt ||
                    a.t == Tok::kFloat || is_op("[") || is_op("{")) &&
                   !(a.t == Tok::kName &&
                     (a.text == "else" || a.text == "or" || a.text == "and" || a.text == "if" ||
                      a.text == "in" || a.text == "is" || a.text == "not"))) {
          x->args.push_back(parse_postfix(parse_primary()));
        }
        e = seal(std::move(x), nt);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  const LineIndex& li_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Template> Template::parse(std::string_view source) {
  // Line breaks as jinja2 reads them: \r\n and \r become \n; one trailing newline is dropped.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  try {
    const LineIndex li(s);
    Lexer lexer(s, li);
    Parser parser(lexer.run(), li);
    auto impl = std::make_shared<Impl>();
    impl->body = parser.parse_template();
    Template t;
    t.impl_ = std::move(impl);
    return t;
  } catch (const JinjaError& e) {
    return make_error("line " + std::to_string(e.line) + ", column " + std::to_string(e.col) +
                      ": " + e.message);
  }
}

}  // namespace rw::jinja
