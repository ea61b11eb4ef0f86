// Tests of tensor/quant.h (ggml's Q8_0 / Q4_K / Q5_K / Q6_K blocks) and the quantised matmul
// stores: known-answer dequantisation of hand-built blocks, quantise -> dequantise error bounds,
// and the exactness contract: a quantised PackedMatrix gives the same bits as the F32 matrix of its
// dequantised values, for every M, thread count and SIMD path (the f32 dot); with a k
// permutation, the same bits as the F32 matmul on the gathered input. The int8 dot: every output
// equals the scalar formula of matmul_quant.h bit for bit (every M, path and thread count), and
// stays close to the exact product.
#include "rewind/tensor/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_isa.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/matmul.h"
#include "rewind/kernels/matmul_quant.h"

namespace rw {
namespace {

using test::kIsas;

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<std::byte> quantize(const std::vector<float>& x, DType t, int64_t rows, int64_t k) {
  std::vector<std::byte> q(dtype_row_bytes(t, k) * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(x.data() + r * k, t, k, q.data() + r * dtype_row_bytes(t, k));
  return q;
}

std::vector<float> dequantize(const std::vector<std::byte>& q, DType t, int64_t rows, int64_t k) {
  std::vector<float> y(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    convert_row_to_f32(q.data() + r * dtype_row_bytes(t, k), t, k, y.data() + r * k);
  return y;
}

// kQuantTraits (tensor/dtype.h) is what dtype.h's functions, the name and ggml-code look-ups and
// the packed store read: each row answers for its own type.
TEST(Quant, TraitsTableLookups) {
  for (const QuantTraits& q : kQuantTraits) {
    SCOPED_TRACE(std::string(q.name));
    EXPECT_TRUE(dtype_is_quant(q.type));
    EXPECT_EQ(&quant_traits(q.type), &q);
    EXPECT_EQ(dtype_name(q.type), q.name);
    EXPECT_EQ(dtype_size(q.type), 0u);
    EXPECT_EQ(dtype_block_elems(q.type), q.block_elems);
    EXPECT_EQ(dtype_row_bytes(q.type, 4 * q.block_elems), 4u * q.block_bytes);
    EXPECT_EQ(quant_traits_by_arg(q.arg), &q);
    EXPECT_EQ(quant_traits_by_ggml(q.ggml_type), &q);
    EXPECT_EQ(detail::quant_panel_block_bytes(q.type), q.panel_block_bytes);
    EXPECT_EQ(quant_traits(q.transcoding).block_elems, q.block_elems);
  }
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::BOOL}) {
    EXPECT_FALSE(dtype_is_quant(t));
    EXPECT_FALSE(quant_has_kernel(t, kQkWiden));
    EXPECT_EQ(dtype_block_elems(t), 1);
    EXPECT_EQ(detail::quant_panel_block_bytes(t), 0);
  }
  EXPECT_EQ(quant_traits_by_arg("f32"), nullptr);
  EXPECT_EQ(quant_traits_by_arg("Q4_K"), nullptr);  // command lines spell them in lower case
  EXPECT_EQ(quant_traits_by_ggml(0), nullptr);      // F32
}

TEST(Quant, Q8_0KnownAnswer) {
  BlockQ8_0 b;
  b.d = 0x3800;  // f16 0.5
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  float y[32];
  dequantize_row_q8_0(&b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 16));
}

// Eight 6-bit scales and mins spread over 12 bytes as ggml packs them (Q4_K, Q5_K).
void pack_scales_mins(const uint8_t (&sc)[8], const uint8_t (&mn)[8], uint8_t (&out)[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

TEST(Quant, Q4_KKnownAnswer) {
  // Sub-block j: scale j + 1 + 40 * (j >= 6), min 2 j (6-bit values spread over the 12 bytes
  // as ggml packs them), value code (e * 7) % 16 for element e.
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j)
    sc[j] = static_cast<uint8_t>(j + 1 + (j >= 6 ? 40 : 0)),
    mn[j] = static_cast<uint8_t>(2 * j + (j == 7 ? 49 : 0));
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  pack_scales_mins(sc, mn, b.scales);
  auto code = [](int e) { return (e * 7) % 16; };
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * c + l] = static_cast<uint8_t>(code(64 * c + l) | (code(64 * c + 32 + l) << 4));
  float y[256];
  dequantize_row_q4_k(&b, y, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], static_cast<float>(sc[e / 32]) * static_cast<float>(code(e)) -
                        0.5f * static_cast<float>(mn[e / 32]))
        << e;
}

// Q5_K as ggml's dequantize_row_q5_K reads it: chunk c of 64 values takes the low nibbles of
// qs[32c ..] with bit 2c of qh[l], then the high nibbles with bit 2c + 1; scales and mins as
// Q4_K's.
TEST(Quant, Q5_KKnownAnswer) {
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j)
    sc[j] = static_cast<uint8_t>(3 * j + 1 + (j >= 5 ? 30 : 0)),
    mn[j] = static_cast<uint8_t>(j + (j == 6 ? 50 : 0));
  BlockQ5_K b{};
  b.d = 0x3400;     // 0.25
  b.dmin = 0x3C00;  // 1.0
  pack_scales_mins(sc, mn, b.scales);
  auto code = [](int e) { return (e * 11 + 3) % 32; };
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = code(64 * c + l), hi = code(64 * c + 32 + l);
      b.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  for (int e = 0; e < 256; ++e) ASSERT_EQ(q5k_value(b, e), code(e)) << e;
  float y[256];
  dequantize_row_q5_k(&b, y, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(sc[e / 32]) * static_cast<float>(code(e)) -
                        static_cast<float>(mn[e / 32]))
        << e;
}

TEST(Quant, Q6_KKnownAnswer) {
  BlockQ6_K b{};
  b.d = 0x3400;  // 0.25
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  auto code = [](int e) { return (e * 13) % 64; };  // stored 0..63, value code - 32
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int q1 = code(128 * h + l), q2 = code(128 * h + l + 32), q3 = code(128 * h + l + 64),
                q4 = code(128 * h + l + 96);
      b.ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      b.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      b.qh[32 * h + l] =
          static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  float y[256];
  dequantize_row_q6_k(&b, y, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(e / 16 - 8) * static_cast<float>(code(e) - 32)) << e;
}

// ---- the formats whose integers are another's (Q4_0, Q5_0, IQ4_NL: Q8_0's; Q3_K: Q6_K's) ----

// Q4_0 as ggml's dequantize_row_q4_0 reads it: value j the low nibble of qs[j], value 16 + j its
// high nibble, minus 8; times d.
TEST(Quant, Q4_0KnownAnswer) {
  BlockQ4_0 b;
  b.d = 0x3800;  // 0.5
  auto code = [](int e) { return (e * 5 + 3) % 16; };
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
  float y[32];
  convert_row_to_f32(&b, DType::Q4_0, 32, y);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.5f * static_cast<float>(code(e) - 8)) << e;
}

// Q5_0: the fifth bit of value j is bit j of qh read as a little-endian u32 (ggml: xh_0 = bit j,
// xh_1 = bit j + 16), minus 16.
// Q5_0 / Q5_1 blocks' 32 5-bit codes as ggml lays them out: value j's low 4 bits in the low
// nibble of qs[j], value 16 + j's in its high nibble; their fifth bits at j and 16 + j of qh.
template <class Block, class Code>
void set_codes5(Block& b, Code code) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b.qs[j] = static_cast<uint8_t>((code(j) & 0xF) | ((code(j + 16) & 0xF) << 4));
    qh |= static_cast<uint32_t>(code(j) >> 4) << j;
    qh |= static_cast<uint32_t>(code(j + 16) >> 4) << (j + 16);
  }
  std::memcpy(b.qh, &qh, 4);  // x86: little-endian, as ggml's memcpy into a u32
}

