// The access log's line formats (server/access_log.h): text fields in a fixed order, JSON that
// parses with every field (null where a request has none), hostile paths kept on one line.
#include "rewind/server/access_log.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace rw {
namespace {

AccessRecord generation_record() {
  AccessRecord r;
  r.unix_time = 1700000000.25;
  r.id = "chatcmpl-abc";
  r.client = "127.0.0.1";
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.status = 200;
  r.model = "gpt-4";
  r.stream = true;
  r.prompt_tokens = 40;
  r.cached_tokens = 32;
  r.rerun_tokens = 8;
  r.completion_tokens = 5;
  r.ttft_ms = 12.34;
  r.total_ms = 56.78;
  r.finish = "stop";
  return r;
}

TEST(AccessLog, TextLine) {
  const std::string line = format_access_record(generation_record(), AccessLogFormat::Text);
  EXPECT_EQ(line,
            "2023-11-14T22:13:20.250Z chatcmpl-abc 127.0.0.1 \"POST /v1/chat/completions\" 200 "
            "model=gpt-4 stream=1 prompt=40 cached=32 rerun=8 completion=5 ttft_ms=12.3 "
            "total_ms=56.8 finish=stop");
  AccessRecord plain;
  plain.unix_time = 0;
  plain.id = "req-1";
  plain.client = "::1";
  plain.method = "GET";
  plain.path = "/health";
  plain.status = 200;
  plain.total_ms = 0.04;
  EXPECT_EQ(format_access_record(plain, AccessLogFormat::Text),
            "1970-01-01T00:00:00.000Z req-1 ::1 \"GET /health\" 200 model=- stream=0 prompt=- "
            "cached=- rerun=- completion=- ttft_ms=- total_ms=0.0 finish=-");
}

TEST(AccessLog, JsonLineParses) {
  const std::string line = format_access_record(generation_record(), AccessLogFormat::Json);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], "2023-11-14T22:13:20.250Z");
  EXPECT_EQ(j["id"], "chatcmpl-abc");
  EXPECT_EQ(j["client"], "127.0.0.1");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/v1/chat/completions");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["model"], "gpt-4");
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["prompt_tokens"], 40);
  EXPECT_EQ(j["cached_tokens"], 32);
  EXPECT_EQ(j["rerun_tokens"], 8);
  EXPECT_EQ(j["completion_tokens"], 5);
  EXPECT_DOUBLE_EQ(j["ttft_ms"].get<double>(), 12.34);
  EXPECT_DOUBLE_EQ(j["total_ms"].get<double>(), 56.78);
  EXPECT_EQ(j["finish_reason"], "stop");

  AccessRecord plain;
  plain.id = "req-2";
  plain.client = "-";
  plain.method = "-";
  plain.path = "-";
  plain.status = 408;
  const auto p = nlohmann::json::parse(format_access_record(plain, AccessLogFormat::Json));
  for (const char* k : {"model", "prompt_tokens", "cached_tokens", "rerun_tokens",
                        "completion_tokens", "ttft_ms", "total_ms", "finish_reason"})
    EXPECT_TRUE(p[k].is_null()) << k;
  EXPECT_EQ(p["status"], 408);
}

// A path or model with quotes, spaces, newlines or invalid UTF-8 cannot break a line or forge
// a field.
TEST(AccessLog, HostileValuesStayOnOneLine) {
  AccessRecord r = generation_record();
  r.path = "/x\" 200 forged\n\xff";
  r.model = "a b\"c";
  for (AccessLogFormat f : {AccessLogFormat::Text, AccessLogFormat::Json}) {
    const std::string line = format_access_record(r, f);
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  }
  const std::string text = format_access_record(r, AccessLogFormat::Text);
  EXPECT_NE(text.find("\"POST /x\\\" 200 forged\\n\xef\xbf\xbd\""), std::string::npos) << text;
  EXPECT_NE(text.find("model=\"a b\\\"c\""), std::string::npos) << text;
  const auto j = nlohmann::json::parse(format_access_record(r, AccessLogFormat::Json));
  EXPECT_EQ(j["model"], "a b\"c");
}

TEST(AccessLog, FormatNames) {
  AccessLogFormat f = AccessLogFormat::Json;
  EXPECT_TRUE(parse_access_log_format("text", &f));
  EXPECT_EQ(f, AccessLogFormat::Text);
  EXPECT_TRUE(parse_access_log_format("json", &f));
  EXPECT_EQ(f, AccessLogFormat::Json);
  EXPECT_FALSE(parse_access_log_format("JSON", &f));
  EXPECT_FALSE(parse_access_log_format("", &f));
}

TEST(AccessLog, AppendsToAFileAndRefusesAnUnwritablePath) {
  const std::string path = test::made_scratch_dir("access_log") + "/access.log";
  {
    auto log = AccessLog::open(path, AccessLogFormat::Json);
    ASSERT_TRUE(log.ok()) << log.error_message();
    log.value()->write(generation_record());
  }
  {
    auto log = AccessLog::open(path, AccessLogFormat::Json);  // appends
    ASSERT_TRUE(log.ok());
    log.value()->write(generation_record());
  }
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    EXPECT_EQ(nlohmann::json::parse(line)["id"], "chatcmpl-abc");
    ++n;
  }
  EXPECT_EQ(n, 2);
  auto bad = AccessLog::open("/nonexistent-dir/x/access.log", AccessLogFormat::Text);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_message().find("--log-file /nonexistent-dir/x/access.log: cannot open"),
            std::string::npos)
      << bad.error_message();
}

}  // namespace
}  // namespace rw
