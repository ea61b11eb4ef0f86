// Matmul: weight packing, the cache-blocking driver shared by all SIMD paths, the scalar path,
// the ISA dispatcher and the naive reference. The micro-kernels live in matmul_avx512.cpp and
// matmul_avx2.cpp; the packed layout and the micro-kernel contract are in matmul_isa.h.
//
// Blocking (run_panels): a thread owns a contiguous range of panels. For each group of np
// panels (weights in L2, prefetched while the previous group runs), every MR-row tile of the
// row block runs the whole K (sliced only past kKcMax) with its accumulators in registers.
// Accumulators spilled to y between K slices are reloaded exactly, so the arithmetic is always
// the contract's single sequential FMA chain per output; the blocking may therefore depend on M
// (decode uses wide 1-2 row tiles, prefill 8-row tiles) without changing a bit.
#include "rewind/kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#include "rewind/base/check.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/matmul_isa.h"
#include "rewind/kernels/matmul_quant.h"
#include "rewind/tensor/quant.h"

namespace rw {
namespace detail {
namespace {

// ---- scalar path -----------------------------------------------------------------------------
// The reference for the per-element arithmetic: one std::fma chain per output, k in order.

void tile_f32_scalar(const float* x, int64_t ldx, const float* w, int64_t w_stride, int64_t kc,
                     int rows, int np, float* y, int64_t ldy, int ncols, bool accumulate,
                     const char* pf, int64_t pf_lines, bool stream) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    for (int c = 0; c < ncols; ++c) {
      const float* wc = w + (c / kMatmulNR) * w_stride + (c % kMatmulNR);
      float acc = accumulate ? y[r * ldy + c] : 0.0f;
      for (int64_t k = 0; k < kc; ++k) acc = std::fma(xr[k], wc[k * kMatmulNR], acc);
      y[r * ldy + c] = acc;
    }
  }
}

void tile_bf16_scalar(const float* x, int64_t ldx, const uint16_t* w, int64_t w_stride, int64_t kc,
                      int rows, int np, float* y, int64_t ldy, int ncols, bool accumulate,
                      const char* pf, int64_t pf_lines, bool stream) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    for (int c = 0; c < ncols; ++c) {
      const uint16_t* wc = w + (c / kMatmulNR) * w_stride + 2 * (c % kMatmulNR);
      float acc = accumulate ? y[r * ldy + c] : 0.0f;
      for (int64_t k = 0; k < kc; ++k)
        acc = std::fma(xr[k], bf16_to_f32(wc[(k / 2) * 2 * kMatmulNR + (k % 2)]), acc);
      y[r * ldy + c] = acc;
    }
  }
}

void widen_bf16_scalar(const uint16_t* w, int64_t w_stride, int64_t kc, int np, float* out) {
  for (int p = 0; p < np; ++p)
    for (int64_t k = 0; k < kc; ++k)
      for (int j = 0; j < kMatmulNR; ++j)
        out[(p * kc + k) * kMatmulNR + j] =
            bf16_to_f32(w[p * w_stride + (k / 2) * 2 * kMatmulNR + 2 * j + (k % 2)]);
}

constexpr MatmulIsa kScalarIsa = {
    "scalar", 4, 1, 1, 4, &tile_f32_scalar, &tile_bf16_scalar, &widen_bf16_scalar};

}  // namespace

const MatmulIsa* matmul_isa_scalar() {
  return &kScalarIsa;
}

}  // namespace detail

