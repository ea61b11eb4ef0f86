// `rewind serve` end to end: the built binary (REWIND_BINARY) serves a tiny seeded model made by
// `rewind make-model --preset tiny` on an ephemeral port, and real clients drive it: curl for
// chat and completions (streaming and not), stop sequences, max_tokens, logprobs, usage and
// cached tokens, /v1/models, /health, /metrics, /v1/cache and every error status; raw sockets
// for a client that disconnects mid-stream, for a full queue and for a hostile but fair client
// of the HTTP layer (slow headers, smuggling shapes, pipelining, half-close, connection caps,
// bursts of connects, graceful drain on SIGTERM); 8 concurrent curl clients
// whose greedy outputs must equal each one's output alone (bit-exact: logprobs included); and
// the official `openai` npm client (tests/integration/openai_client, installed by
// scripts/test.sh): skipped where node or the package is missing, a failure when CI is set. The
// access log (a line per request, text and JSON), --alias and its 404, and /v1/cache's client ids.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "json_schema_util.h"
#include "require.h"
#include "scratch.h"
#include "test_util.h"

namespace rw {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const char* kKey = "test-key-123";

using test::read_file;
using test::write_file;

using test::model_dir;
using test::tmp_dir;
using test::tmp_path;

// A `rewind serve` child process.
class Server {
 public:
  static constexpr const char* kModelsInArgs = "(the models are in the arguments)";
  // model: a checkpoint directory; empty = the tiny random model; kModelsInArgs: none added.
  static std::unique_ptr<Server> start(std::vector<std::string> extra, std::string model = "") {
    auto s = std::unique_ptr<Server>(new Server());
    s->log_ = tmp_path("server.log");
    if (model.empty()) model = model_dir();
    std::vector<std::string> args = {REWIND_BINARY, "serve", "--port", "0", "--threads", "1"};
    if (model != kModelsInArgs) {
      args.push_back("--model");
      args.push_back(model);
    }
    for (auto& e : extra) args.push_back(e);
    // The address in the URLs serve prints: --host's (an IPv6 literal in brackets).
    std::string host = "127.0.0.1";
    for (size_t i = 0; i + 1 < extra.size(); ++i)
      if (extra[i] == "--host") host = extra[i + 1];
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    const pid_t pid = test::spawn_logged(args, s->log_);
    s->pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string log = read_file(s->log_);
      const std::string marker = "listening on http://" + host + ":";
      const size_t at = log.find(marker);
      if (at != std::string::npos) {
        s->port_ = std::atoi(log.c_str() + at + marker.size());
        s->url_ = "http://" + host + ":" + std::to_string(s->port_);
        return s;
      }
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        s->pid_ = -1;
        ADD_FAILURE() << "server exited early:\n" << log;
        return nullptr;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "server did not start:\n" << read_file(s->log_);
    return nullptr;
  }

  ~Server() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Sends `sig` and waits for the exit; returns the exit status (-1: killed / timeout).
  int stop(int sig = SIGTERM, std::chrono::seconds timeout = 30s) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

  const std::string& url() const { return url_; }
  int port() const { return port_; }
  std::string log() const { return read_file(log_); }
  const std::string& log_path() const { return log_; }

 private:
  Server() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string url_, log_;
};

struct Http {
  int status = 0;
  std::string body;
  json j() const { return json::parse(body, nullptr, false); }
};

// One request through curl. `key`: the API key to send ("" = no Authorization header).
Http curl(const Server& s, const std::string& method, const std::string& path,
          const std::string& body = "", const std::string& key = kKey,
          const std::string& extra = "") {
  const std::string out = tmp_path("out");
  std::string cmd =
      "curl -sS -N -o " + out + " -w '%{http_code}' -X " + method + " '" + s.url() + path + "'";
  if (!key.empty()) cmd += " -H 'Authorization: Bearer " + key + "'";
  if (!body.empty() || method == "POST") {
    const std::string in = tmp_path("in.json");
    write_file(in, body);
    cmd += " -H 'Content-Type: application/json' --data-binary @" + in;
  }
  cmd += " " + extra + " 2>&1";
  int rc = 0;
  const std::string code = test::run_command(cmd, &rc);
  Http h;
  h.status = std::atoi(code.c_str());
  h.body = read_file(out);
  return h;
}

Http post(const Server& s, const std::string& path, const json& body) {
  return curl(s, "POST", path, body.dump());
}

// The `data:` payloads of an SSE body, in order ("[DONE]" included).
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < body.size()) {
    size_t e = body.find("\n\n", i);
    if (e == std::string::npos) e = body.size();
    const std::string ev = body.substr(i, e - i);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    i = e + 2;
  }
  return out;
}

