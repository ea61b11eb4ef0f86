// Fast kernels of kernels/ops.h against the naive double references of kernels/ops_ref.h,
// over several shapes including ragged ones; plus the order contracts that make them
// batch-invariant (the conv over T tokens equals T single steps, bit for bit).
#include "rewind/kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "rewind/kernels/matmul.h"
#include "rewind/kernels/ops_ref.h"

namespace rw {
namespace {

std::vector<float> randv(std::mt19937_64& r, int64_t n, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(r);
  return v;
}
std::vector<double> to_d(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

TEST(Ops, DotFixedMatchesDouble) {
  std::mt19937_64 r(1);
  for (int64_t n : {1, 3, 15, 16, 17, 31, 64, 100, 1000, 4097}) {
    auto a = randv(r, n), b = randv(r, n);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(dot_fixed(a.data(), b.data(), n), want,
                1e-5 * std::sqrt(static_cast<double>(n)) + 1e-6)
        << n;
  }
}

// The fixed order of ops.h, written out: lane l sums elements l, l + 16, ... with fma in index
// order, then the lanes 16 -> 8 -> 4 -> 2 -> 1.
float fixed_order_dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = std::fma(a[i], b[i], acc[i % 16]);
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// The reductions of dot_fixed and of the norms (several rows or heads at once on the SIMD paths)
// give the fixed order's bits on every SIMD path this machine has: lengths with and without a
// tail, row counts across the groups of 4 and 16.
TEST(Ops, ReductionsBitsEqualFixedOrder) {
  auto same = [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; };
  std::mt19937_64 r(23);
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    IsaCap cap;
    if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
    for (int64_t n : {1, 5, 16, 17, 128, 130, 1024}) {
      auto a = randv(r, n), b = randv(r, n);
      EXPECT_TRUE(
          same(dot_fixed(a.data(), b.data(), n, cap), fixed_order_dot(a.data(), b.data(), n)))
          << isa << " n " << n;
      for (int64_t rows : {1, 3, 4, 7, 16, 21}) {
        auto x = randv(r, rows * n), w = randv(r, n), z = randv(r, rows * n);
        std::vector<float> y(x.size()), want(x.size());
        rmsnorm(x.data(), n, w.data(), y.data(), n, rows, n, 1e-6f, cap);
        for (int64_t i = 0; i < rows; ++i) {
          const float* xr = x.data() + i * n;
          const float ms = fixed_order_dot(xr, xr, n) / static_cast<float>(n);
          const float inv = 1.0f / std::sqrt(ms + 1e-6f);
          for (int64_t j = 0; j < n; ++j) want[i * n + j] = (xr[j] * inv) * w[j];
        }
        ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << isa << " rmsnorm " << n;
        y = x;
        l2norm_heads(y.data(), rows, n, 1e-6f, 0.5f, cap);
        for (int64_t i = 0; i < rows; ++i) {
          const float* xr = x.data() + i * n;
          const float inv = 1.0f / std::sqrt(fixed_order_dot(xr, xr, n) + 1e-6f);
          for (int64_t j = 0; j < n; ++j) want[i * n + j] = (xr[j] * inv) * 0.5f;
        }
        ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << isa << " l2norm " << n;
        gated_rmsnorm_heads(x.data(), z.data(), w.data(), y.data(), rows, n, 1e-6f, cap);
        for (int64_t i = 0; i < rows; ++i) {
          const float* xr = x.data() + i * n;
          const float ms = fixed_order_dot(xr, xr, n) / static_cast<float>(n);
          const float inv = 1.0f / std::sqrt(ms + 1e-6f);
          for (int64_t j = 0; j < n; ++j)
            want[i * n + j] = (w[j] * (xr[j] * inv)) * silu(z[i * n + j]);
        }
        ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << isa << " gated " << n;
      }
    }
  }
}

TEST(Ops, RmsNormAndHeads) {
  std::mt19937_64 r(2);
  for (int64_t n : {8, 32, 64, 100, 1024}) {
    auto x = randv(r, 3 * n), w = randv(r, n);
    std::vector<float> y(x.size());
    rmsnorm(x.data(), n, w.data(), y.data(), n, 3, n, 1e-6f);
    for (int64_t row = 0; row < 3; ++row) {
      std::vector<double> yd(static_cast<size_t>(n));
      auto xd = to_d(x), wd = to_d(w);
      ref::rmsnorm(xd.data() + row * n, wd.data(), yd.data(), n, 1e-6);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(y[row * n + i], yd[i], 1e-5 * (1 + std::abs(yd[i])));
    }
  }
}

TEST(Ops, L2NormAndGatedNorm) {
  std::mt19937_64 r(3);
  for (int64_t d : {8, 16, 128}) {
    auto x = randv(r, 4 * d);
    auto xd = to_d(x);
    l2norm_heads(x.data(), 4, d, 1e-6f, 0.25f);
    for (int64_t h = 0; h < 4; ++h) ref::l2norm(xd.data() + h * d, d, 1e-6, 0.25);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], xd[i], 1e-6);
    auto o = randv(r, 4 * d), z = randv(r, 4 * d), w = randv(r, d);
    std::vector<float> y(o.size());
    gated_rmsnorm_heads(o.data(), z.data(), w.data(), y.data(), 4, d, 1e-6f);
    auto od = to_d(o), zd = to_d(z), wd = to_d(w);
    for (int64_t h = 0; h < 4; ++h) {
      std::vector<double> yd(static_cast<size_t>(d));
      ref::gated_rmsnorm(od.data() + h * d, zd.data() + h * d, wd.data(), yd.data(), d, 1e-6);
      for (int64_t i = 0; i < d; ++i)
        EXPECT_NEAR(y[h * d + i], yd[i], 1e-5 * (1 + std::abs(yd[i])));
    }
  }
}

TEST(Ops, RopePartialRotateHalf) {
  std::mt19937_64 r(4);
  for (int64_t pos : {0, 1, 17, 1000, 200000}) {
    const int64_t d = 32, R = 8, nh = 3;
    auto x = randv(r, nh * d);
    auto xd = to_d(x);
    std::vector<float> inv(static_cast<size_t>(R / 2));
    for (int64_t i = 0; i < R / 2; ++i) inv[i] = static_cast<float>(std::pow(1e7, -2.0 * i / R));
    rope_heads(x.data(), nh, d, R, inv.data(), pos);
    for (int64_t h = 0; h < nh; ++h) ref::rope(xd.data() + h * d, R, 1e7, pos);
    // fp32 angles at large positions lose absolute precision, as in the HF model.
    const double tol = pos > 1000 ? 2e-2 : 1e-5;
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], xd[i], tol) << pos << " " << i;
  }
}

