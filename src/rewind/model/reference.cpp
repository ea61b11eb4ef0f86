#include "rewind/model/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rewind/kernels/ops_ref.h"
#include "rewind/model/weight_source.h"

namespace rw {

ReferenceModel::ReferenceModel(const ModelConfig& cfg, const WeightSet& ws) : cfg_(cfg), ws_(ws) {
  REWIND_CHECK_MSG(cfg.family == Family::Qwen35 || cfg.family == Family::Qwen35Moe ||
                       cfg.family == Family::Qwen3Next,
                   "ReferenceModel implements the Qwen3.5 families only");
}

const ReferenceModel::Mat& ReferenceModel::mat(const std::string& name) const {
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second;
  const WeightSource& w = ws_.get(name);
  Mat m;
  m.rows = w.rows();
  m.cols = w.cols;
  m.v.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) w.row_f64(r, m.v.data() + r * m.cols);
  return cache_.emplace(name, std::move(m)).first->second;
}

void ReferenceModel::matvec(const Mat& m, const double* x, double* y) {
  for (int64_t r = 0; r < m.rows; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < m.cols; ++c) acc += m.v[r * m.cols + c] * x[c];
    y[r] = acc;
  }
}

void ReferenceModel::gdn_mixer(const std::string& p, const Rows& xn, Rows& mix) const {
  const ModelConfig& c = cfg_;
  const int64_t T = static_cast<int64_t>(xn.size());
  const double eps = c.rms_norm_eps;
  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t r = Hv / Hk, CD = c.conv_dim(), VD = c.value_dim(), KD = c.key_dim(),
                K = c.conv_kernel;
  const Mat& in_proj = mat(p + "in_proj");
  const Mat& conv = mat(p + "conv");
  const Mat& A = mat(p + "A");
  const Mat& dtb = mat(p + "dt_bias");
  const Mat& gn = mat(p + "gnorm");
  const Mat& outp = mat(p + "out_proj");
  std::vector<std::vector<double>> proj(static_cast<size_t>(T), std::vector<double>(in_proj.rows));
  for (int64_t t = 0; t < T; ++t) matvec(in_proj, xn[t].data(), proj[t].data());
  std::vector<double> S(static_cast<size_t>(Hv * dk * dv), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    // Causal conv over the raw mixed projections (zeros before the start), then SiLU.
    std::vector<double> cv(static_cast<size_t>(CD));
    for (int64_t ch = 0; ch < CD; ++ch) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        if (src >= 0) acc += conv.v[ch * K + j] * proj[src][ch];
      }
      cv[ch] = ref::silu(acc);
    }
    for (int64_t g = 0; g < Hk; ++g) {
      ref::l2norm(cv.data() + g * dk, dk, 1e-6, 1.0 / std::sqrt(static_cast<double>(dk)));
      ref::l2norm(cv.data() + KD + g * dk, dk, 1e-6, 1.0);
    }
    std::vector<double> o(static_cast<size_t>(VD)), y(static_cast<size_t>(VD));
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t g = h / r;
      const double b = proj[t][CD + VD + h], a = proj[t][CD + VD + Hv + h];
      const double gate = A.v[h] * ref::softplus(a + dtb.v[h]);
      ref::gdn_step(S.data() + h * dk * dv, cv.data() + g * dk, cv.data() + KD + g * dk,
                    cv.data() + 2 * KD + h * dv, std::exp(gate), ref::sigmoid(b), o.data() + h * dv,
                    dk, dv);
      ref::gated_rmsnorm(o.data() + h * dv, proj[t].data() + CD + h * dv, gn.v.data(),
                         y.data() + h * dv, dv, eps);
    }
    matvec(outp, y.data(), mix[t].data());
  }
}

