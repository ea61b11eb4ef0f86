// `rewind pull` against a local stand-in for the Hugging Face Hub (tests/integration/fake_hub.py,
// started by each test on 127.0.0.1; nothing touches the network): checkpoints (single and
// sharded) and GGUF files picked by quantisation name land in the store and run by name; a
// dropped connection and a partial file from an earlier run resume with Range requests; a wrong
// checksum leaves no file; tokens are needed, sent to the Hub and not to its CDN, and never
// printed; unsupported architectures are refused before any weights are fetched.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rewind/io/gguf.h"
#include "rewind/io/safetensors.h"
#include "test_util.h"

namespace rw {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* kToken = "hf_testtoken_5f3a9c";

std::string builtin_dir() {
  return fs::weakly_canonical(test::data_dir() + "/../../models/kjv-target").string();
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A fresh folder for one test: the hub's repositories, its log and the store.
std::string test_dir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string d = test::scratch_dir(std::string("pull_") + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Copies the built-in checkpoint's files (and two files it must not fetch) into repo.
void make_checkpoint_repo(const fs::path& repo) {
  fs::create_directories(repo);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json", "loss.png"})
    fs::copy_file(fs::path(builtin_dir()) / f, repo / f);
  std::ofstream(repo / "LICENSE") << "licence text\n";
  std::ofstream(repo / "special_tokens_map.json");  // an empty file: pulled, no transfer needed
}

// The built-in checkpoint with its tensors split into two shards and an index.
void make_sharded_repo(const fs::path& repo) {
  make_checkpoint_repo(repo);
  fs::remove(repo / "model.safetensors");
  auto st = SafetensorsFile::open(builtin_dir() + "/model.safetensors");
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<TensorToWrite> parts[2];
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  const auto& ts = st->tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const int shard = i < ts.size() / 2 ? 0 : 1;
    parts[shard].push_back({ts[i].name, ts[i].dtype, ts[i].shape, ts[i].data});
    index["weight_map"][ts[i].name] =
        "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s)
    ASSERT_TRUE(
        write_safetensors(
            (repo / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors")).string(),
            parts[s])
            .ok());
  std::ofstream(repo / "model.safetensors.index.json") << index.dump(1);
}

// A GGUF file whose header names `arch`, with `pad` bytes of tensor data after it.
void make_gguf(const fs::path& file, const std::string& arch, int64_t pad) {
  GgufTensorToWrite t;
  t.name = "token_embd.weight";
  t.ne = {pad / 4};
  t.fill = [](std::byte* out, size_t n) {
    std::memset(out, 0x5a, n);
    return Status(Ok{});
  };
  fs::create_directories(file.parent_path());
  ASSERT_TRUE(write_gguf(file.string(),
                         {{"general.architecture", GgufValue::string(arch)},
                          {"general.name", GgufValue::string("t")}},
                         {t})
                  .ok());
}

class FakeHub {
 public:
  FakeHub(const std::string& dir, const std::vector<std::string>& flags) : dir_(dir) {
    std::vector<std::string> args = {
        "/usr/bin/env", "python3",    test::data_dir() + "/../integration/fake_hub.py",
        "--root",       dir + "/hub", "--port-file",
        dir + "/port",  "--log",      log_path()};
    args.insert(args.end(), flags.begin(), flags.end());
    fs::create_directories(dir + "/hub");
    pid_ = test::spawn_logged(args, dir + "/hub_stderr.txt");
    for (int i = 0; i < 200 && !fs::exists(dir + "/port"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    port_ = test::read_file(dir + "/port");
  }
  ~FakeHub() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool up() const { return !port_.empty(); }
  std::string endpoint() const { return "http://127.0.0.1:" + port_; }
  std::string log_path() const { return dir_ + "/requests.jsonl"; }
  // The requests so far, one JSON object each.
  std::vector<json> requests() const {
    std::vector<json> out;
    std::ifstream in(log_path());
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  std::vector<json> requests_for(const std::string& path_part) const {
    std::vector<json> out;
    for (const json& r : requests())
      if (contains(r["path"].get<std::string>(), path_part)) out.push_back(r);
    return out;
  }
  void clear_log() const { fs::remove(log_path()); }

 private:
  std::string dir_, port_;
  pid_t pid_ = -1;
};

struct Cmd {
  int rc = 0;
  std::string out, err;
};

// `rewind <args>` with the store in dir/store and HF_ENDPOINT at the hub; `env` adds variables.
Cmd rewind(const std::string& dir, const FakeHub& hub, const std::string& args,
           const std::string& env = "") {
  Cmd r;
  const std::string err_path = dir + "/stderr.txt";
  r.out = test::run_command("env -u HF_TOKEN REWIND_HOME=" + dir +
                                "/store HF_ENDPOINT=" + hub.endpoint() + " " + env + " " +
                                REWIND_BINARY + " " + args + " 2>" + err_path,
                            &r.rc);
  r.err = test::read_file(err_path);
  return r;
}

std::string run_text(const std::string& dir, const FakeHub& hub, const std::string& model) {
  Cmd r = rewind(
      dir, hub, "run --model " + model + " --prompt 'And God said' -n 12 --ignore-eos -t 1 --json");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const json j = json::parse(r.out, nullptr, false);
  return j.is_object() ? j["text"].get<std::string>() : "";
}

std::string store_dir(const std::string& dir, const std::string& repo) {
  return dir + "/store/models/" + repo;
}

TEST(Pull, CheckpointLandsInTheStoreAndRunsByName) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  FakeHub hub(dir, {});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string stored = store_dir(dir, "test-org/kjv");
  EXPECT_EQ(r.out, stored + "\n");
  EXPECT_FALSE(contains(r.err, "\r")) << "a progress bar in a pipe: " << r.err;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(test::read_file(stored + "/" + f), test::read_file(builtin_dir() + "/" + f)) << f;
  EXPECT_TRUE(fs::is_regular_file(stored + "/special_tokens_map.json"));
  EXPECT_EQ(fs::file_size(stored + "/special_tokens_map.json"), 0u);
  EXPECT_FALSE(fs::exists(stored + "/loss.png"));
  EXPECT_FALSE(fs::exists(stored + "/LICENSE"));
  // LFS files came through the resolve endpoint's redirect to the CDN path.
  EXPECT_EQ(hub.requests_for("/test-org/kjv/resolve/main/model.safetensors").size(), 1u);
  EXPECT_EQ(hub.requests_for("/cdn/test-org/kjv/main/model.safetensors").size(), 1u);
  EXPECT_TRUE(hub.requests_for("loss.png").empty());

  // --model finds it by repository name and by its unique name, and generates what the source
  // checkpoint generates.
  const std::string want = run_text(dir, hub, builtin_dir());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(run_text(dir, hub, "test-org/kjv"), want);
  EXPECT_EQ(run_text(dir, hub, "kjv"), want);
  r = rewind(dir, hub, "run --model test-org/nothing --prompt x -n 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "rewind pull")) << r.err;

  // The store lists it with its size; a second pull fetches no file again.
  r = rewind(dir, hub, "models");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "test-org/kjv")) << r.out;
  EXPECT_TRUE(contains(r.out, "7.") && contains(r.out, "MB")) << r.out;
  EXPECT_EQ(rewind(dir, hub, "pull --list").out, r.out);
  hub.clear_log();
  r = rewind(dir, hub, "pull test-org/kjv --quiet");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, stored + "\n");
  EXPECT_TRUE(hub.requests_for("/cdn/").empty());
}

TEST(Pull, ShardedCheckpointFromPagedListing) {
  const std::string dir = test_dir();
  make_sharded_repo(dir + "/hub/test-org/kjv-sharded");
  FakeHub hub(dir, {"--page-size", "2"});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv-sharded");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_GE(hub.requests_for("/api/models/test-org/kjv-sharded/tree/main").size(), 4u);
  const std::string stored = store_dir(dir, "test-org/kjv-sharded");
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json"})
    EXPECT_TRUE(fs::exists(stored + "/" + f)) << f;
  EXPECT_EQ(run_text(dir, hub, "test-org/kjv-sharded"), run_text(dir, hub, builtin_dir()));
}

TEST(Pull, DroppedConnectionResumesWithARangeRequest) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  FakeHub hub(dir, {"--drop", "test-org/kjv/model.safetensors=3000000"});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto cdn = hub.requests_for("/cdn/test-org/kjv/main/model.safetensors");
  ASSERT_EQ(cdn.size(), 2u);
  EXPECT_TRUE(cdn[0]["range"].is_null());
  EXPECT_EQ(cdn[1]["range"], "bytes=3000000-");
  EXPECT_TRUE(contains(r.err, "resuming")) << r.err;
  EXPECT_EQ(test::read_file(store_dir(dir, "test-org/kjv") + "/model.safetensors"),
            test::read_file(builtin_dir() + "/model.safetensors"));
}

TEST(Pull, PartialFileOfAnEarlierRunIsResumedOrDiscarded) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  FakeHub hub(dir, {});
  ASSERT_TRUE(hub.up());
  const std::string weights = test::read_file(builtin_dir() + "/model.safetensors");
  const std::string part = store_dir(dir, "test-org/kjv") + "/model.safetensors.part";
  fs::create_directories(fs::path(part).parent_path());
  std::ofstream(part, std::ios::binary) << weights.substr(0, 1000000);
  Cmd r = rewind(dir, hub, "pull test-org/kjv");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const auto cdn = hub.requests_for("/cdn/test-org/kjv/main/model.safetensors");
  ASSERT_EQ(cdn.size(), 1u);
  EXPECT_EQ(cdn[0]["range"], "bytes=1000000-");
  EXPECT_EQ(test::read_file(store_dir(dir, "test-org/kjv") + "/model.safetensors"), weights);
  EXPECT_FALSE(fs::exists(part));

  // A partial file whose bytes are not the file's: the checksum catches it, nothing is kept.
  fs::remove_all(dir + "/store");
  fs::create_directories(fs::path(part).parent_path());
  std::ofstream(part, std::ios::binary) << std::string(1000000, 'z');
  r = rewind(dir, hub, "pull test-org/kjv");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "sha256")) << r.err;
  EXPECT_FALSE(fs::exists(part));
  EXPECT_FALSE(fs::exists(store_dir(dir, "test-org/kjv") + "/model.safetensors"));
  r = rewind(dir, hub, "pull test-org/kjv");  // and the next pull starts over
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(test::read_file(store_dir(dir, "test-org/kjv") + "/model.safetensors"), weights);
}

