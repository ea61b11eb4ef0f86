// The server's access log: one line per HTTP request, written when its answer is complete (a
// stream: after its last event), as text (`key=value` fields after the time) or as one JSON
// object a line. docs/ARCHITECTURE.md ("Access log") lists the fields.
//
// Thread-safety: write() may be called from every HTTP thread at once (one mutex; a line is
// written and flushed whole, so lines never interleave).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "rewind/base/result.h"

namespace rw {

enum class AccessLogFormat { Text, Json };
// "text" or "json"; false for anything else.
bool parse_access_log_format(const std::string& name, AccessLogFormat* out);

struct AccessRecord {
  double unix_time = 0;  // when the answer completed (seconds since the epoch)
  std::string id;        // chatcmpl-... / cmpl-... for generations, req-... for the rest
  std::string client;    // the peer's address ("-" when unknown)
  std::string method;    // "-" when no request line was read
  std::string path;      // "-" likewise
  int status = 0;        // the HTTP status; 499 when the client went away first
  std::string model;     // the request's "model" field ("" when none)
  bool stream = false;
  // Generation requests only (unset for the rest):
  std::optional<int64_t> prompt_tokens, cached_tokens, rerun_tokens, completion_tokens;
  std::optional<double> ttft_ms;
  std::optional<double> total_ms;  // from the complete request to the end of its answer
  std::string finish;              // stop, length, tool_calls, cancelled, failed ("" when none)
};

// One line (no newline) in `format`.
std::string format_access_record(const AccessRecord& r, AccessLogFormat format);

class AccessLog {
 public:
  // Appends to `path` ("" or "-": stderr). Error when the file cannot be opened.
  static Result<std::unique_ptr<AccessLog>> open(const std::string& path, AccessLogFormat format);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  void write(const AccessRecord& r);

 private:
  AccessLog(FILE* f, bool owned, AccessLogFormat format) : f_(f), owned_(owned), format_(format) {}
  std::mutex mu_;
  FILE* f_;
  bool owned_;
  AccessLogFormat format_;
};

}  // namespace rw
