// matmul_bench: speed of rw::matmul on the Qwen3.5-0.8B projection shapes, as fractions of this
// machine's measured limits (kernels/machine_limits.h): decode (M=1) against the read bandwidth
// (bytes of packed weights / time), prefill (M=512) against the fp32 FMA peak (2*M*N*K / time),
// or the int8 dot-product peak for quantised weights multiplied by the int8 dot.
//
// M=1 "cold" rotates over enough packed copies of the weights (>= 2 x L3, at least 1 GiB in all)
// that every call streams them from memory, as a real decode step does (all layers' weights are
// far larger than L3); "hot" repeats one copy (served from L2/L3 where it fits). --cold does
// the same for every M: a model's prefill also reads each matrix from memory, once per chunk.
//
// Usage: matmul_bench [--threads N] [--m 1,512]
//                     [--dtype f32,bf16,q8_0,q4_k,q5_k,q6_k,q4_0,iq4_nl,q3_k,iq4_xs,q2_k,
//                              q4_1,q5_1,q5_0]
//                     [--shape NAME|KxN] [--seconds S]   (KxN: any other shape, e.g. one
//                                                       that fits L2: the kernel from cache)
//                     [--limits GBS,GFLOPS]   (skip measuring the machine; use these limits)
//                     [--limits-only]  (measure and print the machine limits, then exit)
//                     [--step-limits 256,1024,...]  (then, for each size in KiB, the read
//                                    bandwidth of the probe's buffer read in steps of about that
//                                    size (48 KiB a thread at least), each split over the threads
//                                    and joined, as a decode step's dependent matrices are,
//                                    against whole-buffer passes alternating with them; prints
//                                    medians, then exits)
//                     [--isa amx|avx512|avxvnni|avx2|scalar]  (force a SIMD path)
//                     [--quant-dot int8|f32]  (how quantised weights are multiplied)
//                     [--cold]  (cold copies for every M, not only M <= 16)
//                     [--cpu-time]  (time by process CPU time, not wall time: with --threads 1,
//                                    tuning on a machine shared with other jobs)
//                     [--decode-panels 4,2]  (M <= 2: the int8 decode tiles over each of these
//                                    panel-stream counts, 0 = each type's default, in
//                                    alternating passes over the cold copies (A B B A ...), so
//                                    that a shared host's drifting bandwidth hits each alike;
//                                    prints each count's median GB/s and its median time ratio
//                                    to the first count's paired pass)
//                     [--decode-split guided,auto]  (M <= 2: the threads' split of the output
//                                    columns, guided chunks, static shares or the default rule,
//                                    compared in alternating passes like --decode-panels)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_clock.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/machine_limits.h"
#include "rewind/kernels/matmul.h"
#include "rewind/tensor/quant.h"

