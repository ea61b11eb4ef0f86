// The OpenAI schema of the server (src/rewind/server): the request parsers on every malformed
// case (each must be an Error naming the field, never a crash or a silent default) and on the
// accepted forms; and the pure response helpers they pair with: tool-call splitting,
// usage/error/logprobs JSON, and the /metrics and /v1/cache renderings.
#include "rewind/server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "rewind/server/metrics.h"
#include "rewind/server/openai_response.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {
namespace {

using json = nlohmann::json;

Limits limits() {
  Limits l;
  l.ctx_size = 4096;
  l.vocab_size = 512;
  return l;
}

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

std::string chat_with(const std::string& extra) {
  return "{" + kMsgs + (extra.empty() ? "" : "," + extra) + "}";
}

// Expects a parse error whose message contains `needle`.
void expect_chat_error(const std::string& body, const std::string& needle) {
  auto r = parse_chat_request(body, limits());
  ASSERT_FALSE(r.ok()) << "accepted: " << body;
  EXPECT_NE(r.error_message().find(needle), std::string::npos)
      << "body: " << body << "\nmessage: " << r.error_message() << "\nwanted: " << needle;
}

void expect_completion_error(const std::string& body, const std::string& needle) {
  auto r = parse_completion_request(body, limits());
  ASSERT_FALSE(r.ok()) << "accepted: " << body;
  EXPECT_NE(r.error_message().find(needle), std::string::npos)
      << "body: " << body << "\nmessage: " << r.error_message() << "\nwanted: " << needle;
}

// ---- chat: accepted forms ---------------------------------------------------------------------

TEST(ChatRequest, MinimalDefaults) {
  auto r = parse_chat_request(chat_with(""), limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ParsedChatRequest& c = r.value();
  ASSERT_EQ(c.messages.size(), 1u);
  EXPECT_EQ(c.messages[0].role, "user");
  EXPECT_EQ(c.messages[0].content, "hi");
  EXPECT_FALSE(c.stream);
  EXPECT_FALSE(c.max_tokens.has_value());
  EXPECT_FALSE(c.sampling.temperature.has_value());
  EXPECT_FALSE(c.sampling.seed.has_value());
  EXPECT_TRUE(c.stop.empty());
  EXPECT_FALSE(c.logprobs);
  EXPECT_FALSE(c.parse_tools);
  EXPECT_EQ(c.enable_thinking, -1);
}

TEST(ChatRequest, AllFields) {
  const std::string body = R"({
    "model": "m", "stream": true, "stream_options": {"include_usage": true},
    "messages": [
      {"role": "developer", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}
    ],
    "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -1,
    "n": 1, "stop": ["a", "bc"], "logprobs": true, "top_logprobs": 3,
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object"}}}],
    "tool_choice": "auto", "parallel_tool_calls": true,
    "chat_template_kwargs": {"enable_thinking": false},
    "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "user": "u",
    "response_format": {"type": "text"}, "ignore_eos": true
  })";
  auto r = parse_chat_request(body, limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  const ParsedChatRequest& c = r.value();
  EXPECT_EQ(c.model, "m");
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
  ASSERT_EQ(c.messages.size(), 4u);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[1].content, "a\nb");  // parts joined by newlines
  EXPECT_EQ(c.messages[2].content, "");
  EXPECT_EQ(c.messages[2].reasoning_content, "think");
  ASSERT_EQ(c.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[2].tool_calls[0].id, "c1");
  EXPECT_EQ(c.messages[2].tool_calls[0].name, "f");
  EXPECT_EQ(json::parse(c.messages[2].tool_calls[0].arguments_json), json({{"x", 1}}));
  EXPECT_EQ(c.messages[3].tool_call_id, "c1");
  EXPECT_EQ(*c.max_tokens, 7);
  EXPECT_DOUBLE_EQ(*c.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(*c.sampling.top_p, 0.9);
  EXPECT_EQ(*c.sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(*c.sampling.min_p, 0.05);
  EXPECT_EQ(*c.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(c.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(c.logprobs);
  EXPECT_EQ(c.top_logprobs, 3);
  EXPECT_TRUE(c.parse_tools);
  ASSERT_TRUE(c.tools.is_array());
  EXPECT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.enable_thinking, 0);
  EXPECT_TRUE(c.ignore_eos);
}

// Penalties, logit_bias and n are parsed as sent; unknown top-level fields are listed in the
// client's order (and only top-level ones: nested unknown keys are the fields' own business).
TEST(ChatRequest, SamplingAdjustmentsChoicesAndIgnoredFields) {
  auto r = parse_chat_request(
      chat_with(R"("n":3,"presence_penalty":-0.5,"frequency_penalty":2,"repetition_penalty":1.1,)"
                R"("repeat_last_n":-1,"logit_bias":{"5":100,"511":-100,"0":0.25},)"
                R"("user":"u","zeta":{"a":1},"store":false)"),
      limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->n, 3);
  EXPECT_DOUBLE_EQ(*r->sampling.presence_penalty, -0.5);
  EXPECT_DOUBLE_EQ(*r->sampling.frequency_penalty, 2.0);
  EXPECT_DOUBLE_EQ(*r->sampling.repetition_penalty, 1.1);
  EXPECT_EQ(*r->sampling.repeat_last_n, -1);
  EXPECT_EQ(r->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, 100.0f}, {511, -100.0f}, {0, 0.25f}}));
  EXPECT_EQ(r->ignored_fields, (std::vector<std::string>{"user", "zeta", "store"}));
  auto plain = parse_chat_request(chat_with(R"("temperature":1)"), limits());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->ignored_fields.empty());
  EXPECT_EQ(plain->n, 1);
  EXPECT_FALSE(plain->sampling.presence_penalty.has_value());
  auto c =
      parse_completion_request(R"({"prompt":"x","n":2,"suffix":"","messages":[],"q":1})", limits());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->n, 2);
  // `messages` is not a completions field.
  EXPECT_EQ(c->ignored_fields, (std::vector<std::string>{"messages", "q"}));
}

// llama.cpp's /tokenize and /detokenize bodies: accepted forms and every malformed one.
TEST(TokenizeRequest, ParsesAndRefusesMalformed) {
  auto t = parse_tokenize_request(
      R"({"content":"hi <x>","add_special":true,"parse_special":false,"with_pieces":true,"x":1})",
      limits());
  ASSERT_TRUE(t.ok()) << t.error_message();
  EXPECT_EQ(t->content, "hi <x>");
  EXPECT_TRUE(t->add_special);
  EXPECT_FALSE(t->parse_special);
  EXPECT_TRUE(t->with_pieces);
  EXPECT_EQ(t->ignored_fields, std::vector<std::string>{"x"});
  auto d = parse_tokenize_request(R"({"content":""})", limits());
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->with_pieces);
  EXPECT_TRUE(d->parse_special);
  auto terr = [](const std::string& body, const std::string& needle) {
    auto r = parse_tokenize_request(body, limits());
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.error_message().find(needle), std::string::npos) << r.error_message();
  };
  terr("", "empty");
  terr("[]", "must be a JSON object");
  terr("{", "not valid JSON");
  terr("{}", "'content' is required");
  terr(R"({"content":null})", "'content' is required");
  terr(R"({"content":5})", "'content' must be a string");
  terr(R"({"content":["a"]})", "'content' must be a string");
  terr(R"({"content":"a","add_special":"yes"})", "'add_special' must be a boolean");
  terr(R"({"content":"a","with_pieces":1})", "'with_pieces' must be a boolean");
  terr(R"({"content":"a","parse_special":[]})", "'parse_special' must be a boolean");

  auto k = parse_detokenize_request(R"({"tokens":[1,2,511],"extra":null})", limits());
  ASSERT_TRUE(k.ok()) << k.error_message();
  EXPECT_EQ(k->tokens, (std::vector<int32_t>{1, 2, 511}));
  EXPECT_EQ(k->ignored_fields, std::vector<std::string>{"extra"});
  auto derr = [](const std::string& body, const std::string& needle) {
    auto r = parse_detokenize_request(body, limits());
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.error_message().find(needle), std::string::npos) << r.error_message();
  };
  derr("", "empty");
  derr("5", "must be a JSON object");
  derr("{}", "'tokens' is required");
  derr(R"({"tokens":"1 2"})", "'tokens' must be an array");
  derr(R"({"tokens":[1,"2"]})", "'tokens[1]' must be an integer");
  derr(R"({"tokens":[1,512]})", "'tokens[1]' must be in [0, 511]");
  derr(R"({"tokens":[-1]})", "'tokens[0]' must be in");
  derr(R"({"tokens":[1.5]})", "'tokens[0]' must be an integer");
  EXPECT_TRUE(parse_detokenize_request(R"({"tokens":[]})", limits()).ok());
  std::string many = R"({"tokens":[1)";
  for (int i = 0; i < 4096; ++i) many += ",100";
  derr(many + "]}", "at most 4096 (the context size)");
}

