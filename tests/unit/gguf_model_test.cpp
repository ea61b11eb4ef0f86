// Tests for model/gguf_model.h and tokenizer/gguf_vocab.h: a converted tiny model loads, and each
// malformed variant (edited metadata or tensors of a valid file) fails with a one-line error
// naming the file and the key or tensor; the MTP head is written as llama.cpp's nextn block and
// read back, and a partial or mis-shaped block is such an error; the GGUF tokenizer encodes like
// tokenizer.json and rejects malformed vocab metadata.
#include "rewind/model/gguf_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "gguf_edit.h"
#include "rewind/io/gguf.h"
#include "rewind/tokenizer/gguf_vocab.h"
#include "test_util.h"

namespace rw {
namespace {

// A scratch directory for this process, removed at exit.
std::string work_dir() {
  static const std::string d = test::made_scratch_dir("gguf_model");
  return d;
}

// A tiny model as HF and as GGUF (`type`), made once per process.
std::string made(const std::string& preset, const std::string& type,
                 std::string* hf_out = nullptr) {
  const std::string hf = work_dir() + "/" + preset;
  const std::string path = work_dir() + "/" + preset + "_" + type + ".gguf";
  int rc = 0;
  if (!std::filesystem::exists(hf + "/config.json"))
    test::run_command(
        std::string(REWIND_BINARY) + " make-model --preset " + preset + " --out " + hf + " 2>&1",
        &rc);
  if (!std::filesystem::exists(path))
    test::run_command(std::string(REWIND_BINARY) + " convert --in " + hf + " --out " + path +
                          " --type " + type + " 2>&1",
                      &rc);
  if (hf_out) *hf_out = hf;
  return path;
}

// `make-model --mtp --preset P` as HF and converted to F32 GGUF, made once per process.
std::string made_mtp(const std::string& preset, std::string* hf_out = nullptr,
                     std::string* convert_out = nullptr) {
  const std::string hf = work_dir() + "/" + preset + "_mtp";
  const std::string path = hf + ".gguf";
  int rc = 0;
  if (!std::filesystem::exists(hf + "/config.json")) {
    const std::string out =
        test::run_command(std::string(REWIND_BINARY) + " make-model --mtp --preset " + preset +
                              " --out " + hf + " 2>&1",
                          &rc);
    EXPECT_EQ(rc, 0) << out;
  }
  if (!std::filesystem::exists(path)) {
    const std::string out = test::run_command(
        std::string(REWIND_BINARY) + " convert --in " + hf + " --out " + path + " --type f32 2>&1",
        &rc);
    EXPECT_EQ(rc, 0) << out;
    if (convert_out) *convert_out = out;
  }
  if (hf_out) *hf_out = hf;
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

// A GGUF file's end-of-generation ids are found as llama.cpp finds them (its eos, eot and eom
// keys and the tokens of end-of-turn texts), so a converted file stops where its checkpoint's
// generation_config.json does; an eos id outside the vocabulary is dropped.
TEST(GgufModel, EndOfGenerationIdsAsLlamaCpp) {
  for (const char* preset : {"tiny", "granite-h-tiny", "nemotron-h-tiny"}) {
    std::string hf;
    const std::string path = made(preset, "f32", &hf);
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.error_message();
    auto c = config_from_gguf(g.value());
    ASSERT_TRUE(c.ok()) << c.error_message();
    const auto gen = nlohmann::json::parse(test::read_file(hf + "/generation_config.json"));
    std::vector<int64_t> want = gen["eos_token_id"].get<std::vector<int64_t>>();
    std::sort(want.begin(), want.end());
    EXPECT_EQ(c->eos_token_ids, want) << preset;
  }
  const std::string src = made("tiny", "f32");
  auto g0 = GgufFile::open(src);
  ASSERT_TRUE(g0.ok());
  const int64_t eot = config_from_gguf(g0.value())->eos_token_ids.front();
  const std::string path = rewrite(src, "eog", [&](Kv& kv) {
    set(kv, "tokenizer.ggml.eos_token_id", GgufValue::u32(99999));
    set(kv, "tokenizer.ggml.eot_token_id", GgufValue::u32(static_cast<uint32_t>(eot)));
    set(kv, "tokenizer.ggml.tokens", GgufValue::array_string({"a", "b"}));
  });
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.ok());
  auto c = config_from_gguf(g.value());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{eot});
}

TEST(GgufModel, ConfigMatchesHf) {
  std::string hf;
  for (const char* preset : {"tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"}) {
    const std::string path = made(preset, "f32", &hf);
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.error_message();
    auto c = config_from_gguf(g.value());
    ASSERT_TRUE(c.ok()) << c.error_message();
    auto h = load_model_config(hf + "/config.json");
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(c->family, h->family);
    EXPECT_EQ(c->vocab_size, h->vocab_size);
    EXPECT_EQ(c->hidden_size, h->hidden_size);
    EXPECT_EQ(c->n_layer, h->n_layer);
    EXPECT_EQ(c->layer_kinds, h->layer_kinds);
    EXPECT_EQ(c->rope_dim, h->rope_dim);
    EXPECT_EQ(c->rope_theta, h->rope_theta);
    EXPECT_EQ(c->lin_n_head_k, h->lin_n_head_k);
    EXPECT_EQ(c->lin_n_head_v, h->lin_n_head_v);
    EXPECT_EQ(c->lin_dv, h->lin_dv);
    EXPECT_EQ(c->n_expert, h->n_expert);
    EXPECT_EQ(c->moe_intermediate_size, h->moe_intermediate_size);
    EXPECT_EQ(c->tie_word_embeddings, h->tie_word_embeddings);
    EXPECT_EQ(static_cast<float>(c->rms_norm_eps), static_cast<float>(h->rms_norm_eps));
    EXPECT_EQ(g->get_string("general.architecture").value(), gguf_arch_name(h->family));
  }
}

TEST(GgufModel, MetadataErrors) {
  const std::string src = made("tiny", "f32");
  expect_load_error(
      rewrite(src, "arch",
              [](Kv& kv) { set(kv, "general.architecture", GgufValue::string("llama")); }),
      "architecture 'llama' is not supported");
  expect_load_error(rewrite(src, "nokey", [](Kv& kv) { drop(kv, "qwen35.ssm.group_count"); }),
                    "missing key 'qwen35.ssm.group_count'");
  expect_load_error(
      rewrite(src, "type", [](Kv& kv) { set(kv, "qwen35.block_count", GgufValue::string("4")); }),
      "key 'qwen35.block_count' must be an integer (got string)");
  expect_load_error(
      rewrite(src, "range",
              [](Kv& kv) { set(kv, "qwen35.attention.head_count_kv", GgufValue::u32(0)); }),
      "'qwen35.attention.head_count_kv' = 0 is out of range");
  expect_load_error(
      rewrite(src, "heads",
              [](Kv& kv) { set(kv, "qwen35.ssm.time_step_rank", GgufValue::u32(3)); }),
      "must be a multiple of 'ssm.group_count'");
  expect_load_error(
      rewrite(src, "recur",
              [](Kv& kv) {
                set(kv, "qwen35.attention.recurrent_layers", GgufValue::array_bool({1, 0}));
              }),
      "has 2 entries but block_count is 4");
  expect_load_error(
      rewrite(
          src, "eps",
          [](Kv& kv) { set(kv, "qwen35.attention.layer_norm_rms_epsilon", GgufValue::f32(-1)); }),
      "layer_norm_rms_epsilon' must be positive");
}

// Every rewind dtype a GGUF file can hold has the reader's block geometry for its GGUF type (the
// reader checks a tensor's byte size with it; transcoding and packing index with rewind's).
TEST(GgufModel, BlockGeometryMatchesTheReader) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K, DType::Q4_0, DType::Q5_0, DType::IQ4_NL, DType::Q3_K, DType::IQ4_XS,
                  DType::Q2_K, DType::Q4_1, DType::Q5_1}) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(ggml_from_dtype(t)));
    ASSERT_NE(info, nullptr) << dtype_name(t);
    EXPECT_EQ(std::string(info->name), std::string(dtype_name(t)));
    EXPECT_EQ(info->block_elems, dtype_block_elems(t)) << dtype_name(t);
    EXPECT_EQ(info->block_bytes, dtype_block_bytes(t)) << dtype_name(t);
  }
}

