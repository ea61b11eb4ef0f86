// The Qwen3.5 family entry of the architecture registry (model/arch.h): Qwen3.5 (dense),
// Qwen3.5-MoE and Qwen3-Next. Gated DeltaNet and gated full attention layers, SwiGLU or routed
// MoE FFNs, an optional MTP head. Spec: docs/QWEN35.md; GGUF names: docs/GGUF.md.
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "rewind/model/arch.h"
#include "rewind/model/config_fields.h"
#include "rewind/model/gguf_model.h"
#include "rewind/model/gguf_resolver.h"
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

namespace {

using Found = GgufFound;
using Resolver = GgufResolver;

// Which FFN layer il has: routed MoE or a dense SwiGLU MLP.
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
    return make_error(HfResolver::where(tensors) + ": missing tensor '" +
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
    const std::string cp = layer_prefix(il);
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
        const std::string cp = layer_prefix(c.n_layer + j);
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

// The GGUF layout (llama.cpp's qwen35, qwen35moe, qwen3next: docs/GGUF.md).
Result<ModelConfig> parse_gguf(const GgufFile& g) {
  const std::string& w = g.path();
  REWIND_TRY(std::string arch, g.get_string("general.architecture"));
  ModelConfig c;
  if (arch == "qwen35") {
    c.family = Family::Qwen35;
    c.model_type = "qwen3_5_text";
  } else if (arch == "qwen35moe") {
    c.family = Family::Qwen35Moe;
    c.model_type = "qwen3_5_moe_text";
  } else if (arch == "qwen3next") {
    c.family = Family::Qwen3Next;
    c.model_type = "qwen3_next";
  } else {
    return make_error(w + ": architecture '" + arch + "' is not a Qwen3.5 family architecture");
  }
  const std::string a = arch + ".";
  auto in_range = [&](const std::string& key, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi)
      return make_error(w + ": key '" + key + "' = " + std::to_string(v) + " is out of range [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return Ok{};
  };
  auto req = [&](const std::string& k, int64_t lo, int64_t hi) -> Result<int64_t> {
    REWIND_TRY(int64_t v, g.get_int(a + k));
    REWIND_TRY_STATUS(in_range(a + k, v, lo, hi));
    return v;
  };
  auto opt = [&](const std::string& k, int64_t def, int64_t lo, int64_t hi) -> Result<int64_t> {
    REWIND_TRY(int64_t v, g.get_int_or(a + k, def));
    REWIND_TRY_STATUS(in_range(a + k, v, lo, hi));
    return v;
  };

  const GgufTensor* emb = g.find("token_embd.weight");
  if (!emb || emb->ne.size() != 2)
    return make_error(w + ": missing 2-D tensor 'token_embd.weight'");
  c.vocab_size = emb->ne[1];
  REWIND_TRY(c.hidden_size, req("embedding_length", 1, kMaxDim));
  if (emb->ne[0] != c.hidden_size)
    return make_error(w + ": tensor 'token_embd.weight' has ne[0] = " + std::to_string(emb->ne[0]) +
                      " but '" + a + "embedding_length' is " + std::to_string(c.hidden_size));
  REWIND_TRY_STATUS(in_range("token_embd.weight ne[1]", c.vocab_size, 1, kMaxDim));
  REWIND_TRY(int64_t blocks, req("block_count", 1, kMaxLayers));
  REWIND_TRY(c.mtp_num_hidden_layers, opt("nextn_predict_layers", 0, 0, blocks - 1));
  c.n_layer = blocks - c.mtp_num_hidden_layers;
  REWIND_TRY(c.n_head, req("attention.head_count", 1, kMaxDim));
  REWIND_TRY(c.n_head_kv, req("attention.head_count_kv", 1, kMaxDim));
  REWIND_TRY(c.head_dim, req("attention.key_length", 1, kMaxDim));
  REWIND_TRY(int64_t vlen, opt("attention.value_length", c.head_dim, 1, kMaxDim));
  if (vlen != c.head_dim)
    return make_error(w + ": key '" + a + "attention.value_length' = " + std::to_string(vlen) +
                      " differs from '" + a +
                      "attention.key_length' = " + std::to_string(c.head_dim));
  if (c.n_head % c.n_head_kv != 0)
    return make_error(
        w + ": key '" + a + "attention.head_count' = " + std::to_string(c.n_head) +
        " is not a multiple of 'attention.head_count_kv' = " + std::to_string(c.n_head_kv));
  REWIND_TRY(c.rope_dim, opt("rope.dimension_count", c.head_dim, 2, c.head_dim));
  if (c.rope_dim % 2 != 0)
    return make_error(w + ": key '" + a + "rope.dimension_count' must be even");
  REWIND_TRY(c.rope_theta, g.get_float(a + "rope.freq_base"));
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 0)
    return make_error(w + ": key '" + a + "rope.freq_base' must be a positive number");
  REWIND_TRY(c.rms_norm_eps, g.get_float(a + "attention.layer_norm_rms_epsilon"));
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0)
    return make_error(w + ": key '" + a + "attention.layer_norm_rms_epsilon' must be positive");
  REWIND_TRY(c.max_position_embeddings, opt("context_length", 32768, 1, int64_t{1} << 40));