TEST(ChatRequest, NullsAreAbsent) {
  auto r = parse_chat_request(
      chat_with(R"("max_tokens":null,"temperature":null,"stop":null,"tools":null,"seed":null,)"
                R"("stream":null,"logprobs":null,"top_logprobs":null,"n":null)"),
      limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_FALSE(r->sampling.temperature.has_value());
  EXPECT_TRUE(r->stop.empty());
  EXPECT_TRUE(r->tools.is_null());
}

TEST(ChatRequest, StopAsString) {
  auto r = parse_chat_request(chat_with(R"("stop":"END")"), limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
}

TEST(ChatRequest, MaxCompletionTokens) {
  auto r = parse_chat_request(chat_with(R"("max_completion_tokens":9)"), limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(*r->max_tokens, 9);
  auto same =
      parse_chat_request(chat_with(R"("max_tokens":9,"max_completion_tokens":9)"), limits());
  EXPECT_TRUE(same.ok()) << same.error_message();
}

// llama.cpp's n_predict: a third spelling of max_tokens, -1 and -2 meaning unset.
TEST(ChatRequest, NPredictIsMaxTokens) {
  auto r = parse_chat_request(chat_with(R"("n_predict":7)"), limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(*r->max_tokens, 7);
  EXPECT_TRUE(r->ignored_fields.empty());
  auto unset = parse_chat_request(chat_with(R"("n_predict":-1)"), limits());
  ASSERT_TRUE(unset.ok()) << unset.error_message();
  EXPECT_FALSE(unset->max_tokens.has_value());
  auto both = parse_chat_request(chat_with(R"("n_predict":-1,"max_tokens":5)"), limits());
  ASSERT_TRUE(both.ok()) << both.error_message();
  EXPECT_EQ(*both->max_tokens, 5);
  auto c = parse_completion_request(R"({"prompt":"x","n_predict":3})", limits());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(*c->max_tokens, 3);
  expect_chat_error(chat_with(R"("n_predict":0)"), "(or -1: the server's default)");
  auto to_end = parse_chat_request(chat_with(R"("n_predict":-2)"), limits());
  ASSERT_TRUE(to_end.ok()) << to_end.error_message();
  EXPECT_FALSE(to_end->max_tokens.has_value());
  expect_chat_error(chat_with(R"("n_predict":-3)"), "'n_predict' must be in [1, 4096]");
  expect_chat_error(chat_with(R"("n_predict":5000)"), "'n_predict' must be in [1, 4096]");
  expect_chat_error(chat_with(R"("n_predict":"5")"), "'n_predict' must be an integer");
  expect_chat_error(chat_with(R"("n_predict":4,"max_tokens":5)"), "disagree");
}

// llama-server's reasoning_format: none keeps a <think> block in the content.
TEST(ChatRequest, ReasoningFormat) {
  auto absent = parse_chat_request(chat_with(""), limits());
  ASSERT_TRUE(absent.ok()) << absent.error_message();
  EXPECT_EQ(absent->split_reasoning, -1);
  for (const auto& [f, want] :
       std::vector<std::pair<std::string, int>>{{"none", 0}, {"deepseek", 1}, {"auto", 1}}) {
    auto r = parse_chat_request(chat_with(R"("reasoning_format":")" + f + R"(")"), limits());
    ASSERT_TRUE(r.ok()) << r.error_message();
    EXPECT_EQ(r->split_reasoning, want) << f;
    EXPECT_TRUE(r->ignored_fields.empty()) << f;
  }
  expect_chat_error(chat_with(R"("reasoning_format":"deepseek-legacy")"),
                    "'reasoning_format' must be none, deepseek or auto");
  expect_chat_error(chat_with(R"("reasoning_format":1)"), "'reasoning_format' must be a string");
}

// With a server cap (serve -n) a max_tokens past the context parses (the server caps it).
TEST(ChatRequest, MaxTokensPastTheContextWithACap) {
  expect_chat_error(chat_with(R"("max_tokens":5000)"), "'max_tokens' must be in [1, 4096]");
  Limits l = limits();
  l.max_tokens = std::numeric_limits<int32_t>::max();
  auto r = parse_chat_request(chat_with(R"("max_tokens":65536)"), l);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(*r->max_tokens, 65536);
}

// n is capped by the server's --parallel as well as by 8.
TEST(ChatRequest, ChoicesCappedByLimits) {
  Limits l = limits();
  l.max_choices = 4;
  auto ok = parse_chat_request(chat_with(R"("n":4)"), l);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  auto r = parse_chat_request(chat_with(R"("n":5)"), l);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("'n' must be in [1, 4] (got 5): the server runs 4 sequences at "
                                   "once (--parallel)"),
            std::string::npos)
      << r.error_message();
}

TEST(ChatRequest, TopKMinusOneIsOff) {
  auto r = parse_chat_request(chat_with(R"("top_k":-1)"), limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(*r->sampling.top_k, 0);
}

TEST(ChatRequest, ToolsKeepTheClientsKeyOrder) {
  auto r = parse_chat_request(
      chat_with(
          R"("tools":[{"type":"function","function":{"name":"f","parameters":{"zeta":1,"alpha":2}}}])"),
      limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  const std::string dumped = r->tools.dump();
  EXPECT_LT(dumped.find("zeta"), dumped.find("alpha")) << dumped;
  EXPECT_LT(dumped.find("\"type\""), dumped.find("\"function\"")) << dumped;
}

TEST(ChatRequest, ToolChoiceNoneKeepsToolsUnparsed) {
  auto r = parse_chat_request(
      chat_with(R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none")"),
      limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_FALSE(r->parse_tools);
}

TEST(ChatRequest, LargeSeedAndExtremes) {
  auto r = parse_chat_request(
      chat_with(
          R"("seed":18446744073709551615,"temperature":2,"top_p":1,"min_p":0,"max_tokens":4096)"),
      limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(*r->sampling.seed, ~uint64_t{0});
}

// ---- chat: malformed --------------------------------------------------------------------------

TEST(ChatRequest, MalformedBodies) {
  expect_chat_error("", "empty");
  expect_chat_error("{", "not valid JSON");
  expect_chat_error("{\"messages\": [}", "not valid JSON");
  expect_chat_error("[1,2]", "must be a JSON object");
  expect_chat_error("\"hi\"", "must be a JSON object");
  expect_chat_error("null", "must be a JSON object");
  expect_chat_error("{} trailing", "not valid JSON");
  expect_chat_error(std::string(100, '[') + std::string(100, ']'), "nested deeper");
  // A body of empty objects or of one-digit numbers parses into many times its size: refused
  // before parsing (openai_request.h, kJsonTreeFactor).
  {
    std::string objs = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":[";
    for (int i = 0; i < 20000; ++i) objs += i ? ",{}" : "{}";
    expect_chat_error(objs + "]}", "too many values for its size");
    std::string nums = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":[";
    for (int i = 0; i < 20000; ++i) nums += i ? ",1" : "1";
    expect_chat_error(nums + "]}", "too many values for its size");
  }
  // Invalid UTF-8 inside a string.
  expect_chat_error("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",
                    "not valid JSON");
}

// The size guard leaves ordinary large requests alone: many short messages, and a long prompt
// of token ids (completions) with five-digit ids.
TEST(ChatRequest, SizeGuardAcceptsOrdinaryLargeBodies) {
  json msgs = json::array();
  for (int i = 0; i < 5000; ++i)
    msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "ok"}});
  const std::string body = json{{"messages", msgs}}.dump();
  Limits lim;
  lim.ctx_size = 1 << 20;
  auto r = parse_chat_request(body, lim);
  EXPECT_TRUE(r.ok()) << r.error_message();
  json ids = json::array();
  for (int i = 0; i < 20000; ++i) ids.push_back(10000 + (i * 7919) % 90000);
  lim.vocab_size = 100000;
  auto c = parse_completion_request(json{{"prompt", ids}, {"max_tokens", 1}}.dump(), lim);
  EXPECT_TRUE(c.ok()) << c.error_message();
}

TEST(ChatRequest, MessagesMalformed) {
  expect_chat_error("{}", "'messages' is required");
  expect_chat_error(R"({"messages":null})", "'messages' is required");
  expect_chat_error(R"({"messages":"hi"})", "'messages' must be an array");
  expect_chat_error(R"({"messages":{}})", "'messages' must be an array");
  expect_chat_error(R"({"messages":[]})", "must not be empty");
  expect_chat_error(R"({"messages":[1]})", "'messages[0]' must be an object");
  expect_chat_error(R"({"messages":[{"content":"x"}]})", "'messages[0].role' is required");
  expect_chat_error(R"({"messages":[{"role":7,"content":"x"}]})",
                    "'messages[0].role' must be a string");
  expect_chat_error(R"({"messages":[{"role":"robot","content":"x"}]})",
                    "must be system, developer");
  expect_chat_error(R"({"messages":[{"role":"user"}]})", "'messages[0].content' is required");
  expect_chat_error(R"({"messages":[{"role":"user","content":null}]})",
                    "'messages[0].content' is required");
  expect_chat_error(R"({"messages":[{"role":"user","content":5}]})",
                    "string or an array of content parts");
  expect_chat_error(R"({"messages":[{"role":"user","content":[5]}]})",
                    "'messages[0].content[0]' must be a content part");
  expect_chat_error(R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})",
                    "'messages[0].content[0].type' is required");
  expect_chat_error(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})",
                    "'messages[0].content[0].text' is required");
  expect_chat_error(R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
                    "must be a string");
  expect_chat_error(R"({"messages":[{"role":"user","name":3,"content":"x"}]})",
                    "'messages[0].name'");
  expect_chat_error(R"({"messages":[{"role":"user","content":"x"},{"role":"tool","content":"r"}]})",
                    "'messages[1].tool_call_id' is required");
}

