// Loading a checkpoint's weights: every missing or mis-shaped tensor and every unsupported
// dtype is a one-line error naming the file and the tensor; Qwen3-Next de-interleaving gives
// the split layout's rows; the MTP head (make-model --mtp) maps to its canonical names with the
// +1 folded, is optional as a whole, and a partial or mis-shaped head is an error.
#include "rewind/model/weight_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rewind/model/model.h"
#include "test_util.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

// Copies a fixture into a temp dir, rewriting its safetensors with `edit` applied.
std::string edited_copy(const std::string& variant, const std::string& tag,
                        const std::function<void(std::vector<TensorToWrite>&,
                                                 std::vector<std::vector<float>>&)>& edit) {
  const std::string src = test::fixture_dir(variant);
  const std::string dst = ::testing::TempDir() + "/ws_" + variant + "_" + tag;
  fs::create_directories(dst);
  fs::copy_file(src + "/config.json", dst + "/config.json", fs::copy_options::overwrite_existing);
  auto f = SafetensorsFile::open(src + "/model.safetensors");
  EXPECT_TRUE(f.ok());
  std::vector<TensorToWrite> tw;
  std::vector<std::vector<float>> keep;
  for (auto& t : f->tensors()) tw.push_back({t.name, t.dtype, t.shape, t.data});
  edit(tw, keep);
  EXPECT_TRUE(write_safetensors(dst + "/model.safetensors", tw).ok());
  return dst;
}

std::string load_error(const std::string& dir) {
  auto m = Model::load(dir, LoadOptions{});
  return m.ok() ? std::string() : m.error_message();
}

TEST(WeightSource, MissingTensor) {
  const std::string dir = edited_copy("qwen3_5", "missing", [](auto& tw, auto&) {
    std::erase_if(tw, [](auto& t) {
      return t.name == "model.language_model.layers.1.linear_attn.in_proj_z.weight";
    });
  });
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("missing tensor 'model.language_model.layers.1.linear_attn.in_proj_z.weight'"),
            std::string::npos)
      << e;
  // The message names the checkpoint's directory, as a mis-shaped tensor's names its file.
  EXPECT_NE(e.find("checkpoint " + std::filesystem::path(dir).string()), std::string::npos) << e;
}

TEST(WeightSource, MisShapedTensor) {
  const std::string dir = edited_copy("qwen3_5", "shape", [](auto& tw, auto&) {
    for (auto& t : tw)
      if (t.name == "model.language_model.layers.3.self_attn.k_proj.weight") t.shape = {32, 128};
  });
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("self_attn.k_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [64, 64]"), std::string::npos) << e;
}

