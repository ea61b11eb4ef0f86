// Tokenizer tests: round trips, NFC, Qwen3.5 pre-tokenisation (expected splits taken from
// Hugging Face `tokenizers` on the same regex), special tokens, a hand-built BPE whose ids are
// derived by hand, malformed tokenizer.json files, streaming decode, and the BPE trainer.
#include "rewind/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "rewind/tokenizer/text.h"
#include "test_util.h"

namespace rw {
namespace {

using json = nlohmann::json;

const Tokenizer& trained() {
  static const Tokenizer tok = [] {
    BpeTrainOptions opt;
    opt.n_merges = 1000;
    auto t =
        Tokenizer::from_json(train_bpe_tokenizer_json(builtin_training_text(), opt), "trained");
    EXPECT_TRUE(t.ok()) << t.error_message();
    return std::move(t).value();
  }();
  return tok;
}

std::string round_trip(const Tokenizer& tok, std::string_view s, bool parse_special = true) {
  return tok.decode(tok.encode(s, parse_special));
}

// ---- round trips ----------------------------------------------------------------------------

TEST(Tokenizer, RoundTripsText) {
  const Tokenizer& tok = trained();
  const std::vector<std::string> cases = {
      "Hello, world! The lighthouse keeper counted 212 steps.",
      "emoji: \xF0\x9F\x98\x80 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD family "
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
      "CJK: \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE4\xB8\xAD\xE6\x96\x87 "
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
      "digits 0123456789 3.14159 1,000,000",
      "I'll go. DON'T stop! we've they're she'd I'M",
      "   leading and trailing   ",
      "tabs\t\there\t",
      "line1\nline2\r\nline3\rline4\n\n\n",
      "mixed\n  \n\t \n",
      "",
      " ",
      "\n",
      std::string(1000, 'a'),
      std::string(500, ' ') + "x",
  };
  for (const std::string& s : cases) EXPECT_EQ(round_trip(tok, s), s) << s;
}

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  // Invalid UTF-8 matches no regex class and NFC leaves it alone: bytes survive unchanged.
  const Tokenizer& tok = trained();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (const std::string& s : {std::string("\xFF\xFE abc \xC3"), std::string("a\xC3(b\xE2\x82"),
                               std::string("\xED\xA0\x80 surrogate"), all}) {
    EXPECT_EQ(round_trip(tok, s), s);
  }
}

TEST(Tokenizer, NfcComposesCombiningMarks) {
  const Tokenizer& tok = trained();
  const std::string decomposed = "cafe\xCC\x81";  // e + U+0301
  const std::string composed = "caf\xC3\xA9";     // U+00E9
  EXPECT_EQ(tok.encode(decomposed), tok.encode(composed));
  EXPECT_EQ(round_trip(tok, decomposed), composed);
  EXPECT_EQ(round_trip(tok, "e\xCC\x81"), "\xC3\xA9");
  // Already-NFC text with marks that do not compose stays as it is.
  const std::string devanagari = "\xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7";  // ka virama ssa
  EXPECT_EQ(round_trip(tok, devanagari), devanagari);
}

TEST(Tokenizer, DigitsAreOnePerToken) {
  const Tokenizer& tok = trained();
  const auto ids = tok.encode("20240607");
  ASSERT_EQ(ids.size(), 8u);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(tok.token_bytes(ids[i]), std::string(1, "20240607"[i]));
}

// ---- pre-tokenisation (expected splits from HF tokenizers with the Qwen3.5 regex) ----------

TEST(Tokenizer, PreTokenizesLikeHuggingFace) {
  const Tokenizer& tok = trained();
  using V = std::vector<std::string>;
  EXPECT_EQ(tok.pre_tokenize(
                "Hello world!!  \n\n  How's it going? I'LL pay $1,234.50 -- (ok)\t\tdone.\r\n"),
            (V{"Hello", " world", "!!",   "  \n\n", " ",  " How", "'s", " it",    " going", "?",
               " I",    "'LL",    " pay", " $",     "1",  ",",    "2",  "3",      "4",      ".",
               "5",     "0",      " --",  " (",     "ok", ")",    "\t", "\tdone", ".\r\n"}));
  EXPECT_EQ(tok.pre_tokenize("I'll DON'T we're they've she'd I'm it's"),
            (V{"I", "'ll", " DON", "'T", " we", "'re", " they", "'ve", " she", "'d", " I", "'m",
               " it", "'s"}));
  EXPECT_EQ(tok.pre_tokenize("don't'll"), (V{"don", "'t", "'ll"}));
  EXPECT_EQ(tok.pre_tokenize("x   y  \n z"), (V{"x", "  ", " y", "  \n", " z"}));
  EXPECT_EQ(tok.pre_tokenize("  12ab"), (V{" ", " ", "1", "2", "ab"}));
  // U+180E is not \s for Oniguruma (HF) although PCRE2's UCP \s includes it; U+0085 is \s.
  EXPECT_EQ(tok.pre_tokenize("a\xE1\xA0\x8E\xE1\xA0\x8E b\xC2\x85\xC2\x85"
                             "c  \xE1\xA0\x8E"),
            (V{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", " b", "\xC2\x85",
               "\xC2\x85"
               "c",
               " ", " \xE1\xA0\x8E"}));
  // Letters with combining marks stay one pre-token (\p{M} in the Qwen3.5 regex).
  EXPECT_EQ(tok.pre_tokenize("na\xC3\xAFve \xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7 ...\n\n\n"),
            (V{"na\xC3\xAFve", " \xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7", " ...\n\n\n"}));
}

TEST(Tokenizer, OnigurumaShorthandsAreRewritten) {
  EXPECT_EQ(
      text::onig_to_pcre2(R"(a\sb)"),
      R"(a[\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]b)");
  EXPECT_EQ(text::onig_to_pcre2(R"([^\S\p{L}])"), R"([^\S\x{180E}\p{L}])");
  EXPECT_EQ(text::onig_to_pcre2(R"(\\s\p{N})"), R"(\\s\p{N})");  // an escaped backslash, then 's'
  EXPECT_EQ(text::onig_to_pcre2(R"([]\w])"), R"([]\p{L}\p{M}\p{N}\p{Pc}])");
}

// ---- special tokens -------------------------------------------------------------------------

TEST(Tokenizer, SpecialTokensAreNeverSplit) {
  const Tokenizer& tok = trained();
  const int32_t start = tok.token_id("<|im_start|>");
  const int32_t end = tok.token_id("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_GE(end, 0);
  EXPECT_TRUE(tok.is_special(start));
  EXPECT_TRUE(tok.is_added(end));
  EXPECT_FALSE(tok.is_special(tok.encode("a")[0]));

  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), end);
  const std::vector<int32_t> middle(ids.begin() + 1, ids.end() - 1);
  EXPECT_EQ(middle, tok.encode("user\nhi"));
  for (int32_t id : middle) EXPECT_FALSE(tok.is_special(id));

