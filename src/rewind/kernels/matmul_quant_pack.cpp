// Packing of quantised weights: ggml's blocks re-laid per 16-row panel (matmul_quant.h).
#include <type_traits>

#include "rewind/base/check.h"
#include "rewind/kernels/matmul_quant_internal.h"

namespace rw::detail {

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
// Lane j's d and sub-block scales of a Q6_K block.
void pack_q6_k_header(const BlockQ6_K& x, int j, uint8_t* o) {
  std::memcpy(o + 2 * j, &x.d, 2);
  for (int s = 0; s < 16; ++s) o[kQ6KScOff + s * kNR + j] = static_cast<uint8_t>(x.scales[s]);
}

inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(load_i32(p));
}
inline void store_u32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}

// Nibble group g of lane j from the codes u[0..256) of that lane's block: byte t holds code
// 8g + t in its low nibble and 8g + 4 + t in its high one (q4k_byte, q4k_shift).
inline uint32_t nibble_group(const uint8_t* u, int g) {
  return (load_u32(u + 8 * g) & 0x0F0F0F0Fu) | ((load_u32(u + 8 * g + 4) & 0x0F0F0F0Fu) << 4);
}

// The codes of one ggml block as bytes, value e at u[e]: Q4_K's (0..15), Q5_K's (0..31), or
// Q6_K's plus 32 (0..63).
void q4_k_codes(const BlockQ4_K& x, uint8_t* u) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      u[64 * c + l] = x.qs[32 * c + l] & 0xF;
      u[64 * c + 32 + l] = x.qs[32 * c + l] >> 4;
    }
}
void q5_k_codes(const BlockQ5_K& x, uint8_t* u) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      u[64 * c + l] =
          static_cast<uint8_t>((x.qs[32 * c + l] & 0xF) | (((x.qh[l] >> (2 * c)) & 1) << 4));
      u[64 * c + 32 + l] =
          static_cast<uint8_t>((x.qs[32 * c + l] >> 4) | (((x.qh[l] >> (2 * c + 1)) & 1) << 4));
    }
}
void q6_k_codes(const BlockQ6_K& x, uint8_t* u) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = x.ql + 64 * h;
    const uint8_t* qh = x.qh + 32 * h;
    uint8_t* o = u + 128 * h;
    for (int l = 0; l < 32; ++l) {
      o[l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
      o[32 + l] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      o[64 + l] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      o[96 + l] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

// pack_quant_panel_ref's layout for Q4_K, Q5_K and Q6_K, four code bytes at a time from each
// lane's block decoded into bytes (the reference places one code at a time).
void pack_k_panel(DType t, const std::byte* const* rows, int n_rows, int64_t k, std::byte* dst) {
  const int64_t nb = k / kQK_K, pb = quant_panel_block_bytes(t);
  std::memset(dst, 0, static_cast<size_t>(nb * pb));
  alignas(64) uint8_t u[kQK_K];
  for (int64_t b = 0; b < nb; ++b) {
    auto* o = reinterpret_cast<uint8_t*>(dst + b * pb);
    for (int j = 0; j < n_rows; ++j) {
      if (t == DType::Q6_K) {
        BlockQ6_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ6_K), sizeof x);
        pack_q6_k_header(x, j, o);
        q6_k_codes(x, u);
        for (int g = 0; g < 32; ++g) store_u32(o + q6k_lo_group(g) + 4 * j, nibble_group(u, g));
        // High-bit group s: bits 2c..2c+1 of byte t hold bits 4-5 of code 16s + 4c + t.
        for (int s = 0; s < 16; ++s) {
          uint32_t h = 0;
          for (int c = 0; c < 4; ++c)
            h |= ((load_u32(u + 16 * s + 4 * c) >> 4) & 0x03030303u) << (2 * c);
          store_u32(o + q6k_hi_group(s) + 4 * j, h);
        }
      } else if (t == DType::Q4_K) {
        BlockQ4_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ4_K), sizeof x);
        pack_k_header(x, j, o);
        q4_k_codes(x, u);
        for (int g = 0; g < 32; ++g)
          store_u32(o + k_lo_group(false, g) + 4 * j, nibble_group(u, g));
      } else {
        BlockQ5_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ5_K), sizeof x);
        pack_k_header(x, j, o);
        q5_k_codes(x, u);
        for (int g = 0; g < 32; ++g) store_u32(o + k_lo_group(true, g) + 4 * j, nibble_group(u, g));
        // High-bit group h: bit 2c + e of byte t holds bit 4 of code 8(4h + c) + 4e + t.
        for (int h = 0; h < 8; ++h) {
          uint32_t w = 0;
          for (int c = 0; c < 4; ++c)
            for (int e = 0; e < 2; ++e)
              w |= ((load_u32(u + 8 * (4 * h + c) + 4 * e) >> 4) & 0x01010101u) << (2 * c + e);
          store_u32(o + q5k_hi_group(h) + 4 * j, w);
        }
      }
    }
  }
}
// pack_quant_panel_ref's Q8_0 layout, one lane at a time: its blocks' d and 4-byte code groups
// straight from the row (no per-block copy or type test).
void pack_q8_0_panel(const std::byte* const* rows, int n_rows, int64_t k, std::byte* dst) {
  const int64_t nb = k / kQK8_0, pb = quant_panel_block_bytes(DType::Q8_0);
  std::memset(dst, 0, static_cast<size_t>(nb * pb));
  for (int j = 0; j < n_rows; ++j) {
    const auto* src = reinterpret_cast<const uint8_t*>(rows[j]);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* x = src + b * sizeof(BlockQ8_0);
      auto* o = reinterpret_cast<uint8_t*>(dst + b * pb);
      std::memcpy(o + 2 * j, x, 2);
      for (int g = 0; g < 8; ++g)
        store_u32(o + kQ8QOff + group_byte(4 * g, j), load_u32(x + 2 + 4 * g));
    }
  }
}

