// The Nemotron-H entry of the architecture registry (model/arch.h): HF `nemotron_h`, GGUF
// `nemotron_h` and `nemotron_h_moe`. One mixer per block, from `hybrid_override_pattern`:
// M = Mamba2, * = attention (no positional encoding, no output gate, no q/k norm), - = squared-ReLU
// MLP, E = MoE (HF NemotronHMoE: sigmoid group-limited router with a correction bias, squared-ReLU
// experts plus a shared expert); each block is x += mixer(rmsnorm(x)). Untied head, no
// multipliers. Hub checkpoints name tensors `backbone.*`, current HF `model.*`; both are read.
// Spec: docs/MAMBA2.md.
//
// Choices: biases (attention_bias, mlp_bias, use_bias), activations other than relu2 / silu, a
// MoE latent projection (moe_latent_size) and a time_step_limit other than (0, inf) are refused:
// HF's CUDA path and llama.cpp apply no dt clamp then, and neither does rewind. The gated norm is
// grouped by n_groups, as in HF and llama.cpp.
#include <cmath>
#include <functional>

#include "rewind/model/arch.h"
#include "rewind/model/config_fields.h"
#include "rewind/model/gguf_resolver.h"
#include "rewind/model/hf_resolver.h"

namespace rw {

namespace {

using namespace cfg;

constexpr int64_t kMaxExperts = 1 << 16;

// The router's group limits, shared by both formats: E experts in n_group groups, top-k within
// the topk_group best groups.
Status check_moe_groups(const ModelConfig& c, const std::function<Error(const std::string&)>& err) {
  if (c.n_expert % c.moe_n_group != 0)
    return err("the " + std::to_string(c.n_expert) + " experts do not split into " +
               std::to_string(c.moe_n_group) + " equal groups");
  if (c.moe_topk_group < 1 || c.moe_topk_group > c.moe_n_group)
    return err("topk_group = " + std::to_string(c.moe_topk_group) + " must be in [1, " +
               std::to_string(c.moe_n_group) + "] (the expert groups)");
  if (c.n_expert_used > c.moe_topk_group * (c.n_expert / c.moe_n_group))
    return err("num_experts_per_tok = " + std::to_string(c.n_expert_used) + " is more than the " +
               std::to_string(c.moe_topk_group * (c.n_expert / c.moe_n_group)) +
               " experts of the topk_group groups kept");
  if (!std::isfinite(c.moe_routed_scale) || c.moe_routed_scale <= 0)
    return err("routed_scaling_factor = " + std::to_string(c.moe_routed_scale) +
               " must be a positive number");
  return Ok{};
}

// The MoE fields of config.json into c (every E block has the same shape).
Status parse_moe_hf(const Fields& f, ModelConfig* c) {
  if (const json* lat = f.find("moe_latent_size"))
    return f.err("field 'moe_latent_size' is " + preview(*lat) +
                 ": the latent MoE projection is not supported");
  const char* ne = f.has("num_local_experts") ? "num_local_experts" : "n_routed_experts";
  REWIND_TRY(c->n_expert, f.int_req(ne, 1, kMaxExperts));
  REWIND_TRY(c->n_expert_used, f.int_req("num_experts_per_tok", 1, c->n_expert));
  REWIND_TRY(c->moe_intermediate_size, f.int_req("moe_intermediate_size", 1, kMaxDim));
  REWIND_TRY(c->shared_expert_intermediate_size,
             f.int_req("moe_shared_expert_intermediate_size", 1, kMaxDim));
  // HF builds one shared MLP of that width whatever n_shared_experts says.
  REWIND_TRY(int64_t n_shared, f.int_opt("n_shared_experts", 1, 0, kMaxExperts));
  (void)n_shared;
  REWIND_TRY(c->moe_n_group, f.int_opt("n_group", 1, 1, c->n_expert));
  REWIND_TRY(c->moe_topk_group, f.int_opt("topk_group", 1, 1, kMaxExperts));
  REWIND_TRY(c->norm_topk_prob, f.bool_opt("norm_topk_prob", true));
  REWIND_TRY(c->moe_routed_scale, f.num_opt("routed_scaling_factor", 1.0));
  c->moe_relu2 = true;
  c->moe_sigmoid_router = true;
  c->shared_expert_gate = false;
  return check_moe_groups(*c, [&](const std::string& m) { return f.err(m); });
}

Result<ModelConfig> parse_hf(const json& root, const std::string& model_type,
                             const std::string& where) {
  const Fields f(root, "", where);
  ModelConfig c;
  c.family = Family::NemotronH;
  c.model_type = model_type;
  REWIND_TRY(c.vocab_size, f.int_req("vocab_size", 1, kMaxDim));
  REWIND_TRY(c.hidden_size, f.int_req("hidden_size", 1, kMaxDim));

  // Blocks: the pattern string, or the layers_block_type list of current HF configs.
  std::string pattern;
  if (const json* p = f.find("hybrid_override_pattern")) {
    if (!p->is_string()) return f.wrong_type("hybrid_override_pattern", "a string", *p);
    pattern = p->get<std::string>();
  } else if (const json* l = f.find("layers_block_type")) {
    if (!l->is_array()) return f.wrong_type("layers_block_type", "a list of strings", *l);
    for (size_t i = 0; i < l->size(); ++i) {
      const json& e = (*l)[i];
      const std::string s = e.is_string() ? e.get<std::string>() : "";
      if (s == "mamba" || s == "linear_attention")
        pattern += 'M';
      else if (s == "attention" || s == "full_attention")
        pattern += '*';
      else if (s == "mlp")
        pattern += '-';
      else if (s == "moe")
        pattern += 'E';
      else
        return f.err("field 'layers_block_type[" + std::to_string(i) + "]' is " + preview(e) +
                     " (expected \"mamba\", \"attention\", \"mlp\" or \"moe\")");
    }
  } else {
    return f.missing("hybrid_override_pattern");
  }
  if (pattern.empty()) return f.err("field 'hybrid_override_pattern' is empty");
  c.n_layer = static_cast<int64_t>(pattern.size());
  if (f.has("num_hidden_layers")) {
    REWIND_TRY(int64_t n, f.int_req("num_hidden_layers", 1, kMaxLayers));
    if (n != c.n_layer)
      return f.err("field 'num_hidden_layers' = " + std::to_string(n) + " but the pattern has " +
                   std::to_string(c.n_layer) + " blocks");
  }
  for (size_t i = 0; i < pattern.size(); ++i) {
    switch (pattern[i]) {
      case 'M':
        c.layer_kinds.push_back(LayerKind::Mamba2);
        c.ffn_kinds.push_back(FfnKind::None);
        break;
      case '*':
        c.layer_kinds.push_back(LayerKind::Attention);
        c.ffn_kinds.push_back(FfnKind::None);
        break;
      case '-':
        c.layer_kinds.push_back(LayerKind::None);
        c.ffn_kinds.push_back(FfnKind::ReluSq);
        break;
      case 'E':
        c.layer_kinds.push_back(LayerKind::None);
        c.ffn_kinds.push_back(FfnKind::Moe);
        break;
      default:
        return f.err("field 'hybrid_override_pattern' has '" + std::string(1, pattern[i]) +
                     "' at " + std::to_string(i) + " (expected M, *, - or E)");
    }
  }

  // Attention (no positional encoding; scale 1/sqrt(head_dim)).
  REWIND_TRY(c.n_head, f.int_req("num_attention_heads", 1, kMaxDim));
  REWIND_TRY(c.n_head_kv, f.int_opt("num_key_value_heads", c.n_head, 1, kMaxDim));
  if (c.n_head % c.n_head_kv != 0)
    return f.err("num_attention_heads = " + std::to_string(c.n_head) +
                 " is not a multiple of num_key_value_heads = " + std::to_string(c.n_head_kv));
  // NemotronHConfig's default: 128, not hidden / heads (4480 / 40 = 112 for the 9B).
  REWIND_TRY(c.head_dim, f.int_opt("head_dim", 128, 1, kMaxDim));
  c.rope_dim = 0;
  c.attn_output_gate = false;
  c.attn_qk_norm = false;

  // Mamba2 (legacy mamba_* names are accepted, as HF remaps them).
  auto alias = [&](const char* key, const char* legacy) { return f.has(key) ? key : legacy; };
  REWIND_TRY(c.ssm_n_head, f.int_req("mamba_num_heads", 1, kMaxDim));
  REWIND_TRY(c.ssm_head_dim, f.int_req("mamba_head_dim", 1, kMaxDim));
  REWIND_TRY(c.ssm_d_state, f.int_req("ssm_state_size", 1, kMaxDim));
  REWIND_TRY(c.ssm_n_group, f.int_opt(alias("n_groups", "mamba_n_groups"), 1, 1, kMaxDim));
  REWIND_TRY(c.conv_kernel, f.int_opt(alias("conv_kernel", "mamba_d_conv"), 4, 1, 64));
  REWIND_TRY(c.ssm_conv_bias, f.bool_opt(alias("use_conv_bias", "mamba_conv_bias"), true));
  c.ssm_norm_groups = c.ssm_n_group;
  REWIND_TRY_STATUS(check_mamba2_sizes(f, c));
  if (const json* lim = f.find(alias("time_step_limit", "mamba_dt_limit"))) {
    const bool ok = lim->is_array() && lim->size() == 2 && (*lim)[0].is_number() &&
                    (*lim)[0].get<double>() == 0.0 &&
                    ((*lim)[1].is_number() && (*lim)[1].get<double>() >= 1e300);
    if (!ok)
      return f.err("field 'time_step_limit' is " + preview(*lim) +
                   ": only (0, inf), no dt clamp, is supported");
  }
  for (const char* key : {"attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"}) {
    REWIND_TRY(bool b, f.bool_opt(key, false));
    if (b) return f.err("field '" + std::string(key) + "' is true: biases are not supported");
  }
  for (auto [key, want] : {std::pair<const char*, const char*>{"mlp_hidden_act", "relu2"},
                           {"mamba_hidden_act", "silu"}}) {
    REWIND_TRY(auto act, f.str_opt(key));
    if (act && *act != want)
      return f.err("field '" + std::string(key) + "' is '" + *act + "': only '" + want +
                   "' is supported");
  }

  // MLP blocks.
  for (const FfnKind k : c.ffn_kinds)
    if (k == FfnKind::ReluSq) {
      REWIND_TRY(c.intermediate_size, f.int_req("intermediate_size", 1, kMaxDim));
      break;
    }

  // MoE blocks (HF NemotronHMoE; defaults as HF's NemotronHConfig where no shape depends on them).
  for (const FfnKind k : c.ffn_kinds)
    if (k == FfnKind::Moe) {
      REWIND_TRY_STATUS(parse_moe_hf(f, &c));
      break;
    }

  REWIND_TRY_STATUS(parse_flat_tail(f, "layer_norm_epsilon", 1e-5, &c));
  return c;
}

// An E block's mixer: router `gate` and its correction bias, the experts (the Hub's one tensor
// per expert, or current HF's stacked experts.up_proj [E, F, H] / experts.down_proj [E, H, F]),
// the shared expert.
Status map_moe_hf(const HfResolver& R, const std::string& mp, const std::string& cp,
                  const ModelConfig& c, WeightSet* ws) {
  const int64_t H = c.hidden_size, E = c.n_expert, F = c.moe_intermediate_size,
                Fs = c.shared_expert_intermediate_size;
  REWIND_TRY(auto* router, R.need(mp + "gate.weight", {E, H}));
  ws->put(cp + "router", HfResolver::view(router, E, H));
  REWIND_TRY_STATUS(map_norm_hf(R, mp + "gate.e_score_correction_bias", E, cp + "router_bias", ws));
  if (R.has(mp + "experts.up_proj")) {
    REWIND_TRY(auto* up, R.need(mp + "experts.up_proj", {E, F, H}));
    REWIND_TRY(auto* down, R.need(mp + "experts.down_proj", {E, H, F}));
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = cp + "e" + std::to_string(e) + ".";
      ws->put(ep + "up", HfResolver::stacked(H, up->dtype, {HfResolver::rows_of(up, e * F, F, H)}));
      ws->put(ep + "down",
              HfResolver::stacked(F, down->dtype, {HfResolver::rows_of(down, e * H, H, F)}));
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const std::string src = mp + "experts." + std::to_string(e) + ".";
      const std::string ep = cp + "e" + std::to_string(e) + ".";
      REWIND_TRY(auto* up, R.need(src + "up_proj.weight", {F, H}));
      REWIND_TRY(auto* down, R.need(src + "down_proj.weight", {H, F}));
      ws->put(ep + "up", HfResolver::view(up, F, H));
      ws->put(ep + "down", HfResolver::view(down, H, F));
    }
  }
  REWIND_TRY(auto* sup, R.need(mp + "shared_experts.up_proj.weight", {Fs, H}));
  REWIND_TRY(auto* sdown, R.need(mp + "shared_experts.down_proj.weight", {H, Fs}));
  ws->put(cp + "sh.up", HfResolver::view(sup, Fs, H));
  ws->put(cp + "sh.down", HfResolver::view(sdown, H, Fs));
  return Ok{};
}

Status map_hf(const TensorSet& tensors, const ModelConfig& c, WeightSet* ws) {
  const HfResolver R(tensors);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const std::string P = R.has("backbone.embeddings.weight") ? "backbone." : "model.";
  REWIND_TRY(auto* embed, R.need(P + "embeddings.weight", {V, H}));
  ws->put("embed", HfResolver::view(embed, V, H));
  if (c.tie_word_embeddings) {
    ws->put("lm_head", ws->get("embed"));
  } else {
    REWIND_TRY(auto* lm, R.need("lm_head.weight", {V, H}));
    ws->put("lm_head", HfResolver::view(lm, V, H));
  }
  REWIND_TRY_STATUS(map_norm_hf(R, P + "norm_f.weight", H, "final_norm", ws));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string lp = P + "layers." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    const std::string mp = lp + "mixer.";
    // The block's norm is the mixer's pre-norm, or the MLP's for an MLP block.
    const bool mlp = c.layer_kinds[il] == LayerKind::None;
    REWIND_TRY_STATUS(
        map_norm_hf(R, lp + "norm.weight", H, cp + (mlp ? "post_norm" : "in_norm"), ws));
    if (c.layer_kinds[il] == LayerKind::Mamba2) {
      REWIND_TRY_STATUS(map_mamba2_hf(R, mp, cp, c, ws));
    } else if (c.layer_kinds[il] == LayerKind::Attention) {
      REWIND_TRY_STATUS(map_plain_attention_hf(R, mp, cp, c, ws));
    } else if (c.ffn_kinds[il] == FfnKind::Moe) {
      REWIND_TRY_STATUS(map_moe_hf(R, mp, cp, c, ws));
    } else {
      const int64_t F = c.intermediate_size;
      REWIND_TRY(auto* up, R.need(mp + "up_proj.weight", {F, H}));
      REWIND_TRY(auto* down, R.need(mp + "down_proj.weight", {H, F}));
      ws->put(cp + "up", HfResolver::view(up, F, H));
      ws->put(cp + "down", HfResolver::view(down, H, F));
    }
  }
  ws->set_mtp(false, {});
  return Ok{};
}