TEST(WeightSource, UnsupportedDtype) {
  const std::string dir = edited_copy("qwen3_next", "dtype", [](auto& tw, auto&) {
    for (auto& t : tw)
      if (t.name == "model.layers.0.mlp.gate.weight") {
        t.dtype = DType::I32;  // same byte size as F32
      }
  });
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("model.layers.0.mlp.gate.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
}

TEST(WeightSource, TiedEmbeddingsWithoutLmHead) {
  const std::string dir = edited_copy("qwen3_5", "tied", [](auto& tw, auto&) {
    std::erase_if(tw, [](auto& t) { return t.name == "lm_head.weight"; });
  });
  auto m = Model::load(dir, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.error_message();
  std::vector<float> a(64), b(64);
  m.value()->weights().get("lm_head").row_f32(3, a.data());
  m.value()->weights().get("embed").row_f32(3, b.data());
  EXPECT_EQ(a, b);
}

TEST(WeightSource, Qwen3NextDeinterleavesToSplitLayout) {
  Model& m = test::cached_model(test::fixture_dir("qwen3_next"));
  const ModelConfig& c = m.config();
  auto f = SafetensorsFile::open(test::fixture_dir("qwen3_next") + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  const TensorView* qkvz = f->find("model.layers.0.linear_attn.in_proj_qkvz.weight");
  ASSERT_NE(qkvz, nullptr);
  const auto* raw = reinterpret_cast<const float*>(qkvz->data);
  const WeightSource& in = m.weights().get("l0.in_proj");
  const int64_t H = c.hidden_size, dk = c.lin_dk, dv = c.lin_dv,
                r = c.lin_n_head_v / c.lin_n_head_k;
  const int64_t blk = 2 * dk + 2 * r * dv;
  std::vector<float> row(static_cast<size_t>(H));
  // k of key head 1, dim 2 sits at split row key_dim + 1*dk + 2; in qkvz at 1*blk + dk + 2.
  in.row_f32(c.key_dim() + dk + 2, row.data());
  EXPECT_EQ(0, std::memcmp(row.data(), raw + (blk + dk + 2) * H, H * sizeof(float)));
  // z of value head 3 (key head 1, j = 1), dim 0: split row conv_dim + 3*dv.
  in.row_f32(c.conv_dim() + 3 * dv, row.data());
  EXPECT_EQ(0, std::memcmp(row.data(), raw + (blk + 2 * dk + r * dv + dv) * H, H * sizeof(float)));
}

// A `make-model --mtp` model of `preset` (per process: ctest runs tests in parallel), made once per
// process.
std::string mtp_model(const std::string& preset) {
  static std::map<std::string, std::string> made;
  auto it = made.find(preset);
  if (it != made.end()) return it->second;
  const std::string dir = test::scratch_dir("ws_mtp_" + preset);
  int rc = 0;
  const std::string out =
      test::run_command(std::string(REWIND_BINARY) + " make-model --mtp --preset " + preset +
                            " --out " + dir + " 2>&1",
                        &rc);
  EXPECT_EQ(rc, 0) << out;
  return made.emplace(preset, dir).first->second;
}

// A copy of model directory `src` with its safetensors rewritten through `edit` and its
// config.json through `edit_cfg`.
std::string edited_dir(const std::string& src, const std::string& tag,
                       const std::function<void(std::vector<TensorToWrite>&)>& edit,
                       const std::function<void(nlohmann::json&)>& edit_cfg = {}) {
  const std::string dst = ::testing::TempDir() + "/ws_" + tag;
  fs::create_directories(dst);
  std::ifstream cf(src + "/config.json");
  std::stringstream ss;
  ss << cf.rdbuf();
  auto cfg = nlohmann::json::parse(ss.str());
  if (edit_cfg) edit_cfg(cfg);
  std::ofstream(dst + "/config.json") << cfg.dump(2);
  auto f = SafetensorsFile::open(src + "/model.safetensors");
  EXPECT_TRUE(f.ok());
  std::vector<TensorToWrite> tw;
  for (auto& t : f->tensors()) tw.push_back({t.name, t.dtype, t.shape, t.data});
  edit(tw);
  EXPECT_TRUE(write_safetensors(dst + "/model.safetensors", tw).ok());
  return dst;
}

std::vector<float> raw_f32(const TensorView* t) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  convert_to_f32(t->data, t->dtype, v.size(), v.data());
  return v;
}

class MtpMapping : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpMapping, CanonicalNamesWithPlusOneFolded) {
  const std::string dir = mtp_model(GetParam());
  auto m = Model::load(dir, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.error_message();
  const ModelConfig& c = m.value()->config();
  const WeightSet& ws = m.value()->weights();
  ASSERT_EQ(c.mtp_num_hidden_layers, 1);
  ASSERT_TRUE(ws.has_mtp());
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  auto raw = [&](const std::string& n) {
    const TensorView* t = f->find(n);
    EXPECT_NE(t, nullptr) << n;
    return t ? raw_f32(t) : std::vector<float>();
  };
  const int64_t H = c.hidden_size, D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
  // mtp.fc is the file's [H, 2H] as is: columns [0, H) embedding, [H, 2H) hidden.
  const WeightSource& fc = ws.get("mtp.fc");
  ASSERT_EQ(fc.rows(), H);
  ASSERT_EQ(fc.cols, 2 * H);
  EXPECT_EQ(fc.to_f32(), raw("mtp.fc.weight"));
  // Zero-centred norms get +1.
  const std::vector<std::pair<std::string, std::string>> norms = {
      {"mtp.enorm", "mtp.pre_fc_norm_embedding.weight"},
      {"mtp.hnorm", "mtp.pre_fc_norm_hidden.weight"},
      {"mtp.norm", "mtp.norm.weight"}};
  std::string L = "l";  // appends: GCC 12 warns falsely on "l" + to_string
  L += std::to_string(c.n_layer) + ".";
  std::vector<std::pair<std::string, std::string>> layer_norms = {
      {L + "in_norm", "mtp.layers.0.input_layernorm.weight"},
      {L + "post_norm", "mtp.layers.0.post_attention_layernorm.weight"},
      {L + "q_norm", "mtp.layers.0.self_attn.q_norm.weight"},
      {L + "k_norm", "mtp.layers.0.self_attn.k_norm.weight"}};
  for (auto all : {norms, layer_norms})
    for (auto& [canon, hf] : all) {
      const auto got = ws.get(canon).to_f32();
      const auto want = raw(hf);
      ASSERT_EQ(got.size(), want.size()) << canon;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i] + 1.0f) << canon << " " << i;
    }
  // qkv = rows [q_proj (per-head q|gate) ; k_proj ; v_proj]; o_proj as is.
  std::vector<float> qkv = raw("mtp.layers.0.self_attn.q_proj.weight");
  for (const char* n : {"k_proj", "v_proj"}) {
    auto r = raw(std::string("mtp.layers.0.self_attn.") + n + ".weight");
    qkv.insert(qkv.end(), r.begin(), r.end());
  }
  ASSERT_EQ(ws.get(L + "qkv").rows(), nh * 2 * D + 2 * nkv * D);
  EXPECT_EQ(ws.get(L + "qkv").to_f32(), qkv);
  EXPECT_EQ(ws.get(L + "o_proj").to_f32(), raw("mtp.layers.0.self_attn.o_proj.weight"));
  // The family's FFN.
  const std::string mp = "mtp.layers.0.mlp.";
  if (c.n_expert == 0) {
    EXPECT_FALSE(c.mtp_layer_is_moe());
    auto gu = raw(mp + "gate_proj.weight"), up = raw(mp + "up_proj.weight");
    gu.insert(gu.end(), up.begin(), up.end());
    EXPECT_EQ(ws.get(L + "gate_up").to_f32(), gu);
    EXPECT_EQ(ws.get(L + "down").to_f32(), raw(mp + "down_proj.weight"));
    EXPECT_FALSE(ws.has(L + "router"));
  } else {
    EXPECT_TRUE(c.mtp_layer_is_moe());
    EXPECT_EQ(ws.get(L + "router").to_f32(), raw(mp + "gate.weight"));
    EXPECT_EQ(ws.get(L + "sh.gate").to_f32(), raw(mp + "shared_expert_gate.weight"));
    EXPECT_EQ(ws.get(L + "sh.down").to_f32(), raw(mp + "shared_expert.down_proj.weight"));
    const int64_t E = c.n_expert, Im = c.moe_intermediate_size, e = E - 1;
    const std::string ce = L + "e" + std::to_string(e) + ".";
    std::vector<float> gu, dn;
    if (f->find(mp + "experts.gate_up_proj")) {  // fused: slice of expert e
      const auto all_gu = raw(mp + "experts.gate_up_proj"), all_dn = raw(mp + "experts.down_proj");
      gu.assign(all_gu.begin() + e * 2 * Im * H, all_gu.begin() + (e + 1) * 2 * Im * H);
      dn.assign(all_dn.begin() + e * H * Im, all_dn.begin() + (e + 1) * H * Im);
    } else {  // per expert
      const std::string ep = mp + "experts." + std::to_string(e) + ".";
      gu = raw(ep + "gate_proj.weight");
      const auto up = raw(ep + "up_proj.weight");
      gu.insert(gu.end(), up.begin(), up.end());
      dn = raw(ep + "down_proj.weight");
    }
    EXPECT_EQ(ws.get(ce + "gate_up").to_f32(), gu);
    EXPECT_EQ(ws.get(ce + "down").to_f32(), dn);
    EXPECT_FALSE(ws.has(L + "gate_up"));
  }
  // Nothing past the MTP layer.
  EXPECT_FALSE(ws.has("l" + std::to_string(c.n_layer + 1) + ".in_norm"));
}

