// SequenceState: capability queries (can_trim_to), copy-on-write KV pages, exact copies.
#include "rewind/state/sequence_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "rewind/state/buffer_pool.h"
#include "rewind/tensor/quant.h"

namespace rw {
namespace {

StateShape shape(int64_t n_rec) {
  StateShape s;
  s.n_attn_layers = 2;
  s.kv_dim = 4;
  s.n_rec_layers = n_rec;
  s.conv_rows = 3;
  s.conv_dim = 5;
  s.ssm_layer_floats = 12;  // [2, 3, 2]
  s.page_tokens = 4;
  return s;
}

void append(SequenceState& st, int64_t n, float base) {
  st.prepare_append(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < 2; ++l) {
      float k[4], v[4];
      for (int j = 0; j < 4; ++j) k[j] = v[j] = base + static_cast<float>(i);
      st.write_kv(l, st.n_pos() + i, k, v);
    }
  st.commit_append(n);
}

TEST(SequenceState, TrimOnlyWithoutRecurrentLayers) {
  SequenceState hybrid(shape(1)), attn_only(shape(0));
  append(hybrid, 10, 1);
  append(attn_only, 10, 1);
  EXPECT_TRUE(hybrid.can_trim_to(10));
  EXPECT_FALSE(hybrid.can_trim_to(9));  // recurrent state cannot go back
  EXPECT_FALSE(hybrid.can_trim_to(11));
  EXPECT_FALSE(hybrid.can_trim_to(-1));
  EXPECT_TRUE(attn_only.can_trim_to(0));
  EXPECT_TRUE(attn_only.can_trim_to(5));
  attn_only.trim_to(5);
  EXPECT_EQ(attn_only.n_pos(), 5);
  EXPECT_EQ(attn_only.n_pages(), 2);
  // A fresh state can only "trim" to 0.
  SequenceState fresh(shape(1));
  EXPECT_TRUE(fresh.can_trim_to(0));
  EXPECT_FALSE(fresh.can_trim_to(1));
}

TEST(SequenceStateDeath, TrimPastCapabilityIsACheckFailure) {
  SequenceState hybrid(shape(1));
  append(hybrid, 6, 1);
  EXPECT_DEATH(hybrid.trim_to(3), "trim_to");
}

TEST(SequenceState, CloneSharesPagesAndCopiesOnWrite) {
  SequenceState a(shape(1));
  append(a, 6, 1);  // pages 0 (full) and 1 (2 of 4 used)
  a.ssm(0)[0] = 42.0f;
  SequenceState b = a.clone();
  EXPECT_TRUE(b.same_contents(a));
  EXPECT_EQ(b.k_block(0, 0), a.k_block(0, 0));  // full page shared, not copied
  append(b, 1, 100);  // writes into the shared partly filled page: b gets its own copy
  EXPECT_NE(b.k_block(0, 1), a.k_block(0, 1));
  EXPECT_EQ(b.k_block(0, 0), a.k_block(0, 0));
  EXPECT_EQ(a.n_pos(), 6);
  float ka[4], kb[4];
  a.read_k(0, 5, ka);
  b.read_k(0, 5, kb);
  EXPECT_EQ(kb[0], ka[0]);  // earlier rows carried over
  b.read_k(0, 6, kb);
  EXPECT_EQ(kb[0], 100.0f);
  b.ssm(0)[0] = 7.0f;  // recurrent state is a copy
  EXPECT_EQ(a.ssm(0)[0], 42.0f);
  a.restore_from(b);
  EXPECT_TRUE(a.same_contents(b));
  EXPECT_EQ(a.recurrent_bytes(), static_cast<size_t>((3 * 5 + 2 * 3 * 2) * 4));
}

void append_rows(SequenceState& st, int64_t n) {
  std::vector<float> row(static_cast<size_t>(st.shape().kv_dim), 1.5f);
  st.prepare_append(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < st.shape().n_attn_layers; ++l)
      st.write_kv(l, st.n_pos() + i, row.data(), row.data());
  st.commit_append(n);
}

// KV cache types: each stored row reads back as the value rounded once (BF16 / F16 by the
// exact conversions of tensor/dtype.h, Q8_0 by ggml's quantize_row_q8_0 over each 32 dims of a
// head), pages are sized by type, and copies keep the stored bytes.
StateShape typed_shape(KvTypes t, int64_t head_dim, int64_t heads) {
  StateShape s;
  s.n_attn_layers = 2;
  s.kv_dim = head_dim * heads;
  s.kv_head_dim = head_dim;
  s.page_tokens = 8;
  s.kv_types = t;
  return s;
}

// The value `x` (one head's row, hd dims) reads back as, per the rounding rule.
std::vector<float> rounded(DType t, const std::vector<float>& x, int64_t hd) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == DType::BF16) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
    if (t == DType::F16) y[i] = f16_to_f32(f32_to_f16(x[i]));
    if (t == DType::F32) y[i] = x[i];
  }
  if (t == DType::Q8_0)
    for (size_t h0 = 0; h0 < x.size(); h0 += static_cast<size_t>(hd))
      for (int64_t c = 0; c < hd; c += 32) {
        // A short last block is a whole block padded with zeros (zeros never raise amax).
        float blk[32] = {};
        const int64_t m = std::min<int64_t>(32, hd - c);
        std::memcpy(blk, x.data() + h0 + c, static_cast<size_t>(m) * 4);
        BlockQ8_0 q;
        quantize_row_q8_0(blk, &q, 32);
        float back[32];
        dequantize_row_q8_0(&q, back, 32);
        std::memcpy(y.data() + h0 + c, back, static_cast<size_t>(m) * 4);
      }
  return y;
}

