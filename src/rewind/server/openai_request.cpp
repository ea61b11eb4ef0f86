#include "rewind/server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <set>

#include "rewind/grammar/json_schema.h"

namespace rw {

namespace {

// Ordered: tools keep the client's key order, as Hugging Face renders them.
using json = nlohmann::ordered_json;

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "value";
}

// A number or boolean is shown with its value: "must be an integer (got number 3.0)".
Error type_error(const std::string& field, const char* want, const json& got) {
  std::string m = "'" + field + "' must be " + want + " (got " + type_name(got);
  if (got.is_number() || got.is_boolean()) m.append(" ").append(got.dump());
  return make_error(m + ")");
}

// Nesting depth of JSON text and its count of values and of containers, counting outside
// strings (values: one more than the commas, plus the containers). A cheap guard before parsing
// (the parser itself is iterative, but every later walk of the tree is recursive, and the tree's
// size is bounded by the counts: kJsonTreeFactor).
struct JsonShape {
  int depth = 0;
  int64_t values = 1, containers = 0;
};
JsonShape json_shape(std::string_view s) {
  JsonShape r;
  int depth = 0;
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc) {
        esc = false;
      } else if (c == '\\') {
        esc = true;
      } else if (c == '"') {
        in_str = false;
      }
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      r.depth = std::max(r.depth, ++depth);
      ++r.containers;
      ++r.values;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',') {
      ++r.values;
    }
  }
  return r;
}

Result<json> parse_object(std::string_view body, const Limits& lim) {
  if (body.empty()) return make_error("request body is empty (expected a JSON object)");
  const JsonShape shape = json_shape(body);
  if (shape.depth > lim.max_json_depth)
    return make_error("request JSON is nested deeper than " + std::to_string(lim.max_json_depth) +
                      " levels");
  const int64_t n = static_cast<int64_t>(body.size());
  if (shape.values > 1024 + n / 4 || shape.containers > 64 + n / 24)
    return make_error("request JSON has too many values for its size (" +
                      std::to_string(shape.values) + " values, " +
                      std::to_string(shape.containers) + " objects and arrays in " +
                      std::to_string(n) + " bytes; at most 1024 + bytes/4 and 64 + bytes/24)");
  // Linear time however many keys an object has (nlohmann's ordered parser is quadratic).
  auto parsed = parse_json_ordered(body);
  if (!parsed.ok())
    return make_error("request body is not valid JSON (" + parsed.error_message() + ")");
  json j = std::move(parsed).value();
  if (!j.is_object())
    return make_error("request body must be a JSON object (got " + type_name(j) + ")");
  return j;
}

// The field's value, or nullptr when absent or null.
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<int64_t> get_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return make_error("'" + name + "' must be at most " + std::to_string(hi));
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9.2e18) {
    x = static_cast<int64_t>(v.get<double>());  // 3.0 or 1e3: an integer written as a float
  } else {
    return type_error(name, "an integer", v);
  }
  if (x < lo || x > hi)
    return make_error("'" + name + "' must be in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "] (got " + std::to_string(x) + ")");
  return x;
}

Result<double> get_num(const json& v, const std::string& name, double lo, double hi,
                       bool lo_open = false) {
  if (!v.is_number()) return type_error(name, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
    return make_error("'" + name + "' must be in " + std::string(lo_open ? "(" : "[") +
                      json(lo).dump() + ", " + json(hi).dump() + "] (got " + v.dump() + ")");
  return x;
}

Result<bool> get_bool(const json& v, const std::string& name) {
  if (!v.is_boolean()) return type_error(name, "a boolean", v);
  return v.get<bool>();
}

Result<std::string> get_str(const json& v, const std::string& name) {
  if (!v.is_string()) return type_error(name, "a string", v);
  return v.get<std::string>();
}

// OpenAI's logit_bias: {"<token id>": bias}, ids as decimal strings below the vocabulary size,
// biases in [-100, 100] (as OpenAI; not clamped), each id once.
Result<std::vector<std::pair<int32_t, float>>> parse_logit_bias(const json& v, const Limits& lim) {
  if (!v.is_object()) return type_error("logit_bias", "an object of token ids to numbers", v);
  std::vector<std::pair<int32_t, float>> out;
  std::set<int64_t> seen;
  const int64_t hi = lim.vocab_size > 0 ? lim.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    const std::string shown = key.size() > 20 ? key.substr(0, 20) + "..." : key;
    const std::string name = "logit_bias[\"" + shown + "\"]";
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (!digits) return make_error("'logit_bias' keys must be token ids (got \"" + shown + "\")");
    const int64_t id = std::stoll(key);
    if (id > hi)
      return make_error("'logit_bias': token id " + key + " is out of range [0, " +
                        std::to_string(hi) + "]");
    if (!seen.insert(id).second)
      return make_error("'logit_bias': token id " + std::to_string(id) + " is given twice");
    if (it->is_null()) return type_error(name, "a number", *it);
    REWIND_TRY(double b, get_num(*it, name, -100.0, 100.0));
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return out;
}

// Top-level keys of `j` that are not in `known`, in the client's order.
std::vector<std::string> unknown_fields(const json& j, std::initializer_list<const char*> known) {
  std::vector<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool k = false;
    for (const char* name : known) k = k || it.key() == name;
    if (!k) out.push_back(it.key());
  }
  return out;
}