TEST(Ops, ConvOverTokensEqualsSingleStepsBitwise) {
  std::mt19937_64 r(5);
  // Channel counts below, at and across the kernel's 64-channel chunks, split at points that
  // are not chunk boundaries.
  // K = 4 (the models' kernel) takes a one-pass path, other sizes the general loop: both must
  // give the documented chain's bits.
  for (int64_t K : {3, 4})
    for (int64_t C : {37, 64, 150, 600}) {
      const int64_t T = 11, split = C > 64 ? 70 : 20;
      auto w = randv(r, C * K), in = randv(r, T * C), win0 = randv(r, (K - 1) * C);
      std::vector<float> win_a = win0, win_b = win0, out_a(static_cast<size_t>(T * C)),
                         out_b(out_a.size());
      conv_silu(win_a.data(), in.data(), C, w.data(), out_a.data(), C, T, C, K, 0, C);
      for (int64_t t = 0; t < T; ++t) {
        // Split the channels too: ranges must not matter (a range's outputs start at its
        // first channel's column).
        conv_silu(win_b.data(), in.data() + t * C, C, w.data(), out_b.data() + t * C, C, 1, C, K, 0,
                  split);
        conv_silu(win_b.data(), in.data() + t * C, C, w.data(), out_b.data() + t * C + split, C, 1,
                  C, K, split, C);
      }
      EXPECT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float))) << C;
      EXPECT_EQ(0, std::memcmp(win_a.data(), win_b.data(), win_a.size() * sizeof(float))) << C;
      // Against the double formula, with the initial window as history.
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t src = t - (K - 1) + j;
            const double xv = src < 0 ? win0[(K - 1 + src) * C + c] : in[src * C + c];
            acc += static_cast<double>(w[j * C + c]) * xv;
          }
          EXPECT_NEAR(out_a[t * C + c], ref::silu(acc), 1e-5) << C;
          // Bit for bit the chain ops.h documents: from 0, fma over j = 0..K-1, then silu.
          float f = 0.0f;
          for (int64_t j = 0; j < K; ++j) {
            const int64_t src = t - (K - 1) + j;
            f = std::fma(w[j * C + c], src < 0 ? win0[(K - 1 + src) * C + c] : in[src * C + c], f);
          }
          const float want = silu(f);
          EXPECT_EQ(0, std::memcmp(&out_a[t * C + c], &want, sizeof(float))) << K << " " << C;
        }
      // Window holds the last K-1 raw inputs.
      for (int64_t j = 0; j < K - 1; ++j)
        for (int64_t c = 0; c < C; ++c)
          EXPECT_EQ(win_a[j * C + c], in[(T - (K - 1) + j) * C + c]) << C;
    }
}

TEST(Ops, GdnStepMatchesReference) {
  std::mt19937_64 r(6);
  for (auto [dk, dv] : std::vector<std::pair<int64_t, int64_t>>{{16, 8}, {128, 128}, {5, 3}}) {
    std::vector<float> S(static_cast<size_t>(dk * dv), 0.0f);
    std::vector<double> Sd(S.size(), 0.0);
    for (int step = 0; step < 20; ++step) {
      auto q = randv(r, dk, 0.2f), k = randv(r, dk, 0.2f), v = randv(r, dv);
      const float alpha = 0.9f, beta = 0.6f;
      std::vector<float> o(static_cast<size_t>(dv));
      std::vector<double> od(static_cast<size_t>(dv));
      gdn_step(S.data(), q.data(), k.data(), v.data(), alpha, beta, o.data(), dk, dv);
      auto qd = to_d(q), kd = to_d(k), vd = to_d(v);
      ref::gdn_step(Sd.data(), qd.data(), kd.data(), vd.data(), alpha, beta, od.data(), dk, dv);
      for (int64_t j = 0; j < dv; ++j) ASSERT_NEAR(o[j], od[j], 1e-4 * (1 + std::abs(od[j])));
    }
  }
}

// The kernel's bits equal the plain float loops of its definition (decay and read in i order,
// then rank-1 update and output in i order; every j its own fma chain), whatever the compiler
// vectorises: the bit-exact invariant needs the same bits on every machine and path.
TEST(Ops, GdnStepBitsEqualScalarLoops) {
  std::mt19937_64 r(16);
  for (auto [dk, dv] : std::vector<std::pair<int64_t, int64_t>>{{128, 128}, {64, 96}, {5, 3}}) {
    std::vector<float> S(static_cast<size_t>(dk * dv), 0.0f), S2(S);
    for (int step = 0; step < 12; ++step) {
      auto q = randv(r, dk, 0.2f), k = randv(r, dk, 0.2f), v = randv(r, dv);
      const float alpha = 0.93f, beta = 0.55f;
      std::vector<float> o(static_cast<size_t>(dv)), o2(o.size()), mem(o.size(), 0.0f);
      gdn_step(S.data(), q.data(), k.data(), v.data(), alpha, beta, o.data(), dk, dv);
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) {
          S2[i * dv + j] = S2[i * dv + j] * alpha;
          mem[j] = std::fma(S2[i * dv + j], k[i], mem[j]);
        }
      for (int64_t j = 0; j < dv; ++j) mem[j] = beta * (v[j] - mem[j]);
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) {
          S2[i * dv + j] = std::fma(k[i], mem[j], S2[i * dv + j]);
          o2[j] = std::fma(S2[i * dv + j], q[i], o2[j]);
        }
      ASSERT_EQ(std::memcmp(o.data(), o2.data(), o.size() * 4), 0) << dk << "x" << dv;
      ASSERT_EQ(std::memcmp(S.data(), S2.data(), S.size() * 4), 0) << dk << "x" << dv;
    }
  }
}

