// kv_attention_bench: decode attention over a long context in each KV cache type, side by side.
// One decode step's attention (every attention layer, every query head, one new token) reads
// the K/V of all positions so far from pages as the forward pass lays them out
// (state/sequence_state.h) and runs attention_rows as model/forward.cpp calls it (per K/V
// head, its query heads together, the heads split over the threads). Its floor is the bytes of
// K/V read over the bandwidth: a BandwidthProbe pass next to each timed step gives the bound
// that step is judged against (the host is shared, so its bandwidth drifts).
//
// The types take turns step by step within each context, so they see the same machine; the
// figures to compare are the ratios (speed-up over F32 and the fractions of the bound).
//
// Usage: kv_attention_bench [--ctx 4096,16384,32768] [--steps 20] [--threads N]
//                           [--layers 6] [--heads 8] [--kv-heads 2] [--head-dim 256]
//                           [--page-tokens 64]  (tokens per KV page: StateShape::page_tokens)
//                           [--types f32,bf16,f16,q8_0] [--isa auto|avx512|avx2|scalar]
//                           [--cpu-time]  (time each step by process CPU time, not wall time:
//                                          with --threads 1, kernel tuning on a shared host)
//                           [--hot]  (each step runs twice and the second is timed, with no
//                                     probe between: the kernel on K/V already in cache, for
//                                     a context that fits; "of bound" is then against the
//                                     bandwidth measured at the start)
//   Defaults: the attention of Qwen3.5-0.8B (6 of its 24 layers; 8 query heads, 2 K/V heads of
//   256 dims: 24.6 kB of F32 K/V a token).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/machine_limits.h"
#include "rewind/kernels/ops.h"
#include "rewind/state/sequence_state.h"

namespace {

using namespace rw;

using bench::now_s;

std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return argv[i + 1];
  return def;
}

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) v.push_back(std::atoll(t.c_str()));
  return v;
}

int64_t elem_bytes(DType t) {
  return t == DType::F32 ? 4 : t == DType::Q8_0 ? 1 : 2;
}

