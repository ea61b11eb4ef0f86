// Tests for model/config.h: the three fixture configs (nested qwen3_5 / qwen3_5_moe, flat
// qwen3_next), a flat text-only export, the real Qwen3.5-0.8B geometry (docs/QWEN35.md 1.3),
// the tie/eos/rope lookup rules, and error messages that name the file and the field.
#include "rewind/model/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace rw {
namespace {

using nlohmann::json;

std::string fixture_path(const std::string& variant) {
  return std::string(REWIND_TEST_DATA) + "/qwen35-tiny/" + variant + "/config.json";
}

json fixture_json(const std::string& variant) {
  std::ifstream f(fixture_path(variant));
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

Result<ModelConfig> parse(const json& j) {
  return parse_model_config(j.dump(), "config.json");
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// Asserts that `j` fails to parse with a message that starts with the file and contains `what`.
void expect_error(const json& j, const std::string& what) {
  auto r = parse(j);
  ASSERT_FALSE(r.ok()) << j.dump();
  const std::string msg = r.error_message();
  EXPECT_EQ(msg.rfind("config.json: ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, what)) << msg;
  EXPECT_FALSE(contains(msg, "\n")) << msg;
}

const std::vector<LayerKind> kTinyKinds = {LayerKind::GatedDeltaNet, LayerKind::GatedDeltaNet,
                                           LayerKind::GatedDeltaNet, LayerKind::Attention};

// Geometry shared by all three fixtures (tiny_text_config() of the reference tool).
void expect_tiny_geometry(const ModelConfig& c) {
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.layer_kinds, kTinyKinds);
  EXPECT_EQ(c.n_attention_layers(), 1);
  EXPECT_EQ(c.n_recurrent_layers(), 3);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.lin_n_head_k, 2);
  EXPECT_EQ(c.lin_n_head_v, 4);
  EXPECT_EQ(c.lin_dk, 16);
  EXPECT_EQ(c.lin_dv, 8);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_EQ(c.key_dim(), 32);
  EXPECT_EQ(c.value_dim(), 32);
  EXPECT_EQ(c.conv_dim(), 96);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.mtp_num_hidden_layers, 0);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(Config, FixtureQwen35) {
  auto r = load_model_config(fixture_path("qwen3_5"));
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::Qwen35);
  EXPECT_STREQ(family_name(c.family), "qwen3_5");
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_TRUE(c.multimodal_prefix);
  expect_tiny_geometry(c);
  EXPECT_EQ(c.n_expert, 0);
  for (int il = 0; il < 4; ++il) EXPECT_FALSE(c.layer_is_moe(il));
}

TEST(Config, FixtureQwen35Moe) {
  auto r = load_model_config(fixture_path("qwen3_5_moe"));
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::Qwen35Moe);
  EXPECT_STREQ(family_name(c.family), "qwen3_5_moe");
  EXPECT_TRUE(c.multimodal_prefix);
  expect_tiny_geometry(c);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.shared_expert_intermediate_size, 48);
  EXPECT_TRUE(c.norm_topk_prob);
  for (int il = 0; il < 4; ++il) EXPECT_TRUE(c.layer_is_moe(il));
}

TEST(Config, FixtureQwen3Next) {
  auto r = load_model_config(fixture_path("qwen3_next"));
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::Qwen3Next);
  EXPECT_STREQ(family_name(c.family), "qwen3_next");
  EXPECT_EQ(c.model_type, "qwen3_next");
  EXPECT_FALSE(c.multimodal_prefix);
  expect_tiny_geometry(c);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.shared_expert_intermediate_size, 48);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  for (int il = 0; il < 4; ++il) EXPECT_TRUE(c.layer_is_moe(il));
}

TEST(Config, FlatTextOnlyExport) {
  for (const char* variant : {"qwen3_5", "qwen3_5_moe"}) {
    json j = fixture_json(variant)["text_config"];  // model_type qwen3_5_text / qwen3_5_moe_text
    auto r = parse(j);
    ASSERT_TRUE(r.ok()) << r.error_message();
    EXPECT_EQ(r->model_type, std::string(variant) + "_text");
    EXPECT_EQ(r->family, std::string(variant) == "qwen3_5" ? Family::Qwen35 : Family::Qwen35Moe);
    EXPECT_FALSE(r->multimodal_prefix);
    expect_tiny_geometry(*r);
  }
}