// llama.cpp's `nemotron_h` / `nemotron_h_moe` files (docs/MAMBA2.md, "GGUF"): per block,
// feed_forward_length > 0 is an MLP block (MoE where it has ffn_gate_inp, the width then the
// experts'), else attention.head_count_kv > 0 is attention, else Mamba2.
Result<ModelConfig> parse_gguf(const GgufFile& g) {
  REWIND_TRY(std::string arch, g.get_string("general.architecture"));
  const bool moe_arch = arch == "nemotron_h_moe";
  const GgufKeys k(g, moe_arch ? "nemotron_h_moe" : "nemotron_h");
  ModelConfig c;
  c.family = Family::NemotronH;
  c.model_type = "nemotron_h";
  // llama.cpp requires attention.layer_norm_epsilon here and reads the RMS key only when present.
  REWIND_TRY_STATUS(hybrid_basics_from_gguf(k, &c, /*eps_fallback=*/true));
  REWIND_TRY_STATUS(mamba2_sizes_from_gguf(k, &c));
  REWIND_TRY(auto kv, k.per_layer("attention.head_count_kv", c.n_layer, 0, kMaxDim));
  REWIND_TRY(auto ff, k.per_layer("feed_forward_length", c.n_layer, 0, kMaxDim));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string b = std::to_string(il);
    if (ff[il] > 0) {
      if (kv[il] > 0)
        return k.err("feed_forward_length",
                     "and 'attention.head_count_kv' are both non-zero at block " + b +
                         " (a block is Mamba2, attention or an MLP)");
      const bool moe = g.find("blk." + b + ".ffn_gate_inp.weight") != nullptr;
      if (!moe && g.find("blk." + b + ".ffn_up_exps.weight") != nullptr)
        return make_error(g.path() + ": block " + b + " has routed experts ('blk." + b +
                          ".ffn_up_exps.weight') but no router (missing tensor 'blk." + b +
                          ".ffn_gate_inp.weight')");
      if (moe && !moe_arch)
        return make_error(g.path() + ": block " + b + " has MoE tensors ('blk." + b +
                          ".ffn_gate_inp.weight') but the architecture is 'nemotron_h' "
                          "(expected 'nemotron_h_moe')");
      int64_t& width = moe ? c.moe_intermediate_size : c.intermediate_size;
      if (width != 0 && ff[il] != width)
        return k.err("feed_forward_length", "has " + std::to_string(ff[il]) + " at block " + b +
                                                " but " + std::to_string(width) +
                                                " at an earlier " + (moe ? "MoE" : "MLP") +
                                                " block (one width for each kind is supported)");
      width = ff[il];
      c.layer_kinds.push_back(LayerKind::None);
      c.ffn_kinds.push_back(moe ? FfnKind::Moe : FfnKind::ReluSq);
    } else {
      c.layer_kinds.push_back(kv[il] > 0 ? LayerKind::Attention : LayerKind::Mamba2);
      c.ffn_kinds.push_back(FfnKind::None);
    }
  }
  REWIND_TRY_STATUS(attention_sizes_from_gguf(k, kv, &c));
  for (int64_t il = 0; il < c.n_layer; ++il)
    if (c.layer_kinds[il] == LayerKind::Mamba2) {
      c.ssm_conv_bias = g.find("blk." + std::to_string(il) + ".ssm_conv1d.bias") != nullptr;
      break;
    }
  if (c.moe_intermediate_size > 0) {
    // The MoE keys as llama.cpp's converter writes them (expert_group_used_count: rewind's
    // files; required only when there is more than one group).
    REWIND_TRY(c.n_expert, k.req("expert_count", 1, kMaxExperts));
    REWIND_TRY(c.n_expert_used, k.req("expert_used_count", 1, c.n_expert));
    REWIND_TRY(int64_t ef,
               k.opt("expert_feed_forward_length", c.moe_intermediate_size, 1, kMaxDim));
    if (ef != c.moe_intermediate_size)
      return k.err("expert_feed_forward_length",
                   "= " + std::to_string(ef) + " but the MoE blocks' feed_forward_length is " +
                       std::to_string(c.moe_intermediate_size));
    REWIND_TRY(c.shared_expert_intermediate_size,
               k.req("expert_shared_feed_forward_length", 1, kMaxDim));
    REWIND_TRY(c.norm_topk_prob, g.get_bool_or(k.key("expert_weights_norm"), false));
    if (!k.has("expert_weights_scale"))
      return k.err("expert_weights_scale", "is missing (the routed experts' scale)");
    REWIND_TRY(c.moe_routed_scale, k.positive("expert_weights_scale", 1.0));
    REWIND_TRY(c.moe_n_group, k.opt("expert_group_count", 1, 1, c.n_expert));
    if (c.moe_n_group > 1 && !k.has("expert_group_used_count"))
      return k.err("expert_group_used_count",
                   "is missing but 'expert_group_count' is " + std::to_string(c.moe_n_group));
    REWIND_TRY(c.moe_topk_group, k.opt("expert_group_used_count", 1, 1, kMaxExperts));
    REWIND_TRY(int64_t gating, k.opt("expert_gating_func", 2, 0, 1 << 20));
    if (gating != 2)
      return k.err("expert_gating_func",
                   "= " + std::to_string(gating) + ": only 2 (sigmoid) is supported");
    REWIND_TRY(int64_t latent, k.opt("moe_latent_size", 0, 0, kMaxDim));
    if (latent != 0)
      return k.err("moe_latent_size",
                   "= " + std::to_string(latent) + ": the latent MoE projection is not supported");
    c.moe_relu2 = true;
    c.moe_sigmoid_router = true;
    c.shared_expert_gate = false;
    REWIND_TRY_STATUS(check_moe_groups(c, [&](const std::string& m) {
      return make_error(g.path() + ": " + m + " (keys 'nemotron_h_moe.expert_*')");
    }));
  }
  return c;
}

