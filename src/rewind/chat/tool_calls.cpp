// parse_tool_calls (chat_template.h): finds tool-call blocks in generated text, in the formats
// of kFormats: <tool_call>...</tool_call> read as the Qwen3.5 XML form (<function=NAME> with
// <parameter=ARG> children; also Nemotron-3) or the JSON form ({"name": ..., "arguments":
// {...}}; Qwen3, Granite-4.0), and <TOOLCALL>[...]</TOOLCALL> read as a JSON list of such
// objects (Nemotron-Nano-v2). A block that does not parse (or is unterminated) stays in the
// content untouched; a list block is all or nothing. A block ends at the first closing tag of
// any format; when several opening tags of its format come before it, the last one starts the
// block and the earlier text stays in the content. XML parameter values lose one leading and
// one trailing newline, then become JSON if they parse as JSON (unless the tool's schema says
// the parameter is a string), else a JSON string. A missing </parameter> ends the value at the
// next <parameter= or </function>, and a missing </function> is accepted, as models sometimes
// drop them.
#include <algorithm>
#include <optional>

#include "rewind/chat/chat_template.h"

namespace rw {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_ws(s[a])) ++a;
  while (b > a && is_ws(s[b - 1])) --b;
  return s.substr(a, b - a);
}

bool starts_with(std::string_view s, size_t at, std::string_view p) {
  return s.size() >= at + p.size() && s.compare(at, p.size(), p) == 0;
}

std::optional<ojson> parse_json(std::string_view s) {
  auto j = parse_json_ordered(s);
  if (!j.ok()) return std::nullopt;
  return std::move(j).value();
}

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// The JSON-schema type of parameter `param` of tool `fn` in an OpenAI tools array ("" if
// unknown). A list of types counts as "string" only when "string" is its only non-null entry.
std::string schema_type(const nlohmann::json& tools, const std::string& fn,
                        const std::string& param) {
  if (!tools.is_array()) return {};
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const nlohmann::json* f = &t;
    if (t.contains("function") && t["function"].is_object()) f = &t["function"];
    if (!f->contains("name") || !(*f)["name"].is_string() || (*f)["name"] != fn) continue;
    auto params = f->find("parameters");
    if (params == f->end() || !params->is_object()) return {};
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return {};
    auto p = props->find(param);
    if (p == props->end() || !p->is_object()) return {};
    auto type = p->find("type");
    if (type == p->end()) return {};
    if (type->is_string()) return type->get<std::string>();
    if (type->is_array()) {
      std::string only;
      for (const auto& x : *type) {
        if (!x.is_string() || x == "null") continue;
        if (!only.empty()) return {};
        only = x.get<std::string>();
      }
      return only;
    }
    return {};
  }
  return {};
}

std::optional<ToolCall> parse_xml(std::string_view b, const nlohmann::json& tools) {
  size_t q = kFunction.size();
  const size_t name_end = b.find('>', q);
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string_view name = trim(b.substr(q, name_end - q));
  if (name.empty() || name.find_first_of("<\n") != std::string_view::npos) return std::nullopt;
  ToolCall call;
  call.name = std::string(name);
  ojson args = ojson::object();
  q = name_end + 1;
  for (;;) {
    while (q < b.size() && is_ws(b[q])) ++q;
    if (q == b.size()) break;  // no </function>: accepted
    if (starts_with(b, q, kFunctionEnd)) {
      q += kFunctionEnd.size();
      while (q < b.size() && is_ws(b[q])) ++q;
      if (q != b.size()) return std::nullopt;
      break;
    }
    if (!starts_with(b, q, kParam)) return std::nullopt;
    const size_t pn = q + kParam.size();
    const size_t pe = b.find('>', pn);
    if (pe == std::string_view::npos) return std::nullopt;
    const std::string_view pname = trim(b.substr(pn, pe - pn));
    if (pname.empty() || pname.find_first_of("<\n") != std::string_view::npos) return std::nullopt;
    const size_t vs = pe + 1;
    size_t ve = b.find(kParamEnd, vs);
    const size_t next_param = b.find(kParam, vs);
    size_t after;
    if (ve == std::string_view::npos || (next_param != std::string_view::npos && next_param < ve)) {
      ve = std::min({next_param, b.find(kFunctionEnd, vs), b.size()});
      after = ve;
    } else {
      after = ve + kParamEnd.size();
    }
    std::string_view value = b.substr(vs, ve - vs);
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    const std::string key(pname);
    const std::string type = schema_type(tools, call.name, key);
    std::optional<ojson> parsed;
    if (type != "string") parsed = parse_json(value);
    args[key] = parsed ? std::move(*parsed) : ojson(std::string(value));
    q = after;
  }
  call.arguments_json = dump(args);
  return call;
}

