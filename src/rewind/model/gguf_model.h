// llama.cpp's GGUF layout of the qwen35 / qwen35moe / qwen3next architectures: the model
// configuration from GGUF metadata, the tensor-name map to rewind's canonical weights
// (WeightSet::from_gguf, in gguf_model.cpp), and the writer that turns canonical weights back
// into a GGUF file llama.cpp loads (names, keys, conventions, tokenizer keys). The writer also
// writes the Mamba2 hybrids (granitehybrid, nemotron_h; read by model/arch_granite.cpp and
// model/arch_nemotron_h.cpp), whose layout is in docs/MAMBA2.md section 5.
//
// Conventions that differ from the HF layout (all handled here, nowhere else):
//   * ne[0] is the contiguous axis, so a 2-D {in, out} tensor is HF's [out, in] row-major.
//   * Zero-centred norms hold w + 1 (ssm_norm does not); ssm_a holds -exp(A_log). These are
//     exactly rewind's canonical values, so they pass through unchanged.
//   * qwen35 / qwen35moe files store the GDN value heads in "tiled" order when Hk != Hv (value
//     head t reads key head t % Hk); rewind's canonical order is HF's "grouped" order (value
//     head h reads key head h / (Hv/Hk)). qwen3next files keep the grouped order.
//   * qwen3next stores beta/alpha fused as ssm_ba (per key-head group [beta(r) | alpha(r)]).
//   * MTP head (llama.cpp's nextn layout): block_count = n_layer + nextn_predict_layers, and
//     block n_layer + j is MTP layer j: a full-attention layer under the usual names plus
//     blk.N.nextn.eh_proj {2H, H} (HF mtp.fc as is: input [normed embedding ; normed hidden]),
//     nextn.enorm, nextn.hnorm, nextn.shared_head_norm {H} (HF mtp.pre_fc_norm_embedding,
//     pre_fc_norm_hidden, norm; +1 folded). from_gguf maps them to the canonical mtp.* names
//     (model/weight_source.h); recurrent_layers, when written, is false for MTP blocks.
//     qwen3next files have no MTP block (llama.cpp's qwen3next neither converts nor loads one).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/io/gguf.h"
#include "rewind/model/config.h"
#include "rewind/model/weight_source.h"

namespace rw {

// "qwen35", "qwen35moe", "qwen3next".
const char* gguf_arch_name(Family f);
// The architecture a model is written as: gguf_arch_name(family), or "nemotron_h_moe" for a
// Nemotron-H model with MoE blocks.
const char* gguf_arch_name(const ModelConfig& c);

// Configuration from the metadata (`<arch>.*` keys, token_embd's shape for the vocab, the
// presence of output.weight for tied embeddings). Errors name the file and key.
Result<ModelConfig> config_from_gguf(const GgufFile& file);

// Tokenizer parts for the writer (tokenizer.ggml.*): BPE "gpt2" model.
struct GgufVocab {
  std::vector<std::string> tokens;  // byte-level vocab texts, id order
  std::vector<int64_t> token_type;  // 1 normal, 3 control (special), 4 user-defined
  std::vector<std::string> merges;  // "a b", rank order
  std::string pre = "qwen35";       // tokenizer.ggml.pre
  std::string chat_template;        // empty: not written
  int64_t eos_id = -1, pad_id = -1, bos_id = -1;
  bool add_bos = false, add_eos = false;  // a completion prompt's BOS first / EOS last
};

// MTP blocks write_gguf_model writes: cfg.mtp_num_hidden_layers when ws has the MTP head; 0
// without one, or for qwen3next (see above).
int64_t gguf_mtp_blocks(const ModelConfig& cfg, const WeightSet& ws);

// Writes `ws` (canonical weights of `cfg`) as a GGUF file in llama.cpp's layout, with the MTP
// head as gguf_mtp_blocks(cfg, ws) nextn blocks. Matrices are stored as `matrix_type` (F32, F16,
// BF16, Q8_0, Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q3_K, IQ4_XS, Q2_K);
// a matrix whose row
// length is not a multiple of that type's block falls back as llama-quantize does
// (gguf_matrix_type). 1-D tensors, norms, ssm_conv1d, ssm_a and ssm_dt.bias are F32.
// Streams one tensor at a time. `name` goes to general.name.
// `type_for` (optional) picks a matrix's type by tensor name instead (the fallback still
// applies); `file_type` overrides general.file_type (llama.cpp's LLAMA_FTYPE number).
// `progress` (optional) gets (values written, values in all) before the first tensor and after
// each one. `prepare` (optional) is called before each tensor's values are read, with the
// canonical weights it reads (make-model generates weights there, one tensor at a time).
Status write_gguf_model(
    const std::string& path, const ModelConfig& cfg, const WeightSet& ws, const GgufVocab& vocab,
    DType matrix_type, const std::string& name,
    const std::function<DType(const std::string&)>& type_for = nullptr, int64_t file_type = -1,
    const std::function<void(size_t, size_t)>& progress = nullptr,
    const std::function<void(const std::vector<const WeightSource*>&)>& prepare = nullptr);

// The GGUF tensor type of a rewind dtype (F32 for the types GGUF files do not hold).
GgmlType ggml_from_dtype(DType t);

// llama-quantize's Q4_K_M (base Q4_K) or Q5_K_M (base Q5_K) mixture for `cfg` written with
// `n_mtp` MTP blocks: Q6_K for output.weight (token_embd.weight when the embeddings are tied
// and there is no output.weight) and, in the blocks its use_more_bits rule picks (the
// first and last eighth and every third between, over all block_count blocks, MTP blocks last),
// for the attn_v-like tensors (attn_v; attn_qkv, the linear-attention layers' fused q/k/v; and
// ssm_in, the Mamba2 input projection)
// and ffn_down*; the base type for every other matrix (nextn.eh_proj included). Checked against
// the types llama-quantize itself chose for the same files (tests/data/llama-cpp).
std::function<DType(const std::string&)> gguf_k_m_rule(const ModelConfig& cfg, int64_t n_mtp = 0,
                                                       DType base = DType::Q4_K);

// The type a matrix of row length ne0 gets when `want` is asked for: `want` when ne0 is a
// multiple of its block, else llama-quantize's fallback (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K ->
// Q8_0, Q2_K and Q3_K -> Q4_0, IQ4_XS -> IQ4_NL) when ne0 is a multiple of 32, else F16.
DType gguf_matrix_type(DType want, int64_t ne0);

}  // namespace rw
