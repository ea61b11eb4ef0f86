#include "rewind/kernels/ops.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "rewind/base/aligned.h"
#include "rewind/base/clones.h"

namespace rw {

namespace {
constexpr int kLanes = 16;
// Row stride of the AVX-512 Gated DeltaNet strip's buffer: 64 state columns, then the row's k,
// q and next k of the token (broadcast from there: one line per row, never 4K-aliased by the
// strip's recent stores).
constexpr int kGdnRowStride = 80;

inline float reduce_lanes(const float* acc) {
  // Fixed tree: 16 -> 8 -> 4 -> 2 -> 1.
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  const float t2a = t4[0] + t4[2];
  const float t2b = t4[1] + t4[3];
  return t2a + t2b;
}

// e^x by a fixed algorithm (Cody-Waite reduction by ln2, degree-7 polynomial with explicit fma,
// exponent by bit arithmetic): the same IEEE operations in every clone and in scalar code, so
// results never depend on SIMD width; GCC vectorises it. Max relative error about 2e-7.
// Inputs are clamped to [-87, 88] (results stay normal; below, e^x would not matter next to 1).
inline __attribute__((always_inline)) float exp_fixed_inline(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = std::fma(x, 1.44269504088896341f, magic);
  const float n = t - magic;
  float r = std::fma(n, -0.693145751953125f, x);
  r = std::fma(n, -1.428606765330187e-6f, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t ti, ni;
  std::memcpy(&ti, &t, 4);
  const float m2 = magic;
  std::memcpy(&ni, &m2, 4);
  const int32_t e = (ti - ni + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}
}  // namespace

// Inlined into each clone that uses it (the fixed order is the same everywhere).
inline __attribute__((always_inline)) float dot_fixed_inline(const float* a, const float* b,
                                                             int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i + l < n; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  return reduce_lanes(acc);
}

// Sum in the same fixed 16-lane order.
inline __attribute__((always_inline)) float sum_fixed_inline(const float* a, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] + a[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] = acc[l] + a[i + l];
  return reduce_lanes(acc);
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define REWIND_DOT_SIMD 1
// GCC 12's avx512fintrin.h builds the 512 -> 256-bit cast and the lane shuffle from masked forms
// with an uninitialised pass-through operand and warns about it in its own header; the operand
// is dead (all-ones mask), as in matmul_quant.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// reduce_lanes from its first step on: t8 = lanes 0-7 + lanes 8-15 given, then the same adds
// (t4[i] = t8[i] + t8[i + 4], t2a = t4[0] + t4[2], t2b = t4[1] + t4[3], t2a + t2b) in registers.
__attribute__((target("avx2"))) inline float reduce_lanes8(__m256 t8) {
  const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  return _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1)));
}

// reduce_lanes8 of eight rows at once (t8 of row r in h[r]), returned as [row 0 .. row 7]: the
// same pairs are added (t4 from the 128-bit halves, t2 from lanes i and i + 2, then t2a + t2b),
// only with the rows transposed across registers, so each sum has reduce_lanes8's bits.
__attribute__((target("avx2"))) inline __m256 reduce_lanes8_x8(const __m256* h) {
  __m256 t4[4];  // rows 2i, 2i+1 in the low, high 128 bits
  for (int i = 0; i < 4; ++i)
    t4[i] = _mm256_add_ps(_mm256_permute2f128_ps(h[2 * i], h[2 * i + 1], 0x20),
                          _mm256_permute2f128_ps(h[2 * i], h[2 * i + 1], 0x31));
  // t2 of rows (0, 2 | 1, 3) and (4, 6 | 5, 7): [t2a, t2b] pairs per 128-bit half.
  const __m256 t2a =
      _mm256_add_ps(_mm256_shuffle_ps(t4[0], t4[1], 0x44), _mm256_shuffle_ps(t4[0], t4[1], 0xEE));
  const __m256 t2b =
      _mm256_add_ps(_mm256_shuffle_ps(t4[2], t4[3], 0x44), _mm256_shuffle_ps(t4[2], t4[3], 0xEE));
  // Rows 0, 2, 4, 6 | 1, 3, 5, 7, then in order.
  const __m256 sum =
      _mm256_add_ps(_mm256_shuffle_ps(t2a, t2b, 0x88), _mm256_shuffle_ps(t2a, t2b, 0xDD));
  return _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The 16-lane dot products of R rows at once, with the lanes in vector registers: lane l is the
// same fma chain over elements l, l + 16, ... as in dot_fixed_inline, the tail's lanes past n
// keep their sums (masked fma), and the lanes are combined by the same tree; so the bits are
// dot_fixed_inline's. (GCC leaves dot_fixed_inline's 16 lanes as scalar fmas, and one row's
// chain waits on the fma latency: R rows interleave R chains.)
template <int R>
__attribute__((target("avx512f"))) void dot_rows_avx512(const float* const* a,
                                                        const float* const* b, int64_t n,
                                                        float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(a[r] + i), _mm512_loadu_ps(b[r] + i), acc[r]);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a[r] + i),
                                     _mm512_maskz_loadu_ps(m, b[r] + i), acc[r], m);
  }
  for (int r = 0; r < R; ++r)
    out[r] = reduce_lanes8(
        _mm256_add_ps(_mm512_castps512_ps256(acc[r]),
                      _mm512_castps512_ps256(_mm512_shuffle_f32x4(acc[r], acc[r], 0xEE))));
}

// AVX2: lanes 0-7 and 8-15 in two registers; a tail of under 16 in dot_fixed_inline's scalar
// loop on the stored lanes.
template <int R>
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const float* const* a, const float* const* b,
                                                       int64_t n, float* out) {
  __m256 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r] + i), _mm256_loadu_ps(b[r] + i), lo[r]);
      hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a[r] + i + 8), _mm256_loadu_ps(b[r] + i + 8), hi[r]);
    }
  for (int r = 0; r < R; ++r) {
    if (i == n) {
      out[r] = reduce_lanes8(_mm256_add_ps(lo[r], hi[r]));
      continue;
    }
    float l[kLanes];
    _mm256_storeu_ps(l, lo[r]);
    _mm256_storeu_ps(l + 8, hi[r]);
    for (int j = 0; i + j < n; ++j) l[j] = std::fma(a[r][i + j], b[r][i + j], l[j]);
    out[r] = reduce_lanes(l);
  }
}

// The widest SIMD path the ops may take here: 2 AVX-512, 1 AVX2 + FMA, 0 scalar (the CPU's,
// capped by `cap`). The dot products, the attention rows and the GDN strip share it.
int simd_level(IsaCap cap) {
  static const int cpu = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"))         ? 2
                         : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                                           : 0;
  const int allowed = cap >= IsaCap::Avx512 ? 2 : cap >= IsaCap::Avx2 ? 1 : 0;
  return std::min(cpu, allowed);
}
#pragma GCC diagnostic pop
#endif

// out[r] = dot_fixed(a[r], b[r], n) for r < rows.
void dot_rows(const float* const* a, const float* const* b, int64_t rows, int64_t n, float* out,
              IsaCap isa) {
#ifdef REWIND_DOT_SIMD
  const int level = simd_level(isa);
  if (level > 0) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
      (level == 2 ? dot_rows_avx512<4> : dot_rows_avx2<4>)(a + r, b + r, n, out + r);
    for (; r < rows; ++r)
      (level == 2 ? dot_rows_avx512<1> : dot_rows_avx2<1>)(a + r, b + r, n, out + r);
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r) out[r] = dot_fixed_inline(a[r], b[r], n);
}

// out[r] = sumsq_fixed(x + r * ld, n) for r < rows <= 16 (the callers take 16 rows at a time).
void sumsq_rows(const float* x, int64_t ld, int64_t rows, int64_t n, float* out, IsaCap isa) {
  const float* p[16];
  for (int64_t r = 0; r < rows; ++r) p[r] = x + r * ld;
  dot_rows(p, p, rows, n, out, isa);
}

}  // namespace

float dot_fixed(const float* a, const float* b, int64_t n, IsaCap isa) {
  float out;
  dot_rows(&a, &b, 1, n, &out, isa);
  return out;
}

float sumsq_fixed(const float* a, int64_t n, IsaCap isa) {
  return dot_fixed(a, a, n, isa);
}

REWIND_CLONES
void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t n_rows,
             int64_t n, float eps, IsaCap isa) {
  float ss[16];
  for (int64_t r = 0; r < n_rows; ++r) {
    if (r % 16 == 0) sumsq_rows(x + r * ldx, ldx, std::min<int64_t>(16, n_rows - r), n, ss, isa);
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float ms = ss[r % 16] / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
}

void rmsnorm_heads(float* x, int64_t n_heads, int64_t d, const float* w, float eps, IsaCap isa) {
  rmsnorm(x, d, w, x, d, n_heads, d, eps, isa);
}

REWIND_CLONES
void l2norm_heads(float* x, int64_t n_heads, int64_t d, float eps, float scale, IsaCap isa) {
  float ss[16];
  for (int64_t h = 0; h < n_heads; ++h) {
    if (h % 16 == 0) sumsq_rows(x + h * d, d, std::min<int64_t>(16, n_heads - h), d, ss, isa);
    float* xh = x + h * d;
    const float inv = 1.0f / std::sqrt(ss[h % 16] + eps);
    for (int64_t i = 0; i < d; ++i) xh[i] = (xh[i] * inv) * scale;
  }
}

inline __attribute__((always_inline)) float silu_inline(float x) {
  return x / (1.0f + exp_fixed_inline(-x));
}
inline __attribute__((always_inline)) float sigmoid_inline(float x) {
  return 1.0f / (1.0f + exp_fixed_inline(-x));
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
#define REWIND_SILU_AVX512 1
// GCC 12's unmasked vminps / vmaxps / vpslld pass an uninitialised operand in its own header (dead:
// the unmasked form), as in matmul_quant.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// exp_fixed_inline's operations on 16 lanes, in its order, so the same bits. The clamp is one
// vminps and one vmaxps in the order that keeps NaN (vminps(a, b) is a < b ? a : b): from the
// scalar source GCC built it from three compares, two mask operations and two blends.
__attribute__((target("avx512f"), always_inline)) inline __m512 exp_fixed_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);   // 88 < x ? 88 : x
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);  // -87 > x ? -87 : x
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
  const __m512 n = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic)),
                       _mm512_set1_epi32(127)),
      23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// The first min(left, 16) lanes (left >= 1).
inline __mmask16 lanes_left(int64_t left) {
  return static_cast<__mmask16>(left >= kLanes ? 0xFFFF : (1u << left) - 1);
}

// silu_inline on 16 lanes: x / (1 + e^-x), -x by the sign bit as the scalar negation.
__attribute__((target("avx512f"), always_inline)) inline __m512 silu_avx512(__m512 x) {
  const __m512 nx =
      _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_fixed_avx512(nx)));
}

// conv_silu's K = 4 pass in AVX-512: per element the same fma chain (from 0, taps 0..3) and the
// same SiLU, so the same bits; four vectors a step and a masked tail (GCC vectorised the clamp
// as compares and blends).
__attribute__((target("avx512f"))) void conv4_silu_avx512(const float* const* rows, int64_t T,
                                                          const float* w, int64_t C, float* out,
                                                          int64_t ld_out, int64_t c0, int64_t c1,
                                                          int64_t ld_rows_after,
                                                          const float* bias) {
  const float *w0 = w, *w1 = w + C, *w2 = w + 2 * C, *w3 = w + 3 * C;
  // rows[j] for j < 3 are the window's, then row t + 3 lies at rows[3] + t * ld_rows_after.
  auto row = [&](int64_t j) { return j < 3 ? rows[j] : rows[3] + (j - 3) * ld_rows_after; };
  for (int64_t t = 0; t < T; ++t) {
    const float *x0 = row(t), *x1 = row(t + 1), *x2 = row(t + 2), *x3 = row(t + 3);
    float* o = out + t * ld_out - c0;  // channel c at o[c]
    if (t + 1 < T) {                   // the next token's new input row and its output row
      const char* nx = reinterpret_cast<const char*>(row(t + 4) + c0);
      const char* no = reinterpret_cast<const char*>(o + ld_out + c0);
      for (int64_t b = 0; b < (c1 - c0) * 4; b += 64) {
        _mm_prefetch(nx + b, _MM_HINT_T0);
        _mm_prefetch(no + b, _MM_HINT_T0);
      }
    }
    // The chain of the 16 channels from c (the lanes of m; the others read as 0).
    auto chain = [&](int64_t c, __mmask16 m) __attribute__((target("avx512f"), always_inline)) {
      __m512 a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w0 + c), _mm512_maskz_loadu_ps(m, x0 + c),
                                 bias ? _mm512_maskz_loadu_ps(m, bias + c) : _mm512_setzero_ps());
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w1 + c), _mm512_maskz_loadu_ps(m, x1 + c), a);
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w2 + c), _mm512_maskz_loadu_ps(m, x2 + c), a);
      return _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w3 + c), _mm512_maskz_loadu_ps(m, x3 + c), a);
    };
    int64_t c = c0;
    for (; c + 4 * kLanes <= c1; c += 4 * kLanes) {
      __m512 a[4];
      for (int v = 0; v < 4; ++v) a[v] = chain(c + v * kLanes, 0xFFFF);
      for (int v = 0; v < 4; ++v) _mm512_storeu_ps(o + c + v * kLanes, silu_avx512(a[v]));
    }
    for (; c < c1; c += kLanes) {
      const __mmask16 m = lanes_left(c1 - c);
      _mm512_mask_storeu_ps(o + c, m, silu_avx512(chain(c, m)));
    }
  }
}

