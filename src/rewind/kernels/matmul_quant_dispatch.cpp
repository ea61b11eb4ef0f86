// The quantised matmul's dispatch: which path (AMX, AVX-512 VNNI, AVX-VNNI, AVX2, scalar) runs
// each kernel on this CPU, the activation quantisation, and the decode / prefill drivers of the
// int8 dot. The kernels are in matmul_quant_{scalar,avx2,avxvnni,avx512,amx}.cpp, packing in
// matmul_quant_pack.cpp.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>

#include "rewind/base/check.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/isa_cap.h"
#include "rewind/kernels/matmul_quant_internal.h"

namespace rw::detail {

namespace {

bool use_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
}

bool use_vnni() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return use_avx512() && __builtin_cpu_supports("avx512vnni");
  }();
  return yes;
}

bool use_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return yes;
}

// AVX-512 present and allowed by the cap.
bool avx512_allowed(IsaCap cap) {
  return use_avx512() && cap >= IsaCap::Avx512;
}
// AVX2 (with FMA and F16C) present and allowed by the cap.
bool avx2_allowed(IsaCap cap) {
  return use_avx2() && cap >= IsaCap::Avx2;
}

// Values per activation block of the int8 dot (kQuantTraits; 1 for a type that is not quantised,
// which prepare_acts refuses).
int64_t act_block(DType t) {
  return dtype_is_quant(t) ? quant_traits(t).act_block : 1;
}

// Every quantised format has the widen, the AVX-512 decode tiles and the VNNI and AVX2 int8 tiles:
// the paths below pick among them by the machine alone.
static_assert(
    [] {
      for (const QuantTraits& q : kQuantTraits)
        if ((q.kernels & kQkEvery) != kQkEvery) return false;
      return true;
    }(),
    "a quantised format without the widen, decode, VNNI or AVX2 kernels");

}  // namespace

thread_local int t_amx_config = 0;

// AVX-VNNI (VEX-encoded vpdpbusd on ymm) beside AVX2: CPUID leaf 7 subleaf 1, EAX bit 4 (read
// directly: not every compiler's __builtin_cpu_supports knows "avxvnni"). use_avx2 has already
// checked that the OS saves the ymm state.
bool avxvnni_available() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return use_avx2() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && ((eax >> 4) & 1u);
  }();
  return yes;
}

