// rewind against llama.cpp on the same GGUF files, from fixtures that a llama.cpp build wrote
// (tests/data/llama-cpp, regenerate.sh; README.md there says which build and how):
// - F32 files that `rewind make-model --format gguf` writes, of all five families (for the
//   Qwen3.5 ones more value than key heads: the tiled V-head order): llama.cpp loaded them,
//   tokenized each prompt and computed the last position's logits. rewind must give the same token
//   ids from the file's tokenizer metadata and the same logits within fp32 summation-order noise.
// - Files that llama-quantize made from such a file (Q8_0, Q4_K_M, Q5_K_M: Q8_0, Q4_K, Q5_K and
//   Q6_K tensors; a dense Granite's Q4_K_M, whose one-group ssm_norm llama.cpp writes 1-D): the
//   same, so rewind's dequantisation and its activation quantisation (Q8_0
//   blocks with fp16 scales, Q8_K-style 256-value blocks for the K-quants) are llama.cpp's.
// - The tensor types llama-quantize chose for Q4_K_M and Q5_K_M on the qwen3.5-0.8b shape and on
//   an 8-block model with an MTP block: `rewind convert --type q4_k_m|q5_k_m` must choose the
//   same for every tensor.
// The tolerance (5e-5 on logits of magnitude ~3) is several times the largest difference measured
// on F32 files (2.2e-5, most under 7e-6); see SameTokensAndLogits for the quantised files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rewind/io/gguf.h"
#include "rewind/model/config.h"
#include "rewind/model/gguf_model.h"
#include "test_util.h"

namespace rw {
namespace {

const std::string kDir = std::string(REWIND_TEST_DATA) + "/llama-cpp";
constexpr double kTol = 5e-5;
constexpr double kTolFlip = 5e-2;

std::string work_dir() {
  static const std::string d = test::made_scratch_dir("llama_cpp_parity");
  return d;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The fixture's model: a committed file, or an F32 GGUF regenerated from make-model arguments.
std::string model_of(const std::string& name, const nlohmann::json& fx) {
  const std::string src = fx.at("model").get<std::string>();
  const std::string mm = "make-model ";
  if (src.rfind(mm, 0) != 0) return kDir + "/" + src;
  const std::string path = work_dir() + "/" + name + ".gguf";
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " " + src + " --format gguf --type f32 --out " + path + " 2>&1",
      &rc);
  EXPECT_EQ(rc, 0) << out;
  return path;
}

struct Agreement {
  double max_diff = 0, max_abs = 0, kl = 0;
  bool same_top1 = false;
};

// rewind's last-position logits for one fixture prompt against llama.cpp's; the token ids of the
// prompt must be llama.cpp's.
Agreement agree(const std::string& model, const nlohmann::json& c) {
  const std::vector<int32_t> want_tokens = c.at("tokens").get<std::vector<int32_t>>();
  const std::vector<double> want = c.at("logits").get<std::vector<double>>();
  Agreement a;
  EXPECT_FALSE(want_tokens.empty());
  if (want_tokens.empty()) return a;
  int rc = 0;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " logits -t 2 --cache-type-k f32 --cache-type-v f32 --model " +
          model + " --prompt " + shell_quote(c.at("prompt").get<std::string>()) + " --positions " +
          std::to_string(want_tokens.size() - 1) + " 2>&1",
      &rc);
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) return a;
  const nlohmann::json got = nlohmann::json::parse(out);
  EXPECT_EQ(got.at("tokens").get<std::vector<int32_t>>(), want_tokens) << c.at("prompt");
  const std::vector<double> logits = got.at("logits").at(0).get<std::vector<double>>();
  EXPECT_EQ(logits.size(), want.size());
  if (logits.size() != want.size()) return a;
  size_t top_got = 0, top_want = 0;
  double mg = -INFINITY, mw = -INFINITY;
  for (size_t i = 0; i < want.size(); ++i) {
    a.max_diff = std::max(a.max_diff, std::fabs(logits[i] - want[i]));
    a.max_abs = std::max(a.max_abs, std::fabs(want[i]));
    if (logits[i] > logits[top_got]) top_got = i;
    if (want[i] > want[top_want]) top_want = i;
    mg = std::max(mg, logits[i]);
    mw = std::max(mw, want[i]);
  }
  double zg = 0, zw = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    zg += std::exp(logits[i] - mg);
    zw += std::exp(want[i] - mw);
  }
  for (size_t i = 0; i < want.size(); ++i) {  // KL(llama.cpp || rewind)
    const double lw = want[i] - mw - std::log(zw), lg = logits[i] - mg - std::log(zg);
    a.kl += std::exp(lw) * (lw - lg);
  }
  a.same_top1 = top_got == top_want;
  return a;
}

class LlamaCppLogits : public ::testing::TestWithParam<std::string> {};

