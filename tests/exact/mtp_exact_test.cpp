// The fast MTP head (Model::mtp_draft, forward() with LoadOptions::mtp) on `make-model --mtp`
// models of all three families: logits against the double-precision reference (one entry at a
// time and chained drafts), the head's KV and carry cut-invariant bit for bit, greedy
// speculative decoding with MTP drafts equal to plain greedy decoding (output and final state)
// with and without the prefix cache, and a model loaded without MTP unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "engine_run.h"
#include "rewind/base/thread_pool.h"
#include "rewind/engine/engine.h"
#include "rewind/model/reference.h"
#include "test_util.h"

namespace rw {
namespace {

// `make-model --mtp --preset P` made once per process, loaded once with and once without MTP.
Model& mtp_model(const std::string& preset, bool mtp, KvTypes kv = test::kF32Kv) {
  static std::map<std::string, std::string> made;
  static std::map<std::tuple<std::string, bool, int, int>, std::unique_ptr<Model>> loaded;
  auto it = made.find(preset);
  if (it == made.end()) {
    const std::string dir = test::scratch_dir("mtp_exact_" + preset);
    int rc = 0;
    const std::string out =
        test::run_command(std::string(REWIND_BINARY) + " make-model --mtp --preset " + preset +
                              " --out " + dir + " 2>&1",
                          &rc);
    if (rc != 0) {
      std::fprintf(stderr, "make-model failed: %s\n", out.c_str());
      std::abort();
    }
    it = made.emplace(preset, dir).first;
  }
  auto key = std::make_tuple(preset, mtp, static_cast<int>(kv.k), static_cast<int>(kv.v));
  auto lt = loaded.find(key);
  if (lt == loaded.end()) {
    LoadOptions opt;
    opt.mtp = mtp;
    opt.kv_types = kv;
    auto m = Model::load(it->second, opt);
    if (!m.ok()) {
      std::fprintf(stderr, "cannot load %s: %s\n", it->second.c_str(), m.error_message().c_str());
      std::abort();
    }
    lt = loaded.emplace(key, std::move(m).value()).first;
  }
  return *lt->second;
}

Status run(Model& m, SequenceState& st, std::span<const int32_t> toks, std::vector<float>* logits,
           ThreadPool* pool, std::vector<int32_t> rows = {}) {
  SeqInput in{&st, toks, std::move(rows)};
  return m.forward(std::span<SeqInput>(&in, 1), logits, pool);
}

double max_abs_diff(const float* a, const std::vector<double>& b) {
  double w = 0;
  for (size_t i = 0; i < b.size(); ++i) w = std::max(w, std::abs(static_cast<double>(a[i]) - b[i]));
  return w;
}

constexpr double kTol = 1e-4;  // as the golden test: fp32 fast path vs the fp64 reference

class MtpExact : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpExact, EntryLogitsMatchReference) {
  Model& m = mtp_model(test::param_family(GetParam()), true);  // fp64 refs: F32 KV
  ASSERT_TRUE(m.mtp_loaded());
  const int64_t V = m.config().vocab_size;
  std::mt19937_64 rng(3);
  const auto tokens = test::random_tokens(rng, 11, V);
  const auto ref = ReferenceModel(m.config(), m.weights()).mtp_forward(tokens);
  ASSERT_EQ(ref.size(), tokens.size() - 1);
  // Entry i = (h_i, t_{i+1}): the state has consumed t_0..t_i (in uneven chunks, so every
  // entry's KV comes from a different cut), then one MTP step with last = t_{i+1}.
  SequenceState st = m.new_state();
  std::vector<float> logits, ml;
  double worst = 0;
  size_t done = 0;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (done <= i) {
      const size_t n = std::min<size_t>(1 + (i % 3), tokens.size() - 1 - done);
      ASSERT_TRUE(
          run(m, st, std::span<const int32_t>(tokens.data() + done, n), &logits, nullptr).ok());
      done += n;
    }
    // Drafting from a state that has consumed past i is not entry i: re-run from a clone at i.
    SequenceState at = m.new_state();
    ASSERT_TRUE(run(m, at, std::span<const int32_t>(tokens.data(), i + 1), &logits, nullptr).ok());
    MtpDraft d{&at, tokens[i + 1], 1, {}};
    ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), &ml, nullptr).ok());
    ASSERT_EQ(ml.size(), static_cast<size_t>(V));
    const double w = max_abs_diff(ml.data(), ref[i]);
    worst = std::max(worst, w);
    EXPECT_LE(w, kTol) << "entry " << i;
    EXPECT_EQ(at.n_pos(), static_cast<int64_t>(i + 1));  // drafting consumes nothing
  }
  // The chunked state drafts entry n-1 like the one-shot states.
  ASSERT_EQ(done, tokens.size() - 1);
  MtpDraft d{&st, tokens.back(), 1, {}};
  ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), &ml, nullptr).ok());
  EXPECT_LE(max_abs_diff(ml.data(), ref.back()), kTol);
  RecordProperty("max_abs_diff", std::to_string(worst));
}

