// Tests of kernels/matmul: packing, agreement with the naive reference, and the bit-exact
// contract (one sequential fp32 FMA chain per output): batch invariance, thread-count
// invariance, identical bits on every SIMD path, and equality with an explicit std::fma loop.
#include "rewind/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_isa.h"
#include "rewind/base/thread_pool.h"

namespace rw {
namespace {

using test::kIsas;

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// Weights [n, k] of the given source type, filled from random floats, plus the raw bytes.
struct Source {
  DType type;
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  const void* data() const {
    return type == DType::F32 ? static_cast<const void*>(f32.data()) : u16.data();
  }
};

Source make_source(DType type, int64_t n, int64_t k, uint32_t seed) {
  Source s;
  s.type = type;
  s.f32 = random_floats(static_cast<size_t>(n * k), seed);
  if (type == DType::BF16) {
    for (float f : s.f32) s.u16.push_back(f32_to_bf16(f));
  } else if (type == DType::F16) {
    for (float f : s.f32) s.u16.push_back(f32_to_f16(f));
  }
  return s;
}

// Value of source element i after packing into `store` (what at() must return).
float expected_packed(const Source& s, size_t i, DType store) {
  float v = 0;
  switch (s.type) {
    case DType::F32:
      v = s.f32[i];
      break;
    case DType::BF16:
      return bf16_to_f32(s.u16[i]);  // BF16 -> F32 or BF16: exact
    case DType::F16:
      v = f16_to_f32(s.u16[i]);
      break;
    default:
      break;
  }
  return store == DType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : v;
}

// The contract, spelled out: one fp32 accumulator from +0.0f, std::fma over k in order.
void matmul_sequential_fma(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y,
                           int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < w.n(); ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < w.k(); ++c) acc = std::fma(x[i * ldx + c], w.at(r, c), acc);
      y[i * ldy + r] = acc;
    }
  }
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * 4) == 0;
}

// ---- packing ---------------------------------------------------------------------------------

TEST(MatmulPack, AtReturnsSourceValues) {
  for (DType src : {DType::F32, DType::BF16, DType::F16}) {
    for (DType store : {DType::F32, DType::BF16}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {5, 3}, {16, 16}, {17, 33}, {33, 7}}) {
        const Source s = make_source(src, n, k, 7);
        const PackedMatrix pm = PackedMatrix::pack(s.data(), src, n, k, store);
        ASSERT_EQ(pm.n(), n);
        ASSERT_EQ(pm.k(), k);
        ASSERT_EQ(pm.store(), store);
        const int64_t panels = (n + 15) / 16;
        const size_t expect_bytes =
            store == DType::F32 ? panels * k * 16 * 4 : panels * ((k + 1) / 2) * 32 * 2;
        EXPECT_EQ(pm.bytes(), expect_bytes);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c) {
            const float want = expected_packed(s, r * k + c, store);
            const float got = pm.at(r, c);
            ASSERT_EQ(std::memcmp(&want, &got, 4), 0)
                << dtype_name(src) << "->" << dtype_name(store) << " n=" << n << " k=" << k
                << " at (" << r << "," << c << "): " << got << " vs " << want;
          }
      }
    }
  }
}

TEST(MatmulPack, F32ToBf16RoundsLikeF32ToBf16) {
  // Ties (both parities), just above/below ties, subnormals, huge, inf, signed zeros.
  std::vector<float> v;
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x00000001u, 0x807fffffu,
                     0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x80000000u, 0x00000000u, 0x3f800000u,
                     0x4049ffffu, 0xc0490fdbu, 0x7f7f8000u, 0x00018000u}) {
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  const std::vector<float> more = random_floats(64, 3, -1e6f, 1e6f);
  v.insert(v.end(), more.begin(), more.end());
  const int64_t n = static_cast<int64_t>(v.size());
  const PackedMatrix pm = PackedMatrix::pack(v.data(), DType::F32, n, 1, DType::BF16);
  for (int64_t i = 0; i < n; ++i) {
    const float want = bf16_to_f32(f32_to_bf16(v[i]));
    const float got = pm.at(i, 0);
    EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << "value " << v[i];
  }
}