// The multi-token kernel (prefill, replay) gives the bits of one gdn_step per token: state and
// every output, for widths that fill strips exactly, leave a tail, or are narrower than a strip,
// key dims that fill the AVX-512 strip's 16-row blocks or leave a tail, and for token counts of 1
// (no fused step: the AVX-512 one-token kernel, its 128-column strips and a tail of 1 to 7
// vectors, when dv is a multiple of 16), 2 and more, past one 128-token block; inputs read
// through row strides; on every SIMD path the machine has (the AVX-512 kernels and the
// compiler's vectorised ones).
TEST(Ops, GdnStepsBitsEqualGdnStepPerToken) {
  std::mt19937_64 r(26);
  for (const char* isa : {"auto", "avx2", "scalar"})
    for (auto [dk, dv] : std::vector<std::pair<int64_t, int64_t>>{{128, 128},
                                                                  {64, 96},
                                                                  {16, 80},
                                                                  {5, 3},
                                                                  {32, 33},
                                                                  {40, 64},
                                                                  {7, 130},
                                                                  {24, 272},
                                                                  {9, 16}})
      for (int64_t T : {1, 2, 7, 131}) {
        IsaCap cap;
        if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
        const int64_t ldqk = 2 * dk + 3, ldv = dv + 5, ldo = dv + 1;
        auto S0 = randv(r, dk * dv, 0.5f);
        auto q = randv(r, T * ldqk, 0.2f), k = randv(r, T * ldqk, 0.2f), v = randv(r, T * ldv);
        std::vector<float> alpha(static_cast<size_t>(T)), beta(alpha.size());
        for (int64_t t = 0; t < T; ++t) {
          alpha[t] = 0.8f + 0.03f * static_cast<float>(t);
          beta[t] = 0.3f + 0.05f * static_cast<float>(t);
        }
        std::vector<float> S(S0), S2(S0), o(static_cast<size_t>(T * ldo), -1.0f), o2(o);
        gdn_steps(S.data(), q.data(), k.data(), ldqk, v.data(), ldv, alpha.data(), beta.data(),
                  o.data(), ldo, T, dk, dv, cap);
        // Each head's rows contiguous (the prefill's head-major layout: streamed, not packed):
        // the same bits.
        std::vector<float> qc(static_cast<size_t>(T * dk)), kc(qc.size()),
            vc(static_cast<size_t>(T * dv));
        for (int64_t t = 0; t < T; ++t) {
          std::copy_n(q.data() + t * ldqk, dk, qc.data() + t * dk);
          std::copy_n(k.data() + t * ldqk, dk, kc.data() + t * dk);
          std::copy_n(v.data() + t * ldv, dv, vc.data() + t * dv);
        }
        std::vector<float> Sc(S0), oc(o.size(), -1.0f);
        gdn_steps(Sc.data(), qc.data(), kc.data(), dk, vc.data(), dv, alpha.data(), beta.data(),
                  oc.data(), ldo, T, dk, dv, cap);
        ASSERT_EQ(std::memcmp(o.data(), oc.data(), o.size() * 4), 0)
            << isa << " " << dk << "x" << dv << " T" << T << " contiguous";
        ASSERT_EQ(std::memcmp(S.data(), Sc.data(), S.size() * 4), 0)
            << isa << " " << dk << "x" << dv << " T" << T << " contiguous";
        for (int64_t t = 0; t < T; ++t)
          gdn_step(S2.data(), q.data() + t * ldqk, k.data() + t * ldqk, v.data() + t * ldv,
                   alpha[t], beta[t], o2.data() + t * ldo, dk, dv);
        ASSERT_EQ(std::memcmp(o.data(), o2.data(), o.size() * 4), 0)
            << isa << " " << dk << "x" << dv << " T" << T;
        ASSERT_EQ(std::memcmp(S.data(), S2.data(), S.size() * 4), 0)
            << isa << " " << dk << "x" << dv << " T" << T;
      }
}

TEST(Ops, AttentionBlocksMatchReference) {
  std::mt19937_64 r(7);
  const int64_t d = 32, ld = 64;  // V rows hold two kv heads; we read head 1
  for (int64_t block : {1, 4, 64}) {
    for (int64_t n_keys : {1, 5, 64, 65, 130}) {
      const int64_t nb = (n_keys + block - 1) / block;
      std::vector<std::vector<float>> kb(static_cast<size_t>(nb)), vb(static_cast<size_t>(nb));
      std::vector<const float*> kp, vp;
      std::vector<double> keys, vals;
      for (int64_t b = 0; b < nb; ++b) {
        kb[b] = randv(r, d * block);  // dim-major [d][block]
        vb[b] = randv(r, block * ld);
        kp.push_back(kb[b].data());
        vp.push_back(vb[b].data() + d);
        for (int64_t j = 0; j < block && b * block + j < n_keys; ++j)
          for (int64_t i = 0; i < d; ++i) {
            keys.push_back(kb[b][i * block + j]);
            vals.push_back(vb[b][j * ld + d + i]);
          }
      }
      auto q = randv(r, d);
      std::vector<float> out(static_cast<size_t>(d)), scratch(static_cast<size_t>(n_keys));
      attention_head(q.data(), kp.data(), vp.data(), block, ld, n_keys, d, 0.17f, out.data(),
                     scratch.data());
      std::vector<double> od(static_cast<size_t>(d));
      auto qd = to_d(q);
      ref::attention(qd.data(), keys.data(), vals.data(), n_keys, d, 0.17, od.data());
      for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(out[i], od[i], 1e-5) << block << " " << n_keys;
    }
  }
}

// KV cache types (KvBlocks): one head (of two) of BF16, F16 and Q8_0 K/V blocks, laid out as the
// state's pages lay them out. kv_widen_k / kv_widen_v give exactly the values of ops_ref.h's
// format definitions on every SIMD path (every finite code, subnormals included), and
// attention_rows over the typed blocks is bit-identical to the F32 kernel on those values (so
// each F32 invariant carries over) and close to the double reference.
struct TypedHead {
  std::vector<std::vector<uint8_t>> k, v;     // codes of both heads, per block
  std::vector<std::vector<uint16_t>> ks, vs;  // Q8_0 scales of both heads, per block
  std::vector<std::vector<float>> kf,
      vf;  // head 1 widened by the reference: [d][block], [block][d]
  std::vector<const void*> kp, vp;
  std::vector<const uint16_t*> ksp, vsp;
  KvBlocks K, V;
};

