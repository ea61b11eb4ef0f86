// AVX2 + FMA micro-kernels of the matmul (layout and contract: matmul_isa.h). One 16-column
// panel = two ymm (columns 0-7 and 8-15), with exactly the per-element arithmetic of the
// AVX-512 and scalar paths: acc = fma(x[r, k], w[c, k], acc) for k in order.
//
// As in matmul_avx512.cpp, everything below the includes is compiled for AVX2 (pragma) inside
// an anonymous namespace; only matmul_isa_avx2() is visible, and the dispatcher calls it only on
// a CPU with AVX2 and FMA.
#include <immintrin.h>

#include <cstdint>

#include "rewind/kernels/matmul_isa.h"

namespace rw::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

constexpr int kMR = 6;  // 6 rows x 1 panel = 12 ymm accumulators (16 ymm registers)
constexpr int kNP = 1;
constexpr int kMRSmall = 1;  // decode: 1 row x 3 panels = 6 accumulators
constexpr int kNPSmall = 3;
constexpr int kStreamPrefetchK = 64;  // stream prefetch distance in k steps (matmul_avx512.cpp)

// Lane masks (all-ones lanes are written) for columns [0, valid) of an 8-wide half.
inline __m256i half_mask(int valid) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), iota);
}

inline __attribute__((always_inline)) void prefetch_l2(const char* p) {
  _mm_prefetch(p, _MM_HINT_T1);
}
inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
// Prefetch (into L1) `bytes` past p. The address is formed as an integer: it may lie past the
// panel or the buffer (prefetches never fault), and no out-of-bounds pointer is ever formed.
// always_inline matters: GCC 12 finds a prefetch-only function "const" and deletes calls to it
// from always_inline lambdas before inlining (seen as missing prefetcht0 in the object code).
inline __attribute__((always_inline)) void prefetch_ahead(const void* p, int64_t bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + bytes), _MM_HINT_T0);
}

template <int R, int P>
inline __attribute__((always_inline)) void fma_step(__m256 (&acc)[R][2 * P],
                                                    const __m256 (&b)[2 * P],
                                                    const float* const (&xr)[R], int64_t k) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m256 a = _mm256_broadcast_ss(xr[r] + k);
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) acc[r][h] = _mm256_fmadd_ps(a, b[h], acc[r][h]);
  }
}

template <int R, int P, bool kStream>
void tile_f32_body(const float* x, int64_t ldx, const float* w, int64_t w_stride, int64_t kc,
                   float* y, int64_t ldy, int ncols, bool accumulate, const char* pf,
                   int64_t pf_lines) {
  __m256 acc[R][2 * P];
  const bool full = ncols >= 16 * P;
  __m256i mask[2 * P];
  for (int h = 0; h < 2 * P; ++h) mask[h] = half_mask(ncols - 8 * h);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      if (!accumulate) {
        acc[r][h] = _mm256_setzero_ps();
      } else if (full) {
        acc[r][h] = _mm256_loadu_ps(y + r * ldy + 8 * h);
      } else {
        acc[r][h] = _mm256_maskload_ps(y + r * ldy + 8 * h, mask[h]);
      }
    }
  }
  const float* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    __m256 b[2 * P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      b[2 * p] = _mm256_load_ps(w + p * w_stride + k * 16);
      b[2 * p + 1] = _mm256_load_ps(w + p * w_stride + k * 16 + 8);
    }
    if constexpr (kStream) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) prefetch_ahead(w + p * w_stride + k * 16, kStreamPrefetchK * 64);
    }
    fma_step<R, P>(acc, b, xr, k);
  };
  // While there are lines to prefetch: one per 4 k steps; then the plain loop.
  const int64_t k_pf_end = pf ? min64(kc & ~int64_t{3}, 4 * pf_lines) : 0;
  int64_t k = 0;
  for (; k < k_pf_end; k += 4) {
    prefetch_l2(pf + (k >> 2) * 64);
    step(k);
    step(k + 1);
    step(k + 2);
    step(k + 3);
  }
  for (; k < kc; ++k) step(k);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      if (full) {
        _mm256_storeu_ps(y + r * ldy + 8 * h, acc[r][h]);
      } else {
        _mm256_maskstore_ps(y + r * ldy + 8 * h, mask[h], acc[r][h]);
      }
    }
  }
}