TEST(ChatRequest, NonTextContentPartsAreRefused) {
  for (const char* type : {"image_url", "input_audio", "video_url", "file", "image"}) {
    const std::string body =
        std::string(
            R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":")") +
        type + R"(","x":{}}]}]})";
    expect_chat_error(body, std::string("content part type '") + type + "' is not supported");
    expect_chat_error(body, "text-only");
  }
  expect_chat_error(R"({"messages":[{"role":"user","content":"x","audio":{"id":"a"}}]})",
                    "not supported");
  expect_chat_error(chat_with(R"("modalities":["text","audio"])"), "modalities");
  expect_chat_error(chat_with(R"("audio":{"voice":"x"})"), "'audio' is not supported");
}

TEST(ChatRequest, ToolCallsInMessagesMalformed) {
  expect_chat_error(R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})",
                    "only allowed for role 'assistant'");
  expect_chat_error(R"({"messages":[{"role":"assistant","content":"x","tool_calls":{}}]})",
                    "'messages[0].tool_calls' must be an array");
  expect_chat_error(R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function"}]}]})",
                    "'messages[0].tool_calls[0].function' is required");
  expect_chat_error(
      R"({"messages":[{"role":"assistant","tool_calls":[{"type":"x","function":{"name":"f"}}]}]})",
      "must be \"function\"");
  expect_chat_error(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})",
                    "function.name' is required");
  expect_chat_error(
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]})",
      "JSON object encoded as a string");
  expect_chat_error(
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":5}}]}]})",
      "arguments' must be a string");
}

TEST(ChatRequest, FieldTypesAndRanges) {
  expect_chat_error(chat_with(R"("model":5)"), "'model' must be a string");
  expect_chat_error(chat_with(R"("stream":"yes")"), "'stream' must be a boolean");
  expect_chat_error(chat_with(R"("stream_options":{"include_usage":true})"),
                    "only allowed when 'stream' is true");
  expect_chat_error(chat_with(R"("stream":true,"stream_options":[])"),
                    "'stream_options' must be an object");
  expect_chat_error(chat_with(R"("stream":true,"stream_options":{"include_usage":1})"),
                    "include_usage");
  expect_chat_error(chat_with(R"("max_tokens":"5")"), "'max_tokens' must be an integer");
  expect_chat_error(chat_with(R"("max_tokens":5.5)"),
                    "'max_tokens' must be an integer (got number 5.5)");
  expect_chat_error(chat_with(R"("max_tokens":0)"), "'max_tokens' must be in [1, 4096]");
  expect_chat_error(chat_with(R"("max_tokens":-3)"), "'max_tokens' must be in");
  expect_chat_error(chat_with(R"("max_tokens":4097)"), "'max_tokens' must be in");
  expect_chat_error(chat_with(R"("max_tokens":99999999999999999999)"), "'max_tokens'");
  expect_chat_error(chat_with(R"("max_tokens":5,"max_completion_tokens":6)"), "disagree");
  expect_chat_error(chat_with(R"("max_completion_tokens":true)"),
                    "'max_completion_tokens' must be an integer");
  expect_chat_error(chat_with(R"("temperature":"hot")"), "'temperature' must be a number");
  expect_chat_error(chat_with(R"("temperature":-0.1)"), "'temperature' must be in");
  expect_chat_error(chat_with(R"("temperature":2.5)"), "'temperature' must be in");
  expect_chat_error(chat_with(R"("top_p":-0.1)"), "'top_p' must be in [0");
  {  // 0, as OpenAI takes it: the most likely token only (the sampler keeps at least one)
    auto r = parse_chat_request(chat_with(R"("top_p":0)"), limits());
    ASSERT_TRUE(r.ok()) << r.error_message();
    EXPECT_EQ(r->sampling.top_p, 0.0);
  }
  expect_chat_error(chat_with(R"("top_p":1.01)"), "'top_p' must be in");
  expect_chat_error(chat_with(R"("top_k":-2)"), "'top_k' must be in");
  expect_chat_error(chat_with(R"("top_k":1.5)"), "'top_k' must be an integer");
  expect_chat_error(chat_with(R"("min_p":1.5)"), "'min_p' must be in");
  expect_chat_error(chat_with(R"("seed":"1")"), "'seed' must be an integer");
  expect_chat_error(chat_with(R"("seed":1.5)"), "'seed' must be an integer");
  expect_chat_error(chat_with(R"("n":9)"), "'n' must be in [1, 8]");
  expect_chat_error(chat_with(R"("n":0)"), "'n' must be in");
  expect_chat_error(chat_with(R"("n":"1")"), "'n' must be an integer");
  expect_chat_error(chat_with(R"("best_of":3)"), "'best_of'");
  expect_chat_error(chat_with(R"("presence_penalty":2.5)"), "'presence_penalty' must be in");
  expect_chat_error(chat_with(R"("frequency_penalty":-2.01)"), "'frequency_penalty' must be in");
  expect_chat_error(chat_with(R"("frequency_penalty":"x")"), "must be a number");
  expect_chat_error(chat_with(R"("repetition_penalty":0)"), "'repetition_penalty' must be in (0");
  expect_chat_error(chat_with(R"("repetition_penalty":11)"), "'repetition_penalty' must be in");
  expect_chat_error(chat_with(R"("repeat_last_n":-2)"), "'repeat_last_n' must be in [-1");
  expect_chat_error(chat_with(R"("repeat_last_n":1.5)"), "'repeat_last_n' must be an integer");
  // An integer written as a float (3.0, 1e2) is that integer, as in pydantic's and llama.cpp's
  // parsers; a fraction is not.
  auto whole = parse_chat_request(
      chat_with(R"("max_tokens":3.0,"top_logprobs":2e0,"logprobs":true)"), limits());
  ASSERT_TRUE(whole.ok()) << whole.error_message();
  EXPECT_EQ(whole->max_tokens, 3);
  EXPECT_EQ(whole->top_logprobs, 2);
  expect_chat_error(chat_with(R"("max_tokens":3.5)"), "'max_tokens' must be an integer");
  expect_chat_error(chat_with(R"("max_tokens":1e30)"), "'max_tokens' must be an integer");
  expect_chat_error(chat_with(R"("max_tokens":-0.0)"), "'max_tokens' must be in [1,");
  expect_chat_error(chat_with(R"("logit_bias":[1])"), "'logit_bias' must be an object");
  expect_chat_error(chat_with(R"("logit_bias":"5")"), "'logit_bias' must be an object");
  expect_chat_error(chat_with(R"("logit_bias":{"512":1})"), "token id 512 is out of range");
  expect_chat_error(chat_with(R"("logit_bias":{"99999999999":1})"), "must be token ids");
  expect_chat_error(chat_with(R"("logit_bias":{"-1":1})"), "must be token ids");
  expect_chat_error(chat_with(R"("logit_bias":{"a":1})"), "must be token ids");
  expect_chat_error(chat_with(R"("logit_bias":{"":1})"), "must be token ids");
  expect_chat_error(chat_with(R"("logit_bias":{" 5":1})"), "must be token ids");
  expect_chat_error(chat_with(R"("logit_bias":{"5":101})"), "'logit_bias[\"5\"]' must be in");
  expect_chat_error(chat_with(R"("logit_bias":{"5":-100.5})"), "must be in");
  expect_chat_error(chat_with(R"("logit_bias":{"5":"1"})"), "must be a number");
  expect_chat_error(chat_with(R"("logit_bias":{"5":null})"), "must be a number");
  expect_chat_error(chat_with(R"("logit_bias":{"5":1,"05":2})"), "token id 5 is given twice");
  expect_chat_error(chat_with(R"("ignore_eos":1)"), "'ignore_eos' must be a boolean");
}

