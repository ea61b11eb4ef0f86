// Quantised weight panels: packing from ggml blocks and exact widening to f32 (layout in
// matmul_quant.h). The AVX-512 widen is compiled under a target attribute and chosen at run time;
// the scalar widen is the reference with the same per-element arithmetic.
#include "rewind/kernels/matmul_quant.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "rewind/base/check.h"
#include "rewind/tensor/quant.h"

namespace rw::detail {

namespace {

constexpr int kNR = 16;

// ---- scalar ----------------------------------------------------------------------------------

void widen_q8_0_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* q = reinterpret_cast<const int8_t*>(blk + 32);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]);
    for (int k = 0; k < 32; ++k) out[k * ld + j] = static_cast<float>(q[k * kNR + j]) * d;
  }
}

void widen_q4_k_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* m16 = reinterpret_cast<const uint16_t*>(blk + 32);
  const auto* sc = reinterpret_cast<const uint8_t*>(blk + 64);
  const auto* mn = reinterpret_cast<const uint8_t*>(blk + 192);
  const auto* q = reinterpret_cast<const uint8_t*>(blk + 320);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]), dmin = f16_to_f32(m16[j]);
    for (int s = 0; s < 8; ++s) {
      const float d1 = d * static_cast<float>(sc[s * kNR + j]);
      const float m1 = dmin * static_cast<float>(mn[s * kNR + j]);
      for (int i = 16 * s; i < 16 * s + 16; ++i) {
        const uint8_t b = q[i * kNR + j];
        out[(2 * i) * ld + j] = d1 * static_cast<float>(b & 0xF) - m1;
        out[(2 * i + 1) * ld + j] = d1 * static_cast<float>(b >> 4) - m1;
      }
    }
  }
}

void widen_q6_k_scalar(const std::byte* blk, float* out, int64_t ld) {
  const auto* d16 = reinterpret_cast<const uint16_t*>(blk);
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 32);
  const auto* q = reinterpret_cast<const int8_t*>(blk + 288);
  for (int j = 0; j < kNR; ++j) {
    const float d = f16_to_f32(d16[j]);
    for (int s = 0; s < 16; ++s) {
      const float ds = d * static_cast<float>(sc[s * kNR + j]);
      for (int k = 16 * s; k < 16 * s + 16; ++k)
        out[k * ld + j] = ds * static_cast<float>(q[k * kNR + j]);
    }
  }
}

// ---- AVX-512 ---------------------------------------------------------------------------------

#define REWIND_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
// GCC 12's avx512fintrin.h builds the unmasked conversions (cvtepi8_epi32, cvtepi32_ps,
// cvtph_ps) from their masked forms with an uninitialised pass-through operand and then warns
// about it in its own header; the operand is dead (all-ones mask).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

REWIND_AVX512 void widen_q8_0_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  const auto* q = reinterpret_cast<const __m128i*>(blk + 32);
  for (int k = 0; k < 32; ++k) {
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + k)));
    _mm512_storeu_ps(out + k * ld, _mm512_mul_ps(v, d));
  }
}

REWIND_AVX512 void widen_q4_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  const __m512 dmin =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
  const auto* sc = reinterpret_cast<const __m128i*>(blk + 64);
  const auto* mn = reinterpret_cast<const __m128i*>(blk + 192);
  const auto* q = reinterpret_cast<const __m128i*>(blk + 320);
  const __m512i lo_mask = _mm512_set1_epi32(0xF);
  for (int s = 0; s < 8; ++s) {
    const __m512 d1 =
        _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(sc + s))));
    const __m512 m1 =
        _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(mn + s))));
    for (int i = 16 * s; i < 16 * s + 16; ++i) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(q + i));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(b, lo_mask));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
      _mm512_storeu_ps(out + (2 * i) * ld, _mm512_sub_ps(_mm512_mul_ps(d1, lo), m1));
      _mm512_storeu_ps(out + (2 * i + 1) * ld, _mm512_sub_ps(_mm512_mul_ps(d1, hi), m1));
    }
  }
}

REWIND_AVX512 void widen_q6_k_avx512(const std::byte* blk, float* out, int64_t ld) {
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  const auto* sc = reinterpret_cast<const __m128i*>(blk + 32);
  const auto* q = reinterpret_cast<const __m128i*>(blk + 288);
  for (int s = 0; s < 16; ++s) {
    const __m512 ds =
        _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(sc + s))));
    for (int k = 16 * s; k < 16 * s + 16; ++k) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + k)));
      _mm512_storeu_ps(out + k * ld, _mm512_mul_ps(ds, v));
    }
  }
}

