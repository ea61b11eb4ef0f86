// DiskTier (cache/disk_tier.h) on its own: write-behind and read back, the index after a
// reopen, LRU under the budget, a full queue, an injected full disk, and files damaged or
// foreign on disk: each skipped with a count, never a wrong payload.
#include "rewind/cache/disk_tier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rewind/cache/tier_format.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const std::string d = fs::temp_directory_path().string() + "/rewind_disk_tier_test_" +
                        std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  return d;
}

struct Obj {
  ContentKey key;
  std::shared_ptr<std::vector<std::byte>> bytes;
};

Obj make(uint64_t id, size_t n) {
  Obj o{Hash128{id, ~id}, std::make_shared<std::vector<std::byte>>(n)};
  for (size_t i = 0; i < n; ++i) (*o.bytes)[i] = static_cast<std::byte>(id * 31 + i);
  return o;
}

TierPut put_of(const Obj& o, TierKind kind = TierKind::Page) {
  TierPut p;
  p.key = o.key;
  p.kind = kind;
  p.pos = 64;
  p.layout = TierLayout{0, o.bytes->size()};
  p.parts.push_back(std::span<const std::byte>(*o.bytes));
  p.owner = o.bytes;
  return p;
}

DiskTier::Options opts(const std::string& dir, std::vector<std::string>* log = nullptr) {
  DiskTier::Options o;
  o.dir = dir;
  o.fingerprint = Hash128{7, 8};
  if (log) o.log = [log](const std::string& l) { log->push_back(l); };
  return o;
}

bool read_back(DiskTier& t, const Obj& o, TierKind kind = TierKind::Page) {
  std::vector<std::byte> out(o.bytes->size());
  if (!t.get(o.key, kind, TierLayout{0, o.bytes->size()}, out)) return false;
  EXPECT_EQ(out, *o.bytes);
  return true;
}

TEST(DiskTier, WritesBehindReadsBackAndReopens) {
  const std::string dir = scratch("basic");
  const Obj a = make(1, 1000), b = make(2, 3000);
  {
    auto t = DiskTier::open(opts(dir));
    ASSERT_TRUE(t.ok()) << t.error_message();
    (*t)->put(put_of(a));
    (*t)->put(put_of(b, TierKind::Checkpoint));
    EXPECT_TRUE((*t)->contains(a.key, TierKind::Page));
    EXPECT_FALSE((*t)->contains(a.key, TierKind::Checkpoint));
    EXPECT_TRUE(read_back(**t, a));  // queued or written: the same bytes
    (*t)->flush();
    EXPECT_TRUE(read_back(**t, b, TierKind::Checkpoint));
    const TierStats s = (*t)->stats();
    EXPECT_EQ(s.writes, 2);
    EXPECT_EQ(s.objects, 2);
    EXPECT_EQ(s.bytes, 2 * kTierHeaderBytes + 4000);
    EXPECT_TRUE(fs::exists((*t)->path_of(a.key, TierKind::Page)));
    // A second process (here: a second open) may not share the directory.
    EXPECT_FALSE(DiskTier::open(opts(dir)).ok());
    // The layout asked for must match.
    std::vector<std::byte> wrong(999);
    EXPECT_FALSE((*t)->get(a.key, TierKind::Page, TierLayout{0, 999}, wrong));
  }
  auto t = DiskTier::open(opts(dir));
  ASSERT_TRUE(t.ok()) << t.error_message();
  EXPECT_EQ((*t)->stats().restored, 1);  // a was dropped as a wrong-layout read: corrupt
  EXPECT_TRUE(read_back(**t, b, TierKind::Checkpoint));
  fs::remove_all(dir);
}

