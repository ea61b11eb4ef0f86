// The bit-exact invariant (docs/ARCHITECTURE.md): for random prompts on tiny models of all five
// families, every position's logits are byte-identical (memcmp) whether the prompt runs in one
// piece, in random chunks, one token at a time, batched with other random sequences, after the
// state was copied into a fresh object at a random position, or with another thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model_run.h"
#include "rewind/base/thread_pool.h"
#include "test_util.h"

namespace rw {
namespace {

using test::same_bytes;

struct Case {
  std::string variant;
  WeightStore store;
  KvTypes kv = test::kF32Kv;
};

class ForwardExact : public ::testing::TestWithParam<Case> {
 protected:
  Model& model() {
    return test::cached_model(test::fixture_dir(GetParam().variant), GetParam().store,
                              GetParam().kv);
  }
  int64_t V() { return model().config().vocab_size; }

  // All-position logits of `tokens` run as the given chunks (sizes summing to tokens.size()).
  std::vector<float> run_chunks(const std::vector<int32_t>& tokens,
                                const std::vector<int64_t>& chunks, ThreadPool* pool) {
    Model& m = model();
    SequenceState st = m.new_state();
    std::vector<float> all, part;
    int64_t b = 0;
    for (int64_t n : chunks) {
      SeqInput in{&st, std::span<const int32_t>(tokens.data() + b, static_cast<size_t>(n)), {}};
      for (int32_t i = 0; i < n; ++i) in.logit_rows.push_back(i);
      EXPECT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &part, pool).ok());
      all.insert(all.end(), part.begin(), part.end());
      b += n;
    }
    EXPECT_EQ(b, static_cast<int64_t>(tokens.size()));
    return all;
  }
};

TEST_P(ForwardExact, ChunkingTokenByTokenAndThreads) {
  std::mt19937_64 rng(1234);
  ThreadPool pool2(2, 0);  // every job shared, however small
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 150);
    auto tokens = test::random_tokens(rng, n, V());
    const auto whole = run_chunks(tokens, {n}, nullptr);
    // Random chunks.
    std::vector<int64_t> chunks;
    for (int64_t left = n; left > 0;) {
      const int64_t c = std::min<int64_t>(left, 1 + static_cast<int64_t>(rng() % 70));
      chunks.push_back(c);
      left -= c;
    }
    EXPECT_TRUE(same_bytes(whole, run_chunks(tokens, chunks, &pool2))) << "random chunks, n=" << n;
    // One token at a time.
    EXPECT_TRUE(same_bytes(
        whole, run_chunks(tokens, std::vector<int64_t>(static_cast<size_t>(n), 1), nullptr)))
        << "token by token, n=" << n;
    // Two threads, one piece.
    EXPECT_TRUE(same_bytes(whole, run_chunks(tokens, {n}, &pool2))) << "2 threads, n=" << n;
  }
}

TEST_P(ForwardExact, BatchedWithOtherSequences) {
  std::mt19937_64 rng(99);
  ThreadPool pool2(2, 0);  // every job shared, however small
  Model& m = model();
  for (int trial = 0; trial < 4; ++trial) {
    const int n_seq = 2 + static_cast<int>(rng() % 7);  // target + 1..7 others
    std::vector<std::vector<int32_t>> toks;
    std::vector<std::vector<float>> alone;
    for (int s = 0; s < n_seq; ++s) {
      toks.push_back(test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 90), V()));
      alone.push_back(run_chunks(toks.back(), {static_cast<int64_t>(toks.back().size())}, nullptr));
    }
    // Run all sequences together, each in its own random chunks, steps interleaved.
    std::vector<SequenceState> states;
    for (int s = 0; s < n_seq; ++s) states.push_back(m.new_state());
    std::vector<int64_t> done(static_cast<size_t>(n_seq), 0);
    std::vector<std::vector<float>> got(static_cast<size_t>(n_seq));
    for (;;) {
      std::vector<SeqInput> batch;
      std::vector<int> who;
      for (int s = 0; s < n_seq; ++s) {
        const int64_t left = static_cast<int64_t>(toks[s].size()) - done[s];
        if (left == 0 || rng() % 4 == 0) continue;  // sometimes sit a step out
        const int64_t c = std::min<int64_t>(left, 1 + static_cast<int64_t>(rng() % 40));
        SeqInput in{&states[s],
                    std::span<const int32_t>(toks[s].data() + done[s], static_cast<size_t>(c)),
                    {}};
        for (int32_t i = 0; i < c; ++i) in.logit_rows.push_back(i);
        batch.push_back(in);
        who.push_back(s);
        done[s] += c;
      }
      if (batch.empty()) {
        bool all_done = true;
        for (int s = 0; s < n_seq; ++s)
          all_done = all_done && done[s] == static_cast<int64_t>(toks[s].size());
        if (all_done) break;
        continue;
      }
      std::vector<float> logits;
      ASSERT_TRUE(m.forward(batch, &logits, &pool2).ok());
      size_t off = 0;
      for (size_t i = 0; i < batch.size(); ++i) {
        const size_t cnt = batch[i].logit_rows.size() * static_cast<size_t>(V());
        got[who[i]].insert(got[who[i]].end(), logits.begin() + off, logits.begin() + off + cnt);
        off += cnt;
      }
    }
    for (int s = 0; s < n_seq; ++s) EXPECT_TRUE(same_bytes(alone[s], got[s])) << "sequence " << s;
  }
}