TEST(Pull, WrongChecksumLeavesNoFile) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  FakeHub hub(dir, {"--corrupt", "test-org/kjv/model.safetensors"});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.err, "test-org/kjv/model.safetensors")) << r.err;
  EXPECT_TRUE(contains(r.err, "sha256")) << r.err;
  EXPECT_EQ(r.out, "");
  const std::string stored = store_dir(dir, "test-org/kjv");
  EXPECT_FALSE(fs::exists(stored + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(stored + "/model.safetensors.part"));
  EXPECT_FALSE(fs::exists(stored + "/.rewind-pull.json"));
  r = rewind(dir, hub, "run --model test-org/kjv --prompt x -n 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.err, "rewind pull")) << r.err;
}

TEST(Pull, PrivateRepositoryNeedsHfToken) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  FakeHub hub(dir, {"--token", kToken, "--private", "test-org/kjv"});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "401")) << r.err;
  EXPECT_TRUE(contains(r.err, "set HF_TOKEN")) << r.err;

  r = rewind(dir, hub, "pull test-org/kjv", "HF_TOKEN=hf_wrong_value_77");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "refused HF_TOKEN")) << r.err;
  EXPECT_FALSE(contains(r.err + r.out, "hf_wrong_value_77")) << r.err;

  hub.clear_log();
  r = rewind(dir, hub, "pull test-org/kjv", std::string("HF_TOKEN=") + kToken);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(contains(r.err + r.out, kToken));
  // The token goes to the Hub, not to the CDN host a redirect names.
  for (const json& q : hub.requests()) {
    const bool cdn = contains(q["path"].get<std::string>(), "/cdn/");
    EXPECT_EQ(q["auth"], cdn ? "none" : "ok") << q.dump();
  }
  EXPECT_FALSE(hub.requests_for("/cdn/").empty());
}