#define REWIND_COMMON_FIELDS                                                                      \
  "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n_predict",        \
      "temperature", "top_p", "top_k", "min_p", "seed", "n", "best_of", "presence_penalty",       \
      "frequency_penalty", "repetition_penalty", "repeat_penalty", "repeat_last_n", "logit_bias", \
      "stop", "speculative", "ignore_eos", "logprobs", "top_logprobs", "response_format",         \
      "grammar", "json_schema"

// Fields both endpoints share. `chat` selects the chat meaning of logprobs (a boolean plus
// top_logprobs) over the completions one (an integer count of alternatives).
Status parse_common(const json& j, const Limits& lim, bool chat, CommonRequest* out) {
  if (const json* v = field(j, "model")) {
    REWIND_TRY(out->model, get_str(*v, "model"));
  }
  if (const json* v = field(j, "stream")) {
    REWIND_TRY(out->stream, get_bool(*v, "stream"));
  }
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) return type_error("stream_options", "an object", *v);
    if (!out->stream) return make_error("'stream_options' is only allowed when 'stream' is true");
    if (const json* u = field(*v, "include_usage")) {
      REWIND_TRY(out->include_usage, get_bool(*u, "stream_options.include_usage"));
    }
  }
  const int64_t max_tok_hi = std::min<int64_t>(lim.max_tokens > 0 ? lim.max_tokens : lim.ctx_size,
                                               std::numeric_limits<int32_t>::max());
  // llama.cpp's n_predict is a third spelling; its -1 and -2 (to the context's end) mean unset.
  for (const char* name : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    if (const json* v = field(j, name)) {
      const bool llama = std::string_view(name) == "n_predict";
      if (llama && v->is_number_integer() && (v->get<int64_t>() == -1 || v->get<int64_t>() == -2))
        continue;
      auto got = get_int(*v, name, 1, max_tok_hi);
      if (!got.ok())
        return make_error(got.error_message() + (llama ? " (or -1: the server's default)" : ""));
      const int64_t n = got.value();
      if (out->max_tokens && *out->max_tokens != n)
        return make_error("'max_tokens', 'max_completion_tokens' and 'n_predict' disagree");
      out->max_tokens = static_cast<int32_t>(n);
    }
  }
  SamplingOverrides& s = out->sampling;
  if (const json* v = field(j, "temperature")) {
    REWIND_TRY(s.temperature, get_num(*v, "temperature", 0.0, 2.0));
  }
  if (const json* v = field(j, "top_p")) {
    REWIND_TRY(s.top_p, get_num(*v, "top_p", 0.0, 1.0));  // 0: the most likely token only
  }
  if (const json* v = field(j, "min_p")) {
    REWIND_TRY(s.min_p, get_num(*v, "min_p", 0.0, 1.0));
  }
  if (const json* v = field(j, "top_k")) {
    REWIND_TRY(int64_t k, get_int(*v, "top_k", -1, std::numeric_limits<int32_t>::max()));
    s.top_k = static_cast<int32_t>(k < 0 ? 0 : k);
  }
  if (const json* v = field(j, "seed")) {
    if (v->is_number_unsigned()) {
      s.seed = v->get<uint64_t>();
    } else if (v->is_number_integer()) {
      s.seed = static_cast<uint64_t>(v->get<int64_t>());
    } else {
      return type_error("seed", "an integer", *v);
    }
  }
  if (const json* v = field(j, "n")) {
    auto got = get_int(*v, "n", 1, lim.max_choices);
    if (!got.ok() && lim.max_choices < Limits::kMaxChoices && v->is_number_integer() &&
        v->get<int64_t>() > 1 && v->get<int64_t>() <= Limits::kMaxChoices) {
      std::string m = got.error_message();
      m.append(": the server runs ").append(std::to_string(lim.max_choices));
      m.append(lim.max_choices == 1 ? " sequence" : " sequences").append(" at once (--parallel)");
      return make_error(m);
    }
    REWIND_TRY(int64_t n, std::move(got));
    out->n = static_cast<int32_t>(n);
  }
  if (const json* v = field(j, "best_of")) {
    REWIND_TRY(int64_t n, get_int(*v, "best_of", 1, std::numeric_limits<int32_t>::max()));
    if (n != 1) return make_error("'best_of' must be 1 (not supported)");
  }
  if (const json* v = field(j, "presence_penalty")) {
    REWIND_TRY(s.presence_penalty, get_num(*v, "presence_penalty", -2.0, 2.0));
  }
  if (const json* v = field(j, "frequency_penalty")) {
    REWIND_TRY(s.frequency_penalty, get_num(*v, "frequency_penalty", -2.0, 2.0));
  }
  // llama.cpp's request spells it repeat_penalty (the same penalty over repeat_last_n tokens).
  for (const char* name : {"repetition_penalty", "repeat_penalty"}) {
    if (const json* v = field(j, name)) {
      const auto before = s.repetition_penalty;
      REWIND_TRY(s.repetition_penalty, get_num(*v, name, 0.0, 10.0, true));
      if (before && *before != *s.repetition_penalty)
        return make_error("'repetition_penalty' and 'repeat_penalty' disagree");
    }
  }
  if (const json* v = field(j, "repeat_last_n")) {
    REWIND_TRY(int64_t n, get_int(*v, "repeat_last_n", -1, std::numeric_limits<int32_t>::max()));
    s.repeat_last_n = static_cast<int32_t>(n);
  }
  if (const json* v = field(j, "logit_bias")) {
    REWIND_TRY(s.logit_bias, parse_logit_bias(*v, lim));
  }
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      out->stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (static_cast<int64_t>(v->size()) > lim.max_stop)
        return make_error("'stop' has " + std::to_string(v->size()) + " sequences; at most " +
                          std::to_string(lim.max_stop) + " are allowed");
      for (size_t i = 0; i < v->size(); ++i) {
        REWIND_TRY(std::string s1, get_str((*v)[i], "stop[" + std::to_string(i) + "]"));
        out->stop.push_back(std::move(s1));
      }
    } else {
      return type_error("stop", "a string or an array of strings", *v);
    }
    for (const auto& s1 : out->stop) {
      if (s1.empty()) return make_error("'stop' sequences must not be empty");
      if (s1.size() > lim.max_stop_bytes)
        return make_error("a 'stop' sequence is longer than " + std::to_string(lim.max_stop_bytes) +
                          " bytes");
    }
  }
  if (const json* v = field(j, "speculative")) {
    const json* method = v;
    if (v->is_object()) {
      method = field(*v, "method");
      if (!method) return make_error("'speculative' needs a 'method' (off, ngram, draft, mtp)");
      if (const json* k = field(*v, "k")) {
        REWIND_TRY(int64_t n, get_int(*k, "speculative.k", 1, 16));
        out->speculative_k = static_cast<int32_t>(n);
      }
    } else if (v->is_boolean()) {
      if (v->get<bool>())
        return make_error("'speculative': true is ambiguous: name a method (ngram, draft, mtp)");
      out->speculative = "off";
      method = nullptr;
    }
    if (method) {
      REWIND_TRY(out->speculative,
                 get_str(*method, v->is_object() ? "speculative.method" : "speculative"));
      if (out->speculative != "off" && out->speculative != "ngram" && out->speculative != "draft" &&
          out->speculative != "mtp")
        return make_error("'speculative' method '" + out->speculative +
                          "' is not one of off, ngram, draft, mtp");
    }
  }
  if (const json* v = field(j, "ignore_eos")) {
    REWIND_TRY(out->ignore_eos, get_bool(*v, "ignore_eos"));
  }
  if (chat) {
    if (const json* v = field(j, "logprobs")) {
      REWIND_TRY(out->logprobs, get_bool(*v, "logprobs"));
    }
    if (const json* v = field(j, "top_logprobs")) {
      REWIND_TRY(int64_t n, get_int(*v, "top_logprobs", 0, lim.max_top_logprobs));
      if (!out->logprobs && n > 0) return make_error("'top_logprobs' requires 'logprobs': true");
      out->top_logprobs = static_cast<int32_t>(n);
    }
  } else {
    if (const json* v = field(j, "logprobs")) {
      if (v->is_boolean()) return type_error("logprobs", "an integer", *v);
      REWIND_TRY(int64_t n, get_int(*v, "logprobs", 0, lim.max_top_logprobs));
      out->logprobs = true;
      out->top_logprobs = static_cast<int32_t>(n);
    }
  }
  return Ok{};
}