TEST(MatmulPack, BF16SourceKeepsBitsWhenStoredAsBF16) {
  std::vector<uint16_t> raw = {0x7fc1, 0xffff, 0x0001, 0x8000, 0x3f80, 0x7f80,
                               0x0000, 0x1234, 0xabcd, 0x4000, 0xc000, 0x0080,
                               0x807f, 0x7f7f, 0x3c00, 0x5555, 0x1111};
  const int64_t n = static_cast<int64_t>(raw.size());
  const PackedMatrix pm = PackedMatrix::pack(raw.data(), DType::BF16, n, 1, DType::BF16);
  for (int64_t i = 0; i < n; ++i) {
    const float want = bf16_to_f32(raw[i]);
    const float got = pm.at(i, 0);
    EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << i;
  }
}

TEST(MatmulPack, ParallelPackingIsIdentical) {
  ThreadPool pool(2, 0);  // every job shared, however small
  const Source s = make_source(DType::F32, 300, 77, 11);
  for (DType store : {DType::F32, DType::BF16}) {
    const PackedMatrix a = PackedMatrix::pack(s.data(), DType::F32, 300, 77, store);
    const PackedMatrix b = PackedMatrix::pack(s.data(), DType::F32, 300, 77, store, &pool);
    ASSERT_EQ(a.bytes(), b.bytes());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0);
  }
}

// ---- agreement with the naive reference ------------------------------------------------------

// |fast - naive| <= tol: the naive reference accumulates in double; a sequential fp32 chain of
// K FMAs is within about K * eps * sum|x*w| of the exact value.
void expect_close_to_naive(const std::vector<float>& x, int64_t m, int64_t ldx,
                           const PackedMatrix& w, const std::vector<float>& y, int64_t ldy,
                           const std::vector<float>& ref, const std::string& what) {
  const int64_t n = w.n(), k = w.k();
  const double eps = std::numeric_limits<float>::epsilon();
  std::vector<double> wt(static_cast<size_t>(n * k));  // |w| unpacked
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) wt[r * k + c] = std::fabs(w.at(r, c));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double mag = 0;
      for (int64_t c = 0; c < k; ++c)
        mag += std::fabs(static_cast<double>(x[i * ldx + c])) * wt[r * k + c];
      const double tol = (static_cast<double>(k) + 2) * eps * mag + 1e-30;
      const double err = std::fabs(static_cast<double>(y[i * ldy + r]) - ref[i * ldy + r]);
      ASSERT_LE(err, tol) << what << " at (" << i << "," << r << ")";
    }
  }
}

void check_against_naive(DType src, DType store, int64_t m, int64_t n, int64_t k, int64_t ldx,
                         int64_t ldy, ThreadPool* pool) {
  const std::string what = std::string(dtype_name(src)) + "->" + std::string(dtype_name(store)) +
                           " M=" + std::to_string(m) + " N=" + std::to_string(n) +
                           " K=" + std::to_string(k) + " ldx=" + std::to_string(ldx) +
                           " ldy=" + std::to_string(ldy);
  const Source s = make_source(src, n, k, static_cast<uint32_t>(m * 131 + n * 7 + k));
  const PackedMatrix w = PackedMatrix::pack(s.data(), src, n, k, store);
  const std::vector<float> x =
      random_floats(static_cast<size_t>(m * ldx), static_cast<uint32_t>(k + 5));
  const float sentinel = -12345.0f;
  std::vector<float> y(static_cast<size_t>(m * ldy), sentinel),
      ref(static_cast<size_t>(m * ldy), sentinel);
  matmul(x.data(), m, ldx, w, y.data(), ldy, pool);
  matmul_naive(x.data(), m, ldx, w, ref.data(), ldy);
  expect_close_to_naive(x, m, ldx, w, y, ldy, ref, what);
  // Padding between rows of y is never written.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = n; c < ldy; ++c) ASSERT_EQ(y[i * ldy + c], sentinel) << what;
}

TEST(MatmulNaive, AllShapesF32) {
  ThreadPool pool(2, 0);  // every job shared, however small
  for (int64_t m : {1, 2, 3, 7, 8, 9, 17, 64, 100})
    for (int64_t n : {1, 5, 16, 17, 33, 100, 300})
      for (int64_t k : {1, 3, 16, 17, 64, 100, 1000})
        check_against_naive(DType::F32, DType::F32, m, n, k, k, n, (m + n) % 2 ? &pool : nullptr);
}

