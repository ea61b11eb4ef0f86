// Builtins of the Jinja interpreter (jinja.h): Python-style value semantics (truthiness, str,
// repr, ==, <, json.dumps), and the filters, tests, global functions and methods that chat
// templates use.
//
// Filters: abs attr capitalize count d default dictsort e escape first float indent int items
//   join last length list lower map max min reject rejectattr replace reverse round safe select
//   selectattr sort string sum title tojson trim unique upper wordcount.
// Tests: boolean callable defined divisibleby eq equalto escaped even false float ge gt
//   greaterthan in integer iterable le lessthan lower lt mapping ne none number odd sameas
//   sequence string true undefined upper == != < <= > >=.
// Globals: range namespace dict raise_exception strftime_now.
// Methods: str.startswith endswith strip lstrip rstrip split rsplit splitlines replace upper
//   lower title capitalize find rfind count join isdigit isalpha isalnum isspace isupper islower;
//   dict.items keys values get; list.index count; loop.cycle. Lists and dicts cannot be
//   mutated (as in HF's ImmutableSandboxedEnvironment); namespaces can, through `set ns.x`.
// Case mapping uses utf8proc's simple per-code-point mappings (Python's full mappings differ
// for a few characters such as U+00DF).
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>

#include "rewind/chat/jinja_internal.h"

