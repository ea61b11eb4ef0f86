// Internal to matmul_quant_avx2.cpp and matmul_quant_avxvnni.cpp, each of which includes it once:
// the int8 tiles of the 256-bit paths. Before the include the file defines REWIND_AVX2_TILE (the
// tiles' target attribute) and REWIND_AVX2_VNNI: 0 for AVX2 (vpmaddubsw + vpmaddwd), 1 for
// AVX-VNNI (vpdpbusd / vpdpwssd on ymm, which Intel cores without AVX-512 have since Alder Lake).
// Both build the same exact integer sums, so they give the same bits.
#include "rewind/base/check.h"
#include "rewind/kernels/matmul_quant_internal.h"

#if !defined(REWIND_AVX2_TILE) || !defined(REWIND_AVX2_VNNI)
#error "define REWIND_AVX2_TILE and REWIND_AVX2_VNNI before including matmul_quant_avx2_tiles.h"
#endif

namespace rw::detail {

// GCC 12's avx512fintrin.h builds the unmasked conversions (cvtepi8_epi32, cvtepi32_ps,
// cvtph_ps) from their masked forms with an uninitialised pass-through operand and then warns
// about it in its own header; the operand is dead (all-ones mask).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

constexpr bool kAvxVnni = REWIND_AVX2_VNNI;

// ---- int8 dot: AVX2 and AVX-VNNI ---------------------------------------------------------------
// The same integer sums as the AVX-512 VNNI tiles, on 256-bit vectors. AVX-VNNI's vpdpbusd adds
// the 4-product sums of u8 times s8 to int32 lanes, and vpdpwssd pairs of int16 products; a
// K-quant's sub-block sums stay in int32 and take their scale by vpmulld, as IQ4_XS's do.
// Without VNNI (AVX2): vpmaddubsw multiplies u8 by s8 and sums pairs of products
// to int16 (exact while a pair stays within int16: Q8_0 multiplies |q| by x with q's sign moved
// onto x, at most 2 * 128 * 127; a Q4_K nibble (at most 15) gives at most 3810, a Q5_K code (31)
// 7874, a Q6_K code (63) 16002). vpmaddwd then sums pairs of those into int32: by ones for Q8_0,
// and for the K-quants by the sub-block scale (in both int16 halves of a lane), which applies
// the scale in the same instruction. Sums of several vpmaddubsw results stay in int16 first,
// as many as int16 holds exactly: 8 for Q4_K (30480), 4 for Q5_K (31496), 2 for Q6_K (32004).
// All of it is exact integer arithmetic, so the sums equal the reference's. A panel's 16 lanes
// are two 8-lane halves.

// Half h (8 lanes) of the 64-byte group at off in the blocks of a tile's panels.
REWIND_AVX2_TILE inline __m256i half_group(const std::byte* const* blk, int h, int off) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[h / 2] + off + 32 * (h % 2)));
}
REWIND_AVX2_TILE inline __m256 f16x8(const std::byte* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
REWIND_AVX2_TILE inline __m256i bcast4(const int8_t* p) {
  return _mm256_set1_epi32(load_i32(p));
}
// 8 scale bytes (one per lane; signed for Q6_K; LowNibble: their low 4 bits, Q2_K's scales) in
// both int16 halves of each lane: vpmaddwd's multiplier for a lane's two int16 sums.
template <bool Signed, bool LowNibble = false>
REWIND_AVX2_TILE inline __m256i scale_pairs(const std::byte* p) {
  __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  if (LowNibble) v = _mm_and_si128(v, _mm_set1_epi8(0x0F));
  const __m128i d = _mm_unpacklo_epi8(v, v);
  return Signed ? _mm256_cvtepi8_epi16(d) : _mm256_cvtepu8_epi16(d);
}
// s + the 4-product sums of u (u8) times x (s8) per int32 lane: vpdpbusd, or vpmaddubsw then
// vpmaddwd by ones (int16 1s) where a pair of products stays within int16 (see above).
REWIND_AVX2_TILE __attribute__((always_inline)) inline __m256i dot4_acc(__m256i s, __m256i u,
                                                                        __m256i x, __m256i ones) {
#if REWIND_AVX2_VNNI
  (void)ones;
  return _mm256_dpbusd_avx_epi32(s, u, x);
#else
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones));
#endif
}
// s + the sums of pairs of int16 products a * b per int32 lane: vpdpwssd, or vpmaddwd + vpaddd.
REWIND_AVX2_TILE __attribute__((always_inline)) inline __m256i madd_acc(__m256i s, __m256i a,
                                                                        __m256i b) {
#if REWIND_AVX2_VNNI
  return _mm256_dpwssd_avx_epi32(s, a, b);
#else
  return _mm256_add_epi32(s, _mm256_madd_epi16(a, b));
#endif
}
// 8 scale bytes (one per lane; signed for Q6_K; LowNibble: their low 4 bits) as int32 lanes: the
// multiplier of a lane's int32 sub-block sum (AVX-VNNI).
template <bool Signed, bool LowNibble = false>
REWIND_AVX2_TILE inline __m256i scale_lanes(const std::byte* p) {
  __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  if (LowNibble) v = _mm_and_si128(v, _mm_set1_epi8(0x0F));
  return Signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}
