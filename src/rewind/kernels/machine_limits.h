// Measured limits of this machine, the denominators of every benchmark fraction: read bandwidth
// from main memory, the fp32 FMA peak and the int8 dot-product peak, all with every thread of a
// pool. A decode step is
// judged against the bandwidth (bytes of weights / time), a prefill against the FMA peak
// (2*M*N*K flops / time). The numbers are measured in-process, best of a few passes, so they are
// what this code can actually reach here (not datasheet values, and not pessimistic ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rewind/kernels/kernel_options.h"

namespace rw {

class ThreadPool;

struct MachineLimits {
  double read_bandwidth_gb_s = 0;     // 1e9 bytes/s, all threads streaming a buffer >> L3
  double fma_peak_gflop_s = 0;        // 1e9 flop/s, 2 flops per fp32 FMA lane, all threads
  double int8_peak_gop_s = 0;         // 1e9 op/s, 2 ops per int8 multiply-add of the int8 dot's
                                      // instructions: vpdpbusd (AVX-512 VNNI, AVX-VNNI), else AVX2
                                      // (vpmaddubsw + vpmaddwd + vpaddd), all threads; 0 without
  double amx_int8_peak_gop_s = 0;     // the same for AMX tiles (tdpbssd); 0 without AMX-INT8
  size_t bandwidth_buffer_bytes = 0;  // the buffer the bandwidth was measured over
  size_t probe_buffer_bytes = 0;      // for a BandwidthProbe: 2 x L3, >= 256 MiB, <= the above
  int bandwidth_variant = -1;         // the stream variant of the best bandwidth pass
  int n_threads = 1;
  std::string isa;                // widest SIMD used for the peak: "avx512", "avx2", "scalar"
  std::string int8_isa = "none";  // the int8 peak's instructions: "avx512vnni", "avxvnni", "avx2"
                                  // or "none"
};

// Measures both limits with every thread of `pool` (null: one thread). Cost: about
// seconds_budget of wall time (a little more on a slow machine: at least two passes of each
// measurement run) and a temporary buffer of max(1 GiB, 2 x L3) bytes (less if the machine has
// little memory). Not thread-safe with other work on the pool; run it on an idle machine.
// The int8 peak is that of the instructions the int8 dot takes under `cap` (a run held to
// `--isa avx2` on a VNNI machine is judged against the AVX2 peak).
MachineLimits measure_machine_limits(ThreadPool* pool, double seconds_budget = 1.0,
                                     IsaCap cap = IsaCap::Amx);

// int8 dot-product peak alone, of the int8 dot's path under `cap`: vpdpbusd chains on zmm
// (AVX-512 VNNI) or ymm (AVX-VNNI), else vpmaddubsw + vpmaddwd + vpaddd chains (AVX2; 0 without
// AVX2); *isa (if given) gets which.
double measure_int8_dot_peak_gop_s(ThreadPool* pool, double seconds_budget,
                                   std::string* isa = nullptr, IsaCap cap = IsaCap::Amx);

// AMX-INT8 peak alone (tdpbssd on full tiles; 0 where AMX-INT8 is missing or not granted).
double measure_amx_int8_peak_gop_s(ThreadPool* pool, double seconds_budget);

// Read bandwidth alone over a buffer of `bytes` (best of passes within seconds_budget, every
// stream variant in turn; *best_variant, if given, gets the best pass's variant).
// Exposed so benchmarks can show the cache hierarchy (small buffers give cache bandwidth).
double measure_read_bandwidth_gb_s(ThreadPool* pool, size_t bytes, double seconds_budget,
                                   int* best_variant = nullptr);

// Read bandwidth between other work: a buffer of `bytes` (keep it several times the L3 so that
// a pass comes from memory) first touched by the threads that will read it; pass() reads it
// once with every thread of the pool, with stream variant `variant` of those the bandwidth
// measurement uses (-1: each pass the next in turn), and returns 1e9 bytes/s. A benchmark on a
// host whose bandwidth drifts over seconds runs a probe right next to each step it times and
// judges the step against that probe.
class BandwidthProbe {
 public:
  BandwidthProbe(ThreadPool* pool, size_t bytes);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;
  double pass(int variant = -1);
  // The same buffer read as a decode step reads its weights: in consecutive steps of step_bytes
  // (one matrix each), every step split into equal contiguous parts over the pool's threads and
  // ended by the pool's join (parallel_for), with stream variant `variant`. The bandwidth a
  // sequence of dependent matrices of this size can reach here, against pass()'s single stream
  // per thread. Parts are whole multiples of 48 KiB (at least one); *used (if given) gets the
  // step's bytes after that rounding.
  double pass_stepped(size_t step_bytes, int variant, size_t* used = nullptr);
  int n_variants() const { return static_cast<int>(variants_.size()); }
  size_t bytes() const { return n_ * sizeof(float); }

 private:
  using StreamFn = float (*)(const float*, size_t);
  ThreadPool* pool_;
  int n_threads_;
  size_t chunk_ = 0, n_ = 0;  // floats per thread, in all
  float* buf_ = nullptr;
  std::vector<StreamFn> variants_;
  std::vector<float> sums_;
  int next_ = 0;
};

// FMA peak alone (best of runs within seconds_budget), at the widest ISA; *isa gets its name.
double measure_fma_peak_gflop_s(ThreadPool* pool, double seconds_budget, std::string* isa);

}  // namespace rw