TEST_P(ForwardExact, CopyStateAtRandomPositionAndContinue) {
  std::mt19937_64 rng(7);
  Model& m = model();
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t n = 2 + static_cast<int64_t>(rng() % 140);
    auto tokens = test::random_tokens(rng, n, V());
    const auto whole = run_chunks(tokens, {n}, nullptr);
    const int64_t cut = 1 + static_cast<int64_t>(rng() % (n - 1));
    SequenceState a = m.new_state();
    std::vector<float> l1, l2;
    SeqInput in1{&a, std::span<const int32_t>(tokens.data(), static_cast<size_t>(cut)), {}};
    for (int32_t i = 0; i < cut; ++i) in1.logit_rows.push_back(i);
    ASSERT_TRUE(m.forward(std::span<SeqInput>(&in1, 1), &l1, nullptr).ok());
    SequenceState fresh = m.new_state();
    fresh.restore_from(a);
    // Disturb the original afterwards: the copy must not share mutable state with it.
    SeqInput junk{&a, std::span<const int32_t>(tokens.data(), 3), {}};
    ASSERT_TRUE(m.forward(std::span<SeqInput>(&junk, 1), &l2, nullptr).ok());
    SeqInput in2{
        &fresh, std::span<const int32_t>(tokens.data() + cut, static_cast<size_t>(n - cut)), {}};
    for (int32_t i = 0; i < n - cut; ++i) in2.logit_rows.push_back(i);
    ASSERT_TRUE(m.forward(std::span<SeqInput>(&in2, 1), &l2, nullptr).ok());
    l1.insert(l1.end(), l2.begin(), l2.end());
    EXPECT_TRUE(same_bytes(whole, l1)) << "cut at " << cut << " of " << n;
    // And clone() of a state at the end equals the state itself.
    SequenceState c = fresh.clone();
    EXPECT_TRUE(c.same_contents(fresh));
  }
}

// Every family with F32 weights in every KV cache type; BF16 weights with F32 KV.
std::vector<Case> cases() {
  std::vector<Case> c;
  for (const std::string& v : test::all_families())
    for (const KvTypes& kv : test::all_kv_types()) c.push_back({v, WeightStore::F32, kv});
  for (const char* v :
       {"qwen3_5", "qwen3_next", "granitemoehybrid", "nemotron_h", "nemotron_h_moe"})
    c.push_back({v, WeightStore::BF16, test::kF32Kv});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Families, ForwardExact, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.variant +
                                  (info.param.store == WeightStore::BF16 ? "_bf16" : "_f32") +
                                  "_kv_" + test::kv_name(info.param.kv);
                         });

// A KV type changes the values attention reads (the logits differ from F32 KV's) but little:
// the same greedy token almost everywhere, the logits within a small distance.
TEST(ForwardKvTypes, RoundedKvChangesLogitsALittle) {
  std::mt19937_64 rng(7);
  for (const std::string& v : test::all_families()) {
    Model& f32 = test::cached_model(test::fixture_dir(v), WeightStore::F32, test::kF32Kv);
    const int64_t V = f32.config().vocab_size, n = 120;
    const auto tokens = test::random_tokens(rng, n, V);
    auto logits = [&](Model& m) {
      SequenceState st = m.new_state();
      SeqInput in{&st, std::span<const int32_t>(tokens), {}};
      for (int32_t i = 0; i < n; ++i) in.logit_rows.push_back(i);
      std::vector<float> out;
      EXPECT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &out, nullptr).ok());
      return out;
    };
    const auto base = logits(f32);
    for (const KvTypes& kv : test::all_kv_types()) {
      if (kv.k == DType::F32 && kv.v == DType::F32) continue;
      const auto got = logits(test::cached_model(test::fixture_dir(v), WeightStore::F32, kv));
      ASSERT_EQ(got.size(), base.size());
      EXPECT_FALSE(same_bytes(got, base)) << v << " " << test::kv_name(kv);
      // Per position the largest change of a logit; its median (a MoE routing flip at a
      // position or two moves those positions' logits further).
      std::vector<double> diffs;
      double max_abs = 0;
      int agree = 0;
      for (int64_t t = 0; t < n; ++t) {
        const float* a = base.data() + t * V;
        const float* b = got.data() + t * V;
        agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
        double d = 0;
        for (int64_t i = 0; i < V; ++i) {
          d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
          max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i])));
        }
        diffs.push_back(d);
      }
      std::sort(diffs.begin(), diffs.end());
      EXPECT_GE(agree, n * 9 / 10) << v << " " << test::kv_name(kv);
      EXPECT_LT(diffs[diffs.size() / 2], 0.01 * max_abs) << v << " " << test::kv_name(kv);
    }
  }
}

}  // namespace
}  // namespace rw
