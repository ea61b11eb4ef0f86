// Chat templates of the Mamba2-hybrid checkpoints (IBM Granite-4.0, NVIDIA Nemotron-Nano-v2,
// NVIDIA Nemotron-3-Nano; tests/data/templates/README.md). Every rendering in
// tests/data/templates/expected.json, made by Python's jinja2 configured as transformers
// configures it (render_templates.py there), is reproduced byte for byte by jinja::Template
// and, for conversations rewind's API can express, by ChatTemplate::render; where jinja2 raised,
// rewind must fail too. Then the server's view (chat_template.h): message boundaries, the system
// anchor, the generation prompt, tokenize_chat, and each model's tool-call output format parsed
// back by parse_tool_calls (with malformed variants).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "rewind/chat/chat_template.h"
#include "rewind/chat/jinja.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

std::string data_dir() {
  return std::string(REWIND_TEST_DATA) + "/templates/";
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ojson& expected() {
  static const ojson e = [] {
    auto j = parse_json_ordered(read_text(data_dir() + "expected.json"));
    EXPECT_TRUE(j.ok()) << j.error_message();
    return j.ok() ? std::move(j).value() : ojson::object();
  }();
  return e;
}

// The fixed clock of the generator ("YYYY-MM-DD HH:MM:SS"), weekday and day of year filled in.
std::tm fixed_now() {
  const std::string s = expected().value("strftime_now", "");
  std::tm tm{};
  EXPECT_EQ(std::sscanf(s.c_str(), "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                        &tm.tm_hour, &tm.tm_min, &tm.tm_sec),
            6)
      << s;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = timegm(&tm);
  std::tm out{};
  gmtime_r(&t, &out);
  return out;
}

std::string template_source(const std::string& name) {
  const ojson& inl = expected()["inline_templates"];
  if (inl.contains(name)) return inl[name].get<std::string>();
  return read_text(data_dir() + name);
}

// ChatMessage from a message in the form ChatTemplate::render gives the template.
ChatMessage to_message(const ojson& m) {
  ChatMessage x;
  x.role = m.at("role").get<std::string>();
  x.content = m.at("content").get<std::string>();
  x.reasoning_content = m.value("reasoning_content", "");
  x.tool_call_id = m.value("tool_call_id", "");
  x.name = m.value("name", "");
  if (m.contains("tool_calls"))
    for (const ojson& c : m["tool_calls"]) {
      ToolCall t;
      t.id = c.at("id").get<std::string>();
      t.name = c.at("function").at("name").get<std::string>();
      const ojson& a = c.at("function").at("arguments");
      t.arguments_json = a.is_string() ? a.get<std::string>() : a.dump();
      x.tool_calls.push_back(std::move(t));
    }
  return x;
}

struct Case {
  std::string tmpl, conversation, name;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::string short_name(const std::string& tmpl) {
  if (tmpl.rfind("ibm-granite", 0) == 0) return "Granite4";
  if (tmpl.rfind("NVIDIA-Nemotron-Nano-v2", 0) == 0) return "NemotronNanoV2";
  if (tmpl.rfind("NVIDIA-Nemotron-3", 0) == 0) return "Nemotron3Nano";
  return "Inline_" + tmpl;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const ojson& r : expected()["renderings"]) {
    Case c;
    c.tmpl = r.at("template").get<std::string>();
    c.conversation = r.at("conversation").get<std::string>();
    c.name = short_name(c.tmpl) + "_" + c.conversation;
    out.push_back(std::move(c));
  }
  return out;
}

class Jinja2Parity : public ::testing::TestWithParam<Case> {};

TEST_P(Jinja2Parity, RendersByteIdentically) {
  const Case& c = GetParam();
  const ojson* rendering = nullptr;
  for (const ojson& r : expected()["renderings"])
    if (r["template"] == c.tmpl && r["conversation"] == c.conversation) rendering = &r;
  ASSERT_NE(rendering, nullptr);
  const ojson& conv = expected()["conversations"].at(c.conversation);
  const ojson& vars = conv.at("vars");
  const bool want_error = rendering->contains("error");
  const std::string src = template_source(c.tmpl);

  // Through the interpreter, with exactly jinja2's variables.
  auto t = jinja::Template::parse(src);
  ASSERT_TRUE(t.ok()) << t.error_message();
  jinja::RenderOptions ro;
  ro.now = fixed_now();
  auto text = t->render(vars, ro);
  if (want_error) {
    EXPECT_FALSE(text.ok()) << "jinja2 raised " << (*rendering)["error"] << ", rewind rendered:\n"
                            << *text;
  } else {
    ASSERT_TRUE(text.ok()) << text.error_message();
    EXPECT_EQ(*text, (*rendering)["expected"].get<std::string>());
  }

  // Through the server's API, when the conversation is in its form.
  if (conv.at("api") != "chat") return;
  std::vector<ChatMessage> msgs;
  for (const ojson& m : vars.at("messages")) msgs.push_back(to_message(m));
  ChatRenderOptions opt;
  opt.add_generation_prompt = vars.at("add_generation_prompt").get<bool>();
  if (vars.contains("enable_thinking")) opt.enable_thinking = vars["enable_thinking"] ? 1 : 0;
  if (vars.contains("tools")) opt.tools_ordered = vars["tools"];
  opt.now = fixed_now();
  auto ct = ChatTemplate::from_string(src, vars.at("bos_token").get<std::string>(),
                                      vars.at("eos_token").get<std::string>());
  ASSERT_TRUE(ct.ok()) << ct.error_message();
  auto chat = ct->render(msgs, opt);
  if (want_error) {
    EXPECT_FALSE(chat.ok());
    return;
  }
  ASSERT_TRUE(chat.ok()) << chat.error_message();
  EXPECT_EQ(chat->text, (*rendering)["expected"].get<std::string>());
  // Every template here loops over the messages: one start per message, ascending, inside.
  ASSERT_EQ(chat->message_starts.size(), msgs.size());
  for (size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_LE(chat->message_starts[i], chat->text.size());
    if (i > 0) {
      EXPECT_LE(chat->message_starts[i - 1], chat->message_starts[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ModelTemplates, Jinja2Parity, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(ModelTemplates, ExpectationsCoverEveryTemplateAndConversation) {
  // The generator's output is complete: 3 checkpoint templates (+ the strftime_now one) times
  // every conversation, each with an expectation or jinja2's error.
  const size_t n_conv = expected()["conversations"].size();
  EXPECT_GE(n_conv, 30u);
  EXPECT_EQ(expected()["renderings"].size(), 4 * n_conv);
  size_t errors = 0;
  for (const ojson& r : expected()["renderings"]) {
    EXPECT_NE(r.contains("expected"), r.contains("error"));
    errors += r.contains("error");
  }
  EXPECT_LE(errors, 8u);  // the few conversations a template rejects (content lists, ...)
}

// Semantics the templates lean on and corner cases (render_templates.py, SNIPPETS): jinja2's
// text, or an error where jinja2 raised or where rewind's subset refuses the construct.
TEST(ModelTemplates, SnippetsRenderLikeJinja2) {
  const ojson& vars = expected()["snippet_vars"];
  size_t matched = 0, refused = 0;
  for (const ojson& sn : expected()["snippets"]) {
    const std::string src = sn.at("template").get<std::string>();
    jinja::RenderOptions ro;
    auto t = jinja::Template::parse(src);
    auto text = t.ok() ? t->render(vars, ro) : Result<std::string>(make_error(t.error_message()));
    if (sn.contains("error") || sn.value("rewind_refuses", false)) {
      EXPECT_FALSE(text.ok()) << src << " rendered " << *text;
      refused += sn.value("rewind_refuses", false);
    } else {
      ASSERT_TRUE(text.ok()) << src << ": " << text.error_message();
      EXPECT_EQ(*text, sn.at("expected").get<std::string>()) << src;
      ++matched;
    }
  }
  EXPECT_GE(matched, 25u);
  EXPECT_GE(refused, 9u);
}

// ---- the server's view: boundaries, anchor, generation prompt -------------------------------

const ChatTemplate& model_template(const std::string& file) {
  static std::map<std::string, ChatTemplate> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    auto t = ChatTemplate::from_string(read_text(data_dir() + file), "", "");
    EXPECT_TRUE(t.ok()) << t.error_message();
    it = cache.emplace(file, std::move(t).value()).first;
  }
  return it->second;
}

const char* const kGranite = "ibm-granite-granite-4.0.jinja";
const char* const kNanoV2 = "NVIDIA-Nemotron-Nano-v2.jinja";
const char* const kNemotron3 = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja";

ChatMessage msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

ToolCall tool_call(std::string name, std::string args) {
  ToolCall c;
  c.id = "c_" + name;
  c.name = std::move(name);
  c.arguments_json = std::move(args);
  return c;
}

// system, user, assistant with one tool call, two tool results, assistant, user.
std::vector<ChatMessage> tool_conversation() {
  ChatMessage a = msg("assistant", "Checking.");
  a.tool_calls = {tool_call("get_weather", R"({"city": "Paris"})")};
  return {msg("system", "You keep a lighthouse."),
          msg("user", "Weather?"),
          a,
          msg("tool", "sunny"),
          msg("tool", "warm"),
          msg("assistant", "Sunny and warm."),
          msg("user", "Thanks.")};
}

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

// The rendering from each message start up to the next one (the last up to the end).
std::vector<std::string> message_texts(const RenderedChat& r) {
  std::vector<std::string> out;
  for (size_t i = 0; i < r.message_starts.size(); ++i) {
    const size_t e = i + 1 < r.message_starts.size() ? r.message_starts[i + 1] : r.text.size();
    out.push_back(r.text.substr(r.message_starts[i], e - r.message_starts[i]));
  }
  return out;
}

RenderedChat render_tools(const char* file, bool add_generation_prompt, int thinking = -1) {
  ChatRenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.enable_thinking = thinking;
  o.tools_ordered = ojson::parse(kTools);
  auto r = model_template(file).render(tool_conversation(), o);
  EXPECT_TRUE(r.ok()) << r.error_message();
  return r.ok() ? std::move(r).value() : RenderedChat{};
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

TEST(ModelTemplates, GraniteBoundariesAndGenerationPrompt) {
  const RenderedChat r = render_tools(kGranite, true);
  const auto parts = message_texts(r);
  ASSERT_EQ(parts.size(), 7u);
  EXPECT_EQ(r.message_starts[0], 0u);
  EXPECT_TRUE(starts_with(parts[0],
                          "<|start_of_role|>system<|end_of_role|>You keep a lighthouse."
                          "\n\nYou are a helpful assistant with access to the following "
                          "tools."));
  EXPECT_EQ(parts[1], "<|start_of_role|>user<|end_of_role|>Weather?<|end_of_text|>\n");
  EXPECT_EQ(
      parts[2],
      "<|start_of_role|>assistant<|end_of_role|>Checking.\n<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|end_of_text|>\n");
  EXPECT_EQ(parts[3],
            "<|start_of_role|>user<|end_of_role|>\n<tool_response>\nsunny\n"
            "</tool_response>");
  EXPECT_EQ(parts[4], "\n<tool_response>\nwarm\n</tool_response><|end_of_text|>\n");
  EXPECT_EQ(parts[5], "<|start_of_role|>assistant<|end_of_role|>Sunny and warm.<|end_of_text|>\n");
  EXPECT_EQ(parts[6],
            "<|start_of_role|>user<|end_of_role|>Thanks.<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>");
  EXPECT_EQ(r.system_end, r.message_starts[1]);

  // No generation prompt: the text ends with the last message. No system message: Granite
  // writes its default system prompt, which is the anchor.
  const RenderedChat r2 = render_tools(kGranite, false);
  EXPECT_TRUE(ends_with(r2.text, "Thanks.<|end_of_text|>\n"));
  auto r3 = model_template(kGranite).render({msg("user", "Hi")}, ChatRenderOptions{});
  ASSERT_TRUE(r3.ok()) << r3.error_message();
  EXPECT_EQ(r3->text,
            "<|start_of_role|>system<|end_of_role|>You are a helpful assistant. Please "
            "ensure responses are professional, accurate, and safe.<|end_of_text|>\n"
            "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>");
  EXPECT_EQ(r3->message_starts, std::vector<size_t>({r3->text.find("<|start_of_role|>user")}));
  EXPECT_EQ(r3->system_end, r3->message_starts[0]);
}

TEST(ModelTemplates, NemotronNanoV2BoundariesAndGenerationPrompt) {
  const RenderedChat r = render_tools(kNanoV2, true);
  const auto parts = message_texts(r);
  ASSERT_EQ(parts.size(), 7u);
  // The system message is written before the loop (which runs over messages[1:]).
  EXPECT_EQ(r.message_starts[0], 0u);
  EXPECT_TRUE(starts_with(parts[0], "<SPECIAL_10>System\nYou keep a lighthouse.\n\nYou can use"));
  EXPECT_TRUE(ends_with(parts[0], "or just respond to the user.\n\n"));
  EXPECT_EQ(parts[1], "<SPECIAL_11>User\nWeather?\n");
  EXPECT_EQ(parts[2],
            "<SPECIAL_11>Assistant\nChecking.\n<TOOLCALL>[{\"name\": \"get_weather\", "
            "\"arguments\": {\"city\": \"Paris\"}}]</TOOLCALL>\n<SPECIAL_12>\n");
  EXPECT_EQ(parts[3], "<SPECIAL_11>User\n<TOOL_RESPONSE>[sunny, ");
  EXPECT_EQ(parts[4], "warm]</TOOL_RESPONSE>");
  EXPECT_EQ(parts[5], "<SPECIAL_11>Assistant\nSunny and warm.\n<SPECIAL_12>\n");
  // The generation prompt opens a think block unless a message said /no_think.
  EXPECT_EQ(parts[6], "<SPECIAL_11>User\nThanks.\n<SPECIAL_11>Assistant\n<think>\n");
  EXPECT_EQ(r.system_end, r.message_starts[1]);

  auto off = model_template(kNanoV2).render({msg("system", "/no_think"), msg("user", "Hi")},
                                            ChatRenderOptions{});
  ASSERT_TRUE(off.ok()) << off.error_message();
  EXPECT_EQ(off->text,
            "<SPECIAL_10>System\n\n\n<SPECIAL_11>User\nHi\n"
            "<SPECIAL_11>Assistant\n<think></think>");
  EXPECT_EQ(off->message_starts, std::vector<size_t>({0, off->text.find("<SPECIAL_11>User")}));

  // A final assistant turn is rendered after the loop: it starts where the loop ended.
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  auto last = model_template(kNanoV2).render({msg("user", "Hi"), msg("assistant", "Hello.")}, o);
  ASSERT_TRUE(last.ok()) << last.error_message();
  EXPECT_EQ(last->text,
            "<SPECIAL_10>System\n\n\n<SPECIAL_11>User\nHi\n"
            "<SPECIAL_11>Assistant\n<think>\nHello.\n<SPECIAL_12>\n");
  EXPECT_EQ(last->message_starts, std::vector<size_t>({last->text.find("<SPECIAL_11>User"),
                                                       last->text.find("<SPECIAL_11>Assistant")}));
}

TEST(ModelTemplates, Nemotron3BoundariesAndGenerationPrompt) {
  const RenderedChat r = render_tools(kNemotron3, true, 0);
  const auto parts = message_texts(r);
  ASSERT_EQ(parts.size(), 7u);
  EXPECT_EQ(r.message_starts[0], 0u);
  EXPECT_TRUE(starts_with(parts[0], "<|im_start|>system\nYou keep a lighthouse.\n\n# Tools\n"));
  EXPECT_TRUE(ends_with(parts[0], "</IMPORTANT><|im_end|>\n"));
  EXPECT_EQ(parts[1], "<|im_start|>user\nWeather?<|im_end|>\n");
  // Before the last user message, the (empty) reasoning is truncated to <think></think>.
  EXPECT_EQ(parts[2],
            "<|im_start|>assistant\n<think></think>Checking.\n<tool_call>\n"
            "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_call>\n<|im_end|>\n");
  EXPECT_EQ(parts[3], "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n");
  EXPECT_EQ(parts[4], "<tool_response>\nwarm\n</tool_response>\n<|im_end|>\n");
  EXPECT_EQ(parts[5], "<|im_start|>assistant\n<think></think>Sunny and warm.<|im_end|>\n");
  EXPECT_EQ(parts[6],
            "<|im_start|>user\nThanks.<|im_end|>\n<|im_start|>assistant\n"
            "<think></think>");
  EXPECT_EQ(r.system_end, r.message_starts[1]);
  // Thinking on (and the template's default) opens the block.
  EXPECT_TRUE(
      ends_with(render_tools(kNemotron3, true, 1).text, "<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(ends_with(render_tools(kNemotron3, true).text, "<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(ends_with(render_tools(kNemotron3, false).text, "Thanks.<|im_end|>\n"));
}

Tokenizer special_tokenizer(std::vector<std::string> specials) {
  BpeTrainOptions opt;
  opt.n_merges = 400;
  opt.special_tokens = std::move(specials);
  auto t = Tokenizer::from_json(train_bpe_tokenizer_json(builtin_training_text(), opt), "t");
  EXPECT_TRUE(t.ok()) << t.error_message();
  return std::move(t).value();
}

// tokenize_chat puts a boundary at every message start (the token count of the text before it)
// and the anchor at the end of the system part.
void check_token_boundaries(const Tokenizer& tok, const RenderedChat& r, bool same_as_whole) {
  std::vector<int64_t> boundaries;
  int64_t anchor = -2;
  const std::vector<int32_t> ids = tokenize_chat(tok, r, &boundaries, &anchor);
  if (same_as_whole) {
    EXPECT_EQ(ids, tok.encode(r.text));  // the cuts sit at special tokens
  }
  EXPECT_EQ(tok.decode(ids), r.text);
  std::vector<int64_t> want;
  int64_t n = 0;
  size_t prev = 0;
  for (size_t s : r.message_starts) {  // token counts of the pieces encoded one by one
    n += static_cast<int64_t>(tok.encode(r.text.substr(prev, s - prev)).size());
    prev = s;
    if (n > 0 && n < static_cast<int64_t>(ids.size()) && (want.empty() || want.back() < n))
      want.push_back(n);
  }
  EXPECT_EQ(boundaries, want);
  EXPECT_EQ(boundaries.size(), r.message_starts.size() - 1);  // message 0 starts at 0
  EXPECT_EQ(anchor, boundaries.at(0));                        // system_end = start of message 1
}

// Whether a template reads enable_thinking as a variable: Nemotron-Nano-v2's only has a
// namespace attribute of that name (it reads /think or /no_think), Granite's has none.
TEST(ModelTemplates, ReadsEnableThinking) {
  EXPECT_TRUE(model_template(kNemotron3).reads_enable_thinking());
  EXPECT_FALSE(model_template(kNanoV2).reads_enable_thinking());
  EXPECT_FALSE(model_template(kGranite).reads_enable_thinking());
  auto chatml = ChatTemplate::from_string(rewind_chatml_template(), "", "<|im_end|>");
  ASSERT_TRUE(chatml.ok());
  EXPECT_TRUE(chatml->reads_enable_thinking());
  for (const char* src : {"{{ x.enable_thinking }}", "{% set ns = namespace(enable_thinking=1) %}",
                          "{{ my_enable_thinking }}", "{{ enable_thinking_x }}"}) {
    auto t = ChatTemplate::from_string(src, "", "");
    ASSERT_TRUE(t.ok()) << src;
    EXPECT_FALSE(t->reads_enable_thinking()) << src;
  }
  for (const char* src : {"{{ enable_thinking }}", "{% if enable_thinking == false %}x{% endif %}",
                          "{% set e = enable_thinking %}"}) {
    auto t = ChatTemplate::from_string(src, "", "");
    ASSERT_TRUE(t.ok()) << src;
    EXPECT_TRUE(t->reads_enable_thinking()) << src;
  }
}

TEST(ModelTemplates, TokenizeChatBoundaries) {
  const Tokenizer granite =
      special_tokenizer({"<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<tool_call>",
                         "</tool_call>", "<tool_response>", "</tool_response>"});
  check_token_boundaries(granite, render_tools(kGranite, true), true);
  // Nemotron-Nano-v2 cuts between tool results inside plain text ("[sunny, " | "warm]").
  const Tokenizer nano = special_tokenizer({"<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>",
                                            "<TOOLCALL>", "</TOOLCALL>", "<TOOL_RESPONSE>",
                                            "</TOOL_RESPONSE>", "<think>", "</think>"});
  check_token_boundaries(nano, render_tools(kNanoV2, true), false);
  const Tokenizer chatml =
      special_tokenizer({"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                         "</tool_call>", "<tool_response>", "</tool_response>"});
  check_token_boundaries(chatml, render_tools(kNemotron3, true, 1), true);
}

TEST(ModelTemplates, StrftimeNowIsInjectable) {
  auto t = ChatTemplate::from_string("{{ strftime_now('%d %b %Y %H:%M') }}", "", "");
  ASSERT_TRUE(t.ok()) << t.error_message();
  ChatRenderOptions o;
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 1;
  tm.tm_mday = 29;
  tm.tm_hour = 23;
  tm.tm_min = 5;
  o.now = tm;
  auto r = t->render({msg("user", "x")}, o);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->text, "29 Feb 2024 23:05");
  o.now.reset();  // the system clock: a date of the same shape
  auto r2 = t->render({msg("user", "x")}, o);
  ASSERT_TRUE(r2.ok()) << r2.error_message();
  EXPECT_EQ(r2->text.size(), 17u);
  EXPECT_NE(r2->text, "29 Feb 2024 23:05");
}

// ---- tool calls in each model's output format ---------------------------------------------

// Renders an assistant turn with `calls` and parses its generated part back.
void round_trip(const char* file, const std::string& gen_prefix, const std::string& gen_suffix) {
  ChatMessage a = msg("assistant", "Let me check.");
  a.tool_calls = {tool_call("get_weather", R"({"city": "Zürich", "days": [1, 2]})"),
                  tool_call("lookup", R"({"q": "multi\nline", "opts": {"a": [1, true, null]}})")};
  ChatRenderOptions o;
  o.add_generation_prompt = false;
  o.tools_ordered = ojson::parse(kTools);
  auto r = model_template(file).render({msg("user", "Weather?"), a, msg("user", "more")}, o);
  ASSERT_TRUE(r.ok()) << r.error_message();
  ASSERT_EQ(r->message_starts.size(), 3u);
  std::string turn =
      r->text.substr(r->message_starts[1], r->message_starts[2] - r->message_starts[1]);
  ASSERT_TRUE(starts_with(turn, gen_prefix)) << turn;
  ASSERT_TRUE(ends_with(turn, gen_suffix)) << turn;
  turn = turn.substr(gen_prefix.size(), turn.size() - gen_prefix.size() - gen_suffix.size());
  std::string content;
  const auto calls = parse_tool_calls(turn, &content, json::parse(kTools));
  ASSERT_EQ(calls.size(), 2u) << turn;
  EXPECT_EQ(content, "Let me check.");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(calls[i].id, "call_" + std::to_string(i));
    EXPECT_EQ(calls[i].name, a.tool_calls[i].name);
    EXPECT_EQ(json::parse(calls[i].arguments_json), json::parse(a.tool_calls[i].arguments_json))
        << file;
  }
}

TEST(ModelTemplates, ToolCallsRoundTrip) {
  round_trip(kGranite, "<|start_of_role|>assistant<|end_of_role|>", "<|end_of_text|>\n");
  round_trip(kNanoV2, "<SPECIAL_11>Assistant\n", "\n<SPECIAL_12>\n");
  round_trip(kNemotron3, "<|im_start|>assistant\n<think></think>", "<|im_end|>\n");
}

TEST(ParseToolCalls, NemotronToolcallList) {
  std::string content;
  auto calls = parse_tool_calls(
      "Checking.\n<TOOLCALL>[{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": \"]</x>\"}}, "
      "{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": 2}\"}, {\"name\": \"h\"}]</TOOLCALL>",
      &content);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(calls[0].name, "f");
  EXPECT_EQ(calls[0].arguments_json, R"({"b":1,"a":"]</x>"})");
  EXPECT_EQ(calls[1].arguments_json, R"({"x":2})");
  EXPECT_EQ(calls[2].arguments_json, "{}");
  EXPECT_EQ(calls[2].id, "call_2");

  // Both formats in one reply, ids in order of appearance; an empty list is no call.
  calls = parse_tool_calls(
      "<tool_call>{\"name\": \"a\"}</tool_call> mid <TOOLCALL>[{\"name\": \"b\"}]</TOOLCALL>"
      " <TOOLCALL>[]</TOOLCALL> end",
      &content);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "a");
  EXPECT_EQ(calls[1].name, "b");
  EXPECT_EQ(calls[1].id, "call_1");
  EXPECT_EQ(content, "mid   end");
  EXPECT_EQ(tool_call_markers(), std::vector<std::string>({"<tool_call>", "<TOOLCALL>"}));
}

TEST(ParseToolCalls, MalformedToolcallListsStayInContent) {
  const std::vector<std::string> junk = {
      "<TOOLCALL>[{\"name\": \"f\"}]",                                  // never closed
      "<TOOLCALL>{\"name\": \"f\"}</TOOLCALL>",                         // an object, not a list
      "<TOOLCALL>[{\"name\": \"f\"}, 3]</TOOLCALL>",                    // one element not a call
      "<TOOLCALL>[{\"name\": \"f\"}, {\"arguments\": {}}]</TOOLCALL>",  // one without a name
      "<TOOLCALL>[{\"name\": \"\"}]</TOOLCALL>",                        // empty name
      "<TOOLCALL>[{\"name\": \"f\", \"arguments\": [1]}]</TOOLCALL>",   // arguments not an object
      "<TOOLCALL>[{\"name\": \"f\", \"arguments\": \"[1]\"}]</TOOLCALL>",
      "<TOOLCALL>[{\"name\": \"f\"}</TOOLCALL>",  // truncated JSON
      "<TOOLCALL>[{\"name\": \"f\"}]] </TOOLCALL>",
      "<TOOLCALL></TOOLCALL>",
      "</TOOLCALL> stray close",
      "<toolcall>[{\"name\": \"f\"}]</toolcall>",  // the tags are case-sensitive
      "<TOOLCALL>" + std::string(300, '[') + "</TOOLCALL>",
      "<TOOLCALL>[{\"name\": \"f\"}]</tool_call>",  // mismatched close
  };
  for (const std::string& j : junk) {
    std::string content;
    const auto calls = parse_tool_calls("before " + j, &content);
    EXPECT_TRUE(calls.empty()) << j;
    EXPECT_EQ(content, "before " + j) << j;
  }
}

}  // namespace
}  // namespace rw
