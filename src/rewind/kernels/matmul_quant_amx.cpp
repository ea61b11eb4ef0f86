// The AMX-INT8 kernels of the quantised matmul's int8 dot: Q8_0, Q4_K, Q5_K and Q6_K prefill tiles
// of 16 rows (the same bits as the VNNI tiles). Compiled under target attributes, chosen at run
// time.
#include "rewind/kernels/isa_cap.h"
#include "rewind/kernels/matmul_quant_avx512.h"

namespace rw::detail {

// GCC 12's avx512fintrin.h builds the unmasked conversions (cvtepi8_epi32, cvtepi32_ps,
// cvtph_ps) from their masked forms with an uninitialised pass-through operand and then warns
// about it in its own header; the operand is dead (all-ones mask).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// ---- AMX (prefill, Q8_0) ---------------------------------------------------------------------
// One TDPBSSD multiplies a tile of 16 activation rows x one Q8_0 block (16 x 32 code bytes) by the
// block's 8 code groups of one panel (8 x 64 bytes: the panel layout is the instruction's B
// operand as it is) into the exact int32 sums s of 16 rows x 16 lanes. The combine is the VNNI
// kernel's: acc = fma(dw * dx, float(s), acc) per output per block in k order, so the bits are
// the same as every other path's.

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

// The tile pipeline of the AMX kernels over n 32-value chunks of 16 rows: chunk u's activation
// codes at a + 32 u (16 rows of 32 B, K apart), its weight codes at wt(u) (8 x 64 B); combine(u, s,
// q) takes rows 4q..4q+3 of chunk u's exact sums s [16 rows][16 lanes] i32, for u = 0..n-1 in
// order. At step u the tile unit stores chunk u's sums (started two steps earlier) and starts
// chunk u + 2 while the vector units combine chunk u - 1, whose sums were stored a step earlier.
// Tiles 0, 2, 4 (sums, activations, weights) serve even chunks, 1, 3, 5 odd ones; the tile unit
// runs in order, so a tile is reloaded only after its store. The combine goes in quarters
// between the tile instructions (its first before the store), so the tile and vector units
// overlap: loads after a tile store in program order wait for it.
template <class WeightsAt, class Combine>
REWIND_AMX __attribute__((always_inline)) inline void amx_chunks(int64_t n, const int8_t* a,
                                                                 int64_t lda, WeightsAt wt,
                                                                 Combine& combine,
                                                                 PrefetchStream& pf) {
  alignas(64) int32_t sums[2][16 * 16];
#define REWIND_AMX_START(C, A, B, u) \
  do {                               \
    _tile_loadd(A, a + (u)*32, lda); \
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
    if (next) _tile_loadd(A, a + (u + 2) * 32, lda);               \
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
// of K.
REWIND_AMX void int8_tile_amx_q8_0(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                   int64_t panel_stride, int np, float* y, int64_t ldy, int ncols,
                                   PrefetchStream& pf) {
  const int64_t nb = xa.k / 32, pb = quant_panel_block_bytes(DType::Q8_0);
  const float* dx = xa.d.data() + r0 * nb;
  for (int p = 0; p < np; ++p) {
    const std::byte* pan = panels + p * panel_stride;
    // Block w: acc[r] = fma(dw * dx[r], float(s[r]), acc[r]). Quarter 0 (before the tile store)
    // converts the sums of rows 0..kEarly-1 into registers, quarters 1-3 apply them, and quarter
    // 3 also does the last rows straight from memory: 14 early rows and 16 accumulators fill the
    // 32 vector registers. Locals and constant loop bounds, so GCC keeps them in registers.
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
        nb, xa.q.data() + r0 * xa.k, xa.k, [pan, pb](int64_t u) { return pan + u * pb + kQ8QOff; },
        quarter, pf);
    for (int r = 0; r < 16; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r]);
  }
}

// ---- AMX (prefill, Q5_K) ---------------------------------------------------------------------
// The same tiles per 32-value sub-block: the B operand is the sub-block's codes expanded to
// bytes (expand_q4_k_codes), the exact sums go through the VNNI kernel's integer and float
// combine: s1 = sum_s sc[s] * is[s], s2 = sum_s m[s] * sum32[s] (16-bit pair products), then
// acc = fma(d * dx, float(s1), acc) and acc = fma(-(dmin * dx), float(s2), acc) per block.

REWIND_AVX512 void expand_q4_k_codes(const std::byte* src, int64_t nb, bool q5, int8_t* dst) {
  const int64_t pb = quant_panel_block_bytes(q5 ? DType::Q5_K : DType::Q4_K);
  for (int64_t b = 0; b < nb; ++b) expand_k_block_codes(src + b * pb, q5, dst + b * kKBytesCodes);
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
// from panels, codes from codes + p * codes_stride as expand_q4_k_codes lays them out). (Q4_K
// takes the scaled tiles below.)
REWIND_AMX void int8_tile_amx_q4_k(DType t, const QuantizedActs& xa, int64_t r0,
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
        nb * 8, xa.q.data() + r0 * xa.k, xa.k, [cp](int64_t u) { return cp + u * 512; }, quarter,
        pf);
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
      int8_t* o = dst + b * kAmxQ4KScaledBlock + (sb / 2) * 2048 + (sb % 2) * 512;
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
// scaled codes from scaled + p * scaled_stride as expand_q4_k_scaled lays them out). Block b's 8
// products start at step b, its sums are stored at step b + 1 (before block b + 1's products,
// which the tile unit would otherwise finish first) and combined right after, beside block
// b + 1's products.
REWIND_AMX void int8_tile_amx_q4_k64(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                     int64_t panel_stride, const int8_t* scaled,
                                     int64_t scaled_stride, int np, float* y, int64_t ldy,
                                     int ncols, PrefetchStream& pf) {
  const int64_t nb = xa.k / 256, pb = quant_panel_block_bytes(DType::Q4_K);
  const int8_t* a = xa.q.data() + r0 * xa.k;  // the rows' codes, row stride K
  alignas(64) int32_t sums[2][16 * 16];
  for (int p = 0; p < np; ++p) {
    const std::byte* pan = panels + p * panel_stride;
    const int8_t* sp = scaled + p * scaled_stride;
    __m512 acc[16];
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
#define REWIND_AMX_BLOCK(CL, CH, b)                              \
  do {                                                           \
    _tile_zero(CL);                                              \
    _tile_zero(CH);                                              \
    for (int j = 0; j < 4; ++j) {                                \
      const int8_t* bj = sp + (b)*kAmxQ4KScaledBlock + j * 2048; \
      _tile_loadd(4, a + ((b)*4 + j) * 64, xa.k);                \
      _tile_loadd(6, bj, 64);                                    \
      _tile_dpbssd(CL, 4, 6);                                    \
      _tile_loadd(7, bj + 1024, 64);                             \
      _tile_dpbssd(CH, 4, 7);                                    \
    }                                                            \
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

// ---- AMX (prefill, Q6_K, scales in the tiles) ----------------------------------------------
// A Q6_K sub-block scale sc (signed 8 bits) is 64 d2 + 8 d1 + d0 with every digit in [-3, 4]
// (a complete residue system mod 8; three digits reach [-219, 292]), and a code q (-32..31)
// times a digit lies in [-128, 124]: an int8. So the B operands carry the scales as three
// parts q * d0, q * d1, q * d2, and a block's 256 values run as 4 TDPBSSDs of 64 values per
// part into three int32 sums S0, S1, S2 whose 64 S2 + 8 S1 + S0 is the VNNI kernel's
// s = sum_s sc[s] * sum q * x exactly (the same integer, hence the same bits; |S_i| < 2^23, so
// nothing overflows), with 3 tile stores and one combine per block.

// The parts of nb Q6_K panel blocks: block b, chunk j (values 64j..64j+63), part i at
// dst + 12288 b + 3072 j + 1024 i (16 rows of 64 B, the tile's B layout).
REWIND_AVX512 void expand_q6_k_parts(const std::byte* src, int64_t nb, int8_t* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::Q6_K);
  const __m512i three = _mm512_set1_epi32(3), seven = _mm512_set1_epi32(7);
  const __m512i c32 = _mm512_set1_epi8(32),
                hi_bytes = _mm512_set1_epi16(static_cast<short>(0xFF00));
  constexpr __mmask64 kOdd = 0xAAAAAAAAAAAAAAAAull;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    for (int sb = 0; sb < 16; ++sb) {
      const __m512i sc = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6KScOff + 16 * sb)));
      // Digits in [-3, 4]: d = ((v + 3) & 7) - 3, then v = (v - d) / 8 (exact).
      __m512i d[3], v = sc;
      for (int i = 0; i < 3; ++i) {
        d[i] = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(v, three), seven), three);
        v = _mm512_srai_epi32(_mm512_sub_epi32(v, d[i]), 3);
        // The digit in both 16-bit halves of its lane, for vpmullw.
        d[i] = _mm512_or_si512(_mm512_and_si512(d[i], _mm512_set1_epi32(0xFFFF)),
                               _mm512_slli_epi32(d[i], 16));
      }
      for (int i = 0; i < 4; ++i) {
        const int g = 4 * sb + i;
        // q * d per byte: the low byte of a 16-bit product is the even byte's product mod 256,
        // and with the even byte cleared the high byte is the odd one's; each fits an int8.
        const __m512i q = _mm512_sub_epi8(q6_k_codes(blk, g), c32);
        const __m512i qo = _mm512_and_si512(q, hi_bytes);
        int8_t* o = dst + b * kAmxQ6KPartsBlock + (g / 16) * 3072 + (g % 16) * 64;
        for (int part = 0; part < 3; ++part)
          _mm512_storeu_si512(o + 1024 * part,
                              _mm512_mask_blend_epi8(kOdd, _mm512_mullo_epi16(q, d[part]),
                                                     _mm512_mullo_epi16(qo, d[part])));
      }
    }
  }
}

