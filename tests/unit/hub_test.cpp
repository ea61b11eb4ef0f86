// Tests for hub/ (rewind pull without a network): SHA-256 known answers, repository references,
// the Hub's URLs, the tree listing parser with every malformed entry, quantisation-name matching
// and file selection, the GGUF architecture probe on every prefix of a file, the architecture
// checks against the model layer's parsers, and the local store's lookups.
#include "rewind/hub/hub.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "rewind/hub/sha256.h"
#include "rewind/hub/store.h"
#include "rewind/io/gguf.h"
#include "rewind/model/arch.h"
#include "rewind/model/config.h"
#include "rewind/model/gguf_model.h"
#include "test_util.h"

namespace rw::hub {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(HubSha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55, 56 and 64 bytes: the padding boundaries.
  EXPECT_EQ(sha256_hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(HubSha256, StreamedInPiecesEqualsWhole) {
  std::mt19937_64 rng(7);
  std::string data(100003, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const std::string whole = sha256_hex(data);
  for (int round = 0; round < 20; ++round) {
    Sha256 h;
    size_t i = 0;
    while (i < data.size()) {
      const size_t n = std::min<size_t>(rng() % 300, data.size() - i);
      h.update(data.data() + i, n);
      i += n;
    }
    EXPECT_EQ(h.hex_digest(), whole);
  }
}

TEST(HubRef, ParsesRepoAndFile) {
  auto r = parse_repo_ref("Qwen/Qwen3.5-0.8B");
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->repo, "Qwen/Qwen3.5-0.8B");
  EXPECT_EQ(r->file, "");
  r = parse_repo_ref("unsloth/Qwen3.5-0.8B-GGUF:Q4_K_M");
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->repo, "unsloth/Qwen3.5-0.8B-GGUF");
  EXPECT_EQ(r->file, "Q4_K_M");
  r = parse_repo_ref("org/m:sub/file-Q8_0.gguf");
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->file, "sub/file-Q8_0.gguf");
}

TEST(HubRef, RejectsMalformedNames) {
  for (const char* bad : {"noslash", "/name", "org/", "a/b/c", "org/na me", "org/../x", "../x",
                          "org/..", "org/x:", "org/x:../y", "org/x:/abs", "org/\xc3\xa9"}) {
    auto r = parse_repo_ref(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error_message().find('\n'), std::string::npos) << bad;
  }
}

TEST(HubUrl, BuildsTheHubsEndpoints) {
  EXPECT_EQ(tree_url("http://127.0.0.1:9/", "org/Name.x", "main"),
            "http://127.0.0.1:9/api/models/org/Name.x/tree/main?recursive=true");
  EXPECT_EQ(tree_url("", "org/n", "refs/pr/1"),
            "https://huggingface.co/api/models/org/n/tree/refs%2Fpr%2F1?recursive=true");
  EXPECT_EQ(resolve_url("https://hub.example//", "org/n", "v1.0", "sub dir/a+b.gguf"),
            "https://hub.example/org/n/resolve/v1.0/sub%20dir/a%2Bb.gguf");
  EXPECT_EQ(url_encode("a/b c~", false), "a%2Fb%20c~");
}

TEST(HubUrl, FollowsTheNextLink) {
  EXPECT_EQ(next_page_url(""), "");
  EXPECT_EQ(next_page_url("<https://h/api/x?cursor=abc>; rel=\"next\""),
            "https://h/api/x?cursor=abc");
  EXPECT_EQ(next_page_url("<https://h/1>; rel=\"prev\", <https://h/3>; rel=\"next\""),
            "https://h/3");
  EXPECT_EQ(next_page_url("<https://h/1>; rel=\"last\""), "");
  EXPECT_EQ(next_page_url("<https://h/unclosed; rel=\"next\""), "");
}

const char* kSha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

TEST(HubListing, ParsesFilesAndSkipsDirectories) {
  const std::string text = std::string(R"([
    {"type":"directory","oid":"x","size":0,"path":"sub"},
    {"type":"file","oid":"b1","size":12,"path":"config.json"},
    {"type":"file","oid":"b2","size":900,"path":"sub/m-Q4_K_M.gguf",
     "lfs":{"oid":")") + kSha +
                           R"(","size":900,"pointerSize":134}}])";
  auto r = parse_tree_listing(text, "listing");
  ASSERT_TRUE(r.ok()) << r.error_message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].path, "config.json");
  EXPECT_EQ((*r)[0].size, 12u);
  EXPECT_EQ((*r)[0].sha256, "");
  EXPECT_EQ((*r)[1].path, "sub/m-Q4_K_M.gguf");
  EXPECT_EQ((*r)[1].sha256, kSha);
}