TypedHead typed_head(std::mt19937_64& r, DType t, int64_t d, int64_t block, int64_t nb,
                     bool any_bits) {
  TypedHead h;
  const int64_t es = t == DType::Q8_0 ? 1 : 2, qb = (d + 31) / 32, hd = 2 * d;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> sc(0.002f, 0.04f);
  auto word = [&]() -> uint16_t {  // a finite half word
    if (any_bits) {
      for (;;) {
        const uint16_t w = static_cast<uint16_t>(r());
        if (t == DType::F16 ? ((w >> 10) & 0x1f) != 0x1f : ((w >> 7) & 0xff) != 0xff) return w;
      }
    }
    return t == DType::F16 ? f32_to_f16(nd(r)) : f32_to_bf16(nd(r));
  };
  auto value = [&](const uint8_t* codes, int64_t e, const uint16_t* scales, int64_t se) {
    if (t == DType::Q8_0) return ref::q8_value(static_cast<int8_t>(codes[e]), scales[se]);
    uint16_t w;
    std::memcpy(&w, codes + 2 * e, 2);
    return t == DType::F16 ? ref::f16_value(w) : ref::bf16_value(w);
  };
  for (int64_t b = 0; b < nb; ++b) {
    std::vector<uint8_t> k(static_cast<size_t>(hd * block * es)), v(k.size());
    std::vector<uint16_t> ks(static_cast<size_t>(2 * qb * block)), vs(ks.size());
    for (int64_t e = 0; e < hd * block; ++e) {
      if (t == DType::Q8_0) {
        k[e] = static_cast<uint8_t>(static_cast<int8_t>(r() % 255 - 127));
        v[e] = static_cast<uint8_t>(static_cast<int8_t>(r() % 255 - 127));
      } else {
        const uint16_t a = word(), c = word();
        std::memcpy(&k[2 * e], &a, 2);
        std::memcpy(&v[2 * e], &c, 2);
      }
    }
    for (auto& x : ks) x = f32_to_f16(sc(r));
    for (auto& x : vs) x = f32_to_f16(sc(r));
    std::vector<float> kf(static_cast<size_t>(d * block)), vf(kf.size());
    // Head 1: K codes from element d*block on, scales from qb*block; V columns from d, scales
    // from qb within each key's row of 2*qb.
    for (int64_t i = 0; i < d; ++i)
      for (int64_t j = 0; j < block; ++j) {
        kf[i * block + j] = static_cast<float>(
            value(k.data(), d * block + i * block + j, ks.data(), (qb + i / 32) * block + j));
        vf[j * d + i] = static_cast<float>(
            value(v.data(), j * hd + d + i, vs.data(), j * 2 * qb + qb + i / 32));
      }
    h.k.push_back(std::move(k));
    h.v.push_back(std::move(v));
    h.ks.push_back(std::move(ks));
    h.vs.push_back(std::move(vs));
    h.kf.push_back(std::move(kf));
    h.vf.push_back(std::move(vf));
  }
  for (int64_t b = 0; b < nb; ++b) {
    h.kp.push_back(h.k[b].data() + d * block * es);
    h.vp.push_back(h.v[b].data() + d * es);
    h.ksp.push_back(h.ks[b].data() + qb * block);
    h.vsp.push_back(h.vs[b].data() + qb);
  }
  h.K = {t, h.kp.data(), h.ksp.data(), 0, 0};
  h.V = {t, h.vp.data(), h.vsp.data(), hd, 2 * qb};
  return h;
}

TEST(Ops, KvWidenEqualsFormatDefinitions) {
  std::mt19937_64 r(29);
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    IsaCap cap;
    if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
    for (DType t : {DType::BF16, DType::F16, DType::Q8_0})
      for (int64_t d : {32, 40, 24, 128})
        for (int64_t block : {64, 4}) {
          TypedHead h = typed_head(r, t, d, block, 2, /*any_bits=*/true);
          std::vector<float> out(static_cast<size_t>(d * block));
          for (int64_t b = 0; b < 2; ++b) {
            std::fill(out.begin(), out.end(), -1.0f);
            kv_widen_k(h.K, b, block, block, d, out.data(), cap);
            ASSERT_EQ(std::memcmp(out.data(), h.kf[b].data(), out.size() * 4), 0)
                << isa << " " << dtype_name(t) << " d " << d << " K";
            const int64_t n = block - 1;  // a partly filled block
            kv_widen_v(h.V, b, n, d, out.data(), cap);
            ASSERT_EQ(std::memcmp(out.data(), h.vf[b].data(), static_cast<size_t>(n * d) * 4), 0)
                << isa << " " << dtype_name(t) << " d " << d << " V";
          }
        }
  }
}

TEST(Ops, AttentionOverTypedKvBitsEqualF32OnWidenedValues) {
  std::mt19937_64 r(31);
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    IsaCap cap;
    if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
    for (DType t : {DType::BF16, DType::F16, DType::Q8_0})
      for (int64_t d : {32, 40, 64, 128})
        for (int64_t block : {64, 32, 4})
          for (auto [first, m] : std::vector<std::pair<int64_t, int64_t>>{
                   {1, 5}, {61, 9}, {130, 4}, {70, 3}, {3, 2}}) {
            const int64_t n_max = first + m - 1, nb = (n_max + block - 1) / block;
            TypedHead h = typed_head(r, t, d, block, nb, /*any_bits=*/false);
            std::vector<const float*> kf, vf;
            for (int64_t b = 0; b < nb; ++b) {
              kf.push_back(h.kf[b].data());
              vf.push_back(h.vf[b].data());
            }
            auto q = randv(r, m * d);
            std::vector<const float*> qp;
            std::vector<float*> op, op2;
            std::vector<float> out(static_cast<size_t>(m * d)), out2(out.size()),
                scratch(static_cast<size_t>(m * n_max));
            std::vector<int64_t> n_keys;
            for (int64_t i = 0; i < m; ++i) {
              qp.push_back(q.data() + i * d);
              op.push_back(out.data() + i * d);
              op2.push_back(out2.data() + i * d);
              n_keys.push_back(first + i);
            }
            attention_rows(qp.data(), m, n_keys.data(), h.K, h.V, block, d, 0.13f, op.data(),
                           scratch.data(), cap);
            attention_rows(qp.data(), m, n_keys.data(), kf.data(), vf.data(), block, d, d, 0.13f,
                           op2.data(), scratch.data(), cap);
            ASSERT_EQ(std::memcmp(out.data(), out2.data(), out.size() * 4), 0)
                << isa << " " << dtype_name(t) << " d " << d << " block " << block << " first "
                << first;
            // The last row against the double reference on the widened values.
            std::vector<double> keys, vals;
            for (int64_t j = 0; j < n_max; ++j)
              for (int64_t i = 0; i < d; ++i) {
                keys.push_back(h.kf[j / block][i * block + j % block]);
                vals.push_back(h.vf[j / block][(j % block) * d + i]);
              }
            std::vector<double> qd(q.begin() + (m - 1) * d, q.begin() + m * d), od(d);
            ref::attention(qd.data(), keys.data(), vals.data(), n_max, d, 0.13, od.data());
            for (int64_t i = 0; i < d; ++i)
              ASSERT_NEAR(out[(m - 1) * d + i], od[i], 1e-5) << isa << " " << dtype_name(t);
          }
  }
}

