// Chat template tests: rewind's ChatML template against the Qwen3.5 layout (docs/QWEN35.md
// 7.1/7.2), message boundaries, tools, tool calls rendered and parsed back, tool responses,
// reasoning placement, an HF-style Qwen3 template, Jinja semantics (expected outputs taken from
// Python jinja2 3.1 configured as transformers configures it), whitespace control, errors and
// limits, tokenize_chat boundaries, parse_tool_calls on good and malformed text, load_dir.
#include "rewind/chat/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rewind/chat/jinja.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ChatMessage msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

const ChatTemplate& chatml() {
  static const ChatTemplate t = [] {
    auto r = ChatTemplate::from_string(rewind_chatml_template(), "", "<|im_end|>");
    EXPECT_TRUE(r.ok()) << r.error_message();
    return std::move(r).value();
  }();
  return t;
}

RenderedChat render_ok(const ChatTemplate& t, const std::vector<ChatMessage>& m,
                       const ChatRenderOptions& opt) {
  auto r = t.render(m, opt);
  EXPECT_TRUE(r.ok()) << r.error_message();
  return r.ok() ? std::move(r).value() : RenderedChat{};
}

ChatRenderOptions thinking(int on) {
  ChatRenderOptions o;
  o.enable_thinking = on;
  return o;
}

// Renders a bare Jinja template with `vars`; "ERROR: ..." on failure.
std::string jinja(const std::string& src, const ojson& vars = ojson::object(),
                  const jinja::Limits& lim = {}) {
  auto t = jinja::Template::parse(src);
  if (!t.ok()) return "ERROR: " + t.error_message();
  jinja::RenderOptions ro;
  ro.limits = lim;
  auto r = t->render(vars, ro);
  if (!r.ok()) return "ERROR: " + r.error_message();
  return *r;
}

const Tokenizer& chat_tokenizer() {
  static const Tokenizer tok = [] {
    BpeTrainOptions opt;
    opt.n_merges = 800;
    opt.special_tokens = {"<|endoftext|>", "<|im_start|>",    "<|im_end|>",
                          "<think>",       "</think>",        "<tool_call>",
                          "</tool_call>",  "<tool_response>", "</tool_response>"};
    auto t = Tokenizer::from_json(train_bpe_tokenizer_json(builtin_training_text(), opt), "chat");
    EXPECT_TRUE(t.ok()) << t.error_message();
    return std::move(t).value();
  }();
  return tok;
}

ToolCall call(std::string id, std::string name, std::string args) {
  ToolCall c;
  c.id = std::move(id);
  c.name = std::move(name);
  c.arguments_json = std::move(args);
  return c;
}

const char* kWeatherTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
  "required": ["city"]}}}])";

// ---- rewind's ChatML template ----------------------------------------------------------------

TEST(ChatTemplate, TestVectorShape) {
  // docs/QWEN35.md 7.1: "Hello", thinking off.
  const RenderedChat r = render_ok(chatml(), {msg("user", "Hello")}, thinking(0));
  EXPECT_EQ(r.text,
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(r.message_starts, std::vector<size_t>({0}));
  EXPECT_EQ(r.system_end, std::string::npos);
}

TEST(ChatTemplate, GenerationPromptModes) {
  const std::vector<ChatMessage> m = {msg("user", "Hi")};
  const std::string base = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(render_ok(chatml(), m, thinking(1)).text, base + "<think>\n");
  EXPECT_EQ(render_ok(chatml(), m, thinking(-1)).text, base);
  ChatRenderOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(render_ok(chatml(), m, no_prompt).text, "<|im_start|>user\nHi<|im_end|>\n");
}

// continue_final_message: the reply is cut right after the final assistant message's text (no
// end of turn, no new generation prompt; this template writes the last reply's empty think
// block), wherever else the same text occurs; a template that trims the text keeps its
// trailing spaces (the cut follows the text as sent); what cannot be continued is an error.
TEST(ChatTemplate, ContinueFinalMessage) {
  ChatRenderOptions go;
  go.continue_final_message = true;
  const std::string head = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_EQ(render_ok(chatml(), {msg("user", "Hi"), msg("assistant", "Hello, I am")}, go).text,
            "<|im_start|>user\nHi<|im_end|>\n" + head + "Hello, I am");
  // The same words earlier in the chat, or in the template's text after the reply ("<" of
  // "<|im_end|>"), do not move the cut.
  EXPECT_EQ(render_ok(chatml(), {msg("user", "ab"), msg("assistant", "ab")}, go).text,
            "<|im_start|>user\nab<|im_end|>\n" + head + "ab");
  EXPECT_EQ(render_ok(chatml(), {msg("user", "Hi"), msg("assistant", "<")}, go).text,
            "<|im_start|>user\nHi<|im_end|>\n" + head + "<");
  auto trims = ChatTemplate::from_string(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "", "");
  ASSERT_TRUE(trims.ok()) << trims.error_message();
  EXPECT_EQ(render_ok(*trims, {msg("user", "Sure, ok"), msg("assistant", " Sure, \n")}, go).text,
            "<user>Sure, ok</user><assistant>Sure, \n");
  for (const auto& m : {std::vector<ChatMessage>{msg("user", "Hi")},
                        std::vector<ChatMessage>{msg("user", "Hi"), msg("assistant", "")},
                        std::vector<ChatMessage>{msg("user", "Hi"), msg("assistant", " \n")}}) {
    auto r = chatml().render(m, go);
    EXPECT_FALSE(r.ok());
  }
  auto drops = ChatTemplate::from_string(
      "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}", "",
      "");
  ASSERT_TRUE(drops.ok());
  auto r = drops->render({msg("user", "Hi"), msg("assistant", "Hello")}, go);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("cannot be continued"), std::string::npos) << r.error_message();
}

