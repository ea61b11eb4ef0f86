#include "rewind/state/sequence_state.h"

#include <cstring>

#include "rewind/base/check.h"

namespace rw {

namespace {
LiveBytes g_snapshot_bytes;
}  // namespace

LiveBytes& KvPage::live() {
  static LiveBytes b;
  return b;
}

int64_t KvPage::live_bytes() {
  return live().get();
}

KvPage::KvPage(const StateShape& s)
    : stride_(s.page_tokens * s.kv_dim),
      page_tokens_(s.page_tokens),
      kv_dim_(s.kv_dim),
      data_(static_cast<size_t>(s.n_attn_layers * 2 * stride_)) {
  live().add(static_cast<int64_t>(bytes()));
}

KvPage::~KvPage() {
  live().sub(static_cast<int64_t>(bytes()));
}

Snapshot::Snapshot(int64_t p, AlignedBuffer<float> r) : pos(p), rec(std::move(r)) {
  g_snapshot_bytes.add(static_cast<int64_t>(bytes()));
}

Snapshot::~Snapshot() {
  g_snapshot_bytes.sub(static_cast<int64_t>(bytes()));
}

int64_t Snapshot::live_bytes() {
  return g_snapshot_bytes.get();
}

std::unique_ptr<KvPage> KvPage::clone() const {
  return std::unique_ptr<KvPage>(new KvPage(stride_, page_tokens_, kv_dim_, data_.clone()));
}

void KvPage::write_k(int64_t layer, int64_t slot, const float* src) {
  float* base = k(layer) + slot;
  for (int64_t i = 0; i < kv_dim_; ++i) base[i * page_tokens_] = src[i];
}

void KvPage::read_k(int64_t layer, int64_t slot, float* out) const {
  const float* base = k(layer) + slot;
  for (int64_t i = 0; i < kv_dim_; ++i) out[i] = base[i * page_tokens_];
}

SequenceState::SequenceState(const StateShape& shape)
    : shape_(shape), rec_(static_cast<size_t>(shape.rec_floats())) {
  REWIND_CHECK(shape.page_tokens > 0);
  REWIND_CHECK(shape.lagged_attn_layers >= 0 && shape.lagged_attn_layers <= shape.n_attn_layers);
}

SequenceState SequenceState::clone() const {
  SequenceState s(shape_);
  s.restore_from(*this);
  return s;
}

void SequenceState::restore_from(const SequenceState& other) {
  if (this == &other) return;
  REWIND_CHECK(other.shape_.n_rec_layers == shape_.n_rec_layers &&
               other.shape_.n_attn_layers == shape_.n_attn_layers &&
               other.shape_.kv_dim == shape_.kv_dim &&
               other.shape_.page_tokens == shape_.page_tokens &&
               other.shape_.lagged_attn_layers == shape_.lagged_attn_layers &&
               other.rec_.size() == rec_.size());
  n_pos_ = other.n_pos_;
  pages_ = other.pages_;
  if (rec_.size()) std::memcpy(rec_.data(), other.rec_.data(), rec_.size() * sizeof(float));
}

std::shared_ptr<const Snapshot> SequenceState::take_snapshot() const {
  return std::make_shared<Snapshot>(n_pos_, rec_.clone());
}

void SequenceState::resume(std::vector<PagePtr> pages, const Snapshot* snap, int64_t p) {
  REWIND_CHECK(p >= 0);
  const int64_t need = shape_.n_attn_layers == 0 ? 0 : (p + shape_.page_tokens - 1) / shape_.page_tokens;
  REWIND_CHECK_MSG(static_cast<int64_t>(pages.size()) == need,
                   "resume at " + std::to_string(p) + " needs " + std::to_string(need) + " pages");
  if (rec_.size() > 0) {
    if (snap) {
      REWIND_CHECK(snap->pos == p && snap->rec.size() == rec_.size());
      std::memcpy(rec_.data(), snap->rec.data(), rec_.size() * sizeof(float));
    } else {
      REWIND_CHECK_MSG(p == 0, "a hybrid state resumes only at 0 or from a snapshot");
      std::memset(rec_.data(), 0, rec_.size() * sizeof(float));
    }
  }
  pages_ = std::move(pages);
  n_pos_ = p;
}

bool SequenceState::can_trim_to(int64_t n) const {
  if (n < 0 || n > n_pos_) return false;
  if (n == n_pos_) return true;
  // A recurrent state (or the MTP carry) at n_pos summarises every earlier token; it cannot go
  // back.
  return rec_.size() == 0;
}

void SequenceState::trim_to(int64_t n) {
  REWIND_CHECK_MSG(can_trim_to(n), "trim_to(" + std::to_string(n) + ") at n_pos " +
                                       std::to_string(n_pos_));
  n_pos_ = n;
  const int64_t keep = (n + shape_.page_tokens - 1) / shape_.page_tokens;
  if (keep < n_pages()) pages_.resize(static_cast<size_t>(keep));
}

void SequenceState::save_recurrent(AlignedBuffer<float>* out) const {
  if (out->size() < rec_.size()) out->resize(rec_.size());
  if (rec_.size()) std::memcpy(out->data(), rec_.data(), rec_.size() * sizeof(float));
}

void SequenceState::load_recurrent(const AlignedBuffer<float>& saved) {
  REWIND_CHECK(saved.size() >= rec_.size());
  if (rec_.size()) std::memcpy(rec_.data(), saved.data(), rec_.size() * sizeof(float));
}

void SequenceState::rewind_kv_to(int64_t n) {
  REWIND_CHECK_MSG(n >= 0 && n <= n_pos_,
                   "rewind_kv_to(" + std::to_string(n) + ") at n_pos " + std::to_string(n_pos_));
  n_pos_ = n;
  const int64_t keep = shape_.n_attn_layers == 0 ? 0 : (n + shape_.page_tokens - 1) / shape_.page_tokens;
  if (keep < n_pages()) pages_.resize(static_cast<size_t>(keep));
}

void SequenceState::prepare_write(int64_t from, int64_t to) {
  REWIND_CHECK(from >= 0);
  if (shape_.n_attn_layers == 0 || to <= from) return;
  const int64_t first = from / shape_.page_tokens;
  const int64_t last = (to - 1) / shape_.page_tokens;
  for (int64_t b = first; b <= last; ++b) {
    if (b < n_pages()) {
      if (pages_[b].use_count() > 1) pages_[b] = std::shared_ptr<KvPage>(pages_[b]->clone());
    } else {
      REWIND_CHECK(b == n_pages());
      pages_.push_back(std::make_shared<KvPage>(shape_));
    }
  }
}

void SequenceState::commit_append(int64_t n_new) { n_pos_ += n_new; }

void SequenceState::write_kv(int64_t layer, int64_t pos, const float* k, const float* v) {
  KvPage& pg = *pages_[pos / shape_.page_tokens];
  pg.write_k(layer, pos % shape_.page_tokens, k);
  std::memcpy(pg.v(layer) + (pos % shape_.page_tokens) * shape_.kv_dim, v,
              static_cast<size_t>(shape_.kv_dim) * sizeof(float));
}
void SequenceState::read_k(int64_t layer, int64_t pos, float* out) const {
  pages_[pos / shape_.page_tokens]->read_k(layer, pos % shape_.page_tokens, out);
}
float* SequenceState::v_row(int64_t layer, int64_t pos) {
  return pages_[pos / shape_.page_tokens]->v(layer) + (pos % shape_.page_tokens) * shape_.kv_dim;
}
const float* SequenceState::v_row(int64_t layer, int64_t pos) const {
  return pages_[pos / shape_.page_tokens]->v(layer) + (pos % shape_.page_tokens) * shape_.kv_dim;
}

size_t SequenceState::kv_bytes_used() const {
  size_t b = 0;
  for (auto& p : pages_) b += p->bytes();
  return b;
}

bool SequenceState::same_contents(const SequenceState& o) const {
  if (n_pos_ != o.n_pos_ || rec_.size() != o.rec_.size()) return false;
  if (rec_.size() && std::memcmp(rec_.data(), o.rec_.data(), rec_.size() * sizeof(float)) != 0)
    return false;
  const size_t row = static_cast<size_t>(shape_.kv_dim) * sizeof(float);
  std::vector<float> ka(static_cast<size_t>(shape_.kv_dim)), kb(ka.size());
  for (int64_t l = 0; l < shape_.n_attn_layers; ++l)
    for (int64_t p = 0; p < n_pos_ - (l >= shape_.n_attn_layers - shape_.lagged_attn_layers); ++p) {
      read_k(l, p, ka.data());
      o.read_k(l, p, kb.data());
      if (std::memcmp(ka.data(), kb.data(), row) != 0 || std::memcmp(v_row(l, p), o.v_row(l, p), row) != 0)
        return false;
    }
  return true;
}

}  // namespace rw
