// Correctness against an independent reference: the fp64 golden logits of the PyTorch references
// (tests/data/qwen35-tiny and tests/data/mamba2-tiny, see their READMEs) for all five families,
// through the library and through `rewind logits`; and the fast path against the naive
// double-precision ReferenceModel.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rewind/model/reference.h"
#include "rewind/sample/sampler.h"
#include "test_util.h"

namespace rw {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, LibraryMatchesFp64Reference) {
  const std::string dir = test::fixture_dir(GetParam());
  const auto exp = read_json(dir + "/expected_logits.json");
  Model& m = test::cached_model(dir, WeightStore::Auto, test::kF32Kv);  // fp64 refs: F32 KV
  const auto tokens = exp["tokens"].get<std::vector<int32_t>>();
  SequenceState st = m.new_state();
  SeqInput in{&st, tokens, {}};
  for (size_t i = 0; i < tokens.size(); ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
  std::vector<float> logits;
  ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
  const int64_t V = m.config().vocab_size;
  double worst = 0;
  for (auto& p : exp["positions"]) {
    const int64_t pos = p.get<int64_t>();
    const auto ref = exp["logits"][std::to_string(pos)].get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(ref.size()), V);
    for (int64_t v = 0; v < V; ++v) {
      const double d = std::abs(static_cast<double>(logits[pos * V + v]) - ref[v]);
      worst = std::max(worst, d);
      ASSERT_LE(d, 1e-4) << "position " << pos << " vocab " << v;
    }
  }
  const auto amax = exp["argmax"].get<std::vector<int32_t>>();
  for (size_t t = 0; t < tokens.size(); ++t)
    EXPECT_EQ(argmax(logits.data() + t * V, static_cast<int32_t>(V)), amax[t]) << "position " << t;
  RecordProperty("max_abs_diff", std::to_string(worst));
}

TEST_P(Golden, CliLogitsMatchesFp64Reference) {
  const std::string dir = test::fixture_dir(GetParam());
  const auto exp = read_json(dir + "/expected_logits.json");
  const auto tokens = exp["tokens"].get<std::vector<int32_t>>();
  std::string toks, pos;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) toks += ',';
    toks += std::to_string(tokens[i]);
  }
  for (auto& p : exp["positions"]) {
    if (!pos.empty()) pos += ',';
    pos += std::to_string(p.get<int>());
  }
  int rc = 0;
  const std::string out = test::run_command(std::string(REWIND_BINARY) + " logits --model " + dir +
                                                " --tokens " + toks + " --positions " + pos +
                                                " -t 2 --cache-type-k f32 --cache-type-v f32",
                                            &rc);
  ASSERT_EQ(rc, 0);
  const auto got = nlohmann::json::parse(out);
  ASSERT_EQ(got["positions"], exp["positions"]);
  for (size_t i = 0; i < got["positions"].size(); ++i) {
    const auto ref =
        exp["logits"][std::to_string(got["positions"][i].get<int>())].get<std::vector<double>>();
    const auto row = got["logits"][i].get<std::vector<double>>();
    ASSERT_EQ(row.size(), ref.size());
    for (size_t v = 0; v < row.size(); ++v) ASSERT_NEAR(row[v], ref[v], 1e-4);
  }
}

// The naive double-precision ReferenceModel implements the Qwen3.5 families.
class GoldenNaive : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenNaive, FastPathMatchesNaiveReferenceModel) {
  const std::string dir = test::fixture_dir(GetParam());
  Model& m = test::cached_model(dir, WeightStore::Auto, test::kF32Kv);  // fp64 refs: F32 KV
  ReferenceModel ref(m.config(), m.weights());
  std::mt19937_64 rng(5);
  auto tokens = test::random_tokens(rng, 70, m.config().vocab_size);
  const auto want = ref.forward(tokens);
  SequenceState st = m.new_state();
  SeqInput in{&st, tokens, {}};
  for (size_t i = 0; i < tokens.size(); ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
  std::vector<float> logits;
  ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
  const int64_t V = m.config().vocab_size;
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(logits[t * V + v], want[t][v], 1e-4) << t << "," << v;
}

INSTANTIATE_TEST_SUITE_P(Families, Golden, ::testing::ValuesIn(test::all_families()));
INSTANTIATE_TEST_SUITE_P(Families, GoldenNaive, ::testing::ValuesIn(test::fixture_variants()));

}  // namespace
}  // namespace rw
