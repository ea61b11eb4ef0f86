// Internal to the matmul (matmul.cpp, matmul_quant.cpp): the packed layout of quantised weights,
// the kernels that widen them exactly to the F32 panel layout (the "f32" dot), and the integer
// kernels of the "int8" dot (activations quantised per row, integer dot products, one f32
// accumulator per output).
//
// A quantised PackedMatrix keeps ggml's values (the same d, scales and codes) re-laid per panel
// of 16 output rows, one k-block (32 values for Q8_0, 256 for Q4_K / Q5_K / Q6_K) after another.
// The codes come in 64-byte groups: group g holds, for each of the 16 lanes (output rows) j, four
// consecutive bytes (lane j at bytes 4j..4j+3), which is the operand layout of an int8
// dot-product instruction (4 products summed into each 32-bit lane):
//   Q8_0 block (544 B):  d[16] f16 | q: 8 groups, byte t of lane j = q[4g + t] (i8)
//   Q4_0 block (288 B):  d[16] f16 | c = q + 8 (0..15): 4 groups, byte t of lane j holds c[8g + t]
//                        in its low nibble and c[8g + 4 + t] in its high nibble (Q4_K's layout)
//   IQ4_NL block (288 B): the Q4_0 block with c the index into kIq4nlValues
//   Q4_1 block (320 B):  the Q4_0 block with c = q (0..15), then m[16] f16
//   Q5_1 block (384 B):  the Q4_0 block with the low 4 bits of c = q (0..31), then their fifth
//                        bits in Q5_K's high-bit layout of one sub-block (64 B), then m[16] f16
//   Q5_0 block (352 B):  the Q5_1 block without m, c = q + 16
//   Q3_K block (1824 B): d[16] f16 | sc[16][16] i8 | c = q + 4 (0..7): its low 2 bits in Q6_K's
//                        high-bit layout (16 groups, byte t of lane j of group h holding in bits
//                        2c'..2c'+1 those of c[16h + 4c' + t]), then 8 groups of bit 2: byte t of
//                        lane j of group h holding in bit c' that of c[32h + 4c' + t]
//   Q4_K block (2368 B): d[16] f16 | dmin[16] f16 | sc[8][16] u8 | m: [4][16][2] u8 (lane j of
//                        pair t: m[2t], m[2t+1]) | q: 32 groups, byte t of lane j holds
//                        q[8g + t] in its low nibble and q[8g + 4 + t] in its high nibble
//   Q5_K block (2880 B): Q4_K's header, then the 5-bit codes in 8 runs of 320 bytes, one per
//                        sub-block h (in the order the decode tiles read them): its group of
//                        high bits, byte t of lane j holding in bit 2c' + e the high bit of
//                        q[8(4h + c') + 4e + t], then its 4 nibble groups 4h..4h+3 (the low 4
//                        bits, as Q4_K's)
//   Q2_K block (1344 B): d[16] f16 | dmin[16] f16 | scm[16][16] u8 (ggml's byte: scale in the low
//                        nibble, min in the high one) | the 2-bit codes in Q3_K's low-bit layout
//                        (16 groups, byte t of lane j of group h holding in bits 2c'..2c'+1
//                        those of q[16h + 4c' + t])
//   IQ4_XS block (2208 B): d[16] f16 | sc[8][16] i8 (6-bit code - 32) | c: the indices into
//                        kIq4nlValues in Q4_K's 32 nibble groups
//   Q6_K block (3360 B, ggml's 6.56 bits per weight): d[16] f16 | sc[16][16] i8 | the codes
//                        c = q + 32 (0..63) in 16 runs of 192 bytes, one per sub-block h (in
//                        the order the decode tiles read them): its two nibble groups (the low
//                        4 bits, as Q4_K's nibble groups 2h and 2h + 1), then its high-bit
//                        group, byte t of lane j holding in bits 2c'..2c'+1 the high 2 bits of
//                        c[16h + 4c' + t]
// Widening applies ggml's dequantisation arithmetic (tensor/quant.h) per lane, so the F32
// values are exactly ggml's, and the AVX-512 and scalar widen give the same bits.
//
// The int8 dot (QuantDot::Int8). Each activation row is quantised per block of B values (B = 32
// for Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1 and Q5_1 weights, 256 for Q4_K / Q5_K / Q6_K / Q3_K / IQ4_XS /
// Q2_K): dx = amax / 127, q = nearest-even(x * (127 / amax)), so q is in [-127, 127] (a block of
// zeros: dx = 0, q = 0). Then for output (row r, column n), one f32 accumulator acc = +0.0f and,
// for the weight blocks b in k order (integer sums exact):
//   Q8_0  s  = sum_i qw[i] * qx[i];                      acc = fma(dw * dx, float(s), acc)
//   Q4_0  the same with qw = c - 8, computed as s = sum_i c[i] * qx[i] - 8 * sum_i qx[i] (the same
//         integer, so a Q4_0 matrix gives the bits of its Q8_0 transcoding)
//   IQ4_NL the same with qw = kIq4nlValues[c]
//   Q5_0  the same with qw = c - 16 (s = sum_i c[i] * qx[i] - 16 * sum_i qx[i])
//   Q4_1  s = sum_i c[i] * qx[i];  acc = fma(d * dx, float(s), acc)
//         then acc = fma(m, dx * float(sum_i qx[i]), acc)   (Q5_1 the same with its 5-bit c)
//   Q3_K  as Q6_K with q = c - 4 (Q6_K's tiles on the codes c + 28 = q + 32, built in registers
//         for decode, expanded to Q6_K's bytes once per row block for prefill: the integers of
//         its Q6_K transcoding)
//   Q4_K  s1 = sum_s sc[s] * sum_{i in s} q[i] * qx[i];  acc = fma(d * dx, float(s1), acc)
//         s2 = sum_s m[s] * sum_{i in s} qx[i];          acc = fma(-(dmin * dx), float(s2), acc)
//   Q6_K  s  = sum_s sc[s] * sum_{i in s} q[i] * qx[i];  acc = fma(d * dx, float(s), acc)
//   Q2_K  as Q4_K with sub-blocks of 16 (sc, m 4-bit) and s2 = sum_s m[s] * sum_{i in s} qx[i]
//   IQ4_XS the same as Q6_K with q = kIq4nlValues[c] and sub-blocks of 32 (the VNNI tiles sum
//         (q + 128) * qx from -128 * sum32(qx), the AVX2 tiles |q| * (+-qx): the same integers)
// (Q5_K as Q4_K with its 5-bit q; sub-blocks s of 32 values for Q4_K / Q5_K, 16 for Q6_K;
// float(int) rounds to nearest even). The AVX-512 VNNI kernels and the scalar reference compute
// exactly this, whatever the tile shape, so the int8 dot is batch-invariant and gives the same bits
// on every path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rewind/base/aligned.h"
#include "rewind/kernels/matmul.h"
#include "rewind/tensor/dtype.h"

