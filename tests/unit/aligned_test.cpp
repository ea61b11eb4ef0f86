// AlignedBuffer: 64-byte alignment always, 2 MiB alignment (huge-page advice) from 2 MiB on,
// zero-filled, move-only ownership, clone copies.
#include "rewind/base/aligned.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace rw {
namespace {

uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

TEST(AlignedBuffer, AlignmentAndZeroFillBySize) {
  constexpr size_t kHuge = AlignedBuffer<float>::kHugePage;
  for (size_t bytes :
       {size_t{4}, size_t{100}, size_t{4096}, kHuge - 64, kHuge, kHuge + 4, 3 * kHuge}) {
    AlignedBuffer<std::byte> b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(addr(b.data()) % 64, 0u) << bytes;
    if (bytes >= kHuge) {
      EXPECT_EQ(addr(b.data()) % kHuge, 0u) << bytes;
    }
    for (size_t i = 0; i < bytes; i += 997) ASSERT_EQ(b[i], std::byte{0}) << i;
    EXPECT_EQ(b[bytes - 1], std::byte{0});
  }
  AlignedBuffer<float> f(kHuge / sizeof(float));  // the threshold counts bytes, not elements
  EXPECT_EQ(addr(f.data()) % kHuge, 0u);
}

TEST(AlignedBuffer, MoveTransfersOwnershipAndCloneCopies) {
  AlignedBuffer<int> a(1000);
  for (int i = 0; i < 1000; ++i) a[static_cast<size_t>(i)] = i;
  int* p = a.data();
  AlignedBuffer<int> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
  AlignedBuffer<int> c = b.clone();
  EXPECT_NE(c.data(), b.data());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(c[static_cast<size_t>(i)], i);
  b.reserve_at_least(10);  // no growth: contents kept
  EXPECT_EQ(b.data(), p);
  b.reserve_at_least(5000);  // grows: zero-filled
  EXPECT_EQ(b.size(), 5000u);
  EXPECT_EQ(b[4999], 0);
}

}  // namespace
}  // namespace rw
