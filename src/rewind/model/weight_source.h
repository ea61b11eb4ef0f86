// Logical weights of a model after the load-time transforms of docs/QWEN35.md 2.4, before any
// packing: each is a list of row blocks (views into the mmap'd file, or small owned f32 buffers
// where a transform made new values) under a canonical name. Both the fast model (which packs
// them) and the naive reference model (which reads them in double) consume this, so the name
// mapping and the transforms exist once.
//
// Canonical names (il = layer index, e = expert):
//   embed [V,H]; lm_head [V,H] (the same rows as embed when tied); final_norm [H] (+1 folded)
//   l{il}.in_norm, l{il}.post_norm [H] (+1 folded)
//   linear:  l{il}.in_proj [conv_dim + value_dim + 2*Hv, H] = rows [q;k;v ; z ; b ; a]
//            l{il}.conv [conv_dim, K]; l{il}.A [Hv] = -exp(A_log); l{il}.dt_bias [Hv];
//            l{il}.gnorm [dv] (no +1); l{il}.out_proj [H, value_dim]
//   full:    l{il}.qkv [nh*2D + 2*nkv*D, H] = rows [q_proj (per-head q|gate) ; k_proj ; v_proj]
//            l{il}.q_norm, l{il}.k_norm [D] (+1 folded); l{il}.o_proj [H, nh*D]
//   attention without the output gate (ModelConfig::attn_output_gate false):
//            l{il}.qkv [nh*D + 2*nkv*D, H] = rows [q ; k ; v]; no q_norm / k_norm without
//            attn_qk_norm
//   mamba2:  l{il}.in_proj [2*d_inner + 2*G*N + H, H] = rows [z ; x, B, C ; dt];
//            l{il}.conv [conv_dim, K]; l{il}.conv_bias [conv_dim]; l{il}.A [H] = -exp(A_log);
//            l{il}.dt_bias [H]; l{il}.D [H]; l{il}.gnorm [d_inner]; l{il}.out_proj [H, d_inner]
//   relu^2:  l{il}.up [F, H]; l{il}.down [H, F]
//   Norms of the Mamba2 families carry no +1. A layer without a mixer (LayerKind::None) has no
//   in_norm; a layer without an FFN (FfnKind::None) has no post_norm. A MoE without a shared
//   gate (ModelConfig::shared_expert_gate false) has no sh.gate.
//   dense:   l{il}.gate_up [2I, H] = rows [gate ; up]; l{il}.down [H, I]
//   moe:     l{il}.router [E, H]; l{il}.e{e}.gate_up [2Im, H]; l{il}.e{e}.down [H, Im];
//            l{il}.sh.gate_up [2Is, H]; l{il}.sh.down [H, Is]; l{il}.sh.gate [1, H]
//   moe with squared-ReLU experts (ModelConfig::moe_relu2, Nemotron-H): e{e}.up [Im, H] and
//            sh.up [Is, H] instead of the gate_up halves; with the sigmoid router also
//            l{il}.router_bias [E] (HF e_score_correction_bias)
//   MTP head (only when config mtp_num_hidden_layers > 0 and the checkpoint has mtp.* tensors,
//   or in a GGUF file blk.N tensors for N >= n_layer; then has_mtp() is true; docs/QWEN35.md
//   2.5; GGUF names in model/gguf_model.h):
//            mtp.fc [H, 2H]: columns [0, H) multiply the normed embedding of the next token,
//              columns [H, 2H) the normed hidden state (mtp.fc.weight as is)
//            mtp.enorm [H] (pre_fc_norm_embedding, +1 folded); mtp.hnorm [H] (pre_fc_norm_hidden,
//              +1 folded); mtp.norm [H] (+1 folded); the MTP head shares embed and lm_head
//            mtp.layers.{j} -> canonical layer l{n_layer + j}: a full-attention layer with exactly
//              the names above (in_norm, post_norm, qkv, q_norm, k_norm, o_proj) and the
//              family's MLP (dense gate_up/down, or router/e{e}.*/sh.* when
//              cfg.mtp_layer_is_moe()). Released checkpoints have j = 0 only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/io/gguf.h"
#include "rewind/io/safetensors.h"
#include "rewind/kernels/matmul.h"
#include "rewind/model/config.h"
#include "rewind/tensor/dtype.h"