// Message content: a string, or an array of parts of which only {"type":"text"} is served. Each
// part's text follows a newline once the text so far is not empty, as llama.cpp's server joins
// them (words of adjacent parts would otherwise run together).
Result<std::string> parse_content(const json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return type_error(where, "a string or an array of content parts", v);
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string pw = where + "[" + std::to_string(i) + "]";
    const json& part = v[i];
    if (!text.empty()) text += '\n';
    if (part.is_string()) {  // lenient: a bare string part
      text += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) return type_error(pw, "a content part object", part);
    const json* t = field(part, "type");
    if (!t) return make_error("'" + pw + ".type' is required");
    REWIND_TRY(std::string type, get_str(*t, pw + ".type"));
    if (type != "text")
      return make_error("'" + pw + "': content part type '" + type +
                        "' is not supported (rewind serves text-only models; send text parts)");
    const json* tx = field(part, "text");
    if (!tx) return make_error("'" + pw + ".text' is required");
    REWIND_TRY(std::string s, get_str(*tx, pw + ".text"));
    text += s;
  }
  return text;
}

Result<ToolCall> parse_tool_call(const json& v, const std::string& where) {
  if (!v.is_object()) return type_error(where, "an object", v);
  ToolCall tc;
  if (const json* id = field(v, "id")) {
    REWIND_TRY(tc.id, get_str(*id, where + ".id"));
  }
  if (const json* t = field(v, "type")) {
    REWIND_TRY(std::string type, get_str(*t, where + ".type"));
    if (type != "function") return make_error("'" + where + ".type' must be \"function\"");
  }
  const json* f = field(v, "function");
  if (!f) return make_error("'" + where + ".function' is required");
  if (!f->is_object()) return type_error(where + ".function", "an object", *f);
  const json* name = field(*f, "name");
  if (!name) return make_error("'" + where + ".function.name' is required");
  REWIND_TRY(tc.name, get_str(*name, where + ".function.name"));
  if (const json* a = field(*f, "arguments")) {
    if (a->is_string()) {
      tc.arguments_json = a->get<std::string>();
      const json parsed = json::parse(tc.arguments_json, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object())
        return make_error("'" + where +
                          ".function.arguments' must be a JSON object encoded as a string");
    } else if (a->is_object()) {  // lenient: an object instead of its text
      tc.arguments_json = a->dump();
    } else {
      return type_error(where + ".function.arguments", "a string", *a);
    }
  } else {
    tc.arguments_json = "{}";
  }
  return tc;
}