TEST(Quant, Q5_0KnownAnswer) {
  BlockQ5_0 b;
  b.d = 0xB400;  // -0.25
  auto code = [](int e) { return (e * 13 + 7) % 32; };
  set_codes5(b, code);
  float y[32];
  convert_row_to_f32(&b, DType::Q5_0, 32, y);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], -0.25f * static_cast<float>(code(e) - 16)) << e;
}

TEST(Quant, IQ4_NLKnownAnswer) {
  static const int kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};  // ggml-common.h
  BlockIQ4_NL b;
  b.d = 0x3C00;  // 1.0
  auto code = [](int e) { return (e * 7 + 1) % 16; };
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
  float y[32];
  convert_row_to_f32(&b, DType::IQ4_NL, 32, y);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], static_cast<float>(kTable[code(e)])) << e;
}

// Q3_K packed as ggml's quantize_row_q3_K packs it (hmask byte j % 32, bit j / 32; qs[j/4 + l]
// holds L[j + l], L[j + l + 32], L[j + l + 64], L[j + l + 96] in bit pairs for j = 0, 128; scale
// j's low nibble in scales[j] (j < 8) or the high nibble of scales[j - 8], its top 2 bits at
// 2 (j / 4) of scales[8 + j % 4]); the scales read back with ggml's kmask unpacking.
TEST(Quant, Q3_KKnownAnswer) {
  BlockQ3_K b{};
  b.d = 0x3400;  // 0.25
  int ls[16];
  for (int j = 0; j < 16; ++j) ls[j] = (j * 23 + 5) % 64;  // stored 0..63, scale ls - 32
  for (int j = 0; j < 16; ++j) {
    int l = ls[j];
    if (j < 8)
      b.scales[j] = static_cast<uint8_t>(l & 0xF);
    else
      b.scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    l >>= 4;
    b.scales[j % 4 + 8] |= static_cast<uint8_t>(l << (2 * (j / 4)));
  }
  auto code = [](int e) { return (e * 3 + e / 7) % 8; };  // stored 0..7, value code - 4
  uint8_t L[256];
  for (int e = 0; e < 256; ++e) L[e] = static_cast<uint8_t>(code(e));
  int m = 0;
  uint8_t hm = 1;
  for (int j = 0; j < 256; ++j) {
    if (L[j] > 3) {
      b.hmask[m] |= hm;
      L[j] -= 4;
    }
    if (++m == 32) m = 0, hm <<= 1;
  }
  for (int j = 0; j < 256; j += 128)
    for (int l = 0; l < 32; ++l)
      b.qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                             (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
  // ggml's unpacking of the 12 scale bytes.
  uint32_t aux[4];
  std::memcpy(aux, b.scales, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t sc[16];
  std::memcpy(sc, aux, 16);
  for (int j = 0; j < 16; ++j) {
    ASSERT_EQ(sc[j], ls[j]) << j;
    ASSERT_EQ(q3k_scale(b, j), ls[j] - 32) << j;
  }
  float y[256];
  convert_row_to_f32(&b, DType::Q3_K, 256, y);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(ls[e / 16] - 32) * static_cast<float>(code(e) - 4))
        << e;
}

// IQ4_XS as ggml's dequantize_row_iq4_xs reads it: sub-block ib's 6-bit scale code has its low 4
// bits in nibble ib % 2 of scales_l[ib / 2] and its top 2 bits at 2 ib of scales_h; value j of
// the sub-block the low nibble of qs[16 ib + j] (j < 16) or the high nibble of qs[16 ib + j - 16];
// w = (d * (ls - 32)) * table[code].
TEST(Quant, IQ4_XSKnownAnswer) {
  static const int kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};  // ggml-common.h
  BlockIQ4_XS b{};
  b.d = 0x3400;  // 0.25
  int ls[8];
  for (int ib = 0; ib < 8; ++ib) {
    ls[ib] = (ib * 29 + 3) % 64;
    b.scales_l[ib / 2] |= static_cast<uint8_t>((ls[ib] & 0xF) << (4 * (ib % 2)));
    b.scales_h |= static_cast<uint16_t>((ls[ib] >> 4) << (2 * ib));
  }
  auto code = [](int e) { return (e * 11 + e / 5) % 16; };
  for (int ib = 0; ib < 8; ++ib)
    for (int j = 0; j < 16; ++j)
      b.qs[16 * ib + j] = static_cast<uint8_t>(code(32 * ib + j) | (code(32 * ib + 16 + j) << 4));
  for (int ib = 0; ib < 8; ++ib) ASSERT_EQ(iq4xs_scale(b, ib), ls[ib] - 32) << ib;
  float y[256];
  convert_row_to_f32(&b, DType::IQ4_XS, 256, y);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e],
              0.25f * static_cast<float>(ls[e / 32] - 32) * static_cast<float>(kTable[code(e)]))
        << e;
  // The quantiser maps the sub-block scale of largest magnitude to the code 0 (-32), as ggml's.
  std::vector<float> x(256);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  BlockIQ4_XS q;
  quantize_row(x.data(), DType::IQ4_XS, 256, &q);
  int at_min = 0;
  for (int ib = 0; ib < 8; ++ib) at_min += iq4xs_scale(q, ib) == -32;
  EXPECT_GE(at_min, 1);
}

// Q4_1 as ggml's dequantize_row_q4_1 reads it: value j the low nibble of qs[j], value 16 + j its
// high nibble; w = code * d + m. The quantiser is ggml's quantize_row_q4_1_ref: m = the block's
// minimum, d = (max - min) / 15, codes (x - min) / d + 0.5 truncated, at most 15.
TEST(Quant, Q4_1KnownAnswer) {
  BlockQ4_1 b;
  b.d = 0x3800;  // 0.5
  b.m = 0xC200;  // -3
  auto code = [](int e) { return (e * 7 + 5) % 16; };
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
  float y[32];
  convert_row_to_f32(&b, DType::Q4_1, 32, y);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.5f * static_cast<float>(code(e)) - 3.0f) << e;
  // A block holding -3 + 0.5 c for codes c in a known order quantises back to them exactly.
  float x[32];
  for (int e = 0; e < 32; ++e) x[e] = -3.0f + 0.5f * static_cast<float>(code(e));
  x[1] = 4.5f;  // the maximum: code 15
  BlockQ4_1 q;
  quantize_row(x, DType::Q4_1, 32, &q);
  EXPECT_EQ(q.d, 0x3800);
  EXPECT_EQ(q.m, 0xC200);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(q4_1_code(q, e), e == 1 ? 15 : code(e)) << e;
}