namespace {

struct Shape {
  const char* name;
  int64_t k, n;
};

// Qwen3.5-0.8B: hidden 1024, intermediate 3584, vocab 248320.
const Shape kShapes[] = {
    {"in_proj", 1024, 6144}, {"gate|up", 1024, 3584},   {"down", 3584, 1024},
    {"o_proj", 2048, 1024},  {"lm_head", 1024, 248320},
};

using rw::bench::now_s;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

// The store of a --dtype name (exits with usage error 2 for an unknown one).
rw::DType dtype_named(const std::string& dt) {
  if (dt == "f32") return rw::DType::F32;
  if (dt == "bf16") return rw::DType::BF16;
  if (const rw::QuantTraits* q = rw::quant_traits_by_arg(dt)) return q->type;
  std::fprintf(stderr, "matmul_bench: unknown --dtype %s\n", dt.c_str());
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --step-limits: per step size, the probe's buffer read in joined steps against whole-buffer
// passes, the two alternating (A B B A ...) so that a drifting host hits both alike.
void print_step_limits(rw::ThreadPool* pool, const rw::MachineLimits& lim,
                       const std::vector<int64_t>& step_kib) {
  rw::BandwidthProbe probe(pool, lim.probe_buffer_bytes);
  const int v = std::max(lim.bandwidth_variant, 0);
  constexpr int kRounds = 6;
  std::printf("buffer %.0f MiB, stream variant %d, %d rounds\n",
              static_cast<double>(probe.bytes()) / (1 << 20), v, kRounds);
  std::printf("%10s %12s %12s %14s\n", "step KiB", "whole GB/s", "stepped GB/s", "stepped/whole");
  for (int64_t kib : step_kib) {
    std::vector<double> whole, stepped, ratio;
    size_t used = 0;
    for (int r = 0; r < kRounds; ++r) {
      double w, s;
      if (r % 2 == 0) {
        w = probe.pass(v);
        s = probe.pass_stepped(static_cast<size_t>(kib) << 10, v, &used);
      } else {
        s = probe.pass_stepped(static_cast<size_t>(kib) << 10, v, &used);
        w = probe.pass(v);
      }
      whole.push_back(w);
      stepped.push_back(s);
      ratio.push_back(s / w);
    }
    std::printf("%10zu %12.1f %12.1f %9.1f%%\n", used >> 10, median(whole), median(stepped),
                100 * median(ratio));
  }
}

// --decode-panels / --decode-split: one pass (every cold copy once) per step, the settings
// (set(i) selects the i-th) taking turns in the order A B .. B A (reversed every other round),
// each pass timed; per setting the median pass, and the median over rounds of its pass time
// against the first setting's in the same round.
void compare_settings(const char* what, const std::vector<std::string>& labels,
                      const std::function<void(size_t)>& set, double seconds,
                      const std::function<void()>& pass, double pass_bytes, double bw_gb_s,
                      const Shape& s, const std::string& dt, int64_t m) {
  const size_t nc = labels.size();
  std::vector<std::vector<double>> times(nc);
  const double t_end = now_s() + seconds * static_cast<double>(nc);
  for (int round = 0; round < 4 || (now_s() < t_end && round < 100000); ++round) {
    for (size_t j = 0; j < nc; ++j) {
      const size_t i = round % 2 ? nc - 1 - j : j;
      set(i);
      const double t0 = now_s();
      pass();
      times[i].push_back(now_s() - t0);
    }
  }
  std::printf("%-8s %6lld %7lld %5s %4lld  %s (%zu passes each):", s.name,
              static_cast<long long>(s.k), static_cast<long long>(s.n), dt.c_str(),
              static_cast<long long>(m), what, times[0].size());
  for (size_t i = 0; i < nc; ++i) {
    const double gbs = pass_bytes / median(times[i]) / 1e9;
    std::printf("  %s: %.1f GB/s (%.1f%%BW", labels[i].c_str(), gbs, 100.0 * gbs / bw_gb_s);
    if (i > 0) {
      std::vector<double> ratio;
      for (size_t r = 0; r < times[i].size(); ++r) ratio.push_back(times[0][r] / times[i][r]);
      std::printf(", x%.3f of %s", median(ratio), labels[0].c_str());
    }
    std::printf(")");
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int64_t> ms = {1, 512};
  std::vector<std::string> dtypes = {"f32", "bf16"};
  std::string only_shape;
  double seconds = 0.5;  // per measurement
  double given_bw = 0, given_peak = 0;
  bool limits_only = false, cold_all = false;
  std::vector<int64_t> step_kib;
  rw::KernelOptions kopt;                      // --isa, --quant-dot
  std::vector<int64_t> decode_panels;          // --decode-panels: counts to compare (empty: off)
  std::vector<rw::DecodeSplit> decode_splits;  // --decode-split: splits to compare (empty: off)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "matmul_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") {
      n_threads = std::atoi(next().c_str());
    } else if (a == "--m") {
      ms = parse_list(next());
    } else if (a == "--dtype") {
      dtypes.clear();
      std::stringstream ss(next());
      std::string d;
      while (std::getline(ss, d, ',')) {
        dtype_named(d);  // an unknown name is an error here, before measuring
        dtypes.push_back(d);
      }
    } else if (a == "--shape") {
      only_shape = next();
    } else if (a == "--seconds") {
      seconds = std::atof(next().c_str());
    } else if (a == "--limits-only") {
      limits_only = true;
    } else if (a == "--step-limits") {
      step_kib = parse_list(next());
      for (int64_t k : step_kib)
        if (k < 1) {
          std::fprintf(stderr, "matmul_bench: --step-limits: sizes are KiB, at least 1\n");
          return 2;
        }
    } else if (a == "--cold") {
      cold_all = true;
    } else if (a == "--cpu-time") {
      rw::bench::bench_cpu_time = true;
    } else if (a == "--decode-panels") {
      decode_panels = parse_list(next());
      for (int64_t p : decode_panels)
        if (p < 0 || p > 4) {
          std::fprintf(stderr, "matmul_bench: --decode-panels: counts are 0 (default) to 4\n");
          return 2;
        }
      if (decode_panels.size() < 2) {
        std::fprintf(stderr, "matmul_bench: --decode-panels needs two counts or more\n");
        return 2;
      }
    } else if (a == "--decode-split") {
      std::stringstream ss(next());
      std::string name;
      while (std::getline(ss, name, ',')) {
        rw::DecodeSplit split;
        if (!rw::parse_decode_split(name, &split)) {
          std::fprintf(stderr, "matmul_bench: --decode-split: auto, guided or static\n");
          return 2;
        }
        decode_splits.push_back(split);
      }
      if (decode_splits.size() < 2) {
        std::fprintf(stderr, "matmul_bench: --decode-split needs two splits or more\n");
        return 2;
      }
    } else if (a == "--isa") {
      const std::string v = next();
      if (!rw::parse_isa_cap(v, &kopt.isa) || !rw::isa_cap_supported(kopt.isa) ||
          (v == "amx" && !rw::matmul_amx_enabled(rw::IsaCap::Amx))) {
        std::fprintf(stderr, "matmul_bench: --isa %s is not available here\n", v.c_str());
        return 2;
      }
    } else if (a == "--quant-dot") {
      const std::string v = next();
      kopt.quant_dot = v == "f32" ? rw::QuantDot::F32 : rw::QuantDot::Int8;
    } else if (a == "--limits") {
      const std::string v = next();
      given_bw = std::atof(v.c_str());
      given_peak = v.find(',') == std::string::npos ? 0 : std::atof(v.c_str() + v.find(',') + 1);
    } else {
      std::fprintf(
          stderr,
          "usage: matmul_bench [--threads N] [--m 1,512] [--dtype "
          "f32,bf16,q8_0,q4_k,q5_k,q6_k,q4_0,iq4_nl,q3_k,iq4_xs,q2_k,q4_1,q5_1,q5_0] "
          "[--shape NAME|KxN] [--seconds S] [--limits GBS,GFLOPS] [--limits-only] [--cpu-time]\n"
          "                    [--step-limits 256,1024,...]\n"
          "                    [--cold] [--isa amx|avx512|avxvnni|avx2|scalar] [--quant-dot "
          "int8|f32]\n"
          "                    [--decode-panels 4,2] [--decode-split guided,auto]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (!decode_panels.empty() && !decode_splits.empty()) {
    std::fprintf(stderr,
                 "matmul_bench: --decode-panels and --decode-split each compare one setting; "
                 "give one of them\n");
    return 2;
  }
  // The shapes to run: all of kShapes, the one --shape names, or --shape KxN (named "KxN").
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  long long ck = 0, cn = 0;
  char tail = 0;
  if (std::sscanf(only_shape.c_str(), "%lldx%lld%c", &ck, &cn, &tail) == 2) {
    if (ck <= 0 || cn <= 0 || ck % 256 != 0) {
      std::fprintf(stderr,
                   "matmul_bench: --shape %s: K and N must be positive, K a multiple of 256\n",
                   only_shape.c_str());
      return 2;
    }
    shapes = {{only_shape.c_str(), ck, cn}};
  } else if (!only_shape.empty()) {
    std::erase_if(shapes, [&](const Shape& s) { return only_shape != s.name; });
    if (shapes.empty()) {
      std::fprintf(stderr, "matmul_bench: unknown --shape %s\n", only_shape.c_str());
      return 2;
    }
  }
  rw::ThreadPool pool(n_threads);
  rw::MachineLimits lim;
  if (given_bw > 0 && given_peak > 0) {
    lim.read_bandwidth_gb_s = given_bw;
    lim.fma_peak_gflop_s = given_peak;
    lim.n_threads = n_threads;
    lim.isa = "given";
  } else {
    // The int8 peak of the path the int8 dot takes (AVX2's under --isa avx2, VNNI or not).
    lim = rw::measure_machine_limits(&pool, 1.5, kopt.isa);
  }
  std::printf(
      "machine: %d threads, read bandwidth %.1f GB/s, fp32 FMA peak %.1f GFLOP/s (%s), int8 dot "
      "peak %.1f GOP/s (%s); matmul path: %s; quantised dot: %s (int8 path %s)\n"
      "(%%peak: of the int8 dot peak for quantised weights with the int8 dot, else of the FMA "
      "peak)\n\n",
      lim.n_threads, lim.read_bandwidth_gb_s, lim.fma_peak_gflop_s, lim.isa.c_str(),
      lim.int8_peak_gop_s, lim.int8_isa.c_str(), rw::matmul_isa(kopt.isa),
      rw::quant_dot_name(kopt.quant_dot), rw::matmul_int8_isa(kopt.isa));
  if (limits_only) return 0;
  if (!step_kib.empty()) {
    print_step_limits(&pool, lim, step_kib);
    return 0;
  }

  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t cold_bytes =
      std::max<size_t>(size_t{1} << 30, l3 > 0 ? 2 * static_cast<size_t>(l3) : 0);

  std::printf("%-8s %6s %7s %5s %4s %6s %10s %9s %8s %7s %7s %9s %7s %8s\n", "shape", "K", "N",
              "dtype", "M", "copies", "time_ms", "GFLOP/s", "GB/s", "%BW", "%peak", "hot GB/s",
              "hot%BW", "cold/hot");
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> w(static_cast<size_t>(s.n * s.k));
    for (float& v : w) v = uni(rng);
    for (const std::string& dt : dtypes) {
      const rw::DType store = dtype_named(dt);
      const bool int8 = rw::dtype_is_quant(store) && kopt.quant_dot == rw::QuantDot::Int8;
      // --decode-panels compares the int8 dot's decode tiles: quantised weights, M <= 2.
      if (!decode_panels.empty() && !int8) continue;
      // Quantised stores pack ggml blocks of the same random weights.
      std::vector<std::byte> qw;
      if (rw::dtype_is_quant(store)) {
        const size_t rb = rw::dtype_row_bytes(store, s.k);
        qw.resize(rb * static_cast<size_t>(s.n));
        for (int64_t r = 0; r < s.n; ++r)
          rw::quantize_row(w.data() + r * s.k, store, s.k, qw.data() + r * rb);
      }
      auto pack = [&] {
        rw::PackedMatrix pm =
            rw::dtype_is_quant(store)
                ? rw::PackedMatrix::pack(qw.data(), store, s.n, s.k, store, &pool)
                : rw::PackedMatrix::pack(w.data(), rw::DType::F32, s.n, s.k, store, &pool);
        pm.set_kernel_options(kopt);
        return pm;
      };
      std::vector<rw::PackedMatrix> copies;
      copies.push_back(pack());
      // One setting of a comparison on every copy (same bits whatever it is).
      auto apply = [&](auto&& set) {
        rw::KernelOptions o = kopt;
        set(o);
        for (auto& c : copies) c.set_kernel_options(o);
      };
      const size_t bytes = copies[0].bytes();
      for (int64_t m : ms) {
        if ((!decode_panels.empty() || !decode_splits.empty()) && m > 2) continue;
        // Cold copies for the bandwidth-bound small-M runs (every M with --cold).
        const bool cold = m <= 16 || cold_all;
        const size_t want = cold ? std::max<size_t>(1, (cold_bytes + bytes - 1) / bytes) : 1;
        while (copies.size() < want) copies.push_back(pack());
        std::vector<float> x(static_cast<size_t>(m * s.k));
        for (float& v : x) v = uni(rng);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        auto run_best = [&](size_t n_copies) {
          double best = 1e30;
          const double t_end = now_s() + seconds;
          for (int rep = 0; rep < 3 || now_s() < t_end; ++rep) {
            const double t0 = now_s();
            for (size_t c = 0; c < n_copies; ++c)
              rw::matmul(x.data(), m, s.k, copies[c], y.data(), s.n, &pool);
            best = std::min(best, (now_s() - t0) / static_cast<double>(n_copies));
            if (rep > 1000) break;
          }
          return best;
        };
        rw::matmul(x.data(), m, s.k, copies[0], y.data(), s.n, &pool);  // warm up
        auto cold_pass = [&] {
          for (size_t c = 0; c < want; ++c)
            rw::matmul(x.data(), m, s.k, copies[c], y.data(), s.n, &pool);
        };
        if (!decode_panels.empty()) {
          std::vector<std::string> labels;
          for (int64_t c : decode_panels)
            labels.push_back(std::to_string(c) + (c == 0 ? " (default)" : ""));
          compare_settings(
              "decode panels", labels,
              [&](size_t i) {
                apply([&](rw::KernelOptions& o) {
                  o.decode_panels = static_cast<int>(decode_panels[i]);
                });
              },
              seconds, cold_pass, static_cast<double>(bytes * want), lim.read_bandwidth_gb_s, s, dt,
              m);
          apply([](rw::KernelOptions&) {});
          continue;
        }
        if (!decode_splits.empty()) {
          std::vector<std::string> labels;
          for (rw::DecodeSplit d : decode_splits) labels.push_back(rw::decode_split_name(d));
          compare_settings(
              "decode split", labels,
              [&](size_t i) {
                apply([&](rw::KernelOptions& o) { o.decode_split = decode_splits[i]; });
              },
              seconds, cold_pass, static_cast<double>(bytes * want), lim.read_bandwidth_gb_s, s, dt,
              m);
          apply([](rw::KernelOptions&) {});
          continue;
        }
        const double t = run_best(want);
        const double flops = 2.0 * static_cast<double>(m) * s.n * s.k;
        const double gflops = flops / t / 1e9;
        const double gbs = static_cast<double>(bytes) / t / 1e9;
        const double peak =
            int8 && lim.int8_peak_gop_s > 0 ? lim.int8_peak_gop_s : lim.fma_peak_gflop_s;
        std::printf("%-8s %6lld %7lld %5s %4lld %6zu %10.3f %9.1f %8.1f %6.1f%% %6.1f%%", s.name,
                    static_cast<long long>(s.k), static_cast<long long>(s.n), dt.c_str(),
                    static_cast<long long>(m), want, t * 1e3, gflops, gbs,
                    100.0 * gbs / lim.read_bandwidth_gb_s, 100.0 * gflops / peak);
        if (cold && want > 1) {
          const double th = run_best(1);
          const double hot = static_cast<double>(bytes) / th / 1e9;
          std::printf(" %9.1f %6.1f%% %8.2f", hot, 100.0 * hot / lim.read_bandwidth_gb_s, th / t);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
