// Row-wise and per-sequence kernels of the hybrid forward pass (everything but matmul).
// Kernels know nothing of models: plain functions on spans with documented shapes.
//
// Bit-exact contract (docs/ARCHITECTURE.md): each result depends only on its own row's inputs,
// and every reduction runs in an order fixed by its length. Reductions over a row of n use 16
// interleaved fp32 partial sums (element i goes to lane i % 16, each lane accumulated in index
// order with an explicit fma) combined by a fixed tree; so the SIMD width of the machine
// never changes the bits. Naive double-precision references live in kernels/ops_ref.h.
#pragma once

#include <cstdint>

namespace rw {

// sum_i a[i]*b[i] in the fixed 16-lane order described above.
float dot_fixed(const float* a, const float* b, int64_t n);
// sum_i a[i]*a[i], same order.
float sumsq_fixed(const float* a, int64_t n);

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w. Zero-centred norms have the +1 folded into w at
// load time. x, y: [n_rows, n] (row strides ld); w: [n]. y may alias x.
void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t n_rows,
             int64_t n, float eps);

// In-place per-head RMSNorm over d with weight w [d]: x is [n_heads, d] contiguous.
void rmsnorm_heads(float* x, int64_t n_heads, int64_t d, const float* w, float eps);

// In-place L2 normalisation per head, then scale: x <- x / sqrt(sum x^2 + eps) * scale.
void l2norm_heads(float* x, int64_t n_heads, int64_t d, float eps, float scale);

// Gated RMSNorm per head (GDN output): y = w * (o / sqrt(mean(o^2) + eps)) * silu(z).
// o, z, y: [n_heads, d]; w: [d]. y may alias o.
void gated_rmsnorm_heads(const float* o, const float* z, const float* w, float* y,
                         int64_t n_heads, int64_t d, float eps);

// Partial rotary embedding, rotate_half layout, in place on x [n_heads, d]: the first
// rope_dim dims of each head rotate in pairs (i, i + rope_dim/2) by angle pos * inv_freq[i];
// inv_freq: [rope_dim/2] (theta^(-2i/rope_dim), computed once by the caller).
void rope_heads(float* x, int64_t n_heads, int64_t d, int64_t rope_dim, const float* inv_freq,
                int64_t pos);

// Scalar activations (fp32, same formula everywhere).
float silu(float x);
float sigmoid(float x);
float softplus(float x);
// y[i] = silu(g[i]) * u[i] for i < n.
void swiglu(const float* g, const float* u, float* y, int64_t n);

// Causal depthwise conv over T tokens for channels [c0, c1), then SiLU.
// window: [K-1, C] previous raw inputs, oldest first, row stride C (updated in place for the
// channels handled: afterwards it holds the last K-1 inputs); in: [T, ld_in] raw inputs;
// w: [K, C] tap-major (w[K-1, c] multiplies the current token); out: [T, ld_out].
// out[t, c] = silu(acc) with acc = 0, then acc = fma(w[j, c], seq[t - (K-1) + j][c], acc) for
// j = 0..K-1, seq being window rows followed by `in` rows.
void conv_silu(float* window, const float* in, int64_t ld_in, const float* w, float* out,
               int64_t ld_out, int64_t T, int64_t C, int64_t K, int64_t c0, int64_t c1);

// One Gated DeltaNet token for one value head, fp32, in place on S [dk, dv]:
//   S <- alpha*S; m = S^T k; u = beta*(v - m); S <- S + k u^T; o = S^T q.
// Reductions over dk run in index order (one fma chain per output column).
void gdn_step(float* S, const float* q, const float* k, const float* v, float alpha, float beta,
              float* o, int64_t dk, int64_t dv);

// Causal attention for one query head against keys [0, n_keys) of one sequence, reduced over
// keys in blocks of `block` positions aligned to absolute positions (block b covers
// [b*block, (b+1)*block)); keys/values of block b start at k_blocks[b] / v_blocks[b] with row
// stride ld (floats). Two passes: max over scores, then sum of exp(s - max) and the weighted
// sum of values in key order. q: [d] (already scaled by the caller or scale given); out: [d].
void attention_head(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                    int64_t block, int64_t ld, int64_t n_keys, int64_t d, float scale,
                    float* out, float* scratch /* [n_keys] */);

}  // namespace rw
