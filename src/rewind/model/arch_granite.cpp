// The Granite-4.0-H entry of the architecture registry (model/arch.h): HF `granitemoehybrid`.
// Mamba2 and attention layers per `layer_types`, each followed by a shared SwiGLU MLP plus routed
// experts (dense when there are none); embedding, residual and attention multipliers, logits
// scaling; no positional encoding. Spec: docs/MAMBA2.md.
//
// Choices (each explicit, documented once): sizes that fix tensor shapes are required;
// position_embedding_type other than absent / "nope" (i.e. "rope") is refused (every released
// Granite-4.0-H is NoPE and llama.cpp converts them as NoPE); mamba_proj_bias, attention_bias
// and a hidden_act other than silu are refused; the gated norm spans all of d_inner as in HF
// (llama.cpp groups it by mamba_n_groups, the same when that is 1, as in every release).
#include <cmath>

#include "rewind/model/arch.h"
#include "rewind/model/config_fields.h"
#include "rewind/model/gguf_resolver.h"
#include "rewind/model/hf_resolver.h"

namespace rw {

namespace {

using namespace cfg;

Result<ModelConfig> parse_hf(const json& root, const std::string& model_type,
                             const std::string& where) {
  const Fields f(root, "", where);
  ModelConfig c;
  c.family = Family::GraniteHybrid;
  c.model_type = model_type;
  REWIND_TRY(c.vocab_size, f.int_req("vocab_size", 1, kMaxDim));
  REWIND_TRY(c.hidden_size, f.int_req("hidden_size", 1, kMaxDim));
  REWIND_TRY(c.n_layer, f.int_req("num_hidden_layers", 1, kMaxLayers));
  REWIND_TRY(c.n_head, f.int_req("num_attention_heads", 1, kMaxDim));
  REWIND_TRY(c.n_head_kv, f.int_opt("num_key_value_heads", c.n_head, 1, kMaxDim));
  if (c.n_head % c.n_head_kv != 0 || c.hidden_size % c.n_head != 0)
    return f.err("num_attention_heads = " + std::to_string(c.n_head) +
                 " must divide hidden_size and be a multiple of num_key_value_heads = " +
                 std::to_string(c.n_head_kv));
  c.head_dim = c.hidden_size / c.n_head;
  c.rope_dim = 0;
  c.attn_output_gate = false;
  c.attn_qk_norm = false;
  {
    REWIND_TRY(auto pe, f.str_opt("position_embedding_type"));
    if (pe && *pe != "nope")
      return f.err("field 'position_embedding_type' is '" + *pe +
                   "': only \"nope\" (no positional encoding) is supported");
  }
  // The HF defaults are 1.0, the attention softmax scale included (not 1/sqrt(head_dim)).
  for (auto [key, dst] : {std::pair<const char*, double*>{"attention_multiplier", &c.attn_scale},
                          {"embedding_multiplier", &c.embedding_multiplier},
                          {"residual_multiplier", &c.residual_multiplier},
                          {"logits_scaling", &c.logits_scaling}}) {
    REWIND_TRY(*dst, f.num_opt(key, 1.0));
    if (!std::isfinite(*dst) || *dst <= 0)
      return f.err("field '" + std::string(key) + "' = " + std::to_string(*dst) +
                   " must be a positive number");
  }

  // Layers: layer_types (or its alias layers_block_type), else every layer is Mamba2.
  const char* lt_key = f.has("layer_types") ? "layer_types" : "layers_block_type";
  if (const json* lt = f.find(lt_key)) {
    if (!lt->is_array()) return f.wrong_type(lt_key, "a list of strings", *lt);
    if (static_cast<int64_t>(lt->size()) != c.n_layer)
      return f.err("field '" + std::string(lt_key) + "' has " + std::to_string(lt->size()) +
                   " entries but 'num_hidden_layers' is " + std::to_string(c.n_layer));
    for (size_t il = 0; il < lt->size(); ++il) {
      const json& e = (*lt)[il];
      if (e.is_string() && e.get_ref<const std::string&>() == "mamba")
        c.layer_kinds.push_back(LayerKind::Mamba2);
      else if (e.is_string() && e.get_ref<const std::string&>() == "attention")
        c.layer_kinds.push_back(LayerKind::Attention);
      else
        return f.err("field '" + std::string(lt_key) + "[" + std::to_string(il) + "]' is " +
                     preview(e) + " (expected \"mamba\" or \"attention\")");
    }
  } else {
    c.layer_kinds.assign(static_cast<size_t>(c.n_layer), LayerKind::Mamba2);
  }

  // Mamba2.
  REWIND_TRY(c.ssm_n_head, f.int_req("mamba_n_heads", 1, kMaxDim));
  REWIND_TRY(c.ssm_n_group, f.int_opt("mamba_n_groups", 1, 1, kMaxDim));
  REWIND_TRY(c.ssm_d_state, f.int_req("mamba_d_state", 1, kMaxDim));
  REWIND_TRY(c.conv_kernel, f.int_opt("mamba_d_conv", 4, 1, 64));
  REWIND_TRY(int64_t expand, f.int_opt("mamba_expand", 2, 1, 64));
  const int64_t d_inner = expand * c.hidden_size;
  if (const json* dh = f.find("mamba_d_head"); dh && !(dh->is_string() && *dh == "auto")) {
    REWIND_TRY(c.ssm_head_dim, f.to_int("mamba_d_head", *dh, 1, kMaxDim));
  } else {
    c.ssm_head_dim = d_inner / c.ssm_n_head;
  }
  if (c.ssm_head_dim * c.ssm_n_head != d_inner)
    return f.err("mamba_n_heads (" + std::to_string(c.ssm_n_head) + ") x mamba_d_head (" +
                 std::to_string(c.ssm_head_dim) + ") must equal mamba_expand x hidden_size (" +
                 std::to_string(d_inner) + ")");
  REWIND_TRY(c.ssm_conv_bias, f.bool_opt("mamba_conv_bias", true));
  c.ssm_norm_groups = 1;
  REWIND_TRY_STATUS(check_mamba2_sizes(f, c));
  {
    REWIND_TRY(bool pb, f.bool_opt("mamba_proj_bias", false));
    REWIND_TRY(bool ab, f.bool_opt("attention_bias", false));
    if (pb || ab)
      return f.err(std::string("field '") + (pb ? "mamba_proj_bias" : "attention_bias") +
                   "' is true: projection biases are not supported");
    REWIND_TRY(auto act, f.str_opt("hidden_act"));
    if (act && *act != "silu")
      return f.err("field 'hidden_act' is '" + *act + "': only 'silu' is supported");
  }

  // FFN: the shared MLP on every layer, plus routed experts when there are any.
  REWIND_TRY(c.n_expert, f.int_opt("num_local_experts", 0, 0, kMaxDim));
  REWIND_TRY(int64_t shared, f.int_req("shared_intermediate_size", 1, kMaxDim));
  if (c.n_expert > 0) {
    REWIND_TRY(c.n_expert_used, f.int_req("num_experts_per_tok", 1, c.n_expert));
    REWIND_TRY(c.moe_intermediate_size, f.int_req("intermediate_size", 1, kMaxDim));
    c.shared_expert_intermediate_size = shared;
    c.shared_expert_gate = false;
    c.norm_topk_prob = true;  // softmax over the top-k logits
    c.ffn_kinds.assign(static_cast<size_t>(c.n_layer), FfnKind::Moe);
  } else {
    c.intermediate_size = shared;
    c.ffn_kinds.assign(static_cast<size_t>(c.n_layer), FfnKind::SwiGLU);
  }

  REWIND_TRY_STATUS(parse_flat_tail(f, "rms_norm_eps", 1e-6, &c));
  return c;
}

Status map_hf(const TensorSet& tensors, const ModelConfig& c, WeightSet* ws) {
  const HfResolver R(tensors);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  REWIND_TRY(auto* embed, R.need("model.embed_tokens.weight", {V, H}));
  ws->put("embed", HfResolver::view(embed, V, H));
  if (c.tie_word_embeddings || !R.has("lm_head.weight")) {
    ws->put("lm_head", ws->get("embed"));
  } else {
    REWIND_TRY(auto* lm, R.need("lm_head.weight", {V, H}));
    ws->put("lm_head", HfResolver::view(lm, V, H));
  }
  REWIND_TRY_STATUS(map_norm_hf(R, "model.norm.weight", H, "final_norm", ws));
  // SwiGLU from a fused input_linear [2F, H] (gate rows first, then up) and output_linear.
  auto swiglu = [&](const TensorView* in, int64_t row0, const TensorView* out, int64_t out_row0,
                    int64_t F, const std::string& dst) {
    ws->put(dst + "gate_up",
            HfResolver::stacked(H, in->dtype, {HfResolver::rows_of(in, row0, 2 * F, H)}));
    ws->put(dst + "down",
            HfResolver::stacked(F, out->dtype, {HfResolver::rows_of(out, out_row0, H, F)}));
  };
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string lp = "model.layers." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    REWIND_TRY_STATUS(map_norm_hf(R, lp + "input_layernorm.weight", H, cp + "in_norm", ws));
    REWIND_TRY_STATUS(
        map_norm_hf(R, lp + "post_attention_layernorm.weight", H, cp + "post_norm", ws));
    if (c.layer_kinds[il] == LayerKind::Mamba2)
      REWIND_TRY_STATUS(map_mamba2_hf(R, lp + "mamba.", cp, c, ws));
    else
      REWIND_TRY_STATUS(map_plain_attention_hf(R, lp + "self_attn.", cp, c, ws));
    const int64_t Fs = c.n_expert > 0 ? c.shared_expert_intermediate_size : c.intermediate_size;
    REWIND_TRY(auto* sin, R.need(lp + "shared_mlp.input_linear.weight", {2 * Fs, H}));
    REWIND_TRY(auto* sout, R.need(lp + "shared_mlp.output_linear.weight", {H, Fs}));
    swiglu(sin, 0, sout, 0, Fs, c.n_expert > 0 ? cp + "sh." : cp);
    if (c.n_expert > 0) {
      const int64_t E = c.n_expert, F = c.moe_intermediate_size;
      const std::string mp = lp + "block_sparse_moe.";
      REWIND_TRY(auto* router, R.need(mp + "router.layer.weight", {E, H}));
      ws->put(cp + "router", HfResolver::view(router, E, H));
      REWIND_TRY(auto* ein, R.need(mp + "input_linear.weight", {E, 2 * F, H}));
      REWIND_TRY(auto* eout, R.need(mp + "output_linear.weight", {E, H, F}));
      for (int64_t e = 0; e < E; ++e)
        swiglu(ein, e * 2 * F, eout, e * H, F, cp + "e" + std::to_string(e) + ".");
    }
  }
  ws->set_mtp(false, {});
  return Ok{};
}

// llama.cpp's `granitehybrid` files (docs/MAMBA2.md, "GGUF"): a block is Mamba2 where its
// attention.head_count_kv is 0; feed_forward_length is the shared MLP's width (dense) or the
// experts' (with expert_count > 0, the shared MLP's then expert_shared_feed_forward_length).
Result<ModelConfig> parse_gguf(const GgufFile& g) {
  const GgufKeys k(g, "granitehybrid");
  ModelConfig c;
  c.family = Family::GraniteHybrid;
  c.model_type = "granitemoehybrid";
  REWIND_TRY_STATUS(hybrid_basics_from_gguf(k, &c));
  REWIND_TRY_STATUS(mamba2_sizes_from_gguf(k, &c));
  REWIND_TRY(auto kv, k.per_layer("attention.head_count_kv", c.n_layer, 0, kMaxDim));
  for (const int64_t n : kv)
    c.layer_kinds.push_back(n == 0 ? LayerKind::Mamba2 : LayerKind::Attention);
  REWIND_TRY_STATUS(attention_sizes_from_gguf(k, kv, &c));
  // llama.cpp applies RoPE to Granite hybrids unless rope.scaling.finetuned is false.
  REWIND_TRY(bool rope, g.get_bool_or(k.key("rope.scaling.finetuned"), true));
  if (rope)
    return k.err(
        "rope.scaling.finetuned",
        std::string(k.has("rope.scaling.finetuned") ? "is true"
                                                    : "is absent (llama.cpp then applies RoPE)") +
            ": only Granite-4.0-H without positional encoding (false) is supported");
  // attention.scale absent: llama.cpp's 1/sqrt(head_dim) (canonical 0); the others default to 1.
  REWIND_TRY(c.attn_scale, k.positive("attention.scale", 1.0));
  if (!k.has("attention.scale")) c.attn_scale = 0;
  REWIND_TRY(c.embedding_multiplier, k.positive("embedding_scale", 1.0));
  REWIND_TRY(c.residual_multiplier, k.positive("residual_scale", 1.0));
  REWIND_TRY(c.logits_scaling, k.positive("logit_scale", 1.0));
  for (int64_t il = 0; il < c.n_layer; ++il)
    if (c.layer_kinds[il] == LayerKind::Mamba2) {
      c.ssm_conv_bias = g.find("blk." + std::to_string(il) + ".ssm_conv1d.bias") != nullptr;
      break;
    }

  REWIND_TRY(auto ff, k.per_layer("feed_forward_length", c.n_layer, 1, kMaxDim));
  for (size_t il = 1; il < ff.size(); ++il)
    if (ff[il] != ff[0])
      return k.err("feed_forward_length", "has " + std::to_string(ff[il]) + " at block " +
                                              std::to_string(il) + " but " + std::to_string(ff[0]) +
                                              " at block 0 (one width for all is supported)");
  REWIND_TRY(c.n_expert, k.opt("expert_count", 0, 0, kMaxDim));
  if (c.n_expert > 0) {
    REWIND_TRY(c.n_expert_used, k.req("expert_used_count", 1, c.n_expert));
    c.moe_intermediate_size = ff[0];
    REWIND_TRY(c.shared_expert_intermediate_size,
               k.req("expert_shared_feed_forward_length", 1, kMaxDim));
    c.shared_expert_gate = false;
    c.norm_topk_prob = true;
    c.ffn_kinds.assign(static_cast<size_t>(c.n_layer), FfnKind::Moe);
  } else {
    c.intermediate_size = ff[0];
    c.ffn_kinds.assign(static_cast<size_t>(c.n_layer), FfnKind::SwiGLU);
  }
  return c;
}

Status map_gguf(const GgufFile& g, const ModelConfig& c, WeightSet* ws) {
  const GgufResolver R(g);
  const int64_t H = c.hidden_size;
  REWIND_TRY_STATUS(map_head_gguf(R, c, ws));
  // SwiGLU of width F from ffn_{gate,up,down}<sfx>.weight into `dst`{gate_up, down}.
  auto swiglu = [&](const std::string& p, const std::string& sfx, const std::string& dst,
                    int64_t F) -> Status {
    REWIND_TRY(GgufFound gt, R.need(p + "ffn_gate" + sfx + ".weight", {F, H}));
    REWIND_TRY(GgufFound up, R.need(p + "ffn_up" + sfx + ".weight", {F, H}));
    REWIND_TRY(GgufFound dn, R.need(p + "ffn_down" + sfx + ".weight", {H, F}));
    WeightSource s;
    s.cols = H;
    s.file_dtype = gt.dtype;
    s.blocks = {GgufResolver::rows_of(gt, 0, F, H), GgufResolver::rows_of(up, 0, F, H)};
    ws->put(dst + "gate_up", std::move(s));
    ws->put(dst + "down", GgufResolver::view(dn, H, F));
    return Ok{};
  };
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    REWIND_TRY_STATUS(map_norm_gguf(R, p + "attn_norm.weight", H, cp + "in_norm", ws));
    REWIND_TRY_STATUS(map_norm_gguf(R, p + "ffn_norm.weight", H, cp + "post_norm", ws));
    if (c.layer_kinds[il] == LayerKind::Mamba2)
      REWIND_TRY_STATUS(map_mamba2_gguf(R, p, cp, c, ws));
    else
      REWIND_TRY_STATUS(map_plain_attention_gguf(R, p, cp, c, ws));
    if (c.n_expert == 0) {
      if (R.has(p + "ffn_gate_inp.weight"))
        return make_error(g.path() + ": tensor '" + p +
                          "ffn_gate_inp.weight' is present but 'granitehybrid.expert_count' is "
                          "absent or 0");
      REWIND_TRY_STATUS(swiglu(p, "", cp, c.intermediate_size));
      continue;
    }
    const int64_t E = c.n_expert, F = c.moe_intermediate_size;
    REWIND_TRY(GgufFound router, R.need(p + "ffn_gate_inp.weight", {E, H}));
    ws->put(cp + "router", GgufResolver::view(router, E, H));
    REWIND_TRY(GgufFound gt, R.need(p + "ffn_gate_exps.weight", {E, F, H}));
    REWIND_TRY(GgufFound up, R.need(p + "ffn_up_exps.weight", {E, F, H}));
    REWIND_TRY(GgufFound dn, R.need(p + "ffn_down_exps.weight", {E, H, F}));
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = cp + "e" + std::to_string(e) + ".";
      WeightSource s;
      s.cols = H;
      s.file_dtype = gt.dtype;
      s.blocks = {GgufResolver::rows_of(gt, e * F, F, H), GgufResolver::rows_of(up, e * F, F, H)};
      ws->put(ep + "gate_up", std::move(s));
      WeightSource d;
      d.cols = F;
      d.file_dtype = dn.dtype;
      d.blocks = {GgufResolver::rows_of(dn, e * H, H, F)};
      ws->put(ep + "down", std::move(d));
    }
    REWIND_TRY_STATUS(swiglu(p, "_shexp", cp + "sh.", c.shared_expert_intermediate_size));
  }
  ws->set_mtp(false, {});
  return Ok{};
}

}  // namespace

const Architecture kGraniteArch = {
    "Granite-4.0-H",
    {Family::GraniteHybrid},
    {"granitemoehybrid"},
    {"granitehybrid"},
    parse_hf,
    map_hf,
    parse_gguf,
    map_gguf,
};

}  // namespace rw
