// A served model's defaults from generation_config.json (server/generation_defaults.h): what the
// file sets, and the warnings for a file that is unreadable, malformed or out of range.
#include "rewind/server/generation_defaults.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "rewind/tokenizer/tokenizer.h"
#include "test_util.h"

namespace rw {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = [] {
    BpeTrainOptions opt;
    opt.n_merges = 50;
    opt.special_tokens = {"<|endoftext|>", "<|im_end|>"};
    auto t = Tokenizer::from_json(train_bpe_tokenizer_json("a small corpus of text", opt), "t");
    EXPECT_TRUE(t.ok()) << t.error_message();
    return std::move(t).value();
  }();
  return tok;
}

TEST(GenerationDefaults, FileValuesAndFallbacks) {
  const std::string dir = test::made_scratch_dir("gen_defaults");
  std::filesystem::remove_all(dir + "/generation_config.json");
  GenerationDefaults none = load_generation_defaults(dir, {7}, tokenizer());
  EXPECT_TRUE(none.warnings.empty());
  EXPECT_EQ(none.stop_ids, std::set<int32_t>({7}));  // the config's eos
  EXPECT_EQ(none.sampling.temperature, 1.0f);
  test::write_file(dir + "/generation_config.json",
                   R"({"eos_token_id": [3, 4], "temperature": 0.6, "top_p": 0.95, "top_k": 20})");
  GenerationDefaults d = load_generation_defaults(dir, {7}, tokenizer());
  EXPECT_TRUE(d.warnings.empty());
  EXPECT_EQ(d.stop_ids, std::set<int32_t>({3, 4}));
  EXPECT_EQ(d.sampling.temperature, 0.6f);
  EXPECT_EQ(d.sampling.top_p, 0.95f);
  EXPECT_EQ(d.sampling.top_k, 20);
}

TEST(GenerationDefaults, BadFilesAreIgnoredWithAWarning) {
  const std::string dir = test::made_scratch_dir("gen_defaults_bad");
  const std::string path = dir + "/generation_config.json";
  std::filesystem::remove_all(path);
  test::write_file(path, "[1, 2]");
  GenerationDefaults arr = load_generation_defaults(dir, {7}, tokenizer());
  ASSERT_EQ(arr.warnings.size(), 1u);
  EXPECT_EQ(arr.warnings[0], path + " is not a JSON object; ignored");
  EXPECT_EQ(arr.stop_ids, std::set<int32_t>({7}));
  test::write_file(path, R"({"top_p": 0, "temperature": "hot"})");
  GenerationDefaults range = load_generation_defaults(dir, {7}, tokenizer());
  ASSERT_EQ(range.warnings.size(), 2u);
  EXPECT_EQ(range.warnings[0], path + ": temperature = \"hot\" is out of range; ignored");
  EXPECT_EQ(range.warnings[1], path + ": top_p = 0 is out of range; ignored");
  EXPECT_EQ(range.sampling.top_p, 1.0f);
  // There but not a file: a warning, not a silent fall-back.
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  GenerationDefaults unreadable = load_generation_defaults(dir, {7}, tokenizer());
  ASSERT_EQ(unreadable.warnings.size(), 1u);
  EXPECT_EQ(unreadable.warnings[0], "cannot read " + path + ": Is a directory; ignored");
  std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace rw