json chat_body(const std::string& user, int max_tokens, json extra = json::object()) {
  json b = {{"model", "tiny"},
            {"messages", json::array({{{"role", "system"}, {"content", "You are terse."}},
                                      {{"role", "user"}, {"content", user}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

json completion_body(const std::string& prompt, int max_tokens, json extra = json::object()) {
  json b = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

// A metric's value from the /metrics page (the first line starting with `name`), -1 if absent.
double metric(const Server& s, const std::string& name) {
  const Http h = curl(s, "GET", "/metrics");
  std::istringstream is(h.body);
  std::string line;
  while (std::getline(is, line))
    if (line.rfind(name + " ", 0) == 0) return std::atof(line.c_str() + name.size() + 1);
  return -1;
}

bool wait_for(const std::function<bool()>& cond, std::chrono::seconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

// ---- the official openai npm client (tests/integration/openai_client) ----

std::string node_client_dir() {
  return test::data_dir() + "/../integration/openai_client";
}

// Why the npm client tests cannot run here ("" when they can): node missing, or the client's
// packages not installed (scripts/test.sh runs npm ci; npm itself is needed only for that).
std::string node_client_missing() {
  int rc = 0;
  test::run_command("command -v node >/dev/null 2>&1", &rc);
  if (rc != 0) return "node is not installed: the openai npm client tests need Node.js";
  if (!std::filesystem::exists(node_client_dir() + "/node_modules/openai/package.json"))
    return "the openai npm package is not installed in tests/integration/openai_client "
           "(run: cd tests/integration/openai_client && npm ci)";
  return "";
}

// Ends the test when the npm client cannot run: a failure in CI, a skip elsewhere.
#define REQUIRE_NODE_CLIENT() REWIND_REQUIRE(node_client_missing())

// A raw HTTP client on a socket: sends a request and reads as much as it is told, so a test
// can stop reading or hang up mid-stream.
// Connects socket fd to 127.0.0.1:port; fd, or -1 (fd closed) when it fails.
int connect_loopback(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class RawClient {
 public:
  RawClient(int port, const std::string& path, const std::string& body) {
    fd_ = connect_loopback(socket(AF_INET, SOCK_STREAM, 0), port);
    if (fd_ < 0) return;
    const std::string req =
        "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
        std::string(kKey) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    (void)!write(fd_, req.data(), req.size());
  }
  ~RawClient() { close(); }
  bool ok() const { return fd_ >= 0; }
  // Reads until `needle` has been seen (or EOF / 30 s); returns what was read.
  std::string read_until(const std::string& needle) {
    timeval tv{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    while (got_.find(needle) == std::string::npos) {
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string got_;
};

int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// `raw` without the interim 1xx answers at its start (a server may send them unasked).
std::string final_answer(const std::string& raw) {
  std::string s = raw;
  while (s.rfind("HTTP/1.1 1", 0) == 0) {
    const size_t e = s.find("\r\n\r\n");
    if (e == std::string::npos) break;
    s.erase(0, e + 4);
  }
  return s;
}

// A raw TCP connection for the HTTP layer's tests: sends bytes as given, reads as it is told.
class Conn {
 public:
  // from: the local address to connect from ("" = any); loopback holds all of 127.0.0.0/8.
  explicit Conn(int port, const std::string& from = "") {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (!from.empty()) {
      sockaddr_in l{};
      l.sin_family = AF_INET;
      inet_pton(AF_INET, from.c_str(), &l.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&l), sizeof l) != 0) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
    fd_ = connect_loopback(fd_, port);
  }
  ~Conn() { close(); }
  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void shut_wr() { ::shutdown(fd_, SHUT_WR); }
  // Reads until `needle` is in what was read, EOF, or the timeout; returns all read so far.
  std::string read_until(const std::string& needle, std::chrono::seconds timeout = 30s) {
    return read_while([&] { return needle.empty() || got_.find(needle) == std::string::npos; },
                      timeout);
  }
  // Reads until `needle` occurs `n` times (or EOF, or the timeout); true when it does.
  bool read_count(const std::string& needle, int n, std::chrono::seconds timeout = 30s) {
    read_while([&] { return count_of(got_, needle) < n; }, timeout);
    return count_of(got_, needle) >= n;
  }
  std::string read_while(const std::function<bool()>& more, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (more() && !eof_ && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[8192];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  // Reads until the server closes (or the timeout); true when it closed.
  bool read_to_eof(std::chrono::seconds timeout = 30s) {
    read_until("", timeout);
    return eof_;
  }
  const std::string& got() const { return got_; }
  // Whether the server has sent anything not read yet (or closed), without waiting.
  bool readable() const {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool eof_ = false;
  std::string got_;
};

// The JSON body of the first response in `raw` (after its header).
json body_of(const std::string& raw) {
  const size_t at = raw.find("\r\n\r\n");
  if (at == std::string::npos) return json();
  const size_t open = raw.find('{', at);
  const size_t close = raw.find("\n", open);
  if (open == std::string::npos) return json();
  return json::parse(
      raw.substr(open, close == std::string::npos ? std::string::npos : close - open), nullptr,
      false);
}

std::string post_head(const std::string& path, const std::string& extra_headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
         std::string(kKey) + "\r\nContent-Type: application/json\r\n" + extra_headers + "\r\n";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `rewind serve` on the tiny model with these options (shell words) exits non-zero, and its
// output says `want`.
void expect_serve_refuses(const std::string& opts, const std::string& want) {
  int rc = 0;
  const std::string out =
      test::run_command(std::string(REWIND_BINARY) + " serve --model tiny=" + model_dir() +
                            " --port 0 " + opts + " 2>&1",
                        &rc);
  EXPECT_NE(rc, 0) << opts;
  EXPECT_NE(out.find(want), std::string::npos) << opts << ": " << out;
}

// One server for most tests of this process (ctest runs each TEST in a process of its own).
class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = Server::start({"--api-key", kKey, "--parallel", "4", "--ctx-size", "32768",
                             "--max-body", "1048576"})
                  .release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }
  const Server& s() const { return *server_; }
  static Server* server_;
};
Server* ServerTest::server_ = nullptr;

// ---- basic endpoints ----------------------------------------------------------------------------

TEST_F(ServerTest, HealthIsOpen) {
  const Http h = curl(s(), "GET", "/health", "", "");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.j(), json({{"status", "ok"}}));
}

TEST_F(ServerTest, Models) {
  const Http h = curl(s(), "GET", "/v1/models");
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
  // "created" is when the server started: the same a second later.
  std::this_thread::sleep_for(1100ms);
  EXPECT_EQ(curl(s(), "GET", "/v1/models").j()["data"][0]["created"], j["data"][0]["created"]);
}

// ---- chat
// -----------------------------------------------------------------------------------------

TEST_F(ServerTest, ChatWhole) {
  const Http h = post(s(), "/v1/chat/completions", chat_body("Hello there", 12));
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "tiny");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_TRUE(c["message"]["content"].is_string());
  const std::string fr = c["finish_reason"];
  EXPECT_TRUE(fr == "stop" || fr == "length") << fr;
  const json& u = j["usage"];
  EXPECT_GT(u["prompt_tokens"].get<int>(), 5);
  EXPECT_GE(u["completion_tokens"].get<int>(), 1);
  EXPECT_LE(u["completion_tokens"].get<int>(), 12);
  EXPECT_EQ(u["total_tokens"].get<int>(),
            u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());
  EXPECT_TRUE(u["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  if (fr == "length") {
    EXPECT_EQ(u["completion_tokens"], 12);
  }
}

TEST_F(ServerTest, ChatStreamEqualsWhole) {
  const json req = chat_body("Tell me a story", 20, {{"ignore_eos", true}});
  const Http whole = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  const Http st = post(s(), "/v1/chat/completions", sreq);
  ASSERT_EQ(st.status, 200) << st.body;
  const auto data = sse_data(st.body);
  ASSERT_GE(data.size(), 4u) << st.body;
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json c = json::parse(data[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c.contains("usage") && !c["usage"].is_null()) {
      usage = c["usage"];
      EXPECT_TRUE(c["choices"].empty());
      continue;
    }
    const json& ch = c["choices"][0];
    if (i == 0) {
      EXPECT_EQ(ch["delta"]["role"], "assistant");
    }
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  const json wj = whole.j();
  EXPECT_EQ(text, wj["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(wj["choices"][0]["finish_reason"], "length");
  ASSERT_TRUE(usage.is_object()) << st.body;
  EXPECT_EQ(usage["completion_tokens"], 20);
  EXPECT_EQ(usage["prompt_tokens"], wj["usage"]["prompt_tokens"]);
}

TEST_F(ServerTest, CachedTokensOnRepeatedConversation) {
  const json req = chat_body("Please remember this conversation about lighthouses.", 4);
  const Http a = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(a.status, 200) << a.body;
  const Http b = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(b.status, 200) << b.body;
  const json ub = b.j()["usage"];
  EXPECT_GT(ub["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << b.body;
  EXPECT_LT(ub["prompt_tokens_details"]["cached_tokens"].get<int>(),
            ub["prompt_tokens"].get<int>());
  // Same greedy reply both times (resumed from the cache, bit-exact).
  EXPECT_EQ(a.j()["choices"], b.j()["choices"]);
  // The resume shows in /v1/cache.
  const Http c = curl(s(), "GET", "/v1/cache");
  ASSERT_EQ(c.status, 200);
  const json cj = c.j();
  ASSERT_FALSE(cj["recent"].empty());
  EXPECT_GT(cj["recent"].back()["resumed_at"].get<int>(), 0);
}

TEST_F(ServerTest, ChatLogprobs) {
  const Http h = post(s(), "/v1/chat/completions",
                      chat_body("Numbers please", 6,
                                {{"logprobs", true}, {"top_logprobs", 3}, {"ignore_eos", true}}));
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(j["usage"]["completion_tokens"].get<size_t>(), 6u);  // ignore_eos: all six
  ASSERT_EQ(content.size(), 6u);
  for (const auto& e : content) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e["logprob"].get<double>(), e["top_logprobs"][0]["logprob"].get<double>());
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(),
              e["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_TRUE(e["bytes"].is_array());
  }
  // Without logprobs: null.
  const Http n = post(s(), "/v1/chat/completions", chat_body("Numbers please", 2));
  EXPECT_TRUE(n.j()["choices"][0]["logprobs"].is_null());
}

// A reply that ends on the end-of-turn token lists the logprobs of its text only (OpenAI's):
// the tokens' text is the content, streamed or not.
TEST_F(ServerTest, ChatLogprobsLeaveOutTheStopToken) {
  for (bool stream : {false, true}) {
    json req = chat_body("Spell it", 20, {{"logprobs", true}, {"grammar", "root ::= \"abc\""}});
    req["stream"] = stream;
    const Http h = post(s(), "/v1/chat/completions", req);
    ASSERT_EQ(h.status, 200) << h.body;
    std::string content, finish, from_lps;
    auto take = [&](const json& choice, const char* key) {
      if (choice[key].contains("content") && choice[key]["content"].is_string())
        content += choice[key]["content"].get<std::string>();
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
      if (choice["logprobs"].is_object())
        for (const json& e : choice["logprobs"]["content"]) from_lps += e["token"];
    };
    if (stream) {
      for (const std::string& d : sse_data(h.body))
        if (d != "[DONE]" && !json::parse(d)["choices"].empty())
          take(json::parse(d)["choices"][0], "delta");
    } else {
      take(h.j()["choices"][0], "message");
    }
    EXPECT_EQ(finish, "stop") << h.body;
    EXPECT_EQ(content, "abc") << h.body;
    EXPECT_EQ(from_lps, "abc") << h.body;
  }
}

// A stop sequence's tokens have no logprob entries, nor do the tokens after it: the entries
// are the tokens whose text starts within the returned text (a grammar fixes the reply).
TEST_F(ServerTest, LogprobsEndWithTheTextBeforeAStopSequence) {
  const std::string reply = "abc def ghi", stop = " def";
  const json grammar = "root ::= \"" + reply + "\"";
  auto tokens_of = [&](const json& req, bool chat, std::string* text) {
    const Http h = post(s(), chat ? "/v1/chat/completions" : "/v1/completions", req);
    EXPECT_EQ(h.status, 200) << h.body;
    const json c = h.j()["choices"][0];
    std::vector<std::string> toks;
    if (chat) {
      *text = c["message"]["content"];
      for (const json& e : c["logprobs"]["content"]) toks.push_back(e["token"]);
    } else {
      *text = c["text"];
      for (const json& t : c["logprobs"]["tokens"]) toks.push_back(t);
      for (const json& o : c["logprobs"]["text_offset"]) EXPECT_LT(o.get<size_t>(), text->size());
    }
    return toks;
  };
  for (bool chat : {true, false}) {
    json req = chat ? chat_body("Spell it", 20, {{"logprobs", true}})
                    : completion_body("Spell it", 20, {{"logprobs", 1}});
    req["grammar"] = grammar;
    std::string full_text, text;
    const std::vector<std::string> all = tokens_of(req, chat, &full_text);
    ASSERT_EQ(full_text, reply);
    req["stop"] = json::array({stop});
    const std::vector<std::string> kept = tokens_of(req, chat, &text);
    EXPECT_EQ(text, "abc");
    std::vector<std::string> expected;
    size_t at = 0;
    for (const std::string& t : all) {
      if (at >= text.size()) break;
      expected.push_back(t);
      at += t.size();
    }
    EXPECT_EQ(kept, expected) << (chat ? "chat" : "completions");
  }
}

// text_offset counts characters; a byte-level token inside a character gets that character's
// offset, so every offset lies within the returned text (a stop string cutting after "é" too).
TEST_F(ServerTest, TextOffsetsOfTokensInsideCharacters) {
  for (const json& stop : {json(nullptr), json::array({"\u20ac"})}) {
    json req = completion_body("Spell it", 30, {{"logprobs", 1}});
    req["grammar"] = "root ::= \"a\u00e9\u20ac\U0001F600b\"";
    if (!stop.is_null()) req["stop"] = stop;
    const Http h = post(s(), "/v1/completions", req);
    ASSERT_EQ(h.status, 200) << h.body;
    const json c = h.j()["choices"][0];
    const std::string text = c["text"];
    size_t chars = 0;  // code points
    for (const char b : text) chars += (static_cast<unsigned char>(b) & 0xC0) != 0x80;
    EXPECT_EQ(chars, stop.is_null() ? 5u : 2u) << text;
    int64_t last = 0;
    for (const json& o : c["logprobs"]["text_offset"]) {
      EXPECT_GE(o.get<int64_t>(), last) << h.body;
      EXPECT_LT(o.get<size_t>(), chars) << h.body;
      last = o.get<int64_t>();
    }
    if (stop.is_null()) {
      EXPECT_EQ(last, 4) << h.body;  // "b"
    }
  }
}

TEST_F(ServerTest, ChatToolsAreAccepted) {
  json req = chat_body("What is the weather in Paris?", 8);
  req["tools"] =
      json::array({{{"type", "function"},
                    {"function",
                     {{"name", "get_weather"},
                      {"description", "Weather for a city"},
                      {"parameters",
                       {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  const Http h = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(h.status, 200) << h.body;
  const std::string fr = h.j()["choices"][0]["finish_reason"];
  EXPECT_TRUE(fr == "stop" || fr == "length" || fr == "tool_calls") << fr;
}

// ---- completions
// ------------------------------------------------------------------------------------

TEST_F(ServerTest, CompletionsWholeAndStream) {
  const json req = completion_body("Once upon a time", 16, {{"ignore_eos", true}});
  const Http whole = post(s(), "/v1/completions", req);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json wj = whole.j();
  EXPECT_EQ(wj["object"], "text_completion");
  EXPECT_EQ(wj["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(wj["usage"]["completion_tokens"], 16);
  json sreq = req;
  sreq["stream"] = true;
  const Http st = post(s(), "/v1/completions", sreq);
  ASSERT_EQ(st.status, 200) << st.body;
  const auto data = sse_data(st.body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text, finish;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json c = json::parse(data[i]);
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    EXPECT_FALSE(c.contains("usage") && !c["usage"].is_null()) << "usage without include_usage";
  }
  EXPECT_EQ(text, wj["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, "length");
}

TEST_F(ServerTest, CompletionsTokenPromptAndLogprobs) {
  const Http h = post(s(), "/v1/completions",
                      {{"prompt", json::array({10, 20, 30, 40})},
                       {"max_tokens", 5},
                       {"temperature", 0},
                       {"logprobs", 2},
                       {"ignore_eos", true}});
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  ASSERT_EQ(lp["text_offset"].size(), 5u);
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(ServerTest, MaxTokens) {
  for (int n : {1, 3, 7}) {
    const Http h =
        post(s(), "/v1/completions", completion_body("The lighthouse", n, {{"ignore_eos", true}}));
    ASSERT_EQ(h.status, 200) << h.body;
    EXPECT_EQ(h.j()["usage"]["completion_tokens"], n);
    EXPECT_EQ(h.j()["choices"][0]["finish_reason"], "length");
  }
}

TEST_F(ServerTest, StopSequences) {
  const json base = completion_body("The keeper counted the steps", 48, {{"ignore_eos", true}});
  const Http full = post(s(), "/v1/completions", base);
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string t = full.j()["choices"][0]["text"];
  // A short ASCII piece from the middle of the reply.
  std::string stop;
  for (size_t k = t.size() / 3; k + 3 <= t.size() && stop.empty(); ++k) {
    bool ascii = true;
    for (size_t i = k; i < k + 3; ++i)
      ascii &= static_cast<unsigned char>(t[i]) >= 0x20 && static_cast<unsigned char>(t[i]) < 0x7f;
    if (ascii) stop = t.substr(k, 3);
  }
  ASSERT_FALSE(stop.empty()) << "no ASCII run in: " << t;
  const std::string expected = t.substr(0, t.find(stop));

  const double stop0 = metric(s(), "rewind_requests_total{outcome=\"stop\"}");
  const double cancelled0 = metric(s(), "rewind_requests_total{outcome=\"cancelled\"}");
  json req = base;
  req["stop"] = json::array({"\x01never", stop});
  const Http h = post(s(), "/v1/completions", req);
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 48);

  req["stream"] = true;
  const Http st = post(s(), "/v1/completions", req);
  ASSERT_EQ(st.status, 200) << st.body;
  std::string text, finish;
  for (const auto& d : sse_data(st.body)) {
    if (d == "[DONE]") continue;
    const json c = json::parse(d);
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, expected);
  EXPECT_EQ(finish, "stop");

  // Chat with a stop string as a plain string.
  json creq = chat_body("Say something", 40, {{"ignore_eos", true}});
  const Http cf = post(s(), "/v1/chat/completions", creq);
  const std::string ct = cf.j()["choices"][0]["message"]["content"];
  size_t at = 1;  // the first printable ASCII character after the first byte
  while (at < ct.size() &&
         !(static_cast<unsigned char>(ct[at]) >= 0x21 && static_cast<unsigned char>(ct[at]) < 0x7f))
    ++at;
  ASSERT_LT(at, ct.size()) << "no ASCII character in the chat reply: " << ct;
  const std::string cstop = ct.substr(at, 1);
  creq["stop"] = cstop;
  const Http cs = post(s(), "/v1/chat/completions", creq);
  ASSERT_EQ(cs.status, 200) << cs.body;
  EXPECT_EQ(cs.j()["choices"][0]["message"]["content"], ct.substr(0, ct.find(cstop)));
  EXPECT_EQ(cs.j()["choices"][0]["finish_reason"], "stop");
  // The three with a stop string ended there: counted as "stop", not "cancelled" (the chat
  // reply without one ran to max_tokens: "length").
  EXPECT_TRUE(wait_for([&] {
    return metric(s(), "rewind_requests_total{outcome=\"stop\"}") == stop0 + 3;
  })) << metric(s(), "rewind_requests_total{outcome=\"stop\"}")
      << " " << stop0;
  EXPECT_EQ(metric(s(), "rewind_requests_total{outcome=\"cancelled\"}"), cancelled0);
}

// ---- observability
// ----------------------------------------------------------------------------------

TEST_F(ServerTest, MetricsPage) {
  ASSERT_EQ(post(s(), "/v1/completions", completion_body("metrics", 2)).status, 200);
  const Http h = curl(s(), "GET", "/metrics");
  ASSERT_EQ(h.status, 200);
  for (const char* needle :
       {"rewind_requests_total{outcome=\"stop\"}", "rewind_requests_total{outcome=\"length\"}",
        "rewind_requests_total{outcome=\"cancelled\"}", "rewind_requests_total{outcome=\"failed\"}",
        "rewind_engine_requests_total{outcome=\"finished\"}", "rewind_cache_lookups_total",
        "rewind_cache_bytes_pages", "rewind_cache_budget_bytes",
        "rewind_time_to_first_token_seconds_bucket", "rewind_request_duration_seconds_count",
        "rewind_requests_running", "rewind_requests_queued", "rewind_generated_tokens_total",
        "rewind_step_fit_ms{term=\"prefill_token\"}", "rewind_step_mixed_prefill_budget_tokens"})
    EXPECT_NE(h.body.find(needle), std::string::npos) << needle;
  EXPECT_GE(metric(s(), "rewind_engine_requests_total{outcome=\"finished\"}"), 1);
  EXPECT_GE(metric(s(), "rewind_requests_total{outcome=\"length\"}") +
                metric(s(), "rewind_requests_total{outcome=\"stop\"}"),
            1);
  EXPECT_GE(metric(s(), "rewind_cache_lookups_total"), 1);
  EXPECT_EQ(metric(s(), "rewind_cache_budget_bytes"), 4096.0 * 1024 * 1024);
  // The HTTP layer's buffers are one of the memory kinds (-1: the line is missing).
  EXPECT_GE(metric(s(), "rewind_memory_bytes{kind=\"http_buffers\"}"), 0.0) << h.body;
}

TEST_F(ServerTest, CacheEndpoint) {
  ASSERT_EQ(post(s(), "/v1/completions", completion_body("cache me", 2)).status, 200);
  const Http h = curl(s(), "GET", "/v1/cache");
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["enabled"], true);
  EXPECT_EQ(j["budget_bytes"], 4096ll << 20);
  EXPECT_TRUE(j["bytes"]["pages"].is_number());
  EXPECT_TRUE(j["bytes"]["snapshots"].is_number());
  EXPECT_GE(j["counts"]["nodes"].get<int>(), 1);
  EXPECT_GE(j["hits"]["lookups"].get<int>(), 1);
  ASSERT_FALSE(j["recent"].empty());
  for (const char* k :
       {"diverged_at", "resumed_at", "rerun_tokens", "lost_to_spacing", "prompt_tokens"})
    EXPECT_TRUE(j["recent"].back()[k].is_number_integer()) << k;
}

// ---- errors
// -----------------------------------------------------------------------------------------

void expect_error(const Http& h, int status, const std::string& needle = "") {
  EXPECT_EQ(h.status, status) << h.body;
  const json j = h.j();
  ASSERT_TRUE(j.is_object() && j.contains("error")) << h.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!needle.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << h.body;
  }
}

// ---- the web page and /v1/cache/tree ------------------------------------------------------------

// The header fields of a curl -D dump, names in lower case.
std::map<std::string, std::string> header_fields(const std::string& dump) {
  std::map<std::string, std::string> out;
  std::istringstream in(dump);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t v = colon + 1;
    while (v < line.size() && line[v] == ' ') ++v;
    out[k] = line.substr(v);
  }
  return out;
}

TEST_F(ServerTest, WebPageServedWithItsPolicyAndRevalidated) {
  const std::string hdr = tmp_path("hdr");
  // The page needs no key (its API calls do).
  const Http page = curl(s(), "GET", "/", "", "", "-D " + hdr);
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_NE(page.body.find("<script src=\"/assets/app.js\""), std::string::npos) << page.body;
  auto h = header_fields(read_file(hdr));
  EXPECT_EQ(h["content-type"], "text/html; charset=utf-8");
  EXPECT_NE(h["content-security-policy"].find("script-src 'self'"), std::string::npos);
  EXPECT_NE(h["content-security-policy"].find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(h["x-content-type-options"], "nosniff");
  EXPECT_EQ(h["cache-control"], "no-cache");
  EXPECT_TRUE(h.count("access-control-allow-origin") == 0);
  const std::string etag = h["etag"];
  ASSERT_EQ(etag.size(), 18u) << etag;  // "16 hex digits"
  // The client's copy is current: 304 without a body or a length.
  const std::string hdr2 = tmp_path("hdr");
  const Http same = curl(s(), "GET", "/", "", "", "-H 'If-None-Match: " + etag + "' -D " + hdr2);
  EXPECT_EQ(same.status, 304);
  EXPECT_TRUE(same.body.empty());
  auto h2 = header_fields(read_file(hdr2));
  EXPECT_EQ(h2["etag"], etag);
  EXPECT_EQ(h2.count("content-length"), 0u);
  EXPECT_EQ(curl(s(), "GET", "/", "", "", "-H 'If-None-Match: \"x\", W/" + etag + "'").status, 304);
  const Http other = curl(s(), "GET", "/", "", "", "-H 'If-None-Match: \"0000\"'");
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.body, page.body);
  // The bundle's files.
  for (auto [path, type] : {std::pair{"/assets/app.js", "text/javascript; charset=utf-8"},
                            std::pair{"/assets/app.css", "text/css; charset=utf-8"},
                            std::pair{"/favicon.svg", "image/svg+xml"}}) {
    const std::string d = tmp_path("hdr");
    const Http a = curl(s(), "GET", path, "", "", "-D " + d);
    EXPECT_EQ(a.status, 200) << path;
    EXPECT_GT(a.body.size(), 100u) << path;
    auto ha = header_fields(read_file(d));
    EXPECT_EQ(ha["content-type"], type) << path;
    EXPECT_EQ(ha.count("content-security-policy"), 0u) << path;
    EXPECT_FALSE(ha["etag"].empty()) << path;
  }
  expect_error(curl(s(), "GET", "/index.html", "", ""), 404);
  expect_error(curl(s(), "GET", "/assets/", "", ""), 404);
  expect_error(curl(s(), "POST", "/", "{}", ""), 405);
}

TEST_F(ServerTest, UsageCarriesRewindFigures) {
  const json req = chat_body("Tell me about the tides near the old harbour wall.", 5);
  ASSERT_EQ(post(s(), "/v1/chat/completions", req).status, 200);
  const Http b = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(b.status, 200) << b.body;
  const json u = b.j()["usage"];
  const json& r = u["rewind"];
  ASSERT_TRUE(r.is_object()) << b.body;
  EXPECT_EQ(r["cached_tokens"], u["prompt_tokens_details"]["cached_tokens"]);
  EXPECT_EQ(r["cached_tokens"].get<int>() + r["rerun_tokens"].get<int>(),
            u["prompt_tokens"].get<int>());
  EXPECT_EQ(r["resumed_at"], r["cached_tokens"]);
  EXPECT_EQ(r["diverged_at"], u["prompt_tokens"]);  // an exact repeat
  EXPECT_EQ(r["hit"], "exact");
  EXPECT_GT(r["ttft_ms"].get<double>(), 0);
  EXPECT_GE(r["decode_ms"].get<double>(), 0);
  // The streamed usage chunk carries the same fields, and they match /v1/cache's row.
  const Http st =
      post(s(), "/v1/chat/completions",
           chat_body("Tell me about the tides near the old harbour wall.", 5,
                     {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(st.status, 200);
  json last, usage;
  for (const std::string& d : sse_data(st.body)) {
    if (d == "[DONE]") continue;
    last = json::parse(d);
    if (last.contains("usage") && last["usage"].is_object()) usage = last["usage"];
  }
  ASSERT_TRUE(usage.is_object() && usage["rewind"].is_object()) << st.body;
  const json rows = curl(s(), "GET", "/v1/cache").j()["recent"];
  const json* row = nullptr;
  for (const auto& x : rows)
    if (x["id"] == last["id"]) row = &x;
  ASSERT_NE(row, nullptr) << rows.dump();
  EXPECT_EQ((*row)["resumed_at"], usage["rewind"]["resumed_at"]);
  EXPECT_EQ((*row)["rerun_tokens"], usage["rewind"]["rerun_tokens"]);
  EXPECT_EQ((*row)["diverged_at"], usage["rewind"]["diverged_at"]);
}

TEST_F(ServerTest, CacheTreeShowsBranchesCheckpointsAndTheLastPath) {
  auto conv = [](const std::string& first) {
    json b = chat_body(first, 4);
    b["messages"].push_back({{"role", "assistant"}, {"content", "The keepers rowed out at dawn."}});
    b["messages"].push_back({{"role", "user"}, {"content", "And what did they eat all winter?"}});
    return b;
  };
  ASSERT_EQ(
      post(s(), "/v1/chat/completions", conv("Where did the lighthouse keepers live?")).status,
      200);
  const Http b = post(s(), "/v1/chat/completions", conv("Where did the lighthouse keepers sleep?"));
  ASSERT_EQ(b.status, 200) << b.body;
  const json u = b.j()["usage"]["rewind"];
  const Http h = curl(s(), "GET", "/v1/cache/tree");
  ASSERT_EQ(h.status, 200) << h.body;
  const json t = h.j();
  EXPECT_EQ(t["enabled"], true);
  EXPECT_GE(t["total_nodes"].get<int>(), 3);  // a shared prefix and two branches
  EXPECT_EQ(t["listed_nodes"], t["total_nodes"]);
  EXPECT_TRUE(t["version"].is_number_unsigned());
  EXPECT_EQ(t["budget_bytes"], 4096ll << 20);
  const json& last = t["last"];
  ASSERT_TRUE(last.is_object()) << h.body;
  EXPECT_EQ(last["id"], b.j()["id"]);
  EXPECT_EQ(last["diverged_at"], u["diverged_at"]);
  EXPECT_EQ(last["resumed_at"], u["resumed_at"]);
  EXPECT_GT(u["resumed_at"].get<int>(), 0);  // resumed from the system prompt's checkpoint
  EXPECT_EQ(last["path_matched"], last["history_tokens"]);
  const json& nodes = t["nodes"];
  std::set<std::string> kinds_on_path;
  int64_t pos = 0;
  for (const auto& i : last["path"]) {
    const json& n = nodes[i.get<size_t>()];
    EXPECT_EQ(n["start"].get<int64_t>(), pos);  // the path is contiguous from the root
    pos = n["end"].get<int64_t>();
    for (const auto& sn : n["snapshots"]) {
      EXPECT_GT(sn["pos"].get<int64_t>(), n["start"].get<int64_t>());
      EXPECT_LE(sn["pos"].get<int64_t>(), n["end"].get<int64_t>());
      for (const auto& k : sn["kinds"]) kinds_on_path.insert(k.get<std::string>());
    }
  }
  EXPECT_EQ(pos, last["history_tokens"].get<int64_t>());
  for (const char* k : {"anchor", "boundary", "prompt_end", "reply_end"})
    EXPECT_TRUE(kinds_on_path.count(k)) << k << " in " << h.body;
  // A node on the path ends where the second conversation left the first one (the shared
  // server's cache may hold other tests' conversations, which split the path earlier too).
  bool ends_at_divergence = false;
  for (const auto& i : last["path"])
    ends_at_divergence |= nodes[i.get<size_t>()]["end"] == u["diverged_at"];
  EXPECT_TRUE(ends_at_divergence) << "diverged_at " << u["diverged_at"] << " in " << h.body;
  // Bounded: one listed node besides the path, the rest folded into aggregates.
  const json small = curl(s(), "GET", "/v1/cache/tree?max_nodes=1").j();
  EXPECT_EQ(small["listed_nodes"].get<size_t>(), last["path"].size());
  int64_t folded = 0;
  for (const auto& n : small["nodes"])
    if (n.value("aggregate", false)) folded += n["subtree"]["nodes"].get<int64_t>();
  EXPECT_EQ(folded + small["listed_nodes"].get<int64_t>(), small["total_nodes"].get<int64_t>());
  expect_error(curl(s(), "GET", "/v1/cache/tree?max_nodes=0"), 400, "max_nodes");
  expect_error(curl(s(), "GET", "/v1/cache/tree?depth=3"), 400, "unknown query parameter");
  expect_error(curl(s(), "GET", "/v1/cache/tree", "", ""), 401);
}

TEST_F(ServerTest, Unauthorized) {
  const std::string body = chat_body("x", 2).dump();
  expect_error(curl(s(), "POST", "/v1/chat/completions", body, ""), 401, "API key");
  expect_error(curl(s(), "POST", "/v1/chat/completions", body, "wrong"), 401);
  expect_error(
      curl(s(), "POST", "/v1/completions", completion_body("x", 2).dump(), "wrong-key-123"), 401);
  expect_error(curl(s(), "GET", "/v1/models", "", ""), 401);
  expect_error(curl(s(), "GET", "/v1/cache", "", ""), 401);
  expect_error(curl(s(), "GET", "/metrics", "", ""), 401);
  EXPECT_EQ(curl(s(), "GET", "/health", "", "").status, 200);
}

TEST_F(ServerTest, BadRequests) {
  const double submitted0 = metric(s(), "rewind_requests_submitted_total");
  expect_error(curl(s(), "POST", "/v1/chat/completions", "{not json"), 400, "not valid JSON");
  expect_error(curl(s(), "POST", "/v1/chat/completions", "{}"), 400, "'messages' is required");
  expect_error(
      curl(s(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":3}]})"),
      400);
  expect_error(
      post(s(), "/v1/chat/completions",
           {{"messages",
             json::array(
                 {{{"role", "user"},
                   {"content", json::array({{{"type", "image_url"},
                                             {"image_url", {{"url", "http://x/y.png"}}}}})}}})}}),
      400, "image_url");
  expect_error(post(s(), "/v1/chat/completions", chat_body("x", 2, {{"n", 9}})), 400,
               "'n' must be in [1, 4]");
  // n above the server's parallel sequences (4 here).
  expect_error(post(s(), "/v1/chat/completions", chat_body("x", 2, {{"n", 5}})), 400, "--parallel");
  expect_error(
      post(s(), "/v1/completions", completion_body("x", 2, {{"logit_bias", {{"99999", 1}}}})), 400,
      "out of range");
  expect_error(post(s(), "/v1/completions", completion_body("x", 2, {{"presence_penalty", 3}})),
               400, "presence_penalty");
  expect_error(post(s(), "/v1/completions", {{"prompt", json::array({1, 99999})}}), 400);
  expect_error(post(s(), "/v1/completions",
                    completion_body("x", 2, {{"stop", json::array({"a", "b", "c", "d", "e"})}})),
               400, "at most 4");
  // Prompt + max_tokens over the context size (32768).
  expect_error(post(s(), "/v1/completions", completion_body("hello world", 32768)), 400);
  std::string huge;
  for (int i = 0; i < 40000; ++i) huge += " a";
  expect_error(curl(s(), "POST", "/v1/completions", completion_body(huge, 1).dump()), 400,
               "context size");
  // Nothing was submitted for any of these.
  EXPECT_EQ(metric(s(), "rewind_requests_submitted_total"), submitted0);
}

// ---- sampling parameters, n, /tokenize, /detokenize, /props, ignored fields -------------------

// A POST through curl with the answer's header block (lower-cased names) beside the body.
struct HttpH : Http {
  std::string headers;  // in lower case
  // The value of the header `name` (lower case), "(none)" when absent.
  std::string header(const std::string& name) const {
    const std::string key = name + ": ";
    const size_t at = headers.find(key);
    if (at == std::string::npos) return "(none)";
    return headers.substr(at + key.size(), headers.find('\r', at) - at - key.size());
  }
};
HttpH post_h(const Server& s, const std::string& path, const json& body) {
  const std::string hdr = tmp_path("headers");
  HttpH h;
  static_cast<Http&>(h) = curl(s, "POST", path, body.dump(), kKey, "-D " + hdr);
  h.headers = read_file(hdr);
  for (char& c : h.headers)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return h;
}

// n = 3 with sampling: three choices indexed 0..2 whose texts equal single requests with
// seed + i, usage summing the completion tokens; the stream carries each choice's index, a
// finish chunk per choice, one usage chunk and the same texts.
// /v1/completions with several prompts: one answer, prompt k's choice c at index k * n + c,
// each what the prompt gives alone (greedy), usage summing every prompt; streamed, the chunks
// carry those indices. A prompt the limits refuse names its place, and nothing runs.
TEST_F(ServerTest, CompletionBatchesOfPrompts) {
  const std::vector<json> prompts = {"In the beginning", json::array({5, 6, 7}), "And God"};
  std::vector<std::string> alone;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const json& pr : prompts) {
    const json r = post(s(), "/v1/completions", completion_body("", 4, {{"prompt", pr}})).j();
    ASSERT_TRUE(r.contains("choices")) << r.dump();
    alone.push_back(r["choices"][0]["text"]);
    prompt_tokens += r["usage"]["prompt_tokens"].get<int64_t>();
    completion_tokens += r["usage"]["completion_tokens"].get<int64_t>();
  }
  const json batch =
      post(s(), "/v1/completions", completion_body("", 4, {{"prompt", prompts}, {"n", 2}})).j();
  ASSERT_TRUE(batch.contains("choices")) << batch.dump();
  ASSERT_EQ(batch["choices"].size(), 6u) << batch.dump();
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(batch["choices"][i]["index"], i);
    EXPECT_EQ(batch["choices"][i]["text"], alone[i / 2]) << i;
  }
  EXPECT_EQ(batch["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(batch["usage"]["completion_tokens"], 2 * completion_tokens);

  const Http st = post(
      s(), "/v1/completions",
      completion_body(
          "", 4,
          {{"prompt", prompts}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(st.status, 200);
  std::vector<std::string> text(3);
  int finished = 0;
  for (const std::string& d : sse_data(st.body)) {
    if (d == "[DONE]") break;
    const json c = json::parse(d);
    if (c["choices"].empty()) {
      EXPECT_EQ(c["usage"]["prompt_tokens"], prompt_tokens);
      continue;
    }
    const size_t i = c["choices"][0]["index"];
    ASSERT_LT(i, 3u) << d;
    text[i] += c["choices"][0]["text"].get<std::string>();
    finished += !c["choices"][0]["finish_reason"].is_null();
  }
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(text, alone);

  // echo: each choice's text starts with its prompt, whole and streamed.
  const json two = {"In the beginning", "And God"};
  const json echoed =
      post(s(), "/v1/completions", completion_body("", 4, {{"prompt", two}, {"echo", true}})).j();
  ASSERT_EQ(echoed["choices"].size(), 2u) << echoed.dump();
  EXPECT_EQ(echoed["choices"][0]["text"], "In the beginning" + alone[0]);
  EXPECT_EQ(echoed["choices"][1]["text"], "And God" + alone[2]);
  const Http es = post(s(), "/v1/completions",
                       completion_body("", 4, {{"prompt", two}, {"echo", true}, {"stream", true}}));
  std::vector<std::string> streamed(2);
  for (const std::string& d : sse_data(es.body))
    if (d != "[DONE]") {
      const json c = json::parse(d);
      streamed[c["choices"][0]["index"].get<size_t>()] += c["choices"][0]["text"];
    }
  EXPECT_EQ(streamed[0], "In the beginning" + alone[0]);
  EXPECT_EQ(streamed[1], "And God" + alone[2]);

  const double submitted0 = metric(s(), "rewind_requests_submitted_total");
  expect_error(post(s(), "/v1/completions",
                    completion_body("", 4, {{"prompt", {"x", std::string(400000, 'a')}}})),
               400, "prompt[1]: ");
  EXPECT_EQ(metric(s(), "rewind_requests_submitted_total"), submitted0);
}

TEST_F(ServerTest, ChoicesWholeAndStreamed) {
  const json one = chat_body("Tell me about the sea", 10,
                             {{"temperature", 1.0}, {"seed", 77}, {"ignore_eos", true}});
  json req = one;
  req["n"] = 3;
  const Http h = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  ASSERT_EQ(j["choices"].size(), 3u) << h.body;
  std::vector<std::string> texts;
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    const json& c = j["choices"][static_cast<size_t>(i)];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["finish_reason"], "length");
    texts.push_back(c["message"]["content"].get<std::string>());
    distinct.insert(texts.back());
    json single = one;
    single["seed"] = 77 + i;
    const Http sh = post(s(), "/v1/chat/completions", single);
    ASSERT_EQ(sh.status, 200) << sh.body;
    EXPECT_EQ(sh.j()["choices"][0]["message"]["content"], texts.back()) << "choice " << i;
  }
  EXPECT_GE(distinct.size(), 2u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 30);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + 30);

  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  const Http st = post(s(), "/v1/chat/completions", sreq);
  ASSERT_EQ(st.status, 200) << st.body;
  const auto data = sse_data(st.body);
  ASSERT_EQ(data.back(), "[DONE]");
  std::vector<std::string> got(3);
  std::vector<int> roles(3, 0), finishes(3, 0);
  int usages = 0;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json c = json::parse(data[i]);
    if (c.contains("usage") && !c["usage"].is_null()) {
      ++usages;
      EXPECT_EQ(c["usage"]["completion_tokens"], 30);
      EXPECT_EQ(i + 2, data.size());  // the last chunk before [DONE]
      continue;
    }
    ASSERT_EQ(c["choices"].size(), 1u);
    const json& ch = c["choices"][0];
    const int idx = ch["index"].get<int>();
    ASSERT_TRUE(idx >= 0 && idx < 3) << data[i];
    if (ch["delta"].contains("role")) ++roles[static_cast<size_t>(idx)];
    if (ch["delta"].contains("content"))
      got[static_cast<size_t>(idx)] += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) ++finishes[static_cast<size_t>(idx)];
  }
  EXPECT_EQ(usages, 1);
  EXPECT_EQ(got, texts);
  EXPECT_EQ(roles, std::vector<int>(3, 1));
  EXPECT_EQ(finishes, std::vector<int>(3, 1));

  // Completions too, with the prompt's cache figures from the one prefill.
  const Http c =
      post(s(), "/v1/completions",
           completion_body("Once upon a time", 5,
                           {{"n", 2}, {"temperature", 0.8}, {"seed", 3}, {"ignore_eos", true}}));
  ASSERT_EQ(c.status, 200) << c.body;
  ASSERT_EQ(c.j()["choices"].size(), 2u);
  EXPECT_EQ(c.j()["choices"][1]["index"], 1);
  EXPECT_EQ(c.j()["usage"]["completion_tokens"], 10);
}

// Penalties change a greedy reply; a +100 logit_bias forces its token at every step.
TEST_F(ServerTest, PenaltiesAndLogitBias) {
  const json base = completion_body("the sea the sea the sea", 16, {{"ignore_eos", true}});
  const Http plain = post(s(), "/v1/completions", base);
  ASSERT_EQ(plain.status, 200) << plain.body;
  json pen = base;
  pen["frequency_penalty"] = 2.0;
  pen["presence_penalty"] = 2.0;
  pen["repetition_penalty"] = 3.0;
  const Http p = post(s(), "/v1/completions", pen);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_NE(p.j()["choices"][0]["text"], plain.j()["choices"][0]["text"]);
  // The same penalised request again: the same text (deterministic).
  EXPECT_EQ(post(s(), "/v1/completions", pen).j()["choices"][0]["text"],
            p.j()["choices"][0]["text"]);

  // A token the greedy reply does not start with, forced four times.
  const Http t = post(s(), "/tokenize", {{"content", "the sea"}});
  ASSERT_EQ(t.status, 200) << t.body;
  const Http first = post(s(), "/tokenize", {{"content", plain.j()["choices"][0]["text"]}});
  int forced_id = -1;
  const json t_ids = t.j()["tokens"], first_ids = first.j()["tokens"];
  for (const json& id : t_ids)
    if (id != first_ids[0]) forced_id = id.get<int>();
  ASSERT_GE(forced_id, 0) << t.body;
  json forced = base;
  forced["max_tokens"] = 4;
  forced["logit_bias"] = {{std::to_string(forced_id), 100}};
  const Http f = post(s(), "/v1/completions", forced);
  ASSERT_EQ(f.status, 200) << f.body;
  const Http want = post(s(), "/detokenize", {{"tokens", std::vector<int>(4, forced_id)}});
  EXPECT_EQ(f.j()["choices"][0]["text"], want.j()["content"]) << f.body;
}

// /apply-template (llama.cpp's): the prompt a chat request runs, as text. Tokenized, it is as
// many tokens as the chat's usage counts; with tools, the template shows them; a malformed
// request is the chat endpoint's 400.
TEST_F(ServerTest, ApplyTemplateShowsTheRenderedPrompt) {
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "Hello there"}}});
  const Http a = post(s(), "/apply-template", {{"messages", messages}});
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string prompt = a.j()["prompt"];
  EXPECT_NE(prompt.find("Be brief."), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("Hello there"), std::string::npos) << prompt;
  const Http t = post(s(), "/tokenize", {{"content", prompt}});
  ASSERT_EQ(t.status, 200) << t.body;
  const Http c = post(s(), "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j()["usage"]["prompt_tokens"], t.j()["tokens"].size());
  const json tools = json::array(
      {{{"type", "function"},
        {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
  const Http w = post(s(), "/apply-template", {{"messages", messages}, {"tools", tools}});
  ASSERT_EQ(w.status, 200) << w.body;
  EXPECT_NE(w.j()["prompt"].get<std::string>().find("get_weather"), std::string::npos) << w.body;
  expect_error(post(s(), "/apply-template", {{"prompt", "x"}}), 400, "messages");
  expect_error(curl(s(), "GET", "/apply-template"), 405);
}

// A final assistant message is continued (llama.cpp's assistant prefill): the prompt stops
// right after its text, and the reply is what a raw completion of that prompt gives.
TEST_F(ServerTest, FinalAssistantMessageIsContinued) {
  const json messages =
      json::array({{{"role", "user"}, {"content", "Who was Moses?"}},
                   {{"role", "assistant"}, {"content", "Moses was the man who"}}});
  const Http a = post(s(), "/apply-template", {{"messages", messages}});
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string prompt = a.j()["prompt"];
  ASSERT_GE(prompt.size(), 21u);
  EXPECT_EQ(prompt.substr(prompt.size() - 21), "Moses was the man who") << prompt;
  const Http c = post(s(), "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 12}});
  ASSERT_EQ(c.status, 200) << c.body;
  const Http raw = post(s(), "/v1/completions", completion_body(prompt, 12));
  ASSERT_EQ(raw.status, 200) << raw.body;
  EXPECT_EQ(c.j()["choices"][0]["message"]["content"], raw.j()["choices"][0]["text"]) << c.body;
  EXPECT_EQ(c.j()["usage"]["prompt_tokens"], raw.j()["usage"]["prompt_tokens"]);
  // An empty final assistant message is a turn to answer, as before.
  json open = messages;
  open[1]["content"] = "";
  const Http e = post(s(), "/apply-template", {{"messages", open}});
  ASSERT_EQ(e.status, 200) << e.body;
  EXPECT_EQ(e.j()["prompt"].get<std::string>().find("Moses was the man who"), std::string::npos);
}

TEST_F(ServerTest, TokenizeAndDetokenize) {
  const Http t = post(s(), "/tokenize", {{"content", "Hello world"}});
  ASSERT_EQ(t.status, 200) << t.body;
  const json ids = t.j()["tokens"];
  ASSERT_TRUE(ids.is_array() && !ids.empty()) << t.body;
  // The ids a completions prompt runs: the usage counts them.
  const Http c = post(s(), "/v1/completions", completion_body("Hello world", 1));
  EXPECT_EQ(c.j()["usage"]["prompt_tokens"], ids.size());
  const Http d = post(s(), "/detokenize", {{"tokens", ids}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.j(), json({{"content", "Hello world"}}));
  // Pieces: one per id, concatenating to the text; add_special adds nothing (this tokenizer
  // puts no BOS before a prompt).
  const Http p = post(s(), "/tokenize",
                      {{"content", "Hello world"}, {"with_pieces", true}, {"add_special", true}});
  ASSERT_EQ(p.status, 200) << p.body;
  std::string joined;
  ASSERT_EQ(p.j()["tokens"].size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(p.j()["tokens"][i]["id"], ids[i]);
    joined += p.j()["tokens"][i]["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, "Hello world");
  // Special tokens are recognised unless parse_special is false.
  const Http sp = post(s(), "/tokenize", {{"content", "<|im_end|>"}});
  EXPECT_EQ(sp.j()["tokens"].size(), 1u) << sp.body;
  const Http nsp = post(s(), "/tokenize", {{"content", "<|im_end|>"}, {"parse_special", false}});
  EXPECT_GT(nsp.j()["tokens"].size(), 1u) << nsp.body;
  // A multi-byte character cut between tokens: a piece that is not UTF-8 comes as bytes, and
  // detokenizing part of it gives U+FFFD.
  const Http e =
      post(s(), "/tokenize", {{"content", "\xe6\xb5\xb7\xe7\x81\xaf"}, {"with_pieces", true}});
  ASSERT_EQ(e.status, 200) << e.body;
  std::string bytes;
  const json pieces = e.j()["tokens"];
  for (const json& x : pieces) {
    if (x["piece"].is_string()) {
      bytes += x["piece"].get<std::string>();
    } else {
      ASSERT_TRUE(x["piece"].is_array()) << e.body;
      for (const json& b : x["piece"]) bytes += static_cast<char>(b.get<int>());
    }
  }
  EXPECT_EQ(bytes, "\xe6\xb5\xb7\xe7\x81\xaf") << e.body;

  // Malformed bodies: 400 naming the field; wrong method 405; not JSON 415; key required.
  expect_error(post(s(), "/tokenize", json::object()), 400, "'content' is required");
  expect_error(post(s(), "/tokenize", {{"content", 3}}), 400, "'content' must be a string");
  expect_error(post(s(), "/tokenize", {{"content", "a"}, {"with_pieces", "yes"}}), 400,
               "with_pieces");
  expect_error(curl(s(), "POST", "/tokenize", "{\"content\":"), 400, "not valid JSON");
  expect_error(curl(s(), "POST", "/tokenize", "[1]"), 400, "JSON object");
  expect_error(post(s(), "/detokenize", {{"tokens", {1, -5}}}), 400, "'tokens[1]'");
  expect_error(post(s(), "/detokenize", {{"tokens", {1, 1 << 30}}}), 400, "'tokens[1]'");
  expect_error(post(s(), "/detokenize", {{"tokens", "1 2"}}), 400, "must be an array");
  expect_error(post(s(), "/detokenize", json::object()), 400, "'tokens' is required");
  // Answers stay bounded: no more tokens than the context holds (32768 here).
  std::string long_text;
  for (int i = 0; i < 40000; ++i) long_text += " a";
  expect_error(post(s(), "/tokenize", {{"content", long_text}}), 400, "context size");
  expect_error(curl(s(), "GET", "/tokenize"), 405, "POST");
  expect_error(curl(s(), "POST", "/tokenize", "{}", ""), 401);
}

// A checkpoint whose tokenizer puts a BOS before a prompt (tokenizer_config.json's
// add_bos_token, or Nemotron-H's TemplateProcessing): completion prompts and /tokenize with
// add_special start with it, as Hugging Face's tokenizer(text) and llama.cpp's completions do;
// chat prompts are the template's text alone, as apply_chat_template and vLLM tokenize them.
TEST(ServerBos, CompletionPromptsStartWithTheTokenizersBos) {
  const std::string dir = tmp_path("bos_model");
  std::filesystem::remove_all(dir);
  std::filesystem::copy(model_dir(), dir, std::filesystem::copy_options::recursive);
  json cfg = json::parse(read_file(dir + "/tokenizer_config.json"));
  cfg["add_bos_token"] = true;
  cfg["bos_token"] = "<|endoftext|>";
  test::write_file(dir + "/tokenizer_config.json", cfg.dump());
  auto srv = Server::start({"--api-key", kKey}, dir);
  ASSERT_NE(srv, nullptr);

  EXPECT_NE(srv->log().find("the tokenizer adds <|endoftext|> ("), std::string::npos) << srv->log();
  const Http props = curl(*srv, "GET", "/props");
  ASSERT_EQ(props.status, 200) << props.body;
  EXPECT_EQ(props.j()["bos_token"], "<|endoftext|>");
  const Http plain = post(*srv, "/tokenize", {{"content", "Hello world"}});
  const Http bos = post(*srv, "/tokenize", {{"content", "Hello world"}, {"add_special", true}});
  const Http eot = post(*srv, "/tokenize", {{"content", "<|endoftext|>"}});
  ASSERT_EQ(bos.status, 200) << bos.body;
  ASSERT_EQ(eot.j()["tokens"].size(), 1u) << eot.body;
  const json plain_ids = plain.j()["tokens"];
  json want = json::array({eot.j()["tokens"][0]});
  for (const json& id : plain_ids) want.push_back(id);
  EXPECT_EQ(bos.j()["tokens"], want);
  EXPECT_EQ(props.j()["completion_prompt"]["prefix_ids"], json::array({want[0]}));

  const Http c = post(*srv, "/v1/completions", completion_body("Hello world", 1));
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j()["usage"]["prompt_tokens"], want.size());
  // Token prompts run as given.
  const Http t = post(*srv, "/v1/completions",
                      {{"prompt", plain.j()["tokens"]}, {"max_tokens", 1}, {"temperature", 0}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.j()["usage"]["prompt_tokens"], plain.j()["tokens"].size());

  const json messages = json::array({{{"role", "user"}, {"content", "Hello world"}}});
  const Http a = post(*srv, "/apply-template", {{"messages", messages}});
  ASSERT_EQ(a.status, 200) << a.body;
  const Http at = post(*srv, "/tokenize", {{"content", a.j()["prompt"]}});
  const Http chat = post(*srv, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.j()["usage"]["prompt_tokens"], at.j()["tokens"].size());
}

// A GGUF file's template renders bos_token as the text of tokenizer.ggml.bos_token_id (as
// llama.cpp's), the same as the checkpoint it was converted from.
TEST(ServerBos, GgufTemplatesGetTheBosText) {
  const std::string dir = tmp_path("bos_template");
  std::filesystem::remove_all(dir);
  std::filesystem::copy(model_dir(), dir, std::filesystem::copy_options::recursive);
  json cfg = json::parse(read_file(dir + "/tokenizer_config.json"));
  cfg["bos_token"] = "<|endoftext|>";
  cfg.erase("chat_template");
  test::write_file(dir + "/tokenizer_config.json", cfg.dump());
  test::write_file(dir + "/chat_template.jinja", "{{ bos_token }}|{{ messages[0].content }}");
  int rc = -1;
  const std::string out = test::run_command(std::string(REWIND_BINARY) + " convert -q --in " + dir +
                                                " -o " + dir + ".gguf --type f32 2>&1",
                                            &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const std::string& model : {dir, dir + ".gguf"}) {
    auto srv = Server::start({"--api-key", kKey}, model);
    ASSERT_NE(srv, nullptr);
    const Http a = post(*srv, "/apply-template",
                        {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.j()["prompt"], "<|endoftext|>|hi") << model;
  }
}

TEST_F(ServerTest, PropsDescribeTheServer) {
  const Http h = curl(s(), "GET", "/props");
  ASSERT_EQ(h.status, 200) << h.body;
  const json j = h.j();
  EXPECT_EQ(j["n_ctx"], 32768);
  EXPECT_EQ(j["total_slots"], 4);
  EXPECT_EQ(j["max_choices"], 4);
  EXPECT_EQ(j["default_generation_settings"]["n_ctx"], 32768);
  EXPECT_TRUE(j["default_generation_settings"]["params"]["temperature"].is_number());
  EXPECT_EQ(j["default_generation_settings"]["params"]["repeat_last_n"], 64);
  EXPECT_NE(j["model_path"].get<std::string>().find("tiny"), std::string::npos);
  EXPECT_TRUE(j["chat_template_source"] == "model" || j["chat_template_source"] == "rewind-chatml");
  EXPECT_TRUE(j["bos_token"].is_string() && j["eos_token"].is_string()) << h.body;
  EXPECT_EQ(j["completion_prompt"]["prefix_ids"], json::array());
  EXPECT_EQ(j["completion_prompt"]["suffix_ids"], json::array());
  EXPECT_EQ(j["cache"]["enabled"], true);
  EXPECT_GT(j["cache"]["budget_bytes"].get<int64_t>(), 0);
  EXPECT_GT(j["cache"]["checkpoint_interval"].get<int64_t>(), 0);
  EXPECT_EQ(j["speculative"]["kind"], "off");
  EXPECT_EQ(j["build_info"].get<std::string>().rfind("rewind ", 0), 0u) << j["build_info"];
  expect_error(curl(s(), "GET", "/props", "", ""), 401);
}

// Unknown top-level fields are ignored and named in X-Rewind-Ignored-Fields on every endpoint
// with a JSON body; known fields never appear there, and no header comes when nothing was
// ignored.
TEST_F(ServerTest, IgnoredFieldsHeader) {
  auto ignored = [](const HttpH& h) { return h.header("x-rewind-ignored-fields"); };
  HttpH h = post_h(s(), "/v1/chat/completions",
                   chat_body("x", 2, {{"user", "u"}, {"store", true}, {"n", 1}}));
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(ignored(h), "store,user");  // nlohmann::json writes keys sorted
  h = post_h(s(), "/v1/chat/completions",
             chat_body("x", 2, {{"stream", true}, {"brand_new_option", 1}}));
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(ignored(h), "brand_new_option");
  h = post_h(s(), "/v1/completions", completion_body("x", 2, {{"messages", json::array()}}));
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(ignored(h), "messages");
  h = post_h(s(), "/tokenize", {{"content", "x"}, {"n_probs", 3}});
  EXPECT_EQ(ignored(h), "n_probs");
  h = post_h(s(), "/detokenize", {{"tokens", {1}}, {"x", 1}});
  EXPECT_EQ(ignored(h), "x");
  h = post_h(s(), "/v1/completions", completion_body("x", 2));
  EXPECT_EQ(ignored(h), "(none)");
}

// ---- structured output and forced tool calls ------------------------------------------------

const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer", "minimum": 0, "maximum": 130},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2}},
  "required": ["name", "age", "tags"], "additionalProperties": false})";

void expect_valid_json(const std::string& text, const std::string& schema_text) {
  const json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
  const auto schema = nlohmann::ordered_json::parse(schema_text);
  std::string why;
  EXPECT_TRUE(schema_test::validate(v, schema, schema, why)) << why << "\n" << text;
}

// The content of a streamed chat reply and its finish reason.
std::pair<std::string, std::string> streamed_content(const Http& h) {
  std::string content, finish;
  for (const std::string& d : sse_data(h.body)) {
    if (d == "[DONE]") continue;
    const json c = json::parse(d);
    if (c["choices"].empty()) continue;
    const json& delta = c["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  return {content, finish};
}

TEST_F(ServerTest, StructuredOutputJsonSchemaAndJsonObject) {
  const json rf = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "person"}, {"strict", true}, {"schema", json::parse(kPersonSchema)}}}};
  const json req = chat_body("Describe a person.", 200, {{"response_format", rf}});
  const Http h = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(h.status, 200) << h.body;
  const json choice = h.j()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop") << h.body;
  const std::string content = choice["message"]["content"];
  expect_valid_json(content, kPersonSchema);
  // Streamed, and with speculation: the same greedy text.
  json sreq = req;
  sreq["stream"] = true;
  const auto [streamed, finish] = streamed_content(post(s(), "/v1/chat/completions", sreq));
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(finish, "stop");
  json spec = req;
  spec["speculative"] = "ngram";
  const Http hs = post(s(), "/v1/chat/completions", spec);
  ASSERT_EQ(hs.status, 200) << hs.body;
  EXPECT_EQ(hs.j()["choices"][0]["message"]["content"], content);
  // json_object: any object.
  const Http ho = post(
      s(), "/v1/chat/completions",
      chat_body(
          "Reply.", 120,
          {{"response_format", {{"type", "json_object"}}}, {"temperature", 1.0}, {"seed", 5}}));
  ASSERT_EQ(ho.status, 200) << ho.body;
  const json oc = ho.j()["choices"][0];
  if (oc["finish_reason"] == "stop") {
    const json v = json::parse(oc["message"]["content"].get<std::string>(), nullptr, false);
    EXPECT_TRUE(v.is_object()) << oc["message"]["content"];
  } else {
    EXPECT_EQ(oc["finish_reason"], "length");
    EXPECT_EQ(oc["message"]["content"].get<std::string>().substr(0, 1), "{");
  }
  // The compiled grammars and their masks are a memory kind, within the grammar cache's cap
  // (256 MiB by default) plus the vocabulary trie.
  const double g = metric(s(), "rewind_memory_bytes{kind=\"grammar\"}");
  EXPECT_GT(g, 0.0);
  EXPECT_LT(g, 256.0 * 1024 * 1024 + 64.0 * 1024 * 1024);
}

TEST_F(ServerTest, CompletionsGrammarAndResponseFormat) {
  // ignore_eos too: the grammar still ends the reply, and its end token is not text.
  const Http h = post(s(), "/v1/completions",
                      completion_body("The answer is", 20,
                                      {{"grammar", "root ::= (\"yes\" | \"no\") \", \" [0-9]{1,3}"},
                                       {"ignore_eos", true}}));
  ASSERT_EQ(h.status, 200) << h.body;
  const json c = h.j()["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop") << h.body;
  EXPECT_TRUE(std::regex_match(c["text"].get<std::string>(), std::regex("(yes|no), [0-9]{1,3}")))
      << c["text"];
  const json rf = {{"type", "json_schema"},
                   {"json_schema", {{"name", "p"}, {"schema", json::parse(kPersonSchema)}}}};
  const Http hj =
      post(s(), "/v1/completions", completion_body("Person:", 200, {{"response_format", rf}}));
  ASSERT_EQ(hj.status, 200) << hj.body;
  EXPECT_EQ(hj.j()["choices"][0]["finish_reason"], "stop") << hj.body;
  expect_valid_json(hj.j()["choices"][0]["text"], kPersonSchema);
}

TEST_F(ServerTest, StructuredOutputErrorsAre400) {
  const double submitted0 = metric(s(), "rewind_requests_submitted_total");
  const json bad_schema = {{"type", "json_schema"},
                           {"json_schema",
                            {{"name", "x"},
                             {"strict", true},
                             {"schema", {{"type", "string"}, {"pattern", "^([a-z])\\1$"}}}}}};
  expect_error(
      post(s(), "/v1/chat/completions", chat_body("x", 5, {{"response_format", bad_schema}})), 400,
      "backreferences are not supported at offset 8 in 'pattern' at #");
  expect_error(
      post(s(), "/v1/completions", completion_body("x", 5, {{"response_format", bad_schema}})), 400,
      "backreferences are not supported");
  expect_error(
      post(s(), "/v1/completions", completion_body("x", 5, {{"grammar", "root ::= (\"a\""}})), 400,
      "'grammar': ");
  expect_error(post(s(), "/v1/completions",
                    completion_body("x", 5, {{"grammar", "root ::= undefined-rule"}})),
               400, "undefined-rule");
  expect_error(
      post(s(), "/v1/chat/completions", chat_body("x", 5, {{"grammar", "start ::= \"a\""}})), 400,
      "'grammar': ");
  expect_error(post(s(), "/v1/chat/completions",
                    chat_body("x", 5, {{"response_format", {{"type", "yaml"}}}})),
               400, "'yaml' is not one of text, json_object, json_schema");
  json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  expect_error(
      post(s(), "/v1/chat/completions",
           chat_body("x", 5,
                     {{"tools", tools},
                      {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}})),
      400, "not among 'tools'");
  tools[0]["function"]["parameters"] = {
      {"type", "object"}, {"properties", {{"n", {{"type", "number"}, {"multipleOf", 0.25}}}}}};
  tools[0]["function"]["strict"] = true;
  expect_error(post(s(), "/v1/chat/completions",
                    chat_body("x", 5, {{"tools", tools}, {"tool_choice", "required"}})),
               400, "'multipleOf' 0.25 at #/properties/n is not supported");
  // A grammar whose first byte opens more alternatives than a state may hold (an enum of
  // thousands of values): a 400, where it once ended the process.
  json many = json::array();
  for (int i = 0; i < 5000; ++i) many.push_back(i);
  const json big_enum = {{"type", "json_schema"},
                         {"json_schema", {{"name", "x"}, {"schema", {{"enum", many}}}}}};
  expect_error(
      post(s(), "/v1/chat/completions", chat_body("x", 5, {{"response_format", big_enum}})), 400,
      "stacks in one state");
  EXPECT_EQ(metric(s(), "rewind_requests_submitted_total"), submitted0);
  EXPECT_EQ(post(s(), "/v1/completions", completion_body("still here", 2)).status, 200);
}

// A schema or tool not marked strict (OpenAI's default) is relaxed where the subset lacks a
// keyword: the request runs, the answer's X-Rewind-Schema-Relaxed header names each change,
// and what the subset holds is still enforced.
TEST_F(ServerTest, SchemasNotStrictAreRelaxedAndSaySo) {
  auto relaxed = [](const HttpH& h) { return h.header("x-rewind-schema-relaxed"); };
  const json format = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "x"},
        {"schema",
         {{"type", "object"},
          {"properties", {{"code", {{"type", "string"}, {"pattern", "^([a-z])\\1$"}}}}},
          {"required", {"code"}},
          {"additionalProperties", false}}}}}};
  HttpH h = post_h(s(), "/v1/chat/completions",
                   chat_body("x", 40, {{"response_format", format}, {"ignore_eos", true}}));
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(relaxed(h),
            "response_format: 'pattern' (pattern: backreferences are not supported at offset 8) "
            "at #/properties/code");
  const json reply = json::parse(
      json::parse(h.body)["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  if (!reply.is_discarded()) {  // cut by max_tokens, it may not be complete
    EXPECT_TRUE(reply.contains("code")) << reply.dump();
    EXPECT_EQ(reply.size(), 1u) << reply.dump();
  }
  json tools =
      json::array({{{"type", "function"},
                    {"function",
                     {{"name", "f"},
                      {"parameters",
                       {{"type", "object"},
                        {"properties", {{"n", {{"type", "number"}, {"multipleOf", 0.25}}}}}}}}}}});
  h = post_h(s(), "/v1/chat/completions",
             chat_body("x", 5, {{"tools", tools}, {"tool_choice", "required"}}));
  ASSERT_EQ(h.status, 200) << h.body;
  // (post_h gives the header lines in lower case)
  EXPECT_EQ(relaxed(h), "tools[0].function.parameters: 'multipleof' 0.25 at #/properties/n");
  h = post_h(s(), "/v1/completions", completion_body("x", 2));
  EXPECT_EQ(relaxed(h), "(none)");
}

// A strict schema's pattern, format and number bounds hold in the reply.
TEST_F(ServerTest, PatternsFormatsAndNumberBoundsConstrainReplies) {
  const json format = {{"type", "json_schema"},
                       {"json_schema",
                        {{"name", "x"},
                         {"strict", true},
                         {"schema",
                          {{"type", "object"},
                           {"properties",
                            {{"code", {{"type", "string"}, {"pattern", "^[A-Z]{3}-[0-9]{2}$"}}},
                             {"host", {{"type", "string"}, {"format", "hostname"}}},
                             {"p", {{"type", "number"}, {"minimum", 0}, {"maximum", 1}}}}},
                           {"required", {"code", "host", "p"}},
                           {"additionalProperties", false}}}}}};
  int complete = 0;
  for (uint64_t seed : {1, 2, 3}) {
    const Http r = post(s(), "/v1/chat/completions",
                        chat_body("x", 120,
                                  {{"response_format", format},
                                   {"temperature", 1.0},
                                   {"seed", seed},
                                   {"ignore_eos", true}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const json reply =
        json::parse(r.j()["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
    if (reply.is_discarded()) continue;  // cut by max_tokens
    ++complete;
    EXPECT_TRUE(std::regex_match(reply["code"].get<std::string>(), std::regex("[A-Z]{3}-[0-9]{2}")))
        << reply.dump();
    EXPECT_TRUE(std::regex_match(reply["host"].get<std::string>(),
                                 std::regex("[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")))
        << reply.dump();
    EXPECT_GE(reply["p"].get<double>(), 0.0) << reply.dump();
    EXPECT_LE(reply["p"].get<double>(), 1.0) << reply.dump();
  }
  EXPECT_GT(complete, 0) << "every reply was cut by max_tokens";
}

TEST_F(ServerTest, ForcedToolCallsFollowTheParameterSchemas) {
  const json weather = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
       "required": ["city", "days"]}}})");
  const json time = json::parse(R"({"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
       "required": ["zone"]}}})");
  for (const json& choice : {json("required"), json::parse(R"({"type": "function",
                                                             "function": {"name": "get_time"}})")}) {
    for (bool stream : {false, true}) {
      json req = chat_body("What is the weather in Paris?", 150,
                           {{"tools", json::array({weather, time})}, {"tool_choice", choice}});
      req["stream"] = stream;
      const Http h = post(s(), "/v1/chat/completions", req);
      ASSERT_EQ(h.status, 200) << h.body;
      json calls = json::array();
      std::string finish;
      if (stream) {
        for (const std::string& d : sse_data(h.body)) {
          if (d == "[DONE]") continue;
          const json c = json::parse(d);
          if (c["choices"].empty()) continue;
          const json& delta = c["choices"][0]["delta"];
          if (delta.contains("tool_calls"))
            for (const auto& tc : delta["tool_calls"]) calls.push_back(tc);
          if (!c["choices"][0]["finish_reason"].is_null())
            finish = c["choices"][0]["finish_reason"];
        }
      } else {
        const json c = h.j()["choices"][0];
        finish = c["finish_reason"];
        if (c["message"].contains("tool_calls")) calls = c["message"]["tool_calls"];
        // Parallel calls may run into max_tokens: then the reply says it was cut ("length" only
        // at the limit; below it the calls ended the reply).
        const int64_t used = h.j()["usage"]["completion_tokens"];
        if (finish == "length") {
          EXPECT_EQ(used, 150) << h.body;
        }
        if (used < 150) {
          EXPECT_EQ(finish, "tool_calls") << h.body;
        }
      }
      ASSERT_TRUE(finish == "tool_calls" || finish == "length") << h.body;
      ASSERT_FALSE(calls.empty()) << h.body;
      for (const json& call : calls) {
        const std::string name = call["function"]["name"];
        if (choice.is_object()) {
          EXPECT_EQ(name, "get_time");
        }
        ASSERT_TRUE(name == "get_weather" || name == "get_time") << name;
        const json& params = (name == "get_weather" ? weather : time)["function"]["parameters"];
        expect_valid_json(call["function"]["arguments"], params.dump());
      }
    }
  }
}

// tool_choice "auto" with a strict tool: the reply is constrained lazily (free text until the
// template's tool-call tag, then calls whose strict arguments follow their schema). A strict
// schema's refused keyword is a 400 under "auto" too (the grammar is built), one of a tool
// that is not strict is not; greedy text is the same with speculation; sampled replies end
// and their calls, when the model opens any, validate.
// Strict tools under tool_choice "auto": their schemas are checked (an unsupported keyword is a
// 400), and the lazy grammar gives the same reply with speculation. The test model's sampled
// replies seldom open a call, so a call is checked against its schema only when one comes; the
// grammar itself (free text up to the opening tag, the calls after it) is tested in
// tests/unit/tool_grammar_test.cpp.
TEST_F(ServerTest, StrictToolsUnderAutoAreCheckedAndExactUnderSpeculation) {
  json weather = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "strict": true, "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
       "required": ["city", "days"], "additionalProperties": false}}})");
  json loose = json::parse(R"({"type": "function", "function": {"name": "note",
      "parameters": {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.25}}}}})");
  json bad = weather;
  bad["function"]["parameters"]["properties"]["days"]["multipleOf"] = 0.5;
  expect_error(
      post(s(), "/v1/chat/completions", chat_body("x", 5, {{"tools", json::array({bad})}})), 400,
      "'multipleOf' 0.5 at #/properties/days is not supported");
  const json tools = json::array({weather, loose});
  const json req = chat_body("What is the weather in Paris?", 60, {{"tools", tools}});
  const Http h = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(h.status, 200) << h.body;
  json spec = req;
  spec["speculative"] = "ngram";
  const Http hs = post(s(), "/v1/chat/completions", spec);
  ASSERT_EQ(hs.status, 200) << hs.body;
  EXPECT_EQ(hs.j()["choices"][0]["message"], h.j()["choices"][0]["message"]);
  for (int seed = 0; seed < 4; ++seed) {
    json r = req;
    r["temperature"] = 1.0;
    r["seed"] = seed;
    const Http hr = post(s(), "/v1/chat/completions", r);
    ASSERT_EQ(hr.status, 200) << hr.body;
    const json c = hr.j()["choices"][0];
    if (!c["message"].contains("tool_calls")) continue;
    for (const json& call : c["message"]["tool_calls"])
      if (call["function"]["name"] == "get_weather")
        expect_valid_json(call["function"]["arguments"], weather["function"]["parameters"].dump());
  }
}

// One model by id (client.models.retrieve), percent-decoded.
TEST_F(ServerTest, ModelById) {
  const json j = curl(s(), "GET", "/v1/models").j();
  // One model by id (client.models.retrieve), percent-decoded; an unknown one is a 404.
  for (const char* path : {"/v1/models/tiny", "/v1/models/ti%6Ey"}) {
    const Http one = curl(s(), "GET", path);
    ASSERT_EQ(one.status, 200) << path << one.body;
    json a = one.j(), b = j["data"][0];
    a.erase("created");
    b.erase("created");
    EXPECT_EQ(a, b) << path;
  }
  // Without --alias a request may name any model (AnyModelNameWithoutAlias), but a lookup
  // answers only the listed id, as OpenAI's retrieve does.
  expect_error(curl(s(), "GET", "/v1/models/gpt-4"), 404, "does not exist");
  expect_error(curl(s(), "GET", "/v1/models/%zz"), 400, "bad percent escape");
  expect_error(curl(s(), "GET", "/v1/models/tiny", "", ""), 401);
  expect_error(curl(s(), "POST", "/v1/models/tiny", "{}"), 405);
}

// DELETE /v1/cache empties the RAM tier: the next repeat of a conversation is a miss (cold, the
// same reply), the answer counts what was dropped, and the cache fills again after it.
TEST_F(ServerTest, DeleteCacheEmptiesIt) {
  const json req = chat_body("A conversation about harbours, to be forgotten.", 4);
  const Http a = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(a.status, 200) << a.body;
  const Http d = curl(s(), "DELETE", "/v1/cache");
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_TRUE(d.j()["enabled"].get<bool>());
  EXPECT_GT(d.j()["cleared"]["nodes"].get<int64_t>(), 0) << d.body;
  EXPECT_GT(d.j()["cleared"]["bytes"].get<int64_t>(), 0) << d.body;
  const Http after = curl(s(), "GET", "/v1/cache");
  EXPECT_EQ(after.j()["counts"]["nodes"], 0) << after.body;
  EXPECT_EQ(after.j()["bytes"]["total"], 0) << after.body;
  const Http b = post(s(), "/v1/chat/completions", req);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.j()["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << b.body;
  EXPECT_EQ(a.j()["choices"], b.j()["choices"]);
  const Http again = curl(s(), "DELETE", "/v1/cache");
  EXPECT_GT(again.j()["cleared"]["nodes"].get<int64_t>(), 0) << again.body;
  expect_error(curl(s(), "DELETE", "/v1/cache", "", ""), 401);
}

// llama-server's paths without /v1 answer as the /v1 routes, and count under them.
TEST_F(ServerTest, PathsWithoutV1AreTheSameRoutes) {
  auto count_200 = [&] {
    return std::max(0.0, metric(s(),
                                "rewind_http_responses_total{endpoint=\"/v1/chat/completions\","
                                "status=\"200\"}"));
  };
  const double before = count_200();
  const json req = chat_body("Paths without the version prefix.", 4);
  const Http a = post(s(), "/v1/chat/completions", req), b = post(s(), "/chat/completions", req);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.j()["choices"], b.j()["choices"]);
  EXPECT_EQ(count_200(), before + 2);
  const Http c = post(s(), "/completions", completion_body("x", 2));
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.j()["object"], "text_completion");
  const Http m = curl(s(), "GET", "/models");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.j()["data"][0]["id"], "tiny");
  expect_error(curl(s(), "GET", "/models", "", ""), 401);
  expect_error(curl(s(), "GET", "/chat/completions"), 405, "POST");
  expect_error(curl(s(), "GET", "/models/tiny"), 404);
  // llama-server's /v1/health: /health, without the key.
  const Http h = curl(s(), "GET", "/v1/health", "", "");
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["status"], "ok");
}

TEST_F(ServerTest, NotFound) {
  expect_error(curl(s(), "GET", "/nope"), 404, "/nope");
  expect_error(curl(s(), "POST", "/v1/nope", "{}"), 404);
}

// The head of the first answer in `raw` (up to the blank line), and one header's value in it.
std::string head_of(const std::string& raw) {
  return raw.substr(0, raw.find("\r\n\r\n") + 2);
}
std::string header_value(const std::string& head, const std::string& name) {
  const size_t at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  const size_t from = at + name.size() + 4;
  return head.substr(from, head.find("\r\n", from) - from);
}

TEST_F(ServerTest, WrongMethodIs405WithAllow) {
  const std::string gen = completion_body("x", 2).dump();
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"GET", "/v1/chat/completions", "POST, OPTIONS"},
      {"PUT", "/v1/completions", "POST, OPTIONS"},
      {"POST", "/health", "GET, HEAD, OPTIONS"},
      {"DELETE", "/v1/models", "GET, HEAD, OPTIONS"},
      {"POST", "/metrics", "GET, HEAD, OPTIONS"},
      {"PATCH", "/v1/cache", "GET, HEAD, DELETE, OPTIONS"},
  };
  for (const auto& [method, path, allow] : cases) {
    Conn c(s().port());
    ASSERT_TRUE(c.ok());
    // A body as a POST would send it: read and dropped, the connection stays usable.
    c.send(method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kKey +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(gen.size()) +
           "\r\n\r\n" + gen +
           "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(c.read_to_eof(20s)) << method << " " << path;
    const std::string head = head_of(c.got());
    EXPECT_EQ(head.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << c.got();
    EXPECT_EQ(header_value(head, "Allow"), allow) << head;
    const json j = body_of(c.got());
    EXPECT_EQ(j["error"]["code"], "method_not_allowed") << c.got();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << c.got();
    EXPECT_EQ(count_of(c.got(), "{\"status\":\"ok\"}"), 1) << c.got();
  }
  // Through curl as well; an unknown path stays 404.
  expect_error(curl(s(), "GET", "/v1/completions"), 405, "POST");
  expect_error(curl(s(), "DELETE", "/v1/nope"), 404);
}

TEST_F(ServerTest, HeadAnswersAsGetWithoutBody) {
  for (const char* path : {"/health", "/v1/models", "/metrics", "/v1/cache"}) {
    Conn get(s().port());
    ASSERT_TRUE(get.ok());
    get.send("GET " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
             kKey + "\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(get.read_to_eof(20s));
    const std::string get_head = head_of(get.got());
    const std::string get_body = get.got().substr(get_head.size() + 2);
    ASSERT_EQ(get_head.rfind("HTTP/1.1 200", 0), 0u) << get.got();
    // HEAD, then a GET /health on the same connection: the second answer must follow the
    // first's head at once (no body bytes in between).
    Conn c(s().port());
    ASSERT_TRUE(c.ok());
    c.send("HEAD " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
           kKey + "\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(c.read_to_eof(20s)) << path;
    const std::string head = head_of(c.got());
    EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << c.got();
    EXPECT_EQ(header_value(head, "Content-Type"), header_value(get_head, "Content-Type"));
    const std::string len = header_value(head, "Content-Length");
    ASSERT_FALSE(len.empty()) << head;
    EXPECT_GT(std::stoll(len), 0) << head;
    if (std::string(path) == "/health") {
      EXPECT_EQ(len, std::to_string(get_body.size())) << head;
    }
    EXPECT_EQ(c.got().substr(head.size() + 2).rfind("HTTP/1.1 200", 0), 0u)
        << "HEAD " << path << " sent a body:\n"
        << c.got();
    EXPECT_EQ(count_of(c.got(), "{\"status\":\"ok\"}"), 1) << c.got();
  }
  // HEAD behind the key: 401 without a body too.
  Conn c(s().port());
  c.send("HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(c.read_to_eof(20s));
  EXPECT_EQ(c.got().rfind("HTTP/1.1 401", 0), 0u) << c.got();
  EXPECT_EQ(c.got().size(), head_of(c.got()).size() + 2) << c.got();
}

TEST_F(ServerTest, OptionsListsAllowWithoutCors) {
  for (const auto& [path, allow] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/chat/completions", "POST, OPTIONS"}, {"/v1/models", "GET, HEAD, OPTIONS"}}) {
    Conn c(s().port());
    c.send("OPTIONS " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n" +
           "Connection: close\r\n\r\n");
    ASSERT_TRUE(c.read_to_eof(20s));
    EXPECT_EQ(c.got().rfind("HTTP/1.1 204", 0), 0u) << c.got();
    EXPECT_EQ(header_value(head_of(c.got()), "Allow"), allow) << c.got();
    EXPECT_EQ(c.got().find("Access-Control"), std::string::npos) << c.got();  // CORS is off
    // A 204 carries no Content-Length (RFC 9110 8.6).
    EXPECT_EQ(header_value(head_of(c.got()), "Content-Length"), "") << c.got();
  }
}

TEST_F(ServerTest, BodyTooLarge) {
  std::string big(1100000, 'x');
  const std::string body = "{\"prompt\":\"" + big + "\"}";
  // curl sends Expect: 100-continue for a large body: refused before it is sent.
  expect_error(curl(s(), "POST", "/v1/completions", body), 413, "1048576");
  // Without Expect: refused from Content-Length.
  expect_error(curl(s(), "POST", "/v1/completions", body, kKey, "-H 'Expect:'"), 413);
  // Chunked, no Content-Length: cut off at the limit.
  expect_error(curl(s(), "POST", "/v1/completions", body, kKey,
                    "-H 'Transfer-Encoding: chunked' -H 'Expect:'"),
               413);
  // The server still works.
  EXPECT_EQ(post(s(), "/v1/completions", completion_body("still fine", 2)).status, 200);
}

// ---- concurrency, disconnects
// -----------------------------------------------------------------------

TEST_F(ServerTest, ConcurrentGreedyClientsMatchSolo) {
  const int n = 8;
  std::vector<json> reqs;
  for (int i = 0; i < n; ++i)
    reqs.push_back(
        chat_body("Client " + std::to_string(i) + " asks about " + std::string(i + 1, 'z'), 24,
                  {{"logprobs", true}, {"top_logprobs", 2}, {"ignore_eos", i % 2 == 0}}));
  std::vector<json> solo;
  for (const auto& r : reqs) {
    const Http h = post(s(), "/v1/chat/completions", r);
    ASSERT_EQ(h.status, 200) << h.body;
    solo.push_back(h.j()["choices"]);
  }
  // All at once.
  std::string cmd;
  std::vector<std::string> outs;
  for (int i = 0; i < n; ++i) {
    const std::string in = tmp_path("c.json"), out = tmp_path("c.out");
    write_file(in, reqs[i].dump());
    outs.push_back(out);
    cmd += "curl -sS -o " + out + " -H 'Authorization: Bearer " + kKey +
           "' -H 'Content-Type: application/json' --data-binary @" + in + " " + s().url() +
           "/v1/chat/completions & ";
  }
  cmd += "wait";
  int rc = 0;
  test::run_command(cmd, &rc);
  ASSERT_EQ(rc, 0);
  for (int i = 0; i < n; ++i) {
    const json j = json::parse(read_file(outs[i]), nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("choices")) << read_file(outs[i]);
    EXPECT_EQ(j["choices"], solo[i]) << "client " << i;
  }
}

TEST_F(ServerTest, DisconnectMidStreamCancels) {
  const json probe = chat_body("An unrelated question", 16, {{"logprobs", true}});
  const Http alone = post(s(), "/v1/chat/completions", probe);
  ASSERT_EQ(alone.status, 200);
  const double cancelled0 = metric(s(), "rewind_requests_total{outcome=\"cancelled\"}");
  const double generated0 = metric(s(), "rewind_generated_tokens_total");

  json longreq =
      completion_body("A very long story", 30000, {{"ignore_eos", true}, {"stream", true}});
  RawClient c(s().port(), "/v1/completions", longreq.dump());
  ASSERT_TRUE(c.ok());
  const std::string got = c.read_until("\"text\"");  // a first token has streamed
  ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
  ASSERT_NE(got.find("data: "), std::string::npos) << got;
  // Another client while the long one runs, then hang up the long one.
  const Http during = post(s(), "/v1/chat/completions", probe);
  c.close();
  EXPECT_TRUE(wait_for([&] {
    return metric(s(), "rewind_requests_total{outcome=\"cancelled\"}") >= cancelled0 + 1;
  })) << "the disconnected stream was not cancelled";
  EXPECT_TRUE(wait_for([&] { return metric(s(), "rewind_requests_running") == 0; }));
  ASSERT_EQ(during.status, 200) << during.body;
  EXPECT_EQ(during.j()["choices"], alone.j()["choices"]);
  // The cancelled request did not run to its 30000 tokens.
  EXPECT_LT(metric(s(), "rewind_generated_tokens_total") - generated0, 25000);
}

// ---- queue limits and shutdown (servers of their own) -------------------------------------------

// Waits until a request runs and the engine has taken steps since steps0 (its prefill and some
// tokens): a reply in progress for a client to abandon.
bool wait_decoding(const Server& srv, double steps0) {
  return wait_for([&] {
    return metric(srv, "rewind_requests_running") >= 1 &&
           metric(srv, "rewind_engine_steps_total") >= steps0 + 8;
  });
}
// Waits until a request was counted cancelled since cancelled0.
bool wait_cancelled(const Server& srv, double cancelled0) {
  return wait_for([&] {
    return metric(srv, "rewind_requests_total{outcome=\"cancelled\"}") >= cancelled0 + 1;
  });
}

TEST_F(ServerTest, DisconnectDuringWholeReplyCancels) {
  const double cancelled0 = metric(s(), "rewind_requests_total{outcome=\"cancelled\"}");
  const double generated0 = metric(s(), "rewind_generated_tokens_total");
  // A non-streaming request: nothing is written until the end, so only the server watching
  // the socket can notice the client leaving.
  json longreq = completion_body("A very long story, whole", 30000, {{"ignore_eos", true}});
  const double steps0 = metric(s(), "rewind_engine_steps_total");
  RawClient c(s().port(), "/v1/completions", longreq.dump());
  ASSERT_TRUE(c.ok());
  // Hang up once the request is decoding (running, and the engine has taken steps since it
  // arrived: its prefill and some tokens), so the server has a reply in progress to abandon.
  ASSERT_TRUE(wait_decoding(s(), steps0)) << "the long request did not start decoding";
  c.close();
  EXPECT_TRUE(wait_cancelled(s(), cancelled0)) << "the client that left was not noticed";
  EXPECT_TRUE(wait_for([&] { return metric(s(), "rewind_requests_running") == 0; }));
  EXPECT_LT(metric(s(), "rewind_generated_tokens_total") - generated0, 25000);
  // The server still serves.
  EXPECT_EQ(post(s(), "/v1/completions", completion_body("still here", 2)).status, 200);
}

// `serve` hands its step target to the engine: by default (6x) a prompt that arrives while
// another request decodes gets its chunk from the target; with --itl-target off it does not.
TEST(ServerLimits, ItlTargetReachesTheEngine) {
  std::string words;
  for (int i = 0; i < 300; ++i) words += "word ";
  for (const bool off : {false, true}) {
    std::vector<std::string> args = {"--api-key", kKey, "--parallel", "2"};
    if (off) args.insert(args.end(), {"--itl-target", "off"});
    auto srv = Server::start(args);
    ASSERT_NE(srv, nullptr);
    RawClient a(srv->port(), "/v1/completions",
                completion_body("long", 30000, {{"ignore_eos", true}, {"stream", true}}).dump());
    ASSERT_TRUE(a.ok());
    a.read_until("\"text\"");  // decoding
    EXPECT_EQ(post(*srv, "/v1/completions", completion_body(words, 2)).status, 200);
    const double budget = metric(*srv, "rewind_step_mixed_prefill_budget_tokens");
    if (off) {
      EXPECT_EQ(budget, 0);
    } else {
      EXPECT_GE(budget, 16);
    }
    a.close();
  }
}

TEST(ServerLimits, QueueFullIs429) {
  // One running and --max-queue (1) waiting: the third is refused.
  auto srv = Server::start({"--api-key", kKey, "--parallel", "1", "--max-queue", "1"});
  ASSERT_NE(srv, nullptr);
  const std::string longreq =
      completion_body("long", 30000, {{"ignore_eos", true}, {"stream", true}}).dump();
  RawClient a(srv->port(), "/v1/completions", longreq);
  ASSERT_TRUE(a.ok());
  a.read_until("\"text\"");
  ASSERT_TRUE(wait_for([&] { return metric(*srv, "rewind_requests_running") == 1; }));
  RawClient b(srv->port(), "/v1/completions", longreq);  // waits in the queue
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(wait_for([&] { return metric(*srv, "rewind_requests_queued") == 1; }));
  const Http c = post(*srv, "/v1/completions", completion_body("third", 2));
  expect_error(c, 429, "queue");
  {  // With Retry-After.
    const std::string gen = completion_body("fourth", 2).dump();
    Conn d(srv->port());
    d.send(post_head("/v1/completions", "Content-Length: " + std::to_string(gen.size()) +
                                            "\r\nConnection: close\r\n") +
           gen);
    d.read_to_eof(20s);
    EXPECT_EQ(d.got().rfind("HTTP/1.1 429", 0), 0u) << d.got();
    EXPECT_NE(d.got().find("Retry-After: "), std::string::npos) << d.got();
    EXPECT_EQ(body_of(d.got())["error"]["type"], "rate_limit_error") << d.got();
  }
  // A body refused while it is checked counts as rejected too.
  EXPECT_EQ(post(*srv, "/v1/completions", completion_body("bad", -5)).status, 400);
  EXPECT_EQ(metric(*srv, "rewind_requests_total{outcome=\"rejected\"}"), 3);
  a.close();
  b.close();
  EXPECT_TRUE(wait_for([&] {
    return metric(*srv, "rewind_requests_running") == 0 &&
           metric(*srv, "rewind_requests_queued") == 0;
  }));
  EXPECT_EQ(post(*srv, "/v1/completions", completion_body("after", 2)).status, 200);
  // A batch of prompts is taken whole or not at all. Beside a running request the second of
  // two finds the queue full (one waiting): 429, and the first, already queued, is cancelled.
  // More prompts than --parallel and --max-queue hold at all: 400.
  RawClient held(srv->port(), "/v1/completions", longreq);
  ASSERT_TRUE(held.ok());
  held.read_until("\"text\"");
  const double cancelled0 = metric(*srv, "rewind_engine_requests_total{outcome=\"cancelled\"}");
  expect_error(
      post(*srv, "/v1/completions", completion_body("", 4, {{"prompt", json({"a", "b"})}})), 429,
      "queue");
  EXPECT_TRUE(wait_for([&] {
    return metric(*srv, "rewind_requests_queued") == 0 &&
           metric(*srv, "rewind_engine_requests_total{outcome=\"cancelled\"}") == cancelled0 + 1;
  }));
  expect_error(
      post(*srv, "/v1/completions", completion_body("", 4, {{"prompt", json({"a", "b", "c"})}})),
      400, "does not fit: --parallel 1 and --max-queue 1 hold 2");
  held.close();
  EXPECT_EQ(srv->stop(), 0) << srv->log();
}

TEST(ServerLimits, SigtermStopsCleanly) {
  auto srv = Server::start({"--api-key", kKey});
  ASSERT_NE(srv, nullptr);
  // A stream and a whole (non-streaming) request in flight.
  RawClient a(srv->port(), "/v1/completions",
              completion_body("long", 30000, {{"ignore_eos", true}, {"stream", true}}).dump());
  a.read_until("\"text\"");
  Http whole;
  std::thread t([&] {
    whole =
        post(*srv, "/v1/completions", completion_body("long too", 30000, {{"ignore_eos", true}}));
  });
  ASSERT_TRUE(wait_for([&] { return metric(*srv, "rewind_requests_running") == 2; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->log();
  t.join();
  // The whole request either finished within the grace period or was cancelled: 503.
  EXPECT_TRUE(whole.status == 200 || whole.status == 503) << whole.status << " " << whole.body;
  if (whole.status == 503) {
    EXPECT_NE(whole.body.find("shutting down"), std::string::npos) << whole.body;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_NE(srv->log().find("stopped"), std::string::npos) << srv->log();
}

// A request still waiting to be prepared when SIGTERM arrives counts as in flight: the drain
// gives it its grace period (it used to be refused with 503 at once).
TEST(ServerLimits, SigtermWaitsForRequestsBeingPrepared) {
  auto srv = Server::start({"--api-key", kKey, "--shutdown-grace", "30"});
  ASSERT_NE(srv, nullptr);
  std::string text;
  while (text.size() < 8000000) text += "lorem ipsum dolor sit amet, consectetur adipiscing ";
  const std::string big = json{{"content", text}}.dump();
  Conn a(srv->port()), b(srv->port()), c(srv->port());
  for (Conn* x : {&a, &b})  // both preparation threads busy for a second or more
    ASSERT_TRUE(x->send(post_head("/tokenize", "Content-Length: " + std::to_string(big.size()) +
                                                   "\r\nConnection: close\r\n") +
                        big));
  std::this_thread::sleep_for(200ms);
  const std::string small = completion_body("waiting its turn", 2).dump();
  ASSERT_TRUE(
      c.send(post_head("/v1/completions", "Content-Length: " + std::to_string(small.size()) +
                                              "\r\nConnection: close\r\n") +
             small));
  std::this_thread::sleep_for(200ms);
  std::thread stopper([&] { EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->log(); });
  ASSERT_TRUE(c.read_to_eof(60s));
  stopper.join();
  EXPECT_EQ(c.got().rfind("HTTP/1.1 200", 0), 0u) << c.got();
}

// llama-server's command line runs as it is: --jinja, -ngl (noted on stderr), -fa, -cb,
// --metrics, --no-mmap, -ub (noted) and -tb are accepted, -b is --chunk, -n caps a reply,
// --no-webui leaves the page out, the
// sampling options set a request's defaults over the model's and --chat-template-file (also
// per model) replaces the template.
TEST(ServerLimits, LlamaServerCommandLine) {
  const std::string tmpl = tmp_path("tmpl.jinja");
  write_file(tmpl,
             "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
             "{% if add_generation_prompt %}[assistant] {% endif %}");
  auto srv = Server::start({"--api-key",  kKey,      "--jinja",   "-ngl",
                            "99",         "-fa",     "on",        "--temp",
                            "0.25",       "--top-k", "7",         "--repeat-penalty",
                            "1.1",        "-b",      "256",       "--chat-template-file",
                            tmpl,         "-cb",     "--metrics", "--no-mmap",
                            "-ub",        "128",     "-tb",       "2",
                            "-t",         "2",       "-n",        "5",
                            "--no-webui", "-c",      "0"});
  ASSERT_NE(srv, nullptr);
  EXPECT_NE(srv->log().find("-ngl 99 ignored"), std::string::npos) << srv->log();
  EXPECT_NE(srv->log().find("-ub 128 ignored"), std::string::npos) << srv->log();
  EXPECT_EQ(srv->log().find("-tb 2"), std::string::npos) << srv->log();  // the same as -t
  EXPECT_NE(srv->log().find("at most 5 tokens a reply"), std::string::npos) << srv->log();
  // -n: the max_tokens of a request without one, and the cap of a larger one, also one past
  // the context (llama-server's -n caps, as some clients send a model's whole length); the
  // request's n_predict (llama.cpp's field) is max_tokens.
  for (const auto& [field, asked, got] :
       std::vector<std::tuple<std::string, int, int>>{{"", 0, 5},
                                                      {"max_tokens", 9, 5},
                                                      {"max_tokens", 3, 3},
                                                      {"max_tokens", 1 << 20, 5},
                                                      {"n_predict", 4, 4},
                                                      {"n_predict", -1, 5}}) {
    json body = completion_body("x", 1, {{"ignore_eos", true}});
    body.erase("max_tokens");
    if (!field.empty()) body[field] = asked;
    const Http r = post(*srv, "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j()["usage"]["completion_tokens"], got) << field << " " << asked;
    EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "length") << field << " " << asked;
  }
  EXPECT_NE(srv->log().find("a checkpoint of the recurrent state: "), std::string::npos)
      << srv->log();
  const json props = curl(*srv, "GET", "/props").j();
  EXPECT_EQ(props["chat_template_source"], "file");
  const json& p = props["default_generation_settings"]["params"];
  EXPECT_FLOAT_EQ(p["temperature"].get<float>(), 0.25f) << p;
  EXPECT_EQ(p["top_k"], 7) << p;
  EXPECT_FLOAT_EQ(p["repeat_penalty"].get<float>(), 1.1f) << p;
  EXPECT_EQ(p["n_predict"], 5) << p;
  // -c 0: the model's context length.
  const json cfg = json::parse(read_file(model_dir() + "/config.json"));
  const json& text_cfg = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  EXPECT_EQ(props["n_ctx"], text_cfg["max_position_embeddings"]) << props;
  // --no-webui: the API only.
  expect_error(curl(*srv, "GET", "/", "", ""), 404);
  expect_error(curl(*srv, "GET", "/assets/app.js", "", ""), 404);
  const Http t = post(*srv, "/apply-template",
                      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.j()["prompt"], "[user] hi\n[assistant] ");
  // The file's template does not read enable_thinking: a request that sets it is told.
  const HttpH ignored = post_h(*srv, "/apply-template",
                               {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                                {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(ignored.status, 200) << ignored.body;
  EXPECT_EQ(ignored.header("x-rewind-ignored-fields"), "chat_template_kwargs.enable_thinking");
  // A request's own value still wins, and a chat renders with the file's template.
  const Http c = post(*srv, "/v1/chat/completions",
                      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                       {"max_tokens", 3},
                       {"temperature", 0}});
  ASSERT_EQ(c.status, 200) << c.body;
}

// llama-server's --chat-template: Jinja text in place of the model's template, or chatml.
TEST(ServerLimits, ChatTemplateOption) {
  auto srv = Server::start({"--api-key", kKey, "--chat-template",
                            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"});
  ASSERT_NE(srv, nullptr);
  EXPECT_EQ(curl(*srv, "GET", "/props").j()["chat_template_source"], "option");
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  const Http t = post(*srv, "/apply-template", {{"messages", msgs}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.j()["prompt"], "<user>hi");
  auto chatml = Server::start({"--api-key", kKey, "--chat-template", "chatml"});
  ASSERT_NE(chatml, nullptr);
  const Http c = post(*chatml, "/apply-template", {{"messages", msgs}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_NE(c.j()["prompt"].get<std::string>().find("<|im_start|>user\nhi<|im_end|>"),
            std::string::npos)
      << c.body;
}

// A chat reply's reasoning tokens are counted in usage (completion_tokens_details, OpenAI's):
// with a template whose generation prompt opens <think>, every token of a reply that never
// closes it is reasoning; one whose template mentions <think> without opening it has none; a
// template without <think> gives no such field.
TEST(ServerLimits, UsageCountsReasoningTokens) {
  const std::string opens = tmp_path("opens.jinja"), mentions = tmp_path("mentions.jinja"),
                    plain = tmp_path("plain.jinja");
  write_file(opens, "{% for m in messages %}{{ m.content }}\n{% endfor %}<think>\n");
  write_file(mentions,
             "{% for m in messages %}{{ m.content | replace('<think>', '') }}\n{% endfor %}");
  write_file(plain, "{% for m in messages %}{{ m.content }}\n{% endfor %}");
  for (const auto& [file, want] :
       std::vector<std::pair<std::string, int>>{{opens, 5}, {mentions, 0}, {plain, -1}}) {
    auto srv = Server::start({"--api-key", kKey, "--chat-template-file", file});
    ASSERT_NE(srv, nullptr);
    json body = chat_body("Hi", 5, {{"ignore_eos", true}, {"n", 2}});
    const Http r = post(*srv, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json u = r.j()["usage"];
    EXPECT_EQ(u["completion_tokens"], 10) << u;
    if (want < 0) {
      EXPECT_FALSE(u.contains("completion_tokens_details")) << file << u;
    } else {
      EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 2 * want) << file << u;
    }
    if (want == 5) {
      const json rj = r.j();
      for (const json& c : rj["choices"]) EXPECT_EQ(c["message"]["content"], "") << c;
    }
    // A stream's usage chunk says the same.
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const Http s = post(*srv, "/v1/chat/completions", body);
    ASSERT_EQ(s.status, 200) << s.body;
    const std::vector<std::string> data = sse_data(s.body);
    ASSERT_GE(data.size(), 2u);
    const json last = json::parse(data[data.size() - 2]);
    EXPECT_EQ(last["usage"].value("completion_tokens_details", json()),
              u.value("completion_tokens_details", json()))
        << last;
  }
}

// --reasoning-format none (llama-server's) leaves the <think> block in the content, and a
// request's reasoning_format wins over the server's.
TEST(ServerLimits, ReasoningFormatNone) {
  const std::string opens = tmp_path("opens.jinja");
  write_file(opens, "{% for m in messages %}{{ m.content }}\n{% endfor %}<think>\n");
  auto srv = Server::start(
      {"--api-key", kKey, "--chat-template-file", opens, "--reasoning-format", "none"});
  ASSERT_NE(srv, nullptr);
  const json body = chat_body("Hi", 5, {{"ignore_eos", true}});
  const Http kept = post(*srv, "/v1/chat/completions", body);
  ASSERT_EQ(kept.status, 200) << kept.body;
  const json kj = kept.j(), km = kj["choices"][0]["message"];
  EXPECT_FALSE(km.contains("reasoning_content")) << km;
  EXPECT_FALSE(kj["usage"].contains("completion_tokens_details")) << kept.body;
  json split_body = body;
  split_body["reasoning_format"] = "deepseek";
  const Http split = post(*srv, "/v1/chat/completions", split_body);
  ASSERT_EQ(split.status, 200) << split.body;
  const json sj = split.j(), sm = sj["choices"][0]["message"];
  EXPECT_EQ(sm["content"], "") << sm;
  EXPECT_EQ(sj["usage"]["completion_tokens_details"]["reasoning_tokens"], 5);
  // The same tokens: what one split off the other keeps (up to the whitespace the split drops).
  std::string r = sm.value("reasoning_content", std::string()), k = km["content"];
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \n"));
    s.erase(s.find_last_not_of(" \n") + 1);
    return s;
  };
  EXPECT_EQ(trim(r), trim(k));
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " serve --model " + model_dir() + " --reasoning-format xml 2>&1",
      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--reasoning-format must be none, deepseek or auto"), std::string::npos)
      << out;
}

// A memory bound past what the machine holds is said at start (a small cache on the tiny model
// is far below it).
TEST(ServerLimits, WarnsWhenTheMemoryBoundExceedsTheMachine) {
  auto fits = Server::start({"--api-key", kKey, "--cache-ram", "64", "--grammar-cache-ram", "16"});
  ASSERT_NE(fits, nullptr);
  EXPECT_EQ(fits->log().find("exceeds the"), std::string::npos) << fits->log();
  auto huge = Server::start({"--api-key", kKey, "--cache-ram", "1000000000"});  // ~954 TiB
  ASSERT_NE(huge, nullptr);
  EXPECT_NE(huge->log().find("warning: the memory bound"), std::string::npos) << huge->log();
  EXPECT_NE(huge->log().find("lower --parallel, --ctx-size, --checkpoint-max, --cache-ram or"),
            std::string::npos);
}

// Bodies that take long to parse and tokenize are prepared off the transport's threads: with
// two 8 MB /tokenize bodies in the works (the transport has two threads) another connection is
// still answered at once, before either of them.
TEST(ServerLimits, LongPreparationLeavesTheTransportFree) {
  auto srv = Server::start({"--api-key", kKey});
  ASSERT_NE(srv, nullptr);
  std::string text;
  while (text.size() < 8000000) text += "lorem ipsum dolor sit amet, consectetur adipiscing ";
  const std::string body = json{{"content", text}}.dump();
  ASSERT_LT(body.size(), size_t{8} << 20);  // under --max-body
  Conn a(srv->port()), b(srv->port());
  for (Conn* c : {&a, &b}) {
    ASSERT_TRUE(c->ok());
    ASSERT_TRUE(c->send(post_head("/tokenize", "Content-Length: " + std::to_string(body.size()) +
                                                   "\r\nConnection: close\r\n") +
                        body));
  }
  std::this_thread::sleep_for(200ms);  // both bodies read, their tokenizing begun
  Conn h(srv->port());
  ASSERT_TRUE(h.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  ASSERT_TRUE(h.read_to_eof(60s));
  EXPECT_EQ(h.got().rfind("HTTP/1.1 200", 0), 0u) << h.got();
  // Their bodies still count against --max-buffered while they wait to be answered.
  const double held = metric(*srv, "rewind_memory_bytes{kind=\"http_buffers\"}");
  EXPECT_FALSE(a.readable());
  EXPECT_FALSE(b.readable());
  if (!a.readable() && !b.readable()) {
    EXPECT_GE(held, 2.0 * static_cast<double>(body.size()));
  }
  // Then each gets its answer: more tokens than the context holds.
  for (Conn* c : {&a, &b}) {
    ASSERT_TRUE(c->read_to_eof(120s));
    EXPECT_EQ(c->got().rfind("HTTP/1.1 400", 0), 0u) << c->got().substr(0, 300);
  }
}

// The template file and the sampling options are checked before any model loads; each error
// names its option.
TEST(ServerLimits, TemplateFileAndSamplingErrors) {
  const std::string bad = tmp_path("bad.jinja"), empty = tmp_path("empty.jinja");
  write_file(bad, "{% for m in messages %}{{ m.content }");
  write_file(empty, "  \n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--chat-template-file " + bad, "--chat-template-file " + bad + ": chat template"},
      {"--chat-template-file " + empty, "the file is empty"},
      {"--chat-template-file /nonexistent/t.jinja",
       "--chat-template-file: cannot read /nonexistent/t.jinja: No such file or directory"},
      {"--model-opt tiny:chat-template-file=" + bad, "chat template"},
      {"--chat-template llama2",
       "neither a Jinja template nor a built-in name (rewind has chatml)"},
      {"--chat-template '{% if %}'", "--chat-template: "},
      {"--chat-template chatml --chat-template-file " + empty, "both give a template"},
      {"--temp -1", "--temperature must be >= 0"},
      {"--top-p 1.5", "--top-p must be in [0, 1]"},
      {"--model-opt tiny:min-p=2", "--min-p must be in [0, 1]"},
      {"-fa maybe", "-fa/--flash-attn must be on, off or auto"},
      {"-n 0", "-n/--n-predict must be >= 1, or -1 (up to the context)"},
      {"-c 1", "--ctx-size must be >= 2, or 0 (the model's)"},
      {"-ub 0", "-ub/--ubatch-size must be >= 1"},
      {"-tb x", "--threads-batch"},
  };
  for (const auto& [opts, want] : cases) expect_serve_refuses(opts, want);
}

// A port another process listens on is reported before any model loads (the memory bound,
// printed after loading, never appears).
TEST(ServerLimits, BusyPortFailsBeforeLoading) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " serve --model " + model_dir() + " --port " + port + " 2>&1",
      &rc);
  ::close(fd);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot bind 127.0.0.1:" + port + ": the address is already in use"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("memory bound"), std::string::npos) << out;
}

// An IPv6 address is printed in brackets in the URLs serve suggests.
TEST(ServerLimits, Ipv6UrlsInBrackets) {
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool v6 = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (probe >= 0) ::close(probe);
  if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  auto srv = Server::start({"--host", "::1"});
  ASSERT_TRUE(srv);
  EXPECT_EQ(srv->url().rfind("http://[::1]:", 0), 0u);
  EXPECT_NE(srv->log().find("web page: " + srv->url() + "/"), std::string::npos) << srv->log();
  EXPECT_NE(srv->log().find("try: curl " + srv->url() + "/v1/chat/completions"), std::string::npos)
      << srv->log();
}

TEST(ServerLimits, BadOptionsFail) {
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " serve --model " + model_dir() + " --parallel 0 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--parallel"), std::string::npos) << out;
  // A step budget no larger than the decode rows would leave a prefill nothing.
  for (const char* chunk : {"0", "4", "x"}) {
    const std::string o =
        test::run_command(std::string(REWIND_BINARY) + " serve --model " + model_dir() +
                              " --parallel 4 --chunk " + chunk + " 2>&1",
                          &rc);
    EXPECT_NE(rc, 0) << chunk;
    EXPECT_NE(o.find("--chunk"), std::string::npos) << chunk << ": " << o;
  }
  test::run_command(std::string(REWIND_BINARY) + " serve --help", &rc);
  EXPECT_EQ(rc, 0);
}

// ---- the official openai client
// -------------------------------------------------------------------

TEST_F(ServerTest, OpenAiNodeClient) {
  REQUIRE_NODE_CLIENT();
  int rc = 0;
  const std::string out =
      test::run_command("cd " + node_client_dir() + " && OPENAI_BASE_URL=" + s().url() +
                            "/v1 OPENAI_API_KEY=" + kKey + " node client_test.mjs 2>&1",
                        &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok: all"), std::string::npos) << out;
}

// Structured output through the official npm client: zodResponseFormat, a zodFunction tool
// forced by tool_choice, and a refused schema keyword
// (tests/integration/openai_client/structured_output_test.mjs).
TEST_F(ServerTest, StructuredOutputNodeClient) {
  REQUIRE_NODE_CLIENT();
  if (!std::filesystem::exists(node_client_dir() + "/node_modules/zod/package.json")) {
    if (test::in_ci())
      FAIL() << "the zod npm package is not installed (CI is set: this test must run)";
    GTEST_SKIP() << "the zod npm package is not installed in tests/integration/openai_client "
                    "(run: cd tests/integration/openai_client && npm ci)";
  }
  int rc = 0;
  const std::string out =
      test::run_command("cd " + node_client_dir() + " && OPENAI_BASE_URL=" + s().url() +
                            "/v1 OPENAI_API_KEY=" + kKey + " node structured_output_test.mjs 2>&1",
                        &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok: all 6 checks"), std::string::npos) << out;
}

// Cache through the API: a conversation whose third user message is edited resumes from the
// newest checkpoint before the edit (cached_tokens and /v1/cache show it), and its greedy reply
// equals the reply a freshly started server gives to the same request.
TEST(ServerCache, EditedThirdUserMessageResumesAndMatchesFreshServer) {
  auto conv = [](const std::string& third) {
    return json{
        {"model", "tiny"},
        {"max_tokens", 6},
        {"temperature", 0},
        {"messages",
         json::array(
             {{{"role", "system"},
               {"content", "You answer questions about old lighthouses and the sea."}},
              {{"role", "user"},
               {"content",
                "Tell me about the oldest lighthouse you know, and why it was built where it "
                "stands."}},
              {{"role", "assistant"},
               {"content",
                "It stands on a rocky point; ships kept wrecking there in winter storms."}},
              {{"role", "user"},
               {"content",
                "How did the keepers live there through the long winters, with supplies so far "
                "away?"}},
              {{"role", "assistant"},
               {"content",
                "They stored food in autumn and kept the lamp lit every night until spring."}},
              {{"role", "user"}, {"content", third}}})}};
  };
  const int interval = 16;
  auto a = Server::start({"--checkpoint-interval", std::to_string(interval)});
  ASSERT_NE(a, nullptr);
  const Http first = post(*a, "/v1/chat/completions",
                          conv("What did they do when the lamp failed on a stormy night at sea?"));
  ASSERT_EQ(first.status, 200) << first.body;
  const json edited = conv("What did they do when the lamp failed on a calm night in the harbour?");
  const Http second = post(*a, "/v1/chat/completions", edited);
  ASSERT_EQ(second.status, 200) << second.body;
  const int prompt = second.j()["usage"]["prompt_tokens"].get<int>();
  const int cached = second.j()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  const Http c = curl(*a, "GET", "/v1/cache");
  ASSERT_EQ(c.status, 200);
  const json last = c.j()["recent"].back();
  const int diverged = last["diverged_at"].get<int>();
  EXPECT_EQ(last["resumed_at"].get<int>(), cached);
  EXPECT_GT(cached, prompt / 2) << "the first two turns must come from the cache";
  EXPECT_LE(cached, diverged);
  EXPECT_LT(diverged - cached, interval) << "resumed from the newest checkpoint before the edit";
  EXPECT_EQ(last["rerun_tokens"].get<int>(), prompt - cached);
  // A freshly started server gives the same greedy reply.
  auto b = Server::start({});
  ASSERT_NE(b, nullptr);
  const Http fresh = post(*b, "/v1/chat/completions", edited);
  ASSERT_EQ(fresh.status, 200) << fresh.body;
  EXPECT_EQ(fresh.j()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(fresh.j()["choices"], second.j()["choices"]);
}

// ---- tool calls from the trained model ----------------------------------------------------------

// The built-in trained model (models/kjv-target) answers a verse lookup with a call of the
// `lookup_verse` tool when the tool is offered (it was trained to; the arguments it picks are
// not checked, only that they parse into the tool's typed fields).
const json kLookupTool = json::parse(R"({
  "type": "function",
  "function": {
    "name": "lookup_verse",
    "description": "Look up one verse of the King James Bible by its reference.",
    "parameters": {
      "type": "object",
      "properties": {
        "book": {"type": "string", "description": "Book name, e.g. Genesis"},
        "chapter": {"type": "integer", "description": "Chapter number"},
        "verse": {"type": "integer", "description": "Verse number"}
      },
      "required": ["book", "chapter", "verse"]
    }
  }
})");

std::string trained_model_dir() {
  return test::data_dir() + "/../../models/kjv-target";
}

void expect_lookup_call(const json& call) {
  EXPECT_EQ(call["type"], "function") << call.dump();
  EXPECT_EQ(call["function"]["name"], "lookup_verse") << call.dump();
  EXPECT_TRUE(call["id"].is_string() && !call["id"].get<std::string>().empty()) << call.dump();
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["book"].is_string()) << args.dump();
  EXPECT_TRUE(args["chapter"].is_number_integer()) << args.dump();
  EXPECT_TRUE(args["verse"].is_number_integer()) << args.dump();
}

TEST(ServerTools, TrainedModelCallsTheToolWholeAndStreamed) {
  auto srv = Server::start({"--api-key", kKey}, trained_model_dir());
  ASSERT_NE(srv, nullptr);
  json body = json::parse(R"({"messages": [
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Look up John 3:16."}], "max_tokens": 80, "temperature": 0})");
  body["tools"] = json::array({kLookupTool});
  const Http h = post(*srv, "/v1/chat/completions", body);
  ASSERT_EQ(h.status, 200) << h.body;
  const json resp = h.j();
  const json& choice = resp["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << h.body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << h.body;
  expect_lookup_call(choice["message"]["tool_calls"][0]);
  // The template's empty think block is not reported as reasoning.
  EXPECT_FALSE(choice["message"].contains("reasoning_content")) << h.body;

  json sb = body;
  sb["stream"] = true;
  const Http st = post(*srv, "/v1/chat/completions", sb);
  ASSERT_EQ(st.status, 200);
  json call;
  std::string finish;
  for (const std::string& d : sse_data(st.body)) {
    if (d == "[DONE]") continue;
    const json c = json::parse(d);
    const json& delta = c["choices"][0]["delta"];
    if (delta.contains("tool_calls")) call = delta["tool_calls"][0];
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_FALSE(call.is_null()) << st.body;
  expect_lookup_call(call);
  EXPECT_EQ(call["function"], choice["message"]["tool_calls"][0]["function"]);

  // The same through the official openai npm client.
  REQUIRE_NODE_CLIENT();
  int rc = 0;
  const std::string out =
      test::run_command("cd " + node_client_dir() + " && OPENAI_BASE_URL=" + srv->url() +
                            "/v1 OPENAI_API_KEY=" + kKey + " node tool_call_test.mjs 2>&1",
                        &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok: all"), std::string::npos) << out;
}

// The lookup tool made strict under tool_choice "auto": the reply is constrained lazily, and
// this model's tokenizer marks <tool_call> and </tool_call> special. The grammar's vocabulary
// keeps those two tags (other special tokens stay out), so the model opens its call on its own
// tag token as unconstrained, and the call's arguments follow the schema; the greedy message is
// the same with the draft model, n-gram drafts and none.
TEST(ServerTools, StrictToolUnderAutoOpensTheCallOnTheSpecialTagToken) {
  const std::string draft = test::data_dir() + "/../../models/kjv-draft";
  auto srv = Server::start({"--api-key", kKey, "--spec", "draft:" + draft}, trained_model_dir());
  ASSERT_NE(srv, nullptr);
  json strict = kLookupTool;
  strict["function"]["strict"] = true;
  json& props = strict["function"]["parameters"]["properties"];
  props["book"]["maxLength"] = 20;
  props["chapter"]["minimum"] = 1;
  props["chapter"]["maximum"] = 150;
  props["verse"]["minimum"] = 1;
  strict["function"]["parameters"]["additionalProperties"] = false;
  for (const char* ask : {"Look up John 3:16.", "Please look up Genesis 1:1."}) {
    json body = {{"messages",
                  {{{"role", "system"}, {"content", "You are a helpful assistant."}},
                   {{"role", "user"}, {"content", ask}}}},
                 {"max_tokens", 80},
                 {"temperature", 0},
                 {"chat_template_kwargs", {{"enable_thinking", false}}},
                 {"tools", json::array({strict})},
                 {"speculative", "off"}};
    const Http h = post(*srv, "/v1/chat/completions", body);
    ASSERT_EQ(h.status, 200) << h.body;
    const json choice = h.j()["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << h.body;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << h.body;
    const json& call = choice["message"]["tool_calls"][0];
    expect_lookup_call(call);
    expect_valid_json(call["function"]["arguments"], strict["function"]["parameters"].dump());
    for (const char* method : {"ngram", "draft"}) {
      json sb = body;
      sb["speculative"] = method;
      const Http hs = post(*srv, "/v1/chat/completions", sb);
      ASSERT_EQ(hs.status, 200) << hs.body;
      // (The call's id is drawn per reply.)
      const json m = hs.j()["choices"][0]["message"];
      EXPECT_EQ(m["content"], choice["message"]["content"]) << method << " " << ask;
      ASSERT_EQ(m["tool_calls"].size(), 1u) << hs.body;
      EXPECT_EQ(m["tool_calls"][0]["function"], call["function"]) << method << " " << ask;
    }
  }
}

// ---- speculative decoding -----------------------------------------------------------------------

TEST(ServerSpec, PerRequestSpeculationMatchesPlainAndShowsInMetrics) {
  // The model as its own draft: every draft is accepted, and greedy text must not change.
  auto srv = Server::start({"--api-key", kKey, "--spec", "draft:" + model_dir(), "--draft-k", "3"});
  ASSERT_NE(srv, nullptr);
  const json base = {{"ignore_eos", true}};
  auto text = [&](json extra) {
    for (auto it = base.begin(); it != base.end(); ++it) extra[it.key()] = it.value();
    const Http h = post(*srv, "/v1/completions", completion_body("The cat sat on the", 20, extra));
    EXPECT_EQ(h.status, 200) << h.body;
    return h.status == 200 ? h.j()["choices"][0]["text"].get<std::string>()
                           : std::string("<error>");
  };
  const std::string plain = text({{"speculative", "off"}});
  EXPECT_EQ(metric(*srv, "rewind_spec_drafted_tokens_total"), 0);
  EXPECT_EQ(text(json::object()), plain);  // the server default: the draft model
  const double drafted = metric(*srv, "rewind_spec_drafted_tokens_total");
  EXPECT_GT(drafted, 0);
  EXPECT_EQ(metric(*srv, "rewind_spec_accepted_tokens_total"), drafted);
  EXPECT_EQ(metric(*srv, "rewind_spec_acceptance_rate"), 1.0);
  EXPECT_EQ(text({{"speculative", {{"method", "ngram"}, {"k", 2}}}}), plain);
  EXPECT_EQ(text({{"speculative", {{"method", "draft"}, {"k", 5}}}}), plain);
  // Streaming with speculation: the same text, token events in order.
  json sb = completion_body("The cat sat on the", 20, {{"stream", true}, {"ignore_eos", true}});
  const Http st = post(*srv, "/v1/completions", sb);
  ASSERT_EQ(st.status, 200);
  std::string streamed;
  for (const std::string& d : sse_data(st.body))
    if (d != "[DONE]") streamed += json::parse(d)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, plain);
  // Refused with 400 and a JSON error: no MTP head, an unknown method, k out of range.
  for (const json& bad :
       {json{{"speculative", "mtp"}}, json{{"speculative", "bogus"}},
        json{{"speculative", {{"method", "ngram"}, {"k", 0}}}}, json{{"speculative", true}}}) {
    const Http h = post(*srv, "/v1/completions", completion_body("x", 2, bad));
    EXPECT_EQ(h.status, 400) << bad.dump() << " " << h.body;
    EXPECT_TRUE(h.j().contains("error")) << h.body;
  }
  EXPECT_EQ(text({{"speculative", false}}), plain);
  // Penalties and a bias compose with speculation: the same greedy text with it on and off.
  const json pen = {{"frequency_penalty", 0.8},
                    {"presence_penalty", 0.5},
                    {"repetition_penalty", 1.5},
                    {"logit_bias", {{"5", 2}}}};
  json off = pen;
  off["speculative"] = "off";
  const std::string pen_plain = text(off);
  EXPECT_NE(pen_plain, plain);
  for (const char* method : {"draft", "ngram"}) {
    json on = pen;
    on["speculative"] = method;
    EXPECT_EQ(text(on), pen_plain) << method;
  }
}

TEST(ServerSpec, BadSpecOptionsFail) {
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " serve --model " + model_dir() + " --spec mtp 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("MTP"), std::string::npos) << out;
  const std::string out2 = test::run_command(
      std::string(REWIND_BINARY) + " serve --model " + model_dir() + " --spec wrong 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out2.find("--spec"), std::string::npos) << out2;
}

// ---- a hostile but fair client: the HTTP layer -----------------------------------------------

TEST(HttpHostile, SlowHeadersHitTheDeadlineWhileHealthAnswers) {
  auto srv = Server::start(
      {"--api-key", kKey, "--parallel", "1", "--max-queue", "1", "--header-timeout", "3"});
  ASSERT_NE(srv, nullptr);
  // 12 clients sending a header a byte at a time, never finishing it.
  std::vector<std::unique_ptr<Conn>> slow;
  for (int i = 0; i < 12; ++i) {
    slow.push_back(std::make_unique<Conn>(srv->port()));
    ASSERT_TRUE(slow.back()->ok());
  }
  const std::string header = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    for (size_t k = 0; !done.load(); ++k) {
      for (auto& c : slow) c->send(std::string(1, k < header.size() ? header[k] : 'z'));
      std::this_thread::sleep_for(200ms);
    }
  });
  // /health answers at once all along.
  for (int i = 0; i < 5; ++i) {
    const auto h0 = std::chrono::steady_clock::now();
    EXPECT_EQ(curl(*srv, "GET", "/health", "", "").status, 200);
    EXPECT_LT(seconds_since(h0), 2.0);
  }
  // Every slow client is cut at the header deadline (3 s) with 408, the trickle notwithstanding.
  for (auto& c : slow) {
    EXPECT_TRUE(c->read_to_eof(30s)) << "a slow header was not cut off";
    EXPECT_EQ(c->got().rfind("HTTP/1.1 408", 0), 0u) << c->got();
  }
  const double took = seconds_since(t0);
  done.store(true);
  trickle.join();
  EXPECT_GE(took, 2.5);
  EXPECT_LT(took, 20.0);
  EXPECT_EQ(curl(*srv, "GET", "/health", "", "").status, 200);
}

// Empty lines before a request line do not restart the header deadline: a client sending a
// CRLF now and then is cut at it like any slow header.
TEST(HttpHostile, EmptyLinesDoNotExtendTheHeaderDeadline) {
  auto srv = Server::start({"--api-key", kKey, "--header-timeout", "2"});
  ASSERT_NE(srv, nullptr);
  Conn c(srv->port());
  ASSERT_TRUE(c.ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    for (int i = 0; i < 28 && !done.load(); ++i) {  // 56 bytes in 14 s: under the 64-byte cap
      c.send("\r\n");
      std::this_thread::sleep_for(500ms);
    }
  });
  const bool closed = c.read_to_eof(30s);
  const double took = seconds_since(t0);
  done.store(true);
  trickle.join();
  EXPECT_TRUE(closed);
  EXPECT_LT(took, 8.0) << c.got();
  EXPECT_GE(took, 1.5);
}

// An HTTP/1.0 client gets a stream without chunked framing: the connection's close ends it
// (a proxy such as nginx speaks HTTP/1.0 to its upstream by default).
TEST_F(ServerTest, StreamToHttp10IsNotChunked) {
  const std::string body =
      completion_body("In the", 3, {{"stream", true}, {"ignore_eos", true}}).dump();
  Conn c(s().port());
  ASSERT_TRUE(c.ok());
  c.send("POST /v1/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
         std::string(kKey) + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_TRUE(c.read_to_eof(30s));
  const std::string& got = c.got();
  EXPECT_EQ(got.rfind("HTTP/1.0 200", 0), 0u) << got;
  EXPECT_EQ(got.find("Transfer-Encoding"), std::string::npos) << got;
  const size_t at = got.find("\r\n\r\n");
  ASSERT_NE(at, std::string::npos) << got;
  const std::string events = got.substr(at + 4);
  EXPECT_EQ(events.rfind("data: {", 0), 0u) << events;  // no chunk-size line first
  EXPECT_EQ(events.find("\r\n"), std::string::npos) << events;
  EXPECT_GE(events.size(), 14u);
  EXPECT_EQ(events.substr(events.size() - 14), "data: [DONE]\n\n") << events;
}

TEST_F(ServerTest, SmugglingShapesAre400AtOnce) {
  const std::string body = "{}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Content-Length: 2\r\nContent-Length: 40\r\n", "Content-Length"},
      {"Content-Length: 2, 40\r\n", "Content-Length"},
      {"Content-Length: -1\r\n", "Content-Length"},
      {"Content-Length: 2x\r\n", "Content-Length"},
      {"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n", ""},
      {"Transfer-Encoding: gzip\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked, gzip\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked, chunked\r\n", "more than once"},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"},
  };
  for (const auto& [headers, needle] : cases) {
    Conn c(s().port());
    ASSERT_TRUE(c.ok());
    const auto t0 = std::chrono::steady_clock::now();
    c.send(post_head("/v1/completions", headers) + body);
    c.read_to_eof(20s);
    EXPECT_LT(seconds_since(t0), 3.0) << headers;
    EXPECT_EQ(c.got().rfind("HTTP/1.1 400", 0), 0u) << headers << "\n" << c.got();
    EXPECT_NE(c.got().find("Connection: close"), std::string::npos) << c.got();
    const json j = body_of(c.got());
    ASSERT_TRUE(j.is_object()) << c.got();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    if (!needle.empty()) {
      EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos)
          << c.got();
    }
  }
  // A missing Host in HTTP/1.1.
  Conn c(s().port());
  c.send("GET /health HTTP/1.1\r\n\r\n");
  c.read_to_eof(20s);
  EXPECT_EQ(c.got().rfind("HTTP/1.1 400", 0), 0u) << c.got();
  // A coding before chunked is one the server does not decode: 501, not a body read as plain.
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  Conn g(s().port());
  g.send(post_head("/v1/completions", "Transfer-Encoding: gzip, chunked\r\n") + size + "\r\n" +
         body + "\r\n0\r\n\r\n");
  g.read_to_eof(20s);
  EXPECT_EQ(g.got().rfind("HTTP/1.1 501", 0), 0u) << g.got();
  // The same with the codings in two fields (one list, RFC 9110 5.3).
  Conn g2(s().port());
  g2.send(
      post_head("/v1/completions", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n") +
      size + "\r\n" + body + "\r\n0\r\n\r\n");
  g2.read_to_eof(20s);
  EXPECT_EQ(g2.got().rfind("HTTP/1.1 501", 0), 0u) << g2.got();
}

// Empty lines before a request line are ignored (RFC 9112 2.2), up to 64 bytes of them; a
// newer HTTP/1.x is served as HTTP/1.1 (RFC 9110 2.5) and another major version is 505; the
// asterisk form answers OPTIONS for the whole server and is refused for other methods.
TEST_F(ServerTest, EmptyLinesNewerMinorVersionsAndTheAsteriskForm) {
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  Conn c(s().port());
  c.send(
      "\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n\r\nGET /health HTTP/1.1\r\nHost: "
      "x\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(c.read_to_eof(20s));
  EXPECT_EQ(count(c.got(), "HTTP/1.1 200 OK"), 2u) << c.got();
  EXPECT_EQ(count(c.got(), "HTTP/1.1 "), 2u) << c.got();
  // The CR and LF of an empty line in two reads.
  Conn split(s().port());
  split.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n\r");
  std::this_thread::sleep_for(200ms);
  split.send("\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(split.read_to_eof(20s));
  EXPECT_EQ(count(split.got(), "HTTP/1.1 200 OK"), 2u) << split.got();
  EXPECT_EQ(count(split.got(), "HTTP/1.1 "), 2u) << split.got();

  auto one = [&](const std::string& request) {
    Conn k(s().port());
    k.send(request);
    EXPECT_TRUE(k.read_to_eof(20s)) << request;
    return k.got();
  };
  // Only before the request line: an empty line inside the header is no new request (400, one
  // answer), nor is a bare CR skipped.
  for (const char* bad :
       {"GET /health HTTP/1.1\r\nHost: x\r\n\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: x\r\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        "\rGET /health HTTP/1.1\r\nHost: x\r\n\r\n"}) {
    const std::string r = one(bad);
    EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << bad << "\n" << r;
    EXPECT_EQ(count(r, "HTTP/1.1 "), 1u) << r;
  }
  std::string many;
  for (int i = 0; i < 40; ++i) many += "\r\n";
  EXPECT_EQ(one(many + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);

  const std::string newer = one("GET /health HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(newer.rfind("HTTP/1.1 200", 0), 0u) << newer;
  for (const char* v : {"HTTP/2.0", "HTTP/3.0", "HTTP/0.9"}) {
    const std::string r = one(std::string("GET /health ") + v + "\r\nHost: x\r\n\r\n");
    EXPECT_NE(r.find(" 505 "), std::string::npos) << v << "\n" << r;
  }
  // A bare LF after HTTP/1.1 is a malformed line, not another version.
  const std::string lf = one("GET /health HTTP/1.1\nHost: x\n\n");
  EXPECT_EQ(lf.rfind("HTTP/1.1 400", 0), 0u) << lf;
  for (const char* v : {"HTTP/1.10", "HTTP/x.1", "HTTQ/1.1"}) {
    const std::string r = one(std::string("GET /health ") + v + "\r\nHost: x\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << v << "\n" << r;
  }

  const std::string opt = one("OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(opt.rfind("HTTP/1.1 204", 0), 0u) << opt;
  EXPECT_NE(opt.find("Allow: GET, HEAD, POST, DELETE, OPTIONS"), std::string::npos) << opt;
  const std::string star = one("GET * HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(star.rfind("HTTP/1.1 400", 0), 0u) << star;
  EXPECT_NE(star.find("only for OPTIONS"), std::string::npos) << star;
}

// The absolute form of a request target (RFC 9112 3.2.2) is served as its path; a body with a
// raw NUL byte is refused (the JSON parser would stop there and ignore the rest).
TEST_F(ServerTest, AbsoluteTargetsAndNulBytes) {
  for (const char* target : {"http://127.0.0.1/health", "HTTP://example.com/health?x=1"}) {
    Conn c(s().port());
    c.send(std::string("GET ") + target +
           " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(c.read_to_eof(20s));
    EXPECT_EQ(c.got().rfind("HTTP/1.1 200", 0), 0u) << target << "\n" << c.got();
  }
  std::string body = completion_body("x", 2).dump();
  body += std::string(1, '\0') + " not json {{{";
  Conn c(s().port());
  c.send(post_head("/v1/completions",
                   "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n") +
         body);
  ASSERT_TRUE(c.read_to_eof(20s));
  EXPECT_EQ(c.got().rfind("HTTP/1.1 400", 0), 0u) << c.got();
  EXPECT_NE(c.got().find("NUL byte"), std::string::npos) << c.got();
}

// A chunked body is accepted wherever its Transfer-Encoding field falls among the others (the
// field's value was once read through a pointer into the header list as it grew).
TEST_F(ServerTest, ChunkedBodyWhateverTheHeaderCount) {
  const std::string body = completion_body("chunked", 1).dump();
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  for (int pad = 0; pad <= 9; ++pad) {
    std::string extra;
    for (int i = 0; i < pad; ++i) extra += "X-Pad-" + std::to_string(i) + ": v\r\n";
    Conn c(s().port());
    ASSERT_TRUE(c.ok());
    c.send(post_head("/v1/completions",
                     extra + "Transfer-Encoding: chunked\r\nConnection: close\r\n") +
           size + "\r\n" + body + "\r\n0\r\n\r\n");
    ASSERT_TRUE(c.read_to_eof(60s)) << pad;
    EXPECT_EQ(c.got().rfind("HTTP/1.1 200", 0), 0u) << pad << " headers before it\n" << c.got();
  }
}

// A body refused from its Content-Length (413 before it is read) is counted and logged under
// the request's endpoint: its request line was read.
TEST_F(ServerTest, BodyTooLargeCountsUnderItsEndpoint) {
  auto count_413 = [&] {
    return std::max(0.0, metric(s(),
                                "rewind_http_responses_total{endpoint=\"/v1/completions\","
                                "status=\"413\"}"));
  };
  const double before = count_413();
  Conn c(s().port());
  ASSERT_TRUE(c.ok());
  c.send(post_head("/v1/completions", "Content-Length: 9000000\r\nConnection: close\r\n"));
  ASSERT_TRUE(c.read_to_eof(20s));
  EXPECT_EQ(c.got().rfind("HTTP/1.1 413", 0), 0u) << c.got();
  EXPECT_EQ(count_413(), before + 1);
}

TEST_F(ServerTest, PipelinedRequestsAreAllAnswered) {
  Conn c(s().port());
  ASSERT_TRUE(c.ok());
  const std::string gen = completion_body("pipelined", 3).dump();
  // Three requests in one write; the last asks to close.
  c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
         post_head("/v1/completions", "Content-Length: " + std::to_string(gen.size()) + "\r\n") +
         gen + "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kKey +
         "\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(c.read_to_eof(30s));
  EXPECT_EQ(count_of(c.got(), "HTTP/1.1 200 OK"), 3) << c.got();
  // In order.
  const size_t a = c.got().find("\"status\":\"ok\""), b = c.got().find("text_completion"),
               m = c.got().find("\"object\":\"list\"");
  EXPECT_TRUE(a < b && b < m) << c.got();
}

// HTTP/1.0 has no 1xx to probe a whole reply with: the end of the client's input cancels it.
TEST_F(ServerTest, Http10EndOfInputCancelsAWholeReply) {
  const double cancelled0 = metric(s(), "rewind_requests_total{outcome=\"cancelled\"}");
  const double steps0 = metric(s(), "rewind_engine_steps_total");
  const std::string body =
      completion_body("An HTTP/1.0 story", 30000, {{"ignore_eos", true}}).dump();
  Conn c(s().port());
  ASSERT_TRUE(c.ok());
  c.send("POST /v1/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
         std::string(kKey) + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_TRUE(wait_decoding(s(), steps0)) << "the long request did not start decoding";
  c.shut_wr();
  EXPECT_TRUE(wait_cancelled(s(), cancelled0))
      << "the HTTP/1.0 client's end of input was not taken as gone";
  EXPECT_TRUE(wait_for([&] { return metric(s(), "rewind_requests_running") == 0; }));
}

// Host values that are not host[:port], two Authorization or Content-Type fields, a method longer
// than any, and malformed chunked trailers or extensions: each answered (not a silent close).
TEST_F(ServerTest, HostSingletonFieldsMethodAndTrailers) {
  auto answer = [&](const std::string& raw) {
    Conn c(s().port());
    c.send(raw);
    c.read_to_eof(20s);
    return c.got();
  };
  for (const char* host : {"a b/c@d", "ex ample.com", "host:80x", "[::1", "a\"b", "h%zz"}) {
    const std::string got =
        answer(std::string("GET /health HTTP/1.1\r\nHost: ") + host + "\r\n\r\n");
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << host << "\n" << got;
    EXPECT_NE(got.find("the Host header is not a valid host"), std::string::npos) << got;
  }
  for (const char* host : {"127.0.0.1:8080", "[::1]:80", "example.com", "", "x-y.z_~%41"}) {
    const std::string got =
        answer(std::string("GET /health HTTP/1.1\r\nHost: ") + host + "\r\n\r\n");
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << host << "\n" << got;
  }
  const std::string gen = completion_body("x", 1).dump();
  const std::string len = "Content-Length: " + std::to_string(gen.size()) + "\r\n";
  std::string got =
      answer(post_head("/v1/completions", "Authorization: Bearer wrong\r\n" + len) + gen);
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_NE(got.find("more than one Authorization header"), std::string::npos) << got;
  got = answer(post_head("/v1/completions", "Content-Type: text/plain\r\n" + len) + gen);
  EXPECT_NE(got.find("more than one Content-Type header"), std::string::npos) << got;
  got = answer(std::string(20000, 'A') + " /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 501", 0), 0u) << got.substr(0, 300);
  EXPECT_NE(got.find("the method is longer than any"), std::string::npos) << got.substr(0, 300);
  char size[16];
  std::snprintf(size, sizeof size, "%zx", gen.size());
  for (const std::string& tail :
       {std::string("0\r\nX Y: z\r\n\r\n"), std::string("0\r\nContent-Length: 5\r\n\r\n"),
        std::string("0;") + std::string(25000, 'e') + "\r\n\r\n"}) {
    got = answer(post_head("/v1/completions", "Transfer-Encoding: chunked\r\n") + size + "\r\n" +
                 gen + "\r\n" + tail);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << tail.substr(0, 40) << "\n" << got;
  }
}

TEST_F(ServerTest, HalfClosedClientGetsItsAnswer) {
  for (const bool stream : {false, true}) {
    Conn c(s().port());
    ASSERT_TRUE(c.ok());
    const std::string gen = completion_body("half closed", 4, {{"stream", stream}}).dump();
    c.send(post_head("/v1/completions", "Content-Length: " + std::to_string(gen.size()) + "\r\n") +
           gen);
    c.shut_wr();  // as `nc -N` does
    ASSERT_TRUE(c.read_to_eof(30s)) << c.got();
    EXPECT_EQ(final_answer(c.got()).rfind("HTTP/1.1 200", 0), 0u) << c.got();
    if (stream) {
      EXPECT_NE(c.got().find("data: [DONE]"), std::string::npos) << c.got();
    } else {
      EXPECT_NE(c.got().find("\"choices\""), std::string::npos) << c.got();
    }
  }
}

TEST(HttpHostile, ConnectionCapPerClientAddress) {
  auto srv = Server::start({"--api-key", kKey, "--max-connections-per-client", "4"});
  ASSERT_NE(srv, nullptr);
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Conn>(srv->port()));
    ASSERT_TRUE(held.back()->ok());
    held.back()->send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    held.back()->read_until("\"ok\"");  // open and served: counted
  }
  // A fifth from the same address: 503 with Retry-After, then closed.
  Conn fifth(srv->port());
  ASSERT_TRUE(fifth.ok());
  fifth.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_TRUE(fifth.read_to_eof(20s));
  EXPECT_EQ(fifth.got().rfind("HTTP/1.1 503", 0), 0u) << fifth.got();
  EXPECT_NE(fifth.got().find("Retry-After:"), std::string::npos) << fifth.got();
  // Another address is served meanwhile.
  Conn other(srv->port(), "127.0.0.2");
  ASSERT_TRUE(other.ok());
  other.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  other.read_to_eof(20s);
  EXPECT_EQ(other.got().rfind("HTTP/1.1 200", 0), 0u) << other.got();
  // Once one of the four leaves, the address is served again.
  held.pop_back();
  EXPECT_TRUE(wait_for([&] {
    Conn c(srv->port());
    c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    c.read_to_eof(10s);
    return c.got().rfind("HTTP/1.1 200", 0) == 0;
  }));
}

TEST_F(ServerTest, BurstsOfConnectsAreNotDropped) {
  // 13 bursts of 16 connections at once: with a tiny listen backlog some SYNs are dropped and
  // their connects take a retransmission (about 1 s).
  double worst = 0;
  for (int burst = 0; burst < 13; ++burst) {
    std::vector<std::thread> ts;
    std::vector<double> took(16, 0);
    std::vector<int> ok(16, 0);
    for (int i = 0; i < 16; ++i)
      ts.emplace_back([&, i] {
        const auto t0 = std::chrono::steady_clock::now();
        Conn c(s().port());
        took[i] = seconds_since(t0);
        if (!c.ok()) return;
        c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        c.read_to_eof(20s);
        ok[i] = c.got().rfind("HTTP/1.1 200", 0) == 0;
      });
    for (auto& t : ts) t.join();
    for (int i = 0; i < 16; ++i) {
      EXPECT_TRUE(ok[i]) << "burst " << burst << " connection " << i;
      worst = std::max(worst, took[i]);
    }
  }
  EXPECT_LT(worst, 0.9) << "a connect waited for a SYN retransmission";
}

TEST_F(ServerTest, PostMustBeJson) {
  const std::string body = completion_body("x", 2).dump();
  auto send = [&](const std::string& content_type) {
    Conn c(s().port());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
           std::string(kKey) + "\r\n" + content_type + "Content-Length: " +
           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    c.read_to_eof(30s);
    return c.got();
  };
  for (const char* ct :
       {"Content-Type: text/plain\r\n", "Content-Type: application/x-www-form-urlencoded\r\n",
        "Content-Type: multipart/form-data\r\n", ""}) {
    const std::string got = send(ct);
    EXPECT_EQ(got.rfind("HTTP/1.1 415", 0), 0u) << got;
    const json j = body_of(got);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << got;
    EXPECT_EQ(j["error"]["code"], "unsupported_media_type") << got;
    const std::string msg = j["error"]["message"].get<std::string>();
    EXPECT_NE(msg.find("application/json"), std::string::npos);
    // curl -d's default type gets a hint at the header to add.
    EXPECT_EQ(msg.find("curl -d") != std::string::npos,
              std::string(ct).find("x-www-form-urlencoded") != std::string::npos)
        << msg;
  }
  // With parameters, in any case: accepted.
  EXPECT_EQ(send("Content-Type: Application/JSON; charset=utf-8\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST_F(ServerTest, AuthSchemeIsCaseInsensitive) {
  const std::string body = completion_body("x", 2).dump();
  for (const char* scheme : {"bearer", "BEARER", "Bearer"})
    EXPECT_EQ(curl(s(), "GET", "/v1/models", "", "",
                   "-H 'Authorization: " + std::string(scheme) + " " + kKey + "'")
                  .status,
              200)
        << scheme;
  expect_error(curl(s(), "GET", "/v1/models", "", "", "-H 'Authorization: Basic dGVzdA=='"), 401);
  expect_error(curl(s(), "GET", "/v1/models", "", "", "-H 'Authorization: bearer'"), 401);
}

// Several keys (a comma list, --api-key again, --api-key-file's lines): any of them works.
TEST(ServerLimits, SeveralApiKeys) {
  const std::string file = tmp_path("keys.txt");
  write_file(file, "\xEF\xBB\xBFkc\r\n\n  kd \n");
  auto srv = Server::start({"--api-key", "ka, kb", "--api-key", "ke", "--api-key-file", file});
  ASSERT_TRUE(srv);
  for (const char* k : {"ka", "kb", "kc", "kd", "ke"})
    EXPECT_EQ(curl(*srv, "GET", "/v1/models", "", k).status, 200) << k;
  for (const char* k : {"k", "kz", "ka,kb", "kdd"})
    EXPECT_EQ(curl(*srv, "GET", "/v1/models", "", k).status, 401) << k;
  const std::string empty = tmp_path("nokeys.txt");
  write_file(empty, "\n \n");
  expect_serve_refuses("--api-key-file " + empty, "--api-key-file " + empty + ": no key in it");
  expect_serve_refuses("--api-key-file /nonexistent/k",
                       "--api-key-file: cannot read /nonexistent/k");
  expect_serve_refuses("--api-key ,", "--api-key: an empty key");
}

// llama-server's --chat-template-kwargs and --reasoning-budget 0: the template's enable_thinking
// when a request gives none; a request's own value wins.
TEST(ServerLimits, ServerWideEnableThinking) {
  const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto prompt_of = [&](const Server& srv, const json& extra) {
    json body = {{"messages", hi}};
    body.update(extra);
    const Http h = post(srv, "/apply-template", body);
    EXPECT_EQ(h.status, 200) << h.body;
    return h.status == 200 ? h.j()["prompt"].get<std::string>() : std::string();
  };
  auto plain = Server::start({"--api-key", kKey});
  ASSERT_TRUE(plain);
  const json on = {{"chat_template_kwargs", {{"enable_thinking", true}}}};
  const json off = {{"chat_template_kwargs", {{"enable_thinking", false}}}};
  const std::string thinking = prompt_of(*plain, on), not_thinking = prompt_of(*plain, off);
  ASSERT_NE(thinking, not_thinking);  // the tiny model's template reads enable_thinking
  ASSERT_NE(prompt_of(*plain, json::object()), not_thinking);
  for (const std::vector<std::string>& opts :
       {std::vector<std::string>{"--chat-template-kwargs", "{\"enable_thinking\": false}"},
        std::vector<std::string>{"--reasoning-budget", "0"}}) {
    std::vector<std::string> args = {"--api-key", kKey};
    args.insert(args.end(), opts.begin(), opts.end());
    auto srv = Server::start(args);
    ASSERT_TRUE(srv);
    EXPECT_EQ(prompt_of(*srv, json::object()), not_thinking) << opts[0];
    EXPECT_EQ(prompt_of(*srv, on), thinking) << opts[0];
  }
  for (const auto& [opts, want] : std::vector<std::pair<std::string, std::string>>{
           {"--chat-template-kwargs '[1]'", "--chat-template-kwargs must be a JSON object"},
           {"--chat-template-kwargs '{\"x\": 1}'", "'x' is not supported (only enable_thinking)"},
           {"--chat-template-kwargs '{\"enable_thinking\": 1}'", "must be true or false"},
           {"--reasoning-budget 100", "--reasoning-budget must be -1 (unrestricted) or 0"},
           {"--reasoning-budget 0 --chat-template-kwargs '{\"enable_thinking\": true}'",
            "disagree"}})
    expect_serve_refuses(opts, want);
}

TEST_F(ServerTest, LongTargetAndHeaderAre414And431) {
  const Http a = curl(s(), "GET", "/health?pad=" + std::string(10000, 'a'), "", "");
  expect_error(a, 414);
  EXPECT_EQ(a.j()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(a.j()["error"]["code"], "uri_too_long");
  const Http b = curl(s(), "GET", "/health", "", "", "-H 'X-Big: " + std::string(20000, 'b') + "'");
  expect_error(b, 431);
  EXPECT_EQ(b.j()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(b.j()["error"]["code"], "request_header_fields_too_large");
  // A request line longer than the whole header limit is still a 414.
  const Http c = curl(s(), "GET", "/health?pad=" + std::string(40000, 'a'), "", "");
  expect_error(c, 414);
  EXPECT_EQ(curl(s(), "GET", "/health", "", "").status, 200);
}

TEST_F(ServerTest, ErrorMessagesCarryNoLibraryInternals) {
  for (const char* bad : {"{not json", "[1,", "{\"prompt\": \"x\",}", "\xff\xfe"}) {
    const Http h = curl(s(), "POST", "/v1/completions", bad);
    expect_error(h, 400, "not valid JSON");
    const std::string m = h.j()["error"]["message"];
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
    EXPECT_EQ(m.find("parse_error"), std::string::npos) << m;
    EXPECT_EQ(m.find("exception"), std::string::npos) << m;
  }
}

TEST(HttpHostile, SecondServerOnTheSamePortFails) {
  auto first = Server::start({"--api-key", kKey});
  ASSERT_NE(first, nullptr);
  const std::string log = tmp_path("second.log");
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const std::string port = std::to_string(first->port());
    execl(REWIND_BINARY, REWIND_BINARY, "serve", "--model", model_dir().c_str(), "--port",
          port.c_str(), "--threads", "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  const bool exited = wait_for([&] { return waitpid(pid, &st, WNOHANG) == pid; }, 60s);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  ASSERT_TRUE(exited) << "a second server started on a port in use:\n" << read_file(log);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  EXPECT_NE(read_file(log).find("in use"), std::string::npos) << read_file(log);
  EXPECT_EQ(read_file(log).find("listening"), std::string::npos) << read_file(log);
  EXPECT_EQ(curl(*first, "GET", "/health", "", "").status, 200);
}

TEST(HttpHostile, SigtermMidStreamEndsStreamsProperly) {
  auto srv = Server::start({"--api-key", kKey, "--shutdown-grace", "1"});
  ASSERT_NE(srv, nullptr);
  // A chat stream and a completions stream that would run far past the grace period.
  RawClient chat(
      srv->port(), "/v1/chat/completions",
      chat_body(
          "long", 30000,
          {{"ignore_eos", true}, {"stream", true}, {"stream_options", {{"include_usage", true}}}})
          .dump());
  RawClient comp(srv->port(), "/v1/completions",
                 completion_body("long", 30000, {{"ignore_eos", true}, {"stream", true}}).dump());
  ASSERT_TRUE(chat.ok() && comp.ok());
  chat.read_until("\"content\":\"");
  comp.read_until("\"text\"");
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] { EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->log(); });
  const std::string a = chat.read_until("0\r\n\r\n"), b = comp.read_until("0\r\n\r\n");
  stopper.join();
  for (const std::string* got : {&a, &b}) {
    const size_t done = got->find("data: [DONE]");
    ASSERT_NE(done, std::string::npos) << *got;
    EXPECT_NE(got->find("\"finish_reason\":\"length\""), std::string::npos) << *got;
    EXPECT_NE(got->find("0\r\n\r\n", done), std::string::npos) << "no final chunk: " << *got;
  }
  EXPECT_NE(a.find("\"usage\""), std::string::npos) << a;
  // Within the grace period plus the time to end the streams.
  EXPECT_GE(seconds_since(t0), 0.9);
  EXPECT_LT(seconds_since(t0), 15.0);
}

TEST(HttpHostile, DrainLetsShortRequestsFinish) {
  auto srv = Server::start({"--api-key", kKey, "--shutdown-grace", "30"});
  ASSERT_NE(srv, nullptr);
  RawClient c(srv->port(), "/v1/completions",
              completion_body("short", 24, {{"ignore_eos", true}, {"stream", true}}).dump());
  ASSERT_TRUE(c.ok());
  c.read_until("\"text\"");
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] { EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->log(); });
  const std::string got = c.read_until("0\r\n\r\n");
  stopper.join();
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got;
  // It ran to its max_tokens (24 tokens), well before the 30 s grace.
  EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos) << got;
  EXPECT_LT(seconds_since(t0), 25.0);
}

TEST(HttpHostile, CacheBudgetAndCorsFromStart) {
  auto srv = Server::start(
      {"--api-key", kKey, "--cache-ram", "64", "--cors-origin", "http://allowed.example"});
  ASSERT_NE(srv, nullptr);
  // Before any request.
  const Http h = curl(*srv, "GET", "/v1/cache");
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["budget_bytes"], 64ll << 20);
  EXPECT_EQ(metric(*srv, "rewind_cache_budget_bytes"), 64.0 * 1024 * 1024);
  // CORS for the allowed origin only.
  auto headers = [&](const std::string& method, const std::string& origin) {
    const std::string hdr = tmp_path("headers");
    curl(*srv, method, "/v1/models", "", kKey, "-D " + hdr + " -H 'Origin: " + origin + "'");
    return read_file(hdr);
  };
  EXPECT_NE(headers("GET", "http://allowed.example")
                .find("Access-Control-Allow-Origin: http://allowed.example"),
            std::string::npos);
  EXPECT_NE(headers("GET", "http://allowed.example")
                .find("Access-Control-Expose-Headers: X-Rewind-Ignored-Fields"),
            std::string::npos);
  EXPECT_EQ(headers("GET", "http://evil.example").find("Access-Control"), std::string::npos);
  const std::string pre = headers("OPTIONS", "http://allowed.example");
  EXPECT_EQ(pre.rfind("HTTP/1.1 204", 0), 0u) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Headers"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Methods: GET, HEAD, OPTIONS"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Allow: GET, HEAD, OPTIONS"), std::string::npos) << pre;
  EXPECT_EQ(headers("OPTIONS", "http://evil.example").find("Access-Control"), std::string::npos);
  // The headers a preflight asks for are allowed (OpenAI's SDKs send x-stainless-* headers from
  // a page); a list that is not plain header names is not echoed.
  auto preflight = [&](const std::string& asked) {
    const std::string hdr = tmp_path("preflight");
    curl(*srv, "OPTIONS", "/v1/chat/completions", "", kKey,
         "-D " + hdr + " -H 'Origin: http://allowed.example' -H 'Access-Control-Request-Headers: " +
             asked + "'");
    return header_value(head_of(read_file(hdr)), "Access-Control-Allow-Headers");
  };
  EXPECT_EQ(preflight("authorization,content-type,x-stainless-os,x-stainless-lang"),
            "authorization,content-type,x-stainless-os,x-stainless-lang");
  EXPECT_EQ(preflight("x-a;y"), "Authorization, Content-Type");
}

// A whole answer whose JSON would pass --max-buffered ends with a 400 that says to stream; the
// same request streamed, and a small whole one, are answered.
TEST(HttpHostile, WholeAnswerBeyondTheBufferCapIsRefused) {
  auto srv = Server::start(
      {"--api-key", kKey, "--max-body", "50000", "--max-buffered", "60000", "--parallel", "2"});
  ASSERT_NE(srv, nullptr);
  const json big = completion_body("x", 200, {{"logprobs", 5}, {"n", 2}, {"ignore_eos", true}});
  const Http h = post(*srv, "/v1/completions", big);
  expect_error(h, 400, "ask with \"stream\": true");
  EXPECT_EQ(h.j()["error"]["code"], "answer_too_large") << h.body;
  EXPECT_EQ(metric(*srv, "rewind_requests_total{outcome=\"rejected\"}"), 1.0);
  json streamed = big;
  streamed["stream"] = true;
  const Http st = post(*srv, "/v1/completions", streamed);
  ASSERT_EQ(st.status, 200) << st.body.substr(0, 300);
  EXPECT_NE(st.body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(post(*srv, "/v1/completions", completion_body("x", 8)).status, 200);
  EXPECT_TRUE(wait_for([&] { return metric(*srv, "rewind_requests_running") == 0; }));
}

// Bodies are reserved as their bytes arrive: clients that announce bodies and send nothing hold
// no room, and the cap refuses the body whose bytes would pass it.
TEST(HttpHostile, BufferCapCountsBodyBytesAsTheyArrive) {
  auto srv = Server::start(
      {"--api-key", kKey, "--max-body", "100000", "--max-buffered", "150000", "--parallel", "1"});
  ASSERT_NE(srv, nullptr);
  // A valid completion request padded with spaces to 90000 bytes.
  std::string body = completion_body("buffered", 2).dump();
  body.resize(90000, ' ');
  const std::string head =
      post_head("/v1/completions", "Content-Length: " + std::to_string(body.size()) + "\r\n");
  // Ten clients announce 90000-byte bodies (more than the cap together) and send none of them.
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(std::make_unique<Conn>(srv->port()));
    ASSERT_TRUE(idle.back()->ok());
    idle.back()->send(head);
  }
  // A sends 80000 bytes of its body and stalls: its buffer holds them (up to its length).
  Conn a(srv->port());
  ASSERT_TRUE(a.ok());
  a.send(head + body.substr(0, 80000));
  ASSERT_TRUE(wait_for([&] {
    return metric(*srv, "rewind_memory_bytes{kind=\"http_buffers\"}") >= 80000;
  })) << "the stalled body is not accounted";
  EXPECT_LT(metric(*srv, "rewind_memory_bytes{kind=\"http_buffers\"}"), 120000.0);
  // B's body does not fit beside A's: 503 with Retry-After at once, from its Content-Length
  // (before a 100 Continue when it asks for one).
  const auto t0 = std::chrono::steady_clock::now();
  Conn b(srv->port());
  ASSERT_TRUE(b.ok());
  b.send(post_head("/v1/completions", "Content-Length: " + std::to_string(body.size()) +
                                          "\r\nExpect: 100-continue\r\n"));
  ASSERT_TRUE(b.read_to_eof(20s));
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(b.got().rfind("HTTP/1.1 503", 0), 0u) << b.got();
  EXPECT_EQ(b.got().find("100 Continue"), std::string::npos) << b.got();
  EXPECT_NE(b.got().find("Retry-After: 1"), std::string::npos) << b.got();
  EXPECT_EQ(body_of(b.got())["error"]["code"], "server_busy") << b.got();
  // A chunked body (no length to judge) gets the 503 once its bytes pass the cap.
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  const std::string chunked = std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n";
  Conn b2(srv->port());
  b2.send(post_head("/v1/completions", "Transfer-Encoding: chunked\r\n") + chunked);
  ASSERT_TRUE(b2.read_to_eof(20s));
  EXPECT_EQ(b2.got().rfind("HTTP/1.1 503", 0), 0u) << b2.got();
  // The body of a request answered from its header (401 here) is read and dropped: it needs
  // no room.
  Conn b3(srv->port());
  b3.send(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      chunked);
  ASSERT_TRUE(b3.read_to_eof(20s));
  EXPECT_EQ(b3.got().rfind("HTTP/1.1 401", 0), 0u) << b3.got();
  // Requests without a body are still served meanwhile.
  EXPECT_EQ(curl(*srv, "GET", "/health", "", "").status, 200);
  // A finishes its body and gets its answer; then the room is free again, the ten idle
  // announcers still open.
  a.send(body.substr(80000));
  EXPECT_NE(a.read_until("text_completion").find("HTTP/1.1 200"), std::string::npos) << a.got();
  ASSERT_TRUE(
      wait_for([&] { return metric(*srv, "rewind_memory_bytes{kind=\"http_buffers\"}") < 80000; }));
  Conn c(srv->port());
  c.send(head + body);
  EXPECT_NE(c.read_until("text_completion").find("HTTP/1.1 200"), std::string::npos) << c.got();
  // The bound's http term is the cap plus the header buffers and parsed copies.
  EXPECT_GE(metric(*srv, "rewind_memory_bound_term_bytes{term=\"http\"}"), 150000.0);
  // A cap below --max-body is refused at start.
  int rc = 0;
  const std::string out =
      test::run_command(std::string(REWIND_BINARY) + " serve --model " + model_dir() +
                            " --port 0 --max-body 1000 --max-buffered 999 2>&1",
                        &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--max-buffered"), std::string::npos) << out;
}

TEST_F(ServerTest, NoCorsByDefault) {
  const std::string hdr = tmp_path("headers");
  curl(s(), "GET", "/v1/models", "", kKey, "-D " + hdr + " -H 'Origin: http://a.example'");
  EXPECT_EQ(read_file(hdr).find("Access-Control"), std::string::npos) << read_file(hdr);
}

TEST_F(ServerTest, KeepAliveConnectionServesManyRequests) {
  Conn c(s().port());
  ASSERT_TRUE(c.ok());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    EXPECT_TRUE(c.read_count("{\"status\":\"ok\"}", i)) << c.got();
  }
  // An expect-100 POST is answered 100 then 200 on the same connection.
  const std::string gen = completion_body("expect", 2).dump();
  c.send(post_head("/v1/completions", "Content-Length: " + std::to_string(gen.size()) +
                                          "\r\nExpect: 100-continue\r\n"));
  EXPECT_NE(c.read_until("100 Continue").find("HTTP/1.1 100 Continue"), std::string::npos);
  c.send(gen);
  EXPECT_NE(c.read_until("text_completion").find("text_completion"), std::string::npos) << c.got();
}

// ---- access log, aliases, /v1/cache ids
// ------------------------------------------------------------

// The lines of a file that satisfy `keep`, once there are at least `n` of them (or after 20 s).
std::vector<std::string> log_lines(const std::string& path, size_t n,
                                   const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> out;
  wait_for([&] {
    out.clear();
    std::istringstream is(read_file(path));
    std::string line;
    while (std::getline(is, line))
      if (keep(line)) out.push_back(line);
    return out.size() >= n;
  });
  return out;
}

struct TextLine {
  std::string id, client, method, path, model, stream, prompt, cached, rerun, completion, ttft,
      total, finish;
  int status = 0;
};

// One text line of the access log, every field checked against the format.
std::optional<TextLine> parse_text_line(const std::string& line) {
  static const std::regex re(
      R"re(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\S+) (\S+) "(\S+) (\S+)" (\d{3}) )re"
      R"re(model=(\S+) stream=([01]) prompt=(\S+) cached=(\S+) rerun=(\S+) completion=(\S+) )re"
      R"re(ttft_ms=(\S+) total_ms=(\S+) finish=(\S+)$)re");
  std::smatch m;
  if (!std::regex_match(line, m, re)) return std::nullopt;
  TextLine t;
  t.id = m[1], t.client = m[2], t.method = m[3], t.path = m[4], t.status = std::stoi(m[5]);
  t.model = m[6], t.stream = m[7], t.prompt = m[8], t.cached = m[9], t.rerun = m[10];
  t.completion = m[11], t.ttft = m[12], t.total = m[13], t.finish = m[14];
  return t;
}

// One line per request, in the text format, to --log-file (not to stderr): generations with the
// tokens, cache figures and finish reason their client was told; other routes, refused
// requests and the header checks' answers with their status.
TEST(ServerAccessLog, TextLinePerRequest) {
  const std::string path = tmp_path("access.log");
  auto srv = Server::start({"--api-key", kKey, "--log-file", path});
  ASSERT_NE(srv, nullptr);
  const Http chat = post(*srv, "/v1/chat/completions", chat_body("Log me", 6));
  ASSERT_EQ(chat.status, 200) << chat.body;
  const Http again = post(*srv, "/v1/chat/completions", chat_body("Log me", 6));
  ASSERT_EQ(again.status, 200) << again.body;
  const Http stream =
      post(*srv, "/v1/completions", completion_body("stream me", 4, {{"stream", true}}));
  ASSERT_EQ(stream.status, 200);
  const json first_chunk = json::parse(sse_data(stream.body).at(0));
  EXPECT_EQ(curl(*srv, "GET", "/health", "", "").status, 200);
  EXPECT_EQ(curl(*srv, "GET", "/nope").status, 404);
  EXPECT_EQ(curl(*srv, "GET", "/v1/models", "", "").status, 401);
  EXPECT_EQ(curl(*srv, "POST", "/v1/chat/completions", "{not json").status, 400);

  const auto lines = log_lines(path, 7, [](const std::string&) { return true; });
  ASSERT_EQ(lines.size(), 7u) << read_file(path);
  std::vector<TextLine> t;
  for (const std::string& l : lines) {
    auto p = parse_text_line(l);
    ASSERT_TRUE(p.has_value()) << "not an access-log line: " << l;
    t.push_back(*p);
  }
  for (const TextLine& x : t) EXPECT_EQ(x.client, "127.0.0.1");
  auto check_chat = [](const TextLine& l, const json& answer) {
    EXPECT_EQ(l.id, answer["id"]);
    EXPECT_EQ(l.method, "POST");
    EXPECT_EQ(l.path, "/v1/chat/completions");
    EXPECT_EQ(l.status, 200);
    EXPECT_EQ(l.model, "tiny");
    EXPECT_EQ(l.stream, "0");
    const json& u = answer["usage"];
    EXPECT_EQ(std::stoi(l.prompt), u["prompt_tokens"].get<int>());
    EXPECT_EQ(std::stoi(l.cached), u["prompt_tokens_details"]["cached_tokens"].get<int>());
    EXPECT_EQ(std::stoi(l.rerun), std::stoi(l.prompt) - std::stoi(l.cached));
    EXPECT_EQ(std::stoi(l.completion), u["completion_tokens"].get<int>());
    EXPECT_EQ(l.finish, answer["choices"][0]["finish_reason"]);
    EXPECT_GT(std::stod(l.ttft), 0);
    EXPECT_LE(std::stod(l.ttft), std::stod(l.total));
  };
  check_chat(t[0], chat.j());
  check_chat(t[1], again.j());
  EXPECT_GT(std::stoi(t[1].cached), 0) << "the repeat resumes from the cache";
  EXPECT_EQ(t[2].id, first_chunk["id"]);
  EXPECT_EQ(t[2].path, "/v1/completions");
  EXPECT_EQ(t[2].stream, "1");
  EXPECT_EQ(t[2].model, "tiny");  // the model that answered (the request named none)
  EXPECT_EQ(t[2].completion, "4");
  EXPECT_EQ(t[2].finish, "length");
  const std::vector<std::tuple<std::string, std::string, int>> plain = {
      {"GET", "/health", 200},
      {"GET", "/nope", 404},
      {"GET", "/v1/models", 401},
      {"POST", "/v1/chat/completions", 400}};
  for (size_t i = 0; i < plain.size(); ++i) {
    const TextLine& l = t[3 + i];
    EXPECT_EQ(l.id.rfind("req-", 0), 0u) << lines[3 + i];
    EXPECT_EQ(l.method, std::get<0>(plain[i])) << lines[3 + i];
    EXPECT_EQ(l.path, std::get<1>(plain[i])) << lines[3 + i];
    EXPECT_EQ(l.status, std::get<2>(plain[i])) << lines[3 + i];
    for (const std::string& f : {l.prompt, l.cached, l.rerun, l.completion, l.ttft, l.finish})
      EXPECT_EQ(f, "-") << lines[3 + i];
  }
  EXPECT_EQ(srv->log().find("\"POST /v1/chat/completions\""), std::string::npos)
      << "the access log goes to --log-file only";
}

// --log-format json: every line is one JSON object with every field; without --log-file the
// lines go to stderr.
TEST(ServerAccessLog, JsonLinesParse) {
  auto srv = Server::start({"--log-format", "json"});
  ASSERT_NE(srv, nullptr);
  const Http chat =
      post(*srv, "/v1/chat/completions", chat_body("json please", 5, {{"stream", true}}));
  ASSERT_EQ(chat.status, 200);
  const std::string id = json::parse(sse_data(chat.body).at(0))["id"];
  const Http models = curl(*srv, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  const auto lines =
      log_lines(srv->log_path(), 2, [](const std::string& l) { return !l.empty() && l[0] == '{'; });
  ASSERT_EQ(lines.size(), 2u) << srv->log();
  const json g = json::parse(lines[0]), m = json::parse(lines[1]);
  for (const char* k : {"time", "id", "client", "method", "path", "status", "model", "stream",
                        "prompt_tokens", "cached_tokens", "rerun_tokens", "completion_tokens",
                        "ttft_ms", "total_ms", "finish_reason"}) {
    EXPECT_TRUE(g.contains(k)) << k;
    EXPECT_TRUE(m.contains(k)) << k;
  }
  EXPECT_EQ(g["id"], id);
  EXPECT_EQ(g["path"], "/v1/chat/completions");
  EXPECT_EQ(g["status"], 200);
  EXPECT_EQ(g["stream"], true);
  EXPECT_EQ(g["model"], "tiny");
  EXPECT_EQ(g["completion_tokens"], 5);
  EXPECT_EQ(g["finish_reason"], "length");
  EXPECT_GT(g["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(g["rerun_tokens"].get<int>(),
            g["prompt_tokens"].get<int>() - g["cached_tokens"].get<int>());
  EXPECT_LE(g["ttft_ms"].get<double>(), g["total_ms"].get<double>());
  EXPECT_EQ(m["path"], "/v1/models");
  EXPECT_EQ(m["status"], 200);
  EXPECT_TRUE(m["prompt_tokens"].is_null());
  EXPECT_TRUE(m["finish_reason"].is_null());
}

// --quiet: no access log; bad log options are refused before the model loads.
TEST(ServerAccessLog, QuietAndBadOptions) {
  auto srv = Server::start({"--quiet"});
  ASSERT_NE(srv, nullptr);
  ASSERT_EQ(post(*srv, "/v1/completions", completion_body("quiet", 2)).status, 200);
  ASSERT_EQ(curl(*srv, "GET", "/health").status, 200);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(srv->log().find("/v1/completions"), std::string::npos) << srv->log();
  EXPECT_EQ(srv->log().find("/health"), std::string::npos) << srv->log();
  int rc = 0;
  const std::string serve = std::string(REWIND_BINARY) + " serve --model " + model_dir() + " ";
  std::string out = test::run_command(serve + "--log-format xml 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--log-format must be text or json (got 'xml')"), std::string::npos) << out;
  out = test::run_command(serve + "--quiet --log-file " + tmp_path("q.log") + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--quiet turns the access log off"), std::string::npos) << out;
  out = test::run_command(serve + "--log-file /nonexistent-dir/a.log 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("cannot open"), std::string::npos) << out;
  out = test::run_command(serve + "--alias 'a,,b' 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("a model name must be non-empty"), std::string::npos) << out;
}

// --alias: /v1/models lists the names, an answer echoes the name asked for (the first when none
// was), any other name is 404 model_not_found in OpenAI's error shape, also when streaming.
TEST(ServerAlias, OnlyAliasesAreServed) {
  const std::string path = tmp_path("alias.log");
  auto srv = Server::start({"--alias", "alpha,beta", "-a", "gamma", "--log-file", path});
  ASSERT_NE(srv, nullptr);
  EXPECT_NE(srv->log().find("(model alpha,"), std::string::npos) << srv->log();
  const Http models = curl(*srv, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  std::vector<std::string> ids;
  const json listed = models.j();
  for (const json& m : listed["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"alpha", "beta", "gamma"}));
  // Each name is retrieved as itself; with names set, any other is 404 as for a request.
  EXPECT_EQ(curl(*srv, "GET", "/v1/models/beta").j()["id"], "beta");
  const Http none = curl(*srv, "GET", "/v1/models/gpt-4");
  EXPECT_EQ(none.status, 404) << none.body;
  EXPECT_EQ(none.j()["error"]["code"], "model_not_found") << none.body;

  json body = chat_body("Hi", 3);
  body["model"] = "beta";
  Http h = post(*srv, "/v1/chat/completions", body);
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["model"], "beta");
  body.erase("model");
  h = post(*srv, "/v1/chat/completions", body);
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["model"], "alpha");
  h = post(*srv, "/v1/completions",
           completion_body("x", 2, {{"model", "gamma"}, {"stream", true}}));
  ASSERT_EQ(h.status, 200);
  EXPECT_EQ(json::parse(sse_data(h.body).at(0))["model"], "gamma");

  for (const std::string route : {"/v1/chat/completions", "/v1/completions"}) {
    const json bad = route == "/v1/completions" ? completion_body("x", 2, {{"model", "gpt-4"}})
                                                : chat_body("x", 2, {{"model", "gpt-4"}});
    for (bool stream : {false, true}) {
      json b = bad;
      b["stream"] = stream;
      const Http e = post(*srv, route, b);
      EXPECT_EQ(e.status, 404) << e.body;
      const json j = e.j();
      ASSERT_TRUE(j.contains("error")) << e.body;
      EXPECT_EQ(j["error"]["code"], "model_not_found");
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
      EXPECT_TRUE(j["error"]["param"].is_null());
      const std::string msg = j["error"]["message"];
      EXPECT_NE(msg.find("'gpt-4'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'alpha', 'beta', 'gamma'"), std::string::npos) << msg;
    }
  }
  // The refusals are in the access log with the name asked for.
  const auto refused = log_lines(path, 4, [](const std::string& l) {
    return l.find("\" 404 model=gpt-4 ") != std::string::npos;
  });
  EXPECT_EQ(refused.size(), 4u) << read_file(path);
}

// Without --alias any name is accepted and the answer names the served model.
TEST_F(ServerTest, AnyModelNameWithoutAlias) {
  const Http h = post(s(), "/v1/chat/completions", chat_body("Hi", 2, {{"model", "gpt-4"}}));
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.j()["model"], "tiny");
}

// /v1/cache's recent rows carry the ids their clients saw, streamed or not, and the note on
// follow-up turns.
TEST_F(ServerTest, CacheRowsCarryClientIds) {
  const Http chat = post(s(), "/v1/chat/completions", chat_body("ids for the cache", 3));
  ASSERT_EQ(chat.status, 200);
  const Http stream =
      post(s(), "/v1/completions", completion_body("ids, streamed", 3, {{"stream", true}}));
  ASSERT_EQ(stream.status, 200);
  const std::string chat_id = chat.j()["id"];
  const std::string stream_id = json::parse(sse_data(stream.body).at(0))["id"];
  EXPECT_EQ(chat_id.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(stream_id.rfind("cmpl-", 0), 0u);
  json cache;
  ASSERT_TRUE(wait_for([&] {
    cache = curl(s(), "GET", "/v1/cache").j();
    int found = 0;
    for (const json& r : cache["recent"]) found += r["id"] == chat_id || r["id"] == stream_id;
    return found == 2;
  })) << cache.dump();
  for (const json& r : cache["recent"]) {
    EXPECT_TRUE(r["engine_id"].is_number_integer()) << r;
    EXPECT_TRUE(r["id"].is_string()) << r;
  }
  const std::string note = cache["notes"]["follow_up_turn"];
  EXPECT_NE(note.find("re-renders"), std::string::npos) << note;
  // The checkpoint grid and why it was chosen (CheckpointPolicy::size_grid).
  const std::string why = cache["policy"]["interval_why"];
  EXPECT_EQ(why.rfind("interval " + std::to_string(cache["policy"]["interval"].get<int64_t>()), 0),
            0u)
      << why;
}

// The note's claim on the built-in model: a follow-up turn diverges from the cache where the
// previous reply began (the template re-renders the reply without the generated reasoning
// block), and resumes from the checkpoint at the end of the previous prompt.
TEST(ServerCache, FollowUpTurnResumesAtThePreviousReply) {
  auto srv = Server::start({}, std::string(REWIND_TEST_DATA) + "/../../models/kjv-target");
  ASSERT_NE(srv, nullptr);
  json turn = {{"messages", json::array({{{"role", "user"}, {"content", "Who begat Enoch?"}}})},
               {"max_tokens", 12},
               {"temperature", 0}};
  const Http first = post(*srv, "/v1/chat/completions", turn);
  ASSERT_EQ(first.status, 200) << first.body;
  const int prompt1 = first.j()["usage"]["prompt_tokens"].get<int>();
  turn["messages"].push_back(
      {{"role", "assistant"}, {"content", first.j()["choices"][0]["message"]["content"]}});
  turn["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  const Http second = post(*srv, "/v1/chat/completions", turn);
  ASSERT_EQ(second.status, 200) << second.body;
  const json cache = curl(*srv, "GET", "/v1/cache").j();
  const json last = cache["recent"].back();
  EXPECT_EQ(last["id"], second.j()["id"]);
  EXPECT_EQ(last["hit"], "checkpoint");
  EXPECT_EQ(last["diverged_at"].get<int>(), prompt1);
  EXPECT_EQ(last["resumed_at"].get<int>(), prompt1 - 1);
  EXPECT_EQ(last["lost_to_spacing"].get<int>(), 1);
}

// ---- several models --------------------------------------------------------------------------

// A second tiny model unlike the first: attention only, its own weights (the same tokenizer).
const std::string& dense_model_dir() {
  static const std::string d = [] {
    const std::string dir = tmp_dir() + "/tiny-dense";
    int rc = 0;
    const std::string out = test::run_command(
        std::string(REWIND_BINARY) + " make-model --preset tiny-dense --out " + dir + " 2>&1", &rc);
    if (rc != 0) {
      std::fprintf(stderr, "make-model failed: %s\n", out.c_str());
      std::abort();
    }
    return dir;
  }();
  return d;
}

// What a greedy answer says, bit for bit: the text and every token's logprob.
std::string greedy_signature(const Http& h, bool chat) {
  const json j = h.j();
  if (!j.contains("choices")) return "error: " + h.body;
  const json& c = j["choices"][0];
  return (chat ? c["message"]["content"].dump() : c["text"].dump()) + " " + c["logprobs"].dump();
}

// The number after `key` on the /metrics page (-1 when absent).
double metric_after(const std::string& page, const std::string& key) {
  const size_t at = page.find(key + " ");
  return at == std::string::npos ? -1 : std::atof(page.c_str() + at + key.size() + 1);
}

// Two models behind one server: each request is answered by the model it names, exactly as a
// server of that model alone answers it (greedy text and logprobs); no name goes to the first;
// an unknown name is 404; /v1/models, /v1/cache, /props, /tokenize, /metrics and the access log
// say which model.
TEST(SeveralModels, EachRequestIsAnsweredByTheModelItNames) {
  const std::string log = tmp_path("models.log");
  auto srv = Server::start({"--model", "a=" + model_dir(), "--model", "b,bee=" + dense_model_dir(),
                            "--api-key", kKey, "--log-file", log},
                           Server::kModelsInArgs);
  ASSERT_NE(srv, nullptr);
  auto solo_a = Server::start({"--api-key", kKey});
  auto solo_b = Server::start({"--api-key", kKey}, dense_model_dir());
  ASSERT_NE(solo_a, nullptr);
  ASSERT_NE(solo_b, nullptr);

  const Http models = curl(*srv, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  std::vector<std::string> ids;
  const json listed = models.j();
  for (const json& m : listed["data"]) {
    ids.push_back(m["id"]);
    EXPECT_EQ(m["max_model_len"], 32768);
    EXPECT_EQ(m["root"], m["id"] == "bee" ? "b" : m["id"]) << m;  // the model a name is of
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "bee"}));

  const json chat = chat_body("Which model are you?", 8, {{"logprobs", true}, {"top_logprobs", 2}});
  const json comp = completion_body("In the beginning", 8, {{"logprobs", 2}});
  std::map<std::string, std::string> sig;  // the two-model server's answers by the name asked
  for (const std::string name : {"a", "b", "bee", ""}) {
    for (bool is_chat : {true, false}) {
      json body = is_chat ? chat : comp;
      if (name.empty()) {
        body.erase("model");
      } else {
        body["model"] = name;
      }
      const Http h = post(*srv, is_chat ? "/v1/chat/completions" : "/v1/completions", body);
      ASSERT_EQ(h.status, 200) << name << ": " << h.body;
      EXPECT_EQ(h.j()["model"], name.empty() ? "a" : name);
      sig[name + (is_chat ? "/chat" : "/comp")] = greedy_signature(h, is_chat);
    }
  }
  for (bool is_chat : {true, false}) {
    const std::string k = is_chat ? "/chat" : "/comp";
    const char* path = is_chat ? "/v1/chat/completions" : "/v1/completions";
    const json body = is_chat ? chat : comp;
    const std::string alone_a = greedy_signature(post(*solo_a, path, body), is_chat);
    const std::string alone_b = greedy_signature(post(*solo_b, path, body), is_chat);
    EXPECT_NE(alone_a, alone_b) << "the two models must answer differently for this test";
    EXPECT_EQ(sig["a" + k], alone_a);
    EXPECT_EQ(sig["" + k], alone_a);
    EXPECT_EQ(sig["b" + k], alone_b);
    EXPECT_EQ(sig["bee" + k], alone_b);
  }
  // Streamed from model b: the same text as b alone.
  {
    json body = chat_body("Which model are you?", 8, {{"model", "bee"}, {"stream", true}});
    const Http h = post(*srv, "/v1/chat/completions", body);
    ASSERT_EQ(h.status, 200);
    std::string text;
    for (const std::string& d : sse_data(h.body)) {
      if (d == "[DONE]") continue;
      const json c = json::parse(d);
      EXPECT_EQ(c["model"], "bee");
      if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
        text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
    body.erase("stream");
    const Http alone = post(*solo_b, "/v1/chat/completions", body);
    EXPECT_EQ(text, alone.j()["choices"][0]["message"]["content"]);
  }

  // An unknown name: 404 in OpenAI's shape, whole, streamed and on /tokenize.
  for (bool stream : {false, true}) {
    const Http e = post(*srv, "/v1/chat/completions",
                        chat_body("x", 2, {{"model", "gpt-4"}, {"stream", stream}}));
    EXPECT_EQ(e.status, 404) << e.body;
    EXPECT_EQ(e.j()["error"]["code"], "model_not_found");
    const std::string msg = e.j()["error"]["message"];
    EXPECT_NE(msg.find("'a', 'b', 'bee'"), std::string::npos) << msg;
  }
  EXPECT_EQ(post(*srv, "/tokenize", {{"model", "gpt-4"}, {"content", "x"}}).status, 404);

  // /tokenize per model (the same tokenizer here: the same ids as b alone); "model" is a
  // field of /tokenize, not an ignored one.
  const Http tk = post(*srv, "/tokenize", {{"model", "b"}, {"content", "In the beginning"}});
  ASSERT_EQ(tk.status, 200) << tk.body;
  EXPECT_EQ(tk.j(), post(*solo_b, "/tokenize", {{"content", "In the beginning"}}).j());
  const std::string head = tmp_path("h.txt");
  EXPECT_EQ(curl(*srv, "POST", "/tokenize", json({{"model", "b"}, {"content", "x"}}).dump(), kKey,
                 "-D " + head)
                .status,
            200);
  EXPECT_EQ(read_file(head).find("X-Rewind-Ignored-Fields"), std::string::npos) << read_file(head);

  // /props and /v1/cache of each model (?model=NAME; none: the first).
  const Http props_b = curl(*srv, "GET", "/props?model=bee");
  ASSERT_EQ(props_b.status, 200) << props_b.body;
  EXPECT_EQ(props_b.j()["model_alias"], "b");
  EXPECT_EQ(props_b.j()["model_path"], dense_model_dir());
  EXPECT_EQ(curl(*srv, "GET", "/props").j()["model_path"], model_dir());
  EXPECT_EQ(curl(*srv, "GET", "/props?model=nope").status, 404);
  EXPECT_EQ(curl(*srv, "GET", "/props?model=a&model=b").status, 400);
  const json cache_a = curl(*srv, "GET", "/v1/cache").j();
  const json cache_b = curl(*srv, "GET", "/v1/cache?model=b").j();
  EXPECT_EQ(cache_a["model"], "a");
  EXPECT_EQ(cache_b["model"], "b");
  // Model a ran 2 chat and 2 completion requests, b 3 and 2 (its stream included): each
  // engine saw its own.
  EXPECT_EQ(cache_a["recent"].size(), 4u) << cache_a.dump();
  EXPECT_EQ(cache_b["recent"].size(), 5u) << cache_b.dump();
  const Http tree = curl(*srv, "GET", "/v1/cache/tree?max_nodes=5&model=b");
  ASSERT_EQ(tree.status, 200) << tree.body;
  EXPECT_EQ(tree.j()["model"], "b");
  EXPECT_EQ(curl(*srv, "GET", "/v1/cache/tree?model=b&max_nodes=0").status, 400);

  // /metrics: each model's figures under its label; the memory bound's shared terms without.
  const std::string page = curl(*srv, "GET", "/metrics").body;
  for (const auto& [name, n] : {std::pair{"a", 4}, std::pair{"b", 5}}) {
    const std::string l = std::string("{model=\"") + name + "\",outcome=";
    EXPECT_EQ(metric_after(page, "rewind_engine_requests_total" + l + "\"finished\"}"), n) << page;
    // How the server's requests ended for their clients: stop or length (max_tokens).
    EXPECT_EQ(metric_after(page, "rewind_requests_total" + l + "\"stop\"}") +
                  metric_after(page, "rewind_requests_total" + l + "\"length\"}"),
              n)
        << page;
  }
  EXPECT_GT(metric_after(page, "rewind_memory_bound_term_bytes{model=\"b\",term=\"weights\"}"), 0);
  EXPECT_GT(metric_after(page, "rewind_memory_bound_term_bytes{term=\"http\"}"), 0);

  // The access log names the model that answered, or the name refused.
  auto count = [&](const std::string& needle, size_t n) {
    return log_lines(log, n,
                     [&](const std::string& l) { return l.find(needle) != std::string::npos; })
        .size();
  };
  EXPECT_EQ(count("\"POST /v1/chat/completions\" 200 model=bee ", 2), 2u) << read_file(log);
  EXPECT_EQ(count("\"POST /v1/completions\" 200 model=a ", 2), 2u) << read_file(log);
  EXPECT_EQ(count("\" 404 model=gpt-4 ", 3), 3u) << read_file(log);
  EXPECT_EQ(count("\"GET /props\" 200 model=b ", 1), 1u) << read_file(log);
}

// Names are checked at start: two models of one name, --alias beside NAME=PATH, an empty name
// or path.
TEST(SeveralModels, BadModelOptionsFail) {
  const std::string serve = std::string(REWIND_BINARY) + " serve --port 0 ";
  int rc = 0;
  std::string out = test::run_command(
      serve + "--model " + model_dir() + " --model " + model_dir() + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("two models are named 'tiny'"), std::string::npos) << out;
  out = test::run_command(
      serve + "--model x=" + model_dir() + " --model y,x=" + dense_model_dir() + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("two models are named 'x'"), std::string::npos) << out;
  out = test::run_command(serve + "--model x=" + model_dir() + " --alias y 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--alias names the one model"), std::string::npos) << out;
  out = test::run_command(serve + "--model x= 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("NAME=PATH needs a path"), std::string::npos) << out;
  out = test::run_command(serve + "--model ',x='" + model_dir() + " 2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("a model name must be non-empty"), std::string::npos) << out;
}

// The official npm client against two models: the listed ids, each model's greedy reply (whole
// equal to streamed, and equal to the model's own server's), NotFoundError for another name.
TEST(SeveralModels, OpenAiNodeClient) {
  REQUIRE_NODE_CLIENT();
  auto srv = Server::start(
      {"--model", "a=" + model_dir(), "--model", "b=" + dense_model_dir(), "--api-key", kKey},
      Server::kModelsInArgs);
  ASSERT_NE(srv, nullptr);
  int rc = 0;
  const std::string out = test::run_command(
      "cd " + node_client_dir() + " && OPENAI_BASE_URL=" + srv->url() +
          "/v1 OPENAI_API_KEY=" + kKey + " REWIND_MODELS=a,b node models_test.mjs 2>&1",
      &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok: all 5 checks"), std::string::npos) << out;
  const size_t at = out.find("replies: ");
  ASSERT_NE(at, std::string::npos) << out;
  const json replies = json::parse(out.substr(at + 9, out.find('\n', at) - at - 9));
  const json ask = {
      {"messages", json::array({{{"role", "system"}, {"content", "You are terse."}},
                                {{"role", "user"}, {"content", "Which model are you?"}}})},
      {"max_tokens", 10},
      {"temperature", 0}};
  auto solo_a = Server::start({"--api-key", kKey});
  auto solo_b = Server::start({"--api-key", kKey}, dense_model_dir());
  ASSERT_NE(solo_a, nullptr);
  ASSERT_NE(solo_b, nullptr);
  const json a = post(*solo_a, "/v1/chat/completions", ask).j();
  const json b = post(*solo_b, "/v1/chat/completions", ask).j();
  EXPECT_EQ(replies["a"], a["choices"][0]["message"]["content"]) << out;
  EXPECT_EQ(replies["b"], b["choices"][0]["message"]["content"]) << out;
  EXPECT_NE(replies["a"], replies["b"]);
}

// Two models busy at once share the --threads threads (their shared jobs take turns) and one
// draft model, loaded once: every reply, greedy with speculation on, equals the reply of a
// server of that model alone (text and logprobs, bit for bit). The prompts are long enough
// that the prefill's jobs go to the shared threads.
TEST(SeveralModels, BusyModelsShareThreadsAndADraftAndAnswerAsAlone) {
  const std::string spec = "draft:" + dense_model_dir();
  auto srv = Server::start({"--model", "a=" + model_dir(), "--model", "b=" + dense_model_dir(),
                            "--threads", "2", "--spec", spec, "--api-key", kKey},
                           Server::kModelsInArgs);
  ASSERT_NE(srv, nullptr);
  EXPECT_NE(srv->log().find("draft model " + dense_model_dir() + " loaded once, shared by a, b"),
            std::string::npos)
      << srv->log();
  auto solo_a = Server::start({"--threads", "2", "--spec", spec, "--api-key", kKey});
  auto solo_b =
      Server::start({"--threads", "2", "--spec", spec, "--api-key", kKey}, dense_model_dir());
  ASSERT_NE(solo_a, nullptr);
  ASSERT_NE(solo_b, nullptr);
  std::vector<json> asks;
  for (int i = 0; i < 3; ++i) {
    std::string text;
    for (int r = 0; r < 40; ++r) text += "line " + std::to_string(r * (i + 3)) + " of the book; ";
    asks.push_back(chat_body(text, 16, {{"logprobs", true}, {"top_logprobs", 2}}));
  }
  std::map<std::string, std::string> alone;  // "model/i" -> signature
  for (size_t i = 0; i < asks.size(); ++i) {
    json body = asks[i];
    body.erase("model");
    alone["a/" + std::to_string(i)] =
        greedy_signature(post(*solo_a, "/v1/chat/completions", body), true);
    alone["b/" + std::to_string(i)] =
        greedy_signature(post(*solo_b, "/v1/chat/completions", body), true);
  }
  EXPECT_NE(alone["a/0"], alone["b/0"]);
  for (int round = 0; round < 2; ++round) {  // the second round resumes from the caches
    std::map<std::string, std::string> got;
    std::mutex mu;
    std::vector<std::thread> ts;
    for (const std::string m : {"a", "b"})
      for (size_t i = 0; i < asks.size(); ++i)
        ts.emplace_back([&, m, i] {
          json body = asks[i];
          body["model"] = m;
          const std::string sig = greedy_signature(post(*srv, "/v1/chat/completions", body), true);
          const std::lock_guard<std::mutex> lock(mu);
          got[m + "/" + std::to_string(i)] = sig;
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(got, alone) << "round " << round;
  }
  // The draft ran for both models.
  const std::string page = curl(*srv, "GET", "/metrics").body;
  for (const char* m : {"a", "b"})
    EXPECT_GT(
        metric_after(page, std::string("rewind_spec_drafted_tokens_total{model=\"") + m + "\"}"), 0)
        << page;
}

// --model-opt NAME:OPTION=VALUE sets a per-model option for one model; the rest keep the
// server's. Malformed or refused values stop the start with a message that names the problem.
TEST(SeveralModels, PerModelOptions) {
  auto srv = Server::start({"--model", "a=" + model_dir(), "--model", "b,bee=" + dense_model_dir(),
                            "--model-opt", "bee:ctx-size=4096", "--model-opt", "a:parallel=2",
                            "--model-opt", "b:no-cache", "--api-key", kKey},
                           Server::kModelsInArgs);
  ASSERT_NE(srv, nullptr);
  std::map<std::string, int64_t> len;
  const json listed = curl(*srv, "GET", "/v1/models").j();
  for (const json& m : listed["data"]) len[m["id"]] = m["max_model_len"];
  EXPECT_EQ(len, (std::map<std::string, int64_t>{{"a", 32768}, {"b", 4096}, {"bee", 4096}}));
  // The banner gives each model's own sizes.
  const std::string log = srv->log();
  EXPECT_NE(log.find("a: parallel 2, ctx 32768, itl target "), std::string::npos) << log;
  EXPECT_NE(log.find("; b: parallel 4, ctx 4096, itl target "), std::string::npos) << log;
  const json pa = curl(*srv, "GET", "/props?model=a").j();
  const json pb = curl(*srv, "GET", "/props?model=b").j();
  EXPECT_EQ(pa["total_slots"], 2);
  EXPECT_EQ(pb["total_slots"], 4);
  EXPECT_EQ(pb["n_ctx"], 4096);
  EXPECT_EQ(pa["cache"]["enabled"], true);
  EXPECT_EQ(pb["cache"]["enabled"], false);
  // b's own limit: a prompt + max_tokens over 4096 is refused for b, not for a.
  EXPECT_EQ(post(*srv, "/v1/completions", completion_body("x", 5000, {{"model", "b"}})).status,
            400);
  EXPECT_EQ(post(*srv, "/v1/completions", completion_body("x", 2, {{"model", "a"}})).status, 200);

  const std::string serve = std::string(REWIND_BINARY) +
                            " serve --port 0 --model a=" + model_dir() +
                            " --model b=" + dense_model_dir() + " ";
  for (const auto& [opt, want] : std::vector<std::pair<std::string, std::string>>{
           {"b", "expected NAME:OPTION=VALUE"},
           {":ctx-size=5", "expected NAME:OPTION=VALUE"},
           {"c:ctx-size=5", "no model is named 'c'"},
           {"b:port=1", "a model may set only ctx-size, n-predict, parallel"},
           {"b:threads=1", "a model may set only"},
           {"b:nope=1", "a model may set only"},
           {"b:no-cache=1", "--no-cache takes no value"},
           {"b:ctx-size", "--ctx-size needs a value"},
           {"b:ctx-size=", "--ctx-size needs a value"},
           {"b:ctx-size=abc", "b: "},
           {"b:ctx-size=1", "b: --ctx-size must be >= 2"},
           {"b:chunk=4", "b: --chunk must exceed --parallel"},
           {"b:spec=bogus", "b: --spec must be"},
           {"b:itl-target=1x", "b: --itl-target: a step target is off"},
           {"b:itl-target=fast", "b: --itl-target: a step target is off"},
       }) {
    int rc = 0;
    const std::string out = test::run_command(serve + "--model-opt '" + opt + "' 2>&1", &rc);
    EXPECT_EQ(rc, 1) << opt << ": " << out;
    EXPECT_NE(out.find(want), std::string::npos) << opt << ": " << out;
  }
  // A shared draft must fit every model that uses it: a model of another vocabulary is named,
  // with the way out; given its own --spec it starts.
  const std::string kjv = std::string(REWIND_TEST_DATA) + "/../../models/kjv-target";
  const std::string mixed = std::string(REWIND_BINARY) +
                            " serve --port 0 --model a=" + model_dir() + " --model k=" + kjv +
                            " --spec draft:" + dense_model_dir() + " ";
  int rc = 0;
  std::string out = test::run_command(mixed + "2>&1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("k: speculative: the draft model's vocabulary"), std::string::npos) << out;
  EXPECT_NE(out.find("--model-opt NAME:spec="), std::string::npos) << out;
  auto ok = Server::start(
      {"--model", "a=" + model_dir(), "--model", "k=" + kjv, "--spec", "draft:" + dense_model_dir(),
       "--model-opt", "k:spec=ngram", "--api-key", kKey},
      Server::kModelsInArgs);
  ASSERT_NE(ok, nullptr);
  EXPECT_NE(ok->log().find("shared by a\n"), std::string::npos) << ok->log();
  EXPECT_EQ(curl(*ok, "GET", "/props?model=k").j()["speculative"]["kind"], "ngram");
  EXPECT_EQ(curl(*ok, "GET", "/props?model=a").j()["speculative"]["kind"], "draft");
  // A request that asks model k for the draft it was not given is told how to give it one.
  expect_error(post(*ok, "/v1/completions",
                    completion_body("x", 2, {{"model", "k"}, {"speculative", "draft"}})),
               400, "--model-opt NAME:spec=draft:DIR");
}

}  // namespace
}  // namespace rw