TEST(ChatRequest, StopMalformed) {
  expect_chat_error(chat_with(R"("stop":5)"), "'stop' must be a string or an array of strings");
  expect_chat_error(chat_with(R"("stop":{"a":1})"), "'stop' must be a string or an array");
  expect_chat_error(chat_with(R"("stop":["a",1])"), "'stop[1]' must be a string");
  expect_chat_error(chat_with(R"("stop":["a","b","c","d","e"])"), "at most 4");
  expect_chat_error(chat_with(R"("stop":"")"), "must not be empty");
  expect_chat_error(chat_with(R"("stop":["x",""])"), "must not be empty");
  expect_chat_error(chat_with("\"stop\":\"" + std::string(2000, 'x') + "\""),
                    "longer than 1024 bytes");
}

TEST(ChatRequest, LogprobsMalformed) {
  expect_chat_error(chat_with(R"("logprobs":1)"), "'logprobs' must be a boolean");
  expect_chat_error(chat_with(R"("logprobs":true,"top_logprobs":21)"),
                    "'top_logprobs' must be in [0, 20]");
  expect_chat_error(chat_with(R"("logprobs":true,"top_logprobs":-1)"), "'top_logprobs' must be in");
  expect_chat_error(chat_with(R"("top_logprobs":2)"), "requires 'logprobs': true");
  expect_chat_error(chat_with(R"("logprobs":true,"top_logprobs":"2")"), "must be an integer");
}

TEST(ChatRequest, ToolsMalformed) {
  expect_chat_error(chat_with(R"("tools":{})"), "'tools' must be an array");
  expect_chat_error(chat_with(R"("tools":[1])"), "'tools[0]' must be an object");
  expect_chat_error(chat_with(R"("tools":[{"function":{"name":"f"}}])"),
                    "'tools[0].type' is required");
  expect_chat_error(chat_with(R"("tools":[{"type":"retrieval","function":{"name":"f"}}])"),
                    "must be \"function\"");
  expect_chat_error(chat_with(R"("tools":[{"type":"function"}])"),
                    "'tools[0].function' is required");
  expect_chat_error(chat_with(R"("tools":[{"type":"function","function":"f"}])"),
                    "must be an object");
  expect_chat_error(chat_with(R"("tools":[{"type":"function","function":{}}])"),
                    "function.name' is required");
  expect_chat_error(chat_with(R"("tools":[{"type":"function","function":{"name":""}}])"),
                    "must not be empty");
  expect_chat_error(
      chat_with(R"("tools":[{"type":"function","function":{"name":"f","parameters":[]}}])"),
      "parameters' must be an object");
  expect_chat_error(
      chat_with(R"("tools":[{"type":"function","function":{"name":"f","description":1}}])"),
      "description' must be a string");
  expect_chat_error(
      chat_with(R"("tools":[{"type":"function","function":{"name":"f","strict":"yes"}}])"),
      "'tools[0].function.strict' must be a boolean");
  expect_chat_error(chat_with(R"("tool_choice":"required")"), "no 'tools' are given");
  expect_chat_error(chat_with(R"("tool_choice":{"type":"function","function":{"name":"f"}})"),
                    "names function 'f', which is not among 'tools'");
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f"}}],)";
  expect_chat_error(
      chat_with(tools + R"("tool_choice":{"type":"function","function":{"name":"g"}})"),
      "names function 'g', which is not among 'tools'");
  expect_chat_error(chat_with(tools + R"("tool_choice":{"type":"fn","function":{"name":"f"}})"),
                    "'tool_choice.type' must be \"function\"");
  expect_chat_error(chat_with(tools + R"("tool_choice":{"type":"function"})"),
                    "'tool_choice.function' is required");
  expect_chat_error(chat_with(tools + R"("tool_choice":{"type":"function","function":{}})"),
                    "'tool_choice.function.name' is required");
  expect_chat_error(chat_with(R"("tool_choice":"sometimes")"), "must be \"auto\", \"none\"");
  expect_chat_error(chat_with(R"("tool_choice":3)"), "'tool_choice' must be a string or an object");
  expect_chat_error(
      chat_with(tools + R"("tool_choice":"required","response_format":{"type":"json_object"})"),
      "cannot be combined with 'response_format'");
  auto req = parse_chat_request(chat_with(tools + R"("tool_choice":"required")"), limits());
  ASSERT_TRUE(req.ok()) << req.error_message();
  EXPECT_TRUE(req->tool_required && req->parse_tools && req->parallel_tool_calls);
  EXPECT_TRUE(req->tool_choice_name.empty());
  auto named = parse_chat_request(
      chat_with(tools + R"("tool_choice":{"type":"function","function":{"name":"f"}},)"
                        R"("parallel_tool_calls":false)"),
      limits());
  ASSERT_TRUE(named.ok()) << named.error_message();
  EXPECT_TRUE(named->tool_required && !named->parallel_tool_calls);
  EXPECT_EQ(named->tool_choice_name, "f");
  expect_chat_error(chat_with(R"("parallel_tool_calls":"yes")"), "must be a boolean");
}

TEST(ChatRequest, ResponseFormatAndTemplateKwargs) {
  expect_chat_error(chat_with(R"("response_format":{"type":"xml"})"),
                    "'response_format.type' 'xml' is not one of text, json_object, json_schema");
  expect_chat_error(chat_with(R"("response_format":{"type":"json_schema"})"),
                    "'response_format.json_schema' must be an object");
  expect_chat_error(chat_with(R"("response_format":{"type":"json_schema","json_schema":)"
                              R"({"name":"x","strict":true,"schema":{"type":"string",)"
                              R"("pattern":"(a)\\1"}}})"),
                    "backreferences are not supported at offset 3 in 'pattern' at #");
  expect_chat_error(chat_with(R"("response_format":{"type":"json_schema","json_schema":)"
                              R"({"name":"x","strict":true,"schema":{"type":"object",)"
                              R"("properties":{"n":{"type":"number","multipleOf":0.3}}}}})"),
                    "'multipleOf' 0.3 at #/properties/n is not supported");
  expect_chat_error(chat_with(R"("response_format":{"type":"json_schema","json_schema":)"
                              R"({"name":"x","strict":true,"schema":{"type":"number",)"
                              R"("minimum":3.5}}})"),
                    "'minimum' on a number at # is not supported");
  expect_chat_error(chat_with(R"("response_format":{"type":"json_schema","json_schema":)"
                              R"({"name":"x","schema":{},"extra":1}})"),
                    "unknown field 'response_format.json_schema.extra'");
  expect_chat_error(
      chat_with(R"("response_format":{"type":"json_object"},"grammar":"root ::= \"a\"")"),
      "'grammar' cannot be combined with 'response_format' (one constraint a request)");
  expect_chat_error(chat_with(R"("grammar":1)"), "'grammar' must be a string");
  auto text = parse_chat_request(chat_with(R"("response_format":{"type":"text"})"), limits());
  ASSERT_TRUE(text.ok()) << text.error_message();
  EXPECT_TRUE(text->grammar.empty());
  auto obj = parse_chat_request(chat_with(R"("response_format":{"type":"json_object"})"), limits());
  ASSERT_TRUE(obj.ok()) << obj.error_message();
  EXPECT_NE(obj->grammar.find("root ::= object"), std::string::npos);
  EXPECT_EQ(obj->grammar_from, "response_format");
  auto sch = parse_chat_request(
      chat_with(
          R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,)"
          R"("schema":{"type":"object","properties":{"b":{"type":"boolean"}},"required":["b"]}}})"),
      limits());
  ASSERT_TRUE(sch.ok()) << sch.error_message();
  EXPECT_NE(sch->grammar.find("\"\\\"b\\\"\""), std::string::npos) << sch->grammar;
  auto gbnf = parse_chat_request(chat_with(R"("grammar":"root ::= [a-z]+")"), limits());
  ASSERT_TRUE(gbnf.ok()) << gbnf.error_message();
  EXPECT_EQ(gbnf->grammar, "root ::= [a-z]+");
  EXPECT_EQ(gbnf->grammar_from, "grammar");
  expect_chat_error(chat_with(R"("response_format":"json")"),
                    "'response_format' must be an object");
  expect_chat_error(chat_with(R"("response_format":{})"), "'response_format.type' is required");
  expect_chat_error(chat_with(R"("chat_template_kwargs":[])"),
                    "'chat_template_kwargs' must be an object");
  expect_chat_error(chat_with(R"("chat_template_kwargs":{"enable_thinking":"no"})"),
                    "must be a boolean");
  expect_chat_error(chat_with(R"("chat_template_kwargs":{"foo":1})"),
                    "'chat_template_kwargs.foo' is not supported");
  auto on =
      parse_chat_request(chat_with(R"("chat_template_kwargs":{"enable_thinking":true})"), limits());
  ASSERT_TRUE(on.ok()) << on.error_message();
  EXPECT_EQ(on->enable_thinking, 1);
}