// exp_scaled in AVX-512: exp_fixed_avx512(x * a), the scalar loop's operations (same bits).
__attribute__((target("avx512f"))) void exp_scaled_avx512(const float* x, float a, float* y,
                                                          int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          exp_fixed_avx512(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), av)));
  }
}

// swiglu in AVX-512: silu_avx512(g) * u, the scalar loop's operations (same bits); y may be g
// or u.
__attribute__((target("avx512f"))) void swiglu_avx512(const float* g, const float* u, float* y,
                                                      int64_t n) {
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m512 a = silu_avx512(_mm512_loadu_ps(g + i)),
                 b = silu_avx512(_mm512_loadu_ps(g + i + kLanes));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(a, _mm512_loadu_ps(u + i)));
    _mm512_storeu_ps(y + i + kLanes, _mm512_mul_ps(b, _mm512_loadu_ps(u + i + kLanes)));
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = lanes_left(n - i);
    _mm512_mask_storeu_ps(y + i, m,
                          _mm512_mul_ps(silu_avx512(_mm512_maskz_loadu_ps(m, g + i)),
                                        _mm512_maskz_loadu_ps(m, u + i)));
  }
}
#pragma GCC diagnostic pop
}  // namespace
#endif

REWIND_CLONES float exp_fixed(float x) {
  return exp_fixed_inline(x);
}
REWIND_CLONES float silu(float x) {
  return silu_inline(x);
}
REWIND_CLONES float sigmoid(float x) {
  return sigmoid_inline(x);
}

REWIND_CLONES
void sigmoid_gate(float* a, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] * sigmoid_inline(gate[i]);
}
float softplus(float x) {
  // log(1 + e^x), stable for large |x| (torch uses a threshold of 20 with beta 1).
  if (x > 20.0f) return x;
  return std::log1p(std::exp(x));
}

REWIND_CLONES
void swiglu(const float* g, const float* u, float* y, int64_t n, IsaCap isa) {
#ifdef REWIND_SILU_AVX512
  if (simd_level(isa) == 2) return swiglu_avx512(g, u, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = (g[i] / (1.0f + exp_fixed_inline(-g[i]))) * u[i];
}

REWIND_CLONES
void exp_scaled(const float* x, float a, float* y, int64_t n, IsaCap isa) {
#ifdef REWIND_SILU_AVX512
  if (simd_level(isa) == 2) return exp_scaled_avx512(x, a, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = exp_fixed_inline(x[i] * a);
}

REWIND_CLONES
void gated_rmsnorm_heads(const float* o, const float* z, const float* w, float* y, int64_t n_heads,
                         int64_t d, float eps, IsaCap isa) {
  float ss[16];
  for (int64_t h = 0; h < n_heads; ++h) {
    if (h % 16 == 0) sumsq_rows(o + h * d, d, std::min<int64_t>(16, n_heads - h), d, ss, isa);
    const float* oh = o + h * d;
    const float* zh = z + h * d;
    float* yh = y + h * d;
    const float ms = ss[h % 16] / static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < d; ++i) yh[i] = (w[i] * (oh[i] * inv)) * silu_inline(zh[i]);
  }
}

void rope_heads(float* x, int64_t n_heads, int64_t d, int64_t rope_dim, const float* inv_freq,
                int64_t pos) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float ang = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(ang);
    const float s = std::sin(ang);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + h * d;
      const float a = xh[i];
      const float b = xh[i + half];
      xh[i] = a * c - b * s;
      xh[i + half] = b * c + a * s;
    }
  }
}

REWIND_CLONES
void conv_silu(float* window, const float* in, int64_t ld_in, const float* w, float* out,
               int64_t ld_out, int64_t T, int64_t C, int64_t K, int64_t c0, int64_t c1, IsaCap isa,
               const float* bias) {
  const int64_t W = K - 1;
  // Row j of [window ; in] (j < W + T), for the channels handled.
  auto seq = [&](int64_t j) { return j < W ? window + j * C : in + (j - W) * ld_in; };
  // Tokens outer, channels inner (contiguous, vectorisable); per element the taps run j = 0..K-1.
#ifdef REWIND_SILU_AVX512
  if (K == 4 && simd_level(isa) == 2) {
    const float* rows[4] = {seq(0), seq(1), seq(2), seq(3)};
    if (T > 0) conv4_silu_avx512(rows, T, w, C, out, ld_out, c0, c1, ld_in, bias);
  } else
#endif
      if (K == 4) {
    // The common kernel size in one pass per token: the taps' fma chain in registers, and the
    // next token's new input row and its output row prefetched chunk by chunk (the rows lie tens
    // of KB apart in buffers far larger than L2, and the hardware prefetchers start over on
    // every row). The same fma chain (from 0, j = 0..3) and SiLU per element as below.
    constexpr int64_t kChunk = 256;  // channels: 1 KiB of each row
    const float *w0 = w, *w1 = w + C, *w2 = w + 2 * C, *w3 = w + 3 * C;
    for (int64_t t = 0; t < T; ++t) {
      const float *x0 = seq(t), *x1 = seq(t + 1), *x2 = seq(t + 2), *x3 = seq(t + 3);
      float* o = out + t * ld_out;  // column c at o[c - c0]
      const char* nx = t + 1 < T ? reinterpret_cast<const char*>(seq(t + 4)) : nullptr;
      const char* no = t + 1 < T ? reinterpret_cast<const char*>(o + ld_out) : nullptr;
      for (int64_t cb = c0; cb < c1; cb += kChunk) {
        const int64_t ce = std::min(c1, cb + kChunk);
        if (nx)
          for (int64_t b = cb * 4; b < ce * 4; b += 64) {
            __builtin_prefetch(nx + b, 0, 3);
            __builtin_prefetch(no + b - c0 * 4, 1, 3);
          }
        for (int64_t c = cb; c < ce; ++c)
          o[c - c0] = silu_inline(std::fma(
              w3[c], x3[c],
              std::fma(w2[c], x2[c],
                       std::fma(w1[c], x1[c], std::fma(w0[c], x0[c], bias ? bias[c] : 0.0f)))));
      }
    }
  } else {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + t * ld_out;  // column c at o[c - c0]
      for (int64_t c = c0; c < c1; ++c) o[c - c0] = bias ? bias[c] : 0.0f;
      for (int64_t j = 0; j < K; ++j) {
        const float* x = seq(t + j);
        const float* wj = w + j * C;
        for (int64_t c = c0; c < c1; ++c) o[c - c0] = std::fma(wj[c], x[c], o[c - c0]);
      }
      for (int64_t c = c0; c < c1; ++c) o[c - c0] = silu_inline(o[c - c0]);
    }
  }
  // New window: rows T .. T+W-1 of [window ; in]. Row j reads row T+j > j, not yet overwritten.
  for (int64_t j = 0; j < W; ++j) {
    const float* x = seq(T + j);
    float* dst = window + j * C;
    if (x != dst)
      for (int64_t c = c0; c < c1; ++c) dst[c] = x[c];
  }
}

REWIND_CLONES
// __restrict: the state, inputs and output never overlap, which lets the compiler vectorise the
// j loops (each j is its own chain, i stays in order, so the bits are those of the scalar loops).
void gdn_step(float* __restrict S, const float* __restrict q, const float* __restrict k,
              const float* __restrict v, float alpha, float beta, float* __restrict o, int64_t dk,
              int64_t dv) {
  // Decay, then read memory m[j] = sum_i S[i,j] k[i] (i in order).
  float m[512];
  float* mem = dv <= 512 ? m : new float[dv];
  for (int64_t j = 0; j < dv; ++j) mem[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) {
      Si[j] = Si[j] * alpha;
      mem[j] = std::fma(Si[j], ki, mem[j]);
    }
  }
  for (int64_t j = 0; j < dv; ++j) mem[j] = beta * (v[j] - mem[j]);  // u
  // Rank-1 update and output o[j] = sum_i S[i,j] q[i] with the updated state.
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i];
    const float qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      Si[j] = std::fma(ki, mem[j], Si[j]);
      o[j] = std::fma(Si[j], qi, o[j]);
    }
  }
  if (mem != m) delete[] mem;
}

namespace {

// max of s[0..n) (n >= 1): 16 lanes (element j to lane j % 16, each lane in order), then the
// lanes in order. For non-NaN inputs this is the same value as one pass in order (only the sign
// of a zero maximum can differ, which never changes s - max nor its exp); NaNs are skipped by
// both.
inline __attribute__((always_inline)) float max_lanes_inline(const float* s, int64_t n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = -INFINITY;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
  for (; j < n; ++j) lane[0] = s[j] > lane[0] ? s[j] : lane[0];
  float mx = -INFINITY;
  for (int l = 0; l < kLanes; ++l) mx = lane[l] > mx ? lane[l] : mx;
  return mx;
}

// gdn_steps on columns [j0, j0 + w) of S (row stride dv), held in buf [dk, W] meanwhile; w = W
// unless Tail (then w < W, the last columns).
template <int W, bool Tail>
inline __attribute__((always_inline)) void gdn_strip(float* __restrict S, float* __restrict buf,
                                                     const float* q, const float* k, int64_t ldqk,
                                                     const float* v, int64_t ldv,
                                                     const float* alpha, const float* beta,
                                                     float* o, int64_t ldo, int64_t T, int64_t dk,
                                                     int64_t dv, int64_t j0, int w_tail) {
  const int w = Tail ? w_tail : W;
  for (int64_t i = 0; i < dk; ++i)
    for (int j = 0; j < w; ++j) buf[i * W + j] = S[i * dv + j0 + j];
  float mem[W], acc[W];
  // Token 0's decay and read.
  for (int j = 0; j < w; ++j) mem[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i], a = alpha[0];
    for (int j = 0; j < w; ++j) {
      const float s = buf[i * W + j] * a;
      buf[i * W + j] = s;
      mem[j] = std::fma(s, ki, mem[j]);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const float* vt = v + t * ldv + j0;
    const float bt = beta[t];
    for (int j = 0; j < w; ++j) {
      mem[j] = bt * (vt[j] - mem[j]);  // u
      acc[j] = 0.0f;
    }
    const float* kt = k + t * ldqk;
    const float* qt = q + t * ldqk;
    if (t + 1 < T) {
      // Token t's update and output, then token t+1's decay and read, row by row.
      const float* kn = kt + ldqk;
      const float an = alpha[t + 1];
      float nxt[W];
      for (int j = 0; j < w; ++j) nxt[j] = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        const float ki = kt[i], qi = qt[i], kni = kn[i];
        for (int j = 0; j < w; ++j) {
          const float s = std::fma(ki, mem[j], buf[i * W + j]);
          acc[j] = std::fma(s, qi, acc[j]);
          const float sd = s * an;
          buf[i * W + j] = sd;
          nxt[j] = std::fma(sd, kni, nxt[j]);
        }
      }
      for (int j = 0; j < w; ++j) mem[j] = nxt[j];
    } else {
      for (int64_t i = 0; i < dk; ++i) {
        const float ki = kt[i], qi = qt[i];
        for (int j = 0; j < w; ++j) {
          const float s = std::fma(ki, mem[j], buf[i * W + j]);
          acc[j] = std::fma(s, qi, acc[j]);
          buf[i * W + j] = s;
        }
      }
    }
    float* ot = o + t * ldo + j0;
    for (int j = 0; j < w; ++j) ot[j] = acc[j];
  }
  for (int64_t i = 0; i < dk; ++i)
    for (int j = 0; j < w; ++j) S[i * dv + j0 + j] = buf[i * W + j];
}

