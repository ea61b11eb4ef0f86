// The Qwen3.5 family entry of the architecture registry (model/arch.h): Qwen3.5 (dense),
// Qwen3.5-MoE and Qwen3-Next. Gated DeltaNet and gated full attention layers, SwiGLU or routed
// MoE FFNs, an optional MTP head. Spec: docs/QWEN35.md. The GGUF layout lives in
// model/gguf_model.cpp (qwen35_config_from_gguf, qwen35_map_gguf).
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "rewind/model/arch.h"
#include "rewind/model/config_fields.h"
#include "rewind/model/gguf_model.h"
#include "rewind/model/hf_resolver.h"

// Rules beyond docs/QWEN35.md section 1 (each is an explicit choice, documented here once):
// * Sizes that fix tensor shapes (vocab, hidden, layers, heads, head_dim, GDN dims, conv
//   kernel; for MoE the expert counts and widths) are required. So is the RoPE base: it is
//   never defaulted (docs/QWEN35.md 1.3). Other fields take the HF class defaults:
//   full_attention_interval 4, partial_rotary_factor 0.25, rms_norm_eps 1e-6,
//   max_position_embeddings 32768, norm_topk_prob true, decoder_sparse_step 1,
//   mlp_only_layers [], mtp layers 0.
// * A JSON null counts as absent.
// * rope_parameters.X wins over a top-level X (rope_theta, partial_rotary_factor).
// * tie_word_embeddings: the text_config value if present, else the top-level value, else
//   false. bos/eos token ids: text_config first, then top level.
// * RoPE scaling other than "default"/"mrope" (e.g. YaRN), a non-silu hidden_act, and
//   attention_bias = true are errors: the engine does not implement them, and ignoring them
//   would silently change the model.
// * qwen3_5 ignores any MoE fields (it is dense); qwen3_5_moe ignores norm_topk_prob (always
//   renormalises, docs/QWEN35.md 1.2).
// * intermediate_size is required (> 0) only if some layer uses a dense MLP.

