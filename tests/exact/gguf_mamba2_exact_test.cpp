// GGUF loading of the Mamba2 hybrids is exact: the mamba2-tiny fixtures (Granite-4.0-H and
// Nemotron-H) and the make-model tiny presets written as F32 GGUF give byte-identical logits
// (memcmp) to their HF checkpoints, in one piece and token by token on another thread count; a
// BF16 checkpoint converted to BF16 the same. Quantised files (Q8_0, Q4_K_M, through `rewind
// convert`) load, run, and stay close to the F32 logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "model_run.h"
#include "rewind/base/thread_pool.h"
#include "rewind/io/gguf.h"
#include "rewind/io/safetensors.h"
#include "rewind/model/gguf_model.h"
#include "test_util.h"

namespace rw {
namespace {

using test::chunked_logits;
using test::same_bytes;

std::string work_dir() {
  static const std::string d = test::made_scratch_dir("gguf_mamba2_exact");
  return d;
}

void sh(const std::string& cmd) {
  int rc = 0;
  const std::string out = test::run_command(cmd + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << cmd << "\n" << out;
}

// A fixture written as F32 GGUF in-process (it has no tokenizer for `rewind convert`).
std::string fixture_gguf(const std::string& variant) {
  const std::string path = work_dir() + "/" + variant + ".gguf";
  if (std::filesystem::exists(path)) return path;
  const std::string dir = test::fixture_dir(variant);
  auto cfg = load_model_config(dir + "/config.json");
  EXPECT_TRUE(cfg.ok()) << cfg.error_message();
  auto ts = TensorSet::open_dir(dir);
  EXPECT_TRUE(ts.ok()) << ts.error_message();
  auto ws = WeightSet::from_hf(*ts, *cfg);
  EXPECT_TRUE(ws.ok()) << ws.error_message();
  GgufVocab v;
  for (int i = 0; i < 256; ++i) v.tokens.push_back("tok" + std::to_string(i));
  Status st = write_gguf_model(path, *cfg, *ws, v, DType::F32, "fixture");
  EXPECT_TRUE(st.ok()) << st.error_message();
  return path;
}

// `make-model --preset P --dtype D` and its conversion to `type`, made once per process.
std::string preset_hf(const std::string& preset, const std::string& dtype) {
  const std::string dir = work_dir() + "/" + preset + "_" + dtype;
  if (!std::filesystem::exists(dir + "/config.json"))
    sh(std::string(REWIND_BINARY) + " make-model --preset " + preset + " --dtype " + dtype +
       " --seed 5 --out " + dir);
  return dir;
}
std::string preset_gguf(const std::string& preset, const std::string& dtype,
                        const std::string& type) {
  const std::string hf = preset_hf(preset, dtype);
  const std::string path = hf + "_" + type + ".gguf";
  if (!std::filesystem::exists(path))
    sh(std::string(REWIND_BINARY) + " convert --in " + hf + " --out " + path + " --type " + type);
  return path;
}

void expect_same_logits(const std::string& hf_path, const std::string& gguf_path, bool f32) {
  Model& hf = test::cached_model(hf_path);
  Model& gg = test::cached_model(gguf_path);
  EXPECT_EQ(gg.config().family, hf.config().family);
  EXPECT_EQ(gg.config().layer_kinds, hf.config().layer_kinds);
  if (f32) {
    EXPECT_EQ(gg.packed_bytes(), hf.packed_bytes());
  }
  std::mt19937_64 rng(41);
  ThreadPool pool(2, 0);  // every job shared, however small
  for (int trial = 0; trial < 3; ++trial) {
    const auto tokens =
        test::random_tokens(rng, 1 + static_cast<int64_t>(rng() % 70), hf.config().vocab_size);
    const auto want = chunked_logits(hf, tokens, static_cast<int64_t>(tokens.size()), nullptr);
    EXPECT_TRUE(
        same_bytes(chunked_logits(gg, tokens, static_cast<int64_t>(tokens.size()), nullptr), want))
        << trial;
    EXPECT_TRUE(same_bytes(chunked_logits(gg, tokens, 1, &pool), want)) << trial;
  }
}

TEST(GgufMamba2Exact, FixturesSameLogitsAsHf) {
  for (const char* variant : {"granitemoehybrid", "nemotron_h", "nemotron_h_moe"}) {
    SCOPED_TRACE(variant);
    expect_same_logits(test::fixture_dir(variant), fixture_gguf(variant), true);
  }
}

// Current HF saves Nemotron-H as `model.*` with each MoE block's experts stacked
// (mixer.experts.up_proj [E, F, H], mixer.experts.down_proj [E, H, F]): the MoE fixture
// rewritten so loads to the same logits, bit for bit.
TEST(GgufMamba2Exact, NemotronMoeStackedHfExpertsSameLogits) {
  const std::string src = test::fixture_dir("nemotron_h_moe");
  const std::string dir = work_dir() + "/nemotron_h_moe_stacked";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto ts = TensorSet::open_dir(src);
  ASSERT_TRUE(ts.ok()) << ts.error_message();
  auto cfg = load_model_config(src + "/config.json");
  ASSERT_TRUE(cfg.ok());
  const int64_t E = cfg->n_expert;
  std::vector<TensorToWrite> out;
  std::vector<std::vector<std::byte>> stacks;
  stacks.reserve(2 * static_cast<size_t>(cfg->n_layer));
  for (const std::string& n : ts->names()) {
    if (n.find(".experts.") != std::string::npos) continue;
    const TensorView* t = ts->find(n);
    const bool bb = n.rfind("backbone.", 0) == 0;
    out.push_back({bb ? "model." + n.substr(9) : n, t->dtype, t->shape, t->data});
  }
  for (int64_t il = 0; il < cfg->n_layer; ++il) {
    if (!cfg->layer_is_moe(il)) continue;
    const std::string mp = "backbone.layers." + std::to_string(il) + ".mixer.experts.";
    for (const char* part : {"up_proj", "down_proj"}) {
      std::vector<std::byte>& b = stacks.emplace_back();
      std::vector<int64_t> shape;
      for (int64_t e = 0; e < E; ++e) {
        const TensorView* t = ts->find(mp + std::to_string(e) + "." + part + ".weight");
        ASSERT_NE(t, nullptr);
        b.insert(b.end(), t->data, t->data + t->nbytes);
        shape = t->shape;
      }
      shape.insert(shape.begin(), E);
      out.push_back({"model.layers." + std::to_string(il) + ".mixer.experts." + part, DType::F32,
                     shape, b.data()});
    }
  }
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", out).ok());
  expect_same_logits(src, dir, true);
}

// The MoE fixture's file is llama.cpp's nemotron_h_moe layout: the router's bias, stacked
// squared-ReLU experts (no gate), the shared expert, the routing keys.
TEST(GgufMamba2Exact, NemotronMoeFileLayout) {
  auto g = GgufFile::open(fixture_gguf("nemotron_h_moe"));
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->get_string("general.architecture").value(), "nemotron_h_moe");
  auto cfg = load_model_config(test::fixture_dir("nemotron_h_moe") + "/config.json");
  ASSERT_TRUE(cfg.ok());
  const int64_t E = cfg->n_expert, F = cfg->moe_intermediate_size, H = cfg->hidden_size;
  for (int64_t il = 0; il < cfg->n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const bool moe = cfg->ffn_kinds[il] == FfnKind::Moe;
    EXPECT_EQ(g->find(p + "ffn_gate_inp.weight") != nullptr, moe) << il;
    if (!moe) continue;
    const GgufTensor* up = g->find(p + "ffn_up_exps.weight");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->ne, (std::vector<int64_t>{H, F, E}));
    ASSERT_NE(g->find(p + "exp_probs_b.bias"), nullptr);
    EXPECT_EQ(g->find(p + "exp_probs_b.bias")->ne, (std::vector<int64_t>{E}));
    EXPECT_NE(g->find(p + "ffn_down_exps.weight"), nullptr);
    EXPECT_NE(g->find(p + "ffn_up_shexp.weight"), nullptr);
    EXPECT_NE(g->find(p + "ffn_down_shexp.weight"), nullptr);
    EXPECT_EQ(g->find(p + "ffn_gate_exps.weight"), nullptr);
  }
  EXPECT_EQ(g->get_float("nemotron_h_moe.expert_weights_scale").value(), cfg->moe_routed_scale);
  auto back = config_from_gguf(*g);
  ASSERT_TRUE(back.ok()) << back.error_message();
  EXPECT_EQ(back->ffn_kinds, cfg->ffn_kinds);
  EXPECT_EQ(back->n_expert_used, cfg->n_expert_used);
  EXPECT_EQ(back->moe_n_group, cfg->moe_n_group);
  EXPECT_EQ(back->moe_topk_group, cfg->moe_topk_group);
  EXPECT_EQ(back->norm_topk_prob, cfg->norm_topk_prob);
  EXPECT_EQ(back->shared_expert_intermediate_size, cfg->shared_expert_intermediate_size);
}

TEST(GgufMamba2Exact, PresetsThroughConvertSameLogitsAsHf) {
  for (const char* preset :
       {"granite-h-tiny", "granite-h-dense-tiny", "nemotron-h-tiny", "nemotron-h-moe-tiny"}) {
    SCOPED_TRACE(preset);
    expect_same_logits(preset_hf(preset, "f32"), preset_gguf(preset, "f32", "f32"), true);
  }
  SCOPED_TRACE("bf16");
  expect_same_logits(preset_hf("granite-h-tiny", "bf16"),
                     preset_gguf("granite-h-tiny", "bf16", "bf16"), false);
}

// Relative RMS distance of `got` from `want`, and the share of positions whose argmax agrees.
struct Closeness {
  double rel_rms = 0, argmax_agree = 0, median_pos_rms = 0;  // the last: per position
};
Closeness closeness(const std::vector<float>& want, const std::vector<float>& got, int64_t V) {
  double d2 = 0, w2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d2 += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    w2 += static_cast<double>(want[i]) * want[i];
  }
  int64_t agree = 0;
  const int64_t n = static_cast<int64_t>(want.size()) / V;
  std::vector<double> pos(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    auto a = want.begin() + p * V, b = got.begin() + p * V;
    agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
    double pd = 0, pw = 0;
    for (int64_t i = 0; i < V; ++i) {
      pd += (static_cast<double>(b[i]) - a[i]) * (static_cast<double>(b[i]) - a[i]);
      pw += static_cast<double>(a[i]) * a[i];
    }
    pos[static_cast<size_t>(p)] = std::sqrt(pd / pw);
  }
  std::nth_element(pos.begin(), pos.begin() + n / 2, pos.end());
  return {std::sqrt(d2 / w2), static_cast<double>(agree) / static_cast<double>(n),
          pos[static_cast<size_t>(n / 2)]};
}