template <int R, int P, bool kStream>
void tile_bf16_body(const float* x, int64_t ldx, const uint16_t* w, int64_t w_stride, int64_t kc,
                    float* y, int64_t ldy, int ncols, bool accumulate, const char* pf,
                    int64_t pf_lines) {
  __m256 acc[R][2 * P];
  const bool full = ncols >= 16 * P;
  __m256i mask[2 * P];
  for (int h = 0; h < 2 * P; ++h) mask[h] = half_mask(ncols - 8 * h);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      if (!accumulate) {
        acc[r][h] = _mm256_setzero_ps();
      } else if (full) {
        acc[r][h] = _mm256_loadu_ps(y + r * ldy + 8 * h);
      } else {
        acc[r][h] = _mm256_maskload_ps(y + r * ldy + 8 * h, mask[h]);
      }
    }
  }
  const float* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  // Pair-row q of a panel: 32 bf16 = two ymm; ymm h holds columns 8h..8h+7, each lane the pair
  // (w[c, 2q] low, w[c, 2q + 1] high).
  auto step2 = [&](int64_t k) __attribute__((always_inline)) {  // k and k + 1
    __m256 lo[2 * P], hi[2 * P];
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      const __m256i v = _mm256_load_si256(
          reinterpret_cast<const __m256i*>(w + (h / 2) * w_stride + k * 16 + (h % 2) * 16));
      lo[h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      hi[h] = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
    }
    if constexpr (kStream) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) prefetch_ahead(w + p * w_stride + k * 16, kStreamPrefetchK * 32);
    }
    fma_step<R, P>(acc, lo, xr, k);
    fma_step<R, P>(acc, hi, xr, k + 1);
  };
  const int64_t k_pf_end = pf ? min64(kc & ~int64_t{3}, 4 * pf_lines) : 0;
  int64_t k = 0;
  for (; k < k_pf_end; k += 4) {
    prefetch_l2(pf + (k >> 2) * 64);
    step2(k);
    step2(k + 2);
  }
  for (; k + 2 <= kc; k += 2) step2(k);
  if (k < kc) {
    __m256 lo[2 * P];
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      const __m256i v = _mm256_load_si256(
          reinterpret_cast<const __m256i*>(w + (h / 2) * w_stride + k * 16 + (h % 2) * 16));
      lo[h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    fma_step<R, P>(acc, lo, xr, k);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int h = 0; h < 2 * P; ++h) {
      if (full) {
        _mm256_storeu_ps(y + r * ldy + 8 * h, acc[r][h]);
      } else {
        _mm256_maskstore_ps(y + r * ldy + 8 * h, mask[h], acc[r][h]);
      }
    }
  }
}

// The stream-prefetch variant is chosen per call (see MatmulIsa::tile_f32).
template <int R, int P>
void tile_f32_rp(const float* x, int64_t ldx, const float* w, int64_t w_stride, int64_t kc,
                 float* y, int64_t ldy, int ncols, bool accumulate, const char* pf,
                 int64_t pf_lines, bool stream) {
  if (stream) {
    tile_f32_body<R, P, true>(x, ldx, w, w_stride, kc, y, ldy, ncols, accumulate, pf, pf_lines);
  } else {
    tile_f32_body<R, P, false>(x, ldx, w, w_stride, kc, y, ldy, ncols, accumulate, pf, pf_lines);
  }
}

template <int R, int P>
void tile_bf16_rp(const float* x, int64_t ldx, const uint16_t* w, int64_t w_stride, int64_t kc,
                  float* y, int64_t ldy, int ncols, bool accumulate, const char* pf,
                  int64_t pf_lines, bool stream) {
  if (stream) {
    tile_bf16_body<R, P, true>(x, ldx, w, w_stride, kc, y, ldy, ncols, accumulate, pf, pf_lines);
  } else {
    tile_bf16_body<R, P, false>(x, ldx, w, w_stride, kc, y, ldy, ncols, accumulate, pf, pf_lines);
  }
}

void widen_bf16(const uint16_t* w, int64_t w_stride, int64_t kc, int np, float* out) {
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int p = 0; p < np; ++p) {
    const uint16_t* wp = w + p * w_stride;
    float* op = out + p * kc * 16;
    for (int64_t k = 0; k < kc; k += 2) {
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wp + k * 16 + h * 16));
        _mm256_store_ps(op + k * 16 + 8 * h, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
        if (k + 1 < kc)
          _mm256_store_ps(op + (k + 1) * 16 + 8 * h,
                          _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask)));
      }
    }
  }
}

template <int R, int P>
struct Tile {
  static constexpr TileF32Fixed f32 = &tile_f32_rp<R, P>;
  static constexpr TileBf16Fixed bf16 = &tile_bf16_rp<R, P>;
};

#pragma GCC pop_options

constexpr MatmulIsa kIsa =
    TileTables<kMR, kNP, kMRSmall, kNPSmall, Tile>::make("avx2", &widen_bf16);

}  // namespace

const MatmulIsa* matmul_isa_avx2() {
  return &kIsa;
}

}  // namespace rw::detail