Result<ChatMessage> parse_message(const json& v, const std::string& where) {
  if (!v.is_object()) return type_error(where, "an object", v);
  ChatMessage m;
  const json* role = field(v, "role");
  if (!role) return make_error("'" + where + ".role' is required");
  REWIND_TRY(m.role, get_str(*role, where + ".role"));
  if (m.role == "developer") m.role = "system";  // OpenAI's newer name for the system role
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
    return make_error("'" + where +
                      ".role' must be system, developer, user, assistant or tool (got '" + m.role +
                      "')");
  if (const json* c = field(v, "content")) {
    REWIND_TRY(m.content, parse_content(*c, where + ".content"));
  } else if (m.role != "assistant") {
    return make_error("'" + where + ".content' is required for role '" + m.role + "'");
  }
  for (const char* audio : {"audio", "input_audio"})
    if (field(v, audio))
      return make_error("'" + where + "." + audio + "' is not supported (text only)");
  if (const json* r = field(v, "reasoning_content")) {
    REWIND_TRY(m.reasoning_content, get_str(*r, where + ".reasoning_content"));
  }
  if (const json* n = field(v, "name")) {
    REWIND_TRY(m.name, get_str(*n, where + ".name"));
  }
  if (const json* tc = field(v, "tool_calls")) {
    if (m.role != "assistant")
      return make_error("'" + where + ".tool_calls' is only allowed for role 'assistant'");
    if (!tc->is_array()) return type_error(where + ".tool_calls", "an array", *tc);
    for (size_t i = 0; i < tc->size(); ++i) {
      REWIND_TRY(ToolCall call,
                 parse_tool_call((*tc)[i], where + ".tool_calls[" + std::to_string(i) + "]"));
      m.tool_calls.push_back(std::move(call));
    }
  }
  if (const json* id = field(v, "tool_call_id")) {
    REWIND_TRY(m.tool_call_id, get_str(*id, where + ".tool_call_id"));
  }
  if (m.role == "tool" && m.tool_call_id.empty() && m.name.empty())
    return make_error("'" + where + ".tool_call_id' is required for role 'tool'");
  return m;
}

