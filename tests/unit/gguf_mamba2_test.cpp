// GGUF files of the Mamba2 hybrids (llama.cpp's granitehybrid and nemotron_h layouts,
// docs/MAMBA2.md "GGUF"): the writer puts the fixtures' weights under llama.cpp's names, shapes
// and keys; the reader gives back the HF configuration; and every malformed variant of a valid
// file (a key missing, out of range or inconsistent; a tensor missing or mis-shaped) fails with
// one line naming the file and the key or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "gguf_edit.h"
#include "model_run.h"
#include "rewind/io/gguf.h"
#include "rewind/io/safetensors.h"
#include "rewind/model/gguf_model.h"
#include "test_util.h"

namespace rw {
namespace {

std::string work_dir() {
  static const std::string d = test::made_scratch_dir("gguf_mamba2");
  return d;
}

// The fixture `variant` (tests/data/mamba2-tiny) written as GGUF with matrices `type` (the
// Q4_K_M mixture when km), made once per process.
std::string fixture_gguf(const std::string& variant, DType type = DType::F32, bool km = false) {
  const std::string path = work_dir() + "/" + variant + "_" + std::string(dtype_name(type)) +
                           (km ? "_km" : "") + ".gguf";
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
  Status st = write_gguf_model(path, *cfg, *ws, v, type, "fixture",
                               km ? gguf_k_m_rule(*cfg, 0, type) : nullptr);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return path;
}

using Kv = test::GgufKv;
using T = test::GgufEditTensor;
using test::expect_load_error;

// Copies a valid file with edits to its metadata and tensors; returns the new path.
std::string rewrite(const std::string& src, const std::string& tag,
                    const std::function<void(Kv&)>& kv_edit,
                    const std::function<void(std::vector<T>&)>& t_edit = nullptr) {
  return test::rewrite_gguf(src, work_dir() + "/edit_" + tag + ".gguf", kv_edit, t_edit);
}
void set(Kv& kv, const std::string& k, GgufValue v) {
  test::kv_set(kv, k, std::move(v));
}
void drop(Kv& kv, const std::string& k) {
  test::kv_drop(kv, k);
}
std::function<void(std::vector<T>&)> drop_tensor(const std::string& name) {
  return [name](std::vector<T>& ts) {
    const size_t n = ts.size();
    std::erase_if(ts, [&](const T& t) { return t.name == name; });
    EXPECT_EQ(ts.size() + 1, n) << name;
  };
}
std::function<void(std::vector<T>&)> reshape(const std::string& name, std::vector<int64_t> ne) {
  return [name, ne](std::vector<T>& ts) {
    bool found = false;
    for (auto& t : ts)
      if (t.name == name) {
        t.ne = ne;
        found = true;
      }
    EXPECT_TRUE(found) << name;
  };
}

const GgufTensor& tensor(const GgufFile& g, const std::string& name) {
  const GgufTensor* t = g.find(name);
  EXPECT_NE(t, nullptr) << name;
  static const GgufTensor none{};
  return t ? *t : none;
}

TEST(GgufMamba2, ConfigMatchesHf) {
  for (const char* variant : {"granitemoehybrid", "nemotron_h", "nemotron_h_moe"}) {
    SCOPED_TRACE(variant);
    auto g = GgufFile::open(fixture_gguf(variant));
    ASSERT_TRUE(g.ok()) << g.error_message();
    auto c = config_from_gguf(*g);
    ASSERT_TRUE(c.ok()) << c.error_message();
    auto h = load_model_config(test::fixture_dir(variant) + "/config.json");
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(c->family, h->family);
    EXPECT_EQ(c->vocab_size, h->vocab_size);
    EXPECT_EQ(c->hidden_size, h->hidden_size);
    EXPECT_EQ(c->n_layer, h->n_layer);
    EXPECT_EQ(c->layer_kinds, h->layer_kinds);
    EXPECT_EQ(c->ffn_kinds, h->ffn_kinds);
    EXPECT_EQ(c->n_head, h->n_head);
    EXPECT_EQ(c->n_head_kv, h->n_head_kv);
    EXPECT_EQ(c->head_dim, h->head_dim);
    EXPECT_EQ(c->rope_dim, 0);
    EXPECT_EQ(c->ssm_n_head, h->ssm_n_head);
    EXPECT_EQ(c->ssm_head_dim, h->ssm_head_dim);
    EXPECT_EQ(c->ssm_n_group, h->ssm_n_group);
    EXPECT_EQ(c->ssm_d_state, h->ssm_d_state);
    EXPECT_EQ(c->ssm_norm_groups, h->ssm_norm_groups);
    EXPECT_EQ(c->ssm_conv_bias, h->ssm_conv_bias);
    EXPECT_EQ(c->conv_kernel, h->conv_kernel);
    EXPECT_EQ(c->intermediate_size, h->intermediate_size);
    EXPECT_EQ(c->n_expert, h->n_expert);
    EXPECT_EQ(c->n_expert_used, h->n_expert_used);
    EXPECT_EQ(c->moe_intermediate_size, h->moe_intermediate_size);
    EXPECT_EQ(c->shared_expert_intermediate_size, h->shared_expert_intermediate_size);
    EXPECT_EQ(c->shared_expert_gate, h->shared_expert_gate);
    EXPECT_EQ(c->attn_scale, h->attn_scale);
    EXPECT_EQ(c->embedding_multiplier, h->embedding_multiplier);
    EXPECT_EQ(c->residual_multiplier, h->residual_multiplier);
    EXPECT_EQ(c->logits_scaling, h->logits_scaling);
    EXPECT_EQ(c->tie_word_embeddings, h->tie_word_embeddings);
    EXPECT_EQ(static_cast<float>(c->rms_norm_eps), static_cast<float>(h->rms_norm_eps));
    EXPECT_EQ(c->moe_relu2, h->moe_relu2);
    EXPECT_EQ(c->moe_sigmoid_router, h->moe_sigmoid_router);
    EXPECT_EQ(c->moe_n_group, h->moe_n_group);
    EXPECT_EQ(c->moe_topk_group, h->moe_topk_group);
    EXPECT_EQ(c->norm_topk_prob, h->norm_topk_prob);
    EXPECT_EQ(static_cast<float>(c->moe_routed_scale), static_cast<float>(h->moe_routed_scale));
    EXPECT_EQ(g->get_string("general.architecture").value(), gguf_arch_name(*h));
  }
}

// Granite fixture: layers M * M M *, hidden 64, Mamba2 8 x 16 (d_inner 128), N 24, G 1, K 4;
// attention 4 / 2 heads of 16; 4 experts of 32, shared 48; tied.
TEST(GgufMamba2, GraniteNamesShapesAndKeys) {
  auto g = GgufFile::open(fixture_gguf("granitemoehybrid"));
  ASSERT_TRUE(g.ok()) << g.error_message();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
      {"token_embd.weight", {64, 256}},
      {"output_norm.weight", {64}},
      {"blk.0.attn_norm.weight", {64}},
      {"blk.0.ffn_norm.weight", {64}},
      {"blk.0.ssm_in.weight", {64, 312}},
      {"blk.0.ssm_conv1d.weight", {4, 176}},
      {"blk.0.ssm_conv1d.bias", {176}},
      {"blk.0.ssm_a", {1, 8}},
      {"blk.0.ssm_d", {1, 8}},
      {"blk.0.ssm_dt.bias", {8}},
      {"blk.0.ssm_norm.weight", {128, 1}},
      {"blk.0.ssm_out.weight", {128, 64}},
      {"blk.1.attn_q.weight", {64, 64}},
      {"blk.1.attn_k.weight", {64, 32}},
      {"blk.1.attn_v.weight", {64, 32}},
      {"blk.1.attn_output.weight", {64, 64}},
      {"blk.1.ffn_gate_inp.weight", {64, 4}},
      {"blk.1.ffn_gate_exps.weight", {64, 32, 4}},
      {"blk.1.ffn_up_exps.weight", {64, 32, 4}},
      {"blk.1.ffn_down_exps.weight", {32, 64, 4}},
      {"blk.1.ffn_gate_shexp.weight", {64, 48}},
      {"blk.1.ffn_up_shexp.weight", {64, 48}},
      {"blk.1.ffn_down_shexp.weight", {48, 64}}};
  for (auto& [name, ne] : want) EXPECT_EQ(tensor(*g, name).ne, ne) << name;
  EXPECT_EQ(g->find("output.weight"), nullptr);  // tied
  EXPECT_EQ(g->find("blk.1.ssm_in.weight"), nullptr);
  EXPECT_EQ(g->find("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(g->find("blk.0.ffn_gate.weight"), nullptr);  // the shared MLP is _shexp with experts
  EXPECT_EQ(g->get_int("granitehybrid.ssm.time_step_rank").value(), 8);
  EXPECT_EQ(g->get_int("granitehybrid.ssm.inner_size").value(), 128);
  EXPECT_EQ(g->get_int("granitehybrid.ssm.state_size").value(), 24);
  EXPECT_EQ(g->get_int("granitehybrid.ssm.group_count").value(), 1);
  EXPECT_EQ(g->get_int("granitehybrid.ssm.conv_kernel").value(), 4);
  EXPECT_EQ(g->get_ints("granitehybrid.attention.head_count_kv").value(),
            (std::vector<int64_t>{0, 2, 0, 0, 2}));
  EXPECT_EQ(g->get_int("granitehybrid.feed_forward_length").value(), 32);
  EXPECT_EQ(g->get_int("granitehybrid.expert_shared_feed_forward_length").value(), 48);
  EXPECT_EQ(g->get_int("granitehybrid.expert_count").value(), 4);
  EXPECT_EQ(g->get_int("granitehybrid.expert_used_count").value(), 2);
  EXPECT_EQ(g->get_float("granitehybrid.embedding_scale").value(), 12.0);
  EXPECT_EQ(g->get_float("granitehybrid.residual_scale").value(), 0.25);
  EXPECT_EQ(g->get_float("granitehybrid.attention.scale").value(), 0.125);
  EXPECT_EQ(g->get_float("granitehybrid.logit_scale").value(), 3.0);
  EXPECT_EQ(g->get_bool_or("granitehybrid.rope.scaling.finetuned", true).value(), false);

  // ssm_a holds -exp(A_log), ssm_d and the gated norm the HF values as they are.
  auto ts = TensorSet::open_dir(test::fixture_dir("granitemoehybrid"));
  ASSERT_TRUE(ts.ok());
  auto hf = [&](const std::string& n) {
    const TensorView* v = ts->find(n);
    EXPECT_NE(v, nullptr) << n;
    std::vector<float> out(static_cast<size_t>(v->numel()));
    convert_to_f32(v->data, v->dtype, out.size(), out.data());
    return out;
  };
  auto gg = [&](const std::string& n) {
    const GgufTensor& t = tensor(*g, n);
    EXPECT_EQ(t.type, GgmlType::F32) << n;
    std::vector<float> out(static_cast<size_t>(t.numel()));
    std::memcpy(out.data(), t.data, out.size() * 4);
    return out;
  };
  const auto alog = hf("model.layers.3.mamba.A_log"), a = gg("blk.3.ssm_a");
  ASSERT_EQ(alog.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], -std::exp(alog[i])) << i;
  EXPECT_EQ(gg("blk.3.ssm_d"), hf("model.layers.3.mamba.D"));
  EXPECT_EQ(gg("blk.3.ssm_norm.weight"), hf("model.layers.3.mamba.norm.weight"));
  EXPECT_EQ(gg("blk.3.ssm_conv1d.bias"), hf("model.layers.3.mamba.conv1d.bias"));
}

// Nemotron-H fixture: pattern M-M*M-, hidden 64, Mamba2 12 x 16 (d_inner 192), N 20, G 2;
// attention 4 / 2 heads of 24; MLP 96; untied.
TEST(GgufMamba2, NemotronNamesShapesAndKeys) {
  auto g = GgufFile::open(fixture_gguf("nemotron_h"));
  ASSERT_TRUE(g.ok()) << g.error_message();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
      {"output.weight", {64, 256}},        {"blk.0.attn_norm.weight", {64}},
      {"blk.0.ssm_in.weight", {64, 476}},  {"blk.0.ssm_conv1d.weight", {4, 272}},
      {"blk.0.ssm_norm.weight", {96, 2}},  {"blk.0.ssm_a", {1, 12}},
      {"blk.1.attn_norm.weight", {64}},    {"blk.1.ffn_up.weight", {64, 96}},
      {"blk.1.ffn_down.weight", {96, 64}}, {"blk.3.attn_q.weight", {64, 96}},
      {"blk.3.attn_k.weight", {64, 48}},   {"blk.3.attn_output.weight", {96, 64}}};
  for (auto& [name, ne] : want) EXPECT_EQ(tensor(*g, name).ne, ne) << name;
  EXPECT_EQ(g->find("blk.1.ffn_norm.weight"), nullptr);
  EXPECT_EQ(g->find("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(g->get_ints("nemotron_h.attention.head_count_kv").value(),
            (std::vector<int64_t>{0, 0, 0, 2, 0, 0}));
  EXPECT_EQ(g->get_ints("nemotron_h.feed_forward_length").value(),
            (std::vector<int64_t>{0, 96, 0, 0, 0, 96}));
  EXPECT_EQ(g->get_int("nemotron_h.attention.key_length").value(), 24);
  EXPECT_EQ(g->get_int("nemotron_h.attention.value_length").value(), 24);
  EXPECT_EQ(g->get_int("nemotron_h.ssm.time_step_rank").value(), 12);
  EXPECT_EQ(g->get_int("nemotron_h.ssm.group_count").value(), 2);
  EXPECT_EQ(g->get("nemotron_h.embedding_scale"), nullptr);
  // llama.cpp's nemotron_h loader refuses a file without attention.layer_norm_epsilon.
  EXPECT_EQ(g->get_float("nemotron_h.attention.layer_norm_epsilon").value(),
            g->get_float("nemotron_h.attention.layer_norm_rms_epsilon").value());
}

TEST(GgufMamba2, GraniteMetadataErrors) {
  const std::string src = fixture_gguf("granitemoehybrid");
  const std::string a = "granitehybrid.";
  for (const char* k : {"ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank",
                        "ssm.group_count", "attention.head_count_kv", "feed_forward_length",
                        "attention.layer_norm_rms_epsilon", "expert_used_count",
                        "expert_shared_feed_forward_length", "embedding_length"})
    expect_load_error(rewrite(src, std::string("g_no_") + k, [&](Kv& kv) { drop(kv, a + k); }),
                      "missing key '" + a + k + "'");
  auto edit = [&](const std::string& tag, const std::string& k, GgufValue v,
                  const std::string& what) {
    expect_load_error(rewrite(src, "g_" + tag, [&](Kv& kv) { set(kv, a + k, v); }), what);
  };
  edit("inner", "ssm.inner_size", GgufValue::u32(100),
       "'granitehybrid.ssm.inner_size' = 100 is not a multiple of 'ssm.time_step_rank'");
  edit("groups", "ssm.group_count", GgufValue::u32(3),
       "is not a multiple of 'ssm.group_count' = 3");
  edit("heads0", "ssm.time_step_rank", GgufValue::u32(0),
       "ssm.time_step_rank' = 0 is out of range");
  edit("kvlen", "attention.head_count_kv", GgufValue::array_i32({0, 2, 0}),
       "'granitehybrid.attention.head_count_kv' has 3 entries but block_count is 5");
  edit("kvmix", "attention.head_count_kv", GgufValue::array_i32({0, 2, 0, 0, 1}),
       "has 1 at block 4 but 2 at an earlier attention block");
  edit("kvdiv", "attention.head_count_kv", GgufValue::array_i32({0, 3, 0, 0, 3}),
       "'granitehybrid.attention.head_count' = 4 is not a multiple of 'attention.head_count_kv'");
  edit("ffmix", "feed_forward_length", GgufValue::array_i32({32, 32, 16, 32, 32}),
       "has 16 at block 2 but 32 at block 0");
  edit("ff0", "feed_forward_length", GgufValue::u32(0), "feed_forward_length' = 0 is out of range");
  edit("rope", "rope.scaling.finetuned", GgufValue::boolean(true),
       "'granitehybrid.rope.scaling.finetuned' is true");
  expect_load_error(
      rewrite(src, "g_norope", [&](Kv& kv) { drop(kv, a + "rope.scaling.finetuned"); }),
      "'granitehybrid.rope.scaling.finetuned' is absent (llama.cpp then applies RoPE)");
  edit("emb", "embedding_scale", GgufValue::f32(-1), "'granitehybrid.embedding_scale' = -1");
  edit("res", "residual_scale", GgufValue::f32(0), "'granitehybrid.residual_scale' = 0");
  edit("logit", "logit_scale", GgufValue::f32(NAN), "'granitehybrid.logit_scale' = nan");
  edit("ascale", "attention.scale", GgufValue::f32(0), "'granitehybrid.attention.scale' = 0");
  edit("used", "expert_used_count", GgufValue::u32(5), "expert_used_count' = 5 is out of range");
  edit("experts8", "expert_count", GgufValue::u32(8),
       "tensor 'blk.0.ffn_gate_inp.weight': shape [4, 64] (ne reversed), expected [8, 64]");
  edit("dense", "expert_count", GgufValue::u32(0),
       "tensor 'blk.0.ffn_gate_inp.weight' is present but 'granitehybrid.expert_count' is absent "
       "or 0");
  edit("vlen", "attention.value_length", GgufValue::u32(8),
       "'granitehybrid.attention.value_length' = 8 differs from 'attention.key_length' = 16");
  edit("eps", "attention.layer_norm_rms_epsilon", GgufValue::f32(-1e-5),
       "layer_norm_rms_epsilon' must be positive");
  edit("hidden", "embedding_length", GgufValue::u32(32),
       "tensor 'token_embd.weight' has ne[0] = 64 but 'granitehybrid.embedding_length' is 32");
}

TEST(GgufMamba2, NemotronMetadataErrors) {
  const std::string src = fixture_gguf("nemotron_h");
  const std::string a = "nemotron_h.";
  for (const char* k : {"ssm.time_step_rank", "attention.head_count_kv", "feed_forward_length"})
    expect_load_error(rewrite(src, std::string("n_no_") + k, [&](Kv& kv) { drop(kv, a + k); }),
                      "missing key '" + a + k + "'");
  auto edit = [&](const std::string& tag, const std::string& k, GgufValue v,
                  const std::string& what) {
    expect_load_error(rewrite(src, "n_" + tag, [&](Kv& kv) { set(kv, a + k, v); }), what);
  };
  edit("both", "feed_forward_length", GgufValue::array_i32({0, 96, 0, 96, 0, 96}),
       "'nemotron_h.feed_forward_length' and 'attention.head_count_kv' are both non-zero at block "
       "3");
  edit("ffmix", "feed_forward_length", GgufValue::array_i32({0, 96, 0, 0, 0, 48}),
       "has 48 at block 5 but 96 at an earlier MLP block");
  edit("fflen", "feed_forward_length", GgufValue::array_i32({0, 96}),
       "'nemotron_h.feed_forward_length' has 2 entries but block_count is 6");
  // Turning the MLP block 1 into a Mamba2 block: its tensors are not there.
  edit("kinds", "feed_forward_length", GgufValue::array_i32({0, 0, 0, 0, 0, 96}),
       "missing tensor 'blk.1.ssm_in.weight'");
  edit("klen", "attention.key_length", GgufValue::u32(16), "attention.value_length' = 24 differs");
  // The epsilon as llama.cpp reads it: the RMS key, else attention.layer_norm_epsilon.
  expect_load_error(rewrite(src, "n_no_eps",
                            [&](Kv& kv) {
                              drop(kv, a + "attention.layer_norm_rms_epsilon");
                              drop(kv, a + "attention.layer_norm_epsilon");
                            }),
                    "missing key 'nemotron_h.attention.layer_norm_rms_epsilon'");
  expect_load_error(rewrite(src, "n_bad_eps",
                            [&](Kv& kv) {
                              drop(kv, a + "attention.layer_norm_rms_epsilon");
                              set(kv, a + "attention.layer_norm_epsilon", GgufValue::f32(0));
                            }),
                    "'nemotron_h.attention.layer_norm_epsilon' must be positive");
  auto only_eps =
      Model::load(rewrite(src, "n_only_eps",
                          [&](Kv& kv) {
                            drop(kv, a + "attention.layer_norm_rms_epsilon");
                            set(kv, a + "attention.layer_norm_epsilon", GgufValue::f32(0.25f));
                          }),
                  LoadOptions{});
  ASSERT_TRUE(only_eps.ok()) << only_eps.error_message();
  EXPECT_EQ(only_eps.value()->config().rms_norm_eps, 0.25);
  expect_load_error(rewrite(src, "n_moe", nullptr,
                            [](std::vector<T>& ts) {
                              ts.push_back({"blk.5.ffn_gate_inp.weight",
                                            GgmlType::F32,
                                            {64, 4},
                                            std::vector<std::byte>(64 * 4 * 4)});
                            }),
                    "block 5 has MoE tensors ('blk.5.ffn_gate_inp.weight') but the architecture "
                    "is 'nemotron_h' (expected 'nemotron_h_moe')");
}

// MoE fixture: blocks M E M * E -, 12 experts of 32 in 4 groups (2 kept), top-4, shared 48.
TEST(GgufMamba2, NemotronMoeMetadataErrors) {
  const std::string src = fixture_gguf("nemotron_h_moe");
  const std::string a = "nemotron_h_moe.";
  for (const char* k : {"expert_count", "expert_used_count", "expert_shared_feed_forward_length",
                        "expert_weights_scale"})
    expect_load_error(rewrite(src, std::string("m_no_") + k, [&](Kv& kv) { drop(kv, a + k); }),
                      "'" + a + k + "'");
  expect_load_error(
      rewrite(src, "m_no_gu", [&](Kv& kv) { drop(kv, a + "expert_group_used_count"); }),
      "key 'nemotron_h_moe.expert_group_used_count' is missing but 'expert_group_count' is 4");
  auto edit = [&](const std::string& tag, const std::string& k, GgufValue v,
                  const std::string& what) {
    expect_load_error(rewrite(src, "m_" + tag, [&](Kv& kv) { set(kv, a + k, v); }), what);
  };
  edit("groups", "expert_group_count", GgufValue::u32(5),
       "the 12 experts do not split into 5 equal groups");
  edit("groups0", "expert_group_count", GgufValue::u32(0), "expert_group_count");
  edit("gused", "expert_group_used_count", GgufValue::u32(5), "topk_group = 5 must be in [1, 4]");
  edit("gused1", "expert_group_used_count", GgufValue::u32(1),
       "num_experts_per_tok = 4 is more than the 3 experts");
  edit("used", "expert_used_count", GgufValue::u32(13), "expert_used_count");
  edit("eff", "expert_feed_forward_length", GgufValue::u32(16),
       "'nemotron_h_moe.expert_feed_forward_length' = 16 but the MoE blocks' "
       "feed_forward_length is 32");
  edit("scale", "expert_weights_scale", GgufValue::f32(0), "expert_weights_scale' = 0");
  edit("gating", "expert_gating_func", GgufValue::u32(1), "only 2 (sigmoid) is supported");
  edit("latent", "moe_latent_size", GgufValue::u32(16), "the latent MoE projection");
  edit("ffmix", "feed_forward_length", GgufValue::array_i32({0, 32, 0, 0, 48, 96}),
       "has 48 at block 4 but 32 at an earlier MoE block");
  for (const char* t :
       {"blk.1.exp_probs_b.bias", "blk.1.ffn_up_exps.weight", "blk.4.ffn_down_exps.weight",
        "blk.4.ffn_up_shexp.weight", "blk.1.ffn_down_shexp.weight"})
    expect_load_error(rewrite(src, std::string("m_no_") + t, nullptr, drop_tensor(t)),
                      std::string("missing tensor '") + t + "'");
  expect_load_error(
      rewrite(src, "m_upshape", nullptr, reshape("blk.1.ffn_up_exps.weight", {64, 32, 11})),
      "blk.1.ffn_up_exps.weight");
  expect_load_error(rewrite(src, "m_latent_t", nullptr,
                            [](std::vector<T>& ts) {
                              ts.push_back({"blk.1.ffn_latent_down.weight",
                                            GgmlType::F32,
                                            {64, 16},
                                            std::vector<std::byte>(64 * 16 * 4)});
                            }),
                    "tensor 'blk.1.ffn_latent_down.weight': the latent MoE projection");
}

TEST(GgufMamba2, TensorErrors) {
  const std::string gr = fixture_gguf("granitemoehybrid");
  const std::string nm = fixture_gguf("nemotron_h");
  auto expect = [](const std::string& src, const std::string& tag,
                   std::function<void(std::vector<T>&)> edit, const std::string& what) {
    expect_load_error(rewrite(src, "t_" + tag, nullptr, edit), what);
  };
  for (const char* n : {"blk.0.ssm_in.weight",
                        "blk.0.ssm_conv1d.weight",
                        "blk.2.ssm_conv1d.bias",
                        "blk.3.ssm_a",
                        "blk.3.ssm_d",
                        "blk.0.ssm_dt.bias",
                        "blk.0.ssm_norm.weight",
                        "blk.0.ssm_out.weight",
                        "blk.1.attn_q.weight",
                        "blk.4.attn_k.weight",
                        "blk.1.attn_v.weight",
                        "blk.1.attn_output.weight",
                        "blk.0.attn_norm.weight",
                        "blk.2.ffn_norm.weight",
                        "blk.0.ffn_gate_inp.weight",
                        "blk.0.ffn_gate_exps.weight",
                        "blk.0.ffn_up_exps.weight",
                        "blk.0.ffn_down_exps.weight",
                        "blk.3.ffn_gate_shexp.weight",
                        "blk.3.ffn_up_shexp.weight",
                        "blk.3.ffn_down_shexp.weight",
                        "output_norm.weight"})
    expect(gr, std::string("g_") + n, drop_tensor(n), std::string("missing tensor '") + n + "'");
  for (const char* n : {"blk.1.ffn_up.weight", "blk.5.ffn_down.weight", "blk.3.attn_v.weight",
                        "blk.4.ssm_norm.weight", "output.weight"}) {
    if (std::string(n) == "output.weight") continue;  // absent output.weight means tied
    expect(nm, std::string("n_") + n, drop_tensor(n), std::string("missing tensor '") + n + "'");
  }
  // A Nemotron-H MoE block without its router names the router (it once read as a dense MLP
  // block of another width). The MoE fixture's blocks: M E M * E -.
  expect(fixture_gguf("nemotron_h_moe"), "m_no_router", drop_tensor("blk.1.ffn_gate_inp.weight"),
         "block 1 has routed experts ('blk.1.ffn_up_exps.weight') but no router (missing tensor "
         "'blk.1.ffn_gate_inp.weight')");
  expect(gr, "a1d", reshape("blk.0.ssm_a", {8}),
         "tensor 'blk.0.ssm_a': shape [8] (ne reversed), expected [8, 1]");
  expect(gr, "d1d", reshape("blk.0.ssm_d", {8}),
         "tensor 'blk.0.ssm_d': shape [8] (ne reversed), expected [8, 1]");
  expect(gr, "norm2g", reshape("blk.0.ssm_norm.weight", {64, 2}),
         "tensor 'blk.0.ssm_norm.weight': shape [2, 64] (ne reversed), expected [1, 128]");
  expect(gr, "norm3d", reshape("blk.0.ssm_norm.weight", {128, 1, 2}),
         "tensor 'blk.0.ssm_norm.weight': shape [2, 1, 128] (ne reversed), expected [1, 128]");
  expect(nm, "normg", reshape("blk.0.ssm_norm.weight", {2, 96}),
         "tensor 'blk.0.ssm_norm.weight': shape [96, 2] (ne reversed), expected [2, 96]");
  expect(gr, "conv", reshape("blk.0.ssm_conv1d.weight", {176, 4}),
         "tensor 'blk.0.ssm_conv1d.weight': shape [4, 176] (ne reversed), expected [176, 4]");
  expect(gr, "dt", reshape("blk.0.ssm_dt.bias", {9}),
         "tensor 'blk.0.ssm_dt.bias': shape [9] (ne reversed), expected [8]");
  expect(gr, "in", reshape("blk.0.ssm_in.weight", {64, 311}),
         "tensor 'blk.0.ssm_in.weight': shape [311, 64] (ne reversed), expected [312, 64]");
  expect(
      gr, "exps", reshape("blk.1.ffn_up_exps.weight", {64, 32, 3}),
      "tensor 'blk.1.ffn_up_exps.weight': shape [3, 32, 64] (ne reversed), expected [4, 32, 64]");
  expect(gr, "shexp", reshape("blk.1.ffn_down_shexp.weight", {32, 64}),
         "tensor 'blk.1.ffn_down_shexp.weight': shape [64, 32] (ne reversed), expected [64, 48]");
  expect(nm, "up", reshape("blk.1.ffn_up.weight", {64, 95}),
         "tensor 'blk.1.ffn_up.weight': shape [95, 64] (ne reversed), expected [96, 64]");
  expect(nm, "q", reshape("blk.3.attn_q.weight", {64, 48}),
         "tensor 'blk.3.attn_q.weight': shape [48, 64] (ne reversed), expected [96, 64]");
  // The first Mamba2 block decides whether the conv has a bias; the others must agree.
  expect(nm, "nobias", drop_tensor("blk.0.ssm_conv1d.bias"),
         "tensor 'blk.2.ssm_conv1d.bias' is present but the first Mamba2 block has none");
  expect(
      gr, "quanttype",
      [](std::vector<T>& ts) {
        for (auto& t : ts)
          if (t.name == "blk.0.ssm_out.weight") t.type = GgmlType::Q8_1;
      },
      "tensor 'blk.0.ssm_out.weight': type Q8_1 is not supported for weights");
}

// ggml pads ne with 1s to four dims, and llama.cpp's writer drops the trailing ones: in the files
// llama-quantize writes for Granite (one SSM group), each ssm_norm is 1-D [d_inner]. They load
// and give the same logits as the 2-D [d_inner, 1] layout.
TEST(GgufMamba2, TrailingUnitDimsAreOptional) {
  const std::string src = fixture_gguf("granitemoehybrid");
  const std::string path = rewrite(src, "norm1d", nullptr, [](std::vector<T>& ts) {
    int n = 0;
    for (auto& t : ts)
      if (t.name.find("ssm_norm.weight") != std::string::npos) {
        ASSERT_EQ(t.ne.size(), 2u);
        ASSERT_EQ(t.ne[1], 1);
        t.ne.pop_back();
        ++n;
      }
    EXPECT_GT(n, 0);
  });
  auto a = Model::load(src, LoadOptions{});
  ASSERT_TRUE(a.ok()) << a.error_message();
  auto b = Model::load(path, LoadOptions{});
  ASSERT_TRUE(b.ok()) << b.error_message();
  const std::vector<int32_t> tokens = {1, 17, 42, 99, 7, 200, 3, 64};
  const auto want = test::chunked_logits(**a, tokens, 8, nullptr);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(test::same_bytes(test::chunked_logits(**b, tokens, 8, nullptr), want));
}

// Without a conv bias anywhere, the Mamba2 conv adds zeros: the file still loads.
TEST(GgufMamba2, ConvBiasIsOptional) {
  const std::string path =
      rewrite(fixture_gguf("nemotron_h"), "nobias_all", nullptr, [](std::vector<T>& ts) {
        std::erase_if(
            ts, [](const T& t) { return t.name.find("ssm_conv1d.bias") != std::string::npos; });
      });
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.ok());
  auto c = config_from_gguf(*g);
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_FALSE(c->ssm_conv_bias);
  auto m = Model::load(path, LoadOptions{});
  EXPECT_TRUE(m.ok()) << m.error_message();
}

// A Granite model whose gated norm spans d_inner while it has several SSM groups cannot be
// written: llama.cpp would group the norm.
TEST(GgufMamba2, WriterRefusesUngroupedNormWithGroups) {
  auto cfg = load_model_config(test::fixture_dir("granitemoehybrid") + "/config.json");
  ASSERT_TRUE(cfg.ok());
  ModelConfig c = *cfg;
  c.ssm_n_group = 2;
  c.ssm_norm_groups = 1;
  WeightSet ws;
  Status st = write_gguf_model(work_dir() + "/refused.gguf", c, ws, GgufVocab{}, DType::F32, "x");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("groups the norm by ssm.group_count"), std::string::npos)
      << st.error_message();
}

