// Without --model, `rewind run`, `serve` and `bench` use the built-in model (models/kjv-target,
// the trained checkpoint committed in the repository) and say so in one line on stderr; `run`
// then generates exactly what it generates with --model naming that directory (and prints no
// such line there). `run`'s figures say what they measure (times beside the rates).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace rw {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const char* kNote = "rewind: no --model given; using the built-in model models/kjv-target (";

// The built-in model in this source tree.
std::string builtin_dir() {
  return std::filesystem::weakly_canonical(test::data_dir() + "/../../models/kjv-target").string();
}

std::string scratch(const std::string& name) {
  return test::made_scratch_dir("builtin_model") + "/" + name;
}

// Runs `rewind <args>`: stdout returned, stderr in *err, exit status in *rc.
std::string rewind_cmd(const std::string& args, std::string* err, int* rc) {
  const std::string err_path = scratch("stderr.txt");
  const std::string out =
      test::run_command(std::string(REWIND_BINARY) + " " + args + " 2>" + err_path, rc);
  *err = test::read_file(err_path);
  return out;
}

TEST(BuiltinModel, RunWithoutModelGeneratesWithIt) {
  ASSERT_TRUE(std::filesystem::is_regular_file(builtin_dir() + "/config.json")) << builtin_dir();
  const std::string args = "--prompt 'In the beginning' -n 8 --ignore-eos -t 1 --json";
  std::string err;
  int rc = 0;
  const std::string out = rewind_cmd("run " + args, &err, &rc);
  ASSERT_EQ(rc, 0) << out << err;
  // One line says which model it took and where it found it.
  const size_t at = err.find(kNote);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(std::string(kNote) + builtin_dir() + ")\n"), at) << err;
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["generated_tokens"].get<int>(), 8) << out;
  EXPECT_FALSE(j["text"].get<std::string>().empty()) << out;

  // The same run naming the directory: the same tokens, and no note.
  std::string err2;
  const std::string out2 = rewind_cmd("run --model " + builtin_dir() + " " + args, &err2, &rc);
  ASSERT_EQ(rc, 0) << out2 << err2;
  EXPECT_EQ(err2.find("no --model given"), std::string::npos) << err2;
  const json j2 = json::parse(out2, nullptr, false);
  ASSERT_TRUE(j2.is_object()) << out2;
  EXPECT_EQ(j2["tokens"].dump(), j["tokens"].dump());
  EXPECT_EQ(j2["text"].get<std::string>(), j["text"].get<std::string>());
}