// Q5_1 as ggml's dequantize_row_q5_1 reads it: Q4_1's nibbles, the fifth bit of value j bit j of
// qh read as a little-endian u32; w = code * d + m. The quantiser is ggml's
// quantize_row_q5_1_ref: d = (max - min) / 31, codes (x - min) / d + 0.5 truncated.
TEST(Quant, Q5_1KnownAnswer) {
  BlockQ5_1 b;
  b.d = 0x3400;  // 0.25
  b.m = 0x4000;  // 2
  auto code = [](int e) { return (e * 13 + 3) % 32; };
  set_codes5(b, code);
  float y[32];
  convert_row_to_f32(&b, DType::Q5_1, 32, y);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.25f * static_cast<float>(code(e)) + 2.0f) << e;
  // Every code 0..31 once (a permutation): the block quantises back to them exactly.
  float x[32];
  for (int e = 0; e < 32; ++e) x[e] = 2.0f + 0.25f * static_cast<float>(code(e));
  BlockQ5_1 q;
  quantize_row(x, DType::Q5_1, 32, &q);
  EXPECT_EQ(q.d, 0x3400);
  EXPECT_EQ(q.m, 0x4000);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(q5_1_code(q, e), code(e)) << e;
}

// Q2_K as ggml's dequantize_row_q2_K reads it: value 128 n + 32 j + l has bits 2j..2j+1 of
// qs[32 n + l]; sub-block e / 16 has its scale in the low nibble of scales[e / 16] and its min in
// the high one; w = (d * scale) * q - dmin * min.
TEST(Quant, Q2_KKnownAnswer) {
  BlockQ2_K b{};
  b.d = 0x3400;     // 0.25
  b.dmin = 0x3800;  // 0.5
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>((s * 7 + 2) % 256);
  auto code = [](int e) { return (e * 5 + e / 9) % 4; };
  for (int n = 0; n < 2; ++n)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * n + l] |= static_cast<uint8_t>(code(128 * n + 32 * j + l) << (2 * j));
  float y[256];
  convert_row_to_f32(&b, DType::Q2_K, 256, y);
  for (int e = 0; e < 256; ++e) {
    const int sc = b.scales[e / 16] & 0xF, m = b.scales[e / 16] >> 4;
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(sc) * static_cast<float>(code(e)) -
                        0.5f * static_cast<float>(m))
        << e;
  }
}

// The scalar formula's m x n outputs of activations xa against pq (panel_stride bytes a panel).
std::vector<float> int8_reference(DType t, const detail::QuantizedActs& xa, const PackedMatrix& pq,
                                  int64_t m, int64_t n, int64_t panel_stride) {
  std::vector<float> ref(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c)
      ref[r * n + c] = detail::int8_dot_reference(
          t, xa, r, static_cast<const std::byte*>(pq.raw()) + (c / 16) * panel_stride,
          static_cast<int>(c % 16));
  return ref;
}

// Random bytes are valid blocks (any code, any scale); d a random finite f16 of either sign,
// subnormals included.
std::vector<std::byte> random_blocks(DType t, int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> q(dtype_row_bytes(t, k) * static_cast<size_t>(rows));
  for (auto& b : q) b = static_cast<std::byte>(rng() & 0xFF);
  const size_t bb = static_cast<size_t>(dtype_block_bytes(t));
  const size_t d_at = t == DType::Q3_K ? 108 : 0;
  for (size_t off = 0; off < q.size(); off += bb) {
    uint16_t d;
    do d = static_cast<uint16_t>(rng() & 0xFFFF);
    while ((d & 0x7C00) == 0x7C00);  // not inf / NaN
    std::memcpy(q.data() + off + d_at, &d, 2);
  }
  return q;
}

// The transcoding gives every value to the bit, on random blocks and on each format's extremes.
TEST(Quant, TranscodingIsExact) {
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::IQ4_NL, DType::Q3_K}) {
    const DType to = transcoded_type(t);
    const int64_t rows = 5, k = 1024;
    const auto q = random_blocks(t, rows, k, 11 + static_cast<uint32_t>(t));
    std::vector<std::byte> h(dtype_row_bytes(to, k) * rows);
    for (int64_t r = 0; r < rows; ++r)
      transcode_row(q.data() + r * dtype_row_bytes(t, k), t, k,
                    h.data() + r * dtype_row_bytes(to, k));
    const auto a = dequantize(q, t, rows, k), b = dequantize(h, to, rows, k);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << dtype_name(t);
    // The values really vary: neither side is constant.
    EXPECT_NE(*std::min_element(a.begin(), a.end()), *std::max_element(a.begin(), a.end()));
  }
  // All-ones and all-zeros code bytes (the extreme codes and scales of each format).
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::IQ4_NL, DType::Q3_K})
    for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xFF}}) {
      std::vector<std::byte> q(dtype_row_bytes(t, 256), static_cast<std::byte>(fill));
      const uint16_t d = 0x3C00;
      for (size_t off = 0; off < q.size(); off += static_cast<size_t>(dtype_block_bytes(t)))
        std::memcpy(q.data() + off + (t == DType::Q3_K ? 108 : 0), &d, 2);
      std::vector<std::byte> h(dtype_row_bytes(transcoded_type(t), 256));
      transcode_row(q.data(), t, 256, h.data());
      const auto a = dequantize(q, t, 1, 256), b = dequantize(h, transcoded_type(t), 1, 256);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
          << dtype_name(t) << " " << int(fill);
    }
}

// Each of these formats packed in its own store gives, with both dots, on every path, M and
// thread count, the bits of the matrix packed from its Q8_0 (Q6_K) transcoding: their kernels
// compute Q8_0's (Q6_K's) integers.
TEST(QuantMatmul, FormatsEqualTheirTranscoding) {
  KernelOptions ko;
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::IQ4_NL, DType::Q3_K}) {
    const DType to = transcoded_type(t);
    const int64_t n = 37, k = 512;
    const auto q = random_blocks(t, n, k, 5 + static_cast<uint32_t>(t));
    std::vector<std::byte> h(dtype_row_bytes(to, k) * n);
    for (int64_t r = 0; r < n; ++r)
      transcode_row(q.data() + r * dtype_row_bytes(t, k), t, k,
                    h.data() + r * dtype_row_bytes(to, k));
    PackedMatrix pa = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
    PackedMatrix pb = PackedMatrix::pack(h.data(), to, n, k, to);
    ASSERT_EQ(pa.store(), t);
    const auto wf = dequantize(q, t, n, k);
    for (int64_t r = 0; r < n; r += 5)
      for (int64_t c = 0; c < k; c += 11) ASSERT_EQ(pa.at(r, c), wf[r * k + c]) << dtype_name(t);
    for (QuantDot dot : {QuantDot::F32, QuantDot::Int8}) {
      ko.quant_dot = dot;
      for (int64_t m : {1, 2, 3, 5, 33}) {
        const auto x = randn(static_cast<size_t>(m * k), 17 + static_cast<uint32_t>(m));
        std::vector<float> ya(static_cast<size_t>(m * n)), yb(ya.size());
        ko.isa = IsaCap::Amx;
        matmul(x.data(), m, k, pb, yb.data(), n, nullptr, ko);
        for (const char* isa : kIsas) {
          if (!test::isa_options(isa, &ko)) continue;
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::fill(ya.begin(), ya.end(), -1.0f);
            matmul(x.data(), m, k, pa, ya.data(), n, p, ko);
            ASSERT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * 4), 0)
                << dtype_name(t) << " " << quant_dot_name(dot) << " m=" << m << " " << isa;
          }
        }
        ko.isa = IsaCap::Amx;
      }
    }
  }
}

