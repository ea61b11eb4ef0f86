// Quantised weight panels: packing from ggml blocks, exact widening to f32 (the f32 dot) and the
// int8 dot (layouts and arithmetic in matmul_quant.h). The AVX-512 (and AVX-512 VNNI) kernels are
// compiled under target attributes and chosen at run time; the scalar code is the reference with
// the same per-element arithmetic, so every path gives the same bits.
#include "rewind/kernels/matmul_quant.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "rewind/base/check.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/isa_cap.h"
#include "rewind/tensor/quant.h"

namespace rw::detail {

namespace {

constexpr int kNR = 16;

// Byte of value k of lane j within its 64-byte group (4 consecutive k of each of the 16 lanes).
constexpr int lane_byte(int k, int j) {
  return 4 * j + (k & 3);
}
// Byte offset, inside a block's code area, of value k of lane j in the 4-byte group layout.
constexpr int group_byte(int k, int j) {
  return ((k >> 2) * kNR + j) * 4 + (k & 3);
}
// Q4_K: value k of lane j lives in byte ((k / 8) * 16 + j) * 4 + k % 4, nibble (k / 4) % 2.
constexpr int q4k_byte(int k, int j) {
  return ((k >> 3) * kNR + j) * 4 + (k & 3);
}
constexpr int q4k_shift(int k) {
  return ((k >> 2) & 1) * 4;
}
// Q4_K: min of sub-block s of lane j.
constexpr int q4k_min_byte(int s, int j) {
  return ((s >> 1) * kNR + j) * 2 + (s & 1);
}

constexpr int kQ4KScOff = 64, kQ4KMinOff = 192, kQ4KQOff = 320;
// Q5_K: Q4_K's header and nibble groups, with the high bits (the code's bit 4) in 8 more groups
// of 64 bytes, one per sub-block h (placed by q5k_hi_group): byte t of lane j holds in bit
// 2c + e the high bit of value 8(4h + c) + 4e + t, the value whose low 4 bits are in nibble e of
// byte t of lane j of nibble group 4h + c. q5k_hbit_byte: that byte within a run of such groups
// (Q5_1's one group).
constexpr int q5k_hbit_byte(int k, int j) {
  return ((k >> 5) * kNR + j) * 4 + (k & 3);
}
constexpr int q5k_hbit_shift(int k) {
  return 2 * ((k >> 3) & 3) + ((k >> 2) & 1);
}
// A packed Q5_K block's codes in the order the decode tiles read them: sub-block s (values
// 32s..32s+31) takes 320 bytes from kQ4KQOff + 320 s, its high-bit group (which the sub-block's
// first group already reads) and then its four nibble groups (group g holding values 8g..8g+7 as
// Q4_K's group g). Q4_K's nibble groups follow one another.
constexpr int k_lo_group(bool q5, int g) {
  return kQ4KQOff + (q5 ? 320 * (g >> 2) + 64 + 64 * (g & 3) : 64 * g);
}
constexpr int q5k_hi_group(int s) {
  return kQ4KQOff + 320 * s;
}
// The 4-bit (Q4_K) or 5-bit (Q5_K) code of value k of lane j.
inline int kquant_code(const uint8_t* blk, bool q5, int k, int j) {
  const int lo = (blk[k_lo_group(q5, k >> 3) + lane_byte(k, j)] >> q4k_shift(k)) & 0xF;
  return q5 ? lo | (((blk[q5k_hi_group(k >> 5) + lane_byte(k, j)] >> q5k_hbit_shift(k)) & 1) << 4)
            : lo;
}
constexpr int kQ6KScOff = 32, kQ6KLoOff = 288;
// A Q6_K block expanded for prefill (expand_q6_k): the same d and sc, then one code byte per
// value in 64 groups of the 4-byte operand layout.
constexpr int64_t kQ6KBytesBlock = 288 + 4096;
// A Q4_K / Q5_K block expanded for prefill (expand_k_bytes): the packed block's header (d, dmin,
// sc, m: the bytes before kQ4KQOff, the same in both types), then its codes one byte each as
// expand_q4_k_codes lays them out (group g: values 8g..8g+3 at 128 g, 8g+4..8g+7 at 128 g + 64).
// The packed codes (and Q5_K's high bits) stay out: the tiles read the expanded ones.
constexpr int64_t kKBytesCodes = 4096;
constexpr int64_t kKBytesBlock = kQ4KQOff + kKBytesCodes;
// Q6_K code (u8, q + 32) of value k, lane j: low 4 bits in the Q4_K nibble layout, high 2 bits
// in 16 groups of 16 values: byte t of lane j of group h holds, in bits 2c..2c+1, the high bits
// of value 16h + 4c + t.
constexpr int q6k_hi_byte(int k, int j) {
  return ((k >> 4) * kNR + j) * 4 + (k & 3);
}
constexpr int q6k_hi_shift(int k) {
  return ((k >> 2) & 3) * 2;
}
// A packed Q6_K block's codes in the order the decode tiles read them: sub-block s (values
// 16s..16s+15) takes 192 bytes from kQ6KLoOff + 192 s, its two nibble groups (group g holding
// values 8g..8g+7 as Q4_K's group g) and then its high-bit group.
constexpr int q6k_lo_group(int g) {
  return kQ6KLoOff + 192 * (g >> 1) + 64 * (g & 1);
}
constexpr int q6k_hi_group(int s) {
  return kQ6KLoOff + 192 * s + 128;
}
inline int q6k_code(const uint8_t* blk, int k, int j) {
  const int lo = (blk[q6k_lo_group(k >> 3) + lane_byte(k, j)] >> q4k_shift(k)) & 0xF;
  const int hi = (blk[q6k_hi_group(k >> 4) + lane_byte(k, j)] >> q6k_hi_shift(k)) & 3;
  return lo | (hi << 4);
}
constexpr int kQ8QOff = 32;
// Q4_1 (see matmul_quant.h): Q4_0's block (d, then the codes at kQ8QOff), then m at kQ41MOff.
// Q5_1: Q4_0's block with the codes' low 4 bits, their fifth bits at kQ51HOff in Q5_K's layout
// of one sub-block (byte t of lane j holds in bit 2c + e that of the value whose low bits are in
// nibble e of byte t of lane j of nibble group c), then m at kQ51MOff.
constexpr int kQ41MOff = 32 + 256, kQ51HOff = 32 + 256, kQ51MOff = 32 + 256 + 64;
constexpr int min_offset(bool q5) {
  return q5 ? kQ51MOff : kQ41MOff;
}
// Q4_1 / Q5_1 expanded for the VNNI prefill tile (expand_nibble_bytes): d, then the codes one
// byte each in Q8_0's 8 groups (values 4g..4g+3 at kQ8QOff + 64 g), then m at kMinBytesMOff.
constexpr int kMinBytesMOff = kQ8QOff + 512;
constexpr int64_t kMinBytesBlock = kMinBytesMOff + 32;
// A Q4_1 / Q5_1 block's min enters as fma(m, min_factor(dx, sum32(qx)), acc): the factor is the
// same for every output of the row, so a tile takes one fma per output and block for it (with
// (m * dx) per output, two). The product is exact when dx is an f16 value (act_scale), as
// |sum32| < 2^12; every path computes it this way, so the bits agree whatever dx is.
inline float min_factor(float dx, int16_t sum32) {
  return dx * static_cast<float>(sum32);
}
// Q3_K (see matmul_quant.h): the low 2 bits of c at kQ3KLoOff in Q6_K's high-bit layout
// (q6k_hi_byte, q6k_hi_shift), bit 2 at kQ3KHiOff.
constexpr int kQ3KLoOff = 288, kQ3KHiOff = 288 + 1024;
constexpr int q3k_hb_byte(int k, int j) {
  return ((k >> 5) * kNR + j) * 4 + (k & 3);
}
constexpr int q3k_hb_shift(int k) {
  return (k >> 2) & 7;
}
inline int q3k_code(const uint8_t* blk, int k, int j) {
  const int lo = (blk[kQ3KLoOff + q6k_hi_byte(k, j)] >> q6k_hi_shift(k)) & 3;
  const int hi = (blk[kQ3KHiOff + q3k_hb_byte(k, j)] >> q3k_hb_shift(k)) & 1;
  return lo | (hi << 2);
}
// IQ4_XS (see matmul_quant.h): sc at kIQ4XSScOff, the codes (indices into kIq4nlValues) at
// kIQ4XSQOff in Q4_K's nibble layout. Expanded for prefill (expand_iq4_xs_bytes): the header,
// then the u8 operands kIq4nlValues[c] + 128 one byte each in expand_k_bytes' layout.
constexpr int kIQ4XSScOff = 32, kIQ4XSQOff = 160;
constexpr int64_t kIQ4XSBytesBlock = kIQ4XSQOff + kKBytesCodes;
inline int iq4xs_code(const uint8_t* blk, int k, int j) {
  return (blk[kIQ4XSQOff + q4k_byte(k, j)] >> q4k_shift(k)) & 0xF;
}
// Q2_K (see matmul_quant.h): ggml's scale / min bytes at kQ2KScOff (sub-block s of lane j at
// 16 s + j), the 2-bit codes at kQ2KQOff in Q3_K's low-bit layout. Expanded for prefill
// (expand_q2_k_bytes): the header, then each code times its sub-block's scale (q * sc <= 45, a
// u8 operand) one byte each in 64 groups of the 4-byte operand layout (values 4g..4g+3 at
// kQ2KQOff + 64 g), so that one sum over the block is s1 with no multiply per sub-block.
constexpr int kQ2KScOff = 64, kQ2KQOff = 320;
constexpr int64_t kQ2KBytesBlock = kQ2KQOff + 4096;
inline int q2k_code(const uint8_t* blk, int k, int j) {
  return (blk[kQ2KQOff + q6k_hi_byte(k, j)] >> q6k_hi_shift(k)) & 3;
}
// Q3_K expanded for the VNNI prefill tile (expand_q3_k_scaled): d (the panel block's first 32
// bytes), then each value's q * sc + 124 one byte each in 64 groups of the 4-byte operand layout
// (values 4g..4g+3 at kQ3KScaledOff + 64 g): q * sc is in [-124, 128], so the byte is 0..252, a
// u8 operand, and a sum from -124 * sum(qx) over the block is s with no multiply per sub-block.
constexpr int kQ3KScaledOff = 64;
constexpr int64_t kQ3KScaledBlock = kQ3KScaledOff + 4096;

// ---- scalar ----------------------------------------------------------------------------------

void widen_q8_0_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* q = reinterpret_cast<const int8_t*>(blk + kQ8QOff);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]);
    for (int k = 0; k < 32; ++k) out[k * ld + j] = static_cast<float>(q[group_byte(k, j)]) * d;
  }
}

// The code (0..15) of value k of lane j of a Q4_0 / IQ4_NL panel block.
inline int nibble_code(const uint8_t* blk, int k, int j) {
  return (blk[kQ8QOff + q4k_byte(k, j)] >> q4k_shift(k)) & 0xF;
}
// The code of value k of lane j of a Q4_1 (0..15) or a Q5_0 / Q5_1 (0..31) panel block.
inline int min_code(bool q5, const uint8_t* blk, int k, int j) {
  const int lo = nibble_code(blk, k, j);
  return q5 ? lo | ((blk[kQ51HOff + q5k_hbit_byte(k, j)] >> q5k_hbit_shift(k)) & 1) << 4 : lo;
}
// Its weight as an integer: Q8_0's q for the same value (Q4_0: c - 8; IQ4_NL: kIq4nlValues[c];
// Q5_0: c - 16).
inline int nibble_value(DType t, const uint8_t* blk, int k, int j) {
  if (t == DType::Q5_0) return min_code(true, blk, k, j) - 16;
  const int c = nibble_code(blk, k, j);
  return t == DType::IQ4_NL ? kIq4nlValues[c] : c - 8;
}

// Q4_0 / IQ4_NL / Q5_0: float(q) * d, as the Q8_0 widen.
template <DType T>
void widen_nibbles_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* o = reinterpret_cast<const uint8_t*>(blk);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]);
    for (int k = 0; k < 32; ++k) out[k * ld + j] = static_cast<float>(nibble_value(T, o, k, j)) * d;
  }
}

// Q4_1 / Q5_1: float(c) * d + m (ggml's x0 * d + m).
template <bool Q5>
void widen_min_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* m16 = reinterpret_cast<const uint16_t*>(blk + min_offset(Q5));
  const auto* o = reinterpret_cast<const uint8_t*>(blk);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]), m = f16_to_f32(m16[j]);
    for (int k = 0; k < 32; ++k) out[k * ld + j] = static_cast<float>(min_code(Q5, o, k, j)) * d + m;
  }
}

template <bool Q5>
void widen_k_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* m16 = reinterpret_cast<const uint16_t*>(blk + 32);
  const auto* sc = reinterpret_cast<const uint8_t*>(blk + kQ4KScOff);
  const auto* mn = reinterpret_cast<const uint8_t*>(blk + kQ4KMinOff);
  const auto* q = reinterpret_cast<const uint8_t*>(blk);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]), dmin = f16_to_f32(m16[j]);
    for (int s = 0; s < 8; ++s) {
      const float d1 = d * static_cast<float>(sc[s * kNR + j]);
      const float m1 = dmin * static_cast<float>(mn[q4k_min_byte(s, j)]);
      for (int k = 32 * s; k < 32 * s + 32; ++k)
        out[k * ld + j] = d1 * static_cast<float>(kquant_code(q, Q5, k, j)) - m1;
    }
  }
}

// Q6_K: (d * sc) * float(c - 32); Q3_K (Q3 = true): the same with its codes c - 4, the values of
// its Q6_K transcoding.
template <bool Q3>
void widen_q6_k_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScOff);
  const auto* q = reinterpret_cast<const uint8_t*>(blk);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]);
    for (int s = 0; s < 16; ++s) {
      const float ds = d * static_cast<float>(sc[s * kNR + j]);
      for (int k = 16 * s; k < 16 * s + 16; ++k)
        out[k * ld + j] =
            ds * static_cast<float>(Q3 ? q3k_code(q, k, j) - 4 : q6k_code(q, k, j) - 32);
    }
  }
}

// Q2_K: (d * sc) * float(q) - dmin * m (ggml's dl * q - ml).
void widen_q2_k_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* m16 = reinterpret_cast<const uint16_t*>(blk + 32);
  const auto* q = reinterpret_cast<const uint8_t*>(blk);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]), dmin = f16_to_f32(m16[j]);
    for (int s = 0; s < 16; ++s) {
      const int scm = q[kQ2KScOff + s * kNR + j];
      const float d1 = d * static_cast<float>(scm & 0xF), m1 = dmin * static_cast<float>(scm >> 4);
      for (int k = 16 * s; k < 16 * s + 16; ++k)
        out[k * ld + j] = d1 * static_cast<float>(q2k_code(q, k, j)) - m1;
    }
  }
}

// IQ4_XS: (d * sc) * float(kIq4nlValues[c]) (ggml's dl * value).
void widen_iq4_xs_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* sc = reinterpret_cast<const int8_t*>(blk + kIQ4XSScOff);
  const auto* q = reinterpret_cast<const uint8_t*>(blk);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]);
    for (int s = 0; s < 8; ++s) {
      const float ds = d * static_cast<float>(sc[s * kNR + j]);
      for (int k = 32 * s; k < 32 * s + 32; ++k)
        out[k * ld + j] = ds * static_cast<float>(kIq4nlValues[iq4xs_code(q, k, j)]);
    }
  }
}

// The scale of a quantised activation block, as llama.cpp computes it: for Q8_0's 32-value
// blocks amax / 127 rounded to fp16, as block_q8_0 holds it (a scale past fp16's range stays
// f32, where llama.cpp's would become inf); for block_q8_K's 256 1 / (127 / amax), its
// d = 1 / iscale. The codes come from the unrounded id in both. A last-bit difference in a scale
// can flip a rounding tie in a later layer's codes, so a file's logits match llama.cpp's only
// when every scale does.
inline float act_scale(float amax, float id, int n) {
  if (n == 256) return 1.0f / id;
  const float d = amax / 127.0f;
  return d <= 65504.0f ? f16_to_f32(f32_to_f16(d)) : d;
}

// s16[i / 16] = the sum of codes q[i..i+15], for i = from, from + 16, ..., to - 16.
inline void sums16_scalar(const int8_t* q, int64_t from, int64_t to, int32_t* s16) {
  for (int64_t i = from; i < to; i += 16) {
    int32_t sum = 0;
    for (int e = 0; e < 16; ++e) sum += q[i + e];
    s16[i / 16] = sum;
  }
}

// Activation quantisation of one block of n values (the reference; the SIMD versions below, by
// block on AVX2 and by row on AVX-512, give the same bits: the max is exact, x * id is one
// rounding, nearest-even both ways).
void quantize_block_scalar(const float* x, int n, int8_t* q, float* d) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();  // false for inf and NaN
    amax = std::max(amax, a);
  }
  if (!finite) {  // inf / NaN inputs: the block's products become NaN, as in f32
    std::fill(q, q + n, int8_t{0});
    *d = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (amax < 1e-30f) {  // zeros (and values too small for 127 / amax to be finite)
    std::fill(q, q + n, int8_t{0});
    *d = 0.0f;
    return;
  }
  const float id = 127.0f / amax;
  *d = act_scale(amax, id, n);
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
}

// ---- AVX-512 ---------------------------------------------------------------------------------

#define REWIND_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define REWIND_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
// GCC 12's avx512fintrin.h builds the unmasked conversions (cvtepi8_epi32, cvtepi32_ps,
// cvtph_ps) from their masked forms with an uninitialised pass-through operand and then warns
// about it in its own header; the operand is dead (all-ones mask).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

REWIND_AVX512 inline __m512 load_f16x16(const std::byte* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
REWIND_AVX512 inline __m512i load_group(const std::byte* p) {
  return _mm512_loadu_si512(reinterpret_cast<const void*>(p));
}
// Byte t of every 32-bit lane of v, sign- or zero-extended.
template <int T>
REWIND_AVX512 inline __m512i lane_byte_i8(__m512i v) {
  return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * T), 24);
}
template <int T>
REWIND_AVX512 inline __m512i lane_byte_u8(__m512i v) {
  return _mm512_and_si512(_mm512_srli_epi32(v, 8 * T), _mm512_set1_epi32(0xFF));
}

// The 4 (Q8_0, Q6_K) or 8 (Q4_K) weight vectors of group g of a block, as f32 in k order, with
// the widen's arithmetic (per sub-block scale vectors supplied by the caller).
REWIND_AVX512 inline void q8_0_group(const std::byte* blk, int g, __m512 d, __m512 (&w)[4]) {
  const __m512i v = load_group(blk + kQ8QOff + 64 * g);
  w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<0>(v)), d);
  w[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<1>(v)), d);
  w[2] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<2>(v)), d);
  w[3] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<3>(v)), d);
}
REWIND_AVX512 inline __m512 q4k_value(__m512 d1, __m512 m1, __m512i e) {
  return _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(e)), m1);
}
// vpternlogd's truth table for A | (B & C) (A = 0xF0, B = 0xCC, C = 0xAA): merges masked bits
// into a code vector in one op.
constexpr int kAOrBAndC = 0xF8;

// Bit `bit` of each byte of h moved to bit 4 (and the bits above it along) by one shift (none
// for bit 4); the other bits are whatever the shift leaves, for the caller to mask. In the
// unrolled decode loops `bit` is a constant, so each use is one immediate shift.
REWIND_AVX512 __attribute__((always_inline)) inline __m512i bit_to_4(__m512i h, int bit) {
  return bit < 4 ? _mm512_slli_epi32(h, 4 - bit) : bit == 4 ? h : _mm512_srli_epi32(h, bit - 4);
}
// The nibble group at q as bytes (lo: low nibbles, hi: high ones); Q5: with bits hshift (lo) and
// hshift + 1 (hi) of the high-bit group at h5 merged in as bit 4, each by one shift and one
// ternary-logic op (a | (b & 0x10)).
template <bool Q5>
REWIND_AVX512 __attribute__((always_inline)) inline void codes_4_5(const std::byte* q,
                                                                   const std::byte* h5, int hshift,
                                                                   __m512i& lo, __m512i& hi) {
  const __m512i v = load_group(q);
  lo = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), _mm512_set1_epi8(0x0F));
  if (Q5) {
    const __m512i h = load_group(h5), b4 = _mm512_set1_epi8(0x10);
    __m512i hl, hh;
    if (__builtin_constant_p(hshift)) {
      hl = bit_to_4(h, hshift);
      hh = bit_to_4(h, hshift + 1);
    } else {  // one variable shift for both
      const __m512i hs = _mm512_srl_epi32(h, _mm_cvtsi32_si128(hshift));
      hl = _mm512_slli_epi32(hs, 4);
      hh = _mm512_slli_epi32(hs, 3);
    }
    lo = _mm512_ternarylogic_epi32(lo, hl, b4, kAOrBAndC);
    hi = _mm512_ternarylogic_epi32(hi, hh, b4, kAOrBAndC);
  }
}
// The Q4_K / Q5_K codes of group g as bytes: lo holds values 8g + t, hi values 8g + 4 + t.
template <bool Q5>
REWIND_AVX512 __attribute__((always_inline)) inline void kquant_codes(const std::byte* blk, int s,
                                                                      int c, __m512i& lo,
                                                                      __m512i& hi) {
  codes_4_5<Q5>(blk + k_lo_group(Q5, 4 * s + c), blk + q5k_hi_group(s), 2 * c, lo, hi);
}
template <bool Q5>
REWIND_AVX512 inline void kquant_codes(const std::byte* blk, int g, __m512i& lo, __m512i& hi) {
  kquant_codes<Q5>(blk, g >> 2, g & 3, lo, hi);
}
// The same for the 32-value blocks with codes at kQ8QOff (Q4_0, IQ4_NL, Q4_1; Q5: Q5_0, Q5_1).
template <bool Q5>
REWIND_AVX512 inline void nibble_codes(const std::byte* blk, int g, __m512i& lo, __m512i& hi) {
  codes_4_5<Q5>(blk + kQ8QOff + 64 * g, blk + kQ51HOff, 2 * g, lo, hi);
}
template <bool Q5>
REWIND_AVX512 inline void q4_k_group(const std::byte* blk, int g, __m512 d1, __m512 m1,
                                     __m512 (&w)[8]) {
  __m512i lo, hi;
  kquant_codes<Q5>(blk, g, lo, hi);
  w[0] = q4k_value(d1, m1, lane_byte_u8<0>(lo));
  w[1] = q4k_value(d1, m1, lane_byte_u8<1>(lo));
  w[2] = q4k_value(d1, m1, lane_byte_u8<2>(lo));
  w[3] = q4k_value(d1, m1, lane_byte_u8<3>(lo));
  w[4] = q4k_value(d1, m1, lane_byte_u8<0>(hi));
  w[5] = q4k_value(d1, m1, lane_byte_u8<1>(hi));
  w[6] = q4k_value(d1, m1, lane_byte_u8<2>(hi));
  w[7] = q4k_value(d1, m1, lane_byte_u8<3>(hi));
}
// The u8 codes (q + 32) of values 4g..4g+3 of every lane, in the 4-byte operand layout: the low
// nibble, and bits 2c..2c+1 (c = g % 4) of the high-bit byte moved to bits 4..5 by one shift
// (bit_to_4) (none for c = 2) and merged in with one ternary-logic op, lo | (h & 0x30). In the
// decode loops g % 4 is a constant (the loops over a sub-block's 4 groups are unrolled).
REWIND_AVX512 inline __m512i q6_k_codes(const std::byte* blk, int g) {
  const __m512i l = load_group(blk + q6k_lo_group(g >> 1));
  const __m512i lo =
      _mm512_and_si512((g & 1) ? _mm512_srli_epi32(l, 4) : l, _mm512_set1_epi8(0x0F));
  const __m512i h = load_group(blk + q6k_hi_group(g >> 2));
  return _mm512_ternarylogic_epi32(lo, bit_to_4(h, 2 * (g & 3)), _mm512_set1_epi8(0x30), kAOrBAndC);
}
// The Q3_K codes c = q + 4 (0..7) of values 4g..4g+3 of every lane, g = 4 sb + i, from the
// sub-block's low-bit group lo (bits 2i..2i+1) and its high-bit group h already shifted so that
// this sub-block's bit 2 sits in bit i of each byte: moved to bit 2 (within the byte: the mask
// keeps bit 2 alone) and merged with one ternary-logic op. In the decode loop i is a constant.
REWIND_AVX512 inline __m512i q3_k_codes(__m512i lo, __m512i h, int i) {
  const __m512i l = _mm512_and_si512(i ? _mm512_srli_epi16(lo, 2 * i) : lo, _mm512_set1_epi8(3));
  const __m512i hs = i == 0   ? _mm512_slli_epi16(h, 2)
                     : i == 1 ? _mm512_slli_epi16(h, 1)
                     : i == 2 ? h
                              : _mm512_srli_epi16(h, 1);
  return _mm512_ternarylogic_epi32(l, hs, _mm512_set1_epi8(4), kAOrBAndC);
}
REWIND_AVX512 inline void q6_k_group(const std::byte* blk, int g, __m512 ds, __m512 (&w)[4]) {
  const __m512i v = q6_k_codes(blk, g);
  const __m512i c32 = _mm512_set1_epi32(32);
  w[0] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<0>(v), c32)));
  w[1] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<1>(v), c32)));
  w[2] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<2>(v), c32)));
  w[3] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<3>(v), c32)));
}