// {"name": ..., "arguments": {...} or its JSON text, or null / missing} ("parameters" is
// accepted for "arguments").
std::optional<ToolCall> json_call(const ojson& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    call.arguments_json = "{}";
  } else if (args->is_object()) {
    call.arguments_json = dump(*args);
  } else if (args->is_string()) {
    std::optional<ojson> inner = parse_json(args->get<std::string>());
    if (!inner || !inner->is_object()) return std::nullopt;
    call.arguments_json = dump(*inner);
  } else {
    return std::nullopt;
  }
  return call;
}

using Calls = std::optional<std::vector<ToolCall>>;

Calls one(std::optional<ToolCall> c) {
  if (!c) return std::nullopt;
  return std::vector<ToolCall>{std::move(*c)};
}

// The body of <tool_call>...</tool_call>: one call, XML or JSON.
Calls parse_tool_call_block(std::string_view body, const nlohmann::json& tools) {
  body = trim(body);
  if (starts_with(body, 0, kFunction)) return one(parse_xml(body, tools));
  if (!body.empty() && body.front() == '{') {
    std::optional<ojson> j = parse_json(body);
    return j ? one(json_call(*j)) : std::nullopt;
  }
  return std::nullopt;
}

// The body of <TOOLCALL>...</TOOLCALL>: a JSON list of calls (possibly empty).
Calls parse_json_list_block(std::string_view body, const nlohmann::json&) {
  std::optional<ojson> j = parse_json(trim(body));
  if (!j || !j->is_array()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const ojson& e : *j) {
    std::optional<ToolCall> c = json_call(e);
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
  }
  return calls;
}

// A tool-call format: a block from `open` to `close` whose body `parse` reads (nullopt: not
// this format after all, the block stays text). New formats are one more entry here.
struct Format {
  std::string_view open, close;
  Calls (*parse)(std::string_view body, const nlohmann::json& tools);
};

constexpr Format kFormats[] = {
    {"<tool_call>", "</tool_call>", parse_tool_call_block},  // Qwen3/3.5, Granite, Nemotron-3
    {"<TOOLCALL>", "</TOOLCALL>", parse_json_list_block},    // Nemotron-Nano-v2
};

}  // namespace

std::vector<ToolCall> parse_tool_calls(const std::string& text, std::string* content,
                                       const nlohmann::json& tools) {
  std::vector<ToolCall> calls;
  std::string rest;
  size_t pos = 0;
  for (;;) {
    const Format* fmt = nullptr;  // the format whose closing tag comes first
    size_t close = std::string::npos;
    for (const Format& f : kFormats) {
      const size_t c = text.find(f.close, pos);
      if (c < close) {
        close = c;
        fmt = &f;
      }
    }
    if (!fmt) break;
    const size_t end = close + fmt->close.size();
    const size_t open = close >= fmt->open.size() ? text.rfind(fmt->open, close - fmt->open.size())
                                                  : std::string::npos;
    if (open == std::string::npos || open < pos) {
      rest.append(text, pos, end - pos);
      pos = end;
      continue;
    }
    const size_t body = open + fmt->open.size();
    Calls found = fmt->parse(std::string_view(text).substr(body, close - body), tools);
    if (found) {
      for (ToolCall& c : *found) {
        c.id = "call_" + std::to_string(calls.size());
        calls.push_back(std::move(c));
      }
      rest.append(text, pos, open - pos);
    } else {
      rest.append(text, pos, end - pos);
    }
    pos = end;
  }
  rest.append(text, pos, std::string::npos);
  if (content) *content = std::string(trim(rest));
  return calls;
}

std::vector<std::string> tool_call_markers() {
  std::vector<std::string> m;
  for (const Format& f : kFormats) m.emplace_back(f.open);
  return m;
}

std::vector<ToolCall> parse_tool_calls(const std::string& text, std::string* content) {
  return parse_tool_calls(text, content, nlohmann::json());
}

}  // namespace rw
