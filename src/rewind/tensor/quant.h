// ggml's block-quantised weight formats Q8_0, Q4_K, Q5_K, Q6_K, Q4_0, Q5_0, IQ4_NL, Q3_K, IQ4_XS,
// Q2_K, Q4_1 and Q5_1 (ggml-common.h), with their exact dequantisation, a reference quantiser and
// the exact transcoding of the narrower formats (header-only).
//
// Dequantisation follows ggml's definition to the bit (dequantize_row_* in ggml-quants.c):
//   Q8_0  w = d * q                       (d f16, q i8; the product is exact)
//   Q4_K  w = (d * sc) * q - (dmin * m)   (sc, m 6-bit; both products are exact, one rounding)
//   Q5_K  the same with q in [0, 31] (a fifth, high bit per value in qh)
//   Q6_K  w = (d * sc) * q                (sc i8, q in [-32, 31]; d * sc exact, one rounding)
//   Q4_0  w = d * q                       (q = 4-bit code - 8, in [-8, 7])
//   Q5_0  w = d * q                       (q = 5-bit code - 16, in [-16, 15])
//   IQ4_NL w = d * kIq4nlValues[code]     (a 4-bit index into 16 int8 values in [-127, 113])
//   Q3_K  w = (d * sc) * q                (sc = 6-bit code - 32 per 16 values, q in [-4, 3])
//   IQ4_XS w = (d * sc) * kIq4nlValues[code] (sc = 6-bit code - 32 per 32 values; d * sc exact)
//   Q2_K  w = (d * sc) * q - (dmin * m)   (sc, m 4-bit per 16 values, q in [0, 3]; as Q4_K)
//   Q4_1  w = d * q + m                   (d, m f16 per 32 values, q in [0, 15]; d * q exact)
//   Q5_1  the same with q in [0, 31] (a fifth, high bit per value in qh, as Q5_0's)
// Q4_0, Q5_0, IQ4_NL and Q3_K are Q8_0's and Q6_K's formulas with narrower integers, so a block of
// them re-written as Q8_0 (Q6_K) with the same d and integers (transcode_row) dequantises to the
// same bits, and its integer dot products are the same integers.
// so any engine that follows ggml's definition sees the same weights.
//
// Quantisers: Q8_0 is ggml's reference (amax / 127, round to nearest). Q4_K, Q5_K and Q6_K follow
// the reference's scheme (per-sub-block scale/min, 6-bit or 8-bit scales relative to an f16 super
// scale, values re-quantised with the quantised scales; Q2_K the same with 4-bit scales and mins)
// with a small search over the sub-block scale instead of ggml's weighted RMSE search: valid files,
// slightly different bits from llama-quantize. Q4_0, Q5_0, Q4_1 and Q5_1 are ggml's reference
// quantisers; IQ4_NL and IQ4_XS follow ggml's scale search without an importance matrix; Q3_K
// takes Q6_K's scheme with 3-bit codes (no RMSE search).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "rewind/base/check.h"
#include "rewind/tensor/dtype.h"