  // Adjacent specials, and a special right after text with no separator.
  EXPECT_EQ(tok.encode("<|im_end|><|im_end|>"), (std::vector<int32_t>{end, end}));
  EXPECT_EQ(tok.encode("x<|im_start|>").back(), start);

  // parse_special = false: the same text is plain text.
  const std::string chat = "<|im_start|>user\nhi<|im_end|>";
  const auto plain = tok.encode(chat, false);
  for (int32_t id : plain) EXPECT_FALSE(tok.is_special(id));
  EXPECT_GT(plain.size(), ids.size());
  EXPECT_EQ(tok.decode(plain), chat);
  EXPECT_EQ(tok.decode(ids), chat);
  // A prefix of a special token is text.
  for (int32_t id : tok.encode("<|im_end")) EXPECT_FALSE(tok.is_special(id));
}

// ---- a hand-built tokenizer.json ------------------------------------------------------------

// Vocab: a b c d Ġ (" ") and merges, in both "a b" and ["a", "b"] forms.
std::string hand_json(const json& merges, const json& extra_added = json::array()) {
  json j = {
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", 9}, {"content", "<eos>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(kQwen35PreTokenizerRegex)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab",
         {{"a", 0},
          {"b", 1},
          {"c", 2},
          {"\xC4\xA0", 3},
          {"ab", 4},
          {"abc", 5},
          {"\xC4\xA0"
           "a",
           6},
          {"bc", 7},
          {"d", 8}}},
        {"merges", merges}}}};
  for (const auto& a : extra_added) j["added_tokens"].push_back(a);
  return j.dump();
}

