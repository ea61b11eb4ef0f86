// The AVX-512 kernels of the quantised matmul: the exact widen to f32 and the f32 dot's decode
// tiles (AVX-512F/BW/VL), the int8 dot's tiles (AVX-512 VNNI), their prefill expansions and the
// activation quantiser. Compiled under target attributes and chosen at run time.
#include "rewind/kernels/matmul_quant_avx512.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "rewind/base/check.h"

namespace rw::detail {

// GCC 12's avx512fintrin.h builds the unmasked conversions (cvtepi8_epi32, cvtepi32_ps,
// cvtph_ps) from their masked forms with an uninitialised pass-through operand and then warns
// about it in its own header; the operand is dead (all-ones mask).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

REWIND_AVX512 void widen_q8_0_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int g = 0; g < 8; ++g) {
    __m512 w[4];
    q8_0_group(blk, g, d, w);
    for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (4 * g + t) * ld, w[t]);
  }
}

template <bool Q5>
REWIND_AVX512 void widen_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk), dmin = load_f16x16(blk + 32);
  for (int s = 0; s < 8; ++s) {
    const __m512 d1 = q4k_d1(blk, d, s), m1 = q4k_m1(blk, dmin, s);
    for (int g = 4 * s; g < 4 * s + 4; ++g) {
      __m512 w[8];
      q4_k_group<Q5>(blk, g, d1, m1, w);
      for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
    }
  }
}

REWIND_AVX512 void widen_q6_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int s = 0; s < 16; ++s) {
    const __m512 ds = q6k_ds(blk, d, s);
    for (int g = 4 * s; g < 4 * s + 4; ++g) {
      __m512 w[4];
      q6_k_group(blk, g, ds, w);
      for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (4 * g + t) * ld, w[t]);
    }
  }
}

template <DType T>
REWIND_AVX512 void widen_nibbles_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int g = 0; g < 4; ++g) {
    __m512 w[8];
    nibble_group<T>(blk, g, d, w);
    for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
  }
}

template <bool Q5>
REWIND_AVX512 void widen_min_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk), m = load_f16x16(blk + min_offset(Q5));
  for (int g = 0; g < 4; ++g) {
    __m512 w[8];
    min_group<Q5>(blk, g, d, m, w);
    for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
  }
}

REWIND_AVX512 void widen_q2_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk), dmin = load_f16x16(blk + 32);
  for (int s = 0; s < 16; ++s) {
    __m512 d1, m1;
    __m512i codes;
    q2k_sub_block(blk, d, dmin, s, d1, m1, codes);
    for (int i = 0; i < 4; ++i) {
      __m512 w[4];
      q2_k_group(codes, i, d1, m1, w);
      for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (16 * s + 4 * i + t) * ld, w[t]);
    }
  }
}

REWIND_AVX512 void widen_iq4_xs_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int s = 0; s < 8; ++s) {
    const __m512 ds = iq4xs_ds(blk, d, s);
    for (int g = 4 * s; g < 4 * s + 4; ++g) {
      __m512 w[8];
      iq4_xs_group(blk, g, ds, w);
      for (int t = 0; t < 8; ++t) _mm512_storeu_ps(out + (8 * g + t) * ld, w[t]);
    }
  }
}

REWIND_AVX512 void widen_q3_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = load_f16x16(blk);
  for (int s = 0; s < 16; ++s) {
    const __m512 ds = q6k_ds(blk, d, s);
    __m512i lo, h;
    q3_k_sub_block(blk, s, lo, h);
    for (int i = 0; i < 4; ++i) {
      __m512 w[4];
      q3_k_group(lo, h, i, ds, w);
      for (int t = 0; t < 4; ++t) _mm512_storeu_ps(out + (16 * s + 4 * i + t) * ld, w[t]);
    }
  }
}

// acc[r][p] = fma(x[r, k + t], w[p][t], acc[r][p]) for t < T, in order.
template <int R, int P, int T>
REWIND_AVX512 __attribute__((always_inline)) inline void fma_steps(__m512 (&acc)[R][P],
                                                                   const __m512 (&w)[P][T],
                                                                   const float* x, int64_t ldx,
                                                                   int64_t k) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + k + t]);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(a, w[p][t], acc[r][p]);
    }
  }
}

