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

  const size_t n = hf::leading_empty_lines(s);
  if (n > s.size()) std::abort();
  for (size_t i = 0; i < n; ++i)
    if (s[i] != '\r' && s[i] != '\n') std::abort();
  if (n > 0 && s[n - 1] != '\n') std::abort();

  size_t at = 0;
  const int v = hf::request_line_version(s, &at);
  if (v >= 0) {
    if (at >= s.size() || s[at] < '0' || s[at] > '9' || v % 10 != s[at] - '0' || v > 99)
      std::abort();
    if (s.substr(at - 3, 3).compare(0, 1, "/") != 0 || s.find('\n') < at) std::abort();
  }

  const hf::TransferEncoding te = hf::check_transfer_encoding(s);
  if (te.status != 0 && te.status != 400 && te.status != 501) std::abort();
  if (te.status != 0 && te.message.empty()) std::abort();

  const std::string o = hf::origin_form(s);
  if (o != s && (o.empty() || o[0] != '/' || s.find("://") == std::string_view::npos)) std::abort();
  return 0;
}