namespace rw {

constexpr int kQK8_0 = 32;
constexpr int kQK_K = 256;

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQK8_0];
};
struct BlockQ4_K {
  uint16_t d;          // f16 super-block scale for the sub-block scales
  uint16_t dmin;       // f16 super-block scale for the sub-block mins
  uint8_t scales[12];  // 8 scales + 8 mins, 6 bits each
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;             // f16 super-block scale for the sub-block scales
  uint16_t dmin;          // f16 super-block scale for the sub-block mins
  uint8_t scales[12];     // as Q4_K's
  uint8_t qh[kQK_K / 8];  // high bits: value 64c + l has bit 2c of qh[l], 64c + 32 + l bit 2c + 1
  uint8_t qs[kQK_K / 2];  // low 4 bits, as Q4_K's codes
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];  // low 4 bits
  uint8_t qh[kQK_K / 4];  // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16
};
struct BlockQ4_0 {
  uint16_t d;              // f16
  uint8_t qs[kQK8_0 / 2];  // value j: low nibble of qs[j]; value 16 + j: its high nibble
};
struct BlockQ4_1 {
  uint16_t d;              // f16
  uint16_t m;              // f16: the value of code 0
  uint8_t qs[kQK8_0 / 2];  // as Q4_0's
};
struct BlockQ5_1 {
  uint16_t d;              // f16
  uint16_t m;              // f16: the value of code 0
  uint8_t qh[4];           // as Q5_0's
  uint8_t qs[kQK8_0 / 2];  // low 4 bits, as Q4_0's
};
struct BlockQ5_0 {
  uint16_t d;              // f16
  uint8_t qh[4];           // bit j (little-endian u32) is the fifth bit of value j
  uint8_t qs[kQK8_0 / 2];  // low 4 bits, as Q4_0's
};
struct BlockIQ4_NL {
  uint16_t d;              // f16
  uint8_t qs[kQK8_0 / 2];  // indices into kIq4nlValues, as Q4_0's nibbles
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // value e: bit e / 32 of hmask[e % 32] (set: code - 0, clear: - 4)
  uint8_t
      qs[kQK_K / 4];  // low 2 bits: value e at bits 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32]
  uint8_t scales[12];  // 16 6-bit scales (stored + 32), low nibbles then high pairs
  uint16_t d;          // f16
};
struct BlockIQ4_XS {
  uint16_t d;                    // f16
  uint16_t scales_h;             // sub-block s: bits 2s..2s+1 are bits 4-5 of its 6-bit scale code
  uint8_t scales_l[kQK_K / 64];  // sub-block s: nibble s % 2 of byte s / 2 holds its bits 0-3
  uint8_t qs[kQK_K / 2];         // sub-block s (32 values): 16 bytes of IQ4_NL's nibble layout
};
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // sub-block s: scale in the low nibble, min in the high one
  uint8_t qs[kQK_K / 4];       // value 128h + 32c + l: bits 2c..2c+1 of qs[32h + l]
  uint16_t d;                  // f16 super-block scale for the scales
  uint16_t dmin;               // f16 super-block scale for the mins
};
// The block structs are kQuantTraits' blocks (tensor/dtype.h).
template <typename Block>
constexpr bool block_matches(DType t, int elems) {
  return sizeof(Block) == static_cast<size_t>(quant_traits(t).block_bytes) &&
         elems == quant_traits(t).block_elems;
}
static_assert(block_matches<BlockQ8_0>(DType::Q8_0, kQK8_0) &&
              block_matches<BlockQ4_K>(DType::Q4_K, kQK_K) &&
              block_matches<BlockQ5_K>(DType::Q5_K, kQK_K) &&
              block_matches<BlockQ6_K>(DType::Q6_K, kQK_K) &&
              block_matches<BlockQ4_0>(DType::Q4_0, kQK8_0) &&
              block_matches<BlockQ5_0>(DType::Q5_0, kQK8_0) &&
              block_matches<BlockIQ4_NL>(DType::IQ4_NL, kQK8_0) &&
              block_matches<BlockQ3_K>(DType::Q3_K, kQK_K) &&
              block_matches<BlockIQ4_XS>(DType::IQ4_XS, kQK_K) &&
              block_matches<BlockQ2_K>(DType::Q2_K, kQK_K) &&
              block_matches<BlockQ4_1>(DType::Q4_1, kQK8_0) &&
              block_matches<BlockQ5_1>(DType::Q5_1, kQK8_0));

// IQ4_NL's 16 values (ggml-common.h kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Sub-block j (0..7) scale and min of a Q4_K block.
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q5_K element e (0..255) of a block: its unsigned 5-bit code (sub-block e / 32).
inline int q5k_value(const BlockQ5_K& b, int e) {
  const int c = e / 64, l = e % 32, high = (e / 32) % 2;
  const int lo = high ? b.qs[32 * c + l] >> 4 : b.qs[32 * c + l] & 0xF;
  return lo | (((b.qh[l] >> (2 * c + high)) & 1) << 4);
}