template <int R, int P>
REWIND_AVX512 void decode_tile_avx512(DType t, const float* x, int64_t ldx, const std::byte* panels,
                                      int64_t panel_stride, int64_t nb, float* y, int64_t ldy,
                                      int ncols) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const int64_t pb = quant_panel_block_bytes(t);
  auto prefetch = [&](const std::byte* blk, int off) {
    _mm_prefetch(reinterpret_cast<const char*>(blk + off) + kPrefetchBytes, _MM_HINT_T0);
  };
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + b * pb;
    if (t == DType::Q8_0) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int g = 0; g < 8; ++g) {
        __m512 w[P][4];
        for (int p = 0; p < P; ++p) {
          prefetch(blk[p], kQ8QOff + 64 * g);
          q8_0_group(blk[p], g, d[p], w[p]);
        }
        fma_steps<R, P, 4>(acc, w, x, ldx, b * 32 + 4 * g);
      }
    } else if (t == DType::Q4_0 || t == DType::IQ4_NL || t == DType::Q5_0) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int g = 0; g < 4; ++g) {
        __m512 w[P][8];
        for (int p = 0; p < P; ++p) {
          prefetch(blk[p], kQ8QOff + 64 * g);
          if (t == DType::IQ4_NL) {
            nibble_group<DType::IQ4_NL>(blk[p], g, d[p], w[p]);
          } else if (t == DType::Q5_0) {
            if (g == 0) prefetch(blk[p], kQ51HOff);
            nibble_group<DType::Q5_0>(blk[p], g, d[p], w[p]);
          } else {
            nibble_group<DType::Q4_0>(blk[p], g, d[p], w[p]);
          }
        }
        fma_steps<R, P, 8>(acc, w, x, ldx, b * 32 + 8 * g);
      }
    } else if (t == DType::Q4_1 || t == DType::Q5_1) {
      const bool q5 = t == DType::Q5_1;
      __m512 d[P], m[P];
      for (int p = 0; p < P; ++p) {
        d[p] = load_f16x16(blk[p]);
        m[p] = load_f16x16(blk[p] + min_offset(q5));
      }
      for (int g = 0; g < 4; ++g) {
        __m512 w[P][8];
        for (int p = 0; p < P; ++p) {
          // The block's 320 (384) bytes, evenly: two prefetches 40 (48) bytes apart per group.
          const int step = static_cast<int>(pb) / 8;
          prefetch(blk[p], 2 * step * g);
          prefetch(blk[p], 2 * step * g + step);
          if (q5)
            min_group<true>(blk[p], g, d[p], m[p], w[p]);
          else
            min_group<false>(blk[p], g, d[p], m[p], w[p]);
        }
        fma_steps<R, P, 8>(acc, w, x, ldx, b * 32 + 8 * g);
      }
    } else if (t == DType::Q3_K) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int s = 0; s < 16; ++s) {
        __m512 ds[P];
        __m512i lo[P], h[P];
        for (int p = 0; p < P; ++p) {
          // The block's 1824 bytes, evenly: two prefetches 57 bytes apart per sub-block.
          prefetch(blk[p], 114 * s);
          prefetch(blk[p], 114 * s + 57);
          ds[p] = q6k_ds(blk[p], d[p], s);
          q3_k_sub_block(blk[p], s, lo[p], h[p]);
        }
        for (int i = 0; i < 4; ++i) {
          __m512 w[P][4];
          for (int p = 0; p < P; ++p) q3_k_group(lo[p], h[p], i, ds[p], w[p]);
          fma_steps<R, P, 4>(acc, w, x, ldx, b * 256 + 16 * s + 4 * i);
        }
      }
    } else if (t == DType::Q2_K) {
      __m512 d[P], dmin[P];
      for (int p = 0; p < P; ++p) {
        d[p] = load_f16x16(blk[p]);
        dmin[p] = load_f16x16(blk[p] + 32);
      }
      for (int s = 0; s < 16; ++s) {
        __m512 d1[P], m1[P];
        __m512i codes[P];
        for (int p = 0; p < P; ++p) {
          prefetch(blk[p], 84 * s);  // the block's 1344 bytes, evenly: 42 bytes apart
          prefetch(blk[p], 84 * s + 42);
          q2k_sub_block(blk[p], d[p], dmin[p], s, d1[p], m1[p], codes[p]);
        }
        for (int i = 0; i < 4; ++i) {
          __m512 w[P][4];
          for (int p = 0; p < P; ++p) q2_k_group(codes[p], i, d1[p], m1[p], w[p]);
          fma_steps<R, P, 4>(acc, w, x, ldx, b * 256 + 16 * s + 4 * i);
        }
      }
    } else if (t == DType::IQ4_XS) {
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int s = 0; s < 8; ++s) {
        __m512 ds[P];
        for (int p = 0; p < P; ++p) ds[p] = iq4xs_ds(blk[p], d[p], s);
        for (int g = 4 * s; g < 4 * s + 4; ++g) {
          __m512 w[P][8];
          for (int p = 0; p < P; ++p) {
            prefetch(blk[p], kIQ4XSQOff + 64 * g);
            iq4_xs_group(blk[p], g, ds[p], w[p]);
          }
          fma_steps<R, P, 8>(acc, w, x, ldx, b * 256 + 8 * g);
        }
      }
    } else if (t == DType::Q4_K || t == DType::Q5_K) {
      const bool q5 = t == DType::Q5_K;
      __m512 d[P], dmin[P];
      for (int p = 0; p < P; ++p) {
        d[p] = load_f16x16(blk[p]);
        dmin[p] = load_f16x16(blk[p] + 32);
      }
      for (int s = 0; s < 8; ++s) {
        __m512 d1[P], m1[P];
        for (int p = 0; p < P; ++p) {
          d1[p] = q4k_d1(blk[p], d[p], s);
          m1[p] = q4k_m1(blk[p], dmin[p], s);
        }
        for (int g = 4 * s; g < 4 * s + 4; ++g) {
          __m512 w[P][8];
          for (int p = 0; p < P; ++p) {
            prefetch(blk[p], k_lo_group(q5, g));
            if (q5) {
              if ((g & 3) == 0) prefetch(blk[p], q5k_hi_group(g >> 2));
              q4_k_group<true>(blk[p], g, d1[p], m1[p], w[p]);
            } else {
              q4_k_group<false>(blk[p], g, d1[p], m1[p], w[p]);
            }
          }
          fma_steps<R, P, 8>(acc, w, x, ldx, b * 256 + 8 * g);
        }
      }
    } else {  // Q6_K
      __m512 d[P];
      for (int p = 0; p < P; ++p) d[p] = load_f16x16(blk[p]);
      for (int s = 0; s < 16; ++s) {
        __m512 ds[P];
        for (int p = 0; p < P; ++p) ds[p] = q6k_ds(blk[p], d[p], s);
        for (int g = 4 * s; g < 4 * s + 4; ++g) {
          __m512 w[P][4];
          for (int p = 0; p < P; ++p) {
            if ((g & 1) == 0) prefetch(blk[p], q6k_lo_group(g >> 1));
            if ((g & 3) == 0) prefetch(blk[p], q6k_hi_group(g >> 2));
            q6_k_group(blk[p], g, ds[p], w[p]);
          }
          fma_steps<R, P, 4>(acc, w, x, ldx, b * 256 + 4 * g);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r][p]);
}

}  // namespace

const DecodeTileFn kDecodeTiles[kQuantDecodeRows][kQuantDecodePanels] = {
    {decode_tile_avx512<1, 1>, decode_tile_avx512<1, 2>, decode_tile_avx512<1, 3>,
     decode_tile_avx512<1, 4>},
    {decode_tile_avx512<2, 1>, decode_tile_avx512<2, 2>, decode_tile_avx512<2, 3>,
     decode_tile_avx512<2, 4>}};

namespace {

// acc + w (u8) . a (s8) per 32-bit lane, as inline asm that ties the accumulator to one
// register. With the intrinsic, GCC 12 put a register move next to most vpdpbusd of the Q4_K /
// Q5_K sub-block sums; the asm leaves none.
REWIND_VNNI __attribute__((always_inline)) inline __m512i dpbusd_tied(__m512i acc, __m512i w,
                                                                      __m512i a) {
  asm("vpdpbusd %[a], %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [a] "v"(a));
  return acc;
}

// A zero vector made by the zeroing idiom in the register its user gets (asm volatile, so each
// call stays its own instruction): from _mm512_setzero_si512, GCC 12 zeroes one register and
// copies it into each Q4_K / Q5_K sub-block sum, 8 vmovdqa64 per sub-block in the loop, and the
// zeroing idiom costs no execution slot where a register copy of a zmm does on Zen 4.
REWIND_AVX512 __attribute__((always_inline)) inline __m512i zero_idiom() {
  __m512i z;
  asm volatile("vpxord %0, %0, %0" : "=v"(z));
  return z;
}

// acc + x per 32-bit lane in acc's register (asm, as dpbusd_tied): with the intrinsic GCC 12
// put each Q4_K / Q5_K block sum's update in another register and copied it back. (The Q6_K
// tile keeps the intrinsic: the tied add made it slower.)
REWIND_AVX512 __attribute__((always_inline)) inline __m512i add_epi32_tied(__m512i acc, __m512i x) {
  asm("vpaddd %[x], %[acc], %[acc]" : [acc] "+v"(acc) : [x] "v"(x));
  return acc;
}

// s[r][p] += is[r][p] * the signed scale of sub-block sb of panel p (Q6_K and Q3_K: one byte per
// sub-block and lane at kQ6KScOff).
template <int R, int P>
REWIND_VNNI __attribute__((always_inline)) inline void add_scaled_sub_block(
    __m512i (&s)[R][P], const __m512i (&is)[R][P], const std::byte* const (&blk)[P], int sb) {
  for (int p = 0; p < P; ++p) {
    const __m512i sc = _mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + kQ6KScOff + 16 * sb)));
    for (int r = 0; r < R; ++r)
      s[r][p] = _mm512_add_epi32(s[r][p], _mm512_mullo_epi32(is[r][p], sc));
  }
}

