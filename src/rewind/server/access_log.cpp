#include "rewind/server/access_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

namespace rw {

namespace {

// ISO 8601 UTC with milliseconds: 2025-01-31T12:34:56.789Z.
std::string iso_time(double unix_time) {
  const auto secs = static_cast<std::time_t>(std::floor(unix_time));
  int ms = static_cast<int>(std::lround((unix_time - static_cast<double>(secs)) * 1000.0));
  if (ms > 999) ms = 999;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the format could print (the compiler checks it)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

// A JSON string literal; invalid UTF-8 (a hostile path) becomes U+FFFD instead of throwing.
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string num(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "-";
}
std::string ms(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", *v);
  return buf;
}
// A value that is one token with no spaces or quotes stays bare; anything else is quoted.
std::string word(const std::string& s) {
  if (s.empty()) return "-";
  for (char c : s)
    if (c <= ' ' || c == '"' || c == '\\' || static_cast<unsigned char>(c) >= 0x7f)
      return quoted(s);
  return s;
}

}  // namespace

bool parse_access_log_format(const std::string& name, AccessLogFormat* out) {
  if (name == "text") {
    *out = AccessLogFormat::Text;
  } else if (name == "json") {
    *out = AccessLogFormat::Json;
  } else {
    return false;
  }
  return true;
}

std::string format_access_record(const AccessRecord& r, AccessLogFormat format) {
  if (format == AccessLogFormat::Json) {
    using nlohmann::json;
    auto opt_int = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); };
    auto opt_ms = [](const std::optional<double>& v) {
      return v ? json(std::round(*v * 1000.0) / 1000.0) : json(nullptr);
    };
    json j = {{"time", iso_time(r.unix_time)},
              {"id", r.id},
              {"client", r.client},
              {"method", r.method},
              {"path", r.path},
              {"status", r.status},
              {"model", r.model.empty() ? json(nullptr) : json(r.model)},
              {"stream", r.stream},
              {"prompt_tokens", opt_int(r.prompt_tokens)},
              {"cached_tokens", opt_int(r.cached_tokens)},
              {"rerun_tokens", opt_int(r.rerun_tokens)},
              {"completion_tokens", opt_int(r.completion_tokens)},
              {"ttft_ms", opt_ms(r.ttft_ms)},
              {"total_ms", opt_ms(r.total_ms)},
              {"finish_reason", r.finish.empty() ? json(nullptr) : json(r.finish)}};
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return iso_time(r.unix_time) + " " + word(r.id) + " " + word(r.client) + " " +
         quoted(r.method + " " + r.path) + " " + std::to_string(r.status) +
         " model=" + word(r.model) + " stream=" + (r.stream ? "1" : "0") +
         " prompt=" + num(r.prompt_tokens) + " cached=" + num(r.cached_tokens) +
         " rerun=" + num(r.rerun_tokens) + " completion=" + num(r.completion_tokens) +
         " ttft_ms=" + ms(r.ttft_ms) + " total_ms=" + ms(r.total_ms) + " finish=" + word(r.finish);
}

Result<std::unique_ptr<AccessLog>> AccessLog::open(const std::string& path,
                                                   AccessLogFormat format) {
  if (path.empty() || path == "-")
    return std::unique_ptr<AccessLog>(new AccessLog(stderr, false, format));
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return make_error("--log-file " + path + ": cannot open: " + std::strerror(errno));
  return std::unique_ptr<AccessLog>(new AccessLog(f, true, format));
}

AccessLog::~AccessLog() {
  if (owned_) std::fclose(f_);
}

void AccessLog::write(const AccessRecord& r) {
  const std::string line = format_access_record(r, format_) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace rw