// Q6_K element e (0..255) of a block as a signed 6-bit value and its sub-block (0..15).
inline int q6k_value(const BlockQ6_K& b, int e) {
  const int half = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
  const uint8_t* ql = b.ql + 64 * half;
  const uint8_t* qh = b.qh + 32 * half;
  const int lo = quarter == 0   ? (ql[l] & 0xF)
                 : quarter == 1 ? (ql[l + 32] & 0xF)
                 : quarter == 2 ? (ql[l] >> 4)
                                : (ql[l + 32] >> 4);
  const int hi = (qh[l] >> (2 * quarter)) & 3;
  return (lo | (hi << 4)) - 32;
}

// Value e (0..31) of a Q4_0 / Q5_0 / IQ4_NL block as its integer (the factor of d).
inline int nibble32(const uint8_t* qs, int e) {
  return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4;
}
inline int q4_0_value(const BlockQ4_0& b, int e) {
  return nibble32(b.qs, e) - 8;
}
inline int q4_1_code(const BlockQ4_1& b, int e) {
  return nibble32(b.qs, e);
}
// The 5-bit code of value e: its low 4 bits from qs, bit e of qh (a little-endian u32) on top.
inline int code5_32(const uint8_t* qh4, const uint8_t* qs, int e) {
  const uint32_t qh = static_cast<uint32_t>(qh4[0]) | static_cast<uint32_t>(qh4[1]) << 8 |
                      static_cast<uint32_t>(qh4[2]) << 16 | static_cast<uint32_t>(qh4[3]) << 24;
  return nibble32(qs, e) | static_cast<int>((qh >> e) & 1) << 4;
}
inline int q5_0_value(const BlockQ5_0& b, int e) {
  return code5_32(b.qh, b.qs, e) - 16;
}
inline int q5_1_code(const BlockQ5_1& b, int e) {
  return code5_32(b.qh, b.qs, e);
}
inline int iq4_nl_value(const BlockIQ4_NL& b, int e) {
  return kIq4nlValues[nibble32(b.qs, e)];
}
// Q3_K sub-block s (0..15) scale, signed, and value e (0..255) code, signed.
inline int q3k_scale(const BlockQ3_K& b, int s) {
  const int lo = s < 8 ? b.scales[s] & 0xF : b.scales[s - 8] >> 4;
  const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (lo | hi << 4) - 32;
}
inline int q3k_value(const BlockQ3_K& b, int e) {
  const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
  return low - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
}
// Q2_K element e (0..255) of a block: its 2-bit code (sub-block e / 16).
inline int q2k_value(const BlockQ2_K& b, int e) {
  return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
// IQ4_XS sub-block s (0..7) scale, signed (-32..31), and value e (0..255) as its integer.
inline int iq4xs_scale(const BlockIQ4_XS& b, int s) {
  const int lo = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF;
  const int hi = (b.scales_h >> (2 * s)) & 3;
  return (lo | hi << 4) - 32;
}
inline int iq4xs_value(const BlockIQ4_XS& b, int e) {
  return kIq4nlValues[nibble32(b.qs + 16 * (e / 32), e % 32)];
}

inline void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

inline void dequantize_row_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < 4; ++j) {  // 64 values: low nibbles of 32 bytes, then high nibbles
      uint8_t sc, m;
      q4k_scale_min(2 * j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4k_scale_min(2 * j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
    }
  }
}

inline void dequantize_row_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q5k_value(x[i], 32 * j + l)) - m1;
    }
  }
}

inline void dequantize_row_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int e = 0; e < kQK_K; ++e)
      y[i * kQK_K + e] =
          d * static_cast<float>(x[i].scales[e / 16]) * static_cast<float>(q6k_value(x[i], e));
  }
}

// Q4_0 / Q5_0 / IQ4_NL: float(integer) * d, as Q8_0 (ggml: x0 * d).
template <class Block, class Value>
inline void dequantize_row_32(const Block* x, float* y, int64_t n, Value value) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = static_cast<float>(value(x[i], j)) * d;
  }
}

// Q4_1 / Q5_1: float(code) * d + m (ggml's x0 * d + m; the product is exact, one rounding).
template <class Block, class Code>
inline void dequantize_row_min32(const Block* x, float* y, int64_t n, Code code) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = static_cast<float>(code(x[i], j)) * d + m;
  }
}