// One instantiation per type: the branches of the other types (and the constants they keep in
// registers) stay out of it, as GCC otherwise hoists every type's constants out of the block
// loop. Bytes (prefill on expanded codes) is a template parameter too: as a run-time flag it
// put a branch in every code group.
template <int R, int P, DType t, bool Bytes>
REWIND_VNNI __attribute__((always_inline)) inline void int8_tile_avx512_one(
    const QuantizedActs& xa, int64_t r0, const std::byte* panels, int64_t panel_stride, float* y,
    int64_t ldy, int ncols, int64_t y_step, PrefetchStream* pf) {
  const ActRows<R> xr(xa, r0);
  // The packed block's size as a constant for the decode prefetch (bytes serves prefill only);
  // pb: the stride of the blocks the tile reads (packed, or expanded for prefill).
  constexpr int64_t kPb = quant_panel_block_bytes(t);
  // Q5_K and Q6_K are packed in the order this tile reads them (q6k_lo_group, k_lo_group), so
  // their reads are linear. Q5_K streams best with no software prefetch: the hardware
  // prefetchers follow its linear reads.
  constexpr int64_t kAhead = t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K
                                 ? kPrefetchBytesL2Far
                             : t == DType::Q6_K ? kPrefetchBytesL2Q6K
                                                : kPrefetchBytesL2;
  constexpr int64_t pb = !Bytes                                 ? kPb
                         : t == DType::Q6_K                     ? kQ6KBytesBlock
                         : t == DType::IQ4_XS                   ? kIQ4XSBytesBlock
                         : t == DType::Q2_K                     ? kQ2KBytesBlock
                         : t == DType::Q3_K                     ? kQ3KScaledBlock
                         : t == DType::Q4_1 || t == DType::Q5_1 ? kMinBytesBlock
                                                                : kKBytesBlock;
  const int64_t nb = xa.k / xa.block;
  // Decode tiles of 3-8 rows (batched decode: no prefill stream) prefetch ahead as the 1-2 row
  // ones do; the prefill tiles read their panels from the cache.
  const bool tall = R >= 3 && pf == nullptr;
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf) pf->step();  // prefill: the next panel group, a few lines per block
    const std::byte* blk[P];
    for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + b * pb;
    __m512 dw[P];
    for (int p = 0; p < P; ++p) dw[p] = load_f16x16(blk[p]);
    __m512i s[R][P];
    if constexpr (t == DType::Q8_0) {
      // u8 operand q + 128 (sign bit flipped); -128 * sum(qx) corrects the offset.
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int r = 0; r < R; ++r) {
        const __m512i c = _mm512_set1_epi32(-128 * (xr.s16[r][2 * b] + xr.s16[r][2 * b + 1]));
        for (int p = 0; p < P; ++p) s[r][p] = c;
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        __m512i w[P];
        for (int p = 0; p < P; ++p) {
          prefetch_spread<R, kPb, 8, kAhead>(blk[p], g, tall);
          w[p] = _mm512_xor_si512(load_group(blk[p] + kQ8QOff + 64 * g), flip);
        }
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 4 * g));
          for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpbusd_epi32(s[r][p], w[p], a);
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
    } else if constexpr (t == DType::Q4_0 || t == DType::IQ4_NL || t == DType::Q4_1 ||
                         t == DType::Q5_1 || t == DType::Q5_0) {
      // Q4_0: the codes c (0..15) are the u8 operand as they are, s = sum c * x - 8 * sum x.
      // IQ4_NL: vpshufb looks the codes up as kIq4nlValues[c] + 128 (1..241, a valid u8
      // operand), s = sum (v + 128) * x - 128 * sum x. Either way Q8_0's integer for its value.
      // Q4_1 / Q5_1: s = sum c * x from zero (c = 0..15 / 0..31), then the min's fma. Q5_0
      // (decode; its prefill runs Q8_0's tile on the Q8_0 blocks expand_nibble_bytes makes): the
      // 5-bit codes, s = sum c * x - 16 * sum x, Q8_0's integer for q = c - 16.
      constexpr bool nl = t == DType::IQ4_NL, q5 = t == DType::Q5_1 || t == DType::Q5_0,
                     q41 = t == DType::Q4_1 || t == DType::Q5_1;
      const __m512i table = iq4_u8_table();
      for (int r = 0; r < R; ++r) {
        if constexpr (q41) {
          for (int p = 0; p < P; ++p) s[r][p] = zero_idiom();
        } else {
          const __m512i c = _mm512_set1_epi32((nl ? -128 : q5 ? -16 : -8) * int32_t{xr.s32[r][b]});
          for (int p = 0; p < P; ++p) s[r][p] = c;
        }
      }
      if constexpr (Bytes) {  // Q4_1 / Q5_1 prefill on expand_nibble_bytes' codes
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          __m512i w[P];
          for (int p = 0; p < P; ++p) w[p] = load_group(blk[p] + kQ8QOff + 64 * g);
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 4 * g));
            for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpbusd_epi32(s[r][p], w[p], a);
          }
        }
      } else {
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          __m512i lo[P], hi[P];
          for (int p = 0; p < P; ++p) {
            prefetch_spread<R, kPb, 4, kAhead>(blk[p], g, tall);
            nibble_codes<q5>(blk[p], g, lo[p], hi[p]);
            if constexpr (nl) {
              lo[p] = _mm512_shuffle_epi8(table, lo[p]);
              hi[p] = _mm512_shuffle_epi8(table, hi[p]);
            }
          }
          for (int r = 0; r < R; ++r) {
            const __m512i a0 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 8 * g));
            const __m512i a1 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 32 + 8 * g + 4));
            for (int p = 0; p < P; ++p) {
              s[r][p] = _mm512_dpbusd_epi32(s[r][p], lo[p], a0);
              s[r][p] = _mm512_dpbusd_epi32(s[r][p], hi[p], a1);
            }
          }
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
      if constexpr (q41) {  // acc = fma(m, dx * float(sum32(qx)), acc): one fma per output
        __m512 mw[P];
        for (int p = 0; p < P; ++p)
          mw[p] = load_f16x16(blk[p] + (Bytes ? kMinBytesMOff : min_offset(q5)));
        for (int r = 0; r < R; ++r) {
          const __m512 sx = _mm512_set1_ps(min_factor(xr.d[r][b], xr.s32[r][b]));
          for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(mw[p], sx, acc[r][p]);
        }
      }
    } else if constexpr (t == DType::Q4_K || t == DType::Q5_K || t == DType::IQ4_XS) {
      // IQ4_XS: the u8 operand kIq4nlValues[c] + 128 (1..241: vpshufb on the codes for decode,
      // expanded so for prefill), each sub-block sum started at -128 * sum32(qx) so that it ends
      // as sum kIq4nlValues[c] * qx; signed scales, no mins.
      constexpr bool xs = t == DType::IQ4_XS;
      constexpr int q_off = xs ? kIQ4XSQOff : kQ4KQOff, sc_off = xs ? kIQ4XSScOff : kQ4KScOff;
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      const __m512i table = iq4_u8_table();
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      // Q4_K decode (packed codes, up to 4 row-panel pairs): no shift per group. The low
      // nibbles (v & 0x0F) and the high ones in place (v & 0xF0, 16 times the code) go into two
      // sums per sub-block, lo and hi16, each over 16 values, so |lo| and |hi16 / 16| are at
      // most 15 * 127 * 16 = 30480: both fit int16, and one vpdpwssd against the scale in both
      // halves adds sc * (lo + hi) as the pair (lo, hi16 >> 4) (hi16 << 12 puts hi16 / 16 in
      // the high half, exactly). The same integer s1 as the one-sum path below.
      constexpr bool split = t == DType::Q4_K && !Bytes && R * P <= 4;
      if constexpr (split) {
        const __m512i m_lo = _mm512_set1_epi8(0x0F),
                      m_hi = _mm512_set1_epi8(static_cast<char>(0xF0));
        // vpshufb control: lane j's scale byte (its 128-bit lane's bytes 4L..4L+3 of the 16) in
        // both 16-bit halves of its 32-bit lane, zero-extended.
        const __m512i sc_ctl =
            _mm512_set_epi8(-1, 15, -1, 15, -1, 14, -1, 14, -1, 13, -1, 13, -1, 12, -1, 12,  //
                            -1, 11, -1, 11, -1, 10, -1, 10, -1, 9, -1, 9, -1, 8, -1, 8,      //
                            -1, 7, -1, 7, -1, 6, -1, 6, -1, 5, -1, 5, -1, 4, -1, 4,          //
                            -1, 3, -1, 3, -1, 2, -1, 2, -1, 1, -1, 1, -1, 0, -1, 0);
        for (int sb = 0; sb < 8; ++sb) {
          __m512i il[R][P], ih[R][P];
          for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) {
              il[r][p] = zero_idiom();
              ih[r][p] = zero_idiom();
            }
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            const int g = 4 * sb + c;
            __m512i lo[P], hi[P];
            for (int p = 0; p < P; ++p) {
              prefetch_spread<R, kPb, 32, kAhead>(blk[p], g, tall);
              const __m512i v = load_group(blk[p] + kQ4KQOff + 64 * g);
              lo[p] = _mm512_and_si512(v, m_lo);
              hi[p] = _mm512_and_si512(v, m_hi);
            }
            for (int r = 0; r < R; ++r) {
              const __m512i a0 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 8 * g));
              const __m512i a1 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 8 * g + 4));
              for (int p = 0; p < P; ++p) {
                il[r][p] = dpbusd_tied(il[r][p], lo[p], a0);
                ih[r][p] = dpbusd_tied(ih[r][p], hi[p], a1);
              }
            }
          }
          for (int p = 0; p < P; ++p) {
            // The 16 scale bytes in each 128-bit lane, then lane j's in both halves of lane j.
            const __m512i sc = _mm512_shuffle_epi8(
                _mm512_broadcast_i32x4(_mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(blk[p] + kQ4KScOff + 16 * sb))),
                sc_ctl);
            for (int r = 0; r < R; ++r) {
              const __m512i pair = _mm512_mask_blend_epi16(
                  static_cast<__mmask32>(0xAAAAAAAAu), il[r][p], _mm512_slli_epi32(ih[r][p], 12));
              s[r][p] = _mm512_dpwssd_epi32(s[r][p], pair, sc);
            }
          }
        }
      } else {
        // Both halves of a group as byte codes (4 or 5 bits) into one sum per sub-block: with 4
        // rows x 2 panels the f32, block and sub-block accumulators take 24 of the 32 registers
        // (a second sub-block sum for the high nibbles spilled).
        for (int sb = 0; sb < 8; ++sb) {
          __m512i is[R][P];
          for (int r = 0; r < R; ++r) {
            if constexpr (xs) {
              const __m512i c = _mm512_set1_epi32(-128 * int32_t{xr.s32[r][b * 8 + sb]});
              for (int p = 0; p < P; ++p) is[r][p] = c;
            } else {
              for (int p = 0; p < P; ++p) is[r][p] = zero_idiom();
            }
          }
          // Unrolled: c a constant in each copy (kquant_codes' shifts).
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            const int g = 4 * sb + c;
            __m512i lo[P], hi[P];
            for (int p = 0; p < P; ++p) {
              if constexpr (t != DType::Q5_K) prefetch_spread<R, kPb, 32, kAhead>(blk[p], g, tall);
              if constexpr (Bytes) {
                lo[p] = load_group(blk[p] + q_off + 128 * g);
                hi[p] = load_group(blk[p] + q_off + 128 * g + 64);
              } else if constexpr (xs) {
                const __m512i v = load_group(blk[p] + q_off + 64 * g);
                lo[p] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
                hi[p] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
              } else {
                kquant_codes<t == DType::Q5_K>(blk[p], sb, c, lo[p], hi[p]);
              }
            }
            for (int r = 0; r < R; ++r) {
              const __m512i a0 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 8 * g));
              const __m512i a1 = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 8 * g + 4));
              for (int p = 0; p < P; ++p) {
                is[r][p] = dpbusd_tied(is[r][p], lo[p], a0);
                is[r][p] = dpbusd_tied(is[r][p], hi[p], a1);
              }
            }
          }
          for (int p = 0; p < P; ++p) {
            const __m128i sc8 =
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + sc_off + 16 * sb));
            const __m512i sc = xs ? _mm512_cvtepi8_epi32(sc8) : _mm512_cvtepu8_epi32(sc8);
            for (int r = 0; r < R; ++r)
              s[r][p] = add_epi32_tied(s[r][p], _mm512_mullo_epi32(is[r][p], sc));
          }
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
      if constexpr (!xs) {
        // Mins: sum_s m[s] * sum32[s], pairs of sub-blocks per 16-bit dot product.
        for (int r = 0; r < R; ++r)
          for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
        for (int tp = 0; tp < 4; ++tp) {
          __m512i mv[P];
          for (int p = 0; p < P; ++p)
            mv[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(blk[p] + kQ4KMinOff + 32 * tp)));
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.s32[r] + b * 8 + 2 * tp));
            for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpwssd_epi32(s[r][p], mv[p], a);
          }
        }
        __m512 dmin[P];
        for (int p = 0; p < P; ++p) dmin[p] = load_f16x16(blk[p] + 32);
        combine<R, P, true>(acc, dmin, xr, b, s);
      }
    } else if constexpr (t == DType::Q2_K) {
      // As Q4_K with 16 sub-blocks of 16 values: the codes (0..3) are the u8 operand as they
      // are, built in registers (decode), the scale and min of a sub-block the low and high
      // nibble of its byte. Prefill's expanded bytes hold q * sc: s1 in one sum, no vpmulld.
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      if constexpr (Bytes) {
#pragma GCC unroll 4
        for (int g = 0; g < 64; ++g) {
          __m512i w[P];
          for (int p = 0; p < P; ++p) w[p] = load_group(blk[p] + kQ2KQOff + 64 * g);
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
            for (int p = 0; p < P; ++p) s[r][p] = dpbusd_tied(s[r][p], w[p], a);
          }
        }
      } else {
        for (int sb = 0; sb < 16; ++sb) {
          __m512i is[R][P], codes[P];
          for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) is[r][p] = zero_idiom();
          for (int p = 0; p < P; ++p) codes[p] = load_group(blk[p] + kQ2KQOff + 64 * sb);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const int g = 4 * sb + i;
            __m512i w[P];
            for (int p = 0; p < P; ++p) {
              prefetch_spread<R, kPb, 64, kAhead>(blk[p], g, tall);
              w[p] = q2_k_codes(codes[p], i);
            }
            for (int r = 0; r < R; ++r) {
              const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
              for (int p = 0; p < P; ++p) is[r][p] = dpbusd_tied(is[r][p], w[p], a);
            }
          }
          for (int p = 0; p < P; ++p) {
            const __m512i sc = _mm512_and_si512(
                _mm512_cvtepu8_epi32(_mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(blk[p] + kQ2KScOff + 16 * sb))),
                _mm512_set1_epi32(0xF));
            for (int r = 0; r < R; ++r)
              s[r][p] = add_epi32_tied(s[r][p], _mm512_mullo_epi32(is[r][p], sc));
          }
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
      // Mins: sum_s m[s] * sum16[s], pairs of sub-blocks per 16-bit dot product (the two
      // sub-blocks' bytes interleaved per lane, the high nibbles taken).
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      for (int tp = 0; tp < 8; ++tp) {
        __m512i mv[P];
        for (int p = 0; p < P; ++p) {
          const __m128i b0 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + kQ2KScOff + 32 * tp));
          const __m128i b1 =
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[p] + kQ2KScOff + 32 * tp + 16));
          mv[p] = _mm512_srli_epi16(_mm512_cvtepu8_epi16(_mm256_set_m128i(
                                        _mm_unpackhi_epi8(b0, b1), _mm_unpacklo_epi8(b0, b1))),
                                    4);
        }
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(i16_pair(xr.s16[r] + b * 16 + 2 * tp));
          for (int p = 0; p < P; ++p) s[r][p] = _mm512_dpwssd_epi32(s[r][p], mv[p], a);
        }
      }
      __m512 dmin[P];
      for (int p = 0; p < P; ++p) dmin[p] = load_f16x16(blk[p] + 32);
      combine<R, P, true>(acc, dmin, xr, b, s);
    } else if constexpr (t == DType::Q3_K && Bytes) {
      // Prefill on expand_q3_k_scaled's bytes q * sc + 124: one sum from -124 * sum(qx).
      for (int r = 0; r < R; ++r) {
        int32_t sum = 0;
        for (int j = 0; j < 8; ++j) sum += xr.s32[r][b * 8 + j];
        const __m512i c = _mm512_set1_epi32(-124 * sum);
        for (int p = 0; p < P; ++p) s[r][p] = c;
      }
#pragma GCC unroll 4
      for (int g = 0; g < 64; ++g) {
        __m512i w[P];
        for (int p = 0; p < P; ++p) w[p] = load_group(blk[p] + kQ3KScaledOff + 64 * g);
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
          for (int p = 0; p < P; ++p) s[r][p] = dpbusd_tied(s[r][p], w[p], a);
        }
      }
      combine<R, P>(acc, dw, xr, b, s);
    } else if constexpr (t == DType::Q6_K && !Bytes) {
      // Q6_K decode: the u8 operand q + 32 of each 4-value group built from the sub-block's
      // two nibble groups (v0, v1) and its high-bit group h by one select each (bits 0-3 from
      // the nibbles, 4-7 from the high bits): h & 0x33 holds groups 0 and 2's high bits at
      // bits 0-1 and 4-5, h & 0xCC groups 1 and 3's at bits 2-3 and 6-7, so each shifted into
      // bits 4-5 leaves zeros in bits 6-7 (a 32-bit shift moves only masked-out bits across
      // bytes). Each sub-block sum starts at -32 * sum16(qx) and is scaled by vpmulld.
      const __m512i m33 = _mm512_set1_epi8(0x33), mcc = _mm512_set1_epi8(static_cast<char>(0xCC)),
                    m0f = _mm512_set1_epi8(0x0F);
      constexpr int kSel = 0xE4;  // vpternlogd: C ? A : B
      // -32 * sum16(qx) of the block's 16 sub-blocks per row, broadcast from memory below.
      alignas(64) int32_t off[R][16];
      for (int r = 0; r < R; ++r)
        _mm512_store_si512(
            reinterpret_cast<void*>(off[r]),
            _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_slli_epi32(
                    _mm512_loadu_si512(reinterpret_cast<const void*>(xr.s16[r] + b * 16)), 5)));
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      for (int sb = 0; sb < 16; ++sb) {
        __m512i is[R][P];
        for (int r = 0; r < R; ++r)
          for (int p = 0; p < P; ++p) is[r][p] = _mm512_set1_epi32(off[r][sb]);
        __m512i w[4][P];
        for (int p = 0; p < P; ++p) {
          const std::byte* q = blk[p] + kQ6KLoOff + 192 * sb;
          if (R <= 2 || tall) {  // every line of the stream (210 bytes a sub-block), as
            // prefetch_spread's distances
            const auto a = reinterpret_cast<uintptr_t>(blk[p]) + static_cast<uintptr_t>(210 * sb);
            for (int i = 0; i < 4; ++i)
              prefetch_line<true, R <= 4 ? kAhead : kPrefetchBytesTall>(a + 64 * i);
          }
          const __m512i v0 = load_group(q), v1 = load_group(q + 64), h = load_group(q + 128);
          const __m512i ha = _mm512_and_si512(h, m33), hb = _mm512_and_si512(h, mcc);
          w[0][p] = _mm512_ternarylogic_epi32(v0, _mm512_slli_epi32(ha, 4), m0f, kSel);
          w[1][p] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(v0, 4), _mm512_slli_epi32(hb, 2),
                                              m0f, kSel);
          w[2][p] = _mm512_ternarylogic_epi32(v1, ha, m0f, kSel);
          w[3][p] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(v1, 4), _mm512_srli_epi32(hb, 2),
                                              m0f, kSel);
        }
        for (int i = 0; i < 4; ++i)
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 16 * sb + 4 * i));
            for (int p = 0; p < P; ++p) is[r][p] = _mm512_dpbusd_epi32(is[r][p], w[i][p], a);
          }
        add_scaled_sub_block<R, P>(s, is, blk, sb);
      }
      combine<R, P>(acc, dw, xr, b, s);
    } else {  // Q6_K prefill: expanded u8 codes q + 32, -32 * sum16(qx) per sub-block.
      // Q3_K (packed, decode): the u8 operand c = q + 4 (0..7) built in registers, -4 * sum16.
      constexpr bool q3 = t == DType::Q3_K;
      for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) s[r][p] = _mm512_setzero_si512();
      for (int sb = 0; sb < 16; ++sb) {
        __m512i is[R][P];
        for (int r = 0; r < R; ++r) {
          const __m512i c = _mm512_set1_epi32((q3 ? -4 : -32) * xr.s16[r][b * 16 + sb]);
          for (int p = 0; p < P; ++p) is[r][p] = c;
        }
        // Q3_K: the sub-block's low-bit group and its shifted high-bit group (the one shift
        // whose count is not a constant), once for its 4 groups.
        __m512i q3lo[P], q3hi[P];
        if constexpr (q3)
          for (int p = 0; p < P; ++p) q3_k_sub_block(blk[p], sb, q3lo[p], q3hi[p]);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const int g = 4 * sb + i;
          __m512i w[P];
          for (int p = 0; p < P; ++p) {
            prefetch_spread<R, kPb, 64, kAhead>(blk[p], g, tall);
            w[p] = q3 ? q3_k_codes(q3lo[p], q3hi[p], i) : load_group(blk[p] + kQ6KLoOff + 64 * g);
          }
          for (int r = 0; r < R; ++r) {
            const __m512i a = _mm512_set1_epi32(load_i32(xr.q[r] + b * 256 + 4 * g));
            for (int p = 0; p < P; ++p) is[r][p] = _mm512_dpbusd_epi32(is[r][p], w[p], a);
          }
        }
        add_scaled_sub_block<R, P>(s, is, blk, sb);
      }
      combine<R, P>(acc, dw, xr, b, s);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + y_step * p,
                            lane_mask(static_cast<int>(ncols - y_step * p)), acc[r][p]);
}

