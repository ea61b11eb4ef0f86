#include "rewind/state/sequence_state.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "rewind/base/check.h"
#include "rewind/state/buffer_pool.h"

namespace rw {

namespace {
LiveBytes g_snapshot_bytes;
LiveBytes g_state_bytes;  // SequenceState recurrent buffers
}  // namespace

LiveBytes& KvPage::live() {
  static LiveBytes b;
  return b;
}

int64_t KvPage::live_bytes() {
  return live().get();
}

namespace {
int64_t round64(int64_t n) {
  return (n + 63) / 64 * 64;
}

// ggml's Q8_0 rounding of n <= 32 values: d = amax / 127 stored as f16, codes round(x / d) with
// the fp32 d (quantize_row_q8_0). NaN codes become 0; the f16 scale keeps amax's NaN or inf.
uint16_t quantize_q8(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::roundf(x[i] * id);
    q[i] = r == r ? static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f)) : 0;
  }
  return f32_to_f16(d);
}
}  // namespace

bool kv_type_supported(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::Q8_0;
}

const char* kv_type_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::Q8_0:
      return "q8_0";
    default:
      return "?";
  }
}

bool parse_kv_type(std::string_view name, DType* out) {
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0})
    if (n == kv_type_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

int64_t StateShape::kv_codes_bytes(DType t) const {
  const int64_t n = page_tokens * kv_dim;
  return round64(t == DType::F32 ? 4 * n : t == DType::Q8_0 ? n : 2 * n);
}

int64_t StateShape::kv_part_bytes(DType t) const {
  const int64_t scales =
      t == DType::Q8_0 ? round64(2 * n_kv_heads() * q_blocks_per_head() * page_tokens) : 0;
  return kv_codes_bytes(t) + scales;
}

KvPage::KvPage(const StateShape& s)
    : page_tokens_(s.page_tokens),
      kv_dim_(s.kv_dim),
      head_dim_(s.head_dim()),
      qb_(s.q_blocks_per_head()),
      types_(s.kv_types),
      k_codes_(s.kv_codes_bytes(s.kv_types.k)),
      k_part_(s.kv_part_bytes(s.kv_types.k)),
      v_codes_(s.kv_codes_bytes(s.kv_types.v)),
      layer_bytes_(s.page_layer_bytes()),
      data_(StateBufferPool::take_bytes(static_cast<size_t>(s.page_bytes()), true)) {
  REWIND_CHECK_MSG(kv_type_supported(s.kv_types.k) && kv_type_supported(s.kv_types.v),
                   "KV cache type must be f32, bf16, f16 or q8_0");
  REWIND_CHECK(head_dim_ == 0 || s.kv_dim % head_dim_ == 0);
  live().add(static_cast<int64_t>(bytes()));
}

KvPage::KvPage(const KvPage& o, AlignedBuffer<std::byte> data)
    : page_tokens_(o.page_tokens_),
      kv_dim_(o.kv_dim_),
      head_dim_(o.head_dim_),
      qb_(o.qb_),
      types_(o.types_),
      k_codes_(o.k_codes_),
      k_part_(o.k_part_),
      v_codes_(o.v_codes_),
      layer_bytes_(o.layer_bytes_),
      data_(std::move(data)) {
  live().add(static_cast<int64_t>(bytes()));
}

KvPage::~KvPage() {
  live().sub(static_cast<int64_t>(bytes()));
  StateBufferPool::give(std::move(data_));
}

Snapshot::Snapshot(int64_t p, AlignedBuffer<float> r) : pos(p), rec(std::move(r)) {
  g_snapshot_bytes.add(static_cast<int64_t>(bytes()));
}

Snapshot::~Snapshot() {
  g_snapshot_bytes.sub(static_cast<int64_t>(bytes()));
  // const no longer applies to an object under destruction ([class.dtor]).
  StateBufferPool::give(std::move(const_cast<AlignedBuffer<float>&>(rec)));
}

int64_t Snapshot::live_bytes() {
  return g_snapshot_bytes.get();
}

std::unique_ptr<KvPage> KvPage::clone() const {
  AlignedBuffer<std::byte> copy = StateBufferPool::take_bytes(data_.size(), false);
  if (data_.size()) std::memcpy(copy.data(), data_.data(), data_.size());
  return std::unique_ptr<KvPage>(new KvPage(*this, std::move(copy)));
}

const uint16_t* KvPage::k_scales(int64_t layer) const {
  if (types_.k != DType::Q8_0) return nullptr;
  return reinterpret_cast<const uint16_t*>(k(layer) + k_codes_);
}

const uint16_t* KvPage::v_scales(int64_t layer) const {
  if (types_.v != DType::Q8_0) return nullptr;
  return reinterpret_cast<const uint16_t*>(v(layer) + v_codes_);
}

void KvPage::write(int64_t layer, int64_t slot, const float* kr, const float* vr) {
  const int64_t PT = page_tokens_, n = kv_dim_;
  std::byte* kb = kw(layer);
  std::byte* vb = kb + k_part_;
  // K: dim-major, element i of the row at [i][slot].
  switch (types_.k) {
    case DType::F32: {
      float* o = reinterpret_cast<float*>(kb) + slot;
      for (int64_t i = 0; i < n; ++i) o[i * PT] = kr[i];
      break;
    }
    case DType::BF16:
    case DType::F16: {
      const bool bf = types_.k == DType::BF16;
      uint16_t* o = reinterpret_cast<uint16_t*>(kb) + slot;
      for (int64_t i = 0; i < n; ++i) o[i * PT] = bf ? f32_to_bf16(kr[i]) : f32_to_f16(kr[i]);
      break;
    }
    default: {  // Q8_0
      int8_t* o = reinterpret_cast<int8_t*>(kb) + slot;
      uint16_t* sc = reinterpret_cast<uint16_t*>(kb + k_codes_) + slot;
      int8_t q[kKvQBlock];
      for (int64_t h = 0; h < n / head_dim_; ++h)
        for (int64_t c = 0; c < qb_; ++c) {
          const int64_t i0 = h * head_dim_ + c * kKvQBlock;
          const int64_t m = std::min(kKvQBlock, head_dim_ - c * kKvQBlock);
          sc[(h * qb_ + c) * PT] = quantize_q8(kr + i0, m, q);
          for (int64_t i = 0; i < m; ++i) o[(i0 + i) * PT] = q[i];
        }
    }
  }
  // V: row-major, the row at [slot][0].
  switch (types_.v) {
    case DType::F32:
      std::memcpy(vb + slot * n * 4, vr, static_cast<size_t>(n) * 4);
      break;
    case DType::BF16:
    case DType::F16: {
      const bool bf = types_.v == DType::BF16;
      uint16_t* o = reinterpret_cast<uint16_t*>(vb) + slot * n;
      for (int64_t i = 0; i < n; ++i) o[i] = bf ? f32_to_bf16(vr[i]) : f32_to_f16(vr[i]);
      break;
    }
    default: {  // Q8_0
      int8_t* o = reinterpret_cast<int8_t*>(vb) + slot * n;
      uint16_t* sc = reinterpret_cast<uint16_t*>(vb + v_codes_) + slot * (n / head_dim_) * qb_;
      for (int64_t h = 0; h < n / head_dim_; ++h)
        for (int64_t c = 0; c < qb_; ++c) {
          const int64_t i0 = h * head_dim_ + c * kKvQBlock;
          sc[h * qb_ + c] =
              quantize_q8(vr + i0, std::min(kKvQBlock, head_dim_ - c * kKvQBlock), o + i0);
        }
    }
  }
}

void KvPage::read_k(int64_t layer, int64_t slot, float* out) const {
  const int64_t PT = page_tokens_, n = kv_dim_;
  const std::byte* kb = k(layer);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = i * PT + slot;
    switch (types_.k) {
      case DType::F32:
        out[i] = reinterpret_cast<const float*>(kb)[e];
        break;
      case DType::BF16:
        out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(kb)[e]);
        break;
      case DType::F16:
        out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(kb)[e]);
        break;
      default: {
        const int64_t h = i / head_dim_, c = (i % head_dim_) / kKvQBlock;
        out[i] = static_cast<float>(reinterpret_cast<const int8_t*>(kb)[e]) *
                 f16_to_f32(k_scales(layer)[(h * qb_ + c) * PT + slot]);
      }
    }
  }
}