TEST_P(MtpExact, ChainedDraftsMatchReference) {
  Model& m = mtp_model(test::param_family(GetParam()), true);  // fp64 refs: F32 KV
  const int64_t V = m.config().vocab_size, H = m.config().hidden_size;
  ReferenceModel ref(m.config(), m.weights());
  std::mt19937_64 rng(4);
  const auto tokens = test::random_tokens(rng, 9, V);
  const int32_t last = static_cast<int32_t>(rng() % V);
  constexpr int32_t k = 4;
  ThreadPool pool(2, 0);  // every job shared, however small
  SequenceState st = m.new_state();
  std::vector<float> logits, ml;
  ASSERT_TRUE(run(m, st, tokens, &logits, &pool).ok());
  MtpDraft d{&st, last, k, {}};
  ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), &ml, &pool).ok());
  ASSERT_EQ(d.drafts.size(), static_cast<size_t>(k));
  ASSERT_EQ(ml.size(), static_cast<size_t>(k * V));
  // The reference chain: entries (h_j, t_{j+1}) for j < n-1, then (h_{n-1}, last), then
  // (previous post-mtp.norm state, d_i), with the fast path's drafts.
  ReferenceModel::Rows h;
  ref.forward(tokens, &h);
  ReferenceModel::Rows hid(h.begin(), h.end());
  std::vector<int32_t> next(tokens.begin() + 1, tokens.end());
  next.push_back(last);
  for (int32_t i = 0; i < k; ++i) {
    ReferenceModel::Rows mh;
    const auto lg = ref.mtp_forward_entries(hid, next, &mh);
    const double w = max_abs_diff(ml.data() + i * V, lg.back());
    EXPECT_LE(w, kTol) << "draft " << i;
    EXPECT_EQ(d.drafts[i], argmax(ml.data() + i * V, static_cast<int32_t>(V)));
    ASSERT_EQ(static_cast<int64_t>(mh.back().size()), H);
    hid.push_back(mh.back());
    next.push_back(d.drafts[i]);
  }
  // Batched over sequences (different lengths and k) gives the same drafts and logits.
  SequenceState st2 = m.new_state();
  ASSERT_TRUE(run(m, st2, std::span<const int32_t>(tokens.data(), 5), &logits, &pool).ok());
  SequenceState st1 = m.new_state();
  ASSERT_TRUE(run(m, st1, tokens, &logits, &pool).ok());
  std::vector<float> ml2;
  MtpDraft d2{&st2, tokens[5], 2, {}};
  ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d2, 1), &ml2, &pool).ok());
  std::vector<MtpDraft> both = {{&st2, tokens[5], 2, {}}, {&st1, last, k, {}}};
  std::vector<float> mlb;
  ASSERT_TRUE(m.mtp_draft(both, &mlb, &pool).ok());
  EXPECT_EQ(both[0].drafts, d2.drafts);
  EXPECT_EQ(both[1].drafts, d.drafts);
  ASSERT_EQ(mlb.size(), static_cast<size_t>((2 + k) * V));
  EXPECT_EQ(std::memcmp(mlb.data(), ml2.data(), ml2.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(mlb.data() + 2 * V, ml.data(), ml.size() * sizeof(float)), 0);
}

