#include "rewind/grammar/tool_grammar.h"

#include <algorithm>
#include <vector>

#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/json_schema.h"

namespace rw {

namespace {

using ojson = nlohmann::ordered_json;

bool is_plain_string(const ojson& s) {
  return s.is_object() && s.contains("type") && s["type"] == "string";
}

// A string schema's raw XML value: its enum / const values, its format (the JSON rules'
// unquoted forms), else text without '<' within its length bounds.
std::string raw_string_rule(const ojson& s) {
  std::vector<std::string> values;
  if (s.contains("const") && s["const"].is_string()) values.push_back(s["const"]);
  if (s.contains("enum") && s["enum"].is_array())
    for (const auto& v : s["enum"])
      if (v.is_string()) values.push_back(v);
  if (values.empty() && s.contains("format") && s["format"].is_string()) {
    const std::string f = s["format"];
    if (f == "date") return "fmt-full-date";
    if (f == "time") return "fmt-full-time";
    if (f == "date-time") return "fmt-full-date \"T\" fmt-full-time";
    if (f == "uuid") return "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}";
    if (f == "ipv4") return "fmt-octet \".\" fmt-octet \".\" fmt-octet \".\" fmt-octet";
  }
  if (values.empty()) {
    // The bounds were checked when the whole schema compiled.
    const auto bound = [&](const char* k) {
      return s.contains(k) && s[k].is_number_integer() ? std::to_string(s[k].get<int64_t>())
                                                       : std::string();
    };
    const std::string lo = bound("minLength"), hi = bound("maxLength");
    if (lo.empty() && hi.empty()) return "[^<]*";
    return "[^<]{" + (lo.empty() ? "0" : lo) + "," + hi + "}";
  }
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? " | " : " ") + gbnf_literal(values[i]);
  return out + " )";
}

bool is_strict(const ojson& f) {
  return f.contains("strict") && f["strict"].is_boolean() && f["strict"].get<bool>();
}

// A GBNF character class (inside [...]) escape of an ASCII byte.
std::string class_char(char c) {
  if (c == ']' || c == '[' || c == '\\' || c == '^' || c == '-') return std::string("\\") + c;
  return std::string(1, c);
}

// Rules `prefix`0 .. `prefix`(m-1): text (any characters) that never contains `tag` (ASCII,
// m bytes): rule q is where the text so far ends in the first q bytes of the tag and no
// earlier match (the states of the Knuth-Morris-Pratt automaton); the text may end anywhere.
std::string text_without(const std::string& tag, const std::string& prefix) {
  const size_t m = tag.size();
  std::string chars;  // the tag's distinct bytes
  for (char c : tag)
    if (chars.find(c) == std::string::npos) chars += c;
  // next(q, c): the longest prefix of the tag that ends the text tag[0..q) + c.
  auto next = [&](size_t q, char c) {
    const std::string t = tag.substr(0, q) + c;
    for (size_t k = std::min(m, t.size()); k > 0; --k)
      if (t.compare(t.size() - k, k, tag, 0, k) == 0) return k;
    return size_t{0};
  };
  std::string other = "[^";
  for (char c : chars) other += class_char(c);
  other += "]";
  std::string out;
  for (size_t q = 0; q < m; ++q) {
    out += prefix + std::to_string(q) + " ::= \"\" | " + other + " " + prefix + "0";
    for (char c : chars) {
      const size_t n = next(q, c);
      if (n == m) continue;  // the whole tag: not free text
      out += " | [" + class_char(c) + "] " + prefix + std::to_string(n);
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string tool_call_opening(ToolCallFormat format) {
  return format == ToolCallFormat::JsonList ? "<TOOLCALL>" : "<tool_call>";
}

std::string tool_call_closing(ToolCallFormat format) {
  return format == ToolCallFormat::JsonList ? "</TOOLCALL>" : "</tool_call>";
}

bool has_strict_tool(const ojson& tools) {
  if (!tools.is_array()) return false;
  for (const ojson& t : tools) {
    const ojson& f = t.is_object() && t.contains("function") ? t["function"] : t;
    if (f.is_object() && is_strict(f)) return true;
  }
  return false;
}

Result<std::string> tool_call_gbnf(const ojson& tools, const ToolGrammarOptions& opt) {
  if (!tools.is_array() || tools.empty()) return make_error("tool calls: no tools are declared");
  std::vector<std::pair<std::string, ojson>> schemas;  // rules the JSON compiler writes
  std::string rules;                                   // ours
  std::vector<std::string> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const ojson& f = t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      return make_error("tool calls: tools[" + std::to_string(i) + "] has no function name");
    const std::string name = f["name"];
    if (!opt.only.empty() && name != opt.only) continue;
    ojson params = f.contains("parameters") && f["parameters"].is_object()
                       ? f["parameters"]
                       : ojson{{"type", "object"}};
    const std::string id = "tc" + std::to_string(i);
    const std::string where = "tools[" + std::to_string(i) + "].function.parameters";
    if (opt.lazy && !is_strict(f)) {
      // Not strict: any arguments.
      if (opt.format != ToolCallFormat::XmlTag) {
        rules += id +
                 " ::= " + gbnf_literal("{\"name\": " + ojson(name).dump() + ", \"arguments\": ") +
                 " tc-any-object \"}\"\n";
        schemas.push_back({"tc-any-object", ojson{{"type", "object"}}});
      } else {
        rules += id + " ::= " + gbnf_literal("<function=" + name + ">\n") +
                 " ( \"<parameter=\" [^<>\\n]+ \">\\n\" [^<]* \"\\n</parameter>\\n\" )* " +
                 gbnf_literal("</function>") + "\n";
      }
      calls.push_back(id);
      continue;
    }
    if (!is_strict(f)) {  // compiled as far as the subset goes (relax_json_schema)
      std::vector<std::string> notes;
      params = relax_json_schema(params, &notes);
      if (opt.relaxed)
        for (const std::string& n : notes) opt.relaxed->push_back(where + ": " + n);
    }
    // Each tool's schema on its own first, so that a refusal names the tool.
    if (auto whole = json_schema_to_gbnf(params); !whole.ok())
      return make_error(where + ": " + whole.error_message());
    if (opt.format != ToolCallFormat::XmlTag) {
      schemas.push_back({id + "-args", params});
      const std::string head = "{\"name\": " + ojson(name).dump() + ", \"arguments\": ";
      rules += id + " ::= " + gbnf_literal(head) + " " + id + "-args \"}\"\n";
    } else {
      // One rule per declared parameter, in declaration order.
      std::string body = gbnf_literal("<function=" + name + ">\n");
      if (params.contains("properties") && params["properties"].is_object()) {
        std::vector<std::string> required;
        if (params.contains("required") && params["required"].is_array())
          for (const auto& r : params["required"])
            if (r.is_string()) required.push_back(r);
        int j = 0;
        for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it, ++j) {
          const std::string pid = id + "-p" + std::to_string(j);
          std::string value;
          if (is_plain_string(it.value())) {
            value = raw_string_rule(it.value());
          } else {
            // The value's schema with the definitions of the parameters object, where its
            // $refs point.
            ojson v = it.value();
            for (const char* defs : {"$defs", "definitions"})
              if (params.contains(defs) && v.is_object() && !v.contains(defs))
                v[defs] = params[defs];
            schemas.push_back({pid + "-value", v});
            value = pid + "-value";
          }
          rules += pid + " ::= " + gbnf_literal("<parameter=" + it.key() + ">\n") + " " + value +
                   " " + gbnf_literal("\n</parameter>\n") + "\n";
          const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
          body += " " + pid + (req ? "" : "?");
        }
      }
      body += " " + gbnf_literal("</function>");
      rules += id + " ::= " + body + "\n";
    }
    calls.push_back(id);
  }
  if (calls.empty()) return make_error("tool calls: no tool is named '" + opt.only + "'");
  // One any-object rule for all the tools that are not strict.
  std::sort(schemas.begin(), schemas.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  schemas.erase(std::unique(schemas.begin(), schemas.end(),
                            [](const auto& a, const auto& b) { return a.first == b.first; }),
                schemas.end());
  auto json_rules = json_schema_rules(schemas);
  if (!json_rules.ok()) return make_error("tool calls: " + json_rules.error_message());
  const std::string call = "tc-call ::= " + gbnf_alternatives(calls);
  std::string root;
  switch (opt.format) {
    case ToolCallFormat::JsonTag:
    case ToolCallFormat::XmlTag:
      root = "tc-one ::= \"<tool_call>\\n\" tc-call \"\\n</tool_call>\"\nroot ::= tc-one" +
             std::string(opt.parallel ? " ( \"\\n\" tc-one )*" : "") + "\n";
      break;
    case ToolCallFormat::JsonList:
      root = "root ::= \"<TOOLCALL>[\" tc-call" +
             std::string(opt.parallel ? " ( \", \" tc-call )*" : "") + " \"]</TOOLCALL>\"\n";
      break;
  }
  if (opt.lazy) {
    // The calls become an optional tail after free text without their opening tag.
    const size_t at = root.find("root ::=");
    root.replace(at, 8, "tc-calls ::=");
    root = "root ::= tc-free0 tc-calls?\n" +
           text_without(tool_call_opening(opt.format), "tc-free") + root;
  }
  return root + call + "\n" + rules + json_rules.value();
}

}  // namespace rw