// Q3_K: dl = d * float(scale), then dl * float(code) (ggml's dequantize_row_q3_K).
inline void dequantize_row_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int e = 0; e < kQK_K; ++e)
      y[i * kQK_K + e] =
          d * static_cast<float>(q3k_scale(x[i], e / 16)) * static_cast<float>(q3k_value(x[i], e));
  }
}

// Q2_K: dl = d * (sc & 0xF), ml = dmin * (sc >> 4), then dl * q - ml (ggml's dequantize_row_q2_K).
inline void dequantize_row_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int sc = x[i].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      y[i * kQK_K + e] = dl * static_cast<float>(q2k_value(x[i], e)) - ml;
    }
  }
}

// IQ4_XS: dl = d * float(scale), then dl * float(value) (ggml's dequantize_row_iq4_xs).
inline void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int e = 0; e < kQK_K; ++e)
      y[i * kQK_K + e] = d * static_cast<float>(iq4xs_scale(x[i], e / 32)) *
                         static_cast<float>(iq4xs_value(x[i], e));
  }
}

// n elements of any float or quantised dtype to f32.
inline void convert_row_to_f32(const void* src, DType t, int64_t n, float* dst) {
  switch (t) {
    case DType::Q8_0:
      return dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case DType::Q4_K:
      return dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::Q5_K:
      return dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case DType::Q6_K:
      return dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::Q4_0:
      return dequantize_row_32(static_cast<const BlockQ4_0*>(src), dst, n, q4_0_value);
    case DType::Q5_0:
      return dequantize_row_32(static_cast<const BlockQ5_0*>(src), dst, n, q5_0_value);
    case DType::IQ4_NL:
      return dequantize_row_32(static_cast<const BlockIQ4_NL*>(src), dst, n, iq4_nl_value);
    case DType::Q3_K:
      return dequantize_row_q3_k(static_cast<const BlockQ3_K*>(src), dst, n);
    case DType::IQ4_XS:
      return dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n);
    case DType::Q2_K:
      return dequantize_row_q2_k(static_cast<const BlockQ2_K*>(src), dst, n);
    case DType::Q4_1:
      return dequantize_row_min32(static_cast<const BlockQ4_1*>(src), dst, n, q4_1_code);
    case DType::Q5_1:
      return dequantize_row_min32(static_cast<const BlockQ5_1*>(src), dst, n, q5_1_code);
    default:
      convert_to_f32(src, t, static_cast<size_t>(n), dst);
  }
}

// ---- quantisers ---------------------------------------------------------------------------

inline int nearest_int(float x) {
  return static_cast<int>(std::lrintf(x));
}

// The value of largest magnitude in x[0, n) (the first on a tie; 0 for all zeros), its magnitude
// in *amax.
inline float signed_absmax(const float* x, int n, float* amax) {
  float a = 0, v = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > a) a = std::fabs(x[j]), v = x[j];
  *amax = a;
  return v;
}

// Per 16-value sub-block of xb[0, 256) the scale -v / m that maps its value v of largest
// magnitude to -m (Q6_K, Q3_K); returns the scale of largest magnitude (0 when all are 0).
inline float subblock_scales_16(const float* xb, float m, float (&scales)[16]) {
  float max_scale = 0, max_abs_scale = 0, amax;
  for (int j = 0; j < 16; ++j) {
    scales[j] = -signed_absmax(xb + 16 * j, 16, &amax) / m;
    if (std::fabs(scales[j]) > max_abs_scale)
      max_abs_scale = std::fabs(scales[j]), max_scale = scales[j];
  }
  return max_scale;
}

inline void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[i * kQK8_0 + j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x[i * kQK8_0 + j] * id));
  }
}

