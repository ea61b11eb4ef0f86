// Forced tool calls (grammar/tool_grammar.h): each format's grammar accepts the model's tool-call
// syntax with valid arguments and refuses the rest, and every random walk through its matcher
// is text that chat/tool_calls.cpp parses back into calls of declared functions whose arguments
// validate against their parameter schemas.
#include "rewind/grammar/tool_grammar.h"

#include <gtest/gtest.h>

#include "json_schema_util.h"
#include "rewind/chat/chat_template.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/grammar_ref.h"
#include "rewind/grammar/matcher.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {
namespace {

using ojson = nlohmann::ordered_json;

const ojson& tools() {
  static const ojson t = ojson::parse(R"([
    {"type": "function", "function": {"name": "lookup", "description": "a verse",
      "parameters": {"type": "object", "properties": {
        "book": {"type": "string"},
        "chapter": {"type": "integer", "minimum": 1, "maximum": 150},
        "verse": {"type": "integer", "minimum": 1}},
       "required": ["book", "chapter"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "mark", "parameters": {"type": "object",
      "properties": {"colour": {"type": "string", "enum": ["red", "blue"]},
                     "refs": {"type": "array", "items": {"$ref": "#/$defs/ref"}, "maxItems": 2}},
      "required": ["colour"],
      "$defs": {"ref": {"type": "object", "properties": {"b": {"type": "string", "maxLength": 8}},
                        "required": ["b"]}}}}},
    {"type": "function", "function": {"name": "ping"}}])");
  return t;
}

Grammar grammar(const ToolGrammarOptions& opt) {
  auto text = tool_call_gbnf(tools(), opt);
  EXPECT_TRUE(text.ok()) << text.error_message();
  if (!text.ok()) return Grammar{};
  auto g = parse_gbnf(*text);
  EXPECT_TRUE(g.ok()) << g.error_message() << "\n" << *text;
  return g.ok() ? std::move(g).value() : Grammar{};
}

bool accepts(const Grammar& g, const std::string& s) {
  return earley_recognise(g, s).complete;
}

TEST(ToolGrammar, JsonTagFormat) {
  const Grammar g = grammar({ToolCallFormat::JsonTag, "", true});
  const std::string call =
      "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"book\": \"John\", \"chapter\": 3}}\n"
      "</tool_call>";
  EXPECT_TRUE(accepts(g, call));
  EXPECT_TRUE(accepts(g, call + "\n" + call));
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_TRUE(accepts(g,
                      "<tool_call>\n{\"name\": \"mark\", \"arguments\": {\"colour\": \"red\", "
                      "\"refs\": [{\"b\": \"Ruth\"}]}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"book\": \"John\", "
                       "\"chapter\": 151}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"book\": \"John\"}}"
                       "\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "Sure! " + call));
  const Grammar one = grammar({ToolCallFormat::JsonTag, "lookup", false});
  EXPECT_TRUE(accepts(one, call));
  EXPECT_FALSE(accepts(one, call + "\n" + call));
  EXPECT_FALSE(accepts(one, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolGrammar, XmlTagFormat) {
  const Grammar g = grammar({ToolCallFormat::XmlTag, "", true});
  const std::string call =
      "<tool_call>\n<function=lookup>\n<parameter=book>\nSong of Songs\n</parameter>\n"
      "<parameter=chapter>\n2\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(accepts(g, call));
  EXPECT_TRUE(accepts(g, call + "\n" + call));
  EXPECT_TRUE(accepts(g,
                      "<tool_call>\n<function=mark>\n<parameter=colour>\nblue\n</parameter>\n"
                      "<parameter=refs>\n[{\"b\": \"Acts\"}]\n</parameter>\n</function>\n"
                      "</tool_call>"));
  EXPECT_TRUE(accepts(g, "<tool_call>\n<function=ping>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n<function=mark>\n<parameter=colour>\ngreen\n</parameter>\n"
                       "</function>\n</tool_call>"));
  // Parameters in declaration order, required ones present, values of their schema.
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n<function=lookup>\n<parameter=chapter>\n2\n</parameter>\n"
                       "<parameter=book>\nJob\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n<function=lookup>\n<parameter=book>\nJob\n</parameter>\n"
                       "<parameter=chapter>\ntwo\n</parameter>\n</function>\n</tool_call>"));
}

TEST(ToolGrammar, JsonListFormat) {
  const Grammar g = grammar({ToolCallFormat::JsonList, "", true});
  const std::string a = "{\"name\": \"ping\", \"arguments\": {}}";
  const std::string b =
      "{\"name\": \"lookup\", \"arguments\": {\"book\": \"Job\", \"chapter\": 1}}";
  EXPECT_TRUE(accepts(g, "<TOOLCALL>[" + a + "]</TOOLCALL>"));
  EXPECT_TRUE(accepts(g, "<TOOLCALL>[" + a + ", " + b + "]</TOOLCALL>"));
  EXPECT_FALSE(accepts(g, "<TOOLCALL>[]</TOOLCALL>"));
  EXPECT_FALSE(accepts(grammar({ToolCallFormat::JsonList, "", false}),
                       "<TOOLCALL>[" + a + ", " + b + "]</TOOLCALL>"));
}

// tool_choice "auto" with strict tools: free text without the opening tag, then optionally
// the calls; only strict functions' arguments are checked against their schemas.
TEST(ToolGrammar, LazyGrammarIsFreeTextUntilTheOpeningTag) {
  ojson t = tools();
  t[0]["function"]["strict"] = true;  // lookup: strict; mark and ping: any arguments
  EXPECT_TRUE(has_strict_tool(t));
  EXPECT_FALSE(has_strict_tool(tools()));
  for (ToolCallFormat f :
       {ToolCallFormat::JsonTag, ToolCallFormat::XmlTag, ToolCallFormat::JsonList}) {
    ToolGrammarOptions opt{f, "", true};
    opt.lazy = true;
    auto text = tool_call_gbnf(t, opt);
    ASSERT_TRUE(text.ok()) << text.error_message();
    auto parsed = parse_gbnf(*text);
    ASSERT_TRUE(parsed.ok()) << parsed.error_message() << "\n" << *text;
    const Grammar& g = parsed.value();
    const std::string open = tool_call_opening(f);
    // Free text of any kind, with near misses of the tag and UTF-8, ending anywhere.
    for (const std::string& free :
         {std::string(), std::string("Hello, world."), std::string("a <tool_cal> b <<tool"),
          std::string("<TOOLCAL <TOOL [x] \xC3\xA9 \xE4\xB8\xAD"), open.substr(0, 5),
          std::string("<") + open.substr(0, open.size() - 1)}) {
      EXPECT_TRUE(accepts(g, free)) << free;
    }
    // The whole tag starts the calls: then only well-formed calls follow.
    EXPECT_FALSE(accepts(g, "text " + open + " more text")) << open;
    EXPECT_FALSE(accepts(g, open));
    std::string good, bad, loose;
    if (f == ToolCallFormat::XmlTag) {
      good =
          "<tool_call>\n<function=lookup>\n<parameter=book>\nJob\n</parameter>\n"
          "<parameter=chapter>\n2\n</parameter>\n</function>\n</tool_call>";
      bad =
          "<tool_call>\n<function=lookup>\n<parameter=book>\nJob\n</parameter>\n"
          "<parameter=chapter>\ntwo\n</parameter>\n</function>\n</tool_call>";
      loose =
          "<tool_call>\n<function=mark>\n<parameter=shade>\ngreen\n</parameter>\n"
          "</function>\n</tool_call>";
    } else {
      const std::string a = "{\"name\": \"lookup\", \"arguments\": {\"book\": \"Job\", ";
      const std::string m = "{\"name\": \"mark\", \"arguments\": {\"shade\": [1, \"x\"]}}";
      const bool list = f == ToolCallFormat::JsonList;
      const auto wrap = [&](const std::string& c) {
        return list ? "<TOOLCALL>[" + c + "]</TOOLCALL>" : "<tool_call>\n" + c + "\n</tool_call>";
      };
      good = wrap(a + "\"chapter\": 2}}");
      bad = wrap(a + "\"chapter\": \"two\"}}");
      loose = wrap(m);
    }
    EXPECT_TRUE(accepts(g, good)) << good;
    EXPECT_TRUE(accepts(g, "Let me look.\n" + good));
    EXPECT_FALSE(accepts(g, "Let me look.\n" + bad)) << bad;  // strict: its schema holds
    EXPECT_TRUE(accepts(g, "Marking: " + loose)) << loose;    // not strict: any arguments
    EXPECT_FALSE(accepts(g, good + " and some text after"));
  }
}

TEST(ToolGrammar, Refusals) {
  auto none = tool_call_gbnf(ojson::array(), {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error_message().find("no tools"), std::string::npos);
  auto unknown = tool_call_gbnf(tools(), {ToolCallFormat::JsonTag, "nope", false});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error_message().find("no tool is named 'nope'"), std::string::npos);
  ojson bad = tools();
  bad[1]["function"]["parameters"]["properties"]["colour"]["contentEncoding"] = "base64";
  // A strict tool's refused keyword is an error naming the tool; a tool not marked strict is
  // relaxed (the keyword dropped), and the change is reported.
  ojson strict = bad;
  strict[1]["function"]["strict"] = true;
  for (ToolCallFormat f : {ToolCallFormat::JsonTag, ToolCallFormat::XmlTag}) {
    auto e = tool_call_gbnf(strict, {f, "", true});
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error_message().find("tools[1].function.parameters"), std::string::npos)
        << e.error_message();
    EXPECT_NE(e.error_message().find("unsupported keyword 'contentEncoding'"), std::string::npos)
        << e.error_message();
    std::vector<std::string> relaxed;
    ToolGrammarOptions o{f, "", true};
    o.relaxed = &relaxed;
    auto g = tool_call_gbnf(bad, o);
    ASSERT_TRUE(g.ok()) << g.error_message();
    EXPECT_EQ(relaxed,
              std::vector<std::string>{"tools[1].function.parameters: 'contentEncoding' at "
                                       "#/properties/colour"});
  }
}

// A tokenizer that marks the tool-call tags special (Qwen's, the built-in models'): the
// grammar's vocabulary keeps those two tokens as their text, so a lazy grammar opens its calls
// on the model's own tag token (left out, the tag could only be spelled from ordinary tokens,
// which such a model never writes); other special tokens stay out.
TEST(ToolGrammar, LazyGrammarOpensOnTheTagWhenItIsASpecialToken) {
  BpeTrainOptions bo;
  bo.n_merges = 64;
  bo.special_tokens = {"<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"};
  auto tok = Tokenizer::from_json(train_bpe_tokenizer_json(builtin_training_text(), bo), "test");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  const int32_t im_end = tok->token_id("<|im_end|>"), think = tok->token_id("<think>");
  const int32_t open = tok->token_id("<tool_call>"), close = tok->token_id("</tool_call>");
  ASSERT_TRUE(tok->is_special(open) && tok->is_special(close) && tok->is_special(think));
  const ToolCallFormat f = ToolCallFormat::XmlTag;
  auto kept = std::make_shared<const VocabTrie>(
      VocabTrie::from_tokenizer(*tok, {im_end}, {tool_call_opening(f), tool_call_closing(f)}));
  auto plain = std::make_shared<const VocabTrie>(VocabTrie::from_tokenizer(*tok, {im_end}));
  EXPECT_EQ(kept->bytes(open), "<tool_call>");
  EXPECT_EQ(kept->bytes(close), "</tool_call>");
  EXPECT_EQ(kept->bytes(think), "");
  EXPECT_EQ(plain->bytes(open), "");
  ojson t = tools();
  t[0]["function"]["strict"] = true;
  ToolGrammarOptions opt{f, "", true};
  opt.lazy = true;
  auto text = tool_call_gbnf(t, opt);
  ASSERT_TRUE(text.ok()) << text.error_message();
  auto g = parse_gbnf(*text);
  ASSERT_TRUE(g.ok()) << g.error_message();
  auto grammar = std::make_shared<const Grammar>(std::move(g).value());
  auto with_tags = GrammarAutomaton::create(grammar, kept).value();
  auto without = GrammarAutomaton::create(grammar, plain).value();
  TokenMask mask(static_cast<size_t>(kept->n_words()));
  GrammarMatcher m(with_tags), w(without);
  ASSERT_TRUE(w.allowed(mask.data()).ok());
  EXPECT_FALSE(mask_test(mask.data(), open));  // the old vocabulary: the tag is refused
  ASSERT_TRUE(m.allowed(mask.data()).ok());
  EXPECT_TRUE(mask_test(mask.data(), open));
  EXPECT_FALSE(mask_test(mask.data(), think));
  // A reply as the model writes it (the tags as their special tokens) goes through token by
  // token, ends the grammar and parses back into a call whose arguments follow the schema.
  const std::string reply =
      "Let me look.\n<tool_call>\n<function=lookup>\n<parameter=book>\nJob\n</parameter>\n"
      "<parameter=chapter>\n2\n</parameter>\n</function>\n</tool_call>";
  const std::vector<int32_t> ids = tok->encode(reply);
  ASSERT_NE(std::find(ids.begin(), ids.end(), open), ids.end());
  ASSERT_NE(std::find(ids.begin(), ids.end(), close), ids.end());
  for (int32_t id : ids) {
    ASSERT_TRUE(m.allowed(mask.data()).ok());
    ASSERT_TRUE(mask_test(mask.data(), id)) << tok->token_text(id);
    EXPECT_FALSE(mask_test(mask.data(), think));
    ASSERT_TRUE(m.accept(id).ok());
  }
  EXPECT_TRUE(m.is_accepting());
  ASSERT_TRUE(m.accept(im_end).ok());
  // After the call's tag, a strict argument that breaks its schema is refused.
  GrammarMatcher bad(with_tags);
  bool refused = false;
  for (int32_t id : tok->encode("<tool_call>\n<function=lookup>\n<parameter=book>\nJob\n"
                                "</parameter>\n<parameter=chapter>\ntwo\n</parameter>")) {
    if (!bad.accept(id).ok()) {
      refused = true;
      break;
    }
  }
  EXPECT_TRUE(refused);
  std::string content;
  const auto calls = parse_tool_calls(tok->decode(ids), &content, nlohmann::json::parse(t.dump()));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "lookup");
  EXPECT_EQ(nlohmann::json::parse(calls[0].arguments_json),
            nlohmann::json::parse(R"({"book": "Job", "chapter": 2})"));
}

// Whatever the matcher lets through parses back into valid calls.
TEST(ToolGrammar, RandomWalksParseIntoValidCalls) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  // No closing tags as tokens: a JSON string argument holding one would end its block early
  // when parsed back (tool_calls.cpp ends a block at the first closing tag of any format); the
  // grammar still spells them from bytes where they belong.
  for (const char* p :
       {"<tool_call>", "<function=", "<parameter=", "\n", "{\"", "\": ", "\", \"", "lookup", "mark",
        "ping", "name", "arguments", "12", "red", "blue", "[{\"b\": \"", "\"}]"})
    vocab.push_back(p);
  const int32_t eos = static_cast<int32_t>(vocab.size());
  auto trie = std::make_shared<VocabTrie>(vocab, std::vector<int32_t>{eos});
  const nlohmann::json plain_tools = nlohmann::json::parse(tools().dump());
  int calls = 0;
  for (ToolCallFormat f :
       {ToolCallFormat::JsonTag, ToolCallFormat::XmlTag, ToolCallFormat::JsonList}) {
    auto text = tool_call_gbnf(tools(), {f, "", true});
    ASSERT_TRUE(text.ok()) << text.error_message();
    auto g = parse_gbnf(*text);
    ASSERT_TRUE(g.ok()) << g.error_message();
    auto a =
        GrammarAutomaton::create(std::make_shared<Grammar>(std::move(g).value()), trie).value();
    std::mt19937 rng(static_cast<uint32_t>(f) + 5);
    for (int walk = 0; walk < 40; ++walk) {
      const std::string out = schema_test::random_walk(a, eos, rng);
      std::string content;
      const std::vector<ToolCall> got = parse_tool_calls(out, &content, plain_tools);
      ASSERT_FALSE(got.empty()) << out;
      EXPECT_EQ(content, "") << out;
      for (const ToolCall& c : got) {
        const ojson* params = nullptr;
        for (const auto& t : tools())
          if (t["function"]["name"] == c.name)
            params = t["function"].contains("parameters") ? &t["function"]["parameters"] : nullptr;
        ASSERT_TRUE(params || c.name == "ping") << c.name << "\n" << out;
        if (!params) continue;
        const nlohmann::json args = nlohmann::json::parse(c.arguments_json, nullptr, false);
        ASSERT_FALSE(args.is_discarded()) << c.arguments_json;
        std::string why;
        EXPECT_TRUE(schema_test::validate(args, *params, *params, why)) << why << "\n"
                                                                        << c.arguments_json << "\n"
                                                                        << out;
        ++calls;
      }
    }
  }
  EXPECT_GT(calls, 60);
}

}  // namespace
}  // namespace rw
