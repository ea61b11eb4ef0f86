// amx_pipes_bench: what the vector operations of the AMX prefill tiles' combine cost while the
// tile unit runs, on this CPU (AMX-INT8), one thread, registers only (no loads, no memory).
//
// Each variant runs a loop whose iteration issues 48 independent 512-bit operations of one kind
// (or 96 256-bit fmas: the same lanes) on 16 accumulators, alone and then beside one tdpbssd
// (16 x 64 x 16, independent tiles), and prints the best ns per iteration of each. Where the
// running tiles take a port the operation issues on, the operations run at half their rate
// (ratio about 2); where not, the two overlap (ratio about 1). The AMX tiles' exact combine
// (matmul_quant_amx.cpp) is made of such operations: per 16 x 16 sums of a Q8_0 block, 16
// conversions, multiplies and fmas.
//
// Usage: amx_pipes_bench [--seconds S]   (S per variant, default 0.3)
#include <cstdio>

#include "bench_clock.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace {

enum class Op { None, ZmmFma, ZmmCvt, ZmmAdd, ZmmPaddd, YmmFma };

#define RW_REGS16(INS, SRC, W)                                                                 \
  INS " %%" W "16, " SRC "%%" W "0\n\t" INS " %%" W "16, " SRC "%%" W "1\n\t" INS " %%" W      \
      "16, " SRC "%%" W "2\n\t" INS " %%" W "16, " SRC "%%" W "3\n\t" INS " %%" W "16, " SRC   \
      "%%" W "4\n\t" INS " %%" W "16, " SRC "%%" W "5\n\t" INS " %%" W "16, " SRC "%%" W       \
      "6\n\t" INS " %%" W "16, " SRC "%%" W "7\n\t" INS " %%" W "16, " SRC "%%" W "8\n\t" INS  \
      " %%" W "16, " SRC "%%" W "9\n\t" INS " %%" W "16, " SRC "%%" W "10\n\t" INS " %%" W     \
      "16, " SRC "%%" W "11\n\t" INS " %%" W "16, " SRC "%%" W "12\n\t" INS " %%" W "16, " SRC \
      "%%" W "13\n\t" INS " %%" W "16, " SRC "%%" W "14\n\t" INS " %%" W "16, " SRC "%%" W     \
      "15\n\t"
#define RW_CLOBBER16                                                                       \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

// `iters` iterations of the operation mix, each with one tdpbssd when `tile`.
template <Op op, bool tile>
__attribute__((target("avx512f,amx-tile,amx-int8"), noinline)) void run(long iters) {
  if constexpr (op != Op::None)
    __asm__ volatile("vxorps %%xmm16, %%xmm16, %%xmm16\n\tvxorps %%xmm17, %%xmm17, %%xmm17" ::
                         : "xmm16", "xmm17");
  for (long i = 0; i < iters; ++i) {
    if constexpr (tile) _tile_dpbssd(0, 1, 2);
    if constexpr (op == Op::ZmmFma) {
      __asm__ volatile(RW_REGS16("vfmadd231ps", "%%zmm17, ", "zmm")
                           RW_REGS16("vfmadd231ps", "%%zmm17, ", "zmm")
                               RW_REGS16("vfmadd231ps", "%%zmm17, ", "zmm")::
                                   : RW_CLOBBER16);
    } else if constexpr (op == Op::ZmmCvt) {
      __asm__ volatile(RW_REGS16("vcvtdq2ps", "", "zmm") RW_REGS16("vcvtdq2ps", "", "zmm")
                           RW_REGS16("vcvtdq2ps", "", "zmm")::
                               : RW_CLOBBER16);
    } else if constexpr (op == Op::ZmmAdd) {
      __asm__ volatile(RW_REGS16("vaddps", "%%zmm17, ", "zmm") RW_REGS16(
                           "vaddps", "%%zmm17, ", "zmm") RW_REGS16("vaddps", "%%zmm17, ", "zmm")::
                           : RW_CLOBBER16);
    } else if constexpr (op == Op::ZmmPaddd) {
      __asm__ volatile(RW_REGS16("vpaddd", "%%zmm17, ", "zmm") RW_REGS16(
                           "vpaddd", "%%zmm17, ", "zmm") RW_REGS16("vpaddd", "%%zmm17, ", "zmm")::
                           : RW_CLOBBER16);
    } else if constexpr (op == Op::YmmFma) {
      __asm__ volatile(RW_REGS16("vfmadd231ps", "%%ymm17, ", "ymm")
                           RW_REGS16("vfmadd231ps", "%%ymm17, ", "ymm")
                               RW_REGS16("vfmadd231ps", "%%ymm17, ", "ymm")
                                   RW_REGS16("vfmadd231ps", "%%ymm17, ", "ymm")
                                       RW_REGS16("vfmadd231ps", "%%ymm17, ", "ymm")
                                           RW_REGS16("vfmadd231ps", "%%ymm17, ", "ymm")::
                                               : RW_CLOBBER16);
    }
  }
}

// Tiles 0-2 as 16 rows x 64 bytes (zeroed), for the tdpbssd.
__attribute__((target("amx-tile"), noinline)) void configure_tiles() {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  for (int t = 0; t < 3; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  __asm__ volatile("" : : "r"(&cfg) : "memory");  // the stores above reach memory first
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
}

__attribute__((target("amx-tile"), noinline)) void release_tiles() {
  _tile_release();
}

// The best ns per iteration over repeated runs for `seconds`.
template <Op op, bool tile>
double ns_per_iter(double seconds) {
  return rw::bench::best_ns_per_unit(seconds, 200000, [](long n) { run<op, tile>(n); });
}

}  // namespace
#endif

int main(int argc, char** argv) {
  double seconds = 0.3;
  if (!rw::bench::parse_seconds_only("amx_pipes_bench", argc, argv, seconds)) return 2;
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("amx-int8") ||
      syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::fprintf(stderr, "amx_pipes_bench: this CPU (or kernel) has no AMX-INT8\n");
    return 1;
  }
  configure_tiles();
  const double dp = ns_per_iter<Op::None, true>(seconds);
  std::printf("one thread, per iteration: the operations below, alone / beside one tdpbssd\n");
  std::printf("(one tdpbssd alone: %.2f ns)\n", dp);
  std::printf("%-36s %8s %8s %8s\n", "operations", "alone", "+tdpbssd", "ratio");
  auto row = [&](const char* name, double alone, double with) {
    std::printf("%-36s %8.2f %8.2f %8.2f\n", name, alone, with, with / alone);
  };
  row("48 vfmadd231ps zmm", ns_per_iter<Op::ZmmFma, false>(seconds),
      ns_per_iter<Op::ZmmFma, true>(seconds));
  row("48 vcvtdq2ps zmm", ns_per_iter<Op::ZmmCvt, false>(seconds),
      ns_per_iter<Op::ZmmCvt, true>(seconds));
  row("48 vaddps zmm", ns_per_iter<Op::ZmmAdd, false>(seconds),
      ns_per_iter<Op::ZmmAdd, true>(seconds));
  row("48 vpaddd zmm", ns_per_iter<Op::ZmmPaddd, false>(seconds),
      ns_per_iter<Op::ZmmPaddd, true>(seconds));
  row("96 vfmadd231ps ymm", ns_per_iter<Op::YmmFma, false>(seconds),
      ns_per_iter<Op::YmmFma, true>(seconds));
  release_tiles();
  return 0;
#else
  (void)seconds;
  std::fprintf(stderr, "amx_pipes_bench: x86-64 Linux with AMX-INT8 only\n");
  return 1;
#endif
}