TEST(GgufModel, TensorErrors) {
  const std::string src = made("tiny", "f32");
  expect_load_error(rewrite(src, "missing", nullptr,
                            [](std::vector<T>& ts) {
                              std::erase_if(ts, [](const T& t) { return t.name == "blk.1.ssm_a"; });
                            }),
                    "missing tensor 'blk.1.ssm_a'");
  expect_load_error(
      rewrite(src, "shape", nullptr,
              [](std::vector<T>& ts) {
                for (auto& t : ts)
                  if (t.name == "blk.0.attn_gate.weight") std::swap(t.ne[0], t.ne[1]);
              }),
      "tensor 'blk.0.attn_gate.weight': shape [64, 32] (ne reversed), expected [32, 64]");
  const std::string q = made("qwen3.5-tiny-256", "f32");
  expect_load_error(rewrite(q, "iq2xxs", nullptr,
                            [](std::vector<T>& ts) {
                              for (auto& t : ts)
                                if (t.name == "blk.0.ffn_up.weight") t.type = GgmlType::IQ2_XXS;
                            }),
                    "tensor 'blk.0.ffn_up.weight': type IQ2_XXS is not supported for weights");
}

std::vector<std::string> names_from(const GgufFile& g, const std::string& prefix) {
  std::vector<std::string> r;
  for (auto& t : g.tensors())
    if (t.name.rfind(prefix, 0) == 0) r.push_back(t.name);
  return r;
}