// n_tiles row tiles, one below the other, in one call (the tile inlined into the loop): a call
// per tile costs measurably at prefill.
template <int R, int P, DType t, bool Bytes>
REWIND_VNNI void int8_tile_avx512_t(const QuantizedActs& xa, int64_t r0, const std::byte* panels,
                                    int64_t panel_stride, float* y, int64_t ldy, int ncols,
                                    int64_t y_step, PrefetchStream* pf, int64_t n_tiles) {
  for (int64_t i = 0; i < n_tiles; ++i)
    int8_tile_avx512_one<R, P, t, Bytes>(xa, r0 + i * R, panels, panel_stride, y + i * R * ldy, ldy,
                                         ncols, y_step, pf);
}

template <int R, int P>
REWIND_VNNI void int8_tile_avx512(DType t, const QuantizedActs& xa, int64_t r0,
                                  const std::byte* panels, int64_t panel_stride, float* y,
                                  int64_t ldy, int ncols, int64_t y_step, bool bytes,
                                  PrefetchStream* pf, int64_t n_tiles) {
#define REWIND_INT8_TYPE(T)                                                                      \
  return int8_tile_avx512_t<R, P, T, false>(xa, r0, panels, panel_stride, y, ldy, ncols, y_step, \
                                            pf, n_tiles)
#define REWIND_INT8_TYPE_BYTES(T)                                                                \
  return bytes ? int8_tile_avx512_t<R, P, T, true>(xa, r0, panels, panel_stride, y, ldy, ncols,  \
                                                   y_step, pf, n_tiles)                          \
               : int8_tile_avx512_t<R, P, T, false>(xa, r0, panels, panel_stride, y, ldy, ncols, \
                                                    y_step, pf, n_tiles)
  if (t == DType::Q4_0) REWIND_INT8_TYPE(DType::Q4_0);
  if constexpr (R <= 4) {  // taller tiles serve Q4_0's prefill alone
    switch (t) {
      case DType::Q8_0:
        REWIND_INT8_TYPE(DType::Q8_0);
      case DType::IQ4_NL:
        REWIND_INT8_TYPE(DType::IQ4_NL);
      case DType::Q4_1:
        REWIND_INT8_TYPE_BYTES(DType::Q4_1);
      case DType::Q5_1:
        REWIND_INT8_TYPE_BYTES(DType::Q5_1);
      case DType::Q5_0:
        REWIND_INT8_TYPE(DType::Q5_0);
      case DType::Q4_K:
        REWIND_INT8_TYPE_BYTES(DType::Q4_K);
      case DType::Q5_K:
        REWIND_INT8_TYPE_BYTES(DType::Q5_K);
      case DType::Q6_K:
        REWIND_INT8_TYPE_BYTES(DType::Q6_K);
      case DType::Q3_K:
        REWIND_INT8_TYPE_BYTES(DType::Q3_K);
      case DType::IQ4_XS:
        REWIND_INT8_TYPE_BYTES(DType::IQ4_XS);
      case DType::Q2_K:
        REWIND_INT8_TYPE_BYTES(DType::Q2_K);
      default:
        break;
    }
  }
#undef REWIND_INT8_TYPE
#undef REWIND_INT8_TYPE_BYTES
  REWIND_CHECK_MSG(false, "int8 tile: no VNNI tile for this type and height");
}

}  // namespace

