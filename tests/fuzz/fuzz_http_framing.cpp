// libFuzzer target for the request framing around Beast's parser (server/http_framing.h): any
// bytes; what each function reports must hold of the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "rewind/server/http_framing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace hf = rw::http_framing;
  const std::string_view s(reinterpret_cast<const char*>(data), size);

  // Empty lines: exactly a run of LF and CR LF, and all of it.
  const size_t n = hf::leading_empty_lines(s);
  if (n > s.size()) std::abort();
  for (size_t i = 0; i < n; i += s[i] == '\n' ? 1 : 2)
    if (s[i] != '\n' && !(s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')) std::abort();
  if (n < s.size() && (s[n] == '\n' || s.substr(n, 2) == "\r\n")) std::abort();

  // The version: the minor digit of "HTTP/d.d" that ends the first line (or what has come).
  size_t at = 0;
  const int v = hf::request_line_version(s, &at);
  if (v >= 0) {
    if (at < 8 || at >= s.size() || s[at] < '0' || s[at] > '9' || v % 10 != s[at] - '0' || v > 99 ||
        s[at - 1] != '.' || s.substr(at - 8, 5) != " HTTP" || s.find('\n') < at)
      std::abort();
    const std::string_view after = s.substr(at + 1);
    if (!(after.empty() || after == "\r" || after[0] == '\n' || after.substr(0, 2) == "\r\n"))
      std::abort();
  }

  // Transfer-Encoding: accepted only for one chunked among blanks and commas.
  const hf::TransferEncoding te = hf::check_transfer_encoding(s);
  if (te.status != 0 && te.status != 400 && te.status != 501) std::abort();
  if (te.status != 0 && te.message.empty()) std::abort();
  if (te.status == 0) {
    std::string rest;
    for (char c : s)
      if (c != ' ' && c != '\t' && c != ',')
        rest += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    if (rest != "chunked") std::abort();
  }

  // The origin form: the target, or a tail of it (with "/" before a query or for none).
  const std::string o = hf::origin_form(s);
  if (o != s) {
    if (o.empty() || o[0] != '/' || s.find("://") == std::string_view::npos) std::abort();
    const std::string_view tail = o == "/" ? std::string_view() : std::string_view(o);
    const bool is_tail = s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
    const bool slash_tail = o.size() > 1 && o[1] == '?' && s.size() >= o.size() - 1 &&
                            s.substr(s.size() - (o.size() - 1)) == o.substr(1);
    if (!is_tail && !slash_tail) std::abort();
  }

  // A valid Host holds no byte a URI authority cannot (controls, space inside, / ? # @ " \).
  if (hf::valid_host(s)) {
    std::string_view t = s;
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    for (char c : t)
      if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f ||
          std::string_view("/?#@\"\\<>^`{|}").find(c) != std::string_view::npos)
        std::abort();
  }
  // A method too long: the verdict holds for any continuation of the bytes, and no prefix of
  // kMaxMethodBytes bytes or fewer gets it.
  if (hf::method_too_long(s)) {
    if (!hf::method_too_long(std::string(s) + " / HTTP/1.1\r\n") ||
        hf::method_too_long(s.substr(0, hf::kMaxMethodBytes)))
      std::abort();
  }
  return 0;
}