// Zeroes a panel, then visits every lane's blocks a row at a time (the rows read in order):
// place(x, j, o) writes lane j's share of packed block o from ggml block x.
template <class Block, class Place>
void pack_by_lane(DType t, const std::byte* const* rows, int n_rows, int64_t k, std::byte* dst,
                  Place place) {
  const int64_t nb = k / dtype_block_elems(t), pb = quant_panel_block_bytes(t);
  std::memset(dst, 0, static_cast<size_t>(nb * pb));
  for (int j = 0; j < n_rows; ++j)
    for (int64_t b = 0; b < nb; ++b) {
      Block x;
      std::memcpy(&x, rows[j] + b * sizeof(Block), sizeof x);
      place(x, j, reinterpret_cast<uint8_t*>(dst + b * pb));
    }
}

// pack_quant_panel_ref's layout for the 32-value blocks (Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1), four
// codes per word: nibble group g holds values 8g..8g+7 (low nibbles of qs for g < 2, high ones
// after), and byte t of the fifth-bit word holds in bit i the fifth bit of value 4i + t
// (q5k_hbit_byte, q5k_hbit_shift).
template <class Block>
void place_32(const Block& x, int j, uint8_t* o) {
  constexpr bool q5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool has_m = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  std::memcpy(o + 2 * j, &x.d, 2);
  if constexpr (has_m) std::memcpy(o + min_offset(q5) + 2 * j, &x.m, 2);
  for (int h = 0; h < 2; ++h) {  // qs[8h..8h+7]: values 8h.. (low), 16 + 8h.. (high)
    const uint32_t a = load_u32(x.qs + 8 * h), c = load_u32(x.qs + 8 * h + 4);
    store_u32(o + kQ8QOff + 64 * h + 4 * j, (a & 0x0F0F0F0Fu) | ((c & 0x0F0F0F0Fu) << 4));
    store_u32(o + kQ8QOff + 64 * (2 + h) + 4 * j, ((a >> 4) & 0x0F0F0F0Fu) | (c & 0xF0F0F0F0u));
  }
  if constexpr (q5) {
    const uint32_t qh = load_u32(x.qh);
    uint32_t w = 0;
    for (int tb = 0; tb < 4; ++tb) {  // bits tb, tb + 4, ..., tb + 28 gathered into a byte
      uint32_t v = (qh >> tb) & 0x11111111u;
      v = (v | v >> 3) & 0x03030303u;
      v = (v | v >> 6) & 0x000F000Fu;
      v = (v | v >> 12) & 0xFFu;
      w |= v << (8 * tb);
    }
    store_u32(o + kQ51HOff + 4 * j, w);
  }
}

// Two-bit fields of the codes u[0..256) in Q6_K's high-bit layout (q6k_hi_byte, q6k_hi_shift):
// group h's byte t holds in bits 2c..2c+1 the low two bits of code 16h + 4c + t.
void store_2bit_groups(const uint8_t* u, int j, uint8_t* o) {
  for (int h = 0; h < 16; ++h) {
    uint32_t w = 0;
    for (int c = 0; c < 4; ++c) w |= (load_u32(u + 16 * h + 4 * c) & 0x03030303u) << (2 * c);
    store_u32(o + 64 * h + 4 * j, w);
  }
}