// Rows 5 and 6 (Q4_0 prefill) only with 1 or 2 panels (the accumulators of 6 x 2 tiles fill
// the registers).
#define REWIND_INT8_ROW(R) \
  { int8_tile_avx512<R, 1>, int8_tile_avx512<R, 2>, int8_tile_avx512<R, 3>, int8_tile_avx512<R, 4> }
#define REWIND_INT8_ROW2(R) \
  { int8_tile_avx512<R, 1>, int8_tile_avx512<R, 2>, nullptr, nullptr }
const Int8TileFn kInt8Tiles[kInt8MaxR][kInt8MaxP] = {REWIND_INT8_ROW(1),  REWIND_INT8_ROW(2),
                                                     REWIND_INT8_ROW(3),  REWIND_INT8_ROW(4),
                                                     REWIND_INT8_ROW2(5), REWIND_INT8_ROW2(6)};
#undef REWIND_INT8_ROW2
#undef REWIND_INT8_ROW

namespace {
// Batched decode of 5-8 rows (has_tall_tile's types) in one tile of one panel: each code group
// is built once for all the rows. With one panel the accumulators of 8 rows fit the registers.
template <int R>
REWIND_VNNI void int8_tall_tile(DType t, const QuantizedActs& xa, int64_t r0,
                                const std::byte* panels, int64_t panel_stride, float* y,
                                int64_t ldy, int ncols, int64_t y_step, bool, PrefetchStream* pf,
                                int64_t n_tiles) {
  switch (t) {
    case DType::Q6_K:
      return int8_tile_avx512_t<R, 1, DType::Q6_K, false>(xa, r0, panels, panel_stride, y, ldy,
                                                          ncols, y_step, pf, n_tiles);
    case DType::Q4_K:
      return int8_tile_avx512_t<R, 1, DType::Q4_K, false>(xa, r0, panels, panel_stride, y, ldy,
                                                          ncols, y_step, pf, n_tiles);
    default:
      break;
  }
  REWIND_CHECK_MSG(false, "int8 tile: no tall VNNI tile for this type");
}
}  // namespace