void KvPage::read_v(int64_t layer, int64_t slot, float* out) const {
  const int64_t n = kv_dim_;
  const std::byte* vb = v(layer);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = slot * n + i;
    switch (types_.v) {
      case DType::F32:
        out[i] = reinterpret_cast<const float*>(vb)[e];
        break;
      case DType::BF16:
        out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(vb)[e]);
        break;
      case DType::F16:
        out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(vb)[e]);
        break;
      default: {
        const int64_t h = i / head_dim_, c = (i % head_dim_) / kKvQBlock;
        out[i] = static_cast<float>(reinterpret_cast<const int8_t*>(vb)[e]) *
                 f16_to_f32(v_scales(layer)[slot * (n / head_dim_) * qb_ + h * qb_ + c]);
      }
    }
  }
}

SequenceState::SequenceState(const StateShape& shape)
    : shape_(shape),
      rec_(StateBufferPool::take_floats(static_cast<size_t>(shape.rec_floats()), true)) {
  REWIND_CHECK(shape.page_tokens > 0);
  REWIND_CHECK(shape.lagged_attn_layers >= 0 && shape.lagged_attn_layers <= shape.n_attn_layers);
  g_state_bytes.add(static_cast<int64_t>(recurrent_bytes()));
}

SequenceState::~SequenceState() {
  g_state_bytes.sub(static_cast<int64_t>(recurrent_bytes()));  // 0 once moved from
  StateBufferPool::give(std::move(rec_));
}

