// A hybrid decoder on the CPU, of any family in the architecture registry (model/arch.h:
// Qwen3.5 / Qwen3.5-MoE / Qwen3-Next, Granite-4.0-H, Nemotron-H; the forward pass in
// model/forward.cpp). Loads a Hugging Face checkpoint directory or a llama.cpp GGUF file
// (model/gguf_model.h), packs its matrices once, and
// runs the forward pass over a ragged batch: several sequences, each with its own new tokens
// and its own SequenceState, concatenated without padding.
//
// Bit-exact contract (docs/ARCHITECTURE.md): the logits of a token depend only on its
// sequence's tokens, never on how they were cut into forward calls, which other sequences
// shared the batch, or the thread count. Tests prove it with memcmp.
//
// Thread-safety: forward() mutates the model's scratch buffers and the given states: one
// caller at a time (the engine thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rewind/base/aligned.h"
#include "rewind/base/result.h"
#include "rewind/kernels/matmul.h"
#include "rewind/model/config.h"
#include "rewind/model/weight_source.h"
#include "rewind/state/sequence_state.h"

namespace rw {

class ThreadPool;

// Auto: quantised GGUF matrices stay in their type (Q8_0, Q4_K, Q5_K, Q6_K), BF16 stays BF16, the
// rest becomes F32. F32 / BF16 force that store (quantised weights are dequantised exactly).
enum class WeightStore { Auto, F32, BF16 };

// The KV cache types a model loads with unless told otherwise (docs/PERFORMANCE.md, "KV cache
// types": the quality and speed measured for each).
inline constexpr KvTypes kDefaultKvTypes = {DType::F16, DType::F16};

struct LoadOptions {
  WeightStore store = WeightStore::Auto;
  ThreadPool* pool = nullptr;  // used for packing
  // Called while packing with (bytes done, bytes total); may be empty.
  std::function<void(size_t, size_t)> progress;
  // Pack the checkpoint's MTP head (when it has one: WeightSet::has_mtp()) for speculative
  // drafting. States then carry the head's KV and carry (StateShape); without it nothing
  // changes and plain models pay nothing.
  bool mtp = false;
  // How the kernels run (the quantised dot, the SIMD cap, benchmark knobs); the model owns it.
  KernelOptions kernels;
  // How its states store K and V (--cache-type-k / --cache-type-v; StateShape::kv_types).
  KvTypes kv_types = kDefaultKvTypes;
};

// The inputs of every recurrent layer's per-token update, recorded by forward() for one
// sequence when SeqInput::capture is set (speculative verification, DESIGN section 5). With
// them, a partly accepted round is undone exactly: restore the pre-round recurrent state and
// replay only the accepted tokens' updates (Model::replay_recurrent), the same conv-window
// shift and the same per-token gdn_step arithmetic (gdn_steps gives its bits for any number of
// tokens) on the same inputs as the forward, hence the same bits.
// Rows append across forward calls until clear(); nothing is recorded when capture is null
// (prefill and plain decoding pay nothing).
// With the MTP head loaded each row also ends with the token's final hidden state (after the
// final norm), so a rollback sets the MTP carry to the last kept token's hidden state.
struct RecCapture {
  int64_t n = 0;           // tokens recorded
  int64_t row_floats = 0;  // floats per token: n_rec * (2*conv_dim + 2*Hv) [+ H with MTP]
  // [n][ n_rec x [conv inputs (conv_dim) | normed q,k and v (conv_dim) | alpha (Hv) | beta (Hv)]
  //      | final hidden (H, MTP only) ]
  std::vector<float> rows;
  void clear() {
    n = 0;
    rows.clear();
  }
  size_t bytes() const { return rows.size() * sizeof(float); }
};

// One sequence's part of a forward batch.
struct SeqInput {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // new tokens, appended at state->n_pos()
  std::vector<int32_t> logit_rows;  // indices into `tokens` whose logits are wanted, ascending
  RecCapture* capture = nullptr;    // when set, the recurrence inputs of `tokens` are appended
};

// One sequence's MTP drafting request (Model::mtp_draft).
struct MtpDraft {
  SequenceState* state = nullptr;  // n_pos >= 1, made by a model loaded with MTP
  int32_t last = 0;                // the sampled, not yet consumed token t_{n_pos}
  int32_t k = 1;                   // drafts wanted, >= 1
  std::vector<int32_t> drafts;     // out: k greedy drafts
};

class Model {
 public:
  // `path`: an HF checkpoint directory, or a .gguf file (any regular file is read as GGUF).
  static Result<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& opt);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  const WeightSet& weights() const { return *ws_; }
  StateShape state_shape() const;
  SequenceState new_state() const { return SequenceState(state_shape()); }
  // forward() reads and writes each state's K/V in that state's own types
  // (StateShape::kv_types), so a state made from state_shape() with other types runs too.