// Relative RMS error of quantise -> dequantise on Gaussian rows: within what each format's bits
// allow (and far below what a layout mistake would give, which is O(1)).
// The panel packing moves bytes only: for every type, any block bytes (random here, valid or
// not) and any number of rows, the packed panel is the per-value reference's, byte for byte.
TEST(QuantPack, PanelEqualsReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const QuantTraits& q : kQuantTraits) {
    const int64_t k = 2 * std::max<int64_t>(q.block_elems, 256);
    const size_t row_bytes = dtype_row_bytes(q.type, k);
    const int64_t pb = detail::quant_panel_block_bytes(q.type);
    for (int n_rows : {1, 5, 16}) {
      std::vector<std::byte> src(row_bytes * 16);
      for (auto& b : src) b = static_cast<std::byte>(byte(rng));
      const std::byte* rows[16];
      for (int j = 0; j < 16; ++j) rows[j] = src.data() + j * row_bytes;
      const size_t n = static_cast<size_t>(k / q.block_elems * pb);
      std::vector<std::byte> got(n, std::byte{0xAB}), want(n, std::byte{0xCD});
      detail::pack_quant_panel(q.type, rows, n_rows, k, got.data());
      detail::pack_quant_panel_ref(q.type, rows, n_rows, k, want.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n), 0) << q.name << " rows " << n_rows;
    }
  }
}

TEST(Quant, RoundTripError) {
  const int64_t rows = 8, k = 1024;
  const auto x = randn(static_cast<size_t>(rows * k), 1);
  const std::pair<DType, double> cases[] = {
      {DType::Q8_0, 0.01},   {DType::Q6_K, 0.03}, {DType::Q5_K, 0.06},   {DType::Q4_K, 0.12},
      {DType::Q5_0, 0.06},   {DType::Q4_0, 0.12}, {DType::IQ4_NL, 0.12}, {DType::Q3_K, 0.25},
      {DType::IQ4_XS, 0.12}, {DType::Q2_K, 0.45}, {DType::Q4_1, 0.12},   {DType::Q5_1, 0.06}};
  for (auto [t, bound] : cases) {
    const auto y = dequantize(quantize(x, t, rows, k), t, rows, k);
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (x[i] - y[i]) * (x[i] - y[i]), ss += x[i] * x[i];
    const double rel = std::sqrt(se / ss);
    std::printf("%s: relative RMS error %.4f (bound %.2f)\n", std::string(dtype_name(t)).c_str(),
                rel, bound);
    EXPECT_LT(rel, bound) << dtype_name(t);
    EXPECT_GT(rel, bound / 50) << dtype_name(
        t);  // it is lossy: values really went through the format
  }
}

TEST(Quant, ZeroRowsStayZero) {
  std::vector<float> x(256, 0.0f);
  for (DType t :
       {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q5_0, DType::IQ4_NL,
        DType::Q3_K, DType::IQ4_XS, DType::Q2_K, DType::Q4_1, DType::Q5_1}) {
    const auto y = dequantize(quantize(x, t, 1, 256), t, 1, 256);
    for (float v : y) EXPECT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// The quantised matmul equals, bit for bit, the F32 matmul of the dequantised weights.
TEST(QuantMatmul, EqualsF32OfDequantised) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::F32;
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::IQ4_NL,
                  DType::Q3_K, DType::IQ4_XS, DType::Q2_K, DType::Q4_1, DType::Q5_1, DType::Q5_0}) {
    for (int64_t n : {1, 16, 37, 100}) {
      const int64_t k = dtype_block_elems(t) == 32 ? 96 : 512;
      const auto w = randn(static_cast<size_t>(n * k), 7 + static_cast<uint32_t>(n));
      const auto q = quantize(w, t, n, k);
      const auto wf = dequantize(q, t, n, k);
      PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
      PackedMatrix pf = PackedMatrix::pack(wf.data(), DType::F32, n, k, DType::F32);
      const int64_t panel_block = t == DType::Q8_0     ? 544
                                  : t == DType::Q4_0   ? 288
                                  : t == DType::IQ4_NL ? 288
                                  : t == DType::Q4_1   ? 320
                                  : t == DType::Q5_1   ? 384
                                  : t == DType::Q5_0   ? 352
                                  : t == DType::Q3_K   ? 1824
                                  : t == DType::IQ4_XS ? 2208
                                  : t == DType::Q2_K   ? 1344
                                  : t == DType::Q4_K   ? 2368
                                  : t == DType::Q5_K   ? 2880
                                                       : 3360;
      EXPECT_EQ(pq.bytes(),
                static_cast<size_t>((n + 15) / 16 * (k / dtype_block_elems(t)) * panel_block));
      for (int64_t r = 0; r < n; r += 7)
        for (int64_t c = 0; c < k; c += 13) ASSERT_EQ(pq.at(r, c), wf[r * k + c]);
      for (int64_t m : {1, 2, 5, 33}) {
        const auto x = randn(static_cast<size_t>(m * k), 99 + static_cast<uint32_t>(m));
        std::vector<float> yf(static_cast<size_t>(m * n)), yq(yf.size()),
            y1(static_cast<size_t>(n));
        matmul(x.data(), m, k, pf, yf.data(), n, nullptr, ko);
        for (const char* isa : kIsas) {
          if (!test::isa_options(isa, &ko)) continue;
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::fill(yq.begin(), yq.end(), -1.0f);
            matmul(x.data(), m, k, pq, yq.data(), n, p, ko);
            ASSERT_EQ(std::memcmp(yq.data(), yf.data(), yq.size() * 4), 0)
                << dtype_name(t) << " n=" << n << " m=" << m << " " << isa;
          }
          // Row 0 alone (decode) gives the same bits as inside the batch.
          matmul(x.data(), 1, k, pq, y1.data(), n, &pool, ko);
          ASSERT_EQ(std::memcmp(y1.data(), yq.data(), y1.size() * 4), 0);
        }
        ko.isa = IsaCap::Amx;
      }
    }
  }
}

TEST(QuantMatmul, KPermutationGathersInput) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::F32;
  const int64_t n = 20, k = 512;
  const DType t = DType::Q4_K;
  const auto w = randn(static_cast<size_t>(n * k), 3);
  const auto q = quantize(w, t, n, k);
  const auto wf = dequantize(q, t, n, k);
  std::vector<int32_t> perm(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j)
    perm[j] = static_cast<int32_t>((j * 37) % k);  // 37 is odd: a permutation
  PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t);
  pq.set_k_perm(perm);
  PackedMatrix pf = PackedMatrix::pack(wf.data(), DType::F32, n, k, DType::F32);
  for (int64_t m : {1, 9}) {
    const auto x = randn(static_cast<size_t>(m * k), 5);
    std::vector<float> xg(x.size());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) xg[r * k + j] = x[r * k + perm[j]];
    std::vector<float> yq(static_cast<size_t>(m * n)), yf(yq.size()), yn(yq.size());
    matmul(x.data(), m, k, pq, yq.data(), n, nullptr, ko);
    matmul(xg.data(), m, k, pf, yf.data(), n, nullptr, ko);
    EXPECT_EQ(std::memcmp(yq.data(), yf.data(), yq.size() * 4), 0);
    // at() is in the logical (unpermuted) order: the naive reference agrees closely.
    matmul_naive(x.data(), m, k, pq, yn.data(), n);
    for (size_t i = 0; i < yq.size(); ++i)
      EXPECT_NEAR(yq[i], yn[i], 1e-3f * (1 + std::fabs(yn[i])));
  }
}