TEST(GgufMamba2Exact, QuantisedFilesStayClose) {
  for (const char* preset :
       {"granite-h-tiny", "granite-h-dense-tiny", "nemotron-h-tiny", "nemotron-h-moe-tiny"}) {
    Model& ref = test::cached_model(preset_gguf(preset, "f32", "f32"));
    std::mt19937_64 rng(7);
    const auto tokens = test::random_tokens(rng, 48, ref.config().vocab_size);
    const auto want = chunked_logits(ref, tokens, 48, nullptr);
    // Bounds: relative RMS distance and argmax agreement. The random Nemotron-H blocks (squared
    // ReLU, untied head with a narrow logit spread) amplify weight error about four times more
    // than Granite's, whose logits the scaled input embedding dominates; its Q4_K_M / Q8_0 ratio
    // (about 9) is that of the per-weight errors.
    // The MoE preset's sigmoid router is discontinuous: where quantisation moves a score past a
    // gap, an expert is swapped and that position's logits move by 0.1 to 0.9 (relative; at
    // Q8_0 about 10 of 48 positions, at Q4_K_M nearly all), while the other positions stay as
    // close as the dense model's. Its Q8_0 bound is on the median position; at Q4_K_M only that
    // the logits stay correlated (unrelated logits of the same spread give about 1.4).
    const bool nemotron = std::string(preset).rfind("nemotron", 0) == 0;
    const bool moe = std::string(preset) == "nemotron-h-moe-tiny";
    struct Bound {
      const char* type;
      double rms, agree;
    };
    for (const Bound b :
         {Bound{"q8_0", nemotron ? 0.06 : 0.02, moe ? 0.75 : 0.9}, Bound{"q4_k_m",
                                                                         moe        ? 0.9
                                                                         : nemotron ? 0.4
                                                                                    : 0.06,
                                                                         moe        ? 0.0
                                                                         : nemotron ? 0.4
                                                                                    : 0.9}}) {
      const char* type = b.type;
      SCOPED_TRACE(std::string(preset) + " " + type);
      const std::string path = preset_gguf(preset, "f32", type);
      // The K-quant types are really used (every row length here is a multiple of 256).
      auto g = GgufFile::open(path);
      ASSERT_TRUE(g.ok());
      const GgmlType ssm_out = g->find("blk.0.ssm_out.weight")->type;
      EXPECT_EQ(ssm_out, std::string(type) == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_K);
      Model& m = test::cached_model(path);
      const auto got = chunked_logits(m, tokens, 48, nullptr);
      ASSERT_EQ(got.size(), want.size());
      for (float x : got) ASSERT_TRUE(std::isfinite(x));
      const Closeness c = closeness(want, got, ref.config().vocab_size);
      EXPECT_GT(c.rel_rms, 0.0);  // quantised for real
      EXPECT_LT(moe && std::string(type) == "q8_0" ? c.median_pos_rms : c.rel_rms, b.rms);
      EXPECT_GE(c.argmax_agree, b.agree);
      // Batch invariance holds for quantised files too: token by token gives the same bytes.
      ThreadPool pool(2, 0);  // every job shared, however small
      EXPECT_TRUE(same_bytes(chunked_logits(m, tokens, 1, &pool), got));
    }
  }
}