TEST(Pull, GatedRepositorySaysToAcceptTheLicence) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  FakeHub hub(dir, {"--token", kToken, "--gated", "test-org/kjv"});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv", std::string("HF_TOKEN=") + kToken);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "403")) << r.err;
  EXPECT_TRUE(contains(r.err, "accept its licence at " + hub.endpoint() + "/test-org/kjv"))
      << r.err;
}

TEST(Pull, UnknownRepositoryOrRevision) {
  const std::string dir = test_dir();
  make_checkpoint_repo(dir + "/hub/test-org/kjv");
  make_checkpoint_repo(dir + "/hub/test-org/kjv@v2");
  fs::remove(dir + "/hub/test-org/kjv@v2/generation_config.json");
  FakeHub hub(dir, {});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/kjv --revision nope");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "404")) << r.err;
  EXPECT_TRUE(contains(r.err, "--revision")) << r.err;
  r = rewind(dir, hub, "pull test-org/missing");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "check the name")) << r.err;
  r = rewind(dir, hub, "pull test-org/kjv --revision v2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(store_dir(dir, "test-org/kjv") + "/generation_config.json"));
  EXPECT_FALSE(hub.requests_for("/test-org/kjv/resolve/v2/config.json").empty());
  r = rewind(dir, hub, "pull not-a-repo");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "ORG/NAME")) << r.err;
}