  REWIND_TRY(c.lin_n_head_k, req("ssm.group_count", 1, kMaxDim));
  REWIND_TRY(c.lin_n_head_v, req("ssm.time_step_rank", 1, kMaxDim));
  REWIND_TRY(c.lin_dk, req("ssm.state_size", 1, kMaxDim));
  REWIND_TRY(c.conv_kernel, req("ssm.conv_kernel", 1, kMaxDim));
  REWIND_TRY(int64_t inner, req("ssm.inner_size", 1, kMaxDim));
  if (c.lin_n_head_v % c.lin_n_head_k != 0 || inner % c.lin_n_head_v != 0)
    return make_error(
        w + ": keys '" + a + "ssm.time_step_rank' = " + std::to_string(c.lin_n_head_v) +
        " must be a multiple of 'ssm.group_count' = " + std::to_string(c.lin_n_head_k) +
        " and divide 'ssm.inner_size' = " + std::to_string(inner));
  c.lin_dv = inner / c.lin_n_head_v;

  if (const GgufValue* rl = g.get(a + "attention.recurrent_layers")) {
    REWIND_TRY(std::vector<int64_t> flags, g.get_ints(a + "attention.recurrent_layers"));
    if (static_cast<int64_t>(flags.size()) != blocks)
      return make_error(w + ": key '" + a + "attention.recurrent_layers' has " +
                        std::to_string(flags.size()) + " entries but block_count is " +
                        std::to_string(blocks));
    (void)rl;
    for (int64_t il = 0; il < c.n_layer; ++il)
      c.layer_kinds.push_back(flags[il] ? LayerKind::GatedDeltaNet : LayerKind::Attention);
    for (int64_t il = c.n_layer; il < blocks; ++il)
      if (flags[il])
        return make_error(w + ": key '" + a + "attention.recurrent_layers' marks block " +
                          std::to_string(il) + " as recurrent, but it is an MTP block ('" + a +
                          "nextn_predict_layers' = " + std::to_string(c.mtp_num_hidden_layers) +
                          ")");
  } else {
    REWIND_TRY(int64_t n, opt("full_attention_interval", 4, 1, kMaxLayers));
    for (int64_t il = 0; il < c.n_layer; ++il)
      c.layer_kinds.push_back((il + 1) % n == 0 ? LayerKind::Attention : LayerKind::GatedDeltaNet);
  }