TEST(DiskTier, LeastRecentlyUsedGoesFirstUnderTheBudget) {
  const std::string dir = scratch("lru");
  auto o = opts(dir);
  o.budget_bytes = 3 * (kTierHeaderBytes + 1000);
  auto t = DiskTier::open(o);
  ASSERT_TRUE(t.ok());
  const Obj a = make(1, 1000), b = make(2, 1000), c = make(3, 1000), d = make(4, 1000);
  (*t)->put(put_of(a));
  (*t)->put(put_of(b));
  (*t)->put(put_of(c));
  (*t)->flush();
  (*t)->touch(a.key, TierKind::Page);  // b is now the oldest
  (*t)->put(put_of(d));
  (*t)->flush();
  EXPECT_TRUE((*t)->contains(a.key, TierKind::Page));
  EXPECT_FALSE((*t)->contains(b.key, TierKind::Page));
  EXPECT_FALSE(fs::exists((*t)->path_of(b.key, TierKind::Page)));
  EXPECT_TRUE((*t)->contains(d.key, TierKind::Page));
  EXPECT_EQ((*t)->stats().evictions, 1);
  EXPECT_LE((*t)->stats().bytes, o.budget_bytes);
  // An object larger than the whole budget is refused at once.
  (*t)->put(put_of(make(5, 4000)));
  EXPECT_EQ((*t)->stats().dropped, 1);
  fs::remove_all(dir);
}

TEST(DiskTier, FullQueueDropsAndCounts) {
  const std::string dir = scratch("queue");
  auto o = opts(dir);
  o.queue_bytes = 2500;
  o.write_pause_ms = 200;  // the writer holds the first object a while
  auto t = DiskTier::open(o);
  ASSERT_TRUE(t.ok());
  for (uint64_t i = 1; i <= 4; ++i) (*t)->put(put_of(make(i, 1000)));
  (*t)->flush();
  const TierStats s = (*t)->stats();
  EXPECT_EQ(s.dropped, 2);
  EXPECT_EQ(s.writes, 2);
  fs::remove_all(dir);
}

TEST(DiskTier, FullDiskDropsObjectsAndKeepsWorking) {
  const std::string dir = scratch("enospc");
  std::vector<std::string> log;
  auto o = opts(dir, &log);
  o.fail_after_bytes = 2 * (kTierHeaderBytes + 1000) + 10;
  auto t = DiskTier::open(o);
  ASSERT_TRUE(t.ok());
  for (uint64_t i = 1; i <= 5; ++i) (*t)->put(put_of(make(i, 1000)));
  (*t)->flush();
  const TierStats s = (*t)->stats();
  EXPECT_EQ(s.writes, 2);
  EXPECT_EQ(s.write_errors, 3);
  EXPECT_EQ(s.objects, 2);
  EXPECT_TRUE(read_back(**t, make(1, 1000)));
  EXPECT_FALSE((*t)->contains(make(5, 1000).key, TierKind::Page));
  ASSERT_EQ(log.size(), 1u) << "one line for a run of the same error";
  EXPECT_NE(log[0].find("No space left"), std::string::npos) << log[0];
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_NE(e.path().extension(), ".tmp") << "no temporary file is left behind";
  fs::remove_all(dir);
}

// A file that cannot be created (the directory removed under the server) is a write error
// like a full disk's: counted, and one log line for the run.
TEST(DiskTier, UncreatableFilesAreCountedAndLogged) {
  const std::string dir = scratch("gone");
  std::vector<std::string> log;
  auto t = DiskTier::open(opts(dir, &log));
  ASSERT_TRUE(t.ok());
  fs::remove_all(dir);
  for (uint64_t i = 1; i <= 3; ++i) (*t)->put(put_of(make(i, 100)));
  (*t)->flush();
  EXPECT_EQ((*t)->stats().write_errors, 3);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("create "), std::string::npos) << log[0];
}

