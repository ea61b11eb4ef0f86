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
#include "tier_server.h"

namespace rw {
namespace {

using namespace test::tier;

// Serves the original chat on a fresh directory and waits for its files.
std::string serve_original(int stop_signal) {
  const std::string dir = tmp_path("cache");
  auto a = Server::start({"--cache-dir", dir});
  if (!a) return dir;
  ask(*a, chat(kThird));
  EXPECT_TRUE(writes_settle(*a, "disk", 10));
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
  EXPECT_GT(tier_stats(*b, "disk")["restored_at_start"].get<int>(), 10);
  expect_edited_answer(*b, "disk");
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
  expect_edited_answer(*b, "disk");
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
  const json d = tier_stats(*b, "disk");
  EXPECT_EQ(d["errors"]["stale_temp"].get<int>(), 1) << d.dump();
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp");
  expect_edited_answer(*b, nullptr);
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
  EXPECT_EQ(tier_stats(*b, "disk")["errors"]["corrupt"].get<int>(), truncated);
  expect_edited_answer(*b, nullptr);
  const json d = tier_stats(*b, "disk");
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
  EXPECT_EQ(tier_stats(*b, "disk")["errors"]["foreign"].get<int>(), n);
  EXPECT_EQ(tier_stats(*b, "disk")["objects"].get<int>(), 0);
  EXPECT_NE(b->log().find("another model"), std::string::npos);
  expect_edited_answer(*b, nullptr);
  EXPECT_EQ(object_files(dir).size() >= static_cast<size_t>(n), true)
      << "foreign files are left alone";
}

TEST(DiskCache, FullDiskAndTinyBudgetKeepAnswersRight) {
  const std::string dir = tmp_path("cache");
  {
    auto a = Server::start({"--cache-dir", dir}, {{"REWIND_TEST_CACHE_FAIL_AFTER_BYTES", "60000"}});
    ASSERT_NE(a, nullptr);
    ask(*a, chat(kThird));
    ASSERT_TRUE(writes_settle(*a, "disk", 1));
    const json d = tier_stats(*a, "disk");
    EXPECT_GT(d["errors"]["write"].get<int>(), 0) << d.dump();
    EXPECT_LE(d["bytes_written"].get<int>(), 60000);
    expect_edited_answer(*a, nullptr);
    EXPECT_NE(a->log().find("No space left on device"), std::string::npos) << a->log();
    EXPECT_EQ(a->stop(SIGTERM), 0);
  }
  {
    auto b = Server::start({"--cache-dir", dir});
    ASSERT_NE(b, nullptr);
    expect_edited_answer(*b, nullptr);
  }
  const std::string small = tmp_path("cache");
  auto c = Server::start({"--cache-dir", small, "--cache-disk", "0.0002"});  // ~210 KB
  ASSERT_NE(c, nullptr);
  ask(*c, chat(kThird));
  ASSERT_TRUE(writes_settle(*c, "disk", 1));
  const json d = tier_stats(*c, "disk");
  EXPECT_GT(d["evictions"].get<int>(), 0) << d.dump();
  EXPECT_LE(d["bytes"].get<double>(), d["budget_bytes"].get<double>());
  uint64_t on_disk = 0;
  for (const auto& p : object_files(small)) on_disk += fs::file_size(p);
  EXPECT_EQ(on_disk, d["bytes"].get<uint64_t>());
  expect_edited_answer(*c, nullptr);
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
    ASSERT_TRUE(writes_settle(*a, "disk", 3));
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
  EXPECT_GE(tier_stats(*b, "disk")["hits"].get<int>(), 1);
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
