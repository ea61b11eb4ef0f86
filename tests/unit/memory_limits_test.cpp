// The memory a process may use (base/memory.h): cgroup limit files as the kernel writes them,
// and the machine's figure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>

#include "rewind/base/memory.h"

namespace rw {
namespace {

TEST(CgroupMemoryLimit, NumbersAndNoLimit) {
  EXPECT_EQ(parse_cgroup_memory_limit("8589934592\n"), int64_t{8589934592});
  EXPECT_EQ(parse_cgroup_memory_limit("4096"), 4096);
  EXPECT_EQ(parse_cgroup_memory_limit("max\n"), -1);  // v2: no limit
  // v1's "no limit": 2^63 - 1 rounded down to a page.
  EXPECT_EQ(parse_cgroup_memory_limit("9223372036854771712\n"), -1);
}

TEST(CgroupMemoryLimit, MalformedTextIsNoLimit) {
  for (const char* t : {"", "\n", "12ab", "-5", "1.5e9", "99999999999999999999999", "0x1000"})
    EXPECT_EQ(parse_cgroup_memory_limit(t), -1) << t;
}

// The group's files and its parents', through a fake file system.
TEST(CgroupMemoryLimit, WalksTheGroupAndItsParents) {
  std::map<std::string, std::string> fs;
  auto read = [&](const std::string& p) { return fs.count(p) ? fs[p] : std::string(); };
  EXPECT_EQ(cgroup_memory_limit("", read), -1);
  EXPECT_EQ(cgroup_memory_limit("0::/a/b\n", read), -1);  // no files: no limit
  fs["/sys/fs/cgroup/a/b/memory.max"] = "max\n";
  fs["/sys/fs/cgroup/a/memory.max"] = "2000\n";
  fs["/sys/fs/cgroup/memory.max"] = "5000\n";  // a container's own group mounted as the root
  EXPECT_EQ(cgroup_memory_limit("0::/a/b\n", read), 2000);
  fs["/sys/fs/cgroup/a/b/memory.max"] = "1000\n";
  EXPECT_EQ(cgroup_memory_limit("0::/a/b\n", read), 1000);
  // v1: the memory controller's line, among others; a slice's limit binds its services.
  fs.clear();
  fs["/sys/fs/cgroup/memory/system.slice/memory.limit_in_bytes"] = "3000\n";
  fs["/sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n";
  const std::string v1 =
      "12:cpu,cpuacct:/system.slice/x.service\n"
      "4:memory:/system.slice/x.service\n"
      "1:name=systemd:/system.slice/x.service\n";
  EXPECT_EQ(cgroup_memory_limit(v1, read), 3000);
  EXPECT_EQ(cgroup_memory_limit("4:memory:/\n", read), -1);  // the root: no limit
  EXPECT_EQ(cgroup_memory_limit("garbage\n::\n0:memory\n", read), -1);
}

TEST(UsableMemory, IsThisMachinesOrLess) {
  const int64_t b = usable_memory_bytes();
  EXPECT_GT(b, int64_t{64} << 20);  // any machine that runs the tests has more than 64 MiB
  EXPECT_GE(b, process_resident_bytes());
  EXPECT_LE(b, static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
}

}  // namespace
}  // namespace rw