// Seeded weights are well conditioned: finite logits that spread and whose argmax varies.
TEST(GgufMamba2Exact, PresetLogitsAreNotDegenerate) {
  for (const char* preset :
       {"granite-h-tiny", "granite-h-dense-tiny", "nemotron-h-tiny", "nemotron-h-moe-tiny"}) {
    SCOPED_TRACE(preset);
    Model& m = test::cached_model(preset_hf(preset, "f32"));
    const int64_t V = m.config().vocab_size;
    std::mt19937_64 rng(3);
    const auto tokens = test::random_tokens(rng, 32, V);
    const auto l = chunked_logits(m, tokens, 32, nullptr);
    std::set<int64_t> argmaxes;
    for (int64_t p = 0; p < 32; ++p) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < V; ++i) mean += l[p * V + i];
      mean /= static_cast<double>(V);
      for (int64_t i = 0; i < V; ++i) {
        ASSERT_TRUE(std::isfinite(l[p * V + i]));
        var += (l[p * V + i] - mean) * (l[p * V + i] - mean);
      }
      EXPECT_GT(std::sqrt(var / static_cast<double>(V)), 0.1) << p;
      argmaxes.insert(std::max_element(l.begin() + p * V, l.begin() + (p + 1) * V) -
                      (l.begin() + p * V));
    }
    EXPECT_GT(argmaxes.size(), 8u);
  }
}