TEST(Tokenizer, HandBuiltMergesGiveHandDerivedIds) {
  auto r = Tokenizer::from_json(
      hand_json(json::array({"a b", json::array({"ab", "c"}), "\xC4\xA0 a", "b c"})), "hand.json");
  ASSERT_TRUE(r.ok()) << r.error_message();
  const Tokenizer& tok = r.value();
  using V = std::vector<int32_t>;
  // "abc": pairs (a,b) rank 0, (b,c) rank 3 -> [ab, c]; (ab,c) rank 1 -> [abc].
  EXPECT_EQ(tok.encode("abc"), (V{5}));
  // " abc" is one pre-token: (Ġ,a) 2, (a,b) 0, (b,c) 3 -> Ġ ab c -> Ġ abc.
  EXPECT_EQ(tok.encode(" abc"), (V{3, 5}));
  // "bca": (b,c) 3 -> [bc, a].
  EXPECT_EQ(tok.encode("bca"), (V{7, 0}));
  // "aab": (a,a) none, (a,b) 0 -> [a, ab].
  EXPECT_EQ(tok.encode("aab"), (V{0, 4}));
  // " a": Ġ a -> [Ġa]; "ababc" -> [ab, abc] (leftmost first on equal ranks).
  EXPECT_EQ(tok.encode(" a"), (V{6}));
  EXPECT_EQ(tok.encode("ababc"), (V{4, 5}));
  // A byte with no symbol in the vocab is dropped, as HF does with no unk token.
  EXPECT_EQ(tok.encode("abe"), (V{4}));
  EXPECT_EQ(tok.encode("d<eos>"), (V{8, 9}));
  EXPECT_EQ(tok.vocab_size(), 10);
  EXPECT_EQ(tok.token_text(6),
            "\xC4\xA0"
            "a");
  EXPECT_EQ(tok.token_bytes(6), " a");
  EXPECT_EQ(tok.token_bytes(42), "");
  EXPECT_EQ(tok.token_id("abc"), 5);
  EXPECT_EQ(tok.token_id("zzz"), -1);
  ASSERT_EQ(tok.merges().size(), 4u);
  EXPECT_EQ(tok.merges()[2], (std::pair<std::string, std::string>{"\xC4\xA0", "a"}));

  // Rank order decides: with (b,c) first, "abc" -> [a, bc].
  auto r2 = Tokenizer::from_json(hand_json(json::array({"b c", "a b", "ab c"})), "hand2.json");
  ASSERT_TRUE(r2.ok()) << r2.error_message();
  EXPECT_EQ(r2->encode("abc"), (V{0, 7}));
}

TEST(Tokenizer, AddedTokenFlagsFollowHuggingFace) {
  // Expected ids checked against HF tokenizers with the same file.
  const json extra = json::array({
      {{"id", 10},
       {"content", "<mask>"},
       {"lstrip", true},
       {"special", true},
       {"normalized", false}},
      {{"id", 11},
       {"content", "cab"},
       {"single_word", true},
       {"special", false},
       {"normalized", false}},
      {{"id", 12}, {"content", "[R]"}, {"rstrip", true}, {"special", false}, {"normalized", false}},
  });
  auto r = Tokenizer::from_json(hand_json(json::array({"a b", "ab c", "\xC4\xA0 a", "b c"}), extra),
                                "flags.json");
  ASSERT_TRUE(r.ok()) << r.error_message();
  const Tokenizer& tok = r.value();
  using V = std::vector<int32_t>;
  EXPECT_EQ(tok.encode("a   <mask>"), (V{0, 10}));  // lstrip takes the spaces
  EXPECT_EQ(tok.encode("[R]   b"), (V{12, 1}));     // rstrip takes the spaces
  EXPECT_EQ(tok.encode("cab"), (V{11}));            // a whole word
  EXPECT_EQ(tok.encode("cabd"), (V{2, 4, 8}));      // inside a word: plain text
  EXPECT_EQ(tok.encode("a cab"), (V{0, 3, 11}));
}