void ReferenceModel::attention_mixer(const std::string& p, const Rows& xn, Rows& mix) const {
  const ModelConfig& c = cfg_;
  const int64_t T = static_cast<int64_t>(xn.size());
  const double eps = c.rms_norm_eps;
  const int64_t nh = c.n_head, nkv = c.n_head_kv, D = c.head_dim, grp = nh / nkv;
  const Mat& qkv = mat(p + "qkv");
  const Mat& qn = mat(p + "q_norm");
  const Mat& kn = mat(p + "k_norm");
  const Mat& op = mat(p + "o_proj");
  std::vector<std::vector<double>> q(static_cast<size_t>(T)), gate(static_cast<size_t>(T));
  std::vector<std::vector<double>> keys(static_cast<size_t>(nkv)), vals(static_cast<size_t>(nkv));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> row(static_cast<size_t>(qkv.rows));
    matvec(qkv, xn[t].data(), row.data());
    q[t].resize(static_cast<size_t>(nh * D));
    gate[t].resize(static_cast<size_t>(nh * D));
    for (int64_t h = 0; h < nh; ++h) {
      std::vector<double> qh(row.begin() + h * 2 * D, row.begin() + h * 2 * D + D);
      ref::rmsnorm(qh.data(), qn.v.data(), q[t].data() + h * D, D, eps);
      ref::rope(q[t].data() + h * D, c.rope_dim, c.rope_theta, t);
      for (int64_t i = 0; i < D; ++i) gate[t][h * D + i] = row[h * 2 * D + D + i];
    }
    for (int64_t j = 0; j < nkv; ++j) {
      std::vector<double> kh(static_cast<size_t>(D));
      ref::rmsnorm(row.data() + nh * 2 * D + j * D, kn.v.data(), kh.data(), D, eps);
      ref::rope(kh.data(), c.rope_dim, c.rope_theta, t);
      keys[j].insert(keys[j].end(), kh.begin(), kh.end());
      vals[j].insert(vals[j].end(), row.begin() + nh * 2 * D + nkv * D + j * D,
                     row.begin() + nh * 2 * D + nkv * D + (j + 1) * D);
    }
    std::vector<double> att(static_cast<size_t>(nh * D));
    for (int64_t h = 0; h < nh; ++h) {
      ref::attention(q[t].data() + h * D, keys[h / grp].data(), vals[h / grp].data(), t + 1, D,
                     1.0 / std::sqrt(static_cast<double>(D)), att.data() + h * D);
      for (int64_t i = 0; i < D; ++i) att[h * D + i] *= ref::sigmoid(gate[t][h * D + i]);
    }
    matvec(op, att.data(), mix[t].data());
  }
}

void ReferenceModel::swiglu(const std::string& p, const double* in, double* y) const {
  const Mat& gu = mat(p + "gate_up");
  const Mat& dn = mat(p + "down");
  const int64_t F = dn.cols;
  std::vector<double> h(static_cast<size_t>(2 * F)), a(static_cast<size_t>(F));
  matvec(gu, in, h.data());
  for (int64_t i = 0; i < F; ++i) a[i] = ref::silu(h[i]) * h[F + i];
  matvec(dn, a.data(), y);
}

void ReferenceModel::ffn(const std::string& p, bool moe, const double* xn, double* f) const {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden_size;
  std::fill(f, f + H, 0.0);
  if (!moe) {
    swiglu(p, xn, f);
    return;
  }
  const int64_t E = c.n_expert, k = c.n_expert_used;
  const Mat& router = mat(p + "router");
  std::vector<double> l(static_cast<size_t>(E));
  matvec(router, xn, l.data());
  const double mx = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (auto& v : l) sum += (v = std::exp(v - mx));
  for (auto& v : l) v /= sum;
  std::vector<int> idx(static_cast<size_t>(E));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return l[a] > l[b]; });
  double wsum = 0;
  for (int64_t j = 0; j < k; ++j) wsum += l[idx[j]];
  std::vector<double> y(static_cast<size_t>(H));
  for (int64_t j = 0; j < k; ++j) {
    swiglu(p + "e" + std::to_string(idx[j]) + ".", xn, y.data());
    const double w = c.norm_topk_prob ? l[idx[j]] / wsum : l[idx[j]];
    for (int64_t i = 0; i < H; ++i) f[i] += w * y[i];
  }
  const Mat& sg = mat(p + "sh.gate");
  double gl = 0;
  matvec(sg, xn, &gl);
  swiglu(p + "sh.", xn, y.data());
  for (int64_t i = 0; i < H; ++i) f[i] += ref::sigmoid(gl) * y[i];
}