// Q4_0 / IQ4_NL / Q5_0: the 8 weight vectors of group g (values 8g + t from the low nibbles,
// 8g + 4 + t from the high ones) as float(q) * d, q = c - 8, kIq4nlValues[c] or c - 16 (Q5_0's
// fifth bits merged in first; the scalar widen's arithmetic: q exact, one rounding).
template <DType T>
REWIND_AVX512 inline void nibble_group(const std::byte* blk, int g, __m512 d, __m512 (&w)[8]) {
  __m512i lo, hi;
  nibble_codes<T == DType::Q5_0>(blk, g, lo, hi);
  if (T == DType::IQ4_NL) {
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    lo = _mm512_shuffle_epi8(table, lo);
    hi = _mm512_shuffle_epi8(table, hi);
  } else {
    const __m512i off = _mm512_set1_epi8(T == DType::Q5_0 ? 16 : 8);
    lo = _mm512_sub_epi8(lo, off);
    hi = _mm512_sub_epi8(hi, off);
  }
  w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<0>(lo)), d);
  w[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<1>(lo)), d);
  w[2] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<2>(lo)), d);
  w[3] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<3>(lo)), d);
  w[4] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<0>(hi)), d);
  w[5] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<1>(hi)), d);
  w[6] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<2>(hi)), d);
  w[7] = _mm512_mul_ps(_mm512_cvtepi32_ps(lane_byte_i8<3>(hi)), d);
}
// Q4_1 / Q5_1: the 8 weight vectors of group g as float(c) * d + m: one fma, as the product is
// exact (the scalar widen's one rounding).
template <bool Q5>
REWIND_AVX512 inline void min_group(const std::byte* blk, int g, __m512 d, __m512 m,
                                    __m512 (&w)[8]) {
  __m512i lo, hi;
  nibble_codes<Q5>(blk, g, lo, hi);
  w[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<0>(lo)), d, m);
  w[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<1>(lo)), d, m);
  w[2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<2>(lo)), d, m);
  w[3] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<3>(lo)), d, m);
  w[4] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<0>(hi)), d, m);
  w[5] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<1>(hi)), d, m);
  w[6] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<2>(hi)), d, m);
  w[7] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte_u8<3>(hi)), d, m);
}
// Q3_K: the 4 weight vectors of group g = 4 s + i (values 4g + t) as ds * float(c - 4), from the
// sub-block's low-bit group lo and its shifted high-bit group h (q3_k_codes).
REWIND_AVX512 inline void q3_k_group(__m512i lo, __m512i h, int i, __m512 ds, __m512 (&w)[4]) {
  const __m512i v = q3_k_codes(lo, h, i);
  const __m512i c4 = _mm512_set1_epi32(4);
  w[0] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<0>(v), c4)));
  w[1] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<1>(v), c4)));
  w[2] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<2>(v), c4)));
  w[3] = _mm512_mul_ps(ds, _mm512_cvtepi32_ps(_mm512_sub_epi32(lane_byte_u8<3>(v), c4)));
}
// Q3_K sub-block s: its low-bit group, and its high-bit group shifted so that its bit 2 of value
// 4i + t sits in bit i of each byte (as q3_k_codes takes them).
REWIND_AVX512 inline void q3_k_sub_block(const std::byte* blk, int s, __m512i& lo, __m512i& h) {
  lo = load_group(blk + kQ3KLoOff + 64 * s);
  h = _mm512_srl_epi16(load_group(blk + kQ3KHiOff + 64 * (s >> 1)), _mm_cvtsi32_si128(4 * (s & 1)));
}

REWIND_AVX512 inline __m512 q4k_d1(const std::byte* blk, __m512 d, int s) {
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                              reinterpret_cast<const __m128i*>(blk + kQ4KScOff + 16 * s)))));
}
// Q4_K mins of sub-block s for the 16 lanes (u8 pairs per lane: gather byte s & 1 of pair s / 2).
REWIND_AVX512 inline __m512 q4k_m1(const std::byte* blk, __m512 dmin, int s) {
  const __m512i pairs = _mm512_cvtepu16_epi32(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4KMinOff + 32 * (s >> 1))));
  const __m512i m =
      (s & 1) ? _mm512_srli_epi32(pairs, 8) : _mm512_and_si512(pairs, _mm512_set1_epi32(0xFF));
  return _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m));
}
REWIND_AVX512 inline __m512 q6k_ds(const std::byte* blk, __m512 d, int s) {
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                              reinterpret_cast<const __m128i*>(blk + kQ6KScOff + 16 * s)))));
}

// IQ4_XS: d * float(sc) of sub-block s for the 16 lanes.
REWIND_AVX512 inline __m512 iq4xs_ds(const std::byte* blk, __m512 d, int s) {
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                              reinterpret_cast<const __m128i*>(blk + kIQ4XSScOff + 16 * s)))));
}
// IQ4_XS code group g (values 8g..8g+7 of each lane) as IQ4_NL's nibble_group reads it, scaled by
// its sub-block's ds: float(value) * ds, the scalar widen's product.
REWIND_AVX512 inline void iq4_xs_group(const std::byte* blk, int g, __m512 ds, __m512 (&w)[8]) {
  nibble_group<DType::IQ4_NL>(blk + kIQ4XSQOff - kQ8QOff, g, ds, w);
}

// Q2_K sub-block s: d1 = d * sc and m1 = dmin * m for the 16 lanes, and its code group.
REWIND_AVX512 inline void q2k_sub_block(const std::byte* blk, __m512 d, __m512 dmin, int s,
                                        __m512& d1, __m512& m1, __m512i& codes) {
  const __m512i scm = _mm512_cvtepu8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ2KScOff + 16 * s)));
  d1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(scm, _mm512_set1_epi32(0xF))));
  m1 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(scm, 4)));
  codes = load_group(blk + kQ2KQOff + 64 * s);
}
// The Q2_K codes of values 16 s + 4i .. + 3 of every lane (u8, 0..3) from the sub-block's group.
REWIND_AVX512 inline __m512i q2_k_codes(__m512i codes, int i) {
  return _mm512_and_si512(i ? _mm512_srli_epi32(codes, 2 * i) : codes, _mm512_set1_epi8(3));
}
// Its 4 weight vectors d1 * float(q) - m1 (the scalar widen's arithmetic).
REWIND_AVX512 inline void q2_k_group(__m512i codes, int i, __m512 d1, __m512 m1, __m512 (&w)[4]) {
  const __m512i v = q2_k_codes(codes, i);
  w[0] = q4k_value(d1, m1, lane_byte_u8<0>(v));
  w[1] = q4k_value(d1, m1, lane_byte_u8<1>(v));
  w[2] = q4k_value(d1, m1, lane_byte_u8<2>(v));
  w[3] = q4k_value(d1, m1, lane_byte_u8<3>(v));
}

REWIND_AVX512 void widen_q8_0_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int g = 0; g < 8; ++g) {
    __m512 w[4];
    q8_0_group(blk, g, d, w);
    for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (4 * g + t) * ld, w[t]);
  }
}

template <bool Q5>
REWIND_AVX512 void widen_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk), dmin = load_f16x16(blk + 32);
  for (int s = 0; s < 8; ++s) {
    const __m512 d1 = q4k_d1(blk, d, s), m1 = q4k_m1(blk, dmin, s);
    for (int g = 4 * s; g < 4 * s + 4; ++g) {
      __m512 w[8];
      q4_k_group<Q5>(blk, g, d1, m1, w);
      for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
    }
  }
}

REWIND_AVX512 void widen_q6_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int s = 0; s < 16; ++s) {
    const __m512 ds = q6k_ds(blk, d, s);
    for (int g = 4 * s; g < 4 * s + 4; ++g) {
      __m512 w[4];
      q6_k_group(blk, g, ds, w);
      for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (4 * g + t) * ld, w[t]);
    }
  }
}

template <DType T>
REWIND_AVX512 void widen_nibbles_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int g = 0; g < 4; ++g) {
    __m512 w[8];
    nibble_group<T>(blk, g, d, w);
    for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
  }
}

template <bool Q5>
REWIND_AVX512 void widen_min_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk), m = load_f16x16(blk + min_offset(Q5));
  for (int g = 0; g < 4; ++g) {
    __m512 w[8];
    min_group<Q5>(blk, g, d, m, w);
    for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
  }
}

REWIND_AVX512 void widen_q2_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk), dmin = load_f16x16(blk + 32);
  for (int s = 0; s < 16; ++s) {
    __m512 d1, m1;
    __m512i codes;
    q2k_sub_block(blk, d, dmin, s, d1, m1, codes);
    for (int i = 0; i < 4; ++i) {
      __m512 w[4];
      q2_k_group(codes, i, d1, m1, w);
      for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (16 * s + 4 * i + t) * ld, w[t]);
    }
  }
}

REWIND_AVX512 void widen_iq4_xs_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int s = 0; s < 8; ++s) {
    const __m512 ds = iq4xs_ds(blk, d, s);
    for (int g = 4 * s; g < 4 * s + 4; ++g) {
      __m512 w[8];
      iq4_xs_group(blk, g, ds, w);
      for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
    }
  }
}

REWIND_AVX512 void widen_q3_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int s = 0; s < 16; ++s) {
    const __m512 ds = q6k_ds(blk, d, s);
    __m512i lo, h;
    q3_k_sub_block(blk, s, lo, h);
    for (int i = 0; i < 4; ++i) {
      __m512 w[4];
      q3_k_group(lo, h, i, ds, w);
      for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (16 * s + 4 * i + t) * ld, w[t]);
    }
  }
}

// Decode tiles (rows <= 2): the same per-lane dequantisation as the widen above, kept in
// registers and fed straight into the FMA chain (k in order), so the bits equal widen + the F32
// micro-kernel's; only the extra trip of the weights through scratch is saved.
__attribute__((always_inline)) inline __mmask16 lane_mask(int valid) {
  return valid >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (valid > 0 ? valid : 0)) - 1u);
}

constexpr int64_t kPrefetchBytes = 4096;       // AVX2 tiles: per panel stream, ahead of the loads
constexpr int64_t kPrefetchBytesL2 = 768;      // VNNI tiles
constexpr int64_t kPrefetchBytesL2Far = 2048;  // Q2_K / Q3_K VNNI tiles (Q5_K: none)
constexpr int64_t kPrefetchBytesL2Near = 384;  // Q4_K VNNI decode tiles (two panel streams)

// Prefetch for the int8 decode tiles (R <= 2: the weights stream from memory), ahead of the
// loads. Each code group of a block prefetches its share of the block's bytes, and the blocks
// of a panel tile the panel, so every 64-byte line of the stream is prefetched: prefetching
// only the code groups leaves a block's header (and a Q6_K block's high bits) to demand misses.
// The prefetch is asm: GCC 12 drops __builtin_prefetch (_mm_prefetch) from code it vectorises,
// and left the AVX2 tiles without any (Q6_K decode then streamed at 8 GB/s, Q8_0 15-19, on Zen
// 3). The VNNI tiles prefetch into L2 (prefetcht1): against prefetcht0 4 KiB ahead, 2 KiB ahead
// ran matmul_bench M=1 on cold weights on Zen 4 (variants alternating call by call) 7-27% faster
// for Q8_0 and Q4_K, model decode Q4_K +12-18%, Q8_0 +5-8%; prefetcht2 the same as prefetcht1,
// 8 KiB ahead 1-4% slower. 768 bytes ahead (per panel stream; a 1-row tile runs 4) then raised
// what one core streams: matmul_bench --threads 1 --m 1 on Zen 4, binaries alternating, 3 rounds,
// Q8_0 24-27 -> 27-34 GB/s, Q4_K 22-25 -> 25-28 (1 KiB and 512 bytes close, 1.5 KiB no gain);
// with two threads the host's memory usually caps both at the same 33-36 GB/s, but in its fast
// phases model decode kept up where 2 KiB fell behind (bench/ab_bench.py, 5 rounds: in rounds
// whose probes read 46-62 GB/s, 2 KiB reached 71-83% of the paired bound, Q4_K 71.2%, Q8_0
// 80.1-82.8%, Q4_K_M 71.7%, and 768 bytes 81-97%, Q4_K 81.5-93.6%, Q8_0 94.5-97.0%, Q4_K_M
// 95.1%). Q4_K, whose decode tiles run 2 panel streams (vnni_decode_panels), prefetches 384
// bytes ahead: builds with each distance, one thread, 2-panel tiles against the 4-panel ones
// over 269 MB of layer weights: 768 bytes +5-8%, 384 and 256 bytes +10-11%, none +9-12% (the
// hardware prefetchers keep up with two streams), 512 bytes +5-10%, 1.5 KiB +2-3%, 3 KiB -10%.
// Q2_K and Q3_K keep 2 KiB (Q3_K's tile, which is compute-bound, fell from 21 to 10-12 GB/s at
// 768 bytes and 1 KiB; Q2_K 26 -> 24); Q5_K none (see int8_tile_avx512_one).
// The AVX2 tiles, slower per byte, keep prefetcht0 4 KiB ahead: prefetcht1 made them 0-5%
// slower, Q6_K 25-48%.
template <bool L2, int64_t Ahead = L2 ? kPrefetchBytesL2 : kPrefetchBytes>
__attribute__((always_inline)) inline void prefetch_line(uintptr_t a) {
  if constexpr (L2)
    __asm__ volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(a + Ahead)));
  else
    __asm__ volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(a + kPrefetchBytes)));
}
// AVX2 tiles: part `part` of nparts of a pb-byte block, each line of the stream exactly once. A
// part spans at most 128 bytes (callers pick nparts), so at most two line starts.
template <int R>
__attribute__((always_inline)) inline void prefetch_part(const std::byte* blk, int64_t pb, int part,
                                                         int nparts) {
  if (R > 2) return;
  const auto base = reinterpret_cast<uintptr_t>(blk);
  const uintptr_t lo = (base + static_cast<uintptr_t>(pb * part / nparts) + 63) & ~uintptr_t{63};
  const uintptr_t hi =
      (base + static_cast<uintptr_t>(pb * (part + 1) / nparts) + 63) & ~uintptr_t{63};
  if (lo < hi) prefetch_line<false>(lo);
  if (lo + 64 < hi) prefetch_line<false>(lo + 64);
}
// VNNI tiles (block size Pb and group count G known at compile time): group g prefetches at
// offset g * Pb / G, and half way to the next group's where groups are over a line apart, so
// consecutive prefetches of a stream are at most 64 bytes apart and every line gets at least one.
// Constant offsets and no alignment arithmetic: prefetch_part's dozen integer operations per
// group cost the VNNI tiles their speed from cache (Zen 5, one thread, hot Q6_K decode 25 GB/s
// with prefetch_part, 74-82 with this).
template <int R, int64_t Pb, int G, int64_t Ahead = kPrefetchBytesL2>
__attribute__((always_inline)) inline void prefetch_spread(const std::byte* blk, int g) {
  if constexpr (R <= 2) {
    constexpr int64_t kStep = (Pb + G - 1) / G;  // the most bytes between two groups' offsets
    static_assert(kStep <= 128, "at most two prefetches a group");
    const auto a = reinterpret_cast<uintptr_t>(blk) + static_cast<uintptr_t>(g * Pb / G);
    prefetch_line<true, Ahead>(a);
    if constexpr (kStep > 64) prefetch_line<true, Ahead>(a + kStep / 2);
  }
}

// acc[r][p] = fma(x[r, k + t], w[p][t], acc[r][p]) for t < T, in order.
template <int R, int P, int T>
REWIND_AVX512 __attribute__((always_inline)) inline void fma_steps(__m512 (&acc)[R][P],
                                                                   const __m512 (&w)[P][T],
                                                                   const float* x, int64_t ldx,
                                                                   int64_t k) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + k + t]);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(a, w[p][t], acc[r][p]);
    }
  }
}

template <int R, int P>
REWIND_AVX512 void decode_tile_avx512(DType t, const float* x, int64_t ldx, const std::byte* panels,
                                      int64_t panel_stride, int64_t nb, float* y, int64_t ldy,
                                      int ncols) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const int64_t pb = quant_panel_block_bytes(t);
  auto prefetch = [&](const std::byte* blk, int off) {
    _mm_prefetch(reinterpret_cast<const char*>(blk + off) + kPrefetchBytes, _MM_HINT_T0);
  };
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + b * pb;
    if (t == DType::Q8_0) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int g = 0; g < 8; ++g) {
        __m512 w[P][4];
        for (int p = 0; p < P; ++p) {
          prefetch(blk[p], kQ8QOff + 64 * g);
          q8_0_group(blk[p], g, d[p], w[p]);
        }
        fma_steps<R, P, 4>(acc, w, x, ldx, b * 32 + 4 * g);
      }
    } else if (t == DType::Q4_0 || t == DType::IQ4_NL || t == DType::Q5_0) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int g = 0; g < 4; ++g) {
        __m512 w[P][8];
        for (int p = 0; p < P; ++p) {
          prefetch(blk[p], kQ8QOff + 64 * g);
          if (t == DType::IQ4_NL) {
            nibble_group<DType::IQ4_NL>(blk[p], g, d[p], w[p]);
          } else if (t == DType::Q5_0) {
            if (g == 0) prefetch(blk[p], kQ51HOff);
            nibble_group<DType::Q5_0>(blk[p], g, d[p], w[p]);
          } else {
            nibble_group<DType::Q4_0>(blk[p], g, d[p], w[p]);
          }
        }
        fma_steps<R, P, 8>(acc, w, x, ldx, b * 32 + 8 * g);
      }
    } else if (t == DType::Q4_1 || t == DType::Q5_1) {
      const bool q5 = t == DType::Q5_1;
      __m512 d[P], m[P];
      for (int p = 0; p < P; ++p) {
        d[p] = load_f16x16(blk[p]);
        m[p] = load_f16x16(blk[p] + min_offset(q5));
      }
      for (int g = 0; g < 4; ++g) {
        __m512 w[P][8];
        for (int p = 0; p < P; ++p) {
          // The block's 320 (384) bytes, evenly: two prefetches 40 (48) bytes apart per group.
          const int step = static_cast<int>(pb) / 8;
          prefetch(blk[p], 2 * step * g);
          prefetch(blk[p], 2 * step * g + step);
          if (q5)
            min_group<true>(blk[p], g, d[p], m[p], w[p]);
          else
            min_group<false>(blk[p], g, d[p], m[p], w[p]);
        }
        fma_steps<R, P, 8>(acc, w, x, ldx, b * 32 + 8 * g);
      }
    } else if (t == DType::Q3_K) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int s = 0; s < 16; ++s) {
        __m512 ds[P];
        __m512i lo[P], h[P];
        for (int p = 0; p < P; ++p) {
          // The block's 1824 bytes, evenly: two prefetches 57 bytes apart per sub-block.
          prefetch(blk[p], 114 * s);
          prefetch(blk[p], 114 * s + 57);
          ds[p] = q6k_ds(blk[p], d[p], s);
          q3_k_sub_block(blk[p], s, lo[p], h[p]);
        }
        for (int i = 0; i < 4; ++i) {
          __m512 w[P][4];
          for (int p = 0; p < P; ++p) q3_k_group(lo[p], h[p], i, ds[p], w[p]);
          fma_steps<R, P, 4>(acc, w, x, ldx, b * 256 + 16 * s + 4 * i);
        }
      }
    } else if (t == DType::Q2_K) {
      __m512 d[P], dmin[P];
      for (int p = 0; p < P; ++p) {
        d[p] = load_f16x16(blk[p]);
        dmin[p] = load_f16x16(blk[p] + 32);
      }
      for (int s = 0; s < 16; ++s) {
        __m512 d1[P], m1[P];
        __m512i codes[P];
        for (int p = 0; p < P; ++p) {
          prefetch(blk[p], 84 * s);  // the block's 1344 bytes, evenly: 42 bytes apart
          prefetch(blk[p], 84 * s + 42);
          q2k_sub_block(blk[p], d[p], dmin[p], s, d1[p], m1[p], codes[p]);
        }
        for (int i = 0; i < 4; ++i) {
          __m512 w[P][4];
          for (int p = 0; p < P; ++p) q2_k_group(codes[p], i, d1[p], m1[p], w[p]);
          fma_steps<R, P, 4>(acc, w, x, ldx, b * 256 + 16 * s + 4 * i);
        }
      }
    } else if (t == DType::IQ4_XS) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int s = 0; s < 8; ++s) {
        __m512 ds[P];
        for (int p = 0; p < P; ++p) ds[p] = iq4xs_ds(blk[p], d[p], s);
        for (int g = 4 * s; g < 4 * s + 4; ++g) {
          __m512 w[P][8];
          for (int p = 0; p < P; ++p) {
            prefetch(blk[p], kIQ4XSQOff + 64 * g);
            iq4_xs_group(blk[p], g, ds[p], w[p]);
          }
          fma_steps<R, P, 8>(acc, w, x, ldx, b * 256 + 8 * g);
        }
      }
    } else if (t == DType::Q4_K || t == DType::Q5_K) {
      const bool q5 = t == DType::Q5_K;
      __m512 d[P], dmin[P];
      for (int p = 0; p < P; ++p) {
        d[p] = load_f16x16(blk[p]);
        dmin[p] = load_f16x16(blk[p] + 32);
      }
      for (int s = 0; s < 8; ++s) {
        __m512 d1[P], m1[P];
        for (int p = 0; p < P; ++p) {
          d1[p] = q4k_d1(blk[p], d[p], s);
          m1[p] = q4k_m1(blk[p], dmin[p], s);
        }
        for (int g = 4 * s; g < 4 * s + 4; ++g) {
          __m512 w[P][8];
          for (int p = 0; p < P; ++p) {
            prefetch(blk[p], k_lo_group(q5, g));
            if (q5) {
              if ((g & 3) == 0) prefetch(blk[p], q5k_hi_group(g >> 2));
              q4_k_group<true>(blk[p], g, d1[p], m1[p], w[p]);
            } else {
              q4_k_group<false>(blk[p], g, d1[p], m1[p], w[p]);
            }
          }
          fma_steps<R, P, 8>(acc, w, x, ldx, b * 256 + 8 * g);
        }
      }
    } else {  // Q6_K
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int s = 0; s < 16; ++s) {
        __m512 ds[P];
        for (int p = 0; p < P; ++p) ds[p] = q6k_ds(blk[p], d[p], s);
        for (int g = 4 * s; g < 4 * s + 4; ++g) {
          __m512 w[P][4];
          for (int p = 0; p < P; ++p) {
            if ((g & 1) == 0) prefetch(blk[p], q6k_lo_group(g >> 1));
            if ((g & 3) == 0) prefetch(blk[p], q6k_hi_group(g >> 2));
            q6_k_group(blk[p], g, ds[p], w[p]);
          }
          fma_steps<R, P, 4>(acc, w, x, ldx, b * 256 + 4 * g);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r][p]);
}