// ---- completions ------------------------------------------------------------------------------

TEST(CompletionRequest, PromptForms) {
  auto s = parse_completion_request(R"({"prompt":"hello","max_tokens":3})", limits());
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(s->prompts.size(), 1u);
  EXPECT_FALSE(s->prompts[0].tokens);
  EXPECT_EQ(s->prompts[0].text, "hello");
  EXPECT_EQ(*s->max_tokens, 3);

  auto one = parse_completion_request(R"({"prompt":["hello"]})", limits());
  ASSERT_TRUE(one.ok()) << one.error_message();
  ASSERT_EQ(one->prompts.size(), 1u);
  EXPECT_EQ(one->prompts[0].text, "hello");

  auto ids = parse_completion_request(R"({"prompt":[1,2,511]})", limits());
  ASSERT_TRUE(ids.ok()) << ids.error_message();
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_TRUE(ids->prompts[0].tokens);
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<int32_t>{1, 2, 511}));

  auto nested = parse_completion_request(R"({"prompt":[[7,8]]})", limits());
  ASSERT_TRUE(nested.ok()) << nested.error_message();
  ASSERT_EQ(nested->prompts.size(), 1u);
  EXPECT_EQ(nested->prompts[0].ids, (std::vector<int32_t>{7, 8}));

  // A batch: strings and token arrays mixed, in order.
  auto batch = parse_completion_request(R"({"prompt":["a",[3,4],"b"]})", limits());
  ASSERT_TRUE(batch.ok()) << batch.error_message();
  ASSERT_EQ(batch->prompts.size(), 3u);
  EXPECT_EQ(batch->prompts[0].text, "a");
  EXPECT_EQ(batch->prompts[1].ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(batch->prompts[2].text, "b");
  expect_completion_error(R"({"prompt":["a",""]})", "'prompt[1]' must not be empty");
  expect_completion_error(R"({"prompt":["a",[]]})", "'prompt[1]' must not be empty");
  expect_completion_error(R"({"prompt":["a",7]})", "'prompt[1]' must be a string or an array");
  std::string many = R"({"prompt":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"x\"";
  expect_completion_error(many + "]}", "at most 64 in one request");

  auto lp =
      parse_completion_request(R"({"prompt":"x","logprobs":2,"echo":false,"suffix":""})", limits());
  ASSERT_TRUE(lp.ok()) << lp.error_message();
  EXPECT_TRUE(lp->logprobs);
  EXPECT_EQ(lp->top_logprobs, 2);
  auto lp0 = parse_completion_request(R"({"prompt":"x","logprobs":0})", limits());
  ASSERT_TRUE(lp0.ok()) << lp0.error_message();
  EXPECT_TRUE(lp0->logprobs);
  EXPECT_EQ(lp0->top_logprobs, 0);
}

TEST(CompletionRequest, GrammarAndResponseFormat) {
  auto g =
      parse_completion_request(R"({"prompt":"x","grammar":"root ::= \"yes\" | \"no\""})", limits());
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_EQ(g->grammar, "root ::= \"yes\" | \"no\"");
  auto rf = parse_completion_request(
      R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"n",)"
      R"("schema":{"type":"array","items":{"type":"integer"}}}}})",
      limits());
  ASSERT_TRUE(rf.ok()) << rf.error_message();
  EXPECT_NE(rf->grammar.find("integer"), std::string::npos);
  expect_completion_error(
      R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"strict":true,)"
      R"("schema":{"type":"object","patternProperties":{}}}}})",
      "unsupported keyword 'patternProperties'");
  auto loose = parse_completion_request(
      R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":)"
      R"({"type":"object","patternProperties":{}}}}})",
      limits());
  ASSERT_TRUE(loose.ok()) << loose.error_message();
  EXPECT_EQ(loose->schema_relaxed,
            std::vector<std::string>{"response_format: 'patternProperties' at #"});
  expect_completion_error(R"({"prompt":"x","grammar":["root"]})", "'grammar' must be a string");
}

// llama.cpp's top-level json_schema: the schema as response_format json_object's, relaxed where
// it must be, one constraint a request; on both endpoints.
TEST(CompletionRequest, TopLevelJsonSchema) {
  auto c = parse_completion_request(
      R"({"prompt":"x","json_schema":{"type":"array","items":{"type":"integer"}}})", limits());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->grammar_from, "json_schema");
  auto via_rf =
      parse_completion_request(R"({"prompt":"x","response_format":{"type":"json_object","schema":)"
                               R"({"type":"array","items":{"type":"integer"}}}})",
                               limits());
  ASSERT_TRUE(via_rf.ok()) << via_rf.error_message();
  EXPECT_EQ(c->grammar, via_rf->grammar);
  auto chat = parse_chat_request(
      chat_with(R"("json_schema":{"type":"object","properties":{"b":{"type":"boolean"}},)"
                R"("required":["b"]})"),
      limits());
  ASSERT_TRUE(chat.ok()) << chat.error_message();
  EXPECT_NE(chat->grammar.find("\"\\\"b\\\"\""), std::string::npos) << chat->grammar;
  EXPECT_TRUE(chat->ignored_fields.empty());
  auto loose = parse_completion_request(
      R"({"prompt":"x","json_schema":{"type":"object","patternProperties":{}}})", limits());
  ASSERT_TRUE(loose.ok()) << loose.error_message();
  EXPECT_EQ(loose->schema_relaxed,
            std::vector<std::string>{"json_schema: 'patternProperties' at #"});
  expect_completion_error(R"({"prompt":"x","json_schema":"{}"})",
                          "'json_schema' must be an object");
  expect_completion_error(R"({"prompt":"x","json_schema":{"type":"nope"}})",
                          "json_schema: unknown type 'nope' at #");
  expect_completion_error(
      R"({"prompt":"x","json_schema":{},"response_format":{"type":"json_object"}})",
      "'json_schema' and a 'response_format' other than text cannot be combined");
  expect_completion_error(R"({"prompt":"x","json_schema":{},"grammar":"root ::= \"a\""})",
                          "'grammar' cannot be combined with 'json_schema'");
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f"}}],)";
  expect_chat_error(chat_with(tools + R"("tool_choice":"required","json_schema":{})"),
                    "cannot be combined with 'json_schema'");
  auto text_rf = parse_completion_request(
      R"({"prompt":"x","json_schema":{},"response_format":{"type":"text"}})", limits());
  ASSERT_TRUE(text_rf.ok()) << text_rf.error_message();
  EXPECT_EQ(text_rf->grammar_from, "json_schema");
}

