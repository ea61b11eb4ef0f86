// Internal to the quantised matmul (the matmul_quant_*.cpp files): the packed blocks' byte
// layout, the helpers every path shares, and the kernels one file provides to another. Not a
// public API; matmul_quant.h has the layouts and the formula.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "rewind/kernels/matmul_quant.h"
#include "rewind/tensor/quant.h"

#define REWIND_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define REWIND_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define REWIND_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))
#define REWIND_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace rw::detail {

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
// Bytes a 256-value K-quant block takes as the AMX tiles' B operands: Q4_K's codes times its
// scales' two parts (expand_q4_k_scaled), Q6_K's times its scales' three digits
// (expand_q6_k_parts); each 64-value chunk holds one 16 x 64 B operand per part.
constexpr int64_t kAmxQ4KScaledBlock = 2 * kKBytesCodes;
constexpr int64_t kAmxQ6KPartsBlock = 3 * kKBytesCodes;
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
// Decode tiles (rows <= 2): the same per-lane dequantisation as the widen above, kept in
// registers and fed straight into the FMA chain (k in order), so the bits equal widen + the F32
// micro-kernel's; only the extra trip of the weights through scratch is saved.
__attribute__((always_inline)) inline __mmask16 lane_mask(int valid) {
  return valid >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (valid > 0 ? valid : 0)) - 1u);
}

constexpr int64_t kPrefetchBytes = 4096;       // AVX2 tiles: per panel stream, ahead of the loads
constexpr int64_t kPrefetchBytesL2 = 768;      // VNNI tiles
constexpr int64_t kPrefetchBytesL2Far = 2048;  // Q2_K / Q3_K / Q4_K VNNI tiles (Q5_K: none)
constexpr int64_t kPrefetchBytesL2Q6K = 3072;  // Q6_K VNNI tiles
constexpr int64_t kPrefetchBytesTall = 4096;   // VNNI tiles of 5-8 rows (batched decode)

// Prefetch for the int8 decode tiles (R <= 2: the weights stream from memory), ahead of the
// loads, covering every 64-byte line of a panel's blocks (headers and high bits too). asm, as
// GCC drops _mm_prefetch from code it vectorises. The VNNI tiles prefetch into L2 (prefetcht1)
// kPrefetchBytesL2 ahead, farther for the two panel streams of Q4_K and Q6_K (a single core
// reading at its share of the bandwidth needs some 4-6 KiB in flight) and for the compute-bound
// Q2_K / Q3_K tiles; the AVX2 tiles prefetcht0 further ahead.
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
// every line gets at least one. Constant offsets: prefetch_part's integer work per group cost
// the VNNI tiles most of their speed from cache.
// The 3-8-row tiles of batched decode (`tall`: no prefill stream) prefetch too, 5-8 rows further
// ahead (kPrefetchBytesTall): at 8 rows' pace of work a nearer distance left the reads waiting.
template <int R, int64_t Pb, int G, int64_t Ahead = kPrefetchBytesL2>
__attribute__((always_inline)) inline void prefetch_spread(const std::byte* blk, int g,
                                                           bool tall = false) {
  constexpr int64_t kStep = (Pb + G - 1) / G;  // the most bytes between two groups' offsets
  static_assert(kStep <= 128, "at most two prefetches a group");
  const auto a = reinterpret_cast<uintptr_t>(blk) + static_cast<uintptr_t>(g * Pb / G);
  if (R <= 2 || tall) {
    constexpr int64_t kAhead = R <= 4 ? Ahead : kPrefetchBytesTall;
    prefetch_line<true, kAhead>(a);
    if constexpr (kStep > 64) prefetch_line<true, kAhead>(a + kStep / 2);
  }
}

// Software prefetch (into L2) of the panel group a row block reads next, a few lines per tile
// step: a prefill's weights come from memory (a model's matrices are far larger than the
// caches), and without it the first row tile of each panel group waits on every line its tile
// loads miss (the hardware prefetchers see those loads late).
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
constexpr int kAvx2MaxP = 2;
// Up to this many rows (a batched decode step) the int8 dot runs the decode loop on the packed
// panels, in row tiles of up to 4 rows; more rows take the prefill's row blocks.
constexpr int kInt8BatchRows = 8;

// ---- what each file provides -------------------------------------------------------------------