Status map_gguf(const GgufFile& g, const ModelConfig& c, WeightSet* ws) {
  const GgufResolver R(g);
  const int64_t H = c.hidden_size;
  REWIND_TRY_STATUS(map_head_gguf(R, c, ws));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    // The block's one norm: the mixer's pre-norm, or the MLP's.
    const bool mlp = c.layer_kinds[il] == LayerKind::None;
    const std::string norm = std::string(mlp ? "post_norm" : "in_norm");
    REWIND_TRY_STATUS(map_norm_gguf(R, p + "attn_norm.weight", H, cp + norm, ws));
    if (c.layer_kinds[il] == LayerKind::Mamba2) {
      REWIND_TRY_STATUS(map_mamba2_gguf(R, p, cp, c, ws));
    } else if (c.layer_kinds[il] == LayerKind::Attention) {
      REWIND_TRY_STATUS(map_plain_attention_gguf(R, p, cp, c, ws));
    } else if (c.ffn_kinds[il] == FfnKind::Moe) {
      const int64_t E = c.n_expert, F = c.moe_intermediate_size,
                    Fs = c.shared_expert_intermediate_size;
      if (R.has(p + "ffn_latent_down.weight"))
        return make_error(g.path() + ": tensor '" + p +
                          "ffn_latent_down.weight': the latent MoE projection is not supported");
      REWIND_TRY(GgufFound router, R.need(p + "ffn_gate_inp.weight", {E, H}));
      ws->put(cp + "router", GgufResolver::view(router, E, H));
      REWIND_TRY_STATUS(map_norm_gguf(R, p + "exp_probs_b.bias", E, cp + "router_bias", ws));
      REWIND_TRY(GgufFound up, R.need(p + "ffn_up_exps.weight", {E, F, H}));
      REWIND_TRY(GgufFound dn, R.need(p + "ffn_down_exps.weight", {E, H, F}));
      for (int64_t e = 0; e < E; ++e) {
        const std::string ep = cp + "e" + std::to_string(e) + ".";
        WeightSource u;
        u.cols = H;
        u.file_dtype = up.dtype;
        u.blocks = {GgufResolver::rows_of(up, e * F, F, H)};
        ws->put(ep + "up", std::move(u));
        WeightSource d;
        d.cols = F;
        d.file_dtype = dn.dtype;
        d.blocks = {GgufResolver::rows_of(dn, e * H, H, F)};
        ws->put(ep + "down", std::move(d));
      }
      REWIND_TRY(GgufFound sup, R.need(p + "ffn_up_shexp.weight", {Fs, H}));
      REWIND_TRY(GgufFound sdn, R.need(p + "ffn_down_shexp.weight", {H, Fs}));
      ws->put(cp + "sh.up", GgufResolver::view(sup, Fs, H));
      ws->put(cp + "sh.down", GgufResolver::view(sdn, H, Fs));
    } else {
      const int64_t F = c.intermediate_size;
      REWIND_TRY(GgufFound up, R.need(p + "ffn_up.weight", {F, H}));
      REWIND_TRY(GgufFound down, R.need(p + "ffn_down.weight", {H, F}));
      ws->put(cp + "up", GgufResolver::view(up, F, H));
      ws->put(cp + "down", GgufResolver::view(down, H, F));
    }
  }
  ws->set_mtp(false, {});
  return Ok{};
}

}  // namespace

const Architecture kNemotronHArch = {
    "Nemotron-H", {Family::NemotronH}, {"nemotron_h"}, {"nemotron_h", "nemotron_h_moe"}, parse_hf,
    map_hf,       parse_gguf,          map_gguf,
};

}  // namespace rw
