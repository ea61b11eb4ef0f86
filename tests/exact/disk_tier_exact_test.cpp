// The prefix cache over a disk tier keeps the exactness contract: random trees of prompts
// (edits, extensions, repeats, truncations) under a RAM budget so small that most resume points
// come back from disk, with restarts (a new engine and tier on the same directory; some after a
// clean flush, some as after a crash, with files damaged in between): every request's first
// logits and tokens are bit-identical (memcmp) to a cold run with the cache off. All families.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "rewind/base/thread_pool.h"
#include "rewind/cache/disk_tier.h"
#include "rewind/engine/engine.h"
#include "test_util.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

class DiskTierExact : public ::testing::TestWithParam<std::string> {};

TEST_P(DiskTierExact, RandomPromptTreesWithRestartsMatchColdRuns) {
  Model& m = test::cached_model(test::fixture_dir(GetParam()));
  const int64_t V = m.config().vocab_size;
  const std::string dir = fs::temp_directory_path().string() + "/rewind_disk_exact_" +
                          std::to_string(::getpid()) + "_" + GetParam();
  fs::remove_all(dir);
  ThreadPool pool(2, 0);
  EngineOptions on;
  const size_t snapshot_bytes = static_cast<size_t>(m.state_shape().rec_floats()) * sizeof(float);
  on.cache.budget_bytes = 3 * snapshot_bytes + (64 << 10);  // RAM holds next to nothing
  on.cache.policy.interval = 24;
  on.cache.policy.max_per_branch = 6;
  on.step_tokens = 40;
  EngineOptions off = on;
  off.cache_enabled = false;
  off.step_tokens = 1000;
  Engine cold(m, nullptr, off);

  DiskTier::Options dopt;
  dopt.dir = dir;
  dopt.fingerprint = Hash128{0x5eed, std::hash<std::string>()(GetParam())};
  dopt.log = [](const std::string&) {};
  std::unique_ptr<Engine> cached;
  auto start = [&] {
    cached.reset();  // the old engine and its tier go first (the directory lock)
    auto t = DiskTier::open(dopt);
    ASSERT_TRUE(t.ok()) << t.error_message();
    EngineOptions o = on;
    o.cache.tier = std::shared_ptr<CacheTier>(std::move(t).value());
    cached = std::make_unique<Engine>(m, &pool, o);
  };
  start();

  std::mt19937_64 rng(std::hash<std::string>()(GetParam()) + 1);
  std::vector<std::vector<int32_t>> seen;
  int64_t tier_hits = 0, tier_tokens = 0, damaged = 0;
  const int n_requests = 70;
  for (int i = 0; i < n_requests; ++i) {
    if (i > 0 && i % 12 == 0) {
      // A restart; every other one damages a few files first (flip a payload byte, truncate).
      const CacheStats st = cached->cache()->stats();
      tier_hits += st.tier_hits;
      tier_tokens += st.tier_tokens;
      damaged += tier_named(st.tiers, "disk").corrupt;
      cached.reset();
      if (i % 24 == 0) {
        int k = 0;
        for (const auto& e : fs::directory_iterator(dir)) {
          const std::string ext = e.path().extension().string();
          if (ext != ".ckpt" && ext != ".page") continue;
          if (k % 3 == 0) {
            std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(100);
            f.put('\x5a');
          } else if (k % 3 == 1) {
            fs::resize_file(e.path(), fs::file_size(e.path()) - 4);
          }
          if (++k >= 6) break;
        }
      }
      start();
    }
    std::vector<int32_t> prompt;
    const int op = seen.empty() ? 0 : static_cast<int>(rng() % 5);
    if (op == 0) {
      prompt = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 200), V);
    } else {
      prompt = seen[rng() % seen.size()];
      if (op == 1) {
        auto more = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 60), V);
        prompt.insert(prompt.end(), more.begin(), more.end());
      } else if (op == 2) {
        const size_t at = rng() % prompt.size();
        prompt[at] = static_cast<int32_t>((prompt[at] + 1 + rng() % (V - 1)) % V);
        if (rng() % 2) {
          prompt.resize(at + 1);
          auto tail = test::random_tokens(rng, static_cast<int64_t>(rng() % 80), V);
          prompt.insert(prompt.end(), tail.begin(), tail.end());
        }
      } else if (op == 3) {
        prompt.resize(1 + rng() % prompt.size());
      }
    }
    Request req;
    req.prompt = prompt;
    req.max_tokens = 1 + static_cast<int32_t>(rng() % 6);
    req.keep_first_logits = true;
    auto a = cached->generate(req);
    ASSERT_TRUE(a.ok()) << a.error_message();
    auto b = cold.generate(req);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(a->first_logits.size(), b->first_logits.size());
    ASSERT_EQ(0, std::memcmp(a->first_logits.data(), b->first_logits.data(),
                             a->first_logits.size() * sizeof(float)))
        << "request " << i << " op " << op << " n=" << prompt.size() << " resumed at "
        << a->report.resumed_at;
    ASSERT_EQ(a->tokens, b->tokens) << "request " << i;
    EXPECT_GE(a->report.rerun_tokens, 1);
    cached->cache()->check_invariants();
    seen.push_back(prompt);
    auto hist = prompt;
    hist.insert(hist.end(), a->tokens.begin(), a->tokens.end() - 1);
    seen.push_back(hist);
  }
  const CacheStats st = cached->cache()->stats();
  tier_hits += st.tier_hits;
  tier_tokens += st.tier_tokens;
  damaged += tier_named(st.tiers, "disk").corrupt;
  EXPECT_GT(tier_hits, n_requests / 6) << "resume points should come back from disk often";
  EXPECT_GT(tier_tokens, 0);
  EXPECT_GT(damaged, 0) << "some damaged file should have been met";
  cached.reset();
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, DiskTierExact, ::testing::ValuesIn(test::all_families()));

}  // namespace
}  // namespace rw