const Int8TileFn kInt8TallTiles[kInt8BatchRows - 4] = {int8_tall_tile<5>, int8_tall_tile<6>,
                                                       int8_tall_tile<7>, int8_tall_tile<8>};

WidenFn widen_fn_avx512(DType t) {
  switch (t) {
    case DType::Q8_0:
      return widen_q8_0_avx512;
    case DType::Q4_0:
      return widen_nibbles_avx512<DType::Q4_0>;
    case DType::IQ4_NL:
      return widen_nibbles_avx512<DType::IQ4_NL>;
    case DType::Q5_0:
      return widen_nibbles_avx512<DType::Q5_0>;
    case DType::Q4_1:
      return widen_min_avx512<false>;
    case DType::Q5_1:
      return widen_min_avx512<true>;
    case DType::Q4_K:
      return widen_k_avx512<false>;
    case DType::Q5_K:
      return widen_k_avx512<true>;
    case DType::Q6_K:
      return widen_q6_k_avx512;
    case DType::Q3_K:
      return widen_q3_k_avx512;
    case DType::IQ4_XS:
      return widen_iq4_xs_avx512;
    case DType::Q2_K:
      return widen_q2_k_avx512;
    default:
      return nullptr;
  }
}

// nb Q6_K panel blocks at src expanded to kQ6KBytesBlock each at dst (d and sc copied, the codes
// one byte each).
REWIND_AVX512 void expand_q6_k(const std::byte* src, int64_t nb, std::byte* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * quant_panel_block_bytes(DType::Q6_K);
    std::byte* o = dst + b * kQ6KBytesBlock;
    std::memcpy(o, blk, kQ6KLoOff);
    for (int g = 0; g < 64; ++g)
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ6KLoOff + 64 * g), q6_k_codes(blk, g));
  }
}