  // Runs the batch. On success every state has advanced by its token count, and `logits` holds
  // one row of vocab_size floats per requested row, in batch order then row order.
  // Errors (nothing is changed): a token id out of range, an empty token list.
  Status forward(std::span<SeqInput> batch, std::vector<float>* logits, ThreadPool* pool);

  // Applies the recorded updates of capture rows [from, to) to st's recurrent state (conv
  // windows and SSM states; KV and n_pos are left alone), which must hold the recurrent state
  // the sequence had just before row `from` was run. Cost: the conv and gdn_step work of
  // to - from tokens, no matmul. Precondition: 0 <= from <= to <= cap.n.
  void replay_recurrent(SequenceState* st, const RecCapture& cap, int64_t from, int64_t to,
                        ThreadPool* pool) const;
  // Floats one captured token takes (RecCapture::row_floats for this model).
  int64_t capture_row_floats() const;

  // --- MTP head (docs/QWEN35.md 2.5; LoadOptions::mtp) ---
  // True when the head was packed. Then forward() also runs it (KV only) on every consumed
  // token: MTP entry j pairs h_j (the main model's final-normed hidden state at position j)
  // with t_{j+1} and writes the head's KV slot j; a forward at n_pos = p over n tokens writes
  // slots p-1 .. p+n-2 (slot p-1 from the state's carry h_{p-1}) and leaves the carry at
  // h_{p+n-1}. The slots depend only on the sequence's tokens (cut-invariant, bit-exact).
  bool mtp_loaded() const;
  // Drafts d.k greedy tokens per sequence with the MTP head, batched over sequences: entry
  // n-1 = (carry, last) gives d1 = argmax of its logits, then entry n-1+i chains (entry
  // n-2+i's post-mtp.norm state, d_i) for d_{i+1}. Writes the head's KV slots n-1 .. n+k-2
  // (pages made private first; slots >= n - 1 are scratch until the verifying forward
  // rewrites them with the true pairs), leaves n_pos and the recurrent state (carry included)
  // alone. `logits` (may be null) receives [sequence][draft][vocab] rows, batch order.
  // Errors (nothing changed): no MTP head loaded, n_pos == 0, `last` out of range, k < 1.
  // Const because the weights are (speculation holds the target as const); it uses the same
  // scratch buffers as forward(), so the one-caller-at-a-time rule covers both.
  Status mtp_draft(std::span<MtpDraft> batch, std::vector<float>* logits, ThreadPool* pool) const;

  // Bytes of packed weights one decode token reads (every dense matrix, lm_head, and for MoE
  // the router plus top-k experts and the shared expert).
  size_t decode_bytes_per_token() const;
  // Multiply-adds per token in matmuls over all layers (for FLOP counts); lm_head separately.
  int64_t matmul_macs_per_token_layers() const;
  int64_t matmul_macs_lm_head() const;
  size_t packed_bytes() const;
  // Bytes of the checkpoint's tensors mapped from disk (read once while packing; embedding rows
  // are read from the mapping): resident while the kernel keeps those pages mapped in.
  size_t mapped_bytes() const;
  // Bytes of the forward's reusable buffers now (activations, [rows, width] f32: they grow to
  // the largest batch seen and are reused, never shrunk). One caller at a time, like forward().
  size_t scratch_bytes() const;
  // An upper bound of scratch_bytes() for forwards and MTP drafts of at most `rows` rows, plus
  // the attention's temporary score rows of `threads` workers over up to `keys` positions.
  size_t scratch_bytes_bound(int64_t rows, int64_t keys, int threads) const;
  size_t quantised_bytes() const;  // the part of packed_bytes() in quantised stores
  const char* isa() const;         // the f32 / bf16 matmul path under kernel_options().isa
  const KernelOptions& kernel_options() const;
  // Applies `opt` to every packed matrix and op call from the next forward on (benchmarks that
  // compare settings in one process; not while a forward runs). Only quant_dot changes results.
  void set_kernel_options(const KernelOptions& opt);

  struct Impl;

 private:
  Model();
  void replay_mamba2(SequenceState* st, const RecCapture& cap, int64_t from, int64_t to,
                     ThreadPool* pool) const;
  ModelConfig cfg_;
  std::unique_ptr<TensorSet> tensors_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<WeightSet> ws_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rw