TEST_P(MtpExact, HeadKvAndCarryAreCutInvariant) {
  Model& m = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  const int64_t V = m.config().vocab_size, H = m.config().hidden_size;
  const StateShape sh = m.state_shape();
  ASSERT_EQ(sh.lagged_attn_layers, 1);
  ASSERT_EQ(sh.carry_floats, H);
  std::mt19937_64 rng(5);
  const auto tokens = test::random_tokens(rng, 150, V);  // crosses page boundaries (64)
  // Every job shared, however small.
  ThreadPool pool(2, 0);
  std::vector<float> logits;
  SequenceState whole = m.new_state();
  ASSERT_TRUE(run(m, whole, tokens, &logits, &pool).ok());
  SequenceState one = m.new_state();
  for (int32_t t : tokens)
    ASSERT_TRUE(run(m, one, std::span<const int32_t>(&t, 1), &logits, nullptr).ok());
  EXPECT_TRUE(whole.same_contents(one));
  // Random chunks, batched with another sequence, drafting between chunks (the drafts write
  // scratch slots the next forward must overwrite).
  SequenceState chunks = m.new_state(), other = m.new_state();
  const auto other_toks = test::random_tokens(rng, 3000, V);
  size_t pos = 0, opos = 0;
  while (pos < tokens.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 40, tokens.size() - pos);
    const size_t on = 1 + rng() % 20;
    std::vector<SeqInput> b = {{&other, std::span<const int32_t>(other_toks.data() + opos, on), {}},
                               {&chunks, std::span<const int32_t>(tokens.data() + pos, n), {}}};
    ASSERT_TRUE(m.forward(b, &logits, &pool).ok());
    pos += n;
    opos += on;
    MtpDraft d{&chunks, static_cast<int32_t>(rng() % V), 1 + static_cast<int32_t>(rng() % 4), {}};
    ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), nullptr, &pool).ok());
  }
  EXPECT_TRUE(whole.same_contents(chunks));
  // The carry is the last token's final hidden state, and same_contents covers it, the head's
  // KV below n_pos - 1, and not its (undefined) slot n_pos - 1.
  std::vector<float> junk(static_cast<size_t>(sh.kv_dim), 1234.5f);
  const int64_t head = sh.n_attn_layers - 1, n = whole.n_pos();
  SequenceState c1 = whole.clone();
  c1.prepare_write(n - 1, n);
  c1.write_kv(head, n - 1, junk.data(), junk.data());
  EXPECT_TRUE(whole.same_contents(c1));
  SequenceState c2 = whole.clone();
  c2.prepare_write(n - 2, n - 1);
  c2.write_kv(head, n - 2, junk.data(), junk.data());
  EXPECT_FALSE(whole.same_contents(c2));
  SequenceState c3 = whole.clone();
  c3.carry()[H / 2] += 1.0f;
  EXPECT_FALSE(whole.same_contents(c3));
  // Slot n-2 was written with a pair that the whole forward computed in the same call as
  // slot n-3; the token-by-token state computed it from the carry: bits equal (checked above),
  // and not trivially (the slot is not zero).
  std::vector<float> k(static_cast<size_t>(sh.kv_dim));
  whole.read_k(head, n - 2, k.data());
  bool nonzero = false;
  for (float x : k) nonzero |= x != 0.0f;
  EXPECT_TRUE(nonzero);
}

