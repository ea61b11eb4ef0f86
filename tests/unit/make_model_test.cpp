// `rewind make-model` options beyond the presets: tiny-dense (attention only, tiny's tokenizer,
// loads with no recurrent state and matches the naive reference), --layers / --layer-types, and
// --from DIR --noise SIGMA (every float weight but A_log perturbed by SIGMA * rms, per-name
// seeded, same dtype; everything else byte-identical).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rewind/model/reference.h"
#include "test_util.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

std::string make_model(const std::string& args, const std::string& tag, int* rc) {
  const std::string dir = test::scratch_dir("mm_" + tag);
  fs::remove_all(dir);
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " make-model " + args + " --out " + dir + " 2>&1", rc);
  if (*rc != 0) return out;
  return dir;
}

std::string must_make(const std::string& args, const std::string& tag) {
  int rc = 0;
  const std::string dir = make_model(args, tag, &rc);
  EXPECT_EQ(rc, 0) << dir;
  return dir;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(MakeModel, TinyDenseIsAttentionOnlyWithTinysTokenizer) {
  const std::string dense = must_make("--preset tiny-dense", "dense");
  const std::string tiny = must_make("--preset tiny", "tiny_for_dense");
  EXPECT_EQ(file_bytes(dense + "/tokenizer.json"), file_bytes(tiny + "/tokenizer.json"));
  EXPECT_EQ(file_bytes(dense + "/tokenizer_config.json"),
            file_bytes(tiny + "/tokenizer_config.json"));
  Model& m = test::cached_model(dense);
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.n_recurrent_layers(), 0);
  EXPECT_EQ(c.n_attention_layers(), c.n_layer);
  EXPECT_EQ(c.vocab_size, test::cached_model(tiny).config().vocab_size);
  EXPECT_EQ(m.state_shape().n_rec_layers, 0);
  // The fast path on a model with no GDN layer agrees with the naive reference.
  ReferenceModel ref(c, m.weights());
  std::mt19937_64 rng(3);
  const auto tokens = test::random_tokens(rng, 20, c.vocab_size);
  const auto want = ref.forward(tokens);
  SequenceState st = m.new_state();
  SeqInput in{&st, tokens, {}};
  for (size_t i = 0; i < tokens.size(); ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
  std::vector<float> logits;
  ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t v = 0; v < c.vocab_size; ++v)
      ASSERT_NEAR(logits[t * c.vocab_size + v], want[t][v], 1e-4);
}