// The writer's nextn block: block_count and nextn_predict_layers, the names and shapes of
// llama.cpp's qwen35 / qwen35moe MTP block, norms in F32; read back, it is the MTP head.
TEST(GgufModel, MtpHeadIsWrittenAsNextnBlock) {
  for (const char* preset : {"tiny", "qwen3.5-moe-tiny"}) {
    const std::string path = made_mtp(preset);
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.error_message();
    const std::string a = g->get_string("general.architecture").value();
    EXPECT_EQ(g->get_int(a + ".block_count").value(), 5) << preset;
    EXPECT_EQ(g->get_int(a + ".nextn_predict_layers").value(), 1) << preset;
    auto shape = [&](const std::string& n) {
      const GgufTensor* t = g->find(n);
      return t ? t->ne : std::vector<int64_t>{};
    };
    EXPECT_EQ(shape("blk.4.nextn.eh_proj.weight"), (std::vector<int64_t>{128, 64}));
    for (const char* n : {"enorm", "hnorm", "shared_head_norm"}) {
      const GgufTensor* t = g->find(std::string("blk.4.nextn.") + n + ".weight");
      ASSERT_NE(t, nullptr) << n;
      EXPECT_EQ(t->ne, (std::vector<int64_t>{64}));
      EXPECT_EQ(t->type, GgmlType::F32);
    }
    for (const char* n : {"attn_norm", "post_attention_norm", "attn_q", "attn_k", "attn_v",
                          "attn_output", "attn_q_norm", "attn_k_norm"})
      EXPECT_NE(g->find(std::string("blk.4.") + n + ".weight"), nullptr) << preset << " " << n;
    const bool moe = std::string(preset) != "tiny";
    for (const char* n : {"ffn_gate", "ffn_up", "ffn_down"}) {
      EXPECT_EQ(g->find(std::string("blk.4.") + n + ".weight") != nullptr, !moe) << n;
      EXPECT_EQ(g->find(std::string("blk.4.") + n + "_exps.weight") != nullptr, moe) << n;
      EXPECT_EQ(g->find(std::string("blk.4.") + n + "_shexp.weight") != nullptr, moe) << n;
    }
    EXPECT_EQ(g->find("blk.4.ssm_a"), nullptr);
    EXPECT_EQ(g->find("blk.5.attn_norm.weight"), nullptr);

    auto plain = Model::load(path, LoadOptions{});
    ASSERT_TRUE(plain.ok()) << plain.error_message();
    EXPECT_EQ(plain.value()->config().n_layer, 4);
    EXPECT_TRUE(plain.value()->weights().has_mtp());
    EXPECT_FALSE(plain.value()->mtp_loaded());
    EXPECT_EQ(plain.value()->weights().mtp_tensor_names(), names_from(g.value(), "blk.4."));
    LoadOptions opt;
    opt.mtp = true;
    auto with = Model::load(path, opt);
    ASSERT_TRUE(with.ok()) << with.error_message();
    EXPECT_TRUE(with.value()->mtp_loaded());
  }
}