// Resuming from shared pages (the prefix cache's way) and then consuming other tokens or
// drafting writes the head's slot p-1 and scratch slots: never into the shared pages. p = 64
// puts slot p-1 in the last shared page while the main layers only touch the next one.
TEST_P(MtpExact, SharedPagesStayUntouched) {
  Model& m = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  const int64_t V = m.config().vocab_size, PT = m.state_shape().page_tokens;
  std::mt19937_64 rng(10);
  const auto tokens = test::random_tokens(rng, PT + 30, V);
  std::vector<float> logits;
  for (const int64_t p : {PT, PT - 7}) {
    SequenceState a = m.new_state();
    ASSERT_TRUE(run(m, a, std::span<const int32_t>(tokens.data(), p), &logits, nullptr).ok());
    const auto snap = a.take_snapshot();
    ASSERT_TRUE(
        run(m, a, std::span<const int32_t>(tokens.data() + p, tokens.size() - p), &logits, nullptr)
            .ok());
    SequenceState a_ref = a.clone();
    // Deep copy of a's pages: a's own bits, kept aside.
    SequenceState a_copy = m.new_state();
    ASSERT_TRUE(run(m, a_copy, tokens, &logits, nullptr).ok());
    ASSERT_TRUE(a_copy.same_contents(a_ref));
    for (int mode = 0; mode < 2; ++mode) {
      SequenceState b = m.new_state();
      std::vector<PagePtr> pages(a.pages().begin(), a.pages().begin() + (p + PT - 1) / PT);
      b.resume(pages, snap.get(), p);
      if (mode == 0) {
        const auto other = test::random_tokens(rng, 5, V);
        ASSERT_TRUE(run(m, b, other, &logits, nullptr).ok());
      } else {
        MtpDraft d{&b, static_cast<int32_t>((tokens[p] + 1) % V), 4, {}};
        ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), nullptr, nullptr).ok());
      }
      EXPECT_TRUE(a.same_contents(a_copy)) << "p " << p << " mode " << mode;
    }
  }
}

TEST_P(MtpExact, LoadingWithoutMtpChangesNothing) {
  Model& with = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  Model& without = mtp_model(test::param_family(GetParam()), false, test::param_kv(GetParam()));
  EXPECT_FALSE(without.mtp_loaded());
  const StateShape a = without.state_shape(), b = with.state_shape();
  EXPECT_EQ(a.carry_floats, 0);
  EXPECT_EQ(a.lagged_attn_layers, 0);
  EXPECT_EQ(b.n_attn_layers, a.n_attn_layers + 1);
  EXPECT_EQ(without.capture_row_floats() + with.config().hidden_size, with.capture_row_floats());
  const int64_t V = with.config().vocab_size;
  std::mt19937_64 rng(6);
  const auto tokens = test::random_tokens(rng, 40, V);
  std::vector<int32_t> rows;
  for (int32_t i = 0; i < 40; i += 3) rows.push_back(i);
  std::vector<float> la, lb;
  SequenceState sa = without.new_state(), sb = with.new_state();
  ASSERT_TRUE(run(without, sa, tokens, &la, nullptr, rows).ok());
  ASSERT_TRUE(run(with, sb, tokens, &lb, nullptr, rows).ok());
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
  // Drafting needs the head loaded.
  MtpDraft d{&sa, 1, 1, {}};
  EXPECT_FALSE(without.mtp_draft(std::span<MtpDraft>(&d, 1), nullptr, nullptr).ok());
  SequenceState fresh = with.new_state();
  MtpDraft d0{&fresh, 1, 1, {}};
  EXPECT_FALSE(with.mtp_draft(std::span<MtpDraft>(&d0, 1), nullptr, nullptr).ok());
  MtpDraft dv{&sb, static_cast<int32_t>(V), 1, {}};
  EXPECT_FALSE(with.mtp_draft(std::span<MtpDraft>(&dv, 1), nullptr, nullptr).ok());
  // spec_check: loaded without the head, or a checkpoint without one.
  SpecConfig sc;
  sc.kind = SpecKind::Mtp;
  EXPECT_TRUE(spec_check(with, sc).ok());
  const Status s1 = spec_check(without, sc);
  ASSERT_FALSE(s1.ok());
  EXPECT_NE(s1.error_message().find("loaded with its MTP head"), std::string::npos);
  const Status s2 = spec_check(test::cached_model(test::fixture_dir("qwen3_5")), sc);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.error_message().find("no MTP head"), std::string::npos);
}