// attention_rows shares K/V loads between rows (on AVX-512 groups of 8 and then one of the 1-8
// left, on AVX2 the same for up to 8 rows, in the portable code groups of 4, when the block and
// d allow); each row's output must still be attention_head's bits for that row alone: rows that
// start before, inside and after a block boundary, tiles not a multiple of the groups, d with and
// without the grouped paths, keys ending mid-block; on every SIMD path this machine has; in both
// forms (rows a stride apart, rows at their own addresses).
TEST(Ops, AttentionRowsBitsEqualOneRowAtATime) {
  std::mt19937_64 r(17);
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    IsaCap cap;
    if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
    for (int64_t d : {32, 64, 128, 48}) {
      for (int64_t block : {64, 128, 32, 4}) {
        for (auto [first, m] : std::vector<std::pair<int64_t, int64_t>>{
                 {1, 16}, {60, 9}, {63, 5}, {130, 16}, {200, 3}, {7, 1}, {33, 12}}) {
          const int64_t ld = 2 * d;  // V rows hold two kv heads; we read head 1
          const int64_t n_max = first + m - 1;
          const int64_t nb = (n_max + block - 1) / block;
          std::vector<std::vector<float>> kb(static_cast<size_t>(nb)), vb(static_cast<size_t>(nb));
          std::vector<const float*> kp, vp;
          for (int64_t b = 0; b < nb; ++b) {
            kb[b] = randv(r, d * block);
            vb[b] = randv(r, block * ld);
            kp.push_back(kb[b].data());
            vp.push_back(vb[b].data() + d);
          }
          const int64_t ldq = d + 3, ldo = d + 5;
          auto q = randv(r, m * ldq);
          std::vector<int64_t> n_keys(static_cast<size_t>(m));
          for (int64_t i = 0; i < m; ++i) n_keys[i] = first + i;
          std::vector<float> out(static_cast<size_t>(m * ldo), 0.0f),
              scratch(static_cast<size_t>(m * n_max));
          attention_rows(q.data(), ldq, m, n_keys.data(), kp.data(), vp.data(), block, ld, d, 0.11f,
                         out.data(), ldo, scratch.data(), cap);
          // The pointer form, rows at addresses in no order (as grouped-query attention's rows of
          // several heads lie): row i's query at row m - 1 - i, its output at row (3i) % m of
          // another buffer (m not a multiple of 3 keeps that a permutation).
          std::vector<const float*> qp(static_cast<size_t>(m));
          std::vector<float*> op(static_cast<size_t>(m));
          std::vector<float> out2(static_cast<size_t>(m * ldo), 0.0f);
          const bool perm3 = m % 3 != 0;
          for (int64_t i = 0; i < m; ++i) {
            qp[i] = q.data() + (m - 1 - i) * ldq;
            op[i] = out2.data() + (perm3 ? (3 * i) % m : i) * ldo;
          }
          // n_keys are ascending in row order, so the reversed queries pair with them as given.
          attention_rows(qp.data(), m, n_keys.data(), kp.data(), vp.data(), block, ld, d, 0.11f,
                         op.data(), scratch.data(), cap);
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> one(static_cast<size_t>(d)), sc(static_cast<size_t>(n_keys[i]));
            attention_head(q.data() + i * ldq, kp.data(), vp.data(), block, ld, n_keys[i], d, 0.11f,
                           one.data(), sc.data(), cap);
            ASSERT_EQ(std::memcmp(one.data(), out.data() + i * ldo, d * 4), 0)
                << isa << " d " << d << " block " << block << " first " << first << " row " << i;
            attention_head(qp[i], kp.data(), vp.data(), block, ld, n_keys[i], d, 0.11f, one.data(),
                           sc.data(), cap);
            ASSERT_EQ(std::memcmp(one.data(), op[i], d * 4), 0)
                << "pointer rows: " << isa << " d " << d << " block " << block << " first " << first
                << " row " << i;
          }
        }
      }
    }
  }
}