namespace {

using detail::kMatmulNR;
using detail::MatmulIsa;

// ---- dispatch --------------------------------------------------------------------------------

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// The widest f32 / bf16 path the CPU has and the cap allows.
const MatmulIsa& isa_for(IsaCap cap) {
  static const bool avx512 = cpu_has_avx512(), avx2 = cpu_has_avx2();
  if (avx512 && cap >= IsaCap::Avx512) return *detail::matmul_isa_avx512();
  if (avx2 && cap >= IsaCap::Avx2) return *detail::matmul_isa_avx2();
  return *detail::matmul_isa_scalar();
}

// ---- blocking --------------------------------------------------------------------------------

constexpr int64_t kKcMax = 4096;  // longest K slice (even: BF16 pairs never straddle slices)
constexpr int64_t kMc = 512;      // rows per row block (rounded down to a multiple of MR)
constexpr int64_t kMinRowTilesToReuse = 3;  // tiles per panel group that make it compute-bound
constexpr int kMaxNp = 8;

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Per-thread scratch for a widened BF16 panel group ([np][kc][16] f32: np * kc * 64 bytes).
float* wide_scratch(size_t n_floats) {
  thread_local AlignedBuffer<float> buf;
  buf.reserve_at_least(n_floats);
  return buf.data();
}

// Decode (m <= mr_small) on BF16 storage, panels [p0, p1): the panels are cut into four (at
// most np_small) contiguous runs and tile i reads panel i of every run over the whole K, so each
// of its panel streams walks its own run start to end: the stream prefetch runs on into the
// stream's next panel (the next tile's) instead of into a panel another stream has loaded, and
// only the first panel of each run starts cold. Four streams kept the memory busier than six.
// The tile's columns are not adjacent in y, so it writes them to a small buffer copied out.
void run_panels_bf16_decode(const MatmulIsa& isa, const float* x, int64_t m, int64_t ldx,
                            const PackedMatrix& w, float* y, int64_t ldy, int64_t p0, int64_t p1) {
  constexpr int kMaxRows = 8;
  REWIND_CHECK(m <= kMaxRows && isa.np_small <= kMaxNp);
  const int64_t n = w.n(), k = w.k();
  const int64_t w_stride = cdiv(k, 2) * 2 * kMatmulNR;  // uint16 elements
  const uint16_t* wb = static_cast<const uint16_t*>(w.raw());
  const int64_t count = p1 - p0;
  // Panels per run, odd: runs a power of two of panels apart would put every stream's reads in
  // the same DRAM banks.
  const int streams = std::min(isa.np_small, 4);
  const int64_t q = cdiv(count, streams) | 1;
  alignas(64) float buf[kMaxRows * kMaxNp * kMatmulNR];
  for (int64_t i = 0; i < q; ++i) {
    int npg = 0;
    while (npg < streams && i + npg * q < count) ++npg;
    const int64_t ldb = npg * kMatmulNR;
    isa.tile_bf16(x, ldx, wb + (p0 + i) * w_stride, q * w_stride, k, static_cast<int>(m), npg, buf,
                  ldb, npg * kMatmulNR, false, nullptr, 0, true);
    for (int j = 0; j < npg; ++j) {
      const int64_t p = p0 + i + j * q;
      const int64_t cols = std::min<int64_t>(kMatmulNR, n - p * kMatmulNR);
      for (int64_t r = 0; r < m; ++r)
        std::copy_n(buf + r * ldb + j * kMatmulNR, cols, y + r * ldy + p * kMatmulNR);
    }
  }
}

// Panels [p0, p1) of y for all m rows (one thread's share).
//
// Loop nest: row blocks of mc rows > K slices (only when K > kKcMax) > groups of np panels >
// tiles of mr rows. A group's weights for the slice (np * kc * 64 B: 192 KiB at K = 1024) stay
// in L2 while every row tile of the block runs over them with its x rows streaming from L2/L3;
// meanwhile each tile prefetches a share of the next group's weights into L2, so the group
// switch does not stall on memory. BF16 groups are widened once into f32 scratch when at least
// kMinRowTilesToReuse tiles reuse them (exact, so the bits do not depend on that choice);
// otherwise (decode) the tiles widen on the fly with one shift/AND per 16 weights and prefetch
// their panel streams ahead.
void run_panels(const MatmulIsa& isa, const float* x, int64_t m, int64_t ldx, const PackedMatrix& w,
                float* y, int64_t ldy, int64_t p0, int64_t p1) {
  const int64_t n = w.n(), k = w.k();
  const bool bf16 = w.store() == DType::BF16;
  const int64_t elem = bf16 ? 2 : 4;
  const int64_t w_stride = bf16 ? cdiv(k, 2) * 2 * kMatmulNR : k * kMatmulNR;  // elements
  const char* w_bytes = static_cast<const char*>(w.raw());
  const int mr = m <= isa.mr_small ? isa.mr_small : isa.mr;
  const int np = m <= isa.mr_small ? isa.np_small : isa.np;
  REWIND_CHECK(np <= kMaxNp);
  const int64_t kc = std::min(k, kKcMax);
  const int64_t mc = std::max<int64_t>(kMc / mr, 1) * mr;
  // Few row tiles per panel group: the weights are streamed from memory about once, so the call
  // is bandwidth-bound: stream prefetch on, BF16 widened on the fly. Many: the group is reused
  // from L2 by every tile (BF16 widened once into f32 scratch).
  const bool reused = cdiv(std::min(m, mc), mr) >= kMinRowTilesToReuse;
  const bool widen = bf16 && reused;
  const bool stream = !reused;
  if (bf16 && m <= isa.mr_small) {
    run_panels_bf16_decode(isa, x, m, ldx, w, y, ldy, p0, p1);
    return;
  }
  float* wide = widen ? wide_scratch(static_cast<size_t>(np * kc * kMatmulNR)) : nullptr;

  for (int64_t r_blk = 0; r_blk < m; r_blk += mc) {
    const int64_t r_end = std::min(m, r_blk + mc);
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const int64_t kb = std::min(kc, k - k0);
      const bool accumulate = k0 > 0;
      const int64_t lines_per_tile = cdiv(kb, 4);  // what one tile call can prefetch
      for (int64_t pg = p0; pg < p1; pg += np) {
        const int npg = static_cast<int>(std::min<int64_t>(np, p1 - pg));
        const int ncols = static_cast<int>(std::min<int64_t>(n - pg * kMatmulNR, npg * kMatmulNR));
        float* yb = y + pg * kMatmulNR;
        const char* wg = w_bytes + (pg * w_stride + k0 * kMatmulNR) * elem;  // group at k0
        // Prefetch range: the next group's slice, contiguous when the slice is all of K (its
        // panels are adjacent), else the slice of its first panel only.
        const char* pf = nullptr;
        int64_t pf_lines = 0;
        if (pg + np < p1) {
          pf = wg + np * w_stride * elem;
          const int64_t next_panels = kb == k ? std::min<int64_t>(np, p1 - pg - np) : 1;
          pf_lines = next_panels * kb * kMatmulNR * elem / 64;
        }
        const float* wf = reinterpret_cast<const float*>(wg);
        int64_t wf_stride = w_stride;
        if (widen) {
          isa.widen_bf16(reinterpret_cast<const uint16_t*>(wg), w_stride, kb, npg, wide);
          wf = wide;
          wf_stride = kb * kMatmulNR;
        }
        for (int64_t r0 = r_blk, t = 0; r0 < r_end; r0 += mr, ++t) {
          const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - r0));
          const int64_t first = t * lines_per_tile;
          const int64_t tile_pf_lines = std::clamp<int64_t>(pf_lines - first, 0, lines_per_tile);
          const char* tile_pf = tile_pf_lines > 0 ? pf + first * 64 : nullptr;
          if (bf16 && !widen) {
            isa.tile_bf16(x + r0 * ldx + k0, ldx, reinterpret_cast<const uint16_t*>(wg), w_stride,
                          kb, rows, npg, yb + r0 * ldy, ldy, ncols, accumulate, tile_pf,
                          tile_pf_lines, stream);
          } else {
            isa.tile_f32(x + r0 * ldx + k0, ldx, wf, wf_stride, kb, rows, npg, yb + r0 * ldy, ldy,
                         ncols, accumulate, tile_pf, tile_pf_lines, stream);
          }
        }
      }
    }
  }
}