// Whether a reply's start is held back for a reasoning block (the server's split) follows
// from the template's source.
TEST(ChatTemplate, MentionsThink) {
  auto plain = ChatTemplate::from_string("{{ messages[0].content }}", "", "");
  ASSERT_TRUE(plain.ok()) << plain.error_message();
  EXPECT_FALSE(plain->mentions_think());
  auto reasoning = ChatTemplate::from_string(
      "{{ '<think>\\n' if enable_thinking else '' }}{{ messages[0].content }}", "", "");
  ASSERT_TRUE(reasoning.ok()) << reasoning.error_message();
  EXPECT_TRUE(reasoning->mentions_think());
  // DeepSeek-R1's kind: only the closing tag, to strip earlier replies' reasoning.
  auto closing = ChatTemplate::from_string(
      "{{ messages[0].content.split('</think>')[-1] }}<|im_start|>assistant\n", "", "");
  ASSERT_TRUE(closing.ok()) << closing.error_message();
  EXPECT_TRUE(closing->mentions_think());
}

TEST(ChatTemplate, SystemAndTurnsWithBoundaries) {
  const std::vector<ChatMessage> m = {msg("system", "  Be brief.  "), msg("user", "Hi"),
                                      msg("assistant", "Hello!"), msg("user", "Bye")};
  const RenderedChat r = render_ok(chatml(), m, thinking(0));
  const std::string s0 = "<|im_start|>system\nBe brief.<|im_end|>\n";
  const std::string u1 = "<|im_start|>user\nHi<|im_end|>\n";
  // The assistant turn is after the last user query only when it follows "Bye"; here it is not.
  const std::string a2 = "<|im_start|>assistant\nHello!<|im_end|>\n";
  const std::string u3 = "<|im_start|>user\nBye<|im_end|>\n";
  const std::string gen = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_EQ(r.text, s0 + u1 + a2 + u3 + gen);
  const std::vector<size_t> want = {0, s0.size(), s0.size() + u1.size(),
                                    s0.size() + u1.size() + a2.size()};
  EXPECT_EQ(r.message_starts, want);
  EXPECT_EQ(r.system_end, s0.size());
}

TEST(ChatTemplate, OnlySystemMessage) {
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  const RenderedChat r = render_ok(chatml(), {msg("system", "S")}, o);
  EXPECT_EQ(r.text, "<|im_start|>system\nS<|im_end|>\n");
  EXPECT_EQ(r.message_starts, std::vector<size_t>({0}));
  EXPECT_EQ(r.system_end, r.text.size());
}