TEST(MatmulNaive, AllShapesBF16Store) {
  ThreadPool pool(2, 0);  // every job shared, however small
  for (int64_t m : {1, 2, 3, 7, 8, 9, 17, 64, 100})
    for (int64_t n : {1, 5, 16, 17, 33, 100, 300})
      for (int64_t k : {1, 3, 16, 17, 64, 100, 1000})
        check_against_naive(DType::F32, DType::BF16, m, n, k, k, n, (m + n) % 2 ? nullptr : &pool);
}

TEST(MatmulNaive, OtherSourceTypes) {
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType src : {DType::BF16, DType::F16})
    for (DType store : {DType::F32, DType::BF16})
      for (int64_t m : {1, 3, 9, 64})
        for (int64_t n : {5, 17, 100})
          for (int64_t k : {3, 17, 100}) check_against_naive(src, store, m, n, k, k, n, &pool);
}

TEST(MatmulNaive, StridedRows) {
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType store : {DType::F32, DType::BF16})
    for (int64_t m : {1, 7, 9, 33})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{17, 33}, {100, 17}, {300, 257}})
        check_against_naive(DType::F32, store, m, n, k, k + 13, n + 5, &pool);
}

// ---- the bit-exact contract --------------------------------------------------------------------

// y from the kernel equals the explicit sequential std::fma loop, bit for bit, on every path.
TEST(MatmulExact, EqualsSequentialFmaLoop) {
  ThreadPool pool(2, 0);  // every job shared, however small
  for (const char* isa : kIsas) {
    KernelOptions ko;
    if (!test::isa_options(isa, &ko)) continue;
    for (DType store : {DType::F32, DType::BF16})
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 17, 1},
                             {1, 100, 257},
                             {3, 33, 17},
                             {8, 48, 128},
                             {9, 100, 129},
                             {17, 5, 300},
                             {40, 70, 301},
                             {64, 300, 64},
                             // Decode over many panels (several panels per stream run, a short
                             // last run, a partial last panel) and past the 4096 K slice.
                             {1, 16 * 37 + 5, 96},
                             {2, 16 * 64, 33},
                             {1, 40, 4100}}) {
        const Source s = make_source(DType::F32, n, k, 99);
        const PackedMatrix w = PackedMatrix::pack(s.data(), DType::F32, n, k, store);
        const std::vector<float> x = random_floats(static_cast<size_t>(m * k), 5);
        std::vector<float> y(static_cast<size_t>(m * n)), ref(static_cast<size_t>(m * n));
        matmul(x.data(), m, k, w, y.data(), n, &pool, ko);
        matmul_sequential_fma(x.data(), m, k, w, ref.data(), n);
        EXPECT_TRUE(same_bits(y.data(), ref.data(), y.size()))
            << isa << " " << dtype_name(store) << " M=" << m << " N=" << n << " K=" << k;
      }
  }
}

// Signed zeros, infinities, NaN and subnormals go through the same FMA chain as the reference.
TEST(MatmulExact, SpecialValues) {
  const int64_t m = 9, n = 20, k = 7;
  std::vector<float> wv = random_floats(static_cast<size_t>(n * k), 8);
  std::vector<float> x = random_floats(static_cast<size_t>(m * k), 9);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f,   -0.0f,   inf,  -inf, std::numeric_limits<float>::quiet_NaN(),
                            1e-40f, -1e-40f, 3e38f};
  for (size_t i = 0; i < wv.size(); i += 3) wv[i] = specials[i % 8];
  for (size_t i = 0; i < x.size(); i += 5) x[i] = specials[(i / 5) % 8];
  for (int64_t r = 0; r < n; ++r) wv[r * k] = -0.0f;  // some rows entirely of zeros below
  for (int64_t c = 0; c < k; ++c) wv[3 * k + c] = 0.0f;
  for (int64_t c = 0; c < k; ++c) x[2 * k + c] = -1.0f;
  for (const char* isa : kIsas) {
    KernelOptions ko;
    if (!test::isa_options(isa, &ko)) continue;
    for (DType store : {DType::F32, DType::BF16}) {
      const PackedMatrix w = PackedMatrix::pack(wv.data(), DType::F32, n, k, store);
      std::vector<float> y(static_cast<size_t>(m * n)), ref(static_cast<size_t>(m * n));
      matmul(x.data(), m, k, w, y.data(), n, nullptr, ko);
      matmul_sequential_fma(x.data(), m, k, w, ref.data(), n);
      EXPECT_TRUE(same_bits(y.data(), ref.data(), y.size())) << isa << " " << dtype_name(store);
    }
  }
}