namespace rw::jinja {

using KwArgs = std::vector<std::pair<std::string, Value>>;

void fail(const std::string& message) {
  JinjaError e;
  e.message = message;
  throw e;
}

// ---- heap ----------------------------------------------------------------------------------

const std::string* Heap::str(std::string s) {
  check_len(s.size());
  charge(s.size() + sizeof(std::string));
  strings_.push_back(std::move(s));
  return &strings_.back();
}

List* Heap::list(std::vector<Value> items, bool tuple) {
  charge(items.size() * sizeof(Value) + sizeof(List));
  lists_.push_back(List{std::move(items), tuple});
  return &lists_.back();
}

Dict* Heap::dict(Dict::Kind kind) {
  charge(sizeof(Dict));
  dicts_.emplace_back();
  dicts_.back().kind = kind;
  return &dicts_.back();
}

void Heap::charge(size_t bytes) {
  used_ += bytes;
  if (used_ > limits_.max_total_bytes)
    fail("template exceeded the memory limit of " + std::to_string(limits_.max_total_bytes) +
         " bytes");
}

void Heap::check_len(size_t n) const {
  if (n > limits_.max_output_bytes)
    fail("string longer than the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
}

namespace {

// ---- UTF-8 ---------------------------------------------------------------------------------

// Length of the code point at s[i] (1 for an invalid byte).
size_t cp_len(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4;
  else
    return 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
  if (c == 0xE0 && c1 < 0xA0) return 1;
  if (c == 0xED && c1 > 0x9F) return 1;
  if (c == 0xF0 && c1 < 0x90) return 1;
  if (c == 0xF4 && c1 > 0x8F) return 1;
  return n;
}

// The code point at s[i]; -1 for an invalid byte. *len gets its length.
int32_t decode_cp(std::string_view s, size_t i, size_t* len) {
  *len = cp_len(s, i);
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (*len == 1) return c < 0x80 ? c : -1;
  int32_t cp = c & (0xFF >> (*len + 1));
  for (size_t k = 1; k < *len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

void append_cp(std::string& out, int32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool is_py_space(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_cased(int32_t c) {
  if (c < 0) return false;
  const auto cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
bool is_alpha(int32_t c) {
  if (c < 0) return false;
  const auto cat = utf8proc_category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool is_num(int32_t c) {
  if (c < 0) return false;
  const auto cat = utf8proc_category(c);
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

// Maps each code point through f (invalid bytes are kept).
template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const int32_t cp = decode_cp(s, i, &n);
    if (cp < 0)
      out.append(s.substr(i, n));
    else
      append_cp(out, f(cp, i));
    i += n;
  }
  return out;
}

std::string upper(std::string_view s) {
  return map_cps(s, [](int32_t c, size_t) { return utf8proc_toupper(c); });
}
std::string lower(std::string_view s) {
  return map_cps(s, [](int32_t c, size_t) { return utf8proc_tolower(c); });
}
// str.title(): a cased character after an uncased one is title-cased, others lower-cased.
std::string py_title(std::string_view s) {
  bool prev_cased = false;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const int32_t cp = decode_cp(s, i, &n);
    if (cp < 0) {
      out.append(s.substr(i, n));
      prev_cased = false;
    } else {
      append_cp(out, prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
      prev_cased = is_cased(cp);
    }
    i += n;
  }
  return out;
}
std::string capitalize(std::string_view s) {
  return map_cps(
      s, [](int32_t c, size_t i) { return i == 0 ? utf8proc_totitle(c) : utf8proc_tolower(c); });
}
// jinja2's title filter: the first character of every chunk after [-\s({\[<]+ is upper-cased,
// the rest lower-cased.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool start = true;
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const int32_t cp = decode_cp(s, i, &n);
    const bool sep = cp >= 0 && (is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' ||
                                 cp == '[' || cp == '<');
    if (cp < 0) {
      out.append(s.substr(i, n));
      start = false;
    } else if (sep) {
      append_cp(out, cp);
      start = true;
    } else {
      append_cp(out, start ? utf8proc_toupper(cp) : utf8proc_tolower(cp));
      start = false;
    }
    i += n;
  }
  return out;
}

// Strips code points matching `strip` from the chosen ends (walking the UTF-8 from each end,
// an invalid byte counting as one code point).
template <typename P>
std::string_view strip_if(std::string_view s, bool left, bool right, P strip) {
  size_t a = 0, b = s.size();
  if (left) {
    while (a < b) {
      size_t n;
      const int32_t cp = decode_cp(s, a, &n);
      if (a + n > b || !strip(cp, s.substr(a, n))) break;
      a += n;
    }
  }
  if (right) {
    while (b > a) {
      size_t k = b - 1;
      while (k > a && b - k < 4 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      size_t n;
      int32_t cp = decode_cp(s, k, &n);
      if (k + n != b) {  // not a whole code point ending at b: the last byte alone
        k = b - 1;
        cp = decode_cp(s, k, &n);
        n = 1;
      }
      if (!strip(cp, s.substr(k, b - k))) break;
      b = k;
    }
  }
  return s.substr(a, b - a);
}

// chars: Undefined/None -> whitespace, else the set of code points of the string.
std::string_view py_strip(Renderer& r, std::string_view s, const Value& chars, bool left,
                          bool right) {
  if (chars.t == Value::T::kUndefined || chars.t == Value::T::kNone)
    return strip_if(s, left, right, [](int32_t c, std::string_view) { return is_py_space(c); });
  if (!chars.is_str()) fail("strip arg must be None or str");
  const std::string& set = *chars.s;
  r.step(static_cast<int64_t>(s.size() / 64));
  return strip_if(s, left, right, [&](int32_t, std::string_view cp) {
    for (size_t i = 0; i < set.size();) {
      const size_t n = cp_len(set, i);
      if (set.compare(i, n, cp) == 0) return true;
      i += n;
    }
    return false;
  });
}

}  // namespace

bool ascii_only(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t utf8_length(std::string_view s) {
  if (ascii_only(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += cp_len(s, i)) ++n;
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += cp_len(s, i)) off.push_back(i);
  off.push_back(s.size());
  return off;
}

// ---- Python value semantics --------------------------------------------------------------

namespace {

struct DepthCheck {
  DepthCheck(Renderer& r, int depth) {
    if (depth > r.heap().limits().max_value_depth) fail("value nested too deeply (a cycle?)");
    r.step();
  }
};

double as_double(const Value& v) {
  switch (v.t) {
    case Value::T::kBool:
      return v.b ? 1 : 0;
    case Value::T::kInt:
      return static_cast<double>(v.i);
    case Value::T::kFloat:
      return v.f;
    default:
      return 0;
  }
}
bool int_like(const Value& v) {
  return v.t == Value::T::kInt || v.t == Value::T::kBool;
}
int64_t as_int(const Value& v) {
  return v.t == Value::T::kBool ? (v.b ? 1 : 0) : v.i;
}

bool equal_at(Renderer& r, const Value& a, const Value& b, int depth) {
  DepthCheck dc(r, depth);
  using T = Value::T;
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b)) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case T::kUndefined:
    case T::kNone:
      return true;
    case T::kStr:
      r.step_bytes(std::min(a.s->size(), b.s->size()));
      return *a.s == *b.s;
    case T::kList: {
      if (a.l == b.l) return true;
      if (a.l->items.size() != b.l->items.size()) return false;
      for (size_t i = 0; i < a.l->items.size(); ++i)
        if (!equal_at(r, a.l->items[i], b.l->items[i], depth + 1)) return false;
      return true;
    }
    case T::kDict: {
      if (a.d == b.d) return true;
      if (a.d->kind != Dict::Kind::kPlain || b.d->kind != Dict::Kind::kPlain) return false;
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, v] : a.d->items) {
        const Value* o = b.d->find(*k);
        if (!o || !equal_at(r, v, *o, depth + 1)) return false;
      }
      return true;
    }
    case T::kMacro:
      return a.m == b.m;
    case T::kFunc:
      return a.fn == b.fn;
    default:
      return false;
  }
}

int compare_at(Renderer& r, const Value& a, const Value& b, int depth) {
  DepthCheck dc(r, depth);
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_str() && b.is_str()) {
    r.step_bytes(std::min(a.s->size(), b.s->size()));
    const int c = a.s->compare(*b.s);
    return c < 0 ? -1 : c > 0;
  }
  if (a.t == Value::T::kList && b.t == Value::T::kList) {
    const auto& x = a.l->items;
    const auto& y = b.l->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal_at(r, x[i], y[i], depth + 1)) return compare_at(r, x[i], y[i], depth + 1);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Appends with the per-string length limit.
struct Builder {
  Renderer& r;
  std::string s;
  void add(std::string_view x) {
    r.heap().check_len(s.size() + x.size());
    if (x.size() > 256) r.step_bytes(x.size());
    s.append(x);
  }
  void add(char c) { add(std::string_view(&c, 1)); }
};

// Python's repr(str): quotes chosen as Python does; \\, the quote, \n \r \t escaped; other
// characters that are not printable (control, format, separator other than ' ', unassigned)
// as \xhh, \uhhhh or \Uhhhhhhhh.
void repr_str(Builder& b, std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out;
  out += q;
  static const char* hex = "0123456789abcdef";
  auto esc = [&](char kind, uint32_t v, int digits) {
    out += '\\';
    out += kind;
    for (int sh = (digits - 1) * 4; sh >= 0; sh -= 4) out += hex[(v >> sh) & 15];
  };
  for (size_t i = 0; i < s.size();) {
    size_t n;
    const int32_t cp = decode_cp(s, i, &n);
    const char c = s[i];
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (cp < 0) {
      out.append(s.substr(i, n));  // not UTF-8: kept as is
    } else if (cp == ' ') {
      out += ' ';
    } else {
      const auto cat = utf8proc_category(cp);
      const bool printable = !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                               cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO ||
                               cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                               cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
      if (printable)
        out.append(s.substr(i, n));
      else if (cp < 0x100)
        esc('x', static_cast<uint32_t>(cp), 2);
      else if (cp < 0x10000)
        esc('u', static_cast<uint32_t>(cp), 4);
      else
        esc('U', static_cast<uint32_t>(cp), 8);
    }
    i += n;
  }
  out += q;
  b.add(out);
}

void write_str(Builder& b, const Value& v, bool as_repr, int depth);

void write_container(Builder& b, const Value& v, int depth) {
  if (v.t == Value::T::kList) {
    b.add(v.l->tuple ? '(' : '[');
    bool first = true;
    for (const Value& x : v.l->items) {
      if (!first) b.add(", ");
      first = false;
      write_str(b, x, true, depth + 1);
    }
    if (v.l->tuple && v.l->items.size() == 1) b.add(',');
    b.add(v.l->tuple ? ')' : ']');
    return;
  }
  const Dict& d = *v.d;
  if (d.kind == Dict::Kind::kLoop) {
    const Value* i = d.find("index");
    const Value* n = d.find("length");
    b.add("<LoopContext " + std::to_string(i ? i->i : 0) + "/" + std::to_string(n ? n->i : 0) +
          ">");
    return;
  }
  if (d.kind == Dict::Kind::kNamespace) b.add("<Namespace ");
  b.add('{');
  bool first = true;
  for (const auto& [k, x] : d.items) {
    if (!first) b.add(", ");
    first = false;
    repr_str(b, *k);
    b.add(": ");
    write_str(b, x, true, depth + 1);
  }
  b.add('}');
  if (d.kind == Dict::Kind::kNamespace) b.add('>');
}

void write_str(Builder& b, const Value& v, bool as_repr, int depth) {
  DepthCheck dc(b.r, depth);
  using T = Value::T;
  switch (v.t) {
    case T::kUndefined:
      if (as_repr) b.add("Undefined");
      return;
    case T::kNone:
      b.add("None");
      return;
    case T::kBool:
      b.add(v.b ? "True" : "False");
      return;
    case T::kInt:
      b.add(std::to_string(v.i));
      return;
    case T::kFloat:
      b.add(float_repr(v.f));
      return;
    case T::kStr:
      if (as_repr)
        repr_str(b, *v.s);
      else
        b.add(*v.s);
      return;
    case T::kList:
    case T::kDict:
      write_container(b, v, depth);
      return;
    case T::kMacro:
      b.add("<Macro '" + v.m->text + "'>");
      return;
    case T::kFunc:
      b.add("<built-in function>");
      return;
  }
}

void json_str(Builder& b, std::string_view s, bool ensure_ascii) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  static const char* hex = "0123456789abcdef";
  auto u4 = [&](uint32_t c) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += hex[(c >> sh) & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:  // json.dumps escapes controls, and DEL too when ensure_ascii
          if (c < 0x20 || (c == 0x7F && ensure_ascii)) {
            u4(c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    size_t n;
    const int32_t cp = decode_cp(s, i, &n);
    if (!ensure_ascii) {
      out.append(s.substr(i, n));
    } else if (cp < 0) {
      u4(0xFFFD);
    } else if (cp >= 0x10000) {
      const uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
      u4(0xD800 + (v >> 10));
      u4(0xDC00 + (v & 0x3FF));
    } else {
      u4(static_cast<uint32_t>(cp));
    }
    i += n;
  }
  out += '"';
  b.add(out);
}

void write_json(Builder& b, const Value& v, const JsonStyle& st, int depth) {
  DepthCheck dc(b.r, depth);
  using T = Value::T;
  auto newline = [&](int level) {
    if (!st.has_indent) return;
    b.add('\n');
    for (int i = 0; i < level; ++i) b.add(st.indent);
  };
  switch (v.t) {
    case T::kNone:
      b.add("null");
      return;
    case T::kBool:
      b.add(v.b ? "true" : "false");
      return;
    case T::kInt:
      b.add(std::to_string(v.i));
      return;
    case T::kFloat:
      if (std::isnan(v.f))
        b.add("NaN");
      else if (std::isinf(v.f))
        b.add(v.f > 0 ? "Infinity" : "-Infinity");
      else
        b.add(float_repr(v.f));
      return;
    case T::kStr:
      json_str(b, *v.s, st.ensure_ascii);
      return;
    case T::kList: {
      if (v.l->items.empty()) return b.add("[]");
      b.add('[');
      bool first = true;
      for (const Value& x : v.l->items) {
        if (!first) b.add(st.item_sep);
        first = false;
        newline(depth + 1);
        write_json(b, x, st, depth + 1);
      }
      newline(depth);
      b.add(']');
      return;
    }
    case T::kDict: {
      if (v.d->kind != Dict::Kind::kPlain)
        fail("Object of type " + type_name(v) + " is not JSON serializable");
      if (v.d->items.empty()) return b.add("{}");
      std::vector<const std::pair<const std::string*, Value>*> items;
      for (const auto& kv : v.d->items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* x, auto* y) { return *x->first < *y->first; });
      b.add('{');
      bool first = true;
      for (const auto* kv : items) {
        if (!first) b.add(st.item_sep);
        first = false;
        newline(depth + 1);
        json_str(b, *kv->first, st.ensure_ascii);
        b.add(st.key_sep);
        write_json(b, kv->second, st, depth + 1);
      }
      newline(depth);
      b.add('}');
      return;
    }
    default:
      fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

bool truthy(const Value& v) {
  using T = Value::T;
  switch (v.t) {
    case T::kUndefined:
    case T::kNone:
      return false;
    case T::kBool:
      return v.b;
    case T::kInt:
      return v.i != 0;
    case T::kFloat:
      return v.f != 0;
    case T::kStr:
      return !v.s->empty();
    case T::kList:
      return !v.l->items.empty();
    case T::kDict:
      return v.d->kind != Dict::Kind::kPlain || !v.d->items.empty();
    default:
      return true;
  }
}

std::string type_name(const Value& v) {
  using T = Value::T;
  switch (v.t) {
    case T::kUndefined:
      return "Undefined";
    case T::kNone:
      return "NoneType";
    case T::kBool:
      return "bool";
    case T::kInt:
      return "int";
    case T::kFloat:
      return "float";
    case T::kStr:
      return "str";
    case T::kList:
      return "list";
    case T::kDict:
      return v.d->kind == Dict::Kind::kNamespace ? "Namespace"
             : v.d->kind == Dict::Kind::kLoop    ? "LoopContext"
                                                 : "dict";
    case T::kMacro:
      return "Macro";
    case T::kFunc:
      return "builtin_function_or_method";
  }
  return "?";
}

std::string to_str(Renderer& r, const Value& v) {
  if (v.is_str()) return *v.s;
  Builder b{r, {}};
  write_str(b, v, false, 0);
  return std::move(b.s);
}

std::string repr(Renderer& r, const Value& v) {
  Builder b{r, {}};
  write_str(b, v, true, 0);
  return std::move(b.s);
}

bool equal(Renderer& r, const Value& a, const Value& b) {
  return equal_at(r, a, b, 0);
}
int compare(Renderer& r, const Value& a, const Value& b) {
  return compare_at(r, a, b, 0);
}

std::string to_json(Renderer& r, const Value& v, const JsonStyle& style) {
  Builder b{r, {}};
  write_json(b, v, style, 0);
  return std::move(b.s);
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // like -1.2345e+02
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (ip.size() < static_cast<size_t>(exp + 1)) ip += '0';
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out = ip + "." + fp;
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int ax = std::abs(exp);
    out += std::string("e") + (exp < 0 ? "-" : "+") + (ax < 10 ? "0" : "") + std::to_string(ax);
  }
  return sign + out;
}

// ---- iteration, attributes, items ----------------------------------------------------------

std::vector<Value> iterate(Renderer& r, const Value& v) {
  using T = Value::T;
  switch (v.t) {
    case T::kUndefined:
      return {};
    case T::kList:
      return v.l->items;
    case T::kDict: {
      if (v.d->kind != Dict::Kind::kPlain) break;
      std::vector<Value> out;
      for (const auto& kv : v.d->items) out.push_back(Value::str(kv.first));
      return out;
    }
    case T::kStr: {
      r.step_bytes(v.s->size());
      const std::vector<size_t> off = utf8_offsets(*v.s);
      std::vector<Value> out;
      out.reserve(off.size() - 1);
      r.heap().charge(off.size() * 48);
      for (size_t k = 0; k + 1 < off.size(); ++k)
        out.push_back(r.make_str(v.s->substr(off[k], off[k + 1] - off[k])));
      return out;
    }
    default:
      break;
  }
  fail("'" + type_name(v) + "' object is not iterable");
}

namespace {

[[noreturn]] void fail_undefined(const Value& v) {
  fail(v.s ? "'" + *v.s + "' is undefined" : std::string("value is undefined"));
}

// Python index into n elements; false when out of range.
bool py_index(int64_t i, size_t n, size_t* out) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return false;
  *out = static_cast<size_t>(i);
  return true;
}

}  // namespace

Value get_attr(Renderer& r, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.t == Value::T::kDict)
    if (const Value* v = obj.d->find(name)) return *v;
  return Value::undefined(r.heap().str(name));
}

Value get_item(Renderer& r, const Value& obj, const Value& key) {
  using T = Value::T;
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.t == T::kDict && key.is_str()) {
    if (const Value* v = obj.d->find(*key.s)) return *v;
    return Value::undefined(key.s);
  }
  if (int_like(key)) {
    size_t i;
    if (obj.is_str()) r.step_bytes(obj.s->size());
    if (obj.t == T::kList && py_index(as_int(key), obj.l->items.size(), &i)) return obj.l->items[i];
    if (obj.t == T::kStr) {
      if (ascii_only(*obj.s)) {
        if (py_index(as_int(key), obj.s->size(), &i)) return r.make_str(obj.s->substr(i, 1));
      } else {
        const std::vector<size_t> off = utf8_offsets(*obj.s);
        if (py_index(as_int(key), off.size() - 1, &i))
          return r.make_str(obj.s->substr(off[i], off[i + 1] - off[i]));
      }
    }
  }
  if (key.is_str()) return Value::undefined(key.s);
  return Value::undefined();
}

// ---- argument binding ----------------------------------------------------------------------

namespace {

// Binds positional and keyword arguments to named parameters; a missing one is Undefined.
class Args {
 public:
  Args(const char* fn, std::initializer_list<const char*> names, const std::vector<Value>& pos,
       const KwArgs& kw)
      : names_(names) {
    if (pos.size() > names_.size())
      fail(std::string(fn) + "() takes at most " + std::to_string(names_.size()) + " arguments");
    v_.resize(names_.size());
    std::copy(pos.begin(), pos.end(), v_.begin());
    for (const auto& [k, x] : kw) {
      size_t i = 0;
      while (i < names_.size() && k != names_[i]) ++i;
      if (i == names_.size())
        fail(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
      v_[i] = x;
    }
  }
  const Value& operator[](size_t i) const { return v_[i]; }
  bool has(size_t i) const { return !v_[i].is_undefined(); }
  bool flag(size_t i, bool def = false) const { return has(i) ? truthy(v_[i]) : def; }
  int64_t integer(size_t i, int64_t def) const {
    if (!has(i) || v_[i].t == Value::T::kNone) return def;
    if (!int_like(v_[i])) fail("an integer argument is required");
    return as_int(v_[i]);
  }
  const std::string* str(size_t i, const char* what) const {
    if (!v_[i].is_str()) fail(std::string(what) + " must be a string");
    return v_[i].s;
  }

 private:
  std::vector<const char*> names_;
  std::vector<Value> v_;
};

const std::string& need_str(Renderer& r, const Value& v, std::string* tmp) {
  if (v.is_str()) return *v.s;
  *tmp = to_str(r, v);
  return *tmp;
}

// Attribute path as jinja2's map/selectattr/sort take it: "a.b.0".
Value attr_path(Renderer& r, const Value& v, const std::string& path) {
  Value cur = v;
  size_t i = 0;
  for (;;) {
    const size_t dot = path.find('.', i);
    const std::string part = path.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    int64_t idx;
    const auto res = std::from_chars(part.data(), part.data() + part.size(), idx);
    if (!part.empty() && res.ec == std::errc() && res.ptr == part.data() + part.size())
      cur = cur.is_undefined() ? cur : get_item(r, cur, Value::integer(idx));
    else
      cur = cur.is_undefined() ? cur : get_attr(r, cur, part);
    if (dot == std::string::npos) return cur;
    i = dot + 1;
  }
}

Value fold_case(Renderer& r, const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_str()) return v;
  return r.make_str(lower(*v.s));
}

std::string replace_all(Renderer& r, std::string_view s, std::string_view old_s,
                        std::string_view new_s, int64_t count) {
  Builder b{r, {}};
  if (count < 0) count = std::numeric_limits<int64_t>::max();
  if (old_s.empty()) {
    const std::vector<size_t> off = utf8_offsets(s);
    for (size_t k = 0; k + 1 < off.size(); ++k) {
      if (count > 0) {
        b.add(new_s);
        --count;
      }
      b.add(s.substr(off[k], off[k + 1] - off[k]));
    }
    if (count > 0) b.add(new_s);
    return std::move(b.s);
  }
  size_t i = 0;
  while (count > 0) {
    const size_t p = s.find(old_s, i);
    if (p == std::string_view::npos) break;
    b.add(s.substr(i, p - i));
    b.add(new_s);
    i = p + old_s.size();
    --count;
    r.step();
  }
  b.add(s.substr(i));
  return std::move(b.s);
}

// Python str.split / rsplit. sep null: runs of whitespace, no empty strings.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = std::numeric_limits<int64_t>::max();
  if (sep) {
    if (sep->empty()) fail("empty separator");
    if (!from_right) {
      size_t i = 0;
      while (maxsplit-- > 0) {
        const size_t p = s.find(*sep, i);
        if (p == std::string_view::npos) break;
        parts.emplace_back(s.substr(i, p - i));
        i = p + sep->size();
      }
      parts.emplace_back(s.substr(i));
    } else {
      size_t end = s.size();
      while (maxsplit-- > 0 && end >= sep->size()) {
        const size_t p = s.rfind(*sep, end - sep->size());
        if (p == std::string_view::npos) break;
        parts.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
        end = p;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace split over code points.
  std::vector<std::pair<size_t, size_t>> words;
  const std::vector<size_t> off = utf8_offsets(s);
  auto space_at = [&](size_t k) {
    size_t n;
    return is_py_space(decode_cp(s, off[k], &n));
  };
  const size_t ncp = off.size() - 1;
  if (!from_right) {
    size_t k = 0;
    while (k < ncp) {
      while (k < ncp && space_at(k)) ++k;
      if (k == ncp) break;
      if (maxsplit-- <= 0) {  // the rest, trailing whitespace included (as Python)
        words.emplace_back(off[k], off[ncp]);
        break;
      }
      size_t j = k;
      while (j < ncp && !space_at(j)) ++j;
      words.emplace_back(off[k], off[j]);
      k = j;
    }
  } else {
    size_t k = ncp;
    while (k > 0) {
      while (k > 0 && space_at(k - 1)) --k;
      if (k == 0) break;
      if (maxsplit-- <= 0) {  // the rest, leading whitespace included
        words.emplace_back(off[0], off[k]);
        break;
      }
      size_t j = k;
      while (j > 0 && !space_at(j - 1)) --j;
      words.emplace_back(off[j], off[k]);
      k = j;
    }
    std::reverse(words.begin(), words.end());
  }
  for (const auto& [a, b] : words) parts.emplace_back(s.substr(a, b - a));
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t i = 0, st = 0;
  while (i < s.size()) {
    const char c = s[i];
    size_t brk = 0;
    if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n')
      brk = 2;
    else if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e'))
      brk = 1;
    if (!brk) {
      ++i;
      continue;
    }
    out.emplace_back(s.substr(st, (keepends ? i + brk : i) - st));
    i += brk;
    st = i;
  }
  if (st < s.size()) out.emplace_back(s.substr(st));
  return out;
}

Value str_list(Renderer& r, const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(r.make_str(p));
  return Value::list(r.heap().list(std::move(items)));
}

// Python int(str) with base 10 (jinja2's int filter also accepts floats in strings).
bool parse_int(std::string_view s, int base, int64_t* out) {
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  size_t a = 0, b = t.size();
  while (a < b && is_py_space(static_cast<unsigned char>(t[a]))) ++a;
  while (b > a && is_py_space(static_cast<unsigned char>(t[b - 1]))) --b;
  t = t.substr(a, b - a);
  bool neg = false;
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  if (base == 16 && t.size() > i + 1 && t[i] == '0' && (t[i + 1] | 0x20) == 'x') i += 2;
  if (i >= t.size()) return false;
  uint64_t v;
  const auto r = std::from_chars(t.data() + i, t.data() + t.size(), v, base);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return false;
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

bool parse_float(std::string_view s, double* out) {
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  size_t a = 0, b = t.size();
  while (a < b && is_py_space(static_cast<unsigned char>(t[a]))) ++a;
  while (b > a && is_py_space(static_cast<unsigned char>(t[b - 1]))) --b;
  if (a < b && t[a] == '+') ++a;
  const auto r = std::from_chars(t.data() + a, t.data() + b, *out);
  return r.ec == std::errc() && r.ptr == t.data() + b && a < b;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python's round(x, n): the decimal nearest to x's exact binary value, ties to even (so
// round(2.675, 2) is 2.67). For n >= 0 printf's %.*f rounds exactly so in glibc; negative n
// (rare in templates) scales by a power of ten, which can differ from Python on ties.
double py_round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits >= 0) {
    if (ndigits > 330) return x;  // more digits than a double holds: x itself, as in Python
    char buf[720];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  const double p = std::pow(10.0, static_cast<double>(ndigits));
  const double y = x * p;
  if (!std::isfinite(p) || !std::isfinite(y) || p == 0) return x * 0.0;
  return std::nearbyint(y) / p;  // default rounding mode: half to even
}

// ---- filters -------------------------------------------------------------------------------

enum class F : uint8_t {
  kAbs,
  kAttr,
  kCapitalize,
  kCount,
  kD,
  kDefault,
  kDictsort,
  kE,
  kEscape,
  kFirst,
  kFloat,
  kIndent,
  kInt,
  kItems,
  kJoin,
  kLast,
  kLength,
  kList,
  kLower,
  kMap,
  kMax,
  kMin,
  kReject,
  kRejectattr,
  kReplace,
  kReverse,
  kRound,
  kSafe,
  kSelect,
  kSelectattr,
  kSort,
  kString,
  kSum,
  kTitle,
  kTojson,
  kTrim,
  kUnique,
  kUpper,
  kWordcount,
};
constexpr const char* kFilterNames[] = {
    "abs",     "attr",    "capitalize", "count",  "d",      "default",    "dictsort",  "e",
    "escape",  "first",   "float",      "indent", "int",    "items",      "join",      "last",
    "length",  "list",    "lower",      "map",    "max",    "min",        "reject",    "rejectattr",
    "replace", "reverse", "round",      "safe",   "select", "selectattr", "sort",      "string",
    "sum",     "title",   "tojson",     "trim",   "unique", "upper",      "wordcount",
};

enum class Ts : uint8_t {
  kBoolean,
  kCallable,
  kDefined,
  kDivisibleby,
  kEq,
  kEqualto,
  kEscaped,
  kEven,
  kFalse,
  kFloat,
  kGe,
  kGt,
  kGreaterthan,
  kIn,
  kInteger,
  kIterable,
  kLe,
  kLessthan,
  kLower,
  kLt,
  kMapping,
  kNe,
  kNone,
  kNumber,
  kOdd,
  kSameas,
  kSequence,
  kString,
  kTrue,
  kUndefined,
  kUpper,
  kOpEq,
  kOpNe,
  kOpLt,
  kOpLe,
  kOpGt,
  kOpGe,
};
constexpr const char* kTestNames[] = {
    "boolean", "callable",  "defined", "divisibleby", "eq",     "equalto",     "escaped",
    "even",    "false",     "float",   "ge",          "gt",     "greaterthan", "in",
    "integer", "iterable",  "le",      "lessthan",    "lower",  "lt",          "mapping",
    "ne",      "none",      "number",  "odd",         "sameas", "sequence",    "string",
    "true",    "undefined", "upper",   "==",          "!=",     "<",           "<=",
    ">",       ">=",
};

std::vector<Value> sorted_values(Renderer& r, std::vector<Value> items, bool reverse,
                                 bool case_sensitive, const std::string* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (const Value& v : items) {
    Value k = attribute ? attr_path(r, v, *attribute) : v;
    keyed.emplace_back(fold_case(r, k, case_sensitive), v);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(r, b.first, a.first) < 0 : compare(r, a.first, b.first) < 0;
  });
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}

// select/reject and their attr forms: `test_args` are [test name, args...] (may be empty).
Value select_items(Renderer& r, const Value& seq, const std::string* attribute,
                   const std::vector<Value>& test_args, bool keep_if) {
  int test = -1;
  std::vector<Value> targs;
  if (!test_args.empty()) {
    if (!test_args[0].is_str()) fail("select: the test name must be a string");
    test = find_test(*test_args[0].s);
    if (test < 0) fail("no test named '" + *test_args[0].s + "'");
    targs.assign(test_args.begin() + 1, test_args.end());
  }
  std::vector<Value> out;
  for (const Value& item : iterate(r, seq)) {
    r.step();
    const Value v = attribute ? attr_path(r, item, *attribute) : item;
    const bool ok = test < 0 ? truthy(v) : apply_test(r, test, v, targs);
    if (ok == keep_if) out.push_back(item);
  }
  return Value::list(r.heap().list(std::move(out)));
}

}  // namespace

int find_filter(std::string_view name) {
  for (size_t i = 0; i < std::size(kFilterNames); ++i)
    if (name == kFilterNames[i]) return static_cast<int>(i);
  return -1;
}

int find_test(std::string_view name) {
  for (size_t i = 0; i < std::size(kTestNames); ++i)
    if (name == kTestNames[i]) return static_cast<int>(i);
  return -1;
}

Value apply_filter(Renderer& r, int id, const Value& v, const std::vector<Value>& pos,
                   const KwArgs& kw) {
  using T = Value::T;
  const F f = static_cast<F>(id);
  const char* name = kFilterNames[id];
  std::string tmp;
  if (v.is_str()) r.step_bytes(v.s->size());
  switch (f) {
    case F::kAbs: {
      Args a(name, {}, pos, kw);
      if (v.t == T::kFloat) return Value::real(std::fabs(v.f));
      if (!int_like(v)) fail("bad operand type for abs(): '" + type_name(v) + "'");
      const int64_t x = as_int(v);
      if (x == std::numeric_limits<int64_t>::min()) fail("integer overflow");
      return Value::integer(x < 0 ? -x : x);
    }
    case F::kAttr: {
      Args a(name, {"name"}, pos, kw);
      return get_attr(r, v, *a.str(0, "attr name"));
    }
    case F::kCapitalize: {
      Args a(name, {}, pos, kw);
      return r.make_str(capitalize(need_str(r, v, &tmp)));
    }
    case F::kCount:
    case F::kLength: {
      Args a(name, {}, pos, kw);
      switch (v.t) {
        case T::kUndefined:
          return Value::integer(0);
        case T::kStr:
          return Value::integer(static_cast<int64_t>(utf8_length(*v.s)));
        case T::kList:
          return Value::integer(static_cast<int64_t>(v.l->items.size()));
        case T::kDict:
          if (v.d->kind == Dict::Kind::kPlain)
            return Value::integer(static_cast<int64_t>(v.d->items.size()));
          break;
        default:
          break;
      }
      fail("object of type '" + type_name(v) + "' has no len()");
    }
    case F::kD:
    case F::kDefault: {
      Args a(name, {"default_value", "boolean"}, pos, kw);
      const bool use = v.is_undefined() || (a.flag(1) && !truthy(v));
      if (!use) return v;
      return a.has(0) ? a[0] : r.make_str("");
    }
    case F::kDictsort: {
      Args a(name, {"case_sensitive", "by", "reverse"}, pos, kw);
      if (v.t != T::kDict || v.d->kind != Dict::Kind::kPlain) fail("dictsort needs a mapping");
      const bool by_value = a.has(1) && a[1].is_str() && *a[1].s == "value";
      std::vector<Value> pairs;
      for (const auto& [k, x] : v.d->items)
        pairs.push_back(Value::list(r.heap().list({Value::str(k), x}, true)));
      static const std::string k0 = "0", k1 = "1";
      return Value::list(
          r.heap().list(sorted_values(r, pairs, a.flag(2), a.flag(0), by_value ? &k1 : &k0)));
    }
    case F::kE:
    case F::kEscape: {
      Args a(name, {}, pos, kw);
      return r.make_str(html_escape(need_str(r, v, &tmp)));
    }
    case F::kFirst: {
      Args a(name, {}, pos, kw);
      if (v.t == T::kList) return v.l->items.empty() ? Value::undefined() : v.l->items.front();
      const std::vector<Value> items = iterate(r, v);
      return items.empty() ? Value::undefined() : items.front();
    }
    case F::kLast: {
      Args a(name, {}, pos, kw);
      if (v.t == T::kList) return v.l->items.empty() ? Value::undefined() : v.l->items.back();
      const std::vector<Value> items = iterate(r, v);
      return items.empty() ? Value::undefined() : items.back();
    }
    case F::kFloat: {
      Args a(name, {"default"}, pos, kw);
      const Value def = a.has(0) ? a[0] : Value::real(0);
      if (v.is_undefined()) fail_undefined(v);  // float(Undefined) raises in jinja2
      if (v.t == T::kFloat) return v;
      if (int_like(v)) return Value::real(static_cast<double>(as_int(v)));
      double d;
      if (v.is_str() && parse_float(*v.s, &d)) return Value::real(d);
      return def;
    }
    case F::kIndent: {
      Args a(name, {"width", "first", "blank"}, pos, kw);
      std::string ind = "    ";
      if (a.has(0))
        ind = a[0].is_str()
                  ? *a[0].s
                  : std::string(
                        static_cast<size_t>(std::clamp<int64_t>(a.integer(0, 4), 0, 1 << 20)), ' ');
      const std::string s = need_str(r, v, &tmp) + "\n";
      const std::vector<std::string> lines = py_splitlines(s, false);
      Builder b{r, {}};
      if (a.flag(2)) {
        for (size_t i = 0; i < lines.size(); ++i) {
          if (i) {
            b.add('\n');
            b.add(ind);
          }
          b.add(lines[i]);
        }
      } else {
        for (size_t i = 0; i < lines.size(); ++i) {
          if (i) {
            b.add('\n');
            if (!lines[i].empty()) b.add(ind);
          }
          b.add(lines[i]);
        }
      }
      if (a.flag(1)) return r.make_str(ind + b.s);
      return r.make_str(std::move(b.s));
    }
    case F::kInt: {
      Args a(name, {"default", "base"}, pos, kw);
      const Value def = a.has(0) ? a[0] : Value::integer(0);
      const int base = static_cast<int>(a.integer(1, 10));
      if (base < 2 || base > 36) fail("int() base must be >= 2 and <= 36");
      if (v.is_undefined()) fail_undefined(v);  // int(Undefined) raises in jinja2
      if (v.t == T::kInt) return v;
      if (v.t == T::kBool) return Value::integer(v.b);
      if (v.t == T::kFloat) {
        if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
        return Value::integer(static_cast<int64_t>(v.f));
      }
      if (v.is_str()) {
        int64_t i;
        if (parse_int(*v.s, base, &i)) return Value::integer(i);
        double d;
        if (base == 10 && parse_float(*v.s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
          return Value::integer(static_cast<int64_t>(d));
      }
      return def;
    }
    case F::kItems: {
      Args a(name, {}, pos, kw);
      if (v.is_undefined()) return Value::list(r.heap().list());
      if (v.t != T::kDict || v.d->kind != Dict::Kind::kPlain)
        fail("Can only get item pairs from a mapping.");
      std::vector<Value> pairs;
      pairs.reserve(v.d->items.size());
      for (const auto& [k, x] : v.d->items)
        pairs.push_back(Value::list(r.heap().list({Value::str(k), x}, true)));
      return Value::list(r.heap().list(std::move(pairs)));
    }
    case F::kJoin: {
      Args a(name, {"d", "attribute"}, pos, kw);
      const std::string sep = a.has(0) ? to_str(r, a[0]) : std::string();
      Builder b{r, {}};
      bool first = true;
      for (const Value& x : iterate(r, v)) {
        if (!first) b.add(sep);
        first = false;
        const Value item = a.has(1) ? attr_path(r, x, to_str(r, a[1])) : x;
        b.add(to_str(r, item));
      }
      return r.make_str(std::move(b.s));
    }
    case F::kList: {
      Args a(name, {}, pos, kw);
      return Value::list(r.heap().list(iterate(r, v)));
    }
    case F::kLower: {
      Args a(name, {}, pos, kw);
      return r.make_str(lower(need_str(r, v, &tmp)));
    }
    case F::kUpper: {
      Args a(name, {}, pos, kw);
      return r.make_str(upper(need_str(r, v, &tmp)));
    }
    case F::kTitle: {
      Args a(name, {}, pos, kw);
      return r.make_str(jinja_title(need_str(r, v, &tmp)));
    }
    case F::kMap: {
      std::vector<Value> out;
      const std::vector<Value> items = iterate(r, v);
      const Value* attribute = nullptr;
      const Value* def = nullptr;
      for (const auto& [k, x] : kw) {
        if (k == "attribute")
          attribute = &x;
        else if (k == "default")
          def = &x;
        else if (pos.empty())
          fail("map() got an unexpected keyword argument '" + k + "'");
      }
      if (attribute) {
        const std::string path = to_str(r, *attribute);
        for (const Value& x : items) {
          r.step();
          Value y = attr_path(r, x, path);
          if (y.is_undefined() && def) y = *def;
          out.push_back(y);
        }
      } else {
        if (pos.empty() || !pos[0].is_str()) fail("map() needs a filter name or attribute=");
        const int fid = find_filter(*pos[0].s);
        if (fid < 0) fail("no filter named '" + *pos[0].s + "'");
        const std::vector<Value> fargs(pos.begin() + 1, pos.end());
        KwArgs fkw;
        for (const auto& kv : kw) fkw.push_back(kv);
        for (const Value& x : items) {
          r.step();
          out.push_back(apply_filter(r, fid, x, fargs, fkw));
        }
      }
      return Value::list(r.heap().list(std::move(out)));
    }
    case F::kMax:
    case F::kMin: {
      Args a(name, {"case_sensitive", "attribute"}, pos, kw);
      const std::vector<Value> items = iterate(r, v);
      if (items.empty()) return Value::undefined();
      const std::string attr = a.has(1) ? to_str(r, a[1]) : std::string();
      auto key = [&](const Value& x) {
        return fold_case(r, a.has(1) ? attr_path(r, x, attr) : x, a.flag(0));
      };
      Value best = items[0];
      Value bk = key(best);
      for (size_t i = 1; i < items.size(); ++i) {
        const Value k = key(items[i]);
        const int c = compare(r, k, bk);
        if (f == F::kMax ? c > 0 : c < 0) {
          best = items[i];
          bk = k;
        }
      }
      return best;
    }
    case F::kReject:
    case F::kSelect:
      if (!kw.empty()) fail(std::string(name) + "() takes no keyword arguments");
      return select_items(r, v, nullptr, pos, f == F::kSelect);
    case F::kRejectattr:
    case F::kSelectattr: {
      if (!kw.empty()) fail(std::string(name) + "() takes no keyword arguments");
      if (pos.empty()) fail(std::string(name) + "() needs an attribute name");
      const std::string attr = to_str(r, pos[0]);
      const std::vector<Value> rest(pos.begin() + 1, pos.end());
      return select_items(r, v, &attr, rest, f == F::kSelectattr);
    }
    case F::kReplace: {
      Args a(name, {"old", "new", "count"}, pos, kw);
      const std::string o = to_str(r, a[0]), n = to_str(r, a[1]);
      return r.make_str(replace_all(r, need_str(r, v, &tmp), o, n, a.integer(2, -1)));
    }
    case F::kReverse: {
      Args a(name, {}, pos, kw);
      if (v.is_str()) {
        const std::vector<size_t> off = utf8_offsets(*v.s);
        std::string out;
        out.reserve(v.s->size());
        for (size_t k = off.size() - 1; k-- > 0;) out.append(*v.s, off[k], off[k + 1] - off[k]);
        return r.make_str(std::move(out));
      }
      std::vector<Value> items = iterate(r, v);
      std::reverse(items.begin(), items.end());
      return Value::list(r.heap().list(std::move(items)));
    }
    case F::kRound: {
      Args a(name, {"precision", "method"}, pos, kw);
      const int64_t prec = std::clamp<int64_t>(a.integer(0, 0), -400, 400);
      const std::string method = a.has(1) ? to_str(r, a[1]) : "common";
      if (!v.is_number()) fail("round needs a number");
      const double x = as_double(v);
      const double p = std::pow(10.0, static_cast<double>(prec));
      if (int_like(v) && prec >= 0) return Value::integer(as_int(v));  // round(int) is an int
      if (method == "common") return Value::real(py_round(x, prec));
      if (method == "ceil") return Value::real(std::ceil(x * p) / p);
      if (method == "floor") return Value::real(std::floor(x * p) / p);
      fail("method must be common, ceil or floor");
    }
    case F::kSafe: {
      Args a(name, {}, pos, kw);
      return v;
    }
    case F::kSort: {
      Args a(name, {"reverse", "case_sensitive", "attribute"}, pos, kw);
      const std::string attr = a.has(2) ? to_str(r, a[2]) : std::string();
      return Value::list(r.heap().list(
          sorted_values(r, iterate(r, v), a.flag(0), a.flag(1), a.has(2) ? &attr : nullptr)));
    }
    case F::kString: {
      Args a(name, {}, pos, kw);
      return v.is_str() ? v : r.make_str(to_str(r, v));
    }
    case F::kSum: {
      Args a(name, {"attribute", "start"}, pos, kw);
      Value acc = a.has(1) ? a[1] : Value::integer(0);
      const std::string attr = a.has(0) ? to_str(r, a[0]) : std::string();
      for (const Value& x : iterate(r, v)) {
        const Value y = a.has(0) ? attr_path(r, x, attr) : x;
        if (!acc.is_number() || !y.is_number())
          fail("unsupported operand type(s) for +: '" + type_name(acc) + "' and '" + type_name(y) +
               "'");
        if (int_like(acc) && int_like(y)) {
          int64_t s;
          if (__builtin_add_overflow(as_int(acc), as_int(y), &s)) fail("integer overflow");
          acc = Value::integer(s);
        } else {
          acc = Value::real(as_double(acc) + as_double(y));
        }
      }
      return acc;
    }
    case F::kTojson: {
      // HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
      Args a(name, {"ensure_ascii", "indent", "separators", "sort_keys"}, pos, kw);
      JsonStyle st;
      st.ensure_ascii = a.flag(0);
      st.sort_keys = a.flag(3);
      if (a.has(1) && a[1].t != T::kNone) {
        st.has_indent = true;
        st.item_sep = ",";
        if (a[1].is_str())
          st.indent = *a[1].s;
        else
          st.indent.assign(static_cast<size_t>(std::clamp<int64_t>(a.integer(1, 0), 0, 1 << 10)),
                           ' ');
      }
      if (a.has(2) && a[2].t != T::kNone) {
        if (a[2].t != T::kList || a[2].l->items.size() != 2 || !a[2].l->items[0].is_str() ||
            !a[2].l->items[1].is_str())
          fail("tojson separators must be a pair of strings");
        st.item_sep = *a[2].l->items[0].s;
        st.key_sep = *a[2].l->items[1].s;
      }
      return r.make_str(to_json(r, v, st));
    }
    case F::kTrim: {
      Args a(name, {"chars"}, pos, kw);
      return r.make_str(std::string(py_strip(r, need_str(r, v, &tmp), a[0], true, true)));
    }
    case F::kUnique: {
      Args a(name, {"case_sensitive", "attribute"}, pos, kw);
      const std::string attr = a.has(1) ? to_str(r, a[1]) : std::string();
      std::vector<Value> out, keys;
      for (const Value& x : iterate(r, v)) {
        const Value k = fold_case(r, a.has(1) ? attr_path(r, x, attr) : x, a.flag(0));
        bool seen = false;
        for (const Value& s : keys)
          if (equal(r, s, k)) {
            seen = true;
            break;
          }
        if (!seen) {
          keys.push_back(k);
          out.push_back(x);
        }
      }
      return Value::list(r.heap().list(std::move(out)));
    }
    case F::kWordcount: {
      Args a(name, {}, pos, kw);
      const std::string& s = need_str(r, v, &tmp);
      int64_t n = 0;
      bool in_word = false;
      for (size_t i = 0; i < s.size();) {
        size_t len;
        const int32_t cp = decode_cp(s, i, &len);
        const bool w = cp == '_' || is_alpha(cp) || is_num(cp);
        if (w && !in_word) ++n;
        in_word = w;
        i += len;
      }
      return Value::integer(n);
    }
  }
  fail(std::string("filter '") + name + "' is not implemented");
}

bool apply_test(Renderer& r, int id, const Value& v, const std::vector<Value>& args) {
  using T = Value::T;
  const Ts t = static_cast<Ts>(id);
  auto arg = [&](size_t i) -> const Value& {
    if (args.size() <= i) fail(std::string("test '") + kTestNames[id] + "' needs an argument");
    return args[i];
  };
  switch (t) {
    case Ts::kBoolean:
      return v.t == T::kBool;
    case Ts::kCallable:
      return v.t == T::kMacro || v.t == T::kFunc || v.is_undefined();
    case Ts::kDefined:
      return !v.is_undefined();
    case Ts::kUndefined:
      return v.is_undefined();
    case Ts::kDivisibleby: {
      const Value& d = arg(0);
      if (!int_like(v) || !int_like(d)) fail("divisibleby needs integers");
      if (as_int(d) == 0) fail("integer division or modulo by zero");
      if (as_int(d) == -1) return true;
      return as_int(v) % as_int(d) == 0;
    }
    case Ts::kEq:
    case Ts::kEqualto:
    case Ts::kOpEq:
      return equal(r, v, arg(0));
    case Ts::kNe:
    case Ts::kOpNe:
      return !equal(r, v, arg(0));
    case Ts::kLt:
    case Ts::kLessthan:
    case Ts::kOpLt:
      return compare(r, v, arg(0)) < 0;
    case Ts::kLe:
    case Ts::kOpLe:
      return compare(r, v, arg(0)) <= 0;
    case Ts::kGt:
    case Ts::kGreaterthan:
    case Ts::kOpGt:
      return compare(r, v, arg(0)) > 0;
    case Ts::kGe:
    case Ts::kOpGe:
      return compare(r, v, arg(0)) >= 0;
    case Ts::kEscaped:
      return false;
    case Ts::kEven:
    case Ts::kOdd: {
      if (!v.is_number()) fail("even/odd needs a number");
      const double m = int_like(v) ? static_cast<double>(as_int(v) % 2) : std::fmod(v.f, 2.0);
      return t == Ts::kEven ? m == 0 : (m == 1 || m == -1);
    }
    case Ts::kFalse:
      return v.t == T::kBool && !v.b;
    case Ts::kTrue:
      return v.t == T::kBool && v.b;
    case Ts::kFloat:
      return v.t == T::kFloat;
    case Ts::kInteger:
      return v.t == T::kInt;
    case Ts::kNumber:
      return v.is_number();
    case Ts::kNone:
      return v.t == T::kNone;
    case Ts::kString:
      return v.is_str();
    case Ts::kMapping:
      return v.t == T::kDict && v.d->kind == Dict::Kind::kPlain;
    case Ts::kIterable:
    case Ts::kSequence:
      return v.is_undefined() || v.is_str() || v.t == T::kList ||
             (v.t == T::kDict && v.d->kind == Dict::Kind::kPlain);
    case Ts::kIn: {
      const Value& c = arg(0);
      if (c.is_str()) {
        if (!v.is_str()) fail("'in <string>' requires string as left operand");
        r.step_bytes(c.s->size());
        return c.s->find(*v.s) != std::string::npos;
      }
      if (c.t == T::kDict) return v.is_str() && c.d->find(*v.s) != nullptr;
      for (const Value& x : iterate(r, c))
        if (equal(r, x, v)) return true;
      return false;
    }
    case Ts::kSameas: {
      const Value& o = arg(0);
      if (v.t != o.t) return false;
      switch (v.t) {
        case T::kUndefined:
        case T::kNone:
          return true;
        case T::kBool:
          return v.b == o.b;
        case T::kInt:
          return v.i == o.i;
        case T::kFloat:
          return false;
        case T::kStr:
          return v.s == o.s;
        case T::kList:
          return v.l == o.l;
        case T::kDict:
          return v.d == o.d;
        case T::kMacro:
          return v.m == o.m;
        case T::kFunc:
          return v.fn == o.fn;
      }
      return false;
    }
    case Ts::kLower:
    case Ts::kUpper: {  // str(v).islower() / isupper()
      const std::string s = to_str(r, v);
      bool any_cased = false;
      for (size_t i = 0; i < s.size();) {
        size_t len;
        const int32_t cp = decode_cp(s, i, &len);
        if (is_cased(cp)) {
          any_cased = true;
          if (t == Ts::kLower ? utf8proc_tolower(cp) != cp : utf8proc_toupper(cp) != cp)
            return false;
        }
        i += len;
      }
      return any_cased;
    }
  }
  return false;
}

// ---- methods and global functions ------------------------------------------------------------

Value call_method(Renderer& r, const Value& obj, const std::string& name,
                  const std::vector<Value>& pos, const KwArgs& kw, bool* handled) {
  using T = Value::T;
  *handled = true;
  const char* n = name.c_str();
  if (obj.is_str()) {
    const std::string& s = *obj.s;
    r.step_bytes(s.size());
    if (name == "startswith" || name == "endswith") {
      Args a(n, {"prefix", "start", "end"}, pos, kw);
      if (a.has(1) || a.has(2)) fail(name + ": start/end arguments are not supported");
      std::vector<Value> cands;
      if (a[0].is_str())
        cands.push_back(a[0]);
      else if (a[0].t == T::kList)
        cands = a[0].l->items;
      else
        fail(name + " first arg must be str or a tuple of str");
      for (const Value& c : cands) {
        if (!c.is_str()) fail(name + " first arg must be str or a tuple of str");
        const std::string& p = *c.s;
        if (p.size() > s.size()) continue;
        if (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                 : s.compare(s.size() - p.size(), p.size(), p) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      Args a(n, {"chars"}, pos, kw);
      return r.make_str(std::string(py_strip(r, s, a[0], name != "rstrip", name != "lstrip")));
    }
    if (name == "split" || name == "rsplit") {
      Args a(n, {"sep", "maxsplit"}, pos, kw);
      const std::string* sep = nullptr;
      if (a.has(0) && a[0].t != T::kNone) sep = a.str(0, "sep");
      return str_list(r, py_split(s, sep, a.integer(1, -1), name == "rsplit"));
    }
    if (name == "splitlines") {
      Args a(n, {"keepends"}, pos, kw);
      return str_list(r, py_splitlines(s, a.flag(0)));
    }
    if (name == "replace") {
      Args a(n, {"old", "new", "count"}, pos, kw);
      return r.make_str(replace_all(r, s, *a.str(0, "old"), *a.str(1, "new"), a.integer(2, -1)));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      Args a(n, {}, pos, kw);
      if (name == "upper") return r.make_str(upper(s));
      if (name == "lower") return r.make_str(lower(s));
      if (name == "title") return r.make_str(py_title(s));
      return r.make_str(capitalize(s));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
      Args a(n, {"sub"}, pos, kw);
      const std::string& sub = *a.str(0, "sub");
      const size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
    }
    if (name == "count") {
      Args a(n, {"sub"}, pos, kw);
      const std::string& sub = *a.str(0, "sub");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s) + 1));
      int64_t c = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
      return Value::integer(c);
    }
    if (name == "join") {
      Args a(n, {"iterable"}, pos, kw);
      Builder b{r, {}};
      bool first = true;
      for (const Value& x : iterate(r, a[0])) {
        if (!x.is_str()) fail("sequence item: expected str instance, " + type_name(x) + " found");
        if (!first) b.add(s);
        first = false;
        b.add(*x.s);
      }
      return r.make_str(std::move(b.s));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
        name == "isupper" || name == "islower") {
      Args a(n, {}, pos, kw);
      if (s.empty()) return Value::boolean(false);
      if (name == "isupper" || name == "islower") {
        bool any_cased = false;
        for (size_t i = 0; i < s.size();) {
          size_t len;
          const int32_t cp = decode_cp(s, i, &len);
          if (is_cased(cp)) {
            any_cased = true;
            if (name == "isupper" ? utf8proc_toupper(cp) != cp : utf8proc_tolower(cp) != cp)
              return Value::boolean(false);
          }
          i += len;
        }
        return Value::boolean(any_cased);
      }
      for (size_t i = 0; i < s.size();) {
        size_t len;
        const int32_t cp = decode_cp(s, i, &len);
        bool ok;
        if (name == "isdigit")
          ok = cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_ND;
        else if (name == "isalpha")
          ok = is_alpha(cp);
        else if (name == "isalnum")
          ok = is_alpha(cp) || is_num(cp);
        else
          ok = cp >= 0 && is_py_space(cp);
        if (!ok) return Value::boolean(false);
        i += len;
      }
      return Value::boolean(true);
    }
  } else if (obj.t == T::kDict && obj.d->kind == Dict::Kind::kPlain) {
    const Dict& d = *obj.d;
    if (name == "items" || name == "keys" || name == "values") {
      Args a(n, {}, pos, kw);
      std::vector<Value> out;
      out.reserve(d.items.size());
      for (const auto& [k, x] : d.items) {
        if (name == "keys")
          out.push_back(Value::str(k));
        else if (name == "values")
          out.push_back(x);
        else
          out.push_back(Value::list(r.heap().list({Value::str(k), x}, true)));
      }
      return Value::list(r.heap().list(std::move(out)));
    }
    if (name == "get") {
      Args a(n, {"key", "default"}, pos, kw);
      if (a[0].is_str())
        if (const Value* x = d.find(*a[0].s)) return *x;
      return a.has(1) ? a[1] : Value::none();
    }
  } else if (obj.t == T::kDict && obj.d->kind == Dict::Kind::kLoop) {
    if (name == "cycle") {
      if (pos.empty()) fail("no items for cycling given");
      const Value* i0 = obj.d->find("index0");
      return pos[static_cast<size_t>(i0 ? i0->i : 0) % pos.size()];
    }
  } else if (obj.t == T::kList) {
    if (name == "index" || name == "count") {
      Args a(n, {"value"}, pos, kw);
      int64_t c = 0;
      for (size_t i = 0; i < obj.l->items.size(); ++i) {
        if (equal(r, obj.l->items[i], a[0])) {
          if (name == "index") return Value::integer(static_cast<int64_t>(i));
          ++c;
        }
      }
      if (name == "index") fail("value is not in list");
      return Value::integer(c);
    }
    if (name == "append" || name == "extend" || name == "pop" || name == "insert" ||
        name == "remove" || name == "clear" || name == "sort" || name == "reverse")
      fail("lists cannot be modified in a chat template (list." + name + ")");
  }
  *handled = false;
  return Value::undefined();
}

bool find_builtin(std::string_view name, Builtin* out) {
  if (name == "range")
    *out = Builtin::kRange;
  else if (name == "namespace")
    *out = Builtin::kNamespace;
  else if (name == "raise_exception")
    *out = Builtin::kRaiseException;
  else if (name == "strftime_now")
    *out = Builtin::kStrftimeNow;
  else if (name == "dict")
    *out = Builtin::kDict;
  else
    return false;
  return true;
}

Value call_builtin(Renderer& r, Builtin fn, const std::vector<Value>& pos, const KwArgs& kw) {
  switch (fn) {
    case Builtin::kRange: {
      if (!kw.empty() || pos.empty() || pos.size() > 3) fail("range() takes 1 to 3 arguments");
      for (const Value& p : pos)
        if (!int_like(p)) fail("range() arguments must be integers");
      int64_t start = 0, stop, step = 1;
      if (pos.size() == 1) {
        stop = as_int(pos[0]);
      } else {
        start = as_int(pos[0]);
        stop = as_int(pos[1]);
        if (pos.size() == 3) step = as_int(pos[2]);
      }
      if (step == 0) fail("range() arg 3 must not be zero");
      const __int128 span =
          step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
      const __int128 as = step > 0 ? step : -static_cast<__int128>(step);
      const __int128 count = span <= 0 ? 0 : (span + as - 1) / as;
      if (count > r.heap().limits().max_loop_iterations)
        fail("range() of " +
             std::to_string(static_cast<int64_t>(std::min<__int128>(count, INT64_MAX))) +
             " items exceeds the loop limit");
      std::vector<Value> items;
      items.reserve(static_cast<size_t>(count));
      for (__int128 k = 0; k < count; ++k)
        items.push_back(Value::integer(static_cast<int64_t>(start + k * step)));
      r.step(static_cast<int64_t>(count));
      return Value::list(r.heap().list(std::move(items)));
    }
    case Builtin::kNamespace:
    case Builtin::kDict: {
      Dict* d =
          r.heap().dict(fn == Builtin::kNamespace ? Dict::Kind::kNamespace : Dict::Kind::kPlain);
      for (const Value& p : pos) {
        if (p.t != Value::T::kDict || p.d->kind != Dict::Kind::kPlain)
          fail("namespace()/dict() positional arguments must be mappings");
        for (const auto& [k, x] : p.d->items) d->set(k, x);
      }
      for (const auto& [k, x] : kw) d->set(r.heap().str(k), x);
      r.heap().charge(d->items.size() * sizeof(d->items[0]));
      return Value::dict(d);
    }
    case Builtin::kRaiseException: {
      const std::string msg = pos.empty() ? std::string() : to_str(r, pos[0]);
      fail("raise_exception: " + msg);
    }
    case Builtin::kStrftimeNow: {
      if (pos.size() != 1 || !pos[0].is_str()) fail("strftime_now() takes one format string");
      const std::string& fmt = *pos[0].s;
      if (fmt.size() > 256) fail("strftime_now() format too long");
      std::tm tm{};
      if (r.options().now) {
        tm = *r.options().now;
      } else {
        const std::time_t now = std::time(nullptr);
        localtime_r(&now, &tm);
      }
      char buf[4096];
      const size_t len = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      return r.make_str(std::string(buf, len));
    }
  }
  fail("unknown builtin");
}

}  // namespace rw::jinja
