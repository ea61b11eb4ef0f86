// Internal to the matmul (matmul.cpp, matmul_quant.cpp): the packed layout of quantised weights
// and the kernels that widen them, exactly, to the F32 panel layout the micro-kernels read.
//
// A quantised PackedMatrix keeps ggml's values (the same d, scales and codes) re-laid per panel
// of 16 output rows, one k-block (32 values for Q8_0, 256 for Q4_K / Q6_K) after another, with
// the 16 rows interleaved so one vector load serves all 16 lanes:
//   Q8_0 block (544 B): d[16] f16 | q[32][16] i8
//   Q4_K block (2368 B): d[16] f16 | dmin[16] f16 | sc[8][16] u8 | m[8][16] u8 |
//                        q[128][16] u8 (byte i of lane j: k = 2i in the low nibble, 2i+1 high)
//   Q6_K block (4384 B): d[16] f16 | sc[16][16] i8 | q[256][16] i8 (values -32..31)
// Widening applies ggml's dequantisation arithmetic (tensor/quant.h) per lane, so the F32
// values are exactly ggml's, and the AVX-512 and scalar widen give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rewind/tensor/dtype.h"

namespace rw::detail {

inline int64_t quant_panel_block_bytes(DType t) {
  switch (t) {
    case DType::Q8_0:
      return 32 + 32 * 16;
    case DType::Q4_K:
      return 32 + 32 + 128 + 128 + 128 * 16;
    case DType::Q6_K:
      return 32 + 256 + 256 * 16;
    default:
      return 0;
  }
}

// Re-lays the quantised rows [16 rows of one panel] (ggml blocks, row-major; rows past n_rows
// are zero) into one panel of the layout above. dst holds (k / block) * block bytes.
void pack_quant_panel(DType t, const std::byte* const* rows, int n_rows, int64_t k, std::byte* dst);

// True while matmul_force_isa chose a path without an AVX-512 widen ("avx2", "scalar").
extern bool g_quant_force_scalar;

// Decode tiles: y[r, 0..ncols) = the whole K of x rows r < rows (1..kQuantDecodeRows) against
// np panels (panel p at panels + p * panel_stride, nb k-blocks), dequantising in registers with
// the widen's arithmetic and one FMA chain per output in k order: the same bits as widen + the
// F32 micro-kernel. Available on AVX-512 unless a test forced another path.
constexpr int kQuantDecodeRows = 2;
constexpr int kQuantDecodePanels = 4;
bool quant_decode_tiles_available();
void quant_decode_tiles(DType t, const float* x, int64_t ldx, int rows, const std::byte* panels,
                        int64_t panel_stride, int64_t nb, int np, float* y, int64_t ldy, int ncols);

// Widens blocks [b0, b0 + nb) of np panels (panel p at panels + p * panel_stride bytes) into
// out [np][nb * block][16] f32.
void widen_quant(DType t, const std::byte* panels, int64_t panel_stride, int64_t b0, int64_t nb,
                 int np, float* out);

}  // namespace rw::detail
