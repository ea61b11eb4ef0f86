#include "rewind/model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "rewind/base/thread_pool.h"
#include "rewind/model/arch.h"
#include "rewind/model/gguf_resolver.h"
#include "rewind/tensor/quant.h"
#include "rewind/tensor/shape.h"

namespace rw {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxLayers = int64_t{1} << 16;

using Found = GgufFound;
using Resolver = GgufResolver;

}  // namespace

const char* gguf_arch_name(Family f) {
  switch (f) {
    case Family::Qwen35:
      return "qwen35";
    case Family::Qwen35Moe:
      return "qwen35moe";
    case Family::Qwen3Next:
      return "qwen3next";
    case Family::GraniteHybrid:
      return "granitehybrid";
    case Family::NemotronH:
      return "nemotron_h";
  }
  return "?";
}

const char* gguf_arch_name(const ModelConfig& c) {
  return c.family == Family::NemotronH && c.n_expert > 0 ? "nemotron_h_moe"
                                                         : gguf_arch_name(c.family);
}

Result<ModelConfig> config_from_gguf(const GgufFile& g) {
  REWIND_TRY(std::string arch, g.get_string("general.architecture"));
  const Architecture* a = architecture_for_gguf(arch);
  if (!a)
    return make_error(g.path() + ": architecture '" + arch + "' is not supported (" +
                      supported_gguf_archs() + ")");
  return a->parse_gguf(g);
}

Result<WeightSet> WeightSet::from_gguf(const GgufFile& g, const ModelConfig& c) {
  const Architecture& a = architecture_of(c.family);
  if (!a.map_gguf) return make_error(g.path() + ": " + a.name + " GGUF files are not supported");
  WeightSet ws;
  REWIND_TRY_STATUS(a.map_gguf(g, c, &ws));
  return ws;
}

// ---- writer ------------------------------------------------------------------------------------

int64_t gguf_mtp_blocks(const ModelConfig& c, const WeightSet& ws) {
  return ws.has_mtp() && c.family != Family::Qwen3Next ? c.mtp_num_hidden_layers : 0;
}

GgmlType ggml_from_dtype(DType t) {
  switch (t) {
    case DType::F16:
      return GgmlType::F16;
    case DType::BF16:
      return GgmlType::BF16;
    default:
      return dtype_is_quant(t) ? static_cast<GgmlType>(quant_traits(t).ggml_type) : GgmlType::F32;
  }
}

std::function<DType(const std::string&)> gguf_k_m_rule(const ModelConfig& c, int64_t n_mtp,
                                                       DType base) {
  auto more_bits = [](int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  };
  // llama-quantize counts every block of the file (block_count), the MTP blocks after the main
  // layers. Its attn_v rule covers the "attn_v-like" tensors, attn_v and attn_qkv, with one
  // counter over them in block order; every block has exactly one of them (a full-attention
  // block its attn_v, a linear-attention block its fused attn_qkv), so the counter is the block.
  // rewind counts a Mamba2 block's ssm_in as attn_v-like too (docs/MAMBA2.md section 5.4).
  const int64_t n_all = c.n_layer + n_mtp;
  return [=](const std::string& name) {
    // A tied model has no output.weight: its token_embd is the output matrix and gets the
    // output's type, as llama-quantize does.
    if (name == "output.weight" || (c.tie_word_embeddings && name == "token_embd.weight"))
      return DType::Q6_K;
    if (name.rfind("blk.", 0) != 0) return base;
    const int64_t il = std::strtoll(name.c_str() + 4, nullptr, 10);
    if (il < 0 || il >= n_all) return base;
    const bool attn_v_like = name.find(".attn_v.") != std::string::npos ||
                             name.find(".attn_qkv.") != std::string::npos ||
                             name.find(".ssm_in.") != std::string::npos;
    if ((attn_v_like || name.find(".ffn_down") != std::string::npos) && more_bits(il, n_all))
      return DType::Q6_K;
    return base;
  };
}

