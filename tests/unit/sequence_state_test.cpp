// SequenceState: capability queries (can_trim_to), copy-on-write KV pages, exact copies.
#include "rewind/state/sequence_state.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace rw