using DecodeTileFn = void (*)(DType, const float*, int64_t, const std::byte*, int64_t, int64_t,
                              float*, int64_t, int);
constexpr DecodeTileFn kDecodeTiles[2][4] = {{decode_tile_avx512<1, 1>, decode_tile_avx512<1, 2>,
                                              decode_tile_avx512<1, 3>, decode_tile_avx512<1, 4>},
                                             {decode_tile_avx512<2, 1>, decode_tile_avx512<2, 2>,
                                              decode_tile_avx512<2, 3>, decode_tile_avx512<2, 4>}};

// ---- int8 dot: AVX-512 VNNI ------------------------------------------------------------------

// Software prefetch (into L2) of the panel group a row block reads next, a few lines per tile
// step: a prefill's weights come from memory (a model's matrices are far larger than the
// caches), and without it the first row tile of each panel group waits on every line its tile
// loads miss (the hardware prefetchers see those loads late). Cold matmul_bench, M=512, Q8_0 on
// AMX: 0.63-0.69 of the hot speed before.
struct PrefetchStream {
  const std::byte* p;
  const std::byte* end;
  int64_t per_step;
  // Lines [p, p + bytes) spread over `steps` calls of step().
  PrefetchStream(const std::byte* from, int64_t bytes, int64_t steps)
      : p(from), end(from + bytes), per_step(steps > 0 ? (bytes / 64 + steps) / steps : 0) {}
  __attribute__((always_inline)) void step() {
    for (int64_t i = 0; i < per_step && p < end; ++i, p += 64)
      _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }
};

// acc + w (u8) . a (s8) per 32-bit lane, as inline asm that ties the accumulator to one
// register. With the intrinsic, GCC 12 put a register move next to most vpdpbusd of the Q4_K /
// Q5_K sub-block sums (104 vmovdqa beside the tile's 128 vpdpbusd, accumulators shuffled
// between registers); the asm leaves none. Q4_K matmuls, variants alternating call by call on
// Zen 4: M=512 0.5-3% faster (model prefill of 512 tokens 504 -> 506 and 477 -> 488 tok/s), M=1
// with the weights in cache 12-15%. The Q8_0 and Q6_K tiles with the asm did not change.
REWIND_VNNI __attribute__((always_inline)) inline __m512i dpbusd_tied(__m512i acc, __m512i w,
                                                                      __m512i a) {
  asm("vpdpbusd %[a], %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [a] "v"(a));
  return acc;
}

// A zero vector made by the zeroing idiom in the register its user gets (asm volatile, so each
// call stays its own instruction): from _mm512_setzero_si512, GCC 12 zeroes one register and
// copies it into each Q4_K / Q5_K sub-block sum, 8 vmovdqa64 per sub-block in the loop, and the
// zeroing idiom costs no execution slot where a register copy of a zmm does on Zen 4.
REWIND_AVX512 __attribute__((always_inline)) inline __m512i zero_idiom() {
  __m512i z;
  asm volatile("vpxord %0, %0, %0" : "=v"(z));
  return z;
}

// acc + x per 32-bit lane in acc's register (asm, as dpbusd_tied): with the intrinsic GCC 12
// put each Q4_K / Q5_K block sum's update in another register and copied it back, 8 vmovdqa64
// per sub-block. Together with zero_idiom: matmul_bench M=512 Q4_K on Zen 4, variants
// alternating call by call, 0.3-3.5% faster (gate|up 2.9-7.5%); the same tied add in the Q6_K
// tile ran 1-4% slower, so that tile keeps the intrinsic.
REWIND_AVX512 __attribute__((always_inline)) inline __m512i add_epi32_tied(__m512i acc,
                                                                          __m512i x) {
  asm("vpaddd %[x], %[acc], %[acc]" : [acc] "+v"(acc) : [x] "v"(x));
  return acc;
}

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// Two int32 sums that fit int16 (activation sums of 16 values) as one int16 pair, s[0] low: a
// vpmaddwd / vpdpwssd operand.
inline int32_t i16_pair(const int32_t* s) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(s[0])) |
                              static_cast<uint32_t>(static_cast<uint16_t>(s[1])) << 16);
}
// kIq4nlValues[c] + 128 (1..241, a u8 operand) in every 128-bit lane, for vpshufb on codes c.
REWIND_AVX512 inline __m512i iq4_u8_table() {
  return _mm512_broadcast_i32x4(_mm_xor_si128(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)), _mm_set1_epi8(-128)));
}
// The low 16 bits of each 32-bit lane of v in both of its 16-bit halves (a per-lane factor for
// vpmullw on the lane's bytes taken as 16-bit pairs).
REWIND_AVX512 inline __m512i halves16(__m512i v) {
  return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(v, 16));
}

// Activation rows of one tile.
template <int R>
struct ActRows {
  const int8_t* q[R];
  const float* d[R];
  const int32_t* s16[R];
  const int16_t* s32[R];
  ActRows(const QuantizedActs& xa, int64_t r0) {
    for (int r = 0; r < R; ++r) {
      q[r] = xa.q.data() + (r0 + r) * xa.k;
      d[r] = xa.d.data() + (r0 + r) * (xa.k / xa.block);
      s16[r] = xa.s16.data() + (r0 + r) * (xa.k / 16);
      s32[r] = xa.s32.data() + (r0 + r) * (xa.k / 32);
    }
  }
};

// -x by flipping the sign bit (as the reference's unary minus; no rounding, NaN signs flip too).
REWIND_AVX512 inline __m512 negate_ps(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}

// acc[r][p] = fma(dw[p] * dx[r], float(s[r][p]), acc[r][p]) (negated product when Neg).
template <int R, int P, bool Neg = false>
REWIND_VNNI __attribute__((always_inline)) inline void combine(__m512 (&acc)[R][P],
                                                               const __m512 (&dw)[P],
                                                               const ActRows<R>& xr, int64_t b,
                                                               const __m512i (&s)[R][P]) {
  for (int r = 0; r < R; ++r) {
    const __m512 dx = _mm512_set1_ps(xr.d[r][b]);
    for (int p = 0; p < P; ++p) {
      const __m512 scale = _mm512_mul_ps(dw[p], dx);
      const __m512 f = _mm512_cvtepi32_ps(s[r][p]);
      // Neg: the scale negated first, as the reference's fma(-(dmin * dx), s, acc).
      acc[r][p] = _mm512_fmadd_ps(Neg ? negate_ps(scale) : scale, f, acc[r][p]);
    }
  }
}

// One instantiation per type: the branches of the other types (and the constants they keep in
// registers) stay out of it (with every type in one function GCC hoisted their constants out of
// the block loop, and Q8_0's 6 x 2 prefill tile ran 8% slower). Bytes (Q4_K / Q5_K / Q6_K
// prefill on expanded codes) is a template parameter too: as a run-time flag it put a branch in
// every code group, and GCC peeled the group loop and shuffled the sums between registers.
template <int R, int P, DType t, bool Bytes>
REWIND_VNNI __attribute__((always_inline)) inline void int8_tile_avx512_one(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step, PrefetchStream* pf) {
  const ActRows<R> xr(xa, r0);
  // The packed block's size as a constant for the decode prefetch (bytes serves prefill only);
  // pb: the stride of the blocks the tile reads (packed, or expanded for prefill).
  constexpr int64_t kPb = quant_panel_block_bytes(t);
  // Q5_K and Q6_K blocks ended in their high-bit region, which the tile reads from the first
  // sub-block on, ahead of the block's linear order: 2 KiB ahead of that order reached the lines
  // of the first sub-blocks' high bits too late (demand misses from memory), a whole block ahead
  // reached them during the block before (matmul_bench --m 1 --cold on Zen 4, the two binaries
  // alternating: Q6_K lm_head 7.3-7.5 -> 4.7-6.9 ms, in_proj 0.18-0.22 -> 0.14-0.18). Both are
  // now packed in the order the tile reads them (q6k_lo_group, k_lo_group): one thread, cold,
  // binaries alternating. Q6_K on 2 panels, 192 bytes to 1.5 KiB ahead all within the noise
  // (lm_head 34-35 GB/s), against 25-27 GB/s for the old layout a block ahead on 4 panels and
  // 17 for the old layout 768 bytes ahead on 2 (no prefetch, or the high-bit group first, the
  // same too). Q4_K / IQ4_XS, read in linear order, were no faster a block ahead. Q5_K, with
  // each sub-block's high-bit group first (the first group reads it) and its shifts as
  // immediates (kquant_codes), streams best with no software prefetch at all: the hardware
  // prefetchers follow its now strictly linear reads. One thread, cold, all shapes: 30-33 GB/s
  // against 24-27 a block ahead (768 bytes to 5.6 KiB ahead, or prefetcht0, the same or worse);
  // the high-bit group last with no prefetch 19. 2 or 4 panels the same.
  constexpr int64_t kAhead = t == DType::Q2_K || t == DType::Q3_K ? kPrefetchBytesL2Far
                             : t == DType::Q4_K                   ? kPrefetchBytesL2Near
                                                                  : kPrefetchBytesL2;
  constexpr int64_t pb = !Bytes               ? kPb
                         : t == DType::Q6_K   ? kQ6KBytesBlock
                         : t == DType::IQ4_XS ? kIQ4XSBytesBlock
                         : t == DType::Q2_K   ? kQ2KBytesBlock
                         : t == DType::Q3_K   ? kQ3KScaledBlock
                         : t == DType::Q4_1 || t == DType::Q5_1 ? kMinBytesBlock
                                              : kKBytesBlock;
  const int64_t nb = xa.k / xa.block;
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf) pf->step();  // prefill: the next panel group, a few lines per block
    const std::byte* blk[P];
    for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + b * pb;
    __m512 dw[P];
    for (int p = 0; p < P; ++p) dw[p] = load_f16x16(blk[p]);
    __m512i s[R][P];
    if constexpr (t == DType::Q8_0) {
      // u8 operand q + 128 (sign bit flipped); -128 * sum(qx) corrects the offset.
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int r = 0; r < R; ++r) {
        const __m512i c = _mm512_set1_epi32(-128 * (xr.s16[r][2 * b] + xr.s16[r][2 * b + 1]));
        for (int p = 0; p < P; ++p) s[r][p] = c;
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        __m512i w[P];
        for (int p = 0; p < P; ++p) {
          prefetch_spread<R, kPb, 8, kAhead>(blk[p], g);
          w[p] = _mm512_xor_si512(load_group(blk[p] + kQ8QOff + 64 * g), flip);
        }
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 4 * g));
          for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpbusd_epi32(s[r][p], w[p], a);
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
    } else if constexpr (t == DType::Q4_0 || t == DType::IQ4_NL || t == DType::Q4_1 ||
                         t == DType::Q5_1 || t == DType::Q5_0) {
      // Q4_0: the codes c (0..15) are the u8 operand as they are, s = sum c * x - 8 * sum x.
      // IQ4_NL: vpshufb looks the codes up as kIq4nlValues[c] + 128 (1..241, a valid u8
      // operand), s = sum (v + 128) * x - 128 * sum x. Either way Q8_0's integer for its value.
      // Q4_1 / Q5_1: s = sum c * x from zero (c = 0..15 / 0..31), then the min's fma. Q5_0
      // (decode; its prefill runs Q8_0's tile on the Q8_0 blocks expand_nibble_bytes makes): the
      // 5-bit codes, s = sum c * x - 16 * sum x, Q8_0's integer for q = c - 16.
      constexpr bool nl = t == DType::IQ4_NL, q5 = t == DType::Q5_1 || t == DType::Q5_0,
                     q41 = t == DType::Q4_1 || t == DType::Q5_1;
      const __m512i table = iq4_u8_table();
      for (int r = 0; r < R; ++r) {
        if constexpr (q41) {
          for (int p = 0; p < P; ++p) s[r][p] = zero_idiom();
        } else {
          const __m512i c =
              _mm512_set1_epi32((nl ? -128 : q5 ? -16 : -8) * int32_t{xr.s32[r][b]});
          for (int p = 0; p < P; ++p) s[r][p] = c;
        }
      }
      if constexpr (Bytes) {  // Q4_1 / Q5_1 prefill on expand_nibble_bytes' codes
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          __m512i w[P];
          for (int p = 0; p < P; ++p) w[p] = load_group(blk[p] + kQ8QOff + 64 * g);
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 4 * g));
            for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpbusd_epi32(s[r][p], w[p], a);
          }
        }
      } else {
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          __m512i lo[P], hi[P];
          for (int p = 0; p < P; ++p) {
            prefetch_spread<R, kPb, 4, kAhead>(blk[p], g);
            nibble_codes<q5>(blk[p], g, lo[p], hi[p]);
            if constexpr (nl) {
              lo[p] = _mm512_shuffle_epi8(table, lo[p]);
              hi[p] = _mm512_shuffle_epi8(table, hi[p]);
            }
          }
          for (int r = 0; r < R; ++r) {
            const __m512i a0 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 8 * g));
            const __m512i a1 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 8 * g + 4));
            for (int p = 0; p < P; ++p) {
              s[r][p] = _mm512_dpbusd_epi32(s[r][p], lo[p], a0);
              s[r][p] = _mm512_dpbusd_epi32(s[r][p], hi[p], a1);
            }
          }
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
      if constexpr (q41) {  // acc = fma(m, dx * float(sum32(qx)), acc): one fma per output
        __m512 mw[P];
        for (int p = 0; p < P; ++p)
          mw[p] = load_f16x16(blk[p] + (Bytes ? kMinBytesMOff : min_offset(q5)));
        for (int r = 0; r < R; ++r) {
          const __m512 sx = _mm512_set1_ps(min_factor(xr.d[r][b], xr.s32[r][b]));
          for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(mw[p], sx, acc[r][p]);
        }
      }
    } else if constexpr (t == DType::Q4_K || t == DType::Q5_K || t == DType::IQ4_XS) {
      // IQ4_XS: the u8 operand kIq4nlValues[c] + 128 (1..241: vpshufb on the codes for decode,
      // expanded so for prefill), each sub-block sum started at -128 * sum32(qx) so that it ends
      // as sum kIq4nlValues[c] * qx; signed scales, no mins.
      constexpr bool xs = t == DType::IQ4_XS;
      constexpr int q_off = xs ? kIQ4XSQOff : kQ4KQOff, sc_off = xs ? kIQ4XSScOff : kQ4KScOff;
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i table = iq4_u8_table();
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      // Both halves of a group as byte codes (4 or 5 bits) into one sum per sub-block: with 4
      // rows x 2 panels the f32, block and sub-block accumulators take 24 of the 32 registers
      // (a second sub-block sum for the high nibbles kept in place, as before, took 32 and
      // spilled: matmul_bench M=512 gate|up on Zen 5, Q4_K 769-889 -> 1253-1291 GOP/s).
      for (int sb = 0; sb < 8; ++sb) {
        __m512i is[R][P];
        for (int r = 0; r < R; ++r) {
          if constexpr (xs) {
            const __m512i c = _mm512_set1_epi32(-128 * int32_t{xr.s32[r][b * 8 + sb]});
            for (int p = 0; p < P; ++p) is[r][p] = c;
          } else {
            for (int p = 0; p < P; ++p) is[r][p] = zero_idiom();
          }
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {  // unrolled: c a constant in each copy (kquant_codes' shifts)
          const int g = 4 * sb + c;
          __m512i lo[P], hi[P];
          for (int p = 0; p < P; ++p) {
            if constexpr (t != DType::Q5_K) prefetch_spread<R, kPb, 32, kAhead>(blk[p], g);
            if constexpr (Bytes) {
              lo[p] = load_group(blk[p] + q_off + 128 * g);
              hi[p] = load_group(blk[p] + q_off + 128 * g + 64);
            } else if constexpr (xs) {
              const __m512i v = load_group(blk[p] + q_off + 64 * g);
              lo[p] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
              hi[p] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            } else {
              kquant_codes<t == DType::Q5_K>(blk[p], sb, c, lo[p], hi[p]);
            }
          }
          for (int r = 0; r < R; ++r) {
            const __m512i a0 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 8 * g));
            const __m512i a1 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 8 * g + 4));
            for (int p = 0; p < P; ++p) {
              is[r][p] = dpbusd_tied(is[r][p], lo[p], a0);
              is[r][p] = dpbusd_tied(is[r][p], hi[p], a1);
            }
          }
        }
        for (int p = 0; p < P; ++p) {
          const __m128i sc8 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + sc_off + 16 * sb));
          const __m512i sc = xs ? _mm512_cvtepi8_epi32(sc8) : _mm512_cvtepu8_epi32(sc8);
          for (int r = 0; r < R; ++r)
            s[r][p] = add_epi32_tied(s[r][p], _mm512_mullo_epi32(is[r][p], sc));
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
      if constexpr (!xs) {
        // Mins: sum_s m[s] * sum32[s], pairs of sub-blocks per 16-bit dot product.
        for (int r = 0; r < R; ++r)
          for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
        for (int tp = 0; tp < 4; ++tp) {
          __m512i mv[P];
          for (int p = 0; p < P; ++p)
            mv[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(blk[p] + kQ4KMinOff + 32 * tp)));
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.s32[r] + b * 8 + 2 * tp));
            for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpwssd_epi32(s[r][p], mv[p], a);
          }
        }
        __m512 dmin[P];
        for (int p = 0; p < P; ++p) dmin[p] = load_f16x16(blk[p] + 32);
        combine<R, P, true>(acc, dmin, xr, b, s);
      }
    } else if constexpr (t == DType::Q2_K) {
      // As Q4_K with 16 sub-blocks of 16 values: the codes (0..3) are the u8 operand as they
      // are, built in registers (decode), the scale and min of a sub-block the low and high
      // nibble of its byte. Prefill's expanded bytes hold q * sc: s1 in one sum, no vpmulld.
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      if constexpr (Bytes) {
#pragma GCC unroll 4
        for (int g = 0; g < 64; ++g) {
          __m512i w[P];
          for (int p = 0; p < P; ++p) w[p] = load_group(blk[p] + kQ2KQOff + 64 * g);
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
            for (int p = 0; p < P; ++p) s[r][p] = dpbusd_tied(s[r][p], w[p], a);
          }
        }
      } else {
        for (int sb = 0; sb < 16; ++sb) {
          __m512i is[R][P], codes[P];
          for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) is[r][p] = zero_idiom();
          for (int p = 0; p < P; ++p) codes[p] = load_group(blk[p] + kQ2KQOff + 64 * sb);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const int g = 4 * sb + i;
            __m512i w[P];
            for (int p = 0; p < P; ++p) {
              prefetch_spread<R, kPb, 64, kAhead>(blk[p], g);
              w[p] = q2_k_codes(codes[p], i);
            }
            for (int r = 0; r < R; ++r) {
              const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
              for (int p = 0; p < P; ++p) is[r][p] = dpbusd_tied(is[r][p], w[p], a);
            }
          }
          for (int p = 0; p < P; ++p) {
            const __m512i sc = _mm512_and_si512(
                _mm512_cvtepu8_epi32(_mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(blk[p] + kQ2KScOff + 16 * sb))),
                _mm512_set1_epi32(0xF));
            for (int r = 0; r < R; ++r)
              s[r][p] = add_epi32_tied(s[r][p], _mm512_mullo_epi32(is[r][p], sc));
          }
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
      // Mins: sum_s m[s] * sum16[s], pairs of sub-blocks per 16-bit dot product (the two
      // sub-blocks' bytes interleaved per lane, the high nibbles taken).
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      for (int tp = 0; tp < 8; ++tp) {
        __m512i mv[P];
        for (int p = 0; p < P; ++p) {
          const __m128i b0 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + kQ2KScOff + 32 * tp));
          const __m128i b1 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + kQ2KScOff + 32 * tp + 16));
          mv[p] = _mm512_srli_epi16(
              _mm512_cvtepu8_epi16(
                  _mm256_set_m128i(_mm_unpackhi_epi8(b0, b1), _mm_unpacklo_epi8(b0, b1))),
              4);
        }
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(i16_pair(xr.s16[r] + b * 16 + 2 * tp));
          for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpwssd_epi32(s[r][p], mv[p], a);
        }
      }
      __m512 dmin[P];
      for (int p = 0; p < P; ++p) dmin[p] = load_f16x16(blk[p] + 32);
      combine<R, P, true>(acc, dmin, xr, b, s);
    } else if constexpr (t == DType::Q3_K && Bytes) {
      // Prefill on expand_q3_k_scaled's bytes q * sc + 124: one sum from -124 * sum(qx).
      for (int r = 0; r < R; ++r) {
        int32_t sum = 0;
        for (int j = 0; j < 8; ++j) sum += xr.s32[r][b * 8 + j];
        const __m512i c = _mm512_set1_epi32(-124 * sum);
        for (int p = 0; p < P; ++p) s[r][p] = c;
      }
#pragma GCC unroll 4
      for (int g = 0; g < 64; ++g) {
        __m512i w[P];
        for (int p = 0; p < P; ++p) w[p] = load_group(blk[p] + kQ3KScaledOff + 64 * g);
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
          for (int p = 0; p < P; ++p) s[r][p] = dpbusd_tied(s[r][p], w[p], a);
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
    } else {  // Q6_K: u8 operand q + 32; -32 * sum16(qx) corrects the offset per sub-block.
      // Q3_K (packed, decode): the u8 operand c = q + 4 (0..7) built in registers, -4 * sum16.
      constexpr bool q3 = t == DType::Q3_K;
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      for (int sb = 0; sb < 16; ++sb) {
        __m512i is[R][P];
        for (int r = 0; r < R; ++r) {
          const __m512i c = _mm512_set1_epi32((q3 ? -4 : -32) * xr.s16[r][b * 16 + sb]);
          for (int p = 0; p < P; ++p) is[r][p] = c;
        }
        // Q3_K: the sub-block's low-bit group and its shifted high-bit group (the one shift
        // whose count is not a constant), once for its 4 groups.
        __m512i q3lo[P], q3hi[P];
        if constexpr (q3)
          for (int p = 0; p < P; ++p) q3_k_sub_block(blk[p], sb, q3lo[p], q3hi[p]);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const int g = 4 * sb + i;
          __m512i w[P];
          for (int p = 0; p < P; ++p) {
            prefetch_spread<R, kPb, 64, kAhead>(blk[p], g);
            w[p] = q3      ? q3_k_codes(q3lo[p], q3hi[p], i)
                   : Bytes ? load_group(blk[p] + kQ6KLoOff + 64 * g)
                           : q6_k_codes(blk[p], g);
          }
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
            for (int p = 0; p < P; ++p) is[r][p] = _mm512_dpbusd_epi32(is[r][p], w[p], a);
          }
        }
        for (int p = 0; p < P; ++p) {
          const __m512i sc = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + kQ6KScOff + 16 * sb)));
          for (int r = 0; r < R; ++r)
            s[r][p] = _mm512_add_epi32(s[r][p], _mm512_mullo_epi32(is[r][p], sc));
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + y_step * p,
                            lane_mask(static_cast<int>(ncols - y_step * p)), acc[r][p]);
}

