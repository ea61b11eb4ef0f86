#include "rewind/kernels/machine_limits.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "rewind/base/check.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/isa_cap.h"
#include "rewind/kernels/matmul_quant.h"

namespace rw {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn(thread_index) once on every thread of the pool (or once inline without a pool).
void run_on_all(ThreadPool* pool, const std::function<void(int)>& fn) {
  if (!pool) {
    fn(0);
    return;
  }
  pool->parallel_for(pool->n_threads(), 1, [&](int t, int64_t, int64_t) { fn(t); });
}

// ---- read bandwidth ------------------------------------------------------------------------
// Sum of p[0, n) (n a multiple of 64 * S floats, p 64-byte aligned) read as S concurrent streams
// (S equal parts, one 256-byte block of each per step; several streams per thread keep more
// misses in flight than one), kPrefetch: software prefetch distance in floats (0: hardware
// prefetchers only), into L1 (prefetcht0) or, kL2, into L2 (prefetcht1, as the AVX-512 decode
// kernels do: they streamed up to 5% faster than any variant without it, and so passed 100% of
// the bound). Every variant runs; the best counts.
template <int S, int kPrefetch, bool kL2 = false>
__attribute__((target("avx512f"))) float stream_sum_avx512(const float* p, size_t n) {
  const size_t len = n / S;
  __m512 acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_ps();
  for (size_t i = 0; i < len; i += 64) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if constexpr (kPrefetch > 0) {
        for (int l = 0; l < 4; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetch + 16 * l),
                       kL2 ? _MM_HINT_T1 : _MM_HINT_T0);
      }
      const __m512 a = _mm512_add_ps(_mm512_load_ps(q), _mm512_load_ps(q + 16));
      const __m512 b = _mm512_add_ps(_mm512_load_ps(q + 32), _mm512_load_ps(q + 48));
      acc[s] = _mm512_add_ps(acc[s], _mm512_add_ps(a, b));
    }
  }
  for (int s = 1; s < S; ++s) acc[0] = _mm512_add_ps(acc[0], acc[s]);
  alignas(64) float t[16];
  _mm512_store_ps(t, acc[0]);
  float sum = 0;
  for (float v : t) sum += v;
  return sum;
}

template <int S, int kPrefetch>
__attribute__((target("avx2"))) float stream_sum_avx2(const float* p, size_t n) {
  const size_t len = n / S;
  __m256 acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm256_setzero_ps();
  for (size_t i = 0; i < len; i += 64) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if constexpr (kPrefetch > 0) {
        for (int l = 0; l < 4; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetch + 16 * l), _MM_HINT_T0);
      }
      __m256 a = _mm256_add_ps(_mm256_load_ps(q), _mm256_load_ps(q + 8));
      __m256 b = _mm256_add_ps(_mm256_load_ps(q + 16), _mm256_load_ps(q + 24));
      a = _mm256_add_ps(a, _mm256_add_ps(_mm256_load_ps(q + 32), _mm256_load_ps(q + 40)));
      b = _mm256_add_ps(b, _mm256_add_ps(_mm256_load_ps(q + 48), _mm256_load_ps(q + 56)));
      acc[s] = _mm256_add_ps(acc[s], _mm256_add_ps(a, b));
    }
  }
  for (int s = 1; s < S; ++s) acc[0] = _mm256_add_ps(acc[0], acc[s]);
  alignas(32) float t[8];
  _mm256_store_ps(t, acc[0]);
  float sum = 0;
  for (float v : t) sum += v;
  return sum;
}

