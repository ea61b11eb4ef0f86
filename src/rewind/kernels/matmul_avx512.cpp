// AVX-512 micro-kernels of the matmul (layout and contract: matmul_isa.h). One panel = one zmm
// of 16 fp32 columns. A tile is R rows x P panels: R*P zmm accumulators; per k, P panel loads,
// R broadcasts of x[r, k] and R*P FMAs acc[r][p] = fma(x[r, k], w_p[k], acc[r][p]).
//
// Everything below the includes is compiled for AVX-512 (pragma) and lives in an anonymous
// namespace, so no inline function shared with other translation units is ever emitted with
// AVX-512 instructions. Only matmul_isa_avx512() (outside the pragma) is visible; the
// dispatcher calls it only on a CPU with AVX-512F/BW/VL.
#include <immintrin.h>

#include <cstdint>

#include "rewind/kernels/matmul_isa.h"

namespace rw::detail {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")

constexpr int kMR = 8;  // large tiles: 8 rows x 3 panels = 24 accumulators
constexpr int kNP = 3;
constexpr int kMRSmall = 2;  // decode tiles: up to 2 rows x 6 panels
constexpr int kNPSmall = 6;
// Stream prefetch distance, in k steps (32 k = 2 KiB ahead in an F32 panel, 1 KiB in a BF16
// one), for the tile calls the driver marks as memory-bound (few rows share each weight): the
// hardware prefetchers ramp up too slowly on each new panel stream. Into L2 (prefetcht1): the
// weights are read once per tile call and need not displace L1.
constexpr int kStreamPrefetchK = 32;

// bf16 pair lanes -> fp32 of the low halves (w[., k]): a 32-bit shift left by 16. Written with
// a GCC vector shift, which emits vpslld like _mm512_slli_epi32 without that intrinsic's
// spurious -Wmaybe-uninitialized in GCC 12.
typedef uint32_t U32x16 __attribute__((vector_size(64)));
inline __m512 low_half_f32(__m512i v) {
  return reinterpret_cast<__m512>(reinterpret_cast<U32x16>(v) << 16);
}

inline __mmask16 col_mask(int valid) {
  return valid >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (valid > 0 ? valid : 0)) - 1u);
}

template <int R, int P>
inline void load_acc(__m512 (&acc)[R][P], const __mmask16 (&mask)[P], const float* y, int64_t ldy,
                     bool accumulate) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
      acc[r][p] =
          accumulate ? _mm512_maskz_loadu_ps(mask[p], y + r * ldy + 16 * p) : _mm512_setzero_ps();
  }
}

template <int R, int P>
inline void store_acc(__m512 (&acc)[R][P], const __mmask16 (&mask)[P], float* y, int64_t ldy) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) _mm512_mask_storeu_ps(y + r * ldy + 16 * p, mask[p], acc[r][p]);
  }
}

// One k step: acc[r][p] = fma(x[r, k], b[p], acc[r][p]).
template <int R, int P>
inline __attribute__((always_inline)) void fma_step(__m512 (&acc)[R][P], const __m512 (&b)[P],
                                                    const float* const (&xr)[R], int64_t k) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(xr[r][k]);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(a, b[p], acc[r][p]);
  }
}

inline __attribute__((always_inline)) void prefetch_l2(const char* p) {
  _mm_prefetch(p, _MM_HINT_T1);
}
inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
// Prefetch (into L2) `bytes` past p. The address is formed as an integer: it may lie past the
// panel or the buffer (prefetches never fault), and no out-of-bounds pointer is ever formed.
// always_inline matters: GCC 12 finds a prefetch-only function "const" and deletes calls to it
// from always_inline lambdas before inlining (seen as missing prefetches in the object code).
inline __attribute__((always_inline)) void prefetch_ahead(const void* p, int64_t bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + bytes), _MM_HINT_T1);
}

template <int R, int P, bool kStream>
void tile_f32_body(const float* x, int64_t ldx, const float* w, int64_t w_stride, int64_t kc,
                   float* y, int64_t ldy, int ncols, bool accumulate, const char* pf,
                   int64_t pf_lines) {
  __mmask16 mask[P];
  for (int p = 0; p < P; ++p) mask[p] = col_mask(ncols - 16 * p);
  __m512 acc[R][P];
  load_acc<R, P>(acc, mask, y, ldy, accumulate);
  const float* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    __m512 b[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) b[p] = _mm512_load_ps(w + p * w_stride + k * 16);
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
  store_acc<R, P>(acc, mask, y, ldy);
}

template <int R, int P, bool kStream>
void tile_bf16_body(const float* x, int64_t ldx, const uint16_t* w, int64_t w_stride, int64_t kc,
                    float* y, int64_t ldy, int ncols, bool accumulate, const char* pf,
                    int64_t pf_lines) {
  __mmask16 mask[P];
  for (int p = 0; p < P; ++p) mask[p] = col_mask(ncols - 16 * p);
  __m512 acc[R][P];
  load_acc<R, P>(acc, mask, y, ldy, accumulate);
  const float* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = x + r * ldx;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  auto step2 = [&](int64_t k) __attribute__((always_inline)) {  // k and k + 1
    __m512 lo[P], hi[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m512i v = _mm512_load_si512(w + p * w_stride + k * 16);
      lo[p] = low_half_f32(v);                                    // w[., k]
      hi[p] = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));  // w[., k + 1]
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
  if (k < kc) {  // odd tail: the high halves are padding and are not used
    __m512 lo[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) lo[p] = low_half_f32(_mm512_load_si512(w + p * w_stride + k * 16));
    fma_step<R, P>(acc, lo, xr, k);
  }
  store_acc<R, P>(acc, mask, y, ldy);
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
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int p = 0; p < np; ++p) {
    const uint16_t* wp = w + p * w_stride;
    float* op = out + p * kc * 16;
    for (int64_t k = 0; k < kc; k += 2) {
      const __m512i v = _mm512_load_si512(wp + k * 16);
      _mm512_store_ps(op + k * 16, low_half_f32(v));
      if (k + 1 < kc)
        _mm512_store_ps(op + (k + 1) * 16, _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask)));
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
    TileTables<kMR, kNP, kMRSmall, kNPSmall, Tile>::make("avx512", &widen_bf16);

}  // namespace

const MatmulIsa* matmul_isa_avx512() {
  return &kIsa;
}

}  // namespace rw::detail