// The scale and min (-lo, lo the smallest value or 0) of n values for codes 0..nmax: the scale
// (hi - lo) / (nmax - step / 4) of the smallest squared error over steps 0..8 (0 when all equal).
inline void subblock_scale_min(const float* v, int n, int nmax, float* scale, float* min) {
  const float fmax = static_cast<float>(nmax);
  float lo = v[0], hi = v[0];
  for (int l = 1; l < n; ++l) lo = std::min(lo, v[l]), hi = std::max(hi, v[l]);
  lo = std::min(lo, 0.0f);
  float best_s = (hi - lo) / fmax, best_err = INFINITY;
  for (int step = 0; step <= 8 && hi > lo; ++step) {  // scales of (hi - lo) / (nmax - ..)
    const float s = (hi - lo) / (fmax - 0.25f * static_cast<float>(step));
    float err = 0;
    for (int l = 0; l < n; ++l) {
      const int q = std::clamp(nearest_int((v[l] - lo) / s), 0, nmax);
      const float e = s * static_cast<float>(q) + lo - v[l];
      err += e * e;
    }
    if (err < best_err) best_err = err, best_s = s;
  }
  *scale = hi > lo ? best_s : 0.0f;
  *min = -lo;
}

// Q4_K (Q5_K): per 32-value sub-block an unsigned code of 0..nmax = 15 (31) with scale s and
// offset -min (min <= 0), the scale chosen by a short search minimising the squared error. The
// header of one block goes to y, its 256 codes to L; the caller packs them.
template <class Block>
inline void quantize_scales_mins_k(const float* xb, Block& y, int nmax, uint8_t (&L)[kQK_K]) {
  float scales[8], mins[8];
  for (int j = 0; j < 8; ++j) subblock_scale_min(xb + 32 * j, 32, nmax, &scales[j], &mins[j]);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j)
    max_scale = std::max(max_scale, scales[j]), max_min = std::max(max_min, mins[j]);
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
  }
  std::memset(y.scales, 0, sizeof y.scales);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      y.scales[j] = ls[j];
      y.scales[j + 4] = lm[j];
    } else {
      y.scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      y.scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      y.scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
  y.d = f32_to_f16(max_scale / 63.0f);
  y.dmin = f32_to_f16(max_min / 63.0f);
  // Re-quantise with the scales as they will be decoded.
  const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, y.scales, &sc, &m);
    const float dd = d * sc, dm = dmin * m;
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(
          dd != 0 ? std::clamp(nearest_int((xb[32 * j + l] + dm) / dd), 0, nmax) : 0);
  }
}

inline void quantize_row_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quantize_scales_mins_k(x + i * kQK_K, y[i], 15, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
  }
}

inline void quantize_row_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quantize_scales_mins_k(x + i * kQK_K, y[i], 31, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        y[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
  }
}

// Q2_K: subblock_scale_min per 16 values (codes 0..3), the scales and mins as 4-bit multiples of
// f16 super scales (the largest maps to 15), the codes chosen for them as decoded.
inline void quantize_row_q2_k(const float* x, BlockQ2_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16], mins[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      subblock_scale_min(xb + 16 * j, 16, 3, &scales[j], &mins[j]);
      max_scale = std::max(max_scale, scales[j]), max_min = std::max(max_min, mins[j]);
    }
    std::memset(&y[i], 0, sizeof y[i]);
    const float inv_scale = max_scale > 0 ? 15.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 15.0f / max_min : 0.0f;
    for (int j = 0; j < 16; ++j)
      y[i].scales[j] = static_cast<uint8_t>(std::min(15, nearest_int(inv_scale * scales[j])) |
                                            std::min(15, nearest_int(inv_min * mins[j])) << 4);
    y[i].d = f32_to_f16(max_scale / 15.0f);
    y[i].dmin = f32_to_f16(max_min / 15.0f);
    const float d = f16_to_f32(y[i].d), dmin = f16_to_f32(y[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int sc = y[i].scales[e / 16];
      const float dd = d * static_cast<float>(sc & 0xF), dm = dmin * static_cast<float>(sc >> 4);
      const int q = dd != 0 ? std::clamp(nearest_int((xb[e] + dm) / dd), 0, 3) : 0;
      y[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
    }
  }
}

