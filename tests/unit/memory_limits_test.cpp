// The memory a process may use (base/memory.h): cgroup limit files as the kernel writes them,
// and the machine's figure.
#include <gtest/gtest.h>

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

TEST(UsableMemory, IsThisMachinesOrLess) {
  const int64_t b = usable_memory_bytes();
  EXPECT_GT(b, int64_t{64} << 20);  // any machine that runs the tests has more than 64 MiB
  EXPECT_GE(b, process_resident_bytes());
}

}  // namespace
}  // namespace rw