// Quantised stores: every group of np panels is widened (exactly) K block by K block into f32
// scratch and the F32 micro-kernel runs on it, so the arithmetic is the F32 contract on the
// dequantised weights whatever M is. Decode (few rows) uses short K slices so the widened
// block stays in L1/L2; prefill longer ones, reused by every row tile.
void run_panels_quant(const MatmulIsa& isa, const float* x, int64_t m, int64_t ldx,
                      const PackedMatrix& w, float* y, int64_t ldy, int64_t p0, int64_t p1,
                      IsaCap cap) {
  const DType t = w.store();
  const int64_t n = w.n(), k = w.k();
  const int64_t bk = dtype_block_elems(t), pb = detail::quant_panel_block_bytes(t);
  const int64_t panel_stride = k / bk * pb;
  const std::byte* w_bytes = static_cast<const std::byte*>(w.raw());
  if (m <= detail::kQuantDecodeRows && detail::quant_decode_tiles_available(t, cap)) {
    // Decode: dequantise in registers, whole K per tile, no scratch.
    const int ncols =
        static_cast<int>(std::min<int64_t>(n - p0 * kMatmulNR, (p1 - p0) * kMatmulNR));
    detail::quant_decode_tiles(t, x, ldx, static_cast<int>(m), w_bytes + p0 * panel_stride,
                               panel_stride, k / bk, static_cast<int>(p1 - p0), y + p0 * kMatmulNR,
                               ldy, ncols, cap);
    return;
  }
  const int mr = m <= isa.mr_small ? isa.mr_small : isa.mr;
  const int np = m <= isa.mr_small ? isa.np_small : isa.np;
  const bool reused = cdiv(std::min(m, kMc), mr) >= kMinRowTilesToReuse;
  const int64_t kc = std::min(k, std::max(bk, (reused ? int64_t{1024} : int64_t{256}) / bk * bk));
  const int64_t mc = std::max<int64_t>(kMc / mr, 1) * mr;
  float* wide = wide_scratch(static_cast<size_t>(np * kc * kMatmulNR));
  for (int64_t r_blk = 0; r_blk < m; r_blk += mc) {
    const int64_t r_end = std::min(m, r_blk + mc);
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const int64_t kb = std::min(kc, k - k0);
      for (int64_t pg = p0; pg < p1; pg += np) {
        const int npg = static_cast<int>(std::min<int64_t>(np, p1 - pg));
        const int ncols = static_cast<int>(std::min<int64_t>(n - pg * kMatmulNR, npg * kMatmulNR));
        detail::widen_quant(t, w_bytes + pg * panel_stride, panel_stride, k0 / bk, kb / bk, npg,
                            wide, cap);
        for (int64_t r0 = r_blk; r0 < r_end; r0 += mr) {
          const int rows = static_cast<int>(std::min<int64_t>(mr, r_end - r0));
          isa.tile_f32(x + r0 * ldx + k0, ldx, wide, kb * kMatmulNR, kb, rows, npg,
                       y + r0 * ldy + pg * kMatmulNR, ldy, ncols, k0 > 0, nullptr, 0, false);
        }
      }
    }
  }
}