TEST(MakeModel, LayerTypesAndLayers) {
  Model& m = test::cached_model(
      must_make("--preset qwen3-next-tiny --layer-types linear,full,full", "types"));
  ASSERT_EQ(m.config().n_layer, 3);
  EXPECT_EQ(m.config().layer_kinds,
            (std::vector<LayerKind>{LayerKind::GatedDeltaNet, LayerKind::Attention,
                                    LayerKind::Attention}));
  Model& m6 = test::cached_model(must_make("--preset tiny --layers 6", "layers6"));
  ASSERT_EQ(m6.config().n_layer, 6);
  EXPECT_EQ(m6.config().n_attention_layers(), 1);  // layer 3 (every 4th)
  int rc = 0;
  const std::string e1 = make_model("--preset tiny --layers 2 --layer-types full", "bad1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(e1.find("--layer-types has 1 entries but --layers is 2"), std::string::npos) << e1;
  const std::string e2 = make_model("--preset tiny --layer-types full,mamba", "bad2", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(e2.find("'mamba'"), std::string::npos) << e2;
}

// Per-tensor relative RMS of (b - a) / rms(a), for the float tensors of two model dirs.
std::map<std::string, double> rel_noise(const std::string& a, const std::string& b,
                                        std::map<std::string, DType>* dt) {
  auto fa = SafetensorsFile::open(a + "/model.safetensors");
  auto fb = SafetensorsFile::open(b + "/model.safetensors");
  EXPECT_TRUE(fa.ok() && fb.ok());
  std::map<std::string, double> out;
  EXPECT_EQ(fa->tensors().size(), fb->tensors().size());
  for (const TensorView& t : fa->tensors()) {
    const TensorView* u = fb->find(t.name);
    EXPECT_NE(u, nullptr) << t.name;
    if (!u) continue;
    EXPECT_EQ(u->dtype, t.dtype) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    (*dt)[t.name] = u->dtype;
    std::vector<float> x(static_cast<size_t>(t.numel())), y(x.size());
    convert_to_f32(t.data, t.dtype, x.size(), x.data());
    convert_to_f32(u->data, u->dtype, y.size(), y.data());
    double ss = 0, dd = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ss += static_cast<double>(x[i]) * x[i];
      dd += static_cast<double>(y[i] - x[i]) * (y[i] - x[i]);
    }
    out[t.name] = std::sqrt(dd / std::max(ss, 1e-30));
  }
  return out;
}

TEST(MakeModel, NoiseCopyPerturbsEveryFloatWeightButALog) {
  for (const std::string dtype : {"f32", "bf16"}) {
    const std::string src =
        must_make("--preset qwen3.5-moe-tiny --mtp --dtype " + dtype, "noise_src_" + dtype);
    const std::string a = must_make("--from " + src + " --noise 0.1 --seed 4", "noise_a_" + dtype);
    const std::string b = must_make("--from " + src + " --noise 0.1 --seed 4", "noise_b_" + dtype);
    const std::string c = must_make("--from " + src + " --noise 0.1 --seed 5", "noise_c_" + dtype);
    for (const char* f :
         {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      EXPECT_EQ(file_bytes(src + "/" + f), file_bytes(a + "/" + f)) << f;
    EXPECT_EQ(file_bytes(a + "/model.safetensors"), file_bytes(b + "/model.safetensors"));
    EXPECT_NE(file_bytes(a + "/model.safetensors"), file_bytes(c + "/model.safetensors"));
    std::map<std::string, DType> dt;
    const auto rel = rel_noise(src, a, &dt);
    int n_alog = 0;
    for (auto& [name, r] : rel) {
      if (name.find("A_log") != std::string::npos) {
        EXPECT_EQ(r, 0.0) << name;
        ++n_alog;
        continue;
      }
      // Relative RMS change ~ sigma: loose bounds (small vectors, bf16 rounding).
      EXPECT_GT(r, 0.03) << name;
      EXPECT_LT(r, 0.2) << name;
    }
    EXPECT_GT(n_alog, 0);
    EXPECT_EQ(dt.at("model.language_model.embed_tokens.weight"),
              dtype == "f32" ? DType::F32 : DType::BF16);
    // The noisy copy loads and runs, MTP head included.
    auto m = Model::load(a, LoadOptions{});
    ASSERT_TRUE(m.ok()) << m.error_message();
    EXPECT_TRUE(m.value()->weights().has_mtp());
  }
  // Sigma 0 copies the weights exactly.
  const std::string src = must_make("--preset tiny", "noise0_src");
  const std::string z = must_make("--from " + src + " --noise 0", "noise0");
  EXPECT_EQ(file_bytes(src + "/model.safetensors"), file_bytes(z + "/model.safetensors"));
  int rc = 0;
  const std::string e = make_model("--from " + src, "noise_missing", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(e.find("--noise"), std::string::npos) << e;
}

// `make-model --format gguf` makes each weight in memory and writes it straight into the GGUF
// file; the file is byte for byte what `convert` writes from the same preset's HF checkpoint
// (the HF directory is named so that convert's general.name is make-model's), for every
// family, plain and mixture types, F32 and BF16 sources.
TEST(MakeModel, GgufDirectEqualsConvertOfTheHfCheckpoint) {
  struct Case {
    std::string preset, type, dtype;
  };
  const std::vector<Case> cases = {{"granite-h-tiny", "q4_k_m", "bf16"},
                                   {"granite-h-dense-tiny", "q8_0", "f32"},
                                   {"nemotron-h-tiny", "q5_k_m", "f32"},
                                   {"nemotron-h-moe-tiny", "q4_k", "bf16"},
                                   {"tiny", "f32", "f32"},
                                   {"qwen3.5-moe-tiny", "q8_0", "bf16"},
                                   {"qwen3-next-tiny", "bf16", "f32"}};
  const std::string root = test::made_scratch_dir("mm_gguf_direct");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.preset + " " + c.type);
    const std::string hf = root + "/rewind " + c.preset;
    const std::string a = root + "/" + c.preset + "-convert.gguf";
    const std::string b = root + "/" + c.preset + "-direct.gguf";
    const std::string opts = "--preset " + c.preset + " --dtype " + c.dtype + " --seed 3";
    int rc = 0;
    std::string out = test::run_command(
        std::string(REWIND_BINARY) + " make-model " + opts + " --out '" + hf + "' 2>&1", &rc);
    ASSERT_EQ(rc, 0) << out;
    out = test::run_command(std::string(REWIND_BINARY) + " convert --in '" + hf + "' -o " + a +
                                " --type " + c.type + " 2>&1",
                            &rc);
    ASSERT_EQ(rc, 0) << out;
    out = test::run_command(std::string(REWIND_BINARY) + " make-model " + opts +
                                " --format gguf --type " + c.type + " --out " + b + " 2>&1",
                            &rc);
    ASSERT_EQ(rc, 0) << out;
    const std::string fa = file_bytes(a), fb = file_bytes(b);
    EXPECT_GT(fa.size(), 100000u);
    EXPECT_TRUE(fa == fb) << a << " and " << b << " differ (" << fa.size() << " and " << fb.size()
                          << " bytes)";
  }
  int rc = 0;
  const std::string e = test::run_command(
      std::string(REWIND_BINARY) + " make-model --preset granite-h-tiny --format gguf 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(e.find("--out FILE.gguf is required"), std::string::npos) << e;
}

}  // namespace
}  // namespace rw