TEST(Tokenizer, FromVocabMatchesFromJson) {
  const Tokenizer& tok = trained();
  BpeVocab v;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_added(id)) {
      v.added.push_back({id, tok.token_text(id), tok.is_special(id)});
      v.tokens.push_back(tok.token_text(id));  // GGUF lists added tokens in `tokens` too
    } else {
      v.tokens.push_back(tok.token_text(id));
    }
  }
  v.merges = tok.merges();
  auto r = Tokenizer::from_vocab(v, "gguf");
  ASSERT_TRUE(r.ok()) << r.error_message();
  const std::string s = "<|im_start|>user\nWhat's 12+30? caf\xC3\xA9 \xF0\x9F\x98\x80<|im_end|>";
  EXPECT_EQ(r->encode(s), tok.encode(s));
  EXPECT_EQ(r->vocab_size(), tok.vocab_size());
}

// ---- a prompt's wrapping: post_processor and tokenizer_config.json --------------------------

// hand_json with <s> (id 10) added and `post` as the post_processor.
json with_post(const json& post) {
  json j = json::parse(hand_json(
      json::array({"a b", "ab c"}),
      json::array({{{"id", 10}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})));
  j["post_processor"] = post;
  return j;
}

json template_processing(const json& single) {
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", json::array()},
          {"special_tokens",
           {{"<s>", {{"id", "<s>"}, {"ids", {10}}, {"tokens", {"<s>"}}}},
            {"<eos>", {{"id", "<eos>"}, {"ids", {9}}, {"tokens", {"<eos>"}}}}}}};
}

json special(const char* id) {
  return {{"SpecialToken", {{"id", id}, {"type_id", 0}}}};
}
const json kSeqA = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};

TEST(Tokenizer, PostProcessorWrapsPrompts) {
  using V = std::vector<int32_t>;
  // Nemotron-H's shape: a BOS before $A, in a Sequence after ByteLevel.
  const json bos_first = {
      {"type", "Sequence"},
      {"processors", json::array({{{"type", "ByteLevel"}, {"trim_offsets", false}},
                                  template_processing(json::array({special("<s>"), kSeqA}))})}};
  auto t = Tokenizer::from_json(with_post(bos_first).dump(), "bos.json");
  ASSERT_TRUE(t.ok()) << t.error_message();
  EXPECT_EQ(t->encode("abc"), (V{5}));  // encode never adds them
  EXPECT_EQ(t->encode_prompt("abc"), (V{10, 5}));
  EXPECT_EQ(t->encode_prompt(""), (V{10}));
  EXPECT_EQ(t->prefix_ids(), (V{10}));
  EXPECT_TRUE(t->suffix_ids().empty());

  auto both = Tokenizer::from_json(
      with_post(template_processing(json::array({special("<s>"), kSeqA, special("<eos>")}))).dump(),
      "both.json");
  ASSERT_TRUE(both.ok()) << both.error_message();
  EXPECT_EQ(both->encode_prompt("abc<eos>"), (V{10, 5, 9, 9}));

  // ByteLevel alone, or none: nothing around the text.
  for (const json& none : {json(nullptr), json{{"type", "ByteLevel"}}}) {
    auto plain = Tokenizer::from_json(with_post(none).dump(), "plain.json");
    ASSERT_TRUE(plain.ok()) << plain.error_message();
    EXPECT_EQ(plain->encode_prompt("abc"), (V{5}));
  }

  // Malformed: each an error naming the file and the post_processor.
  auto err = [](const json& post) {
    auto r = Tokenizer::from_json(with_post(post).dump(), "bad/tokenizer.json");
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_NE(r.error_message().find("bad/tokenizer.json"), std::string::npos);
    EXPECT_NE(r.error_message().find("post_processor"), std::string::npos) << r.error_message();
    return r.error_message();
  };
  EXPECT_NE(err(template_processing("<s> $A")).find("not a list"), std::string::npos);
  EXPECT_NE(err(template_processing(json::array({special("<s>")}))).find("no $A"),
            std::string::npos);
  EXPECT_NE(err(template_processing(json::array({kSeqA, kSeqA}))).find("twice"), std::string::npos);
  EXPECT_NE(err(template_processing(json::array({{{"Sequence", {{"id", "B"}}}}}))).find("$A"),
            std::string::npos);
  EXPECT_NE(err(template_processing(json::array({special("<bos>"), kSeqA}))).find("no ids"),
            std::string::npos);
  EXPECT_NE(err(template_processing(json::array({json{{"Text", "x"}}, kSeqA})))
                .find("neither a Sequence nor a SpecialToken"),
            std::string::npos);
  json far = template_processing(json::array({special("<s>"), kSeqA}));
  far["special_tokens"]["<s>"]["ids"] = {500};
  EXPECT_NE(err(far).find("not a token of the vocab"), std::string::npos);
  far["special_tokens"]["<s>"]["ids"] = {"ten"};
  EXPECT_NE(err(far).find("not a token id"), std::string::npos);
  far["special_tokens"] = json::array();
  EXPECT_NE(err(far).find("special_tokens is not an object"), std::string::npos);
  EXPECT_NE(err(json{{"type", "RobertaProcessing"}}).find("RobertaProcessing"), std::string::npos);
  const json tp = template_processing(json::array({special("<s>"), kSeqA}));
  EXPECT_NE(err(json{{"type", "Sequence"}, {"processors", {tp, tp}}}).find("second"),
            std::string::npos);
  EXPECT_NE(err(json{{"type", "Sequence"}, {"processors", "x"}}).find("not a list"),
            std::string::npos);
}