// Int8 dot: the activation rows, quantised once per call by the calling thread's pool, then each
// thread's panels against all rows.
void run_panels_int8(const detail::QuantizedActs& xa, const PackedMatrix& w, int64_t panel_stride,
                     float* y, int64_t ldy, int64_t p0, int64_t p1, const KernelOptions& ko) {
  const int64_t n = w.n();
  const int ncols = static_cast<int>(std::min<int64_t>(n - p0 * kMatmulNR, (p1 - p0) * kMatmulNR));
  detail::int8_dot_panels(w.store(), xa, 0, xa.m,
                          static_cast<const std::byte*>(w.raw()) + p0 * panel_stride, panel_stride,
                          static_cast<int>(p1 - p0), y + p0 * kMatmulNR, ldy, ncols, ko);
}

}  // namespace

QuantDot default_quant_dot() {
  static const QuantDot d =
      detail::int8_dot_simd_available(IsaCap::Amx) ? QuantDot::Int8 : QuantDot::F32;
  return d;
}

const char* quant_dot_name(QuantDot mode) {
  return mode == QuantDot::Int8 ? "int8" : "f32";
}

namespace {
constexpr const char* kIsaCapNames[] = {"scalar", "avx2", "avxvnni", "avx512",
                                        "amx"};                            // IsaCap's order
constexpr const char* kDecodeSplitNames[] = {"auto", "guided", "static"};  // DecodeSplit's order

// The enum value whose name in `names` (the enum's order) is `name`; false for any other name.
template <class E, size_t N>
bool parse_named(const char* const (&names)[N], const std::string& name, E* out) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}
}  // namespace