// Decode tiles (rows <= 2): the same per-lane dequantisation as the widen above, kept in
// registers and fed straight into the FMA chain (k in order), so the bits equal widen + the F32
// micro-kernel's; only the extra trip of the weights through scratch is saved.
__attribute__((always_inline)) inline __mmask16 lane_mask(int valid) {
  return valid >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (valid > 0 ? valid : 0)) - 1u);
}

constexpr int64_t kPrefetchBytes = 4096;  // per panel stream, ahead of the loads

// acc[r][p] = fma(x[r, k], w[p], acc[r][p]).
template <int R, int P>
REWIND_AVX512 __attribute__((always_inline)) inline void fma_step(__m512 (&acc)[R][P],
                                                                  const __m512 (&w)[P],
                                                                  const float* x, int64_t ldx,
                                                                  int64_t k) {
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_set1_ps(x[r * ldx + k]);
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(a, w[p], acc[r][p]);
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
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[P];
    for (int p = 0; p < P; ++p) blk[p] = panels + p * panel_stride + b * pb;
    if (t == DType::Q8_0) {
      __m512 d[P];
      for (int p = 0; p < P; ++p)
        d[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[p])));
      for (int kk = 0; kk < 32; ++kk) {
        __m512 w[P];
        for (int p = 0; p < P; ++p) {
          const auto* q = reinterpret_cast<const __m128i*>(blk[p] + 32) + kk;
          if ((kk & 3) == 0)
            _mm_prefetch(reinterpret_cast<const char*>(q) + kPrefetchBytes, _MM_HINT_T0);
          w[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d[p]);
        }
        fma_step<R, P>(acc, w, x, ldx, b * 32 + kk);
      }
    } else if (t == DType::Q4_K) {
      __m512 d[P], dmin[P];
      for (int p = 0; p < P; ++p) {
        d[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[p])));
        dmin[p] =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[p] + 32)));
      }
      const __m512i lo_mask = _mm512_set1_epi32(0xF);
      for (int s = 0; s < 8; ++s) {
        __m512 d1[P], m1[P];
        for (int p = 0; p < P; ++p) {
          const auto* sc = reinterpret_cast<const __m128i*>(blk[p] + 64) + s;
          const auto* mn = reinterpret_cast<const __m128i*>(blk[p] + 192) + s;
          d1[p] =
              _mm512_mul_ps(d[p], _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(sc))));
          m1[p] =
              _mm512_mul_ps(dmin[p], _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(mn))));
        }
        for (int i = 16 * s; i < 16 * s + 16; ++i) {
          __m512 wl[P], wh[P];
          for (int p = 0; p < P; ++p) {
            const auto* q = reinterpret_cast<const __m128i*>(blk[p] + 320) + i;
            if ((i & 3) == 0)
              _mm_prefetch(reinterpret_cast<const char*>(q) + kPrefetchBytes, _MM_HINT_T0);
            const __m512i bb = _mm512_cvtepu8_epi32(_mm_loadu_si128(q));
            wl[p] = _mm512_sub_ps(
                _mm512_mul_ps(d1[p], _mm512_cvtepi32_ps(_mm512_and_si512(bb, lo_mask))), m1[p]);
            wh[p] = _mm512_sub_ps(
                _mm512_mul_ps(d1[p], _mm512_cvtepi32_ps(_mm512_srli_epi32(bb, 4))), m1[p]);
          }
          fma_step<R, P>(acc, wl, x, ldx, b * 256 + 2 * i);
          fma_step<R, P>(acc, wh, x, ldx, b * 256 + 2 * i + 1);
        }
      }
    } else {  // Q6_K
      __m512 d[P];
      for (int p = 0; p < P; ++p)
        d[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[p])));
      for (int s = 0; s < 16; ++s) {
        __m512 ds[P];
        for (int p = 0; p < P; ++p)
          ds[p] = _mm512_mul_ps(d[p], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(blk[p] + 32) + s))));
        for (int k = 16 * s; k < 16 * s + 16; ++k) {
          __m512 w[P];
          for (int p = 0; p < P; ++p) {
            const auto* q = reinterpret_cast<const __m128i*>(blk[p] + 288) + k;
            if ((k & 3) == 0)
              _mm_prefetch(reinterpret_cast<const char*>(q) + kPrefetchBytes, _MM_HINT_T0);
            w[p] =
                _mm512_mul_ps(ds[p], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))));
          }
          fma_step<R, P>(acc, w, x, ldx, b * 256 + k);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * p, lane_mask(ncols - 16 * p), acc[r][p]);
}

using DecodeTileFn = void (*)(DType, const float*, int64_t, const std::byte*, int64_t, int64_t,
                              float*, int64_t, int);
