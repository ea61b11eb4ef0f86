// Row-wise and per-sequence kernels of the hybrid forward pass (everything but matmul).
// Kernels know nothing of models: plain functions on spans with documented shapes.
//
// Bit-exact contract (docs/ARCHITECTURE.md): each result depends only on its own row's inputs,
// and every reduction runs in an order fixed by its length. Reductions over a row of n use 16
// interleaved fp32 partial sums (element i goes to lane i % 16, each lane accumulated in index
// order with an explicit fma) combined by a fixed tree; so the SIMD width of the machine
// never changes the bits. Naive double-precision references live in kernels/ops_ref.h.
// `isa` caps the SIMD path an op may take (the model passes its KernelOptions::isa; every path
// gives the same bits).
#pragma once

#include <cstdint>

#include "rewind/kernels/kernel_options.h"
#include "rewind/tensor/dtype.h"

namespace rw {

// sum_i a[i]*b[i] in the fixed 16-lane order described above.
float dot_fixed(const float* a, const float* b, int64_t n, IsaCap isa = IsaCap::Amx);
// sum_i a[i]*a[i], same order.
float sumsq_fixed(const float* a, int64_t n, IsaCap isa = IsaCap::Amx);

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w. Zero-centred norms have the +1 folded into w at
// load time. x, y: [n_rows, n] (row strides ld); w: [n]. y may alias x.
void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t n_rows,
             int64_t n, float eps, IsaCap isa = IsaCap::Amx);

// In-place per-head RMSNorm over d with weight w [d]: x is [n_heads, d] contiguous.
void rmsnorm_heads(float* x, int64_t n_heads, int64_t d, const float* w, float eps,
                   IsaCap isa = IsaCap::Amx);

// In-place L2 normalisation per head, then scale: x <- x / sqrt(sum x^2 + eps) * scale.
void l2norm_heads(float* x, int64_t n_heads, int64_t d, float eps, float scale,
                  IsaCap isa = IsaCap::Amx);

// Gated RMSNorm per head (GDN output): y = w * (o / sqrt(mean(o^2) + eps)) * silu(z).
// o, z, y: [n_heads, d]; w: [d]. y may alias o.
void gated_rmsnorm_heads(const float* o, const float* z, const float* w, float* y, int64_t n_heads,
                         int64_t d, float eps, IsaCap isa = IsaCap::Amx);

// Partial rotary embedding, rotate_half layout, in place on x [n_heads, d]: the first
// rope_dim dims of each head rotate in pairs (i, i + rope_dim/2) by angle pos * inv_freq[i];
// inv_freq: [rope_dim/2] (theta^(-2i/rope_dim), computed once by the caller).
void rope_heads(float* x, int64_t n_heads, int64_t d, int64_t rope_dim, const float* inv_freq,
                int64_t pos);

// e^x by a fixed algorithm (same bits on every machine and SIMD width; rel. error ~2e-7;
// inputs clamped to [-87, 88]).
float exp_fixed(float x);
// Scalar activations (fp32, same formula everywhere; they use exp_fixed).
float silu(float x);
float sigmoid(float x);
float softplus(float x);
// y[i] = exp_fixed(x[i] * a) for i < n (Mamba2's decay dA = exp(dt * A)); y may alias x.
void exp_scaled(const float* x, float a, float* y, int64_t n, IsaCap isa = IsaCap::Amx);
// a[i] *= sigmoid(gate[i]) for i < n (the attention output gate).
void sigmoid_gate(float* a, const float* gate, int64_t n);
// y[i] = silu(g[i]) * u[i] for i < n; y may alias g or u.
void swiglu(const float* g, const float* u, float* y, int64_t n, IsaCap isa = IsaCap::Amx);

// Causal depthwise conv over T tokens for channels [c0, c1), then SiLU.
// window: [K-1, C] previous raw inputs, oldest first, row stride C (updated in place for the
// channels handled: afterwards it holds the last K-1 inputs); in: [T, ld_in] raw inputs;
// w: [K, C] tap-major (w[K-1, c] multiplies the current token); out: [T, ld_out] holding the
// channels handled from column 0: out[t, c - c0] = silu(acc) with acc = 0, then
// acc = fma(w[j, c], seq[t - (K-1) + j][c], acc) for
// j = 0..K-1, seq being window rows followed by `in` rows.
// With `bias` ([C], may be null) the chain starts at bias[c] instead of 0 (Mamba2's conv1d).
void conv_silu(float* window, const float* in, int64_t ld_in, const float* w, float* out,
               int64_t ld_out, int64_t T, int64_t C, int64_t K, int64_t c0, int64_t c1,
               IsaCap isa = IsaCap::Amx, const float* bias = nullptr);

// One Gated DeltaNet token for one value head, fp32, in place on S [dk, dv]:
//   S <- alpha*S; m = S^T k; u = beta*(v - m); S <- S + k u^T; o = S^T q.
// Reductions over dk run in index order (one fma chain per output column).
void gdn_step(float* S, const float* q, const float* k, const float* v, float alpha, float beta,
              float* o, int64_t dk, int64_t dv);

// T tokens of one value head in order: bit-identical to T gdn_step calls (token t reads q, k at
// q + t*ldqk, k + t*ldqk, v at v + t*ldv, alpha[t], beta[t], and writes o + t*ldo). Columns of S
// never mix, so the kernel runs each strip of columns through all T tokens while it sits in L1,
// fusing token t's update and output with token t+1's decay and read; every element sees the
// same operations in the same order as in gdn_step. Rows contiguous per head (ldqk == dk and
// ldv == dv) are streamed as they are; other strides are packed per 128-token block first.
void gdn_steps(float* S, const float* q, const float* k, int64_t ldqk, const float* v, int64_t ldv,
               const float* alpha, const float* beta, float* o, int64_t ldo, int64_t T, int64_t dk,
               int64_t dv, IsaCap isa = IsaCap::Amx);

