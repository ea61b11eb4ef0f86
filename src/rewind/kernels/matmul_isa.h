// Internal to the matmul kernel (matmul.cpp and the per-ISA matmul_*.cpp files): the packed
// weight layout and the table of micro-kernels one SIMD path provides. Not a public API.
//
// Packed layout (PackedMatrix::raw()): W [n, k] is cut into panels of kNR = 16 output rows
// (= 16 output columns of y; the last panel is zero-padded).
//   F32 store:  [n_panels][k][16] f32            (panel stride k * 16 floats)
//   BF16 store: [n_panels][ceil(k/2)][16][2] bf16 (k-pairs interleaved: the 32-bit lane j of
//               pair-row q holds w[j, 2q] in its low half and w[j, 2q+1] in its high half, so
//               one 512-bit load widens to two fp32 vectors with one shift and one AND; an odd
//               k leaves the last high halves zero, and the kernels never use them)
// Panels start on 64-byte boundaries (a panel is a multiple of 64 bytes long).
//
// Every micro-kernel computes, for each output it owns, the contract's one accumulator:
// acc = accumulate ? y : +0.0f, then acc = fma(x[r, k], w[c, k], acc) for k in order, then y =
// acc. That is the same per-element arithmetic on every path, so all paths give the same bits.
#pragma once

#include <cstdint>

namespace rw::detail {

constexpr int kMatmulNR = 16;  // output columns per panel

struct MatmulIsa {
  const char* name;
  int mr;        // most rows one tile call may take
  int np;        // most panels one tile call may take
  int mr_small;  // for tiles of at most mr_small rows (decode), np_small panels fit too
  int np_small;

  // y[r, c] for r < rows, c < ncols (ncols <= 16 * np): one K block [k0, k0 + kc) of the
  // accumulation. x points at x[row0, k0] (row stride ldx); w at panel 0 of the tile at k0
  // (panel stride w_stride elements); y at y[row0, col0] (row stride ldy). accumulate: the
  // accumulators start from y (an earlier K block) instead of +0.0f.
  // rows <= mr and np <= this->np, or rows <= mr_small and np <= np_small.
  // pf, pf_lines, stream: hints with no effect on results. The kernel prefetches (into L2) the
  // 64-byte lines pf + 64 * i for i < pf_lines, one line per 4 k steps (so pf_lines <=
  // ceil(kc / 4)); the driver points it at the weights the next tiles will read (pf may be
  // null). stream: the call is memory-bound (its weights come from DRAM and few rows share
  // them); the kernel prefetches each panel stream a fixed distance ahead.
  void (*tile_f32)(const float* x, int64_t ldx, const float* w, int64_t w_stride, int64_t kc,
                   int rows, int np, float* y, int64_t ldy, int ncols, bool accumulate,
                   const char* pf, int64_t pf_lines, bool stream);
  // Same on BF16 storage: w points at pair-row k0/2 of panel 0 (k0 even); w_stride in uint16
  // elements. kc may be odd only for the block that ends at k.
  void (*tile_bf16)(const float* x, int64_t ldx, const uint16_t* w, int64_t w_stride, int64_t kc,
                    int rows, int np, float* y, int64_t ldy, int ncols, bool accumulate,
                    const char* pf, int64_t pf_lines, bool stream);
  // Widens the BF16 K block [k0, k0 + kc) of np panels (w as for tile_bf16) to the F32 layout
  // [np][kc][16] in out (exact). Lets a tile sequence over many rows reuse the widened block.
  void (*widen_bf16)(const uint16_t* w, int64_t w_stride, int64_t kc, int np, float* out);
};

// A SIMD path's MatmulIsa from its micro-kernels, one per tile shape it has (rows <= MR with
// panels <= NP, or rows <= MRSmall with panels <= NPSmall): Tile<R, P>::f32 and ::bf16 are the
// kernels of R rows and P panels, MatmulIsa's tile_f32 / tile_bf16 without the rows and np
// arguments. make() gives the MatmulIsa whose entries look the shape up in the tables.
using TileF32Fixed = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*,
                              int64_t, int, bool, const char*, int64_t, bool);
using TileBf16Fixed = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*,
                               int64_t, int, bool, const char*, int64_t, bool);

template <int MR, int NP, int MRSmall, int NPSmall, template <int, int> class Tile>
class TileTables {
 public:
  static constexpr MatmulIsa make(const char* name, void (*widen_bf16)(const uint16_t*, int64_t,
                                                                       int64_t, int, float*)) {
    return {name, MR, NP, MRSmall, NPSmall, &tile_f32, &tile_bf16, widen_bf16};
  }

 private:
  static constexpr int kMaxR = MR > MRSmall ? MR : MRSmall;
  static constexpr int kMaxP = NP > NPSmall ? NP : NPSmall;
  struct Tables {
    TileF32Fixed f32[kMaxR + 1][kMaxP + 1]{};
    TileBf16Fixed bf16[kMaxR + 1][kMaxP + 1]{};
  };
  template <int R, int P>
  static constexpr void fill(Tables& t) {
    if constexpr ((R <= MR && P <= NP) || (R <= MRSmall && P <= NPSmall)) {
      t.f32[R][P] = Tile<R, P>::f32;
      t.bf16[R][P] = Tile<R, P>::bf16;
    }
    if constexpr (P < kMaxP) {
      fill<R, P + 1>(t);
    } else if constexpr (R < kMaxR) {
      fill<R + 1, 1>(t);
    }
  }
  static constexpr Tables make_tables() {
    Tables t;
    fill<1, 1>(t);
    return t;
  }
  static constexpr Tables kTables = make_tables();

  static void tile_f32(const float* x, int64_t ldx, const float* w, int64_t w_stride, int64_t kc,
                       int rows, int np, float* y, int64_t ldy, int ncols, bool accumulate,
                       const char* pf, int64_t pf_lines, bool stream) {
    kTables.f32[rows][np](x, ldx, w, w_stride, kc, y, ldy, ncols, accumulate, pf, pf_lines, stream);
  }
  static void tile_bf16(const float* x, int64_t ldx, const uint16_t* w, int64_t w_stride,
                        int64_t kc, int rows, int np, float* y, int64_t ldy, int ncols,
                        bool accumulate, const char* pf, int64_t pf_lines, bool stream) {
    kTables.bf16[rows][np](x, ldx, w, w_stride, kc, y, ldy, ncols, accumulate, pf, pf_lines,
                           stream);
  }
};

const MatmulIsa* matmul_isa_scalar();
const MatmulIsa* matmul_isa_avx2();    // callers check the CPU first
const MatmulIsa* matmul_isa_avx512();  // callers check the CPU first

}  // namespace rw::detail