#if defined(__x86_64__) && defined(__GNUC__)
#define REWIND_GDN_AVX512 1
// GCC 12's _mm512_permutexvar_ps passes an uninitialised operand in its own header (dead: the
// unmasked form), as in matmul_quant.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// gdn_strip<64, false> in AVX-512 (buf 64-byte aligned, rows kGdnRowStride floats apart): the
// same operations per element in the same order, so the same bits. Token t's q[i], k[i] and token
// t+1's k[i] are broadcast from row i's own padding, where the pass over row i leaves the next
// token's: such a load never 4K-aliases the strip's recent stores (a broadcast straight from q
// and k would, every 16 rows) and takes no shuffle-port cycle from the fmas.
__attribute__((target("avx512f"))) void gdn_strip64_avx512(
    float* __restrict S, float* __restrict buf, const float* q, const float* k, int64_t ldqk,
    const float* v, int64_t ldv, const float* alpha, const float* beta, float* o, int64_t ldo,
    int64_t T, int64_t dk, int64_t dv, int64_t j0) {
  constexpr int W = 64, NV = W / kLanes, RS = kGdnRowStride;
  for (int64_t i = 0; i < dk; ++i) {
    for (int j = 0; j < NV; ++j)
      _mm512_store_ps(buf + i * RS + kLanes * j, _mm512_loadu_ps(S + i * dv + j0 + kLanes * j));
    buf[i * RS + W] = k[i];
    buf[i * RS + W + 1] = q[i];
    buf[i * RS + W + 2] = T > 1 ? k[ldqk + i] : 0.0f;
  }
  __m512 mem[NV];
  for (int j = 0; j < NV; ++j) mem[j] = _mm512_setzero_ps();
  {  // token 0's decay and read
    const __m512 a = _mm512_set1_ps(alpha[0]);
    for (int64_t i = 0; i < dk; ++i) {
      const __m512 ki = _mm512_set1_ps(buf[i * RS + W]);
      for (int j = 0; j < NV; ++j) {
        const __m512 s = _mm512_mul_ps(_mm512_load_ps(buf + i * RS + kLanes * j), a);
        _mm512_store_ps(buf + i * RS + kLanes * j, s);
        mem[j] = _mm512_fmadd_ps(s, ki, mem[j]);
      }
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const float* vt = v + t * ldv + j0;
    const __m512 bt = _mm512_set1_ps(beta[t]);
    __m512 acc[NV], nxt[NV];
    for (int j = 0; j < NV; ++j) {
      mem[j] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(vt + kLanes * j), mem[j]));  // u
      acc[j] = _mm512_setzero_ps();
      nxt[j] = _mm512_setzero_ps();
    }
    // Row i of token t: s = fma(k[i], u, S); acc = fma(s, q[i], acc); and unless t is the last,
    // token t+1's decay sd = s * alpha and read nxt = fma(sd, k'[i], nxt); then the row's k, q
    // and k' of the next token into its padding.
    auto rows = [&](auto more) __attribute__((target("avx512f"), always_inline)) {
      const __m512 an = _mm512_set1_ps(more ? alpha[t + 1] : 1.0f);
      const int64_t t1 = more ? t + 1 : t, t2 = more && t + 2 < T ? t + 2 : t1;
      const float *k1 = k + t1 * ldqk, *q1 = q + t1 * ldqk, *k2 = k + t2 * ldqk;
      for (int64_t i = 0; i < dk; ++i) {
        float* r = buf + i * RS;
        const __m512 ki = _mm512_set1_ps(r[W]), qi = _mm512_set1_ps(r[W + 1]);
        for (int j = 0; j < NV; ++j) {
          const __m512 s = _mm512_fmadd_ps(ki, mem[j], _mm512_load_ps(r + kLanes * j));
          acc[j] = _mm512_fmadd_ps(s, qi, acc[j]);
          if constexpr (more) {
            const __m512 sd = _mm512_mul_ps(s, an);
            _mm512_store_ps(r + kLanes * j, sd);
            nxt[j] = _mm512_fmadd_ps(sd, _mm512_set1_ps(r[W + 2]), nxt[j]);
          } else {
            _mm512_store_ps(r + kLanes * j, s);
          }
        }
        if constexpr (more) {
          r[W] = k1[i];
          r[W + 1] = q1[i];
          r[W + 2] = k2[i];
        }
      }
    };
    if (t + 1 < T)
      rows(std::true_type{});
    else
      rows(std::false_type{});
    float* ot = o + t * ldo + j0;
    for (int j = 0; j < NV; ++j) {
      _mm512_storeu_ps(ot + kLanes * j, acc[j]);
      mem[j] = nxt[j];
    }
  }
  for (int64_t i = 0; i < dk; ++i)
    for (int j = 0; j < NV; ++j)
      _mm512_storeu_ps(S + i * dv + j0 + kLanes * j, _mm512_load_ps(buf + i * RS + kLanes * j));
}

// gdn_step on columns [j0, j0 + 16 NV) of S, its read and output accumulators in registers. The
// decayed state alpha * S is not stored by the read pass but computed again (the same product,
// the same bits) by the update pass, which stores the updated state once: the read pass only
// loads (in a decode step it streams the state from memory; software prefetch 1-4 KiB ahead
// made no difference there) and the update pass finds the rows in L2. Per element the same
// operations in the same order as gdn_step and as the prefill strips, so the same bits.
// Timings: bench/gdn_bench.
template <int NV>
__attribute__((target("avx512f"))) void gdn_step_cols_avx512(float* __restrict S, const float* q,
                                                             const float* k, const float* v,
                                                             float alpha, float beta, float* o,
                                                             int64_t dk, int64_t dv, int64_t j0) {
  const __m512 a = _mm512_set1_ps(alpha);
  __m512 mem[NV];
  for (int j = 0; j < NV; ++j) mem[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {
    const float* r = S + i * dv + j0;
    const __m512 ki = _mm512_set1_ps(k[i]);
    for (int j = 0; j < NV; ++j) {
      mem[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(r + kLanes * j), a), ki, mem[j]);
    }
  }
  const __m512 bt = _mm512_set1_ps(beta);
  __m512 acc[NV];
  for (int j = 0; j < NV; ++j) {
    mem[j] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(v + j0 + kLanes * j), mem[j]));  // u
    acc[j] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < dk; ++i) {
    float* r = S + i * dv + j0;
    const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
    for (int j = 0; j < NV; ++j) {
      const __m512 sd = _mm512_mul_ps(_mm512_loadu_ps(r + kLanes * j), a);
      const __m512 st = _mm512_fmadd_ps(ki, mem[j], sd);
      _mm512_storeu_ps(r + kLanes * j, st);
      acc[j] = _mm512_fmadd_ps(st, qi, acc[j]);
    }
  }
  for (int j = 0; j < NV; ++j) _mm512_storeu_ps(o + j0 + kLanes * j, acc[j]);
}

// gdn_step for dv a multiple of 16: strips of up to 128 columns.
__attribute__((target("avx512f"))) void gdn_step_avx512(float* S, const float* q, const float* k,
                                                        const float* v, float alpha, float beta,
                                                        float* o, int64_t dk, int64_t dv) {
  int64_t j0 = 0;
  for (; j0 + 128 <= dv; j0 += 128) gdn_step_cols_avx512<8>(S, q, k, v, alpha, beta, o, dk, dv, j0);
  // The 1 to 7 vectors left.
  using ColsFn = void (*)(float*, const float*, const float*, const float*, float, float, float*,
                          int64_t, int64_t, int64_t);
  constexpr ColsFn kTail[8] = {nullptr,
                               gdn_step_cols_avx512<1>,
                               gdn_step_cols_avx512<2>,
                               gdn_step_cols_avx512<3>,
                               gdn_step_cols_avx512<4>,
                               gdn_step_cols_avx512<5>,
                               gdn_step_cols_avx512<6>,
                               gdn_step_cols_avx512<7>};
  if (const ColsFn f = kTail[(dv - j0) / kLanes]) f(S, q, k, v, alpha, beta, o, dk, dv, j0);
}

#pragma GCC diagnostic pop

#endif

}  // namespace

REWIND_CLONES
void gdn_steps(float* S, const float* q, const float* k, int64_t ldqk, const float* v, int64_t ldv,
               const float* alpha, const float* beta, float* o, int64_t ldo, int64_t T, int64_t dk,
               int64_t dv, IsaCap isa) {
  if (T <= 0 || dv <= 0) return;
  if (T == 1) {  // decode: nothing to fuse
#ifdef REWIND_GDN_AVX512
    if (simd_level(isa) == 2 && dv % kLanes == 0)
      return gdn_step_avx512(S, q, k, v, alpha[0], beta[0], o, dk, dv);
#endif
    gdn_step(S, q, k, v, alpha[0], beta[0], o, dk, dv);
    return;
  }
  constexpr int kW = 64;        // columns per strip (the strip of S stays in L1)
  constexpr int64_t kTB = 128;  // tokens per block: their q, k, v stay in L2 for every strip
  // Each strip reads every token's q, k and v again. Rows of a head contiguous in the caller's
  // buffers (ldqk == dk, ldv == dv: the prefill's head-major layout) stream as they are; rows a
  // page or more apart are packed per block into one contiguous array first.
  const bool packed = ldqk == dk && ldv == dv;
  const int64_t P = 2 * dk + dv;
  // Per-thread scratch, kept between calls (one call per head, layer and chunk).
  thread_local std::vector<float> pk;
  // 64-byte aligned: the strip's rows are whole lines (a row split over two lines costs both).
  thread_local AlignedBuffer<float> buf_store;
  buf_store.reserve_at_least(static_cast<size_t>(dk * kGdnRowStride));
  float* buf = buf_store.data();
  if (!packed) pk.resize(static_cast<size_t>(std::min(T, kTB) * P));
#ifdef REWIND_GDN_AVX512
  const bool avx512 = simd_level(isa) == 2;
#endif
  for (int64_t tb = 0; tb < T; tb += kTB) {
    const int64_t nt = std::min(kTB, T - tb);
    const float *pq = q + tb * ldqk, *pkk = k + tb * ldqk, *pv = v + tb * ldv;
    int64_t lqk = ldqk, lv = ldv;
    if (!packed) {
      for (int64_t t = 0; t < nt; ++t) {
        float* dst = pk.data() + t * P;
        std::memcpy(dst, pq + t * ldqk, static_cast<size_t>(dk) * sizeof(float));
        std::memcpy(dst + dk, pkk + t * ldqk, static_cast<size_t>(dk) * sizeof(float));
        std::memcpy(dst + 2 * dk, pv + t * ldv, static_cast<size_t>(dv) * sizeof(float));
      }
      pq = pk.data();
      pkk = pq + dk;
      pv = pq + 2 * dk;
      lqk = lv = P;
    }
    float* ob = o + tb * ldo;
    int64_t j0 = 0;
    for (; j0 + kW <= dv; j0 += kW) {
#ifdef REWIND_GDN_AVX512
      if (avx512) {
        gdn_strip64_avx512(S, buf, pq, pkk, lqk, pv, lv, alpha + tb, beta + tb, ob, ldo, nt, dk, dv,
                           j0);
        continue;
      }
#endif
      gdn_strip<kW, false>(S, buf, pq, pkk, lqk, pv, lv, alpha + tb, beta + tb, ob, ldo, nt, dk, dv,
                           j0, kW);
    }
    if (j0 < dv)
      gdn_strip<kW, true>(S, buf, pq, pkk, lqk, pv, lv, alpha + tb, beta + tb, ob, ldo, nt, dk, dv,
                          j0, static_cast<int>(dv - j0));
  }
}