bool amx_int8_available() {
  static const bool yes = [] {
#if defined(__linux__) && defined(__x86_64__)
    if (!use_vnni()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    if (!tile || !int8) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return yes;
}

bool amx_int8_enabled(IsaCap cap) {
  return cap >= IsaCap::Amx && amx_int8_available();
}

namespace {
// AvxVnni runs the AVX2 path's tile shapes, expansions and quantiser with its own dot products.
enum class Int8Path { Vnni, AvxVnni, Avx2, Scalar };
Int8Path int8_path(IsaCap cap) {
  if (use_vnni() && cap >= IsaCap::Avx512) return Int8Path::Vnni;
  if (avxvnni_available() && cap >= IsaCap::AvxVnni) return Int8Path::AvxVnni;
  if (avx2_allowed(cap)) return Int8Path::Avx2;
  return Int8Path::Scalar;
}
}  // namespace

bool quant_decode_tiles_available(DType t, IsaCap cap) {
  return avx512_allowed(cap) && quant_has_kernel(t, kQkDecodeF32);
}

void quant_decode_tiles(DType t, const float* x, int64_t ldx, int rows, const std::byte* panels,
                        int64_t panel_stride, int64_t nb, int np, float* y, int64_t ldy, int ncols,
                        IsaCap cap) {
  REWIND_CHECK(rows >= 1 && rows <= kQuantDecodeRows && quant_decode_tiles_available(t, cap));
  for (int p0 = 0; p0 < np; p0 += kQuantDecodePanels) {
    const int npg = std::min(kQuantDecodePanels, np - p0);
    kDecodeTiles[rows - 1][npg - 1](t, x, ldx, panels + p0 * panel_stride, panel_stride, nb,
                                    y + 16 * p0, ldy, ncols - 16 * p0);
  }
}

void widen_quant(DType t, const std::byte* panels, int64_t panel_stride, int64_t b0, int64_t nb,
                 int np, float* out, IsaCap cap) {
  const WidenFn f = avx512_allowed(cap) ? widen_fn_avx512(t) : widen_fn_scalar(t);
  REWIND_CHECK_MSG(f, "widen_quant: not a quantised store");
  const int64_t bk = dtype_block_elems(t), pb = quant_panel_block_bytes(t);
  const int64_t kc = nb * bk;
  for (int p = 0; p < np; ++p) {
    const std::byte* src = panels + p * panel_stride + b0 * pb;
    float* dst = out + p * kc * kNR;
    for (int64_t b = 0; b < nb; ++b) f(src + b * pb, dst + b * bk * kNR, kNR);
  }
}

// ---- int8 dot ---------------------------------------------------------------------------------

namespace {

// Sizes out's buffers for m rows of k; returns the activation block.
int64_t prepare_acts(DType t, int64_t m, int64_t k, QuantizedActs* out) {
  const int64_t block = act_block(t);
  REWIND_CHECK_MSG(dtype_is_quant(t) && k % block == 0 && m >= 0, "quantize_acts: bad shape");
  out->m = m;
  out->k = k;
  out->block = block;
  out->q.reserve_at_least(static_cast<size_t>(m * k));
  out->d.reserve_at_least(static_cast<size_t>(m * (k / block)));
  out->s16.reserve_at_least(static_cast<size_t>(m * (k / 16)));
  out->s32.reserve_at_least(static_cast<size_t>(m * (k / 32)));
  return block;
}

// Row r of *out from the k values at xr.
void quantize_act_row(const float* xr, int64_t r, QuantizedActs* out, IsaCap cap) {
  const int64_t k = out->k, block = out->block;
  int8_t* q = out->q.data() + r * k;
  float* d = out->d.data() + r * (k / block);
  int32_t* s16 = out->s16.data() + r * (k / 16);
  int16_t* s32 = out->s32.data() + r * (k / 32);
  if (avx512_allowed(cap)) {
    quantize_row_avx512(xr, k, static_cast<int>(block), q, d, s16);
  } else {
    const auto quantize_block = avx2_allowed(cap) ? quantize_block_avx2 : quantize_block_scalar;
    for (int64_t b = 0; b < k / block; ++b)
      quantize_block(xr + b * block, static_cast<int>(block), q + b * block, d + b);
    sums16_scalar(q, 0, k, s16);
  }
  for (int64_t i = 0; i < k / 32; ++i) s32[i] = static_cast<int16_t>(s16[2 * i] + s16[2 * i + 1]);
}

// Rows [0, m) by rows(r0, r1), on the pool when there is enough work to share, in chunks of at
// least 4 rows handed out to whichever thread is free (see split_columns in matmul.cpp).
void act_rows(ThreadPool* pool, int64_t m, int64_t k,
              const std::function<void(int64_t, int64_t)>& rows) {
  if (pool && m > 1 && m * k >= (int64_t{1} << 16))
    pool->parallel_guided(m, 1, 4, [&](int, int64_t r0, int64_t r1) { rows(r0, r1); });
  else
    rows(0, m);
}

}  // namespace

void quantize_acts(DType t, const float* x, int64_t m, int64_t ldx, int64_t k, QuantizedActs* out,
                   ThreadPool* pool, IsaCap cap) {
  REWIND_CHECK_MSG(ldx >= k, "quantize_acts: bad shape");
  prepare_acts(t, m, k, out);
  act_rows(pool, m, k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) quantize_act_row(x + r * ldx, r, out, cap);
  });
}

void quantize_acts_fill(DType t, const RowFill& fill, int64_t m, int64_t k, QuantizedActs* out,
                        ThreadPool* pool, IsaCap cap) {
  prepare_acts(t, m, k, out);
  // Rows made per fill call: as many as fit 16 KiB (at least one, at most 16), so that they are
  // still in L1 when quantised.
  const int64_t chunk = std::clamp<int64_t>(16384 / (4 * k), 1, 16);
  act_rows(pool, m, k, [&](int64_t r0, int64_t r1) {
    thread_local AlignedBuffer<float> buf;
    buf.reserve_at_least(static_cast<size_t>(chunk * k));
    for (int64_t r = r0; r < r1; r += chunk) {
      const int64_t e = std::min(r1, r + chunk);
      fill(r, e, buf.data(), k);
      for (int64_t i = r; i < e; ++i) quantize_act_row(buf.data() + (i - r) * k, i, out, cap);
    }
  });
}

bool int8_dot_simd_available(IsaCap cap) {
  return int8_path(cap) != Int8Path::Scalar;
}