SequenceState& SequenceState::operator=(SequenceState&& o) noexcept {
  if (this == &o) return *this;
  g_state_bytes.sub(static_cast<int64_t>(recurrent_bytes()));
  StateBufferPool::give(std::move(rec_));
  shape_ = o.shape_;
  n_pos_ = std::exchange(o.n_pos_, 0);
  pages_ = std::move(o.pages_);
  rec_ = std::move(o.rec_);  // its count moves with it
  return *this;
}

int64_t SequenceState::live_bytes() {
  return g_state_bytes.get();
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
               other.shape_.kv_types.k == shape_.kv_types.k &&
               other.shape_.kv_types.v == shape_.kv_types.v && other.rec_.size() == rec_.size());
  n_pos_ = other.n_pos_;
  pages_ = other.pages_;
  if (rec_.size()) std::memcpy(rec_.data(), other.rec_.data(), rec_.size() * sizeof(float));
}

std::shared_ptr<const Snapshot> SequenceState::take_snapshot() const {
  AlignedBuffer<float> copy = StateBufferPool::take_floats(rec_.size(), false);
  if (rec_.size()) std::memcpy(copy.data(), rec_.data(), rec_.size() * sizeof(float));
  return std::make_shared<Snapshot>(n_pos_, std::move(copy));
}

void SequenceState::resume(std::vector<PagePtr> pages, const Snapshot* snap, int64_t p) {
  REWIND_CHECK(p >= 0);
  const int64_t need =
      shape_.n_attn_layers == 0 ? 0 : (p + shape_.page_tokens - 1) / shape_.page_tokens;
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
  for (const PagePtr& pg : pages)  // pages of another KV type would be read as this one's
    REWIND_CHECK(pg->types().k == shape_.kv_types.k && pg->types().v == shape_.kv_types.v &&
                 pg->bytes() == static_cast<size_t>(shape_.page_bytes()));
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
  REWIND_CHECK_MSG(can_trim_to(n),
                   "trim_to(" + std::to_string(n) + ") at n_pos " + std::to_string(n_pos_));
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
  const int64_t keep =
      shape_.n_attn_layers == 0 ? 0 : (n + shape_.page_tokens - 1) / shape_.page_tokens;
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

void SequenceState::commit_append(int64_t n_new) {
  n_pos_ += n_new;
}

void SequenceState::write_kv(int64_t layer, int64_t pos, const float* k, const float* v) {
  pages_[pos / shape_.page_tokens]->write(layer, pos % shape_.page_tokens, k, v);
}
void SequenceState::read_k(int64_t layer, int64_t pos, float* out) const {
  pages_[pos / shape_.page_tokens]->read_k(layer, pos % shape_.page_tokens, out);
}
void SequenceState::read_v(int64_t layer, int64_t pos, float* out) const {
  pages_[pos / shape_.page_tokens]->read_v(layer, pos % shape_.page_tokens, out);
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
      if (std::memcmp(ka.data(), kb.data(), row) != 0) return false;
      read_v(l, p, ka.data());
      o.read_v(l, p, kb.data());
      if (std::memcmp(ka.data(), kb.data(), row) != 0) return false;
    }
  return true;
}

}  // namespace rw
