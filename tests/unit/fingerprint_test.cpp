// Model fingerprints (model/fingerprint.h) and the file digests behind them (io/file_digest.h):
// stable for one model, different for another model or other weight bytes, and a digest read
// from its side file only while the file's size and modification time are unchanged.
#include "rewind/model/fingerprint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rewind/io/file_digest.h"
#include "test_util.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const std::string d = fs::temp_directory_path().string() + "/rewind_fingerprint_test_" +
                        std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(Fingerprint, StablePerModelAndDifferentAcrossModels) {
  const std::string a_dir = test::fixture_dir("qwen3_5"), b_dir = test::fixture_dir("qwen3_5_moe");
  const Model& a = test::cached_model(a_dir);
  const Model& b = test::cached_model(b_dir);
  const std::string dir = scratch("models");
  auto fa = model_fingerprint(a_dir, a, dir + "/digests");
  auto fa2 = model_fingerprint(a_dir, a, "");
  auto fb = model_fingerprint(b_dir, b, dir + "/digests");
  ASSERT_TRUE(fa.ok() && fa2.ok() && fb.ok()) << fa.error_message() << fb.error_message();
  EXPECT_EQ(fa.value(), fa2.value()) << "the digest cache gives the bytes' digest";
  EXPECT_NE(fa.value(), fb.value());
  EXPECT_NE(fa.value(), model_fingerprint(a_dir, a, "", "bf16").value()) << "the KV type counts";
  EXPECT_FALSE(model_fingerprint(dir + "/missing", a, "").ok());
  fs::remove_all(dir);
}

TEST(FileDigest, CachedWhileSizeAndTimeHold) {
  const std::string dir = scratch("digest");
  const std::string f = dir + "/w.bin", cache = dir + "/digests";
  std::ofstream(f) << "weights one";
  auto d1 = file_digest(f, cache);
  ASSERT_TRUE(d1.ok());
  EXPECT_EQ(d1.value(), xxh3_128("weights one", 11));
  EXPECT_NE(test::read_file(cache).find(d1.value().hex()), std::string::npos);
  // A cache line that lies is believed while size and mtime match (that is what caching means)...
  const std::string line = test::read_file(cache);
  std::string forged = line;
  forged.replace(forged.find(d1.value().hex()), 32, std::string(32, 'a'));
  std::ofstream(cache, std::ios::trunc) << forged;
  Hash128 aaa;
  ASSERT_TRUE(Hash128::from_hex(std::string(32, 'a'), &aaa));
  EXPECT_EQ(file_digest(f, cache).value(), aaa);
  // ...and dropped once the file changes (same size, new mtime).
  std::ofstream(f, std::ios::trunc) << "weights two";
  struct timespec ts[2] = {{0, UTIME_NOW}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, f.c_str(), ts, 0), 0);
  EXPECT_EQ(file_digest(f, cache).value(), xxh3_128("weights two", 11));
  // A damaged cache file is ignored.
  std::ofstream(cache, std::ios::trunc) << "garbage\n1 2 zz /x\n";
  EXPECT_EQ(file_digest(f, cache).value(), xxh3_128("weights two", 11));
  EXPECT_FALSE(file_digest(dir + "/missing", cache).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rw