namespace rw {

FfnKind qwen35_ffn_kind(const ModelConfig& c, int64_t il) {
  switch (c.family) {
    case Family::Qwen35Moe:
      return c.n_expert > 0 ? FfnKind::Moe : FfnKind::SwiGLU;
    case Family::Qwen3Next:
      if (c.n_expert <= 0) return FfnKind::SwiGLU;
      for (const int64_t m : c.mlp_only_layers)
        if (m == il) return FfnKind::SwiGLU;
      return (il + 1) % c.decoder_sparse_step == 0 ? FfnKind::Moe : FfnKind::SwiGLU;
    default:
      return FfnKind::SwiGLU;
  }
}

namespace {

using namespace cfg;

Result<ModelConfig> parse_hf(const json& root, const std::string& model_type,
                             const std::string& where) {
  const Fields top(root, "", where);
  ModelConfig c;
  c.model_type = model_type;
  const json* text_obj = &root;
  std::string prefix;
  const std::string& mt = model_type;
  if (mt == "qwen3_next" || mt == "qwen3_5_text" || mt == "qwen3_5_moe_text") {
    c.family = mt == "qwen3_next"     ? Family::Qwen3Next
               : mt == "qwen3_5_text" ? Family::Qwen35
                                      : Family::Qwen35Moe;
  } else if (mt == "qwen3_5" || mt == "qwen3_5_moe") {
    c.family = mt == "qwen3_5" ? Family::Qwen35 : Family::Qwen35Moe;
    c.multimodal_prefix = true;
    REWIND_TRY(text_obj, top.obj_opt("text_config"));
    if (text_obj == nullptr) return top.err("model_type '" + mt + "' needs a 'text_config' object");
    prefix = "text_config.";
    const Fields tc(*text_obj, prefix, where);
    REWIND_TRY(auto tmt, tc.str_opt("model_type"));
    if (tmt && *tmt != mt + "_text")
      return tc.err("field 'text_config.model_type' is '" + *tmt + "' but model_type '" + mt +
                    "' needs '" + mt + "_text'");
  } else {
    return top.err("model_type '" + mt + "' is not a Qwen3.5 family type");
  }
  const Fields f(*text_obj, prefix, where);

  // Sizes.
  REWIND_TRY(c.vocab_size, f.int_req("vocab_size", 1, kMaxDim));
  REWIND_TRY(c.hidden_size, f.int_req("hidden_size", 1, kMaxDim));
  REWIND_TRY(c.n_layer, f.int_req("num_hidden_layers", 1, kMaxLayers));
  REWIND_TRY(c.n_head, f.int_req("num_attention_heads", 1, kMaxDim));
  REWIND_TRY(c.n_head_kv, f.int_req("num_key_value_heads", 1, kMaxDim));
  REWIND_TRY(c.head_dim, f.int_req("head_dim", 1, kMaxDim));
  REWIND_TRY(c.lin_n_head_k, f.int_req("linear_num_key_heads", 1, kMaxDim));
  REWIND_TRY(c.lin_n_head_v, f.int_req("linear_num_value_heads", 1, kMaxDim));
  REWIND_TRY(c.lin_dk, f.int_req("linear_key_head_dim", 1, kMaxDim));
  REWIND_TRY(c.lin_dv, f.int_req("linear_value_head_dim", 1, kMaxDim));
  REWIND_TRY(c.conv_kernel, f.int_req("linear_conv_kernel_dim", 1, kMaxDim));
  if (c.n_head % c.n_head_kv != 0)
    return f.err("field '" + f.name("num_attention_heads") + "' = " + std::to_string(c.n_head) +
                 " is not a multiple of '" + f.name("num_key_value_heads") +
                 "' = " + std::to_string(c.n_head_kv));
  if (c.lin_n_head_v % c.lin_n_head_k != 0)
    return f.err("field '" + f.name("linear_num_value_heads") +
                 "' = " + std::to_string(c.lin_n_head_v) + " is not a multiple of '" +
                 f.name("linear_num_key_heads") + "' = " + std::to_string(c.lin_n_head_k));

  // Layer kinds: layer_types, else every n-th layer is full attention.
  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array()) return f.wrong_type("layer_types", "a list of strings", *lt);
    if (static_cast<int64_t>(lt->size()) != c.n_layer)
      return f.err("field '" + f.name("layer_types") + "' has " + std::to_string(lt->size()) +
                   " entries but '" + f.name("num_hidden_layers") + "' is " +
                   std::to_string(c.n_layer));
    for (size_t il = 0; il < lt->size(); ++il) {
      const json& e = (*lt)[il];
      const std::string name = f.name("layer_types") + "[" + std::to_string(il) + "]";
      if (e.is_string() && e.get_ref<const std::string&>() == "linear_attention") {
        c.layer_kinds.push_back(LayerKind::GatedDeltaNet);
      } else if (e.is_string() && e.get_ref<const std::string&>() == "full_attention") {
        c.layer_kinds.push_back(LayerKind::Attention);
      } else {
        return f.err("field '" + name + "' is " + preview(e) +
                     " (expected \"linear_attention\" or \"full_attention\")");
      }
    }
  } else {
    REWIND_TRY(int64_t n, f.int_opt("full_attention_interval", 4, 1, kMaxLayers));
    for (int64_t il = 0; il < c.n_layer; ++il)
      c.layer_kinds.push_back((il + 1) % n == 0 ? LayerKind::Attention : LayerKind::GatedDeltaNet);
  }

  // RoPE: rope_parameters.X, else X; partial rotary only; the base is required.
  {
    REWIND_TRY(const json* rp, f.obj_opt("rope_parameters"));
    static const json kEmpty = json::object();
    const Fields rpf(rp != nullptr ? *rp : kEmpty, prefix + "rope_parameters.", where);
    std::optional<double> theta;
    double prf = 0.25;
    if (rp != nullptr) {
      REWIND_TRY_STATUS(check_rope_type(f, *rp, "rope_parameters"));
      if (rpf.has("rope_theta")) {
        REWIND_TRY(theta, rpf.num_opt("rope_theta", 0.0));
      }
      if (rpf.has("partial_rotary_factor")) {
        REWIND_TRY(prf, rpf.num_opt("partial_rotary_factor", 0.25));
      }
    }
    if (!theta && f.has("rope_theta")) {
      REWIND_TRY(theta, f.num_opt("rope_theta", 0.0));
    }
    if (!theta)
      return f.err("missing field '" + f.name("rope_parameters.rope_theta") + "' (or '" +
                   f.name("rope_theta") + "')");
    if ((rp == nullptr || !rpf.has("partial_rotary_factor")) && f.has("partial_rotary_factor")) {
      REWIND_TRY(prf, f.num_opt("partial_rotary_factor", 0.25));
    }
    REWIND_TRY(const json* rs, f.obj_opt("rope_scaling"));
    if (rs != nullptr) REWIND_TRY_STATUS(check_rope_type(f, *rs, "rope_scaling"));
    if (!std::isfinite(*theta) || *theta <= 0)
      return f.err("RoPE base rope_theta = " + std::to_string(*theta) +
                   " must be a positive number");
    if (!std::isfinite(prf) || prf <= 0 || prf > 1)
      return f.err("partial_rotary_factor = " + std::to_string(prf) + " must be in (0, 1]");
    c.rope_theta = *theta;
    c.rope_dim =
        static_cast<int64_t>(static_cast<double>(c.head_dim) * prf);  // Python int(): truncates
    if (c.rope_dim <= 0 || c.rope_dim % 2 != 0)
      return f.err("rotary dim int(head_dim * partial_rotary_factor) = int(" +
                   std::to_string(c.head_dim) + " * " + std::to_string(prf) +
                   ") = " + std::to_string(c.rope_dim) + " must be even and positive");
  }

