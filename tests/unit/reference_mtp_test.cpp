// The naive reference of the MTP head (ReferenceModel::mtp_forward) on `make-model --mtp` tiny
// models of all three families: shapes, determinism, causality over MTP entries, chaining from a
// previous step's post-mtp.norm state, and one entry computed by hand from the weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "rewind/kernels/ops_ref.h"
#include "rewind/model/reference.h"
#include "test_util.h"

namespace rw {
namespace {

// A `make-model --mtp` model of `preset` (per process: ctest runs tests in parallel), made and
// loaded once per process.
Model& mtp_model(const std::string& preset) {
  static std::map<std::string, std::string> made;
  auto it = made.find(preset);
  if (it == made.end()) {
    const std::string dir = test::scratch_dir("ref_mtp_" + preset);
    int rc = 0;
    const std::string out =
        test::run_command(std::string(REWIND_BINARY) + " make-model --mtp --preset " + preset +
                              " --out " + dir + " 2>&1",
                          &rc);
    EXPECT_EQ(rc, 0) << out;
    it = made.emplace(preset, dir).first;
  }
  return test::cached_model(it->second);
}

class ReferenceMtp : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceMtp, RunsAndIsDeterministic) {
  Model& m = mtp_model(GetParam());
  ASSERT_TRUE(m.weights().has_mtp());
  const int64_t V = m.config().vocab_size, H = m.config().hidden_size;
  std::mt19937_64 rng(11);
  const auto tokens = test::random_tokens(rng, 9, V);
  ReferenceModel::Rows hid;
  const auto a = ReferenceModel(m.config(), m.weights()).mtp_forward(tokens, &hid);
  ASSERT_EQ(a.size(), tokens.size() - 1);
  ASSERT_EQ(hid.size(), tokens.size() - 1);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(a[i].size()), V);
    ASSERT_EQ(static_cast<int64_t>(hid[i].size()), H);
    for (double x : a[i]) ASSERT_TRUE(std::isfinite(x));
  }
  // Not degenerate: rows differ from each other and from the main model's next-token logits.
  EXPECT_NE(a[0], a[1]);
  const auto main = ReferenceModel(m.config(), m.weights()).forward(tokens);
  EXPECT_NE(a[0], main[1]);
  // A fresh instance (empty caches) gives the same bits.
  ReferenceModel::Rows hid2;
  EXPECT_EQ(ReferenceModel(m.config(), m.weights()).mtp_forward(tokens, &hid2), a);
  EXPECT_EQ(hid2, hid);
  EXPECT_TRUE(ReferenceModel(m.config(), m.weights()).mtp_forward({tokens[0]}).empty());
}

TEST_P(ReferenceMtp, CausalOverEntries) {
  Model& m = mtp_model(GetParam());
  ReferenceModel ref(m.config(), m.weights());
  std::mt19937_64 rng(12);
  auto tokens = test::random_tokens(rng, 8, m.config().vocab_size);
  const auto full = ref.mtp_forward(tokens);
  const auto prefix = ref.mtp_forward(std::vector<int32_t>(tokens.begin(), tokens.begin() + 5));
  ASSERT_EQ(prefix.size(), 4u);
  for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(prefix[i], full[i]) << i;
  // The last token is only the next-token input of the last entry.
  tokens.back() = (tokens.back() + 1) % static_cast<int32_t>(m.config().vocab_size);
  const auto changed = ref.mtp_forward(tokens);
  for (size_t i = 0; i + 1 < full.size(); ++i) EXPECT_EQ(changed[i], full[i]) << i;
  EXPECT_NE(changed.back(), full.back());
}

TEST_P(ReferenceMtp, ChainsFromThePreviousStepsHiddenState) {
  Model& m = mtp_model(GetParam());
  ReferenceModel ref(m.config(), m.weights());
  std::mt19937_64 rng(13);
  const auto tokens = test::random_tokens(rng, 6, m.config().vocab_size);
  ReferenceModel::Rows h, mh;
  ref.forward(tokens, &h);
  const auto step1 = ref.mtp_forward(tokens, &mh);
  // Step 2 appends the entry (post-mtp.norm state of the last entry, the draft d1) at the next
  // position; the earlier entries are unchanged.
  const int32_t d1 = static_cast<int32_t>(
      std::max_element(step1.back().begin(), step1.back().end()) - step1.back().begin());
  ReferenceModel::Rows hidden(h.begin(), h.end() - 1);
  std::vector<int32_t> next(tokens.begin() + 1, tokens.end());
  hidden.push_back(mh.back());
  next.push_back(d1);
  const auto step2 = ref.mtp_forward_entries(hidden, next);
  ASSERT_EQ(step2.size(), step1.size() + 1);
  for (size_t i = 0; i < step1.size(); ++i) EXPECT_EQ(step2[i], step1[i]) << i;
  for (double x : step2.back()) ASSERT_TRUE(std::isfinite(x));
}