// Every SIMD path gives the scalar path's bits for the same rows, over F32 and typed K/V:
// decode's groups of 1-8 rows (1-6 in whole 64-key K passes and 64-dim V passes; 3 and 5 query
// heads a K/V head, one head; on AVX2 groups of 5-8 as 4 and the rest), groups of 8 and then
// the rows left over, key counts that are not a multiple of 16, and large scores (the exp clamp
// at -87).
TEST(Ops, AttentionRowsBitsEqualAcrossIsas) {
  std::mt19937_64 r(41);
  IsaCap scalar;
  ASSERT_TRUE(parse_isa_cap("scalar", &scalar));
  // (first key count, rows, query scale)
  const std::vector<std::tuple<int64_t, int64_t, float>> cases = {
      {300, 4, 1.0f}, {77, 9, 1.0f},  {129, 4, 8.0f}, {40, 13, 0.5f}, {150, 3, 1.0f},
      {66, 6, 1.0f},  {200, 1, 2.0f}, {150, 7, 1.0f}, {150, 8, 1.0f}, {64, 2, 1.0f}};
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0})
    for (int64_t d : {64, 256, 96})
      for (auto [first, m, sd] : cases) {
        const int64_t block = 64, n_max = first + m - 1, nb = (n_max + block - 1) / block;
        TypedHead h = typed_head(r, t == DType::F32 ? DType::F16 : t, d, block, nb,
                                 /*any_bits=*/false);
        std::vector<const float*> kf, vf;
        for (int64_t b = 0; b < nb; ++b) {
          kf.push_back(h.kf[b].data());
          vf.push_back(h.vf[b].data());
        }
        auto q = randv(r, m * d, sd);
        std::vector<const float*> qp;
        std::vector<int64_t> n_keys;
        for (int64_t i = 0; i < m; ++i) {
          qp.push_back(q.data() + i * d);
          n_keys.push_back(first + i);
        }
        auto run = [&](IsaCap cap) {
          std::vector<float> out(static_cast<size_t>(m * d)),
              scratch(static_cast<size_t>(m * n_max));
          std::vector<float*> op;
          for (int64_t i = 0; i < m; ++i) op.push_back(out.data() + i * d);
          if (t == DType::F32)
            attention_rows(qp.data(), m, n_keys.data(), kf.data(), vf.data(), block, d, d, 0.13f,
                           op.data(), scratch.data(), cap);
          else
            attention_rows(qp.data(), m, n_keys.data(), h.K, h.V, block, d, 0.13f, op.data(),
                           scratch.data(), cap);
          return out;
        };
        const std::vector<float> want = run(scalar);
        for (const char* isa : {"avx512", "avx2"}) {
          IsaCap cap;
          if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
          const std::vector<float> got = run(cap);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
              << isa << " " << dtype_name(t) << " d " << d << " first " << first << " m " << m;
        }
      }
}

}  // namespace
}  // namespace rw

namespace rw {
namespace {

TEST(Ops, ExpFixedAccurateAndSameInVectorLoops) {
  std::vector<float> xs;
  for (float x = -90.0f; x <= 90.0f; x += 0.01237f) xs.push_back(x);
  for (float x : xs) {
    const double want = std::exp(static_cast<double>(std::clamp(x, -87.0f, 88.0f)));
    EXPECT_NEAR(exp_fixed(x) / want, 1.0, 5e-7) << x;
  }
  // swiglu uses the same exp inside a vectorised loop: element-wise equal to the scalar silu.
  std::vector<float> u(xs.size(), 1.0f), y(xs.size());
  swiglu(xs.data(), u.data(), y.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(y[i], silu(xs[i])) << xs[i];
  // In place over the gate (as the FFN runs it), with u not all ones: the same bits.
  std::vector<float> u2(xs.size()), g(xs), y2(xs.size());
  for (size_t i = 0; i < u2.size(); ++i) u2[i] = 0.5f + 0.001f * static_cast<float>(i % 97);
  swiglu(xs.data(), u2.data(), y2.data(), static_cast<int64_t>(xs.size()));
  swiglu(g.data(), u2.data(), g.data(), static_cast<int64_t>(g.size()));
  ASSERT_EQ(0, std::memcmp(g.data(), y2.data(), g.size() * sizeof(float)));
  // Special values, bit for bit (NaN payloads included), at every length up to 40 (the SIMD
  // loops' tails).
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {nan,     -nan,  inf,    -inf,   0.0f,   -0.0f, 1e-40f,
                           -1e-40f, 1e30f, -1e30f, 87.5f,  -87.5f, 88.5f, -88.5f,
                           3.0f,    -3.0f, 1e-3f,  -1e-3f, 20.0f};
  std::vector<float> sv;
  for (int rep = 0; rep < 3; ++rep)
    for (float v : special) sv.push_back(v);
  for (size_t n = 1; n <= 40; ++n) {
    std::vector<float> gs(sv.begin(), sv.begin() + static_cast<std::ptrdiff_t>(n)), us(n), ys(n);
    for (size_t i = 0; i < n; ++i) us[i] = 0.25f + 0.5f * static_cast<float>(i % 5);
    swiglu(gs.data(), us.data(), ys.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const float want = silu(gs[i]) * us[i];
      ASSERT_EQ(0, std::memcmp(&ys[i], &want, sizeof(float))) << "n " << n << " x " << gs[i];
    }
  }
}

// exp_scaled on every path is exp_fixed(x * a) element by element, bit for bit (NaN payloads
// included), on the range above, special values and every length up to 40 (the SIMD tails).
TEST(Ops, ExpScaledBitsEqualScalarExpFixed) {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs;
  for (float x = -90.0f; x <= 90.0f; x += 0.01237f) xs.push_back(x);
  for (float v : {nan, -nan, inf, -inf, 0.0f, -0.0f, 1e-40f, -1e-40f, 1e30f, -1e30f, 20.0f})
    xs.push_back(v);
  for (const char* isa : {"auto", "avx2", "scalar"}) {
    IsaCap cap;
    if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
    for (float a : {-0.6f, 1.0f, -7.25f, 0.0f}) {
      for (size_t n = 1; n <= 40; ++n) {
        std::vector<float> x(xs.end() - static_cast<std::ptrdiff_t>(n), xs.end()), y(n);
        exp_scaled(x.data(), a, y.data(), static_cast<int64_t>(n), cap);
        for (size_t i = 0; i < n; ++i) {
          const float want = exp_fixed(x[i] * a);
          ASSERT_EQ(0, std::memcmp(&y[i], &want, sizeof(float)))
              << isa << " n " << n << " x " << x[i] << " a " << a;
        }
      }
      std::vector<float> y(xs);  // in place
      exp_scaled(y.data(), a, y.data(), static_cast<int64_t>(y.size()), cap);
      for (size_t i = 0; i < xs.size(); ++i) {
        const float want = exp_fixed(xs[i] * a);
        ASSERT_EQ(0, std::memcmp(&y[i], &want, sizeof(float))) << isa << " x " << xs[i];
      }
    }
  }
}

// conv_silu with special inputs (NaN, infinities, huge values): each output is the documented
// chain and silu bit for bit, on every channel count's tail.
TEST(Ops, ConvSpecialValuesBitwise) {
  std::mt19937_64 r(9);
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {nan, inf, -inf, 1e30f, -1e30f, 1e-40f, -0.0f, 90.0f, -90.0f};
  const int64_t K = 4, T = 6;
  for (int64_t C : {5, 16, 37, 64, 150}) {
    auto w = randv(r, C * K), in = randv(r, T * C), win = randv(r, (K - 1) * C);
    for (size_t i = 0; i < in.size(); i += 7) in[i] = special[(i / 7) % 9];
    win[0] = nan;
    const auto win0 = win;
    std::vector<float> out(static_cast<size_t>(T * C));
    conv_silu(win.data(), in.data(), C, w.data(), out.data(), C, T, C, K, 0, C);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        float f = 0.0f;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          f = std::fma(w[j * C + c], src < 0 ? win0[(K - 1 + src) * C + c] : in[src * C + c], f);
        }
        const float want = silu(f);
        ASSERT_EQ(0, std::memcmp(&out[t * C + c], &want, sizeof(float)))
            << "C " << C << " t " << t << " c " << c << " got " << out[t * C + c] << " want "
            << want;
      }
  }
}

// dot_fixed's 16-lane tree: 16 -> 8 -> 4 -> 2 -> 1.
float tree16(const float* a) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// The scalar loop of mamba2_steps's contract, written out here: for each token, each row p and
// each n in order, the update's fma and the read-out's fma into lane n % 16, the 16 lanes summed
// by the fixed tree, then + D * x.
void mamba2_naive(float* S, const float* x, int64_t ldx, const float* B, const float* C,
                  int64_t ldbc, const float* dt, const float* dA, float D, float* y, int64_t ldy,
                  int64_t T, int64_t P, int64_t N) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t p = 0; p < P; ++p) {
      float* s = S + p * N;
      const float xs = x[t * ldx + p] * dt[t];
      float acc[16] = {};
      for (int64_t n = 0; n < N; ++n) {
        s[n] = std::fma(s[n], dA[t], B[t * ldbc + n] * xs);
        acc[n % 16] = std::fma(s[n], C[t * ldbc + n], acc[n % 16]);
      }
      y[t * ldy + p] = tree16(acc) + D * x[t * ldx + p];
    }
}