constexpr DecodeTileFn kDecodeTiles[2][4] = {{decode_tile_avx512<1, 1>, decode_tile_avx512<1, 2>,
                                              decode_tile_avx512<1, 3>, decode_tile_avx512<1, 4>},
                                             {decode_tile_avx512<2, 1>, decode_tile_avx512<2, 2>,
                                              decode_tile_avx512<2, 3>, decode_tile_avx512<2, 4>}};

#pragma GCC diagnostic pop

using WidenFn = void (*)(const std::byte*, float*, int64_t);

bool use_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
}

}  // namespace

// Set by matmul_force_isa("scalar") through quant_force_scalar (tests compare the paths).
bool g_quant_force_scalar = false;

void pack_quant_panel(DType t, const std::byte* const* rows, int n_rows, int64_t k,
                      std::byte* dst) {
  const int64_t bk = dtype_block_elems(t), nb = k / bk;
  const int64_t pb = quant_panel_block_bytes(t);
  REWIND_CHECK(pb > 0 && k % bk == 0);
  std::memset(dst, 0, static_cast<size_t>(nb * pb));
  for (int64_t b = 0; b < nb; ++b) {
    std::byte* o = dst + b * pb;
    for (int j = 0; j < n_rows; ++j) {
      if (t == DType::Q8_0) {
        BlockQ8_0 x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ8_0), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int kk = 0; kk < 32; ++kk) o[32 + kk * kNR + j] = static_cast<std::byte>(x.qs[kk]);
      } else if (t == DType::Q4_K) {
        BlockQ4_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ4_K), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        std::memcpy(o + 32 + 2 * j, &x.dmin, 2);
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          q4k_scale_min(s, x.scales, &sc, &m);
          o[64 + s * kNR + j] = static_cast<std::byte>(sc);
          o[192 + s * kNR + j] = static_cast<std::byte>(m);
        }
        // ggml: byte l of chunk c (64 values) holds value 64c + l (low) and 64c + 32 + l (high).
        uint8_t v[kQK_K];
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 32; ++l) {
            v[64 * c + l] = x.qs[32 * c + l] & 0xF;
            v[64 * c + 32 + l] = x.qs[32 * c + l] >> 4;
          }
        for (int i = 0; i < 128; ++i)
          o[320 + i * kNR + j] = static_cast<std::byte>(v[2 * i] | (v[2 * i + 1] << 4));
      } else {
        BlockQ6_K x;
        std::memcpy(&x, rows[j] + b * sizeof(BlockQ6_K), sizeof x);
        std::memcpy(o + 2 * j, &x.d, 2);
        for (int s = 0; s < 16; ++s) o[32 + s * kNR + j] = static_cast<std::byte>(x.scales[s]);
        for (int e = 0; e < kQK_K; ++e)
          o[288 + e * kNR + j] = static_cast<std::byte>(static_cast<int8_t>(q6k_value(x, e)));
      }
    }
  }
}

bool quant_decode_tiles_available() {
  return use_avx512() && !g_quant_force_scalar;
}

void quant_decode_tiles(DType t, const float* x, int64_t ldx, int rows, const std::byte* panels,
                        int64_t panel_stride, int64_t nb, int np, float* y, int64_t ldy,
                        int ncols) {
  REWIND_CHECK(rows >= 1 && rows <= kQuantDecodeRows && quant_decode_tiles_available());
  for (int p0 = 0; p0 < np; p0 += kQuantDecodePanels) {
    const int npg = std::min(kQuantDecodePanels, np - p0);
    kDecodeTiles[rows - 1][npg - 1](t, x, ldx, panels + p0 * panel_stride, panel_stride, nb,
                                    y + 16 * p0, ldy, ncols - 16 * p0);
  }
}

void widen_quant(DType t, const std::byte* panels, int64_t panel_stride, int64_t b0, int64_t nb,
                 int np, float* out) {
  const bool simd = use_avx512() && !g_quant_force_scalar;
  WidenFn f = nullptr;
  switch (t) {
    case DType::Q8_0:
      f = simd ? widen_q8_0_avx512 : widen_q8_0_scalar;
      break;
    case DType::Q4_K:
      f = simd ? widen_q4_k_avx512 : widen_q4_k_scalar;
      break;
    case DType::Q6_K:
      f = simd ? widen_q6_k_avx512 : widen_q6_k_scalar;
      break;
    default:
      REWIND_CHECK_MSG(false, "widen_quant: not a quantised store");
  }
  const int64_t bk = dtype_block_elems(t), pb = quant_panel_block_bytes(t);
  const int64_t kc = nb * bk;
  for (int p = 0; p < np; ++p) {
    const std::byte* src = panels + p * panel_stride + b0 * pb;
    float* dst = out + p * kc * kNR;
    for (int64_t b = 0; b < nb; ++b) f(src + b * pb, dst + b * bk * kNR, kNR);
  }
}

}  // namespace rw::detail