// Full unrolling of the loops over a tile's rows and halves, so that their vectors stay in
// registers (GCC stops unrolling them on its own once the loop bodies grow).
#define REWIND_UNROLL _Pragma("GCC unroll 8")
// The asm groups' 8 sums of a 4-row x 2-half tile, named s00..s31 (row, half) in their text.
#define REWIND_SUMS_4X2(S)                                                            \
  [s00] "+x"(S[0][0]), [s01] "+x"(S[0][1]), [s10] "+x"(S[1][0]), [s11] "+x"(S[1][1]), \
      [s20] "+x"(S[2][0]), [s21] "+x"(S[2][1]), [s30] "+x"(S[3][0]), [s31] "+x"(S[3][1])
// ROW's text for the 4 rows of a pointer-addressed asm group: row r's activation codes at
// x0 + r k for r < 2, x2 + (r - 2) k after (x2 = x0 + 2 k).
#define REWIND_4_ROWS(ROW)     \
  ROW("(%[x0])", "s00", "s01") \
  ROW("(%[x0],%[k])", "s10", "s11") ROW("(%[x2])", "s20", "s21") ROW("(%[x2],%[k])", "s30", "s31")

// blk[p] = block `off` bytes into panel p of a tile (panel p at panels + p * panel_stride).
template <int P>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void panel_blocks(
    const std::byte* panels, int64_t panel_stride, int64_t off, const std::byte* (&blk)[P]) {
  REWIND_UNROLL
  for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + off;
}
template <int R, int H>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void zero_sums(__m256i (&s)[R][H]) {
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline void combine_avx2(
    Avx2Acc<R, H>& acc, const std::byte* const* blk, int off, const ActRows<R>& xr, int64_t b,
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
REWIND_AVX2_TILE void store_tile_avx2(const Avx2Acc<R, H>& acc, float* y, int64_t ldy, int ncols,
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

// Q8_0 on AVX2: vpmaddubsw takes one unsigned operand, so the weights' signs move onto the
// activations and |w| is the unsigned one; vpmaddwd by ones widens the pairs. On AVX-VNNI the
// activations are the unsigned operand instead, offset by 128 (x ^ 0x80 = x + 128 as u8):
// sum (x + 128) * w = s + 128 * sum w, and each panel block's 128 * sum w (one vpdpbusd of the
// weights against 128s per group, shared by the tile's rows) is subtracted before the combine.
// Exact integers either way; AVX-VNNI spends no sign or abs per product.

// One row of q8_0_group_4x2: broadcast the row's 4 activation codes and add their products with
// the group's weights into the row's two sums.
// clang-format off
#if REWIND_AVX2_VNNI
#define REWIND_Q8_ROW(X, S0, S1)                       \
  "vpbroadcastd %[" X "], %[a]\n\t"                    \
  "vpxor %[c128], %[a], %[a]\n\t"                      \
  "%{vex%} vpdpbusd %[w0], %[a], %[" S0 "]\n\t"        \
  "%{vex%} vpdpbusd %[w1], %[a], %[" S1 "]\n\t"
#else
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
#endif
// clang-format on
// One 64-byte group of a Q8_0 block for 4 rows x 16 lanes (the 4 x 1-panel prefill tile):
// s[r][h] += the 4-product sums of lanes 8h..8h+7, as the generic tile below computes them (with
// AVX-VNNI: of x + 128, and ws[h] += 128 times the weights' sums; c: ones, or the 0x80 bytes).
// In asm because GCC keeps half of the 8 sums on the stack; here all 16 registers hold sums,
// codes and products.
REWIND_AVX2_TILE __attribute__((always_inline)) inline void q8_0_group_4x2(
    const std::byte* w, const int8_t* const* x, __m256i c, __m256i (&s)[4][2], __m256i (&ws)[2]) {
#if REWIND_AVX2_VNNI
  __m256i w0, w1, a;
  __asm__(
      "vmovdqu %[wm0], %[w0]\n\t"
      "vmovdqu %[wm1], %[w1]\n\t"
      "%{vex%} vpdpbusd %[w0], %[c128], %[ws0]\n\t"
      // clang-format off
      "%{vex%} vpdpbusd %[w1], %[c128], %[ws1]\n\t"
      REWIND_Q8_ROW("x0", "s00", "s01") REWIND_Q8_ROW("x1", "s10", "s11")
      REWIND_Q8_ROW("x2", "s20", "s21") REWIND_Q8_ROW("x3", "s30", "s31")
      // clang-format on
      : REWIND_SUMS_4X2(s), [ws0] "+x"(ws[0]), [ws1] "+x"(ws[1]), [w0] "=&x"(w0), [w1] "=&x"(w1),
        [a] "=&x"(a)
      : [wm0] "m"(*reinterpret_cast<const __m256i*>(w)),
        [wm1] "m"(*reinterpret_cast<const __m256i*>(w + 32)),
        [x0] "m"(*reinterpret_cast<const int32_t*>(x[0])),
        [x1] "m"(*reinterpret_cast<const int32_t*>(x[1])),
        [x2] "m"(*reinterpret_cast<const int32_t*>(x[2])),
        [x3] "m"(*reinterpret_cast<const int32_t*>(x[3])), [c128] "x"(c));
#else
  (void)ws;
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
      : REWIND_SUMS_4X2(s), [w0] "=&x"(w0), [w1] "=&x"(w1), [aw0] "=&x"(aw0), [aw1] "=&x"(aw1),
        [a] "=&x"(a), [t0] "=&x"(t0), [t1] "=&x"(t1)
      : [wm0] "m"(*reinterpret_cast<const __m256i*>(w)),
        [wm1] "m"(*reinterpret_cast<const __m256i*>(w + 32)),
        [x0] "m"(*reinterpret_cast<const int32_t*>(x[0])),
        [x1] "m"(*reinterpret_cast<const int32_t*>(x[1])),
        [x2] "m"(*reinterpret_cast<const int32_t*>(x[2])),
        [x3] "m"(*reinterpret_cast<const int32_t*>(x[3])), [ones] "x"(c));
#endif
}
#undef REWIND_Q8_ROW

template <int R, int P>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_q8_0(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  const ActRows<R> xr(xa, r0);
  const int64_t pb = quant_panel_block_bytes(DType::Q8_0), nb = xa.k / 32;
  // AVX2: int16 ones (vpmaddwd's widening); AVX-VNNI: the 0x80 bytes (the activations' offset).
  const __m256i c = kAvxVnni ? _mm256_set1_epi8(static_cast<char>(0x80)) : _mm256_set1_epi16(1);
  Avx2Acc<R, H> acc;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    panel_blocks<P>(panels, panel_stride, b * pb, blk);
    __m256i s[R][H], ws[H];
    zero_sums<R, H>(s);
    for (__m256i& v : ws) v = _mm256_setzero_si256();
    if constexpr (R == 4 && P == 1) {
      for (int g = 0; g < 8; ++g) {
        const int8_t* x[4];
        REWIND_UNROLL
        for (int r = 0; r < 4; ++r) x[r] = xr.q[r] + b * 32 + 4 * g;
        q8_0_group_4x2(blk[0] + kQ8QOff + 64 * g, x, c, s, ws);
      }
    } else {
#pragma GCC unroll 1
      for (int g = 0; g < 8; ++g) {
        __m256i w[H], aw[H];
        REWIND_UNROLL
        for (int h = 0; h < H; ++h) {
          if (h % 2 == 0) prefetch_part<R>(blk[h / 2], pb, g, 8);
          w[h] = half_group(blk, h, kQ8QOff + 64 * g);
          if constexpr (kAvxVnni)
            ws[h] = dot4_acc(ws[h], c, w[h], c);
          else
            aw[h] = _mm256_abs_epi8(w[h]);
        }
        REWIND_UNROLL
        for (int r = 0; r < R; ++r) {
          const __m256i a = bcast4(xr.q[r] + b * 32 + 4 * g);
          const __m256i au = _mm256_xor_si256(a, c);  // AVX-VNNI: x + 128 as u8
          REWIND_UNROLL
          for (int h = 0; h < H; ++h) {
            if constexpr (kAvxVnni)
              s[r][h] = dot4_acc(s[r][h], au, w[h], c);
            else
              s[r][h] = dot4_acc(s[r][h], aw[h], _mm256_sign_epi8(a, w[h]), c);
          }
        }
      }
    }
    if constexpr (kAvxVnni) {
      REWIND_UNROLL
      for (int r = 0; r < R; ++r) {
        REWIND_UNROLL
        for (int h = 0; h < H; ++h) s[r][h] = _mm256_sub_epi32(s[r][h], ws[h]);
      }
    }
    combine_avx2<R, H>(acc, blk, 0, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

// The low and high nibbles of each byte of v (Q4_0 / IQ4_NL codes), each as a byte.
REWIND_AVX2_TILE __attribute__((always_inline)) inline void nibbles_avx2(__m256i v, __m256i& lo,
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
// 31 * 127 per lane pair: 31496). AVX-VNNI adds each group's products to int32 directly.
template <int R, int P, bool Min = false, bool Q5 = false>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_q4_0(
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
        for (int h = 0; h < H; ++h) {
          if constexpr (kAvxVnni)
            s[r][h] = dot4_acc(dot4_acc(s[r][h], lo[h], a0, ones), hi[h], a1, ones);
          else
            t16[r][h] = _mm256_add_epi16(
                t16[r][h],
                _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], a0), _mm256_maddubs_epi16(hi[h], a1)));
        }
      }
      // AVX2: widen, Q5_1 every 2 groups, the others once.
      if (!kAvxVnni && g % 2 == 1 && (Q5 || g == 3)) {
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline Iq4Avx2Consts iq4_avx2_consts() {
  const __m256i values =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  return {values, _mm256_abs_epi8(values), _mm256_set1_epi16(1)};
}
// One IQ4_NL / IQ4_XS code group of the halves' blocks (nibbles at code_off: values 8g..8g+7 of
// each lane) into the int32 sums s: the codes index kIq4nlValues (signed, |value| <= 127),
// looked up with vpshufb into |value| and value, then multiplied as Q8_0's codes are (the sign
// moved onto the activations, each row's 8 at act_off).
template <int R, int H>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void iq4_group_avx2(
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
        s[r][h] = dot4_acc(s[r][h], aw[e][h], _mm256_sign_epi8(a, w[e][h]), ones);
    }
  }
}

// IQ4_NL: one block's 4 code groups (iq4_group_avx2) and one combine per 32 values.
template <int R, int P>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_iq4_nl(
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline void flush_int16_sums(
    const std::byte* const* blk, int sc_off, const __m256i (&t16)[R][H], int32_t (&sm)[R][H][8]) {
  REWIND_UNROLL
  for (int h = 0; h < H; ++h) {
    const __m256i scp = scale_pairs<Signed, LowNibble>(blk[h / 2] + sc_off + 8 * (h % 2));
    REWIND_UNROLL
    for (int r = 0; r < R; ++r) {
      auto* o = reinterpret_cast<__m256i*>(sm[r][h]);
      _mm256_store_si256(o, madd_acc(_mm256_load_si256(o), t16[r][h], scp));
    }
  }
}
// AVX-VNNI: sm[r][h] += the int32 sub-block sums is[r][h] times the halves' scale bytes at byte
// offset sc_off of the blocks (scale_lanes).
template <bool Signed, int R, int H, bool LowNibble = false>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void flush_int32_sums(
    const std::byte* const* blk, int sc_off, const __m256i (&is)[R][H], int32_t (&sm)[R][H][8]) {
  REWIND_UNROLL
  for (int h = 0; h < H; ++h) {
    const __m256i sc = scale_lanes<Signed, LowNibble>(blk[h / 2] + sc_off + 8 * (h % 2));
    REWIND_UNROLL
    for (int r = 0; r < R; ++r) {
      auto* o = reinterpret_cast<__m256i*>(sm[r][h]);
      _mm256_store_si256(o,
                         _mm256_add_epi32(_mm256_load_si256(o), _mm256_mullo_epi32(is[r][h], sc)));
    }
  }
}
// A K-quant sub-block's running sums t += u (u8) times x (s8): int16 pair sums (vpmaddubsw, as
// many as int16 holds exactly, then flush_int16_sums) or, with AVX-VNNI, int32 4-product sums
// (vpdpbusd, the whole sub-block, then flush_int32_sums). flush_sub_sums takes the path's flush.
REWIND_AVX2_TILE __attribute__((always_inline)) inline __m256i sub_acc(__m256i t, __m256i u,
                                                                       __m256i x) {
#if REWIND_AVX2_VNNI
  return _mm256_dpbusd_avx_epi32(t, u, x);
#else
  return _mm256_add_epi16(t, _mm256_maddubs_epi16(u, x));
#endif
}
template <bool Signed, int R, int H, bool LowNibble = false>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void flush_sub_sums(
    const std::byte* const* blk, int sc_off, const __m256i (&t)[R][H], int32_t (&sm)[R][H][8]) {
  if constexpr (kAvxVnni)
    flush_int32_sums<Signed, R, H, LowNibble>(blk, sc_off, t, sm);
  else
    flush_int16_sums<Signed, R, H, LowNibble>(blk, sc_off, t, sm);
}
template <int R, int H>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void load_sums(const int32_t (&sm)[R][H][8],
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_iq4_xs(
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
      flush_int32_sums<true, R, H>(blk, kIQ4XSScOff + 16 * sb, is, sm);
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_q2_k(
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
          for (int h = 0; h < H; ++h) t16[r][h] = sub_acc(t16[r][h], w[h], a);
        }
      }
      flush_sub_sums<false, R, H, true>(blk, kQ2KScOff + 16 * sb, t16, sm);
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
          s[r][h] = madd_acc(s[r][h], mv, a);
        }
      }
    }
    combine_avx2<R, H, true>(acc, blk, 32, xr, b, s);
  }
  store_tile_avx2<R, H>(acc, y, ldy, ncols, y_step);
}