const char* int8_dot_isa(IsaCap cap) {
  switch (int8_path(cap)) {
    case Int8Path::Vnni:
      return "avx512vnni";
    case Int8Path::AvxVnni:
      return "avxvnni";
    case Int8Path::Avx2:
      return "avx2";
    default:
      return "scalar";
  }
}
namespace {
// The AMX tiles serve the prefill of the types with them (Q8_0, Q4_K, Q5_K, Q6_K), on 16 rows or
// more.
bool uses_amx(DType t, int64_t rows, IsaCap cap) {
  return int8_path(cap) == Int8Path::Vnni && quant_has_kernel(t, kQkAmxPrefill) &&
         amx_int8_enabled(cap) && rows >= 16;
}

// Panel streams per VNNI decode tile (1-2 rows). Q4_K, Q5_K and Q6_K take 2 (their weights
// arrive from memory faster in two streams), the others 4.
constexpr int vnni_decode_panels(DType t) {
  return quant_traits(t).vnni_decode_panels;
}
static_assert(
    [] {
      for (const QuantTraits& q : kQuantTraits)
        if (q.vnni_decode_panels < 1 || q.vnni_decode_panels > kInt8MaxP ||
            q.vnni_prefill_rows < 1 || q.vnni_prefill_rows > kInt8MaxR ||
            q.vnni_prefill_panels < 1 || q.vnni_prefill_panels > kInt8MaxP)
          return false;
      return true;
    }(),
    "kQuantTraits' VNNI tile shapes within kInt8Tiles");

// AMD family 26 and later (Zen 5): CPUID's vendor and display family.
bool amd_zen5_or_later() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
    if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned base = (eax >> 8) & 0xfu, ext = (eax >> 20) & 0xffu;
    return (base == 0xfu ? base + ext : base) >= 26;
  }();
  return yes;
}

// The streams this host's decode tiles take: on Zen 5, Q6_K's and IQ4_XS's weights arrive
// faster in one stream (docs/PERFORMANCE.md, "Decode panel streams on Zen 5").
int host_decode_panels(DType t) {
  if ((t == DType::Q6_K || t == DType::IQ4_XS) && amd_zen5_or_later()) return 1;
  return vnni_decode_panels(t);
}

// What a prefill does to a panel group once per row block before its row tiles run: fn writes
// nb blocks of block_bytes each (null: the tiles read the packed panels), and the tiles of type
// `tile` run on them with the `bytes` flag (Int8TileFn). Every expansion keeps the integers, so
// the bits are those of the packed panels.
struct PrefillExpansion {
  void (*fn)(const std::byte* src, int64_t nb, std::byte* dst) = nullptr;
  int64_t block_bytes = 0;
  DType tile;
  bool bytes = false;
};
// Rows below which the VNNI tiles take Q4_K's packed nibbles (split in registers, as in decode)
// rather than expanding each panel group's codes to bytes once per row block: a routed expert's
// few tens of rows do not repay the expansion (AVX-512 VNNI, one thread, K 1536 and 512: 4-8%
// faster at 24-192 rows, level at 256, 2-8% slower at 512; docs/PERFORMANCE.md).
constexpr int64_t kQ4KExpandRows = 256;

