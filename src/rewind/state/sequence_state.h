// Per-sequence model state: attention KV in fixed-size pages behind a page table, and each
// recurrent (Gated DeltaNet or Mamba2) layer's conv window and fp32 SSM state. No model knowledge:
// the shape comes from StateShape.
//
// Cost rules (docs/STYLE.md): the state is move-only; clone() says what it copies. Attention pages
// are refcounted: clone() shares them (O(pages) refcount bumps) and a shared page is copied
// only when a sequence writes into it (copy-on-write, which in practice is only ever the last,
// partly filled page). Recurrent state is copied (recurrent_bytes()).
//
// Capabilities are queries, never probes: can_trim_to(n) says whether trim_to(n) is possible;
// trim_to on an impossible n is a broken invariant (check failure), not an error value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "rewind/base/aligned.h"
#include "rewind/base/memory.h"
#include "rewind/tensor/dtype.h"

namespace rw {

// The element types K and V may be stored in (--cache-type-k / --cache-type-v): F32, BF16, F16
// or Q8_0. A token's K and V are computed in fp32 and rounded once when written (write_kv);
// attention widens what is stored to fp32 exactly, so a type changes the values, never the
// bit-exact invariants. Q8_0 is ggml's block (f16 scale d = amax / 127, codes round(x / d))
// over 32 dims of one head of one token; a head_dim that is not a multiple of 32 ends in a
// shorter block with its own scale.
struct KvTypes {
  DType k = DType::F32;
  DType v = DType::F32;
};
// "f32", "bf16", "f16", "q8_0" (case-insensitive); false for anything else.
bool parse_kv_type(std::string_view name, DType* out);
const char* kv_type_name(DType t);  // "f32", "bf16", "f16", "q8_0"
bool kv_type_supported(DType t);
constexpr int64_t kKvQBlock = 32;  // Q8_0 values per scale

struct StateShape {
  int64_t n_attn_layers = 0;     // full-attention layers
  int64_t kv_dim = 0;            // n_head_kv * head_dim: floats per token per layer, per K and V
  int64_t n_rec_layers = 0;      // recurrent layers (Gated DeltaNet or Mamba2)
  int64_t conv_rows = 0;         // conv kernel - 1
  int64_t conv_dim = 0;          // channels convolved (GDN q, k, v; Mamba2 x, B, C)
  int64_t ssm_layer_floats = 0;  // one layer's SSM state (GDN [Hv, dk, dv]; Mamba2 [H, P, N])
  int64_t page_tokens = 64;      // tokens per KV page; attention reduces in blocks of this size
  int64_t kv_head_dim = 0;       // dims per K/V head (0: kv_dim); Q8_0 blocks never cross heads
  KvTypes kv_types;              // how K and V are stored (F32 unless the model says otherwise)
  // MTP head (model/forward.cpp, loaded on request): its attention layer is the last of the
  // n_attn_layers and lags by one position (its slot p is written once token p+1 is consumed,
  // so at n_pos only slots below n_pos - 1 are defined); `carry_floats` more floats at the end
  // of the recurrent buffer hold the carry (the main model's final hidden state of the last
  // consumed token), so snapshots and rollback copies include it. Zero without MTP.
  int64_t lagged_attn_layers = 0;
  int64_t carry_floats = 0;

  int64_t conv_floats() const { return conv_rows * conv_dim; }
  int64_t ssm_floats() const { return ssm_layer_floats; }
  int64_t rec_floats_per_layer() const { return conv_floats() + ssm_floats(); }
  // The whole recurrent buffer: every recurrent layer, then the carry.
  int64_t rec_floats() const { return n_rec_layers * rec_floats_per_layer() + carry_floats; }

