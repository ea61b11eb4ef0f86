// A `rewind serve` child on the tiny seeded model (scratch.h), curl requests to it, and the
// long chat whose third user turn is edited: what the cache-tier tests (disk_tier_test.cpp,
// redis_tier_test.cpp) share. The edited chat must resume from a tier (re-running at most the
// checkpoint spacing plus the edited suffix) and answer exactly as a cold server does.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "scratch.h"
#include "test_util.h"

namespace rw::test::tier {

// What the tier tests use besides this header (`using namespace test::tier` brings them in).
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using test::model_dir;
using test::tmp_dir;
using test::tmp_path;

inline constexpr int kInterval = 16;

class Server {
 public:
  // `env`: NAME=VALUE pairs for the child only.
  // model: a checkpoint directory; empty = the tiny model.
  static std::unique_ptr<Server> start(std::vector<std::string> extra,
                                       std::vector<std::pair<std::string, std::string>> env = {},
                                       std::string model = "") {
    auto s = std::unique_ptr<Server>(new Server());
    s->log_ = tmp_path("server.log");
    if (model.empty()) model = model_dir();
    std::vector<std::string> args = {REWIND_BINARY,
                                     "serve",
                                     "--model",
                                     model,
                                     "--port",
                                     "0",
                                     "--threads",
                                     "1",
                                     "--checkpoint-interval",
                                     std::to_string(kInterval)};
    for (auto& e : extra) args.push_back(e);
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    s->pid_ = test::spawn_logged(args, s->log_);
    for (auto& [k, v] : env) unsetenv(k.c_str());
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string log = test::read_file(s->log_);
      const std::string marker = "listening on http://127.0.0.1:";
      const size_t at = log.find(marker);
      if (at != std::string::npos) {
        s->url_ = "http://127.0.0.1:" + std::to_string(std::atoi(log.c_str() + at + marker.size()));
        return s;
      }
      int st = 0;
      if (waitpid(s->pid_, &st, WNOHANG) == s->pid_) {
        s->pid_ = -1;
        ADD_FAILURE() << "server exited early:\n" << log;
        return nullptr;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "server did not start:\n" << test::read_file(s->log_);
    return nullptr;
  }
  ~Server() { stop(SIGKILL); }
  // Sends `sig` and waits for the exit; the exit status (-1: killed by a signal or timeout).
  int stop(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int st = 0;
    for (int i = 0; i < 1500; ++i) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  bool alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  const std::string& url() const { return url_; }
  std::string log() const { return test::read_file(log_); }

 private:
  Server() = default;
  pid_t pid_ = -1;
  std::string url_, log_;
};

struct Http {
  int status = 0;
  std::string body;
  json j() const { return json::parse(body, nullptr, false); }
};

inline Http curl(const Server& s, const std::string& method, const std::string& path,
                 const std::string& body = "") {
  const std::string out = tmp_path("out");
  std::string cmd =
      "curl -sS -o " + out + " -w '%{http_code}' -X " + method + " '" + s.url() + path + "'";
  if (!body.empty()) {
    const std::string in = tmp_path("in.json");
    std::ofstream(in) << body;
    cmd += " -H 'Content-Type: application/json' --data-binary @" + in;
  }
  int rc = 0;
  const std::string code = test::run_command(cmd + " 2>&1", &rc);
  return Http{std::atoi(code.c_str()), test::read_file(out)};
}

// A long chat: a system prompt and seven turns; `third` is the third user message.
inline json chat(const std::string& third) {
  json msgs =
      json::array({{{"role", "system"},
                    {"content", "You answer questions about old lighthouses and the sea."}}});
  const char* turns[][2] = {
      {"Tell me about the oldest lighthouse you know, and why it was built where it stands.",
       "It stands on a rocky point; ships kept wrecking there in winter storms."},
      {"How did the keepers live there through the long winters, with supplies so far away?",
       "They stored food in autumn and kept the lamp lit every night until spring."},
      {nullptr, "They lit oil lamps by hand and rang the fog bell until the wind dropped."},
      {"Which fuel did the lamps burn before electricity reached the coast?",
       "Whale oil first, then colza oil, then kerosene once it was cheap enough."},
  };
  for (const auto& t : turns) {
    msgs.push_back({{"role", "user"}, {"content", t[0] ? t[0] : third}});
    msgs.push_back({{"role", "assistant"}, {"content", t[1]}});
  }
  msgs.push_back({{"role", "user"}, {"content", "And who keeps the light burning today?"}});
  return {{"model", "tiny"},  {"max_tokens", 8},  {"temperature", 0},
          {"messages", msgs}, {"logprobs", true}, {"top_logprobs", 5}};
}

inline const std::string kThird = "What did they do when the lamp failed on a stormy night at sea?";
inline const std::string kEdited =
    "What did they do when the lamp failed on a calm night in the harbour?";

inline Http ask(const Server& s, const json& body) {
  const Http h = curl(s, "POST", "/v1/chat/completions", body.dump());
  EXPECT_EQ(h.status, 200) << h.body;
  return h;
}

// The cold answer to the edited chat and the edit's position (the common prefix of the two
// chats' tokens), from a server without a cache directory.
struct Reference {
  json choices;
  int prompt_tokens = 0;
  int edit_at = 0;
};
inline const Reference& reference() {
  static const Reference r = [] {
    Reference out;
    auto s = Server::start({});
    if (!s) return out;
    const Http cold = ask(*s, chat(kEdited));
    out.choices = cold.j()["choices"];
    out.prompt_tokens = cold.j()["usage"]["prompt_tokens"].get<int>();
    EXPECT_EQ(cold.j()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
    const Http orig = ask(*s, chat(kThird));
    out.edit_at = orig.j()["usage"]["rewind"]["diverged_at"].get<int>();
    return out;
  }();
  return r;
}

// The tier's figures in /v1/cache ("disk" or "redis").
inline json tier_stats(const Server& s, const char* tier) {
  return curl(s, "GET", "/v1/cache").j()[tier];
}

// Waits until the tier's writer has nothing queued and has written at least `writes` objects.
inline bool writes_settle(const Server& s, const char* tier, int writes) {
  for (int i = 0; i < 500; ++i) {
    const json d = tier_stats(s, tier);
    if (d.is_object() && d["queued"].get<int>() == 0 && d["writes"].get<int>() >= writes)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// The edited chat: the reference's answer and, when `tier` is set, a resume from that tier
// re-running at most the spacing plus the edited suffix.
inline void expect_edited_answer(const Server& s, const char* tier) {
  const Reference& ref = reference();
  ASSERT_GT(ref.edit_at, ref.prompt_tokens / 3) << "the edit lies after the first turns";
  const Http h = ask(s, chat(kEdited));
  const json u = h.j()["usage"];
  EXPECT_EQ(h.j()["choices"], ref.choices) << "the answer equals a cold server's";
  const int cached = u["prompt_tokens_details"]["cached_tokens"].get<int>();
  const int rerun = u["rewind"]["rerun_tokens"].get<int>();
  EXPECT_EQ(cached + rerun, ref.prompt_tokens);
  EXPECT_LE(cached, ref.edit_at);
  if (tier) {
    EXPECT_LE(rerun, kInterval + (ref.prompt_tokens - ref.edit_at))
        << "resumed from the newest checkpoint before the edit (cached " << cached << ", edit at "
        << ref.edit_at << ")";
    EXPECT_GT(u["rewind"]["tier_tokens"].get<int>(), 0) << u.dump();
    EXPECT_LE(u["rewind"]["tier_tokens"].get<int>(), cached) << u.dump();
    const json d = tier_stats(s, tier);
    EXPECT_GE(d["hits"].get<int>(), 1) << d.dump();
    EXPECT_GT(d["bytes_read"].get<int>(), 0) << d.dump();
    EXPECT_GE(curl(s, "GET", "/v1/cache").j()["tiers"]["resumes"].get<int>(), 1);
  }
  EXPECT_EQ(curl(s, "GET", "/health").status, 200);
}

}  // namespace rw::test::tier