TEST(HubListing, MalformedInputIsAOneLineError) {
  const std::string lfs_ok = std::string(R"({"oid":")") + kSha + R"(","size":5})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {R"({"path":"x"})", "not a JSON array"},
      {R"([1])", "entry 0 is not an object"},
      {R"([{"path":"a","size":1}])", "'type'"},
      {R"([{"type":3,"path":"a","size":1}])", "'type'"},
      {R"([{"type":"file","size":1}])", "'path'"},
      {R"([{"type":"file","path":7,"size":1}])", "'path'"},
      {R"([{"type":"file","path":"../a","size":1}])", "not a relative path"},
      {R"([{"type":"file","path":"/a","size":1}])", "not a relative path"},
      {R"([{"type":"file","path":"a//b","size":1}])", "not a relative path"},
      {R"([{"type":"file","path":""  ,"size":1}])", "not a relative path"},
      {R"([{"type":"file","path":"a"}])", "'size'"},
      {R"([{"type":"file","path":"a","size":"5"}])", "'size'"},
      {R"([{"type":"file","path":"a","size":-5}])", "'size'"},
      {R"([{"type":"file","path":"a","size":5.5}])", "'size'"},
      {R"([{"type":"file","path":"a","size":5,"lfs":"x"}])", "'lfs' is not an object"},
      {R"([{"type":"file","path":"a","size":5,"lfs":{"size":5}}])", "'lfs.oid'"},
      {R"([{"type":"file","path":"a","size":5,"lfs":{"oid":"abc","size":5}}])", "'lfs.oid'"},
      {R"([{"type":"file","path":"a","size":5,"lfs":{"oid":")" + std::string(63, 'a') + "g" +
           R"(","size":5}}])",
       "'lfs.oid'"},
      {R"([{"type":"file","path":"a","size":5,"lfs":{"oid":")" + std::string(kSha) + R"("}}])",
       "'lfs.size'"},
      {R"([{"type":"file","path":"a","size":6,"lfs":)" + lfs_ok + "}]", "differs from 'size'"},
  };
  for (const auto& [text, want] : cases) {
    auto r = parse_tree_listing(text, "L");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(contains(r.error_message(), want)) << text << " -> " << r.error_message();
    EXPECT_EQ(r.error_message().rfind("L", 0), 0u) << r.error_message();
    EXPECT_EQ(r.error_message().find('\n'), std::string::npos);
  }
}

TEST(HubQuant, MatchesWholeTokensOnly) {
  EXPECT_TRUE(quant_matches("Model-Q4_K_M.gguf", "Q4_K_M"));
  EXPECT_TRUE(quant_matches("model.q4_k_m.gguf", "Q4_K_M"));
  EXPECT_TRUE(quant_matches("sub/Model-Q4_K_M-00001-of-00002.gguf", "q4_k_m"));
  EXPECT_TRUE(quant_matches("Model-UD-Q4_K_XL.gguf", "Q4_K_XL"));
  EXPECT_TRUE(quant_matches("Model-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"));
  EXPECT_TRUE(quant_matches("Model-BF16.gguf", "bf16"));
  EXPECT_FALSE(quant_matches("Model-Q4_K_M.gguf", "Q4_K"));
  EXPECT_FALSE(quant_matches("Model-Q4_K_M.gguf", "K_M"));
  EXPECT_FALSE(quant_matches("Model-IQ4_XS.gguf", "Q4_XS"));
  EXPECT_FALSE(quant_matches("Model-Q8_0.gguf", ""));
  EXPECT_FALSE(quant_matches("Q4_K_M/Model-Q8_0.gguf", "Q4_K_M"));  // the folder does not count
  EXPECT_EQ(quant_label("Model-UD-Q4_K_XL.gguf"), "Q4_K_XL");
  EXPECT_EQ(quant_label("sub/Model.Q8_0-00002-of-00003.gguf"), "Q8_0");
  EXPECT_EQ(quant_label("plain.gguf"), "plain");
  EXPECT_TRUE(is_split_gguf("x/M-Q8_0-00001-of-00003.gguf"));
  EXPECT_FALSE(is_split_gguf("M-Q8_0-0001-of-00003.gguf"));
  EXPECT_FALSE(is_split_gguf("M-Q8_0.gguf"));
}

