// The prefix cache's exactness contract (docs/ARCHITECTURE.md): for random trees of prompts
// (shared prefixes, edits at random points, extensions, repeats, extensions through generated
// replies), under a byte budget small enough that eviction happens, every request served with
// the cache produces logits and tokens bit-identical (memcmp) to a cold run of the same prompt
// with the cache off. Tiny models of all three families.
#include <gtest/gtest.h>

#include <cstring>

#include "rewind/base/thread_pool.h"
#include "rewind/cache/prefix_cache.h"
#include "rewind/engine/engine.h"
#include "test_util.h"

namespace rw {
namespace {

class CacheResumeExact : public ::testing::TestWithParam<std::string> {};

TEST_P(CacheResumeExact, RandomPromptTreesMatchColdRuns) {
  Model& m = test::param_model(GetParam());
  const int64_t V = m.config().vocab_size;
  ThreadPool pool(2, 0);  // every job shared, however small
  EngineOptions on;
  // A few pages and snapshots, so that eviction happens: a Mamba2 snapshot is 20-30 times a
  // tiny GDN model's, so the budget holds at least a dozen of the model's snapshots.
  const size_t snapshot_bytes = static_cast<size_t>(m.state_shape().rec_floats()) * sizeof(float);
  on.cache.budget_bytes = std::max<size_t>(320 << 10, 12 * snapshot_bytes);
  on.cache.policy.interval = 24;
  on.cache.policy.max_per_branch = 6;
  on.step_tokens = 40;
  EngineOptions off = on;
  off.cache_enabled = false;
  off.step_tokens = 1000;  // the cold run goes in one piece: cutting must not matter
  Engine cached(m, &pool, on);
  Engine cold(m, nullptr, off);

  std::mt19937_64 rng(std::hash<std::string>()(test::param_family(GetParam())));
  std::vector<std::vector<int32_t>> seen;  // prompts and prompt+reply histories so far
  int64_t hits = 0, evictions_before = 0;
  const int n_requests = 90;
  for (int i = 0; i < n_requests; ++i) {
    std::vector<int32_t> prompt;
    const int op = seen.empty() ? 0 : static_cast<int>(rng() % 5);
    if (op == 0) {  // fresh prompt
      prompt = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 200), V);
    } else {
      const auto& base = seen[rng() % seen.size()];
      prompt = base;
      if (op == 1) {  // extension (possibly through a generated reply)
        auto more = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 60), V);
        prompt.insert(prompt.end(), more.begin(), more.end());
      } else if (op == 2) {  // edit at a random point, maybe with a different tail
        const size_t at = rng() % prompt.size();
        prompt[at] = static_cast<int32_t>((prompt[at] + 1 + rng() % (V - 1)) % V);
        if (rng() % 2) {
          prompt.resize(at + 1);
          auto tail = test::random_tokens(rng, static_cast<int64_t>(rng() % 80), V);
          prompt.insert(prompt.end(), tail.begin(), tail.end());
        }
      } else if (op == 3) {  // truncation: a prefix of a cached history
        prompt.resize(1 + rng() % prompt.size());
      }  // op 4: exact repeat
    }
    Request req;
    req.prompt = prompt;
    req.max_tokens = 1 + static_cast<int32_t>(rng() % 6);
    req.keep_first_logits = true;
    if (rng() % 2) {  // chat-like boundaries
      const int64_t n = static_cast<int64_t>(prompt.size());
      for (int b = 0; b < 3 && n > 2; ++b)
        req.boundaries.push_back(1 + static_cast<int64_t>(rng() % (n - 1)));
      std::sort(req.boundaries.begin(), req.boundaries.end());
      req.boundaries.erase(std::unique(req.boundaries.begin(), req.boundaries.end()),
                           req.boundaries.end());
      req.anchor = req.boundaries.empty() ? -1 : req.boundaries.front();
    }
    auto a = cached.generate(req);
    ASSERT_TRUE(a.ok()) << a.error_message();
    Request creq = req;
    auto b = cold.generate(creq);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(a->first_logits.size(), b->first_logits.size());
    ASSERT_EQ(0, std::memcmp(a->first_logits.data(), b->first_logits.data(),
                             a->first_logits.size() * sizeof(float)))
        << "request " << i << " op " << op << " n=" << prompt.size() << " resumed at "
        << a->report.resumed_at;
    ASSERT_EQ(a->tokens, b->tokens) << "request " << i;
    // At least one prompt token always runs; never resume past the common prefix.
    EXPECT_GE(a->report.rerun_tokens, 1);
    EXPECT_LE(a->report.resumed_at, a->report.diverged_at);
    if (a->report.resumed_at > 0) ++hits;
    const CacheStats st = cached.cache()->stats();
    ASSERT_EQ(cached.cache()->bytes(), cached.cache()->bytes_by_walk());
    if (!st.over_budget) {
      EXPECT_LE(cached.cache()->bytes(), on.cache.budget_bytes);
    }
    evictions_before = st.evictions_nodes + st.evictions_snapshots;
    seen.push_back(prompt);
    auto hist = prompt;
    hist.insert(hist.end(), a->tokens.begin(), a->tokens.end() - 1);  // what the state consumed
    seen.push_back(hist);
  }
  EXPECT_GT(hits, n_requests / 6) << "the workload should hit the cache often";
  EXPECT_GT(evictions_before, 0) << "the budget should force evictions";
}