// One decode step's attention for a sequence of n_pos positions (the new token's K/V already
// written at n_pos - 1), as model/forward.cpp runs it.
struct Step {
  const SequenceState* st;
  int64_t nh, nkv, D;
  std::vector<float> q, out;  // [nh * D]
  void run(ThreadPool* pool, IsaCap isa) {
    const StateShape& sh = st->shape();
    const int64_t PT = sh.page_tokens, n = st->n_pos(), grp = nh / nkv;
    const int64_t nb = (n + PT - 1) / PT, qb = sh.q_blocks_per_head();
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    for (int64_t l = 0; l < sh.n_attn_layers; ++l)
      pool->parallel_for(
          nkv, 1,
          [&](int, int64_t hb, int64_t he) {
            std::vector<const void*> kb(static_cast<size_t>(nb)), vb(kb.size());
            std::vector<const uint16_t*> ks(kb.size()), vs(kb.size());
            std::vector<const float*> qr(static_cast<size_t>(grp));
            std::vector<float*> orow(qr.size());
            std::vector<int64_t> n_keys(qr.size(), n);
            std::vector<float> scratch(static_cast<size_t>(grp * n));
            for (int64_t kvh = hb; kvh < he; ++kvh) {
              for (int64_t b = 0; b < nb; ++b) {
                const KvPage& pg = st->page(b);
                kb[b] = pg.k(l) + kvh * D * PT * elem_bytes(sh.kv_types.k);
                vb[b] = pg.v(l) + kvh * D * elem_bytes(sh.kv_types.v);
                ks[b] = pg.k_scales(l) ? pg.k_scales(l) + kvh * qb * PT : nullptr;
                vs[b] = pg.v_scales(l) ? pg.v_scales(l) + kvh * qb : nullptr;
              }
              for (int64_t u = 0; u < grp; ++u) {
                qr[u] = q.data() + (kvh * grp + u) * D;
                orow[u] = out.data() + (kvh * grp + u) * D;
              }
              const KvBlocks K{sh.kv_types.k, kb.data(), ks.data(), 0, 0};
              const KvBlocks Vb{sh.kv_types.v, vb.data(), vs.data(), nkv * D, nkv * qb};
              attention_rows(qr.data(), grp, n_keys.data(), K, Vb, PT, D, scale, orow.data(),
                             scratch.data(), isa);
            }
          },
          /*work=*/int64_t{1} << 40);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const auto ctxs = int_list(arg(argc, argv, "--ctx", "4096,16384,32768"));
  const int steps = std::atoi(arg(argc, argv, "--steps", "20").c_str());
  const int threads = std::atoi(arg(argc, argv, "--threads", "2").c_str());
  const int64_t layers = std::atoll(arg(argc, argv, "--layers", "6").c_str());
  const int64_t nh = std::atoll(arg(argc, argv, "--heads", "8").c_str());
  const int64_t nkv = std::atoll(arg(argc, argv, "--kv-heads", "2").c_str());
  const int64_t D = std::atoll(arg(argc, argv, "--head-dim", "256").c_str());
  const int64_t page_tokens = std::atoll(arg(argc, argv, "--page-tokens", "64").c_str());
  if (page_tokens <= 0 || page_tokens % 32 != 0) {
    std::fprintf(stderr, "kv_attention_bench: --page-tokens must be a positive multiple of 32\n");
    return 1;
  }
  bool hot = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--cpu-time") bench::bench_cpu_time = true;
    if (std::string(argv[i]) == "--hot") hot = true;
  }
  IsaCap isa = IsaCap::Amx;
  if (!parse_isa_cap(arg(argc, argv, "--isa", "auto"), &isa) || !isa_cap_supported(isa)) {
    std::fprintf(stderr, "kv_attention_bench: --isa not available here\n");
    return 1;
  }
  std::vector<DType> types;
  {
    std::stringstream ss(arg(argc, argv, "--types", "f32,bf16,f16,q8_0"));
    for (std::string t; std::getline(ss, t, ',');) {
      DType d;
      if (!parse_kv_type(t, &d)) {
        std::fprintf(stderr, "kv_attention_bench: unknown KV type '%s'\n", t.c_str());
        return 1;
      }
      types.push_back(d);
    }
  }
  ThreadPool pool(std::max(1, threads));
  const MachineLimits lim = measure_machine_limits(&pool, 1.0);
  BandwidthProbe probe(&pool, lim.probe_buffer_bytes);
  std::printf(
      "decode attention: %lld layers, %lld query heads, %lld K/V heads of %lld dims; %d threads, "
      "isa %s; bandwidth %.1f GB/s (probe %.0f MiB next to each step)%s\n",
      static_cast<long long>(layers), static_cast<long long>(nh), static_cast<long long>(nkv),
      static_cast<long long>(D), pool.n_threads(), isa_cap_name(isa), lim.read_bandwidth_gb_s,
      static_cast<double>(probe.bytes()) / (1 << 20), bench::bench_cpu_time ? "; CPU time" : "");
  std::printf("%7s %-5s %9s %10s %9s %9s %8s %10s\n", "context", "type", "KV MB", "ms/step",
              "tok/s", "GB/s", "of bound", "vs f32");
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t ctx : ctxs) {
    // One sequence per type with the same K/V values, each rounded to its type when written.
    std::vector<SequenceState> states;
    for (DType t : types) {
      StateShape sh;
      sh.n_attn_layers = layers;
      sh.kv_dim = nkv * D;
      sh.kv_head_dim = D;
      sh.kv_types = {t, t};
      sh.page_tokens = page_tokens;
      states.emplace_back(sh);
    }
    std::vector<float> k(static_cast<size_t>(nkv * D)), v(k.size());
    for (SequenceState& st : states) st.prepare_append(ctx);
    for (int64_t p = 0; p < ctx; ++p)
      for (int64_t l = 0; l < layers; ++l) {
        for (auto& x : k) x = nd(rng);
        for (auto& x : v) x = nd(rng);
        for (SequenceState& st : states) st.write_kv(l, p, k.data(), v.data());
      }
    for (SequenceState& st : states) st.commit_append(ctx);
    std::vector<Step> step;
    for (SequenceState& st : states) {
      Step s{&st, nh, nkv, D, {}, {}};
      s.q.resize(static_cast<size_t>(nh * D));
      for (auto& x : s.q) x = nd(rng);
      s.out.resize(s.q.size());
      step.push_back(std::move(s));
    }
    // Steps in turn: type 0, its probe, type 1, its probe, ...; the first round warms up.
    std::vector<std::vector<double>> secs(types.size()), frac(types.size());
    for (int r = 0; r <= steps; ++r)
      for (size_t i = 0; i < types.size(); ++i) {
        if (hot) step[i].run(&pool, isa);
        const double t0 = now_s();
        step[i].run(&pool, isa);
        const double s = now_s() - t0;
        const double bw = hot ? lim.read_bandwidth_gb_s : probe.pass();
        if (r == 0) continue;
        const double bytes = states[i].shape().kv_bytes_per_token() * static_cast<double>(ctx);
        secs[i].push_back(s);
        frac[i].push_back(bytes / s / 1e9 / bw);
      }
    double f32_ms = 0;
    for (size_t i = 0; i < types.size(); ++i) {
      std::sort(secs[i].begin(), secs[i].end());
      std::sort(frac[i].begin(), frac[i].end());
      const double s = secs[i][secs[i].size() / 2];
      const double bytes = states[i].shape().kv_bytes_per_token() * static_cast<double>(ctx);
      if (types[i] == DType::F32) f32_ms = s;
      char vs[16] = "-";
      if (f32_ms > 0) std::snprintf(vs, sizeof vs, "%.2fx", f32_ms / s);
      std::printf("%7lld %-5s %9.1f %10.3f %9.1f %9.2f %7.1f%% %10s\n", static_cast<long long>(ctx),
                  kv_type_name(types[i]), bytes / 1e6, 1e3 * s, 1.0 / s, bytes / s / 1e9,
                  100 * frac[i][frac[i].size() / 2], vs);
    }
  }
  return 0;
}
