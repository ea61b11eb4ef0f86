// Naive references for kernels/ops.h: plain loops, double accumulation, the formulas exactly
// as written in docs/QWEN35.md. Tests compare the fast kernels against these within a
// tolerance; they are also the building blocks of the naive reference model (model/reference.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace rw::ref {

inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
inline double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}

// y = x / sqrt(mean(x^2) + eps) * w over n.
inline void rmsnorm(const double* x, const double* w, double* y, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss / n + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

inline void l2norm(double* x, int64_t n, double eps, double scale) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * scale;
}

inline void gated_rmsnorm(const double* o, const double* z, const double* w, double* y, int64_t d,
                          double eps) {
  double ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += o[i] * o[i];
  const double inv = 1.0 / std::sqrt(ss / d + eps);
  for (int64_t i = 0; i < d; ++i) y[i] = w[i] * (o[i] * inv) * silu(z[i]);
}

// rotate_half partial RoPE on one head of d dims, theta^(-2i/rope_dim).
inline void rope(double* x, int64_t rope_dim, double theta, int64_t pos) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / rope_dim);
    const double ang = static_cast<double>(pos) * inv_freq;
    const double a = x[i], b = x[i + half];
    x[i] = a * std::cos(ang) - b * std::sin(ang);
    x[i + half] = b * std::cos(ang) + a * std::sin(ang);
  }
}

// Delta rule for one head: S [dk, dv].
inline void gdn_step(double* S, const double* q, const double* k, const double* v, double alpha,
                     double beta, double* o, int64_t dk, int64_t dv) {
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= alpha;
  std::vector<double> m(dv, 0.0);
  for (int64_t j = 0; j < dv; ++j)
    for (int64_t i = 0; i < dk; ++i) m[j] += S[i * dv + j] * k[i];
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += k[i] * beta * (v[j] - m[j]);
  for (int64_t j = 0; j < dv; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * q[i];
    o[j] = acc;
  }
}

// The value of a stored half-precision word, by the formats' definitions (the KV cache types):
// IEEE binary16 (1 sign, 5 exponent bits biased by 15, 10 fraction bits) and bfloat16 (the top
// half of a binary32).
inline double f16_value(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + m, e - 25);
}
inline double bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Q8_0: an int8 code times its block's f16 scale.
inline double q8_value(int8_t code, uint16_t scale) {
  return code * f16_value(scale);
}

// Causal softmax attention of one query over n_keys keys/values (rows of d, contiguous).
inline void attention(const double* q, const double* keys, const double* vals, int64_t n_keys,
                      int64_t d, double scale, double* out) {
  std::vector<double> s(n_keys);
  double mx = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < d; ++i) acc += q[i] * keys[j * d + i];
    s[j] = acc * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int64_t i = 0; i < d; ++i) out[i] = 0;
  for (int64_t j = 0; j < n_keys; ++j)
    for (int64_t i = 0; i < d; ++i) out[i] += s[j] / sum * vals[j * d + i];
}

// One Mamba2 token for one head: S [P, N]; dt after softplus; y [P] = S C + D x.
inline void mamba2_step(double* S, const double* x, const double* B, const double* C, double dt,
                        double A, double D, double* y, int64_t P, int64_t N) {
  const double dA = std::exp(dt * A);
  for (int64_t p = 0; p < P; ++p) {
    double acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      double& s = S[p * N + n];
      s = s * dA + dt * x[p] * B[n];
      acc += s * C[n];
    }
    y[p] = acc + D * x[p];
  }
}

// Mamba2's gated RMSNorm, gate first, per group of d values.
inline void gated_rmsnorm_groups(const double* y, const double* z, const double* w, double* out,
                                 int64_t n_groups, int64_t d, double eps) {
  for (int64_t g = 0; g < n_groups; ++g) {
    double ss = 0;
    for (int64_t i = g * d; i < (g + 1) * d; ++i) {
      out[i] = y[i] * silu(z[i]);
      ss += out[i] * out[i];
    }
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = g * d; i < (g + 1) * d; ++i) out[i] = out[i] * inv * w[i];
  }
}

}  // namespace rw::ref