// llama.cpp's repeat_penalty is a second spelling of repetition_penalty.
TEST(ChatRequest, RepeatPenaltySpelling) {
  auto r = parse_chat_request(chat_with(R"("repeat_penalty":1.3)"), limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  ASSERT_TRUE(r->sampling.repetition_penalty);
  EXPECT_DOUBLE_EQ(*r->sampling.repetition_penalty, 1.3);
  EXPECT_TRUE(r->ignored_fields.empty());
  auto both =
      parse_chat_request(chat_with(R"("repeat_penalty":1.3,"repetition_penalty":1.3)"), limits());
  ASSERT_TRUE(both.ok()) << both.error_message();
  expect_chat_error(chat_with(R"("repeat_penalty":1.3,"repetition_penalty":1.2)"),
                    "'repetition_penalty' and 'repeat_penalty' disagree");
  expect_chat_error(chat_with(R"("repeat_penalty":0)"), "'repeat_penalty' must be in (0");
  auto c = parse_completion_request(R"({"prompt":"x","repeat_penalty":2})", limits());
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_DOUBLE_EQ(*c->sampling.repetition_penalty, 2.0);
}

TEST(CompletionRequest, Malformed) {
  expect_completion_error("", "empty");
  expect_completion_error("nope", "not valid JSON");
  expect_completion_error("[]", "must be a JSON object");
  expect_completion_error("{}", "'prompt' is required");
  expect_completion_error(R"({"prompt":null})", "'prompt' is required");
  expect_completion_error(R"({"prompt":5})", "'prompt' must be a string or an array");
  expect_completion_error(R"({"prompt":{}})", "'prompt' must be a string or an array");
  expect_completion_error(R"({"prompt":""})", "'prompt' must not be empty");
  expect_completion_error(R"({"prompt":[""]})", "'prompt[0]' must not be empty");
  expect_completion_error(R"({"prompt":[]})", "must not be an empty array");
  expect_completion_error(R"({"prompt":[[]]})", "'prompt[0]' must not be empty");
  expect_completion_error(R"({"prompt":[1,"a"]})", "'prompt[1]' must be an integer");
  expect_completion_error(R"({"prompt":[1.5]})", "'prompt[0]' must be a string, an integer");
  expect_completion_error(R"({"prompt":[true]})", "'prompt[0]' must be a string, an integer");
  expect_completion_error(R"({"prompt":[1,512]})", "'prompt[1]' must be in [0, 511]");
  expect_completion_error(R"({"prompt":[-1]})", "'prompt[0]' must be in");
  expect_completion_error(R"({"prompt":[[1,99999999999]]})", "'prompt[0][1]'");
  expect_completion_error(R"({"prompt":"x","echo":true,"logprobs":1})",
                          "'echo' with 'logprobs' (the prompt's log-probabilities) is not");
  expect_completion_error(R"({"prompt":"x","echo":"no"})", "'echo' must be a boolean");
  expect_completion_error(R"({"prompt":"x","suffix":"tail"})", "'suffix' is not supported");
  expect_completion_error(R"({"prompt":"x","suffix":3})", "'suffix' must be a string");
  expect_completion_error(R"({"prompt":"x","logprobs":true})", "'logprobs' must be an integer");
  expect_completion_error(R"({"prompt":"x","logprobs":21})", "'logprobs' must be in [0, 20]");
  expect_completion_error(R"({"prompt":"x","n":30})", "'n' must be in [1, 8]");
  expect_completion_error(R"({"prompt":"x","logit_bias":{"7":"x"}})", "must be a number");
  expect_completion_error(R"({"prompt":"x","max_tokens":0})", "'max_tokens' must be in");
  expect_completion_error(R"({"prompt":"x","stop":[1]})", "'stop[0]' must be a string");
  expect_completion_error(R"({"prompt":"x","temperature":[]})", "'temperature' must be a number");
}

// ---- tool calls -------------------------------------------------------------------------------

const char* kXmlCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>";

TEST(ToolCalls, SplitWholeReply) {
  auto [content, calls] = split_tool_calls(std::string("Let me check.\n") + kXmlCall, true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(calls[0].arguments_json), json({{"city", "Paris"}}));
  EXPECT_EQ(content, "Let me check.");
  // Random ids ("call_" and 24 hex digits), not the parser's positional ones: two replies'
  // calls never share an id.
  auto [c1, again] = split_tool_calls(kXmlCall, true);
  ASSERT_EQ(again.size(), 1u);
  for (const ToolCall* c : {&calls[0], &again[0]}) {
    EXPECT_EQ(c->id.size(), 5u + 24u) << c->id;
    EXPECT_EQ(c->id.rfind("call_", 0), 0u) << c->id;
  }
  EXPECT_NE(calls[0].id, again[0].id);

  auto [c2, none] = split_tool_calls(std::string("Let me check.\n") + kXmlCall, false);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(c2, std::string("Let me check.\n") + kXmlCall);

  auto [c3, none3] = split_tool_calls("plain text", true);
  EXPECT_TRUE(none3.empty());
  EXPECT_EQ(c3, "plain text");
}

// A reply cut by max_tokens after a whole call (a second one half written) finishes with
// "length", not "tool_calls": the client must know the reply was cut.
TEST(ToolCalls, FinishReasonOfACutReplyStaysLength) {
  auto [content, calls] =
      split_tool_calls(std::string(kXmlCall) + "\n<tool_call>\n<function=get_wea", true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(chat_finish_reason("length", !calls.empty()), "length");
  EXPECT_EQ(chat_finish_reason("stop", !calls.empty()), "tool_calls");
  EXPECT_EQ(chat_finish_reason("stop", false), "stop");
  EXPECT_EQ(chat_finish_reason("length", false), "length");
}

TEST(ToolCalls, TypedByTheRequestsTools) {
  const std::string text =
      "<tool_call>\n<function=set>\n<parameter=code>\n42\n</parameter>\n</function>\n</tool_call>";
  const json tools =
      json::parse(R"([{"type":"function","function":{"name":"set","parameters":{"type":"object",)"
                  R"("properties":{"code":{"type":"string"}}}}}])");
  auto [c1, typed] = split_tool_calls(text, true, tools);
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_EQ(json::parse(typed[0].arguments_json), json({{"code", "42"}}));
  ToolCallSplitter s(tools);
  EXPECT_EQ(s.push(text), "");
  auto [c2, streamed] = s.finish();
  ASSERT_EQ(streamed.size(), 1u);
  EXPECT_EQ(json::parse(streamed[0].arguments_json), json({{"code", "42"}}));
}

TEST(ToolCalls, JsonForm) {
  auto [content, calls] = split_tool_calls(
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>", true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "add");
  EXPECT_EQ(json::parse(calls[0].arguments_json), json({{"a", 1}, {"b", 2}}));
  EXPECT_EQ(content, "");
}

TEST(ToolCalls, StreamingSplitter) {
  ToolCallSplitter s;
  std::string shown;
  const std::string text = std::string("Sure. ") + kXmlCall;
  for (size_t i = 0; i < text.size(); i += 3) shown += s.push(text.substr(i, 3));
  auto [tail, calls] = s.finish();
  EXPECT_EQ(shown, "Sure. ");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(tail,
            "");  // only the buffered part (from the marker on) is parsed; shown text stays shown
}

TEST(ToolCalls, StreamingSplitterKeepsUnparsableText) {
  ToolCallSplitter s;
  std::string shown = s.push("a <tool_call> not really");
  auto [tail, calls] = s.finish();
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(shown + tail, "a <tool_call> not really");
}

// Nemotron-Nano-v2's <TOOLCALL>[...]</TOOLCALL> streams like <tool_call>: the text before the
// marker is shown, the list is parsed at the end; split_tool_calls finds it in a whole reply.
TEST(ToolCalls, StreamingSplitterNemotronToolcallList) {
  const std::string call =
      "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]</TOOLCALL>";
  ToolCallSplitter s;
  std::string shown;
  const std::string text = "Let me check. " + call;
  for (size_t i = 0; i < text.size(); i += 4) shown += s.push(text.substr(i, 4));
  auto [tail, calls] = s.finish();
  EXPECT_EQ(shown, "Let me check. ");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(calls[0].arguments_json), json({{"city", "Oslo"}}));
  EXPECT_EQ(tail, "");
  auto [content, whole] = split_tool_calls(text, true);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].name, "get_weather");
  // Not a list: the text stays content.
  ToolCallSplitter bad;
  std::string shown2 = bad.push("x <TOOLCALL>oops</TOOLCALL>");
  auto [tail2, none] = bad.finish();
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(shown2 + tail2, "x <TOOLCALL>oops</TOOLCALL>");
}

