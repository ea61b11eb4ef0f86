// recurrence_bench: speed of the recurrences on one thread, as a fraction of this machine's
// measured one-thread fp32 FMA peak: the Gated DeltaNet (rw::gdn_steps) or, with --mamba2, the
// Mamba2 head (rw::mamba2_steps), over a prompt's tokens and over one token as a decode step
// runs it.
//
// Per state element and token the recurrence does four fp32 vector operations (the decay
// multiply, the read's fma, the update's fma and the output's fma: 7 flops), so the kernel's
// ceiling on the FMA pipes is 4 operations per element at the rate the FMA peak loop measures
// (half its GFLOP/s, an fma being 2 flops); "of pipe rate" is that fraction. Prefill keeps each
// strip of the state in L1 over all tokens; a decode token reads the state once from memory
// (cold: a different state each call) and updates it from L2.
//
// Mamba2: per state element and token, the decay fma, the input's multiply and the read's fma
// (3 vector operations, 5 flops); its pipe rate counts 3 operations per element. Defaults P 32,
// N 128: the granite-4.0-h-350m head.
//
// Usage: recurrence_bench [--mamba2] [--dk 128] [--dv 128] [--tokens 512] [--seconds S]
//                         [--isa auto|avx512|avx2|scalar]
//   (with --mamba2, --dk is the state size N and --dv the head dim P)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "rewind/kernels/kernel_options.h"
#include "rewind/kernels/machine_limits.h"
#include "rewind/kernels/ops.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The p10 and median of repeated calls of fn over `seconds`.
template <class F>
std::pair<double, double> time_calls(F&& fn, double seconds) {
  std::vector<double> ts;
  const auto start = Clock::now();
  while (ts.size() < 5 || seconds_since(start) < seconds) {
    const auto t0 = Clock::now();
    fn();
    ts.push_back(seconds_since(t0));
  }
  std::sort(ts.begin(), ts.end());
  return {ts[ts.size() / 10], ts[ts.size() / 2]};
}

// One line of figures: ns per token and head (p10, median), GFLOP/s at `flops` per state element
// and token, and the share of the FMA pipes' rate at `ops` vector operations per element.
void report_line(const char* kernel, const char* what, const char* a, int64_t av, const char* b,
                 int64_t bv, int64_t tokens, std::pair<double, double> t, double elems,
                 double flops, double ops, double peak) {
  const double n = static_cast<double>(tokens);
  std::printf(
      "%-6s %-13s %s %lld %s %lld tokens %5lld: %8.1f ns per token and head (p10; median %.1f)"
      "  %6.1f GFLOP/s  %5.1f%% of pipe rate\n",
      kernel, what, a, static_cast<long long>(av), b, static_cast<long long>(bv),
      static_cast<long long>(tokens), t.first / n * 1e9, t.second / n * 1e9,
      flops * elems * n / t.first / 1e9, 100.0 * ops * elems * n / t.first / (peak / 2 * 1e9));
}