// Qwen3.5-0.8B as transcribed in docs/QWEN35.md 1.3: nested, layer kinds from the interval, tied
// embeddings stated only at top level, eos a list.
TEST(Config, Qwen35_0_8B_Shape) {
  const json j = json::parse(R"({
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "tie_word_embeddings": true,
    "eos_token_id": [248046, 248044],
    "text_config": {
      "model_type": "qwen3_5_text",
      "vocab_size": 248320, "hidden_size": 1024, "intermediate_size": 3584,
      "num_hidden_layers": 24, "full_attention_interval": 4,
      "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
      "linear_num_key_heads": 16, "linear_num_value_heads": 16,
      "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
      "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
      "mtp_num_hidden_layers": 1, "bos_token_id": null,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                          "mrope_section": [11, 11, 10], "mrope_interleaved": true}
    },
    "vision_config": {"depth": 12}
  })");
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, Family::Qwen35);
  EXPECT_TRUE(c.multimodal_prefix);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.n_layer, 24);
  ASSERT_EQ(c.layer_kinds.size(), 24u);
  for (int il = 0; il < 24; ++il)
    EXPECT_EQ(c.layer_kinds[il], il % 4 == 3 ? LayerKind::Attention : LayerKind::GatedDeltaNet)
        << il;
  EXPECT_EQ(c.n_attention_layers(), 6);
  EXPECT_EQ(c.n_recurrent_layers(), 18);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.lin_n_head_k, 16);
  EXPECT_EQ(c.lin_n_head_v, 16);
  EXPECT_EQ(c.key_dim(), 2048);
  EXPECT_EQ(c.value_dim(), 2048);
  EXPECT_EQ(c.conv_dim(), 6144);
  EXPECT_EQ(c.intermediate_size, 3584);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_EQ(c.mtp_num_hidden_layers, 1);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{248046, 248044}));
  for (int il = 0; il < 24; ++il) EXPECT_FALSE(c.layer_is_moe(il));
}

TEST(Config, TieRuleTextConfigWins) {
  json j = fixture_json("qwen3_5");
  j["tie_word_embeddings"] = true;
  j["text_config"]["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse(j)->tie_word_embeddings);
  j["text_config"].erase("tie_word_embeddings");
  EXPECT_TRUE(parse(j)->tie_word_embeddings);
  j["text_config"]["tie_word_embeddings"] = true;
  j["tie_word_embeddings"] = false;
  EXPECT_TRUE(parse(j)->tie_word_embeddings);
  j.erase("tie_word_embeddings");
  j["text_config"].erase("tie_word_embeddings");
  EXPECT_FALSE(parse(j)->tie_word_embeddings);
}

TEST(Config, TokenIds) {
  json j = fixture_json("qwen3_5");
  j["eos_token_id"] = 5;
  j["bos_token_id"] = 1;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->eos_token_ids, (std::vector<int64_t>{5}));
  EXPECT_EQ(r->bos_token_id, 1);
  j["text_config"]["eos_token_id"] = json::array({7, 8});  // text_config first
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->eos_token_ids, (std::vector<int64_t>{7, 8}));
}

TEST(Config, RopeLookup) {
  // Legacy top-level fields inside text_config, no rope_parameters.
  json j = fixture_json("qwen3_5");
  j["text_config"].erase("rope_parameters");
  j["text_config"]["rope_theta"] = 5e6;
  j["text_config"]["partial_rotary_factor"] = 0.5;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->rope_theta, 5e6);
  EXPECT_EQ(r->rope_dim, 16);
  // rope_parameters wins; partial_rotary_factor defaults to 0.25 when absent everywhere.
  j = fixture_json("qwen3_5");
  j["text_config"]["rope_theta"] = 1.0;
  j["text_config"].erase("partial_rotary_factor");
  j["text_config"]["rope_parameters"].erase("partial_rotary_factor");
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->rope_theta, 1e7);
  EXPECT_EQ(r->rope_dim, 8);
  // qwen3_next: rope_scaling null is fine, as is an M-RoPE description.
  j = fixture_json("qwen3_next");
  j["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {2, 1, 1}}};
  EXPECT_TRUE(parse(j).ok());
}

TEST(Config, LayerTypesFromInterval) {
  json j = fixture_json("qwen3_next");
  j.erase("layer_types");
  j["num_hidden_layers"] = 6;
  j["full_attention_interval"] = 2;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  const std::vector<LayerKind> want = {LayerKind::GatedDeltaNet, LayerKind::Attention,
                                       LayerKind::GatedDeltaNet, LayerKind::Attention,
                                       LayerKind::GatedDeltaNet, LayerKind::Attention};
  EXPECT_EQ(r->layer_kinds, want);
  j.erase("full_attention_interval");  // default 4
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->n_attention_layers(), 1);
  EXPECT_EQ(r->layer_kinds[3], LayerKind::Attention);
}

