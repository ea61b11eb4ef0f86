// Reading a whole file (base/file.h): contents, an absent path, a directory, a /proc entry.
#include "rewind/base/file.h"

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace rw {
namespace {

TEST(ReadWholeFile, BytesAsWritten) {
  const std::string dir = test::made_scratch_dir("read_whole_file");
  std::string bytes(200000, '\0');  // several read() calls, and NULs kept
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  test::write_file(dir + "/f.bin", bytes);
  test::write_file(dir + "/empty", "");
  bool missing = true;
  auto r = read_whole_file(dir + "/f.bin", &missing);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r.value(), bytes);
  EXPECT_FALSE(missing);
  auto e = read_whole_file(dir + "/empty");
  ASSERT_TRUE(e.ok()) << e.error_message();
  EXPECT_EQ(e.value(), "");
}

TEST(ReadWholeFile, AbsentAndDirectoryAreErrorsThatSayWhich) {
  const std::string dir = test::made_scratch_dir("read_whole_file_errors");
  bool missing = false;
  auto absent = read_whole_file(dir + "/none.json", &missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_TRUE(missing);
  EXPECT_EQ(absent.error_message(), "cannot read " + dir + "/none.json: No such file or directory");
  auto d = read_whole_file(dir, &missing);
  ASSERT_FALSE(d.ok());
  EXPECT_FALSE(missing);  // there, but not a file
  EXPECT_EQ(d.error_message(), "cannot read " + dir + ": Is a directory");
  auto under_absent = read_whole_file(dir + "/none.json/x", &missing);
  ASSERT_FALSE(under_absent.ok());
  EXPECT_TRUE(missing);
  // A path through a file (a GGUF file's "directory"): nothing there either.
  test::write_file(dir + "/model.gguf", "x");
  missing = false;
  auto under_file = read_whole_file(dir + "/model.gguf/generation_config.json", &missing);
  ASSERT_FALSE(under_file.ok());
  EXPECT_TRUE(missing);
  EXPECT_EQ(under_file.error_message(),
            "cannot read " + dir + "/model.gguf/generation_config.json: Not a directory");
}

// /proc files report a size of 0; their text is still read to the end.
TEST(ReadWholeFile, ProcEntriesReadToTheEnd) {
  auto r = read_whole_file("/proc/self/status");
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_NE(r.value().find("Name:"), std::string::npos);
  EXPECT_NE(r.value().find("VmRSS:"), std::string::npos);
}

}  // namespace
}  // namespace rw