TEST(ChatTemplate, ToolsSection) {
  ChatRenderOptions o = thinking(0);
  o.tools_ordered = ojson::parse(kWeatherTools);
  const RenderedChat r = render_ok(chatml(), {msg("system", "Sys."), msg("user", "Weather?")}, o);
  const std::string head =
      "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
      "\"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
      "{\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}\n"
      "</tools>\n\n";
  ASSERT_EQ(r.text.substr(0, head.size()), head);
  EXPECT_NE(r.text.find("<tool_call>\n<function="), std::string::npos);
  const size_t user = r.text.find("<|im_start|>user");
  ASSERT_NE(user, std::string::npos);
  EXPECT_EQ(r.text.substr(user - 39),
            "mention the functions.\n\nSys.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(r.system_end, user);
  EXPECT_EQ(r.message_starts, std::vector<size_t>({0, user}));

  // Without a system message the tools still make a system turn, and it is the anchor.
  const RenderedChat r2 = render_ok(chatml(), {msg("user", "Weather?")}, o);
  const size_t user2 = r2.text.find("<|im_start|>user");
  EXPECT_EQ(r2.text.substr(user2 - 33, 33), "mention the functions.<|im_end|>\n");
  EXPECT_EQ(r2.system_end, user2);
  EXPECT_EQ(r2.message_starts, std::vector<size_t>({user2}));

  // The unordered `tools` (sorted keys) renders too.
  ChatRenderOptions o2 = thinking(0);
  o2.tools = json::parse(kWeatherTools);
  const RenderedChat r3 = render_ok(chatml(), {msg("user", "x")}, o2);
  EXPECT_NE(r3.text.find("<tools>\n{\"function\": {\"description\""), std::string::npos);
}

TEST(ChatTemplate, ToolCallsRenderAndParseBack) {
  ChatMessage a = msg("assistant", "Let me check.");
  a.tool_calls = {call("c1", "get_weather", R"({"city": "Paris", "days": 3})"),
                  call("c2", "lookup", R"({"q": "multi\nline", "opts": {"a": [1, true, null]}})")};
  ChatMessage t1 = msg("tool", "sunny");
  t1.tool_call_id = "c1";
  const std::vector<ChatMessage> m = {msg("user", "Weather?"), a, t1};
  const RenderedChat r = render_ok(chatml(), m, thinking(0));
  const std::string want_turn =
      "<|im_start|>assistant\n<think>\n\n</think>\n\nLet me check.\n\n"
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=lookup>\n<parameter=q>\nmulti\nline\n</parameter>\n"
      "<parameter=opts>\n{\"a\": [1, true, null]}\n</parameter>\n</function>\n</tool_call>"
      "<|im_end|>\n";
  ASSERT_GE(r.message_starts.size(), 3u);
  const std::string turn =
      r.text.substr(r.message_starts[1], r.message_starts[2] - r.message_starts[1]);
  EXPECT_EQ(turn, want_turn);

  // Parse the generated part (after "<think>...</think>\n\n") back.
  const std::string generated =
      turn.substr(std::string("<|im_start|>assistant\n<think>\n\n</think>\n\n").size());
  std::string content;
  const auto calls = parse_tool_calls(generated.substr(0, generated.size() - 11), &content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(calls[0].id, "call_0");
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(calls[0].arguments_json), json::parse(a.tool_calls[0].arguments_json));
  EXPECT_EQ(calls[1].id, "call_1");
  EXPECT_EQ(calls[1].name, "lookup");
  EXPECT_EQ(json::parse(calls[1].arguments_json), json::parse(a.tool_calls[1].arguments_json));
  // Argument order is kept as written.
  EXPECT_EQ(calls[0].arguments_json, R"({"city":"Paris","days":3})");
}

TEST(ChatTemplate, ToolCallWithoutContent) {
  ChatMessage a = msg("assistant", "");
  a.tool_calls = {call("c1", "f", "{}")};
  const RenderedChat r = render_ok(chatml(), {msg("user", "go"), a}, thinking(-1));
  EXPECT_NE(r.text.find("<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=f>\n"
                        "</function>\n</tool_call><|im_end|>\n"),
            std::string::npos);
}

TEST(ChatTemplate, ToolResponsesMerged) {
  ChatMessage a = msg("assistant", "");
  a.tool_calls = {call("c1", "f", "{}"), call("c2", "g", "{}")};
  const std::vector<ChatMessage> m = {msg("user", "go"), a, msg("tool", "one"),
                                      msg("tool", " two "), msg("assistant", "done")};
  const RenderedChat r = render_ok(chatml(), m, thinking(0));
  const std::string merged =
      "<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n"
      "</tool_response><|im_end|>\n";
  const size_t at = r.text.find(merged);
  ASSERT_NE(at, std::string::npos) << r.text;
  ASSERT_EQ(r.message_starts.size(), 5u);
  EXPECT_EQ(r.message_starts[2], at);
  EXPECT_EQ(r.text.substr(r.message_starts[3], 17), "\n<tool_response>\n");
  EXPECT_EQ(r.message_starts[4], at + merged.size());
  // Tool responses are not a new user query: the final assistant turn still shows its
  // (empty) reasoning block.
  EXPECT_EQ(r.text.substr(r.message_starts[4]),
            "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, ReasoningOnlyAfterLastUserQuery) {
  ChatMessage a1 = msg("assistant", "<think>\nold thought\n</think>\n\nFirst answer.");
  ChatMessage a2 = msg("assistant", "Second answer.");
  a2.reasoning_content = "new thought";
  const std::vector<ChatMessage> m = {msg("user", "q1"), a1, msg("user", "q2"), a2};
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  const RenderedChat r = render_ok(chatml(), m, o);
  EXPECT_EQ(r.text,
            "<|im_start|>user\nq1<|im_end|>\n"
            "<|im_start|>assistant\nFirst answer.<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nnew thought\n</think>\n\nSecond answer.<|im_end|>\n");
}

TEST(ChatTemplate, RejectsMisplacedSystemAndUnknownRole) {
  auto r = chatml().render({msg("user", "a"), msg("system", "b")}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("a system message may only come first"), std::string::npos);
  auto r2 = chatml().render({msg("wizard", "a")}, {});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.error_message().find("unknown message role: wizard"), std::string::npos);
  auto r3 = chatml().render({}, {});
  ASSERT_FALSE(r3.ok());
}

// ---- an HF-style Qwen3 template ----------------------------------------------------------------

// Written for this test in the style of the Qwen3 / Qwen2.5 templates on the Hub.
const char* kQwen3Style = R"JINJA({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {{- tool_call.arguments if tool_call.arguments is string else tool_call.arguments | tojson }}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
)JINJA";

