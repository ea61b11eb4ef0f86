// Element types of stored weights and their scalar conversions (header-only).
// BF16 -> F32 is exact (a shift); F32 -> BF16 rounds to nearest even (NaN kept quiet).
// Q8_0, Q4_K, Q5_K, Q6_K are ggml's block-quantised formats (tensor/quant.h): they have no size per
// element (dtype_size() is 0); use dtype_row_bytes(). So are Q4_0, Q5_0, IQ4_NL, Q3_K, IQ4_XS,
// Q2_K, Q4_1 and Q5_1 (ggml's, with kernels of their own).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace rw {

enum class DType : uint8_t {
  F32,
  BF16,
  F16,
  F64,
  I32,
  I64,
  U8,
  I8,
  BOOL,
  Q8_0,
  Q4_K,
  Q6_K,
  Q5_K,
  Q4_0,
  Q5_0,
  IQ4_NL,
  Q3_K,
  IQ4_XS,
  Q2_K,
  Q4_1,
  Q5_1
};

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::F64: case DType::I64: return 8;
    case DType::U8: case DType::I8: case DType::BOOL: return 1;
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::Q3_K:
    case DType::IQ4_XS:
    case DType::Q2_K:
    case DType::Q4_1:
    case DType::Q5_1:
      return 0;
  }
  return 0;
}

inline bool dtype_is_quant(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K ||
         t == DType::Q4_0 || t == DType::IQ4_NL || t == DType::Q3_K || t == DType::IQ4_XS ||
         t == DType::Q2_K || t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q5_0;
}
// Elements per block (1 for plain types) and bytes per block (ggml-common.h block structs).
inline int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::Q4_1:
    case DType::Q5_1:
      return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q3_K:
    case DType::IQ4_XS:
    case DType::Q2_K:
      return 256;
    default:
      return 1;
  }
}
inline int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::Q8_0:
      return 34;
    case DType::Q4_K:
      return 144;
    case DType::Q5_K:
      return 176;
    case DType::Q6_K:
      return 210;
    case DType::Q4_0:
    case DType::IQ4_NL:
      return 18;
    case DType::Q5_0:
      return 22;
    case DType::Q3_K:
      return 110;
    case DType::IQ4_XS:
      return 136;
    case DType::Q2_K:
      return 84;
    case DType::Q4_1:
      return 20;
    case DType::Q5_1:
      return 24;
    default:
      return static_cast<int64_t>(dtype_size(t));
  }
}
// Bytes of n consecutive elements (n a multiple of the block for quantised types).
inline size_t dtype_row_bytes(DType t, int64_t n) {
  return static_cast<size_t>(n / dtype_block_elems(t) * dtype_block_bytes(t));
}

inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::BOOL: return "BOOL";
    case DType::Q8_0:
      return "Q8_0";
    case DType::Q4_K:
      return "Q4_K";
    case DType::Q5_K:
      return "Q5_K";
    case DType::Q6_K:
      return "Q6_K";
    case DType::Q4_0:
      return "Q4_0";
    case DType::Q5_0:
      return "Q5_0";
    case DType::IQ4_NL:
      return "IQ4_NL";
    case DType::Q3_K:
      return "Q3_K";
    case DType::IQ4_XS:
      return "IQ4_XS";
    case DType::Q2_K:
      return "Q2_K";
    case DType::Q4_1:
      return "Q4_1";
    case DType::Q5_1:
      return "Q5_1";
  }
  return "?";
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xffu) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (((u >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

// Convert n elements of a stored tensor to f32. Only float types are accepted.
inline void convert_to_f32(const void* src, DType t, size_t n, float* dst) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F64: {
      auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default:
      break;
  }
}

inline bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

}  // namespace rw
