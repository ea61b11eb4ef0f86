// BandwidthProbe's stepped pass (kernels/machine_limits.h): how a step size becomes the parts
// each thread reads. Speeds are not asserted (a shared host's bandwidth drifts), only that a
// pass measured something.
#include "rewind/kernels/machine_limits.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rewind/base/thread_pool.h"

namespace rw {
namespace {

constexpr size_t kPartBytes = 12288 * sizeof(float);  // 48 KiB: every part a multiple of it

TEST(BandwidthProbe, SteppedPassSplitsStepsIntoWholeParts) {
  ThreadPool pool(2, /*min_parallel_work=*/0);
  BandwidthProbe probe(&pool, size_t{16} << 20);
  ASSERT_EQ(probe.bytes() % (2 * kPartBytes), 0u);
  struct Case {
    size_t asked, used;
  };
  for (const Case& c : {Case{size_t{1} << 20, 2 * 10 * kPartBytes},  // 1 MiB: 2 x 480 KiB
                        Case{2 * kPartBytes, 2 * kPartBytes},        // exactly one part each
                        Case{1, 2 * kPartBytes},                     // at least one part each
                        Case{size_t{64} << 20, probe.bytes()}}) {    // at most the buffer
    size_t used = 0;
    const double gb_s = probe.pass_stepped(c.asked, 0, &used);
    EXPECT_EQ(used, c.used) << "asked " << c.asked;
    EXPECT_TRUE(std::isfinite(gb_s) && gb_s > 0) << gb_s;
  }
}

TEST(BandwidthProbe, SteppedPassWithoutAPoolReadsOnOneThread) {
  BandwidthProbe probe(nullptr, size_t{4} << 20);
  size_t used = 0;
  const double gb_s = probe.pass_stepped(size_t{1} << 20, probe.n_variants() - 1, &used);
  EXPECT_EQ(used, 21 * kPartBytes);  // 1 MiB / 48 KiB, rounded down
  EXPECT_TRUE(std::isfinite(gb_s) && gb_s > 0) << gb_s;
}

}  // namespace
}  // namespace rw