// A file that exists but cannot be opened (here a symbolic link to itself, which even root
// cannot open) is skipped, counted, logged and removed: at the start and when read.
TEST(DiskTier, UnopenableFilesAreSkippedAndRemoved) {
  const std::string dir = scratch("unopenable");
  const Obj a = make(1, 100), b = make(2, 100);
  std::string pa, pb;
  {
    auto t = DiskTier::open(opts(dir));
    ASSERT_TRUE(t.ok());
    for (const Obj* x : {&a, &b}) (*t)->put(put_of(*x));
    (*t)->flush();
    pa = (*t)->path_of(a.key, TierKind::Page);
    pb = (*t)->path_of(b.key, TierKind::Page);
  }
  fs::remove(pa);
  fs::create_symlink(fs::path(pa).filename(), pa);
  std::vector<std::string> log;
  auto t = DiskTier::open(opts(dir, &log));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->stats().restored, 1);
  EXPECT_EQ((*t)->stats().corrupt, 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("cannot open"), std::string::npos) << log[0];
  EXPECT_FALSE(fs::is_symlink(pa));
  // b goes the same way once indexed.
  fs::remove(pb);
  fs::create_symlink(fs::path(pb).filename(), pb);
  EXPECT_FALSE(read_back(**t, b));
  EXPECT_EQ((*t)->stats().corrupt, 2);
  EXPECT_EQ(log.size(), 2u);
  EXPECT_FALSE(fs::is_symlink(pb));
  fs::remove_all(dir);
}

TEST(DiskTier, DamagedAndForeignFilesAreSkipped) {
  const std::string dir = scratch("damaged");
  const Obj a = make(1, 1000), b = make(2, 1000), c = make(3, 1000), d = make(4, 1000);
  std::string pa, pb, pc, pd;
  {
    auto t = DiskTier::open(opts(dir));
    ASSERT_TRUE(t.ok());
    for (const Obj* x : {&a, &b, &c, &d}) (*t)->put(put_of(*x));
    (*t)->flush();
    pa = (*t)->path_of(a.key, TierKind::Page);
    pb = (*t)->path_of(b.key, TierKind::Page);
    pc = (*t)->path_of(c.key, TierKind::Page);
    pd = (*t)->path_of(d.key, TierKind::Page);
  }
  // a: truncated; b: a payload byte flipped; c: another model's; plus an unfinished write.
  fs::resize_file(pa, 500);
  {
    std::fstream f(pb, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kTierHeaderBytes + 10);
    f.put('\x55');
  }
  {
    auto o = opts(dir);
    o.fingerprint = Hash128{9, 9};
    o.dir = dir + "_other";
    auto other = DiskTier::open(o);
    ASSERT_TRUE(other.ok());
    (*other)->put(put_of(c));
    (*other)->flush();
    fs::copy_file((*other)->path_of(c.key, TierKind::Page), pc,
                  fs::copy_options::overwrite_existing);
  }
  fs::remove_all(dir + "_other");
  std::ofstream(pd + ".tmp") << "half a file";
  std::vector<std::string> log;
  auto t = DiskTier::open(opts(dir, &log));
  ASSERT_TRUE(t.ok());
  TierStats s = (*t)->stats();
  EXPECT_EQ(s.restored, 2);  // b (its header is fine) and d
  EXPECT_EQ(s.corrupt, 1);   // a
  EXPECT_EQ(s.foreign, 1);   // c
  EXPECT_EQ(s.stale_temp, 1);
  EXPECT_FALSE(fs::exists(pa));
  EXPECT_TRUE(fs::exists(pc)) << "another model's file is left alone";
  EXPECT_FALSE(fs::exists(pd + ".tmp"));
  EXPECT_EQ(log.size(), 2u);
  EXPECT_FALSE(read_back(**t, a));
  EXPECT_FALSE(read_back(**t, b)) << "the flipped byte is caught by the checksum";
  EXPECT_FALSE(read_back(**t, c));
  EXPECT_TRUE(read_back(**t, d));
  s = (*t)->stats();
  EXPECT_EQ(s.corrupt, 2);
  EXPECT_FALSE(fs::exists(pb));
  EXPECT_EQ(log.size(), 3u);
  EXPECT_NE(log.back().find("checksum"), std::string::npos) << log.back();
  // The key is free again: a new write of b works.
  (*t)->put(put_of(b));
  (*t)->flush();
  EXPECT_TRUE(read_back(**t, b));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rw