// Widens one panel block to out[k * ld + j] (value k of lane j) as f32.
using WidenFn = void (*)(const std::byte*, float*, int64_t);
WidenFn widen_fn_scalar(DType t);  // matmul_quant_scalar.cpp
WidenFn widen_fn_avx512(DType t);  // matmul_quant_avx512.cpp

// Activation quantisation: one block of n values (scalar reference, AVX2), one row (AVX-512).
void quantize_block_scalar(const float* x, int n, int8_t* q, float* d);
REWIND_AVX2 void quantize_block_avx2(const float* x, int n, int8_t* q, float* d);
REWIND_AVX512 void quantize_row_avx512(const float* x, int64_t k, int n, int8_t* q, float* d,
                                       int32_t* s16);

// f32-dot decode tiles (AVX-512): [rows - 1][panels - 1].
using DecodeTileFn = void (*)(DType, const float*, int64_t, const std::byte*, int64_t, int64_t,
                              float*, int64_t, int);
extern const DecodeTileFn kDecodeTiles[kQuantDecodeRows][kQuantDecodePanels];

// int8-dot tiles: [rows - 1][panels - 1] (null where a path has no such tile).
extern const Int8TileFn kInt8Tiles[kInt8MaxR][kInt8MaxP];         // AVX-512 VNNI
extern const Int8TileFn kInt8TilesAvx2[kInt8MaxR][kInt8MaxP];     // AVX2
extern const Int8TileFn kInt8TilesAvxVnni[kInt8MaxR][kInt8MaxP];  // AVX-VNNI (AVX2's shapes)
// VNNI tiles of 5-8 rows x 1 panel (batched decode of Q4_K, Q6_K), [rows - 5].
extern const Int8TileFn kInt8TallTiles[kInt8BatchRows - 4];
// Whether kInt8TallTiles serve type t: the types whose codes take several operations to build.
// (Q8_0's are one xor; its 4-row tiles over 4 panels share each activation broadcast.)
constexpr bool has_tall_tile(DType t) {
  return t == DType::Q4_K || t == DType::Q6_K;
}

// Prefill expansions of nb panel blocks at src into dst (layouts at their definitions).
REWIND_AVX512 void expand_q6_k(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX512 void expand_q4_k_bytes(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX512 void expand_q5_k_bytes(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX512 void expand_q3_k_scaled(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX512 void expand_q2_k_bytes(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX512 void expand_iq4_xs_bytes(const std::byte* src, int64_t nb, std::byte* dst);
template <DType T, int Off>
REWIND_AVX512 void expand_nibble_bytes(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX2 void expand_iq4_nl_avx2(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX2 void expand_q6_k_avx2(const std::byte* src, int64_t nb, std::byte* dst);
REWIND_AVX2 void expand_q3_k_avx2(const std::byte* src, int64_t nb, std::byte* dst);

// AMX (matmul_quant_amx.cpp).
REWIND_AMX void amx_configure_k32();
REWIND_AMX void amx_configure_k64();
REWIND_AMX void int8_tile_amx_q8_0(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                   int64_t panel_stride, int np, float* y, int64_t ldy, int ncols,
                                   PrefetchStream& pf);
REWIND_AVX512 void expand_q4_k_codes(const std::byte* src, int64_t nb, bool q5, int8_t* dst);
REWIND_AMX void int8_tile_amx_q4_k(DType t, const QuantizedActs& xa, int64_t r0,
                                   const std::byte* panels, int64_t panel_stride,
                                   const int8_t* codes, int64_t codes_stride, int np, float* y,
                                   int64_t ldy, int ncols, PrefetchStream& pf);
REWIND_AVX512 void expand_q4_k_scaled(const std::byte* src, int64_t nb, int8_t* dst);
REWIND_AMX void int8_tile_amx_q4_k64(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                     int64_t panel_stride, const int8_t* scaled,
                                     int64_t scaled_stride, int np, float* y, int64_t ldy,
                                     int ncols, PrefetchStream& pf);
REWIND_AVX512 void expand_q6_k_parts(const std::byte* src, int64_t nb, int8_t* dst);
REWIND_AMX void int8_tile_amx_q6_k(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                   int64_t panel_stride, const int8_t* parts, int64_t parts_stride,
                                   int np, float* y, int64_t ldy, int ncols, PrefetchStream& pf);

}  // namespace rw::detail