// A stack of parts in different stores equals the F32 matrix of all its rows, for every M; with
// a k permutation on the stack, the F32 matmul on the gathered input.
TEST(QuantMatmul, StackOfStores) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::F32;
  const int64_t k = 512;
  const std::pair<DType, int64_t> parts[] = {
      {DType::Q4_K, 20}, {DType::Q6_K, 9}, {DType::F32, 17}, {DType::Q8_0, 16}, {DType::Q5_K, 3}};
  std::vector<PackedMatrix> packed;
  std::vector<float> all;  // [rows, k] the values every part holds
  uint32_t seed = 40;
  for (auto [t, n] : parts) {
    const auto w = randn(static_cast<size_t>(n * k), ++seed);
    if (t == DType::F32) {
      packed.push_back(PackedMatrix::pack(w.data(), DType::F32, n, k, DType::F32));
      all.insert(all.end(), w.begin(), w.end());
    } else {
      const auto q = quantize(w, t, n, k);
      packed.push_back(PackedMatrix::pack(q.data(), t, n, k, t));
      const auto d = dequantize(q, t, n, k);
      all.insert(all.end(), d.begin(), d.end());
    }
  }
  size_t bytes = 0;
  for (auto& p : packed) bytes += p.bytes();
  PackedMatrix st = PackedMatrix::stack(std::move(packed));
  const int64_t n = static_cast<int64_t>(all.size()) / k;
  ASSERT_EQ(st.n(), n);
  EXPECT_EQ(st.bytes(), bytes);
  for (int64_t r = 0; r < n; r += 5) EXPECT_EQ(st.at(r, 77), all[r * k + 77]);
  PackedMatrix pf = PackedMatrix::pack(all.data(), DType::F32, n, k, DType::F32);
  ThreadPool pool(2, 0);  // every job shared, however small
  for (int64_t m : {1, 2, 3, 20}) {
    const auto x = randn(static_cast<size_t>(m * k), 9);
    std::vector<float> ys(static_cast<size_t>(m * n)), yf(ys.size());
    matmul(x.data(), m, k, st, ys.data(), n, &pool, ko);
    matmul(x.data(), m, k, pf, yf.data(), n, nullptr, ko);
    EXPECT_EQ(std::memcmp(ys.data(), yf.data(), ys.size() * 4), 0) << m;
  }
  std::vector<int32_t> perm(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) perm[j] = static_cast<int32_t>((j * 101) % k);
  st.set_k_perm(perm);
  const auto x = randn(static_cast<size_t>(3 * k), 10);
  std::vector<float> xg(x.size());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < k; ++j) xg[r * k + j] = x[r * k + perm[j]];
  std::vector<float> ys(static_cast<size_t>(3 * n)), yf(ys.size());
  matmul(x.data(), 3, k, st, ys.data(), n, &pool, ko);
  matmul(xg.data(), 3, k, pf, yf.data(), n, nullptr, ko);
  EXPECT_EQ(std::memcmp(ys.data(), yf.data(), ys.size() * 4), 0);
}

// matmul_fill: the bits of matmul on the same rows, for every store and quantised dot, M, thread
// count, chunking (k from 96 to 4608: 16 rows a fill call down to one), with a k permutation and
// a stack (which take the buffered path), with and without a spare buffer; every row is made
// exactly once, and only into rows of the given stride.
TEST(QuantMatmul, FillEqualsMatmulOnTheSameRows) {
  KernelOptions ko;
  ThreadPool pool(3, 0);  // every job shared, however small
  struct Case {
    DType store;
    int64_t k;
    bool perm, stack;
  };
  const Case cases[] = {{DType::Q8_0, 96, false, false},  {DType::Q8_0, 4608, false, false},
                        {DType::Q4_K, 512, false, false}, {DType::Q6_K, 1024, false, false},
                        {DType::Q8_0, 512, true, false},  {DType::Q8_0, 512, false, true},
                        {DType::F32, 300, false, false},  {DType::BF16, 64, false, false}};
  for (const Case& cs : cases) {
    const int64_t n = 40, k = cs.k;
    const auto w = randn(static_cast<size_t>(n * k), 31);
    PackedMatrix pw;
    if (cs.stack) {
      const auto q = quantize(w, cs.store, n, k);
      const int64_t half = n / 2;
      std::vector<PackedMatrix> parts;
      parts.push_back(PackedMatrix::pack(q.data(), cs.store, half, k, cs.store));
      parts.push_back(PackedMatrix::pack(w.data() + half * k, DType::F32, n - half, k, DType::F32));
      pw = PackedMatrix::stack(std::move(parts));
    } else if (dtype_is_quant(cs.store)) {
      const auto q = quantize(w, cs.store, n, k);
      pw = PackedMatrix::pack(q.data(), cs.store, n, k, cs.store);
    } else {
      pw = PackedMatrix::pack(w.data(), DType::F32, n, k, cs.store);
    }
    if (cs.perm) {
      std::vector<int32_t> perm(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) perm[j] = static_cast<int32_t>((j * 37) % k);
      pw.set_k_perm(perm);
    }
    for (QuantDot dot : {QuantDot::Int8, QuantDot::F32}) {
      ko.quant_dot = dot;
      for (const char* isa : {"avx512", "avxvnni", "avx2", "scalar"}) {
        if (!test::isa_options(isa, &ko)) continue;
        pw.set_kernel_options(ko);  // matmul_fill runs on the matrix's own options
        for (int64_t m : {1, 3, 17, 130}) {
          const auto x = randn(static_cast<size_t>(m * k), 7 + static_cast<uint32_t>(m), 2.0f);
          std::vector<float> ref(static_cast<size_t>(m * n));
          matmul(x.data(), m, k, pw, ref.data(), n, &pool, ko);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
            for (bool spare : {false, true}) {
              const int64_t ld_spare = k + 5;
              std::vector<float> sp(spare ? static_cast<size_t>(m * ld_spare) : 0);
              std::vector<int> made(static_cast<size_t>(m), 0);
              std::atomic<int> bad_stride{0};
              auto fill = [&](int64_t r0, int64_t r1, float* out, int64_t ldo) {
                if (ldo < k || (spare && ldo != ld_spare && ldo != k)) ++bad_stride;
                for (int64_t r = r0; r < r1; ++r) {
                  ++made[r];  // ranges are disjoint: no two threads touch one row
                  std::memcpy(out + (r - r0) * ldo, x.data() + r * k,
                              static_cast<size_t>(k) * sizeof(float));
                }
              };
              std::vector<float> y(ref.size(), -1.0f);
              matmul_fill(fill, m, pw, y.data(), n, p, spare ? sp.data() : nullptr, ld_spare);
              ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
                  << dtype_name(cs.store) << " k=" << k << " m=" << m << " " << isa
                  << (cs.perm ? " perm" : "") << (cs.stack ? " stack" : "")
                  << " dot=" << quant_dot_name(dot) << (spare ? " spare" : "");
              EXPECT_EQ(bad_stride.load(), 0);
              for (int64_t r = 0; r < m; ++r) ASSERT_EQ(made[r], 1) << "row " << r;
            }
        }
      }
    }
  }
}

// ---- int8 dot ----------------------------------------------------------------------------------