// The MoE preset through `rewind convert`: llama.cpp's nemotron_h_moe names, every expert
// matrix quantised in its stacked tensor.
TEST(GgufMamba2Exact, NemotronMoeConvertedLayout) {
  auto g = GgufFile::open(preset_gguf("nemotron-h-moe-tiny", "f32", "q8_0"));
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->get_string("general.architecture").value(), "nemotron_h_moe");
  for (const char* n :
       {"blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight", "blk.4.ffn_up_shexp.weight"})
    EXPECT_EQ(g->find(n)->type, GgmlType::Q8_0) << n;
  // The router and its bias stay F32, as llama-quantize leaves ffn_gate_inp.
  EXPECT_EQ(g->find("blk.4.ffn_gate_inp.weight")->type, GgmlType::F32);
  EXPECT_EQ(g->find("blk.1.exp_probs_b.bias")->type, GgmlType::F32);
  EXPECT_EQ(g->get_int("nemotron_h_moe.expert_group_count").value(), 4);
  EXPECT_EQ(g->get_int("nemotron_h_moe.expert_group_used_count").value(), 2);
}

// Every MoE router stays F32 in a quantised file, as llama-quantize leaves ffn_gate_inp (its
// experts and shared MLP are quantised): Granite's softmax router and Qwen3.5-MoE's.
TEST(GgufMamba2Exact, MoeRoutersStayF32) {
  for (const char* preset : {"granite-h-tiny", "qwen3.5-moe-tiny"}) {
    auto g = GgufFile::open(preset_gguf(preset, "f32", "q8_0"));
    ASSERT_TRUE(g.ok()) << g.error_message();
    int routers = 0;
    for (const auto& t : g->tensors()) {
      if (t.name.find("ffn_gate_inp.weight") != std::string::npos) {
        EXPECT_EQ(t.type, GgmlType::F32) << preset << " " << t.name;
        ++routers;
      }
      if (t.name.find("ffn_gate_exps.weight") != std::string::npos) {
        EXPECT_EQ(t.type, GgmlType::Q8_0) << preset << " " << t.name;
      }
    }
    EXPECT_GT(routers, 0) << preset;
  }
}

// make-model writes a quantised GGUF directly (the path the real shapes take).
TEST(GgufMamba2Exact, MakeModelWritesGgufDirectly) {
  const std::string path = work_dir() + "/direct_nemotron.gguf";
  sh(std::string(REWIND_BINARY) + " make-model --preset nemotron-h-tiny --format gguf --type " +
     "q4_k_m --seed 5 --out " + path);
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->get_string("general.architecture").value(), "nemotron_h");
  EXPECT_EQ(g->get_int("general.file_type").value(), 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  // The same weights as make-model's HF files converted by `rewind convert`.
  auto conv = GgufFile::open(preset_gguf("nemotron-h-tiny", "f32", "q4_k_m"));
  ASSERT_TRUE(conv.ok());
  for (const char* n : {"blk.0.ssm_in.weight", "blk.1.ffn_down.weight", "output.weight"}) {
    const GgufTensor* a = g->find(n);
    const GgufTensor* b = conv->find(n);
    ASSERT_TRUE(a && b) << n;
    ASSERT_EQ(a->nbytes, b->nbytes) << n;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << n;
  }
}

}  // namespace
}  // namespace rw
