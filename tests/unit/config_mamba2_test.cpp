// Tests for the Mamba2 families' configuration parsers (model/arch_granite.cpp,
// model/arch_nemotron_h.cpp): the fixture configs, real checkpoint geometry (docs/MAMBA2.md),
// and an error naming the field for every new field that can be wrong.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "rewind/model/config.h"

namespace rw {
namespace {

using nlohmann::json;

json fixture_json(const std::string& variant) {
  std::ifstream f(std::string(REWIND_TEST_DATA) + "/mamba2-tiny/" + variant + "/config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

Result<ModelConfig> parse(const json& j) {
  return parse_model_config(j.dump(), "config.json");
}

void expect_error(const json& j, const std::string& what) {
  auto r = parse(j);
  ASSERT_FALSE(r.ok()) << j.dump();
  const std::string msg = r.error_message();
  EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(ConfigMamba2, GraniteFixture) {
  auto r = parse(fixture_json("granitemoehybrid"));
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::GraniteHybrid);
  EXPECT_EQ(c.layer_kinds,
            (std::vector<LayerKind>{LayerKind::Mamba2, LayerKind::Attention, LayerKind::Mamba2,
                                    LayerKind::Mamba2, LayerKind::Attention}));
  EXPECT_EQ(c.ffn_kinds, std::vector<FfnKind>(5, FfnKind::Moe));
  EXPECT_EQ(c.ssm_n_head, 8);
  EXPECT_EQ(c.ssm_head_dim, 16);
  EXPECT_EQ(c.ssm_d_state, 24);
  EXPECT_EQ(c.ssm_n_group, 1);
  EXPECT_EQ(c.ssm_norm_groups, 1);
  EXPECT_EQ(c.conv_dim(), 128 + 2 * 24);
  EXPECT_EQ(c.ssm_floats(), 8 * 16 * 24);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_dim, 0);
  EXPECT_FALSE(c.attn_output_gate);
  EXPECT_FALSE(c.attn_qk_norm);
  EXPECT_DOUBLE_EQ(c.attn_scale, 0.125);
  EXPECT_DOUBLE_EQ(c.embedding_multiplier, 12.0);
  EXPECT_DOUBLE_EQ(c.residual_multiplier, 0.25);
  EXPECT_DOUBLE_EQ(c.logits_scaling, 3.0);
  EXPECT_EQ(c.n_expert, 4);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.shared_expert_intermediate_size, 48);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.n_recurrent_layers(), 3);
  EXPECT_EQ(c.n_attention_layers(), 2);
}

TEST(ConfigMamba2, GraniteDenseAndDefaults) {
  json j = fixture_json("granitemoehybrid");
  j["num_local_experts"] = 0;
  j.erase("layer_types");
  j.erase("attention_multiplier");
  j["mamba_d_head"] = "auto";
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->ffn_kinds, std::vector<FfnKind>(5, FfnKind::SwiGLU));
  EXPECT_EQ(r->intermediate_size, 48);  // the shared MLP is the dense FFN
  EXPECT_EQ(r->layer_kinds, std::vector<LayerKind>(5, LayerKind::Mamba2));
  EXPECT_DOUBLE_EQ(r->attn_scale, 1.0);  // HF's default, not 1/sqrt(head_dim)
  EXPECT_EQ(r->ssm_head_dim, 16);        // auto: expand * hidden / heads
}

// granite-4.0-h-350m's published geometry (docs/MAMBA2.md).
TEST(ConfigMamba2, Granite350mShape) {
  json j = fixture_json("granitemoehybrid");
  j["hidden_size"] = 768;
  j["num_hidden_layers"] = 32;
  j["num_attention_heads"] = 12;
  j["num_key_value_heads"] = 4;
  j["mamba_n_heads"] = 48;
  j["mamba_d_head"] = 32;
  j["mamba_d_state"] = 128;
  j["num_local_experts"] = 0;
  j["shared_intermediate_size"] = 2048;
  j["vocab_size"] = 100352;
  json lt = json::array();
  for (int i = 0; i < 32; ++i) lt.push_back(i % 8 == 7 ? "attention" : "mamba");
  j["layer_types"] = lt;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->conv_dim(), 1792);
  EXPECT_EQ(r->n_recurrent_layers(), 28);
  // 22,622,208 bytes of recurrent state per sequence: conv (K-1) x conv_dim + H x P x N per layer.
  EXPECT_EQ(28 * (3 * r->conv_dim() + r->ssm_floats()) * 4, 22622208);
}