// qwen3next: llama.cpp neither converts nor loads an MTP block, so none is written.
TEST(GgufModel, Qwen3NextWritesNoMtpBlock) {
  std::string log;
  const std::string path = made_mtp("qwen3-next-tiny", nullptr, &log);
  EXPECT_NE(log.find("the MTP head is not written"), std::string::npos) << log;
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->get_int("qwen3next.block_count").value(), 4);
  EXPECT_EQ(g->get("qwen3next.nextn_predict_layers"), nullptr);
  EXPECT_TRUE(names_from(g.value(), "blk.4.").empty());
  auto m = Model::load(path, LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.error_message();
  EXPECT_FALSE(m.value()->weights().has_mtp());
}

std::vector<T>& drop_tensor(std::vector<T>& ts, const std::string& name) {
  const size_t n = ts.size();
  std::erase_if(ts, [&](const T& t) { return t.name == name; });
  EXPECT_EQ(ts.size() + 1, n) << name;
  return ts;
}

TEST(GgufModel, PartialMtpBlockIsAnError) {
  // Only two tensors of block 4 in a file without a head.
  const std::string src = made("tiny", "f32");
  expect_load_error(
      rewrite(
          src, "mtp_two",
          [](Kv& kv) {
            set(kv, "qwen35.block_count", GgufValue::u32(5));
            set(kv, "qwen35.nextn_predict_layers", GgufValue::u32(1));
          },
          [](std::vector<T>& ts) {
            ts.push_back({"blk.4.nextn.eh_proj.weight",
                          GgmlType::F32,
                          {128, 64},
                          std::vector<std::byte>(128 * 64 * 4)});
            ts.push_back(
                {"blk.4.attn_norm.weight", GgmlType::F32, {64}, std::vector<std::byte>(64 * 4)});
          }),
      "missing tensor 'blk.4.nextn.enorm.weight' (expected shape [64]) (MTP block: "
      "nextn_predict_layers = 1 and some blk.4.* tensors are present)");
  // One tensor dropped from a complete block.
  const std::string full = made_mtp("tiny");
  for (const char* n :
       {"blk.4.nextn.eh_proj.weight", "blk.4.nextn.hnorm.weight", "blk.4.attn_k.weight",
        "blk.4.attn_q_norm.weight", "blk.4.post_attention_norm.weight", "blk.4.ffn_down.weight"}) {
    const std::string name = n;
    expect_load_error(rewrite(full, "mtp_drop_" + name, nullptr,
                              [&](std::vector<T>& ts) { drop_tensor(ts, name); }),
                      "missing tensor '" + name + "'");
  }
  const std::string moe = made_mtp("qwen3.5-moe-tiny");
  expect_load_error(
      rewrite(moe, "mtp_drop_exps", nullptr,
              [](std::vector<T>& ts) { drop_tensor(ts, "blk.4.ffn_up_exps.weight"); }),
      "missing tensor 'blk.4.ffn_up_exps.weight'");
  // Mis-shaped: eh_proj transposed.
  expect_load_error(rewrite(full, "mtp_shape", nullptr,
                            [](std::vector<T>& ts) {
                              for (auto& t : ts)
                                if (t.name == "blk.4.nextn.eh_proj.weight")
                                  std::swap(t.ne[0], t.ne[1]);
                            }),
                    "tensor 'blk.4.nextn.eh_proj.weight': shape [128, 64] (ne reversed), expected "
                    "[64, 128]");
  // Own embedding / output matrices of the head are not supported.
  expect_load_error(rewrite(full, "mtp_own_head", nullptr,
                            [](std::vector<T>& ts) {
                              ts.push_back({"blk.4.nextn.shared_head_head.weight",
                                            GgmlType::F32,
                                            {64, 512},
                                            std::vector<std::byte>(64 * 512 * 4)});
                            }),
                    "tensor 'blk.4.nextn.shared_head_head.weight' is not supported");
}

