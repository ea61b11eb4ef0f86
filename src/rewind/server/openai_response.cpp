#include "rewind/server/openai_response.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "rewind/tokenizer/tokenizer.h"

namespace rw {

using nlohmann::json;

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

json error_json(const std::string& message, const std::string& type, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::string random_id(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  // splitmix64 of salt + counter: unique per process, unpredictable enough for ids.
  uint64_t z = salt + 0x9e3779b97f4a7c15ull * (counter.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  uint64_t w = z * 0xd6e8feb86659fd93ull ^ salt;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(z),
                static_cast<unsigned long long>(w >> 32));
  return prefix + buf;
}

json usage_json(const UsageCounts& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.reasoning_tokens)
    j["completion_tokens_details"] = {{"reasoning_tokens", *u.reasoning_tokens}};
  if (u.rewind) {
    const RewindUsage& r = *u.rewind;
    // Milliseconds to 0.01: enough for a person, and short.
    auto ms = [](double v) { return std::round(v * 100) / 100; };
    j["rewind"] = {{"cached_tokens", u.cached_tokens},
                   {"rerun_tokens", r.rerun_tokens},
                   {"diverged_at", r.diverged_at},
                   {"resumed_at", r.resumed_at},
                   {"lost_to_spacing", r.lost_to_spacing},
                   {"tier_tokens", r.tier_tokens},
                   {"hit", r.hit},
                   {"ttft_ms", ms(r.ttft_ms)},
                   {"decode_ms", ms(r.decode_ms)}};
  }
  return j;
}

namespace {

json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

}  // namespace

json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const auto& lp : lps) {
    const std::string s = tok.token_bytes(lp.token);
    json top = json::array();
    for (const auto& [id, l] : lp.top) {
      const std::string ts = tok.token_bytes(id);
      top.push_back({{"token", ts}, {"logprob", l}, {"bytes", bytes_of(ts)}});
    }
    content.push_back({{"token", s},
                       {"logprob", lp.logprob},
                       {"bytes", bytes_of(s)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

namespace {
bool utf8_continuation(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}
}  // namespace

int64_t utf8_chars(std::string_view bytes) {
  int64_t n = 0;
  for (const char c : bytes) n += !utf8_continuation(c);
  return n;
}

json completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                              bool with_top, int64_t offset0) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  int64_t off = offset0;
  for (const auto& lp : lps) {
    const std::string s = tok.token_bytes(lp.token);
    tokens.push_back(s);
    token_lps.push_back(lp.logprob);
    // The character its first byte belongs to: one that started in an earlier token when the
    // token begins with a continuation byte (byte-level tokens split characters).
    const bool inside = !s.empty() && utf8_continuation(s[0]);
    offsets.push_back(std::max<int64_t>(0, off - (inside ? 1 : 0)));
    off += utf8_chars(s);
    if (with_top) {
      // Keyed by token text (dump_json replaces invalid UTF-8 in keys as in values). Two
      // alternatives whose bytes are equal cannot occur: token bytes are unique per id.
      json t = json::object();
      for (const auto& [id, l] : lp.top) t[tok.token_bytes(id)] = l;
      tops.push_back(std::move(t));
    }
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", with_top ? std::move(tops) : json(nullptr)},
          {"text_offset", std::move(offsets)}};
}

// ---- tool calls ----

namespace {
// The opening tags of the tool-call formats the chat layer parses (<tool_call>, <TOOLCALL>).
const std::vector<std::string>& markers() {
  static const std::vector<std::string> m = tool_call_markers();
  return m;
}

// The parser numbers calls by position (call_0, call_1, ...); a reply's ids must differ from
// every other reply's, since clients key tool results on them across a conversation.
void fill_ids(std::vector<ToolCall>& calls) {
  for (auto& c : calls) c.id = random_id("call_");
}
}  // namespace

static std::vector<ToolCall> parse_calls(const std::string& text, std::string* content,
                                         const json& tools) {
  return tools.is_array() ? parse_tool_calls(text, content, tools)
                          : parse_tool_calls(text, content);
}

ToolCallSplitter::ToolCallSplitter(json tools) : marker_(markers()), tools_(std::move(tools)) {}

std::string ToolCallSplitter::push(std::string_view text) {
  return marker_.push(text);
}

std::pair<std::string, std::vector<ToolCall>> ToolCallSplitter::finish() {
  if (!marker_.stopped()) return {marker_.flush(), {}};
  const std::string tail = markers()[static_cast<size_t>(marker_.matched_index())] + marker_.rest();
  std::string content;
  std::vector<ToolCall> calls = parse_calls(tail, &content, tools_);
  if (calls.empty()) return {tail, {}};
  fill_ids(calls);
  return {content, std::move(calls)};
}

std::pair<std::string, std::vector<ToolCall>> split_tool_calls(const std::string& text,
                                                               bool parse_tools,
                                                               const json& tools) {
  if (!parse_tools || std::none_of(markers().begin(), markers().end(), [&](const std::string& m) {
        return text.find(m) != std::string::npos;
      }))
    return {text, {}};
  std::string content;
  std::vector<ToolCall> calls = parse_calls(text, &content, tools);
  if (calls.empty()) return {text, {}};
  fill_ids(calls);
  return {content, std::move(calls)};
}

std::string chat_finish_reason(const std::string& engine_finish, bool has_calls) {
  return has_calls && engine_finish != "length" ? "tool_calls" : engine_finish;
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  json a = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments_json}}}};
    if (with_index) c["index"] = i;
    a.push_back(std::move(c));
  }
  return a;
}