TEST(Config, Qwen3NextSparseLayers) {
  json j = fixture_json("qwen3_next");
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j["norm_topk_prob"] = false;
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_FALSE(r->norm_topk_prob);
  EXPECT_EQ(r->mlp_only_layers, (std::vector<int64_t>{3}));
  EXPECT_FALSE(r->layer_is_moe(0));  // (0+1) % 2 != 0
  EXPECT_TRUE(r->layer_is_moe(1));
  EXPECT_FALSE(r->layer_is_moe(2));
  EXPECT_FALSE(r->layer_is_moe(3));  // mlp_only
  // Dense qwen3_next: no experts.
  j = fixture_json("qwen3_next");
  j["num_experts"] = 0;
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  for (int il = 0; il < 4; ++il) EXPECT_FALSE(r->layer_is_moe(il));
  // qwen3_5_moe ignores norm_topk_prob.
  j = fixture_json("qwen3_5_moe");
  j["text_config"]["norm_topk_prob"] = false;
  r = parse(j);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_TRUE(r->norm_topk_prob);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(ConfigErrors, UnknownModelType) {
  json j = fixture_json("qwen3_next");
  j["model_type"] = "llama";
  auto r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(
      r.error_message(),
      "config.json: unknown model_type 'llama' (supported: qwen3_5, qwen3_5_moe, qwen3_5_text, "
      "qwen3_5_moe_text, qwen3_next, granitemoehybrid, nemotron_h)");
  j.erase("model_type");
  expect_error(j, "missing field 'model_type'");
  j["model_type"] = 3;
  expect_error(j, "field 'model_type' must be a string");
}

TEST(ConfigErrors, MissingField) {
  json j = fixture_json("qwen3_5");
  j["text_config"].erase("hidden_size");
  expect_error(j, "missing field 'text_config.hidden_size'");
  j = fixture_json("qwen3_next");
  j.erase("hidden_size");
  expect_error(j, "missing field 'hidden_size'");
  j = fixture_json("qwen3_next");
  j["head_dim"] = nullptr;  // null counts as absent
  expect_error(j, "missing field 'head_dim'");
  j = fixture_json("qwen3_5_moe");
  j["text_config"].erase("num_experts");
  expect_error(j, "missing field 'text_config.num_experts'");
  j = fixture_json("qwen3_5");
  j["text_config"].erase("intermediate_size");
  expect_error(j, "'text_config.intermediate_size' is missing or 0, but layer 0 has a dense MLP");
  j = fixture_json("qwen3_5");
  j["text_config"]["rope_parameters"].erase("rope_theta");
  expect_error(
      j, "missing field 'text_config.rope_parameters.rope_theta' (or 'text_config.rope_theta')");
  j = fixture_json("qwen3_5");
  j.erase("text_config");
  expect_error(j, "model_type 'qwen3_5' needs a 'text_config' object");
}

TEST(ConfigErrors, WrongType) {
  json j = fixture_json("qwen3_5");
  j["text_config"]["hidden_size"] = "64";
  expect_error(j, "field 'text_config.hidden_size' must be an integer (got string \"64\")");
  j = fixture_json("qwen3_next");
  j["num_attention_heads"] = 4.0;
  expect_error(j, "field 'num_attention_heads' must be an integer");
  j = fixture_json("qwen3_next");
  j["rms_norm_eps"] = "tiny";
  expect_error(j, "field 'rms_norm_eps' must be a number");
  j = fixture_json("qwen3_next");
  j["tie_word_embeddings"] = 1;
  expect_error(j, "field 'tie_word_embeddings' must be true or false");
  j = fixture_json("qwen3_5");
  j["text_config"] = json::array();
  expect_error(j, "field 'text_config' must be an object");
  j = fixture_json("qwen3_5");
  j["text_config"]["rope_parameters"] = 3;
  expect_error(j, "field 'text_config.rope_parameters' must be an object");
  j = fixture_json("qwen3_next");
  j["eos_token_id"] = "</s>";
  expect_error(j, "field 'eos_token_id' must be an integer or a list of integers");
  j["eos_token_id"] = json::array({1, "x"});
  expect_error(j, "field 'eos_token_id' must be an integer");
  j = fixture_json("qwen3_next");
  j["mlp_only_layers"] = 1;
  expect_error(j, "field 'mlp_only_layers' must be a list of layer indices");
}

TEST(ConfigErrors, OutOfRange) {
  json j = fixture_json("qwen3_next");
  j["num_hidden_layers"] = -4;
  expect_error(j, "field 'num_hidden_layers' = -4 is out of range");
  j = fixture_json("qwen3_next");
  j["vocab_size"] = 0;
  expect_error(j, "field 'vocab_size' = 0 is out of range");
  j = fixture_json("qwen3_next");
  j["hidden_size"] = json(uint64_t{18446744073709551615u});
  expect_error(j, "field 'hidden_size' = 18446744073709551615 is out of range");
  j = fixture_json("qwen3_next");
  j["mlp_only_layers"] = {4};
  expect_error(j, "field 'mlp_only_layers[0]' = 4 is out of range [0, 3]");
  j = fixture_json("qwen3_next");
  j["decoder_sparse_step"] = 0;
  expect_error(j, "field 'decoder_sparse_step' = 0 is out of range");
  j = fixture_json("qwen3_next");
  j["rms_norm_eps"] = 0;
  expect_error(j, "field 'rms_norm_eps' = 0.000000 must be positive");
}

TEST(ConfigErrors, BadLayerTypes) {
  json j = fixture_json("qwen3_5");
  j["text_config"]["layer_types"].erase(0);
  expect_error(
      j, "field 'text_config.layer_types' has 3 entries but 'text_config.num_hidden_layers' is 4");
  j = fixture_json("qwen3_5");
  j["text_config"]["layer_types"][1] = "sliding_attention";
  expect_error(j,
               "field 'text_config.layer_types[1]' is \"sliding_attention\" (expected "
               "\"linear_attention\" or "
               "\"full_attention\")");
  j = fixture_json("qwen3_next");
  j["layer_types"][0] = 1;
  expect_error(j, "field 'layer_types[0]' is 1");
  j = fixture_json("qwen3_next");
  j["layer_types"] = "linear_attention";
  expect_error(j, "field 'layer_types' must be a list of strings");
  j = fixture_json("qwen3_next");
  j.erase("layer_types");
  j["full_attention_interval"] = 0;
  expect_error(j, "field 'full_attention_interval' = 0 is out of range");
}

TEST(ConfigErrors, InconsistentSizes) {
  json j = fixture_json("qwen3_5");
  j["text_config"]["linear_num_value_heads"] = 3;
  expect_error(j,
               "field 'text_config.linear_num_value_heads' = 3 is not a multiple of "
               "'text_config.linear_num_key_heads' = 2");
  j = fixture_json("qwen3_next");
  j["num_key_value_heads"] = 3;
  expect_error(j, "field 'num_attention_heads' = 4 is not a multiple of 'num_key_value_heads' = 3");
  j = fixture_json("qwen3_next");
  j["num_experts_per_tok"] = 9;
  expect_error(j, "field 'num_experts_per_tok' = 9 exceeds 'num_experts' = 8");
  j = fixture_json("qwen3_next");
  j["partial_rotary_factor"] = 0.1;  // int(32 * 0.1) = 3: odd
  expect_error(j, "= 3 must be even and positive");
  j["partial_rotary_factor"] = 0.0;
  expect_error(j, "partial_rotary_factor = 0.000000 must be in (0, 1]");
  j = fixture_json("qwen3_next");
  j["rope_theta"] = -1;
  expect_error(j, "rope_theta = -1.000000 must be a positive number");
  j = fixture_json("qwen3_5_moe");
  j["text_config"]["model_type"] = "qwen3_5_text";
  expect_error(
      j,
      "field 'text_config.model_type' is 'qwen3_5_text' but model_type 'qwen3_5_moe' needs "
      "'qwen3_5_moe_text'");
}

TEST(ConfigErrors, UnsupportedFeatures) {
  json j = fixture_json("qwen3_next");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(j, "field 'rope_scaling.rope_type' is 'yarn': only default RoPE is supported");
  j = fixture_json("qwen3_next");
  j["hidden_act"] = "gelu";
  expect_error(j, "field 'hidden_act' is 'gelu': only 'silu' is supported");
  j = fixture_json("qwen3_next");
  j["attention_bias"] = true;
  expect_error(j, "field 'attention_bias' is true");
}

TEST(ConfigErrors, InvalidJson) {
  auto r = parse_model_config("{\"model_type\": \"qwen3_next\",\n  \"hidden_size\": }",
                              "cfg/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message().rfind("cfg/config.json: invalid JSON: parse error at line 2", 0), 0u)
      << r.error_message();
  EXPECT_FALSE(contains(r.error_message(), "\n"));
  r = parse_model_config("", "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "config.json: invalid JSON")) << r.error_message();
  r = parse_model_config("[1]", "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message(), "config.json: not a JSON object (got array)");
}

TEST(ConfigErrors, MissingFile) {
  auto r = load_model_config("/nonexistent/dir/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message(),
            "/nonexistent/dir/config.json: cannot open: No such file or directory");
}

}  // namespace
}  // namespace rw
