// The web page `rewind serve` answers at / (chat and the cache view): the built bundle in
// web/dist, compiled into the binary so the server needs no files and no network at run time.
// CMake generates the table (cmake/embed_web.cmake) from the committed web/dist; npm is needed
// only to rebuild that bundle from web/src (docs/ARCHITECTURE.md, "Web page").
#pragma once

#include <string_view>

namespace rw {

struct WebAsset {
  std::string_view path;          // "/" for the page, "/assets/..." for the rest
  std::string_view content_type;  // with charset for text
  std::string_view body;
  std::string_view etag;  // a strong validator: "\"<16 hex digits of SHA-256>\""
};

// The asset served at `path`, or nullptr. Thread-safe (constant data).
const WebAsset* find_web_asset(std::string_view path);

}  // namespace rw