// Optional parts of llama.cpp's layout: no shared_head_norm means output_norm; a
// recurrent_layers array must mark MTP blocks as attention.
TEST(GgufModel, MtpOptionalPartsAndRecurrentLayers) {
  const std::string full = made_mtp("tiny");
  auto m = Model::load(
      rewrite(full, "mtp_no_shnorm", nullptr,
              [](std::vector<T>& ts) { drop_tensor(ts, "blk.4.nextn.shared_head_norm.weight"); }),
      LoadOptions{});
  ASSERT_TRUE(m.ok()) << m.error_message();
  ASSERT_TRUE(m.value()->weights().has_mtp());
  EXPECT_EQ(m.value()->weights().get("mtp.norm").to_f32(),
            m.value()->weights().get("final_norm").to_f32());

  auto with_flags = [&](const std::string& tag, std::vector<int64_t> flags) {
    return rewrite(full, tag, [&](Kv& kv) {
      drop(kv, "qwen35.full_attention_interval");
      set(kv, "qwen35.attention.recurrent_layers", GgufValue::array_bool(flags));
    });
  };
  auto ok = Model::load(with_flags("mtp_recur_ok", {1, 1, 1, 0, 0}), LoadOptions{});
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_TRUE(ok.value()->weights().has_mtp());
  expect_load_error(with_flags("mtp_recur_bad", {1, 1, 1, 0, 1}),
                    "key 'qwen35.attention.recurrent_layers' marks block 4 as recurrent, but it "
                    "is an MTP block");
  expect_load_error(with_flags("mtp_recur_short", {1, 1, 1, 0}),
                    "has 4 entries but block_count is 5");
}

TEST(GgufVocab, EncodesLikeTokenizerJson) {
  std::string hf;
  const std::string path = made("tiny", "f32", &hf);
  auto g = GgufFile::open(path);
  ASSERT_TRUE(g.ok());
  auto a = Tokenizer::load(hf + "/tokenizer.json");
  auto b = tokenizer_from_gguf(g.value());
  ASSERT_TRUE(a.ok() && b.ok()) << b.error_message();
  const std::string text =
      "Hello, world! <|im_start|>user\nIt's 2024: naïve café x\xcc\x81y.<|im_end|>";
  EXPECT_EQ(a->encode(text), b->encode(text));
  EXPECT_EQ(b->decode(b->encode(text)), text);
  EXPECT_EQ(a->token_id("<|im_end|>"), b->token_id("<|im_end|>"));
  EXPECT_TRUE(b->is_special(b->token_id("<|im_end|>")));
  auto tmpl = chat_template_from_gguf(g.value());
  ASSERT_TRUE(tmpl.ok());
  EXPECT_NE(tmpl->find("im_start"), std::string::npos);
  EXPECT_EQ(gguf_pre_name(a.value()).value(), "qwen35");
}

