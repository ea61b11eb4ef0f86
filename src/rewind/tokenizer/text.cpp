#include "rewind/tokenizer/text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>

namespace rw::text {

Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + i;
  const size_t avail = s.size() - i;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= avail) return {Utf8Step::kTruncated, k, 0};
    const uint8_t b = p[k];
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Step::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, need + 1, cp};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

struct ByteMap {
  std::array<char32_t, 256> cp{};
  std::array<std::string, 256> utf8;
  ByteMap() {
    // GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
    // U+0100.. in byte order.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(utf8[b], cp[b]);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Inverse map over the code points 0..0x143 (the largest is 256 + 67).
int codepoint_to_byte(char32_t cp) {
  static const auto inv = [] {
    std::array<int16_t, 324> a;
    a.fill(-1);
    for (int b = 0; b < 256; ++b) a[byte_map().cp[b]] = static_cast<int16_t>(b);
    return a;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

}  // namespace

char32_t byte_to_codepoint(uint8_t b) {
  return byte_map().cp[b];
}
const std::string& byte_to_utf8(uint8_t b) {
  return byte_map().utf8[b];
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_map().utf8[static_cast<uint8_t>(c)];
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  out.clear();
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = utf8_step(text, i);
    if (st.kind != Utf8Step::kValid) return false;
    const int b = codepoint_to_byte(st.cp);
    if (b < 0) return false;
    out += static_cast<char>(b);
    i += st.len;
  }
  return true;
}

namespace {

void append_nfc(std::string& out, std::string_view valid) {
  bool ascii = true;
  for (char c : valid) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) {  // ASCII is already NFC
    out += valid;
    return;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  if (n < 0) {
    out += valid;  // cannot happen for valid UTF-8; keep the text rather than lose it
  } else {
    out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  }
  std::free(dst);
}

}  // namespace

std::string nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t run = 0, i = 0;
  while (i < s.size()) {
    const Utf8Step st = utf8_step(s, i);
    if (st.kind == Utf8Step::kValid) {
      i += st.len;
      continue;
    }
    append_nfc(out, s.substr(run, i - run));
    out.append(s.substr(i, st.len));
    i += st.len;
    run = i;
  }
  append_nfc(out, s.substr(run));
  return out;
}

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  if (cp > 0x10FFFF) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// ---- regex -----------------------------------------------------------------------------

namespace {
// Oniguruma's \s set spelled out (PCRE2's UCP \s also has U+180E).
constexpr std::string_view kOnigSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr std::string_view kOnigWord = R"(\p{L}\p{M}\p{N}\p{Pc})";
constexpr std::string_view kOnigHex = "0-9a-fA-F";
}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      std::string_view set;
      bool negated = false;
      switch (e) {
        case 's':
          set = kOnigSpace;
          break;
        case 'S':
          set = kOnigSpace, negated = true;
          break;
        case 'w':
          set = kOnigWord;
          break;
        case 'W':
          set = kOnigWord, negated = true;
          break;
        case 'h':
          set = kOnigHex;
          break;
        case 'H':
          set = kOnigHex, negated = true;
          break;
        default:
          break;
      }
      if (set.empty() || (in_class && negated)) {
        // A negated shorthand inside a class cannot be spelled as a set: keep PCRE2's own,
        // except \S, which differs from Oniguruma only by U+180E.
        out += '\\';
        out += e;
        if (in_class && e == 'S') out += R"(\x{180E})";
        continue;
      }
      if (in_class) {
        out += set;
      } else {
        out += negated ? "[^" : "[";
        out += set;
        out += ']';
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:name:]
        const size_t end = p.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out += p.substr(i, end + 2 - i);
          i = end + 1;
          continue;
        }
      }
      if (c == ']' && i != class_start) in_class = false;
    }
    out += c;
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  const std::string pat = literal ? std::string(pattern) : onig_to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  opts |= literal ? PCRE2_LITERAL : PCRE2_UCP;  // LITERAL forbids UCP (meaningless there)
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), opts, &err,
                                   &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    return make_error("invalid regex '" + std::string(pattern) + "': " +
                      reinterpret_cast<const char*>(buf) + " at offset " + std::to_string(err_off));
  }
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.code_ = std::move(c);
  return r;
}

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  REWIND_CHECK(md != nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  // The iteration of the Rust `onig` crate (used by HF tokenizers): an empty match right at the
  // end of the previous match is skipped and the search restarts one character later.
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= s.size()) {
    int rc = pcre2_match(code_->code, subject, s.size(), last_end, 0, md, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && code_->jit) {
      // JIT stack exhausted on a pathological input: the interpreter keeps its frames on the
      // heap.
      rc = pcre2_match(code_->code, subject, s.size(), last_end, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;  // no match (or a resource limit): the rest is one unmatched gap
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_match_end == e) {
      if (last_end >= s.size()) break;
      last_end += utf8_step(s, last_end).len;
      continue;
    }
    out.emplace_back(b, e);
    last_end = e;
    have_last = true;
    last_match_end = e;
  }
  pcre2_match_data_free(md);
}

}  // namespace rw::text
