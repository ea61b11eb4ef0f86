// The AVX2 int8 tiles of the quantised matmul (vpmaddubsw + vpmaddwd; matmul_quant_avx2_tiles.h),
// their prefill expansions and the activation quantiser. Compiled under target attributes, chosen
// at run time.
#define REWIND_AVX2_TILE REWIND_AVX2
#define REWIND_AVX2_VNNI 0
#include "rewind/kernels/matmul_quant_avx2_tiles.h"

namespace rw::detail {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

const Int8TileFn kInt8TilesAvx2[kInt8MaxR][kInt8MaxP] = REWIND_INT8_AVX2_TILES;

// nb IQ4_NL panel blocks at src as the Q8_0 panel blocks of their transcoding (the same d, the
// values kIq4nlValues[c] as Q8_0's codes): nibble group g's low nibbles are Q8_0 group 2g, its
// high nibbles group 2g + 1, lane for lane.
REWIND_AVX2 void expand_iq4_nl_avx2(const std::byte* src, int64_t nb, std::byte* dst) {
  const __m256i values =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  const int64_t sb = quant_panel_block_bytes(DType::IQ4_NL),
                db = quant_panel_block_bytes(DType::Q8_0);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* s = src + b * sb;
    std::byte* o = dst + b * db;
    std::memcpy(o, s, 32);  // d
    for (int g = 0; g < 4; ++g)
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        nibbles_avx2(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + kQ8QOff + 64 * g + 32 * h)), lo,
            hi);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + kQ8QOff + 64 * (2 * g) + 32 * h),
                            _mm256_shuffle_epi8(values, lo));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + kQ8QOff + 64 * (2 * g + 1) + 32 * h),
                            _mm256_shuffle_epi8(values, hi));
      }
  }
}

// nb Q6_K panel blocks at src expanded to kQ6KBytesBlock each at dst (as expand_q6_k).
REWIND_AVX2 void expand_q6_k_avx2(const std::byte* src, int64_t nb, std::byte* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blk[1] = {src + b * quant_panel_block_bytes(DType::Q6_K)};
    std::byte* o = dst + b * kQ6KBytesBlock;
    std::memcpy(o, blk[0], kQ6KLoOff);
    for (int sb = 0; sb < 16; ++sb)
      for (int h = 0; h < 2; ++h) {
        auto* d = reinterpret_cast<__m256i*>(o + kQ6KLoOff + 64 * 4 * sb + 32 * h);
        _mm256_storeu_si256(d, q6_k_codes_avx2<0>(blk, h, sb));
        _mm256_storeu_si256(d + 2, q6_k_codes_avx2<1>(blk, h, sb));
        _mm256_storeu_si256(d + 4, q6_k_codes_avx2<2>(blk, h, sb));
        _mm256_storeu_si256(d + 6, q6_k_codes_avx2<3>(blk, h, sb));
      }
  }
}

// nb Q3_K panel blocks at src expanded to Q6_K's byte blocks (kQ6KBytesBlock each, as
// expand_q6_k_avx2 makes them) of its Q6_K transcoding: d and sc copied, byte c + 28 (= q + 32)
// per value. Low-bit group G of a half gives byte groups 4G .. 4G + 3; their bit 2 comes from
// high-bit group G / 2, bits 4 (G % 2) + c'.
REWIND_AVX2 void expand_q3_k_avx2(const std::byte* src, int64_t nb, std::byte* dst) {
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1), off = _mm256_set1_epi8(28);
  const int64_t sb = quant_panel_block_bytes(DType::Q3_K);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* s = src + b * sb;
    std::byte* o = dst + b * kQ6KBytesBlock;
    std::memcpy(o, s, kQ6KLoOff);  // d, sc
    for (int G = 0; G < 16; ++G)
      for (int h = 0; h < 2; ++h) {
        const __m256i lv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + kQ3KLoOff + 64 * G + 32 * h));
        const __m256i hv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(s + kQ3KHiOff + 64 * (G / 2) + 32 * h));
        const __m256i hs = _mm256_srli_epi16(hv, 4 * (G % 2));
        auto* d = reinterpret_cast<__m256i*>(o + kQ6KLoOff + 64 * 4 * G + 32 * h);
        for (int c = 0; c < 4; ++c) {
          const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(lv, 2 * c), m3);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hs, c), m1);
          _mm256_storeu_si256(d + 2 * c,
                              _mm256_add_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 2)), off));
        }
      }
  }
}

// Activation quantisation, one block of n (a multiple of 32) values: same bits as the scalar
// (the max is exact, x * id one rounding, vcvtps2dq rounds to nearest even as nearbyint does).
REWIND_AVX2 void quantize_block_avx2(const float* x, int n, int8_t* q, float* d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // inf or NaN
    mx = _mm256_max_ps(mx, a);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float amax = _mm_cvtss_f32(m4);
  if (_mm256_movemask_ps(bad) || amax < 1e-30f) {  // the scalar handles the special blocks
    quantize_block_scalar(x, n, q, d);
    return;
  }
  const float idf = 127.0f / amax;
  const __m256 id = _mm256_set1_ps(idf);
  *d = act_scale(amax, idf, n);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j)
      v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), id));
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(p, order));
  }
}

#pragma GCC diagnostic pop

}  // namespace rw::detail