// The same bits, or both NaN (a NaN's payload and sign follow operand order, which compilers
// may swap in commutative operations).
bool same_bits_or_nan(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

// Every path of mamba2_steps (the AVX-512 and AVX2 two-token steps, and from 16 tokens the
// AVX-512 form with the rows in the lanes, included) against the naive loop above, bit for bit,
// with special values in the state and the inputs (NaN, infinities, subnormals, -0, huge values),
// even and odd token counts, row counts with and without a tail of under eight or sixteen, whole
// and partial blocks of 32 rows, and state sizes with and without a tail of under sixteen.
TEST(Ops, Mamba2StepsBitsEqualNaiveLoopWithSpecialValues) {
  std::mt19937_64 r(43);
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {nan, inf, -inf, 1e30f, -1e30f, 1e-40f, -0.0f, 3e38f, -1e-38f};
  for (auto [P, N] : std::vector<std::pair<int64_t, int64_t>>{
           {8, 16}, {11, 32}, {32, 128}, {64, 128}, {2, 48}, {9, 40}, {20, 24}, {48, 128}, {37, 8}})
    for (int64_t T : {1, 2, 4, 5, 9, 16, 33}) {
      const int64_t ldx = P + 1, ldbc = 2 * N + 3, ldy = P + 5;
      auto S0 = randv(r, P * N, 0.5f);
      auto x = randv(r, T * ldx), bc = randv(r, T * ldbc, 0.5f);
      for (size_t i = 3; i < S0.size(); i += 37) S0[i] = special[(i / 37) % 9];
      for (size_t i = 5; i < bc.size(); i += 53) bc[i] = special[(i / 53) % 9];
      x[static_cast<size_t>(ldx) - 2] = 1e-40f;
      std::vector<float> dt(static_cast<size_t>(T)), dA(dt.size());
      for (int64_t t = 0; t < T; ++t) {
        dt[t] = softplus(0.4f * static_cast<float>(t % 5) - 1.0f);
        dA[t] = exp_fixed(dt[t] * -0.6f);
      }
      const float D = 1.1f;
      const float* B = bc.data();
      const float* C = bc.data() + N;
      std::vector<float> Sw(S0), yw(static_cast<size_t>(T * ldy), -1.0f);
      mamba2_naive(Sw.data(), x.data(), ldx, B, C, ldbc, dt.data(), dA.data(), D, yw.data(), ldy, T,
                   P, N);
      for (const char* isa : {"auto", "avx2", "scalar"}) {
        IsaCap cap;
        if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
        std::vector<float> S(S0), y(yw.size(), -1.0f);
        mamba2_steps(S.data(), x.data(), ldx, B, C, ldbc, dt.data(), dA.data(), D, y.data(), ldy, T,
                     P, N, cap);
        for (auto [got, want] : {std::pair{&S, &Sw}, std::pair{&y, &yw}})
          for (size_t i = 0; i < want->size(); ++i)
            ASSERT_TRUE(same_bits_or_nan((*got)[i], (*want)[i]))
                << isa << " P" << P << " N" << N << " T" << T << " i " << i << ": " << (*got)[i]
                << " want " << (*want)[i];
      }
    }
}

// Mamba2's recurrence against the double reference, on every SIMD path, and its order contract:
// T tokens in one call equal any cut into calls and every path, bit for bit (S and y).
TEST(Ops, Mamba2StepsMatchReferenceAndAreCutInvariant) {
  std::mt19937_64 r(41);
  for (auto [P, N] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 24}, {16, 20}, {32, 128}, {5, 7}, {3, 16}, {8, 33}, {64, 128}, {13, 32}, {12, 40}})
    for (int64_t T : {1, 2, 3, 17, 70}) {
      const int64_t ldx = P + 3, ldbc = 2 * N + 1, ldy = P + 2;
      auto S0 = randv(r, P * N, 0.5f);
      auto x = randv(r, T * ldx), bc = randv(r, T * ldbc, 0.5f);
      std::vector<float> dt(static_cast<size_t>(T)), dA(dt.size());
      const float A = -0.7f, D = 0.9f;
      for (int64_t t = 0; t < T; ++t) {
        dt[t] = softplus(0.3f * static_cast<float>(t % 7) - 1.5f);
        dA[t] = exp_fixed(dt[t] * A);
      }
      const float* B = bc.data();
      const float* C = bc.data() + N;
      std::vector<float> Sref(S0), yref(static_cast<size_t>(T * ldy), -1.0f);
      bool have_ref = false;
      for (const char* isa : {"auto", "avx2", "scalar"}) {
        IsaCap cap;
        if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
        std::vector<float> S(S0), y(static_cast<size_t>(T * ldy), -1.0f);
        mamba2_steps(S.data(), x.data(), ldx, B, C, ldbc, dt.data(), dA.data(), D, y.data(), ldy, T,
                     P, N, cap);
        // Token by token, and in two calls cut at T / 2: the same bits.
        std::vector<float> S1(S0), y1(y.size(), -1.0f), S2(S0), y2(y.size(), -1.0f);
        for (int64_t t = 0; t < T; ++t)
          mamba2_steps(S1.data(), x.data() + t * ldx, ldx, B + t * ldbc, C + t * ldbc, ldbc,
                       dt.data() + t, dA.data() + t, D, y1.data() + t * ldy, ldy, 1, P, N, cap);
        const int64_t h = T / 2;
        mamba2_steps(S2.data(), x.data(), ldx, B, C, ldbc, dt.data(), dA.data(), D, y2.data(), ldy,
                     h, P, N, cap);
        mamba2_steps(S2.data(), x.data() + h * ldx, ldx, B + h * ldbc, C + h * ldbc, ldbc,
                     dt.data() + h, dA.data() + h, D, y2.data() + h * ldy, ldy, T - h, P, N, cap);
        for (auto* other : {&y1, &y2})
          ASSERT_EQ(std::memcmp(y.data(), other->data(), y.size() * 4), 0)
              << isa << " P" << P << " N" << N << " T" << T;
        ASSERT_EQ(std::memcmp(S.data(), S1.data(), S.size() * 4), 0) << isa;
        ASSERT_EQ(std::memcmp(S.data(), S2.data(), S.size() * 4), 0) << isa;
        if (!have_ref) {
          Sref = S;
          yref = y;
          have_ref = true;
        } else {  // every SIMD path gives the first path's bits
          ASSERT_EQ(std::memcmp(S.data(), Sref.data(), S.size() * 4), 0) << isa;
          ASSERT_EQ(std::memcmp(y.data(), yref.data(), y.size() * 4), 0) << isa;
        }
      }
      // The double reference, from the same dt and A.
      std::vector<double> Sd(S0.begin(), S0.end()), yd(static_cast<size_t>(P));
      for (int64_t t = 0; t < T; ++t) {
        auto xd = to_d(std::vector<float>(x.begin() + t * ldx, x.begin() + t * ldx + P));
        auto Bd = to_d(std::vector<float>(B + t * ldbc, B + t * ldbc + N));
        auto Cd = to_d(std::vector<float>(C + t * ldbc, C + t * ldbc + N));
        // dA as the kernel used it (exp_fixed), expressed through an equivalent A for this dt.
        const double Aeff = std::log(static_cast<double>(dA[t])) / dt[t];
        ref::mamba2_step(Sd.data(), xd.data(), Bd.data(), Cd.data(), dt[t], Aeff, D, yd.data(), P,
                         N);
        for (int64_t p = 0; p < P; ++p)
          ASSERT_NEAR(yref[t * ldy + p], yd[p], 2e-5 * (1 + std::abs(yd[p])))
              << "P" << P << " N" << N << " t" << t << " p" << p;
      }
      for (int64_t i = 0; i < P * N; ++i) ASSERT_NEAR(Sref[i], Sd[i], 2e-5 * (1 + std::abs(Sd[i])));
    }
}

