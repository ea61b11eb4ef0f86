// How the kernels run: chosen at load time and owned by the model (LoadOptions::kernels), carried
// by each packed matrix and passed to the ops. There is no process-wide kernel setting, so two
// models in one process can run differently.
#pragma once

#include <string>

namespace rw {

// How quantised weights are multiplied (kernels/matmul.h). The one option that changes results:
//  F32: widened exactly to fp32 (ggml's dequantisation), the F32 matmul's bits;
//  Int8: activations quantised per block, integer dot products (matmul_quant.h's formula).
enum class QuantDot { F32, Int8 };
const char* quant_dot_name(QuantDot mode);  // "f32", "int8"
// Int8 where the CPU has SIMD int8 kernels (AVX-512 VNNI, AVX-VNNI or AVX2), else F32 (the scalar
// int8 path gives the same bits, much slower).
QuantDot default_quant_dot();

// The widest SIMD path the kernels may take. Every path gives the same bits, so this only
// matters to tests that compare paths and to benchmarks of a narrower machine; each kernel still
// takes only what the CPU has. AvxVnni: AVX2 with AVX-VNNI's int8 dot products (Intel cores
// without AVX-512 since Alder Lake); everything else as Avx2. Amx: everything the CPU has (the
// default).
enum class IsaCap { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512 = 3, Amx = 4 };
// "scalar", "avx2", "avxvnni", "avx512", "amx" ("auto" parses as Amx); false for any other name.
bool parse_isa_cap(const std::string& name, IsaCap* cap);
const char* isa_cap_name(IsaCap cap);
// True when this CPU has the path the cap names (tests skip caps the machine lacks).
bool isa_cap_supported(IsaCap cap);

// How the threads split a decode matmul's (M <= 2) output columns. Auto: one static share per
// thread for matrices of at most 8 MiB of weights a thread, guided chunks for larger ones.
// Same bits whichever split.
enum class DecodeSplit { Auto, Guided, Static };
const char* decode_split_name(DecodeSplit split);  // "auto", "guided", "static"
bool parse_decode_split(const std::string& name, DecodeSplit* split);

struct KernelOptions {
  QuantDot quant_dot = default_quant_dot();
  IsaCap isa = IsaCap::Amx;
  // Benchmark knobs (bench/matmul_bench, rewind bench), the same bits whatever they are:
  int decode_panels = 0;  // panel streams per int8 decode tile: 0 each type's own, 1-4 forced
  DecodeSplit decode_split = DecodeSplit::Auto;
};

}  // namespace rw
