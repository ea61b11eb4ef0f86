// http_framing.h: request framing decided around Beast's parser.
#include "rewind/server/http_framing.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace rw::http_framing {

namespace {
bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
bool digit(char c) {
  return c >= '0' && c <= '9';
}
}  // namespace

size_t leading_empty_lines(std::string_view s) {
  size_t n = 0;
  while (true) {
    if (n < s.size() && s[n] == '\n') {
      n += 1;
    } else if (n + 1 < s.size() && s[n] == '\r' && s[n + 1] == '\n') {
      n += 2;
    } else {
      return n;
    }
  }
}

int request_line_version(std::string_view s, size_t* minor_at) {
  // The line's end: before its CR LF or LF, or, not yet ended, before a CR whose LF is to come.
  const size_t eol = std::min(s.find('\n'), s.size());
  const size_t end = eol > 0 && s[eol - 1] == '\r' ? eol - 1 : eol;
  if (end < 9) return -1;
  const size_t sp = s.rfind(' ', end - 1);
  if (sp == std::string_view::npos || end - sp != 9 || s.substr(sp + 1, 5) != "HTTP/" ||
      !digit(s[sp + 6]) || s[sp + 7] != '.' || !digit(s[sp + 8]))
    return -1;
  if (minor_at) *minor_at = sp + 8;
  return 10 * (s[sp + 6] - '0') + (s[sp + 8] - '0');
}

TransferEncoding check_transfer_encoding(std::string_view value) {
  // The list's elements, trimmed; empty ones are ignored (RFC 9110 5.6.1).
  std::vector<std::string_view> codings;
  for (size_t at = 0; at <= value.size();) {
    const size_t next = std::min(value.find(',', at), value.size());
    if (const std::string_view c = trim(value.substr(at, next - at)); !c.empty())
      codings.push_back(c);
    at = next + 1;
  }
  if (codings.empty() || !iequal(codings.back(), "chunked"))
    return {400, "unsupported Transfer-Encoding (the last coding must be chunked)"};
  if (codings.size() == 1) return {};
  for (size_t i = 0; i + 1 < codings.size(); ++i)
    if (iequal(codings[i], "chunked"))
      return {400, "the chunked transfer coding is applied more than once"};
  return {501, "only the chunked transfer coding is supported (got '" + std::string(value) + "')"};
}

std::string origin_form(std::string_view target) {
  const size_t scheme = target.find("://");
  if (scheme == std::string_view::npos || target.empty() || target[0] == '/' ||
      !(iequal(target.substr(0, scheme), "http") || iequal(target.substr(0, scheme), "https")))
    return std::string(target);
  const size_t slash = target.find_first_of("/?", scheme + 3);
  std::string out = slash == std::string_view::npos || target[slash] == '?' ? "/" : "";
  if (slash != std::string_view::npos) out.append(target.substr(slash));
  return out;
}

namespace {
bool hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool reg_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-._~!$&'()*+,;=").find(c) != std::string_view::npos;
}
}  // namespace

bool valid_host(std::string_view v) {
  v = trim(v);
  size_t i = 0;
  if (!v.empty() && v[0] == '[') {  // IP-literal: IPv6 or IPvFuture, checked loosely
    const size_t close = v.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (size_t k = 1; k < close; ++k)
      if (v[k] != ':' && v[k] != '%' && !reg_name_char(v[k])) return false;
    i = close + 1;
  } else {
    while (i < v.size() && v[i] != ':') {
      if (v[i] == '%') {
        if (i + 2 >= v.size() || !hex(v[i + 1]) || !hex(v[i + 2])) return false;
        i += 3;
        continue;
      }
      if (!reg_name_char(v[i])) return false;
      ++i;
    }
  }
  if (i == v.size()) return true;
  if (v[i] != ':') return false;
  for (size_t k = i + 1; k < v.size(); ++k)
    if (!digit(v[k])) return false;
  return true;
}

bool method_too_long(std::string_view s) {
  const size_t n = std::min(s.size(), kMaxMethodBytes + 1);
  return s.size() > kMaxMethodBytes && s.substr(0, n).find(' ') == std::string_view::npos;
}

}  // namespace rw::http_framing