void ReferenceModel::decoder_layer(const std::string& p, bool linear, bool moe, Rows& x) const {
  const int64_t H = cfg_.hidden_size, T = static_cast<int64_t>(x.size());
  const double eps = cfg_.rms_norm_eps;
  const Mat& in_norm = mat(p + "in_norm");
  Rows xn(static_cast<size_t>(T), std::vector<double>(H));
  for (int64_t t = 0; t < T; ++t) ref::rmsnorm(x[t].data(), in_norm.v.data(), xn[t].data(), H, eps);
  Rows mix(static_cast<size_t>(T), std::vector<double>(H));
  if (linear) {
    gdn_mixer(p, xn, mix);
  } else {
    attention_mixer(p, xn, mix);
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x[t][i] += mix[t][i];
  const Mat& post = mat(p + "post_norm");
  std::vector<double> f(static_cast<size_t>(H));
  for (int64_t t = 0; t < T; ++t) {
    ref::rmsnorm(x[t].data(), post.v.data(), xn[t].data(), H, eps);
    ffn(p, moe, xn[t].data(), f.data());
    for (int64_t i = 0; i < H; ++i) x[t][i] += f[i];
  }
}

ReferenceModel::Rows ReferenceModel::forward(const std::vector<int32_t>& tokens,
                                             Rows* final_hidden) const {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden_size, T = static_cast<int64_t>(tokens.size());
  const double eps = c.rms_norm_eps;
  Rows x(static_cast<size_t>(T), std::vector<double>(H));
  const Mat& emb = mat("embed");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x[t][i] = emb.v[tokens[t] * H + i];
  for (int64_t il = 0; il < c.n_layer; ++il)
    decoder_layer(layer_prefix(il), c.layer_kinds[il] == LayerKind::GatedDeltaNet,
                  c.layer_is_moe(il), x);

  const Mat& fn = mat("final_norm");
  const Mat& lm = mat("lm_head");
  Rows logits(static_cast<size_t>(T), std::vector<double>(lm.rows));
  if (final_hidden) final_hidden->assign(static_cast<size_t>(T), std::vector<double>(H));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> h(static_cast<size_t>(H));
    ref::rmsnorm(x[t].data(), fn.v.data(), h.data(), H, eps);
    matvec(lm, h.data(), logits[t].data());
    if (final_hidden) (*final_hidden)[t] = h;
  }
  return logits;
}

ReferenceModel::Rows ReferenceModel::mtp_forward_entries(const Rows& hidden,
                                                         const std::vector<int32_t>& next_tokens,
                                                         Rows* mtp_hidden) const {
  const ModelConfig& c = cfg_;
  REWIND_CHECK_MSG(ws_.has_mtp(), "the checkpoint has no MTP head");
  REWIND_CHECK(hidden.size() == next_tokens.size());
  const int64_t H = c.hidden_size, T = static_cast<int64_t>(hidden.size());
  const double eps = c.rms_norm_eps;
  const Mat& emb = mat("embed");
  const Mat& enorm = mat("mtp.enorm");
  const Mat& hnorm = mat("mtp.hnorm");
  const Mat& fc = mat("mtp.fc");
  Rows x(static_cast<size_t>(T), std::vector<double>(H));
  std::vector<double> cat(static_cast<size_t>(2 * H));
  for (int64_t t = 0; t < T; ++t) {
    REWIND_CHECK(static_cast<int64_t>(hidden[t].size()) == H);
    REWIND_CHECK(next_tokens[t] >= 0 && next_tokens[t] < emb.rows);
    ref::rmsnorm(emb.v.data() + next_tokens[t] * H, enorm.v.data(), cat.data(), H, eps);
    ref::rmsnorm(hidden[t].data(), hnorm.v.data(), cat.data() + H, H, eps);
    matvec(fc, cat.data(), x[t].data());
  }
  decoder_layer(layer_prefix(c.n_layer), false, c.mtp_layer_is_moe(), x);
  const Mat& mn = mat("mtp.norm");
  const Mat& lm = mat("lm_head");
  Rows logits(static_cast<size_t>(T), std::vector<double>(lm.rows));
  if (mtp_hidden) mtp_hidden->assign(static_cast<size_t>(T), std::vector<double>(H));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> h(static_cast<size_t>(H));
    ref::rmsnorm(x[t].data(), mn.v.data(), h.data(), H, eps);
    matvec(lm, h.data(), logits[t].data());
    if (mtp_hidden) (*mtp_hidden)[t] = h;
  }
  return logits;
}

ReferenceModel::Rows ReferenceModel::mtp_forward(const std::vector<int32_t>& tokens,
                                                 Rows* mtp_hidden) const {
  if (tokens.size() < 2) {
    if (mtp_hidden) mtp_hidden->clear();
    return {};
  }
  Rows h;
  forward(tokens, &h);
  h.pop_back();  // the last position has no next token
  return mtp_forward_entries(h, std::vector<int32_t>(tokens.begin() + 1, tokens.end()), mtp_hidden);
}

}  // namespace rw