TEST_P(MtpMapping, AbsentHeadIsNotAnError) {
  const std::string dir = edited_dir(
      mtp_model(GetParam()), "mtp_absent_" + GetParam(),
      [](auto& tw) { std::erase_if(tw, [](auto& t) { return t.name.rfind("mtp.", 0) == 0; }); });
  auto m = Model::load(dir, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.error_message();
  EXPECT_EQ(m.value()->config().mtp_num_hidden_layers, 1);
  EXPECT_FALSE(m.value()->weights().has_mtp());
  EXPECT_FALSE(m.value()->weights().has("mtp.fc"));
}

TEST_P(MtpMapping, PartialHeadNamesTheMissingTensor) {
  const std::string dir =
      edited_dir(mtp_model(GetParam()), "mtp_partial_" + GetParam(), [](auto& tw) {
        std::erase_if(tw, [](auto& t) { return t.name == "mtp.layers.0.self_attn.k_proj.weight"; });
      });
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("missing tensor 'mtp.layers.0.self_attn.k_proj.weight'"), std::string::npos)
      << e;
  EXPECT_NE(e.find("MTP head"), std::string::npos) << e;
}

TEST_P(MtpMapping, MisShapedHeadNamesTheTensor) {
  const std::string dir =
      edited_dir(mtp_model(GetParam()), "mtp_shape_" + GetParam(), [](auto& tw) {
        for (auto& t : tw)
          if (t.name == "mtp.fc.weight") t.shape = {64, 64};
      });
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("tensor 'mtp.fc.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [64, 128]"), std::string::npos) << e;
}

TEST_P(MtpMapping, IgnoredWhenConfigHasNoMtpLayers) {
  const std::string dir = edited_dir(
      mtp_model(GetParam()), "mtp_cfg0_" + GetParam(), [](auto&) {},
      [](nlohmann::json& cfg) {
        auto& tc = cfg.contains("text_config") ? cfg["text_config"] : cfg;
        tc["mtp_num_hidden_layers"] = 0;
      });
  auto m = Model::load(dir, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.error_message();
  EXPECT_FALSE(m.value()->weights().has_mtp());
  EXPECT_FALSE(m.value()->weights().mtp_tensor_names().empty());
}

TEST(WeightSource, FixturesWithoutMtpHaveNoHead) {
  for (const auto& v : test::fixture_variants())
    EXPECT_FALSE(test::cached_model(test::fixture_dir(v)).weights().has_mtp()) << v;
}

INSTANTIATE_TEST_SUITE_P(Families, MtpMapping,
                         ::testing::Values("tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace_if(
                               n.begin(), n.end(), [](char ch) { return !std::isalnum(ch); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace rw