std::vector<RepoFile> files(const std::vector<std::string>& paths) {
  std::vector<RepoFile> v;
  uint64_t size = 1000;
  for (const std::string& p : paths) v.push_back({p, size++, kSha});
  return v;
}

std::vector<std::string> paths(const Selection& s) {
  std::vector<std::string> v;
  for (const RepoFile& f : s.files) v.push_back(f.path);
  return v;
}

TEST(HubSelect, TakesTheCheckpointFilesConfigFirst) {
  const auto listing =
      files({".gitattributes", "README.md", "model-00002-of-00002.safetensors",
             "model-00001-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
             "tokenizer_config.json", "config.json", "chat_template.jinja", "vocab.json",
             "merges.txt", "generation_config.json", "pytorch_model.bin", "sub/x.safetensors"});
  auto s = select_files(listing, "org/m", "");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(s->kind, Selection::Kind::Hf);
  EXPECT_EQ(paths(s.value()),
            (std::vector<std::string>{
                "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "chat_template.jinja", "model.safetensors.index.json",
                "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"}));
}

TEST(HubSelect, CheckpointProblemsAreNamed) {
  auto s = select_files(files({"config.json", "model.safetensors"}), "org/m", "");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "tokenizer.json")) << s.error_message();
  s = select_files(files({"config.json", "pytorch_model.bin", "tokenizer.json"}), "org/m", "");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "no *.safetensors")) << s.error_message();
  s = select_files(files({"README.md"}), "org/m", "");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "neither")) << s.error_message();
}

TEST(HubSelect, PicksAGgufByQuantisation) {
  const auto listing = files({"README.md", "M-Q4_K_M.gguf", "M-Q4_K_S.gguf", "M-Q8_0.gguf",
                              "M-UD-Q4_K_XL.gguf", "mmproj-F16.gguf", "M-BF16.gguf"});
  auto s = select_files(listing, "org/m", "q8_0");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(s->kind, Selection::Kind::Gguf);
  EXPECT_EQ(paths(s.value()), std::vector<std::string>{"M-Q8_0.gguf"});
  s = select_files(listing, "org/m", "M-Q4_K_S.gguf");  // a path
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(paths(s.value()), std::vector<std::string>{"M-Q4_K_S.gguf"});
  // Without a quantisation: Q4_K_M, as llama.cpp's -hf picks, with a note saying so.
  s = select_files(listing, "org/m", "");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(paths(s.value()), std::vector<std::string>{"M-Q4_K_M.gguf"});
  EXPECT_TRUE(contains(s->note, "Q4_K_M")) << s->note;
  // No match: every candidate is listed, the projector is not.
  s = select_files(listing, "org/m", "Q3_K_M");
  ASSERT_FALSE(s.ok());
  for (const char* c :
       {"M-Q4_K_M.gguf", "M-Q4_K_S.gguf", "M-Q8_0.gguf", "M-UD-Q4_K_XL.gguf", "M-BF16.gguf"})
    EXPECT_TRUE(contains(s.error_message(), c)) << s.error_message();
  EXPECT_FALSE(contains(s.error_message(), "mmproj")) << s.error_message();
  s = select_files(listing, "org/m", "mmproj");
  EXPECT_FALSE(s.ok());
  s = select_files(listing, "org/m", "README.md");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "not a .gguf")) << s.error_message();
}