// The 256 stored codes (value + 32, 0..63) of a Q6_K block into its ql and qh.
inline void pack_q6_k_codes(const uint8_t (&L)[kQK_K], BlockQ6_K& y) {
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = y.ql + 64 * h;
    uint8_t* qh = y.qh + 32 * h;
    const uint8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[l] =
          static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

// Q6_K: per 16-value sub-block a signed scale that maps the value of largest magnitude to -32
// (as ggml's make_qx_quants starts from), i8 sub-block scales relative to the f16 super scale.
inline void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16];
    const float max_scale = subblock_scales_16(xb, 32.0f, scales);
    std::memset(&y[i], 0, sizeof y[i]);
    if (max_scale == 0) continue;  // all zero: d = 0
    const float iscale = -128.0f / max_scale;
    y[i].d = f32_to_f16(1.0f / iscale);
    for (int j = 0; j < 16; ++j)
      y[i].scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    const float d = f16_to_f32(y[i].d);
    uint8_t L[kQK_K];
    for (int j = 0; j < 16; ++j) {
      const float dd = d * static_cast<float>(y[i].scales[j]);
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<uint8_t>(
            (dd != 0 ? std::clamp(nearest_int(xb[16 * j + l] / dd), -32, 31) : 0) + 32);
    }
    pack_q6_k_codes(L, y[i]);
  }
}

// The low 4 bits of 32 codes as ggml's 32-value blocks hold them: value j in the low nibble of
// qs[j], value 16 + j in its high nibble.
inline void pack_nibbles32(const uint8_t* c, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((c[j] & 0xF) | ((c[j + 16] & 0xF) << 4));
}

// Q4_0 and Q5_0: ggml's reference quantisers (quantize_row_q4_0_ref, quantize_row_q5_0_ref): the
// value of largest magnitude maps to code 0 (d = max / -8, / -16), codes truncate x / d + 8.5
// (+ 16.5) and clamp at the top.
template <int Bits>
inline void quantize_block_q4_5_0(const float* x, uint16_t* d_out, uint8_t (&codes)[kQK8_0]) {
  constexpr int half = 1 << (Bits - 1), top = (1 << Bits) - 1;
  float amax;
  const float max = signed_absmax(x, kQK8_0, &amax);
  const float d = max / -static_cast<float>(half);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  *d_out = f32_to_f16(d);
  for (int j = 0; j < kQK8_0; ++j)
    codes[j] = static_cast<uint8_t>(
        std::min(top, static_cast<int>(static_cast<int8_t>(x[j] * id + (half + 0.5f)))));
}

inline void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  uint8_t c[kQK8_0];
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    quantize_block_q4_5_0<4>(x + i * kQK8_0, &y[i].d, c);
    pack_nibbles32(c, y[i].qs);
  }
}

// Q4_1 and Q5_1: ggml's reference quantisers (quantize_row_q4_1_ref, quantize_row_q5_1_ref): m =
// the block's minimum, d = (max - min) / 15 (31), codes truncate (x - min) / d + 0.5 (Q4_1's
// clamped at 15, through an int8 as ggml's; Q5_1's through a uint8, unclamped).
template <int Bits>
inline void quantize_block_min32(const float* x, uint16_t* d_out, uint16_t* m_out,
                                 uint8_t (&codes)[kQK8_0]) {
  float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
  for (int j = 0; j < kQK8_0; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / static_cast<float>((1 << Bits) - 1);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  *d_out = f32_to_f16(d);
  *m_out = f32_to_f16(min);
  for (int j = 0; j < kQK8_0; ++j) {
    const float v = (x[j] - min) * id + 0.5f;
    codes[j] = Bits == 4
                   ? static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v))))
                   : static_cast<uint8_t>(v);
  }
}

inline void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  uint8_t c[kQK8_0];
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    quantize_block_min32<4>(x + i * kQK8_0, &y[i].d, &y[i].m, c);
    pack_nibbles32(c, y[i].qs);
  }
}

// The low nibbles of 32 5-bit codes into qs (pack_nibbles32) and their fifth bits into qh (bit
// j of the little-endian u32 for value j).
inline void pack_code5_32(const uint8_t (&c)[kQK8_0], uint8_t* qs, uint8_t* qh4) {
  pack_nibbles32(c, qs);
  uint32_t qh = 0;
  for (int j = 0; j < kQK8_0; ++j) qh |= static_cast<uint32_t>((c[j] >> 4) & 1) << j;
  for (int b = 0; b < 4; ++b) qh4[b] = static_cast<uint8_t>(qh >> (8 * b));
}

