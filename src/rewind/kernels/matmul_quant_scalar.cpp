// The scalar reference of the quantised matmul: the widen to f32 and the int8 dot's formula
// (matmul_quant.h), one output at a time. Every SIMD path gives these bits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "rewind/kernels/matmul_quant_internal.h"

namespace rw::detail {

namespace {

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
    for (int k = 0; k < 32; ++k)
      out[k * ld + j] = static_cast<float>(min_code(Q5, o, k, j)) * d + m;
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

}  // namespace

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

WidenFn widen_fn_scalar(DType t) {
  switch (t) {
    case DType::Q8_0:
      return widen_q8_0_scalar;
    case DType::Q4_0:
      return widen_nibbles_scalar<DType::Q4_0>;
    case DType::IQ4_NL:
      return widen_nibbles_scalar<DType::IQ4_NL>;
    case DType::Q5_0:
      return widen_nibbles_scalar<DType::Q5_0>;
    case DType::Q4_1:
      return widen_min_scalar<false>;
    case DType::Q5_1:
      return widen_min_scalar<true>;
    case DType::Q4_K:
      return widen_k_scalar<false>;
    case DType::Q5_K:
      return widen_k_scalar<true>;
    case DType::Q6_K:
      return widen_q6_k_scalar<false>;
    case DType::Q3_K:
      return widen_q6_k_scalar<true>;
    case DType::IQ4_XS:
      return widen_iq4_xs_scalar;
    case DType::Q2_K:
      return widen_q2_k_scalar;
    default:
      return nullptr;
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

}  // namespace rw::detail