TEST(HubSelect, AmbiguousOrSplitChoicesListTheCandidates) {
  auto s =
      select_files(files({"a/M-Q4_K_M.gguf", "b/M-Q4_K_M.gguf", "M-Q8_0.gguf"}), "org/m", "Q4_K_M");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "matches 2")) << s.error_message();
  EXPECT_TRUE(contains(s.error_message(), "a/M-Q4_K_M.gguf")) << s.error_message();
  EXPECT_TRUE(contains(s.error_message(), "b/M-Q4_K_M.gguf")) << s.error_message();
  s = select_files(files({"M-Q8_0.gguf", "M-Q6_K.gguf"}), "org/m", "");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "M-Q8_0.gguf")) << s.error_message();
  EXPECT_TRUE(contains(s.error_message(), "M-Q6_K.gguf")) << s.error_message();
  s = select_files(
      files({"Q8_0/M-Q8_0-00001-of-00002.gguf", "Q8_0/M-Q8_0-00002-of-00002.gguf", "M-Q4_0.gguf"}),
      "org/m", "Q8_0");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "split")) << s.error_message();
  s = select_files(files({"M-F16.gguf"}), "org/m", "");  // the only one
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(paths(s.value()), std::vector<std::string>{"M-F16.gguf"});
  s = select_files(files({"config.json", "model.safetensors", "tokenizer.json"}), "org/m",
                   "Q4_K_M");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "no GGUF files")) << s.error_message();
}

std::vector<std::byte> gguf_bytes(const std::vector<std::pair<std::string, GgufValue>>& kv) {
  GgufTensorToWrite t;
  t.name = "token_embd.weight";
  t.ne = {32, 2};
  t.fill = [](std::byte* out, size_t n) {
    std::memset(out, 0, n);
    return Status(Ok{});
  };
  auto r = gguf_to_bytes(kv, {t});
  EXPECT_TRUE(r.ok()) << r.error_message();
  return r.ok() ? r.value() : std::vector<std::byte>();
}

TEST(HubGgufProbe, FindsTheArchitectureAfterOtherKeys) {
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"general.alignment", GgufValue::u32(32)},
      {"tokenizer.ggml.tokens", GgufValue::array_string({"a", "bb", "ccc"})},
      {"tokenizer.ggml.scores", GgufValue::array_f32({1, 2, 3})},
      {"general.flag", GgufValue::boolean(true)},
      {"general.name", GgufValue::string("x")},
      {"general.big", GgufValue::u64(1)},
      {"general.architecture", GgufValue::string("qwen35moe")},
      {"general.after", GgufValue::string("y")},
  };
  const auto bytes = gguf_bytes(kv);
  auto r = gguf_architecture(bytes.data(), bytes.size());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r.value(), "qwen35moe");
  // Every prefix: the right answer or a one-line error, never another value.
  size_t first_ok = bytes.size();
  for (size_t n = 0; n <= bytes.size(); ++n) {
    auto p = gguf_architecture(bytes.data(), n);
    if (p.ok()) {
      EXPECT_EQ(p.value(), "qwen35moe");
      first_ok = std::min(first_ok, n);
    } else {
      EXPECT_TRUE(contains(p.error_message(), "before 'general.architecture'"))
          << n << ": " << p.error_message();
    }
  }
  EXPECT_LT(first_ok, bytes.size() / 2);  // long before the tensor data
}

