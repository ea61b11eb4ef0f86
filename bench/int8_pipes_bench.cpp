// int8_pipes_bench: what the int8 prefill tiles' extra vector operations cost next to vpdpbusd on
// this CPU (AVX-512 VNNI), one thread, registers only (no loads, no memory).
//
// A Q8_0 tile of 4 rows x 3 panels keeps 12 int32 accumulators and issues 8 vpdpbusd into each per
// 32-value block (96 per block); then its exact combine turns every sum into fp32 and adds it,
// scaled by the block's weight scale x activation scale, to an fp32 accumulator. Q4_K's tiles
// add a vpmulld per sub-block sum (its 6-bit scales) and vpdpwssd for the mins. Each variant
// below runs the 96 vpdpbusd of a block over 12 independent chains and then one of those
// operation mixes on the 12 sums; the fraction is the dpbusd-only time over the variant's, the
// most a tile with that mix could reach of the int8 dot peak. On Zen 4 the conversion, float
// add and vpxor cost next to nothing (other pipes), while a multiply, an fma, vpmulld or
// vpdpwssd each cost about one vpdpbusd (docs/QUANT.md, "AVX-512 VNNI tiles").
//
// Usage: int8_pipes_bench [--seconds S]   (S per variant, default 0.3)
#include <cstdio>

#include "bench_clock.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// GCC 12's _mm512_reduce_add_* pass an uninitialised operand in its own header (dead: the
// unmasked form), as in src/rewind/kernels/matmul_quant.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

enum class Mix { None, CvtAdd, CvtFma, MulCvtFma, MulMulCvtAdd, Xor, Mulld, Dpwssd };

constexpr int kR = 4, kP = 3, kAcc = kR * kP;

// `blocks` blocks of 96 vpdpbusd, each followed by `mix` on the 12 sums. The operands pass through
// empty asm statements so that GCC keeps every operation in the loop (no hoisting, no folding).
template <Mix mix>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) float run(long blocks) {
  __m512i s[kAcc];
  __m512 acc[kAcc];
#pragma GCC unroll 12
  for (int i = 0; i < kAcc; ++i) {
    s[i] = _mm512_set1_epi32(i);
    acc[i] = _mm512_set1_ps(static_cast<float>(i));
  }
  __m512i w = _mm512_set1_epi8(3), a = _mm512_set1_epi8(5);
  __m512 dw[kP], dx[kR];
  for (int p = 0; p < kP; ++p) dw[p] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(p));
  for (int r = 0; r < kR; ++r) dx[r] = _mm512_set1_ps(0.5f + 0.01f * static_cast<float>(r));
  for (long b = 0; b < blocks; ++b) {
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 12
      for (int i = 0; i < kAcc; ++i) s[i] = _mm512_dpbusd_epi32(s[i], w, a);
      __asm__("" : "+v"(w), "+v"(a));
    }
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) {
      const __m512 scale_in = dw[i % kP];
      if constexpr (mix == Mix::CvtAdd) {
        acc[i] = _mm512_add_ps(_mm512_cvtepi32_ps(s[i]), acc[i]);
      } else if constexpr (mix == Mix::CvtFma) {
        acc[i] = _mm512_fmadd_ps(scale_in, _mm512_cvtepi32_ps(s[i]), acc[i]);
      } else if constexpr (mix == Mix::MulCvtFma) {  // the Q8_0 combine: dw x dx, then the fma
        const __m512 scale = _mm512_mul_ps(scale_in, dx[i / kP]);
        acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(s[i]), acc[i]);
      } else if constexpr (mix == Mix::MulMulCvtAdd) {  // the same with a multiply and an add
        const __m512 scale = _mm512_mul_ps(scale_in, dx[i / kP]);
        acc[i] = _mm512_add_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(s[i])), acc[i]);
      } else if constexpr (mix == Mix::Xor) {
        s[i] = _mm512_xor_si512(s[i], w);
      } else if constexpr (mix == Mix::Mulld) {
        s[i] = _mm512_mullo_epi32(s[i], w);
      } else if constexpr (mix == Mix::Dpwssd) {
        s[i] = _mm512_dpwssd_epi32(s[i], w, a);
      }
    }
    for (int p = 0; p < kP; ++p) __asm__("" : "+v"(dw[p]));
    for (int r = 0; r < kR; ++r) __asm__("" : "+v"(dx[r]));
  }
  float sum = 0.0f;
  for (int i = 0; i < kAcc; ++i)
    sum += _mm512_reduce_add_ps(acc[i]) + static_cast<float>(_mm512_reduce_add_epi32(s[i]));
  return sum;
}

// The best ns per block over repeated runs for `seconds`.
template <Mix mix>
double ns_per_block(double seconds) {
  return rw::bench::best_ns_per_unit(seconds, 200000, [](long n) {
    volatile float sink = run<mix>(n);
    (void)sink;
  });
}

}  // namespace
#endif

int main(int argc, char** argv) {
  double seconds = 0.3;
  if (!rw::bench::parse_seconds_only("int8_pipes_bench", argc, argv, seconds)) return 2;
#if defined(__x86_64__) && defined(__GNUC__)
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
    std::fprintf(stderr, "int8_pipes_bench: this CPU has no AVX-512 VNNI\n");
    return 1;
  }
  const double base = ns_per_block<Mix::None>(seconds);
  std::printf("one thread, per block: 96 vpdpbusd over 12 accumulators, then 12 x the mix\n");
  std::printf("%-44s %8s %8s\n", "mix per accumulator", "ns", "of max");
  auto row = [&](const char* name, double ns) {
    std::printf("%-44s %8.2f %7.1f%%\n", name, ns, 100.0 * base / ns);
  };
  row("none (vpdpbusd only)", base);
  row("xor", ns_per_block<Mix::Xor>(seconds));
  row("cvt + add", ns_per_block<Mix::CvtAdd>(seconds));
  row("cvt + fma", ns_per_block<Mix::CvtFma>(seconds));
  row("mul + cvt + fma (the Q8_0 combine)", ns_per_block<Mix::MulCvtFma>(seconds));
  row("mul + cvt + mul + add", ns_per_block<Mix::MulMulCvtAdd>(seconds));
  row("vpmulld (a K-quant sub-block scale)", ns_per_block<Mix::Mulld>(seconds));
  row("vpdpwssd (a K-quant min pair)", ns_per_block<Mix::Dpwssd>(seconds));
  std::printf("(the vpdpbusd-only rate: %.2f G/s, %.1f int8 GOP/s on one core)\n", 96.0 / base,
              96.0 / base * 128.0);
  return 0;
#else
  (void)seconds;
  std::fprintf(stderr, "int8_pipes_bench: x86-64 with AVX-512 VNNI only\n");
  return 1;
#endif
}
