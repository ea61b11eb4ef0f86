// `rewind serve --cache-dir`: the disk tier of the prefix cache end to end, on the built binary
// (REWIND_BINARY) and the tiny seeded model. A long chat is served, the server stops (SIGTERM, or
// kill -9 once its writes are done) and a new server on the same directory gets the chat with its
// third user turn edited: it must resume from disk (re-running at most the checkpoint spacing plus
// the edited suffix) and answer exactly as a cold server does (greedy text and the
// log-probabilities of every token with its top alternatives, the first token's included). Faults:
// kill -9 halfway through a file, truncated and bit-flipped files, files of another model, a full
// disk (injected) and a disk budget smaller than the chat: every answer stays that of a cold server
// and the server stays up, with the errors counted in /v1/cache.
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

#include "rewind/cache/tier_format.h"
#include "scratch.h"
#include "test_util.h"

namespace rw {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

using test::model_dir;
using test::tmp_dir;
using test::tmp_path;

constexpr int kInterval = 16;

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

Http curl(const Server& s, const std::string& method, const std::string& path,
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
json chat(const std::string& third) {
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

const std::string kThird = "What did they do when the lamp failed on a stormy night at sea?";
const std::string kEdited = "What did they do when the lamp failed on a calm night in the harbour?";

Http ask(const Server& s, const json& body) {
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
const Reference& reference() {
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

json disk_stats(const Server& s) {
  return curl(s, "GET", "/v1/cache").j()["disk"];
}

// Waits until the writer has nothing queued and has written at least `writes` objects.
bool writes_settle(const Server& s, int writes) {
  for (int i = 0; i < 500; ++i) {
    const json d = disk_stats(s);
    if (d.is_object() && d["queued"].get<int>() == 0 && d["writes"].get<int>() >= writes)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// The edited chat on a server with the cache directory: the reference's answer, and a resume
// from disk re-running at most the spacing plus the edited suffix (when `expect_disk`).
void expect_edited_answer(const Server& s, bool expect_disk) {
  const Reference& ref = reference();
  ASSERT_GT(ref.edit_at, ref.prompt_tokens / 3) << "the edit lies after the first turns";
  const Http h = ask(s, chat(kEdited));
  const json u = h.j()["usage"];
  EXPECT_EQ(h.j()["choices"], ref.choices) << "the answer after a restart equals a cold server's";
  const int cached = u["prompt_tokens_details"]["cached_tokens"].get<int>();
  const int rerun = u["rewind"]["rerun_tokens"].get<int>();
  EXPECT_EQ(cached + rerun, ref.prompt_tokens);
  EXPECT_LE(cached, ref.edit_at);
  if (expect_disk) {
    EXPECT_LE(rerun, kInterval + (ref.prompt_tokens - ref.edit_at))
        << "resumed from the newest checkpoint before the edit (cached " << cached << ", edit at "
        << ref.edit_at << ")";
    EXPECT_GT(u["rewind"]["tier_tokens"].get<int>(), 0) << u.dump();
    const json d = disk_stats(s);
    EXPECT_GE(d["hits"].get<int>(), 1) << d.dump();
    EXPECT_GT(d["bytes_read"].get<int>(), 0) << d.dump();
  }
  EXPECT_EQ(curl(s, "GET", "/health").status, 200);
}

// Serves the original chat on a fresh directory and waits for its files.
std::string serve_original(int stop_signal) {
  const std::string dir = tmp_path("cache");
  auto a = Server::start({"--cache-dir", dir});
  if (!a) return dir;
  ask(*a, chat(kThird));
  EXPECT_TRUE(writes_settle(*a, 10));
  if (stop_signal == SIGTERM)
    EXPECT_EQ(a->stop(SIGTERM), 0) << a->log();
  else
    a->stop(SIGKILL);
  return dir;
}

std::vector<fs::path> object_files(const std::string& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".ckpt" || ext == ".page") v.push_back(e.path());
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(DiskCache, RestartAfterSigtermResumesTheEditedTurnFromDisk) {
  const std::string dir = serve_original(SIGTERM);
  auto b = Server::start({"--cache-dir", dir});
  ASSERT_NE(b, nullptr);
  EXPECT_GT(disk_stats(*b)["restored_at_start"].get<int>(), 10);
  expect_edited_answer(*b, true);
  // /metrics carries the same figures.
  const std::string m = curl(*b, "GET", "/metrics").body;
  EXPECT_NE(m.find("rewind_cache_disk_hits_total 1"), std::string::npos) << m;
  EXPECT_NE(m.find("rewind_cache_disk_read_bytes_total"), std::string::npos);
  EXPECT_NE(m.find("rewind_cache_disk_read_seconds_total"), std::string::npos);
}

TEST(DiskCache, RestartAfterKill9ResumesTheEditedTurnFromDisk) {
  const std::string dir = serve_original(SIGKILL);
  auto b = Server::start({"--cache-dir", dir});
  ASSERT_NE(b, nullptr);
  expect_edited_answer(*b, true);
}

TEST(DiskCache, Kill9HalfwayThroughAWrite) {
  const std::string dir = tmp_path("cache");
  {
    // Every file pauses halfway: the kill lands in the middle of one.
    auto a = Server::start({"--cache-dir", dir}, {{"REWIND_TEST_CACHE_WRITE_PAUSE_MS", "400"}});
    ASSERT_NE(a, nullptr);
    ask(*a, chat(kThird));
    bool tmp_seen = false;
    for (int i = 0; i < 200 && !tmp_seen; ++i) {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".tmp" && fs::file_size(e.path()) > 0) tmp_seen = true;
      if (!tmp_seen) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(tmp_seen);
    std::this_thread::sleep_for(100ms);
    a->stop(SIGKILL);
  }
  auto b = Server::start({"--cache-dir", dir});
  ASSERT_NE(b, nullptr);
  const json d = disk_stats(*b);
  EXPECT_EQ(d["errors"]["stale_temp"].get<int>(), 1) << d.dump();
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp");
  expect_edited_answer(*b, false);
  EXPECT_TRUE(b->alive());
}

TEST(DiskCache, TruncatedAndFlippedFilesAreRecomputed) {
  const std::string dir = serve_original(SIGTERM);
  const auto files = object_files(dir);
  ASSERT_GT(files.size(), 10u);
  // Every other checkpoint truncated (found at start), every other file a payload byte flipped
  // (found when read).
  int truncated = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i % 2 == 0 && files[i].extension() == ".ckpt") {
      fs::resize_file(files[i], fs::file_size(files[i]) / 2);
      ++truncated;
    } else {
      std::fstream f(files[i], std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(kTierHeaderBytes + 5));
      const int c = f.get();
      f.seekp(static_cast<std::streamoff>(kTierHeaderBytes + 5));
      f.put(static_cast<char>(c ^ 0x10));
    }
  }
  auto b = Server::start({"--cache-dir", dir});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(disk_stats(*b)["errors"]["corrupt"].get<int>(), truncated);
  expect_edited_answer(*b, false);
  const json d = disk_stats(*b);
  EXPECT_GE(d["errors"]["corrupt"].get<int>(), truncated + 1)
      << "a flipped byte was met: " << d.dump();
  EXPECT_EQ(d["hits"].get<int>(), 0) << d.dump();
  const std::string log = b->log();
  EXPECT_NE(log.find("truncated"), std::string::npos) << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
  // A second ask: an exact repeat, from RAM now, the same answer.
  EXPECT_EQ(ask(*b, chat(kEdited)).j()["choices"], reference().choices);
}

TEST(DiskCache, FilesOfAnotherModelAreSkipped) {
  const std::string dir = serve_original(SIGTERM);
  // Each file rewritten as another model's (another fingerprint), under the same name.
  int n = 0;
  for (const auto& p : object_files(dir)) {
    std::string bytes = test::read_file(p.string());
    TierExpect any;
    TierParse h = parse_tier_header(
        std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), bytes.size(), any);
    ASSERT_EQ(h.error, TierFileError::Fingerprint);
    h.header.fingerprint.lo ^= 0x1234;
    const auto hd = encode_tier_header(h.header);
    std::memcpy(bytes.data(), hd.data(), hd.size());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    ++n;
  }
  auto b = Server::start({"--cache-dir", dir});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(disk_stats(*b)["errors"]["foreign"].get<int>(), n);
  EXPECT_EQ(disk_stats(*b)["objects"].get<int>(), 0);
  EXPECT_NE(b->log().find("another model"), std::string::npos);
  expect_edited_answer(*b, false);
  EXPECT_EQ(object_files(dir).size() >= static_cast<size_t>(n), true)
      << "foreign files are left alone";
}

TEST(DiskCache, FullDiskAndTinyBudgetKeepAnswersRight) {
  const std::string dir = tmp_path("cache");
  {
    auto a = Server::start({"--cache-dir", dir}, {{"REWIND_TEST_CACHE_FAIL_AFTER_BYTES", "60000"}});
    ASSERT_NE(a, nullptr);
    ask(*a, chat(kThird));
    ASSERT_TRUE(writes_settle(*a, 1));
    const json d = disk_stats(*a);
    EXPECT_GT(d["errors"]["write"].get<int>(), 0) << d.dump();
    EXPECT_LE(d["bytes_written"].get<int>(), 60000);
    expect_edited_answer(*a, false);
    EXPECT_NE(a->log().find("No space left on device"), std::string::npos) << a->log();
    EXPECT_EQ(a->stop(SIGTERM), 0);
  }
  {
    auto b = Server::start({"--cache-dir", dir});
    ASSERT_NE(b, nullptr);
    expect_edited_answer(*b, false);
  }
  const std::string small = tmp_path("cache");
  auto c = Server::start({"--cache-dir", small, "--cache-disk", "0.0002"});  // ~210 KB
  ASSERT_NE(c, nullptr);
  ask(*c, chat(kThird));
  ASSERT_TRUE(writes_settle(*c, 1));
  const json d = disk_stats(*c);
  EXPECT_GT(d["evictions"].get<int>(), 0) << d.dump();
  EXPECT_LE(d["bytes"].get<double>(), d["budget_bytes"].get<double>());
  uint64_t on_disk = 0;
  for (const auto& p : object_files(small)) on_disk += fs::file_size(p);
  EXPECT_EQ(on_disk, d["bytes"].get<uint64_t>());
  expect_edited_answer(*c, false);
}

// Without recurrent layers there are no snapshots: the tier holds full KV pages, and a resume
// from it lands on a page boundary.
TEST(DiskCache, AttentionOnlyModelResumesFromFullPages) {
  const std::string model = tmp_dir() + "/dense";
  int rc = 0;
  test::run_command(
      std::string(REWIND_BINARY) + " make-model --preset tiny-dense --out " + model + " 2>&1", &rc);
  ASSERT_EQ(rc, 0);
  json cold_choices;
  {
    auto c = Server::start({}, {}, model);
    ASSERT_NE(c, nullptr);
    cold_choices = ask(*c, chat(kEdited)).j()["choices"];
  }
  const std::string dir = tmp_path("cache");
  {
    auto a = Server::start({"--cache-dir", dir}, {}, model);
    ASSERT_NE(a, nullptr);
    ask(*a, chat(kThird));
    ASSERT_TRUE(writes_settle(*a, 3));
    EXPECT_EQ(a->stop(SIGTERM), 0);
  }
  auto b = Server::start({"--cache-dir", dir}, {}, model);
  ASSERT_NE(b, nullptr);
  const Http h = ask(*b, chat(kEdited));
  const int cached = h.j()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached, 0);
  EXPECT_EQ(cached % 64, 0) << cached;
  EXPECT_LE(cached, reference().edit_at);
  EXPECT_GT(cached, reference().edit_at - 64);
  EXPECT_EQ(h.j()["choices"], cold_choices);
  EXPECT_GE(disk_stats(*b)["hits"].get<int>(), 1);
}

TEST(DiskCache, BadOptionsAndASharedDirectoryFail) {
  int rc = 0;
  const std::string bin = REWIND_BINARY;
  test::run_command(bin + " serve --model " + model_dir() + " --cache-disk 4 2>&1", &rc);
  EXPECT_NE(rc, 0);
  test::run_command(bin + " serve --model " + model_dir() + " --cache-dir x --no-cache 2>&1", &rc);
  EXPECT_NE(rc, 0);
  const std::string dir = tmp_path("cache");
  test::run_command(
      bin + " serve --model " + model_dir() + " --cache-dir " + dir + " --cache-disk 0 2>&1", &rc);
  EXPECT_NE(rc, 0);
  auto a = Server::start({"--cache-dir", dir});
  ASSERT_NE(a, nullptr);
  const std::string out = test::run_command(
      bin + " serve --model " + model_dir() + " --port 0 --cache-dir " + dir + " 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("in use by another process"), std::string::npos) << out;
}

}  // namespace
}  // namespace rw