TEST_P(CacheResumeExact, ExactRepeatRerunsOneToken) {
  Model& m = test::param_model(GetParam());
  EngineOptions on;
  on.cache.policy.interval = 32;
  Engine e(m, nullptr, on);
  std::mt19937_64 rng(3);
  Request req;
  req.prompt = test::random_tokens(rng, 100, m.config().vocab_size);
  req.max_tokens = 2;
  ASSERT_TRUE(e.generate(req).ok());
  auto r = e.generate(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->report.diverged_at, 100);
  EXPECT_EQ(r->report.resumed_at, 99);
  EXPECT_EQ(r->report.rerun_tokens, 1);
  EXPECT_EQ(r->report.hit, HitKind::Exact);
}

// Resuming copies no attention KV: the resumed state's page table holds the very page objects
// the first sequence wrote (refcounts go up, no page is copied until the resumed sequence
// writes into the last, partly filled one).
TEST_P(CacheResumeExact, ResumeSharesPagesWithoutCopying) {
  Model& m = test::param_model(GetParam());
  PrefixCache::Options o;
  PrefixCache cache(o);
  std::mt19937_64 rng(11);
  auto prompt = test::random_tokens(rng, 200, m.config().vocab_size);
  SequenceState a = m.new_state();
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  std::vector<float> logits;
  for (int64_t pos = 0; pos < 200; pos += 48) {  // snapshots at 48, 96, 144, 192, 200
    const int64_t end = std::min<int64_t>(200, pos + 48);
    SeqInput in{
        &a, std::span<const int32_t>(prompt.data() + pos, static_cast<size_t>(end - pos)), {}};
    ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
    snaps.push_back(a.take_snapshot());
  }
  cache.insert(prompt, a.pages(), snaps);
  auto edited = prompt;
  edited[170] = (edited[170] + 1) % static_cast<int32_t>(m.config().vocab_size);
  auto r = cache.lookup(edited);
  ASSERT_EQ(r.resume_pos, 144);
  ASSERT_EQ(r.pages.size(), 3u);  // page 2 (positions 128..191) is only partly used by the resume
  const long uses_before = a.pages()[0].use_count();
  SequenceState b = m.new_state();
  b.resume(r.pages, r.snapshot.get(), r.resume_pos);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(b.pages()[i].get(), a.pages()[i].get()) << "page " << i;
  EXPECT_EQ(a.pages()[0].use_count(), uses_before + 1);
  const int64_t kv = m.state_shape().kv_dim;
  std::vector<float> k_before(static_cast<size_t>(kv)), k_after(static_cast<size_t>(kv));
  a.read_k(0, 170, k_before.data());
  // Appending at 144 writes into the shared, partly filled page 2: b copies it first; the full
  // pages stay shared and a's rows are untouched.
  SeqInput in{&b, std::span<const int32_t>(edited.data() + 144, 56), {55}};
  ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
  EXPECT_EQ(b.pages()[0].get(), a.pages()[0].get());
  EXPECT_EQ(b.pages()[1].get(), a.pages()[1].get());
  EXPECT_NE(b.pages()[2].get(), a.pages()[2].get());
  a.read_k(0, 170, k_after.data());
  EXPECT_EQ(k_before, k_after);
}

INSTANTIATE_TEST_SUITE_P(Families, CacheResumeExact,
                         ::testing::ValuesIn(test::with_kv_types(test::all_families())),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace rw
