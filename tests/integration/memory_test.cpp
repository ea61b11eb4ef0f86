// Memory accounting (docs/ARCHITECTURE.md, "Memory"): pages and snapshots count themselves
// exactly, the engine's report equals what is alive, the forward's buffers stay under their
// bound, a request's checkpoints are capped, and /metrics shows every kind and the bound.
#include "rewind/base/memory.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "event_collector.h"
#include "rewind/base/thread_pool.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/server/metrics.h"
#include "rewind/state/buffer_pool.h"
#include "rewind/state/sequence_state.h"
#include "test_util.h"

namespace rw {
namespace {

StateShape shape() {
  StateShape s;
  s.n_attn_layers = 2;
  s.kv_dim = 4;
  s.n_rec_layers = 1;
  s.conv_rows = 3;
  s.conv_dim = 5;
  s.ssm_layer_floats = 12;  // [2, 3, 2]
  s.page_tokens = 4;
  return s;
}

TEST(MemoryAccounting, PagesAndSnapshotsCountThemselves) {
  const StateShape sh = shape();
  const int64_t page_bytes = sh.n_attn_layers * 2 * sh.page_tokens * sh.kv_dim * 4;
  const int64_t pages0 = KvPage::live_bytes(), snaps0 = Snapshot::live_bytes();
  {
    SequenceState st(sh);
    st.prepare_append(10);  // 3 pages of 4 positions
    st.commit_append(10);
    EXPECT_EQ(KvPage::live_bytes() - pages0, 3 * page_bytes);
    SequenceState copy = st.clone();  // shares the pages: nothing new
    EXPECT_EQ(KvPage::live_bytes() - pages0, 3 * page_bytes);
    copy.prepare_append(1);  // copy on write of the last, shared page
    EXPECT_EQ(KvPage::live_bytes() - pages0, 4 * page_bytes);
    auto s1 = st.take_snapshot();
    auto s2 = copy.take_snapshot();
    EXPECT_EQ(Snapshot::live_bytes() - snaps0, 2 * sh.rec_floats() * 4);
    EXPECT_EQ(static_cast<int64_t>(s1->bytes()), sh.rec_floats() * 4);
    s1.reset();
    EXPECT_EQ(Snapshot::live_bytes() - snaps0, sh.rec_floats() * 4);
  }
  EXPECT_EQ(KvPage::live_bytes(), pages0);
  EXPECT_EQ(Snapshot::live_bytes(), snaps0);
}

TEST(MemoryAccounting, ReportAddsByKind) {
  MemoryReport r;
  r.add("weights", 10);
  r.add("http", 5);
  r.add("weights", 7);
  ASSERT_EQ(r.kinds.size(), 2u);
  EXPECT_EQ(r.get("weights"), 17);
  EXPECT_EQ(r.get("absent"), 0);
  EXPECT_EQ(r.total(), 22);
  EXPECT_GT(process_resident_bytes(), 0);
}

TEST(MemoryAccounting, CapCutsKeepsAnchorAndNewest) {
  std::vector<int64_t> cuts = {2, 5, 9, 12, 20, 31, 40};
  EXPECT_EQ(cap_cuts(cuts, 5, 0), cuts);  // no cap
  EXPECT_EQ(cap_cuts(cuts, 5, 3), (std::vector<int64_t>{5, 31, 40}));
  EXPECT_EQ(cap_cuts(cuts, -1, 3), (std::vector<int64_t>{20, 31, 40}));
  EXPECT_EQ(cap_cuts(cuts, 31, 3), (std::vector<int64_t>{20, 31, 40}));  // anchor among the newest
  EXPECT_EQ(cap_cuts(cuts, -1, 1), (std::vector<int64_t>{31, 40}));      // at least 2
  EXPECT_EQ(cap_cuts({4, 8}, -1, 5), (std::vector<int64_t>{4, 8}));
}

TEST(MemoryAccounting, EngineReportsWhatIsAliveAndStaysUnderItsBound) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_5"));
  const int64_t V = m.config().vocab_size;
  const int64_t pages0 = KvPage::live_bytes(), snaps0 = Snapshot::live_bytes();
  ThreadPool pool(2);
  EngineOptions opt;
  opt.max_running = 3;
  opt.ctx_size = 512;
  opt.step_tokens = 48;
  opt.cache.policy.interval = 16;
  opt.cache.policy.max_per_branch = 4;
  opt.cache.budget_bytes = 1 << 20;
  {
    BatchEngine eng(m, &pool, opt);
    test::Collector col;
    std::mt19937_64 rng(5);
    std::vector<int64_t> boundaries;
    for (int64_t b = 3; b < 200; b += 7) boundaries.push_back(b);  // many message starts
    for (int i = 0; i < 6; ++i) {
      Request r;
      r.prompt = test::random_tokens(rng, 200 + i * 20, V);
      r.boundaries = boundaries;
      r.max_tokens = 8;
      ASSERT_TRUE(eng.submit(r, col.cb()).ok());
    }
    col.wait(6);
    // The last final event comes just before its sequence is dropped: wait for the step's end.
    while (eng.metrics().running != 0 || eng.metrics().requests_finished != 6)
      std::this_thread::yield();
    for (auto& [id, ev] : col.final_ev) {
      // Prefill checkpoints capped at max_per_branch (without the cap: about 30 boundaries), a
      // grid one crossed while decoding 8 tokens, the one at the end of the reply.
      EXPECT_LE(ev.report.snapshots_taken, 4 + 1 + 1) << id;
    }
    const EngineMetrics em = eng.metrics();
    // Nothing runs: every page and snapshot alive is the cache's (exact, counted by each).
    EXPECT_EQ(em.memory.get("kv_pages") - pages0, static_cast<int64_t>(em.cache.bytes_pages));
    EXPECT_EQ(em.memory.get("snapshots") - snaps0, static_cast<int64_t>(em.cache.bytes_snapshots));
    EXPECT_EQ(em.memory.get("weights"), static_cast<int64_t>(m.packed_bytes()));
    EXPECT_EQ(em.memory.get("activations"), static_cast<int64_t>(m.scratch_bytes()));
    EXPECT_GT(em.memory.get("activations"), 0);
    const MemoryReport bound = engine_memory_bound(m, opt, 2);
    EXPECT_LE(em.memory.get("activations") + em.memory.get("logits"), bound.get("activations"));
    EXPECT_EQ(bound.get("cache"), static_cast<int64_t>(opt.cache.budget_bytes));
    EXPECT_LE(em.memory.get("kv_pages") + em.memory.get("snapshots") - pages0 - snaps0,
              bound.get("cache") + bound.get("slots"));
    // Six requests, three at a time under a small cache: freed states, snapshots and pages were
    // reused, and what is kept for reuse stays within the same terms.
    EXPECT_GT(StateBufferPool::reused_count(), 0);
    EXPECT_EQ(StateBufferPool::capacity(), bound.get("cache") + bound.get("slots"));
    EXPECT_LE(em.memory.get("kv_pages") + em.memory.get("snapshots") + em.memory.get("state_pool") -
                  pages0 - snaps0,
              bound.get("cache") + bound.get("slots"));
    EXPECT_TRUE(em.memory_bound.kinds.empty());
    eng.set_memory_bound(bound);
    EXPECT_EQ(eng.metrics().memory_bound.total(), bound.total());
  }
  // The engine and its cache are gone: so are their pages and snapshots, and the buffers kept
  // for reuse (no engine left to grant them).
  EXPECT_EQ(KvPage::live_bytes(), pages0);
  EXPECT_EQ(Snapshot::live_bytes(), snaps0);
  EXPECT_EQ(StateBufferPool::capacity(), 0);
  EXPECT_EQ(StateBufferPool::pooled_bytes(), 0);
}

// The bound counts the grid checkpoints of the grid the engine will run: widened for a large
// recurrent state (size_by_state, as serve sets it) before the engine is made, as after.
TEST(MemoryAccounting, BoundUsesTheSizedGrid) {
  Model& m = test::cached_model(test::fixture_dir("granitemoehybrid"));
  const StateShape sh = m.state_shape();
  EngineOptions opt;
  opt.ctx_size = 4096;
  opt.cache.policy.interval = 16;
  opt.cache.policy.size_by_state = true;
  const int64_t sized =
      CheckpointPolicy::size_grid(16, static_cast<size_t>(sh.rec_floats()) * sizeof(float),
                                  static_cast<size_t>(sh.kv_bytes_per_token()));
  ASSERT_GT(sized, 16);  // the fixture's state outweighs 16 tokens of KV
  EngineOptions as_set = opt, unsized = opt;
  as_set.cache.policy.size_by_state = unsized.cache.policy.size_by_state = false;
  as_set.cache.policy.interval = sized;
  const int64_t slots = engine_memory_bound(m, opt, 1).get("slots");
  EXPECT_EQ(slots, engine_memory_bound(m, as_set, 1).get("slots"));
  EXPECT_GT(engine_memory_bound(m, unsized, 1).get("slots"), slots);
  ThreadPool pool(1);
  BatchEngine eng(m, &pool, opt);
  EXPECT_EQ(eng.options().cache.policy.interval, sized);
  EXPECT_EQ(engine_memory_bound(m, eng.options(), 1).get("slots"), slots);
}

TEST(MemoryAccounting, ScratchBoundCoversTheLargestStep) {
  for (const std::string& fam : test::fixture_variants()) {
    Model& m = test::cached_model(test::fixture_dir(fam));
    std::mt19937_64 rng(9);
    auto toks = test::random_tokens(rng, 100, m.config().vocab_size);
    SequenceState a = m.new_state(), b = m.new_state();
    std::vector<SeqInput> batch = {{&a, std::span<const int32_t>(toks.data(), 60), {59}},
                                   {&b, std::span<const int32_t>(toks.data(), 40), {39}}};
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(batch, &logits, nullptr).ok());
    EXPECT_GT(m.scratch_bytes(), 0u) << fam;
    EXPECT_LE(m.scratch_bytes(), m.scratch_bytes_bound(100, 100, 1)) << fam;
  }
}

TEST(MemoryAccounting, MetricsShowKindsResidentAndBound) {
  EngineMetrics em;
  em.memory.add("weights", 1000);
  em.memory.add("kv_pages", 2048);
  em.memory_bound.add("weights", 1000);
  em.memory_bound.add("fixed", 500);
  ServerMetrics sm;
  sm.track_memory("http_buffers", [] { return int64_t{4096}; });
  const std::string text = sm.prometheus(em);
  EXPECT_NE(text.find("rewind_memory_bytes{kind=\"weights\"} 1000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rewind_memory_bytes{kind=\"kv_pages\"} 2048\n"), std::string::npos);
  EXPECT_NE(text.find("rewind_memory_bytes{kind=\"http_buffers\"} 4096\n"), std::string::npos);
  EXPECT_NE(text.find("rewind_memory_bound_bytes 1500\n"), std::string::npos);
  EXPECT_NE(text.find("rewind_memory_bound_term_bytes{term=\"fixed\"} 500\n"), std::string::npos);
  EXPECT_NE(text.find("rewind_process_resident_bytes "), std::string::npos);
  EXPECT_EQ(text.find("rewind_process_resident_bytes 0\n"), std::string::npos);
}

}  // namespace
}  // namespace rw
