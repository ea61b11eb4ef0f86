// Metadata readers and layer mappers shared by the Mamba2 hybrids' GGUF files
// (model/arch_granite.cpp, model/arch_nemotron_h.cpp); declarations and conventions in
// model/gguf_resolver.h.
#include <cmath>
#include <cstdio>
#include <set>

#include "rewind/model/gguf_resolver.h"

namespace rw {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = int64_t{1} << 16;

Status range(const GgufKeys& k, const std::string& key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return k.err(key, "= " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  return Ok{};
}

}  // namespace

Result<int64_t> GgufKeys::req(const std::string& k, int64_t lo, int64_t hi) const {
  REWIND_TRY(int64_t v, g_.get_int(a_ + k));
  REWIND_TRY_STATUS(range(*this, k, v, lo, hi));
  return v;
}

Result<int64_t> GgufKeys::opt(const std::string& k, int64_t def, int64_t lo, int64_t hi) const {
  REWIND_TRY(int64_t v, g_.get_int_or(a_ + k, def));
  REWIND_TRY_STATUS(range(*this, k, v, lo, hi));
  return v;
}

Result<double> GgufKeys::positive(const std::string& k, double def) const {
  REWIND_TRY(double v, g_.get_float_or(a_ + k, def));
  if (!std::isfinite(v) || v <= 0) return err(k, "= " + std::to_string(v) + " must be positive");
  return v;
}

Result<std::vector<int64_t>> GgufKeys::per_layer(const std::string& k, int64_t n, int64_t lo,
                                                 int64_t hi, int64_t def) const {
  const GgufValue* v = g_.get(a_ + k);
  if (!v && def >= 0) return std::vector<int64_t>(static_cast<size_t>(n), def);
  if (v && !v->is_array()) {
    REWIND_TRY(int64_t x, req(k, lo, hi));
    return std::vector<int64_t>(static_cast<size_t>(n), x);
  }
  REWIND_TRY(std::vector<int64_t> xs, g_.get_ints(a_ + k));
  if (static_cast<int64_t>(xs.size()) != n)
    return err(
        k, "has " + std::to_string(xs.size()) + " entries but block_count is " + std::to_string(n));
  for (size_t i = 0; i < xs.size(); ++i)
    REWIND_TRY_STATUS(range(*this, k + "[" + std::to_string(i) + "]", xs[i], lo, hi));
  return xs;
}

Status mamba2_sizes_from_gguf(const GgufKeys& k, ModelConfig* c) {
  REWIND_TRY(c->conv_kernel, k.req("ssm.conv_kernel", 1, 64));
  REWIND_TRY(int64_t inner, k.req("ssm.inner_size", 1, kMaxDim));
  REWIND_TRY(c->ssm_d_state, k.req("ssm.state_size", 1, kMaxDim));
  REWIND_TRY(c->ssm_n_head, k.req("ssm.time_step_rank", 1, kMaxDim));
  REWIND_TRY(c->ssm_n_group, k.req("ssm.group_count", 1, kMaxDim));
  if (inner % c->ssm_n_head != 0)
    return k.err("ssm.inner_size", "= " + std::to_string(inner) +
                                       " is not a multiple of 'ssm.time_step_rank' (the heads) = " +
                                       std::to_string(c->ssm_n_head));
  if (c->ssm_n_head % c->ssm_n_group != 0)
    return k.err("ssm.time_step_rank",
                 "= " + std::to_string(c->ssm_n_head) +
                     " is not a multiple of 'ssm.group_count' = " + std::to_string(c->ssm_n_group));
  c->ssm_head_dim = inner / c->ssm_n_head;
  c->ssm_norm_groups = c->ssm_n_group;  // llama.cpp's ssm_norm {d_inner / G, G}
  return Ok{};
}

Status hybrid_basics_from_gguf(const GgufKeys& k, ModelConfig* c, bool eps_fallback) {
  const GgufFile& g = k.file();
  const std::string& w = g.path();
  const GgufTensor* emb = g.find("token_embd.weight");
  if (!emb || emb->ne.size() != 2)
    return make_error(w + ": missing 2-D tensor 'token_embd.weight'");
  c->vocab_size = emb->ne[1];
  REWIND_TRY(c->hidden_size, k.req("embedding_length", 1, kMaxDim));
  if (emb->ne[0] != c->hidden_size)
    return make_error(w + ": tensor 'token_embd.weight' has ne[0] = " + std::to_string(emb->ne[0]) +
                      " but '" + k.key("embedding_length") + "' is " +
                      std::to_string(c->hidden_size));
  if (c->vocab_size < 1 || c->vocab_size > kMaxDim)
    return make_error(w + ": tensor 'token_embd.weight' has ne[1] = " +
                      std::to_string(c->vocab_size) + ", out of range");
  REWIND_TRY(c->n_layer, k.req("block_count", 1, kMaxLayers));
  REWIND_TRY(c->n_head, k.req("attention.head_count", 1, kMaxDim));
  const bool rms_key = g.get(k.key("attention.layer_norm_rms_epsilon")) != nullptr;
  const bool use_fallback =
      eps_fallback && !rms_key && g.get(k.key("attention.layer_norm_epsilon")) != nullptr;
  REWIND_TRY(c->rms_norm_eps,
             g.get_float(k.key(use_fallback ? "attention.layer_norm_epsilon"
                                            : "attention.layer_norm_rms_epsilon")));
  if (!std::isfinite(c->rms_norm_eps) || c->rms_norm_eps <= 0)
    return k.err(use_fallback ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon",
                 "must be positive");
  REWIND_TRY(c->max_position_embeddings, k.opt("context_length", 4096, 1, int64_t{1} << 40));
  c->rope_dim = 0;
  c->attn_output_gate = false;
  c->attn_qk_norm = false;
  c->tie_word_embeddings = g.find("output.weight") == nullptr;
  REWIND_TRY(c->bos_token_id, g.get_int_or("tokenizer.ggml.bos_token_id", -1));
  REWIND_TRY(c->eos_token_ids, gguf_end_of_generation_ids(g, c->vocab_size));
  return Ok{};
}

Result<std::vector<int64_t>> gguf_end_of_generation_ids(const GgufFile& g, int64_t vocab_size) {
  std::set<int64_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    REWIND_TRY(int64_t id, g.get_int_or(key, -1));
    if (id >= vocab_size)
      std::fprintf(stderr, "rewind: warning: %s: %s = %lld is outside the vocabulary; ignored\n",
                   g.path().c_str(), key, static_cast<long long>(id));
    else if (id >= 0)
      ids.insert(id);
  }
  // llama.cpp's llama_vocab::load: tokens ending a generation by their text.
  static const std::set<std::string, std::less<>> kTexts = {
      "<|eot_id|>",    "<|im_end|>",    "<|end|>", "<|return|>",      "<|call|>",
      "<end_of_turn>", "<|endoftext|>", "</s>",    "<|eom_id|>",      "<EOT>",
      "_<EOT>",        "[EOT]",         "[EOS]",   "<|end_of_text|>", "<end_of_utterance>"};
  if (g.get("tokenizer.ggml.tokens")) {
    REWIND_TRY(std::vector<std::string> tokens, g.get_strings("tokenizer.ggml.tokens"));
    for (size_t id = 0; id < tokens.size() && static_cast<int64_t>(id) < vocab_size; ++id)
      if (kTexts.count(tokens[id])) ids.insert(static_cast<int64_t>(id));
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

Status attention_sizes_from_gguf(const GgufKeys& k, const std::vector<int64_t>& kv,
                                 ModelConfig* c) {
  c->n_head_kv = 0;
  for (size_t il = 0; il < kv.size(); ++il) {
    if (kv[il] == 0) continue;
    if (c->n_head_kv != 0 && kv[il] != c->n_head_kv)
      return k.err("attention.head_count_kv", "has " + std::to_string(kv[il]) + " at block " +
                                                  std::to_string(il) + " but " +
                                                  std::to_string(c->n_head_kv) +
                                                  " at an earlier attention block (one count "
                                                  "for all is supported)");
    c->n_head_kv = kv[il];
  }
  if (c->n_head_kv == 0) c->n_head_kv = c->n_head;  // no attention layer
  if (c->n_head % c->n_head_kv != 0)
    return k.err("attention.head_count", "= " + std::to_string(c->n_head) +
                                             " is not a multiple of 'attention.head_count_kv' = " +
                                             std::to_string(c->n_head_kv));
  const int64_t def = c->hidden_size % c->n_head == 0 ? c->hidden_size / c->n_head : -1;
  if (def < 0 && !k.has("attention.key_length"))
    return k.err("attention.key_length",
                 "is missing and 'embedding_length' is not a multiple of 'attention.head_count'");
  REWIND_TRY(c->head_dim, k.opt("attention.key_length", def, 1, kMaxDim));
  REWIND_TRY(int64_t vlen, k.opt("attention.value_length", c->head_dim, 1, kMaxDim));
  if (vlen != c->head_dim)
    return k.err("attention.value_length",
                 "= " + std::to_string(vlen) +
                     " differs from 'attention.key_length' = " + std::to_string(c->head_dim));
  return Ok{};
}

Status map_norm_gguf(const GgufResolver& R, const std::string& name, int64_t n,
                     const std::string& dst, WeightSet* ws) {
  REWIND_TRY(GgufFound t, R.need(name, {n}));
  ws->put(dst, GgufResolver::owned(t, 1, n));
  return Ok{};
}

Status map_head_gguf(const GgufResolver& R, const ModelConfig& c, WeightSet* ws) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  REWIND_TRY(GgufFound embed, R.need("token_embd.weight", {V, H}));
  ws->put("embed", GgufResolver::view(embed, V, H));
  if (R.has("output.weight")) {
    REWIND_TRY(GgufFound out, R.need("output.weight", {V, H}));
    ws->put("lm_head", GgufResolver::view(out, V, H));
  } else {
    ws->put("lm_head", ws->get("embed"));
  }
  return map_norm_gguf(R, "output_norm.weight", H, "final_norm", ws);
}

Status map_mamba2_gguf(const GgufResolver& R, const std::string& p, const std::string& cp,
                       const ModelConfig& c, WeightSet* ws) {
  const int64_t H = c.hidden_size, Hs = c.ssm_n_head, DI = c.ssm_d_inner(), CD = c.conv_dim(),
                K = c.conv_kernel, G = c.ssm_n_group;
  const int64_t in_rows = 2 * DI + 2 * G * c.ssm_d_state + Hs;  // [z ; x, B, C ; dt]
  REWIND_TRY(GgufFound in, R.need(p + "ssm_in.weight", {in_rows, H}));
  ws->put(cp + "in_proj", GgufResolver::view(in, in_rows, H));
  REWIND_TRY(GgufFound conv, R.need(p + "ssm_conv1d.weight", {CD, K}));
  ws->put(cp + "conv", GgufResolver::owned(conv, CD, K));
  if (c.ssm_conv_bias) {
    REWIND_TRY(GgufFound cb, R.need(p + "ssm_conv1d.bias", {CD}));
    ws->put(cp + "conv_bias", GgufResolver::owned(cb, 1, CD));
  } else {
    if (R.has(p + "ssm_conv1d.bias"))
      return make_error(R.file().path() + ": tensor '" + p +
                        "ssm_conv1d.bias' is present but the first Mamba2 block has none");
    auto zeros = std::make_shared<std::vector<float>>(static_cast<size_t>(CD), 0.0f);
    WeightSource w;
    w.cols = CD;
    w.blocks.push_back(RowBlock{zeros->data(), DType::F32, 1, zeros});
    ws->put(cp + "conv_bias", std::move(w));
  }
  // ssm_a and ssm_d are {1, H}: one value per head.
  REWIND_TRY(GgufFound A, R.need(p + "ssm_a", {Hs, 1}));
  ws->put(cp + "A", GgufResolver::owned(A, 1, Hs));
  REWIND_TRY(GgufFound D, R.need(p + "ssm_d", {Hs, 1}));
  ws->put(cp + "D", GgufResolver::owned(D, 1, Hs));
  REWIND_TRY(GgufFound dtb, R.need(p + "ssm_dt.bias", {Hs}));
  ws->put(cp + "dt_bias", GgufResolver::owned(dtb, 1, Hs));
  REWIND_TRY(GgufFound gn, R.need(p + "ssm_norm.weight", {G, DI / G}));
  ws->put(cp + "gnorm", GgufResolver::owned(gn, 1, DI));
  REWIND_TRY(GgufFound out, R.need(p + "ssm_out.weight", {H, DI}));
  ws->put(cp + "out_proj", GgufResolver::view(out, H, DI));
  return Ok{};
}

Status map_plain_attention_gguf(const GgufResolver& R, const std::string& p, const std::string& cp,
                                const ModelConfig& c, WeightSet* ws) {
  const int64_t H = c.hidden_size, D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  REWIND_TRY(GgufFound q, R.need(p + "attn_q.weight", {nh * D, H}));
  REWIND_TRY(GgufFound k, R.need(p + "attn_k.weight", {nkv * D, H}));
  REWIND_TRY(GgufFound v, R.need(p + "attn_v.weight", {nkv * D, H}));
  WeightSource s;
  s.cols = H;
  s.file_dtype = q.dtype;
  s.blocks = {GgufResolver::rows_of(q, 0, nh * D, H), GgufResolver::rows_of(k, 0, nkv * D, H),
              GgufResolver::rows_of(v, 0, nkv * D, H)};
  ws->put(cp + "qkv", std::move(s));
  REWIND_TRY(GgufFound o, R.need(p + "attn_output.weight", {H, nh * D}));
  ws->put(cp + "o_proj", GgufResolver::view(o, H, nh * D));
  return Ok{};
}

}  // namespace rw