// The Mamba2 head: N = state size, P = head dim (x, y [T, P]; B, C [T, N]).
int run_mamba2(int64_t N, int64_t P, int64_t T, double seconds, double peak, rw::IsaCap isa) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> uni(-0.1f, 0.1f);
  std::vector<float> S(static_cast<size_t>(P * N)), x(static_cast<size_t>(T * P)),
      bc(static_cast<size_t>(T * 2 * N)), y(static_cast<size_t>(T * P));
  std::vector<float> dt(static_cast<size_t>(T)), dA(static_cast<size_t>(T));
  for (auto* v : {&x, &bc})
    for (float& e : *v) e = uni(rng);
  for (int64_t t = 0; t < T; ++t) {
    dt[t] = 0.05f + uni(rng) * 0.1f;
    dA[t] = 0.95f + uni(rng) * 0.1f;
  }
  const double elems = static_cast<double>(P) * static_cast<double>(N);
  auto report = [&](const char* what, int64_t tokens, std::pair<double, double> t) {
    report_line("mamba2", what, "P", P, "N", N, tokens, t, elems, 5.0, 3.0, peak);
  };
  const float* B = bc.data();
  const float* C = bc.data() + N;
  report("prefill", T,
         time_calls(
             [&] {
               std::fill(S.begin(), S.end(), 0.0f);
               rw::mamba2_steps(S.data(), x.data(), P, B, C, 2 * N, dt.data(), dA.data(), 1.0f,
                                y.data(), P, T, P, N, isa);
             },
             seconds));
  const int64_t n_cold = std::max<int64_t>(1, (int64_t{64} << 20) / (P * N * 4));
  std::vector<float> states(static_cast<size_t>(n_cold * P * N), 0.01f);
  for (const bool cold : {false, true}) {
    int64_t t = 0, h = 0;
    report(cold ? "decode, cold" : "decode, hot", 1,
           time_calls(
               [&] {
                 float* st = cold ? states.data() + h * P * N : S.data();
                 rw::mamba2_steps(st, x.data() + t * P, P, B + t * 2 * N, C + t * 2 * N, 2 * N,
                                  dt.data() + t, dA.data() + t, 1.0f, y.data(), P, 1, P, N, isa);
                 t = (t + 1) % T;
                 h = (h + 1) % n_cold;
               },
               seconds));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t dk = 128, dv = 128, T = 512;
  double seconds = 1.0;
  bool mamba2 = false;
  rw::IsaCap isa_cap = rw::IsaCap::Amx;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mamba2") {
      mamba2 = true;
      if (dv == 128) dv = 32;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "recurrence_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--dk") {
      dk = std::atoll(v);
    } else if (a == "--dv") {
      dv = std::atoll(v);
    } else if (a == "--tokens") {
      T = std::atoll(v);
    } else if (a == "--seconds") {
      seconds = std::atof(v);
    } else if (a == "--isa") {
      if (!rw::parse_isa_cap(v, &isa_cap) || !rw::isa_cap_supported(isa_cap)) {
        std::fprintf(stderr, "recurrence_bench: --isa %s is not available here\n", v);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: recurrence_bench [--mamba2] [--dk 128] [--dv 128] [--tokens 512] "
                   "[--seconds S] [--isa I]\n");
      return 2;
    }
  }
  if (dk <= 0 || dv <= 0 || T <= 0 || seconds <= 0) {
    std::fprintf(stderr, "recurrence_bench: --dk, --dv, --tokens and --seconds must be positive\n");
    return 2;
  }
  std::string isa;
  const double peak = rw::measure_fma_peak_gflop_s(nullptr, 0.25, &isa);
  std::printf("machine: 1 thread, fp32 FMA peak %.1f GFLOP/s (%s)\n", peak, isa.c_str());

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-0.1f, 0.1f);
  std::vector<float> S(static_cast<size_t>(dk * dv)), q(static_cast<size_t>(T * dk)),
      k(static_cast<size_t>(T * dk)), v(static_cast<size_t>(T * dv)),
      o(static_cast<size_t>(T * dv));
  std::vector<float> alpha(static_cast<size_t>(T)), beta(static_cast<size_t>(T));
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = uni(rng);
  for (float& a : alpha) a = 0.9f + uni(rng);
  for (float& b : beta) b = 0.5f + uni(rng);

  const double elems = static_cast<double>(dk) * static_cast<double>(dv);
  if (mamba2) return run_mamba2(dk, dv, T, seconds, peak, isa_cap);
  auto report = [&](const char* what, int64_t tokens, std::pair<double, double> t) {
    report_line("gdn", what, "dk", dk, "dv", dv, tokens, t, elems, 7.0, 4.0, peak);
  };
  // The state restarts from zero every call, so every call does the same work.
  report("prefill", T,
         time_calls(
             [&] {
               std::fill(S.begin(), S.end(), 0.0f);
               rw::gdn_steps(S.data(), q.data(), k.data(), dk, v.data(), dv, alpha.data(),
                             beta.data(), o.data(), dv, T, dk, dv, isa_cap);
             },
             seconds));
  // Decode as the model runs it (gdn_steps, one token): hot (one state, in cache) and cold (a
  // state per call from a rotation over 64 MiB, streamed from memory as in a decode step).
  const int64_t n_cold = std::max<int64_t>(1, (int64_t{64} << 20) / (dk * dv * 4));
  std::vector<float> states(static_cast<size_t>(n_cold * dk * dv), 0.01f);
  for (const bool cold : {false, true}) {
    int64_t t = 0, h = 0;
    report(cold ? "decode, cold" : "decode, hot", 1,
           time_calls(
               [&] {
                 float* st = cold ? states.data() + h * dk * dv : S.data();
                 rw::gdn_steps(st, q.data() + t * dk, k.data() + t * dk, dk, v.data() + t * dv, dv,
                               alpha.data() + t, beta.data() + t, o.data(), dv, 1, dk, dv, isa_cap);
                 t = (t + 1) % T;
                 h = (h + 1) % n_cold;
               },
               seconds));
  }
  return 0;
}
