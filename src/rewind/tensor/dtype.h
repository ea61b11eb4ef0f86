// Element types of stored weights and their scalar conversions (header-only).
// BF16 -> F32 is exact (a shift); F32 -> BF16 rounds to nearest even (NaN kept quiet).
// Q8_0 to Q5_1 are ggml's block-quantised formats (tensor/quant.h): they have no size per element
// (dtype_size() is 0); use dtype_row_bytes(). Their facts (block shape, names, file codes, packed
// layout, kernels) are one table, kQuantTraits below, which every place reads.
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

// ---- the quantised formats' facts -------------------------------------------------------------

// Which kernels a quantised format has (QuantTraits::kernels).
enum QuantKernel : uint8_t {
  kQkWiden = 1 << 0,       // f32 dot: widen to f32 panels, scalar and AVX-512
  kQkDecodeF32 = 1 << 1,   // f32 dot: AVX-512 decode tiles (kernels/matmul_quant.h)
  kQkInt8Vnni = 1 << 2,    // int8 dot: AVX-512 VNNI decode and prefill tiles
  kQkInt8Avx2 = 1 << 3,    // int8 dot: AVX2 decode and prefill tiles
  kQkAmxPrefill = 1 << 4,  // int8 dot: AMX-INT8 prefill tiles of 16 rows
};
constexpr uint8_t kQkEvery = kQkWiden | kQkDecodeF32 | kQkInt8Vnni | kQkInt8Avx2;

// One row per block-quantised format: every fact the code keys on the format is read from here
// (the storage layer: block shape, names, file codes; the matmul: the packed panel layout of
// kernels/matmul_quant.h and which kernels exist), rather than spelled out per format at each
// use. Code that runs different functions per format still switches on the DType; the numbers
// come from this table.
struct QuantTraits {
  DType type;
  std::string_view name;    // as dtype_name and ggml spell it ("Q4_K")
  std::string_view arg;     // as command lines spell it (convert --type, matmul_bench --dtype)
  int block_elems;          // values per ggml block
  int block_bytes;          // bytes per ggml block (ggml-common.h; tensor/quant.h's Block*)
  uint32_t ggml_type;       // ggml's type code (io/gguf.h GgmlType)
  int llama_file_type;      // general.file_type of a file of this format (llama.cpp's ftype)
  int panel_block_bytes;    // bytes of one k-block of a packed panel of 16 rows (matmul_quant.h)
  DType transcoding;        // the format whose int8-dot integers it gives, as its transcoding to
                            // that format would (itself where none does: matmul_quant.h)
  int act_block;            // values per block of its quantised activations (the int8 dot)
  uint8_t kernels;          // QuantKernel flags
  int vnni_decode_panels;   // panel streams per VNNI decode tile (1-2 rows)
  int vnni_prefill_rows;    // rows per VNNI prefill tile
  int vnni_prefill_panels;  // panels per VNNI prefill tile (and per panel group)
};