  // FFN.
  REWIND_TRY(c.intermediate_size, f.int_opt("intermediate_size", 0, 0, kMaxDim));
  if (c.family != Family::Qwen35) {
    const int64_t min_experts = c.family == Family::Qwen35Moe ? 1 : 0;
    REWIND_TRY(c.n_expert, f.int_req("num_experts", min_experts, kMaxDim));
    if (c.n_expert > 0) {
      REWIND_TRY(c.n_expert_used, f.int_req("num_experts_per_tok", 1, kMaxDim));
      if (c.n_expert_used > c.n_expert)
        return f.err("field '" + f.name("num_experts_per_tok") +
                     "' = " + std::to_string(c.n_expert_used) + " exceeds '" +
                     f.name("num_experts") + "' = " + std::to_string(c.n_expert));
      REWIND_TRY(c.moe_intermediate_size, f.int_req("moe_intermediate_size", 1, kMaxDim));
      REWIND_TRY(c.shared_expert_intermediate_size,
                 f.int_req("shared_expert_intermediate_size", 1, kMaxDim));
    }
  }
  if (c.family == Family::Qwen3Next) {
    REWIND_TRY(c.norm_topk_prob, f.bool_opt("norm_topk_prob", true));
    REWIND_TRY(c.decoder_sparse_step, f.int_opt("decoder_sparse_step", 1, 1, kMaxLayers));
    if (const json* m = f.find("mlp_only_layers")) {
      if (!m->is_array()) return f.wrong_type("mlp_only_layers", "a list of layer indices", *m);
      for (size_t i = 0; i < m->size(); ++i) {
        const std::string name = "mlp_only_layers[" + std::to_string(i) + "]";
        REWIND_TRY(int64_t il, f.to_int(name.c_str(), (*m)[i], 0, c.n_layer - 1));
        c.mlp_only_layers.push_back(il);
      }
    }
  } else {
    c.norm_topk_prob = true;  // qwen3_5_moe always renormalises; unused for dense qwen3_5
  }
  for (int64_t il = 0; il < c.n_layer; ++il) c.ffn_kinds.push_back(qwen35_ffn_kind(c, il));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.layer_is_moe(il) && c.intermediate_size <= 0)
      return f.err("field '" + f.name("intermediate_size") + "' is missing or 0, but layer " +
                   std::to_string(il) + " has a dense MLP");
  }

  // Everything else.
  REWIND_TRY(c.rms_norm_eps, f.num_opt("rms_norm_eps", 1e-6));
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0)
    return f.err("field '" + f.name("rms_norm_eps") + "' = " + std::to_string(c.rms_norm_eps) +
                 " must be positive");
  REWIND_TRY(c.max_position_embeddings,
             f.int_opt("max_position_embeddings", 32768, 1, kMaxPositions));
  REWIND_TRY(c.mtp_num_hidden_layers, f.int_opt("mtp_num_hidden_layers", 0, 0, kMaxLayers));
  {
    REWIND_TRY(auto act, f.str_opt("hidden_act"));
    if (act && *act != "silu")
      return f.err("field '" + f.name("hidden_act") + "' is '" + *act +
                   "': only 'silu' is supported");
    REWIND_TRY(bool bias, f.bool_opt("attention_bias", false));
    if (bias)
      return f.err("field '" + f.name("attention_bias") +
                   "' is true: attention biases are not supported");
  }
  {
    const Fields& tf = f.has("tie_word_embeddings") ? f : top;
    REWIND_TRY(c.tie_word_embeddings, tf.bool_opt("tie_word_embeddings", false));
  }
  {
    REWIND_TRY(auto bos, token_ids(f, top, "bos_token_id", false));
    c.bos_token_id = bos.empty() ? -1 : bos[0];
    REWIND_TRY(c.eos_token_ids, token_ids(f, top, "eos_token_id", true));
  }
  return c;
}

