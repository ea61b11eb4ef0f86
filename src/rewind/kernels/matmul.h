// Batch-invariant matrix multiply y[M,N] = x[M,K] . W[N,K]^T (W in PyTorch [out,in] layout).
//
// Contract (docs/ARCHITECTURE.md, "bit-exact"): every output y[m,n] is ONE fp32 accumulator
// that starts at +0.0f and receives fma(x[m,k], w[n,k], acc) for k = 0, 1, ..., K-1 in that
// order. Nothing else: no split-K, no partial sums combined later, no kernel choice that depends
// on M. Hence y[m,:] is bit-identical whatever M is, whatever other rows are in x, whatever
// the thread count, and whatever SIMD width the machine has (AVX-512, AVX2 and the scalar
// fallback give the same bits). Threads split N (output panels), never K.
//
// Weights are packed once at load time into panels (PackedMatrix); F32 or BF16 storage, with
// BF16 widened exactly to fp32 inside the kernel; or ggml's Q8_0 / Q4_K / Q5_K / Q6_K blocks, used
// in one of two ways (KernelOptions::quant_dot, carried by the matrix):
//  - F32: widened exactly (ggml's dequantisation) to fp32 panels block by block inside the
//    kernel, so a quantised matrix gives the same bits as the F32 matrix of its dequantised
//    values, for every M;
//  - Int8 (the default where the CPU has AVX-512 VNNI or AVX2): each activation row is quantised to
//  int8
//    per block (32 or 256 values, one f32 scale), the weights' integer codes meet it in integer
//    dot products, and each output is still ONE f32 accumulator fed block by block in k order
//    (the exact formula is in matmul_quant.h). Row r's values depend on x[r, :] alone, so the
//    result is just as batch-invariant, and the scalar path gives the same bits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rewind/base/aligned.h"
#include "rewind/kernels/kernel_options.h"
#include "rewind/tensor/dtype.h"

namespace rw {

class ThreadPool;

class PackedMatrix {
 public:
  PackedMatrix() = default;
  PackedMatrix(PackedMatrix&&) noexcept = default;
  PackedMatrix& operator=(PackedMatrix&&) noexcept = default;

  // Packs W [n, k] (row-major, element type src_type: F32, BF16 or F16) into panels stored as
  // `store` (F32 or BF16). F16 -> F32 and F32 -> BF16 conversions happen here (F32 -> BF16
  // rounds to nearest even). Cost: O(n*k), one pass. pool may be null.
  // Quantised stores (Q8_0, Q4_K, Q5_K, Q6_K, Q4_0, ...: dtype_is_quant): src_type must be store;
  // src holds n rows of dtype_row_bytes(store, k) bytes (ggml blocks); k must be a multiple of
  // the block size.
  static PackedMatrix pack(const void* src, DType src_type, int64_t n, int64_t k, DType store,
                           ThreadPool* pool = nullptr);

  // Input permutation: stored column j multiplies x[perm[j]] (perm is a permutation of [0, k)).
  // matmul gathers x into that order first, so the FMA chain runs over stored columns in order.
  // Used where a file's column order differs from the model's and the store cannot be
  // permuted (quantised blocks). Cost: O(M*K) per matmul.
  void set_k_perm(std::vector<int32_t> perm);

  // Rows stacked from parts packed in different stores (a fused projection whose pieces a file
  // stores in different types, e.g. Q4_K q/k with a Q6_K v). All parts have the same k and no
  // k permutation of their own; matmul runs each part into its own output columns, so every
  // output is still one chain of the contract. Parts must be non-empty.
  static PackedMatrix stack(std::vector<PackedMatrix> parts);
  const std::vector<PackedMatrix>& parts() const { return parts_; }
  const std::vector<int32_t>& k_perm() const { return k_perm_; }

  // How matmul runs on this matrix (a stack's parts too). Set at load time by its owner; not
  // while a matmul on it runs.
  void set_kernel_options(const KernelOptions& opt);
  const KernelOptions& kernel_options() const { return opt_; }

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  DType store() const { return store_; }
  size_t bytes() const;  // bytes of packed storage (what a decode step reads)
  bool quantised() const { return dtype_is_quant(store_); }
  bool empty() const { return n_ == 0; }

  // Element (row r, col c) of the original W, converted to f32 (slow; tests and references).
  float at(int64_t r, int64_t c) const;

  // Implementation detail, used by the kernels.
  const void* raw() const { return data_.data(); }

 private:
  int64_t n_ = 0;
  int64_t k_ = 0;
  DType store_ = DType::F32;
  AlignedBuffer<std::byte> data_;
  std::vector<int32_t> k_perm_, k_inv_;  // empty: identity
  std::vector<PackedMatrix> parts_;      // non-empty: a stack (data_ unused)
  KernelOptions opt_;
};

// y[m, n] for m < M, n < W.n(). x is [M, K] with row stride ldx (>= K) floats; y is [M, N] with
// row stride ldy (>= N). pool may be null (single thread).
void matmul(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
            ThreadPool* pool);
// The same with explicit kernel options instead of the matrix's own (tests comparing paths).
void matmul(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y, int64_t ldy,
            ThreadPool* pool, const KernelOptions& opt);

// The rows of x made on demand, for activations that only this matmul reads (a norm's or an
// activation function's output): fill(r0, r1, out, ldo) writes rows [r0, r1) of x, w.k() floats
// each, to out (row stride ldo). matmul_fill calls it exactly once for every row, on disjoint
// ranges, from any of the pool's threads. With the int8 dot each thread quantises the rows it has
// just made while they are in cache: the [m, k] float rows are never written out and read back.
// Other weights get the rows in a buffer first: `spare` (row stride ld_spare >= k) when given,
// else one of the matmul's own. The result has the bits of matmul on the same rows.
using RowFill = std::function<void(int64_t r0, int64_t r1, float* out, int64_t ldo)>;
void matmul_fill(const RowFill& fill, int64_t m, const PackedMatrix& w, float* y, int64_t ldy,
                 ThreadPool* pool, float* spare = nullptr, int64_t ld_spare = 0);

// Naive reference: double accumulation over the unpacked weight values (w.at()).
void matmul_naive(const float* x, int64_t m, int64_t ldx, const PackedMatrix& w, float* y,
                  int64_t ldy);

// True when the int8 dot has SIMD kernels here (AVX-512 VNNI, AVX-VNNI or AVX2); else the scalar
// reference runs (same bits, much slower), which is why the default is then F32.
bool matmul_int8_simd();
// The paths the matmuls take under `cap` on this CPU: the f32 / bf16 one ("avx512", "avx2",
// "scalar"), the int8 dot's ("avx512vnni", "avxvnni", "avx2", "scalar"), and whether AMX-INT8 tiles
// run the int8 dot's Q8_0, Q4_K, Q5_K and Q6_K prefill tiles (16 rows and more; the CPU has
// AMX-INT8, the kernel granted it, and the cap allows it).
const char* matmul_isa(IsaCap cap = IsaCap::Amx);
const char* matmul_int8_isa(IsaCap cap = IsaCap::Amx);
bool matmul_amx_enabled(IsaCap cap = IsaCap::Amx);

}  // namespace rw