TEST(SequenceState, KvTypesRoundOnceWhenWritten) {
  std::mt19937_64 r(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0})
    for (int64_t hd : {32, 40, 24, 64}) {
      const KvTypes kv{t, t == DType::Q8_0 ? DType::F16 : t};
      SequenceState st(typed_shape(kv, hd, 2));
      const int64_t n = 2 * hd, T = 19;
      std::vector<std::vector<float>> ks, vs;
      st.prepare_append(T);
      for (int64_t p = 0; p < T; ++p) {
        std::vector<float> k(static_cast<size_t>(n)), v(k.size());
        for (auto& x : k) x = nd(r);
        for (auto& x : v) x = nd(r);
        if (p == 3) k[5] = v[7] = 0.0f;  // zeros and a whole zero block
        if (p == 4) std::fill(k.begin(), k.end(), 0.0f);
        st.write_kv(1, p, k.data(), v.data());
        ks.push_back(k);
        vs.push_back(v);
      }
      st.commit_append(T);
      std::vector<float> got(static_cast<size_t>(n));
      for (int64_t p = 0; p < T; ++p) {
        st.read_k(1, p, got.data());
        const auto want_k = rounded(kv.k, ks[p], hd);
        ASSERT_EQ(std::memcmp(got.data(), want_k.data(), got.size() * 4), 0)
            << kv_type_name(t) << " hd " << hd << " K pos " << p;
        st.read_v(1, p, got.data());
        const auto want_v = rounded(kv.v, vs[p], hd);
        ASSERT_EQ(std::memcmp(got.data(), want_v.data(), got.size() * 4), 0)
            << kv_type_name(t) << " hd " << hd << " V pos " << p;
      }
      SequenceState c = st.clone();
      EXPECT_TRUE(c.same_contents(st));
    }
}

TEST(SequenceState, PagesSizedByKvType) {
  // qwen3.5-0.8b: 6 attention layers, 2 K/V heads of 256 dims, 64-token pages.
  auto page = [](KvTypes t) {
    StateShape s;
    s.n_attn_layers = 6;
    s.kv_dim = 512;
    s.kv_head_dim = 256;
    s.kv_types = t;
    return KvPage(s).bytes();
  };
  const size_t f32 = page({DType::F32, DType::F32});
  EXPECT_EQ(f32, size_t{6} * 2 * 64 * 512 * 4);  // 24576 bytes a token
  EXPECT_EQ(page({DType::BF16, DType::BF16}), f32 / 2);
  EXPECT_EQ(page({DType::F16, DType::F16}), f32 / 2);
  // Q8_0: a byte a value plus an f16 scale per 32 values.
  EXPECT_EQ(page({DType::Q8_0, DType::Q8_0}), size_t{6} * 2 * 64 * (512 + 16 * 2));
  EXPECT_EQ(page({DType::F16, DType::Q8_0}), size_t{6} * 64 * (512 * 2 + 512 + 32));
  StateShape s = typed_shape({DType::F16, DType::F16}, 32, 1);
  EXPECT_EQ(static_cast<size_t>(s.page_bytes()), KvPage(s).bytes());
  const int64_t before = KvPage::live_bytes();
  {
    KvPage p(s);
    EXPECT_EQ(KvPage::live_bytes() - before, s.page_bytes());
  }
  EXPECT_EQ(KvPage::live_bytes(), before);
}