#if REWIND_AVX2_VNNI
// One Q4_K code group for 4 rows x 16 lanes (the 4 x 1-panel prefill tile) on AVX-VNNI: the
// nibbles of the two halves' 32 bytes at c, the low ones against each row's 4 activation codes
// (row r at x + r * k), the high ones against the 4 after them, into t[r][h]. In asm, as
// q8_0_group_4x2, so that the 8 sums stay in registers (GCC's allocation stored 5 of them per
// group).
// clang-format off
#define REWIND_Q4K_ROW(X, T0, T1)                      \
  "vpbroadcastd " X ", %[a]\n\t"                       \
  "%{vex%} vpdpbusd %[a], %[lo0], %[" T0 "]\n\t"       \
  "%{vex%} vpdpbusd %[a], %[lo1], %[" T1 "]\n\t"       \
  "vpbroadcastd 4" X ", %[a]\n\t"                     \
  "%{vex%} vpdpbusd %[a], %[hi0], %[" T0 "]\n\t"       \
  "%{vex%} vpdpbusd %[a], %[hi1], %[" T1 "]\n\t"
// clang-format on
REWIND_AVX2_TILE __attribute__((always_inline)) inline void q4_k_group_4x2(const std::byte* c,
                                                                           const int8_t* x,
                                                                           int64_t k, __m256i m4,
                                                                           __m256i (&t)[4][2]) {
  __m256i lo0, lo1, hi0, hi1, a;
  __asm__(
      "vmovdqu %[c0], %[hi0]\n\t"
      "vmovdqu %[c1], %[hi1]\n\t"
      "vpand %[hi0], %[m4], %[lo0]\n\t"
      "vpand %[hi1], %[m4], %[lo1]\n\t"
      "vpsrlw $4, %[hi0], %[hi0]\n\t"
      "vpsrlw $4, %[hi1], %[hi1]\n\t"
      "vpand %[hi0], %[m4], %[hi0]\n\t"
      // clang-format off
      "vpand %[hi1], %[m4], %[hi1]\n\t"
      REWIND_4_ROWS(REWIND_Q4K_ROW)
      // clang-format on
      : REWIND_SUMS_4X2(t), [lo0] "=&x"(lo0), [lo1] "=&x"(lo1), [hi0] "=&x"(hi0), [hi1] "=&x"(hi1),
        [a] "=&x"(a)
      : [c0] "m"(*reinterpret_cast<const __m256i*>(c)),
        [c1] "m"(*reinterpret_cast<const __m256i*>(c + 32)), [x0] "r"(x), [x2] "r"(x + 2 * k),
        [k] "r"(k), [m4] "x"(m4)
      : "memory");
}