// An attention-only model has no snapshots to carry the head's state through the prefix
// cache: loading it with MTP is refused up front (without MTP it loads as before).
TEST(MtpLoad, AttentionOnlyIsRefused) {
  const std::string dir = test::scratch_dir("mtp_exact_dense");
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " make-model --mtp --preset tiny-dense --out " + dir + " 2>&1",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  LoadOptions opt;
  opt.mtp = true;
  auto m = Model::load(dir, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error_message().find("recurrent layers"), std::string::npos);
  opt.mtp = false;
  EXPECT_TRUE(Model::load(dir, opt).ok());
}

using test::Gen;
using test::generate;

TEST_P(MtpExact, GreedySpeculationEqualsPlain) {
  Model& m = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  const int64_t V = m.config().vocab_size;
  ThreadPool pool(2, 0);  // every job shared, however small
  EngineOptions cold_opt;
  cold_opt.cache_enabled = false;
  Engine cold(m, &pool, cold_opt);
  std::mt19937_64 rng(7);
  SpecStats total;
  for (int32_t k = 1; k <= 4; ++k)
    for (int trial = 0; trial < 2; ++trial) {
      const auto prompt = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 90), V);
      const int32_t max_tokens = 20 + static_cast<int32_t>(rng() % 30);
      Gen plain = generate(cold, prompt, max_tokens);
      SpecConfig sc;
      sc.kind = SpecKind::Mtp;
      sc.k = k;
      sc.adaptive = trial == 1;
      Gen spec = generate(cold, prompt, max_tokens, sc);
      ASSERT_EQ(spec.out, plain.out) << "k " << k << " trial " << trial;
      EXPECT_TRUE(spec.state.same_contents(plain.state)) << "k " << k << " trial " << trial;
      EXPECT_GT(spec.rep.spec.rounds, 0);
      total.add(spec.rep.spec);
    }
  RecordProperty("accepted_of_drafted",
                 std::to_string(total.accepted) + "/" + std::to_string(total.drafted));
  EXPECT_GT(total.replayed, 0);  // rollbacks happened (and restored the carry)
}

// Sampling: MTP drafts are deterministic (q one-hot); whatever is accepted, the state after
// the request equals a plain run over the tokens it consumed.
TEST_P(MtpExact, SampledSpeculationKeepsStateExact) {
  Model& m = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  const int64_t V = m.config().vocab_size;
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(m, nullptr, opt);
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 3; ++trial) {
    Request r;
    r.prompt = test::random_tokens(rng, 10 + static_cast<int64_t>(rng() % 40), V);
    r.max_tokens = 30;
    r.sampling.temperature = 0.9f;
    r.sampling.seed = rng();
    r.spec = SpecConfig{};
    r.spec->kind = SpecKind::Mtp;
    r.spec->k = 1 + trial;
    auto rep = e.generate(r);
    ASSERT_TRUE(rep.ok()) << rep.error_message();
    EXPECT_GT(rep->report.spec.rounds, 0);
    std::vector<int32_t> consumed = r.prompt;
    consumed.insert(consumed.end(), rep->tokens.begin(), rep->tokens.end() - 1);
    SequenceState plain = m.new_state();
    std::vector<float> logits;
    ASSERT_TRUE(run(m, plain, consumed, &logits, nullptr).ok());
    EXPECT_TRUE(e.last_state()->same_contents(plain)) << "trial " << trial;
  }
}

TEST_P(MtpExact, SpeculationWithPrefixCacheEqualsPlain) {
  Model& m = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  const int64_t V = m.config().vocab_size;
  EngineOptions copt;
  copt.cache.policy.interval = 16;
  Engine cached(m, nullptr, copt);
  EngineOptions cold_opt;
  cold_opt.cache_enabled = false;
  Engine cold(m, nullptr, cold_opt);
  std::mt19937_64 rng(8);
  SpecConfig sc;
  sc.kind = SpecKind::Mtp;
  sc.k = 3;
  const auto base = test::random_tokens(rng, 70, V);
  // Fill the cache (plain), then requests resuming inside it speculate from shared pages; the
  // same request twice must give the same result (the cached pages stayed untouched).
  Gen first = generate(cached, base, 30);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<int32_t> prompt = base;
    prompt.resize(static_cast<size_t>(20 + rng() % 50));
    const auto tail = test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 20), V);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    Gen plain = generate(cold, prompt, 25);
    Gen a = generate(cached, prompt, 25, sc);
    EXPECT_GT(a.rep.resumed_at, 0) << "trial " << trial;
    Gen b = generate(cached, prompt, 25, sc);
    EXPECT_GT(b.rep.resumed_at, 0);
    ASSERT_EQ(a.out, plain.out) << "trial " << trial;
    ASSERT_EQ(b.out, plain.out) << "trial " << trial;
    EXPECT_TRUE(a.state.same_contents(plain.state)) << "trial " << trial;
    EXPECT_TRUE(b.state.same_contents(plain.state)) << "trial " << trial;
  }
  // The first request again: resumes from its own reply's checkpoint, same output.
  Gen again = generate(cached, base, 30, sc);
  EXPECT_EQ(again.out, first.out);
  EXPECT_TRUE(again.state.same_contents(first.state));
}