DType gguf_matrix_type(DType want, int64_t ne0) {
  if (ne0 % dtype_block_elems(want) == 0) return want;
  // llama-quantize's tensor_type_fallback: a 256-block type's 32-block stand-in, else F16.
  DType fallback = want;
  switch (want) {
    case DType::Q2_K:
    case DType::Q3_K:
      fallback = DType::Q4_0;
      break;
    case DType::Q4_K:
      fallback = DType::Q5_0;
      break;
    case DType::Q5_K:
      fallback = DType::Q5_1;
      break;
    case DType::Q6_K:
      fallback = DType::Q8_0;
      break;
    case DType::IQ4_XS:
      fallback = DType::IQ4_NL;
      break;
    default:
      break;
  }
  return ne0 % dtype_block_elems(fallback) == 0 ? fallback : DType::F16;
}

namespace {

// One GGUF tensor to write: rows in file order (numpy rows), each produced in f32 by `row`.
struct Out {
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  int64_t rows = 0, cols = 0;
  bool matrix = true;  // false: always F32
  std::function<void(int64_t, float*)> row;
  std::vector<const WeightSource*> src;  // the canonical weights `row` reads
};

// A 3-D experts tensor from E per-expert matrices `<cp>e<i>.<part>`: file row i is row
// r0 + i % n of expert i / n.
Out stacked_experts(const WeightSet& ws, const std::string& gname, const std::string& cp,
                    const std::string& part, int64_t E, int64_t n, int64_t cols, int64_t r0) {
  std::vector<const WeightSource*> src;
  for (int64_t e = 0; e < E; ++e) src.push_back(&ws.get(cp + "e" + std::to_string(e) + "." + part));
  Out o;
  o.name = gname;
  o.rows = E * n;
  o.cols = cols;
  o.ne = {cols, n, E};
  o.row = [src, n, r0](int64_t i, float* out) { src[i / n]->row_f32(r0 + i % n, out); };
  o.src = std::move(src);
  return o;
}

// The architecture keys of a Granite-4.0-H / Nemotron-H file, as llama.cpp's converter writes
// them: per-layer head_count_kv (0 on non-attention blocks); Granite's multipliers and a scalar
// feed_forward_length (the shared MLP's width, or the experts' with expert_count), Nemotron-H's
// per-layer feed_forward_length (0 on non-MLP blocks); rope.scaling.finetuned false (no RoPE).
void write_mamba2_keys(const ModelConfig& c, std::vector<std::pair<std::string, GgufValue>>* kv) {
  const std::string a = std::string(gguf_arch_name(c)) + ".";
  const bool granite = c.family == Family::GraniteHybrid;
  auto u32 = [&](const std::string& k, int64_t v) {
    kv->emplace_back(a + k, GgufValue::u32(static_cast<uint32_t>(v)));
  };
  auto f32 = [&](const std::string& k, double v) {
    kv->emplace_back(a + k, GgufValue::f32(static_cast<float>(v)));
  };
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("block_count", c.n_layer);
  std::vector<int64_t> kv_heads, ff;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    kv_heads.push_back(c.layer_kinds[il] == LayerKind::Attention ? c.n_head_kv : 0);
    ff.push_back(c.ffn_kinds[il] == FfnKind::ReluSq ? c.intermediate_size
                 : c.ffn_kinds[il] == FfnKind::Moe  ? c.moe_intermediate_size
                                                    : 0);
  }
  if (granite)
    u32("feed_forward_length", c.n_expert > 0 ? c.moe_intermediate_size : c.intermediate_size);
  else
    kv->emplace_back(a + "feed_forward_length", GgufValue::array_i32(std::move(ff)));
  u32("attention.head_count", c.n_head);
  kv->emplace_back(a + "attention.head_count_kv", GgufValue::array_i32(std::move(kv_heads)));
  if (!granite || c.head_dim * c.n_head != c.hidden_size) {
    u32("attention.key_length", c.head_dim);
    u32("attention.value_length", c.head_dim);
  }
  f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  // llama.cpp's nemotron_h loader requires this key (its converter writes the config's
  // layer_norm_epsilon to both); without it llama.cpp refuses the file.
  if (!granite) f32("attention.layer_norm_epsilon", c.rms_norm_eps);
  if (granite) {
    if (c.attn_scale > 0) f32("attention.scale", c.attn_scale);
    f32("embedding_scale", c.embedding_multiplier);
    f32("residual_scale", c.residual_multiplier);
    f32("logit_scale", c.logits_scaling);
  }
  kv->emplace_back(a + "rope.scaling.finetuned", GgufValue::boolean(false));
  u32("ssm.conv_kernel", c.conv_kernel);
  u32("ssm.inner_size", c.ssm_d_inner());
  u32("ssm.state_size", c.ssm_d_state);
  u32("ssm.time_step_rank", c.ssm_n_head);
  u32("ssm.group_count", c.ssm_n_group);
  if (granite && c.n_expert > 0) {
    u32("expert_count", c.n_expert);
    u32("expert_used_count", c.n_expert_used);
  }
  if (granite)
    u32("expert_shared_feed_forward_length",
        c.n_expert > 0 ? c.shared_expert_intermediate_size : c.intermediate_size);
  if (!granite && c.n_expert > 0) {  // nemotron_h_moe
    u32("expert_count", c.n_expert);
    u32("expert_used_count", c.n_expert_used);
    u32("expert_feed_forward_length", c.moe_intermediate_size);
    u32("expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
    u32("expert_shared_count", 1);
    kv->emplace_back(a + "expert_weights_norm", GgufValue::boolean(c.norm_topk_prob));
    f32("expert_weights_scale", c.moe_routed_scale);
    u32("expert_group_count", c.moe_n_group);
    u32("expert_group_used_count", c.moe_topk_group);
    u32("expert_gating_func", 2);  // sigmoid
  }
}

}  // namespace