namespace {

// Scores of keys [b0, b0 + nb[r]) of one K block for R query rows at once (row r's scores to
// s[r]): each score is one fma chain over i = 0..d-1 in order of q[r][i] * K(i, j), however many
// rows and keys share a pass, so every grouping gives a row the same bits. kChunk keys at a time
// in registers when the block allows whole chunks (lanes past nb[r] are computed from valid page
// memory and discarded); otherwise key by key.
template <int R, int kChunk>
inline __attribute__((always_inline)) void scores_rows(const float* const* q, const float* kb,
                                                       int64_t block, const int64_t* nb, int64_t d,
                                                       float* const* s) {
  int64_t n_max = 0;
  for (int r = 0; r < R; ++r) n_max = std::max(n_max, nb[r]);
  if (block % kChunk != 0) {
    for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < nb[r]; ++j) {
        float acc = 0.0f;
        for (int64_t i = 0; i < d; ++i) acc = std::fma(q[r][i], kb[i * block + j], acc);
        s[r][j] = acc;
      }
    return;
  }
  for (int64_t j0 = 0; j0 < n_max; j0 += kChunk) {
    float acc[R][kChunk] = {};
    for (int64_t i = 0; i < d; ++i) {
      const float* ki = kb + i * block + j0;
      for (int r = 0; r < R; ++r) {
        const float qi = q[r][i];
        for (int jj = 0; jj < kChunk; ++jj) acc[r][jj] = std::fma(qi, ki[jj], acc[r][jj]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int64_t m = std::min<int64_t>(kChunk, nb[r] - j0);
      for (int64_t jj = 0; jj < m; ++jj) s[r][j0 + jj] = acc[r][jj];
    }
  }
}

// o[r][i] += p[r][j] * V_j[i] for dims i < DC of R rows over keys j < nb[r] of one V block
// (row j at vb + j*ld), in key order; p already holds the normalised probabilities. Keys all rows
// have go through every row at once (sharing each V load), the rest row by row; either way each
// output is one fma chain in key order.
template <int R, int DC>
inline __attribute__((always_inline)) void weighted_values_rows(const float* vb, int64_t ld,
                                                                const int64_t* nb,
                                                                const float* const* p,
                                                                float* const* o) {
  float acc[R][DC];
  int64_t n_min = nb[0];
  for (int r = 0; r < R; ++r) {
    n_min = std::min(n_min, nb[r]);
    for (int i = 0; i < DC; ++i) acc[r][i] = o[r][i];
  }
  for (int64_t j = 0; j < n_min; ++j) {
    const float* vj = vb + j * ld;
    for (int r = 0; r < R; ++r) {
      const float pj = p[r][j];
      for (int i = 0; i < DC; ++i) acc[r][i] = std::fma(pj, vj[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t j = n_min; j < nb[r]; ++j) {
      const float* vj = vb + j * ld;
      const float pj = p[r][j];
      for (int i = 0; i < DC; ++i) acc[r][i] = std::fma(pj, vj[i], acc[r][i]);
    }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < DC; ++i) o[r][i] = acc[r][i];
}

#if defined(__x86_64__) && defined(__GNUC__)
#define REWIND_ATTN_AVX512 1
// AVX-512 forms of the two row-group loops (the compiler's vectorisation of the templates above
// spills at these sizes): the same fma per element in the same order, so the same bits. R rows x
// 16 NV keys (scores) or dims (values) per pass: NV loads feed R NV fmas, which keeps the K and V
// blocks' L2 traffic below the fma rate. Groups of 7-8 rows take NV = 2; groups of up to 6
// (decode's grouped-query heads) NV = 4 where the block and d allow: a pass then reads whole
// 256-byte K rows and V row segments instead of halves, which the hardware prefetchers follow
// better when K and V come from memory.
//
// Each kernel reads K or V through a loader (below): NV vectors of 16 values widened to fp32
// from the stored KV type (KvBlocks) as they are loaded. Every widening is exact, so a typed
// block gives the F32 kernel's bits on the widened values. A loader with kEvenOdd widens 32
// values a pair of vectors at a time as their even and odd elements (v[2p] elements 32p + 2l,
// v[2p + 1] elements 32p + 2l + 1, l < 16): BF16 words then take one instruction per vector
// (the low half of each 32-bit lane shifted up, the high half masked). Which lane an element
// takes changes no operation on it; the kernels put the lanes back in order when they store.
// GCC 12's headers pass an uninitialised operand to the unmasked conversions (dead, as above).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define REWIND_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline
// 32 BF16 words at p as fp32: the even elements to e, the odd ones to o.
REWIND_AVX512_INLINE void bf16_even_odd(const uint16_t* p, __m512& e, __m512& o) {
  const __m512i w = _mm512_loadu_si512(p);
  e = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  o = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// Even / odd element vectors of 32 values back in order (lo: elements 0-15, hi: 16-31), and
// the reverse.
REWIND_AVX512_INLINE void interleave32(__m512& lo, __m512& hi) {
  const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i ih =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 e = lo, o = hi;
  lo = _mm512_permutex2var_ps(e, il, o);
  hi = _mm512_permutex2var_ps(e, ih, o);
}
REWIND_AVX512_INLINE void deinterleave32(__m512& lo, __m512& hi) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 a = lo, b = hi;
  lo = _mm512_permutex2var_ps(a, ie, b);
  hi = _mm512_permutex2var_ps(a, io, b);
}

// The cache lines of n bytes from a into L2.
REWIND_AVX512_INLINE void prefetch_l2(const void* a, int64_t n) {
  for (int64_t b = 0; b < n; b += 64) _mm_prefetch(static_cast<const char*>(a) + b, _MM_HINT_T1);
}

// K blocks: part<NV>(i0, j0) reads dims [i0, i0 + 32) (i0 a multiple of 32) of keys
// [j0, j0 + 16 NV); its load(i, kv) gives dim i of those keys. With the next block's data pn
// (the same head; null for none), prefetch<NV>(i, j0) fetches the same keys and dim of that
// block into L2, so a pass over one block brings in the next.
struct KLoadF32 {
  static constexpr bool kEvenOdd = false;
  const float* p;
  int64_t block;
  const float* pn;
  template <int NV>
  REWIND_AVX512_INLINE void prefetch(int64_t i, int64_t j0) const {
    if (pn) prefetch_l2(pn + i * block + j0, 64 * NV);
  }
  KLoadF32 without_next() const { return {p, block, nullptr}; }
  template <int NV>
  struct Part {
    const float* p;
    int64_t block;
    REWIND_AVX512_INLINE void load(int64_t i, __m512* kv) const {
      for (int c = 0; c < NV; ++c) kv[c] = _mm512_loadu_ps(p + i * block + 16 * c);
    }
  };
  template <int NV>
  REWIND_AVX512_INLINE Part<NV> part(int64_t, int64_t j0) const {
    return {p + j0, block};
  }
};
template <bool kBf16>
struct KLoadHalf {
  static constexpr bool kEvenOdd = kBf16;
  const uint16_t* p;
  int64_t block;
  const uint16_t* pn;
  template <int NV>
  REWIND_AVX512_INLINE void prefetch(int64_t i, int64_t j0) const {
    if (pn) prefetch_l2(pn + i * block + j0, 32 * NV);
  }
  KLoadHalf without_next() const { return {p, block, nullptr}; }
  template <int NV>
  struct Part {
    const uint16_t* p;
    int64_t block;
    REWIND_AVX512_INLINE void load(int64_t i, __m512* kv) const {
      if constexpr (kBf16) {
        for (int c = 0; c < NV; c += 2) bf16_even_odd(p + i * block + 16 * c, kv[c], kv[c + 1]);
      } else {
        for (int c = 0; c < NV; ++c)
          kv[c] = _mm512_cvtph_ps(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * block + 16 * c)));
      }
    }
  };
  template <int NV>
  REWIND_AVX512_INLINE Part<NV> part(int64_t, int64_t j0) const {
    return {p + j0, block};
  }
};
struct KLoadQ8 {  // the scale of (i, j) at sc[(i / 32) * block + j]: one per key in a part
  static constexpr bool kEvenOdd = false;
  const int8_t* p;
  const uint16_t* sc;
  int64_t block;
  const int8_t* pn;
  const uint16_t* scn;
  template <int NV>
  REWIND_AVX512_INLINE void prefetch(int64_t i, int64_t j0) const {
    if (!pn) return;
    prefetch_l2(pn + i * block + j0, 16 * NV);
    if (i % 32 == 0) prefetch_l2(scn + (i / 32) * block + j0, 32 * NV);
  }
  KLoadQ8 without_next() const { return {p, sc, block, nullptr, nullptr}; }
  template <int NV>
  struct Part {
    const int8_t* p;
    int64_t block;
    __m512 s[NV];
    REWIND_AVX512_INLINE void load(int64_t i, __m512* kv) const {
      for (int c = 0; c < NV; ++c)
        kv[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(p + i * block + 16 * c)))),
                              s[c]);
    }
  };
  template <int NV>
  REWIND_AVX512_INLINE Part<NV> part(int64_t i0, int64_t j0) const {
    Part<NV> t{p + j0, block, {}};
    for (int c = 0; c < NV; ++c)
      t.s[c] = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(sc + (i0 / 32) * block + j0 + 16 * c)));
    return t;
  }
};
// V blocks: load<NV>(j, i, vv) gives dims [i, i + 16 NV) of key j (i a multiple of 32);
// prefetch<NV>(j, i) fetches those of the next block pn (as for K).
struct VLoadF32 {
  static constexpr bool kEvenOdd = false;
  const float* p;
  int64_t ld;
  const float* pn;
  template <int NV>
  REWIND_AVX512_INLINE void prefetch(int64_t j, int64_t i) const {
    if (pn) prefetch_l2(pn + j * ld + i, 64 * NV);
  }
  VLoadF32 without_next() const { return {p, ld, nullptr}; }
  template <int NV>
  REWIND_AVX512_INLINE void load(int64_t j, int64_t i, __m512* vv) const {
    for (int c = 0; c < NV; ++c) vv[c] = _mm512_loadu_ps(p + j * ld + i + 16 * c);
  }
};
template <bool kBf16>
struct VLoadHalf {
  static constexpr bool kEvenOdd = kBf16;
  const uint16_t* p;
  int64_t ld;
  const uint16_t* pn;
  template <int NV>
  REWIND_AVX512_INLINE void prefetch(int64_t j, int64_t i) const {
    if (pn) prefetch_l2(pn + j * ld + i, 32 * NV);
  }
  VLoadHalf without_next() const { return {p, ld, nullptr}; }
  template <int NV>
  REWIND_AVX512_INLINE void load(int64_t j, int64_t i, __m512* vv) const {
    if constexpr (kBf16) {
      for (int c = 0; c < NV; c += 2) bf16_even_odd(p + j * ld + i + 16 * c, vv[c], vv[c + 1]);
    } else {
      for (int c = 0; c < NV; ++c)
        vv[c] = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j * ld + i + 16 * c)));
    }
  }
};
struct VLoadQ8 {  // 32 dims from a multiple of 32 share the scale at sc[j * sld + i / 32]
  static constexpr bool kEvenOdd = false;
  const int8_t* p;
  const uint16_t* sc;
  int64_t ld, sld;
  const int8_t* pn;
  const uint16_t* scn;
  template <int NV>
  REWIND_AVX512_INLINE void prefetch(int64_t j, int64_t i) const {
    if (!pn) return;
    prefetch_l2(pn + j * ld + i, 16 * NV);
    if (i == 0) prefetch_l2(scn + j * sld, 2);
  }
  VLoadQ8 without_next() const { return {p, sc, ld, sld, nullptr, nullptr}; }
  template <int NV>
  REWIND_AVX512_INLINE void load(int64_t j, int64_t i, __m512* vv) const {
    for (int c = 0; c < NV; c += 2) {
      const __m512 s =
          _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(sc[j * sld + (i + 16 * c) / 32])));
      for (int h = 0; h < 2; ++h)
        vv[c + h] = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * ld + i + 16 * (c + h))))),
            s);
    }
  }
};

template <int R, int NV, class LoadK>
__attribute__((target("avx512f"))) void scores_rows_avx512(const float* const* q, const LoadK& kl,
                                                           const int64_t* nb, int64_t d,
                                                           float* const* s) {
  static_assert(NV % 2 == 0, "loaders give whole pairs of vectors");
  constexpr int kW = 16 * NV;  // keys per pass
  int64_t n_max = 0;
  for (int r = 0; r < R; ++r) n_max = std::max(n_max, nb[r]);
  for (int64_t j0 = 0; j0 < n_max; j0 += kW) {
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < d; i0 += 32) {
      const auto part = kl.template part<NV>(i0, j0);
      const int64_t i1 = std::min<int64_t>(d, i0 + 32);
      for (int64_t i = i0; i < i1; ++i) {
        kl.template prefetch<NV>(i, j0);
        __m512 kv[NV];
        part.load(i, kv);
        for (int r = 0; r < R; ++r) {
          const __m512 qi = _mm512_set1_ps(q[r][i]);
          for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(qi, kv[c], acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      if constexpr (LoadK::kEvenOdd)
        for (int c = 0; c < NV; c += 2) interleave32(acc[r][c], acc[r][c + 1]);
      const int64_t m = std::min<int64_t>(kW, nb[r] - j0);
      for (int c = 0; c < NV; ++c) {
        const int64_t mc = std::clamp<int64_t>(m - 16 * c, 0, 16);
        const __mmask16 mask = static_cast<__mmask16>((1u << mc) - 1u);
        _mm512_mask_storeu_ps(s[r] + j0 + 16 * c, mask, acc[r][c]);
      }
    }
  }
}

template <int R, int NV, class LoadV>
__attribute__((target("avx512f"))) void weighted_values_rows_avx512(const LoadV& vl,
                                                                    const int64_t* nb,
                                                                    const float* const* p,
                                                                    float* const* o, int64_t d) {
  static_assert(NV % 2 == 0, "loaders give whole pairs of vectors");
  constexpr int kW = 16 * NV;  // dims per pass
  int64_t n_min = nb[0];
  for (int r = 0; r < R; ++r) n_min = std::min(n_min, nb[r]);
  for (int64_t d0 = 0; d0 < d; d0 += kW) {
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_loadu_ps(o[r] + d0 + 16 * c);
      if constexpr (LoadV::kEvenOdd)
        for (int c = 0; c < NV; c += 2) deinterleave32(acc[r][c], acc[r][c + 1]);
    }
    for (int64_t j = 0; j < n_min; ++j) {
      vl.template prefetch<NV>(j, d0);
      __m512 vv[NV];
      vl.template load<NV>(j, d0, vv);
      for (int r = 0; r < R; ++r) {
        const __m512 pj = _mm512_set1_ps(p[r][j]);
        for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(pj, vv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int64_t j = n_min; j < nb[r]; ++j) {
        __m512 vv[NV];
        vl.template load<NV>(j, d0, vv);
        const __m512 pj = _mm512_set1_ps(p[r][j]);
        for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(pj, vv[c], acc[r][c]);
      }
      if constexpr (LoadV::kEvenOdd)
        for (int c = 0; c < NV; c += 2) interleave32(acc[r][c], acc[r][c + 1]);
      for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o[r] + d0 + 16 * c, acc[r][c]);
    }
  }
}
// Pass 2 of attention_core for one row on AVX-512, in two passes over s instead of five: the
// scaled scores and their 16 lane maxima (the maximum is the same value in any order; only
// the sign of a zero maximum can differ, which never changes s - max nor its exp), then
// exp_fixed of s - max with sum_fixed_inline's 16 lanes in order and its tree, then p = e * inv.
// Every element takes the scalar loops' operations, so the same bits.
__attribute__((target("avx512f"))) void softmax_row_avx512(float* s, int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_left(n - j);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), vs);
    _mm512_mask_storeu_ps(s + j, m, x);
    mx = _mm512_mask_max_ps(mx, m, x, mx);  // x > mx ? x : mx, as max_lanes_inline
  }
  float lane[16];
  _mm512_storeu_ps(lane, mx);
  float mxs = -INFINITY;
  for (int l = 0; l < 16; ++l) mxs = lane[l] > mxs ? lane[l] : mxs;
  const __m512 vm = _mm512_set1_ps(mxs);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_left(n - j);
    const __m512 e = exp_fixed_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vm));
    _mm512_mask_storeu_ps(s + j, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  _mm512_storeu_ps(lane, acc);
  const __m512 inv = _mm512_set1_ps(1.0f / reduce_lanes(lane));
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_left(n - j);
    _mm512_mask_storeu_ps(s + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), inv));
  }
}