TEST(Tokenizer, TokenizerConfigDecidesBosAndEos) {
  using V = std::vector<int32_t>;
  const std::string dir = test::made_scratch_dir("tokenizer_config");
  const json bos_first = template_processing(json::array({special("<s>"), kSeqA}));
  auto load = [&](const json& post, const std::string& config) {
    test::write_file(dir + "/tokenizer.json", with_post(post).dump());
    std::filesystem::remove(dir + "/tokenizer_config.json");
    if (!config.empty()) test::write_file(dir + "/tokenizer_config.json", config);
    return Tokenizer::load_dir(dir);
  };
  auto prompt = [&](const json& post, const std::string& config) {
    auto t = load(post, config);
    EXPECT_TRUE(t.ok()) << t.error_message();
    return t.ok() ? t->encode_prompt("abc") : V{};
  };
  // No config, or one without the flags: the post_processor decides.
  EXPECT_EQ(prompt(bos_first, ""), (V{10, 5}));
  EXPECT_EQ(prompt(bos_first, R"({"bos_token": "<s>"})"), (V{10, 5}));
  // The flags win, as llama.cpp's converter reads them.
  EXPECT_EQ(prompt(bos_first, R"({"add_bos_token": false, "bos_token": "<s>"})"), (V{5}));
  EXPECT_EQ(prompt(nullptr, R"({"add_bos_token": true, "bos_token": {"content": "<s>"}})"),
            (V{10, 5}));
  EXPECT_EQ(prompt(nullptr, R"({"add_eos_token": true, "eos_token": "<eos>"})"), (V{5, 9}));
  EXPECT_EQ(prompt(nullptr, R"({"add_bos_token": null})"), (V{5}));
  // Malformed: errors naming tokenizer_config.json.
  for (const char* bad : {R"({"add_bos_token": true})", R"({"add_bos_token": "yes"})",
                          R"({"add_bos_token": true, "bos_token": "<unknown>"})",
                          R"({"add_eos_token": true, "eos_token": 3})", "[1]", "{"}) {
    auto t = load(nullptr, bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.error_message().find("tokenizer_config.json"), std::string::npos)
        << t.error_message();
  }
}

// ---- malformed files --------------------------------------------------------------------------

std::string error_of(const std::string& text) {
  auto r = Tokenizer::from_json(text, "bad/tokenizer.json");
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_NE(r.error_message().find("bad/tokenizer.json"), std::string::npos) << r.error_message();
  return r.error_message();
}

