#include <cmath>

#include "rewind/model/hf_resolver.h"

namespace rw {

Status map_mamba2_hf(const HfResolver& R, const std::string& src, const std::string& cp,
                     const ModelConfig& c, WeightSet* ws) {
  const int64_t H = c.hidden_size, Hs = c.ssm_n_head, DI = c.ssm_d_inner(), CD = c.conv_dim(),
                K = c.conv_kernel;
  auto same = [](float x) { return x; };
  REWIND_TRY(auto* in,
             R.need(src + "in_proj.weight", {2 * DI + 2 * c.ssm_n_group * c.ssm_d_state + Hs, H}));
  ws->put(cp + "in_proj", HfResolver::view(in, 2 * DI + 2 * c.ssm_n_group * c.ssm_d_state + Hs, H));
  REWIND_TRY(auto* conv, R.need(src + "conv1d.weight", {CD, 1, K}));
  ws->put(cp + "conv", HfResolver::owned(conv, CD, K, same));
  if (c.ssm_conv_bias) {
    REWIND_TRY(auto* cb, R.need(src + "conv1d.bias", {CD}));
    ws->put(cp + "conv_bias", HfResolver::owned(cb, 1, CD, same));
  } else {
    auto zeros = std::make_shared<std::vector<float>>(static_cast<size_t>(CD), 0.0f);
    WeightSource w;
    w.cols = CD;
    w.blocks.push_back(RowBlock{zeros->data(), DType::F32, 1, zeros});
    ws->put(cp + "conv_bias", std::move(w));
  }
  REWIND_TRY(auto* alog, R.need(src + "A_log", {Hs}));
  ws->put(cp + "A", HfResolver::owned(alog, 1, Hs, [](float x) { return -std::exp(x); }));
  REWIND_TRY(auto* dtb, R.need(src + "dt_bias", {Hs}));
  ws->put(cp + "dt_bias", HfResolver::owned(dtb, 1, Hs, same));
  REWIND_TRY(auto* d, R.need(src + "D", {Hs}));
  ws->put(cp + "D", HfResolver::owned(d, 1, Hs, same));
  REWIND_TRY(auto* gn, R.need(src + "norm.weight", {DI}));
  ws->put(cp + "gnorm", HfResolver::owned(gn, 1, DI, same));
  REWIND_TRY(auto* out, R.need(src + "out_proj.weight", {H, DI}));
  ws->put(cp + "out_proj", HfResolver::view(out, H, DI));
  return Ok{};
}

Status map_plain_attention_hf(const HfResolver& R, const std::string& src, const std::string& cp,
                              const ModelConfig& c, WeightSet* ws) {
  const int64_t H = c.hidden_size, D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  REWIND_TRY(auto* q, R.need(src + "q_proj.weight", {nh * D, H}));
  REWIND_TRY(auto* k, R.need(src + "k_proj.weight", {nkv * D, H}));
  REWIND_TRY(auto* v, R.need(src + "v_proj.weight", {nkv * D, H}));
  ws->put(cp + "qkv", HfResolver::stacked(H, q->dtype,
                                          {HfResolver::rows_of(q, 0, nh * D, H),
                                           HfResolver::rows_of(k, 0, nkv * D, H),
                                           HfResolver::rows_of(v, 0, nkv * D, H)}));
  REWIND_TRY(auto* o, R.need(src + "o_proj.weight", {H, nh * D}));
  ws->put(cp + "o_proj", HfResolver::view(o, H, nh * D));
  return Ok{};
}

Status map_norm_hf(const HfResolver& R, const std::string& name, int64_t n, const std::string& dst,
                   WeightSet* ws) {
  REWIND_TRY(auto* t, R.need(name, {n}));
  ws->put(dst, HfResolver::owned(t, 1, n, [](float x) { return x; }));
  return Ok{};
}

}  // namespace rw