bool parse_isa_cap(const std::string& name, IsaCap* cap) {
  if (name == "auto") {
    *cap = IsaCap::Amx;
    return true;
  }
  return parse_named(kIsaCapNames, name, cap);
}

const char* isa_cap_name(IsaCap cap) {
  return kIsaCapNames[static_cast<int>(cap)];
}

bool isa_cap_supported(IsaCap cap) {
  switch (cap) {
    case IsaCap::Scalar:
      return true;
    case IsaCap::Avx2:
      return cpu_has_avx2();
    case IsaCap::AvxVnni:
      return detail::avxvnni_available();
    case IsaCap::Avx512:
      return cpu_has_avx512();
    case IsaCap::Amx:
      return true;  // everything the CPU has
  }
  return false;
}

bool matmul_int8_simd() {
  return detail::int8_dot_simd_available(IsaCap::Amx);
}
const char* matmul_int8_isa(IsaCap cap) {
  return detail::int8_dot_isa(cap);
}

bool matmul_amx_enabled(IsaCap cap) {
  return detail::amx_int8_enabled(cap);
}

const char* matmul_isa(IsaCap cap) {
  return isa_for(cap).name;
}

void PackedMatrix::set_kernel_options(const KernelOptions& opt) {
  opt_ = opt;
  for (auto& p : parts_) p.set_kernel_options(opt);
}

// ---- PackedMatrix ------------------------------------------------------------------------------

PackedMatrix PackedMatrix::pack(const void* src, DType src_type, int64_t n, int64_t k, DType store,
                                ThreadPool* pool) {
  if (dtype_is_quant(store)) {
    REWIND_CHECK_MSG(src_type == store, "matmul: a quantised store needs rows of its type");
    REWIND_CHECK(n >= 0 && k >= 0 && k % dtype_block_elems(store) == 0);
    PackedMatrix pm;
    pm.n_ = n;
    pm.k_ = k;
    pm.store_ = store;
    const int64_t n_panels = cdiv(n, kMatmulNR);
    const int64_t panel_bytes =
        k / dtype_block_elems(store) * detail::quant_panel_block_bytes(store);
    pm.data_.resize(static_cast<size_t>(n_panels * panel_bytes));
    const size_t row_bytes = dtype_row_bytes(store, k);
    auto pack_panels = [&](int, int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const std::byte* rows[kMatmulNR];
        const int nr = static_cast<int>(std::min<int64_t>(kMatmulNR, n - p * kMatmulNR));
        for (int j = 0; j < nr; ++j)
          rows[j] = static_cast<const std::byte*>(src) + (p * kMatmulNR + j) * row_bytes;
        detail::pack_quant_panel(store, rows, nr, k, pm.data_.data() + p * panel_bytes);
      }
    };
    if (pool)
      pool->parallel_for(n_panels, 1, pack_panels);
    else
      pack_panels(0, 0, n_panels);
    return pm;
  }
  REWIND_CHECK_MSG(src_type == DType::F32 || src_type == DType::BF16 || src_type == DType::F16,
                   "matmul: weights must be F32, BF16 or F16");
  REWIND_CHECK_MSG(store == DType::F32 || store == DType::BF16,
                   "matmul: store must be F32 or BF16");
  REWIND_CHECK(n >= 0 && k >= 0);
  REWIND_CHECK(src != nullptr || n * k == 0);
  PackedMatrix pm;
  pm.n_ = n;
  pm.k_ = k;
  pm.store_ = store;
  const int64_t n_panels = cdiv(n, kMatmulNR);
  if (n_panels == 0 || k == 0) {
    return pm;
  }
  const bool bf16 = store == DType::BF16;
  const int64_t panel_elems = bf16 ? cdiv(k, 2) * 2 * kMatmulNR : k * kMatmulNR;
  pm.data_.resize(static_cast<size_t>(n_panels * panel_elems) * (bf16 ? 2 : 4));  // zero-filled
  const size_t src_elem = dtype_size(src_type);
  // One panel at a time: its 16 source rows are converted to f32 (or, BF16 -> BF16, copied raw)
  // into a scratch block, then written out sequentially in the panel layout.
  auto pack_panels = [&](int, int64_t pb, int64_t pe) {
    std::vector<float> rows(static_cast<size_t>(kMatmulNR * k));  // [16, k] f32
    std::vector<uint16_t> rows16;                                 // [16, k] raw bf16
    const bool raw_bf16 = bf16 && src_type == DType::BF16;        // keep the bits as they are
    if (raw_bf16) rows16.resize(static_cast<size_t>(kMatmulNR * k));
    for (int64_t p = pb; p < pe; ++p) {
      const int64_t nr = std::min<int64_t>(kMatmulNR, n - p * kMatmulNR);
      for (int64_t j = 0; j < kMatmulNR; ++j) {
        const char* src_row = static_cast<const char*>(src) + (p * kMatmulNR + j) * k * src_elem;
        if (raw_bf16) {
          if (j < nr)
            std::memcpy(&rows16[j * k], src_row, static_cast<size_t>(k) * 2);
          else
            std::fill(&rows16[j * k], &rows16[j * k] + k, uint16_t{0});
        } else {
          if (j < nr)
            convert_to_f32(src_row, src_type, static_cast<size_t>(k), &rows[j * k]);
          else
            std::fill(&rows[j * k], &rows[j * k] + k, 0.0f);
        }
      }
      if (!bf16) {
        float* dst = reinterpret_cast<float*>(pm.data_.data()) + p * panel_elems;  // [k][16]
        for (int64_t c = 0; c < k; ++c)
          for (int64_t j = 0; j < kMatmulNR; ++j) dst[c * kMatmulNR + j] = rows[j * k + c];
      } else {
        uint16_t* dst =
            reinterpret_cast<uint16_t*>(pm.data_.data()) + p * panel_elems;  // [k/2][16][2]
        for (int64_t c = 0; c < k; ++c) {
          uint16_t* d = dst + (c / 2) * 2 * kMatmulNR + (c % 2);
          for (int64_t j = 0; j < kMatmulNR; ++j)
            d[2 * j] = raw_bf16 ? rows16[j * k + c] : f32_to_bf16(rows[j * k + c]);
        }
      }
    }
  };
  if (pool) {
    pool->parallel_for(n_panels, 1, pack_panels);
  } else {
    pack_panels(0, 0, n_panels);
  }
  return pm;
}