// n_tiles row tiles, one below the other, in one call (the tile inlined into the loop): a call
// per 4-row tile cost 2-6% of a Q8_0 prefill matmul and 2-10% of a Q4_K one (matmul_bench
// M=512, the two variants alternating call by call, Zen 4).
template <int R, int P, DType t, bool Bytes>
REWIND_VNNI void int8_tile_avx512_t(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                    int64_t panel_stride, float* y, int64_t ldy, int ncols,
                                    int64_t y_step, PrefetchStream* pf, int64_t n_tiles) {
  for (int64_t i = 0; i < n_tiles; ++i)
    int8_tile_avx512_one<R, P, t, Bytes>(xa, r0 + i * R, panels, panel_stride, y + i * R * ldy, ldy,
                                         ncols, y_step, pf);
}

template <int R, int P>
REWIND_VNNI void int8_tile_avx512(DType t, const QuantizedActs& xa, int64_t r0,
                                  const std::byte* panels, int64_t panel_stride, float* y,
                                  int64_t ldy, int ncols, int64_t y_step, bool bytes,
                                  PrefetchStream* pf, int64_t n_tiles) {
#define REWIND_INT8_TYPE(T)                                                                      \
  return int8_tile_avx512_t<R, P, T, false>(xa, r0, panels, panel_stride, y, ldy, ncols, y_step, \
                                            pf, n_tiles)
#define REWIND_INT8_TYPE_BYTES(T)                                                                \
  return bytes ? int8_tile_avx512_t<R, P, T, true>(xa, r0, panels, panel_stride, y, ldy, ncols,  \
                                                   y_step, pf, n_tiles)                          \
               : int8_tile_avx512_t<R, P, T, false>(xa, r0, panels, panel_stride, y, ldy, ncols, \
                                                    y_step, pf, n_tiles)
  if (t == DType::Q4_0) REWIND_INT8_TYPE(DType::Q4_0);
  if constexpr (R <= 4) {  // taller tiles serve Q4_0's prefill alone
    switch (t) {
      case DType::Q8_0:
        REWIND_INT8_TYPE(DType::Q8_0);
      case DType::IQ4_NL:
        REWIND_INT8_TYPE(DType::IQ4_NL);
      case DType::Q4_1:
        REWIND_INT8_TYPE_BYTES(DType::Q4_1);
      case DType::Q5_1:
        REWIND_INT8_TYPE_BYTES(DType::Q5_1);
      case DType::Q5_0:
        REWIND_INT8_TYPE(DType::Q5_0);
      case DType::Q4_K:
        REWIND_INT8_TYPE_BYTES(DType::Q4_K);
      case DType::Q5_K:
        REWIND_INT8_TYPE_BYTES(DType::Q5_K);
      case DType::Q6_K:
        REWIND_INT8_TYPE_BYTES(DType::Q6_K);
      case DType::Q3_K:
        REWIND_INT8_TYPE_BYTES(DType::Q3_K);
      case DType::IQ4_XS:
        REWIND_INT8_TYPE_BYTES(DType::IQ4_XS);
      case DType::Q2_K:
        REWIND_INT8_TYPE_BYTES(DType::Q2_K);
      default:
        break;
    }
  }
#undef REWIND_INT8_TYPE
#undef REWIND_INT8_TYPE_BYTES
  REWIND_CHECK_MSG(false, "int8 tile: no VNNI tile for this type and height");
}

// Panel p of a tile reads panels + p * panel_stride and writes y + p * y_step (floats); ncols
// counts the output columns from the tile's first one (the last panel may be partial).
// bytes: Q6_K panels expanded by expand_q6_k, Q4_K / Q5_K panels by expand_k_bytes, IQ4_XS by
// expand_iq4_xs_bytes, Q2_K by expand_q2_k_bytes, Q3_K by expand_q3_k_scaled, Q4_1 / Q5_1 by
// expand_nibble_bytes (one byte per value; the AVX2 tiles take Q6_K's only). pf (prefill, or
// null): a stream the VNNI tiles step once per block (the AVX2 tiles a burst before each tile).
// n_tiles: row tiles of the tile's height, one below the other (rows r0 + i * R, outputs
// y + i * R * ldy).
using Int8TileFn = void (*)(DType, const QuantizedActs&, int64_t, const std::byte*, int64_t, float*,
                            int64_t, int, int64_t, bool, PrefetchStream*, int64_t);
constexpr int kInt8MaxR = 6, kInt8MaxP = 4;
#define REWIND_INT8_ROW(R) \
  { int8_tile_avx512<R, 1>, int8_tile_avx512<R, 2>, int8_tile_avx512<R, 3>, int8_tile_avx512<R, 4> }
#define REWIND_INT8_ROW2(R) \
  { int8_tile_avx512<R, 1>, int8_tile_avx512<R, 2>, nullptr, nullptr }
// Rows 5 and 6 (Q4_0 prefill) only with 1 or 2 panels (the accumulators of 6 x 2 tiles fill
// the registers).
constexpr Int8TileFn kInt8Tiles[kInt8MaxR][kInt8MaxP] = {REWIND_INT8_ROW(1),  REWIND_INT8_ROW(2),
                                                         REWIND_INT8_ROW(3),  REWIND_INT8_ROW(4),
                                                         REWIND_INT8_ROW2(5), REWIND_INT8_ROW2(6)};
#undef REWIND_INT8_ROW2

// Panel streams per VNNI decode tile (1-2 rows). Q4_K, Q5_K and Q6_K take 2, the others 4. Zen 4,
// weights from memory, `matmul_bench --m 1,2 --dtype q4_k,q8_0,q6_k,q5_k --decode-panels 4,2,3`
// (the counts alternating pass by pass in one process): one thread, Q4_K on 2 panels against 4, M=1
// +4-15% on every shape (lm_head 26.6 -> 30.2 GB/s), M=2 +24-28% with K=1024 but -5% on down
// (K=3584); two threads, probe at 60 GB/s, lm_head 54.6 -> 63.1 GB/s (M=1), 45.4 -> 58.2 (M=2).
// Hot from L3 the 4-panel tile is 1-2% faster: the gain is in how the weights arrive. The other
// types were as fast or faster on 4 (one thread, M=1: Q8_0 -2 to -6% on 2, Q5_K -5 to -9%, Q6_K
// +-2%; 3 panels gave Q5_K +2-8% at M=1 but -5 to -7% at M=2; IQ4_XS -2% and Q4_0 +-1% on 2).
// Q6_K, once its blocks were packed in read order (q6k_lo_group), gained on 2 like Q4_K: one
// thread, lm_head +5% at M=1 and +29% at M=2, in_proj +7% / +22%, down -2%; two threads in a
// fast phase lm_head 59.2 -> 63.3 GB/s. Q5_K too, once read in order with no software
// prefetch: one thread, M=1 the same (down -4%), M=2 +20-23% with K=1024 (lm_head 25.2 -> 31.2
// GB/s), down the same.
constexpr int vnni_decode_panels(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ? 2 : kInt8MaxP;
}
// int8_set_decode_panels' override (0: none).
std::atomic<int> g_decode_panels{0};

// nb Q6_K panel blocks at src expanded to kQ6KBytesBlock each at dst (d and sc copied, the codes
// one byte each).
REWIND_AVX512 void expand_q6_k(const std::byte* src, int64_t nb, std::byte* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * quant_panel_block_bytes(DType::Q6_K);
    std::byte* o = dst + b * kQ6KBytesBlock;
    std::memcpy(o, blk, kQ6KLoOff);
    for (int g = 0; g < 64; ++g)
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ6KLoOff + 64 * g), q6_k_codes(blk, g));
  }
}
#undef REWIND_INT8_ROW

// ---- AMX (prefill, Q8_0) ---------------------------------------------------------------------
// One TDPBSSD multiplies a tile of 16 activation rows x one Q8_0 block (16 x 32 code bytes) by the
// block's 8 code groups of one panel (8 x 64 bytes: the panel layout is the instruction's B
// operand as it is) into the exact int32 sums s of 16 rows x 16 lanes. The combine is the VNNI
// kernel's: acc = fma(dw * dx, float(s), acc) per output per block in k order, so the bits are
// the same as every other path's.
#define REWIND_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))

// tmm0, tmm1: sums (16 x 16 i32); tmm2, tmm3: activation codes (16 x 32 B); tmm4, tmm5: weight
// groups (8 x 64 B). Loaded when the thread's configuration is another (it is thread state).
constexpr int kAmxConfigK32 = 1;
REWIND_AMX void amx_configure_k32() {
  if (t_amx_config == kAmxConfigK32) return;
  AmxTileConfig c;
  for (int t : {0, 1}) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  for (int t : {2, 3}) {
    c.colsb[t] = 32;
    c.rows[t] = 16;
  }
  for (int t : {4, 5}) {
    c.colsb[t] = 64;
    c.rows[t] = 8;
  }
  amx_load_config(c, kAmxConfigK32);
}

// The activation codes of rows [r0, r0 + 16) re-laid per Chunk values (chunk c: 16 rows x
// Chunk bytes at a + 16 Chunk c), so that a tile load reads whole lines instead of rows a row
// apart. Chunk 32: a Q8_0 block or a Q5_K sub-block; 64: a Q4_K sub-block pair.
template <int Chunk>
void amx_pack_acts(const QuantizedActs& xa, int64_t r0, int8_t* a) {
  const int64_t nc = xa.k / Chunk;
  for (int r = 0; r < 16; ++r) {
    const int8_t* src = xa.q.data() + (r0 + r) * xa.k;
    for (int64_t c = 0; c < nc; ++c)
      std::memcpy(a + c * 16 * Chunk + r * Chunk, src + c * Chunk, Chunk);
  }
}

// The tile pipeline of the AMX kernels over n 32-value chunks of 16 rows: chunk u's activation
// codes at a + 512 u (16 x 32 B), its weight codes at wt(u) (8 x 64 B); combine(u, s, q)
// takes rows 4q..4q+3 of chunk u's exact sums s [16 rows][16 lanes] i32, for u = 0..n-1 in
// order. At step u the tile unit stores chunk u's sums (started two steps earlier) and starts
// chunk u + 2 while the vector units combine chunk u - 1, whose sums were stored a step earlier.
// Tiles 0, 2, 4 (sums, activations, weights) serve even chunks, 1, 3, 5 odd ones; the tile unit
// runs in order, so a tile is reloaded only after its store. The combine goes in quarters
// between the tile instructions, its first quarter before the store: loads that follow a tile
// store in program order wait for it, and with the whole combine after the tile instructions the
// two sides ran one after the other (each alone: 17 and 10 ns a block and core in the kernel,
// both 27 ns); in quarters, matmul_bench M=512 Q8_0 in_proj 5.2 -> 4.5 ms (Sapphire Rapids,
// alternating runs), model prefill +3-7%.
template <class WeightsAt, class Combine>
REWIND_AMX __attribute__((always_inline)) inline void amx_chunks(int64_t n, const int8_t* a,
                                                                 WeightsAt wt, Combine& combine,
                                                                 PrefetchStream& pf) {
  alignas(64) int32_t sums[2][16 * 16];
#define REWIND_AMX_START(C, A, B, u) \
  do {                               \
    _tile_loadd(A, a + (u)*512, 32); \
    _tile_loadd(B, wt(u), 64);       \
    _tile_zero(C);                   \
    _tile_dpbssd(C, A, B);           \
  } while (0)
  REWIND_AMX_START(0, 2, 4, 0);
  if (n > 1) REWIND_AMX_START(1, 3, 5, 1);
#undef REWIND_AMX_START
  for (int64_t u = 0; u < n; ++u) {
    const int32_t* prev = sums[(u + 1) % 2];
    const bool c = u > 0, next = u + 2 < n;
#define REWIND_AMX_STEP(C, A, B)                                   \
  do {                                                             \
    if (c) combine(u - 1, prev, std::integral_constant<int, 0>{}); \
    _tile_stored(C, sums[C], 64);                                  \
    if (next) _tile_loadd(A, a + (u + 2) * 512, 32);               \
    if (c) combine(u - 1, prev, std::integral_constant<int, 1>{}); \
    if (next) _tile_loadd(B, wt(u + 2), 64);                       \
    if (c) combine(u - 1, prev, std::integral_constant<int, 2>{}); \
    if (next) {                                                    \
      _tile_zero(C);                                               \
      _tile_dpbssd(C, A, B);                                       \
    }                                                              \
    if (c) combine(u - 1, prev, std::integral_constant<int, 3>{}); \
  } while (0)
    if (u % 2 == 0)
      REWIND_AMX_STEP(0, 2, 4);
    else
      REWIND_AMX_STEP(1, 3, 5);
#undef REWIND_AMX_STEP
    pf.step();
  }
  const int32_t* last = sums[(n - 1) % 2];
  combine(n - 1, last, std::integral_constant<int, 0>{});
  combine(n - 1, last, std::integral_constant<int, 1>{});
  combine(n - 1, last, std::integral_constant<int, 2>{});
  combine(n - 1, last, std::integral_constant<int, 3>{});
}

// y[r, c] for the 16 rows from r0 and c < ncols (ncols <= 16 * np) against np Q8_0 panels, all
// of K; a: those rows' codes as amx_pack_acts<32> lays them out.
REWIND_AMX void int8_tile_amx_q8_0(const QuantizedActs& xa, int64_t r0, const int8_t* a,
                                   const std::byte* panels, int64_t panel_stride, int np, float* y,
                                   int64_t ldy, int ncols, PrefetchStream& pf) {
  const int64_t nb = xa.k / 32, pb = quant_panel_block_bytes(DType::Q8_0);
  const float* dx = xa.d.data() + r0 * nb;
  for (int p = 0; p < np; ++p) {
    const std::byte* pan = panels + p * panel_stride;
    // Block w: acc[r] = fma(dw * dx[r], float(s[r]), acc[r]). Quarter 0 (before the tile store)
    // converts the sums of rows 0..kEarly-1 into registers, quarters 1-3 apply them, and quarter
    // 3 also does the last rows straight from memory: with 16 accumulators, 14 early rows fill
    // the 32 vector registers (model prefill 705-710 -> 745-766 tok/s against 4 rows per
    // quarter, in-process A/B; 12 and 8 early rows fell between). Locals of this function, not
    // members of a combine object: those GCC kept in memory.
    // (The bounds stay constants: std::min would take kEarly by reference, and the loops with a
    // run-time bound left the accumulators on the stack.)
    constexpr int kEarly = 14, kPer = (kEarly + 2) / 3;
    __m512 acc[16], early[kEarly], dw = _mm512_setzero_ps();
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
    for (int r = 0; r < kEarly; ++r) early[r] = _mm512_setzero_ps();
    auto quarter = [&](int64_t w, const int32_t* s, auto q) REWIND_AMX
        __attribute__((always_inline)) {
      if constexpr (q == 0) {
        dw = load_f16x16(pan + w * pb);
        for (int r = 0; r < kEarly; ++r)
          early[r] = _mm512_cvtepi32_ps(_mm512_load_si512(s + 16 * r));
      } else {
        for (int r = (q - 1) * kPer; r < (q * kPer < kEarly ? q * kPer : kEarly); ++r)
          acc[r] =
              _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[w + r * nb])), early[r], acc[r]);
      }
      if constexpr (q == 3)
        for (int r = kEarly; r < 16; ++r)
          acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[w + r * nb])),
                                   _mm512_cvtepi32_ps(_mm512_load_si512(s + 16 * r)), acc[r]);
    };
    amx_chunks(
        nb, a, [pan, pb](int64_t u) { return pan + u * pb + kQ8QOff; }, quarter, pf);
    for (int r = 0; r < 16; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r]);
  }
}

// ---- AMX (prefill, Q5_K) ---------------------------------------------------------------------
// The same tiles per 32-value sub-block: the B operand is the sub-block's codes expanded to
// bytes (expand_q4_k_codes), the exact sums go through the VNNI kernel's integer and float
// combine: s1 = sum_s sc[s] * is[s], s2 = sum_s m[s] * sum32[s] (16-bit pair products), then
// acc = fma(d * dx, float(s1), acc) and acc = fma(-(dmin * dx), float(s2), acc) per block.

// Codes of nb Q4_K panel blocks at src as bytes at dst: block b, sub-block s at dst + 4096 b +
// 512 s, 8 rows of 64 bytes (row i: bytes 4j..4j+3 = codes 4i..4i+3 of the sub-block, lane j).
// Q5_K (q5): the 5-bit codes.
REWIND_AVX512 inline void expand_k_block_codes(const std::byte* blk, bool q5, void* dst) {
  auto* o = static_cast<std::byte*>(dst);
  for (int g = 0; g < 32; ++g) {  // group g: codes 8g..8g+3 (low nibbles), 8g+4..8g+7 (high)
    __m512i lo, hi;
    if (q5)
      kquant_codes<true>(blk, g, lo, hi);
    else
      kquant_codes<false>(blk, g, lo, hi);
    _mm512_storeu_si512(reinterpret_cast<void*>(o + 128 * g), lo);
    _mm512_storeu_si512(reinterpret_cast<void*>(o + 128 * g + 64), hi);
  }
}
REWIND_AVX512 void expand_q4_k_codes(const std::byte* src, int64_t nb, bool q5, int8_t* dst) {
  const int64_t pb = quant_panel_block_bytes(q5 ? DType::Q5_K : DType::Q4_K);
  for (int64_t b = 0; b < nb; ++b) expand_k_block_codes(src + b * pb, q5, dst + b * kKBytesCodes);
}
// nb Q4_K / Q5_K panel blocks at src expanded to kKBytesBlock each at dst, for the VNNI prefill
// tiles: the header copied, then the codes one byte each.
REWIND_AVX512 void expand_k_bytes(const std::byte* src, int64_t nb, bool q5, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(q5 ? DType::Q5_K : DType::Q4_K);
  for (int64_t b = 0; b < nb; ++b) {
    std::byte* o = dst + b * kKBytesBlock;
    std::memcpy(o, src + b * pb, static_cast<size_t>(kQ4KQOff));
    expand_k_block_codes(src + b * pb, q5, o + kQ4KQOff);
  }
}