// T tokens of one Mamba2 head in order (the recurrent form of the SSD layer, fp32), in place on
// S [P, N]. For token t, with xdt = x[t][p] * dt[t]:
//   S[p][n] <- fma(S[p][n], dA[t], B[t][n] * xdt)
//   y[t][p] = (sum over n of S[p][n] * C[t][n], in dot_fixed's 16-lane order) + D * x[t][p]
// x: row t at x + t*ldx (P values); B, C: row t at B + t*ldbc, C + t*ldbc (N values); dt (after
// softplus), dA = exp(dt * A): [T]; y: row t at y + t*ldy. Rows of S never mix and every element
// sees the same operations in the same order whatever T (tokens outer, rows inner: the head's
// state stays in L1 while B and C of a token are read once; the AVX-512 and AVX2 paths update
// each chunk of the state for two tokens per load and store, and from 16 tokens on the AVX-512
// path works on a transposed copy of 32 rows at a time, rows in the lanes), so any cut of a
// sequence into calls gives the same bits, and so does every SIMD path.
void mamba2_steps(float* S, const float* x, int64_t ldx, const float* B, const float* C,
                  int64_t ldbc, const float* dt, const float* dA, float D, float* y, int64_t ldy,
                  int64_t T, int64_t P, int64_t N, IsaCap isa = IsaCap::Amx);

// Mamba2's gated RMSNorm, gate first: h = y * silu(z), then per group of d values
// out = (h / sqrt(mean(h^2) + eps)) * w. y, z, out: [n_groups * d]; w: [n_groups * d];
// out may alias y.
void gated_rmsnorm_groups(const float* y, const float* z, const float* w, float* out,
                          int64_t n_groups, int64_t d, float eps, IsaCap isa = IsaCap::Amx);

// Causal attention for one query head against keys [0, n_keys) of one sequence. Keys come in
// blocks of `block` positions aligned to absolute positions (block b covers [b*block,
// (b+1)*block)): K of block b is dim-major at k_blocks[b] (element (i, j) at [i*block + j]),
// V of block b row-major at v_blocks[b] (row j at [j*ld]). Each score is one fma chain over
// the d dims in order, times scale; softmax with exp_fixed and a fixed-order sum; the output is
// the p-weighted sum of values in key order. q: [d]; out: [d]; scratch: [n_keys].
void attention_head(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                    int64_t block, int64_t ld, int64_t n_keys, int64_t d, float scale, float* out,
                    float* scratch /* [n_keys] */, IsaCap isa = IsaCap::Amx);

// The same for m query rows of one head of one sequence at once (row r at q + r*ldq, attending
// to keys [0, n_keys[r]), n_keys ascending), so each K/V block is read once for all rows.
// Each row's result is bit-identical to attention_head on that row alone.
// out: row r at out + r*ldo; scratch: [m, n_keys[m-1]].
void attention_rows(const float* q, int64_t ldq, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* out, int64_t ldo, float* scratch,
                    IsaCap isa = IsaCap::Amx);

// The same with each row's query and output at its own address (q[r], out[r]): rows of
// different heads that share a K/V head (grouped-query attention) read each K/V block once for
// all of them. n_keys ascending; scratch: [m, n_keys[m-1]]; each row bit-identical to
// attention_head on it alone.
void attention_rows(const float* const* q, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* const* out, float* scratch,
                    IsaCap isa = IsaCap::Amx);

// One head's K or V blocks in a stored type: F32, BF16, F16 or Q8_0 (the KV cache types,
// state/sequence_state.h). In elements of the type, K of block b holds (dim i, key j) at
// data[b] + i*block + j; V holds (key j, dim i) at data[b] + j*ld + i. Q8_0 values are int8
// codes times f16 scales, one scale per 32 dims of one key (a head_dim not a multiple of 32
// ends in a shorter block): K's scale of (i, j) at scales[b][(i / 32) * block + j], V's at
// scales[b][j * sld + i / 32].
struct KvBlocks {
  DType type = DType::F32;
  const void* const* data = nullptr;
  const uint16_t* const* scales = nullptr;  // Q8_0 only
  int64_t ld = 0;                           // V: elements from one key to the next
  int64_t sld = 0;                          // Q8_0 V: scales from one key to the next
};

// Widens block b of a head's K to fp32, exactly: out [d][block] dim-major (the F32 layout),
// keys [0, n) of every dim written (n <= block). The same bits on every SIMD path (for every
// value the KV writer stores; a signalling f16 NaN may come back quiet).
void kv_widen_k(const KvBlocks& k, int64_t b, int64_t block, int64_t n, int64_t d, float* out,
                IsaCap isa = IsaCap::Amx);
// Widens keys [0, n) of block b of a head's V to fp32, exactly: out [n][d].
void kv_widen_v(const KvBlocks& v, int64_t b, int64_t n, int64_t d, float* out,
                IsaCap isa = IsaCap::Amx);

// attention_rows over stored K/V: the AVX-512 row-group kernels, and AVX2's (with F16C) for up
// to 8 rows, widen K and V as they load them (block and d multiples of 32); otherwise each
// block is widened first (kv_widen_k / kv_widen_v into per-thread buffers of d x block floats)
// and the F32 kernel runs on it. Either way each row is bit-identical to attention_head on the
// widened values, on every SIMD path. F32 blocks are read in place.
void attention_rows(const float* const* q, int64_t m, const int64_t* n_keys, const KvBlocks& k,
                    const KvBlocks& v, int64_t block, int64_t d, float scale, float* const* out,
                    float* scratch, IsaCap isa = IsaCap::Amx);

}  // namespace rw