// Every SIMD path gives the bits of the scalar path.
TEST(MatmulExact, IdenticalBitsAcrossIsas) {
  ThreadPool pool(2, 0);  // every job shared, however small
  int compared = 0;
  for (DType store : {DType::F32, DType::BF16})
    for (auto [n, k] :
         {std::pair<int64_t, int64_t>{1, 1}, {17, 3}, {100, 129}, {300, 257}, {50, 1001}})
      for (int64_t m : {1, 2, 7, 9, 33, 100}) {
        const Source s = make_source(DType::F32, n, k, 21);
        const PackedMatrix w = PackedMatrix::pack(s.data(), DType::F32, n, k, store);
        const std::vector<float> x = random_floats(static_cast<size_t>(m * k), 22);
        KernelOptions scalar;
        ASSERT_TRUE(test::isa_options("scalar", &scalar));
        std::vector<float> ref(static_cast<size_t>(m * n));
        matmul(x.data(), m, k, w, ref.data(), n, &pool, scalar);
        for (const char* isa : {"avx512", "avx2"}) {
          KernelOptions ko;
          if (!test::isa_options(isa, &ko)) continue;
          ++compared;
          std::vector<float> y(static_cast<size_t>(m * n));
          matmul(x.data(), m, k, w, y.data(), n, &pool, ko);
          EXPECT_TRUE(same_bits(y.data(), ref.data(), y.size()))
              << isa << " vs scalar, " << dtype_name(store) << " M=" << m << " N=" << n
              << " K=" << k;
        }
      }
  if (compared == 0) GTEST_SKIP() << "this machine has no SIMD path to compare with scalar";
}

TEST(MatmulExact, IsaCapReportsPath) {
  EXPECT_STREQ(matmul_isa(IsaCap::Scalar), "scalar");
  EXPECT_STREQ(matmul_int8_isa(IsaCap::Scalar), "scalar");
  EXPECT_FALSE(matmul_amx_enabled(IsaCap::Avx512));
  IsaCap cap = IsaCap::Avx2;
  EXPECT_FALSE(parse_isa_cap("no-such-isa", &cap));
  EXPECT_EQ(cap, IsaCap::Avx2);
  for (IsaCap c : {IsaCap::Scalar, IsaCap::Avx2, IsaCap::AvxVnni, IsaCap::Avx512, IsaCap::Amx}) {
    ASSERT_TRUE(parse_isa_cap(isa_cap_name(c), &cap));
    EXPECT_EQ(cap, c);
  }
  ASSERT_TRUE(parse_isa_cap("auto", &cap));
  EXPECT_EQ(cap, IsaCap::Amx);
  const std::string chosen = matmul_isa(IsaCap::Amx);
  EXPECT_TRUE(chosen == "avx512" || chosen == "avx2" || chosen == "scalar") << chosen;
  if (isa_cap_supported(IsaCap::Avx2)) {
    EXPECT_STREQ(matmul_isa(IsaCap::Avx2), "avx2");
    EXPECT_STREQ(matmul_int8_isa(IsaCap::Avx2), "avx2");
  }
  // AVX-VNNI changes only the int8 dot: the f32 / bf16 matmuls and the ops take AVX2's path.
  if (isa_cap_supported(IsaCap::AvxVnni)) {
    EXPECT_STREQ(matmul_isa(IsaCap::AvxVnni), "avx2");
    EXPECT_STREQ(matmul_int8_isa(IsaCap::AvxVnni), "avxvnni");
    EXPECT_FALSE(matmul_amx_enabled(IsaCap::AvxVnni));
  }
  // A matrix carries its options; a default matrix runs everything the CPU has.
  PackedMatrix w;
  EXPECT_EQ(w.kernel_options().isa, IsaCap::Amx);
  EXPECT_EQ(w.kernel_options().quant_dot, default_quant_dot());
}