Status parse_tools(const json& j, ParsedChatRequest* out) {
  const json* tools = field(j, "tools");
  if (tools) {
    if (!tools->is_array()) return type_error("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string w = "tools[" + std::to_string(i) + "]";
      const json& t = (*tools)[i];
      if (!t.is_object()) return type_error(w, "an object", t);
      const json* type = field(t, "type");
      if (!type) return make_error("'" + w + ".type' is required");
      REWIND_TRY(std::string ty, get_str(*type, w + ".type"));
      if (ty != "function")
        return make_error("'" + w + ".type' must be \"function\" (got '" + ty + "')");
      const json* f = field(t, "function");
      if (!f) return make_error("'" + w + ".function' is required");
      if (!f->is_object()) return type_error(w + ".function", "an object", *f);
      const json* name = field(*f, "name");
      if (!name) return make_error("'" + w + ".function.name' is required");
      REWIND_TRY(std::string nm, get_str(*name, w + ".function.name"));
      if (nm.empty()) return make_error("'" + w + ".function.name' must not be empty");
      if (const json* d = field(*f, "description")) {
        REWIND_TRY(std::string desc, get_str(*d, w + ".function.description"));
      }
      if (const json* p = field(*f, "parameters"))
        if (!p->is_object()) return type_error(w + ".function.parameters", "an object", *p);
      if (const json* st = field(*f, "strict")) {
        REWIND_TRY(const bool strict, get_bool(*st, w + ".function.strict"));
        (void)strict;
      }
    }
    if (!tools->empty()) out->tools = *tools;
  }
  bool choice_none = false;
  if (const json* c = field(j, "tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none") {
        choice_none = true;
      } else if (s == "required") {
        out->tool_required = true;
      } else if (s != "auto") {
        return make_error(
            "'tool_choice' must be \"auto\", \"none\", \"required\" or an object "
            "naming a function (got '" +
            s + "')");
      }
    } else if (c->is_object()) {
      const json* type = field(*c, "type");
      if (!type) return make_error("'tool_choice.type' is required");
      REWIND_TRY(std::string ty, get_str(*type, "tool_choice.type"));
      if (ty != "function")
        return make_error("'tool_choice.type' must be \"function\" (got '" + ty + "')");
      const json* f = field(*c, "function");
      if (!f) return make_error("'tool_choice.function' is required");
      if (!f->is_object()) return type_error("tool_choice.function", "an object", *f);
      const json* name = field(*f, "name");
      if (!name) return make_error("'tool_choice.function.name' is required");
      REWIND_TRY(out->tool_choice_name, get_str(*name, "tool_choice.function.name"));
      bool found = false;
      if (out->tools.is_array())
        for (const auto& t : out->tools)
          found = found || t["function"]["name"] == out->tool_choice_name;
      if (!found)
        return make_error("'tool_choice' names function '" + out->tool_choice_name +
                          "', which is not among 'tools'");
      out->tool_required = true;
    } else {
      return type_error("tool_choice", "a string or an object", *c);
    }
  }
  if (out->tool_required && out->tools.is_null())
    return make_error("'tool_choice' requires a tool call but no 'tools' are given");
  if (const json* p = field(j, "parallel_tool_calls")) {
    REWIND_TRY(out->parallel_tool_calls, get_bool(*p, "parallel_tool_calls"));
  }
  out->parse_tools = !out->tools.is_null() && !choice_none;
  return Ok{};
}