// nb Q3_K panel blocks at src expanded to kQ3KScaledBlock each at dst (see kQ3KScaledOff): q * sc
// + 124 per value, as (c - 4) * sc + 124 = c * sc + (124 - 4 sc) on 16-bit halves (c = q + 4 from
// q3_k_codes, the lane's scale in both halves of its 32 bits), the even and odd bytes apart.
REWIND_AVX512 void expand_q3_k_scaled(const std::byte* src, int64_t nb, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::Q3_K);
  const __m512i low8 = _mm512_set1_epi16(0x00FF);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * kQ3KScaledBlock;
    std::memcpy(o, blk, 32);  // d
    for (int sb = 0; sb < 16; ++sb) {
      __m512i lo, h;
      q3_k_sub_block(blk, sb, lo, h);
      const __m512i sc32 = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6KScOff + 16 * sb)));
      const __m512i sc16 = halves16(sc32);
      const __m512i k16 = _mm512_sub_epi16(_mm512_set1_epi16(124), _mm512_slli_epi16(sc16, 2));
      for (int i = 0; i < 4; ++i) {
        const __m512i c = q3_k_codes(lo, h, i);
        const __m512i even =
            _mm512_add_epi16(_mm512_mullo_epi16(_mm512_and_si512(c, low8), sc16), k16);
        const __m512i odd =
            _mm512_add_epi16(_mm512_mullo_epi16(_mm512_srli_epi16(c, 8), sc16), k16);
        _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ3KScaledOff + 64 * (4 * sb + i)),
                            _mm512_or_si512(even, _mm512_slli_epi16(odd, 8)));
      }
    }
  }
}

// nb Q2_K panel blocks at src expanded to kQ2KBytesBlock each at dst, for the VNNI prefill tile:
// the header copied, then each code times its sub-block's scale one byte each (vpmullw on byte
// pairs: q * sc <= 45, so neither byte carries into the other).
REWIND_AVX512 void expand_q2_k_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::Q2_K);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * kQ2KBytesBlock;
    std::memcpy(o, blk, static_cast<size_t>(kQ2KQOff));
    for (int s = 0; s < 16; ++s) {
      const __m512i codes = load_group(blk + kQ2KQOff + 64 * s);
      const __m512i sc = halves16(_mm512_and_si512(
          _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ2KScOff + 16 * s))),
          _mm512_set1_epi32(0xF)));
      for (int i = 0; i < 4; ++i)
        _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ2KQOff + 64 * (4 * s + i)),
                            _mm512_mullo_epi16(q2_k_codes(codes, i), sc));
    }
  }
}

// nb IQ4_XS panel blocks at src expanded to kIQ4XSBytesBlock each at dst, for the VNNI prefill
// tile: the header copied, then the u8 operands kIq4nlValues[c] + 128 one byte each.
REWIND_AVX512 void expand_iq4_xs_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::IQ4_XS);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = iq4_u8_table();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * kIQ4XSBytesBlock;
    std::memcpy(o, blk, static_cast<size_t>(kIQ4XSQOff));
    for (int g = 0; g < 32; ++g) {
      const __m512i v = load_group(blk + kIQ4XSQOff + 64 * g);
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kIQ4XSQOff + 128 * g),
                          _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4)));
      _mm512_storeu_si512(
          reinterpret_cast<void*>(o + kIQ4XSQOff + 128 * g + 64),
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
    }
  }
}

// nb panel blocks of type T at src, each expanded at dst to d, then its codes minus Off one byte
// each in Q8_0's 8 groups (nibble group g's low halves are Q8_0 group 2g, its high halves group
// 2g + 1), then (Q4_1 / Q5_1) m: for Q4_1 / Q5_1 the VNNI prefill tile's kMinBytesBlock blocks
// (Off 0), for Q5_0 the Q8_0 panel blocks of its transcoding (Off 16: q = c - 16), which Q8_0's
// tiles run on.
template <DType T, int Off>
REWIND_AVX512 void expand_nibble_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  constexpr bool q5 = T == DType::Q5_0 || T == DType::Q5_1, min = T != DType::Q5_0;
  const int64_t pb = quant_panel_block_bytes(T),
                db = min ? kMinBytesBlock : quant_panel_block_bytes(DType::Q8_0);
  const __m512i off = _mm512_set1_epi8(Off);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * db;
    std::memcpy(o, blk, 32);
    for (int g = 0; g < 4; ++g) {
      __m512i lo, hi;
      nibble_codes<q5>(blk, g, lo, hi);
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ8QOff + 128 * g), _mm512_sub_epi8(lo, off));
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ8QOff + 128 * g + 64),
                          _mm512_sub_epi8(hi, off));
    }
    if constexpr (min) std::memcpy(o + kMinBytesMOff, blk + min_offset(q5), 32);
  }
}

REWIND_AVX512 void expand_q4_k_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  expand_k_bytes(src, nb, false, dst);
}
REWIND_AVX512 void expand_q5_k_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  expand_k_bytes(src, nb, true, dst);
}

// A K-quant block's header for the AMX combines: d, -dmin and the mins widened to 16 bits.
// (-dmin) * dx is -(dmin * dx) exactly (rounding is symmetric in the sign), so the VNNI kernel's
// negated product costs no negation per row.
struct KBlockHead {
  __m512 d, neg_dmin;
  __m512i mv[4];
};
REWIND_AMX __attribute__((always_inline)) inline KBlockHead k_block_head(const std::byte* blk) {
  KBlockHead h;
  for (int tp = 0; tp < 4; ++tp)
    h.mv[tp] = _mm512_cvtepu8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ4KMinOff + 32 * tp)));
  h.d = load_f16x16(blk);
  h.neg_dmin = negate_ps(load_f16x16(blk + 32));
  return h;
}
// Block b of activation row `row` into acc as the VNNI kernel orders it: the mins' sum s2 (pairs
// of sub-blocks per 16-bit dot product), then acc = fma(d * dx, float(s1), acc) and
// acc = fma(-(dmin * dx), float(s2), acc).
REWIND_AMX __attribute__((always_inline)) inline __m512 k_block_fmas(const KBlockHead& h,
                                                                     const QuantizedActs& xa,
                                                                     int64_t row, int64_t b,
                                                                     __m512i s1, __m512 acc) {
  const int16_t* s32 = xa.s32.data() + row * (xa.k / 32) + b * 8;
  __m512i s2 = _mm512_setzero_si512();
  for (int tp = 0; tp < 4; ++tp)
    s2 = _mm512_dpwssd_epi32(s2, h.mv[tp], _mm512_set1_epi32(load_i32(s32 + 2 * tp)));
  const __m512 dx = _mm512_set1_ps(xa.d[row * (xa.k / 256) + b]);
  acc = _mm512_fmadd_ps(_mm512_mul_ps(h.d, dx), _mm512_cvtepi32_ps(s1), acc);
  return _mm512_fmadd_ps(_mm512_mul_ps(h.neg_dmin, dx), _mm512_cvtepi32_ps(s2), acc);
}

// y[r, c] for the 16 rows from r0 and c < ncols against np Q5_K panels of type t (headers read
// from panels, codes from codes + p * codes_stride as expand_q4_k_codes lays them out); a: the
// rows' codes as amx_pack_acts<32> lays them out. (Q4_K takes the scaled tiles below.)
REWIND_AMX void int8_tile_amx_q4_k(DType t, const QuantizedActs& xa, int64_t r0, const int8_t* a,
                                   const std::byte* panels, int64_t panel_stride,
                                   const int8_t* codes, int64_t codes_stride, int np, float* y,
                                   int64_t ldy, int ncols, PrefetchStream& pf) {
  const int64_t nb = xa.k / 256, pb = quant_panel_block_bytes(t);
  for (int p = 0; p < np; ++p) {
    const std::byte* pan = panels + p * panel_stride;
    // Chunk w = sub-block w % 8 of block w / 8: s1 += sc * s per sub-block, then after a block's
    // last sub-block the mins and the two fmas into acc (kept in memory: s1 holds 16 vector
    // registers); rows 4q..4q+3 per quarter (q a std::integral_constant, as in the Q8_0 tile).
    alignas(64) float acc[16][16] = {};  // +0.0f
    __m512i s1[16];
    for (int r = 0; r < 16; ++r) s1[r] = _mm512_setzero_si512();
    auto quarter = [&](int64_t w, const int32_t* s, auto q) REWIND_AMX
        __attribute__((always_inline)) {
      const int64_t b = w / 8, sb = w % 8;
      const std::byte* blk = pan + b * pb;
      const __m512i sc = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ4KScOff + 16 * sb)));
      for (int r = 4 * q; r < 4 * q + 4; ++r)
        s1[r] = _mm512_add_epi32(s1[r], _mm512_mullo_epi32(_mm512_load_si512(s + 16 * r), sc));
      if (sb != 7) return;
      const KBlockHead h = k_block_head(blk);  // block b complete
      for (int r = 4 * q; r < 4 * q + 4; ++r) {
        _mm512_store_ps(acc[r], k_block_fmas(h, xa, r0 + r, b, s1[r], _mm512_load_ps(acc[r])));
        s1[r] = _mm512_setzero_si512();
      }
    };
    const int8_t* cp = codes + p * codes_stride;
    amx_chunks(
        nb * 8, a, [cp](int64_t u) { return cp + u * 512; }, quarter, pf);
    for (int r = 0; r < 16; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p),
                            _mm512_load_ps(acc[r]));
  }
}

// ---- AMX (prefill, Q4_K, scales in the tiles) ----------------------------------------------
// A Q4_K sub-block scale sc (6 bits) is 8 sc_hi + sc_lo with both parts at most 7, and a code
// (at most 15) times a part is at most 105: an int8. So the B operands can carry the scales:
// codes * sc_lo and codes * sc_hi, and a block's 256 values run as 4 TDPBSSDs of 64 values per
// operand into two int32 sums whose 8 hi + lo is the VNNI kernel's s1 = sum_s sc[s] * is[s]
// exactly (the same integer, hence the same bits), with 2 tile stores and one combine per block
// instead of 8 of each.

// The scaled codes of nb Q4_K panel blocks: block b, chunk j (sub-blocks 2j, 2j+1) at
// dst + 8192 b + 2048 j: codes * sc_lo (16 rows of 64 B, the tile's B layout), then
// codes * sc_hi at + 1024.
REWIND_AVX512 void expand_q4_k_scaled(const std::byte* src, int64_t nb, int8_t* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::Q4_K);
  alignas(64) int8_t codes[kKBytesCodes];
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    expand_k_block_codes(blk, false, codes);
    for (int sb = 0; sb < 8; ++sb) {
      const __m512i m32 = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ4KScOff + 16 * sb)));
      // Each 16-bit half of lane j holds the part: a 16-bit multiply then scales both code
      // bytes of the half without a carry between them (each product stays under 256).
      const __m512i lo = _mm512_and_si512(m32, _mm512_set1_epi32(7));
      const __m512i hi = _mm512_srli_epi32(m32, 3);
      const __m512i mlo = _mm512_or_si512(lo, _mm512_slli_epi32(lo, 16));
      const __m512i mhi = _mm512_or_si512(hi, _mm512_slli_epi32(hi, 16));
      int8_t* o = dst + b * 8192 + (sb / 2) * 2048 + (sb % 2) * 512;
      for (int row = 0; row < 8; ++row) {
        const __m512i c = _mm512_load_si512(codes + 512 * sb + 64 * row);
        _mm512_storeu_si512(o + 64 * row, _mm512_mullo_epi16(c, mlo));
        _mm512_storeu_si512(o + 1024 + 64 * row, _mm512_mullo_epi16(c, mhi));
      }
    }
  }
}

// Every tile 16 x 64 B: 0-3 sums (lo and hi of even blocks, lo and hi of odd ones), 4 and 5
// activations, 6 and 7 the scaled codes (lo, hi).
constexpr int kAmxConfigK64 = 2;
REWIND_AMX void amx_configure_k64() {
  if (t_amx_config == kAmxConfigK64) return;
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  amx_load_config(c, kAmxConfigK64);
}

// y[r, c] for the 16 rows from r0 and c < ncols against np Q4_K panels (headers from panels,
// scaled codes from scaled + p * scaled_stride as expand_q4_k_scaled lays them out); a: the
// rows' codes as amx_pack_acts<64> lays them out. Block b's 8 products start at step b, its
// sums are stored at step b + 1 (before block b + 1's products, which the tile unit would
// otherwise finish first) and combined right after, beside block b + 1's products.
REWIND_AMX void int8_tile_amx_q4_k64(const QuantizedActs& xa, int64_t r0, const int8_t* a,
                                     const std::byte* panels, int64_t panel_stride,
                                     const int8_t* scaled, int64_t scaled_stride, int np, float* y,
                                     int64_t ldy, int ncols, PrefetchStream& pf) {
  const int64_t nb = xa.k / 256, pb = quant_panel_block_bytes(DType::Q4_K);
  alignas(64) int32_t sums[2][16 * 16];
  for (int p = 0; p < np; ++p) {
    const std::byte* pan = panels + p * panel_stride;
    const int8_t* sp = scaled + p * scaled_stride;
    __m512 acc[16];
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
#define REWIND_AMX_BLOCK(CL, CH, b)                \
  do {                                             \
    _tile_zero(CL);                                \
    _tile_zero(CH);                                \
    for (int j = 0; j < 4; ++j) {                  \
      const int8_t* bj = sp + (b)*8192 + j * 2048; \
      _tile_loadd(4, a + ((b)*4 + j) * 1024, 64);  \
      _tile_loadd(6, bj, 64);                      \
      _tile_dpbssd(CL, 4, 6);                      \
      _tile_loadd(7, bj + 1024, 64);               \
      _tile_dpbssd(CH, 4, 7);                      \
    }                                              \
  } while (0)
    REWIND_AMX_BLOCK(0, 1, 0);
    for (int64_t b = 0; b < nb; ++b) {
      if (b % 2 == 0) {
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        if (b + 1 < nb) REWIND_AMX_BLOCK(2, 3, b + 1);
      } else {
        _tile_stored(2, sums[0], 64);
        _tile_stored(3, sums[1], 64);
        if (b + 1 < nb) REWIND_AMX_BLOCK(0, 1, b + 1);
      }
      pf.step();
      // Block b: s1 = 8 hi + lo, then the VNNI kernel's two fmas.
      const KBlockHead h = k_block_head(pan + b * pb);
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        const __m512i s1 =
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[1] + 16 * r), 3),
                             _mm512_load_si512(sums[0] + 16 * r));
        acc[r] = k_block_fmas(h, xa, r0 + r, b, s1, acc[r]);
      }
    }
#undef REWIND_AMX_BLOCK
    for (int r = 0; r < 16; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r]);
  }
}

// One row of k values in blocks of n (32 or 256) into codes q, scales d and sums per 16 codes
// s16, with quantize_block_scalar's bits for every block: the maxima are exact, and 127 / amax,
// the scale and its fp16 rounding (nearest even, as f32_to_f16) are IEEE operations, here on 16
// blocks at a time; blocks with inf / NaN or amax < 1e-30 go to the scalar. (A per-block AVX-512
// quantiser spent about as long on its two scalar divisions and the software fp16 rounding as on
// the rest of its work.)
REWIND_AVX512 void quantize_row_avx512(const float* x, int64_t k, int n, int8_t* q, float* d,
                                       int32_t* s16) {
  constexpr int kChunk = 64;  // blocks per pass
  alignas(64) float amax[kChunk], id[kChunk];
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  const int64_t nb = k / n;
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int nbc = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
    uint64_t special = 0;  // the blocks that the scalar quantises
    for (int j = 0; j < nbc; ++j) {
      const float* xb = x + (b0 + j) * n;
      __m512 mx = _mm512_setzero_ps();
      __mmask16 bad = 0;
      for (int i = 0; i < n; i += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xb + i));
        bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ);  // inf or NaN
        mx = _mm512_max_ps(mx, a);
      }
      amax[j] = _mm512_reduce_max_ps(mx);
      if (bad || amax[j] < 1e-30f) {
        special |= uint64_t{1} << j;
        amax[j] = 1.0f;  // a harmless lane below
      }
    }
    for (int j = 0; j < nbc; j += 16) {
      const __mmask16 m = lane_mask(nbc - j);
      const __m512 a = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, amax + j);
      const __m512 idv = _mm512_div_ps(_mm512_set1_ps(127.0f), a);
      __m512 dv;
      if (n == 256) {
        dv = _mm512_div_ps(_mm512_set1_ps(1.0f), idv);
      } else {  // act_scale: amax / 127 rounded to fp16 unless past its range
        const __m512 raw = _mm512_div_ps(a, _mm512_set1_ps(127.0f));
        const __m512 r16 =
            _mm512_cvtph_ps(_mm512_cvtps_ph(raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        dv = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(raw, _mm512_set1_ps(65504.0f), _CMP_LE_OQ),
                                  raw, r16);
      }
      _mm512_store_ps(id + j, idv);
      _mm512_mask_storeu_ps(d + b0 + j, m, dv);
    }
    for (int j = 0; j < nbc; ++j) {
      const int64_t b = b0 + j;
      if ((special >> j) & 1) {
        quantize_block_scalar(x + b * n, n, q + b * n, d + b);
        continue;
      }
      const __m512 idb = _mm512_set1_ps(id[j]);
      for (int i = 0; i < n; i += 16) {
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + b * n + i), idb));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * n + i), _mm512_cvtsepi32_epi8(v));
      }
    }
  }
  // Sums per 16 codes: vpsadbw of the codes offset to u8 (q + 128) gives sums of 8, each 8 * 128
  // over; pairs of them are the sums of 16.
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(q + i), _mm512_set1_epi8(-128));
    alignas(64) uint64_t s8[8];
    _mm512_store_si512(s8, _mm512_sad_epu8(u, _mm512_setzero_si512()));
    for (int h = 0; h < 4; ++h)
      s16[i / 16 + h] = static_cast<int32_t>(s8[2 * h] + s8[2 * h + 1]) - 16 * 128;
  }
  sums16_scalar(q, i, k, s16);
}

// ---- int8 dot: AVX2 ---------------------------------------------------------------------------
// The same integer sums without VNNI. vpmaddubsw multiplies u8 by s8 and sums pairs of products
// to int16 (exact while a pair stays within int16: Q8_0 multiplies |q| by x with q's sign moved
// onto x, at most 2 * 128 * 127; a Q4_K nibble (at most 15) gives at most 3810, a Q5_K code (31)
// 7874, a Q6_K code (63) 16002). vpmaddwd then sums pairs of those into int32: by ones for Q8_0,
// and for the K-quants by the sub-block scale (in both int16 halves of a lane), which applies
// the scale in the same instruction. Sums of several vpmaddubsw results stay in int16 first,
// as many as int16 holds exactly: 8 for Q4_K (30480), 4 for Q5_K (31496), 2 for Q6_K (32004).
// All of it is exact integer arithmetic, so the sums equal the reference's. A panel's 16 lanes
// are two 8-lane halves.

#define REWIND_AVX2 __attribute__((target("avx2,fma,f16c")))

// Half h (8 lanes) of the 64-byte group at off in the blocks of a tile's panels.
REWIND_AVX2 inline __m256i half_group(const std::byte* const* blk, int h, int off) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[h / 2] + off + 32 * (h % 2)));
}
REWIND_AVX2 inline __m256 f16x8(const std::byte* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
REWIND_AVX2 inline __m256i bcast4(const int8_t* p) {
  return _mm256_set1_epi32(load_i32(p));
}
// 8 scale bytes (one per lane; signed for Q6_K; LowNibble: their low 4 bits, Q2_K's scales) in
// both int16 halves of each lane: vpmaddwd's multiplier for a lane's two int16 sums.
template <bool Signed, bool LowNibble = false>
REWIND_AVX2 inline __m256i scale_pairs(const std::byte* p) {
  __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  if (LowNibble) v = _mm_and_si128(v, _mm_set1_epi8(0x0F));
  const __m128i d = _mm_unpacklo_epi8(v, v);
  return Signed ? _mm256_cvtepi8_epi16(d) : _mm256_cvtepu8_epi16(d);
}
// Full unrolling of the loops over a tile's rows and halves, so that their vectors stay in
// registers (GCC stops unrolling them on its own once the loop bodies grow).
#define REWIND_UNROLL _Pragma("GCC unroll 8")

// blk[p] = block `off` bytes into panel p of a tile (panel p at panels + p * panel_stride).
template <int P>
REWIND_AVX2 __attribute__((always_inline)) inline void panel_blocks(const std::byte* panels,
                                                                    int64_t panel_stride,
                                                                    int64_t off,
                                                                    const std::byte* (&blk)[P]) {
  REWIND_UNROLL
  for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + off;
}
template <int R, int H>
REWIND_AVX2 __attribute__((always_inline)) inline void zero_sums(__m256i (&s)[R][H]) {
  REWIND_UNROLL
  for (int r = 0; r < R; ++r) {
    REWIND_UNROLL
    for (int h = 0; h < H; ++h) s[r][h] = _mm256_setzero_si256();
  }
}

// The AVX2 tiles: R activation rows against P panels (H = 2P halves of 8 lanes); the arguments
// as Int8TileFn's (below). With 16 vector registers only the innermost sums live in registers:
// the f32 accumulators (one update per weight block, here) and, for the K-quants, the int32
// block sums (one update per int16 flush) live in a small L1 scratch.
template <int R, int H>
struct Avx2Acc {
  alignas(32) float f[R][H][8];
  Avx2Acc() { std::memset(f, 0, sizeof f); }
};

// f[r][h] = fma(+-(dw[h] * dx[r]), float(s[r][h]), f[r][h]), dw from the halves' f16 scales at
// byte offset off of the blocks.
template <int R, int H, bool Neg = false>
REWIND_AVX2 __attribute__((always_inline)) inline void combine_avx2(Avx2Acc<R, H>& acc,
                                                                    const std::byte* const* blk,
                                                                    int off, const ActRows<R>& xr,
                                                                    int64_t b,
                                                                    const __m256i (&s)[R][H]) {
  REWIND_UNROLL
  for (int h = 0; h < H; ++h) {
    const __m256 dw = f16x8(blk[h / 2] + off + 16 * (h % 2));
    REWIND_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xr.d[r] + b));
      const __m256 f = _mm256_cvtepi32_ps(s[r][h]);
      _mm256_store_ps(acc.f[r][h],
                      _mm256_fmadd_ps(Neg ? _mm256_xor_ps(scale, _mm256_set1_ps(-0.0f)) : scale, f,
                                      _mm256_load_ps(acc.f[r][h])));
    }
  }
}

template <int R, int H>
REWIND_AVX2 void store_tile_avx2(const Avx2Acc<R, H>& acc, float* y, int64_t ldy, int ncols,
                                 int64_t y_step) {
  REWIND_UNROLL
  for (int r = 0; r < R; ++r) {
    REWIND_UNROLL
    for (int h = 0; h < H; ++h) {
      const int64_t col = y_step * (h / 2) + 8 * (h % 2);
      const int64_t valid = std::min<int64_t>(8, ncols - col);
      if (valid > 0) std::memcpy(y + r * ldy + col, acc.f[r][h], static_cast<size_t>(valid) * 4);
    }
  }
}