float stream_sum_scalar(const float* p, size_t n) {
  float s[8] = {};
  for (size_t i = 0; i < n; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += p[i + l];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

using StreamFn = float (*)(const float*, size_t);

std::vector<StreamFn> stream_variants() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return {&stream_sum_avx512<1, 0>,        &stream_sum_avx512<1, 256>,
            &stream_sum_avx512<4, 0>,        &stream_sum_avx512<6, 0>,
            &stream_sum_avx512<8, 0>,        &stream_sum_avx512<1, 512, true>,
            &stream_sum_avx512<4, 512, true>};
  if (__builtin_cpu_supports("avx2"))
    return {&stream_sum_avx2<1, 0>, &stream_sum_avx2<1, 256>, &stream_sum_avx2<4, 0>,
            &stream_sum_avx2<6, 0>, &stream_sum_avx2<8, 0>};
  return {&stream_sum_scalar};
}

// ---- FMA peak ------------------------------------------------------------------------------
// kChains independent FMA chains on registers (enough to cover latency x ports: 4 x 2 on
// current Intel/AMD cores). The constants keep the values normal (fixpoint b / (1 - a)).
constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.01f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float t[16];
  _mm512_store_ps(t, s);
  float sum = 0;
  for (float v : t) sum += v;
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(0.01f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

float fma_loop_scalar(int64_t iters) {
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = 0.01f * static_cast<float>(i);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = std::fma(acc[i], 0.999f, 0.001f);
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += acc[i];
  return s;
}

// ---- int8 dot-product peak -------------------------------------------------------------------
// kChains independent vpdpbusd chains: 64 u8 x s8 multiply-adds (128 ops) per instruction.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) float dpbusd_loop_avx512(int64_t iters) {
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_epi32(s, acc[i]);
  // (Stored and summed here: GCC 12's _mm512_reduce_add_epi32 warns inside its own header.)
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  int64_t total = 0;  // (the chains wrap around; only the loop's work matters)
  for (int32_t v : lanes) total += v;
  return static_cast<float>(total);
}

// The int32 lanes of n chains' accumulators summed after a peak loop, so that its work is used
// (the chains wrap around; only the work matters).
__attribute__((target("avx2"))) float sum_lanes_avx2(const __m256i* c, int n) {
  __m256i sum = c[0];
  for (int i = 1; i < n; ++i) sum = _mm256_add_epi32(sum, c[i]);
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  int64_t total = 0;
  for (int32_t v : lanes) total += v;
  return static_cast<float>(total);
}

// The same on ymm with AVX-VNNI (VEX-encoded): 32 multiply-adds (64 ops) per instruction. The
// loop is in asm, so that no chain is stored per iteration: 12 chains (latency 5 x 2 ports on
// Golden Cove, with margin) and the two operands (asm takes at most 30 operands).
constexpr int kDpbusdYmmChains = 12;  // the asm below names each of them
__attribute__((target("avx2,avxvnni"))) float dpbusd_loop_avxvnni(int64_t iters) {
  __m256i c[kDpbusdYmmChains];
  for (int i = 0; i < kDpbusdYmmChains; ++i) c[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-5);
  if (iters > 0) {
#define REWIND_DP(I) "%{vex%} vpdpbusd %[b], %[a], %[c" #I "]\n\t"
    __asm__ volatile("1:\n\t" REWIND_DP(0) REWIND_DP(1) REWIND_DP(2) REWIND_DP(3) REWIND_DP(4)
                         REWIND_DP(5) REWIND_DP(6) REWIND_DP(7) REWIND_DP(8) REWIND_DP(9)
                             REWIND_DP(10) REWIND_DP(11) "dec %[n]\n\t"
                                                         "jnz 1b\n\t"
                     : [c0] "+x"(c[0]), [c1] "+x"(c[1]), [c2] "+x"(c[2]), [c3] "+x"(c[3]),
                       [c4] "+x"(c[4]), [c5] "+x"(c[5]), [c6] "+x"(c[6]), [c7] "+x"(c[7]),
                       [c8] "+x"(c[8]), [c9] "+x"(c[9]), [c10] "+x"(c[10]), [c11] "+x"(c[11]),
                       [n] "+r"(iters)
                     : [a] "x"(a), [b] "x"(b)
                     : "cc");
#undef REWIND_DP
  }
  return sum_lanes_avx2(c, kDpbusdYmmChains);
}

// Without VNNI (AVX2): the exact int8 dot product is vpmaddubsw (u8 x s8 products summed in
// pairs to int16) then vpmaddwd by ones (pairs of pairs to int32) and vpaddd into the
// accumulator, the sequence the AVX2 kernels use: 32 multiply-adds (64 ops) per 256-bit step.
// Each chain's u8 operand is its own accumulator, so no product is loop-invariant and the
// chains stay independent of each other. Written in asm, the loop too: otherwise GCC 12 stores
// the accumulators on the stack every iteration (a store per step, which a peak must not
// include). 10 chains (a step is 7 cycles of latency) with 4 temporaries and the two constants
// fill the 16 registers.
constexpr int kMaddubsChains = 10;  // the asm below names each of them
__attribute__((target("avx2"))) float maddubs_loop_avx2(int64_t iters) {
  __m256i c[kMaddubsChains];
  for (int i = 0; i < kMaddubsChains; ++i) c[i] = _mm256_set1_epi32(i);
  const __m256i b = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
  __m256i t0, t1, t2, t3;
  if (iters > 0) {
    __asm__ volatile(
        "1:\n\t"
        "vpmaddubsw %[b], %[c0], %[t0]\n\t"
        "vpmaddwd %[o], %[t0], %[t0]\n\t"
        "vpaddd %[t0], %[c0], %[c0]\n\t"
        "vpmaddubsw %[b], %[c1], %[t1]\n\t"
        "vpmaddwd %[o], %[t1], %[t1]\n\t"
        "vpaddd %[t1], %[c1], %[c1]\n\t"
        "vpmaddubsw %[b], %[c2], %[t2]\n\t"
        "vpmaddwd %[o], %[t2], %[t2]\n\t"
        "vpaddd %[t2], %[c2], %[c2]\n\t"
        "vpmaddubsw %[b], %[c3], %[t3]\n\t"
        "vpmaddwd %[o], %[t3], %[t3]\n\t"
        "vpaddd %[t3], %[c3], %[c3]\n\t"
        "vpmaddubsw %[b], %[c4], %[t0]\n\t"
        "vpmaddwd %[o], %[t0], %[t0]\n\t"
        "vpaddd %[t0], %[c4], %[c4]\n\t"
        "vpmaddubsw %[b], %[c5], %[t1]\n\t"
        "vpmaddwd %[o], %[t1], %[t1]\n\t"
        "vpaddd %[t1], %[c5], %[c5]\n\t"
        "vpmaddubsw %[b], %[c6], %[t2]\n\t"
        "vpmaddwd %[o], %[t2], %[t2]\n\t"
        "vpaddd %[t2], %[c6], %[c6]\n\t"
        "vpmaddubsw %[b], %[c7], %[t3]\n\t"
        "vpmaddwd %[o], %[t3], %[t3]\n\t"
        "vpaddd %[t3], %[c7], %[c7]\n\t"
        "vpmaddubsw %[b], %[c8], %[t0]\n\t"
        "vpmaddwd %[o], %[t0], %[t0]\n\t"
        "vpaddd %[t0], %[c8], %[c8]\n\t"
        "vpmaddubsw %[b], %[c9], %[t1]\n\t"
        "vpmaddwd %[o], %[t1], %[t1]\n\t"
        "vpaddd %[t1], %[c9], %[c9]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        : [c0] "+x"(c[0]), [c1] "+x"(c[1]), [c2] "+x"(c[2]), [c3] "+x"(c[3]), [c4] "+x"(c[4]),
          [c5] "+x"(c[5]), [c6] "+x"(c[6]), [c7] "+x"(c[7]), [c8] "+x"(c[8]), [c9] "+x"(c[9]),
          [t0] "=&x"(t0), [t1] "=&x"(t1), [t2] "=&x"(t2), [t3] "=&x"(t3), [n] "+r"(iters)
        : [b] "x"(b), [o] "x"(ones)
        : "cc");
  }
  return sum_lanes_avx2(c, kMaddubsChains);
}

// ---- AMX int8 peak ---------------------------------------------------------------------------
// Four independent TDPBSSD accumulators, full 16 x 64-byte tiles: 16 x 16 x 64 multiply-adds
// (32768 ops) per instruction. Each thread loads its own tile configuration.
__attribute__((target("amx-tile,amx-int8"))) float tdpbssd_loop(int64_t iters) {
  detail::AmxTileConfig c;
  for (int t = 0; t < 6; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  // Not the kernels' configuration: they reload theirs afterwards.
  detail::amx_load_config(c, 0);
  alignas(64) int8_t a[16 * 64], b[16 * 64];
  alignas(64) int32_t out[16 * 16];
  for (int i = 0; i < 16 * 64; ++i) {
    a[i] = static_cast<int8_t>(i);
    b[i] = static_cast<int8_t>(-i);
  }
  _tile_loadd(4, a, 64);
  _tile_loadd(5, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbssd(0, 4, 5);
    _tile_dpbssd(1, 4, 5);
    _tile_dpbssd(2, 4, 5);
    _tile_dpbssd(3, 4, 5);
  }
  _tile_stored(0, out, 64);
  return static_cast<float>(out[0]);
}

volatile float g_sink;  // keeps the measured loops from being optimised away

// Best rate of fn(iters) on every thread of pool within seconds_budget, in 1e9 ops/s, where
// one call does ops_per_iter * iters ops.
double measure_loop_peak(ThreadPool* pool, double seconds_budget, float (*fn)(int64_t),
                         double ops_per_iter) {
  const int n_threads = pool ? pool->n_threads() : 1;
  // Calibrate the iteration count so one run takes about a tenth of the budget.
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    g_sink = fn(iters);
    const double dt = seconds_since(t0);
    if (dt > 0.01 || iters > (int64_t{1} << 40)) {
      iters = std::max<int64_t>(iters, static_cast<int64_t>(iters * (seconds_budget / 10) / dt));
      break;
    }
    iters *= 4;
  }
  const auto t_start = Clock::now();
  double best = 0;
  std::vector<float> sums(n_threads);
  for (int run = 0;; ++run) {
    const auto t0 = Clock::now();
    run_on_all(pool, [&](int t) { sums[t] = fn(iters); });
    const double dt = seconds_since(t0);
    g_sink = sums[0];
    best = std::max(best, ops_per_iter * static_cast<double>(iters) * n_threads / dt / 1e9);
    if (run >= 1 && seconds_since(t_start) >= seconds_budget) break;
  }
  return best;
}

}  // namespace