// ---- The same row kernels in AVX2 (with FMA and F16C) ----
// 8 lanes a vector and 16 registers: R rows x 8 NV keys (scores) or dims (values) a pass, NV 4
// for up to 2 rows, 2 for 3-4 (R NV sums, NV loads and a broadcast fit, but for Q8_0's NV
// scales, one of which the compiler reads from memory); larger groups run as groups of 4 and
// the rest. Loaders
// widen as they load (BF16 zero-extended and shifted, F16 vcvtph2ps, Q8_0 a code times its f16
// scale), prefetch the next block into L2 as the AVX-512 ones do, and give the same values in
// order; each element sees the same fma in the same order, so the bits are the portable
// kernels'.
#define REWIND_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
REWIND_AVX2_INLINE void prefetch_l2_avx2(const void* a, int64_t n) {
  for (int64_t b = 0; b < n; b += 64) _mm_prefetch(static_cast<const char*>(a) + b, _MM_HINT_T1);
}
REWIND_AVX2_INLINE __m256 widen8_u16(const uint16_t* p, bool bf) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return bf ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
            : _mm256_cvtph_ps(h);
}
REWIND_AVX2_INLINE __m256 widen8_q8(const int8_t* p, __m256 scale) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                           _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))),
                       scale);
}
// K: part<NV>(i0, j0) for dims [i0, i0 + 32) of keys [j0, j0 + 8 NV); its load(i, kv) gives
// dim i of those keys.
template <class T, int kKind>  // kKind: 0 F32, 1 BF16, 2 F16
struct K2Plain {
  const T* p;
  int64_t block;
  const T* pn;
  template <int NV>
  REWIND_AVX2_INLINE void prefetch(int64_t i, int64_t j0) const {
    if (pn) prefetch_l2_avx2(pn + i * block + j0, static_cast<int64_t>(sizeof(T)) * 8 * NV);
  }
  K2Plain without_next() const { return {p, block, nullptr}; }
  template <int NV>
  struct Part {
    const T* p;
    int64_t block;
    REWIND_AVX2_INLINE void load(int64_t i, __m256* kv) const {
      for (int c = 0; c < NV; ++c) {
        const T* a = p + i * block + 8 * c;
        if constexpr (kKind == 0)
          kv[c] = _mm256_loadu_ps(reinterpret_cast<const float*>(a));
        else
          kv[c] = widen8_u16(reinterpret_cast<const uint16_t*>(a), kKind == 1);
      }
    }
  };
  template <int NV>
  REWIND_AVX2_INLINE Part<NV> part(int64_t, int64_t j0) const {
    return {p + j0, block};
  }
};
struct K2Q8 {  // the scale of (i, j) at sc[(i / 32) * block + j]
  const int8_t* p;
  const uint16_t* sc;
  int64_t block;
  const int8_t* pn;
  const uint16_t* scn;
  template <int NV>
  REWIND_AVX2_INLINE void prefetch(int64_t i, int64_t j0) const {
    if (!pn) return;
    prefetch_l2_avx2(pn + i * block + j0, 8 * NV);
    if (i % 32 == 0) prefetch_l2_avx2(scn + (i / 32) * block + j0, 16 * NV);
  }
  K2Q8 without_next() const { return {p, sc, block, nullptr, nullptr}; }
  template <int NV>
  struct Part {
    const int8_t* p;
    int64_t block;
    __m256 s[NV];
    REWIND_AVX2_INLINE void load(int64_t i, __m256* kv) const {
      for (int c = 0; c < NV; ++c) kv[c] = widen8_q8(p + i * block + 8 * c, s[c]);
    }
  };
  template <int NV>
  REWIND_AVX2_INLINE Part<NV> part(int64_t i0, int64_t j0) const {
    Part<NV> t{p + j0, block, {}};
    for (int c = 0; c < NV; ++c)
      t.s[c] = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + (i0 / 32) * block + j0 + 8 * c)));
    return t;
  }
};
// V: load<NV>(j, i, vv) gives dims [i, i + 8 NV) of key j.
template <class T, int kKind>
struct V2Plain {
  const T* p;
  int64_t ld;
  const T* pn;
  template <int NV>
  REWIND_AVX2_INLINE void prefetch(int64_t j, int64_t i) const {
    if (pn) prefetch_l2_avx2(pn + j * ld + i, static_cast<int64_t>(sizeof(T)) * 8 * NV);
  }
  V2Plain without_next() const { return {p, ld, nullptr}; }
  template <int NV>
  REWIND_AVX2_INLINE void load(int64_t j, int64_t i, __m256* vv) const {
    for (int c = 0; c < NV; ++c) {
      const T* a = p + j * ld + i + 8 * c;
      if constexpr (kKind == 0)
        vv[c] = _mm256_loadu_ps(reinterpret_cast<const float*>(a));
      else
        vv[c] = widen8_u16(reinterpret_cast<const uint16_t*>(a), kKind == 1);
    }
  }
};
struct V2Q8 {  // 32 dims from a multiple of 32 share the scale at sc[j * sld + i / 32]
  const int8_t* p;
  const uint16_t* sc;
  int64_t ld, sld;
  const int8_t* pn;
  const uint16_t* scn;
  template <int NV>
  REWIND_AVX2_INLINE void prefetch(int64_t j, int64_t i) const {
    if (!pn) return;
    prefetch_l2_avx2(pn + j * ld + i, 8 * NV);
    if (i == 0) prefetch_l2_avx2(scn + j * sld, 2);
  }
  V2Q8 without_next() const { return {p, sc, ld, sld, nullptr, nullptr}; }
  template <int NV>
  REWIND_AVX2_INLINE void load(int64_t j, int64_t i, __m256* vv) const {
    for (int c = 0; c < NV; ++c) {
      const __m256 s =
          _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(sc[j * sld + (i + 8 * c) / 32])));
      vv[c] = widen8_q8(p + j * ld + i + 8 * c, s);
    }
  }
};

// The first m (0..8) lanes of v to out.
REWIND_AVX2_INLINE void store_lanes_avx2(float* out, __m256 v, int64_t m) {
  if (m >= 8) {
    _mm256_storeu_ps(out, v);
  } else if (m > 0) {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    std::memcpy(out, t, static_cast<size_t>(m) * sizeof(float));
  }
}

template <int R, int NV, class LoadK>
__attribute__((target("avx2,fma,f16c"))) void scores_rows_avx2(const float* const* q,
                                                               const LoadK& kl, const int64_t* nb,
                                                               int64_t d, float* const* s) {
  constexpr int kW = 8 * NV;  // keys per pass
  int64_t n_max = 0;
  for (int r = 0; r < R; ++r) n_max = std::max(n_max, nb[r]);
  for (int64_t j0 = 0; j0 < n_max; j0 += kW) {
    __m256 acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < d; i0 += 32) {
      const auto part = kl.template part<NV>(i0, j0);
      const int64_t i1 = std::min<int64_t>(d, i0 + 32);
      for (int64_t i = i0; i < i1; ++i) {
        kl.template prefetch<NV>(i, j0);
        __m256 kv[NV];
        part.load(i, kv);
        for (int r = 0; r < R; ++r) {
          const __m256 qi = _mm256_set1_ps(q[r][i]);
          for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_fmadd_ps(qi, kv[c], acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const int64_t m = std::min<int64_t>(kW, nb[r] - j0);
      for (int c = 0; c < NV; ++c)
        store_lanes_avx2(s[r] + j0 + 8 * c, acc[r][c], std::clamp<int64_t>(m - 8 * c, 0, 8));
    }
  }
}

// The keys go in runs of kSub (16), each run through every pass over the dims before the next,
// so that its V rows stay in L1 (a 64-key block of F32 V rows of 256 dims is 64 KiB); the sums
// go back to o between runs, exactly, and each output's fmas keep key order.
template <int R, int NV, class LoadV>
__attribute__((target("avx2,fma,f16c"))) void weighted_values_rows_avx2(
    const LoadV& vl, const int64_t* nb, const float* const* p, float* const* o, int64_t d) {
  constexpr int kW = 8 * NV;  // dims per pass
  constexpr int64_t kSub = 16;
  int64_t n_min = nb[0], n_max = 0;
  for (int r = 0; r < R; ++r) {
    n_min = std::min(n_min, nb[r]);
    n_max = std::max(n_max, nb[r]);
  }
  for (int64_t j0 = 0; j0 < n_max; j0 += kSub) {
    const int64_t j1 = std::min(n_max, j0 + kSub), jc = std::min(j1, n_min);
    for (int64_t d0 = 0; d0 < d; d0 += kW) {
      __m256 acc[R][NV];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_loadu_ps(o[r] + d0 + 8 * c);
      for (int64_t j = j0; j < jc; ++j) {  // keys every row has
        vl.template prefetch<NV>(j, d0);
        __m256 vv[NV];
        vl.template load<NV>(j, d0, vv);
        for (int r = 0; r < R; ++r) {
          const __m256 pj = _mm256_set1_ps(p[r][j]);
          for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_fmadd_ps(pj, vv[c], acc[r][c]);
        }
      }
      for (int r = 0; r < R; ++r) {
        for (int64_t j = std::max(j0, n_min); j < std::min(j1, nb[r]); ++j) {
          __m256 vv[NV];
          vl.template load<NV>(j, d0, vv);
          const __m256 pj = _mm256_set1_ps(p[r][j]);
          for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_fmadd_ps(pj, vv[c], acc[r][c]);
        }
        for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o[r] + d0 + 8 * c, acc[r][c]);
      }
    }
  }
}

// The loaders of each vector width, by stored type (attention_core picks one per block).
struct Avx512Loaders {
  using KF32 = KLoadF32;
  using KBF16 = KLoadHalf<true>;
  using KF16 = KLoadHalf<false>;
  using KQ8 = KLoadQ8;
  using VF32 = VLoadF32;
  using VBF16 = VLoadHalf<true>;
  using VF16 = VLoadHalf<false>;
  using VQ8 = VLoadQ8;
};
struct Avx2Loaders {
  using KF32 = K2Plain<float, 0>;
  using KBF16 = K2Plain<uint16_t, 1>;
  using KF16 = K2Plain<uint16_t, 2>;
  using KQ8 = K2Q8;
  using VF32 = V2Plain<float, 0>;
  using VBF16 = V2Plain<uint16_t, 1>;
  using VF16 = V2Plain<uint16_t, 2>;
  using VQ8 = V2Q8;
};

// Vectors a pass for R (1-4) rows on AVX2.
template <int R>
constexpr int avx2_row_vectors() {
  return R <= 2 ? 4 : 2;
}
// A group of R rows on AVX2: groups of 5-8 run as 4 rows and then the rest (8 rows of one vector
// each would load 8 broadcasts for every K or V vector), the first part prefetching.
template <int R, class LoadK>
__attribute__((target("avx2,fma,f16c"))) void scores_group_avx2(const float* const* q,
                                                                const LoadK& kl, const int64_t* nb,
                                                                int64_t d, float* const* s) {
  if constexpr (R <= 4) {
    scores_rows_avx2<R, avx2_row_vectors<R>()>(q, kl, nb, d, s);
  } else {
    scores_rows_avx2<4, 2>(q, kl, nb, d, s);
    scores_rows_avx2<R - 4, avx2_row_vectors<R - 4>()>(q + 4, kl.without_next(), nb + 4, d, s + 4);
  }
}
template <int R, class LoadV>
__attribute__((target("avx2,fma,f16c"))) void values_group_avx2(const LoadV& vl, const int64_t* nb,
                                                                const float* const* p,
                                                                float* const* o, int64_t d) {
  if constexpr (R <= 4) {
    weighted_values_rows_avx2<R, avx2_row_vectors<R>()>(vl, nb, p, o, d);
  } else {
    weighted_values_rows_avx2<4, 2>(vl, nb, p, o, d);
    weighted_values_rows_avx2<R - 4, avx2_row_vectors<R - 4>()>(vl.without_next(), nb + 4, p + 4,
                                                                o + 4, d);
  }
}

#pragma GCC diagnostic pop

#endif

// Pointers and key counts of up to 8 rows of attention_rows within one K/V block.
// s doubles as the probabilities p once pass 2 has normalised it.
struct RowGroup {
  const float* q[8];
  float* s[8];
  float* o[8];
  int64_t nb[8];
};

}  // namespace

namespace {

#ifdef REWIND_DOT_SIMD
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// R rows of a Mamba2 state for K consecutive tokens (K = 1 or 2) in AVX-512, interleaved: each
// 16-lane chunk of B and C is loaded once for the R rows, R * K independent fma chains hide the
// fma latency, and with K = 2 a chunk of the state is loaded and stored once for both tokens
// (half the state traffic of a token at a time). Row r's lanes see the scalar loop's operations in
// its order (token k's update and read, then token k + 1's); xdt[k * 8 + r] is row r's x * dt of
// token k, and h[k * 8 + r] gets lanes 0-7 plus lanes 8-15 of its sums. With PF the next group's
// rows are prefetched: a decode step streams the state from memory, where R interleaved rows
// defeat the hardware's stream prefetch; a state already in cache is slower with it.
template <int R, int K, bool PF>
__attribute__((target("avx512f"))) inline void mamba2_rows_avx512(float* s, int64_t N,
                                                                  const float* b, const float* c,
                                                                  int64_t ldbc, const __m512* a,
                                                                  const float* xdt, __m256* h) {
  __m512 acc[K][R];
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) acc[k][r] = _mm512_setzero_ps();
  int64_t n = 0;
  for (; n + kLanes <= N; n += kLanes) {
    __m512 bv[K], cv[K];
    for (int k = 0; k < K; ++k) {
      bv[k] = _mm512_loadu_ps(b + k * ldbc + n);
      cv[k] = _mm512_loadu_ps(c + k * ldbc + n);
    }
    for (int r = 0; r < R; ++r) {
      float* sr = s + r * N + n;
      if constexpr (PF && R > 1)
        _mm_prefetch(reinterpret_cast<const char*>(sr + R * N), _MM_HINT_T0);
      __m512 sv = _mm512_loadu_ps(sr);
      for (int k = 0; k < K; ++k) {
        sv = _mm512_fmadd_ps(sv, a[k], _mm512_mul_ps(bv[k], _mm512_set1_ps(xdt[k * 8 + r])));
        acc[k][r] = _mm512_fmadd_ps(sv, cv[k], acc[k][r]);
      }
      _mm512_storeu_ps(sr, sv);
    }
  }
  if (n < N) {
    const __mmask16 m = lanes_left(N - n);
    __m512 bv[K], cv[K];
    for (int k = 0; k < K; ++k) {
      bv[k] = _mm512_maskz_loadu_ps(m, b + k * ldbc + n);
      cv[k] = _mm512_maskz_loadu_ps(m, c + k * ldbc + n);
    }
    for (int r = 0; r < R; ++r) {
      float* sr = s + r * N + n;
      __m512 sv = _mm512_maskz_loadu_ps(m, sr);
      for (int k = 0; k < K; ++k) {
        sv = _mm512_fmadd_ps(sv, a[k], _mm512_mul_ps(bv[k], _mm512_set1_ps(xdt[k * 8 + r])));
        acc[k][r] = _mm512_mask3_fmadd_ps(sv, cv[k], acc[k][r], m);
      }
      _mm512_mask_storeu_ps(sr, m, sv);
    }
  }
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r)
      h[k * 8 + r] =
          _mm256_add_ps(_mm512_castps512_ps256(acc[k][r]),
                        _mm512_castps512_ps256(_mm512_shuffle_f32x4(acc[k][r], acc[k][r], 0xEE)));
}