// The same for a Q5_K code group g = 4 s + I: the fifth bits (group I's two bits of each byte at
// hb, the two halves' 32 bytes) go to bit 4 of the low and high nibbles' codes first. All 16
// registers are taken.
template <int I>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void q5_k_group_4x2(
    const std::byte* c, const std::byte* hb, const int8_t* x, int64_t k, __m256i m4, __m256i b4,
    __m256i (&t)[4][2]) {
  __m256i lo0, lo1, hi0, hi1, a, u;
  // clang-format off
#define REWIND_Q5K_CODES(OFF, LO, HI)               \
  "vmovdqu " OFF "(%[c]), %[" HI "]\n\t"            \
  "vpand %[" HI "], %[m4], %[" LO "]\n\t"           \
  "vpsrlw $4, %[" HI "], %[" HI "]\n\t"             \
  "vpand %[" HI "], %[m4], %[" HI "]\n\t"           \
  "vmovdqu " OFF "(%[hb]), %[a]\n\t"                \
  "vpsrld %[sh], %[a], %[a]\n\t"                    \
  "vpslld $4, %[a], %[u]\n\t"                       \
  "vpand %[u], %[b4], %[u]\n\t"                     \
  "vpor %[u], %[" LO "], %[" LO "]\n\t"             \
  "vpslld $3, %[a], %[u]\n\t"                       \
  "vpand %[u], %[b4], %[u]\n\t"                     \
  "vpor %[u], %[" HI "], %[" HI "]\n\t"
  __asm__(
      REWIND_Q5K_CODES("", "lo0", "hi0") REWIND_Q5K_CODES("32", "lo1", "hi1")
      REWIND_4_ROWS(REWIND_Q4K_ROW)
      : REWIND_SUMS_4X2(t),
        [lo0] "=&x"(lo0), [lo1] "=&x"(lo1), [hi0] "=&x"(hi0), [hi1] "=&x"(hi1), [a] "=&x"(a),
        [u] "=&x"(u)
      : [c] "r"(c), [hb] "r"(hb), [x0] "r"(x), [x2] "r"(x + 2 * k), [k] "r"(k), [m4] "x"(m4),
        [b4] "x"(b4), [sh] "i"(2 * I)
      : "memory");
#undef REWIND_Q5K_CODES
  // clang-format on
}
#undef REWIND_Q4K_ROW
#endif