// Activation quantisation: known answers, special blocks, SIMD = scalar.
TEST(QuantInt8, QuantizeActs) {
  KernelOptions ko;
  const int64_t k = 64;
  std::vector<float> x(static_cast<size_t>(3 * k), 0.0f);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.5f;  // amax 8 (at i = 0)
  x[5] = 7.9f;                                                            // still below amax
  // Row 1: all zero. Row 2: one NaN in the second block.
  for (int64_t i = 0; i < k; ++i) x[2 * k + i] = 1.0f;
  x[2 * k + 40] = std::numeric_limits<float>::quiet_NaN();
  for (const char* isa : {"avx512", "avxvnni", "avx2", "scalar"}) {
    if (!test::isa_options(isa, &ko)) continue;
    detail::QuantizedActs a;
    detail::quantize_acts(DType::Q8_0, x.data(), 3, k, k, &a, nullptr, ko.isa);
    ASSERT_EQ(a.block, 32);
    // Q8_0 scales are rounded to fp16, as llama.cpp's block_q8_0 holds them.
    EXPECT_EQ(a.d[0], f16_to_f32(f32_to_f16(8.0f / 127.0f)));
    EXPECT_NE(a.d[0], 8.0f / 127.0f);
    EXPECT_EQ(a.q[0], -127);
    EXPECT_EQ(a.q[5], static_cast<int8_t>(std::nearbyint(7.9f * (127.0f / 8.0f))));
    EXPECT_EQ(a.q[17], static_cast<int8_t>(std::nearbyint(0.5f * (127.0f / 8.0f))));  // 7.9375
    EXPECT_EQ(a.d[1], 0.0f);  // x[32..63] of row 0 are zero
    int32_t sum = 0;
    for (int i = 0; i < 16; ++i) sum += a.q[i];
    EXPECT_EQ(a.s16[0], sum);
    EXPECT_EQ(a.s32[0], a.s16[0] + a.s16[1]);
    for (int64_t i = k; i < 2 * k; ++i) EXPECT_EQ(a.q[i], 0);  // zero row
    EXPECT_EQ(a.d[2], 0.0f);
    EXPECT_EQ(a.d[4], f16_to_f32(f32_to_f16(1.0f / 127.0f)));  // row 2, block 0
    EXPECT_EQ(a.q[2 * k], 127);
    EXPECT_TRUE(std::isnan(a.d[5]));  // row 2, block 1 holds the NaN
  }
  // A scale past fp16's range stays f32 (llama.cpp's would be inf); Q4_K's 256-value blocks
  // keep f32 scales, as llama.cpp's block_q8_K does.
  for (const char* isa : {"avx512", "avxvnni", "avx2", "scalar"}) {
    if (!test::isa_options(isa, &ko)) continue;
    std::vector<float> big(256, 1.0f);
    big[3] = 1e7f;
    detail::QuantizedActs a, b;
    detail::quantize_acts(DType::Q8_0, big.data(), 1, 256, 256, &a, nullptr, ko.isa);
    EXPECT_EQ(a.d[0], 1e7f / 127.0f);
    EXPECT_EQ(a.d[1], f16_to_f32(f32_to_f16(1.0f / 127.0f)));
    detail::quantize_acts(DType::Q4_K, big.data(), 1, 256, 256, &b, nullptr, ko.isa);
    EXPECT_EQ(b.d[0], 1e7f / 127.0f);
    big[3] = 1.0f;
    detail::quantize_acts(DType::Q4_K, big.data(), 1, 256, 256, &b, nullptr, ko.isa);
    EXPECT_EQ(b.d[0], 1.0f / 127.0f);
  }
  // Every SIMD path and the scalar agree on random rows of every block size, on a row of
  // rounding ties (amax 127: x * id = x, halves round to even), and on rows whose blocks' scales
  // cross every fp16 regime (rows 5-8: amax from 2^-40 to 2^22, so amax / 127 is an fp16
  // zero, subnormal, normal or past fp16's range; row 8's last block has an inf). Each row is 4608
  // values (144 Q8_0 blocks: more than one pass of the AVX-512 row quantiser).
  constexpr int64_t kRow = 4608, kRows = 9;
  auto r = randn(static_cast<size_t>(kRows * kRow), 17, 3.0f);
  for (int i = 0; i < kRow; ++i) r[4 * kRow + i] = static_cast<float>(i % 254 - 127) + 0.5f;
  r[4 * kRow] = -127.0f;
  for (int64_t i = 5 * kRow; i < kRows * kRow; ++i)
    r[i] = std::ldexp(r[i], static_cast<int>(((i - 5 * kRow) / 32) % 63) - 40);
  r[kRows * kRow - 1] = std::numeric_limits<float>::infinity();
  for (DType t : {DType::Q8_0, DType::Q4_K}) {
    detail::QuantizedActs b;
    ko.isa = IsaCap::Scalar;
    detail::quantize_acts(t, r.data(), kRows, kRow, kRow, &b, nullptr, ko.isa);
    EXPECT_EQ(b.q[4 * kRow + 1], -126);  // -125.5 rounds to even
    EXPECT_EQ(b.q[4 * kRow + 2], -124);  // -124.5 rounds to even
    for (const char* isa : {"avx512", "avxvnni", "avx2"}) {
      if (!test::isa_options(isa, &ko)) continue;
      detail::QuantizedActs a;
      detail::quantize_acts(t, r.data(), kRows, kRow, kRow, &a, nullptr, ko.isa);
      EXPECT_EQ(std::memcmp(a.q.data(), b.q.data(), kRows * kRow), 0) << isa;
      EXPECT_EQ(std::memcmp(a.d.data(), b.d.data(), a.d.size() * 4), 0) << isa;
      EXPECT_EQ(std::memcmp(a.s16.data(), b.s16.data(), kRows * kRow / 16 * 4), 0) << isa;
    }
  }
  {  // the regimes are there: fp16 zero, subnormal and normal scales, and f32 ones past it
    detail::QuantizedActs b;
    ko.isa = IsaCap::Scalar;
    detail::quantize_acts(DType::Q8_0, r.data(), kRows, kRow, kRow, &b, nullptr, ko.isa);
    int zero = 0, sub = 0, past = 0;
    for (int64_t i = 5 * kRow / 32; i < kRows * kRow / 32; ++i) {
      zero += b.d[i] == 0.0f;
      sub += b.d[i] > 0.0f && b.d[i] < 6.1035156e-5f;
      past += b.d[i] > 65504.0f;
    }
    EXPECT_GT(zero, 0);
    EXPECT_GT(sub, 0);
    EXPECT_GT(past, 0);
  }
  ko.isa = IsaCap::Amx;
}