// K tokens from t of mamba2_steps in AVX-512 (mamba2_rows_avx512): rows in groups of eight,
// whose sums are reduced together (reduce_lanes8_x8), y = sum + D * x as in the scalar loop; the
// rows left one at a time.
template <int K, bool PF>
__attribute__((target("avx512f"))) inline void mamba2_tokens_avx512(
    float* S, const float* x, int64_t ldx, const float* B, const float* C, int64_t ldbc,
    const float* dt, const float* dA, float D, float* y, int64_t ldy, int64_t t, int64_t P,
    int64_t N) {
  const __m256 dv = _mm256_set1_ps(D);
  __m512 a[K];
  for (int k = 0; k < K; ++k) a[k] = _mm512_set1_ps(dA[t + k]);
  const float* b = B + t * ldbc;
  const float* c = C + t * ldbc;
  float xdt[K * 8];
  __m256 h[K * 8];
  int64_t p = 0;
  for (; p + 8 <= P; p += 8) {
    for (int k = 0; k < K; ++k)
      for (int r = 0; r < 8; ++r) xdt[k * 8 + r] = x[(t + k) * ldx + p + r] * dt[t + k];
    mamba2_rows_avx512<8, K, PF>(S + p * N, N, b, c, ldbc, a, xdt, h);
    for (int k = 0; k < K; ++k) {
      const __m256 xv = _mm256_loadu_ps(x + (t + k) * ldx + p);
      _mm256_storeu_ps(y + (t + k) * ldy + p,
                       _mm256_add_ps(reduce_lanes8_x8(h + k * 8), _mm256_mul_ps(dv, xv)));
    }
  }
  for (; p < P; ++p) {
    for (int k = 0; k < K; ++k) xdt[k * 8] = x[(t + k) * ldx + p] * dt[t + k];
    mamba2_rows_avx512<1, K, PF>(S + p * N, N, b, c, ldbc, a, xdt, h);
    for (int k = 0; k < K; ++k)
      y[(t + k) * ldy + p] = reduce_lanes8(h[k * 8]) + D * x[(t + k) * ldx + p];
  }
}

// Prefill form of mamba2_steps in AVX-512 with the state's rows in the lanes: a block of R = 16 NB
// rows is transposed into a scratch laid out column by column (column n of the block is one vector
// per 16 rows), so that the 16 read-out lanes of a row (n % 16 = j) become 16 vectors whose fixed
// tree is vector adds, with no shuffles; x * dt and y = sum + D * x are whole vectors over the
// rows. Lane class j runs first over its columns n = j, j + 16, ... (the scratch stores them in
// that order, one contiguous stream), its sums kept, so only the current class's accumulators live
// in registers. Per element the same operations in the same order as the scalar loop (token k's
// update and read, then token k + 1's), so the same bits.
template <int NB, int K>
__attribute__((target("avx512f"))) inline void mamba2_lanes_avx512(
    float* st, int64_t M, int64_t N, const float* x, int64_t ldx, const float* B, const float* C,
    int64_t ldbc, const float* dt, const float* dA, float D, float* y, int64_t ldy, int64_t t,
    int64_t rows) {
  constexpr int R = 16 * NB;
  __m512 a[K], xdt[K][NB], sum[K][NB];
  __mmask16 mk[NB];
  for (int q = 0; q < NB; ++q) mk[q] = lanes_left(rows - 16 * q);
  for (int k = 0; k < K; ++k) {
    a[k] = _mm512_set1_ps(dA[t + k]);
    const __m512 d = _mm512_set1_ps(dt[t + k]);
    for (int q = 0; q < NB; ++q)
      xdt[k][q] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[q], x + (t + k) * ldx + 16 * q), d);
  }
  const float* b = B + t * ldbc;
  const float* c = C + t * ldbc;
  // lane[j][k][q]: the read-out sums of lane class j.
  __m512 lane[kLanes][K][NB];
  for (int j = 0; j < kLanes; ++j) {
    __m512 acc[K][NB];
    for (int k = 0; k < K; ++k)
      for (int q = 0; q < NB; ++q) acc[k][q] = _mm512_setzero_ps();
    float* sj = st + j * M * R;
    for (int64_t n = j; n < N; n += kLanes, sj += R) {
      __m512 bv[K], cv[K];
      for (int k = 0; k < K; ++k) {
        bv[k] = _mm512_set1_ps(b[k * ldbc + n]);
        cv[k] = _mm512_set1_ps(c[k * ldbc + n]);
      }
      for (int q = 0; q < NB; ++q) {
        __m512 sv = _mm512_load_ps(sj + 16 * q);
        for (int k = 0; k < K; ++k) {
          sv = _mm512_fmadd_ps(sv, a[k], _mm512_mul_ps(bv[k], xdt[k][q]));
          acc[k][q] = _mm512_fmadd_ps(sv, cv[k], acc[k][q]);
        }
        _mm512_store_ps(sj + 16 * q, sv);
      }
    }
    for (int k = 0; k < K; ++k)
      for (int q = 0; q < NB; ++q) lane[j][k][q] = acc[k][q];
  }
  // reduce_lanes's tree over the classes, then + D * x.
  const __m512 dv = _mm512_set1_ps(D);
  for (int k = 0; k < K; ++k)
    for (int q = 0; q < NB; ++q) {
      __m512 t8[8], t4[4];
      for (int i = 0; i < 8; ++i) t8[i] = _mm512_add_ps(lane[i][k][q], lane[i + 8][k][q]);
      for (int i = 0; i < 4; ++i) t4[i] = _mm512_add_ps(t8[i], t8[i + 4]);
      sum[k][q] = _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]));
      const __m512 xv = _mm512_maskz_loadu_ps(mk[q], x + (t + k) * ldx + 16 * q);
      _mm512_mask_storeu_ps(y + (t + k) * ldy + 16 * q, mk[q],
                            _mm512_add_ps(sum[k][q], _mm512_mul_ps(dv, xv)));
    }
}

// 16 x 16 transpose in registers: v[i] lane e becomes v[e] lane i (unpacks, then 128-bit lane
// shuffles).
__attribute__((target("avx512f"))) inline void transpose16_avx512(__m512* v) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + i] lane L: element 4L + i of rows 4g .. 4g + 3
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xDD);
    v[i] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    v[8 + i] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    v[4 + i] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    v[12 + i] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

// All T tokens of rows [p0, p0 + rows) (rows <= 16 NB) through mamba2_lanes_avx512: the rows
// transposed into the scratch st (M * 16 columns of 16 NB floats, 64-byte aligned; rows past
// `rows` zero) and back.
template <int NB>
__attribute__((target("avx512f"))) void mamba2_block_lanes_avx512(
    float* S, float* st, const float* x, int64_t ldx, const float* B, const float* C, int64_t ldbc,
    const float* dt, const float* dA, float D, float* y, int64_t ldy, int64_t T, int64_t N,
    int64_t p0, int64_t rows) {
  constexpr int R = 16 * NB;
  const int64_t M = (N + kLanes - 1) / kLanes;
  __m512 v[kLanes];
  for (int64_t m = 0; m < M; ++m) {
    const __mmask16 mn = lanes_left(N - m * kLanes);
    for (int q = 0; q < NB; ++q) {
      for (int r = 0; r < kLanes; ++r)
        v[r] = 16 * q + r < rows ? _mm512_maskz_loadu_ps(mn, S + (p0 + 16 * q + r) * N + m * kLanes)
                                 : _mm512_setzero_ps();
      transpose16_avx512(v);
      for (int j = 0; j < kLanes; ++j) _mm512_store_ps(st + (j * M + m) * R + 16 * q, v[j]);
    }
  }
  int64_t t = 0;
  for (; t + 2 <= T; t += 2)
    mamba2_lanes_avx512<NB, 2>(st, M, N, x + p0, ldx, B, C, ldbc, dt, dA, D, y + p0, ldy, t, rows);
  if (t < T)
    mamba2_lanes_avx512<NB, 1>(st, M, N, x + p0, ldx, B, C, ldbc, dt, dA, D, y + p0, ldy, t, rows);
  for (int64_t m = 0; m < M; ++m) {
    const __mmask16 mn = lanes_left(N - m * kLanes);
    for (int q = 0; q < NB; ++q) {
      for (int j = 0; j < kLanes; ++j) v[j] = _mm512_load_ps(st + (j * M + m) * R + 16 * q);
      transpose16_avx512(v);
      for (int r = 0; r < kLanes && 16 * q + r < rows; ++r)
        _mm512_mask_storeu_ps(S + (p0 + 16 * q + r) * N + m * kLanes, mn, v[r]);
    }
  }
}

// Token counts from which mamba2_steps_avx512 takes the rows-in-lanes form (its copies of the
// state in and out cost about as much as a few tokens).
constexpr int64_t kMamba2LanesMinTokens = 16;

// mamba2_steps in AVX-512: tokens two at a time (the state chunk loaded and stored once for
// both), the last one of an odd count alone. A single token (a decode step) prefetches the state.
__attribute__((target("avx512f"))) void mamba2_steps_avx512(float* S, const float* x, int64_t ldx,
                                                            const float* B, const float* C,
                                                            int64_t ldbc, const float* dt,
                                                            const float* dA, float D, float* y,
                                                            int64_t ldy, int64_t T, int64_t P,
                                                            int64_t N) {
  if (T == 1)
    return mamba2_tokens_avx512<1, true>(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, 0, P, N);
  if (T >= kMamba2LanesMinTokens) {
    const int64_t M = (N + kLanes - 1) / kLanes;
    thread_local AlignedBuffer<float> store;
    store.reserve_at_least(static_cast<size_t>(M * kLanes * 32));
    float* st = store.data();
    int64_t p = 0;
    for (; p + 16 < P; p += 32)
      mamba2_block_lanes_avx512<2>(S, st, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, T, N, p,
                                   std::min<int64_t>(32, P - p));
    if (p < P)
      mamba2_block_lanes_avx512<1>(S, st, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, T, N, p, P - p);
    return;
  }
  int64_t t = 0;
  for (; t + 2 <= T; t += 2)
    mamba2_tokens_avx512<2, false>(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, t, P, N);
  if (t < T) mamba2_tokens_avx512<1, false>(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, t, P, N);
}

// R rows in AVX2 for K consecutive tokens (K = 1 or 2; N a multiple of 16), interleaved as in
// mamba2_rows_avx512: with K = 2 each 16-lane chunk of the state is loaded and stored once for
// both tokens (token k's update and read, then token k + 1's, in registers). xdt[k * 8 + r] is
// row r's x * dt of token k; lanes 0-7 and 8-15 of its sums go to lo[k * 8 + r], hi[k * 8 + r].
// With PF the next rows are prefetched (a token at a time; a state in cache is slower with it).
template <int R, int K, bool PF>
__attribute__((target("avx2,fma"))) inline void mamba2_rows_avx2(float* s, int64_t N,
                                                                 const float* b, const float* c,
                                                                 int64_t ldbc, const __m256* a,
                                                                 const float* xdt, __m256* lo,
                                                                 __m256* hi) {
  __m256 l[K][R], h[K][R];
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) l[k][r] = h[k][r] = _mm256_setzero_ps();
  for (int64_t n = 0; n < N; n += kLanes) {
    for (int r = 0; r < R; ++r) {
      float* sr = s + r * N + n;
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(sr + R * N), _MM_HINT_T0);
      __m256 s0 = _mm256_loadu_ps(sr), s1 = _mm256_loadu_ps(sr + 8);
      for (int k = 0; k < K; ++k) {
        const float* bk = b + k * ldbc + n;
        const float* ck = c + k * ldbc + n;
        const __m256 xd = _mm256_set1_ps(xdt[k * 8 + r]);
        s0 = _mm256_fmadd_ps(s0, a[k], _mm256_mul_ps(_mm256_loadu_ps(bk), xd));
        s1 = _mm256_fmadd_ps(s1, a[k], _mm256_mul_ps(_mm256_loadu_ps(bk + 8), xd));
        l[k][r] = _mm256_fmadd_ps(s0, _mm256_loadu_ps(ck), l[k][r]);
        h[k][r] = _mm256_fmadd_ps(s1, _mm256_loadu_ps(ck + 8), h[k][r]);
      }
      _mm256_storeu_ps(sr, s0);
      _mm256_storeu_ps(sr + 8, s1);
    }
  }
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r) {
      lo[k * 8 + r] = l[k][r];
      hi[k * 8 + r] = h[k][r];
    }
}