TEST(HubGgufProbe, MalformedHeadersAreErrors) {
  auto bytes = gguf_bytes({{"general.name", GgufValue::string("x")}});
  auto r = gguf_architecture(bytes.data(), bytes.size());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "no 'general.architecture'")) << r.error_message();
  bytes = gguf_bytes({{"general.architecture", GgufValue::u32(3)}});
  r = gguf_architecture(bytes.data(), bytes.size());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "not a string")) << r.error_message();
  bytes = gguf_bytes({{"general.architecture", GgufValue::string("qwen35")}});
  auto bad = bytes;
  bad[0] = std::byte{'X'};
  EXPECT_TRUE(contains(gguf_architecture(bad.data(), bad.size()).error_message(), "bad magic"));
  bad = bytes;
  bad[4] = std::byte{1};  // version 1
  EXPECT_TRUE(contains(gguf_architecture(bad.data(), bad.size()).error_message(), "version 1"));
  // The first key's value type (after magic, version, the counts, key length and key) set to 99.
  bytes = gguf_bytes({{"general.x", GgufValue::string("q")},
                      {"general.architecture", GgufValue::string("qwen35")}});
  bad = bytes;
  bad[4 + 4 + 8 + 8 + 8 + std::strlen("general.x")] = std::byte{99};
  EXPECT_TRUE(
      contains(gguf_architecture(bad.data(), bad.size()).error_message(), "unknown value type 99"));
}

TEST(HubArch, ListsAgreeWithTheModelParsers) {
  for (const Architecture* a : architectures())
    for (const std::string& mt : a->hf_model_types) {
      auto r = parse_model_config("{\"model_type\":\"" + mt + "\"}", "c");
      EXPECT_FALSE(contains(r.error_message(), "unknown model_type")) << mt;
    }
  EXPECT_TRUE(contains(parse_model_config(R"({"model_type":"llama"})", "c").error_message(),
                       "unknown model_type"));
  for (const std::string& arch :
       std::vector<std::string>{"qwen35", "qwen35moe", "qwen3next", "llama", "qwen3"}) {
    const auto bytes = gguf_bytes({{"general.architecture", GgufValue::string(arch)}});
    auto g = GgufFile::parse(bytes.data(), bytes.size(), "g.gguf");
    ASSERT_TRUE(g.ok()) << g.error_message();
    const bool parser_refuses =
        contains(config_from_gguf(g.value()).error_message(), "is not supported");
    EXPECT_EQ(architecture_for_gguf(arch) != nullptr, !parser_refuses) << arch;
  }
}

TEST(HubArch, RefusesWhatRewindCannotRun) {
  auto s = check_hf_config(R"({"model_type":"llama","architectures":["LlamaForCausalLM"]})",
                           "org/m/config.json");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "'llama' (LlamaForCausalLM)")) << s.error_message();
  EXPECT_TRUE(contains(s.error_message(), "qwen3_5, qwen3_5_moe")) << s.error_message();
  EXPECT_TRUE(contains(s.error_message(), "qwen35, qwen35moe, qwen3next")) << s.error_message();
  EXPECT_FALSE(check_hf_config("{", "c").ok());
  EXPECT_FALSE(check_hf_config("[]", "c").ok());
  EXPECT_TRUE(
      contains(check_hf_config(R"({"model_type":5})", "c").error_message(), "no model_type"));
  // A supported type whose fields rewind cannot read is refused too, with the parser's reason.
  s = check_hf_config(R"({"model_type":"qwen3_next","hidden_size":"big"})", "c");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "rewind cannot load this checkpoint"))
      << s.error_message();
  for (const std::string& v : test::fixture_variants()) {
    const std::string text = test::read_file(test::fixture_dir(v) + "/config.json");
    EXPECT_TRUE(check_hf_config(text, v).ok()) << check_hf_config(text, v).error_message();
  }
  EXPECT_TRUE(check_gguf_architecture("qwen3next", "f").ok());
  s = check_gguf_architecture("gemma3", "org/m/x.gguf");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.error_message(), "'gemma3'")) << s.error_message();
  EXPECT_TRUE(contains(s.error_message(), "qwen35, qwen35moe, qwen3next")) << s.error_message();
}

TEST(HubFormat, BytesInDecimalUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1500), "1.50 KB");
  EXPECT_EQ(format_bytes(25300000), "25.3 MB");
  EXPECT_EQ(format_bytes(1234567890), "1.23 GB");
  EXPECT_EQ(format_bytes(512000000000), "512 GB");
}

void put(const fs::path& p, uint64_t size) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << std::string(size, 'x');
}