// In DType order from Q8_0 (checked below). Each row: type, name, arg, block_elems, block_bytes,
// ggml_type, llama_file_type, panel_block_bytes, transcoding, act_block, kernels,
// vnni_decode_panels, vnni_prefill_rows, vnni_prefill_panels.
inline constexpr QuantTraits kQuantTraits[] = {
    {DType::Q8_0, "Q8_0", "q8_0", 32, 34, 8, 7, 32 + 32 * 16, DType::Q8_0, 32,
     kQkEvery | kQkAmxPrefill, 4, 4, 3},
    {DType::Q4_K, "Q4_K", "q4_k", 256, 144, 12, 14, 32 + 32 + 128 + 128 + 128 * 16, DType::Q4_K,
     256, kQkEvery | kQkAmxPrefill, 2, 4, 2},
    {DType::Q6_K, "Q6_K", "q6_k", 256, 210, 14, 18, 32 + 256 + 128 * 16 + 64 * 16, DType::Q6_K, 256,
     kQkEvery | kQkAmxPrefill, 2, 4, 2},
    {DType::Q5_K, "Q5_K", "q5_k", 256, 176, 13, 16, 32 + 32 + 128 + 128 + 128 * 16 + 32 * 16,
     DType::Q5_K, 256, kQkEvery | kQkAmxPrefill, 2, 4, 2},
    // Q4_0's own VNNI prefill tile is 6 x 2 (its nibble splits grow with the panels).
    {DType::Q4_0, "Q4_0", "q4_0", 32, 18, 2, 2, 32 + 16 * 16, DType::Q8_0, 32, kQkEvery, 4, 6, 2},
    // Q5_0 and IQ4_NL: the VNNI prefill expands them to Q8_0 blocks for Q8_0's tiles.
    {DType::Q5_0, "Q5_0", "q5_0", 32, 22, 6, 8, 32 + 16 * 16 + 64, DType::Q8_0, 32, kQkEvery, 4, 4,
     3},
    {DType::IQ4_NL, "IQ4_NL", "iq4_nl", 32, 18, 20, 25, 32 + 16 * 16, DType::Q8_0, 32, kQkEvery, 4,
     4, 3},
    // llama.cpp's Q3_K_S (all Q3_K).
    {DType::Q3_K, "Q3_K", "q3_k", 256, 110, 11, 11, 32 + 256 + 64 * 16 + 32 * 16, DType::Q6_K, 256,
     kQkEvery, 4, 4, 2},
    {DType::IQ4_XS, "IQ4_XS", "iq4_xs", 256, 136, 23, 30, 32 + 128 + 128 * 16, DType::IQ4_XS, 256,
     kQkEvery, 4, 4, 2},
    // llama.cpp's Q2_K (mostly Q2_K).
    {DType::Q2_K, "Q2_K", "q2_k", 256, 84, 10, 10, 32 + 32 + 256 + 64 * 16, DType::Q2_K, 256,
     kQkEvery, 4, 4, 2},
    {DType::Q4_1, "Q4_1", "q4_1", 32, 20, 3, 3, 32 + 16 * 16 + 32, DType::Q4_1, 32, kQkEvery, 4, 4,
     3},
    {DType::Q5_1, "Q5_1", "q5_1", 32, 24, 7, 9, 32 + 16 * 16 + 64 + 32, DType::Q5_1, 32, kQkEvery,
     4, 4, 3},
};
inline constexpr int kFirstQuant = static_cast<int>(DType::Q8_0);
inline constexpr int kNumQuant = static_cast<int>(sizeof kQuantTraits / sizeof kQuantTraits[0]);
static_assert(
    [] {
      for (int i = 0; i < kNumQuant; ++i) {
        const QuantTraits& q = kQuantTraits[i];
        if (static_cast<int>(q.type) != kFirstQuant + i) return false;
        if (q.name.size() != q.arg.size()) return false;
        for (size_t c = 0; c < q.name.size(); ++c) {
          const char u = q.name[c];
          if (q.arg[c] != (u >= 'A' && u <= 'Z' ? static_cast<char>(u - 'A' + 'a') : u))
            return false;
        }
        if (q.act_block != 32 && q.act_block != 256) return false;
      }
      return static_cast<int>(DType::Q5_1) == kFirstQuant + kNumQuant - 1;
    }(),
    "kQuantTraits: one row per quantised DType in enum order, arg the lower-case name");

constexpr bool dtype_is_quant(DType t) {
  const int i = static_cast<int>(t) - kFirstQuant;
  return i >= 0 && i < kNumQuant;
}
// The row of a quantised format (t must be one: dtype_is_quant).
constexpr const QuantTraits& quant_traits(DType t) {
  return kQuantTraits[static_cast<int>(t) - kFirstQuant];
}
// Whether quantised format t has kernel k (false for a type that is not quantised).
constexpr bool quant_has_kernel(DType t, QuantKernel k) {
  return dtype_is_quant(t) && (quant_traits(t).kernels & k) != 0;
}
// The row whose arg is s, or null.
constexpr const QuantTraits* quant_traits_by_arg(std::string_view s) {
  for (const QuantTraits& q : kQuantTraits)
    if (q.arg == s) return &q;
  return nullptr;
}
// The row of ggml type code `code`, or null (a type rewind does not store).
constexpr const QuantTraits* quant_traits_by_ggml(uint32_t code) {
  for (const QuantTraits& q : kQuantTraits)
    if (q.ggml_type == code) return &q;
  return nullptr;
}

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::U8:
    case DType::I8:
    case DType::BOOL:
      return 1;
    default:
      return 0;  // quantised: no size per element
  }
}

// Elements per block (1 for plain types) and bytes per block (kQuantTraits).
inline int64_t dtype_block_elems(DType t) {
  return dtype_is_quant(t) ? quant_traits(t).block_elems : 1;
}
inline int64_t dtype_block_bytes(DType t) {
  return dtype_is_quant(t) ? quant_traits(t).block_bytes : static_cast<int64_t>(dtype_size(t));
}
// Bytes of n consecutive elements (n a multiple of the block for quantised types).
inline size_t dtype_row_bytes(DType t, int64_t n) {
  return static_cast<size_t>(n / dtype_block_elems(t) * dtype_block_bytes(t));
}

inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::F64:
      return "F64";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::U8:
      return "U8";
    case DType::I8:
      return "I8";
    case DType::BOOL:
      return "BOOL";
    default:
      return dtype_is_quant(t) ? quant_traits(t).name : "?";
  }
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
  if (((u >> 23) & 0xffu) == 0xffu)
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
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