TEST(SequenceState, ParseKvType) {
  DType t = DType::F32;
  EXPECT_TRUE(parse_kv_type("q8_0", &t));
  EXPECT_EQ(t, DType::Q8_0);
  EXPECT_TRUE(parse_kv_type("BF16", &t));
  EXPECT_EQ(t, DType::BF16);
  EXPECT_TRUE(parse_kv_type("f16", &t));
  EXPECT_EQ(t, DType::F16);
  EXPECT_TRUE(parse_kv_type("f32", &t));
  EXPECT_EQ(t, DType::F32);
  for (const char* bad : {"", "q4_0", "fp16", "f16 ", "q8", "f64", "i8"}) {
    EXPECT_FALSE(parse_kv_type(bad, &t)) << bad;
  }
  EXPECT_EQ(t, DType::F32);
}

TEST(SequenceStateDeath, ResumeWithPagesOfAnotherType) {
  SequenceState a(typed_shape({DType::F16, DType::F16}, 32, 1));
  append_rows(a, 3);
  SequenceState b(typed_shape({DType::BF16, DType::F16}, 32, 1));
  EXPECT_DEATH(b.resume(a.pages(), nullptr, 3), "");
}

// Freed states, snapshots and pages are reused through StateBufferPool within its capacity: a
// reused state and page read as zeros, a snapshot holds its state's bytes whatever its buffer
// held before, nothing is kept without capacity or past it, and clear() keeps nothing.
TEST(StateBufferPool, ReusesWithinCapacity) {
  StateBufferPool::clear();
  const StateShape sh = shape(1);
  const int64_t rec = sh.rec_floats() * 4, page = sh.page_bytes();
  auto dirty = [&](SequenceState& st) {
    append(st, 6, 7.0f);  // 2 pages
    for (int64_t i = 0; i < sh.rec_floats(); ++i) st.conv(0)[i] = 3.0f + static_cast<float>(i);
  };
  // No capacity (no engine): nothing is kept.
  ASSERT_EQ(StateBufferPool::capacity(), 0);
  {
    SequenceState st(sh);
    dirty(st);
  }
  EXPECT_EQ(StateBufferPool::pooled_bytes(), 0);

  StateBufferPool::add_capacity(1 << 20);
  const int64_t reused0 = StateBufferPool::reused_count();
  {
    SequenceState st(sh);
    dirty(st);
    auto snap = st.take_snapshot();
  }
  // The state's and the snapshot's buffers and both pages.
  EXPECT_EQ(StateBufferPool::pooled_bytes(), 2 * rec + 2 * page);
  {
    SequenceState st(sh);  // a dirty buffer, handed out as zeros
    for (int64_t i = 0; i < sh.rec_floats(); ++i) ASSERT_EQ(st.conv(0)[i], 0.0f) << i;
    st.prepare_append(1);  // a dirty page, handed out as zeros
    const KvPage& pg = st.page(0);
    for (size_t i = 0; i < pg.bytes(); ++i) ASSERT_EQ(pg.raw()[i], std::byte{0}) << i;
    for (int64_t i = 0; i < sh.rec_floats(); ++i) st.conv(0)[i] = -1.0f - static_cast<float>(i);
    auto snap = st.take_snapshot();  // the other dirty buffer, overwritten
    ASSERT_EQ(std::memcmp(snap->rec.data(), st.conv(0), static_cast<size_t>(rec)), 0);
    EXPECT_EQ(StateBufferPool::reused_count() - reused0, 3);
    EXPECT_EQ(StateBufferPool::pooled_bytes(), page);
  }
  // Capacity rec: while one state is live another one's freed buffer is not kept (live + it
  // would pass the capacity); once none is live, it is.
  StateBufferPool::clear();
  StateBufferPool::add_capacity(rec - (1 << 20));
  {
    SequenceState a(sh);
    { SequenceState b(sh); }
    EXPECT_EQ(StateBufferPool::pooled_bytes(), 0);
    EXPECT_EQ(SequenceState::live_bytes(), rec);
    SequenceState c = std::move(a);  // a move hands nothing back
    EXPECT_EQ(StateBufferPool::pooled_bytes(), 0);
    EXPECT_EQ(SequenceState::live_bytes(), rec);
  }
  EXPECT_EQ(SequenceState::live_bytes(), 0);
  EXPECT_EQ(StateBufferPool::pooled_bytes(), rec);
  StateBufferPool::clear();
  EXPECT_EQ(StateBufferPool::pooled_bytes(), 0);
  // A smaller capacity trims what is pooled.
  { SequenceState st(sh); }
  EXPECT_EQ(StateBufferPool::pooled_bytes(), rec);
  StateBufferPool::add_capacity(-rec);
  EXPECT_EQ(StateBufferPool::pooled_bytes(), 0);
  EXPECT_EQ(StateBufferPool::capacity(), 0);
}

}  // namespace
}  // namespace rw
