// The text-model configuration of a Qwen3.5 / Qwen3.5-MoE / Qwen3-Next checkpoint, parsed from
// Hugging Face config.json (flat `qwen3_next` / `qwen3_5_text` / `qwen3_5_moe_text`, or nested
// `text_config` under `qwen3_5` / `qwen3_5_moe`). Field meanings: docs/QWEN35.md section 1.2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

enum class Family { Qwen35, Qwen35Moe, Qwen3Next };
enum class LayerKind { Linear, Full };  // Gated DeltaNet / gated full attention

const char* family_name(Family f);  // "qwen3_5", "qwen3_5_moe", "qwen3_next"

struct ModelConfig {
  Family family = Family::Qwen35;
  std::string model_type;        // as written in the file (outer model_type)
  bool multimodal_prefix = false;  // weights under `model.language_model.` (else `model.`)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;         // H
  int64_t n_layer = 0;             // num_hidden_layers (MTP layers not included)
  std::vector<LayerKind> layer_kinds;  // size n_layer

  // Full attention.
  int64_t n_head = 0;       // num_attention_heads
  int64_t n_head_kv = 0;    // num_key_value_heads
  int64_t head_dim = 0;     // D
  int64_t rope_dim = 0;     // R = int(D * partial_rotary_factor), even
  double rope_theta = 10000.0;

  // Gated DeltaNet.
  int64_t lin_n_head_k = 0;  // Hk
  int64_t lin_n_head_v = 0;  // Hv (multiple of Hk)
  int64_t lin_dk = 0;
  int64_t lin_dv = 0;
  int64_t conv_kernel = 0;   // K

  // FFN.
  int64_t intermediate_size = 0;       // dense SwiGLU width
  int64_t n_expert = 0;                // 0 = dense model
  int64_t n_expert_used = 0;           // top-k
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;          // qwen3_5_moe: always true
  int64_t decoder_sparse_step = 1;     // qwen3_next
  std::vector<int64_t> mlp_only_layers;

  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;   // text_config value if present, else top level, else false
  int64_t max_position_embeddings = 0;
  int64_t mtp_num_hidden_layers = 0;

  // Token ids from config.json when present (-1 = absent). eos may be a list.
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Derived.
  int64_t key_dim() const { return lin_n_head_k * lin_dk; }
  int64_t value_dim() const { return lin_n_head_v * lin_dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  bool layer_is_moe(int64_t il) const;  // per family rules (docs/QWEN35.md 1.2)
  // The MTP decoder layer's FFN is MoE in the MoE families (as their main layers), dense in
  // qwen3_5.
  bool mtp_layer_is_moe() const { return family != Family::Qwen35 && n_expert > 0; }
  int64_t n_full_layers() const;
  int64_t n_linear_layers() const;
};

// Parses config.json text. `where` names the file in error messages. Every missing or
// ill-typed required field, unknown model_type, or inconsistent size is an Error naming it
// (`<where>: field 'text_config.hidden_size' must be an integer (got string "64")`).
// Which fields are required and which take HF defaults: the comment at the top of config.cpp.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& where);
Result<ModelConfig> load_model_config(const std::string& config_json_path);

}  // namespace rw