inline void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  uint8_t c[kQK8_0];
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    quantize_block_min32<5>(x + i * kQK8_0, &y[i].d, &y[i].m, c);
    pack_code5_32(c, y[i].qs, y[i].qh);
  }
}

inline void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  uint8_t c[kQK8_0];
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    quantize_block_q4_5_0<5>(x + i * kQK8_0, &y[i].d, c);
    pack_code5_32(c, y[i].qs, y[i].qh);
  }
}

// The index of the IQ4_NL value nearest v (the upper one on a tie, as ggml's best_index_int8):
// the number of midpoints between neighbouring values that v reaches (branch-free).
inline int iq4_nl_index(float v) {
  int n = 0;
  for (int k = 0; k < 15; ++k)
    n += v >= 0.5f * static_cast<float>(kIq4nlValues[k] + kIq4nlValues[k + 1]);
  return n;
}

// IQ4_NL's scale search for 32 values, ggml's scheme without an importance matrix (weights x^2):
// scales that map the value of largest magnitude to -127 + t for t in [-7, 7], each refined by
// the weighted least-squares d of its indices; returns the best (0 for all zeros).
inline float iq4_nl_best_scale(const float* xb) {
  float amax;
  const float max = signed_absmax(xb, kQK8_0, &amax);
  float best_d = 0, best = -1;
  for (int t = -7; t <= 7 && amax > 0; ++t) {
    const float id = (static_cast<float>(t) + kIq4nlValues[0]) / max;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kQK8_0; ++j) {
      const float q = kIq4nlValues[iq4_nl_index(id * xb[j])], w = xb[j] * xb[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2)
      best = sumqx * sumqx / sumq2, best_d = sumqx / sumq2;
  }
  return best_d;
}

// The 32 indices of xb for scale d (the scale as it will be decoded), packed as IQ4_NL's
// nibbles into qs[0, 16).
inline void iq4_nl_pack_indices(const float* xb, float d, uint8_t* qs) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  uint8_t c[kQK8_0];
  for (int j = 0; j < kQK8_0; ++j)
    c[j] = static_cast<uint8_t>(d != 0 ? iq4_nl_index(id * xb[j]) : 8);
  pack_nibbles32(c, qs);
}

// IQ4_NL: iq4_nl_best_scale per block, the indices re-chosen for the f16 d as stored.
inline void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float* xb = x + i * kQK8_0;
    y[i].d = f32_to_f16(iq4_nl_best_scale(xb));
    iq4_nl_pack_indices(xb, f16_to_f32(y[i].d), y[i].qs);
  }
}

// IQ4_XS: ggml's outer scheme over IQ4_NL's search: each 32-value sub-block's best scale, the
// one of largest magnitude mapped to -32 (d = -max / 32, f16), the others to the nearest 6-bit
// integer in [-32, 31]; the indices re-chosen for each sub-block's scale as decoded (d * sc).
inline void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[8], max_scale = 0, max_abs = 0;
    for (int s = 0; s < 8; ++s) {
      scales[s] = iq4_nl_best_scale(xb + 32 * s);
      if (std::fabs(scales[s]) > max_abs) max_abs = std::fabs(scales[s]), max_scale = scales[s];
    }
    std::memset(&y[i], 0, sizeof y[i]);
    y[i].d = f32_to_f16(-max_scale / 32.0f);
    const float d = f16_to_f32(y[i].d), id = d != 0 ? 1.0f / d : 0.0f;
    for (int s = 0; s < 8; ++s) {
      const int l = std::clamp(nearest_int(id * scales[s]), -32, 31);
      y[i].scales_l[s / 2] |= static_cast<uint8_t>(((l + 32) & 0xF) << (4 * (s % 2)));
      y[i].scales_h |= static_cast<uint16_t>(((l + 32) >> 4) << (2 * s));
      iq4_nl_pack_indices(xb + 32 * s, d * static_cast<float>(l), y[i].qs + 16 * s);
    }
  }
}