// Structured output: response_format (json_object / json_schema, compiled to GBNF here so that
// a refused schema keyword is this request's 400) or the `grammar` extension (GBNF, parsed by
// the server, which owns the compiled grammars).
Status parse_structured(const json& j, CommonRequest* out) {
  const json* rf = field(j, "response_format");
  const json* g = field(j, "grammar");
  if (rf) {
    if (!rf->is_object()) return type_error("response_format", "an object", *rf);
    const json* t = field(*rf, "type");
    if (!t) return make_error("'response_format.type' is required");
    REWIND_TRY(std::string ty, get_str(*t, "response_format.type"));
    auto gbnf = response_format_to_gbnf(*rf, &out->schema_relaxed);
    if (!gbnf.ok()) return make_error(gbnf.error_message());
    if (gbnf.value()) {
      out->grammar = std::move(*gbnf.value());
      out->grammar_from = "response_format";
    }
  }
  // llama.cpp's json_schema: a schema at the top level, as response_format json_object with
  // that schema.
  if (const json* js = field(j, "json_schema")) {
    if (!js->is_object()) return type_error("json_schema", "an object", *js);
    if (!out->grammar.empty())
      return make_error("'json_schema' and a 'response_format' other than text cannot be combined");
    std::vector<std::string> notes;  // relaxed as response_format json_object's schema is
    REWIND_TRY(out->grammar, json_schema_to_gbnf(relax_json_schema(*js, &notes)));
    for (std::string& n : notes) out->schema_relaxed.push_back("json_schema: " + std::move(n));
    out->grammar_from = "json_schema";
  }
  if (g) {
    REWIND_TRY(std::string text, get_str(*g, "grammar"));
    if (!text.empty()) {
      if (!out->grammar.empty())
        return make_error("'grammar' cannot be combined with '" + out->grammar_from +
                          "' (one constraint a request)");
      out->grammar = std::move(text);
      out->grammar_from = "grammar";
    }
  }
  return Ok{};
}

}  // namespace

Result<ParsedChatRequest> parse_chat_request(std::string_view body, const Limits& limits) {
  REWIND_TRY(json j, parse_object(body, limits));
  ParsedChatRequest out;
  REWIND_TRY_STATUS(parse_common(j, limits, /*chat=*/true, &out));
  const json* msgs = field(j, "messages");
  if (!msgs) return make_error("'messages' is required");
  if (!msgs->is_array()) return type_error("messages", "an array", *msgs);
  if (msgs->empty()) return make_error("'messages' must not be empty");
  if (msgs->size() > limits.max_messages)
    return make_error("'messages' has more than " + std::to_string(limits.max_messages) +
                      " entries");
  for (size_t i = 0; i < msgs->size(); ++i) {
    REWIND_TRY(ChatMessage m, parse_message((*msgs)[i], "messages[" + std::to_string(i) + "]"));
    out.messages.push_back(std::move(m));
  }
  for (const char* media : {"modalities", "audio"}) {
    if (const json* v = field(j, media)) {
      if (std::string(media) == "modalities" && v->is_array()) {
        for (const auto& m : *v)
          if (!m.is_string() || m.get<std::string>() != "text")
            return make_error("'modalities' other than \"text\" are not supported");
      } else {
        return make_error(std::string("'") + media + "' is not supported (text only)");
      }
    }
  }
  REWIND_TRY_STATUS(parse_tools(j, &out));
  REWIND_TRY_STATUS(parse_structured(j, &out));
  if (out.tool_required && !out.grammar.empty())
    return make_error("a forced tool call ('tool_choice') cannot be combined with '" +
                      out.grammar_from + "'");
  out.ignored_fields = unknown_fields(
      j, {REWIND_COMMON_FIELDS, "messages", "modalities", "audio", "tools", "tool_choice",
          "parallel_tool_calls", "response_format", "chat_template_kwargs", "reasoning_format"});
  if (const json* v = field(j, "reasoning_format")) {
    REWIND_TRY(std::string f, get_str(*v, "reasoning_format"));
    bool split = true;
    if (!parse_reasoning_format(f, &split))
      return make_error("'reasoning_format' must be none, deepseek or auto (got '" +
                        f.substr(0, 40) + "')");
    out.split_reasoning = split ? 1 : 0;
  }
  if (const json* k = field(j, "chat_template_kwargs")) {
    if (!k->is_object()) return type_error("chat_template_kwargs", "an object", *k);
    for (auto it = k->begin(); it != k->end(); ++it) {
      if (it.key() == "enable_thinking") {
        if (it->is_null()) continue;
        REWIND_TRY(bool b, get_bool(*it, "chat_template_kwargs.enable_thinking"));
        out.enable_thinking = b ? 1 : 0;
      } else {
        return make_error("'chat_template_kwargs." + it.key() +
                          "' is not supported (only enable_thinking)");
      }
    }
  }
  return out;
}