// Row r of a big-M product equals the same row computed alone (M=1), and with any other split
// of the rows into calls, with 1 and 2 threads, on every path. The tiling differs with M (1-2
// rows: wide decode tiles; more: 8-row tiles; 3+ row tiles: BF16 widened once per panel group),
// and the thread count moves the panel split; the bits must not notice.
TEST(MatmulExact, BatchInvariance) {
  ThreadPool pool1(1), pool2(2, 0);  // every job shared, however small
  const int64_t m = 100, n = 200, k = 301;
  const Source s = make_source(DType::F32, n, k, 31);
  const std::vector<float> x = random_floats(static_cast<size_t>(m * k), 32);
  for (const char* isa : kIsas) {
    KernelOptions ko;
    if (!test::isa_options(isa, &ko)) continue;
    for (DType store : {DType::F32, DType::BF16}) {
      const PackedMatrix w = PackedMatrix::pack(s.data(), DType::F32, n, k, store);
      std::vector<float> big(static_cast<size_t>(m * n));
      matmul(x.data(), m, k, w, big.data(), n, &pool2, ko);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool2}) {
        const int threads = pool ? pool->n_threads() : 0;
        // Splits: all M=1, then uneven chunks.
        for (const std::vector<int64_t>& chunks :
             {std::vector<int64_t>{1}, std::vector<int64_t>{2, 3, 7, 9, 17, 33, 64, 1},
              std::vector<int64_t>{299, 1}, std::vector<int64_t>{8, 16, 24, 100}}) {
          std::vector<float> y(static_cast<size_t>(m * n));
          int64_t r0 = 0;
          for (size_t ci = 0; r0 < m; ++ci) {
            const int64_t rows = std::min(chunks[ci % chunks.size()], m - r0);
            matmul(x.data() + r0 * k, rows, k, w, y.data() + r0 * n, n, pool, ko);
            r0 += rows;
          }
          for (int64_t r = 0; r < m; ++r)
            ASSERT_TRUE(same_bits(big.data() + r * n, y.data() + r * n, n))
                << isa << " " << dtype_name(store) << " threads=" << threads
                << " first chunk=" << chunks[0] << " row " << r;
        }
      }
    }
  }
}

// Decode (M <= 2) splits of the output columns among the threads (guided chunks, one static
// share each, the default rule): the same bits as one thread, with 2 and 3 threads (uneven
// shares, and more threads than panels for n = 17).
TEST(MatmulExact, DecodeSplitsGiveSameBits) {
  ThreadPool pool2(2, 0), pool3(3, 0);  // every job shared, however small
  const int64_t k = 96;
  for (int64_t n : {int64_t{17}, int64_t{200}, int64_t{1000}}) {
    const Source s = make_source(DType::F32, n, k, 41);
    const std::vector<float> x = random_floats(static_cast<size_t>(2 * k), 42);
    for (DType store : {DType::F32, DType::BF16}) {
      const PackedMatrix w = PackedMatrix::pack(s.data(), DType::F32, n, k, store);
      for (int64_t m : {1, 2}) {
        std::vector<float> ref(static_cast<size_t>(m * n)), y(ref.size());
        matmul(x.data(), m, k, w, ref.data(), n, nullptr);
        for (DecodeSplit split : {DecodeSplit::Guided, DecodeSplit::Static, DecodeSplit::Auto})
          for (ThreadPool* pool : {&pool2, &pool3}) {
            KernelOptions ko;
            ko.decode_split = split;
            std::fill(y.begin(), y.end(), -1.0f);
            matmul(x.data(), m, k, w, y.data(), n, pool, ko);
            ASSERT_TRUE(same_bits(ref.data(), y.data(), y.size()))
                << dtype_name(store) << " n=" << n << " m=" << m << " split "
                << decode_split_name(split) << " threads " << pool->n_threads();
          }
      }
    }
  }
  for (DecodeSplit d : {DecodeSplit::Auto, DecodeSplit::Guided, DecodeSplit::Static}) {
    DecodeSplit parsed = d == DecodeSplit::Auto ? DecodeSplit::Static : DecodeSplit::Auto;
    EXPECT_TRUE(parse_decode_split(decode_split_name(d), &parsed));
    EXPECT_EQ(parsed, d);
  }
  DecodeSplit untouched = DecodeSplit::Guided;
  for (const char* bad : {"", "Static", "auto ", "dynamic"})
    EXPECT_FALSE(parse_decode_split(bad, &untouched)) << bad;
  EXPECT_EQ(untouched, DecodeSplit::Guided);
  EXPECT_STREQ(decode_split_name(DecodeSplit::Static), "static");
}