size_t PackedMatrix::bytes() const {
  size_t b = data_.size();
  for (auto& p : parts_) b += p.bytes();
  return b;
}

PackedMatrix PackedMatrix::stack(std::vector<PackedMatrix> parts) {
  REWIND_CHECK(!parts.empty());
  PackedMatrix pm;
  pm.k_ = parts[0].k();
  pm.store_ = parts[0].store();
  for (auto& p : parts) {
    REWIND_CHECK(p.k() == pm.k_ && p.k_perm().empty() && p.parts().empty() && p.n() > 0);
    pm.n_ += p.n();
  }
  pm.opt_ = parts[0].kernel_options();
  pm.parts_ = std::move(parts);
  return pm;
}

void PackedMatrix::set_k_perm(std::vector<int32_t> perm) {
  REWIND_CHECK(static_cast<int64_t>(perm.size()) == k_);
  std::vector<int32_t> inv(perm.size(), -1);
  for (size_t j = 0; j < perm.size(); ++j) {
    REWIND_CHECK(perm[j] >= 0 && perm[j] < k_ && inv[perm[j]] < 0);
    inv[perm[j]] = static_cast<int32_t>(j);
  }
  k_perm_ = std::move(perm);
  k_inv_ = std::move(inv);
}

float PackedMatrix::at(int64_t r, int64_t c) const {
  REWIND_CHECK(r >= 0 && r < n_ && c >= 0 && c < k_);
  if (!k_inv_.empty()) c = k_inv_[c];
  for (auto& p : parts_) {
    if (r < p.n()) return p.at(r, c);
    r -= p.n();
  }
  const int64_t p = r / kMatmulNR, j = r % kMatmulNR;
  if (dtype_is_quant(store_)) {
    const int64_t bk = dtype_block_elems(store_), pb = detail::quant_panel_block_bytes(store_);
    float blk[256 * kMatmulNR];
    detail::widen_quant(store_, data_.data() + p * (k_ / bk * pb), k_ / bk * pb, c / bk, 1, 1, blk,
                        opt_.isa);
    return blk[(c % bk) * kMatmulNR + j];
  }
  if (store_ == DType::F32) {
    return reinterpret_cast<const float*>(data_.data())[(p * k_ + c) * kMatmulNR + j];
  }
  const int64_t k2 = cdiv(k_, 2);
  return bf16_to_f32(reinterpret_cast<const uint16_t*>(
      data_.data())[(p * k2 + c / 2) * 2 * kMatmulNR + 2 * j + (c % 2)]);
}