// tokenizer.ggml.pre names as llama.cpp reads them: Granite 4.0 files carry "dbrx" (Llama 3's
// regex), Nemotron-H files "pixtral" (the same with ignore_merges); Tekken splits words at a
// case change. gguf_pre_name gives back a name of the same regex and ignore_merges.
TEST(GgufVocab, PreTokenizersAsLlamaCppReadsThem) {
  const std::string src = made("tiny", "f32");
  using Pieces = std::vector<std::string>;
  struct Case {
    std::string pre, back;
    bool ignore_merges;
    Pieces digits, camel, mark;
  };
  const Pieces singles = {"1", "2", "3", "4", "5"}, threes = {"123", "45"};
  const Pieces word = {"helloWorld"}, split = {"hello", "World"};
  const Pieces whole = {"x\xcc\x81y"}, cut = {"x", "\xcc\x81y"};
  const std::vector<Case> cases = {
      {"qwen35", "qwen35", false, singles, word, whole},
      {"qwen2", "qwen2", false, singles, word, cut},
      {"deepseek-r1-qwen", "qwen2", false, singles, word, cut},
      {"dbrx", "dbrx", false, threes, word, cut},
      {"llama-bpe", "llama-bpe", true, threes, word, cut},
      {"pixtral", "llama-bpe", true, threes, word, cut},
      {"tekken", "tekken", true, singles, split, whole},
  };
  for (const Case& c : cases) {
    const std::string path = rewrite(src, "pre_" + c.pre, [&](Kv& kv) {
      set(kv, "tokenizer.ggml.pre", GgufValue::string(c.pre));
    });
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.error_message();
    auto t = tokenizer_from_gguf(g.value());
    ASSERT_TRUE(t.ok()) << c.pre << ": " << t.error_message();
    EXPECT_EQ(t->pre_tokenize("12345"), c.digits) << c.pre;
    EXPECT_EQ(t->pre_tokenize("helloWorld"), c.camel) << c.pre;
    EXPECT_EQ(t->pre_tokenize("x\xcc\x81y"), c.mark) << c.pre;
    EXPECT_EQ(t->ignores_merges(), c.ignore_merges) << c.pre;
    // Only the Qwen tokenizers normalise to NFC: e + U+0301 stays two characters elsewhere.
    const bool qwen = c.back == "qwen35" || c.back == "qwen2";
    EXPECT_EQ(t->normalizes_nfc(), qwen) << c.pre;
    EXPECT_EQ(t->encode("e\xcc\x81") == t->encode("\xc3\xa9"), qwen) << c.pre;
    auto back = gguf_pre_name(t.value());
    ASSERT_TRUE(back.ok()) << c.pre << ": " << back.error_message();
    EXPECT_EQ(back.value(), c.back) << c.pre;
  }
  // A file without the key is read with the Qwen2 regex (and a warning on stderr).
  const std::string none = rewrite(src, "pre_none", [](Kv& kv) { drop(kv, "tokenizer.ggml.pre"); });
  auto g = GgufFile::open(none);
  ASSERT_TRUE(g.ok());
  auto t = tokenizer_from_gguf(g.value());
  ASSERT_TRUE(t.ok()) << t.error_message();
  EXPECT_EQ(gguf_pre_name(t.value()).value(), "qwen2");
}