namespace rw {

struct RowBlock {
  const void* data = nullptr;  // rows x cols elements of `dtype`, row-major (quantised: ggml
                               // blocks, dtype_row_bytes(dtype, cols) bytes per row)
  DType dtype = DType::F32;
  int64_t rows = 0;
  std::shared_ptr<std::vector<float>> owned;  // set when the values were made at load time
};

struct WeightSource {
  std::vector<RowBlock> blocks;
  int64_t cols = 0;
  DType file_dtype = DType::F32;  // dtype in the checkpoint (decides the default packed store)
  // Column order of the stored rows when it differs from the model's (GGUF V heads in tiled
  // order): stored column j is logical column col_perm[j]. Empty: identity. row_f32 and to_f32
  // return logical order; pack() keeps quantised blocks as stored and permutes the input.
  std::vector<int32_t> col_perm;

  int64_t rows() const;
  // The store a plain load packs into: the blocks' quantised type when they all share one,
  // BF16 for a BF16 checkpoint, else F32.
  DType default_store() const;
  // Packs for matmul (F32, BF16 or the blocks' quantised type). Float stores pack the logical
  // (unpermuted) columns, so the FMA order is the model's column order.
  PackedMatrix pack(DType store, ThreadPool* pool) const;
  // What a plain load packs: pack(default_store()), except that blocks of different types one
  // of which is quantised become a stack (PackedMatrix::stack) of one part per run of blocks of
  // one type, each kept in its type (float runs as default_store() would store them), all in
  // the stored column order with col_perm on the stack.
  PackedMatrix pack_default(ThreadPool* pool) const;
  // Row r converted to f32 / f64 (cols values).
  void row_f32(int64_t r, float* out) const;
  void row_f64(int64_t r, double* out) const;
  std::vector<float> to_f32() const;  // all rows, [rows, cols]
  // Contiguous rows in one dtype: a view when there is one block, else a concatenated copy.
  // Returns the pointer and dtype; `scratch` holds a copy if one was needed.
  const void* contiguous(DType* dtype, std::vector<std::byte>* scratch) const;
};

// "l<il>.": the prefix of layer il's names in a WeightSet (the MTP blocks follow the layers).
std::string layer_prefix(int64_t il);

class WeightSet {
 public:
  // Resolves every tensor the config needs in `tensors` (HF names, by the family's entry in
  // model/arch.h), checks shapes and dtypes, applies the load-time transforms. `tensors` must
  // outlive the WeightSet.
  static Result<WeightSet> from_hf(const TensorSet& tensors, const ModelConfig& cfg);
  // The same from a llama.cpp GGUF file (qwen35 / qwen35moe / qwen3next; the Mamba2 hybrids'
  // granitehybrid / nemotron_h in docs/MAMBA2.md section 5): tensor names and
  // conventions in model/gguf_model.h (norms already hold the +1,
  // ssm_a is already -exp(A_log), V heads tiled in qwen35/qwen35moe files are put back in the
  // model's grouped order; the MTP head from the nextn blocks). `file` must outlive the WeightSet.
  static Result<WeightSet> from_gguf(const GgufFile& file, const ModelConfig& cfg);

  const WeightSource& get(const std::string& name) const;  // check-fails if absent
  bool has(const std::string& name) const { return map_.count(name) > 0; }
  const std::vector<std::string>& mtp_tensor_names() const { return mtp_names_; }
  // True when the MTP head was mapped (names above). False when the config has no MTP layers or
  // the checkpoint ships none of the mtp.* tensors; a partial or mis-shaped head is a load error.
  bool has_mtp() const { return has_mtp_; }

  // For the families' mappers (model/arch.h): adds a canonical weight, and records the MTP head.
  void put(const std::string& name, WeightSource w) { map_[name] = std::move(w); }
  void set_mtp(bool has, std::vector<std::string> names) {
    has_mtp_ = has;
    mtp_names_ = std::move(names);
  }

 private:
  std::map<std::string, WeightSource> map_;
  std::vector<std::string> mtp_names_;
  bool has_mtp_ = false;
};

}  // namespace rw