// One row of q8_0_group_4x2: broadcast the row's 4 activation codes, move the weights' signs
// onto them, multiply by |w|, widen and add into the row's two sums.
// clang-format off
#define REWIND_Q8_ROW(X, S0, S1)                 \
  "vpbroadcastd %[" X "], %[a]\n\t"              \
  "vpsignb %[w0], %[a], %[t0]\n\t"               \
  "vpsignb %[w1], %[a], %[t1]\n\t"               \
  "vpmaddubsw %[t0], %[aw0], %[t0]\n\t"          \
  "vpmaddubsw %[t1], %[aw1], %[t1]\n\t"          \
  "vpmaddwd %[ones], %[t0], %[t0]\n\t"           \
  "vpmaddwd %[ones], %[t1], %[t1]\n\t"           \
  "vpaddd %[t0], %[" S0 "], %[" S0 "]\n\t"       \
  "vpaddd %[t1], %[" S1 "], %[" S1 "]\n\t"
// clang-format on
// One 64-byte group of a Q8_0 block for 4 rows x 16 lanes (the 4 x 1-panel prefill tile):
// s[r][h] += the 4-product sums of lanes 8h..8h+7, as the generic tile below computes them. In
// asm because GCC 12 keeps half of the 8 sums on the stack (a load and a store per group each;
// matmul_bench M=512 Q8_0 96-141 GOP/s that way, 164-169 in asm); here all 16 registers hold
// sums, codes and products.
REWIND_AVX2 __attribute__((always_inline)) inline void q8_0_group_4x2(const std::byte* w,
                                                                      const int8_t* const* x,
                                                                      __m256i ones,
                                                                      __m256i (&s)[4][2]) {
  __m256i w0, w1, aw0, aw1, a, t0, t1;
  __asm__(
      "vmovdqu %[wm0], %[w0]\n\t"
      "vmovdqu %[wm1], %[w1]\n\t"
      "vpabsb %[w0], %[aw0]\n\t"
      // clang-format off
      "vpabsb %[w1], %[aw1]\n\t"
      REWIND_Q8_ROW("x0", "s00", "s01") REWIND_Q8_ROW("x1", "s10", "s11")
      REWIND_Q8_ROW("x2", "s20", "s21") REWIND_Q8_ROW("x3", "s30", "s31")
      // clang-format on
      : [s00] "+x"(s[0][0]), [s01] "+x"(s[0][1]), [s10] "+x"(s[1][0]), [s11] "+x"(s[1][1]),
        [s20] "+x"(s[2][0]), [s21] "+x"(s[2][1]), [s30] "+x"(s[3][0]), [s31] "+x"(s[3][1]),
        [w0] "=&x"(w0), [w1] "=&x"(w1), [aw0] "=&x"(aw0), [aw1] "=&x"(aw1), [a] "=&x"(a),
        [t0] "=&x"(t0), [t1] "=&x"(t1)
      : [wm0] "m"(*reinterpret_cast<const __m256i*>(w)),
        [wm1] "m"(*reinterpret_cast<const __m256i*>(w + 32)),
        [x0] "m"(*reinterpret_cast<const int32_t*>(x[0])),
        [x1] "m"(*reinterpret_cast<const int32_t*>(x[1])),
        [x2] "m"(*reinterpret_cast<const int32_t*>(x[2])),
        [x3] "m"(*reinterpret_cast<const int32_t*>(x[3])), [ones] "x"(ones));
}
#undef REWIND_Q8_ROW

template <int R, int P>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_q8_0(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = quant_panel_block_bytes(DType::Q8_0), nb = xa.k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    __m256i s[R][H];
    zero_sums<R, H>(s);
    if constexpr (R == 4 && P == 1) {
      for (int g = 0; g < 8; ++g) {
        const int8_t* x[4];
        REWIND_UNROLL
        for (int r = 0; r < 4; ++r) x[r] = xr.q[r] + b * 32 + 4 * g;
        q8_0_group_4x2(blk[0] + kQ8QOff + 64 * g, x, ones, s);
      }
      combine_avx2<R, H>(acc, blk, 0, xr, b, s);
      continue;
    }
#pragma GCC unroll 1
    for (int g = 0; g < 8; ++g) {
      __m256i w[H], aw[H];
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        if (h % 2 == 0) prefetch_part<R>(blk[h / 2], pb, g, 8);
        w[h] = half_group(blk, h, kQ8QOff + 64 * g);
        aw[h] = _mm256_abs_epi8(w[h]);
      }
      REWIND_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m256i a = bcast4(xr.q[r] + b * 32 + 4 * g);
        REWIND_UNROLL
        for (int h = 0; h < H; ++h)
          s[r][h] = _mm256_add_epi32(
              s[r][h],
              _mm256_madd_epi16(_mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(a, w[h])), ones));
      }
    }
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// The low and high nibbles of each byte of v (Q4_0 / IQ4_NL codes), each as a byte.
REWIND_AVX2 __attribute__((always_inline)) inline void nibbles_avx2(__m256i v, __m256i& lo,
                                                                    __m256i& hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(v, low4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
}

// Q4_0: the codes c (0..15) are unsigned, so vpmaddubsw multiplies them by the activations as
// they are; a block's 8 products per lane pair stay within int16 (8 * 3810), one vpmaddwd by ones
// widens them, and s = sum c * x - 8 * sum x is Q8_0's integer for q = c - 8. Q4_1 (Min): s =
// sum c * x, then one fma per output adds m times the block's min_factor. Q5_1 (Min, Q5): the
// same with 5-bit codes, whose int16 sums are widened after every 2 groups (4 products of up to
// 31 * 127 per lane pair: 31496).
template <int R, int P, bool Min = false, bool Q5 = false>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_q4_0(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  constexpr DType kT = Min ? (Q5 ? DType::Q5_1 : DType::Q4_1) : (Q5 ? DType::Q5_0 : DType::Q4_0);
  const int64_t pb = quant_panel_block_bytes(kT), nb = xa.k / 32;
  const __m256i ones = _mm256_set1_epi16(1), b4 = _mm256_set1_epi8(0x10);
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    __m256i t16[R][H], s[R][H];
    zero_sums<R, H>(t16);
    zero_sums<R, H>(s);
    REWIND_UNROLL
    for (int g = 0; g < 4; ++g) {
      __m256i lo[H], hi[H];
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        if (h % 2 == 0) prefetch_part<R>(blk[h / 2], pb, g, 4);
        nibbles_avx2(half_group(blk, h, kQ8QOff + 64 * g), lo[h], hi[h]);
        if constexpr (Q5) {  // the fifth bits to bit 4 of each byte (kquant_codes' layout)
          const __m256i hb = _mm256_srli_epi32(half_group(blk, h, kQ51HOff), 2 * g);
          lo[h] = _mm256_or_si256(lo[h], _mm256_and_si256(_mm256_slli_epi32(hb, 4), b4));
          hi[h] = _mm256_or_si256(hi[h], _mm256_and_si256(_mm256_slli_epi32(hb, 3), b4));
        }
      }
      REWIND_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m256i a0 = bcast4(xr.q[r] + b * 32 + 8 * g);
        const __m256i a1 = bcast4(xr.q[r] + b * 32 + 8 * g + 4);
        REWIND_UNROLL
        for (int h = 0; h < H; ++h)
          t16[r][h] = _mm256_add_epi16(
              t16[r][h],
              _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], a0), _mm256_maddubs_epi16(hi[h], a1)));
      }
      if (g % 2 == 1 && (Q5 || g == 3)) {  // widen: Q5_1 every 2 groups, the others once
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          REWIND_UNROLL
          for (int h = 0; h < H; ++h) {
            s[r][h] = _mm256_add_epi32(s[r][h], _mm256_madd_epi16(t16[r][h], ones));
            t16[r][h] = _mm256_setzero_si256();
          }
        }
      }
    }
    if constexpr (!Min) {
      REWIND_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m256i corr = _mm256_set1_epi32((Q5 ? 16 : 8) * static_cast<int32_t>(xr.s32[r][b]));
        REWIND_UNROLL
        for (int h = 0; h < H; ++h) s[r][h] = _mm256_sub_epi32(s[r][h], corr);
      }
    }
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
    if constexpr (Min) {
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        const __m256 mw = f16x8(blk[h / 2] + min_offset(Q5) + 16 * (h % 2));
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          const __m256 sx = _mm256_set1_ps(min_factor(xr.d[r][b], xr.s32[r][b]));
          _mm256_store_ps(acc.f[r][h], _mm256_fmadd_ps(mw, sx, _mm256_load_ps(acc.f[r][h])));
        }
      }
    }
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// iq4_group_avx2's constants, made once by its caller: values (kIq4nlValues in both lanes),
// abs_values, ones (1 per int16).
struct Iq4Avx2Consts {
  __m256i values, abs_values, ones;
};
REWIND_AVX2 __attribute__((always_inline)) inline Iq4Avx2Consts iq4_avx2_consts() {
  const __m256i values =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  return {values, _mm256_abs_epi8(values), _mm256_set1_epi16(1)};
}
// One IQ4_NL / IQ4_XS code group of the halves' blocks (nibbles at code_off: values 8g..8g+7 of
// each lane) into the int32 sums s: the codes index kIq4nlValues (signed, |value| <= 127),
// looked up with vpshufb into |value| and value, then multiplied as Q8_0's codes are (the sign
// moved onto the activations, each row's 8 at act_off).
template <int R, int H>
REWIND_AVX2 __attribute__((always_inline)) inline void iq4_group_avx2(
    const std::byte* const* blk, int code_off, const ActRows<R>& xr, int64_t act_off,
    const Iq4Avx2Consts& k, __m256i (&s)[R][H]) {
  const __m256i values = k.values, abs_values = k.abs_values, ones = k.ones;
  __m256i w[2][H], aw[2][H];
  REWIND_UNROLL
  for (int h = 0; h < H; ++h) {
    __m256i lo, hi;
    nibbles_avx2(half_group(blk, h, code_off), lo, hi);
    w[0][h] = _mm256_shuffle_epi8(values, lo);
    w[1][h] = _mm256_shuffle_epi8(values, hi);
    aw[0][h] = _mm256_shuffle_epi8(abs_values, lo);
    aw[1][h] = _mm256_shuffle_epi8(abs_values, hi);
  }
  REWIND_UNROLL
  for (int r = 0; r < R; ++r) {
    REWIND_UNROLL
    for (int e = 0; e < 2; ++e) {
      const __m256i a = bcast4(xr.q[r] + act_off + 4 * e);
      REWIND_UNROLL
      for (int h = 0; h < H; ++h)
        s[r][h] = _mm256_add_epi32(
            s[r][h],
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw[e][h], _mm256_sign_epi8(a, w[e][h])), ones));
    }
  }
}

// IQ4_NL: one block's 4 code groups (iq4_group_avx2) and one combine per 32 values.
template <int R, int P>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_iq4_nl(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = quant_panel_block_bytes(DType::IQ4_NL), nb = xa.k / 32;
  const Iq4Avx2Consts k = iq4_avx2_consts();
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    __m256i s[R][H];
    zero_sums<R, H>(s);
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      REWIND_UNROLL
      for (int p = 0; p < P; ++p) prefetch_part<R>(blk[p], pb, g, 4);
      iq4_group_avx2<R, H>(blk, kQ8QOff + 64 * g, xr, b * 32 + 8 * g, k, s);
    }
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// sm[r][h] += the int16 sums t16[r][h] widened by vpmaddwd with the halves' scale bytes at byte
// offset sc_off of the blocks (scale_pairs: one per lane, signed for Q6_K, low nibbles for Q2_K).
template <bool Signed, int R, int H, bool LowNibble = false>
REWIND_AVX2 __attribute__((always_inline)) inline void flush_int16_sums(const std::byte* const* blk,
                                                                        int sc_off,
                                                                        const __m256i (&t16)[R][H],
                                                                        int32_t (&sm)[R][H][8]) {
  REWIND_UNROLL
  for (int h = 0; h < H; ++h) {
    const __m256i scp = scale_pairs<Signed, LowNibble>(blk[h / 2] + sc_off + 8 * (h % 2));
    REWIND_UNROLL
    for (int r = 0; r < R; ++r) {
      auto* o = reinterpret_cast<__m256i*>(sm[r][h]);
      _mm256_store_si256(o,
                         _mm256_add_epi32(_mm256_load_si256(o), _mm256_madd_epi16(t16[r][h], scp)));
    }
  }
}
template <int R, int H>
REWIND_AVX2 __attribute__((always_inline)) inline void load_sums(const int32_t (&sm)[R][H][8],
                                                                 __m256i (&s)[R][H]) {
  REWIND_UNROLL
  for (int r = 0; r < R; ++r) {
    REWIND_UNROLL
    for (int h = 0; h < H; ++h)
      s[r][h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(sm[r][h]));
  }
}

// IQ4_XS: IQ4_NL's code groups (iq4_group_avx2) per 32-value sub-block into int32 sums, each
// times its signed scale (vpmulld) into the block sum, one combine per block.
template <int R, int P>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_iq4_xs(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = quant_panel_block_bytes(DType::IQ4_XS), nb = xa.k / 256;
  const Iq4Avx2Consts k = iq4_avx2_consts();
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    alignas(32) int32_t sm[R][H][8] = {};
    for (int sb = 0; sb < 8; ++sb) {
      __m256i is[R][H];
      zero_sums<R, H>(is);
#pragma GCC unroll 1
      for (int g = 4 * sb; g < 4 * sb + 4; ++g) {
        REWIND_UNROLL
        for (int p = 0; p < P; ++p) prefetch_part<R>(blk[p], pb, g, 32);
        iq4_group_avx2<R, H>(blk, kIQ4XSQOff + 64 * g, xr, b * 256 + 8 * g, k, is);
      }
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(
            blk[h / 2] + kIQ4XSScOff + 16 * sb + 8 * (h % 2))));
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          auto* o = reinterpret_cast<__m256i*>(sm[r][h]);
          _mm256_store_si256(
              o, _mm256_add_epi32(_mm256_load_si256(o), _mm256_mullo_epi32(is[r][h], sc)));
        }
      }
    }
    __m256i s[R][H];
    load_sums<R, H>(sm, s);
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// Q2_K: the codes (0..3) straight into vpmaddubsw, a sub-block's 4 groups summed in int16 (8
// products of at most 3 x 127 per lane), widened by vpmaddwd with the sub-block's scale pairs
// (the low nibbles) into the block sums; the mins (high nibbles) by vpmaddwd on pairs of
// sub-blocks against their sums of 16 activations, as Q4_K's.
template <int R, int P>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_q2_k(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = quant_panel_block_bytes(DType::Q2_K), nb = xa.k / 256;
  const __m256i m3 = _mm256_set1_epi8(3);
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    alignas(32) int32_t sm[R][H][8] = {};
    for (int sb = 0; sb < 16; ++sb) {
      __m256i t16[R][H], codes[H];
      zero_sums<R, H>(t16);
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        if (h % 2 == 0) prefetch_part<R>(blk[h / 2], pb, sb, 16);
        codes[h] = half_group(blk, h, kQ2KQOff + 64 * sb);
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        __m256i w[H];
        REWIND_UNROLL
        for (int h = 0; h < H; ++h)
          w[h] = _mm256_and_si256(i ? _mm256_srli_epi32(codes[h], 2 * i) : codes[h], m3);
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          const __m256i a = bcast4(xr.q[r] + b * 256 + 16 * sb + 4 * i);
          REWIND_UNROLL
          for (int h = 0; h < H; ++h)
            t16[r][h] = _mm256_add_epi16(t16[r][h], _mm256_maddubs_epi16(w[h], a));
        }
      }
      flush_int16_sums<false, R, H, true>(blk, kQ2KScOff + 16 * sb, t16, sm);
    }
    __m256i s[R][H];
    load_sums<R, H>(sm, s);
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
    zero_sums<R, H>(s);
    REWIND_UNROLL
    for (int tp = 0; tp < 8; ++tp) {
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        const std::byte* sc = blk[h / 2] + kQ2KScOff + 32 * tp + 8 * (h % 2);
        const __m128i b0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
        const __m128i b1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16));
        const __m256i mv = _mm256_srli_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b0, b1)), 4);
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          const __m256i a = _mm256_set1_epi32(i16_pair(xr.s16[r] + b * 16 + 2 * tp));
          s[r][h] = _mm256_add_epi32(s[r][h], _mm256_madd_epi16(mv, a));
        }
      }
    }
    combine_avx2<R, H, true>(acc, blk, 32, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

template <int R, int P, bool Q5>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_k(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  // Groups per int16 sum: 4 (8 products of nibbles) for Q4_K, 2 for Q5_K's 5-bit codes.
  constexpr int kSpan = Q5 ? 2 : 4;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = quant_panel_block_bytes(Q5 ? DType::Q5_K : DType::Q4_K), nb = xa.k / 256;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    alignas(32) int32_t sm[R][H][8] = {};
    for (int sb = 0; sb < 8; ++sb) {
#pragma GCC unroll 2
      for (int g0 = 4 * sb; g0 < 4 * sb + 4; g0 += kSpan) {
        __m256i t16[R][H];
        zero_sums<R, H>(t16);
#pragma GCC unroll 1
        for (int g = g0; g < g0 + kSpan; ++g) {
          __m256i lo[H], hi[H];
          REWIND_UNROLL
          for (int h = 0; h < H; ++h) {
            if (h % 2 == 0) prefetch_part<R>(blk[h / 2], pb, g, 32);
            const __m256i v = half_group(blk, h, k_lo_group(Q5, g));
            lo[h] = _mm256_and_si256(v, m4);
            hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (Q5) {  // bit 4 of the codes (see kquant_codes)
              const __m256i hb = _mm256_srl_epi32(half_group(blk, h, q5k_hi_group(g >> 2)),
                                                  _mm_cvtsi32_si128(2 * (g & 3)));
              const __m256i b4 = _mm256_set1_epi8(0x10);
              lo[h] = _mm256_or_si256(lo[h], _mm256_and_si256(_mm256_slli_epi32(hb, 4), b4));
              hi[h] = _mm256_or_si256(hi[h], _mm256_and_si256(_mm256_slli_epi32(hb, 3), b4));
            }
          }
          REWIND_UNROLL
          for (int r = 0; r < R; ++r) {
            const __m256i a0 = bcast4(xr.q[r] + b * 256 + 8 * g);
            const __m256i a1 = bcast4(xr.q[r] + b * 256 + 8 * g + 4);
            REWIND_UNROLL
            for (int h = 0; h < H; ++h)
              t16[r][h] =
                  _mm256_add_epi16(t16[r][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], a0),
                                                               _mm256_maddubs_epi16(hi[h], a1)));
          }
        }
        flush_int16_sums<false, R, H>(blk, kQ4KScOff + 16 * sb, t16, sm);
      }
    }
    __m256i s[R][H];
    load_sums<R, H>(sm, s);
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
    // Mins: sum_s m[s] * sum32[s], pairs of sub-blocks per vpmaddwd.
    zero_sums<R, H>(s);
    REWIND_UNROLL
    for (int tp = 0; tp < 4; ++tp) {
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        const __m256i mv = _mm256_cvtepu8_epi16(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(blk[h / 2] + kQ4KMinOff + 32 * tp + 16 * (h % 2))));
        REWIND_UNROLL
        for (int r = 0; r < R; ++r)
          s[r][h] = _mm256_add_epi32(
              s[r][h],
              _mm256_madd_epi16(mv, _mm256_set1_epi32(load_i32(xr.s32[r] + b * 8 + 2 * tp))));
      }
    }
    combine_avx2<R, H, true>(acc, blk, 32, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// Half h of the Q6_K codes of group g = 4 sb + I (values 4g..4g+3 of each lane), with the shift
// counts known: the low nibbles of groups 2j and 2j + 1 share a byte group, the high 2 bits of
// the four groups of a sub-block share one (bits 2I..2I+1 moved to bits 4..5 by one shift).
template <int I>
REWIND_AVX2 __attribute__((always_inline)) inline __m256i q6_k_codes_avx2(
    const std::byte* const* blk, int h, int sb) {
  const __m256i lv = half_group(blk, h, q6k_lo_group(2 * sb + I / 2));
  const __m256i lo =
      _mm256_and_si256(I % 2 ? _mm256_srli_epi32(lv, 4) : lv, _mm256_set1_epi8(0x0F));
  const __m256i hv = half_group(blk, h, q6k_hi_group(sb));
  const __m256i hs = I < 2    ? _mm256_slli_epi32(hv, 4 - 2 * I)
                     : I == 2 ? hv
                              : _mm256_srli_epi32(hv, 2);
  return _mm256_or_si256(lo, _mm256_and_si256(hs, _mm256_set1_epi8(0x30)));
}

// Half h of group g = 4 sb + I of a Q3_K block as the byte codes of its Q6_K transcoding
// (c + 28 = q + 32): the low 2 bits of sub-block sb's values share a byte group (bits 2I..2I+1),
// their bit 2 sits in high-bit group sb / 2, bit 4 (sb % 2) + I.
template <int I>
REWIND_AVX2 __attribute__((always_inline)) inline __m256i q3_k_codes_avx2(
    const std::byte* const* blk, int h, int sb) {
  const __m256i lv = half_group(blk, h, kQ3KLoOff + 64 * sb);
  const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(lv, 2 * I), _mm256_set1_epi8(3));
  const __m256i hv = half_group(blk, h, kQ3KHiOff + 64 * (sb / 2));
  const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hv, _mm_cvtsi32_si128(4 * (sb % 2) + I)),
                                      _mm256_set1_epi8(1));
  return _mm256_add_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 2)), _mm256_set1_epi8(28));
}

// Where a Q6_K-form tile reads its codes: Q6_K's packed block, the bytes of expand_q6_k_avx2 /
// expand_q3_k_avx2, or a packed Q3_K block (its Q6_K transcoding's codes built in registers).
enum Q6Src { kQ6Packed = 0, kQ6Bytes = 1, kQ3Packed = 2 };