// A completion prompt's BOS / EOS as llama.cpp adds them: add_bos_token, else the
// pre-tokenizer's default (Llama 3's: yes) when the file names a BOS; add_eos_token.
TEST(GgufVocab, AddBosAsLlamaCppReadsIt) {
  using V = std::vector<int32_t>;
  const std::string src = made("tiny", "f32");
  auto g0 = GgufFile::open(src);
  ASSERT_TRUE(g0.ok());
  auto t0 = tokenizer_from_gguf(g0.value());
  ASSERT_TRUE(t0.ok()) << t0.error_message();
  const int32_t bos = t0->token_id("<|endoftext|>"), eos = t0->token_id("<|im_end|>");
  ASSERT_GE(bos, 0);
  ASSERT_GE(eos, 0);
  const V body = t0->encode("Hello");
  EXPECT_EQ(t0->encode_prompt("Hello"), body);  // rewind's files: add_bos_token false
  auto concat = [](V a, const V& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  struct Case {
    std::string tag, pre;
    int bos_id;        // -1: no key
    int add_bos = -1;  // -1: no key
    int add_eos = -1;
    V want;
  };
  const std::vector<Case> cases = {
      {"qwen_default", "qwen35", bos, -1, -1, body},
      {"llama_default", "llama-bpe", bos, -1, -1, concat({bos}, body)},
      {"pixtral_no_id", "pixtral", -1, -1, -1, body},
      {"llama_off", "llama-bpe", bos, 0, -1, body},
      {"qwen_on", "qwen35", bos, 1, -1, concat({bos}, body)},
      {"eos_on", "qwen35", bos, 0, 1, concat(body, {eos})},
  };
  for (const Case& c : cases) {
    const std::string path = rewrite(src, "addbos_" + c.tag, [&](Kv& kv) {
      set(kv, "tokenizer.ggml.pre", GgufValue::string(c.pre));
      drop(kv, "tokenizer.ggml.add_bos_token");
      drop(kv, "tokenizer.ggml.bos_token_id");
      set(kv, "tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(eos)));
      if (c.bos_id >= 0)
        set(kv, "tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(c.bos_id)));
      if (c.add_bos >= 0) set(kv, "tokenizer.ggml.add_bos_token", GgufValue::boolean(c.add_bos));
      if (c.add_eos >= 0) set(kv, "tokenizer.ggml.add_eos_token", GgufValue::boolean(c.add_eos));
    });
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok());
    auto t = tokenizer_from_gguf(g.value());
    ASSERT_TRUE(t.ok()) << c.tag << ": " << t.error_message();
    EXPECT_EQ(t->encode_prompt("Hello"), c.want) << c.tag;
    EXPECT_EQ(t->encode("Hello"), body) << c.tag;
  }
  // Asked for, but no token named (none, past the vocab, or a hole): an error naming the key;
  // the pre-tokenizer's default asks for none then.
  auto types = g0->get_ints("tokenizer.ggml.token_type").value();
  const int64_t hole = static_cast<int64_t>(types.size()) - 1;
  types.back() = 5;  // unused
  {
    const std::string path = rewrite(src, "addbos_default_hole", [&](Kv& kv) {
      set(kv, "tokenizer.ggml.pre", GgufValue::string("llama-bpe"));
      drop(kv, "tokenizer.ggml.add_bos_token");
      set(kv, "tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(hole)));
      set(kv, "tokenizer.ggml.token_type", GgufValue::array_i32(types));
    });
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok());
    auto t = tokenizer_from_gguf(g.value());
    ASSERT_TRUE(t.ok()) << t.error_message();
    EXPECT_EQ(t->encode_prompt("Hello"), body);
  }
  for (const auto& [tag, id] : std::vector<std::pair<std::string, int64_t>>{
           {"missing", -1}, {"outside", 1 << 20}, {"hole", hole}}) {
    const std::string path = rewrite(src, "addbos_bad_" + tag, [&](Kv& kv) {
      drop(kv, "tokenizer.ggml.bos_token_id");
      if (id >= 0)
        set(kv, "tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(id)));
      set(kv, "tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
      set(kv, "tokenizer.ggml.token_type", GgufValue::array_i32(types));
    });
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok());
    auto t = tokenizer_from_gguf(g.value());
    ASSERT_FALSE(t.ok()) << tag;
    EXPECT_NE(t.error_message().find("'tokenizer.ggml.add_bos_token' is true but "
                                     "'tokenizer.ggml.bos_token_id' is " +
                                     std::string(id < 0 ? "missing" : "not a token id")),
              std::string::npos)
        << t.error_message();
  }
}

// convert writes what the checkpoint's tokenizer puts around a prompt (Nemotron-H's
// TemplateProcessing BOS) as add_bos_token, so both files encode a prompt alike; what GGUF
// cannot say is refused.
TEST(GgufVocab, ConvertKeepsThePromptsBos) {
  std::string hf;
  made("tiny", "f32", &hf);
  auto write_with = [&](const std::string& tag, const nlohmann::json& single) {
    const std::string dir = work_dir() + "/bos_" + tag;
    std::filesystem::remove_all(dir);
    std::filesystem::copy(hf, dir, std::filesystem::copy_options::recursive);
    auto j = nlohmann::json::parse(test::read_file(dir + "/tokenizer.json"));
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", single},
                           {"pair", nlohmann::json::array()},
                           {"special_tokens",
                            {{"<|endoftext|>",
                              {{"id", "<|endoftext|>"},
                               {"ids", {Tokenizer::load_dir(hf)->token_id("<|endoftext|>")}},
                               {"tokens", {"<|endoftext|>"}}}}}}};
    test::write_file(dir + "/tokenizer.json", j.dump());
    return dir;
  };
  const nlohmann::json bos = {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}};
  const nlohmann::json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const std::string dir = write_with("one", nlohmann::json::array({bos, a}));
  auto ht = Tokenizer::load_dir(dir);
  ASSERT_TRUE(ht.ok()) << ht.error_message();
  ASSERT_EQ(ht->prefix_ids().size(), 1u);
  int rc = 0;
  const std::string out = test::run_command(std::string(REWIND_BINARY) + " convert --in " + dir +
                                                " --out " + dir + ".gguf --type f32 2>&1",
                                            &rc);
  ASSERT_EQ(rc, 0) << out;
  auto g = GgufFile::open(dir + ".gguf");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->get_bool_or("tokenizer.ggml.add_bos_token", false).value());
  EXPECT_EQ(g->get_int_or("tokenizer.ggml.bos_token_id", -1).value(), ht->prefix_ids()[0]);
  auto gt = tokenizer_from_gguf(g.value());
  ASSERT_TRUE(gt.ok()) << gt.error_message();
  for (const char* text : {"Hello", "", "<|im_start|>user\nx"})
    EXPECT_EQ(gt->encode_prompt(text), ht->encode_prompt(text)) << text;

  const std::string two = write_with("two", nlohmann::json::array({bos, bos, a}));
  const std::string refused = test::run_command(std::string(REWIND_BINARY) + " convert --in " +
                                                    two + " --out " + two + ".gguf --type f32 2>&1",
                                                &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(refused.find("cannot say"), std::string::npos) << refused;
}

TEST(GgufVocab, MalformedVocab) {
  const std::string src = made("tiny", "f32");
  auto err = [&](const std::string& tag, const std::function<void(Kv&)>& edit,
                 const std::string& what) {
    const std::string path = rewrite(src, "tok_" + tag, edit);
    auto g = GgufFile::open(path);
    ASSERT_TRUE(g.ok());
    auto t = tokenizer_from_gguf(g.value());
    ASSERT_FALSE(t.ok()) << what;
    EXPECT_EQ(t.error_message().rfind(path + ": ", 0), 0u) << t.error_message();
    EXPECT_NE(t.error_message().find(what), std::string::npos) << t.error_message();
  };
  err(
      "model", [](Kv& kv) { set(kv, "tokenizer.ggml.model", GgufValue::string("llama")); },
      "only 'gpt2'");
  err(
      "pre", [](Kv& kv) { set(kv, "tokenizer.ggml.pre", GgufValue::string("falcon")); },
      "'falcon': supported are");
  err(
      "nomerges", [](Kv& kv) { drop(kv, "tokenizer.ggml.merges"); },
      "missing key 'tokenizer.ggml.merges'");
  err(
      "merge", [](Kv& kv) { set(kv, "tokenizer.ggml.merges", GgufValue::array_string({"ab"})); },
      "entry 0 is not two tokens");
  err(
      "types",
      [](Kv& kv) {
        set(kv, "tokenizer.ggml.token_type", GgufValue::array_i32({1, 1}));
      },
      "has 2 entries but 'tokenizer.ggml.tokens' has");
  err(
      "tokens", [](Kv& kv) { set(kv, "tokenizer.ggml.tokens", GgufValue::u32(1)); },
      "must be an array of strings");
}

}  // namespace
}  // namespace rw