BandwidthProbe::BandwidthProbe(ThreadPool* pool, size_t bytes)
    : pool_(pool), n_threads_(pool ? pool->n_threads() : 1), variants_(stream_variants()) {
  // Every thread gets a contiguous chunk, a multiple of 12288 floats (48 KiB: divisible into
  // 64-float blocks for every stream count used); the prefetch variants may touch up to 2.25
  // KiB past a chunk, so the buffer has some slack.
  chunk_ = std::max<size_t>(bytes / 4 / n_threads_ / 12288, 1) * 12288;
  n_ = chunk_ * n_threads_;
  const size_t alloc_bytes = (n_ * 4 + 8192 + 4095) / 4096 * 4096;
  buf_ = static_cast<float*>(std::aligned_alloc(4096, alloc_bytes));
  if (!buf_) throw std::bad_alloc();
  sums_.resize(n_threads_);
  // First touch from the thread that will read the chunk.
  run_on_all(pool_, [&](int t) {
    float* p = buf_ + chunk_ * t;
    const size_t len = (t == n_threads_ - 1) ? (alloc_bytes / 4 - chunk_ * t) : chunk_;
    for (size_t i = 0; i < len; ++i) p[i] = 1.0f;
  });
}

BandwidthProbe::~BandwidthProbe() {
  std::free(buf_);
}