TEST(ConfigMamba2, GraniteErrors) {
  json j = fixture_json("granitemoehybrid");
  j["position_embedding_type"] = "rope";
  expect_error(j, "position_embedding_type' is 'rope'");
  j = fixture_json("granitemoehybrid");
  j.erase("mamba_n_heads");
  expect_error(j, "missing field 'mamba_n_heads'");
  j = fixture_json("granitemoehybrid");
  j["mamba_d_head"] = 8;
  expect_error(j, "must equal mamba_expand x hidden_size");
  j = fixture_json("granitemoehybrid");
  j["mamba_n_groups"] = 3;
  expect_error(j, "not a multiple of the groups");
  j = fixture_json("granitemoehybrid");
  j["layer_types"][2] = "linear";
  expect_error(j, "layer_types[2]' is \"linear\"");
  j = fixture_json("granitemoehybrid");
  j["layer_types"].erase(0);
  expect_error(j, "has 4 entries but 'num_hidden_layers' is 5");
  j = fixture_json("granitemoehybrid");
  j["mamba_proj_bias"] = true;
  expect_error(j, "mamba_proj_bias");
  j = fixture_json("granitemoehybrid");
  j["residual_multiplier"] = -1;
  expect_error(j, "'residual_multiplier' = -1");
  j = fixture_json("granitemoehybrid");
  j["num_experts_per_tok"] = 9;
  expect_error(j, "num_experts_per_tok");
  j = fixture_json("granitemoehybrid");
  j.erase("shared_intermediate_size");
  expect_error(j, "missing field 'shared_intermediate_size'");
  j = fixture_json("granitemoehybrid");
  j["mamba_d_state"] = "24";
  expect_error(j, "field 'mamba_d_state' must be an integer");
  j = fixture_json("granitemoehybrid");
  j["hidden_act"] = "gelu";
  expect_error(j, "only 'silu'");
}

TEST(ConfigMamba2, NemotronFixture) {
  auto r = parse(fixture_json("nemotron_h"));
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::NemotronH);
  using K = LayerKind;
  using F = FfnKind;
  EXPECT_EQ(c.layer_kinds,
            (std::vector<K>{K::Mamba2, K::None, K::Mamba2, K::Attention, K::Mamba2, K::None}));
  EXPECT_EQ(c.ffn_kinds,
            (std::vector<F>{F::None, F::ReluSq, F::None, F::None, F::None, F::ReluSq}));
  EXPECT_EQ(c.ssm_n_head, 12);
  EXPECT_EQ(c.ssm_head_dim, 16);
  EXPECT_EQ(c.ssm_n_group, 2);
  EXPECT_EQ(c.ssm_norm_groups, 2);
  EXPECT_EQ(c.ssm_d_state, 20);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.attn_scale, 0.0);  // 1/sqrt(head_dim)
}

// Without head_dim a Nemotron-H config takes NemotronHConfig's default, 128 (not hidden / heads).
TEST(ConfigMamba2, NemotronHeadDimDefaultsTo128) {
  json j = fixture_json("nemotron_h");
  j.erase("head_dim");
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->head_dim, 128);
}

// Python's json writes inf as the bare token Infinity (Nemotron-H configs carry
// "time_step_limit": [0.0, Infinity]); it parses, and means no clamp.
TEST(ConfigMamba2, NemotronInfinityToken) {
  json j = fixture_json("nemotron_h");
  std::string text = j.dump();
  text.insert(text.size() - 1, ",\"time_step_limit\": [0.0, Infinity]");
  auto r = parse_model_config(text, "config.json");
  ASSERT_TRUE(r.ok()) << r.error_message();
  std::string text2 = j.dump();
  text2.insert(text2.size() - 1, ",\"time_step_limit\": [0.001, Infinity]");
  auto r2 = parse_model_config(text2, "config.json");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error_message().find("time_step_limit"), std::string::npos) << r2.error_message();
  // Inside a string the token is text, not a number.
  std::string text3 = j.dump();
  text3.insert(text3.size() - 1, ",\"note\": \"Infinity\"");
  EXPECT_TRUE(parse_model_config(text3, "config.json").ok());
}

TEST(ConfigMamba2, NemotronErrors) {
  json j = fixture_json("nemotron_h");
  j["hybrid_override_pattern"] = "M-E*";  // an E block without the MoE fields
  j["num_hidden_layers"] = 4;
  expect_error(j, "missing field 'n_routed_experts'");
  j = fixture_json("nemotron_h");
  j["hybrid_override_pattern"] = "M-X*M-";
  expect_error(j, "has 'X' at 2");
  j = fixture_json("nemotron_h");
  j["num_hidden_layers"] = 7;
  expect_error(j, "'num_hidden_layers' = 7 but the pattern has 6 blocks");
  j = fixture_json("nemotron_h");
  j.erase("hybrid_override_pattern");
  expect_error(j, "missing field 'hybrid_override_pattern'");
  j = fixture_json("nemotron_h");
  j["mlp_hidden_act"] = "gelu";
  expect_error(j, "only 'relu2'");
  j = fixture_json("nemotron_h");
  j["use_bias"] = true;
  expect_error(j, "'use_bias' is true");
  j = fixture_json("nemotron_h");
  j.erase("ssm_state_size");
  expect_error(j, "missing field 'ssm_state_size'");
  j = fixture_json("nemotron_h");
  j["n_groups"] = 5;
  expect_error(j, "not a multiple of the groups");
  j = fixture_json("nemotron_h");
  j.erase("intermediate_size");
  expect_error(j, "missing field 'intermediate_size'");
}