// K tokens from t of mamba2_steps in AVX2 (N a multiple of 16): rows in groups of eight (passes
// of kAvx2Rows rows), whose sums are reduced together, y = sum + D * x as in the scalar loop;
// the rows left one at a time. One row per pass: with two tokens, 2 or 4 interleaved rows were
// slower (16 ymm registers; recurrence_bench --mamba2 --isa avx2, docs/PERFORMANCE.md).
constexpr int kAvx2Rows = 1;
template <int K, bool PF>
__attribute__((target("avx2,fma"))) inline void mamba2_tokens_avx2(
    float* S, const float* x, int64_t ldx, const float* B, const float* C, int64_t ldbc,
    const float* dt, const float* dA, float D, float* y, int64_t ldy, int64_t t, int64_t P,
    int64_t N) {
  const __m256 dv = _mm256_set1_ps(D);
  __m256 a[K];
  for (int k = 0; k < K; ++k) a[k] = _mm256_set1_ps(dA[t + k]);
  const float* b = B + t * ldbc;
  const float* c = C + t * ldbc;
  float xdt[K * 8];
  __m256 lo[K * 8], hi[K * 8];
  int64_t p = 0;
  for (; p + 8 <= P; p += 8) {
    for (int k = 0; k < K; ++k)
      for (int r = 0; r < 8; ++r) xdt[k * 8 + r] = x[(t + k) * ldx + p + r] * dt[t + k];
    for (int j = 0; j < 8; j += kAvx2Rows)
      mamba2_rows_avx2<kAvx2Rows, K, PF>(S + (p + j) * N, N, b, c, ldbc, a, xdt + j, lo + j,
                                         hi + j);
    for (int k = 0; k < K; ++k) {
      __m256 h[8];
      for (int r = 0; r < 8; ++r) h[r] = _mm256_add_ps(lo[k * 8 + r], hi[k * 8 + r]);
      const __m256 xv = _mm256_loadu_ps(x + (t + k) * ldx + p);
      _mm256_storeu_ps(y + (t + k) * ldy + p,
                       _mm256_add_ps(reduce_lanes8_x8(h), _mm256_mul_ps(dv, xv)));
    }
  }
  for (; p < P; ++p) {
    for (int k = 0; k < K; ++k) xdt[k * 8] = x[(t + k) * ldx + p] * dt[t + k];
    mamba2_rows_avx2<1, K, false>(S + p * N, N, b, c, ldbc, a, xdt, lo, hi);
    for (int k = 0; k < K; ++k)
      y[(t + k) * ldy + p] =
          reduce_lanes8(_mm256_add_ps(lo[k * 8], hi[k * 8])) + D * x[(t + k) * ldx + p];
  }
}

// The same in AVX2: for N a multiple of 16 and T > 1, tokens two at a time (the last one of an
// odd count alone) through mamba2_tokens_avx2; otherwise each row alone, token by token, its
// tail of under 16 in scalar code on the stored lanes.
__attribute__((target("avx2,fma"))) void mamba2_steps_avx2(float* S, const float* x, int64_t ldx,
                                                           const float* B, const float* C,
                                                           int64_t ldbc, const float* dt,
                                                           const float* dA, float D, float* y,
                                                           int64_t ldy, int64_t T, int64_t P,
                                                           int64_t N) {
  const int64_t N16 = N / kLanes * kLanes;
  if (N16 == N && T > 1) {
    int64_t t = 0;
    for (; t + 2 <= T; t += 2)
      mamba2_tokens_avx2<2, false>(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, t, P, N);
    if (t < T) mamba2_tokens_avx2<1, true>(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, t, P, N);
    return;
  }
  // One token (a decode step streaming the state from memory) runs row after row: interleaved
  // rows are slower there with AVX2's prefetch.
  for (int64_t t = 0; t < T; ++t) {
    const __m256 a = _mm256_set1_ps(dA[t]);
    const float* b = B + t * ldbc;
    const float* c = C + t * ldbc;
    const float* xt = x + t * ldx;
    float* yt = y + t * ldy;
    for (int64_t p = 0; p < P; ++p) {
      float* s = S + p * N;
      const float xv = xt[p];
      const float xs = xv * dt[t];
      const __m256 xdt1 = _mm256_set1_ps(xs);
      __m256 l0 = _mm256_setzero_ps(), l1 = _mm256_setzero_ps();
      for (int64_t n = 0; n < N16; n += kLanes) {
        const __m256 s0 =
            _mm256_fmadd_ps(_mm256_loadu_ps(s + n), a, _mm256_mul_ps(_mm256_loadu_ps(b + n), xdt1));
        const __m256 s1 = _mm256_fmadd_ps(_mm256_loadu_ps(s + n + 8), a,
                                          _mm256_mul_ps(_mm256_loadu_ps(b + n + 8), xdt1));
        _mm256_storeu_ps(s + n, s0);
        _mm256_storeu_ps(s + n + 8, s1);
        l0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(c + n), l0);
        l1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(c + n + 8), l1);
      }
      float sum;
      if (N16 == N) {
        sum = reduce_lanes8(_mm256_add_ps(l0, l1));
      } else {
        float l[kLanes];
        _mm256_storeu_ps(l, l0);
        _mm256_storeu_ps(l + 8, l1);
        for (int j = 0; N16 + j < N; ++j) {
          s[N16 + j] = std::fma(s[N16 + j], dA[t], b[N16 + j] * xs);
          l[j] = std::fma(s[N16 + j], c[N16 + j], l[j]);
        }
        sum = reduce_lanes(l);
      }
      yt[p] = sum + D * xv;
    }
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void mamba2_steps(float* S, const float* x, int64_t ldx, const float* B, const float* C,
                  int64_t ldbc, const float* dt, const float* dA, float D, float* y, int64_t ldy,
                  int64_t T, int64_t P, int64_t N, IsaCap isa) {
#ifdef REWIND_DOT_SIMD
  const int level = simd_level(isa);
  if (level == 2) return mamba2_steps_avx512(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, T, P, N);
  if (level == 1) return mamba2_steps_avx2(S, x, ldx, B, C, ldbc, dt, dA, D, y, ldy, T, P, N);
#endif
  for (int64_t t = 0; t < T; ++t) {
    const float* b = B + t * ldbc;
    const float* c = C + t * ldbc;
    for (int64_t p = 0; p < P; ++p) {
      float* s = S + p * N;
      const float xv = x[t * ldx + p];
      const float xs = xv * dt[t];
      float acc[kLanes] = {};
      for (int64_t n = 0; n < N; ++n) {
        s[n] = std::fma(s[n], dA[t], b[n] * xs);
        acc[n % kLanes] = std::fma(s[n], c[n], acc[n % kLanes]);
      }
      y[t * ldy + p] = reduce_lanes(acc) + D * xv;
    }
  }
}

REWIND_CLONES
void gated_rmsnorm_groups(const float* y, const float* z, const float* w, float* out,
                          int64_t n_groups, int64_t d, float eps, IsaCap isa) {
  // The gate as swiglu(z, y): silu(z) * y is y * silu(z) bit for bit, in its SIMD pass.
  swiglu(z, y, out, n_groups * d, isa);
  float ss[16];
  for (int64_t g = 0; g < n_groups; ++g) {
    if (g % 16 == 0) sumsq_rows(out + g * d, d, std::min<int64_t>(16, n_groups - g), d, ss, isa);
    float* h = out + g * d;
    const float* wg = w + g * d;
    const float inv = 1.0f / std::sqrt(ss[g % 16] / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) h[i] = (h[i] * inv) * wg[i];
  }
}

// ---- KV cache types: exact widening to fp32 ----
namespace {

// Per-thread buffers the widened blocks go to (which: 0 K, 1 V); they grow to the largest
// d x block seen and stay.
float* widen_buffer(int which, int64_t n) {
  thread_local AlignedBuffer<float> buf[2];
  buf[which].reserve_at_least(static_cast<size_t>(n));
  return buf[which].data();
}

// out[e] = widen(src[e]) for e < n, BF16 or F16.
void widen_u16_scalar(const uint16_t* src, bool bf, int64_t n, float* out) {
  if (bf)
    for (int64_t e = 0; e < n; ++e) out[e] = bf16_to_f32(src[e]);
  else
    for (int64_t e = 0; e < n; ++e) out[e] = f16_to_f32(src[e]);
}
// out[e] = code[e] * f16(scale[e * step]) for e < n... with step 0 or 1: a K row (one scale a
// key) or a run of one V block (one scale for all).
void widen_q8_scalar(const int8_t* code, const uint16_t* scale, int64_t step, int64_t n,
                     float* out) {
  for (int64_t e = 0; e < n; ++e)
    out[e] = static_cast<float>(code[e]) * f16_to_f32(scale[e * step]);
}

#ifdef REWIND_DOT_SIMD
// GCC 12's headers pass an uninitialised operand to the unmasked conversions (dead, as above).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void widen_u16_avx512(const uint16_t* src, bool bf, int64_t n,
                                                         float* out) {
  int64_t e = 0;
  for (; e + 16 <= n; e += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + e));
    _mm512_storeu_ps(out + e,
                     bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                        : _mm512_cvtph_ps(h));
  }
  widen_u16_scalar(src + e, bf, n - e, out + e);
}
__attribute__((target("avx512f"))) void widen_q8_avx512(const int8_t* code, const uint16_t* scale,
                                                        int64_t step, int64_t n, float* out) {
  int64_t e = 0;
  const __m512 s1 = _mm512_set1_ps(f16_to_f32(scale[0]));
  for (; e + 16 <= n; e += 16) {
    const __m512 c = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(code + e))));
    const __m512 sc =
        step ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scale + e)))
             : s1;
    _mm512_storeu_ps(out + e, _mm512_mul_ps(c, sc));
  }
  widen_q8_scalar(code + e, scale + e * step, step, n - e, out + e);
}
__attribute__((target("avx2,f16c"))) void widen_u16_avx2(const uint16_t* src, bool bf, int64_t n,
                                                         float* out) {
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + e));
    _mm256_storeu_ps(out + e,
                     bf ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                        : _mm256_cvtph_ps(h));
  }
  widen_u16_scalar(src + e, bf, n - e, out + e);
}
__attribute__((target("avx2,f16c"))) void widen_q8_avx2(const int8_t* code, const uint16_t* scale,
                                                        int64_t step, int64_t n, float* out) {
  int64_t e = 0;
  const __m256 s1 = _mm256_set1_ps(f16_to_f32(scale[0]));
  for (; e + 8 <= n; e += 8) {
    const __m256 c = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(code + e))));
    const __m256 sc =
        step ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scale + e))) : s1;
    _mm256_storeu_ps(out + e, _mm256_mul_ps(c, sc));
  }
  widen_q8_scalar(code + e, scale + e * step, step, n - e, out + e);
}
#pragma GCC diagnostic pop
#endif

// 2: AVX-512, 1: AVX2 with F16C, 0: scalar.
int widen_level(IsaCap isa) {
#ifdef REWIND_DOT_SIMD
  static const bool f16c = (__builtin_cpu_init(), __builtin_cpu_supports("f16c"));
  const int l = simd_level(isa);
  return l == 1 && !f16c ? 0 : l;
#else
  (void)isa;
  return 0;
#endif
}

void widen_u16(int level, const uint16_t* src, bool bf, int64_t n, float* out) {
#ifdef REWIND_DOT_SIMD
  if (level == 2) return widen_u16_avx512(src, bf, n, out);
  if (level == 1) return widen_u16_avx2(src, bf, n, out);
#endif
  (void)level;
  widen_u16_scalar(src, bf, n, out);
}
void widen_q8(int level, const int8_t* code, const uint16_t* scale, int64_t step, int64_t n,
              float* out) {
  if (n <= 0) return;
#ifdef REWIND_DOT_SIMD
  if (level == 2) return widen_q8_avx512(code, scale, step, n, out);
  if (level == 1) return widen_q8_avx2(code, scale, step, n, out);
#endif
  (void)level;
  widen_q8_scalar(code, scale, step, n, out);
}

}  // namespace

void kv_widen_k(const KvBlocks& k, int64_t b, int64_t block, int64_t n, int64_t d, float* out,
                IsaCap isa) {
  const int level = widen_level(isa);
  for (int64_t i = 0; i < d; ++i) {
    float* o = out + i * block;
    switch (k.type) {
      case DType::F32:
        std::memcpy(o, static_cast<const float*>(k.data[b]) + i * block,
                    static_cast<size_t>(n) * 4);
        break;
      case DType::BF16:
      case DType::F16:
        widen_u16(level, static_cast<const uint16_t*>(k.data[b]) + i * block, k.type == DType::BF16,
                  n, o);
        break;
      default:  // Q8_0: one scale per key in the row of dim block i / 32
        widen_q8(level, static_cast<const int8_t*>(k.data[b]) + i * block,
                 k.scales[b] + (i / 32) * block, 1, n, o);
    }
  }
}

void kv_widen_v(const KvBlocks& v, int64_t b, int64_t n, int64_t d, float* out, IsaCap isa) {
  const int level = widen_level(isa);
  for (int64_t j = 0; j < n; ++j) {
    float* o = out + j * d;
    switch (v.type) {
      case DType::F32:
        std::memcpy(o, static_cast<const float*>(v.data[b]) + j * v.ld, static_cast<size_t>(d) * 4);
        break;
      case DType::BF16:
      case DType::F16:
        widen_u16(level, static_cast<const uint16_t*>(v.data[b]) + j * v.ld, v.type == DType::BF16,
                  d, o);
        break;
      default: {  // Q8_0: one scale per 32 dims
        const int8_t* c = static_cast<const int8_t*>(v.data[b]) + j * v.ld;
        const uint16_t* sc = v.scales[b] + j * v.sld;
        for (int64_t i0 = 0; i0 < d; i0 += 32)
          widen_q8(level, c + i0, sc + i0 / 32, 0, std::min<int64_t>(32, d - i0), o + i0);
      }
    }
  }
}