double BandwidthProbe::pass(int variant) {
  REWIND_CHECK(variant < n_variants());
  const StreamFn fn = variants_[variant >= 0 ? variant : next_];
  if (variant < 0) next_ = (next_ + 1) % n_variants();
  const auto t0 = Clock::now();
  run_on_all(pool_, [&](int t) { sums_[t] = fn(buf_ + chunk_ * t, chunk_); });
  const double dt = seconds_since(t0);
  g_sink = sums_[0];
  return static_cast<double>(n_) * 4 / dt / 1e9;
}

double BandwidthProbe::pass_stepped(size_t step_bytes, int variant, size_t* used) {
  REWIND_CHECK(variant >= 0 && variant < n_variants());
  const StreamFn fn = variants_[variant];
  // Parts a multiple of 12288 floats, as pass()'s chunks (every stream count divides them).
  const size_t part =
      std::min(chunk_, std::max<size_t>(step_bytes / 4 / n_threads_ / 12288, 1) * 12288);
  const size_t step = part * n_threads_, n_steps = n_ / step;
  if (used) *used = step * sizeof(float);
  const auto t0 = Clock::now();
  for (size_t s = 0; s < n_steps; ++s) {
    const float* base = buf_ + s * step;
    auto read = [&](int t, int64_t, int64_t) { sums_[t] += fn(base + part * t, part); };
    if (pool_)
      pool_->parallel_for(n_threads_, 1, read, /*work=*/int64_t{1} << 40);
    else
      read(0, 0, 1);
  }
  const double dt = seconds_since(t0);
  g_sink = sums_[0];
  return static_cast<double>(n_steps * step) * 4 / dt / 1e9;
}