template <int R, int P, bool Q5>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_k(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step) {
  constexpr int H = 2 * P;
  // Groups per flush: 4 (8 products of nibbles in int16, or int32 with AVX-VNNI) for Q4_K, 2 for
  // Q5_K's 5-bit codes in int16.
  constexpr int kSpan = Q5 && !kAvxVnni ? 2 : 4;
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
#if REWIND_AVX2_VNNI
          if constexpr (Q5 && R == 4 && P == 1) {  // kSpan 4: g = g0 + I
            prefetch_part<R>(blk[0], pb, g, 32);
            const std::byte* c = blk[0] + k_lo_group(true, g);
            const std::byte* hb = blk[0] + q5k_hi_group(sb);
            const int8_t* x = xr.q[0] + b * 256 + 8 * g;
            const __m256i b4 = _mm256_set1_epi8(0x10);
            switch (g - g0) {
              case 0:
                q5_k_group_4x2<0>(c, hb, x, xa.k, m4, b4, t16);
                break;
              case 1:
                q5_k_group_4x2<1>(c, hb, x, xa.k, m4, b4, t16);
                break;
              case 2:
                q5_k_group_4x2<2>(c, hb, x, xa.k, m4, b4, t16);
                break;
              default:
                q5_k_group_4x2<3>(c, hb, x, xa.k, m4, b4, t16);
            }
            continue;
          }
          if constexpr (!Q5 && R == 4 && P == 1) {
            prefetch_part<R>(blk[0], pb, g, 32);
            q4_k_group_4x2(blk[0] + k_lo_group(false, g), xr.q[0] + b * 256 + 8 * g, xa.k, m4, t16);
            continue;
          }
#endif
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
              t16[r][h] = sub_acc(sub_acc(t16[r][h], lo[h], a0), hi[h], a1);
          }
        }
        flush_sub_sums<false, R, H>(blk, kQ4KScOff + 16 * sb, t16, sm);
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
          s[r][h] = madd_acc(s[r][h], mv, _mm256_set1_epi32(load_i32(xr.s32[r] + b * 8 + 2 * tp)));
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline __m256i q6_k_codes_avx2(
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline __m256i q3_k_codes_avx2(
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

#if REWIND_AVX2_VNNI
// One group of byte codes (two halves' 32 bytes at w) for 4 rows x 16 lanes on AVX-VNNI: t[r][h]
// += the 4-product sums against row r's 4 activation codes at x + r * k. In asm, as
// q8_0_group_4x2, so that the 8 sums stay in registers.
// clang-format off
#define REWIND_BYTES_ROW(X, T0, T1)                    \
  "vpbroadcastd " X ", %[a]\n\t"                       \
  "%{vex%} vpdpbusd %[a], %[w0], %[" T0 "]\n\t"        \
  "%{vex%} vpdpbusd %[a], %[w1], %[" T1 "]\n\t"
// clang-format on
REWIND_AVX2_TILE __attribute__((always_inline)) inline void bytes_group_4x2(const std::byte* w,
                                                                            const int8_t* x,
                                                                            int64_t k,
                                                                            __m256i (&t)[4][2]) {
  __m256i w0, w1, a;
  __asm__(
      "vmovdqu %[m0], %[w0]\n\t"
      // clang-format off
      "vmovdqu %[m1], %[w1]\n\t"
      REWIND_4_ROWS(REWIND_BYTES_ROW)
      // clang-format on
      : REWIND_SUMS_4X2(t), [w0] "=&x"(w0), [w1] "=&x"(w1), [a] "=&x"(a)
      : [m0] "m"(*reinterpret_cast<const __m256i*>(w)),
        [m1] "m"(*reinterpret_cast<const __m256i*>(w + 32)), [x0] "r"(x), [x2] "r"(x + 2 * k),
        [k] "r"(k)
      : "memory");
}
#undef REWIND_BYTES_ROW
#endif

// t16[r][h] += the products of group g = 4 sb + I of block b (int16 pair sums).
template <int I, int R, int H, int Src>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void q6_k_group_avx2(
    const std::byte* const* blk, int64_t pb, const ActRows<R>& xr, int64_t b, int sb,
    __m256i (&t16)[R][H]) {
  const int g = 4 * sb + I;
#if REWIND_AVX2_VNNI
  if constexpr (Src == kQ6Bytes && R == 4 && H == 2) {
    bytes_group_4x2(blk[0] + kQ6KLoOff + 64 * g, xr.q[0] + b * 256 + 4 * g, xr.q[1] - xr.q[0], t16);
    return;
  }
#endif
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
    for (int h = 0; h < H; ++h) t16[r][h] = sub_acc(t16[r][h], w[h], a);
  }
}

// Q6_K: codes c = q + 32 (u8); s = sum_s sc[s] * (sum c * qx - 32 * sum16[s]), the codes read as
// Src says (Q3_K: its Q6_K transcoding's, whose integers are Q3_K's).
template <int R, int P, int Src>
REWIND_AVX2_TILE __attribute__((always_inline)) inline void int8_tile_avx2_q6_k(
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
      for (int half = 0; half < 2; ++half) {  // two groups per int16 sum, four per int32
        if (half == 0 || !kAvxVnni) zero_sums<R, H>(t16);
        if (half == 0) {
          q6_k_group_avx2<0, R, H, Src>(blk, pb, xr, b, sb, t16);
          q6_k_group_avx2<1, R, H, Src>(blk, pb, xr, b, sb, t16);
        } else {
          q6_k_group_avx2<2, R, H, Src>(blk, pb, xr, b, sb, t16);
          q6_k_group_avx2<3, R, H, Src>(blk, pb, xr, b, sb, t16);
        }
        if (half == 1 || !kAvxVnni) flush_sub_sums<true, R, H>(blk, kQ6KScOff + 16 * sb, t16, sm);
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
          // The sums negated (at most 16 * 127 in magnitude): one multiply-add subtracts.
          const __m256i a = _mm256_set1_epi32(static_cast<int32_t>(
              (static_cast<uint32_t>(-s16[0]) & 0xFFFFu) | (static_cast<uint32_t>(-s16[1]) << 16)));
          s[r][h] = madd_acc(s[r][h], sc2, a);
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
REWIND_AVX2_TILE __attribute__((always_inline)) inline void avx2_row_tiles(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step, PrefetchStream* pf, int64_t n_tiles) {
  for (int64_t i = 0; i < n_tiles; ++i) {
    if (pf) pf->step();
    Tile(xa, r0 + i * R, panels, panel_stride, y + i * R * ldy, ldy, ncols, y_step);
  }
}

template <int R, int P>
REWIND_AVX2_TILE void int8_tile_avx2(DType t, const QuantizedActs& xa, int64_t r0,
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

#undef REWIND_4_ROWS
#undef REWIND_SUMS_4X2

}  // namespace

#pragma GCC diagnostic pop

}  // namespace rw::detail

// The table of a path's tiles: [rows - 1][panels - 1].
#define REWIND_INT8_AVX2_ROW(R) \
  { int8_tile_avx2<R, 1>, int8_tile_avx2<R, 2>, nullptr, nullptr }
#define REWIND_INT8_AVX2_TILES                                                 \
  {                                                                            \
    REWIND_INT8_AVX2_ROW(1), REWIND_INT8_AVX2_ROW(2), REWIND_INT8_AVX2_ROW(3), \
        REWIND_INT8_AVX2_ROW(4)                                                \
  }