TEST(ChatTemplate, Qwen3StyleTemplate) {
  auto t = ChatTemplate::from_string(kQwen3Style, "", "<|im_end|>");
  ASSERT_TRUE(t.ok()) << t.error_message();
  ChatMessage a1 = msg("assistant", "<think>\nr1\n</think>\n\nA1");
  ChatMessage a2 = msg("assistant", "");
  a2.tool_calls = {call("c1", "get_weather", R"({"city": "Zürich", "days": 2})")};
  ChatMessage a3 = msg("assistant", "Sunny.");
  a3.reasoning_content = "\nr3\n";
  const std::vector<ChatMessage> m = {msg("system", "S"),
                                      msg("user", "q1"),
                                      a1,
                                      msg("user", "q2"),
                                      a2,
                                      msg("tool", "{\"t\": 20}"),
                                      a3};
  ChatRenderOptions o = thinking(0);
  o.tools_ordered = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  const RenderedChat r = render_ok(*t, m, o);
  const std::vector<std::string> parts = {
      "<|im_start|>system\nS\n\n# Tools\n\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}\n</tools><|im_end|>\n",
      "<|im_start|>user\nq1<|im_end|>\n",
      "<|im_start|>assistant\nA1<|im_end|>\n",
      "<|im_start|>user\nq2<|im_end|>\n",
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Zürich\", \"days\": 2}}\n</tool_call><|im_end|>\n",
      "<|im_start|>user\n<tool_response>\n{\"t\": 20}\n</tool_response><|im_end|>\n",
      "<|im_start|>assistant\n<think>\nr3\n</think>\n\nSunny.<|im_end|>\n",
  };
  std::string want;
  std::vector<size_t> starts;
  for (const auto& p : parts) {
    starts.push_back(want.size());
    want += p;
  }
  starts[0] = 0;
  EXPECT_EQ(r.text, want + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // The reversed pass writes nothing; the forward pass gives the starts. The system message
  // is rendered before the loop (its iteration is empty), so it starts at 0.
  EXPECT_EQ(r.message_starts, starts);
  EXPECT_EQ(r.system_end, parts[0].size());

  // JSON-form tool calls parse back.
  std::string content;
  const auto calls = parse_tool_calls(parts[4].substr(22, parts[4].size() - 22 - 11), &content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments_json, R"({"city":"Zürich","days":2})");
  EXPECT_EQ(content, "");
}

TEST(ChatTemplate, LoopOverSliceAndNoLoop) {
  // Gemma-style: the system message is folded into the first user turn and the loop runs over
  // messages[1:].
  const char* sliced =
      "{{ bos_token }}{% if messages[0].role == 'system' %}{% set first = messages[0].content + "
      "'\\n\\n' %}{% set rest = messages[1:] %}{% else %}{% set first = '' %}{% set rest = "
      "messages %}{% endif %}{% for m in rest %}<turn>{{ m.role }}\n{{ first if loop.first }}"
      "{{ m.content }}</turn>\n{% endfor %}";
  auto t = ChatTemplate::from_string(sliced, "<bos>", "");
  ASSERT_TRUE(t.ok()) << t.error_message();
  const RenderedChat r =
      render_ok(*t, {msg("system", "S"), msg("user", "U"), msg("assistant", "A")}, {});
  EXPECT_EQ(r.text, "<bos><turn>user\nS\n\nU</turn>\n<turn>assistant\nA</turn>\n");
  EXPECT_EQ(r.message_starts, std::vector<size_t>({0, 5, r.text.find("<turn>assistant")}));
  EXPECT_EQ(r.system_end, 5u);

  // A template that never loops over messages renders, without boundaries.
  auto t2 = ChatTemplate::from_string("{{ messages[0].content }}|{{ messages|length }}", "", "");
  ASSERT_TRUE(t2.ok());
  const RenderedChat r2 = render_ok(*t2, {msg("user", "U"), msg("assistant", "A")}, {});
  EXPECT_EQ(r2.text, "U|2");
  EXPECT_TRUE(r2.message_starts.empty());
  EXPECT_EQ(r2.system_end, std::string::npos);
}

// ---- Jinja semantics -------------------------------------------------------------------------

TEST(Jinja, MatchesJinja2) {
  // Expected outputs produced by jinja2 3.1.6 with transformers' environment.
  const ojson vars = ojson::parse(R"({"s": "Hello World", "l": [3, 1, 2], "d": {"b": 1, "a": 2},
                                      "u": "é€𝄞"})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ s|length }}|{{ s[1:4] }}|{{ s[::-1] }}|{{ s[-5:] }}|{{ u|length }}|{{ u[1] }}|"
       "{{ u[::-1] }}",
       "11|ell|dlroW olleH|World|3|€|𝄞€é"},
      {"{{ l|sort }}|{{ l|reverse|list }}|{{ l[::2] }}|{{ l|join('-') }}|{{ l|sum }}|"
       "{{ l|first }}|{{ l|last }}|{{ l|max }}",
       "[1, 2, 3]|[2, 1, 3]|[3, 2]|3-1-2|6|3|2|3"},
      {"{{ d|items|list }}|{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d.keys()|list }}|"
       "{{ d|dictsort }}",
       "[('b', 1), ('a', 2)]|{\"b\": 1, \"a\": 2}|{\n  \"b\": 1,\n  \"a\": 2\n}|['b', 'a']|"
       "[('a', 2), ('b', 1)]"},
      {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1e16 }} "
       "{{ 0.1 + 0.2 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }}",
       "3 -4 2 3.5 1024 1e+16 0.30000000000000004 a1None abab"},
      {"{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
       "{{ 'xxhixx'.lstrip('x') }}|{{ 'hello'.replace('l', 'L') }}|{{ 'hello world'.title() }}|"
       "{{ 'ABC'.lower() }}|{{ 'abc'.upper() }}|{{ 'abc'.startswith('ab') }}|"
       "{{ 'abc'.endswith(('x', 'c')) }}",
       "a b|['a', 'b', '', 'c']|['a', 'b']|hixx|heLLo|Hello World|abc|ABC|True|True"},
      {"{{ none }}|{{ true }}|{{ [1, 'a', none, 2.5] }}|{{ {'k': 'v'} }}|{{ undefined_var }}|"
       "{{ zz is defined }}|{{ none is none }}|{{ 'x' is string }}|{{ d is mapping }}|"
       "{{ l is sequence }}|{{ 1 is number }}|{{ true is true }}|{{ 0 is false }}",
       "None|True|[1, 'a', None, 2.5]|{'k': 'v'}||False|True|True|True|True|True|True|False"},
      {"{{ zz|default('D') }}|{{ ''|default('D', true) }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|"
       "{{ 3.7|int }}|{{ '  t  '|trim }}|{{ 5|string }}|{{ 'a' in 'cat' }}|{{ 2 in l }}|"
       "{{ 'z' not in d }}|{{ 1 < 2 < 3 }}",
       "D|D|43|0|3|t|5|True|True|True|True"},
      {"{{ ['b','A','c']|sort }}|{{ [{'r':'u'},{'r':'a'}]|map(attribute='r')|list }}|"
       "{{ [{'r':'u'},{'r':'a'}]|selectattr('r', 'equalto', 'u')|list|length }}|"
       "{{ [1,2,3,4]|select('odd')|list }}|{{ ['a','A','b']|unique|list }}|"
       "{{ 'a\\nb'|indent(2, true) }}",
       "['A', 'b', 'c']|['u', 'a']|1|[1, 3]|['a', 'b']|  a\n  b"},
      {"{{ 'é\"\\n'|tojson }}|{{ [1.0, 2.5e-7, none, true]|tojson }}|"
       "{{ 'é'|tojson(ensure_ascii=true) }}|{{ (1, 2) }}",
       "\"é\\\"\\n\"|[1.0, 2.5e-07, null, true]|\"\\u00e9\"|(1, 2)"},
      {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}"
       "{% break %}{% endif %}{{ i }}{% endfor %}",
       "0134"},
      {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
       "{{ greet('a') }} {{ greet(punct='?', name='b') }}",
       "Hi a! Hi b?"},
      {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "231"},
      {"{% for x in l if x > 1 %}{{ loop.index }}:{{ x }}{{ ',' if not loop.last }}"
       "{% else %}none{% endfor %}",
       "1:3,2:2"},
      {"{% for a, b in d|items %}{{ a }}={{ b }};{% endfor %}{% set p, q = [1, 2] %}{{ p + q }}",
       "b=1;a=2;3"},
      {"{% set blk %}[{{ s }}]{% endset %}{{ blk }}{% raw %}{{ kept }}{% endraw %}",
       "[Hello World]{{ kept }}"},
      {"{{ 'x' if none else 'y' }}{{ none or 'z' }}{{ 0 and 1 }}{{ 1 if false }}", "yz0"},
  };
  for (const auto& [src, want] : cases) EXPECT_EQ(jinja(src, vars), want) << src;
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks, lstrip_blocks, '-' and '+' as jinja2 applies them (outputs from jinja2).
  EXPECT_EQ(jinja("a\n  {% if true %}\n  b\n  {% endif %}\n  c"), "a\n  b\n  c");
  EXPECT_EQ(jinja("x  {{- 1 -}}  y"), "x1y");
  EXPECT_EQ(jinja("x\n{%- if true -%}\n  y  \n{%- endif -%}\nz"), "xyz");
  EXPECT_EQ(jinja("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(jinja("a {# c #}\n  {# d #}\nb\n"), "a b");  // one trailing newline is dropped
  EXPECT_EQ(jinja("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n"), "  1\n  2\n");
  EXPECT_EQ(jinja("r1\r\nr2\rr3"), "r1\nr2\nr3");
}

TEST(Jinja, ErrorsHaveLineAndColumn) {
  EXPECT_EQ(jinja("ok\n  {% if x %}open"),
            "ERROR: line 2, column 3: unclosed '{% if %}' "
            "(expected '{% elif %}' or '{% else %}' or "
            "'{% endif %}')");
  EXPECT_EQ(jinja("{{ x | nope }}"), "ERROR: line 1, column 8: no filter named 'nope'");
  EXPECT_EQ(jinja("{{ x is nope }}"), "ERROR: line 1, column 9: no test named 'nope'");
  EXPECT_EQ(jinja("a\n{{ 'abc }}"), "ERROR: line 2, column 4: unterminated string literal");
  EXPECT_EQ(jinja("{{ x "), "ERROR: line 1, column 1: unclosed '{{' (expected '}}')");
  EXPECT_EQ(jinja("{% endfor %}"),
            "ERROR: line 1, column 4: unexpected '{% endfor %}' (no matching block is open)");
  EXPECT_EQ(jinja("{% include 'x' %}"), "ERROR: line 1, column 4: unsupported tag 'include'");
  EXPECT_EQ(jinja("{# never closed"), "ERROR: line 1, column 1: unclosed comment (expected '#}')");
  EXPECT_EQ(jinja("{% break %}"), "ERROR: line 1, column 4: 'break' outside a loop");
  EXPECT_EQ(jinja("{{ (1 }}"), "ERROR: line 1, column 7: unexpected '}', expected ')'");
  // Run-time errors.
  EXPECT_EQ(jinja("x\n  {{ raise_exception('No user query.') }}"),
            "ERROR: line 2, column 6: raise_exception: No user query.");
  EXPECT_EQ(jinja("{{ missing.attr }}"), "ERROR: line 1, column 4: 'missing' is undefined");
  EXPECT_EQ(jinja("{{ 1 + 'a' }}"),
            "ERROR: line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(jinja("{{ [1]|items }}"),
            "ERROR: line 1, column 8: Can only get item pairs from a mapping.");
  EXPECT_EQ(jinja("{% set d = {} %}{% set d.x = 1 %}"),
            "ERROR: line 1, column 17: cannot assign attribute on non-namespace object 'd'");
  EXPECT_EQ(jinja("{{ [1].append(2) }}"),
            "ERROR: line 1, column 4: lists cannot be modified in a chat template (list.append)");
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  jinja::Limits lim;
  lim.max_loop_iterations = 10000;
  EXPECT_NE(jinja("{% for i in range(100) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                  ojson::object(), lim)
                .find("loop iteration limit"),
            std::string::npos);
  EXPECT_NE(jinja("{% for i in range(100000000) %}{% endfor %}").find("exceeds the loop limit"),
            std::string::npos);
  EXPECT_NE(
      jinja("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("recursion deeper"),
      std::string::npos);
  EXPECT_NE(jinja("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("string longer than the limit"),
            std::string::npos);
  lim = {};
  lim.max_output_bytes = 1000;
  EXPECT_NE(jinja("{% for i in range(100) %}0123456789abcdef{% endfor %}", ojson::object(), lim)
                .find("output exceeds the limit of 1000 bytes"),
            std::string::npos);
  // Equality on two separately built 2^40-leaf trees runs out of steps, not time.
  EXPECT_NE(jinja("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}"
                  "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                  "{{ ns.a == ns.b }}")
                .find("step limit"),
            std::string::npos);
  // A namespace that contains itself cannot be printed.
  EXPECT_NE(
      jinja("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("nested too deeply"),
      std::string::npos);
  // Parse-time nesting limits.
  EXPECT_NE(jinja("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}")
                .find("nested too deeply"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 400; ++i) chain += " + 1";
  EXPECT_NE(jinja(chain + " }}").find("too deeply nested"), std::string::npos);
}

// ---- tokenize_chat
// -------------------------------------------------------------------------------

TEST(ChatTemplate, TokenizeChatBoundariesAreTokenCountsOfPrefixes) {
  const Tokenizer& tok = chat_tokenizer();
  ChatMessage a = msg("assistant", "Checking the lighthouse.");
  a.tool_calls = {call("c1", "get_weather", R"({"city": "Paris"})")};
  const std::vector<ChatMessage> m = {msg("system", "You keep a lighthouse."),
                                      msg("user", "How many steps are there?"),
                                      a,
                                      msg("tool", "212"),
                                      msg("tool", "and a ladder"),
                                      msg("assistant", "There are 212 steps.")};
  ChatRenderOptions o = thinking(0);
  o.tools_ordered = ojson::parse(kWeatherTools);
  const RenderedChat r = render_ok(chatml(), m, o);
  ASSERT_EQ(r.message_starts.size(), m.size());
  std::vector<int64_t> boundaries;
  int64_t anchor = -2;
  const std::vector<int32_t> ids = tokenize_chat(tok, r, &boundaries, &anchor);
  EXPECT_EQ(ids, tok.encode(r.text));  // the cuts fall next to special tokens
  std::vector<int64_t> want;
  for (size_t s : r.message_starts) {
    const int64_t n = static_cast<int64_t>(tok.encode(r.text.substr(0, s)).size());
    if (n > 0 && n < static_cast<int64_t>(ids.size()) && (want.empty() || want.back() < n))
      want.push_back(n);
  }
  EXPECT_EQ(boundaries, want);
  EXPECT_EQ(boundaries.size(), m.size() - 1);  // message 0 starts at 0
  EXPECT_EQ(anchor, static_cast<int64_t>(tok.encode(r.text.substr(0, r.system_end)).size()));
  EXPECT_EQ(anchor, boundaries[0]);
  EXPECT_EQ(tok.decode(ids), r.text);

  // No system part: no anchor.
  const RenderedChat r2 = render_ok(chatml(), {msg("user", "Hello")}, thinking(0));
  const auto ids2 = tokenize_chat(tok, r2, &boundaries, &anchor);
  EXPECT_EQ(ids2, tok.encode(r2.text));
  EXPECT_TRUE(boundaries.empty());
  EXPECT_EQ(anchor, -1);
}

// ---- parse_tool_calls
// ----------------------------------------------------------------------------

TEST(ParseToolCalls, XmlForm) {
  const std::string text =
      "I will look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
      "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=when>\n{\"from\": 1}\n"
      "</parameter>\n<parameter=note>\nline one\nline two\n</parameter>\n</function>\n"
      "</tool_call>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>";
  std::string content;
  const auto calls = parse_tool_calls(text, &content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(content, "I will look.");
  EXPECT_EQ(calls[0].id, "call_0");
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments_json,
            R"({"city":"New York","days":3,"when":{"from":1},"note":"line one\nline two"})");
  EXPECT_EQ(calls[1].id, "call_1");
  EXPECT_EQ(calls[1].name, "noop");
  EXPECT_EQ(calls[1].arguments_json, "{}");
}

TEST(ParseToolCalls, SchemaKeepsStrings) {
  const std::string text =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
      "<parameter=days>\n42\n</parameter>\n</function>\n</tool_call>";
  std::string content;
  const auto typed = parse_tool_calls(text, &content, json::parse(kWeatherTools));
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_EQ(typed[0].arguments_json, R"({"city":"42","days":42})");
  const auto untyped = parse_tool_calls(text, &content);
  ASSERT_EQ(untyped.size(), 1u);
  EXPECT_EQ(untyped[0].arguments_json, R"({"city":42,"days":42})");
}

TEST(ParseToolCalls, JsonForm) {
  std::string content;
  auto calls = parse_tool_calls(
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": [true]}}\n</tool_call>"
      "<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 2}\"}\n</tool_call>"
      "<tool_call>{\"name\": \"h\"}</tool_call> tail",
      &content);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].name, "f");
  EXPECT_EQ(calls[0].arguments_json, R"({"b":1,"a":[true]})");
  EXPECT_EQ(calls[1].arguments_json, R"({"x":2})");
  EXPECT_EQ(calls[2].arguments_json, "{}");
  EXPECT_EQ(calls[2].id, "call_2");
  EXPECT_EQ(content, "tail");
}

TEST(ParseToolCalls, ToleratesLooseXml) {
  // Missing </parameter> and </function>, inline values: still calls.
  std::string content;
  auto calls = parse_tool_calls(
      "<tool_call>\n<function=f>\n<parameter=a>1<parameter=b>\ntwo\n</tool_call>", &content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments_json, R"({"a":1,"b":"two"})");
}

TEST(ParseToolCalls, MalformedBlocksStayInContent) {
  const std::vector<std::string> junk = {
      "<tool_call>\nnot json at all\n</tool_call>",
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",  // no name
      "<tool_call>\n{\"name\": \"f\", \"arguments\": 5}\n</tool_call>",
      "<tool_call>\n<function=>\n</function>\n</tool_call>",  // empty name
      "<tool_call>\n<function=f>\ngarbage\n</function>\n</tool_call>",
      "<tool_call>\n<function=f>\n</function>\nextra\n</tool_call>",
      "<tool_call>\n<function=f\n</tool_call>",
      "</tool_call> stray close",
      "<tool_call> never closed <function=f>",
      "<tool_call>\n" + std::string(200, '[') + "\n</tool_call>",
  };
  for (const std::string& j : junk) {
    std::string content;
    const auto calls = parse_tool_calls("before " + j, &content);
    EXPECT_TRUE(calls.empty()) << j;
    EXPECT_EQ(content, "before " + j) << j;
  }
  // A bad block next to a good one: the good one is taken, the bad one stays.
  std::string content;
  const auto calls = parse_tool_calls(
      "<tool_call>\nbad\n</tool_call>\n<tool_call>\n<function=f>\n</function>\n</tool_call>",
      &content);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].id, "call_0");
  EXPECT_EQ(content, "<tool_call>\nbad\n</tool_call>");
  // An opening tag inside the block: the last opening starts it.
  const auto nested = parse_tool_calls(
      "<tool_call> x <tool_call>\n<function=f>\n</function>\n</tool_call>", &content);
  ASSERT_EQ(nested.size(), 1u);
  EXPECT_EQ(content, "<tool_call> x");
}

// ---- parse_json_ordered
// --------------------------------------------------------------------------

TEST(ParseJsonOrdered, KeepsOrderAndPythonDuplicates) {
  auto j =
      parse_json_ordered(R"({"z": 1, "a": {"y": [1, {"q": null}], "b": 2.5}, "z2": "s", "z": 3})");
  ASSERT_TRUE(j.ok()) << j.error_message();
  EXPECT_EQ(j->dump(), R"({"z":3,"a":{"y":[1,{"q":null}],"b":2.5},"z2":"s"})");
  EXPECT_EQ(parse_json_ordered("[]")->dump(), "[]");
  EXPECT_EQ(parse_json_ordered(" \"x\" ")->dump(), "\"x\"");
  EXPECT_FALSE(parse_json_ordered("{\"a\": }").ok());
  EXPECT_FALSE(parse_json_ordered("{} trailing").ok());
  EXPECT_FALSE(parse_json_ordered("").ok());
  auto deep = parse_json_ordered(std::string(300, '[') + std::string(300, ']'));
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.error_message().find("nested deeper than 256"), std::string::npos);
  // Linear in the keys: a 200k-key object (about half a minute with ordered_json::parse).
  std::string big = "{";
  for (int i = 0; i < 200000; ++i)
    big += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  big += "}";
  auto b = parse_json_ordered(big);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 200000u);
  EXPECT_EQ(b->begin().key(), "k0");
}

// ---- load_dir ----------------------------------------------------------------------------------

class LoadDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rewind_chat_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(LoadDir, FromTokenizerConfig) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}",
            "bos_token": {"content": "<s>"}, "eos_token": "</s>"})");
  auto t = ChatTemplate::load_dir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.error_message();
  const RenderedChat r = render_ok(*t, {msg("user", "a"), msg("assistant", "b")}, {});
  EXPECT_EQ(r.text, "<s>[a][b]</s>");
  EXPECT_EQ(r.message_starts, std::vector<size_t>({3, 6}));
}

