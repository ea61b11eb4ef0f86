// The Nemotron-H entry of the architecture registry (model/arch.h): HF `nemotron_h`. One mixer
// per block, from `hybrid_override_pattern`: M = Mamba2, * = attention (no positional encoding,
// no output gate, no q/k norm), - = squared-ReLU MLP; each block is x += mixer(rmsnorm(x)).
// Untied head, no multipliers. Hub checkpoints name tensors `backbone.*`, current HF `model.*`;
// both are read. Spec: docs/MAMBA2.md.
//
// Choices: E blocks (Nemotron-H MoE) are refused for now, as are biases (attention_bias,
// mlp_bias, use_bias), activations other than relu2 / silu, and a time_step_limit other than
// (0, inf): HF's CUDA path and llama.cpp apply no dt clamp then, and neither does rewind.
// The gated norm is grouped by n_groups, as in HF and llama.cpp.
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
        return f.err("block " + std::to_string(i) +
                     " is 'E' (a Nemotron-H MoE block): not supported yet");
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
  if (f.has("head_dim")) {
    REWIND_TRY(c.head_dim, f.int_req("head_dim", 1, kMaxDim));
  } else {
    if (c.hidden_size % c.n_head != 0)
      return f.err("missing field 'head_dim' and hidden_size is not a multiple of the heads");
    c.head_dim = c.hidden_size / c.n_head;
  }
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

  REWIND_TRY_STATUS(parse_flat_tail(f, "layer_norm_epsilon", 1e-5, &c));
  return c;
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

// llama.cpp's `nemotron_h` files (docs/MAMBA2.md, "GGUF"): per block, feed_forward_length > 0
// is an MLP block, else attention.head_count_kv > 0 is attention, else Mamba2.
Result<ModelConfig> parse_gguf(const GgufFile& g) {
  const GgufKeys k(g, "nemotron_h");
  ModelConfig c;
  c.family = Family::NemotronH;
  c.model_type = "nemotron_h";
  REWIND_TRY_STATUS(hybrid_basics_from_gguf(k, &c));
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
      if (g.find("blk." + b + ".ffn_gate_inp.weight"))
        return make_error(g.path() + ": block " + b + " is a Nemotron-H MoE block (tensor 'blk." +
                          b + ".ffn_gate_inp.weight'): not supported yet");
      if (c.intermediate_size != 0 && ff[il] != c.intermediate_size)
        return k.err("feed_forward_length",
                     "has " + std::to_string(ff[il]) + " at block " + b + " but " +
                         std::to_string(c.intermediate_size) +
                         " at an earlier MLP block (one width for all is supported)");
      c.intermediate_size = ff[il];
      c.layer_kinds.push_back(LayerKind::None);
      c.ffn_kinds.push_back(FfnKind::ReluSq);
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
    "Nemotron-H", {Family::NemotronH}, {"nemotron_h"}, {"nemotron_h"}, parse_hf,
    map_hf,       parse_gguf,          map_gguf,
};

}  // namespace rw