// One entry at position 0 attends only to itself (softmax of one score = 1, RoPE at 0 is the
// identity), so its output is written out here directly from the canonical weights.
TEST(ReferenceMtpDense, SingleEntryByHand) {
  Model& m = mtp_model("tiny");
  const ModelConfig& c = m.config();
  const WeightSet& ws = m.weights();
  const int64_t H = c.hidden_size, D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv,
                V = c.vocab_size;
  const double eps = c.rms_norm_eps;
  auto M = [&](const std::string& n) {
    const WeightSource& w = ws.get(n);
    std::vector<double> v(static_cast<size_t>(w.rows() * w.cols));
    for (int64_t r = 0; r < w.rows(); ++r) w.row_f64(r, v.data() + r * w.cols);
    return v;
  };
  auto mv = [](const std::vector<double>& w, const std::vector<double>& x) {
    const size_t cols = x.size(), rows = w.size() / cols;
    std::vector<double> y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t k = 0; k < cols; ++k) y[r] += w[r * cols + k] * x[k];
    return y;
  };
  auto norm = [&](const std::vector<double>& x, const std::string& w) {
    std::vector<double> y(x.size());
    ref::rmsnorm(x.data(), M(w).data(), y.data(), static_cast<int64_t>(x.size()), eps);
    return y;
  };
  const std::vector<int32_t> tokens = {17, 301};
  ReferenceModel ref(c, ws);
  ReferenceModel::Rows h;
  ref.forward({tokens[0]}, &h);
  const auto emb = M("embed");
  std::vector<double> e(emb.begin() + tokens[1] * H, emb.begin() + (tokens[1] + 1) * H);
  std::vector<double> cat = norm(e, "mtp.enorm");
  const auto hn = norm(h[0], "mtp.hnorm");
  cat.insert(cat.end(), hn.begin(), hn.end());
  std::vector<double> x = mv(M("mtp.fc"), cat);
  std::string L = "l";  // appends: GCC 12 warns falsely on "l" + to_string
  L += std::to_string(c.n_layer) + ".";
  const auto row = mv(M(L + "qkv"), norm(x, L + "in_norm"));
  std::vector<double> att(static_cast<size_t>(nh * D));
  for (int64_t hd = 0; hd < nh; ++hd) {
    const int64_t j = hd / (nh / nkv);
    for (int64_t i = 0; i < D; ++i)
      att[hd * D + i] =
          row[nh * 2 * D + nkv * D + j * D + i] * ref::sigmoid(row[hd * 2 * D + D + i]);
  }
  const auto o = mv(M(L + "o_proj"), att);
  for (int64_t i = 0; i < H; ++i) x[i] += o[i];
  const auto gu = mv(M(L + "gate_up"), norm(x, L + "post_norm"));
  const int64_t F = static_cast<int64_t>(gu.size()) / 2;
  std::vector<double> a(static_cast<size_t>(F));
  for (int64_t i = 0; i < F; ++i) a[i] = ref::silu(gu[i]) * gu[F + i];
  const auto dn = mv(M(L + "down"), a);
  for (int64_t i = 0; i < H; ++i) x[i] += dn[i];
  const auto want = mv(M("lm_head"), norm(x, "mtp.norm"));

  const auto got = ref.mtp_forward(tokens);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(static_cast<int64_t>(got[0].size()), V);
  for (int64_t v = 0; v < V; ++v)
    ASSERT_NEAR(got[0][v], want[v], 1e-9 * (1 + std::abs(want[v]))) << v;
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceMtp,
                         ::testing::Values("tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace_if(
                               n.begin(), n.end(), [](char ch) { return !std::isalnum(ch); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace rw