TEST_F(LoadDir, NamedTemplatesAndJinjaFile) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto t = ChatTemplate::load_dir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.error_message();
  EXPECT_EQ(render_ok(*t, {msg("user", "a")}, {}).text, "D");
  write("chat_template.jinja", "J{{ messages|length }}\n");
  auto t2 = ChatTemplate::load_dir(dir_.string());
  ASSERT_TRUE(t2.ok()) << t2.error_message();
  EXPECT_EQ(render_ok(*t2, {msg("user", "a")}, {}).text, "J1");
}

TEST_F(LoadDir, Errors) {
  auto none = ChatTemplate::load_dir(dir_.string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error_message().find("no chat template"), std::string::npos);
  write("chat_template.jinja", "line 1\n{% for x in y %}");
  auto bad = ChatTemplate::load_dir(dir_.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_message().find("chat_template.jinja: chat template: line 2, column 1"),
            std::string::npos)
      << bad.error_message();
  // A chat_template.jinja that is there but cannot be read is an error, not a fall-back to
  // tokenizer_config.json's template.
  std::filesystem::remove(dir_ / "chat_template.jinja");
  std::filesystem::create_directory(dir_ / "chat_template.jinja");
  write("tokenizer_config.json", R"({"chat_template": "D"})");
  auto unreadable = ChatTemplate::load_dir(dir_.string());
  ASSERT_FALSE(unreadable.ok());
  EXPECT_NE(unreadable.error_message().find("chat_template.jinja: Is a directory"),
            std::string::npos)
      << unreadable.error_message();
}