// t16[r][h] += the products of group g = 4 sb + I of block b (int16 pair sums).
template <int I, int R, int H, int Src>
REWIND_AVX2 __attribute__((always_inline)) inline void q6_k_group_avx2(const std::byte* const* blk,
                                                                       int64_t pb,
                                                                       const ActRows<R>& xr,
                                                                       int64_t b, int sb,
                                                                       __m256i (&t16)[R][H]) {
  const int g = 4 * sb + I;
  __m256i w[H];
  REWIND_UNROLL
  for (int h = 0; h < H; ++h) {
    if (h % 2 == 0 && Src != kQ6Bytes) prefetch_part<R>(blk[h / 2], pb, g, 64);
    w[h] = Src == kQ6Bytes    ? half_group(blk, h, kQ6KLoOff + 64 * g)
           : Src == kQ3Packed ? q3_k_codes_avx2<I>(blk, h, sb)
                              : q6_k_codes_avx2<I>(blk, h, sb);
  }
  REWIND_UNROLL
  for (int r = 0; r < R; ++r) {
    const __m256i a = bcast4(xr.q[r] + b * 256 + 4 * g);
    REWIND_UNROLL
    for (int h = 0; h < H; ++h)
      t16[r][h] = _mm256_add_epi16(t16[r][h], _mm256_maddubs_epi16(w[h], a));
  }
}

// Q6_K: codes c = q + 32 (u8); s = sum_s sc[s] * (sum c * qx - 32 * sum16[s]), the codes read as
// Src says (Q3_K: its Q6_K transcoding's, whose integers are Q3_K's).
template <int R, int P, int Src>
REWIND_AVX2 __attribute__((always_inline)) inline void int8_tile_avx2_q6_k(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = Src == kQ6Bytes    ? kQ6KBytesBlock
                     : Src == kQ3Packed ? quant_panel_block_bytes(DType::Q3_K)
                                        : quant_panel_block_bytes(DType::Q6_K);
  const int64_t nb = xa.k / 256;
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    alignas(32) int32_t sm[R][H][8] = {};
    for (int sb = 0; sb < 16; ++sb) {
      __m256i t16[R][H];
      REWIND_UNROLL
      for (int half = 0; half < 2; ++half) {  // two groups per int16 sum
        zero_sums<R, H>(t16);
        if (half == 0) {
          q6_k_group_avx2<0, R, H, Src>(blk, pb, xr, b, sb, t16);
          q6_k_group_avx2<1, R, H, Src>(blk, pb, xr, b, sb, t16);
        } else {
          q6_k_group_avx2<2, R, H, Src>(blk, pb, xr, b, sb, t16);
          q6_k_group_avx2<3, R, H, Src>(blk, pb, xr, b, sb, t16);
        }
        flush_int16_sums<true, R, H>(blk, kQ6KScOff + 16 * sb, t16, sm);
      }
    }
    __m256i s[R][H];
    load_sums<R, H>(sm, s);
    // The offset: 32 * sum_s sc[s] * sum16[s], two sub-blocks per vpmaddwd (32 * sc fits
    // int16, as does sum16: at most 16 * 127).
    REWIND_UNROLL
    for (int i = 0; i < 8; ++i) {
      REWIND_UNROLL
      for (int h = 0; h < H; ++h) {
        const std::byte* sp = blk[h / 2] + kQ6KScOff + 8 * (h % 2) + 32 * i;
        const __m128i e = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp));
        const __m128i o = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp + 16));
        const __m256i sc2 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(e, o)), 5);
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          const int32_t* s16 = xr.s16[r] + b * 16 + 2 * i;
          const __m256i a = _mm256_set1_epi32(static_cast<int32_t>(
              (static_cast<uint32_t>(s16[0]) & 0xFFFFu) | (static_cast<uint32_t>(s16[1]) << 16)));
          s[r][h] = _mm256_sub_epi32(s[r][h], _mm256_madd_epi16(sc2, a));
        }
      }
    }
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// n_tiles row tiles of R rows each, one below the other, the tile inlined into the loop; pf
// (prefill, or null) is stepped a burst before each tile.
template <int R, auto Tile>
REWIND_AVX2 __attribute__((always_inline)) inline void avx2_row_tiles(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step, PrefetchStream* pf, int64_t n_tiles) {
  for (int64_t i = 0; i < n_tiles; ++i) {
    if (pf) pf->step();
    Tile(xa, r0 + i * R, panels, panel_stride, y + i * R * ldy, ldy, ncols, y_step);
  }
}

template <int R, int P>
REWIND_AVX2 void int8_tile_avx2(DType t, const QuantizedActs& xa, int64_t r0,
                                const std::byte* panels, int64_t panel_stride, float* y,
                                int64_t ldy, int ncols, int64_t y_step, bool q6_bytes,
                                PrefetchStream* pf, int64_t n_tiles) {
#define REWIND_AVX2_TILES(...)                                                                   \
  return avx2_row_tiles<R, __VA_ARGS__>(xa, r0, panels, panel_stride, y, ldy, ncols, y_step, pf, \
                                        n_tiles)
  switch (t) {
    case DType::Q8_0:
      REWIND_AVX2_TILES(int8_tile_avx2_q8_0<R, P>);
    case DType::Q4_0:
      REWIND_AVX2_TILES(int8_tile_avx2_q4_0<R, P>);
    case DType::Q4_1:
      REWIND_AVX2_TILES(int8_tile_avx2_q4_0<R, P, true>);
    case DType::Q5_1:
      REWIND_AVX2_TILES(int8_tile_avx2_q4_0<R, P, true, true>);
    case DType::Q5_0:
      REWIND_AVX2_TILES(int8_tile_avx2_q4_0<R, P, false, true>);
    case DType::IQ4_NL:
      REWIND_AVX2_TILES(int8_tile_avx2_iq4_nl<R, P>);
    case DType::IQ4_XS:
      REWIND_AVX2_TILES(int8_tile_avx2_iq4_xs<R, P>);
    case DType::Q2_K:
      REWIND_AVX2_TILES(int8_tile_avx2_q2_k<R, P>);
    case DType::Q3_K:
      REWIND_AVX2_TILES(int8_tile_avx2_q6_k<R, P, kQ3Packed>);
    case DType::Q4_K:
      REWIND_AVX2_TILES(int8_tile_avx2_k<R, P, false>);
    case DType::Q5_K:
      REWIND_AVX2_TILES(int8_tile_avx2_k<R, P, true>);
    default:
      if (q6_bytes) REWIND_AVX2_TILES(int8_tile_avx2_q6_k<R, P, kQ6Bytes>);
      REWIND_AVX2_TILES(int8_tile_avx2_q6_k<R, P, kQ6Packed>);
  }
#undef REWIND_AVX2_TILES
}

constexpr int kAvx2MaxP = 2;
#define REWIND_INT8_AVX2_ROW(R) \
  { int8_tile_avx2<R, 1>, int8_tile_avx2<R, 2>, nullptr, nullptr }
constexpr Int8TileFn kInt8TilesAvx2[kInt8MaxR][kInt8MaxP] = {
    REWIND_INT8_AVX2_ROW(1), REWIND_INT8_AVX2_ROW(2), REWIND_INT8_AVX2_ROW(3),
    REWIND_INT8_AVX2_ROW(4)};
#undef REWIND_INT8_AVX2_ROW

// nb IQ4_NL panel blocks at src as the Q8_0 panel blocks of their transcoding (the same d, the
// values kIq4nlValues[c] as Q8_0's codes): nibble group g's low nibbles are Q8_0 group 2g, its
// high nibbles group 2g + 1, lane for lane.
REWIND_AVX2 void expand_iq4_nl_avx2(const std::byte* src, int64_t nb, std::byte* dst) {
  const __m256i values =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  const int64_t sb = quant_panel_block_bytes(DType::IQ4_NL),
                db = quant_panel_block_bytes(DType::Q8_0);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* s = src + b * sb;
    std::byte* o = dst + b * db;
    std::memcpy(o, s, 32);  // d
    for (int g = 0; g < 4; ++g)
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        nibbles_avx2(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + kQ8QOff + 64 * g + 32 * h)), lo,
            hi);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + kQ8QOff + 64 * (2 * g) + 32 * h),
                            _mm256_shuffle_epi8(values, lo));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + kQ8QOff + 64 * (2 * g + 1) + 32 * h),
                            _mm256_shuffle_epi8(values, hi));
      }
  }
}

// nb Q6_K panel blocks at src expanded to kQ6KBytesBlock each at dst (as expand_q6_k).
REWIND_AVX2 void expand_q6_k_avx2(const std::byte* src, int64_t nb, std::byte* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[1] = {src + b * quant_panel_block_bytes(DType::Q6_K)};
    std::byte* o = dst + b * kQ6KBytesBlock;
    std::memcpy(o, blk[0], kQ6KLoOff);
    for (int sb = 0; sb < 16; ++sb)
      for (int h = 0; h < 2; ++h) {
        auto* d = reinterpret_cast<__m256i*>(o + kQ6KLoOff + 64 * 4 * sb + 32 * h);
        _mm256_storeu_si256(d, q6_k_codes_avx2<0>(blk, h, sb));
        _mm256_storeu_si256(d + 2, q6_k_codes_avx2<1>(blk, h, sb));
        _mm256_storeu_si256(d + 4, q6_k_codes_avx2<2>(blk, h, sb));
        _mm256_storeu_si256(d + 6, q6_k_codes_avx2<3>(blk, h, sb));
      }
  }
}

// nb Q3_K panel blocks at src expanded to Q6_K's byte blocks (kQ6KBytesBlock each, as
// expand_q6_k_avx2 makes them) of its Q6_K transcoding: d and sc copied, byte c + 28 (= q + 32)
// per value. Low-bit group G of a half gives byte groups 4G .. 4G + 3; their bit 2 comes from
// high-bit group G / 2, bits 4 (G % 2) + c'.
REWIND_AVX2 void expand_q3_k_avx2(const std::byte* src, int64_t nb, std::byte* dst) {
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1), off = _mm256_set1_epi8(28);
  const int64_t sb = quant_panel_block_bytes(DType::Q3_K);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* s = src + b * sb;
    std::byte* o = dst + b * kQ6KBytesBlock;
    std::memcpy(o, s, kQ6KLoOff);  // d, sc
    for (int G = 0; G < 16; ++G)
      for (int h = 0; h < 2; ++h) {
        const __m256i lv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + kQ3KLoOff + 64 * G + 32 * h));
        const __m256i hv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(s + kQ3KHiOff + 64 * (G / 2) + 32 * h));
        const __m256i hs = _mm256_srli_epi16(hv, 4 * (G % 2));
        auto* d = reinterpret_cast<__m256i*>(o + kQ6KLoOff + 64 * 4 * G + 32 * h);
        for (int c = 0; c < 4; ++c) {
          const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(lv, 2 * c), m3);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hs, c), m1);
          _mm256_storeu_si256(d + 2 * c,
                              _mm256_add_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 2)), off));
        }
      }
  }
}

// Activation quantisation, one block of n (a multiple of 32) values: same bits as the scalar
// (the max is exact, x * id one rounding, vcvtps2dq rounds to nearest even as nearbyint does).
REWIND_AVX2 void quantize_block_avx2(const float* x, int n, int8_t* q, float* d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // inf or NaN
    mx = _mm256_max_ps(mx, a);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float amax = _mm_cvtss_f32(m4);
  if (_mm256_movemask_ps(bad) || amax < 1e-30f) {  // the scalar handles the special blocks
    quantize_block_scalar(x, n, q, d);
    return;
  }
  const float idf = 127.0f / amax;
  const __m256 id = _mm256_set1_ps(idf);
  *d = act_scale(amax, idf, n);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), id));
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(p, order));
  }
}

#pragma GCC diagnostic pop

using WidenFn = void (*)(const std::byte*, float*, int64_t);

bool use_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
}

bool use_vnni() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return use_avx512() && __builtin_cpu_supports("avx512vnni");
  }();
  return yes;
}

bool use_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return yes;
}

// AVX-512 present and not ruled out by matmul_force_isa.
bool avx512_allowed() {
  return use_avx512() && g_isa_cap >= 2;
}
// AVX2 (with FMA and F16C) present and not ruled out by matmul_force_isa.
bool avx2_allowed() {
  return use_avx2() && g_isa_cap >= 1;
}

int64_t act_block(DType t) {
  return dtype_block_elems(t);
}

}  // namespace

// Set by matmul_force_isa (tests compare the paths).
int g_isa_cap = 3;
thread_local int t_amx_config = 0;

bool amx_int8_available() {
  static const bool yes = [] {
#if defined(__linux__) && defined(__x86_64__)
    if (!use_vnni()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    if (!tile || !int8) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return yes;
}

bool amx_int8_enabled() {
  return g_isa_cap >= 3 && amx_int8_available();
}

namespace {
enum class Int8Path { Vnni, Avx2, Scalar };
Int8Path int8_path() {
  if (use_vnni() && g_isa_cap >= 2) return Int8Path::Vnni;
  if (avx2_allowed()) return Int8Path::Avx2;
  return Int8Path::Scalar;
}
}  // namespace

namespace {
// Lane j's d, dmin, scales and mins of a Q4_K or Q5_K block (the same header).
template <class Block>
void pack_k_header(const Block& x, int j, uint8_t* o) {
  std::memcpy(o + 2 * j, &x.d, 2);
  std::memcpy(o + 32 + 2 * j, &x.dmin, 2);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    q4k_scale_min(s, x.scales, &sc, &m);
    o[kQ4KScOff + s * kNR + j] = sc;
    o[kQ4KMinOff + q4k_min_byte(s, j)] = m;
  }
}
}  // namespace

void pack_quant_panel(DType t, const std::byte* const* rows, int n_rows, int64_t k,
                      std::byte* dst) {
  const int64_t bk = dtype_block_elems(t), nb = k / bk;
  const int64_t pb = quant_panel_block_bytes(t);
  REWIND_CHECK(pb > 0 && k % bk == 0);
  std::memset(dst, 0, static_cast<size_t>(nb * pb));
  for (int64_t b = 0; b < nb; ++b) {
    auto* o = reinterpret_cast<uint8_t*>(dst + b * pb);
    for (int j = 0; j < n_rows; ++j) {
      if (t == DType::Q8_0) {
        BlockQ8_0 x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ8_0), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int g = 0; g < 8; ++g)  // codes 4g..4g+3 are bytes group_byte(4g, j) .. + 3
          std::memcpy(o + kQ8QOff + group_byte(4 * g, j), x.qs + 4 * g, 4);
      } else if (t == DType::Q4_0 || t == DType::IQ4_NL) {  // the same 18-byte block layout
        static_assert(sizeof(BlockQ4_0) == sizeof(BlockIQ4_NL));
        BlockQ4_0 x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ4_0), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int e = 0; e < 32; ++e)
          o[kQ8QOff + q4k_byte(e, j)] |= static_cast<uint8_t>(nibble32(x.qs, e) << q4k_shift(e));
      } else if (t == DType::Q4_1) {  // Q4_0's layout, then m
        BlockQ4_1 x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ4_1), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        std::memcpy(o + kQ41MOff + 2 * j, &x.m, 2);
        for (int e = 0; e < 32; ++e)
          o[kQ8QOff + q4k_byte(e, j)] |= static_cast<uint8_t>(nibble32(x.qs, e) << q4k_shift(e));
      } else if (t == DType::Q5_1 || t == DType::Q5_0) {  // Q4_0's layout, the fifth bits, m
        BlockQ5_1 x;  // Q5_0: the same bytes without m
        if (t == DType::Q5_0) {
          BlockQ5_0 x0;
          std::memcpy(&x0, rows[j] + b * sizeof(BlockQ5_0), sizeof x0);
          x.d = x0.d;
          std::memcpy(x.qh, x0.qh, sizeof x.qh);
          std::memcpy(x.qs, x0.qs, sizeof x.qs);
        } else {
          std::memcpy(&x, rows[j] + b * sizeof(BlockQ5_1), sizeof x);
          std::memcpy(o + kQ51MOff + 2 * j, &x.m, 2);
        }
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int e = 0; e < 32; ++e) {
          const int code = q5_1_code(x, e);
          o[kQ8QOff + q4k_byte(e, j)] |= static_cast<uint8_t>((code & 0xF) << q4k_shift(e));
          o[kQ51HOff + q5k_hbit_byte(e, j)] |= static_cast<uint8_t>((code >> 4) << q5k_hbit_shift(e));
        }
      } else if (t == DType::Q5_K) {
        BlockQ5_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ5_K), sizeof x);
        pack_k_header(x, j, o);
        for (int e = 0; e < kQK_K; ++e) {
          const int code = q5k_value(x, e);  // 0..31
          o[k_lo_group(true, e >> 3) + lane_byte(e, j)] |=
              static_cast<uint8_t>((code & 0xF) << q4k_shift(e));
          o[q5k_hi_group(e >> 5) + lane_byte(e, j)] |=
              static_cast<uint8_t>((code >> 4) << q5k_hbit_shift(e));
        }
      } else if (t == DType::Q4_K) {
        BlockQ4_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ4_K), sizeof x);
        pack_k_header(x, j, o);
        // ggml: byte l of chunk c (64 values) holds value 64c + l (low) and 64c + 32 + l (high).
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 32; ++l) {
            const int lo = 64 * c + l, hi = 64 * c + 32 + l;
            o[kQ4KQOff + q4k_byte(lo, j)] |=
                static_cast<uint8_t>((x.qs[32 * c + l] & 0xF) << q4k_shift(lo));
            o[kQ4KQOff + q4k_byte(hi, j)] |=
                static_cast<uint8_t>((x.qs[32 * c + l] >> 4) << q4k_shift(hi));
          }
      } else if (t == DType::Q2_K) {
        BlockQ2_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ2_K), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        std::memcpy(o + 32 + 2 * j, &x.dmin, 2);
        for (int s = 0; s < 16; ++s) o[kQ2KScOff + s * kNR + j] = x.scales[s];
        for (int e = 0; e < kQK_K; ++e)
          o[kQ2KQOff + q6k_hi_byte(e, j)] |= static_cast<uint8_t>(q2k_value(x, e) << q6k_hi_shift(e));
      } else if (t == DType::IQ4_XS) {
        BlockIQ4_XS x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockIQ4_XS), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int s = 0; s < 8; ++s)
          o[kIQ4XSScOff + s * kNR + j] = static_cast<uint8_t>(static_cast<int8_t>(iq4xs_scale(x, s)));
        for (int e = 0; e < kQK_K; ++e)
          o[kIQ4XSQOff + q4k_byte(e, j)] |=
              static_cast<uint8_t>(nibble32(x.qs + 16 * (e / 32), e % 32) << q4k_shift(e));
      } else if (t == DType::Q3_K) {
        BlockQ3_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ3_K), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int s = 0; s < 16; ++s)
          o[kQ6KScOff + s * kNR + j] = static_cast<uint8_t>(static_cast<int8_t>(q3k_scale(x, s)));
        for (int e = 0; e < kQK_K; ++e) {
          const int c = q3k_value(x, e) + 4;  // 0..7
          o[kQ3KLoOff + q6k_hi_byte(e, j)] |= static_cast<uint8_t>((c & 3) << q6k_hi_shift(e));
          o[kQ3KHiOff + q3k_hb_byte(e, j)] |= static_cast<uint8_t>((c >> 2) << q3k_hb_shift(e));
        }
      } else {
        BlockQ6_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ6_K), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int s = 0; s < 16; ++s) o[kQ6KScOff + s * kNR + j] = static_cast<uint8_t>(x.scales[s]);
        for (int e = 0; e < kQK_K; ++e) {
          const int code = q6k_value(x, e) + 32;  // 0..63
          o[q6k_lo_group(e >> 3) + lane_byte(e, j)] |=
              static_cast<uint8_t>((code & 0xF) << q4k_shift(e));
          o[q6k_hi_group(e >> 4) + lane_byte(e, j)] |=
              static_cast<uint8_t>((code >> 4) << q6k_hi_shift(e));
        }
      }
    }
  }
}

bool quant_decode_tiles_available(DType) {
  return avx512_allowed();
}

void quant_decode_tiles(DType t, const float* x, int64_t ldx, int rows, const std::byte* panels,
                        int64_t panel_stride, int64_t nb, int np, float* y, int64_t ldy,
                        int ncols) {
  REWIND_CHECK(rows >= 1 && rows <= kQuantDecodeRows && quant_decode_tiles_available(t));
  for (int p0 = 0; p0 < np; p0 += kQuantDecodePanels) {
    const int npg = std::min(kQuantDecodePanels, np - p0);
    kDecodeTiles[rows - 1][npg - 1](t, x, ldx, panels + p0 * panel_stride, panel_stride, nb,
                                    y + 16 * p0, ldy, ncols - 16 * p0);
  }
}

void widen_quant(DType t, const std::byte* panels, int64_t panel_stride, int64_t b0, int64_t nb,
                 int np, float* out) {
  const bool simd = avx512_allowed();
  WidenFn f = nullptr;
  switch (t) {
    case DType::Q8_0:
      f = simd ? widen_q8_0_avx512 : widen_q8_0_scalar;
      break;
    case DType::Q4_0:
      f = simd ? widen_nibbles_avx512<DType::Q4_0> : widen_nibbles_scalar<DType::Q4_0>;
      break;
    case DType::IQ4_NL:
      f = simd ? widen_nibbles_avx512<DType::IQ4_NL> : widen_nibbles_scalar<DType::IQ4_NL>;
      break;
    case DType::Q5_0:
      f = simd ? widen_nibbles_avx512<DType::Q5_0> : widen_nibbles_scalar<DType::Q5_0>;
      break;
    case DType::Q4_1:
      f = simd ? widen_min_avx512<false> : widen_min_scalar<false>;
      break;
    case DType::Q5_1:
      f = simd ? widen_min_avx512<true> : widen_min_scalar<true>;
      break;
    case DType::Q4_K:
      f = simd ? widen_k_avx512<false> : widen_k_scalar<false>;
      break;
    case DType::Q5_K:
      f = simd ? widen_k_avx512<true> : widen_k_scalar<true>;
      break;
    case DType::Q6_K:
      f = simd ? widen_q6_k_avx512 : widen_q6_k_scalar<false>;
      break;
    case DType::Q3_K:
      f = simd ? widen_q3_k_avx512 : widen_q6_k_scalar<true>;
      break;
    case DType::IQ4_XS:
      f = simd ? widen_iq4_xs_avx512 : widen_iq4_xs_scalar;
      break;
    case DType::Q2_K:
      f = simd ? widen_q2_k_avx512 : widen_q2_k_scalar;
      break;
    default:
      REWIND_CHECK_MSG(false, "widen_quant: not a quantised store");
  }
  const int64_t bk = dtype_block_elems(t), pb = quant_panel_block_bytes(t);
  const int64_t kc = nb * bk;
  for (int p = 0; p < np; ++p) {
    const std::byte* src = panels + p * panel_stride + b0 * pb;
    float* dst = out + p * kc * kNR;
    for (int64_t b = 0; b < nb; ++b) f(src + b * pb, dst + b * bk * kNR, kNR);
  }
}