// ---- matmul ----------------------------------------------------------------------------------

namespace {

// Decode matrices of at most this many weight bytes a thread take the static split (Auto).
constexpr size_t kDecodeStaticShareBytes = size_t{8} << 20;

// Rows of a decode step (one per sequence of a batch) whose matmuls stream the weights once.
constexpr int64_t kDecodeRows = 8;

// Whether a decode matmul of w_bytes of weights takes one static share per thread.
bool static_shares(DecodeSplit split, int64_t m, size_t w_bytes, int threads) {
  return m <= kDecodeRows && (split == DecodeSplit::Static ||
                              (split == DecodeSplit::Auto &&
                               w_bytes <= kDecodeStaticShareBytes * static_cast<size_t>(threads)));
}

// Threads split the output columns on panel boundaries, never K. Prefill and the larger decode
// matrices go in chunks handed out to whichever thread is free (guided: big chunks first, then
// smaller ones), so a thread slowed by other work waits for at most a small chunk at the end.
// Decode matrices (M <= kDecodeRows) of at most kDecodeStaticShareBytes a thread take one
// contiguous share per thread instead: each chunk costs its panel streams a ramp-up from memory,
// and a small matrix's guided chunks are small. Prefill chunks are whole panel groups (`group`
// panels, which every row tile of a row block reads). Every output's sum is the same whichever
// thread computes it and wherever the chunk boundaries fall (the matmul tests run 1-3 threads and
// every split). A matmul of fewer multiply-adds (m n k) than the pool's min_parallel_work runs on
// the calling thread.
void split_columns(ThreadPool* pool, DecodeSplit split, int64_t m, int64_t n, int64_t k,
                   int64_t group, size_t w_bytes,
                   const std::function<void(int, int64_t, int64_t)>& fn) {
  const int64_t work = m * n * k;
  if (!pool) {
    fn(0, 0, n);
  } else if (static_shares(split, m, w_bytes, pool->n_threads())) {
    pool->parallel_for(n, kMatmulNR, fn, work);
  } else if (m <= 16) {
    pool->parallel_guided(n, kMatmulNR, 4 * kMatmulNR, fn, work);
  } else {
    const int64_t grain = group * kMatmulNR;
    pool->parallel_guided(n, grain, cdiv(4, group) * grain, fn, work);
  }
}

// The int8 dot of quantised activation rows against w, the threads splitting the columns.
void run_int8(const detail::QuantizedActs& xa, const PackedMatrix& w, float* y, int64_t ldy,
              ThreadPool* pool, const KernelOptions& ko) {
  const int64_t panel_stride =
      w.k() / dtype_block_elems(w.store()) * detail::quant_panel_block_bytes(w.store());
  const int64_t group = detail::int8_prefill_group_panels(w.store(), panel_stride, xa.m, ko.isa);
  auto cols = [&](int, int64_t c0, int64_t c1) {
    run_panels_int8(xa, w, panel_stride, y, ldy, c0 / kMatmulNR, cdiv(c1, kMatmulNR), ko);
  };
  split_columns(pool, ko.decode_split, xa.m, w.n(), w.k(), group, w.bytes(), cols);
}
}  // namespace

void matmul(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
            ThreadPool* pool) {
  matmul(x, m, ldx, w, y, ldy, pool, w.kernel_options());
}