Status write_gguf_model(
    const std::string& path, const ModelConfig& c, const WeightSet& ws, const GgufVocab& vocab,
    DType matrix_type, const std::string& name,
    const std::function<DType(const std::string&)>& type_for, int64_t file_type,
    const std::function<void(size_t, size_t)>& progress,
    const std::function<void(const std::vector<const WeightSource*>&)>& prepare) {
  const bool mamba2 = c.family == Family::GraniteHybrid || c.family == Family::NemotronH;
  if (c.family == Family::GraniteHybrid && c.ssm_norm_groups != c.ssm_n_group)
    return make_error(path + ": this Granite-4.0-H model normalises its Mamba2 output over " +
                      std::to_string(c.ssm_norm_groups) + " group(s) but has " +
                      std::to_string(c.ssm_n_group) +
                      " SSM groups; llama.cpp's granitehybrid groups the norm by ssm.group_count, "
                      "so the file would change the model");
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dv = c.lin_dv;
  const int64_t r = Hk > 0 ? Hv / Hk : 0, K = c.conv_kernel, KD = c.key_dim(), VD = c.value_dim(),
                CD = c.conv_dim();
  const int64_t D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  const VHeads vh = vheads(c);
  const std::string arch = gguf_arch_name(c);
  if (static_cast<int64_t>(vocab.tokens.size()) > V)
    return make_error(path + ": the tokenizer has " + std::to_string(vocab.tokens.size()) +
                      " tokens, more than vocab_size " + std::to_string(V));

  std::vector<Out> outs;
  // Rows [r0, r0 + n) of canonical weight `w`, mapped by `src` (file row -> weight row).
  auto mat = [&](const std::string& gname, const std::string& w, int64_t rows, int64_t cols,
                 std::function<int64_t(int64_t)> src, std::vector<int64_t> ne = {}) {
    const WeightSource* s = &ws.get(w);
    Out o;
    o.name = gname;
    o.rows = rows;
    o.cols = cols;
    o.ne = ne.empty() ? std::vector<int64_t>{cols, rows} : ne;
    o.row = [s, src](int64_t i, float* out) { s->row_f32(src(i), out); };
    o.src = {s};
    outs.push_back(std::move(o));
  };
  auto vec = [&](const std::string& gname, const std::string& w, int64_t n,
                 std::function<int64_t(int64_t)> src) {
    const WeightSource* s = &ws.get(w);
    Out o;
    o.name = gname;
    o.rows = 1;
    o.cols = n;
    o.ne = {n};
    o.matrix = false;
    o.row = [s, src, n](int64_t, float* out) {
      std::vector<float> all(static_cast<size_t>(s->rows() * s->cols));
      for (int64_t i = 0; i < s->rows(); ++i) s->row_f32(i, all.data() + i * s->cols);
      for (int64_t i = 0; i < n; ++i) out[i] = all[src(i)];
    };
    o.src = {s};
    outs.push_back(std::move(o));
  };
  auto id = [](int64_t i) { return i; };
  // A MoE router [E, H] of layer prefix p / cp: F32 in every file, as llama-quantize leaves
  // ffn_gate_inp (quantising it moves experts across the top-k on small score changes).
  auto router = [&](const std::string& p, const std::string& cp, int64_t E, int64_t H) {
    mat(p + "ffn_gate_inp.weight", cp + "router", E, H, id);
    outs.back().matrix = false;
  };
  auto plus = [](int64_t base) { return [base](int64_t i) { return base + i; }; };

  mat("token_embd.weight", "embed", V, H, id);
  vec("output_norm.weight", "final_norm", H, id);
  if (!c.tie_word_embeddings) mat("output.weight", "lm_head", V, H, id);
  // File head position t holds the model's head vh.head_at(t).
  auto vrow = [&](int64_t base, int64_t per_head) {
    return [base, per_head, vh](int64_t i) {
      return base + vh.head_at(i / per_head) * per_head + i % per_head;
    };
  };
  // One decoder layer: a main layer, or an MTP block (full attention, the MTP layer's FFN).
  auto write_layer = [&](int64_t il, LayerKind kind, bool moe) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    vec(p + "attn_norm.weight", cp + "in_norm", H, id);
    vec(p + "post_attention_norm.weight", cp + "post_norm", H, id);
    if (kind == LayerKind::GatedDeltaNet) {
      const std::string in = cp + "in_proj";  // rows [q; k; v (VD) ; z (VD) ; b (Hv) ; a (Hv)]
      mat(p + "attn_qkv.weight", in, CD, H,
          [=](int64_t i) { return i < 2 * KD ? i : vrow(2 * KD, dv)(i - 2 * KD); });
      mat(p + "attn_gate.weight", in, VD, H, vrow(CD, dv));
      if (c.family == Family::Qwen3Next) {
        // Per key-head group [b (r) | a (r)].
        mat(p + "ssm_ba.weight", in, 2 * Hv, H, [=](int64_t i) {
          const int64_t gi = i / (2 * r), j = i % (2 * r);
          return CD + VD + (j < r ? 0 : Hv) + gi * r + j % r;
        });
      } else {
        mat(p + "ssm_beta.weight", in, Hv, H, vrow(CD + VD, 1));
        mat(p + "ssm_alpha.weight", in, Hv, H, vrow(CD + VD + Hv, 1));
      }
      {
        const WeightSource* s = &ws.get(cp + "conv");  // [CD, K]
        Out o;
        o.name = p + "ssm_conv1d.weight";
        o.rows = CD;
        o.cols = K;
        o.ne = {K, CD};
        o.matrix = false;
        o.row = [s, KD, dv, vh](int64_t ch, float* out) {
          s->row_f32(
              ch < 2 * KD ? ch : 2 * KD + vh.head_at((ch - 2 * KD) / dv) * dv + (ch - 2 * KD) % dv,
              out);
        };
        o.src = {s};
        outs.push_back(std::move(o));
      }
      vec(p + "ssm_a", cp + "A", Hv, [vh](int64_t t) { return vh.head_at(t); });
      vec(p + "ssm_dt.bias", cp + "dt_bias", Hv, [vh](int64_t t) { return vh.head_at(t); });
      vec(p + "ssm_norm.weight", cp + "gnorm", dv, id);
      {
        const WeightSource* s =
            &ws.get(cp + "out_proj");  // [H, VD], columns permuted to file order
        Out o;
        o.name = p + "ssm_out.weight";
        o.rows = H;
        o.cols = VD;
        o.ne = {VD, H};
        o.row = [s, VD, dv, vh](int64_t i, float* out) {
          std::vector<float> tmp(static_cast<size_t>(VD));
          s->row_f32(i, tmp.data());
          for (int64_t j = 0; j < VD; ++j) out[j] = tmp[vh.head_at(j / dv) * dv + j % dv];
        };
        o.src = {s};
        outs.push_back(std::move(o));
      }
    } else {
      const std::string q = cp + "qkv";
      mat(p + "attn_q.weight", q, nh * 2 * D, H, id);
      mat(p + "attn_k.weight", q, nkv * D, H, plus(nh * 2 * D));
      mat(p + "attn_v.weight", q, nkv * D, H, plus(nh * 2 * D + nkv * D));
      vec(p + "attn_q_norm.weight", cp + "q_norm", D, id);
      vec(p + "attn_k_norm.weight", cp + "k_norm", D, id);
      mat(p + "attn_output.weight", cp + "o_proj", H, nh * D, id);
    }
    if (!moe) {
      const int64_t I = c.intermediate_size;
      mat(p + "ffn_gate.weight", cp + "gate_up", I, H, id);
      mat(p + "ffn_up.weight", cp + "gate_up", I, H, plus(I));
      mat(p + "ffn_down.weight", cp + "down", H, I, id);
    } else {
      const int64_t E = c.n_expert, Im = c.moe_intermediate_size,
                    Is = c.shared_expert_intermediate_size;
      router(p, cp, E, H);
      // 3-D experts: file row i = expert i / n, row i % n of that expert.
      auto experts = [&](const std::string& gname, const std::string& part, int64_t n, int64_t cols,
                         int64_t r0) {
        outs.push_back(stacked_experts(ws, gname, cp, part, E, n, cols, r0));
      };
      experts(p + "ffn_gate_exps.weight", "gate_up", Im, H, 0);
      experts(p + "ffn_up_exps.weight", "gate_up", Im, H, Im);
      experts(p + "ffn_down_exps.weight", "down", H, Im, 0);
      vec(p + "ffn_gate_inp_shexp.weight", cp + "sh.gate", H, id);
      mat(p + "ffn_gate_shexp.weight", cp + "sh.gate_up", Is, H, id);
      mat(p + "ffn_up_shexp.weight", cp + "sh.gate_up", Is, H, plus(Is));
      mat(p + "ffn_down_shexp.weight", cp + "sh.down", H, Is, id);
    }
  };
  // The Mamba2 hybrids' blocks (llama.cpp's granitehybrid / nemotron_h names; docs/MAMBA2.md).
  auto write_mamba2_layer = [&](int64_t il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::string cp = layer_prefix(il);
    const LayerKind kind = c.layer_kinds[il];
    const int64_t Hs = c.ssm_n_head, DI = c.ssm_d_inner(), G = c.ssm_n_group;
    if (c.family == Family::GraniteHybrid) {
      vec(p + "attn_norm.weight", cp + "in_norm", H, id);
      vec(p + "ffn_norm.weight", cp + "post_norm", H, id);
    } else {  // Nemotron-H: one norm per block, before its mixer or its MLP
      vec(p + "attn_norm.weight", cp + (kind == LayerKind::None ? "post_norm" : "in_norm"), H, id);
    }
    if (kind == LayerKind::Mamba2) {
      mat(p + "ssm_in.weight", cp + "in_proj", 2 * DI + 2 * G * c.ssm_d_state + Hs, H, id);
      mat(p + "ssm_conv1d.weight", cp + "conv", CD, K, id);
      outs.back().matrix = false;
      if (c.ssm_conv_bias) vec(p + "ssm_conv1d.bias", cp + "conv_bias", CD, id);
      vec(p + "ssm_a", cp + "A", Hs, id);  // canonical A is already -exp(A_log)
      outs.back().ne = {1, Hs};
      vec(p + "ssm_d", cp + "D", Hs, id);
      outs.back().ne = {1, Hs};
      vec(p + "ssm_dt.bias", cp + "dt_bias", Hs, id);
      vec(p + "ssm_norm.weight", cp + "gnorm", DI, id);  // [d_inner] viewed per group
      outs.back().ne = {DI / G, G};
      mat(p + "ssm_out.weight", cp + "out_proj", H, DI, id);
    } else if (kind == LayerKind::Attention) {
      const std::string q = cp + "qkv";  // rows [q ; k ; v]
      mat(p + "attn_q.weight", q, nh * D, H, id);
      mat(p + "attn_k.weight", q, nkv * D, H, plus(nh * D));
      mat(p + "attn_v.weight", q, nkv * D, H, plus(nh * D + nkv * D));
      mat(p + "attn_output.weight", cp + "o_proj", H, nh * D, id);
    }
    const FfnKind ffn = c.ffn_kinds[il];
    if (ffn == FfnKind::ReluSq) {
      const int64_t F = c.intermediate_size;
      mat(p + "ffn_up.weight", cp + "up", F, H, id);
      mat(p + "ffn_down.weight", cp + "down", H, F, id);
    } else if (ffn == FfnKind::Moe && c.moe_relu2) {  // Nemotron-H MoE (nemotron_h_moe)
      const int64_t E = c.n_expert, Im = c.moe_intermediate_size,
                    Is = c.shared_expert_intermediate_size;
      router(p, cp, E, H);
      vec(p + "exp_probs_b.bias", cp + "router_bias", E, id);
      auto experts = [&](const std::string& gname, const std::string& part, int64_t n,
                         int64_t cols) {
        outs.push_back(stacked_experts(ws, gname, cp, part, E, n, cols, 0));
      };
      experts(p + "ffn_up_exps.weight", "up", Im, H);
      experts(p + "ffn_down_exps.weight", "down", H, Im);
      mat(p + "ffn_up_shexp.weight", cp + "sh.up", Is, H, id);
      mat(p + "ffn_down_shexp.weight", cp + "sh.down", H, Is, id);
    } else if (ffn == FfnKind::SwiGLU || ffn == FfnKind::Moe) {
      const bool moe = ffn == FfnKind::Moe;
      // The shared MLP: ffn_{gate,up,down} when dense, the _shexp tensors beside the experts.
      const int64_t F = moe ? c.shared_expert_intermediate_size : c.intermediate_size;
      const std::string sfx = moe ? "_shexp" : "", src = moe ? cp + "sh." : cp;
      mat(p + "ffn_gate" + sfx + ".weight", src + "gate_up", F, H, id);
      mat(p + "ffn_up" + sfx + ".weight", src + "gate_up", F, H, plus(F));
      mat(p + "ffn_down" + sfx + ".weight", src + "down", H, F, id);
      if (moe) {
        const int64_t E = c.n_expert, Im = c.moe_intermediate_size;
        router(p, cp, E, H);
        outs.push_back(stacked_experts(ws, p + "ffn_gate_exps.weight", cp, "gate_up", E, Im, H, 0));
        outs.push_back(stacked_experts(ws, p + "ffn_up_exps.weight", cp, "gate_up", E, Im, H, Im));
        outs.push_back(stacked_experts(ws, p + "ffn_down_exps.weight", cp, "down", E, H, Im, 0));
      }
    }
  };
  if (mamba2) {
    for (int64_t il = 0; il < c.n_layer; ++il) write_mamba2_layer(il);
  } else {
    for (int64_t il = 0; il < c.n_layer; ++il)
      write_layer(il, c.layer_kinds[il], c.layer_is_moe(il));
  }
  // MTP blocks blk.{n_layer + j} (llama.cpp's nextn layout; model/gguf_model.h). The head's own
  // tensors go into every MTP block, as llama.cpp's converter writes them.
  const int64_t n_mtp = gguf_mtp_blocks(c, ws);
  for (int64_t j = 0; j < n_mtp; ++j) {
    const int64_t il = c.n_layer + j;
    write_layer(il, LayerKind::Attention, c.mtp_layer_is_moe());
    const std::string p = "blk." + std::to_string(il) + ".nextn.";
    mat(p + "eh_proj.weight", "mtp.fc", H, 2 * H, id);
    vec(p + "enorm.weight", "mtp.enorm", H, id);
    vec(p + "hnorm.weight", "mtp.hnorm", H, id);
    vec(p + "shared_head_norm.weight", "mtp.norm", H, id);
  }

  // Metadata, in gguf-py's order: general.*, architecture keys, tokenizer.
  std::vector<std::pair<std::string, GgufValue>> kv;
  auto u32 = [&](const std::string& k, int64_t v) {
    kv.emplace_back(k, GgufValue::u32(static_cast<uint32_t>(v)));
  };
  kv.emplace_back("general.architecture", GgufValue::string(arch));
  kv.emplace_back("general.name", GgufValue::string(name));
  // llama.cpp's general.file_type: F16 1, BF16 32, a quantised format's from kQuantTraits.
  const int64_t ftype = matrix_type == DType::F16     ? 1
                        : matrix_type == DType::BF16  ? 32
                        : dtype_is_quant(matrix_type) ? quant_traits(matrix_type).llama_file_type
                                                      : 0;
  u32("general.file_type", file_type >= 0 ? file_type : ftype);
  if (dtype_is_quant(matrix_type)) u32("general.quantization_version", 2);
  const std::string a = arch + ".";
  if (mamba2) {
    write_mamba2_keys(c, &kv);
  } else {
    u32(a + "context_length", c.max_position_embeddings);
    u32(a + "embedding_length", H);
    u32(a + "block_count", c.n_layer + n_mtp);
    if (c.intermediate_size > 0) u32(a + "feed_forward_length", c.intermediate_size);
    u32(a + "attention.head_count", nh);
    u32(a + "attention.head_count_kv", nkv);
    u32(a + "attention.key_length", D);
    u32(a + "attention.value_length", D);
    kv.emplace_back(a + "attention.layer_norm_rms_epsilon",
                    GgufValue::f32(static_cast<float>(c.rms_norm_eps)));
    kv.emplace_back(a + "rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta)));
    u32(a + "rope.dimension_count", c.rope_dim);
    if (c.family != Family::Qwen3Next) {
      const int64_t n = c.rope_dim / 2;  // text positions: the split does not change the result
      kv.emplace_back(a + "rope.dimension_sections",
                      GgufValue::array_i32({n / 3 + (n % 3 > 0), n / 3 + (n % 3 > 1), n / 3, 0}));
    }
    u32(a + "ssm.conv_kernel", K);
    u32(a + "ssm.state_size", c.lin_dk);
    u32(a + "ssm.group_count", Hk);
    u32(a + "ssm.time_step_rank", Hv);
    u32(a + "ssm.inner_size", VD);
    {
      int64_t interval = 0;  // the interval that reproduces layer_kinds, if any
      for (int64_t n = 1; n <= c.n_layer && !interval; ++n) {
        bool ok = true;
        for (int64_t il = 0; il < c.n_layer; ++il)
          ok = ok && (c.layer_kinds[il] == LayerKind::Attention) == ((il + 1) % n == 0);
        if (ok) interval = n;
      }
      if (interval > 0) {
        u32(a + "full_attention_interval", interval);
      } else {
        std::vector<int64_t> flags;
        for (auto k : c.layer_kinds) flags.push_back(k == LayerKind::GatedDeltaNet);
        flags.resize(static_cast<size_t>(c.n_layer + n_mtp), 0);  // MTP blocks: attention
        kv.emplace_back(a + "attention.recurrent_layers", GgufValue::array_bool(std::move(flags)));
      }
    }
    if (n_mtp > 0) u32(a + "nextn_predict_layers", n_mtp);
    if (c.n_expert > 0) {
      u32(a + "expert_count", c.n_expert);
      u32(a + "expert_used_count", c.n_expert_used);
      u32(a + "expert_feed_forward_length", c.moe_intermediate_size);
      u32(a + "expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
    }
  }
  std::vector<std::string> tokens = vocab.tokens;
  std::vector<int64_t> types = vocab.token_type;
  types.resize(tokens.size(), 1);
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < V;
       ++i) {  // padding rows, as the HF converter
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.push_back(5);  // UNUSED
  }
  kv.emplace_back("tokenizer.ggml.model", GgufValue::string("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", GgufValue::string(vocab.pre));
  kv.emplace_back("tokenizer.ggml.tokens", GgufValue::array_string(std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", GgufValue::array_i32(std::move(types)));
  kv.emplace_back("tokenizer.ggml.merges", GgufValue::array_string(vocab.merges));
  if (vocab.eos_id >= 0) u32("tokenizer.ggml.eos_token_id", vocab.eos_id);
  if (vocab.pad_id >= 0) u32("tokenizer.ggml.padding_token_id", vocab.pad_id);
  if (vocab.bos_id >= 0) u32("tokenizer.ggml.bos_token_id", vocab.bos_id);
  kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(vocab.add_bos));
  if (vocab.add_eos) kv.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(true));
  if (!vocab.chat_template.empty())
    kv.emplace_back("tokenizer.chat_template", GgufValue::string(vocab.chat_template));

  // Rows are converted and quantised on every core (each row's bytes depend on that row alone;
  // IQ4_NL / IQ4_XS's scale search takes 83 s for the 0.8b shape on one core).
  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  size_t total = 0, done = 0;
  for (auto& o : outs) total += static_cast<size_t>(o.rows * o.cols);
  if (progress) progress(0, total);
  std::vector<GgufTensorToWrite> tw;
  for (auto& o : outs) {
    const DType t =
        o.matrix ? gguf_matrix_type(type_for ? type_for(o.name) : matrix_type, o.cols) : DType::F32;
    GgufTensorToWrite w;
    w.name = o.name;
    w.type = ggml_from_dtype(t);
    w.ne = o.ne;
    const Out* op = &o;
    w.fill = [op, t, &pool, &progress, &prepare, &done, total](std::byte* dst,
                                                               size_t nbytes) -> Status {
      const size_t rb = dtype_row_bytes(t, op->cols);
      REWIND_CHECK(rb * static_cast<size_t>(op->rows) == nbytes);
      if (prepare) prepare(op->src);
      pool.parallel_guided(op->rows, 1, 8, [&](int, int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(op->cols));
        for (int64_t i = r0; i < r1; ++i) {
          op->row(i, row.data());
          quantize_row(row.data(), t, op->cols, dst + static_cast<size_t>(i) * rb);
        }
      });
      done += static_cast<size_t>(op->rows * op->cols);
      if (progress) progress(done, total);
      return Ok{};
    };
    tw.push_back(std::move(w));
  }
  return write_gguf(path, kv, tw);
}

}  // namespace rw