// The Q4_K_M mixture: ssm_in counts as attn_v-like (Q6_K in the use_more_bits blocks), the
// ffn_down tensors as ffn_down; ssm_out and the rest stay at the base type.
TEST(GgufMamba2, KMixtureRule) {
  auto cfg = load_model_config(test::fixture_dir("granitemoehybrid") + "/config.json");
  ASSERT_TRUE(cfg.ok());
  auto rule = gguf_k_m_rule(*cfg);  // 5 blocks: use_more_bits picks blocks 2 and 4
  EXPECT_EQ(rule("blk.0.ssm_in.weight"), DType::Q4_K);
  EXPECT_EQ(rule("blk.2.ssm_in.weight"), DType::Q6_K);
  EXPECT_EQ(rule("blk.3.ssm_in.weight"), DType::Q4_K);
  EXPECT_EQ(rule("blk.2.ssm_out.weight"), DType::Q4_K);
  EXPECT_EQ(rule("blk.4.attn_v.weight"), DType::Q6_K);
  EXPECT_EQ(rule("blk.2.ffn_down_exps.weight"), DType::Q6_K);
  EXPECT_EQ(rule("blk.2.ffn_down_shexp.weight"), DType::Q6_K);
  EXPECT_EQ(rule("blk.2.ffn_up_exps.weight"), DType::Q4_K);
  EXPECT_EQ(rule("token_embd.weight"), DType::Q6_K);  // tied: the output matrix
}

}  // namespace
}  // namespace rw