TEST(ToolCalls, Json) {
  std::vector<ToolCall> calls = {{"call_1", "f", "{\"x\":1}"}};
  json j = tool_calls_json(calls, true);
  EXPECT_EQ(j[0]["id"], "call_1");
  EXPECT_EQ(j[0]["type"], "function");
  EXPECT_EQ(j[0]["function"]["name"], "f");
  EXPECT_EQ(j[0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(j[0]["index"], 0);
  json resp =
      chat_completion_json("id", 1, "m", "", calls, "tool_calls", nullptr, {3, 2, 1, {}, {}});
  EXPECT_TRUE(resp["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(resp["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(resp["choices"][0]["message"]["tool_calls"].size(), 1u);
}

// ---- JSON shapes ------------------------------------------------------------------------------

TEST(ResponseJson, UsageAndErrors) {
  json u = usage_json({10, 4, 6, {}, {}});
  EXPECT_EQ(u["prompt_tokens"], 10);
  EXPECT_EQ(u["completion_tokens"], 4);
  EXPECT_EQ(u["total_tokens"], 14);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 6);
  EXPECT_FALSE(u.contains("completion_tokens_details"));
  // A reply whose reasoning is split off says how many of its tokens went to it.
  EXPECT_EQ(usage_json({10, 4, 6, {}, 3})["completion_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_EQ(usage_json({10, 4, 6, {}, 0})["completion_tokens_details"]["reasoning_tokens"], 0);
  json e = error_json("bad", "invalid_request_error", "x");
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "x");
  EXPECT_TRUE(error_json("bad", "t")["error"]["code"].is_null());
}

TEST(ResponseJson, InvalidUtf8IsReplacedNotThrown) {
  const std::string s = dump_json(json{{"t", std::string("a\xff"
                                                         "b")}});
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

TEST(ResponseJson, ChunksAndIds) {
  json c = chat_chunk_json("id", 5, "m", {{"content", "x"}}, nullptr, nullptr);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  json u = chat_usage_chunk_json("id", 5, "m", {1, 2, 0, {}, {}});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 3);
  json t = completion_json("id", 5, "m", "txt", "length", nullptr, {1, 1, 0, {}, {}});
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "txt");
  EXPECT_NE(random_id("chatcmpl-"), random_id("chatcmpl-"));
  EXPECT_EQ(random_id("cmpl-").rfind("cmpl-", 0), 0u);
}

const Tokenizer& trained() {
  static const Tokenizer tok = [] {
    BpeTrainOptions opt;
    opt.n_merges = 200;
    auto t =
        Tokenizer::from_json(train_bpe_tokenizer_json(builtin_training_text(), opt), "trained");
    EXPECT_TRUE(t.ok()) << t.error_message();
    return std::move(t).value();
  }();
  return tok;
}

TEST(ResponseJson, Logprobs) {
  const Tokenizer& tok = trained();
  const auto ids = tok.encode("Hello world");
  ASSERT_GE(ids.size(), 2u);
  std::vector<TokenLogprob> lps = {{ids[0], -0.5f, {{ids[0], -0.5f}, {ids[1], -1.5f}}},
                                   {ids[1], -0.25f, {{ids[1], -0.25f}, {ids[0], -2.0f}}}};
  json c = chat_logprobs_json(tok, lps);
  ASSERT_EQ(c["content"].size(), 2u);
  EXPECT_EQ(c["content"][0]["token"], tok.token_bytes(ids[0]));
  EXPECT_FLOAT_EQ(c["content"][0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(c["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["content"][0]["bytes"].size(), tok.token_bytes(ids[0]).size());
  json t = completion_logprobs_json(tok, lps, true, 0);
  EXPECT_EQ(t["tokens"].size(), 2u);
  EXPECT_EQ(t["token_logprobs"].size(), 2u);
  EXPECT_EQ(t["top_logprobs"][1].size(), 2u);
  EXPECT_EQ(t["text_offset"][1], static_cast<int64_t>(tok.token_bytes(ids[0]).size()));
  EXPECT_TRUE(completion_logprobs_json(tok, lps, false, 0)["top_logprobs"].is_null());
  // Offsets count characters, not bytes: "Grüße, 世界" is 9 of them (15 bytes), however its
  // tokens cut it; a token that begins inside a character gets that character's offset.
  const auto u = tok.encode("Grüße, 世界");
  std::vector<TokenLogprob> ul;
  for (const int32_t id : u) ul.push_back({id, -1.0f, {}});
  const json o = completion_logprobs_json(tok, ul, false, 3);
  int64_t at = 3;  // characters started before token i
  bool inside = false;
  for (size_t i = 0; i < u.size(); ++i) {
    const std::string b = tok.token_bytes(u[i]);
    const bool cont = (static_cast<unsigned char>(b[0]) & 0xC0) == 0x80;
    inside |= cont;
    EXPECT_EQ(o["text_offset"][i], at - (cont ? 1 : 0)) << i;
    at += utf8_chars(b);
  }
  EXPECT_EQ(at, 3 + 9);
  EXPECT_TRUE(inside) << "the tokenizer kept every character whole: the case is not covered";
}

// ---- metrics ----------------------------------------------------------------------------------

TEST(Metrics, PrometheusHasEveryCacheFieldAndHistograms) {
  ServerMetrics sm;
  sm.count_response("/v1/completions", 200);
  sm.count_response("/v1/completions", 429);
  sm.observe_request(12.0, 340.0);
  sm.count_outcome("stop");
  sm.count_outcome("stop");
  sm.count_outcome("tool_calls");
  EngineMetrics em;
  em.requests_finished = 3;
  em.requests_cancelled = 1;
  em.cache.lookups = 7;
  em.cache.bytes_pages = 4096;
  em.cache.over_budget = true;
  const std::string page = sm.prometheus(em);
  for (const char* line :
       {"rewind_requests_total{outcome=\"stop\"} 2",
        "rewind_requests_total{outcome=\"tool_calls\"} 1",
        "rewind_requests_total{outcome=\"length\"} 0",
        "rewind_engine_requests_total{outcome=\"finished\"} 3",
        "rewind_engine_requests_total{outcome=\"cancelled\"} 1",
        "rewind_cache_lookups_total 7",
        "rewind_cache_hits_exact_total 0",
        "rewind_cache_hits_extension_total 0",
        "rewind_cache_hits_checkpoint_total 0",
        "rewind_cache_misses_total 0",
        "rewind_cache_tokens_reused_total 0",
        "rewind_cache_tokens_rerun_total 0",
        "rewind_cache_lost_to_spacing_total 0",
        "rewind_cache_evictions_nodes_total 0",
        "rewind_cache_evictions_snapshots_total 0",
        "rewind_cache_thinned_snapshots_total 0",
        "rewind_cache_inserts_total 0",
        "rewind_cache_over_budget_events_total 0",
        "rewind_cache_bytes_pages 4096",
        "rewind_cache_bytes_snapshots 0",
        "rewind_cache_budget_bytes 0",
        "rewind_cache_pages 0",
        "rewind_cache_snapshots 0",
        "rewind_cache_nodes 0",
        "rewind_cache_active_leases 0",
        "rewind_cache_over_budget 1",
        "rewind_requests_running 0",
        "rewind_requests_queued 0",
        "rewind_time_to_first_token_seconds_bucket{le=\"0.025\"} 1",
        "rewind_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
        "rewind_request_duration_seconds_bucket{le=\"0.25\"} 0",
        "rewind_request_duration_seconds_bucket{le=\"0.5\"} 1",
        "rewind_request_duration_seconds_count 1",
        "rewind_http_responses_total{endpoint=\"/v1/completions\",status=\"429\"} 1",
        "# TYPE rewind_request_duration_seconds histogram"})
    EXPECT_NE(page.find(line), std::string::npos) << "missing: " << line << "\n" << page;
}

// Several models: each family's HELP and TYPE once, every engine figure labelled by its model,
// pages and snapshots (process-wide) once without a label, the bound the sum of every term.
TEST(Metrics, SeveralModelsAreLabelledOneFamilyEach) {
  ServerMetrics sm;
  sm.count_outcome("stop", "a");
  sm.count_outcome("length", "b");
  sm.count_outcome("length", "b");
  sm.observe_request(12.0, 340.0, "b");
  sm.track_memory(
      "grammar", [] { return int64_t{7}; }, "b");
  sm.track_memory("http_buffers", [] { return int64_t{9}; });
  EngineMetrics a, b;
  a.requests_finished = 1;
  b.requests_finished = 2;
  a.cache.lookups = 3;
  b.cache.lookups = 4;
  for (EngineMetrics* e : {&a, &b}) {
    e->memory.add("weights", e == &a ? 100 : 200);
    e->memory.add("kv_pages", 55);
  }
  a.memory_bound.add("weights", 1000);
  b.memory_bound.add("weights", 2000);
  MemoryReport shared;
  shared.add("http", 300);
  const std::string page = sm.prometheus({{"a", a}, {"b", b}}, shared);
  for (const char* line :
       {"rewind_requests_total{model=\"a\",outcome=\"stop\"} 1",
        "rewind_requests_total{model=\"b\",outcome=\"length\"} 2",
        "rewind_requests_total{model=\"a\",outcome=\"length\"} 0",
        "rewind_engine_requests_total{model=\"a\",outcome=\"finished\"} 1",
        "rewind_engine_requests_total{model=\"b\",outcome=\"finished\"} 2",
        "rewind_cache_lookups_total{model=\"a\"} 3", "rewind_cache_lookups_total{model=\"b\"} 4",
        "rewind_memory_bytes{model=\"a\",kind=\"weights\"} 100",
        "rewind_memory_bytes{model=\"b\",kind=\"weights\"} 200",
        "rewind_memory_bytes{model=\"b\",kind=\"grammar\"} 7",
        "rewind_memory_bytes{kind=\"kv_pages\"} 55", "rewind_memory_bytes{kind=\"http_buffers\"} 9",
        "rewind_memory_bound_bytes 3300",
        "rewind_memory_bound_term_bytes{model=\"a\",term=\"weights\"} 1000",
        "rewind_memory_bound_term_bytes{term=\"http\"} 300",
        "rewind_request_duration_seconds_count{model=\"b\"} 1",
        "rewind_request_duration_seconds_count{model=\"a\"} 0",
        "rewind_time_to_first_token_seconds_bucket{model=\"b\",le=\"0.025\"} 1"})
    EXPECT_NE(page.find(std::string(line) + "\n"), std::string::npos) << "missing: " << line << "\n"
                                                                      << page;
  EXPECT_EQ(page.find("model=\"a\",kind=\"kv_pages\""), std::string::npos);
  // Each family once, its samples together (the text format's rule).
  for (const char* fam : {"rewind_cache_lookups_total", "rewind_memory_bytes",
                          "rewind_request_duration_seconds", "rewind_requests_total"}) {
    const std::string type = std::string("# TYPE ") + fam + " ";
    const size_t at = page.find(type);
    ASSERT_NE(at, std::string::npos) << fam;
    EXPECT_EQ(page.find(type, at + 1), std::string::npos) << fam << " declared twice";
    const size_t next = page.find("# HELP", at);
    const std::string block = page.substr(at, next - at);
    EXPECT_NE(block.find("model=\"a\""), std::string::npos) << block;
    EXPECT_NE(block.find("model=\"b\""), std::string::npos) << block;
  }
  // One unnamed model: no labels (the page as before several models).
  const std::string one = sm.prometheus(a);
  EXPECT_EQ(one.find("model="), std::string::npos);
  EXPECT_NE(one.find("rewind_memory_bytes{kind=\"kv_pages\"} 55\n"), std::string::npos);
}

TEST(Metrics, CacheJson) {
  EngineMetrics em;
  em.cache.budget_bytes = 100;
  em.cache.bytes_pages = 10;
  em.cache.bytes_snapshots = 5;
  em.cache.hits_exact = 2;
  em.recent.push_back({9, 100, 80, 64, 36, 16, "checkpoint"});
  EngineOptions opt;
  json j = cache_json(em, opt);
  EXPECT_EQ(j["budget_bytes"], 100);
  EXPECT_EQ(j["bytes"]["total"], 15);
  EXPECT_EQ(j["hits"]["exact"], 2);
  ASSERT_EQ(j["recent"].size(), 1u);
  EXPECT_EQ(j["recent"][0]["diverged_at"], 80);
  EXPECT_EQ(j["recent"][0]["resumed_at"], 64);
  EXPECT_EQ(j["recent"][0]["rerun_tokens"], 36);
  EXPECT_EQ(j["recent"][0]["lost_to_spacing"], 16);
  EXPECT_EQ(j["recent"][0]["hit"], "checkpoint");
}

// ---- reasoning split ---------------------------------------------------------------------------

TEST(ReasoningSplitter, ChatCompletionCarriesReasoningOnlyWhenPresent) {
  UsageCounts u;
  auto with = chat_completion_json("id", 1, "m", "answer", {}, "stop", nullptr, u, "why");
  EXPECT_EQ(with["choices"][0]["message"]["reasoning_content"], "why");
  EXPECT_EQ(with["choices"][0]["message"]["content"], "answer");
  auto without = chat_completion_json("id", 1, "m", "answer", {}, "stop", nullptr, u);
  EXPECT_FALSE(without["choices"][0]["message"].contains("reasoning_content"));
}

// ---- routing to a served model ----------------------------------------------------------------

TEST(ModelName, PeekReadsTheTopLevelModelOnly) {
  EXPECT_EQ(peek_model_name(R"({"model": "a", "messages": []})"), "a");
  EXPECT_EQ(peek_model_name(R"({"messages": [{"model": "x"}], "model": "b"})"), "b");
  EXPECT_EQ(peek_model_name(R"({"messages": [{"model": "x"}]})"), "");
  EXPECT_EQ(peek_model_name(R"({"meta": {"model": "x"}, "n": 1})"), "");
  EXPECT_EQ(peek_model_name(R"({"model": "a", "model": "b"})"), "b");  // the last, as parsed
  EXPECT_EQ(peek_model_name(R"({"model": "a\u00e9\"q"})"), "a\xc3\xa9\"q");
  // Not a string, not an object, not JSON: none (the full parse reports it).
  EXPECT_EQ(peek_model_name(R"({"model": 5})"), "");
  EXPECT_EQ(peek_model_name(R"({"model": "a", "model": null})"), "");
  EXPECT_EQ(peek_model_name(R"({"model": ["a"]})"), "");
  EXPECT_EQ(peek_model_name(R"({"model": {"name": "a"}})"), "");
  EXPECT_EQ(peek_model_name(R"(["model", "a"])"), "");
  EXPECT_EQ(peek_model_name(R"("model")"), "");
  for (const char* bad : {"", "{", R"({"model": "a")", R"({"model": "a",})", R"({"model" "a"})",
                          R"({"model": "a"} x)", R"({"model": "\ud800"})", "\xff", "[[[[[["})
    EXPECT_EQ(peek_model_name(bad), "") << bad;
}

TEST(ModelName, TokenizeAndDetokenizeTakeAModel) {
  Limits lim;
  lim.vocab_size = 100;
  auto t = parse_tokenize_request(R"({"model": "b", "content": "x"})", lim);
  ASSERT_TRUE(t.ok()) << t.error_message();
  EXPECT_EQ(t->model, "b");
  EXPECT_TRUE(t->ignored_fields.empty());
  auto d = parse_detokenize_request(R"({"model": "b", "tokens": [1]})", lim);
  ASSERT_TRUE(d.ok()) << d.error_message();
  EXPECT_EQ(d->model, "b");
  EXPECT_TRUE(d->ignored_fields.empty());
  EXPECT_EQ(parse_tokenize_request(R"({"model": 1, "content": "x"})", lim).error_message(),
            "'model' must be a string (got integer 1)");
  EXPECT_FALSE(parse_detokenize_request(R"({"model": [], "tokens": []})", lim).ok());
}

TEST(ModelName, QueryParameter) {
  auto q = split_model_query("");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->model.has_value());
  EXPECT_EQ(q->rest, "");
  q = split_model_query("max_nodes=5&model=tiny-b&x=1");
  ASSERT_TRUE(q.ok()) << q.error_message();
  EXPECT_EQ(q->model.value_or(""), "tiny-b");
  EXPECT_EQ(q->rest, "max_nodes=5&x=1");
  q = split_model_query("model=a%2Fb+c%41");
  ASSERT_TRUE(q.ok()) << q.error_message();
  EXPECT_EQ(q->model.value_or(""), "a/b cA");
  q = split_model_query("&&max_nodes=5&");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->model.has_value());
  EXPECT_EQ(q->rest, "max_nodes=5");
  q = split_model_query("models=a");  // another parameter: left to the route
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->model.has_value());
  EXPECT_EQ(q->rest, "models=a");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"model=a&model=b", "query parameter 'model' is repeated"},
      {"model=", "query parameter 'model' is empty"},
      {"model", "query parameter 'model' is empty"},
      {"model=%", "query parameter 'model': a bad percent escape"},
      {"model=%4", "query parameter 'model': a bad percent escape"},
      {"model=%zz", "query parameter 'model': a bad percent escape"},
      {"model=" + std::string(257, 'a'), "query parameter 'model' is over 256 bytes"}};
  for (const auto& [query, msg] : bad) EXPECT_EQ(split_model_query(query).error_message(), msg);
}

// A path segment's decoding (GET /v1/models/{id}): '+' stays itself, %2F is '/'.
TEST(ModelName, PercentDecodeOfAPath) {
  EXPECT_EQ(percent_decode("ibm-granite%2Fgranite-4.0-h+tiny", false).value(),
            "ibm-granite/granite-4.0-h+tiny");
  EXPECT_EQ(percent_decode("a+b%20c", true).value(), "a b c");
  EXPECT_EQ(percent_decode("", false).value(), "");
  for (const char* bad : {"%", "a%4", "%g0", "%%"})
    EXPECT_EQ(percent_decode(bad, false).error_message(), "a bad percent escape") << bad;
}

}  // namespace
TEST(ChatRequest, TextPartsJoinByNewlines) {
  auto r =
      parse_chat_request(R"({"messages":[{"role":"user","content":[{"type":"text","text":""},"a",)"
                         R"({"type":"text","text":""},{"type":"text","text":"b"}]}]})",
                         limits());
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r.value().messages[0].content, "a\n\nb");  // none before the first text
}

}  // namespace rw