// Every output of the int8 dot equals the scalar formula bit for bit, for every M, path and
// thread count, and row 0 alone equals row 0 inside the batch.
TEST(QuantInt8, EqualsScalarFormula) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::Int8;
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::IQ4_NL,
                  DType::Q3_K, DType::IQ4_XS, DType::Q2_K, DType::Q4_1, DType::Q5_1, DType::Q5_0}) {
    // 20 and 29: a partial second panel in two-panel tiles (AVX2 lanes 8-15, masked stores);
    // 600: 38 panels, so that a thread's AMX prefill runs more than one group of 16 panels and
    // its leftover rows split a group into VNNI panel pairs.
    for (int64_t n : {1, 16, 20, 29, 37, 100, 600}) {
      const int64_t k = dtype_block_elems(t) == 32 ? 96 : 512;
      auto w = randn(static_cast<size_t>(n * k), 70 + static_cast<uint32_t>(n));
      auto q = quantize(w, t, n, k);
      if (t == DType::Q8_0)  // the code -128 (valid in a file, never made by the quantiser)
        reinterpret_cast<BlockQ8_0*>(q.data())->qs[3] = -128;
      PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
      const int64_t panel_stride = k / dtype_block_elems(t) * detail::quant_panel_block_bytes(t);
      // 1-8: decode and batched decode (row tiles of up to 4 rows on the packed panels: 3, 4,
      // 2 + 3, 3 + 3, 3 + 4, 4 + 4; on VNNI, Q8_0, Q4_K and Q6_K take one tile of 5-8 rows per
      // panel); 9 and more: the prefill's row blocks.
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 50}) {
        auto x = randn(static_cast<size_t>(m * k), 990 + static_cast<uint32_t>(m), 2.0f);
        x[0] = 100.0f;  // an outlier: the block's other values get few levels
        if (m > 2) {    // row 1: a zero block and a block too small to scale (both quantise to 0)
          const int64_t blk = dtype_block_elems(t);
          std::fill(x.begin() + k, x.begin() + k + blk, 0.0f);
          std::fill(x.begin() + 2 * k - blk, x.begin() + 2 * k, 1e-35f);
        }
        detail::QuantizedActs xa;
        detail::quantize_acts(t, x.data(), m, k, k, &xa, nullptr, ko.isa);
        const std::vector<float> ref = int8_reference(t, xa, pq, m, n, panel_stride);
        std::vector<float> y(ref.size()), y1(static_cast<size_t>(n));
        for (const char* isa : kIsas) {
          if (!test::isa_options(isa, &ko)) continue;
          if (std::string(isa) == "avxvnni" || std::string(isa) == "avx2" ||
              std::string(isa) == "scalar") {
            EXPECT_EQ(std::string(matmul_int8_isa(ko.isa)), isa);
          }
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::fill(y.begin(), y.end(), -1.0f);
            matmul(x.data(), m, k, pq, y.data(), n, p, ko);
            ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
                << dtype_name(t) << " n=" << n << " m=" << m << " " << isa;
          }
          matmul(x.data(), 1, k, pq, y1.data(), n, &pool, ko);
          ASSERT_EQ(std::memcmp(y1.data(), ref.data(), y1.size() * 4), 0);
          // Decode tiles over 1-4 panel streams (each run of panels split differently, the
          // last tiles of a run shorter), one to eight rows: the same bits.
          if (m <= 8) {
            for (int panels : {1, 2, 3, 4}) {
              ko.decode_panels = panels;
              std::fill(y.begin(), y.end(), -1.0f);
              matmul(x.data(), m, k, pq, y.data(), n, &pool, ko);
              ko.decode_panels = 0;
              ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
                  << dtype_name(t) << " n=" << n << " m=" << m << " " << isa << " panels "
                  << panels;
            }
            // The threads' split of the columns (guided chunks or static shares): the same bits.
            for (DecodeSplit split : {DecodeSplit::Guided, DecodeSplit::Static}) {
              ko.decode_split = split;
              std::fill(y.begin(), y.end(), -1.0f);
              matmul(x.data(), m, k, pq, y.data(), n, &pool, ko);
              ko.decode_split = DecodeSplit::Auto;
              ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
                  << dtype_name(t) << " n=" << n << " m=" << m << " " << isa << " split "
                  << decode_split_name(split);
            }
          }
        }
        ko.isa = IsaCap::Amx;
      }
    }
  }
}

// The prefill over several row blocks, on every int8 path this host has: AMX sizes Q4_K / Q5_K /
// Q6_K row blocks by K (2048 values: 256 rows, Q6_K 512) and takes 128 for Q8_0, the VNNI tiles 512
// rows for the expanded Q4_K / Q5_K / Q6_K codes and 128 for Q8_0 (each call runs a block's 4-row
// tiles of a panel run, then the short one); 530 rows end in a partial block whose last 2 rows take
// a short tile. Q4_K over 500 columns: each thread runs two panel groups per row block. Every
// output has the scalar formula's bits (a row block's activations packed at the wrong offset, or a
// row tile written one tile off, fails it).
TEST(QuantInt8, RowBlocksEqualScalarFormula) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::Int8;
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::Q2_K,
                  DType::Q3_K, DType::Q4_1, DType::Q5_1, DType::Q5_0}) {
    const int64_t n = t == DType::Q4_K ? 500 : 37, k = 2048, m = 530;
    auto w = randn(static_cast<size_t>(n * k), 31);
    auto q = quantize(w, t, n, k);
    PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
    const int64_t panel_stride = k / dtype_block_elems(t) * detail::quant_panel_block_bytes(t);
    auto x = randn(static_cast<size_t>(m * k), 32, 2.0f);
    detail::QuantizedActs xa;
    detail::quantize_acts(t, x.data(), m, k, k, &xa, nullptr, ko.isa);
    const std::vector<float> ref = int8_reference(t, xa, pq, m, n, panel_stride);
    for (const char* isa : {"amx", "avx512", "avxvnni", "avx2"}) {
      if (!test::isa_options(isa, &ko)) continue;
      std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
      matmul(x.data(), m, k, pq, y.data(), n, &pool, ko);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_EQ(std::memcmp(&y[i], &ref[i], 4), 0)
            << dtype_name(t) << " " << isa << " row " << i / n << " col " << i % n;
    }
    ko.isa = IsaCap::Amx;
  }
}