// Q3_K: as the Q6_K quantiser above with codes in [-4, 3] and 6-bit sub-block scales (ggml's
// outer scheme: the largest sub-block scale maps to -32); codes chosen for the scales as stored.
inline void quantize_row_q3_k(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16];
    const float max_scale = subblock_scales_16(xb, 4.0f, scales);
    std::memset(&y[i], 0, sizeof y[i]);
    int ls[16] = {};
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      y[i].d = f32_to_f16(1.0f / iscale);
      for (int j = 0; j < 16; ++j) ls[j] = std::clamp(nearest_int(iscale * scales[j]), -32, 31);
    }
    for (int j = 0; j < 16; ++j) {
      const int l = ls[j] + 32;
      if (j < 8)
        y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
      else
        y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      y[i].scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
    }
    const float d = f16_to_f32(y[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(ls[e / 16]);
      const int q = dl != 0 ? std::clamp(nearest_int(xb[e] / dl), -4, 3) : 0;
      const int c = q + 4;  // 0..7: bit 2 to hmask, bits 0-1 to qs
      if (c & 4) y[i].hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      y[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((c & 3) << (2 * ((e % 128) / 32)));
    }
  }
}

// ---- transcoding -------------------------------------------------------------------------

// The type transcode_row writes `from` as (kQuantTraits' transcoding): Q8_0 for Q4_0, Q5_0 and
// IQ4_NL, Q6_K for Q3_K.
inline DType transcoded_type(DType from) {
  return quant_traits(from).transcoding;
}
// n values of Q4_0, Q5_0, IQ4_NL or Q3_K re-written as transcoded_type(from) with the same d and
// integers: the same values to the bit (see the top of this file). Each has kernels of its own;
// their tests compare them with their Q8_0 (Q6_K) transcoding.
inline void transcode_row(const void* src, DType from, int64_t n, void* dst) {
  auto to_q8_0 = [&](const auto* x, auto value) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / kQK8_0; ++i) {
      y[i].d = x[i].d;
      for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(value(x[i], j));
    }
  };
  switch (from) {
    case DType::Q4_0:
      return to_q8_0(static_cast<const BlockQ4_0*>(src), q4_0_value);
    case DType::Q5_0:
      return to_q8_0(static_cast<const BlockQ5_0*>(src), q5_0_value);
    case DType::IQ4_NL:
      return to_q8_0(static_cast<const BlockIQ4_NL*>(src), iq4_nl_value);
    case DType::Q3_K: {
      const auto* x = static_cast<const BlockQ3_K*>(src);
      auto* y = static_cast<BlockQ6_K*>(dst);
      for (int64_t i = 0; i < n / kQK_K; ++i) {
        y[i].d = x[i].d;
        for (int s = 0; s < 16; ++s) y[i].scales[s] = static_cast<int8_t>(q3k_scale(x[i], s));
        uint8_t L[kQK_K];
        for (int e = 0; e < kQK_K; ++e) L[e] = static_cast<uint8_t>(q3k_value(x[i], e) + 32);
        pack_q6_k_codes(L, y[i]);
      }
      return;
    }
    default:
      REWIND_CHECK_MSG(false, "transcode_row: not Q4_0, Q5_0, IQ4_NL or Q3_K");
  }
}

// n f32 values to dtype t (F32, BF16, F16 or a quantised type); dst holds dtype_row_bytes(t, n).
inline void quantize_row(const float* src, DType t, int64_t n, void* dst) {
  switch (t) {
    case DType::Q8_0:
      return quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case DType::Q4_K:
      return quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::Q5_K:
      return quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::Q6_K:
      return quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
    case DType::Q4_0:
      return quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case DType::Q5_0:
      return quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case DType::IQ4_NL:
      return quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n);
    case DType::Q3_K:
      return quantize_row_q3_k(src, static_cast<BlockQ3_K*>(dst), n);
    case DType::IQ4_XS:
      return quantize_row_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n);
    case DType::Q2_K:
      return quantize_row_q2_k(src, static_cast<BlockQ2_K*>(dst), n);
    case DType::Q4_1:
      return quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case DType::Q5_1:
      return quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    default:
      REWIND_CHECK_MSG(false, "quantize_row: unsupported dtype");
  }
}

}  // namespace rw