TEST(BuiltinModel, RunSaysWhatItsFiguresMeasure) {
  // --json: the prefill and decode times beside the rates, which they and the token counts
  // give (prefill: the prompt over the time to the first token; decode: the tokens after it).
  std::string err;
  int rc = 0;
  const std::string out =
      rewind_cmd("run --prompt 'In the beginning' -n 6 --ignore-eos -t 2 --json", &err, &rc);
  ASSERT_EQ(rc, 0) << out << err;
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  for (const char* key :
       {"prefill_ms", "prefill_tok_s", "decode_tokens", "decode_ms", "decode_tok_s"})
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key << " in " << out;
  EXPECT_EQ(j["decode_tokens"].get<int>(), j["generated_tokens"].get<int>() - 1);
  const double pms = j["prefill_ms"].get<double>(), dms = j["decode_ms"].get<double>();
  ASSERT_GT(pms, 0);
  ASSERT_GT(dms, 0);
  EXPECT_NEAR(j["prefill_tok_s"].get<double>(), j["prompt_tokens"].get<double>() / (pms / 1e3),
              0.01 * j["prefill_tok_s"].get<double>() + 0.01);
  EXPECT_NEAR(j["decode_tok_s"].get<double>(), j["decode_tokens"].get<double>() / (dms / 1e3),
              0.01 * j["decode_tok_s"].get<double>() + 0.01);
  // The text line says it too, and that a prompt this short gives no meaningful prefill rate.
  rewind_cmd("run --prompt 'In the beginning' -n 6 --ignore-eos -t 1", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("ms to the first token"), std::string::npos) << err;
  EXPECT_NE(err.find("mostly fixed costs for so few tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("decode 5 tokens after the first in "), std::string::npos) << err;
}

TEST(BuiltinModel, BenchWithoutModelMeasuresIt) {
  std::string err;
  int rc = 0;
  const std::string out = rewind_cmd("bench -p 8 -n 2 -t 1 --prefill-runs 1 --json", &err, &rc);
  ASSERT_EQ(rc, 0) << out << err;
  EXPECT_NE(err.find(kNote), std::string::npos) << err;
  const json j = json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["model"].get<std::string>(), builtin_dir());
  EXPECT_EQ(j["prompt_tokens"].get<int>(), 8);
  EXPECT_EQ(j["decode_tokens"].get<int>(), 2);
}

TEST(BuiltinModel, ServeWithoutModelServesIt) {
  const std::string log = scratch("serve.log");
  std::vector<std::string> args = {REWIND_BINARY, "serve", "--port", "0", "--threads", "1"};
  const pid_t pid = test::spawn_logged(args, log);
  ASSERT_GT(pid, 0);
  // Waits for the listening line (or the exit), then stops the server.
  const std::string marker = "listening on http://127.0.0.1:";
  std::string text;
  bool exited = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    text = test::read_file(log);
    if (text.find(marker) != std::string::npos) break;
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  int port = 0;
  if (const size_t at = text.find(marker); at != std::string::npos)
    port = std::atoi(text.c_str() + at + marker.size());
  std::string models;
  std::vector<json> replies;  // a chat reply without, then with stop strings
  if (port > 0) {
    int rc = 0;
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    models = test::run_command("curl -sS " + url + "/v1/models 2>&1", &rc);
    for (const bool stream : {false, true})
      for (const json& stop : {json(nullptr), json({"think", "\n", "<"})}) {
        const std::string body = scratch("chat.json");
        std::ofstream(body) << json({{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                     {"max_tokens", 12},
                                     {"temperature", 0},
                                     {"logprobs", true},
                                     {"stream", stream},
                                     {"stop", stop}})
                                   .dump();
        const std::string out = test::run_command(
            "curl -sSN " + url + "/v1/chat/completions -H 'Content-Type: application/json' -d @" +
                body + " 2>&1",
            &rc);
        if (!stream) {
          replies.push_back(json::parse(out, nullptr, false));
          continue;
        }
        // A stream, gathered into the shape of a whole reply.
        json whole = {
            {"choices",
             {{{"message", {{"content", ""}}}, {"logprobs", {{"content", json::array()}}}}}}};
        json& c = whole["choices"][0];
        std::istringstream lines(out);
        for (std::string line; std::getline(lines, line);) {
          if (line.rfind("data: {", 0) != 0) continue;
          const json d = json::parse(line.substr(6));
          const json& delta = d["choices"][0]["delta"];
          if (delta.contains("content"))
            c["message"]["content"] =
                c["message"]["content"].get<std::string>() + delta["content"].get<std::string>();
          const json& lp = d["choices"][0]["logprobs"];
          if (lp.is_object())
            for (const json& t : lp["content"]) c["logprobs"]["content"].push_back(t);
        }
        replies.push_back(whole);
      }
  }
  if (!exited) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  text = test::read_file(log);
  ASSERT_GT(port, 0) << text;
  EXPECT_NE(text.find(kNote), std::string::npos) << text;
  EXPECT_NE(text.find("(model kjv-target,"), std::string::npos) << text;
  const json j = json::parse(models, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("data")) << models;
  EXPECT_EQ(j["data"][0]["id"].get<std::string>(), "kjv-target") << models;
  // The model opens its reply with an empty reasoning block: stop strings apply to the content
  // only (the tags' "think", "<" and the newlines after them stop nothing), and the logprobs
  // are the content's tokens, whole and streamed.
  ASSERT_EQ(replies.size(), 4u);
  for (const json& r : replies) {
    ASSERT_TRUE(r.is_object() && r.contains("choices")) << r.dump();
    const json& c = r["choices"][0];
    const std::string content = c["message"]["content"].get<std::string>();
    EXPECT_FALSE(content.empty()) << r.dump();
    std::string joined;
    for (const json& t : c["logprobs"]["content"]) joined += t["token"].get<std::string>();
    EXPECT_EQ(joined, content) << r.dump();
  }
  for (size_t i = 1; i < 4; ++i)
    EXPECT_EQ(replies[0]["choices"][0]["message"]["content"],
              replies[i]["choices"][0]["message"]["content"])
        << i;
}

}  // namespace
}  // namespace rw