TEST(Tokenizer, MalformedFilesAreErrors) {
  const json good = json::parse(hand_json(json::array({"a b", "ab c"})));
  ASSERT_TRUE(Tokenizer::from_json(good.dump(), "x").ok());
  auto with = [&](const std::string& ptr, const json& v) {
    json j = good;
    j[json::json_pointer(ptr)] = v;
    return j.dump();
  };
  auto without = [&](const std::string& key) {
    json j = good;
    j.erase(key);
    return j.dump();
  };
  EXPECT_NE(error_of("{\"model\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(without("model")).find("\"model\" is missing"), std::string::npos);
  EXPECT_NE(error_of(with("/model/type", "WordPiece")).find("WordPiece"), std::string::npos);
  EXPECT_NE(error_of(with("/model/vocab", json::array())).find("model.vocab"), std::string::npos);
  EXPECT_NE(error_of(with("/model/vocab", json::object())).find("empty"), std::string::npos);
  EXPECT_NE(error_of(with("/model/vocab/a", "zero")).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of(with("/model/vocab/a", -1)).find("outside"), std::string::npos);
  EXPECT_NE(error_of(with("/model/vocab/a", int64_t{1} << 40)).find("outside"), std::string::npos);
  EXPECT_NE(error_of(with("/model/vocab/a", 1)).find("used by both"), std::string::npos);
  EXPECT_NE(error_of(with("/model/merges/0", "a zz")).find("not in model.vocab"),
            std::string::npos);
  EXPECT_NE(error_of(with("/model/merges/0", "b d")).find("merged token"), std::string::npos);
  EXPECT_NE(error_of(with("/model/merges/0", "ab")).find("one space"), std::string::npos);
  EXPECT_NE(error_of(with("/model/merges/0", 7)).find("model.merges[0]"), std::string::npos);
  EXPECT_NE(error_of(with("/model/merges", "a b")).find("not a list"), std::string::npos);
  EXPECT_NE(error_of(with("/model/byte_fallback", true)).find("byte_fallback"), std::string::npos);
  EXPECT_NE(
      error_of(with("/model/continuing_subword_prefix", "##")).find("continuing_subword_prefix"),
      std::string::npos);
  EXPECT_NE(error_of(with("/added_tokens/0/id", 1 << 30)).find("outside"), std::string::npos);
  EXPECT_NE(error_of(with("/added_tokens/0/content", 5)).find("content"), std::string::npos);
  EXPECT_NE(error_of(with("/pre_tokenizer/pretokenizers/0/pattern/Regex", "(unclosed"))
                .find("invalid regex"),
            std::string::npos);
  EXPECT_NE(error_of(with("/pre_tokenizer/pretokenizers/0/behavior", "Sideways")).find("behavior"),
            std::string::npos);
  EXPECT_NE(error_of(with("/pre_tokenizer", json{{"type", "Whitespace"}})).find("Whitespace"),
            std::string::npos);
  EXPECT_NE(error_of(with("/pre_tokenizer", nullptr)).find("ByteLevel"), std::string::npos);
  EXPECT_NE(error_of(with("/pre_tokenizer/pretokenizers/1/type", "Digits")).find("Digits"),
            std::string::npos);
  EXPECT_NE(error_of(with("/normalizer", json{{"type", "Lowercase"}})).find("Lowercase"),
            std::string::npos);
  EXPECT_NE(error_of(with("/decoder", json{{"type", "WordPiece"}})).find("decoder"),
            std::string::npos);

  auto missing = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error_message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);
}

// ---- streaming decode -------------------------------------------------------------------------

TEST(Tokenizer, StreamDecoderHoldsBackIncompleteUtf8) {
  const Tokenizer& tok = trained();  // ids 0..255 are the single bytes
  StreamDecoder d(tok);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xC3), "");  // first byte of U+00E9
  EXPECT_EQ(d.push(0xA9), "\xC3\xA9");
  // A 4-byte emoji split over four tokens.
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "\xF0\x9F\x98\x80");
  // Invalid bytes become U+FFFD at once; a cut-off sequence followed by ASCII too.
  EXPECT_EQ(d.push(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push('x'), "\xEF\xBF\xBDx");
  // A sequence still open at the end comes out of flush as U+FFFD.
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push(0x82), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");

  // Token by token over real text gives the text.
  const std::string s = "Grüße, \xE4\xB8\x96\xE7\x95\x8C! \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD done";
  StreamDecoder d2(tok);
  std::string out;
  for (int32_t id : tok.encode(s)) out += d2.push(id);
  out += d2.flush();
  EXPECT_EQ(out, s);
}

// ---- trainer ------------------------------------------------------------------------------------

TEST(BpeTrainer, IsDeterministic) {
  BpeTrainOptions opt;
  opt.n_merges = 300;
  const std::string a = train_bpe_tokenizer_json(builtin_training_text(), opt);
  const std::string b = train_bpe_tokenizer_json(builtin_training_text(), opt);
  EXPECT_EQ(a, b);
  opt.n_merges = 301;
  EXPECT_NE(train_bpe_tokenizer_json(builtin_training_text(), opt), a);
}