Status map_hf(const TensorSet& tensors, const ModelConfig& c, WeightSet* out) {
  WeightSet& ws = *out;
  HfResolver R(tensors);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  auto plus1 = [](float x) { return x + 1.0f; };
  auto same = [](float x) { return x; };

  std::string P;
  if (tensors.find("model.language_model.embed_tokens.weight")) {
    P = "model.language_model.";
  } else if (tensors.find("model.embed_tokens.weight")) {
    P = "model.";
  } else {
    return make_error(std::string("checkpoint: missing tensor '") +
                      (c.multimodal_prefix ? "model.language_model." : "model.") +
                      "embed_tokens.weight'");
  }

  REWIND_TRY(auto* embed, R.need(P + "embed_tokens.weight", {V, H}));
  ws.put("embed", HfResolver::view(embed, V, H));
  const TensorView* lm = tensors.find("lm_head.weight");
  if (c.tie_word_embeddings || !lm) {
    ws.put("lm_head", ws.get("embed"));
  } else {
    REWIND_TRY(lm, R.need("lm_head.weight", {V, H}));
    ws.put("lm_head", HfResolver::view(lm, V, H));
  }
  REWIND_TRY(auto* fn, R.need(P + "norm.weight", {H}));
  ws.put("final_norm", HfResolver::owned(fn, 1, H, plus1));

  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t r = Hk > 0 ? Hv / Hk : 0, K = c.conv_kernel;
  const int64_t D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;

  // Norms of a decoder layer (either kind): `lp` HF prefix, `cp` canonical prefix.
  auto map_norms = [&](const std::string& lp, const std::string& cp) -> Status {
    REWIND_TRY(auto* in_norm, R.need(lp + "input_layernorm.weight", {H}));
    REWIND_TRY(auto* post_norm, R.need(lp + "post_attention_layernorm.weight", {H}));
    ws.put(cp + "in_norm", HfResolver::owned(in_norm, 1, H, plus1));
    ws.put(cp + "post_norm", HfResolver::owned(post_norm, 1, H, plus1));
    return Ok{};
  };
  // Gated full attention from `ap` (…self_attn.) into `cp`.
  auto map_full_attention = [&](const std::string& ap, const std::string& cp) -> Status {
    REWIND_TRY(auto* q, R.need(ap + "q_proj.weight", {nh * 2 * D, H}));
    REWIND_TRY(auto* k, R.need(ap + "k_proj.weight", {nkv * D, H}));
    REWIND_TRY(auto* v, R.need(ap + "v_proj.weight", {nkv * D, H}));
    ws.put(cp + "qkv", HfResolver::stacked(H, q->dtype,
                                           {HfResolver::rows_of(q, 0, nh * 2 * D, H),
                                            HfResolver::rows_of(k, 0, nkv * D, H),
                                            HfResolver::rows_of(v, 0, nkv * D, H)}));
    REWIND_TRY(auto* qn, R.need(ap + "q_norm.weight", {D}));
    REWIND_TRY(auto* kn, R.need(ap + "k_norm.weight", {D}));
    ws.put(cp + "q_norm", HfResolver::owned(qn, 1, D, plus1));
    ws.put(cp + "k_norm", HfResolver::owned(kn, 1, D, plus1));
    REWIND_TRY(auto* o, R.need(ap + "o_proj.weight", {H, nh * D}));
    ws.put(cp + "o_proj", HfResolver::view(o, H, nh * D));
    return Ok{};
  };
  // SwiGLU of width F from `src`{gate,up,down}_proj.weight into `dst`{gate_up, down}.
  auto swiglu = [&](const std::string& src, const std::string& dst, int64_t F) -> Status {
    REWIND_TRY(auto* g, R.need(src + "gate_proj.weight", {F, H}));
    REWIND_TRY(auto* u, R.need(src + "up_proj.weight", {F, H}));
    REWIND_TRY(auto* d, R.need(src + "down_proj.weight", {H, F}));
    ws.put(dst + "gate_up",
           HfResolver::stacked(H, g->dtype,
                               {HfResolver::rows_of(g, 0, F, H), HfResolver::rows_of(u, 0, F, H)}));
    ws.put(dst + "down", HfResolver::view(d, H, F));
    return Ok{};
  };
  // Dense SwiGLU or MoE (router, experts in either layout, shared expert) from `mp` (…mlp.).
  auto map_mlp = [&](const std::string& mp, const std::string& cp, bool moe) -> Status {
    if (!moe) return swiglu(mp, cp, c.intermediate_size);
    const int64_t E = c.n_expert, Im = c.moe_intermediate_size,
                  Is = c.shared_expert_intermediate_size;
    REWIND_TRY(auto* router, R.need(mp + "gate.weight", {E, H}));
    ws.put(cp + "router", HfResolver::view(router, E, H));
    if (tensors.find(mp + "experts.gate_up_proj")) {
      // Fused 3-D experts: gate = the first Im rows of gate_up_proj[e], up = the next Im.
      REWIND_TRY(auto* gu, R.need(mp + "experts.gate_up_proj", {E, 2 * Im, H}));
      REWIND_TRY(auto* dn, R.need(mp + "experts.down_proj", {E, H, Im}));
      for (int64_t e = 0; e < E; ++e) {
        const std::string ep = cp + "e" + std::to_string(e) + ".";
        ws.put(ep + "gate_up",
               HfResolver::stacked(H, gu->dtype, {HfResolver::rows_of(gu, e * 2 * Im, 2 * Im, H)}));
        ws.put(ep + "down",
               HfResolver::stacked(Im, dn->dtype, {HfResolver::rows_of(dn, e * H, H, Im)}));
      }
    } else {
      for (int64_t e = 0; e < E; ++e)
        REWIND_TRY_STATUS(swiglu(mp + "experts." + std::to_string(e) + ".",
                                 cp + "e" + std::to_string(e) + ".", Im));
    }
    REWIND_TRY_STATUS(swiglu(mp + "shared_expert.", cp + "sh.", Is));
    REWIND_TRY(auto* sgate, R.need(mp + "shared_expert_gate.weight", {1, H}));
    ws.put(cp + "sh.gate", HfResolver::view(sgate, 1, H));
    return Ok{};
  };

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string lp = P + "layers." + std::to_string(il) + ".";
    const std::string cp = "l" + std::to_string(il) + ".";
    REWIND_TRY_STATUS(map_norms(lp, cp));

    if (c.layer_kinds[il] == LayerKind::GatedDeltaNet) {
      const std::string ap = lp + "linear_attn.";
      WeightSource in;
      in.cols = H;
      if (tensors.find(ap + "in_proj_qkvz.weight")) {
        // Qwen3-Next: rows grouped per key head g: [q_g (dk); k_g (dk); v_g (r dv); z_g (r dv)].
        const int64_t blk = 2 * dk + 2 * r * dv;
        REWIND_TRY(auto* qkvz, R.need(ap + "in_proj_qkvz.weight", {Hk * blk, H}));
        REWIND_TRY(auto* ba, R.need(ap + "in_proj_ba.weight", {2 * Hv, H}));
        in.file_dtype = qkvz->dtype;
        // One slice of every key-head group, for all groups in order.
        auto slices = [&](const TensorView* t, int64_t group_rows, int64_t at, int64_t n) {
          for (int64_t g = 0; g < Hk; ++g)
            in.blocks.push_back(HfResolver::rows_of(t, g * group_rows + at, n, H));
        };
        slices(qkvz, blk, 0, dk);                    // q
        slices(qkvz, blk, dk, dk);                   // k
        slices(qkvz, blk, 2 * dk, r * dv);           // v
        slices(qkvz, blk, 2 * dk + r * dv, r * dv);  // z
        slices(ba, 2 * r, 0, r);                     // b
        slices(ba, 2 * r, r, r);                     // a
      } else {
        REWIND_TRY(auto* qkv, R.need(ap + "in_proj_qkv.weight", {c.conv_dim(), H}));
        REWIND_TRY(auto* z, R.need(ap + "in_proj_z.weight", {c.value_dim(), H}));
        REWIND_TRY(auto* b, R.need(ap + "in_proj_b.weight", {Hv, H}));
        REWIND_TRY(auto* a, R.need(ap + "in_proj_a.weight", {Hv, H}));
        in.file_dtype = qkv->dtype;
        in.blocks = {HfResolver::rows_of(qkv, 0, c.conv_dim(), H),
                     HfResolver::rows_of(z, 0, c.value_dim(), H), HfResolver::rows_of(b, 0, Hv, H),
                     HfResolver::rows_of(a, 0, Hv, H)};
      }
      ws.put(cp + "in_proj", std::move(in));
      REWIND_TRY(auto* conv, R.need(ap + "conv1d.weight", {c.conv_dim(), 1, K}));
      ws.put(cp + "conv", HfResolver::owned(conv, c.conv_dim(), K, same));
      REWIND_TRY(auto* alog, R.need(ap + "A_log", {Hv}));
      ws.put(cp + "A", HfResolver::owned(alog, 1, Hv, [](float x) { return -std::exp(x); }));
      REWIND_TRY(auto* dtb, R.need(ap + "dt_bias", {Hv}));
      ws.put(cp + "dt_bias", HfResolver::owned(dtb, 1, Hv, same));
      REWIND_TRY(auto* gn, R.need(ap + "norm.weight", {dv}));
      ws.put(cp + "gnorm", HfResolver::owned(gn, 1, dv, same));
      REWIND_TRY(auto* out, R.need(ap + "out_proj.weight", {H, c.value_dim()}));
      ws.put(cp + "out_proj", HfResolver::view(out, H, c.value_dim()));
    } else {
      REWIND_TRY_STATUS(map_full_attention(lp + "self_attn.", cp));
    }
    REWIND_TRY_STATUS(map_mlp(lp + "mlp.", cp, c.layer_is_moe(il)));
  }

  // MTP head (docs/QWEN35.md 2.5): absent altogether is fine; partly present or mis-shaped is
  // an error naming the tensor.
  bool has_mtp = false;
  std::vector<std::string> mtp_names;
  bool any_mtp = false;
  for (auto& n : tensors.names()) any_mtp = any_mtp || n.rfind("mtp.", 0) == 0;
  if (c.mtp_num_hidden_layers > 0 && any_mtp) {
    auto mtp = [&]() -> Status {
      REWIND_TRY(auto* fc, R.need("mtp.fc.weight", {H, 2 * H}));
      ws.put("mtp.fc", HfResolver::view(fc, H, 2 * H));
      REWIND_TRY(auto* en, R.need("mtp.pre_fc_norm_embedding.weight", {H}));
      ws.put("mtp.enorm", HfResolver::owned(en, 1, H, plus1));
      REWIND_TRY(auto* hn, R.need("mtp.pre_fc_norm_hidden.weight", {H}));
      ws.put("mtp.hnorm", HfResolver::owned(hn, 1, H, plus1));
      REWIND_TRY(auto* mn, R.need("mtp.norm.weight", {H}));
      ws.put("mtp.norm", HfResolver::owned(mn, 1, H, plus1));
      for (int64_t j = 0; j < c.mtp_num_hidden_layers; ++j) {
        const std::string lp = "mtp.layers." + std::to_string(j) + ".";
        const std::string cp = "l" + std::to_string(c.n_layer + j) + ".";
        REWIND_TRY_STATUS(map_norms(lp, cp));
        REWIND_TRY_STATUS(map_full_attention(lp + "self_attn.", cp));
        REWIND_TRY_STATUS(map_mlp(lp + "mlp.", cp, c.mtp_layer_is_moe()));
      }
      return Ok{};
    };
    Status st = mtp();
    if (!st.ok())
      return make_error(st.error_message() + " (MTP head: mtp_num_hidden_layers = " +
                        std::to_string(c.mtp_num_hidden_layers) +
                        " and some mtp.* tensors are present)");
    has_mtp = true;
  }
  for (auto& n : tensors.names())
    if (n.rfind("mtp.", 0) == 0) mtp_names.push_back(n);
  ws.set_mtp(has_mtp, std::move(mtp_names));
  return Ok{};
}

}  // namespace

const Architecture kQwen35Arch = {
    "Qwen3.5",
    {Family::Qwen35, Family::Qwen35Moe, Family::Qwen3Next},
    {"qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next"},
    {"qwen35", "qwen35moe", "qwen3next"},
    parse_hf,
    map_hf,
    qwen35_config_from_gguf,
    qwen35_map_gguf,
};

}  // namespace rw