// The largest integer sums the kernels can meet stay exact: every code at its maximum (Q4_K and
// Q4_0 / Q4_1 15, Q5_K / Q5_1 31, Q6_K 63, Q8_0 -128 / 127) against activations of +-127
// everywhere. The AVX2 kernels keep several vpmaddubsw results in int16 before widening (8 for
// Q4_K, Q4_0, Q4_1, 4 for Q5_K and Q5_1, 2 for Q6_K); one more would overflow here and this test
// would fail.
TEST(QuantInt8, ExtremeCodesStayExact) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::Int8;
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::IQ4_NL,
                  DType::Q3_K, DType::IQ4_XS, DType::Q2_K, DType::Q4_1, DType::Q5_1, DType::Q5_0}) {
    const int64_t n = 32, k = 512;
    auto w = randn(static_cast<size_t>(n * k), 5);
    auto q = quantize(w, t, n, k);
    const int64_t nblk = n * k / dtype_block_elems(t);
    for (int64_t i = 0; i < nblk; ++i) {
      if (t == DType::Q8_0) {
        auto* b = reinterpret_cast<BlockQ8_0*>(q.data()) + i;
        for (int e = 0; e < 32; ++e) b->qs[e] = static_cast<int8_t>(i % 2 ? 127 : -128);
      } else if (t == DType::Q4_0) {
        std::memset(reinterpret_cast<BlockQ4_0*>(q.data())[i].qs, 0xFF, 16);
      } else if (t == DType::Q4_1) {
        std::memset(reinterpret_cast<BlockQ4_1*>(q.data())[i].qs, 0xFF, 16);
      } else if (t == DType::Q5_1) {
        std::memset(reinterpret_cast<BlockQ5_1*>(q.data())[i].qs, 0xFF, 16);
        std::memset(reinterpret_cast<BlockQ5_1*>(q.data())[i].qh, 0xFF, 4);
      } else if (t == DType::Q5_0) {  // codes 31 or 0: 15 or -16
        std::memset(reinterpret_cast<BlockQ5_0*>(q.data())[i].qs, i % 2 ? 0xFF : 0x00, 16);
        std::memset(reinterpret_cast<BlockQ5_0*>(q.data())[i].qh, i % 2 ? 0xFF : 0x00, 4);
      } else if (t == DType::IQ4_NL) {  // index 0: -127, the value of largest magnitude
        std::memset(reinterpret_cast<BlockIQ4_NL*>(q.data())[i].qs, i % 2 ? 0xFF : 0x00, 16);
      } else if (t == DType::Q2_K) {  // codes 3, scales and mins 15
        auto* b = reinterpret_cast<BlockQ2_K*>(q.data()) + i;
        std::memset(b->qs, 0xFF, kQK_K / 4);
        std::memset(b->scales, 0xFF, kQK_K / 16);
      } else if (t == DType::IQ4_XS) {  // values -127 or 113, scales -32 (codes 0)
        auto* b = reinterpret_cast<BlockIQ4_XS*>(q.data()) + i;
        std::memset(b->qs, i % 2 ? 0xFF : 0x00, kQK_K / 2);
        std::memset(b->scales_l, 0, sizeof b->scales_l);
        b->scales_h = 0;
      } else if (t == DType::Q3_K) {  // codes 3 or -4 (its largest magnitude), scales -32
        auto* b = reinterpret_cast<BlockQ3_K*>(q.data()) + i;
        std::memset(b->qs, i % 2 ? 0xFF : 0x00, kQK_K / 4);
        std::memset(b->hmask, i % 2 ? 0xFF : 0x00, kQK_K / 8);
        std::memset(b->scales, 0, 12);
      } else if (t == DType::Q4_K) {
        std::memset(reinterpret_cast<BlockQ4_K*>(q.data())[i].qs, 0xFF, kQK_K / 2);
      } else if (t == DType::Q5_K) {
        auto* b = reinterpret_cast<BlockQ5_K*>(q.data()) + i;
        std::memset(b->qs, 0xFF, kQK_K / 2);
        std::memset(b->qh, 0xFF, kQK_K / 8);
      } else {
        auto* b = reinterpret_cast<BlockQ6_K*>(q.data()) + i;
        std::memset(b->ql, 0xFF, kQK_K / 2);
        std::memset(b->qh, 0xFF, kQK_K / 4);
      }
    }
    PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
    const int64_t panel_stride = k / dtype_block_elems(t) * detail::quant_panel_block_bytes(t);
    // 5-8: every height of the tall batched-decode tiles (Q8_0, Q4_K, Q6_K on VNNI).
    for (int64_t m : {1, 2, 5, 6, 7, 8, 16}) {
      std::vector<float> x(static_cast<size_t>(m * k));
      for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < k; ++i) x[r * k + i] = r % 2 ? -1.0f : 1.0f;
      detail::QuantizedActs xa;
      detail::quantize_acts(t, x.data(), m, k, k, &xa, nullptr, ko.isa);
      const std::vector<float> ref = int8_reference(t, xa, pq, m, n, panel_stride);
      std::vector<float> y(ref.size());
      for (const char* isa : kIsas) {
        if (!test::isa_options(isa, &ko)) continue;
        matmul(x.data(), m, k, pq, y.data(), n, &pool, ko);
        ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
            << dtype_name(t) << " m=" << m << " " << isa;
      }
      ko.isa = IsaCap::Amx;
    }
  }
}

// Q6_K's every sub-block scale (-128..127: each row holds all 256 once) against codes at both
// ends (q = -32 or 31, a block each) and random ones: the AMX tiles carry each scale as three
// digits in [-3, 4] in their operands, and every path gives the scalar formula's bits.
TEST(QuantInt8, Q6KEveryScaleEqualsScalarFormula) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::Int8;
  ThreadPool pool(2, 0);  // every job shared, however small
  const DType t = DType::Q6_K;
  const int64_t n = 40, k = 4096;
  auto q = random_blocks(t, n, k, 77);
  std::mt19937 rng(78);
  const int64_t nblk = n * k / kQK_K;
  for (int64_t i = 0; i < nblk; ++i) {
    auto* b = reinterpret_cast<BlockQ6_K*>(q.data()) + i;
    for (int s = 0; s < 16; ++s) b->scales[s] = static_cast<int8_t>((i % 16) * 16 + s - 128);
    if (i % 3 != 2) {  // codes 0 (q = -32) or 63 (q = 31)
      std::memset(b->ql, i % 3 ? 0xFF : 0x00, kQK_K / 2);
      std::memset(b->qh, i % 3 ? 0xFF : 0x00, kQK_K / 4);
    }
    b->d = static_cast<uint16_t>(0x3800 | (rng() & 0x3FF));  // f16 in [0.5, 1)
  }
  PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
  const int64_t panel_stride = k / kQK_K * detail::quant_panel_block_bytes(t);
  for (int64_t m : {16, 37}) {
    auto x = randn(static_cast<size_t>(m * k), 79 + static_cast<uint32_t>(m), 2.0f);
    for (int64_t i = 0; i < k; ++i) x[i] = i % 2 ? -1.0f : 1.0f;  // row 0: codes +-127
    detail::QuantizedActs xa;
    detail::quantize_acts(t, x.data(), m, k, k, &xa, nullptr, ko.isa);
    const std::vector<float> ref = int8_reference(t, xa, pq, m, n, panel_stride);
    std::vector<float> y(ref.size());
    for (const char* isa : kIsas) {
      if (!test::isa_options(isa, &ko)) continue;
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::fill(y.begin(), y.end(), -1.0f);
        matmul(x.data(), m, k, pq, y.data(), n, p, ko);
        for (int64_t i = 0; i < m * n; ++i)
          ASSERT_EQ(std::memcmp(&y[i], &ref[i], 4), 0)
              << isa << " m=" << m << " row " << i / n << " col " << i % n;
      }
    }
    ko.isa = IsaCap::Amx;
  }
}

// The int8 dot stays close to the exact product of the (dequantised) weights: relative RMS
// error about 0.5% on Gaussian data. A wrong nibble order, scale, min or offset gives errors of
// tens of percent; the bound is 2%.
TEST(QuantInt8, CloseToExactProduct) {
  KernelOptions ko;
  ko.quant_dot = QuantDot::Int8;
  ThreadPool pool(2, 0);  // every job shared, however small
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::IQ4_NL,
                  DType::Q3_K, DType::IQ4_XS, DType::Q2_K, DType::Q4_1, DType::Q5_1, DType::Q5_0}) {
    const int64_t n = 48, k = 1024, m = 7;
    const auto w = randn(static_cast<size_t>(n * k), 5);
    const auto q = quantize(w, t, n, k);
    PackedMatrix pq = PackedMatrix::pack(q.data(), t, n, k, t, &pool);
    const auto x = randn(static_cast<size_t>(m * k), 6);
    std::vector<float> y(static_cast<size_t>(m * n)), yn(y.size());
    matmul(x.data(), m, k, pq, y.data(), n, &pool, ko);
    matmul_naive(x.data(), m, k, pq, yn.data(), n);
    double err = 0, ref = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      err += (y[i] - yn[i]) * static_cast<double>(y[i] - yn[i]);
      ref += static_cast<double>(yn[i]) * yn[i];
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, 0.02) << dtype_name(t);
    EXPECT_GT(rel, 0.0) << dtype_name(t);  // the int8 dot really ran
    std::printf("int8 dot %s: relative RMS error %.4f\n", std::string(dtype_name(t)).c_str(), rel);
  }
}

}  // namespace
}  // namespace rw