TEST(BpeTrainer, WritesHuggingFaceShape) {
  BpeTrainOptions opt;
  opt.n_merges = 500;
  const json j = json::parse(train_bpe_tokenizer_json(builtin_training_text(), opt));
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_TRUE(j["truncation"].is_null());
  EXPECT_TRUE(j["padding"].is_null());
  EXPECT_EQ(j["normalizer"]["type"], "NFC");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
            std::string(kQwen35PreTokenizerRegex));
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["behavior"], "Isolated");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  const json& m = j["model"];
  EXPECT_EQ(m["type"], "BPE");
  EXPECT_TRUE(m["dropout"].is_null());
  EXPECT_EQ(m["continuing_subword_prefix"], "");
  EXPECT_EQ(m["byte_fallback"], false);
  ASSERT_EQ(m["merges"].size(), 500u);
  EXPECT_TRUE(m["merges"][0].is_string());
  EXPECT_EQ(m["vocab"].size(), 256u + 500u);
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["added_tokens"][i]["id"], 756 + static_cast<int>(i));
    EXPECT_EQ(j["added_tokens"][i]["special"], true);
    EXPECT_EQ(j["added_tokens"][i]["normalized"], false);
  }

  auto tok = Tokenizer::from_json(j.dump(), "trained");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  EXPECT_EQ(tok->vocab_size(), 256 + 500 + 3);
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(tok->token_bytes(b), std::string(1, static_cast<char>(b)));
  EXPECT_EQ(tok->token_id("<|endoftext|>"), 756);
  EXPECT_EQ(tok->token_id("<|im_end|>"), 758);
}

TEST(BpeTrainer, RoundTripsHeldOutText) {
  const std::string_view all = builtin_training_text();
  const std::string_view train = all.substr(0, all.size() / 2);
  const std::string_view held_out = all.substr(all.size() / 2);
  BpeTrainOptions opt;
  opt.n_merges = 800;
  auto tok = Tokenizer::from_json(train_bpe_tokenizer_json(train, opt), "half");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  const auto ids = tok->encode(held_out);
  EXPECT_EQ(tok->decode(ids), held_out);
  EXPECT_LT(ids.size() * 5, held_out.size() * 2);  // it compresses English (> 2.5 bytes/token)
  const std::string other = "Completely different words: zebra, quartz, \xC3\xA9t\xC3\xA9, 42!";
  EXPECT_EQ(round_trip(tok.value(), other), other);
}

TEST(BpeTrainer, StopsWhenNoPairIsLeftAndSkipsSpecials) {
  BpeTrainOptions opt;
  opt.n_merges = 100;
  opt.special_tokens = {"<s>"};
  // Words "ab" x3 and "<s>" cut out: only one pair exists.
  const json j = json::parse(train_bpe_tokenizer_json("ab<s>ab<s>ab", opt));
  ASSERT_EQ(j["model"]["merges"].size(), 1u);
  EXPECT_EQ(j["model"]["merges"][0], "a b");
  EXPECT_EQ(j["model"]["vocab"]["ab"], 256);
  EXPECT_EQ(j["added_tokens"][0]["id"], 257);
}

TEST(BpeTrainer, BreaksTiesBySmallestPair) {
  BpeTrainOptions opt;
  opt.n_merges = 1;
  // The words "yz" and "ab" both occur twice (newlines are words of their own); (a, b) has
  // the smaller ids.
  const json j = json::parse(train_bpe_tokenizer_json("yz\nab\nyz\nab", opt));
  EXPECT_EQ(j["model"]["merges"][0], "a b");
}

TEST(BuiltinTrainingText, HasWhatTheTrainerNeeds) {
  const std::string_view t = builtin_training_text();
  EXPECT_GE(t.size(), 20000u);
  EXPECT_LE(t.size(), 45000u);
  EXPECT_EQ(t.data(), builtin_training_text().data());  // one stable buffer
  EXPECT_NE(t.find_first_of("0123456789"), std::string_view::npos);
  EXPECT_NE(t.find('\n'), std::string_view::npos);
  EXPECT_NE(t.find("'ll"), std::string_view::npos);
  EXPECT_NE(t.find('"'), std::string_view::npos);
  for (char c : t) EXPECT_LT(static_cast<unsigned char>(c), 0x80);
}

}  // namespace
}  // namespace rw