Result<ParsedCompletionRequest> parse_completion_request(std::string_view body,
                                                         const Limits& limits) {
  REWIND_TRY(json j, parse_object(body, limits));
  ParsedCompletionRequest out;
  REWIND_TRY_STATUS(parse_common(j, limits, /*chat=*/false, &out));
  REWIND_TRY_STATUS(parse_structured(j, &out));
  const json* p = field(j, "prompt");
  if (!p) return make_error("'prompt' is required");
  auto tokens_of = [&](const json& arr, const std::string& where) -> Result<CompletionPrompt> {
    if (arr.empty()) return make_error("'" + where + "' must not be empty");
    CompletionPrompt cp;
    cp.tokens = true;
    cp.ids.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
      const int64_t hi =
          limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
      REWIND_TRY(int64_t id, get_int(arr[i], where + "[" + std::to_string(i) + "]", 0, hi));
      cp.ids.push_back(static_cast<int32_t>(id));
    }
    return cp;
  };
  auto text_of = [&](const json& t, const std::string& where) -> Result<CompletionPrompt> {
    CompletionPrompt cp;
    cp.text = t.get<std::string>();
    if (cp.text.empty()) return make_error("'" + where + "' must not be empty");
    return cp;
  };
  if (p->is_string()) {
    REWIND_TRY(CompletionPrompt cp, text_of(*p, "prompt"));
    out.prompts.push_back(std::move(cp));
  } else if (p->is_array()) {
    if (p->empty()) return make_error("'prompt' must not be an empty array");
    const json& first = (*p)[0];
    if (first.is_string() || first.is_array()) {  // a batch of prompts
      if (p->size() > ParsedCompletionRequest::kMaxBatchPrompts)
        return make_error("'prompt' holds " + std::to_string(p->size()) + " prompts; at most " +
                          std::to_string(ParsedCompletionRequest::kMaxBatchPrompts) +
                          " in one request");
      for (size_t i = 0; i < p->size(); ++i) {
        const json& e = (*p)[i];
        const std::string where = "prompt[" + std::to_string(i) + "]";
        if (e.is_string()) {
          REWIND_TRY(CompletionPrompt cp, text_of(e, where));
          out.prompts.push_back(std::move(cp));
        } else if (e.is_array()) {
          REWIND_TRY(CompletionPrompt cp, tokens_of(e, where));
          out.prompts.push_back(std::move(cp));
        } else {
          return type_error(where, "a string or an array of integers", e);
        }
      }
    } else if (first.is_number_integer()) {
      REWIND_TRY(CompletionPrompt cp, tokens_of(*p, "prompt"));
      out.prompts.push_back(std::move(cp));
    } else {
      return type_error("prompt[0]", "a string, an integer or an array of integers", first);
    }
  } else {
    return type_error("prompt", "a string or an array", *p);
  }
  if (const json* e = field(j, "echo")) {
    REWIND_TRY(out.echo, get_bool(*e, "echo"));
    if (out.echo && out.logprobs)
      return make_error(
          "'echo' with 'logprobs' (the prompt's log-probabilities) is not supported; 'echo' "
          "alone is");
  }
  if (const json* s = field(j, "suffix")) {
    REWIND_TRY(std::string sfx, get_str(*s, "suffix"));
    if (!sfx.empty()) return make_error("'suffix' is not supported");
  }
  out.ignored_fields = unknown_fields(j, {REWIND_COMMON_FIELDS, "prompt", "echo", "suffix"});
  return out;
}