TEST(HubStore, FindsPulledModelsByName) {
  const std::string root = test::made_scratch_dir("store");
  // A checkpoint org-a/Model.
  Selection hf;
  hf.files = {{"config.json", 10, ""}, {"model.safetensors", 30, kSha}};
  const std::string a = store_model_dir(root, "org-a/Model");
  EXPECT_EQ(a, root + "/models/org-a/Model");
  for (const RepoFile& f : hf.files) put(fs::path(a) / f.path, f.size);
  ASSERT_TRUE(record_pull(a, "org-a/Model", "main", hf).ok());
  // Two GGUF files of org-b/Model-GGUF, pulled one at a time.
  const std::string b = store_model_dir(root, "org-b/Model-GGUF");
  for (const char* q : {"sub/Model-Q4_K_M.gguf", "Model-Q8_0.gguf"}) {
    Selection g;
    g.kind = Selection::Kind::Gguf;
    g.files = {{q, 20, kSha}};
    put(fs::path(b) / fs::path(q).filename(), 20);
    ASSERT_TRUE(record_pull(b, "org-b/Model-GGUF", "v2", g).ok());
  }
  EXPECT_TRUE(is_recorded(b, {"Model-Q8_0.gguf", 20, kSha}));
  EXPECT_FALSE(is_recorded(b, {"Model-Q8_0.gguf", 21, kSha}));
  EXPECT_FALSE(is_recorded(b, {"Model-Q6_K.gguf", 20, kSha}));

  auto all = list_stored(root);
  ASSERT_TRUE(all.ok()) << all.error_message();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].name, "org-a/Model");
  EXPECT_EQ((*all)[0].bytes, 40u);
  EXPECT_EQ((*all)[1].name, "org-b/Model-GGUF:Q4_K_M");
  EXPECT_EQ((*all)[1].revision, "v2");
  EXPECT_EQ((*all)[2].name, "org-b/Model-GGUF:Q8_0");

  EXPECT_EQ(find_stored(root, "org-a/Model").value(), a);
  EXPECT_EQ(find_stored(root, "Model").value(), a);  // unique name
  EXPECT_EQ(find_stored(root, "org-b/Model-GGUF:q8_0").value(), b + "/Model-Q8_0.gguf");
  EXPECT_EQ(find_stored(root, "Model-GGUF:Q4_K_M").value(), b + "/Model-Q4_K_M.gguf");
  EXPECT_EQ(find_stored(root, "Model-GGUF:Model-Q8_0.gguf").value(), b + "/Model-Q8_0.gguf");

  auto r = find_stored(root, "org-b/Model-GGUF");  // two GGUF files: say which
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "org-b/Model-GGUF:Q8_0")) << r.error_message();
  EXPECT_TRUE(contains(r.error_message(), "org-b/Model-GGUF:Q4_K_M")) << r.error_message();
  r = find_stored(root, "org-b/Model-GGUF:Q6_K");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "matches none")) << r.error_message();
  r = find_stored(root, "nothing/here");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "rewind pull")) << r.error_message();
  EXPECT_TRUE(contains(r.error_message(), "org-a/Model")) << r.error_message();

  // The same name under two organisations needs the organisation.
  const std::string c = store_model_dir(root, "org-c/Model");
  for (const RepoFile& f : hf.files) put(fs::path(c) / f.path, f.size);
  ASSERT_TRUE(record_pull(c, "org-c/Model", "main", hf).ok());
  r = find_stored(root, "Model");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "2 repositories")) << r.error_message();
  EXPECT_EQ(find_stored(root, "org-c/Model").value(), c);

  // A file gone missing: the model is incomplete and the message says to pull again.
  fs::remove(fs::path(c) / "model.safetensors");
  r = find_stored(root, "org-c/Model");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "pull it again")) << r.error_message();

  // A broken manifest is an error naming it.
  std::ofstream(fs::path(c) / kManifestName) << "{";
  EXPECT_TRUE(contains(list_stored(root).error_message(), kManifestName));
}

}  // namespace
}  // namespace rw::hub