// ---- int8 dot ---------------------------------------------------------------------------------

namespace {

// Sizes out's buffers for m rows of k; returns the activation block.
int64_t prepare_acts(DType t, int64_t m, int64_t k, QuantizedActs* out) {
  const int64_t block = act_block(t);
  REWIND_CHECK_MSG(dtype_is_quant(t) && k % block == 0 && m >= 0, "quantize_acts: bad shape");
  out->m = m;
  out->k = k;
  out->block = block;
  out->q.reserve_at_least(static_cast<size_t>(m * k));
  out->d.reserve_at_least(static_cast<size_t>(m * (k / block)));
  out->s16.reserve_at_least(static_cast<size_t>(m * (k / 16)));
  out->s32.reserve_at_least(static_cast<size_t>(m * (k / 32)));
  return block;
}

// Row r of *out from the k values at xr.
void quantize_act_row(const float* xr, int64_t r, QuantizedActs* out) {
  const int64_t k = out->k, block = out->block;
  int8_t* q = out->q.data() + r * k;
  float* d = out->d.data() + r * (k / block);
  int32_t* s16 = out->s16.data() + r * (k / 16);
  int16_t* s32 = out->s32.data() + r * (k / 32);
  if (avx512_allowed()) {
    quantize_row_avx512(xr, k, static_cast<int>(block), q, d, s16);
  } else {
    const auto quantize_block = avx2_allowed() ? quantize_block_avx2 : quantize_block_scalar;
    for (int64_t b = 0; b < k / block; ++b)
      quantize_block(xr + b * block, static_cast<int>(block), q + b * block, d + b);
    sums16_scalar(q, 0, k, s16);
  }
  for (int64_t i = 0; i < k / 32; ++i) s32[i] = static_cast<int16_t>(s16[2 * i] + s16[2 * i + 1]);
}

// Rows [0, m) by rows(r0, r1), on the pool when there is enough work to share, in chunks of at
// least 4 rows handed out to whichever thread is free (see split_columns in matmul.cpp).
void act_rows(ThreadPool* pool, int64_t m, int64_t k,
              const std::function<void(int64_t, int64_t)>& rows) {
  if (pool && m > 1 && m * k >= (int64_t{1} << 16))
    pool->parallel_guided(m, 1, 4, [&](int, int64_t r0, int64_t r1) { rows(r0, r1); });
  else
    rows(0, m);
}

}  // namespace

void quantize_acts(DType t, const float* x, int64_t m, int64_t ldx, int64_t k, QuantizedActs* out,
                   ThreadPool* pool) {
  REWIND_CHECK_MSG(ldx >= k, "quantize_acts: bad shape");
  prepare_acts(t, m, k, out);
  act_rows(pool, m, k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize_act_row(x + r * ldx, r, out);
  });
}

void quantize_acts_fill(DType t, const RowFill& fill, int64_t m, int64_t k, QuantizedActs* out,
                        ThreadPool* pool) {
  prepare_acts(t, m, k, out);
  // Rows made per fill call: as many as fit 16 KiB (at least one, at most 16), so that they are
  // still in L1 when quantised.
  const int64_t chunk = std::clamp<int64_t>(16384 / (4 * k), 1, 16);
  act_rows(pool, m, k, [&](int64_t r0, int64_t r1) {
    thread_local AlignedBuffer<float> buf;
    buf.reserve_at_least(static_cast<size_t>(chunk * k));
    for (int64_t r = r0; r < r1; r += chunk) {
      const int64_t e = std::min(r1, r + chunk);
      fill(r, e, buf.data(), k);
      for (int64_t i = r; i < e; ++i) quantize_act_row(buf.data() + (i - r) * k, i, out);
    }
  });
}

bool int8_dot_simd_available() {
  return int8_path() != Int8Path::Scalar;
}

const char* int8_dot_isa() {
  switch (int8_path()) {
    case Int8Path::Vnni:
      return "avx512vnni";
    case Int8Path::Avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

float int8_dot_reference(DType t, const QuantizedActs& xa, int64_t r, const std::byte* panel,
                         int j) {
  const int64_t pb = quant_panel_block_bytes(t), nb = xa.k / xa.block;
  const int8_t* qx = xa.q.data() + r * xa.k;
  const float* dx = xa.d.data() + r * nb;
  const int16_t* s32 = xa.s32.data() + r * (xa.k / 32);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* o = reinterpret_cast<const uint8_t*>(panel + b * pb);
    const auto* d16 = reinterpret_cast<const uint16_t*>(o);
    const int8_t* xb = qx + b * xa.block;
    if (t == DType::Q8_0) {
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) s += static_cast<int8_t>(o[kQ8QOff + group_byte(i, j)]) * xb[i];
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s), acc);
    } else if (t == DType::Q4_0 || t == DType::IQ4_NL || t == DType::Q5_0) {
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) s += nibble_value(t, o, i, j) * xb[i];
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s), acc);
    } else if (t == DType::Q4_1 || t == DType::Q5_1) {
      const bool q5 = t == DType::Q5_1;
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) s += min_code(q5, o, i, j) * xb[i];
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s), acc);
      const auto* m16 = reinterpret_cast<const uint16_t*>(o + min_offset(q5));
      acc = std::fma(f16_to_f32(m16[j]), min_factor(dx[b], s32[b]), acc);
    } else if (t == DType::Q4_K || t == DType::Q5_K) {
      int32_t s1 = 0, s2 = 0;
      for (int sb = 0; sb < 8; ++sb) {
        int32_t is = 0;
        for (int i = 32 * sb; i < 32 * sb + 32; ++i)
          is += kquant_code(o, t == DType::Q5_K, i, j) * xb[i];
        s1 += o[kQ4KScOff + sb * kNR + j] * is;
        s2 += o[kQ4KMinOff + q4k_min_byte(sb, j)] * s32[b * 8 + sb];
      }
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s1), acc);
      acc = std::fma(-(f16_to_f32(d16[16 + j]) * dx[b]), static_cast<float>(s2), acc);
    } else if (t == DType::Q2_K) {
      const int32_t* s16 = xa.s16.data() + r * (xa.k / 16) + b * 16;
      int32_t s1 = 0, s2 = 0;
      for (int sb = 0; sb < 16; ++sb) {
        int32_t is = 0;
        for (int i = 16 * sb; i < 16 * sb + 16; ++i) is += q2k_code(o, i, j) * xb[i];
        const int scm = o[kQ2KScOff + sb * kNR + j];
        s1 += (scm & 0xF) * is;
        s2 += (scm >> 4) * s16[sb];
      }
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s1), acc);
      acc = std::fma(-(f16_to_f32(d16[16 + j]) * dx[b]), static_cast<float>(s2), acc);
    } else if (t == DType::IQ4_XS) {
      int32_t s = 0;
      for (int sb = 0; sb < 8; ++sb) {
        int32_t is = 0;
        for (int i = 32 * sb; i < 32 * sb + 32; ++i)
          is += kIq4nlValues[iq4xs_code(o, i, j)] * xb[i];
        s += static_cast<int8_t>(o[kIQ4XSScOff + sb * kNR + j]) * is;
      }
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s), acc);
    } else {
      const bool q3 = t == DType::Q3_K;
      int32_t s = 0;
      for (int sb = 0; sb < 16; ++sb) {
        int32_t is = 0;
        for (int i = 16 * sb; i < 16 * sb + 16; ++i)
          is += (q3 ? q3k_code(o, i, j) - 4 : q6k_code(o, i, j) - 32) * xb[i];
        s += static_cast<int8_t>(o[kQ6KScOff + sb * kNR + j]) * is;
      }
      acc = std::fma(f16_to_f32(d16[j]) * dx[b], static_cast<float>(s), acc);
    }
  }
  return acc;
}

namespace {
// The AMX tiles serve the prefill of these types, on 16 rows or more.
bool uses_amx(DType t, int64_t rows) {
  return int8_path() == Int8Path::Vnni &&
         (t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q5_K) && amx_int8_enabled() &&
         rows >= 16;
}

// What a prefill does to a panel group once per row block before its row tiles run: fn writes
// nb blocks of block_bytes each (null: the tiles read the packed panels), and the tiles of type
// `tile` run on them with the `bytes` flag (Int8TileFn). Every expansion keeps the integers, so
// the bits are those of the packed panels.
struct PrefillExpansion {
  void (*fn)(const std::byte* src, int64_t nb, std::byte* dst) = nullptr;
  int64_t block_bytes = 0;
  DType tile;
  bool bytes = false;
};
PrefillExpansion prefill_expansion(DType t, bool avx2, bool amx) {
  switch (t) {
    // Q6_K: the 6-bit codes as bytes, read by every row tile (taller row blocks spread the cost).
    case DType::Q6_K:
      return {avx2 ? expand_q6_k_avx2 : expand_q6_k, kQ6KBytesBlock, DType::Q6_K, true};
    // Q3_K on AVX2: its Q6_K transcoding's bytes; on the VNNI tiles q * sc + 124 per value
    // (expand_q3_k_scaled: no multiply per sub-block).
    case DType::Q3_K:
      if (avx2) return {expand_q3_k_avx2, kQ6KBytesBlock, DType::Q6_K, true};
      return {expand_q3_k_scaled, kQ3KScaledBlock, DType::Q3_K, true};
    // IQ4_NL: the codes looked up into Q8_0's int8 values, run by the Q8_0 tiles (its own tile,
    // with the lookups in the loop, serves decode).
    case DType::IQ4_NL:
      return {expand_iq4_nl_avx2, quant_panel_block_bytes(DType::Q8_0), DType::Q8_0, false};
    // Q5_0 on the VNNI tiles: as IQ4_NL, its values c - 16 as Q8_0's codes (AVX2 runs its own).
    case DType::Q5_0:
      if (avx2) break;
      return {expand_nibble_bytes<DType::Q5_0, 16>, quant_panel_block_bytes(DType::Q8_0),
              DType::Q8_0, false};
    // On the VNNI tiles: Q4_K / Q5_K's codes as bytes (not on AMX, whose tiles expand their own),
    // IQ4_XS's as their u8 operands value + 128, Q2_K's as q * sc.
    case DType::Q4_K:
    case DType::Q5_K:
      if (avx2 || amx) break;
      return {t == DType::Q5_K ? expand_q5_k_bytes : expand_q4_k_bytes, kKBytesBlock, t, true};
    case DType::IQ4_XS:
      if (avx2) break;
      return {expand_iq4_xs_bytes, kIQ4XSBytesBlock, t, true};
    case DType::Q2_K:
      if (avx2) break;
      return {expand_q2_k_bytes, kQ2KBytesBlock, t, true};
    // Q4_1 / Q5_1: the codes as bytes in Q8_0's groups (Q5_1's fifth bit merged in once).
    case DType::Q4_1:
      if (avx2) break;
      return {expand_nibble_bytes<DType::Q4_1, 0>, kMinBytesBlock, t, true};
    case DType::Q5_1:
      if (avx2) break;
      return {expand_nibble_bytes<DType::Q5_1, 0>, kMinBytesBlock, t, true};
    default:
      break;
  }
  return {nullptr, 0, t, false};
}
}  // namespace

void int8_set_decode_panels(int panels) {
  REWIND_CHECK_MSG(panels >= 0 && panels <= kInt8MaxP, "decode panels: 0 (default) to 4");
  g_decode_panels.store(panels, std::memory_order_relaxed);
}

int int8_prefill_group_panels(DType t, int64_t panel_stride, int64_t rows) {
  if (int8_path() != Int8Path::Vnni) return 1;  // AVX2: 4-row tiles of one panel
  // AMX: groups of up to 256 KiB of panels (2 to 16 panels): a row tile's activation codes stay
  // in L1 while it runs through the group's panels from L2 (with panel pairs they came from L2
  // for every panel): model prefill of 512 tokens Q8_0 610 -> 790 tok/s, Q4_K 545 -> 670
  // (alternating runs, Sapphire Rapids); 128 KiB gained less, 512 KiB and a fixed 16 panels
  // about the same. The rows left over take the VNNI tiles on panel pairs.
  constexpr int64_t kAmxGroupBytes = 256 * 1024;
  if (uses_amx(t, rows))
    return static_cast<int>(std::clamp<int64_t>(kAmxGroupBytes / panel_stride, 2, 16));
  // The tiles with one integer sum per output (Q8_0's, which IQ4_NL and Q5_0 run on their
  // expanded blocks, and Q4_1 / Q5_1's on bytes) take 3 panels, the others 2 (int8_dot_panels).
  const DType tile = prefill_expansion(t, false, false).tile;
  return tile == DType::Q8_0 || tile == DType::Q4_1 || tile == DType::Q5_1 ? 3 : 2;
}

void int8_dot_panels(DType t, const QuantizedActs& xa, int64_t r0, int64_t r1,
                     const std::byte* panels, int64_t panel_stride, int np, float* y, int64_t ldy,
                     int ncols) {
  REWIND_CHECK(r0 >= 0 && r1 <= xa.m && r0 <= r1 && act_block(t) == xa.block);
  if (r0 == r1 || np <= 0) return;
  const Int8Path path = int8_path();
  if (path == Int8Path::Scalar) {
    for (int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < ncols; ++c)
        y[(r - r0) * ldy + c] =
            int8_dot_reference(t, xa, r, panels + (c / kNR) * panel_stride, c % kNR);
    return;
  }
  const bool avx2 = path == Int8Path::Avx2;
  const auto& tiles = avx2 ? kInt8TilesAvx2 : kInt8Tiles;
  const int64_t rows = r1 - r0;
  if (rows <= 2) {
    // The type's own count, or int8_set_decode_panels' (at most the path's own most).
    const int forced = g_decode_panels.load(std::memory_order_relaxed);
    const int max_p = avx2 ? (forced ? std::min(forced, kAvx2MaxP) : kAvx2MaxP)
                           : (forced ? forced : vnni_decode_panels(t));
    // Decode: the panels are cut into max_p contiguous runs of q panels, and tile i reads
    // panel i of every run: each of the tile's streams walks its own run from start to end, so
    // its prefetch (a fixed distance ahead) runs on into its next panel instead of into a
    // stream already loaded, and only the first panel of each run starts cold.
    const int q = (np + max_p - 1) / max_p;
    for (int i = 0; i < q; ++i) {
      int npg = 0;
      while (npg < max_p && i + npg * q < np) ++npg;
      tiles[rows - 1][npg - 1](t, xa, r0, panels + i * panel_stride, q * panel_stride, y + 16 * i,
                               ldy, ncols - 16 * i, int64_t{16} * q, false, nullptr, 1);
    }
    return;
  }
  // Prefill: a group of kP panels (whole K, from L1/L2) serves every kR-row tile of a row block.
  // Q8_0 keeps one integer accumulator per output, Q4_K / Q5_K / Q6_K two (sub-block and block), so
  // Q8_0 affords more outputs per tile in the 32 vector registers: 4 rows x 3 panels (IQ4_NL runs
  // the Q8_0 tile on its expanded blocks); against 6 x 2, two thirds of the activation broadcasts
  // per vpdpbusd: matmul_bench M=512 +2-4%, model prefill +0.3-4% in 4 of 4 in-process A/B runs
  // (Zen 5). Q4_0 keeps 6 x 2 (its nibble splits grow with the panels: 4 x 3 was slower).
  // AVX2 (16 registers): 4-row tiles of one panel. AMX: groups of many panels (below).
  // Q8_0, Q4_K and Q5_K on AMX: 16-row tiles (the rows left over take the VNNI tiles: the same
  // bits); Q4_K's nibbles, times its sub-block scales' two parts, and Q5_K's 5-bit codes are
  // expanded to bytes once per panel group and row block, like Q6_K's codes.
  const bool amx = uses_amx(t, r1 - r0);
  const int kP = int8_prefill_group_panels(t, panel_stride, r1 - r0);
  const int kVnniP = amx ? 2 : kP;  // panels per VNNI / AVX2 tile
  const int kR = !avx2 && t == DType::Q4_0 ? 6 : 4;
  const bool amx_q4 = amx && t != DType::Q8_0;
  const PrefillExpansion ex = prefill_expansion(t, avx2, amx);
  // A multiple of the tile height (126 and 510 for 6-row tiles, 128 and 512 for 4-row ones, 128
  // for the 16-row AMX tiles), so that no row block ends in a short tile: with 128, every 128-row
  // block of a Q8_0 prefill ended in a 2-row tile, 1.6% of the rows at 3% of the tile time (perf,
  // 2048-token prefill). Q4_K / Q5_K on AMX expand each panel group's codes once per row
  // block, so their row blocks are as tall as keeps the block's packed activations within
  // 512 KiB of L2 (128 to 512 rows): Q4_K's scaled codes are twice the block's bytes, and at 128
  // rows the expansion took 15% of a Q4_K matmul (matmul_bench in_proj, perf). Model prefill of
  // 512 tokens Q4_K 839 -> 912 tok/s, of 2048 tokens 685 -> 712, Q5_K 675 -> 686 (in-process
  // A/B, Sapphire Rapids); Q8_0 (nothing to expand) the same at 64 to 512 rows.
  const int64_t kMc = amx_q4 ? std::clamp<int64_t>(512 * 1024 / xa.k / 16 * 16, 128, 512)
                      : amx  ? 128
                             : (ex.fn ? 512 : 128) / kR * kR;
  const int64_t nb = xa.k / xa.block;
  // The panel group's blocks as ex.fn lays them out.
  thread_local AlignedBuffer<std::byte> expanded;
  if (ex.fn) expanded.reserve_at_least(static_cast<size_t>(kP * nb * ex.block_bytes));
  thread_local AlignedBuffer<int8_t> amx_a, q4;
  // Q4_K on AMX: the sub-block scales in the tiles (int8_tile_amx_q4_k64); Q5_K's codes (up to
  // 31) times a scale part would pass int8, so it keeps the per-sub-block tiles.
  const bool amx_k64 = amx && t == DType::Q4_K;
  if (amx) {
    amx_a.reserve_at_least(static_cast<size_t>(kMc * xa.k));
    if (amx_k64)
      amx_configure_k64();
    else
      amx_configure_k32();
  }
  if (amx_q4) q4.reserve_at_least(static_cast<size_t>(kP * nb * (amx_k64 ? 8192 : 4096)));
  for (int64_t rb = r0; rb < r1; rb += kMc) {
    const int64_t re = std::min(r1, rb + kMc);
    if (amx)
      for (int64_t r = rb; r + 16 <= re; r += 16)
        (amx_k64 ? amx_pack_acts<64> : amx_pack_acts<32>)(xa, r, amx_a.data() + (r - rb) * xa.k);
    for (int p0 = 0; p0 < np; p0 += kP) {
      const int npg = std::min(kP, np - p0);
      const std::byte* src = panels + p0 * panel_stride;
      int64_t stride = panel_stride;
      if (ex.fn) {
        for (int p = 0; p < npg; ++p)
          ex.fn(panels + (p0 + p) * panel_stride, nb, expanded.data() + p * nb * ex.block_bytes);
        src = expanded.data();
        stride = nb * ex.block_bytes;
      }
      // The next panel group (or the first one again for the next row block) streams into the
      // cache over this group's row tiles, for the AMX tiles as for the VNNI / AVX2 ones below
      // (the first tile of a group otherwise waits for its panels from memory: Q8_0 prefill of
      // 512 tokens +3-7%, 5 of 5 in-process A/B runs on Zen 5; no change resolved with the AVX2
      // tiles).
      const int pn = p0 + kP < np ? p0 + kP : 0;
      const std::byte* next_group = panels + pn * panel_stride;
      const int64_t next_bytes = p0 + kP < np || re < r1 ? std::min(kP, np - pn) * panel_stride : 0;
      int64_t r = rb;
      if (amx && re - r >= 16) {
        if (amx_k64)  // the group's panels are contiguous: its blocks in one run
          expand_q4_k_scaled(panels + p0 * panel_stride, npg * nb, q4.data());
        else if (amx_q4)
          for (int p = 0; p < npg; ++p)
            expand_q4_k_codes(panels + (p0 + p) * panel_stride, nb, t == DType::Q5_K,
                              q4.data() + p * nb * 4096);
        const int64_t steps = (re - r) / 16 * npg * (xa.k / 32);
        PrefetchStream pf(next_group, next_bytes, steps);
        for (; r + 16 <= re; r += 16) {
          const int8_t* ar = amx_a.data() + (r - rb) * xa.k;
          float* yr = y + (r - r0) * ldy + 16 * p0;
          if (amx_k64)
            int8_tile_amx_q4_k64(xa, r, ar, src, stride, q4.data(), nb * 8192, npg, yr, ldy,
                                 ncols - 16 * p0, pf);
          else if (amx_q4)
            int8_tile_amx_q4_k(t, xa, r, ar, src, stride, q4.data(), nb * 4096, npg, yr, ldy,
                               ncols - 16 * p0, pf);
          else
            int8_tile_amx_q8_0(xa, r, ar, src, stride, npg, yr, ldy, ncols - 16 * p0, pf);
        }
      }
      // The AVX2 tiles step the prefetches a burst before each tile; the VNNI tiles once per
      // block (the bursts stalled on the misses in flight: 2% of a Q8_0 prefill by perf; per
      // block, Q8_0 prefill +1-4%, 3 of 3 in-process A/B runs on Zen 5).
      const int64_t row_tiles = (re - r + kR - 1) / kR;
      PrefetchStream pfv(next_group, next_bytes, avx2 ? row_tiles : row_tiles * nb);
      // The row block's full-height row tiles of a panel run in one call, then the short one
      // (512-token prefill, in-process A/B on Zen 4: Q8_0 452 -> 471 tok/s, Q4_K 419 -> 426;
      // the AVX2 tiles, forced on the same host, 0.5-2.5% faster matmuls).
      const int64_t full = (re - r) / kR;
      const int rest = static_cast<int>((re - r) % kR);
      for (int p = 0; p < npg; p += kVnniP) {
        const int pi = std::min(kVnniP, npg - p) - 1;
        float* yp = y + (r - r0) * ldy + 16 * (p0 + p);
        const int nc = ncols - 16 * (p0 + p);
        if (full > 0)
          tiles[kR - 1][pi](ex.tile, xa, r, src + p * stride, stride, yp, ldy, nc, 16, ex.bytes,
                            &pfv, full);
        if (rest > 0)
          tiles[rest - 1][pi](ex.tile, xa, r + full * kR, src + p * stride, stride,
                              yp + full * kR * ldy, ldy, nc, 16, ex.bytes, &pfv, 1);
      }
    }
  }
}

}  // namespace rw::detail