// A template's own error (raise_exception) reads "chat template: ..." once: the server and the
// chat command pass the message on as it is.
TEST_F(LoadDir, RenderErrorsNameTheTemplateOnce) {
  write("chat_template.jinja",
        "{% if messages[0].role != 'system' %}{{ raise_exception('a system message first') }}"
        "{% endif %}");
  auto t = ChatTemplate::load_dir(dir_.string());
  ASSERT_TRUE(t.ok()) << t.error_message();
  auto r = t->render({msg("user", "a")}, {});
  ASSERT_FALSE(r.ok());
  const std::string& e = r.error_message();
  EXPECT_EQ(e.rfind("chat template: ", 0), 0u) << e;
  EXPECT_EQ(e.find("chat template", 1), std::string::npos) << e;
  EXPECT_NE(e.find("a system message first"), std::string::npos) << e;
}

}  // namespace
}  // namespace rw

namespace rw {
namespace {

// docs/QWEN35.md 7.1's test vector (thinking off, one user message "Hello") with the real
// Qwen3.5 ids. The real vocabulary (248077 ids) is not on this machine, so the tokenizer here
// holds exactly the entries the vector needs at their real ids: the 256 byte symbols (with
// "Ċ" = 198), the merges that build "user", "Hello", "assistant" and "ĊĊ" (271), and the
// special tokens. Everything else is rewind's: the template, the special-token matching, the
// Qwen3.5 pre-tokenizer regex and BPE.
TEST(Qwen35TokenVector, HelloWithThinkingOffGivesTheReferenceIds) {
  using json = nlohmann::json;
  // GPT-2 byte map: printable bytes map to themselves, the others to U+0100 upwards in order.
  std::vector<std::string> sym(256);
  int next = 0;
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    sym[b] = utf8(keep ? b : 256 + next++);
  }
  ASSERT_EQ(sym['\n'], "\xC4\x8A");  // "Ċ"
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    if (b == '\n') continue;
    while (id == 198 || id == 271) ++id;
    vocab[sym[b]] = id++;
  }
  vocab[sym['\n']] = 198;
  json merges = json::array();
  auto word = [&](const std::string& w, int final_id) {
    std::string cur(1, w[0]);
    for (size_t i = 1; i < w.size(); ++i) {
      merges.push_back(cur + " " + std::string(1, w[i]));
      cur += w[i];
      if (!vocab.contains(cur))
        vocab[cur] = i + 1 == w.size() ? final_id : 100000 + static_cast<int>(merges.size());
    }
  };
  word("user", 846);
  word("Hello", 9419);
  word("assistant", 74455);
  merges.push_back(sym['\n'] + " " + sym['\n']);
  vocab[sym['\n'] + sym['\n']] = 271;
  json added = json::array();
  for (auto [tok, tid] : std::vector<std::pair<std::string, int>>{{"<|endoftext|>", 248044},
                                                                  {"<|im_start|>", 248045},
                                                                  {"<|im_end|>", 248046},
                                                                  {"<tool_call>", 248058},
                                                                  {"</tool_call>", 248059},
                                                                  {"<think>", 248068},
                                                                  {"</think>", 248069}})
    added.push_back({{"id", tid}, {"content", tok}, {"special", true}, {"normalized", false}});
  const json tj = {
      {"version", "1.0"},
      {"added_tokens", added},
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
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  auto tok = Tokenizer::from_json(tj.dump(), "qwen35-subset.json");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  ChatRenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = 0;
  auto rendered = chatml().render({msg("user", "Hello")}, ro);
  ASSERT_TRUE(rendered.ok()) << rendered.error_message();
  std::vector<int64_t> bounds;
  int64_t anchor = -1;
  const std::vector<int32_t> ids = tokenize_chat(tok.value(), rendered.value(), &bounds, &anchor);
  EXPECT_EQ(ids, (std::vector<int32_t>{248045, 846, 198, 9419, 248046, 198, 248045, 74455, 198,
                                       248068, 271, 248069, 271}))
      << rendered->text;
}

}  // namespace
}  // namespace rw