// pack_quant_panel_ref's layout for Q2_K, Q3_K and IQ4_XS: the block's codes decoded into
// bytes, then placed four at a time.
template <class Block>
void place_small_k(const Block& x, int j, uint8_t* o) {
  alignas(64) uint8_t u[kQK_K];
  std::memcpy(o + 2 * j, &x.d, 2);
  if constexpr (std::is_same_v<Block, BlockIQ4_XS>) {
    for (int s = 0; s < 8; ++s) {
      o[kIQ4XSScOff + s * kNR + j] = static_cast<uint8_t>(static_cast<int8_t>(iq4xs_scale(x, s)));
      for (int l = 0; l < 16; ++l) {
        u[32 * s + l] = x.qs[16 * s + l] & 0xF;
        u[32 * s + 16 + l] = x.qs[16 * s + l] >> 4;
      }
    }
    for (int g = 0; g < 32; ++g) store_u32(o + kIQ4XSQOff + 64 * g + 4 * j, nibble_group(u, g));
    return;
  } else {
    // Value 128h + 32c + l: bits 2c..2c+1 of qs[32h + l]; Q3_K's bit 2 (hmask set: the code is
    // value + 4) is bit (e / 32) of hmask[e % 32].
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) u[128 * h + 32 * c + l] = (x.qs[32 * h + l] >> (2 * c)) & 3;
  }
  if constexpr (std::is_same_v<Block, BlockQ2_K>) {
    std::memcpy(o + 32 + 2 * j, &x.dmin, 2);
    for (int s = 0; s < 16; ++s) o[kQ2KScOff + s * kNR + j] = x.scales[s];
    store_2bit_groups(u, j, o + kQ2KQOff);
  } else if constexpr (std::is_same_v<Block, BlockQ3_K>) {
    for (int s = 0; s < 16; ++s)
      o[kQ6KScOff + s * kNR + j] = static_cast<uint8_t>(static_cast<int8_t>(q3k_scale(x, s)));
    for (int m = 0; m < 8; ++m)
      for (int l = 0; l < 32; ++l)
        u[32 * m + l] |= static_cast<uint8_t>(((x.hmask[l] >> m) & 1) << 2);
    store_2bit_groups(u, j, o + kQ3KLoOff);
    // Group h's byte t holds in bit i bit 2 of code 32h + 4i + t (q3k_hb_byte, q3k_hb_shift).
    for (int h = 0; h < 8; ++h) {
      uint32_t w = 0;
      for (int i = 0; i < 8; ++i) w |= ((load_u32(u + 32 * h + 4 * i) >> 2) & 0x01010101u) << i;
      store_u32(o + kQ3KHiOff + 64 * h + 4 * j, w);
    }
  }
}
}  // namespace

void pack_quant_panel(DType t, const std::byte* const* rows, int n_rows, int64_t k,
                      std::byte* dst) {
  switch (t) {
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return pack_k_panel(t, rows, n_rows, k, dst);
    case DType::Q8_0:
      return pack_q8_0_panel(rows, n_rows, k, dst);
    case DType::Q4_0:
      return pack_by_lane<BlockQ4_0>(t, rows, n_rows, k, dst, place_32<BlockQ4_0>);
    case DType::IQ4_NL:
      return pack_by_lane<BlockIQ4_NL>(t, rows, n_rows, k, dst, place_32<BlockIQ4_NL>);
    case DType::Q4_1:
      return pack_by_lane<BlockQ4_1>(t, rows, n_rows, k, dst, place_32<BlockQ4_1>);
    case DType::Q5_0:
      return pack_by_lane<BlockQ5_0>(t, rows, n_rows, k, dst, place_32<BlockQ5_0>);
    case DType::Q5_1:
      return pack_by_lane<BlockQ5_1>(t, rows, n_rows, k, dst, place_32<BlockQ5_1>);
    case DType::Q2_K:
      return pack_by_lane<BlockQ2_K>(t, rows, n_rows, k, dst, place_small_k<BlockQ2_K>);
    case DType::Q3_K:
      return pack_by_lane<BlockQ3_K>(t, rows, n_rows, k, dst, place_small_k<BlockQ3_K>);
    case DType::IQ4_XS:
      return pack_by_lane<BlockIQ4_XS>(t, rows, n_rows, k, dst, place_small_k<BlockIQ4_XS>);
    default:
      return pack_quant_panel_ref(t, rows, n_rows, k, dst);
  }
}

void pack_quant_panel_ref(DType t, const std::byte* const* rows, int n_rows, int64_t k,
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
        BlockQ5_1 x;                                      // Q5_0: the same bytes without m
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
          o[kQ51HOff + q5k_hbit_byte(e, j)] |=
              static_cast<uint8_t>((code >> 4) << q5k_hbit_shift(e));
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
          o[kQ2KQOff + q6k_hi_byte(e, j)] |=
              static_cast<uint8_t>(q2k_value(x, e) << q6k_hi_shift(e));
      } else if (t == DType::IQ4_XS) {
        BlockIQ4_XS x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockIQ4_XS), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int s = 0; s < 8; ++s)
          o[kIQ4XSScOff + s * kNR + j] =
              static_cast<uint8_t>(static_cast<int8_t>(iq4xs_scale(x, s)));
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
        pack_q6_k_header(x, j, o);
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

}  // namespace rw::detail