TEST(Ops, Mamba2GatedNormMatchesReferenceOnEveryPath) {
  std::mt19937_64 r(42);
  for (auto [G, d] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 128}, {2, 96}, {8, 80}, {3, 17}}) {
    auto y = randv(r, G * d), z = randv(r, G * d), w = randv(r, G * d);
    std::vector<double> out_d(static_cast<size_t>(G * d));
    auto yd = to_d(y), zd = to_d(z), wd = to_d(w);
    ref::gated_rmsnorm_groups(yd.data(), zd.data(), wd.data(), out_d.data(), G, d, 1e-5);
    std::vector<float> first;
    for (const char* isa : {"auto", "avx2", "scalar"}) {
      IsaCap cap;
      if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
      std::vector<float> out(y);  // in place, as the model runs it
      gated_rmsnorm_groups(out.data(), z.data(), w.data(), out.data(), G, d, 1e-5f, cap);
      for (int64_t i = 0; i < G * d; ++i)
        ASSERT_NEAR(out[i], out_d[i], 1e-5 * (1 + std::abs(out_d[i]))) << isa << " " << i;
      if (first.empty()) first = out;
      ASSERT_EQ(std::memcmp(out.data(), first.data(), out.size() * 4), 0) << isa;
    }
  }
}

// The conv's bias starts each channel's chain: T tokens at once equal single steps, and the
// result is silu(bias + the taps' sum) within rounding.
TEST(Ops, ConvWithBiasOverTokensEqualsSingleSteps) {
  std::mt19937_64 r(43);
  for (int64_t C : {5, 64, 176}) {
    const int64_t K = 4, T = 9;
    auto w = randv(r, K * C), in = randv(r, T * C), bias = randv(r, C),
         win0 = randv(r, (K - 1) * C);
    for (const char* isa : {"auto", "scalar"}) {
      IsaCap cap;
      if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) continue;
      std::vector<float> wa(win0), wb(win0), oa(static_cast<size_t>(T * C)), ob(oa.size());
      conv_silu(wa.data(), in.data(), C, w.data(), oa.data(), C, T, C, K, 0, C, cap, bias.data());
      for (int64_t t = 0; t < T; ++t)
        conv_silu(wb.data(), in.data() + t * C, C, w.data(), ob.data() + t * C, C, 1, C, K, 0, C,
                  cap, bias.data());
      ASSERT_EQ(std::memcmp(oa.data(), ob.data(), oa.size() * 4), 0) << isa << " C" << C;
      ASSERT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * 4), 0) << isa << " C" << C;
      // Token 0 against the formula.
      for (int64_t c = 0; c < C; ++c) {
        double acc = bias[c];
        for (int64_t j = 0; j < K; ++j)
          acc += static_cast<double>(w[j * C + c]) * (j < K - 1 ? win0[j * C + c] : in[c]);
        ASSERT_NEAR(oa[c], ref::silu(acc), 1e-5 * (1 + std::abs(acc))) << isa << " c" << c;
      }
    }
  }
}

}  // namespace
}  // namespace rw