  int64_t head_dim() const { return kv_head_dim > 0 ? kv_head_dim : kv_dim; }
  int64_t n_kv_heads() const { return head_dim() > 0 ? kv_dim / head_dim() : 0; }
  // Q8_0 scales per head per token: ceil(head_dim / 32).
  int64_t q_blocks_per_head() const { return (head_dim() + kKvQBlock - 1) / kKvQBlock; }
  // Bytes of one layer's K (V) in a page: codes, then for Q8_0 the f16 scales, each part a
  // multiple of 64 bytes.
  int64_t kv_codes_bytes(DType t) const;
  int64_t kv_part_bytes(DType t) const;
  int64_t page_layer_bytes() const { return kv_part_bytes(kv_types.k) + kv_part_bytes(kv_types.v); }
  int64_t page_bytes() const { return n_attn_layers * page_layer_bytes(); }
  // Bytes one token's K and V take in every attention layer (Q8_0 scales included).
  double kv_bytes_per_token() const {
    return static_cast<double>(page_bytes()) / static_cast<double>(page_tokens);
  }
};

// One page: K and V of page_tokens positions for every attention layer, in the shape's types
// (zero-filled when made; its buffer from StateBufferPool and back to it).
// Layout per layer: K dim-major [kv_dim][page_tokens] (so attention scores 16 keys per vector),
// then V row-major [page_tokens][kv_dim], each as codes of its type; for Q8_0 the codes are
// followed by f16 scales: K's [n_kv_heads * q_blocks_per_head][page_tokens] (the scale of dim
// block c of head h for slot j at [(h * qb + c) * page_tokens + j]), V's [page_tokens]
// [n_kv_heads * qb]. Each part starts on a 64-byte boundary (StateShape::kv_part_bytes).
class KvPage {
 public:
  explicit KvPage(const StateShape& s);
  ~KvPage();
  KvPage(const KvPage&) = delete;
  KvPage& operator=(const KvPage&) = delete;
  // Bytes of every page alive now, process-wide (each page counts itself while it exists).
  static int64_t live_bytes();
  // Rounds k and v (kv_dim floats each) to the page's types and stores them in slot
  // (position % page_tokens) of one layer.
  void write(int64_t layer, int64_t slot, const float* k, const float* v);
  // Widens the stored K (V) row of one slot of one layer to fp32 (exact).
  void read_k(int64_t layer, int64_t slot, float* out) const;
  void read_v(int64_t layer, int64_t slot, float* out) const;
  // Base of one layer's K (V) codes, and for Q8_0 its scales (else null).
  const std::byte* k(int64_t layer) const { return data_.data() + layer * layer_bytes_; }
  const std::byte* v(int64_t layer) const { return k(layer) + k_part_; }
  const uint16_t* k_scales(int64_t layer) const;
  const uint16_t* v_scales(int64_t layer) const;
  KvTypes types() const { return types_; }
  // The page's bytes as they are stored (every layer, codes and scales), for byte copies.
  // What a cache tier stores and reads back.
  const std::byte* raw() const { return data_.data(); }
  std::byte* raw() { return data_.data(); }
  size_t bytes() const { return data_.size(); }
  std::unique_ptr<KvPage> clone() const;  // copies bytes()

 private:
  KvPage(const KvPage& o, AlignedBuffer<std::byte> data);
  std::byte* kw(int64_t layer) { return data_.data() + layer * layer_bytes_; }
  static LiveBytes& live();
  int64_t page_tokens_, kv_dim_, head_dim_, qb_;  // qb_: Q8_0 blocks per head
  KvTypes types_;
  int64_t k_codes_, k_part_, v_codes_, layer_bytes_;  // byte offsets and sizes per layer
  AlignedBuffer<std::byte> data_;
};

// An immutable copy of every recurrent layer's state (conv windows + fp32 SSM) of one sequence
// after `pos` tokens: a checkpoint. Costs recurrent bytes only; the attention part of a
// checkpoint is the KV pages below `pos`, shared, never copied. Its buffer goes to
// StateBufferPool when it is destroyed.
struct Snapshot {
  Snapshot(int64_t p, AlignedBuffer<float> r);  // takes the buffer; counted while alive
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  int64_t pos = 0;
  const AlignedBuffer<float> rec;  // same layout as SequenceState's recurrent buffer
  size_t bytes() const { return rec.size() * sizeof(float); }
  // Bytes of every snapshot alive now, process-wide.
  static int64_t live_bytes();
};

using PagePtr = std::shared_ptr<KvPage>;

class SequenceState {
 public:
  // The recurrent buffer comes from StateBufferPool (zero-filled) and goes back to it.
  explicit SequenceState(const StateShape& shape);
  ~SequenceState();
  SequenceState(SequenceState&&) noexcept = default;
  SequenceState& operator=(SequenceState&& o) noexcept;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  const StateShape& shape() const { return shape_; }
  int64_t n_pos() const { return n_pos_; }  // tokens consumed so far

  // Copies recurrent_bytes() and shares the KV pages (copy-on-write).
  SequenceState clone() const;
  // Makes *this an exact copy of `other` (same shape required); same cost as clone().
  void restore_from(const SequenceState& other);

