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

#include <cstdint>
#include <memory>
#include <vector>

#include "rewind/base/aligned.h"
#include "rewind/base/memory.h"

namespace rw {

struct StateShape {
  int64_t n_attn_layers = 0;     // full-attention layers
  int64_t kv_dim = 0;            // n_head_kv * head_dim: floats per token per layer, per K and V
  int64_t n_rec_layers = 0;      // recurrent layers (Gated DeltaNet or Mamba2)
  int64_t conv_rows = 0;         // conv kernel - 1
  int64_t conv_dim = 0;          // channels convolved (GDN q, k, v; Mamba2 x, B, C)
  int64_t ssm_layer_floats = 0;  // one layer's SSM state (GDN [Hv, dk, dv]; Mamba2 [H, P, N])
  int64_t page_tokens = 64;      // tokens per KV page; attention reduces in blocks of this size
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
};

// One page: K and V of page_tokens positions for every attention layer.
// Layout per layer: K dim-major [kv_dim][page_tokens] (so attention scores 16 keys per vector),
// then V row-major [page_tokens][kv_dim]; f32.
class KvPage {
 public:
  explicit KvPage(const StateShape& s);
  ~KvPage();
  KvPage(const KvPage&) = delete;
  KvPage& operator=(const KvPage&) = delete;
  // Bytes of every page alive now, process-wide (each page counts itself while it exists).
  static int64_t live_bytes();
  // Writes / reads the K row of slot (position % page_tokens) of one layer.
  void write_k(int64_t layer, int64_t slot, const float* k);
  void read_k(int64_t layer, int64_t slot, float* out) const;
  float* k(int64_t layer) { return data_.data() + (layer * 2) * stride_; }
  float* v(int64_t layer) { return data_.data() + (layer * 2 + 1) * stride_; }
  const float* k(int64_t layer) const { return data_.data() + (layer * 2) * stride_; }
  const float* v(int64_t layer) const { return data_.data() + (layer * 2 + 1) * stride_; }
  size_t bytes() const { return data_.size() * sizeof(float); }
  // The whole page, bytes() bytes (what a cache tier stores and reads back).
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::unique_ptr<KvPage> clone() const;  // copies bytes()

 private:
  KvPage(int64_t stride, int64_t page_tokens, int64_t kv_dim, AlignedBuffer<float> data)
      : stride_(stride), page_tokens_(page_tokens), kv_dim_(kv_dim), data_(std::move(data)) {
    live().add(static_cast<int64_t>(bytes()));
  }
  static LiveBytes& live();
  int64_t stride_;  // page_tokens * kv_dim
  int64_t page_tokens_, kv_dim_;
  AlignedBuffer<float> data_;
};

// An immutable copy of every recurrent layer's state (conv windows + fp32 SSM) of one sequence
// after `pos` tokens: a checkpoint. Costs recurrent bytes only; the attention part of a
// checkpoint is the KV pages below `pos`, shared, never copied.
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
  explicit SequenceState(const StateShape& shape);
  SequenceState(SequenceState&&) noexcept = default;
  SequenceState& operator=(SequenceState&&) noexcept = default;
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
  // K and V of one position of one layer (kv_dim floats each); the page must be private
  // (prepare_append).
  void write_kv(int64_t layer, int64_t pos, const float* k, const float* v);
  void read_k(int64_t layer, int64_t pos, float* out) const;
  float* v_row(int64_t layer, int64_t pos);
  const float* v_row(int64_t layer, int64_t pos) const;
  // Base of block b (positions [b*page_tokens, (b+1)*page_tokens)) for one layer: K dim-major
  // [kv_dim][page_tokens], V row-major [page_tokens][kv_dim].
  const float* k_block(int64_t layer, int64_t b) const { return pages_[b]->k(layer); }
  const float* v_block(int64_t layer, int64_t b) const { return pages_[b]->v(layer); }
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
  size_t kv_bytes_used() const;  // bytes of pages referenced (shared pages counted in full)
  // True when both states hold bit-identical contents at the same position (recurrent state
  // with the MTP carry, and every defined KV row: below n_pos, below n_pos - 1 for a lagging
  // layer). For tests and checks.
  bool same_contents(const SequenceState& other) const;

 private:
  StateShape shape_;
  int64_t n_pos_ = 0;
  std::vector<PagePtr> pages_;
  // [n_rec_layers][conv [conv_rows, conv_dim] ; ssm [Hv, dk, dv]], then the carry
  AlignedBuffer<float> rec_;
};

}  // namespace rw