  REWIND_TRY(c.intermediate_size, opt("feed_forward_length", 0, 0, kMaxDim));
  if (c.family != Family::Qwen35) {
    REWIND_TRY(c.n_expert, req("expert_count", 1, kMaxDim));
    REWIND_TRY(c.n_expert_used, req("expert_used_count", 1, c.n_expert));
    REWIND_TRY(c.moe_intermediate_size, req("expert_feed_forward_length", 1, kMaxDim));
    REWIND_TRY(c.shared_expert_intermediate_size,
               req("expert_shared_feed_forward_length", 1, kMaxDim));
  }
  c.norm_topk_prob = true;  // llama.cpp renormalises the top-k weights for all three
  for (int64_t il = 0; il < c.n_layer; ++il) c.ffn_kinds.push_back(qwen35_ffn_kind(c, il));
  for (int64_t il = 0; il < c.n_layer; ++il)
    if (!c.layer_is_moe(il) && c.intermediate_size <= 0)
      return make_error(w + ": key '" + a + "feed_forward_length' is missing or 0, but layer " +
                        std::to_string(il) + " has a dense MLP");
  c.tie_word_embeddings = g.find("output.weight") == nullptr;
  REWIND_TRY(c.bos_token_id, g.get_int_or("tokenizer.ggml.bos_token_id", -1));
  REWIND_TRY(c.eos_token_ids, gguf_end_of_generation_ids(g, c.vocab_size));
  return c;
}