TEST(ConfigMamba2, NemotronMoeFixture) {
  auto r = parse(fixture_json("nemotron_h_moe"));
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::NemotronH);
  EXPECT_EQ(c.layer_kinds,
            (std::vector<LayerKind>{LayerKind::Mamba2, LayerKind::None, LayerKind::Mamba2,
                                    LayerKind::Attention, LayerKind::None, LayerKind::None}));
  EXPECT_EQ(c.ffn_kinds, (std::vector<FfnKind>{FfnKind::None, FfnKind::Moe, FfnKind::None,
                                               FfnKind::None, FfnKind::Moe, FfnKind::ReluSq}));
  EXPECT_EQ(c.n_expert, 12);
  EXPECT_EQ(c.n_expert_used, 4);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.shared_expert_intermediate_size, 48);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.moe_n_group, 4);
  EXPECT_EQ(c.moe_topk_group, 2);
  EXPECT_DOUBLE_EQ(c.moe_routed_scale, 2.5);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.moe_relu2);
  EXPECT_TRUE(c.moe_sigmoid_router);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_TRUE(c.layer_is_moe(1));
  // HF defaults: one group, all of it kept, no scale, normalised weights; the current HF
  // layers_block_type list and the num_local_experts alias read the same.
  json j = fixture_json("nemotron_h_moe");
  for (const char* k : {"n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob"})
    j.erase(k);
  j["num_local_experts"] = j["n_routed_experts"];
  j.erase("n_routed_experts");
  j.erase("hybrid_override_pattern");
  j["layers_block_type"] = {"mamba", "moe", "mamba", "attention", "moe", "mlp"};
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->ffn_kinds, c.ffn_kinds);
  EXPECT_EQ(r->n_expert, 12);
  EXPECT_EQ(r->moe_n_group, 1);
  EXPECT_EQ(r->moe_topk_group, 1);
  EXPECT_DOUBLE_EQ(r->moe_routed_scale, 1.0);
  EXPECT_TRUE(r->norm_topk_prob);
}

// Nemotron-3-Nano-30B-A3B's config.json fields (the Hub's), on the fixture's other fields.
TEST(ConfigMamba2, NemotronNano30bShape) {
  json j = fixture_json("nemotron_h_moe");
  j.update(json::parse(R"({
    "vocab_size": 131072, "hidden_size": 2688, "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
    "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4, "intermediate_size": 1856, "n_routed_experts": 128, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "topk_group": 1,
    "norm_topk_prob": true, "routed_scaling_factor": 2.5})"));
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  int64_t moe = 0;
  for (int64_t il = 0; il < r->n_layer; ++il) moe += r->layer_is_moe(il);
  EXPECT_EQ(moe, 23);
  EXPECT_EQ(r->n_recurrent_layers(), 23);
  EXPECT_EQ(r->n_attention_layers(), 6);
  EXPECT_EQ(r->ssm_d_inner(), 4096);
  EXPECT_EQ(r->conv_dim(), 4096 + 2 * 8 * 128);
  EXPECT_EQ(r->n_expert, 128);
  EXPECT_EQ(r->moe_n_group, 1);
}

TEST(ConfigMamba2, NemotronMoeErrors) {
  auto with = [](const char* key, const json& v) {
    json j = fixture_json("nemotron_h_moe");
    if (v.is_null())
      j.erase(key);
    else
      j[key] = v;
    return j;
  };
  expect_error(with("n_group", 5), "the 12 experts do not split into 5 equal groups");
  expect_error(with("n_group", 0), "'n_group' = 0 is out of range");
  expect_error(with("n_group", 13), "'n_group' = 13 is out of range");
  expect_error(with("topk_group", 5), "topk_group = 5 must be in [1, 4]");
  expect_error(with("topk_group", 0), "'topk_group' = 0 is out of range");
  expect_error(with("topk_group", 1), "num_experts_per_tok = 4 is more than the 3 experts");
  expect_error(with("num_experts_per_tok", 13), "'num_experts_per_tok' = 13 is out of range");
  expect_error(with("routed_scaling_factor", 0), "routed_scaling_factor = 0");
  expect_error(with("routed_scaling_factor", "2"), "'routed_scaling_factor' must be a number");
  expect_error(with("norm_topk_prob", 1), "'norm_topk_prob' must be true or false");
  expect_error(with("moe_latent_size", 16), "'moe_latent_size' is 16: the latent MoE");
  for (const char* k : {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                        "moe_shared_expert_intermediate_size"})
    expect_error(with(k, nullptr), std::string("missing field '") + k + "'");
  expect_error(with("moe_intermediate_size", -1), "'moe_intermediate_size' = -1 is out of range");
  // A dense MLP block still needs intermediate_size.
  expect_error(with("intermediate_size", nullptr), "missing field 'intermediate_size'");
}

TEST(ConfigMamba2, UnknownModelTypeListsEveryFamily) {
  json j = fixture_json("nemotron_h");
  j["model_type"] = "mamba2";
  expect_error(j, "granitemoehybrid");
  expect_error(j, "nemotron_h");
  expect_error(j, "qwen3_next");
}

}  // namespace
}  // namespace rw