Result<TokenizeRequest> parse_tokenize_request(std::string_view body, const Limits& limits) {
  REWIND_TRY(json j, parse_object(body, limits));
  TokenizeRequest out;
  if (const json* v = field(j, "model")) {
    REWIND_TRY(out.model, get_str(*v, "model"));
  }
  const json* c = field(j, "content");
  if (!c) return make_error("'content' is required");
  REWIND_TRY(out.content, get_str(*c, "content"));
  if (const json* v = field(j, "add_special")) {
    REWIND_TRY(out.add_special, get_bool(*v, "add_special"));
  }
  if (const json* v = field(j, "parse_special")) {
    REWIND_TRY(out.parse_special, get_bool(*v, "parse_special"));
  }
  if (const json* v = field(j, "with_pieces")) {
    REWIND_TRY(out.with_pieces, get_bool(*v, "with_pieces"));
  }
  out.ignored_fields =
      unknown_fields(j, {"model", "content", "add_special", "parse_special", "with_pieces"});
  return out;
}

Result<DetokenizeRequest> parse_detokenize_request(std::string_view body, const Limits& limits) {
  REWIND_TRY(json j, parse_object(body, limits));
  DetokenizeRequest out;
  if (const json* v = field(j, "model")) {
    REWIND_TRY(out.model, get_str(*v, "model"));
  }
  const json* t = field(j, "tokens");
  if (!t) return make_error("'tokens' is required");
  if (!t->is_array()) return type_error("tokens", "an array of token ids", *t);
  if (static_cast<int64_t>(t->size()) > limits.ctx_size)
    return make_error("'tokens' has " + std::to_string(t->size()) + " ids; at most " +
                      std::to_string(limits.ctx_size) + " (the context size) are allowed");
  const int64_t hi =
      limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  out.tokens.reserve(t->size());
  for (size_t i = 0; i < t->size(); ++i) {
    REWIND_TRY(int64_t id, get_int((*t)[i], "tokens[" + std::to_string(i) + "]", 0, hi));
    out.tokens.push_back(static_cast<int32_t>(id));
  }
  out.ignored_fields = unknown_fields(j, {"model", "tokens"});
  return out;
}

namespace {
// SAX events of a JSON text: keeps the last top-level "model" string, builds no tree.
class ModelPeek : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string model;
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t& s) override {
    if (depth_ == 1 && at_model_) model = s;
    return value();
  }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    at_model_ = depth_ == 1 && k == "model";
    if (at_model_) model.clear();  // a later non-string "model" replaces an earlier string
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool value() {
    if (depth_ == 1) at_model_ = false;
    return true;
  }
  bool open() {
    ++depth_;
    if (depth_ == 2) at_model_ = false;  // a container value of "model" is not a name
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  bool at_model_ = false;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string peek_model_name(std::string_view body) {
  ModelPeek peek;
  const bool ok = nlohmann::json::sax_parse(body, &peek);
  return ok ? peek.model : std::string();
}

Result<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '+' && plus_is_space) {
      out += ' ';
    } else if (s[k] != '%') {
      out += s[k];
    } else {
      const int hi = k + 2 < s.size() ? hex_digit(s[k + 1]) : -1;
      const int lo = hi >= 0 ? hex_digit(s[k + 2]) : -1;
      if (lo < 0) return make_error("a bad percent escape");
      out += static_cast<char>(hi * 16 + lo);
      k += 2;
    }
  }
  return out;
}

Result<ModelQuery> split_model_query(std::string_view query) {
  ModelQuery out;
  size_t i = 0;
  while (i < query.size()) {
    const size_t amp = std::min(query.find('&', i), query.size());
    const std::string_view param = query.substr(i, amp - i);
    i = amp + 1;
    const size_t eq = param.find('=');
    if (param.substr(0, eq) != "model") {
      if (param.empty()) continue;
      if (!out.rest.empty()) out.rest += '&';
      out.rest.append(param);
      continue;
    }
    if (out.model) return make_error("query parameter 'model' is repeated");
    const std::string_view raw = eq == std::string_view::npos ? "" : param.substr(eq + 1);
    auto decoded = percent_decode(raw, true);
    if (!decoded.ok()) return make_error("query parameter 'model': " + decoded.error_message());
    std::string name = std::move(decoded).value();
    if (name.empty()) return make_error("query parameter 'model' is empty");
    if (name.size() > 256) return make_error("query parameter 'model' is over 256 bytes");
    out.model = std::move(name);
  }
  return out;
}

bool parse_reasoning_format(const std::string& name, bool* split) {
  if (name != "none" && name != "deepseek" && name != "auto") return false;
  *split = name != "none";
  return true;
}

}  // namespace rw