namespace rw {
class ThreadPool;
}

namespace rw::detail {

// Bytes of one k-block of a panel of the layout above (kQuantTraits' panel_block_bytes; 0 for
// a type that is not quantised).
constexpr int64_t quant_panel_block_bytes(DType t) {
  return dtype_is_quant(t) ? quant_traits(t).panel_block_bytes : 0;
}

// Re-lays the quantised rows [16 rows of one panel] (ggml blocks, row-major; rows past n_rows
// are zero) into one panel of the layout above. dst holds (k / block) * block bytes.
void pack_quant_panel(DType t, const std::byte* const* rows, int n_rows, int64_t k, std::byte* dst);
// The same layout one value at a time: the reference the tests hold pack_quant_panel to.
void pack_quant_panel_ref(DType t, const std::byte* const* rows, int n_rows, int64_t k,
                          std::byte* dst);

// ---- f32 dot ----------------------------------------------------------------------------------

// Decode tiles: y[r, 0..ncols) = the whole K of x rows r < rows (1..kQuantDecodeRows) against
// np panels (panel p at panels + p * panel_stride, nb k-blocks), dequantising in registers with
// the widen's arithmetic and one FMA chain per output in k order: the same bits as widen + the
// F32 micro-kernel. Available on AVX-512 (every quantised store) when `cap` allows it.
constexpr int kQuantDecodeRows = 2;
constexpr int kQuantDecodePanels = 4;
bool quant_decode_tiles_available(DType t, IsaCap cap);
void quant_decode_tiles(DType t, const float* x, int64_t ldx, int rows, const std::byte* panels,
                        int64_t panel_stride, int64_t nb, int np, float* y, int64_t ldy, int ncols,
                        IsaCap cap);

// Widens blocks [b0, b0 + nb) of np panels (panel p at panels + p * panel_stride bytes) into
// out [np][nb * block][16] f32.
void widen_quant(DType t, const std::byte* panels, int64_t panel_stride, int64_t b0, int64_t nb,
                 int np, float* out, IsaCap cap);

// ---- int8 dot ---------------------------------------------------------------------------------

// Activation rows quantised for weights of type t (see above). Row r: q at q + r * k,
// block scales at d + r * (k / block), sums of q per 16 values at s16 + r * (k / 16) (i32) and
// per 32 values at s32 + r * (k / 32) (i16, so two neighbours read as one i32).
struct QuantizedActs {
  int64_t m = 0, k = 0, block = 0;
  AlignedBuffer<int8_t> q;
  AlignedBuffer<float> d;
  AlignedBuffer<int32_t> s16;
  AlignedBuffer<int16_t> s32;
};

// Quantises x [m, k] (row stride ldx) for weights of type t into *out (reusing its buffers).
// Rows are independent: row r's values depend on x[r, :] alone. pool may be null.
void quantize_acts(DType t, const float* x, int64_t m, int64_t ldx, int64_t k, QuantizedActs* out,
                   ThreadPool* pool, IsaCap cap);

// quantize_acts on rows made by fill (matmul_fill's contract: once per row, disjoint ranges, any
// thread): each thread makes a few rows at a time into a cache-sized buffer and quantises them
// there. The same codes and scales as quantize_acts on the same rows.
void quantize_acts_fill(DType t, const RowFill& fill, int64_t m, int64_t k, QuantizedActs* out,
                        ThreadPool* pool, IsaCap cap);

// True when the int8 dot has SIMD kernels under `cap` here: AVX-512 VNNI, else AVX2 (else the
// scalar reference runs; all give the same bits).
bool int8_dot_simd_available(IsaCap cap);
const char* int8_dot_isa(IsaCap cap);  // "avx512vnni", "avxvnni", "avx2" or "scalar"
// AMX-INT8 usable here (CPU and kernel permission); Q8_0, Q4_K, Q5_K and Q6_K prefill tiles of 16
// rows then use it when the cap is Amx.
bool amx_int8_available();
// AVX2 (with FMA and F16C) and AVX-VNNI: the AVX-VNNI int8 tiles can run here.
bool avxvnni_available();
bool amx_int8_enabled(IsaCap cap);  // amx_int8_available() and cap == Amx

// Panels per panel group of int8_dot_panels over `rows` rows (rows > 2): each group's panels
// are read by every row tile of a row block, so a split of the columns between threads keeps
// whole groups.
int int8_prefill_group_panels(DType t, int64_t panel_stride, int64_t rows, IsaCap cap);

// y[r, c] for r in [r0, r1), c < ncols (ncols <= 16 * np): the int8 dot of activation rows of xa
// against np panels (panel p at panels + p * panel_stride), all of K. y points at y[r0, col0].
// Runs on the paths opt.isa allows; a decode (1-2 rows) with opt.decode_panels panel streams per
// tile (0: each type's own count; 1-4 forced, capped at the path's most; same bits either way).
void int8_dot_panels(DType t, const QuantizedActs& xa, int64_t r0, int64_t r1,
                     const std::byte* panels, int64_t panel_stride, int np, float* y, int64_t ldy,
                     int ncols, const KernelOptions& opt);

// The scalar reference for one output (tests): the formula above, row r of xa, lane j of the
// panel at `panel`.
float int8_dot_reference(DType t, const QuantizedActs& xa, int64_t r, const std::byte* panel,
                         int j);

}  // namespace rw::detail
