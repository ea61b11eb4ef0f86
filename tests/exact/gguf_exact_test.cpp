// GGUF loading is exact: the same seeded random weights written as an HF checkpoint
// (`rewind make-model`) and as a GGUF file (`rewind convert`, F32 or BF16) give byte-identical
// logits (memcmp) at every position, for all three families and configs with more value heads
// than key heads (the V-head reorder of qwen35 / qwen35moe files). Quantised GGUF models keep
// the batch-invariance contract: one piece, one token at a time and another thread count give
// the same bytes. With an MTP head (`make-model --mtp`), the GGUF's nextn block maps to the same
// canonical weights, and MTP drafts (logits and tokens) are byte-identical to the HF checkpoint's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "model_run.h"
#include "rewind/base/thread_pool.h"
#include "rewind/kernels/matmul.h"
#include "test_util.h"

namespace rw {
namespace {

using test::chunked_logits;
using test::same_bytes;

// A scratch directory for this process, removed at exit.
std::string work_dir() {
  static const std::string d = test::made_scratch_dir("gguf_exact");
  return d;
}

void sh(const std::string& cmd) {
  int rc = 0;
  const std::string out = test::run_command(cmd + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << cmd << "\n" << out;
}

// HF directory of a preset in `dtype` (made once per process).
std::string hf_model(const std::string& preset, const std::string& dtype) {
  const std::string dir = work_dir() + "/" + preset + "_" + dtype;
  if (!std::filesystem::exists(dir + "/config.json"))
    sh(std::string(REWIND_BINARY) + " make-model --preset " + preset + " --dtype " + dtype +
       " --seed 7 --out " + dir);
  return dir;
}

// That checkpoint converted to GGUF with matrices as `type`.
std::string gguf_model(const std::string& preset, const std::string& dtype,
                       const std::string& type) {
  const std::string hf = hf_model(preset, dtype);
  const std::string path = work_dir() + "/" + preset + "_" + dtype + "_" + type + ".gguf";
  if (!std::filesystem::exists(path))
    sh(std::string(REWIND_BINARY) + " convert --in " + hf + " --out " + path + " --type " + type);
  return path;
}

struct Case {
  std::string preset, dtype;
};

class GgufExact : public ::testing::TestWithParam<Case> {};

TEST_P(GgufExact, SameLogitsAsHfCheckpoint) {
  const Case& c = GetParam();
  Model& hf = test::cached_model(hf_model(c.preset, c.dtype));
  Model& gg = test::cached_model(gguf_model(c.preset, c.dtype, c.dtype));
  ASSERT_GT(hf.config().lin_n_head_v, hf.config().lin_n_head_k);  // the V-head reorder is exercised
  EXPECT_EQ(gg.config().family, hf.config().family);
  // Same stores (BF16 differs only where GGUF keeps a 1-D tensor in F32: the shared-expert gate).
  if (c.dtype == "f32") {
    EXPECT_EQ(gg.packed_bytes(), hf.packed_bytes());
  }
  std::mt19937_64 rng(99);
  ThreadPool pool(2, 0);  // every job shared, however small
  for (int trial = 0; trial < 3; ++trial) {
    const auto tokens =
        test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 90), hf.config().vocab_size);
    const auto want = chunked_logits(hf, tokens, static_cast<int64_t>(tokens.size()), nullptr);
    EXPECT_TRUE(
        same_bytes(chunked_logits(gg, tokens, static_cast<int64_t>(tokens.size()), nullptr), want))
        << trial;
    EXPECT_TRUE(same_bytes(chunked_logits(gg, tokens, 1, &pool), want)) << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufExact,
                         ::testing::Values(Case{"tiny", "f32"}, Case{"qwen3.5-moe-tiny", "f32"},
                                           Case{"qwen3-next-tiny", "f32"},
                                           Case{"qwen3.5-tiny-256", "f32"}, Case{"tiny", "bf16"},
                                           Case{"qwen3-next-tiny", "bf16"}),
                         [](const auto& info) {
                           std::string n = info.param.preset + "_" + info.param.dtype;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Through the binary: `rewind logits` and greedy `rewind run` (tokenizer and stop ids from the
// GGUF metadata) print the same bytes for the GGUF file as for the HF directory.
TEST(GgufCommands, LogitsAndRunMatchHf) {
  const std::string hf = hf_model("tiny", "f32");
  const std::string gg = gguf_model("tiny", "f32", "f32");
  const std::string bin = REWIND_BINARY;
  int rc1 = 0, rc2 = 0;
  const std::string logits_args = " --tokens 5,17,300,2,99 --threads 2";
  const std::string a = test::run_command(bin + " logits --model " + hf + logits_args, &rc1);
  const std::string b = test::run_command(bin + " logits --model " + gg + logits_args, &rc2);
  ASSERT_EQ(rc1, 0);
  ASSERT_EQ(rc2, 0);
  EXPECT_GT(a.size(), 1000u);
  EXPECT_EQ(a, b);
  const std::string run_args = " --prompt 'The cat sat on the mat.' -n 12 --json --ignore-eos";
  const std::string c =
      test::run_command(bin + " run --model " + hf + run_args + " 2>/dev/null", &rc1);
  const std::string d =
      test::run_command(bin + " run --model " + gg + run_args + " 2>/dev/null", &rc2);
  ASSERT_EQ(rc1, 0);
  ASSERT_EQ(rc2, 0);
  auto field = [](const std::string& j, const std::string& k) {  // "k":[...] or "k":"..."
    const size_t at = j.find("\"" + k + "\":");
    if (at == std::string::npos) return std::string();
    const size_t end = j.find_first_of("]\"", j.find_first_of("[\"", at + k.size() + 3) + 1);
    return j.substr(at, end - at);
  };
  EXPECT_FALSE(field(c, "tokens").empty()) << c;
  EXPECT_EQ(field(c, "tokens"), field(d, "tokens"));
  EXPECT_EQ(field(c, "text"), field(d, "text"));
}

// `make-model --mtp` checkpoint of `preset` as HF and as F32 GGUF, each loaded with the MTP head
// (once per process).
Model& mtp_model(const std::string& preset, bool gguf) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<Model>> loaded;
  auto key = std::make_pair(preset, gguf);
  auto it = loaded.find(key);
  if (it == loaded.end()) {
    const std::string hf = work_dir() + "/" + preset + "_mtp";
    const std::string gg = hf + ".gguf";
    if (!std::filesystem::exists(hf + "/config.json"))
      sh(std::string(REWIND_BINARY) + " make-model --mtp --preset " + preset + " --seed 7 --out " +
         hf);
    if (gguf && !std::filesystem::exists(gg))
      sh(std::string(REWIND_BINARY) + " convert --in " + hf + " --out " + gg + " --type f32");
    LoadOptions opt;
    opt.mtp = true;
    auto m = Model::load(gguf ? gg : hf, opt);
    if (!m.ok()) {
      std::fprintf(stderr, "cannot load %s: %s\n", (gguf ? gg : hf).c_str(),
                   m.error_message().c_str());
      std::abort();
    }
    it = loaded.emplace(key, std::move(m).value()).first;
  }
  return *it->second;
}

class GgufMtpExact : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufMtpExact, SameWeightsAsHfCheckpoint) {
  Model& hf = mtp_model(GetParam(), false);
  Model& gg = mtp_model(GetParam(), true);
  ASSERT_TRUE(hf.mtp_loaded());
  ASSERT_TRUE(gg.mtp_loaded());
  EXPECT_EQ(gg.config().n_layer, hf.config().n_layer);
  EXPECT_EQ(gg.config().mtp_num_hidden_layers, 1);
  EXPECT_EQ(gg.packed_bytes(), hf.packed_bytes());
  std::string l = "l";  // the MTP layer's canonical prefix
  l += std::to_string(hf.config().n_layer) + ".";
  std::vector<std::string> names = {"mtp.fc",      "mtp.enorm",     "mtp.hnorm", "mtp.norm",
                                    l + "in_norm", l + "post_norm", l + "qkv",   l + "q_norm",
                                    l + "k_norm",  l + "o_proj"};
  if (hf.config().mtp_layer_is_moe()) {
    for (const char* n : {"router", "sh.gate", "sh.gate_up", "sh.down", "e0.gate_up", "e7.down"})
      names.push_back(l + n);
  } else {
    names.push_back(l + "gate_up");
    names.push_back(l + "down");
  }
  for (auto& n : names) {
    ASSERT_TRUE(gg.weights().has(n)) << n;
    EXPECT_EQ(gg.weights().get(n).to_f32(), hf.weights().get(n).to_f32()) << n;
  }
}

TEST_P(GgufMtpExact, SameDraftsAsHfCheckpoint) {
  Model& hf = mtp_model(GetParam(), false);
  Model& gg = mtp_model(GetParam(), true);
  const int64_t V = hf.config().vocab_size;
  std::mt19937_64 rng(21);
  ThreadPool pool(2, 0);  // every job shared, however small
  for (int trial = 0; trial < 3; ++trial) {
    const auto tokens = test::random_tokens(rng, 2 + static_cast<int64_t>(rng() % 40), V);
    const int32_t last = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
    std::vector<float> want_logits, got_logits;
    std::vector<int32_t> want_drafts, got_drafts;
    for (Model* m : {&hf, &gg}) {
      SequenceState st = m->new_state();
      SeqInput in{&st, tokens, {static_cast<int32_t>(tokens.size() - 1)}};
      std::vector<float> main_logits;
      ASSERT_TRUE(m->forward(std::span<SeqInput>(&in, 1), &main_logits, &pool).ok());
      MtpDraft d{&st, last, 3, {}};
      std::vector<float> ml;
      ASSERT_TRUE(m->mtp_draft(std::span<MtpDraft>(&d, 1), &ml, &pool).ok());
      ASSERT_EQ(ml.size(), static_cast<size_t>(3 * V));
      (m == &hf ? want_logits : got_logits) = ml;
      (m == &hf ? want_drafts : got_drafts) = d.drafts;
    }
    EXPECT_TRUE(same_bytes(got_logits, want_logits)) << trial;
    EXPECT_EQ(got_drafts, want_drafts) << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufMtpExact, ::testing::Values("tiny", "qwen3.5-moe-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

class GgufQuantExact : public ::testing::TestWithParam<std::string> {};

// Whole prompt, token by token and 7-token chunks on 2 threads give the same bits, with either
// quantised dot (the int8 dot quantises each row's activations on its own).
TEST_P(GgufQuantExact, BatchAndThreadInvariant) {
  Model& m = test::cached_model(gguf_model("qwen3.5-tiny-256", "f32", GetParam()));
  ThreadPool pool(2, 0);  // every job shared, however small
  for (QuantDot dot : {QuantDot::F32, QuantDot::Int8}) {
    KernelOptions ko;
    ko.quant_dot = dot;
    m.set_kernel_options(ko);
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 2; ++trial) {
      const auto tokens =
          test::random_tokens(rng, 2 + static_cast<int64_t>(rng() % 60), m.config().vocab_size);
      const auto whole = chunked_logits(m, tokens, static_cast<int64_t>(tokens.size()), nullptr);
      EXPECT_TRUE(same_bytes(chunked_logits(m, tokens, 1, nullptr), whole)) << quant_dot_name(dot);
      EXPECT_TRUE(same_bytes(chunked_logits(m, tokens, 7, &pool), whole)) << quant_dot_name(dot);
    }
  }
  m.set_kernel_options(KernelOptions{});  // the cached model goes back to its defaults
}

// Kernel options belong to the model, not the process: two models of one file loaded with
// different quantised dots run side by side (interleaved, on one pool), each giving the bits it
// gives alone, and the two dots give different bits (so the option reached the kernels).
TEST(GgufKernelOptions, TwoModelsWithDifferentDotsRunSideBySide) {
  const std::string path = gguf_model("qwen3.5-tiny-256", "f32", "q8_0");
  LoadOptions oa, ob;
  oa.kernels.quant_dot = QuantDot::F32;
  ob.kernels.quant_dot = QuantDot::Int8;
  auto ma = Model::load(path, oa);
  auto mb = Model::load(path, ob);
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ(ma.value()->kernel_options().quant_dot, QuantDot::F32);
  EXPECT_EQ(mb.value()->kernel_options().quant_dot, QuantDot::Int8);
  ThreadPool pool(2, 0);  // every job shared, however small
  std::mt19937_64 rng(9);
  const auto tokens = test::random_tokens(rng, 40, ma.value()->config().vocab_size);
  const auto a1 = chunked_logits(*ma.value(), tokens, 40, nullptr);
  const auto b1 = chunked_logits(*mb.value(), tokens, 40, nullptr);
  EXPECT_FALSE(same_bytes(a1, b1));
  for (int round = 0; round < 2; ++round) {
    EXPECT_TRUE(same_bytes(chunked_logits(*mb.value(), tokens, 7, &pool), b1)) << round;
    EXPECT_TRUE(same_bytes(chunked_logits(*ma.value(), tokens, 5, &pool), a1)) << round;
  }
  // Switching a loaded model's options (what the benchmarks do between forwards) gives the
  // other model's bits.
  ma.value()->set_kernel_options(ob.kernels);
  EXPECT_TRUE(same_bytes(chunked_logits(*ma.value(), tokens, 40, nullptr), b1));
}

INSTANTIATE_TEST_SUITE_P(Types, GgufQuantExact,
                         ::testing::Values("q8_0", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m",
                                           "q4_0", "q5_0", "iq4_nl", "q3_k", "iq4_xs", "q2_k",
                                           "q4_1", "q5_1"));

}  // namespace
}  // namespace rw