double measure_read_bandwidth_gb_s(ThreadPool* pool, size_t bytes, double seconds_budget,
                                   int* best_variant) {
  const auto t_start = Clock::now();
  BandwidthProbe probe(pool, bytes);
  double best = 0;
  const int min_passes = 2 * probe.n_variants();
  for (int pass = 0;; ++pass) {
    const int v = pass % probe.n_variants();
    const double gb_s = probe.pass(v);
    if (gb_s > best) {
      best = gb_s;
      if (best_variant) *best_variant = v;
    }
    if (pass + 1 >= min_passes && seconds_since(t_start) >= seconds_budget) break;
    if (pass >= 64) break;
  }
  return best;
}

double measure_fma_peak_gflop_s(ThreadPool* pool, double seconds_budget, std::string* isa) {
  __builtin_cpu_init();
  float (*fn)(int64_t) = &fma_loop_scalar;
  int lanes = 1;
  std::string name = "scalar";
  if (__builtin_cpu_supports("avx512f")) {
    fn = &fma_loop_avx512;
    lanes = 16;
    name = "avx512";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    fn = &fma_loop_avx2;
    lanes = 8;
    name = "avx2";
  }
  if (isa) *isa = name;
  return measure_loop_peak(pool, seconds_budget, fn, 2.0 * lanes * kChains);
}

double measure_int8_dot_peak_gop_s(ThreadPool* pool, double seconds_budget, std::string* isa,
                                   IsaCap cap) {
  __builtin_cpu_init();
  const std::string path = detail::int8_dot_isa(cap);
  if (path == "avx512vnni") {
    if (isa) *isa = path;
    return measure_loop_peak(pool, seconds_budget, &dpbusd_loop_avx512, 2.0 * 64 * kChains);
  }
  if (path == "avxvnni") {
    if (isa) *isa = path;
    return measure_loop_peak(pool, seconds_budget, &dpbusd_loop_avxvnni,
                             2.0 * 32 * kDpbusdYmmChains);
  }
  if (__builtin_cpu_supports("avx2")) {
    if (isa) *isa = "avx2";
    return measure_loop_peak(pool, seconds_budget, &maddubs_loop_avx2, 2.0 * 32 * kMaddubsChains);
  }
  if (isa) *isa = "none";
  return 0;
}

double measure_amx_int8_peak_gop_s(ThreadPool* pool, double seconds_budget) {
  if (!detail::amx_int8_available()) return 0;
  return measure_loop_peak(pool, seconds_budget, &tdpbssd_loop, 4.0 * 2 * 16 * 16 * 64);
}

MachineLimits measure_machine_limits(ThreadPool* pool, double seconds_budget, IsaCap cap) {
  MachineLimits lim;
  lim.n_threads = pool ? pool->n_threads() : 1;
  // Buffer: max(1 GiB, 2 x L3), but at most a quarter of physical memory.
  size_t bytes = size_t{1} << 30;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) bytes = std::max(bytes, 2 * static_cast<size_t>(l3));
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) bytes = std::min(bytes, static_cast<size_t>(pages) * page / 4);
  lim.bandwidth_buffer_bytes = bytes;
  lim.probe_buffer_bytes =
      std::min(bytes, std::max(size_t{256} << 20, 2 * static_cast<size_t>(std::max(l3, 0L))));
  lim.read_bandwidth_gb_s =
      measure_read_bandwidth_gb_s(pool, bytes, seconds_budget * 0.6, &lim.bandwidth_variant);
  lim.fma_peak_gflop_s = measure_fma_peak_gflop_s(pool, seconds_budget * 0.25, &lim.isa);
  lim.int8_peak_gop_s = measure_int8_dot_peak_gop_s(pool, seconds_budget * 0.1, &lim.int8_isa, cap);
  lim.amx_int8_peak_gop_s = measure_amx_int8_peak_gop_s(pool, seconds_budget * 0.05);
  return lim;
}

}  // namespace rw
