// The text-model configuration of a hybrid checkpoint, whatever its family: which token mixer
// and which FFN each layer has, and the sizes of each kind. Each family's file under
// model/arch_*.cpp fills it from a Hugging Face config.json or GGUF metadata (model/arch.h).
// Field meanings: docs/QWEN35.md section 1.2 (Qwen3.5 families), docs/MAMBA2.md (Granite-4.0-H,
// Nemotron-H).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

enum class Family { Qwen35, Qwen35Moe, Qwen3Next, GraniteHybrid, NemotronH };
// A layer's token mixer. Recurrent kinds (GatedDeltaNet, Mamba2) keep a conv window and an SSM
// state per sequence; a model has one recurrent kind at most.
enum class LayerKind { GatedDeltaNet, Attention, Mamba2, None };
// A layer's feed-forward block: SwiGLU (down(silu(gate) * up)), squared ReLU
// (down(relu(up)^2)), or routed experts plus a shared expert.
enum class FfnKind { None, SwiGLU, ReluSq, Moe };

// "qwen3_5", "qwen3_5_moe", "qwen3_next", "granitemoehybrid", "nemotron_h".
const char* family_name(Family f);
const char* layer_kind_name(LayerKind k);  // "gated_delta_net", "attention", "mamba2", "none"

struct ModelConfig {
  Family family = Family::Qwen35;
  std::string model_type;          // as written in the file (outer model_type)
  bool multimodal_prefix = false;  // weights under `model.language_model.` (else `model.`)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;             // H
  int64_t n_layer = 0;                 // num_hidden_layers (MTP layers not included)
  std::vector<LayerKind> layer_kinds;  // size n_layer

  std::vector<FfnKind> ffn_kinds;  // size n_layer

  // Attention.
  int64_t n_head = 0;     // num_attention_heads
  int64_t n_head_kv = 0;  // num_key_value_heads
  int64_t head_dim = 0;   // D
  int64_t rope_dim = 0;   // R = int(D * partial_rotary_factor), even; 0: no positional encoding
  double rope_theta = 10000.0;
  bool attn_output_gate = true;  // Qwen: q_proj carries a per-head sigmoid gate
  bool attn_qk_norm = true;      // Qwen: RMSNorm of q and k per head
  double attn_scale = 0.0;       // softmax scale; 0: 1/sqrt(D)

  // Scalars of the residual stream (Granite): h0 = embed * embedding_multiplier,
  // x += residual_multiplier * sublayer(x), logits = lm_head(h) / logits_scaling.
  double embedding_multiplier = 1.0;
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;

  // Gated DeltaNet.
  int64_t lin_n_head_k = 0;  // Hk
  int64_t lin_n_head_v = 0;  // Hv (multiple of Hk)
  int64_t lin_dk = 0;
  int64_t lin_dv = 0;
  int64_t conv_kernel = 0;  // K (both recurrent kinds)

  // Mamba2 (docs/MAMBA2.md): d_inner = ssm_n_head * ssm_head_dim.
  int64_t ssm_n_head = 0;       // H
  int64_t ssm_head_dim = 0;     // P
  int64_t ssm_n_group = 0;      // G (B and C groups)
  int64_t ssm_d_state = 0;      // N
  int64_t ssm_norm_groups = 1;  // groups of the gated RMSNorm (Granite HF: 1; Nemotron-H: G)
  bool ssm_conv_bias = true;

  // FFN.
  int64_t intermediate_size = 0;  // dense SwiGLU width
  int64_t n_expert = 0;           // 0 = dense model
  int64_t n_expert_used = 0;      // top-k
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool shared_expert_gate = true;  // Qwen: sigmoid(x . w) scales the shared expert
  bool norm_topk_prob = true;      // qwen3_5_moe: always true
  // Nemotron-H MoE (docs/MAMBA2.md 3.1): squared-ReLU experts and shared expert (canonical `up`
  // / `down`) instead of SwiGLU; a sigmoid router whose choice adds `router_bias` and keeps the
  // moe_topk_group best of moe_n_group expert groups (group score: its top-2 choices' sum), with
  // the chosen experts' unbiased scores as weights (normalised by norm_topk_prob), times
  // moe_routed_scale. Otherwise: softmax router, top-k over all experts.
  bool moe_relu2 = false;
  bool moe_sigmoid_router = false;
  int64_t moe_n_group = 1;
  int64_t moe_topk_group = 1;
  double moe_routed_scale = 1.0;
  int64_t decoder_sparse_step = 1;  // qwen3_next
  std::vector<int64_t> mlp_only_layers;

  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;  // text_config value if present, else top level, else false
  int64_t max_position_embeddings = 0;
  int64_t mtp_num_hidden_layers = 0;

  // Token ids from config.json when present (-1 = absent). eos may be a list.
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Derived.
  int64_t key_dim() const { return lin_n_head_k * lin_dk; }
  int64_t value_dim() const { return lin_n_head_v * lin_dv; }
  int64_t ssm_d_inner() const { return ssm_n_head * ssm_head_dim; }
  // Channels of the recurrent kind's conv: GDN q, k, v; Mamba2 x, B, C.
  int64_t conv_dim() const {
    return has_mamba2() ? ssm_d_inner() + 2 * ssm_n_group * ssm_d_state
                        : 2 * key_dim() + value_dim();
  }
  // Floats of one recurrent layer's SSM state: GDN [Hv, dk, dv]; Mamba2 [H, P, N].
  int64_t ssm_floats() const {
    return has_mamba2() ? ssm_n_head * ssm_head_dim * ssm_d_state : lin_n_head_v * lin_dk * lin_dv;
  }
  bool has_mamba2() const;
  bool layer_is_moe(int64_t il) const { return ffn_kinds[il] == FfnKind::Moe; }
  // The MTP decoder layer's FFN is MoE in the MoE families (as their main layers), dense in
  // qwen3_5.
  bool mtp_layer_is_moe() const { return family != Family::Qwen35 && n_expert > 0; }
  int64_t n_attention_layers() const;
  int64_t n_recurrent_layers() const;  // GatedDeltaNet and Mamba2 layers
};

// Parses config.json text: reads model_type and hands the rest to its family's parser
// (model/arch.h). `where` names the file in error messages. Every missing or
// ill-typed required field, unknown model_type, or inconsistent size is an Error naming it
// (`<where>: field 'text_config.hidden_size' must be an integer (got string "64")`).
// Which fields are required and which take HF defaults: the comment at the top of config.cpp.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& where);
Result<ModelConfig> load_model_config(const std::string& config_json_path);

}  // namespace rw