// nb Q4_K / Q5_K panel blocks at src expanded to kKBytesBlock each at dst, for the VNNI prefill
// tiles: the header copied, then the codes one byte each.
REWIND_AVX512 void expand_k_bytes(const std::byte* src, int64_t nb, bool q5, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(q5 ? DType::Q5_K : DType::Q4_K);
  for (int64_t b = 0; b < nb; ++b) {
    std::byte* o = dst + b * kKBytesBlock;
    std::memcpy(o, src + b * pb, static_cast<size_t>(kQ4KQOff));
    expand_k_block_codes(src + b * pb, q5, o + kQ4KQOff);
  }
}

// nb Q3_K panel blocks at src expanded to kQ3KScaledBlock each at dst (see kQ3KScaledOff): q * sc
// + 124 per value, as (c - 4) * sc + 124 = c * sc + (124 - 4 sc) on 16-bit halves (c = q + 4 from
// q3_k_codes, the lane's scale in both halves of its 32 bits), the even and odd bytes apart.
REWIND_AVX512 void expand_q3_k_scaled(const std::byte* src, int64_t nb, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::Q3_K);
  const __m512i low8 = _mm512_set1_epi16(0x00FF);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * kQ3KScaledBlock;
    std::memcpy(o, blk, 32);  // d
    for (int sb = 0; sb < 16; ++sb) {
      __m512i lo, h;
      q3_k_sub_block(blk, sb, lo, h);
      const __m512i sc32 = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6KScOff + 16 * sb)));
      const __m512i sc16 = halves16(sc32);
      const __m512i k16 = _mm512_sub_epi16(_mm512_set1_epi16(124), _mm512_slli_epi16(sc16, 2));
      for (int i = 0; i < 4; ++i) {
        const __m512i c = q3_k_codes(lo, h, i);
        const __m512i even =
            _mm512_add_epi16(_mm512_mullo_epi16(_mm512_and_si512(c, low8), sc16), k16);
        const __m512i odd =
            _mm512_add_epi16(_mm512_mullo_epi16(_mm512_srli_epi16(c, 8), sc16), k16);
        _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ3KScaledOff + 64 * (4 * sb + i)),
                            _mm512_or_si512(even, _mm512_slli_epi16(odd, 8)));
      }
    }
  }
}

// nb Q2_K panel blocks at src expanded to kQ2KBytesBlock each at dst, for the VNNI prefill tile:
// the header copied, then each code times its sub-block's scale one byte each (vpmullw on byte
// pairs: q * sc <= 45, so neither byte carries into the other).
REWIND_AVX512 void expand_q2_k_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::Q2_K);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * kQ2KBytesBlock;
    std::memcpy(o, blk, static_cast<size_t>(kQ2KQOff));
    for (int s = 0; s < 16; ++s) {
      const __m512i codes = load_group(blk + kQ2KQOff + 64 * s);
      const __m512i sc = halves16(_mm512_and_si512(
          _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ2KScOff + 16 * s))),
          _mm512_set1_epi32(0xF)));
      for (int i = 0; i < 4; ++i)
        _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ2KQOff + 64 * (4 * s + i)),
                            _mm512_mullo_epi16(q2_k_codes(codes, i), sc));
    }
  }
}