PrefillExpansion prefill_expansion(DType t, bool avx2, bool amx, int64_t rows) {
  switch (t) {
    // Q6_K: the 6-bit codes as bytes, read by every row tile (taller row blocks spread the cost;
    // not on AMX, whose tiles expand their own).
    case DType::Q6_K:
      if (amx) break;
      return {avx2 ? expand_q6_k_avx2 : expand_q6_k, kQ6KBytesBlock, DType::Q6_K, true};
    // Q3_K on AVX2: its Q6_K transcoding's bytes; on the VNNI tiles q * sc + 124 per value
    // (expand_q3_k_scaled: no multiply per sub-block).
    case DType::Q3_K:
      if (avx2) return {expand_q3_k_avx2, kQ6KBytesBlock, DType::Q6_K, true};
      return {expand_q3_k_scaled, kQ3KScaledBlock, DType::Q3_K, true};
    // IQ4_NL: the codes looked up into Q8_0's int8 values, run by the Q8_0 tiles (its own tile,
    // with the lookups in the loop, serves decode).
    case DType::IQ4_NL:
      return {expand_iq4_nl_avx2, quant_panel_block_bytes(DType::Q8_0), DType::Q8_0, false};
    // Q5_0 on the VNNI tiles: as IQ4_NL, its values c - 16 as Q8_0's codes (AVX2 runs its own).
    case DType::Q5_0:
      if (avx2) break;
      return {expand_nibble_bytes<DType::Q5_0, 16>, quant_panel_block_bytes(DType::Q8_0),
              DType::Q8_0, false};
    // On the VNNI tiles: Q4_K / Q5_K's codes as bytes (not on AMX, whose tiles expand their own;
    // Q4_K from kQ4KExpandRows rows),
    // IQ4_XS's as their u8 operands value + 128, Q2_K's as q * sc.
    case DType::Q4_K:
    case DType::Q5_K:
      if (avx2 || amx || (t == DType::Q4_K && rows < kQ4KExpandRows)) break;
      return {t == DType::Q5_K ? expand_q5_k_bytes : expand_q4_k_bytes, kKBytesBlock, t, true};
    case DType::IQ4_XS:
      if (avx2) break;
      return {expand_iq4_xs_bytes, kIQ4XSBytesBlock, t, true};
    case DType::Q2_K:
      if (avx2) break;
      return {expand_q2_k_bytes, kQ2KBytesBlock, t, true};
    // Q4_1 / Q5_1: the codes as bytes in Q8_0's groups (Q5_1's fifth bit merged in once).
    case DType::Q4_1:
      if (avx2) break;
      return {expand_nibble_bytes<DType::Q4_1, 0>, kMinBytesBlock, t, true};
    case DType::Q5_1:
      if (avx2) break;
      return {expand_nibble_bytes<DType::Q5_1, 0>, kMinBytesBlock, t, true};
    default:
      break;
  }
  return {nullptr, 0, t, false};
}
}  // namespace

int int8_prefill_group_panels(DType t, int64_t panel_stride, int64_t rows, IsaCap cap) {
  if (int8_path(cap) != Int8Path::Vnni) return 1;  // AVX2, AVX-VNNI: 4-row tiles of one panel
  // AMX: groups of up to 256 KiB of panels (2 to 16 panels): a row tile's activation codes stay
  // in L1 while it runs through the group's panels from L2. The rows left over take the VNNI
  // tiles on panel pairs.
  constexpr int64_t kAmxGroupBytes = 256 * 1024;
  if (uses_amx(t, rows, cap))
    return static_cast<int>(std::clamp<int64_t>(kAmxGroupBytes / panel_stride, 2, 16));
  // The tiles with one integer sum per output (Q8_0's, which IQ4_NL and Q5_0 run on their
  // expanded blocks, and Q4_1 / Q5_1's on bytes) take 3 panels, the others 2 (kQuantTraits).
  return quant_traits(t).vnni_prefill_panels;
}