// Long K (sliced, with the accumulators spilled to y and reloaded between slices: kKcMax = 4096
// in matmul.cpp) and many rows (several row blocks: kMc = 512): still the sequential FMA chain,
// and still batch-invariant.
TEST(MatmulExact, LongKAndManyRows) {
  ThreadPool pool(2, 0);  // every job shared, however small
  struct Case {
    int64_t m, n, k;
  };
  for (const char* isa : kIsas) {
    KernelOptions ko;
    if (!test::isa_options(isa, &ko)) continue;
    for (DType store : {DType::F32, DType::BF16})
      for (Case c : {Case{20, 33, 9001}, Case{530, 17, 16}}) {
        const Source s = make_source(DType::F32, c.n, c.k, 51);
        const PackedMatrix w = PackedMatrix::pack(s.data(), DType::F32, c.n, c.k, store);
        const std::vector<float> x = random_floats(static_cast<size_t>(c.m * c.k), 52);
        std::vector<float> y(static_cast<size_t>(c.m * c.n)), ref(y.size()), row(c.n);
        matmul(x.data(), c.m, c.k, w, y.data(), c.n, &pool, ko);
        matmul_sequential_fma(x.data(), c.m, c.k, w, ref.data(), c.n);
        EXPECT_TRUE(same_bits(y.data(), ref.data(), y.size()))
            << isa << " " << dtype_name(store) << " M=" << c.m << " K=" << c.k;
        for (int64_t r : {int64_t{0}, c.m / 2, c.m - 1}) {
          matmul(x.data() + r * c.k, 1, c.k, w, row.data(), c.n, nullptr, ko);
          EXPECT_TRUE(same_bits(row.data(), y.data() + r * c.n, c.n))
              << isa << " " << dtype_name(store) << " M=" << c.m << " row " << r;
        }
      }
  }
}

// The strides ldx > K and ldy > N change nothing but where rows live.
TEST(MatmulExact, StridesDoNotChangeBits) {
  ThreadPool pool(2, 0);  // every job shared, however small
  const int64_t m = 37, n = 130, k = 200, ldx = 211, ldy = 141;
  const Source s = make_source(DType::F32, n, k, 41);
  const std::vector<float> xs = random_floats(static_cast<size_t>(m * ldx), 42);
  std::vector<float> xc(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) std::memcpy(&xc[i * k], &xs[i * ldx], k * 4);
  for (DType store : {DType::F32, DType::BF16}) {
    const PackedMatrix w = PackedMatrix::pack(s.data(), DType::F32, n, k, store);
    std::vector<float> yc(static_cast<size_t>(m * n)), ys(static_cast<size_t>(m * ldy), 7.0f);
    matmul(xc.data(), m, k, w, yc.data(), n, &pool);
    matmul(xs.data(), m, ldx, w, ys.data(), ldy, &pool);
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_TRUE(same_bits(&yc[i * n], &ys[i * ldy], n)) << dtype_name(store) << " row " << i;
      for (int64_t c = n; c < ldy; ++c) ASSERT_EQ(ys[i * ldy + c], 7.0f);
    }
  }
}

TEST(MatmulEdge, EmptyShapes) {
  const std::vector<float> wv = random_floats(16 * 4, 1);
  const PackedMatrix w = PackedMatrix::pack(wv.data(), DType::F32, 16, 4, DType::F32);
  std::vector<float> y(16, 3.0f);
  const std::vector<float> x(4, 1.0f);
  matmul(x.data(), 0, 4, w, y.data(), 16, nullptr);  // M = 0: nothing written
  for (float v : y) EXPECT_EQ(v, 3.0f);
  // K = 0: every output is the untouched accumulator, +0.0f.
  const PackedMatrix w0 = PackedMatrix::pack(nullptr, DType::F32, 16, 0, DType::BF16);
  EXPECT_EQ(w0.bytes(), 0u);
  matmul(x.data(), 1, 0, w0, y.data(), 16, nullptr);
  for (float v : y) {
    EXPECT_EQ(v, 0.0f);
    EXPECT_FALSE(std::signbit(v));
  }
  const PackedMatrix empty;
  EXPECT_TRUE(empty.empty());
}

}  // namespace
}  // namespace rw