// nb IQ4_XS panel blocks at src expanded to kIQ4XSBytesBlock each at dst, for the VNNI prefill
// tile: the header copied, then the u8 operands kIq4nlValues[c] + 128 one byte each.
REWIND_AVX512 void expand_iq4_xs_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  const int64_t pb = quant_panel_block_bytes(DType::IQ4_XS);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = iq4_u8_table();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * kIQ4XSBytesBlock;
    std::memcpy(o, blk, static_cast<size_t>(kIQ4XSQOff));
    for (int g = 0; g < 32; ++g) {
      const __m512i v = load_group(blk + kIQ4XSQOff + 64 * g);
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kIQ4XSQOff + 128 * g),
                          _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4)));
      _mm512_storeu_si512(
          reinterpret_cast<void*>(o + kIQ4XSQOff + 128 * g + 64),
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)));
    }
  }
}

// nb panel blocks of type T at src, each expanded at dst to d, then its codes minus Off one byte
// each in Q8_0's 8 groups (nibble group g's low halves are Q8_0 group 2g, its high halves group
// 2g + 1), then (Q4_1 / Q5_1) m: for Q4_1 / Q5_1 the VNNI prefill tile's kMinBytesBlock blocks
// (Off 0), for Q5_0 the Q8_0 panel blocks of its transcoding (Off 16: q = c - 16), which Q8_0's
// tiles run on.
template <DType T, int Off>
REWIND_AVX512 void expand_nibble_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  constexpr bool q5 = T == DType::Q5_0 || T == DType::Q5_1, min = T != DType::Q5_0;
  const int64_t pb = quant_panel_block_bytes(T),
                db = min ? kMinBytesBlock : quant_panel_block_bytes(DType::Q8_0);
  const __m512i off = _mm512_set1_epi8(Off);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk = src + b * pb;
    std::byte* o = dst + b * db;
    std::memcpy(o, blk, 32);
    for (int g = 0; g < 4; ++g) {
      __m512i lo, hi;
      nibble_codes<q5>(blk, g, lo, hi);
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ8QOff + 128 * g), _mm512_sub_epi8(lo, off));
      _mm512_storeu_si512(reinterpret_cast<void*>(o + kQ8QOff + 128 * g + 64),
                          _mm512_sub_epi8(hi, off));
    }
    if constexpr (min) std::memcpy(o + kMinBytesMOff, blk + min_offset(q5), 32);
  }
}

REWIND_AVX512 void expand_q4_k_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  expand_k_bytes(src, nb, false, dst);
}
REWIND_AVX512 void expand_q5_k_bytes(const std::byte* src, int64_t nb, std::byte* dst) {
  expand_k_bytes(src, nb, true, dst);
}

template void expand_nibble_bytes<DType::Q5_0, 16>(const std::byte*, int64_t, std::byte*);
template void expand_nibble_bytes<DType::Q4_1, 0>(const std::byte*, int64_t, std::byte*);
template void expand_nibble_bytes<DType::Q5_1, 0>(const std::byte*, int64_t, std::byte*);

// One row of k values in blocks of n (32 or 256) into codes q, scales d and sums per 16 codes
// s16, with quantize_block_scalar's bits for every block: the maxima are exact, and 127 / amax,
// the scale and its fp16 rounding (nearest even, as f32_to_f16) are IEEE operations, here on 16
// blocks at a time; blocks with inf / NaN or amax < 1e-30 go to the scalar. (A per-block AVX-512
// quantiser spent about as long on its two scalar divisions and the software fp16 rounding as on
// the rest of its work.)
REWIND_AVX512 void quantize_row_avx512(const float* x, int64_t k, int n, int8_t* q, float* d,
                                       int32_t* s16) {
  constexpr int kChunk = 64;  // blocks per pass
  alignas(64) float amax[kChunk], id[kChunk];
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  const int64_t nb = k / n;
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int nbc = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
    uint64_t special = 0;  // the blocks that the scalar quantises
    for (int j = 0; j < nbc; ++j) {
      const float* xb = x + (b0 + j) * n;
      __m512 mx = _mm512_setzero_ps();
      __mmask16 bad = 0;
      for (int i = 0; i < n; i += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xb + i));
        bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ);  // inf or NaN
        mx = _mm512_max_ps(mx, a);
      }
      amax[j] = _mm512_reduce_max_ps(mx);
      if (bad || amax[j] < 1e-30f) {
        special |= uint64_t{1} << j;
        amax[j] = 1.0f;  // a harmless lane below
      }
    }
    for (int j = 0; j < nbc; j += 16) {
      const __mmask16 m = lane_mask(nbc - j);
      const __m512 a = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, amax + j);
      const __m512 idv = _mm512_div_ps(_mm512_set1_ps(127.0f), a);
      __m512 dv;
      if (n == 256) {
        dv = _mm512_div_ps(_mm512_set1_ps(1.0f), idv);
      } else {  // act_scale: amax / 127 rounded to fp16 unless past its range
        const __m512 raw = _mm512_div_ps(a, _mm512_set1_ps(127.0f));
        const __m512 r16 =
            _mm512_cvtph_ps(_mm512_cvtps_ph(raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        dv = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(raw, _mm512_set1_ps(65504.0f), _CMP_LE_OQ),
                                  raw, r16);
      }
      _mm512_store_ps(id + j, idv);
      _mm512_mask_storeu_ps(d + b0 + j, m, dv);
    }
    for (int j = 0; j < nbc; ++j) {
      const int64_t b = b0 + j;
      if ((special >> j) & 1) {
        quantize_block_scalar(x + b * n, n, q + b * n, d + b);
        continue;
      }
      const __m512 idb = _mm512_set1_ps(id[j]);
      for (int i = 0; i < n; i += 16) {
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + b * n + i), idb));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * n + i), _mm512_cvtsepi32_epi8(v));
      }
    }
  }
  // Sums per 16 codes: vpsadbw of the codes offset to u8 (q + 128) gives sums of 8, each 8 * 128
  // over; pairs of them are the sums of 16.
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(q + i), _mm512_set1_epi8(-128));
    alignas(64) uint64_t s8[8];
    _mm512_store_si512(s8, _mm512_sad_epu8(u, _mm512_setzero_si512()));
    for (int h = 0; h < 4; ++h)
      s16[i / 16 + h] = static_cast<int32_t>(s8[2 * h] + s8[2 * h + 1]) - 16 * 128;
  }
  sums16_scalar(q, i, k, s16);
}

#pragma GCC diagnostic pop

}  // namespace rw::detail