// Random tiny heads almost never guess right, so the acceptance lengths are forced here: real
// MTP drafts and a real verify forward, then target rows crafted so that exactly m drafts are
// accepted (m = 0..k, full acceptance included). After every commit the state (head KV and
// carry included) equals a plain run over the same tokens, and every grid checkpoint taken
// inside an accepted run equals a plain snapshot at its position.
TEST_P(MtpExact, ForcedAcceptanceLengthsKeepStateExact) {
  Model& m = mtp_model(test::param_family(GetParam()), true, test::param_kv(GetParam()));
  const int64_t V = m.config().vocab_size;
  ThreadPool pool(2, 0);  // every job shared, however small
  std::mt19937_64 rng(12);
  std::vector<int32_t> history = test::random_tokens(rng, 30, V);
  SequenceState st = m.new_state();
  std::vector<float> logits;
  ASSERT_TRUE(run(m, st, history, &logits, &pool, {29}).ok());
  int32_t last = argmax(logits.data(), static_cast<int32_t>(V));
  SpecConfig sc;
  sc.kind = SpecKind::Mtp;
  sc.k = 4;
  sc.adaptive = false;
  SpecSequence spec(m, sc);
  Sampler sampler(SamplingParams{});
  std::vector<int> seen(static_cast<size_t>(sc.k + 1), 0);
  int64_t snaps_checked = 0;
  for (int round = 0; round < 30; ++round) {
    ASSERT_TRUE(spec.begin(&st, history, last, 1000, sampler, &pool).ok());
    SeqInput in = spec.verify_input();
    const std::vector<int32_t> verify(in.tokens.begin(), in.tokens.end());
    ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, &pool).ok());
    const int32_t k = spec.drafted();
    ASSERT_EQ(k, sc.k);
    const int32_t acc = static_cast<int32_t>(rng() % static_cast<uint64_t>(k + 1));
    ++seen[acc];
    std::vector<float> crafted(static_cast<size_t>((k + 1) * V), 0.0f);
    for (int32_t i = 0; i < acc; ++i) crafted[i * V + verify[i + 1]] = 1.0f;
    int32_t next = static_cast<int32_t>(rng() % V);
    if (acc < k && next == verify[acc + 1]) next = static_cast<int32_t>((next + 1) % V);
    crafted[acc * V + next] = 1.0f;
    const SpecOutcome o =
        spec.commit(crafted.data(), V, static_cast<int32_t>(V), sampler, {}, 5, &pool);
    ASSERT_EQ(o.accepted, acc);
    ASSERT_EQ(o.tokens.size(), static_cast<size_t>(acc + 1));
    ASSERT_EQ(o.tokens.back(), next);
    history.push_back(last);
    history.insert(history.end(), o.tokens.begin(), o.tokens.end() - 1);
    last = next;
    SequenceState plain = m.new_state();
    ASSERT_TRUE(run(m, plain, history, &logits, &pool).ok());
    ASSERT_TRUE(st.same_contents(plain)) << "round " << round << " accepted " << acc;
    for (const auto& sn : o.snaps) {
      SequenceState at = m.new_state();
      ASSERT_TRUE(
          run(m, at, std::span<const int32_t>(history.data(), sn->pos), &logits, &pool).ok());
      const auto ps = at.take_snapshot();
      ASSERT_EQ(ps->rec.size(), sn->rec.size());
      EXPECT_EQ(std::memcmp(ps->rec.data(), sn->rec.data(), ps->bytes()), 0)
          << "snapshot at " << sn->pos;
      ++snaps_checked;
    }
  }
  for (int32_t a = 0; a <= sc.k; ++a) EXPECT_GT(seen[a], 0) << "acceptance length " << a;
  EXPECT_GT(snaps_checked, 5);
}