// y[r, c] for the 16 rows from r0 and c < ncols against np Q6_K panels (d from panels, the
// parts from parts + p * parts_stride as expand_q6_k_parts lays them out). Tiles
// (amx_configure_k64): 0-2 the sums of even blocks, 3-5 of odd ones, 6 activations, 7 the parts.
// Block b's 12 products start at step b, its sums are stored at step b + 1 before block b + 1's
// products and combined beside them.
REWIND_AMX void int8_tile_amx_q6_k(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                   int64_t panel_stride, const int8_t* parts, int64_t parts_stride,
                                   int np, float* y, int64_t ldy, int ncols, PrefetchStream& pf) {
  const int64_t nb = xa.k / 256, pb = quant_panel_block_bytes(DType::Q6_K);
  const float* dx = xa.d.data() + r0 * nb;
  const int8_t* a = xa.q.data() + r0 * xa.k;  // the rows' codes, row stride K
  alignas(64) int32_t sums[3][16 * 16];
  for (int p = 0; p < np; ++p) {
    const std::byte* pan = panels + p * panel_stride;
    const int8_t* sp = parts + p * parts_stride;
    __m512 acc[16];
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
#define REWIND_AMX_BLOCK(C0, C1, C2, b)                         \
  do {                                                          \
    _tile_zero(C0);                                             \
    _tile_zero(C1);                                             \
    _tile_zero(C2);                                             \
    for (int j = 0; j < 4; ++j) {                               \
      const int8_t* bj = sp + (b)*kAmxQ6KPartsBlock + j * 3072; \
      _tile_loadd(6, a + ((b)*4 + j) * 64, xa.k);               \
      _tile_loadd(7, bj, 64);                                   \
      _tile_dpbssd(C0, 6, 7);                                   \
      _tile_loadd(7, bj + 1024, 64);                            \
      _tile_dpbssd(C1, 6, 7);                                   \
      _tile_loadd(7, bj + 2048, 64);                            \
      _tile_dpbssd(C2, 6, 7);                                   \
    }                                                           \
  } while (0)
    REWIND_AMX_BLOCK(0, 1, 2, 0);
    for (int64_t b = 0; b < nb; ++b) {
      if (b % 2 == 0) {
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        _tile_stored(2, sums[2], 64);
        if (b + 1 < nb) REWIND_AMX_BLOCK(3, 4, 5, b + 1);
      } else {
        _tile_stored(3, sums[0], 64);
        _tile_stored(4, sums[1], 64);
        _tile_stored(5, sums[2], 64);
        if (b + 1 < nb) REWIND_AMX_BLOCK(0, 1, 2, b + 1);
      }
      pf.step();
      // Block b: s = 64 S2 + 8 S1 + S0, then the VNNI kernel's fma(dw * dx, float(s), acc).
      const __m512 dw = load_f16x16(pan + b * pb);
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        const __m512i s21 =
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[2] + 16 * r), 3),
                             _mm512_load_si512(sums[1] + 16 * r));
        const __m512i s =
            _mm512_add_epi32(_mm512_slli_epi32(s21, 3), _mm512_load_si512(sums[0] + 16 * r));
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[r * nb + b])),
                                 _mm512_cvtepi32_ps(s), acc[r]);
        // Block b + 2's parts (the next panel's first past the end) into L1, 768 B a row: the
        // tile loads of the parts otherwise wait on L2.
        const int8_t* nx = sp + (b + 2) * kAmxQ6KPartsBlock + r * 768;
        for (int l = 0; l < 12; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(nx + 64 * l), _MM_HINT_T0);
      }
    }
#undef REWIND_AMX_BLOCK
    for (int r = 0; r < 16; ++r)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r]);
  }
}

#pragma GCC diagnostic pop

}  // namespace rw::detail