// ---- whole responses and chunks ----

namespace {

// {"id", "object", "created", "model", "choices": [choice]} (+ "usage" when given).
json envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
              json choices, const UsageCounts* usage) {
  json j = {{"id", id},
            {"object", object},
            {"created", created},
            {"model", model},
            {"choices", std::move(choices)}};
  if (usage) j["usage"] = usage_json(*usage);
  return j;
}

// One choice: [{"index", key: value, "logprobs", "finish_reason"}].
json one_choice(const char* key, json value, const json& logprobs, const json& finish_reason,
                int index = 0) {
  return json::array({{{"index", index},
                       {key, std::move(value)},
                       {"logprobs", logprobs},
                       {"finish_reason", finish_reason}}});
}

}  // namespace

json chat_completion_json(const std::string& id, int64_t created, const std::string& model,
                          const std::string& content, const std::vector<ToolCall>& calls,
                          const std::string& finish_reason, const json& logprobs,
                          const UsageCounts& usage, const std::string& reasoning) {
  json msg = {{"role", "assistant"},
              {"content", content.empty() && !calls.empty() ? json(nullptr) : json(content)}};
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = tool_calls_json(calls, false);
  return envelope(id, "chat.completion", created, model,
                  one_choice("message", std::move(msg), logprobs, finish_reason), &usage);
}

json chat_chunk_json(const std::string& id, int64_t created, const std::string& model,
                     const json& delta, const json& finish_reason, const json& logprobs,
                     int index) {
  return envelope(id, "chat.completion.chunk", created, model,
                  one_choice("delta", delta, logprobs, finish_reason, index), nullptr);
}

json chat_usage_chunk_json(const std::string& id, int64_t created, const std::string& model,
                           const UsageCounts& usage) {
  return envelope(id, "chat.completion.chunk", created, model, json::array(), &usage);
}

json completion_json(const std::string& id, int64_t created, const std::string& model,
                     const std::string& text, const std::string& finish_reason,
                     const json& logprobs, const UsageCounts& usage) {
  return envelope(id, "text_completion", created, model,
                  one_choice("text", text, logprobs, finish_reason), &usage);
}

json completion_chunk_json(const std::string& id, int64_t created, const std::string& model,
                           const std::string& text, const json& finish_reason, const json& logprobs,
                           int index) {
  return envelope(id, "text_completion", created, model,
                  one_choice("text", text, logprobs, finish_reason, index), nullptr);
}

json merge_choices(std::vector<json> bodies) {
  json out = std::move(bodies.at(0));
  for (size_t i = 1; i < bodies.size(); ++i) {
    json c = std::move(bodies[i]["choices"][0]);
    c["index"] = i;
    out["choices"].push_back(std::move(c));
  }
  return out;
}

json completion_usage_chunk_json(const std::string& id, int64_t created, const std::string& model,
                                 const UsageCounts& usage) {
  return envelope(id, "text_completion", created, model, json::array(), &usage);
}

std::string sse_event(const json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace rw