INSTANTIATE_TEST_SUITE_P(Families, MtpExact,
                         ::testing::ValuesIn(test::with_kv_types({"tiny", "qwen3.5-moe-tiny",
                                                                  "qwen3-next-tiny"})),
                         [](const auto& info) { return test::param_name(info.param); });

// Cost of one MTP draft token against one decode step, and what the head's K/V adds to a
// decode step (printed and recorded; no assertion on speed: the machine may be shared, so each
// figure is the best of several batches). REWIND_MTP_BENCH_DIR=DIR (a checkpoint with an MTP
// head) measures that model instead of the tiny presets.
TEST(MtpCost, DraftTokenVersusDecodeStep) {
  using clk = std::chrono::steady_clock;
  std::vector<std::pair<std::string, std::array<Model*, 2>>> models;
  std::vector<std::unique_ptr<Model>> own;
  if (const char* dir = std::getenv("REWIND_MTP_BENCH_DIR")) {
    for (bool mtp : {false, true}) {
      LoadOptions opt;
      opt.mtp = mtp;
      auto m = Model::load(dir, opt);
      ASSERT_TRUE(m.ok()) << m.error_message();
      own.push_back(std::move(m).value());
    }
    models.push_back({dir, {own[0].get(), own[1].get()}});
  } else {
    for (const char* p : {"tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny", "qwen3.5-mini"})
      models.push_back({p, {&mtp_model(p, false), &mtp_model(p, true)}});
  }
  // One thread: a pool on an oversubscribed machine measures the scheduler, not the model.
  ThreadPool* pool = nullptr;
  for (auto& [name, ms] : models) {
    constexpr int kBatches = 5, kReps = 20;
    double step_us[2] = {1e30, 1e30}, draft_us = 1e30;
    for (int with = 0; with < 2; ++with) {
      Model& m = *ms[with];
      const int64_t V = m.config().vocab_size;
      std::mt19937_64 rng(9);
      const auto prompt = test::random_tokens(rng, 64, V);
      SequenceState st = m.new_state();
      std::vector<float> logits;
      ASSERT_TRUE(run(m, st, prompt, &logits, pool, {63}).ok());
      const int32_t t = 1;
      for (int b = 0; b <= kBatches; ++b) {  // batch 0 warms up scratch buffers and pages
        auto t0 = clk::now();
        for (int i = 0; i < kReps; ++i)
          ASSERT_TRUE(run(m, st, std::span<const int32_t>(&t, 1), &logits, pool, {0}).ok());
        const double us =
            std::chrono::duration<double, std::micro>(clk::now() - t0).count() / kReps;
        if (b) step_us[with] = std::min(step_us[with], us);
        if (!with) continue;
        t0 = clk::now();
        for (int i = 0; i < kReps; ++i) {
          MtpDraft d{&st, 1, 4, {}};
          ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), nullptr, pool).ok());
        }
        const double dus =
            std::chrono::duration<double, std::micro>(clk::now() - t0).count() / (kReps * 4);
        if (b) draft_us = std::min(draft_us, dus);
      }
    }
    std::printf(
        "%s: MTP draft %.1f us/token; decode step %.1f us without the head, %.1f us with "
        "its K/V\n",
        name.c_str(), draft_us, step_us[0], step_us[1]);
    RecordProperty(name + "_draft_us", std::to_string(draft_us));
    RecordProperty(name + "_step_us", std::to_string(step_us[0]));
    RecordProperty(name + "_step_mtp_us", std::to_string(step_us[1]));
  }
}

}  // namespace
}  // namespace rw