Status map_gguf(const GgufFile& g, const ModelConfig& c, WeightSet* out) {
  WeightSet& ws = *out;
  std::vector<std::string> mtp_names;
  bool has_mtp = false;
  const Resolver R(g);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  REWIND_TRY(Found embed, R.need("token_embd.weight", {V, H}));
  ws.put("embed", Resolver::view(embed, V, H));
  if (R.has("output.weight")) {
    REWIND_TRY(Found out, R.need("output.weight", {V, H}));
    ws.put("lm_head", Resolver::view(out, V, H));
  } else {
    ws.put("lm_head", ws.get("embed"));
  }
  REWIND_TRY(Found fn, R.need("output_norm.weight", {H}));
  ws.put("final_norm", Resolver::owned(fn, 1, H));

  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t r = Hv / Hk, K = c.conv_kernel, KD = c.key_dim(), VD = c.value_dim(),
                CD = c.conv_dim();
  const int64_t D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  const VHeads vh = vheads(c);

  // Norms of a decoder layer (either kind): `p` file prefix (blk.N.), `cp` canonical prefix.
  auto map_norms = [&](const std::string& p, const std::string& cp) -> Status {
    REWIND_TRY(Found in_norm, R.need(p + "attn_norm.weight", {H}));
    REWIND_TRY(Found post_norm, R.need(p + "post_attention_norm.weight", {H}));
    ws.put(cp + "in_norm", Resolver::owned(in_norm, 1, H));
    ws.put(cp + "post_norm", Resolver::owned(post_norm, 1, H));
    return Ok{};
  };
  // Gated full attention (separate attn_q/k/v or a fused attn_qkv).
  auto map_full_attention = [&](const std::string& p, const std::string& cp) -> Status {
    if (R.has(p + "attn_q.weight") || !R.has(p + "attn_qkv.weight")) {
      REWIND_TRY(Found q, R.need(p + "attn_q.weight", {nh * 2 * D, H}));
      REWIND_TRY(Found k, R.need(p + "attn_k.weight", {nkv * D, H}));
      REWIND_TRY(Found v, R.need(p + "attn_v.weight", {nkv * D, H}));
      WeightSource s;
      s.cols = H;
      s.file_dtype = q.dtype;
      s.blocks = {Resolver::rows_of(q, 0, nh * 2 * D, H), Resolver::rows_of(k, 0, nkv * D, H),
                  Resolver::rows_of(v, 0, nkv * D, H)};
      ws.put(cp + "qkv", std::move(s));
    } else {
      REWIND_TRY(Found qkv, R.need(p + "attn_qkv.weight", {nh * 2 * D + 2 * nkv * D, H}));
      ws.put(cp + "qkv", Resolver::view(qkv, nh * 2 * D + 2 * nkv * D, H));
    }
    REWIND_TRY(Found qn, R.need(p + "attn_q_norm.weight", {D}));
    REWIND_TRY(Found kn, R.need(p + "attn_k_norm.weight", {D}));
    ws.put(cp + "q_norm", Resolver::owned(qn, 1, D));
    ws.put(cp + "k_norm", Resolver::owned(kn, 1, D));
    REWIND_TRY(Found o, R.need(p + "attn_output.weight", {H, nh * D}));
    ws.put(cp + "o_proj", Resolver::view(o, H, nh * D));
    return Ok{};
  };
  // Dense SwiGLU or MoE (router, experts split or fused, shared expert).
  auto map_ffn = [&](const std::string& p, const std::string& cp, bool moe) -> Status {
    auto swiglu = [&](const std::string& sfx, const std::string& dst, int64_t F) -> Status {
      REWIND_TRY(Found gt, R.need(p + "ffn_gate" + sfx + ".weight", {F, H}));
      REWIND_TRY(Found up, R.need(p + "ffn_up" + sfx + ".weight", {F, H}));
      REWIND_TRY(Found dn, R.need(p + "ffn_down" + sfx + ".weight", {H, F}));
      WeightSource s;
      s.cols = H;
      s.file_dtype = gt.dtype;
      s.blocks = {Resolver::rows_of(gt, 0, F, H), Resolver::rows_of(up, 0, F, H)};
      ws.put(dst + "gate_up", std::move(s));
      ws.put(dst + "down", Resolver::view(dn, H, F));
      return Ok{};
    };
    if (!moe) {
      REWIND_TRY_STATUS(swiglu("", cp, c.intermediate_size));
    } else {
      const int64_t E = c.n_expert, Im = c.moe_intermediate_size,
                    Is = c.shared_expert_intermediate_size;
      REWIND_TRY(Found router, R.need(p + "ffn_gate_inp.weight", {E, H}));
      ws.put(cp + "router", Resolver::view(router, E, H));
      REWIND_TRY(Found dn, R.need(p + "ffn_down_exps.weight", {E, H, Im}));
      const bool fused = R.has(p + "ffn_gate_up_exps.weight");
      Found gu, gt, up;
      if (fused) {
        REWIND_TRY(gu, R.need(p + "ffn_gate_up_exps.weight", {E, 2 * Im, H}));
      } else {
        REWIND_TRY(gt, R.need(p + "ffn_gate_exps.weight", {E, Im, H}));
        REWIND_TRY(up, R.need(p + "ffn_up_exps.weight", {E, Im, H}));
      }
      for (int64_t e = 0; e < E; ++e) {
        const std::string ep = cp + "e" + std::to_string(e) + ".";
        WeightSource s;
        s.cols = H;
        s.file_dtype = fused ? gu.dtype : gt.dtype;
        if (fused) {
          s.blocks = {Resolver::rows_of(gu, e * 2 * Im, 2 * Im, H)};
        } else {
          s.blocks = {Resolver::rows_of(gt, e * Im, Im, H), Resolver::rows_of(up, e * Im, Im, H)};
        }
        ws.put(ep + "gate_up", std::move(s));
        WeightSource d;
        d.cols = Im;
        d.file_dtype = dn.dtype;
        d.blocks = {Resolver::rows_of(dn, e * H, H, Im)};
        ws.put(ep + "down", std::move(d));
      }
      REWIND_TRY_STATUS(swiglu("_shexp", cp + "sh.", Is));
      REWIND_TRY(Found sg, R.need(p + "ffn_gate_inp_shexp.weight", {H}));
      ws.put(cp + "sh.gate", Resolver::view(sg, 1, H));
    }
    return Ok{};
  };

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    REWIND_TRY_STATUS(map_norms(p, cp));
    if (c.layer_kinds[il] == LayerKind::Attention) {
      REWIND_TRY_STATUS(map_full_attention(p, cp));
    } else {
      WeightSource in;
      in.cols = H;
      // Rows of value heads (dv rows each, or 1 for beta/alpha) in the model's order.
      auto heads = [&](const Found& t, int64_t base, int64_t rows_per_head) {
        if (!vh.tiled) {
          in.blocks.push_back(Resolver::rows_of(t, base, Hv * rows_per_head, H));
          return;
        }
        for (int64_t h = 0; h < Hv; ++h)
          in.blocks.push_back(
              Resolver::rows_of(t, base + vh.pos(h) * rows_per_head, rows_per_head, H));
      };
      if (R.has(p + "attn_qkv.weight") || !R.has(p + "ssm_in.weight")) {
        REWIND_TRY(Found qkv, R.need(p + "attn_qkv.weight", {CD, H}));
        REWIND_TRY(Found z, R.need(p + "attn_gate.weight", {VD, H}));
        in.file_dtype = qkv.dtype;
        in.blocks.push_back(Resolver::rows_of(qkv, 0, 2 * KD, H));  // q, k
        heads(qkv, 2 * KD, dv);                                     // v
        heads(z, 0, dv);                                            // z
      } else {
        // Legacy qwen3next ssm_in: HF's in_proj_qkvz, per key-head group [q; k; v (r dv); z (r
        // dv)].
        const int64_t blk = 2 * dk + 2 * r * dv;
        REWIND_TRY(Found qkvz, R.need(p + "ssm_in.weight", {Hk * blk, H}));
        in.file_dtype = qkvz.dtype;
        for (int64_t at : {int64_t{0}, dk})
          for (int64_t gi = 0; gi < Hk; ++gi)
            in.blocks.push_back(Resolver::rows_of(qkvz, gi * blk + at, dk, H));
        for (int64_t at : {2 * dk, 2 * dk + r * dv})
          for (int64_t gi = 0; gi < Hk; ++gi)
            in.blocks.push_back(Resolver::rows_of(qkvz, gi * blk + at, r * dv, H));
      }
      if (R.has(p + "ssm_ba.weight")) {
        if (vh.tiled)
          return make_error(g.path() + ": tensor '" + p +
                            "ssm_ba.weight' is only used by qwen3next");
        REWIND_TRY(Found ba, R.need(p + "ssm_ba.weight", {2 * Hv, H}));
        for (int64_t at : {int64_t{0}, r})
          for (int64_t gi = 0; gi < Hk; ++gi)
            in.blocks.push_back(Resolver::rows_of(ba, gi * 2 * r + at, r, H));
      } else {
        REWIND_TRY(Found b, R.need(p + "ssm_beta.weight", {Hv, H}));
        REWIND_TRY(Found al, R.need(p + "ssm_alpha.weight", {Hv, H}));
        heads(b, 0, 1);
        heads(al, 0, 1);
      }
      ws.put(cp + "in_proj", std::move(in));

      REWIND_TRY(Found conv, R.need(p + "ssm_conv1d.weight", {CD, K}));
      ws.put(cp + "conv", Resolver::owned(conv, CD, K, [&](int64_t ch) {
               return ch < 2 * KD ? ch
                                  : 2 * KD + vh.pos((ch - 2 * KD) / dv) * dv + (ch - 2 * KD) % dv;
             }));
      REWIND_TRY(Found A, R.need(p + "ssm_a", {Hv}));
      REWIND_TRY(Found dtb, R.need(p + "ssm_dt.bias", {Hv}));
      // [Hv] viewed as Hv rows of one value, so the head permutation is a row permutation.
      auto per_head = [&](const Found& t) {
        WeightSource s = Resolver::owned(t, Hv, 1, [&](int64_t h) { return vh.pos(h); });
        s.cols = Hv;
        s.blocks[0].rows = 1;
        return s;
      };
      ws.put(cp + "A", per_head(A));
      ws.put(cp + "dt_bias", per_head(dtb));
      REWIND_TRY(Found gn, R.need(p + "ssm_norm.weight", {dv}));
      ws.put(cp + "gnorm", Resolver::owned(gn, 1, dv));
      REWIND_TRY(Found out, R.need(p + "ssm_out.weight", {H, VD}));
      WeightSource o = Resolver::view(out, H, VD);
      if (vh.tiled) {
        o.col_perm.resize(static_cast<size_t>(VD));
        for (int64_t j = 0; j < VD; ++j)
          o.col_perm[j] = static_cast<int32_t>(vh.head_at(j / dv) * dv + j % dv);
      }
      ws.put(cp + "out_proj", std::move(o));
    }
    REWIND_TRY_STATUS(map_ffn(p, cp, c.layer_is_moe(il)));
  }

  // MTP blocks (llama.cpp's nextn layout): block n_layer + j holds MTP layer j as a
  // full-attention layer (the names above) plus nextn.eh_proj (HF mtp.fc, as is: input columns
  // [normed embedding ; normed hidden]), nextn.enorm, nextn.hnorm and nextn.shared_head_norm (HF
  // pre_fc_norm_embedding, pre_fc_norm_hidden, norm; +1 folded in as every zero-centred norm).
  // The head's own tensors are read from the first MTP block (llama.cpp's converter copies them
  // into each). Absent altogether is fine; partly present or mis-shaped is an error naming the
  // tensor.
  for (auto& t : g.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    const int64_t n = std::strtoll(t.name.c_str() + 4, nullptr, 10);
    if (n >= c.n_layer) mtp_names.push_back(t.name);
  }
  if (c.mtp_num_hidden_layers > 0 && !mtp_names.empty()) {
    auto mtp = [&]() -> Status {
      const std::string nx = "blk." + std::to_string(c.n_layer) + ".nextn.";
      for (const char* own : {"embed_tokens", "shared_head_head"})
        if (R.has(nx + own + ".weight"))
          return make_error(g.path() + ": tensor '" + nx + own +
                            ".weight' is not supported (rewind's MTP head shares "
                            "token_embd.weight and the output matrix)");
      REWIND_TRY(Found fc, R.need(nx + "eh_proj.weight", {H, 2 * H}));
      ws.put("mtp.fc", Resolver::view(fc, H, 2 * H));
      REWIND_TRY(Found en, R.need(nx + "enorm.weight", {H}));
      ws.put("mtp.enorm", Resolver::owned(en, 1, H));
      REWIND_TRY(Found hn, R.need(nx + "hnorm.weight", {H}));
      ws.put("mtp.hnorm", Resolver::owned(hn, 1, H));
      if (R.has(nx + "shared_head_norm.weight")) {
        REWIND_TRY(Found sn, R.need(nx + "shared_head_norm.weight", {H}));
        ws.put("mtp.norm", Resolver::owned(sn, 1, H));
      } else {  // optional: llama.cpp's MTP graph then uses output_norm
        ws.put("mtp.norm", ws.get("final_norm"));
      }
      for (int64_t j = 0; j < c.mtp_num_hidden_layers; ++j) {
        const std::string p = "blk." + std::to_string(c.n_layer + j) + ".";
        const std::string cp = layer_prefix(c.n_layer + j);
        REWIND_TRY_STATUS(map_norms(p, cp));
        REWIND_TRY_STATUS(map_full_attention(p, cp));
        REWIND_TRY_STATUS(map_ffn(p, cp, c.mtp_layer_is_moe()));
      }
      return Ok{};
    };
    Status st = mtp();
    if (!st.ok())
      return make_error(st.error_message() + " (MTP block: nextn_predict_layers = " +
                        std::to_string(c.mtp_num_hidden_layers) + " and some blk." +
                        std::to_string(c.n_layer) + ".* tensors are present)");
    has_mtp = true;
  }
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
    parse_gguf,
    map_gguf,
};

}  // namespace rw