namespace detail {
void attention_core(const float* const* q, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* const* out, float* scratch,
                    IsaCap isa, const KvBlocks* kt, const KvBlocks* vt);
}  // namespace detail

REWIND_CLONES
void attention_head(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                    int64_t block, int64_t ld, int64_t n_keys, int64_t d, float scale, float* out,
                    float* scratch, IsaCap isa) {
  attention_rows(&q, 1, &n_keys, k_blocks, v_blocks, block, ld, d, scale, &out, scratch, isa);
}

// The strided form: the rows' addresses, then the pointer form (nothing on a hot path calls it;
// the model's jobs pass their rows' addresses).
REWIND_CLONES
void attention_rows(const float* q, int64_t ldq, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* out, int64_t ldo, float* scratch,
                    IsaCap isa) {
  std::vector<const float*> qr(static_cast<size_t>(m));
  std::vector<float*> orow(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    qr[r] = q + r * ldq;
    orow[r] = out + r * ldo;
  }
  attention_rows(qr.data(), m, n_keys, k_blocks, v_blocks, block, ld, d, scale, orow.data(),
                 scratch, isa);
}

void attention_rows(const float* const* q, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* const* out, float* scratch,
                    IsaCap isa) {
  detail::attention_core(q, m, n_keys, k_blocks, v_blocks, block, ld, d, scale, out, scratch, isa,
                         nullptr, nullptr);
}

void attention_rows(const float* const* q, int64_t m, const int64_t* n_keys, const KvBlocks& k,
                    const KvBlocks& v, int64_t block, int64_t d, float scale, float* const* out,
                    float* scratch, IsaCap isa) {
  const bool kf = k.type == DType::F32, vf = v.type == DType::F32;
  detail::attention_core(q, m, n_keys, kf ? reinterpret_cast<const float* const*>(k.data) : nullptr,
                         vf ? reinterpret_cast<const float* const*>(v.data) : nullptr, block, v.ld,
                         d, scale, out, scratch, isa, kf ? nullptr : &k, vf ? nullptr : &v);
}

namespace detail {
// The F32 kernel; blocks of a typed K (kt) or V (vt) are widened one at a time into per-thread
// buffers first (the widening is exact, so the bits are those of the F32 kernel on them).
REWIND_CLONES
void attention_core(const float* const* q, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* const* out, float* scratch,
                    IsaCap isa, const KvBlocks* kt, const KvBlocks* vt) {
  const int64_t n_max = n_keys[m - 1];
  float* kbuf = kt ? widen_buffer(0, d * block) : nullptr;
  float* vbuf = vt ? widen_buffer(1, d * block) : nullptr;
  // Rows [r, r + R) of one block: fills g with their pointers and key counts.
  auto group = [&](RowGroup& g, int64_t r, int R, int64_t b0, int64_t d0) {
    for (int u = 0; u < R; ++u) {
      g.q[u] = q[r + u];
      g.s[u] = scratch + (r + u) * n_max + b0;
      g.o[u] = out[r + u] + d0;
      g.nb[u] = std::min(block, n_keys[r + u] - b0);
    }
  };
#ifdef REWIND_ATTN_AVX512
  const bool avx512 = simd_level(isa) == 2;
  // AVX2 with F16C (and FMA): the row kernels for decode's few rows (up to 8). More rows (a
  // prefill's 16 tokens of each head) share one widening of each block in the portable
  // kernels, which ran 1.6-2x faster for them than the row kernels converting per group of 4.
  const bool avx2 = widen_level(isa) == 1;
  // Rows from r in groups of 8 while more than 8 are left, then the rest as one group of 1-8:
  // run(g, R) per group, R a std::integral_constant. (A K/V head's 3 or 5 query heads, as on
  // Granite-4.0-H and Nemotron-Nano-9B-v2, share each load too, rather than a group of 4 and
  // single rows that read the block again.)
  auto in_groups = [&](int64_t& r, int64_t b0, auto&& run) {
    RowGroup g;
    for (; m - r > 8; r += 8) {
      group(g, r, 8, b0, 0);
      run(g, std::integral_constant<int, 8>{});
    }
    const int left = static_cast<int>(m - r);
    if (left == 0) return;
    group(g, r, left, b0, 0);
    r = m;
    switch (left) {
      case 1:
        return run(g, std::integral_constant<int, 1>{});
      case 2:
        return run(g, std::integral_constant<int, 2>{});
      case 3:
        return run(g, std::integral_constant<int, 3>{});
      case 4:
        return run(g, std::integral_constant<int, 4>{});
      case 5:
        return run(g, std::integral_constant<int, 5>{});
      case 6:
        return run(g, std::integral_constant<int, 6>{});
      case 7:
        return run(g, std::integral_constant<int, 7>{});
      default:
        return run(g, std::integral_constant<int, 8>{});
    }
  };
  // kernel(g, R, loader) over the rows from r in groups, the first group's loader prefetching
  // the next block.
  auto groups_with = [&](int64_t& r, int64_t b0, const auto& loader, auto&& kernel) {
    bool first = true;
    in_groups(r, b0, [&](RowGroup& rg, auto R) {
      kernel(rg, R, first ? loader : loader.without_next());
      first = false;
    });
  };
  // Block bi of a typed cache tb (else of the plain f32 blocks) and the next block, if any, to
  // prefetch (null past the last), with their Q8_0 scales.
  struct BlockPair {
    DType t;
    const void *cur, *next;
    const uint16_t *sc, *sc_next;
  };
  auto block_pair = [&](const KvBlocks* tb, const float* const* plain, int64_t bi) {
    const int64_t bn = (bi + 1) * block < n_max ? bi + 1 : -1;
    auto at = [&](int64_t b) -> const void* {
      return b < 0 ? nullptr : plain ? plain[b] : tb->data[b];
    };
    const bool q8 = tb && tb->type == DType::Q8_0;
    return BlockPair{tb ? tb->type : DType::F32, at(bi), at(bn), q8 ? tb->scales[bi] : nullptr,
                     q8 && bn >= 0 ? tb->scales[bn] : nullptr};
  };
  // rows(loader) with block bi's K (V) loader of family Fam{} (Avx512Loaders, Avx2Loaders).
  auto with_k = [&](auto fam, int64_t bi, auto&& rows) {
    using Fam = decltype(fam);
    using U = uint16_t;
    const BlockPair p = block_pair(kt, k_blocks, bi);
    if (p.t == DType::F32)
      rows(typename Fam::KF32{static_cast<const float*>(p.cur), block,
                              static_cast<const float*>(p.next)});
    else if (p.t == DType::BF16)
      rows(typename Fam::KBF16{static_cast<const U*>(p.cur), block, static_cast<const U*>(p.next)});
    else if (p.t == DType::F16)
      rows(typename Fam::KF16{static_cast<const U*>(p.cur), block, static_cast<const U*>(p.next)});
    else
      rows(typename Fam::KQ8{static_cast<const int8_t*>(p.cur), p.sc, block,
                             static_cast<const int8_t*>(p.next), p.sc_next});
  };
  auto with_v = [&](auto fam, int64_t bi, auto&& rows) {
    using Fam = decltype(fam);
    using U = uint16_t;
    const BlockPair p = block_pair(vt, v_blocks, bi);
    if (p.t == DType::F32)
      rows(typename Fam::VF32{static_cast<const float*>(p.cur), v_blocks ? ld : vt->ld,
                              static_cast<const float*>(p.next)});
    else if (p.t == DType::BF16)
      rows(
          typename Fam::VBF16{static_cast<const U*>(p.cur), vt->ld, static_cast<const U*>(p.next)});
    else if (p.t == DType::F16)
      rows(typename Fam::VF16{static_cast<const U*>(p.cur), vt->ld, static_cast<const U*>(p.next)});
    else
      rows(typename Fam::VQ8{static_cast<const int8_t*>(p.cur), p.sc, vt->ld, vt->sld,
                             static_cast<const int8_t*>(p.next), p.sc_next});
  };
#endif
  // Pass 1, block-major so that a K block is reused by every row: scores.
  for (int64_t b0 = 0; b0 < n_max; b0 += block) {
    const int64_t bi = b0 / block;
    const float* kb = k_blocks ? k_blocks[bi] : nullptr;
    int64_t r = 0;
    while (r < m && n_keys[r] <= b0) ++r;  // rows whose keys end before this block
    RowGroup g;
#ifdef REWIND_ATTN_AVX512
    // Groups of rows: the row kernels read a typed block as they go.
    if (avx512 && block % 32 == 0) {
      with_k(Avx512Loaders{}, bi, [&](const auto& kl) {
        groups_with(r, b0, kl, [&](RowGroup& rg, auto R, const auto& use) {
          if (R() <= 6 && block % 64 == 0)  // 64 keys a pass: 4 x R sums in registers
            scores_rows_avx512<R(), 4>(rg.q, use, rg.nb, d, rg.s);
          else
            scores_rows_avx512<R(), 2>(rg.q, use, rg.nb, d, rg.s);
        });
      });
    } else if (avx2 && m <= 8 && block % 32 == 0) {  // decode's rows (see avx2 above)
      with_k(Avx2Loaders{}, bi, [&](const auto& kl) {
        groups_with(r, b0, kl, [&](RowGroup& rg, auto R, const auto& use) {
          scores_group_avx2<R()>(rg.q, use, rg.nb, d, rg.s);
        });
      });
    }
#endif
    if (kt && r < m) {  // rows left for the portable kernel: whole 64-key chunks widened
      kv_widen_k(*kt, bi, block, std::min(block, (n_max - b0 + 63) / 64 * 64), d, kbuf, isa);
      kb = kbuf;
    }
    for (; r + 4 <= m; r += 4) {
      group(g, r, 4, b0, 0);
      scores_rows<4, 64>(g.q, kb, block, g.nb, d, g.s);
    }
    for (; r < m; ++r) {
      group(g, r, 1, b0, 0);
      scores_rows<1, 64>(g.q, kb, block, g.nb, d, g.s);
    }
  }
  // Pass 2, per row: scale, max, exp, fixed-order sum, then the probabilities p_j = e_j * inv.
  for (int64_t r = 0; r < m; ++r) {
    float* s = scratch + r * n_max;
    const int64_t n = n_keys[r];
#ifdef REWIND_ATTN_AVX512
    if (avx512) {
      softmax_row_avx512(s, n, scale);
      continue;
    }
#endif
    for (int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
    const float mx = max_lanes_inline(s, n);
    for (int64_t j = 0; j < n; ++j) s[j] = exp_fixed_inline(s[j] - mx);
    const float inv = 1.0f / sum_fixed_inline(s, n);
    for (int64_t j = 0; j < n; ++j) s[j] = s[j] * inv;
  }
  // Pass 3, block-major: out[r] += p_j * V_j over keys in order (accumulators spill to out
  // between blocks, exactly).
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < d; ++i) out[r][i] = 0.0f;
  for (int64_t b0 = 0; b0 < n_max; b0 += block) {
    const int64_t bi = b0 / block;
    const float* vb = v_blocks ? v_blocks[bi] : nullptr;
    int64_t r = 0;
    while (r < m && n_keys[r] <= b0) ++r;
    RowGroup g;
#ifdef REWIND_ATTN_AVX512
    if (avx512 && d % 32 == 0) {
      with_v(Avx512Loaders{}, bi, [&](const auto& vl) {
        groups_with(r, b0, vl, [&](RowGroup& rg, auto R, const auto& use) {
          if (R() <= 6 && d % 64 == 0)  // 64 dims a pass
            weighted_values_rows_avx512<R(), 4>(use, rg.nb, rg.s, rg.o, d);
          else
            weighted_values_rows_avx512<R(), 2>(use, rg.nb, rg.s, rg.o, d);
        });
      });
    } else if (avx2 && m <= 8 && d % 32 == 0) {
      with_v(Avx2Loaders{}, bi, [&](const auto& vl) {
        groups_with(r, b0, vl, [&](RowGroup& rg, auto R, const auto& use) {
          values_group_avx2<R()>(use, rg.nb, rg.s, rg.o, d);
        });
      });
    }
#endif
    if (vt && r < m) {  // rows left for the portable kernel: the block's keys widened
      kv_widen_v(*vt, bi, std::min(block, n_max - b0), d, vbuf, isa);
      vb = vbuf;
      ld = d;
    }
    if (d % 64 == 0)
      for (; r + 4 <= m; r += 4)
        for (int64_t d0 = 0; d0 < d; d0 += 64) {
          group(g, r, 4, b0, d0);
          weighted_values_rows<4, 64>(vb + d0, ld, g.nb, g.s, g.o);
        }
    for (; r < m; ++r) {  // one row: the whole head dim in registers when d is a usual size
      group(g, r, 1, b0, 0);
      switch (d) {
        case 32:
          weighted_values_rows<1, 32>(vb, ld, g.nb, g.s, g.o);
          continue;
        case 64:
          weighted_values_rows<1, 64>(vb, ld, g.nb, g.s, g.o);
          continue;
        case 128:
          weighted_values_rows<1, 128>(vb, ld, g.nb, g.s, g.o);
          continue;
        case 256:
          weighted_values_rows<1, 256>(vb, ld, g.nb, g.s, g.o);
          continue;
        default:
          break;
      }
      float* o = g.o[0];
      for (int64_t j = 0; j < g.nb[0]; ++j) {
        const float* vj = vb + j * ld;
        for (int64_t i = 0; i < d; ++i) o[i] = std::fma(g.s[0][j], vj[i], o[i]);
      }
    }
  }
}

}  // namespace detail

}  // namespace rw
