// ggml's block-quantised weight formats Q8_0, Q4_K, Q5_K and Q6_K (ggml-common.h), with their exact
// dequantisation and a reference quantiser (header-only).
//
// Dequantisation follows ggml's definition to the bit (dequantize_row_* in ggml-quants.c):
//   Q8_0  w = d * q                       (d f16, q i8; the product is exact)
//   Q4_K  w = (d * sc) * q - (dmin * m)   (sc, m 6-bit; both products are exact, one rounding)
//   Q5_K  the same with q in [0, 31] (a fifth, high bit per value in qh)
//   Q6_K  w = (d * sc) * q                (sc i8, q in [-32, 31]; d * sc exact, one rounding)
// so any engine that follows ggml's definition sees the same weights.
//
// Quantisers: Q8_0 is ggml's reference (amax / 127, round to nearest). Q4_K, Q5_K and Q6_K follow
// the reference's scheme (per-sub-block scale/min, 6-bit or 8-bit scales relative to an f16 super
// scale, values re-quantised with the quantised scales) with a small search over the sub-block
// scale instead of ggml's weighted RMSE search: valid files, slightly different bits from
// llama-quantize.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 &&
              sizeof(BlockQ6_K) == 210);

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
    default:
      convert_to_f32(src, t, static_cast<size_t>(n), dst);
  }
}

// ---- quantisers ---------------------------------------------------------------------------

inline int nearest_int(float x) {
  return static_cast<int>(std::lrintf(x));
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

// Q4_K (Q5_K): per 32-value sub-block an unsigned code of 0..nmax = 15 (31) with scale s and
// offset -min (min <= 0), the scale chosen by a short search minimising the squared error. The
// header of one block goes to y, its 256 codes to L; the caller packs them.
template <class Block>
inline void quantize_scales_mins_k(const float* xb, Block& y, int nmax, uint8_t (&L)[kQK_K]) {
  const float fmax = static_cast<float>(nmax);
  float scales[8], mins[8];
  for (int j = 0; j < 8; ++j) {
    const float* v = xb + 32 * j;
    float lo = v[0], hi = v[0];
    for (int l = 1; l < 32; ++l) lo = std::min(lo, v[l]), hi = std::max(hi, v[l]);
    lo = std::min(lo, 0.0f);
    float best_s = (hi - lo) / fmax, best_err = INFINITY;
    for (int step = 0; step <= 8 && hi > lo; ++step) {  // scales of (hi - lo) / (nmax - ..)
      const float s = (hi - lo) / (fmax - 0.25f * static_cast<float>(step));
      float err = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = std::clamp(nearest_int((v[l] - lo) / s), 0, nmax);
        const float e = s * static_cast<float>(q) + lo - v[l];
        err += e * e;
      }
      if (err < best_err) best_err = err, best_s = s;
    }
    scales[j] = hi > lo ? best_s : 0.0f;
    mins[j] = -lo;
  }
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

// Q6_K: per 16-value sub-block a signed scale that maps the value of largest magnitude to -32
// (as ggml's make_qx_quants starts from), i8 sub-block scales relative to the f16 super scale.
inline void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0, vmax = 0;
      for (int l = 0; l < 16; ++l) {
        const float v = xb[16 * j + l];
        if (std::fabs(v) > amax) amax = std::fabs(v), vmax = v;
      }
      scales[j] = amax > 0 ? -vmax / 32.0f : 0.0f;
      if (std::fabs(scales[j]) > max_abs_scale)
        max_abs_scale = std::fabs(scales[j]), max_scale = scales[j];
    }
    std::memset(&y[i], 0, sizeof y[i]);
    if (max_abs_scale == 0) continue;  // all zero: d = 0
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
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
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
