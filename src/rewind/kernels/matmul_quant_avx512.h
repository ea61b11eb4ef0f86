// Internal to the quantised matmul: the AVX-512 helpers that the AVX-512 / VNNI kernels
// (matmul_quant_avx512.cpp) and the AMX kernels (matmul_quant_amx.cpp) share.
#pragma once

#include "rewind/kernels/matmul_quant_internal.h"

namespace rw::detail {

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
// expansion loops g % 4 is a constant (the loops over a sub-block's 4 groups are unrolled).
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

}  // namespace rw::detail