void matmul(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
            ThreadPool* pool, const KernelOptions& ko) {
  const int64_t n = w.n(), k = w.k();
  REWIND_CHECK(m >= 0 && ldx >= k && ldy >= n);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // every accumulator stays +0.0f
    for (int64_t r = 0; r < m; ++r) std::fill(y + r * ldy, y + r * ldy + n, 0.0f);
    return;
  }
  const MatmulIsa& isa = isa_for(ko.isa);
  if (!w.k_perm().empty()) {  // gather x into the stored column order
    thread_local AlignedBuffer<float> xp;
    xp.reserve_at_least(static_cast<size_t>(m * k));
    const int32_t* perm = w.k_perm().data();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) xp.data()[r * k + j] = x[r * ldx + perm[j]];
    x = xp.data();
    ldx = k;
  }
  if (!w.parts().empty()) {  // a stack: each part into its own output columns
    int64_t off = 0;
    for (auto& p : w.parts()) {
      matmul(x, m, ldx, p, y + off, ldy, pool, ko);
      off += p.n();
    }
    return;
  }
  const bool quant = w.quantised();
  if (quant && ko.quant_dot == QuantDot::Int8) {
    // The calling thread's buffer; the workers get its address (naming a thread_local inside
    // the lambda would give each worker its own, empty one).
    thread_local detail::QuantizedActs acts;
    detail::quantize_acts(w.store(), x, m, ldx, k, &acts, pool, ko.isa);
    run_int8(acts, w, y, ldy, pool, ko);
    return;
  }
  auto work = [&](int, int64_t c0, int64_t c1) {
    if (quant) {
      run_panels_quant(isa, x, m, ldx, w, y, ldy, c0 / kMatmulNR, cdiv(c1, kMatmulNR), ko.isa);
    } else {
      run_panels(isa, x, m, ldx, w, y, ldy, c0 / kMatmulNR, cdiv(c1, kMatmulNR));
    }
  };
  split_columns(pool, ko.decode_split, m, n, k, isa.np, w.bytes(), work);
}

void matmul_fill(const RowFill& fill, int64_t m, const PackedMatrix& w, float* y, int64_t ldy,
                 ThreadPool* pool, float* spare, int64_t ld_spare) {
  const int64_t n = w.n(), k = w.k();
  REWIND_CHECK(m >= 0 && ldy >= n && (!spare || ld_spare >= k));
  if (m == 0) return;
  if (n > 0 && k > 0 && w.quantised() && w.parts().empty() && w.k_perm().empty() &&
      w.kernel_options().quant_dot == QuantDot::Int8) {
    thread_local detail::QuantizedActs acts;  // the calling thread's, as in matmul
    detail::quantize_acts_fill(w.store(), fill, m, k, &acts, pool, w.kernel_options().isa);
    run_int8(acts, w, y, ldy, pool, w.kernel_options());
    return;
  }
  thread_local AlignedBuffer<float> rows;
  if (!spare) {
    rows.reserve_at_least(static_cast<size_t>(m * k));
    spare = rows.data();
    ld_spare = k;
  }
  auto make = [&](int, int64_t r0, int64_t r1) { fill(r0, r1, spare + r0 * ld_spare, ld_spare); };
  if (pool && m > 1)
    pool->parallel_guided(m, 1, 4, make, 4 * m * k);  // a row's fill: a norm or an activation
  else
    make(0, 0, m);
  matmul(spare, m, ld_spare, w, y, ldy, pool);
}

void matmul_naive(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y,
                  int64_t ldy) {
  const int64_t n = w.n(), k = w.k();
  std::vector<float> wt(static_cast<size_t>(n * k));  // [n, k] f32, unpacked
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) wt[r * k + c] = w.at(r, c);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c)
        acc += static_cast<double>(x[i * ldx + c]) * static_cast<double>(wt[r * k + c]);
      y[i * ldy + r] = static_cast<float>(acc);
    }
  }
}

bool parse_decode_split(const std::string& name, DecodeSplit* split) {
  return parse_named(kDecodeSplitNames, name, split);
}

const char* decode_split_name(DecodeSplit split) {
  return kDecodeSplitNames[static_cast<int>(split)];
}

}  // namespace rw