// F32 files: every prompt within kTol. Quantised files: every prompt within kTolFlip and at most
// a quarter of them past kTol. The integer codes of a quantised activation depend on rounding
// ties, and a last-bit difference upstream (llama.cpp's kernels sum in another order; so does
// each of its ISAs) flips a code now and then, which moves this tiny random model's logits by up
// to ~3e-2 on one prompt (measured: 1 to 2 prompts of 8). An error in the arithmetic itself
// moves every prompt: an fp16 Q8_0 scale kept in f32 put all 8 past kTol. Both tolerances are
// for logits of magnitude ~3 and scale with a prompt's largest |logit| above that (Granite's
// logits reach ~45: the same relative noise and flips are larger in absolute terms there).
TEST_P(LlamaCppLogits, SameTokensAndLogits) {
  const nlohmann::json fx = read_json(kDir + "/" + GetParam() + ".json");
  const std::string model = model_of(GetParam(), fx);
  const bool quantised = GetParam().find("F32") == std::string::npos;
  int tight = 0, n = 0;
  for (const nlohmann::json& c : fx.at("cases")) {
    const Agreement a = agree(model, c);
    std::printf("%s prompt %d: max |rewind - llama.cpp| %.3g (max |logit| %.3g), KL %.3g\n",
                GetParam().c_str(), n, a.max_diff, a.max_abs, a.kl);
    EXPECT_GT(a.max_abs, 0.5);  // a real distribution, not zeros
    EXPECT_TRUE(a.same_top1) << n;
    const double scale = std::max(1.0, a.max_abs / 3);
    EXPECT_LE(a.max_diff, (quantised ? kTolFlip : kTol) * scale) << n;
    tight += a.max_diff <= kTol * scale;
    ++n;
  }
  EXPECT_GE(n, 8);
  EXPECT_GE(4 * tight, 3 * n) << tight << " of " << n << " prompts within " << kTol << " (scaled)";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCppLogits,
                         ::testing::Values("tiny-F32", "moe-F32", "next-F32", "t2l-F32", "t2l-Q8_0",
                                           "t2l-Q4_K_M", "t2l-Q5_K_M", "granite-F32", "gdense-F32",
                                           "nemotron-F32", "gdense-Q4_K_M"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

struct TypeLine {
  std::string name, type;
  int64_t ne0 = 0;
};

std::vector<TypeLine> read_types(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<TypeLine> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    TypeLine t;
    if (ss >> t.name >> t.ne0 >> t.type) {
      for (char& c : t.type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out.push_back(t);
    }
  }
  return out;
}

// The qwen3.5-0.8b shape (24 blocks, every 4th full attention, tied embeddings): the rule gives
// every matrix the type llama-quantize gave it (the file itself is 3 GB, so only the rule runs).
TEST(LlamaCppTypes, KMixturesOnTheQwen35_08bShape) {
  ModelConfig c;
  c.n_layer = 24;
  for (int64_t il = 0; il < c.n_layer; ++il)
    c.layer_kinds.push_back(il % 4 == 3 ? LayerKind::Attention : LayerKind::GatedDeltaNet);
  c.ffn_kinds.assign(static_cast<size_t>(c.n_layer), FfnKind::SwiGLU);
  c.tie_word_embeddings = true;
  for (const auto& [file, base] : {std::pair{"qwen3.5-0.8b-Q4_K_M", DType::Q4_K},
                                   std::pair{"qwen3.5-0.8b-Q5_K_M", DType::Q5_K}}) {
    const auto rule = gguf_k_m_rule(c, 0, base);
    const auto lines = read_types(kDir + "/" + file + ".types");
    EXPECT_EQ(lines.size(), 320u) << file;
    int checked = 0, q6 = 0;
    for (const TypeLine& t : lines) {
      if (t.type == "F32") continue;  // norms, conv, ssm_a, dt bias: not matrices
      EXPECT_EQ(ggml_type_name(
                    static_cast<uint32_t>(ggml_from_dtype(gguf_matrix_type(rule(t.name), t.ne0)))),
                t.type)
          << file << " " << t.name;
      ++checked;
      q6 += t.type == "Q6_K";
    }
    EXPECT_EQ(checked, 187) << file;
    EXPECT_EQ(q6, 25) << file;
  }
}

// An 8-block model with an MTP block, written by `rewind make-model --format gguf --type
// q4_k_m|q5_k_m`: every tensor (name, row length, type) as in llama-quantize's file.
// make-model `args` written as GGUF of each K mixture has every tensor (name, row length,
// type) as in llama-quantize's file of the same model (`<model>-<TYPE>.types`).
void expect_llama_quantize_types(const std::string& model, const std::string& args) {
  for (const std::string q : {"Q4_K_M", "Q5_K_M"}) {
    std::string lower = q;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const std::string path = work_dir() + "/" + model + "-" + lower + ".gguf";
    int rc = 0;
    const std::string out =
        test::run_command(std::string(REWIND_BINARY) + " make-model " + args +
                              " --format gguf --type " + lower + " --out " + path + " 2>&1",
                          &rc);
    ASSERT_EQ(rc, 0) << out;
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.error_message();
    const auto lines = read_types(kDir + "/" + model + "-" + q + ".types");
    ASSERT_EQ(lines.size(), g->tensors().size()) << q;
    for (const TypeLine& t : lines) {
      const GgufTensor* mine = g->find(t.name);
      ASSERT_NE(mine, nullptr) << q << " " << t.name;
      EXPECT_EQ(mine->ne.at(0), t.ne0) << q << " " << t.name;
      EXPECT_EQ(ggml_type_name(static_cast<uint32_t>(mine->type)), t.type) << q << " " << t.name;
    }
  }
}

TEST(LlamaCppTypes, KMixturesWithAnMtpBlockWholeFile) {
  expect_llama_quantize_types(
      "mtp8", "--preset qwen3.5-tiny-256 --seed 3 --linear-heads 2,4,64,64 --layers 8 --mtp");
}

// Rows of 32-128 values, under a K-quant's 256: llama-quantize's fallbacks (Q4_K to Q5_0, Q5_K
// to Q5_1, Q6_K to Q8_0).
TEST(LlamaCppTypes, KMixturesOfShortRowsFallBackAsLlamaQuantize) {
  expect_llama_quantize_types("tiny", "--preset tiny --seed 3 --linear-heads 2,4,16,16");
}

}  // namespace
}  // namespace rw