void int8_dot_panels(DType t, const QuantizedActs& xa, int64_t r0, int64_t r1,
                     const std::byte* panels, int64_t panel_stride, int np, float* y, int64_t ldy,
                     int ncols, const KernelOptions& opt) {
  REWIND_CHECK(r0 >= 0 && r1 <= xa.m && r0 <= r1 && act_block(t) == xa.block);
  REWIND_CHECK_MSG(opt.decode_panels >= 0 && opt.decode_panels <= kInt8MaxP,
                   "decode panels: 0 (each type's own) to 4");
  if (r0 == r1 || np <= 0) return;
  const Int8Path path = int8_path(opt.isa);
  if (path == Int8Path::Scalar) {
    for (int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < ncols; ++c)
        y[(r - r0) * ldy + c] =
            int8_dot_reference(t, xa, r, panels + (c / kNR) * panel_stride, c % kNR);
    return;
  }
  const bool avx2 = path == Int8Path::Avx2 || path == Int8Path::AvxVnni;  // 256-bit tiles
  const auto& tiles = path == Int8Path::AvxVnni ? kInt8TilesAvxVnni
                      : avx2                    ? kInt8TilesAvx2
                                                : kInt8Tiles;
  const int64_t rows = r1 - r0;
  if (rows <= kInt8BatchRows) {
    // The type's own count, or the forced one (at most the path's own most).
    const int forced = opt.decode_panels;
    const int max_p = avx2 ? (forced ? std::min(forced, kAvx2MaxP) : kAvx2MaxP)
                           : (forced ? forced : host_decode_panels(t));
    // Decode: the panels are cut into max_p contiguous runs of q panels, and tile i reads
    // panel i of every run: each of the tile's streams walks its own run from start to end, so
    // its prefetch (a fixed distance ahead) runs on into its next panel instead of into a
    // stream already loaded, and only the first panel of each run starts cold.
    // A few rows (batched decode), all on the packed panels (no expansion to amortise), each
    // weight from memory once for all the rows. 5-8 rows of Q4_K or Q6_K (VNNI): one tile of
    // all the rows per panel, panels in order (one linear stream, prefetched ahead), so each
    // code group is built once; two tiles of up to 4 rows built them twice (Q6_K's codes take
    // several operations per group).
    if (!avx2 && rows > 4 && has_tall_tile(t)) {
      for (int p = 0; p < np; ++p)
        kInt8TallTiles[rows - 5](t, xa, r0, panels + p * panel_stride, panel_stride, y + 16 * p,
                                 ldy, ncols - 16 * p, 16, false, nullptr, 1);
      return;
    }
    // The others: row tiles of up to 4 rows one after the other on a panel group while it is
    // in L1.
    const int q = (np + max_p - 1) / max_p;
    const int n_tiles = static_cast<int>((rows + 3) / 4);
    for (int i = 0; i < q; ++i) {
      int npg = 0;
      while (npg < max_p && i + npg * q < np) ++npg;
      for (int j = 0, rb = 0; j < n_tiles; ++j) {
        const int re = static_cast<int>(rows * (j + 1) / n_tiles);  // even heights
        tiles[re - rb - 1][npg - 1](t, xa, r0 + rb, panels + i * panel_stride, q * panel_stride,
                                    y + rb * ldy + 16 * i, ldy, ncols - 16 * i, int64_t{16} * q,
                                    false, nullptr, 1);
        rb = re;
      }
    }
    return;
  }
  // Prefill: a group of kP panels (whole K, from L1/L2) serves every kR-row tile of a row block.
  // Q8_0 keeps one integer accumulator per output, Q4_K / Q5_K / Q6_K two (sub-block and block), so
  // Q8_0 affords 4 rows x 3 panels in the 32 vector registers (fewer activation broadcasts per
  // vpdpbusd than 6 x 2); Q4_0 keeps 6 x 2 (its nibble splits grow with the panels).
  // AVX2 (16 registers): 4-row tiles of one panel. AMX: groups of many panels (below).
  // Q8_0, Q4_K, Q5_K and Q6_K on AMX: 16-row tiles (the rows left over take the VNNI tiles: the
  // same bits); Q4_K's nibbles times its sub-block scales' two parts, Q6_K's codes times its
  // scales' three digits, and Q5_K's 5-bit codes are expanded to bytes once per panel group and
  // row block.
  const bool amx = uses_amx(t, r1 - r0, opt.isa);
  const int kP = int8_prefill_group_panels(t, panel_stride, r1 - r0, opt.isa);
  const int kVnniP = amx ? 2 : kP;  // panels per VNNI / AVX2 tile
  const int kR = avx2 ? 4 : quant_traits(t).vnni_prefill_rows;
  const bool amx_q4 = amx && t != DType::Q8_0;  // the AMX tiles on codes expanded per group
  const PrefillExpansion ex = prefill_expansion(t, avx2, amx, r1 - r0);
  // A multiple of the tile height (126 and 510 for 6-row tiles, 128 and 512 for 4-row ones, 128
  // for the 16-row AMX tiles), so that no row block ends in a short tile. Q4_K / Q5_K / Q6_K on AMX
  // expand each panel group's codes once per row block, so their row blocks are as tall as keeps
  // the block's activation codes within 2 MiB (512 rows up to K 4096, 128 to 512), spreading the
  // expansion's cost: a 512-token chunk's rows in one block below K 4096.
  constexpr int64_t kMc_bytes = 2048 * 1024;
  const int64_t kMc = amx_q4 ? std::clamp<int64_t>(kMc_bytes / xa.k / 16 * 16, 128, 512)
                      : amx  ? 128
                             : (ex.fn ? 512 : 128) / kR * kR;
  const int64_t nb = xa.k / xa.block;
  // The panel group's blocks as ex.fn lays them out.
  thread_local AlignedBuffer<std::byte> expanded;
  if (ex.fn) expanded.reserve_at_least(static_cast<size_t>(kP * nb * ex.block_bytes));
  thread_local AlignedBuffer<int8_t> q4;
  // Q4_K and Q6_K on AMX: the sub-block scales in the tiles (int8_tile_amx_q4_k64, _q6_k); Q5_K's
  // codes (up to 31) times a scale part would pass int8, so it keeps the per-sub-block tiles.
  const bool amx_q6 = amx && t == DType::Q6_K;
  const bool amx_k64 = amx && (t == DType::Q4_K || amx_q6);
  // Bytes of the AMX tiles' expanded codes per block.
  const int64_t amx_block_bytes = amx_q6    ? kAmxQ6KPartsBlock
                                  : amx_k64 ? kAmxQ4KScaledBlock
                                            : kKBytesCodes;
  if (amx) {
    if (amx_k64)
      amx_configure_k64();
    else
      amx_configure_k32();
  }
  if (amx_q4) q4.reserve_at_least(static_cast<size_t>(kP * nb * amx_block_bytes));
  for (int64_t rb = r0; rb < r1; rb += kMc) {
    const int64_t re = std::min(r1, rb + kMc);
    for (int p0 = 0; p0 < np; p0 += kP) {
      const int npg = std::min(kP, np - p0);
      const std::byte* src = panels + p0 * panel_stride;
      int64_t stride = panel_stride;
      if (ex.fn) {
        for (int p = 0; p < npg; ++p)
          ex.fn(panels + (p0 + p) * panel_stride, nb, expanded.data() + p * nb * ex.block_bytes);
        src = expanded.data();
        stride = nb * ex.block_bytes;
      }
      // The next panel group (or the first one again for the next row block) streams into the
      // cache over this group's row tiles, so the first tile of a group does not wait for its
      // panels from memory.
      const int pn = p0 + kP < np ? p0 + kP : 0;
      const std::byte* next_group = panels + pn * panel_stride;
      const int64_t next_bytes = p0 + kP < np || re < r1 ? std::min(kP, np - pn) * panel_stride : 0;
      int64_t r = rb;
      if (amx && re - r >= 16) {
        if (amx_q6)  // the group's panels are contiguous: its blocks in one run
          expand_q6_k_parts(panels + p0 * panel_stride, npg * nb, q4.data());
        else if (amx_k64)
          expand_q4_k_scaled(panels + p0 * panel_stride, npg * nb, q4.data());
        else if (amx_q4)
          for (int p = 0; p < npg; ++p)
            expand_q4_k_codes(panels + (p0 + p) * panel_stride, nb, t == DType::Q5_K,
                              q4.data() + p * nb * kKBytesCodes);
        const int64_t steps = (re - r) / 16 * npg * (xa.k / 32);
        PrefetchStream pf(next_group, next_bytes, steps);
        for (; r + 16 <= re; r += 16) {
          float* yr = y + (r - r0) * ldy + 16 * p0;
          if (amx_q6)
            int8_tile_amx_q6_k(xa, r, src, stride, q4.data(), nb * amx_block_bytes, npg, yr, ldy,
                               ncols - 16 * p0, pf);
          else if (amx_k64)
            int8_tile_amx_q4_k64(xa, r, src, stride, q4.data(), nb * amx_block_bytes, npg, yr, ldy,
                                 ncols - 16 * p0, pf);
          else if (amx_q4)
            int8_tile_amx_q4_k(t, xa, r, src, stride, q4.data(), nb * amx_block_bytes, npg, yr, ldy,
                               ncols - 16 * p0, pf);
          else
            int8_tile_amx_q8_0(xa, r, src, stride, npg, yr, ldy, ncols - 16 * p0, pf);
        }
      }
      // The AVX2 tiles step the prefetches a burst before each tile; the VNNI tiles once per
      // block (bursts stall on the misses in flight).
      const int64_t row_tiles = (re - r + kR - 1) / kR;
      PrefetchStream pfv(next_group, next_bytes, avx2 ? row_tiles : row_tiles * nb);
      // The row block's full-height row tiles of a panel run in one call, then the short one.
      const int64_t full = (re - r) / kR;
      const int rest = static_cast<int>((re - r) % kR);
      for (int p = 0; p < npg; p += kVnniP) {
        const int pi = std::min(kVnniP, npg - p) - 1;
        float* yp = y + (r - r0) * ldy + 16 * (p0 + p);
        const int nc = ncols - 16 * (p0 + p);
        if (full > 0)
          tiles[kR - 1][pi](ex.tile, xa, r, src + p * stride, stride, yp, ldy, nc, 16, ex.bytes,
                            &pfv, full);
        if (rest > 0)
          tiles[rest - 1][pi](ex.tile, xa, r + full * kR, src + p * stride, stride,
                              yp + full * kR * ldy, ldy, nc, 16, ex.bytes, &pfv, 1);
      }
    }
  }
}

}  // namespace rw::detail