TEST(Pull, UnsupportedCheckpointIsRefusedBeforeItsWeights) {
  const std::string dir = test_dir();
  const fs::path repo = dir + "/hub/test-org/llama";
  make_checkpoint_repo(repo);
  std::ofstream(repo / "config.json")
      << R"({"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":64})";
  FakeHub hub(dir, {});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/llama");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "'llama' (LlamaForCausalLM)")) << r.err;
  EXPECT_TRUE(contains(r.err, "qwen3_5")) << r.err;
  EXPECT_TRUE(contains(r.err, "qwen35moe")) << r.err;
  // Only the listing and config.json were requested.
  for (const json& q : hub.requests()) {
    const std::string p = q["path"].get<std::string>();
    EXPECT_TRUE(contains(p, "/tree/main") || contains(p, "/resolve/main/config.json")) << p;
  }
  EXPECT_FALSE(fs::exists(store_dir(dir, "test-org/llama") + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(store_dir(dir, "test-org/llama") + "/model.safetensors.part"));
}

TEST(Pull, UnsupportedGgufIsRefusedAfterItsHeader) {
  const std::string dir = test_dir();
  make_gguf(dir + "/hub/test-org/llama-GGUF/llama-Q4_K_M.gguf", "llama", 12 << 20);
  FakeHub hub(dir, {});
  ASSERT_TRUE(hub.up());
  Cmd r = rewind(dir, hub, "pull test-org/llama-GGUF:Q4_K_M");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "GGUF architecture 'llama'")) << r.err;
  EXPECT_TRUE(contains(r.err, "qwen35, qwen35moe, qwen3next")) << r.err;
  const auto got = hub.requests_for("/cdn/test-org/llama-GGUF/main/llama-Q4_K_M.gguf");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["range"], "bytes=0-4194303");  // the first 4 MiB of 12 MiB
  EXPECT_FALSE(fs::exists(store_dir(dir, "test-org/llama-GGUF") + "/llama-Q4_K_M.gguf"));
}

