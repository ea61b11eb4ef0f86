// Loading a checkpoint's weights: every missing or mis-shaped tensor and every unsupported
// dtype is a one-line error naming the file and the tensor; Qwen3-Next de-interleaving gives
// the split layout's rows.
#include "rewind/model/weight_source.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rewind/model/model.h"
#include "test_util.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

// Copies a fixture into a temp dir, rewriting its safetensors with `edit` applied.
std::string edited_copy(const std::string& variant, const std::string& tag,
                        const std::function<void(std::vector<TensorToWrite>&, std::vector<std::vector<float>>&)>& edit) {
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
    std::erase_if(tw, [](auto& t) { return t.name == "model.language_model.layers.1.linear_attn.in_proj_z.weight"; });
  });
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("missing tensor 'model.language_model.layers.1.linear_attn.in_proj_z.weight'"), std::string::npos) << e;
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
  const int64_t H = c.hidden_size, dk = c.lin_dk, dv = c.lin_dv, r = c.lin_n_head_v / c.lin_n_head_k;
  const int64_t blk = 2 * dk + 2 * r * dv;
  std::vector<float> row(static_cast<size_t>(H));
  // k of key head 1, dim 2 sits at split row key_dim + 1*dk + 2; in qkvz at 1*blk + dk + 2.
  in.row_f32(c.key_dim() + dk + 2, row.data());
  EXPECT_EQ(0, std::memcmp(row.data(), raw + (blk + dk + 2) * H, H * sizeof(float)));
  // z of value head 3 (key head 1, j = 1), dim 0: split row conv_dim + 3*dv.
  in.row_f32(c.conv_dim() + 3 * dv, row.data());
  EXPECT_EQ(0, std::memcmp(row.data(), raw + (blk + 2 * dk + r * dv + dv) * H, H * sizeof(float)));
}

}  // namespace
}  // namespace rw