  // Copies the recurrent state at n_pos (recurrent_bytes()).
  std::shared_ptr<const Snapshot> take_snapshot() const;
  // Resets this state to position p: `pages` must cover [0, p) (exactly ceil(p / page_tokens)
  // entries, shared, not copied) and `snap` must be a snapshot at p, or null when p == 0 or the
  // model has no recurrent layer. Pages written later are copied first if shared.
  void resume(std::vector<PagePtr> pages, const Snapshot* snap, int64_t p);
  // The page table (entry b covers positions [b*page_tokens, (b+1)*page_tokens)).
  const std::vector<PagePtr>& pages() const { return pages_; }

  bool can_trim_to(int64_t n) const;
  void trim_to(int64_t n);  // precondition: can_trim_to(n)

  // --- speculative rollback (engine/speculative.h) ---
  // Copies the recurrent state into *out (recurrent_bytes(); *out grows when too small).
  void save_recurrent(AlignedBuffer<float>* out) const;
  // Overwrites the recurrent state with one saved by save_recurrent (recurrent_bytes()).
  void load_recurrent(const AlignedBuffer<float>& saved);
  // Moves n_pos back to n (0 <= n <= n_pos) and drops pages wholly past it, leaving the
  // recurrent part untouched: the caller has already made it the state after n tokens (restore
  // + replay of the accepted tokens). Unlike trim_to this is allowed on hybrid states, because
  // the caller, not this class, vouches for the recurrent part.
  void rewind_kv_to(int64_t n);

  // --- used by the forward pass ---
  // Makes pages for positions [n_pos, n_pos + n_new) exist and be private to this sequence.
  void prepare_append(int64_t n_new) { prepare_write(n_pos_, n_pos_ + n_new); }
  // Makes pages for positions [from, to) exist and be private to this sequence (shared ones
  // are copied first), n_pos unchanged. Positions below n_pos are allowed: the lagging MTP
  // layer writes its slot n_pos - 1, which may lie in a page shared with the prefix cache,
  // and MTP drafting writes slots past n_pos (pages past n_pos are dropped by rewind_kv_to).
  void prepare_write(int64_t from, int64_t to);
  // Advances n_pos after a forward pass wrote n_new tokens.
  void commit_append(int64_t n_new);
  // K and V of one position of one layer (kv_dim floats each), rounded to the shape's types
  // as they are stored; the page must be private (prepare_append).
  void write_kv(int64_t layer, int64_t pos, const float* k, const float* v);
  // The stored K (V) row of one position widened to fp32 (kv_dim floats).
  void read_k(int64_t layer, int64_t pos, float* out) const;
  void read_v(int64_t layer, int64_t pos, float* out) const;
  // Block b (positions [b*page_tokens, (b+1)*page_tokens)) of one layer: K and V codes and
  // their Q8_0 scales, laid out as KvPage says.
  const KvPage& page(int64_t b) const { return *pages_[b]; }
  const std::byte* k_block(int64_t layer, int64_t b) const { return pages_[b]->k(layer); }
  const std::byte* v_block(int64_t layer, int64_t b) const { return pages_[b]->v(layer); }
  int64_t n_pages() const { return static_cast<int64_t>(pages_.size()); }

  float* conv(int64_t il_rec) { return rec_.data() + il_rec * shape_.rec_floats_per_layer(); }
  float* ssm(int64_t il_rec) { return conv(il_rec) + shape_.conv_floats(); }
  const float* conv(int64_t il_rec) const {
    return rec_.data() + il_rec * shape_.rec_floats_per_layer();
  }
  const float* ssm(int64_t il_rec) const { return conv(il_rec) + shape_.conv_floats(); }
  // The MTP carry (StateShape::carry_floats floats; valid once n_pos >= 1).
  float* carry() { return rec_.data() + shape_.n_rec_layers * shape_.rec_floats_per_layer(); }
  const float* carry() const {
    return rec_.data() + shape_.n_rec_layers * shape_.rec_floats_per_layer();
  }

  size_t recurrent_bytes() const { return rec_.size() * sizeof(float); }
  // Recurrent bytes of every sequence state alive now, process-wide.
  static int64_t live_bytes();
  size_t kv_bytes_used() const;  // bytes of pages referenced (shared pages counted in full)
  // True when both states hold bit-identical contents at the same position (recurrent state
  // with the MTP carry, and every defined KV row widened to fp32: below n_pos, below n_pos - 1
  // for a lagging layer). For tests and checks.
  bool same_contents(const SequenceState& other) const;

 private:
  StateShape shape_;
  int64_t n_pos_ = 0;
  std::vector<PagePtr> pages_;
  // [n_rec_layers][conv [conv_rows, conv_dim] ; ssm [Hv, dk, dv]], then the carry
  AlignedBuffer<float> rec_;
};

}  // namespace rw