TEST(Pull, GgufPickedByQuantisationRunsByName) {
  const std::string dir = test_dir();
  const fs::path repo = dir + "/hub/test-org/kjv-GGUF";
  fs::create_directories(repo);
  int rc = 0;
  const std::string conv =
      test::run_command(std::string(REWIND_BINARY) + " convert --in " + builtin_dir() +
                            " --type q8_0 --out " + (repo / "kjv-Q8_0.gguf").string() + " 2>&1",
                        &rc);
  ASSERT_EQ(rc, 0) << conv;
  // Other quantisations under their names (the bytes are the same file's; the pick goes by name).
  fs::copy_file(repo / "kjv-Q8_0.gguf", repo / "kjv-Q4_K_M.gguf");
  fs::copy_file(repo / "kjv-Q8_0.gguf", repo / "kjv-Q4_K_S.gguf");
  make_gguf(repo / "mmproj-F16.gguf", "clip", 1024);
  FakeHub hub(dir, {});
  ASSERT_TRUE(hub.up());

  // No match: the candidates are listed and no GGUF file is requested.
  Cmd r = rewind(dir, hub, "pull test-org/kjv-GGUF:Q3_K_M");
  EXPECT_EQ(r.rc, 1);
  for (const char* f : {"kjv-Q8_0.gguf", "kjv-Q4_K_M.gguf", "kjv-Q4_K_S.gguf"})
    EXPECT_TRUE(contains(r.err, f)) << r.err;
  EXPECT_TRUE(hub.requests_for(".gguf").empty());
  r = rewind(dir, hub, "pull test-org/kjv-GGUF:Q4_K");  // Q4_K_M and Q4_K_S both carry Q4_K_?
  EXPECT_EQ(r.rc, 1);                                   // no: whole names only, so none
  EXPECT_TRUE(contains(r.err, "no GGUF file carries")) << r.err;

  r = rewind(dir, hub, "pull test-org/kjv-GGUF:q8_0");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string q8 = store_dir(dir, "test-org/kjv-GGUF") + "/kjv-Q8_0.gguf";
  EXPECT_EQ(r.out, q8 + "\n");
  EXPECT_EQ(test::read_file(q8), test::read_file((repo / "kjv-Q8_0.gguf").string()));
  EXPECT_TRUE(hub.requests_for("kjv-Q4_K").empty());
  EXPECT_TRUE(hub.requests_for("mmproj").empty());
  const std::string want = run_text(dir, hub, (repo / "kjv-Q8_0.gguf").string());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(run_text(dir, hub, "test-org/kjv-GGUF"), want);

  // Without a name: Q4_K_M, saying so. Then two files are stored and --model needs the pick.
  r = rewind(dir, hub, "pull test-org/kjv-GGUF");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "picked Q4_K_M")) << r.err;
  r = rewind(dir, hub, "run --model kjv-GGUF --prompt x -n 1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "test-org/kjv-GGUF:Q4_K_M")) << r.err;
  EXPECT_TRUE(contains(r.err, "test-org/kjv-GGUF:Q8_0")) << r.err;
  EXPECT_EQ(run_text(dir, hub, "kjv-GGUF:Q8_0"), want);
  r = rewind(dir, hub, "models");
  EXPECT_TRUE(contains(r.out, "test-org/kjv-GGUF:Q4_K_M")) << r.out;
  EXPECT_TRUE(contains(r.out, "test-org/kjv-GGUF:Q8_0")) << r.out;
}

}  // namespace
}  // namespace rw
