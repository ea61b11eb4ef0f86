// JSON Schema subset to GBNF (json_schema.h): one rule per composite schema, named after its
// path; fixed rules for JSON's primitives and the string formats.
#include "rewind/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "rewind/grammar/regex_gbnf.h"

namespace rw {

namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;
constexpr int64_t kMaxCount = kGbnfMaxRepeat;  // minItems, maxItems, minLength, maxLength

// JSON's primitives and the formats; the generated rules never take these names (they start
// with "root", "schema" or "ref-").
constexpr std::string_view kPrimitives = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex-escape )
hex-escape ::= [0-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex | [dD] [89abAB] hex hex "\\u" [dD] [c-fC-F] hex hex
hex ::= [0-9a-fA-F]
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null ::= "null"
fmt-year ::= [0-9]{4}
fmt-leap-year ::= [0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [048] | [2468] [048] | [13579] [26] ) "00"
fmt-day-28 ::= "0" [1-9] | "1" [0-9] | "2" [0-8]
fmt-day-30 ::= fmt-day-28 | "29" | "30"
fmt-day-31 ::= fmt-day-30 | "31"
fmt-full-date ::= fmt-year "-" ( ( "01" | "03" | "05" | "07" | "08" | "10" | "12" ) "-" fmt-day-31 | ( "04" | "06" | "09" | "11" ) "-" fmt-day-30 | "02-" fmt-day-28 ) | fmt-leap-year "-02-29"
fmt-hour ::= [01] [0-9] | "2" [0-3]
fmt-full-time ::= fmt-hour ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] fmt-hour ":" [0-5] [0-9] )
fmt-octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]
fmt-date ::= "\"" fmt-full-date "\""
fmt-time ::= "\"" fmt-full-time "\""
fmt-date-time ::= "\"" fmt-full-date "T" fmt-full-time "\""
fmt-uuid ::= "\"" hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12} "\""
fmt-ipv4-addr ::= fmt-octet "." fmt-octet "." fmt-octet "." fmt-octet
fmt-ipv4 ::= "\"" fmt-ipv4-addr "\""
fmt-h16 ::= hex{1,4}
fmt-ls32 ::= fmt-h16 ":" fmt-h16 | fmt-ipv4-addr
fmt-ipv6 ::= "\"" ( ( fmt-h16 ":" ){6} fmt-ls32 | "::" ( fmt-h16 ":" ){5} fmt-ls32 | fmt-h16? "::" ( fmt-h16 ":" ){4} fmt-ls32 | ( ( fmt-h16 ":" )? fmt-h16 )? "::" ( fmt-h16 ":" ){3} fmt-ls32 | ( ( fmt-h16 ":" ){0,2} fmt-h16 )? "::" ( fmt-h16 ":" ){2} fmt-ls32 | ( ( fmt-h16 ":" ){0,3} fmt-h16 )? "::" fmt-h16 ":" fmt-ls32 | ( ( fmt-h16 ":" ){0,4} fmt-h16 )? "::" fmt-ls32 | ( ( fmt-h16 ":" ){0,5} fmt-h16 )? "::" fmt-h16 | ( ( fmt-h16 ":" ){0,6} fmt-h16 )? "::" ) "\""
fmt-label ::= [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,39} [a-zA-Z0-9] )?
fmt-hostname ::= "\"" fmt-label ( "." fmt-label ){0,5} "\""
fmt-atext ::= [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]
fmt-email ::= "\"" fmt-atext{1,20} ( "." fmt-atext{1,20} ){0,2} "@" fmt-label ( "." fmt-label ){1,3} "\""
fmt-dur-n ::= [0-9]{1,9}
fmt-dur-second ::= fmt-dur-n "S"
fmt-dur-minute ::= fmt-dur-n "M" fmt-dur-second?
fmt-dur-hour ::= fmt-dur-n "H" fmt-dur-minute?
fmt-dur-time ::= "T" ( fmt-dur-hour | fmt-dur-minute | fmt-dur-second )
fmt-dur-day ::= fmt-dur-n "D"
fmt-dur-month ::= fmt-dur-n "M" fmt-dur-day?
fmt-dur-year ::= fmt-dur-n "Y" fmt-dur-month?
fmt-duration ::= "\"P" ( ( fmt-dur-day | fmt-dur-month | fmt-dur-year ) fmt-dur-time? | fmt-dur-time | fmt-dur-n "W" ) "\""
)";

const std::set<std::string, std::less<>> kAnnotations = {
    "title",   "description", "$schema",    "$id",      "$comment",
    "default", "examples",    "deprecated", "readOnly", "writeOnly"};
const std::set<std::string, std::less<>> kKeywords = {"type",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "items",
                                                      "minItems",
                                                      "maxItems",
                                                      "enum",
                                                      "const",
                                                      "anyOf",
                                                      "$ref",
                                                      "$defs",
                                                      "definitions",
                                                      "format",
                                                      "pattern",
                                                      "minLength",
                                                      "maxLength",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "multipleOf"};
const std::set<std::string, std::less<>> kFormats = {
    "date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"};

constexpr int64_t kMaxInteger = 9999999999999999;  // 16 digits, as the `integer` rule

// Decimal integers of exactly x.size() digits from x to y (x <= y, same length) as a GBNF
// expression: digit by digit, the shared prefix, then the part of x's first differing digit
// up to all 9s, whole digits between, and y's digit from all 0s.
std::string digits_between(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (n == 0) return "";
  if (x == y) return "\"" + x + "\"";
  const std::string rest = n > 1 ? " [0-9]{" + std::to_string(n - 1) + "}" : "";
  if (x[0] == y[0])
    return "\"" + std::string(1, x[0]) + "\" " + digits_between(x.substr(1), y.substr(1));
  if (x.find_first_not_of('0', 1) == std::string::npos &&
      y.find_first_not_of('9', 1) == std::string::npos)
    return "[" + std::string(1, x[0]) + "-" + std::string(1, y[0]) + "]" + rest;
  std::string out = "( \"" + std::string(1, x[0]) + "\" ";
  out += n > 1 ? "( " + digits_between(x.substr(1), std::string(n - 1, '9')) + " )" : "";
  if (y[0] - x[0] >= 2)
    out += " | [" + std::string(1, static_cast<char>(x[0] + 1)) + "-" +
           std::string(1, static_cast<char>(y[0] - 1)) + "]" + rest;
  out += " | \"" + std::string(1, y[0]) + "\" ";
  out += n > 1 ? "( " + digits_between(std::string(n - 1, '0'), y.substr(1)) + " )" : "";
  return out + " )";
}

// Positive integers from a to b (1 <= a <= b), without leading zeros.
std::string positive_between(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int64_t lo = a;
  for (int64_t p = 10; lo <= b && p <= kMaxInteger + 1; p *= 10) {
    if (lo >= p) continue;
    const int64_t hi = std::min(b, p - 1);
    alts.push_back(digits_between(std::to_string(lo), std::to_string(hi)));
    lo = hi + 1;
  }
  const std::string out = gbnf_alternatives(alts);
  return alts.size() > 1 ? "( " + out + " )" : out;
}

// Integers in [lo, hi] as a GBNF expression (lo <= hi, both within +-kMaxInteger).
std::string integer_between(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) alts.push_back("\"-\" " + positive_between(std::max<int64_t>(1, -hi), -lo));
  if (lo <= 0 && hi >= 0) alts.push_back("\"0\"");
  if (hi > 0) alts.push_back(positive_between(std::max<int64_t>(1, lo), hi));
  return gbnf_alternatives(alts);
}

// v as compact JSON text (what the grammar must spell); strings that are not UTF-8 are refused.
Result<std::string> json_text(const ojson& v, const std::string& path) {
  try {
    return v.dump();
  } catch (const std::exception&) {
    return make_error("json_schema: a value at " + path + " is not valid UTF-8");
  }
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// The schema's keywords other than annotations and definitions (for "X with Y" refusals).
std::vector<std::string> constraint_keys(const ojson& s) {
  std::vector<std::string> out;
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!kAnnotations.count(it.key()) && it.key() != "$defs" && it.key() != "definitions")
      out.push_back(it.key());
  return out;
}

// The GBNF expression of a string schema's `pattern` (the text between the quotes); alone
// among the string keywords: a pattern with a format or a length is refused.
Result<std::string> pattern_expr(const ojson& s, const std::string& path) {
  if (!s["pattern"].is_string())
    return make_error("json_schema: 'pattern' at " + path + " must be a string");
  for (const char* k : {"format", "minLength", "maxLength"})
    if (s.contains(k))
      return make_error("json_schema: 'pattern' with '" + std::string(k) + "' at " + path +
                        " is not supported");
  auto expr = regex_to_gbnf(s["pattern"].get<std::string>());
  if (!expr.ok())
    return make_error("json_schema: " + expr.error_message() + " in 'pattern' at " + path);
  return expr;
}

// Number bounds the compiler takes on numbers: whole numbers within kMaxNumberBound.
constexpr double kMaxNumberBound = 1e15;
bool whole_bound(const ojson& v) {
  if (!v.is_number()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && std::floor(x) == x && std::fabs(x) <= kMaxNumberBound;
}

// What a multipleOf holds to: multiples of a whole k (1 to kMaxMultiple; on numbers too, which
// makes them integers), or, on numbers, at most `frac` fraction digits (multipleOf 10^-frac).
struct MultipleOf {
  int64_t k = 0;
  int frac = -1;
};
constexpr int64_t kMaxMultiple = 1000;  // multiples listed between bounds
constexpr int64_t kMaxDigitRule = 100;  // remainders of the digit rule (16 digits each)

Result<MultipleOf> multiple_of(const ojson& s, bool number, const std::string& path) {
  const ojson& m = s["multipleOf"];
  if (!m.is_number() || !(m.get<double>() > 0))
    return make_error("json_schema: 'multipleOf' at " + path + " must be a number above 0");
  const double v = m.get<double>();
  if (std::floor(v) == v && v <= static_cast<double>(kMaxMultiple))
    return MultipleOf{static_cast<int64_t>(v), -1};
  for (int n = 1; number && n <= 16; ++n)
    if (std::strtod(("1e-" + std::to_string(n)).c_str(), nullptr) == v) return MultipleOf{0, n};
  return make_error("json_schema: 'multipleOf' " + m.dump() + " at " + path +
                    " is not supported (whole numbers up to " + std::to_string(kMaxMultiple) +
                    "; 0.1, 0.01, ... on numbers)");
}

// The integers within a schema's bounds, clamped to what the integer rule spells (16 digits);
// lo > hi when none. A bound written as an integer is taken exactly (a double holds integers
// exactly only up to 2^53); one written with a fraction or an exponent is rounded up or down.
Result<std::pair<int64_t, int64_t>> integer_bounds(const ojson& s, const std::string& path) {
  constexpr int64_t kPast = kMaxInteger + 1;  // 1e16: past the rule on either side
  auto whole = [&](const ojson& v, bool up) -> int64_t {
    if (v.is_number_unsigned())
      return static_cast<int64_t>(std::min(v.get<uint64_t>(), static_cast<uint64_t>(kPast)));
    if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -kPast, kPast);
    const double x = up ? std::ceil(v.get<double>()) : std::floor(v.get<double>());
    return x <= -1e16 ? -kPast : x >= 1e16 ? kPast : static_cast<int64_t>(x);
  };
  int64_t lo = -kMaxInteger, hi = kMaxInteger;
  for (const char* kw : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(kw)) continue;
    const std::string k = kw;
    const ojson& v = s[kw];
    if (!v.is_number() || std::isnan(v.get<double>()))
      return make_error("json_schema: '" + k + "' at " + path + " must be a number");
    if (k == "minimum") lo = std::max(lo, whole(v, true));
    if (k == "exclusiveMinimum") lo = std::max(lo, whole(v, false) + 1);
    if (k == "maximum") hi = std::min(hi, whole(v, false));
    if (k == "exclusiveMaximum") hi = std::min(hi, whole(v, true) - 1);
  }
  return std::pair{lo, hi};
}

// The multiples of k within [lo, hi] (lo <= hi), when there are at most kMaxMultiple of them.
Result<std::vector<int64_t>> multiples_between(int64_t k, int64_t lo, int64_t hi,
                                               const std::string& path) {
  const int64_t first = lo >= 0 ? (lo + k - 1) / k * k : -(-lo / k * k);
  const int64_t last = hi >= 0 ? hi / k * k : -((-hi + k - 1) / k * k);
  if (first > last)
    return make_error("json_schema: no multiple of " + std::to_string(k) +
                      " within the bounds at " + path);
  if ((last - first) / k >= kMaxMultiple)
    return make_error("json_schema: 'multipleOf' with bounds that hold more than " +
                      std::to_string(kMaxMultiple) + " multiples at " + path + " is not supported");
  std::vector<int64_t> out;
  for (int64_t x = first; x <= last; x += k) out.push_back(x);
  return out;
}

class SchemaCompiler {
 public:
  // Compiles `root` as the rule `root_name`; rule names are unique within `names` and the
  // rules go to `rules` (shared when several schemas make one grammar).
  SchemaCompiler(const ojson& root, std::string root_name, std::set<std::string>& names,
                 std::vector<std::pair<std::string, std::string>>& rules)
      : root_(root), root_name_(std::move(root_name)), names_(names), rules_(rules) {
    names_.insert(root_name_);
    refs_["#"] = root_name_;
  }

  // Adds root_name ::= the schema's expression (and the rules it needs) to the rules.
  Status run() {
    REWIND_TRY(const std::string top,
               visit(root_, "#", root_name_ == "root" ? "schema" : root_name_ + "-schema", 0));
    rules_.insert(rules_.begin() + static_cast<std::ptrdiff_t>(first_rule_), {root_name_, top});
    return Ok{};
  }

 private:
  static Error error(const std::string& msg) { return make_error("json_schema: " + msg); }

  std::string new_name(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      base += word ? c : '-';
      if (base.size() >= 48) break;
    }
    std::string name = base;
    for (int k = 2; names_.count(name); ++k) name = base + "-" + std::to_string(k);
    names_.insert(name);
    return name;
  }

  std::string add_rule(const std::string& hint, std::string body) {
    const std::string name = new_name(hint);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  static Result<int64_t> count(const ojson& s, const char* key, const std::string& path) {
    const ojson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return error(std::string("'") + key + "' at " + path + " must be a non-negative integer");
    if (v.get<int64_t>() > kMaxCount)
      return error(std::string("'") + key + "' at " + path + " is larger than " +
                   std::to_string(kMaxCount));
    return v.get<int64_t>();
  }

  Result<std::string> visit(const ojson& s, const std::string& path, const std::string& hint,
                            int depth);
  Result<std::string> ref_rule(const ojson& s, const std::string& path, int depth);
  Result<std::string> type_rule(const ojson& s, const std::string& type, const std::string& path,
                                const std::string& hint, int depth);
  Result<std::string> object_rule(const ojson& s, const std::string& path, const std::string& hint,
                                  int depth);
  Result<std::string> number_rule(const ojson& s, const std::string& path, const std::string& hint,
                                  int frac_digits);
  std::string multiple_rule(int64_t k, const std::string& hint, bool negative, bool zero,
                            bool positive);
  Result<std::string> array_rule(const ojson& s, const std::string& path, const std::string& hint,
                                 int depth);

  const ojson& root_;
  std::string root_name_;
  std::set<std::string>& names_;
  std::vector<std::pair<std::string, std::string>>& rules_;
  size_t first_rule_ = rules_.size();        // where this schema's rules start
  std::map<std::string, std::string> refs_;  // $ref -> its rule
};

Result<std::string> SchemaCompiler::visit(const ojson& s, const std::string& path,
                                          const std::string& hint, int depth) {
  if (depth > kMaxSchemaDepth)
    return error("schema nested deeper than " + std::to_string(kMaxSchemaDepth) + " at " + path);
  if (s.is_boolean()) {
    if (s.get<bool>()) return std::string("value");
    return error("schema false at " + path + " accepts nothing");
  }
  if (!s.is_object()) return error("the schema at " + path + " must be an object or a boolean");
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!kKeywords.count(it.key()) && !kAnnotations.count(it.key()))
      return error("unsupported keyword '" + it.key() + "' at " + path);
  for (const char* defs : {"$defs", "definitions"})
    if (s.contains(defs) && !s[defs].is_object())
      return error("'" + std::string(defs) + "' at " + path + " must be an object");
  const std::vector<std::string> keys = constraint_keys(s);

  if (s.contains("$ref")) {
    for (const std::string& k : keys)
      if (k != "$ref") return error("'$ref' with '" + k + "' at " + path + " is not supported");
    return ref_rule(s, path, depth);
  }
  if (s.contains("anyOf")) {
    for (const std::string& k : keys)
      if (k != "anyOf") return error("'anyOf' with '" + k + "' at " + path + " is not supported");
    const ojson& alts = s["anyOf"];
    if (!alts.is_array() || alts.empty())
      return error("'anyOf' at " + path + " must be a non-empty array");
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) {
      REWIND_TRY(const std::string alt, visit(alts[i], path + "/anyOf/" + std::to_string(i),
                                              hint + "-" + std::to_string(i), depth + 1));
      body += (i ? " | " : "") + alt;
    }
    return add_rule(hint, body);
  }

  std::vector<std::string> types;
  if (s.contains("type")) {
    const ojson& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const ojson& x : t) {
        if (!x.is_string()) return error("'type' at " + path + " must name types");
        types.push_back(x.get<std::string>());
      }
    } else {
      return error("'type' at " + path + " must be a string or a non-empty array of strings");
    }
    for (const std::string& ty : types)
      if (ty != "string" && ty != "number" && ty != "integer" && ty != "boolean" && ty != "null" &&
          ty != "object" && ty != "array")
        return error("unknown type '" + ty + "' at " + path);
  }

  if (s.contains("enum") || s.contains("const")) {
    const char* kw = s.contains("const") ? "const" : "enum";
    for (const std::string& k : keys)
      if (k != "enum" && k != "const" && k != "type")
        return error("'" + std::string(kw) + "' with '" + k + "' at " + path + " is not supported");
    std::vector<ojson> values;
    if (s.contains("const")) {
      values.push_back(s["const"]);
      if (s.contains("enum")) return error("'const' with 'enum' at " + path + " is not supported");
    } else {
      if (!s["enum"].is_array() || s["enum"].empty())
        return error("'enum' at " + path + " must be a non-empty array");
      for (const ojson& v : s["enum"]) values.push_back(v);
    }
    std::string body;
    std::set<std::string> seen;
    for (const ojson& v : values) {
      if (!types.empty()) {
        bool fits = false;
        for (const std::string& ty : types)
          fits |= (ty == "string" && v.is_string()) || (ty == "number" && v.is_number()) ||
                  (ty == "integer" && v.is_number_integer()) ||
                  (ty == "boolean" && v.is_boolean()) || (ty == "null" && v.is_null()) ||
                  (ty == "object" && v.is_object()) || (ty == "array" && v.is_array());
        if (!fits) continue;
      }
      REWIND_TRY(const std::string text, json_text(v, path));
      const std::string lit = gbnf_literal(text);
      if (!seen.insert(lit).second) continue;
      body += (body.empty() ? "" : " | ") + lit;
    }
    if (body.empty())
      return error("no value of '" + std::string(kw) + "' at " + path + " has the schema's type");
    return add_rule(hint, body);
  }

  if (types.empty()) {  // inferred from the keywords, else any value
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
      types.push_back("object");
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
      types.push_back("array");
    if (s.contains("format") || s.contains("pattern") || s.contains("minLength") ||
        s.contains("maxLength"))
      types.push_back("string");
    if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
        s.contains("exclusiveMaximum") || s.contains("multipleOf"))
      types.push_back("integer");  // a subset of the numbers in range
    if (types.empty()) return std::string("value");
  }
  if (types.size() == 1) return type_rule(s, types[0], path, hint, depth);
  std::string body;
  for (const std::string& ty : types) {
    REWIND_TRY(const std::string alt, type_rule(s, ty, path, hint + "-" + ty, depth));
    body += (body.empty() ? "" : " | ") + alt;
  }
  return add_rule(hint, body);
}

Result<std::string> SchemaCompiler::ref_rule(const ojson& s, const std::string& path, int depth) {
  if (!s["$ref"].is_string()) return error("'$ref' at " + path + " must be a string");
  const std::string ref = s["$ref"].get<std::string>();
  auto known = refs_.find(ref);
  if (known != refs_.end()) return known->second;
  if (ref.empty() || ref[0] != '#')
    return error("'$ref' '" + ref + "' at " + path + " points outside the schema (unsupported)");
  if (ref.size() > 1 && ref[1] != '/')
    return error("'$ref' '" + ref + "' at " + path + " is not a JSON pointer (#/...)");
  const ojson* target = &root_;
  std::string last = "ref";
  for (size_t i = 2; i <= ref.size() && ref.size() > 1;) {
    size_t e = ref.find('/', i);
    if (e == std::string::npos) e = ref.size();
    std::string tok;
    for (size_t k = i; k < e; ++k) {
      if (ref[k] == '~' && k + 1 < e && (ref[k + 1] == '0' || ref[k + 1] == '1')) {
        tok += ref[k + 1] == '0' ? '~' : '/';
        ++k;
      } else {
        tok += ref[k];
      }
    }
    if (target->is_object() && target->contains(tok)) {
      target = &(*target)[tok];
    } else if (target->is_array() && !tok.empty() &&
               tok.find_first_not_of("0123456789") == std::string::npos && tok.size() < 10 &&
               std::stoul(tok) < target->size()) {
      target = &(*target)[std::stoul(tok)];
    } else {
      return error("'$ref' '" + ref + "' at " + path + " does not resolve");
    }
    last = tok;
    i = e + 1;
  }
  const std::string name = new_name("ref-" + last);
  refs_[ref] = name;
  REWIND_TRY(const std::string body, visit(*target, ref, name + "-body", depth + 1));
  rules_.emplace_back(name, body);
  return name;
}

Result<std::string> SchemaCompiler::type_rule(const ojson& s, const std::string& type,
                                              const std::string& path, const std::string& hint,
                                              int depth) {
  if (type == "object") return object_rule(s, path, hint, depth);
  if (type == "array") return array_rule(s, path, hint, depth);
  const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                       s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
  std::optional<MultipleOf> mo;
  if ((type == "integer" || type == "number") && s.contains("multipleOf")) {
    REWIND_TRY(mo, multiple_of(s, type == "number", path));
  }
  if ((type == "integer" || (mo && mo->k > 0)) && (bounded || (mo && mo->k > 1))) {
    REWIND_TRY(const auto range, integer_bounds(s, path));
    const auto [lo, hi] = range;
    if (lo > hi) return error("no integer within the bounds at " + path);
    if (!mo || mo->k == 1) return add_rule(hint, integer_between(lo, hi));
    // One side bounded near zero (minimum 0, exclusiveMinimum 0, maximum 0, ...): the digit
    // rule with one sign; otherwise the multiples listed.
    const int64_t k = mo->k;
    const bool no_lo = !s.contains("minimum") && !s.contains("exclusiveMinimum");
    const bool no_hi = !s.contains("maximum") && !s.contains("exclusiveMaximum");
    const bool digit_rule = k <= kMaxDigitRule;
    if (digit_rule && no_hi && lo >= 0 && lo <= k)
      return multiple_rule(k, hint, false, lo == 0, true);
    if (digit_rule && no_lo && hi <= 0 && hi >= -k)
      return multiple_rule(k, hint, true, hi == 0, false);
    if (bounded) {
      REWIND_TRY(const std::vector<int64_t> xs, multiples_between(k, lo, hi, path));
      std::vector<std::string> lits;
      for (int64_t x : xs) lits.push_back("\"" + std::to_string(x) + "\"");
      return add_rule(hint, gbnf_alternatives(lits));
    }
    if (!digit_rule)
      return error("'multipleOf' " + std::to_string(k) + " at " + path + " above " +
                   std::to_string(kMaxDigitRule) + " needs bounds that hold at most " +
                   std::to_string(kMaxMultiple) + " multiples");
    return multiple_rule(k, hint, true, true, true);
  }
  if (type == "number" && mo && mo->k == 1) return std::string("integer");
  if (type == "number" && bounded) return number_rule(s, path, hint, mo ? mo->frac : 16);
  if (type == "number" && mo)
    return add_rule(hint, "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1," +
                              std::to_string(mo->frac) + "} )?");
  if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
  // string
  if (s.contains("pattern")) {
    REWIND_TRY(const std::string expr, pattern_expr(s, path));
    return add_rule(hint, "\"\\\"\" " + expr + " \"\\\"\"");
  }
  if (s.contains("format")) {
    if (!s["format"].is_string()) return error("'format' at " + path + " must be a string");
    const std::string f = s["format"].get<std::string>();
    if (!kFormats.count(f)) return error("unsupported format '" + f + "' at " + path);
    if (s.contains("minLength") || s.contains("maxLength"))
      return error("'format' with a length at " + path + " is not supported");
    return "fmt-" + f;
  }
  if (!s.contains("minLength") && !s.contains("maxLength")) return std::string("string");
  int64_t lo = 0;
  int64_t hi = -1;
  if (s.contains("minLength")) {
    REWIND_TRY(lo, count(s, "minLength", path));
  }
  if (s.contains("maxLength")) {
    REWIND_TRY(hi, count(s, "maxLength", path));
  }
  if (hi >= 0 && hi < lo) return error("'maxLength' below 'minLength' at " + path);
  const std::string reps =
      "{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : std::string()) + "}";
  return add_rule(hint, "\"\\\"\" char" + reps + " \"\\\"\"");
}

// The multiples of k (2 <= k <= kMaxDigitRule) of the signs asked for, of at most 16 digits as
// the integer rule: one rule per remainder and digit count from which a multiple can still end,
// the digits grouped by the rule they lead to; never "-0".
std::string SchemaCompiler::multiple_rule(int64_t k, const std::string& hint, bool negative,
                                          bool zero, bool positive) {
  constexpr int kDigits = 16;
  const auto n = static_cast<size_t>(k);
  // alive[d][r]: after d digits with remainder r, a multiple can still end.
  std::vector<std::vector<bool>> alive(kDigits + 1, std::vector<bool>(n));
  std::vector<std::vector<std::string>> name(kDigits + 1, std::vector<std::string>(n));
  for (int d = kDigits; d >= 1; --d)
    for (size_t r = 0; r < n; ++r) {
      bool a = r == 0;
      for (int g = 0; g <= 9 && !a && d < kDigits; ++g) a = alive[d + 1][(10 * r + g) % n];
      alive[d][r] = a;
      if (a) name[d][r] = new_name(hint + "-mod");
    }
  auto moves = [&](size_t r, int d, int from) {  // "[digits] rule | ..." for digit d + 1
    std::vector<std::string> to(n);
    for (int g = from; g <= 9 && d < kDigits; ++g)
      if (alive[d + 1][(10 * r + g) % n]) to[(10 * r + g) % n] += static_cast<char>('0' + g);
    std::vector<std::string> alts;
    for (size_t t = 0; t < n; ++t)
      if (!to[t].empty()) alts.push_back("[" + to[t] + "] " + name[d + 1][t]);
    return gbnf_alternatives(alts);
  };
  for (int d = 1; d <= kDigits; ++d)
    for (size_t r = 0; r < n; ++r) {
      if (!alive[d][r]) continue;
      std::string body = moves(r, d, 0);
      if (r == 0) body += body.empty() ? "\"\"" : " | \"\"";
      rules_.emplace_back(name[d][r], body);
    }
  const std::string sign = negative && positive ? "\"-\"? " : negative ? "\"-\" " : "";
  return add_rule(hint, (zero ? "\"0\" | " : "") + sign + "( " + moves(0, 0, 1) + " )");
}

// Numbers within whole-number bounds, without exponents: "-"? y with y's integer part i and
// fraction f. Each side of zero is an interval of y with integer ends p <= q, either end open:
// i strictly between them with any fraction; i = p with any fraction (p closed) or one that
// is not all zeros (p open); i = q with no fraction (q closed).
Result<std::string> SchemaCompiler::number_rule(const ojson& s, const std::string& path,
                                                const std::string& hint, int frac_digits) {
  constexpr double kMaxBound = kMaxNumberBound;
  double lo = -kMaxBound - 1, hi = kMaxBound + 1;  // past these: unbounded on that side
  bool lo_open = false, hi_open = false;
  for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(kw)) continue;
    const std::string k = kw;
    if (!s[kw].is_number()) return error("'" + k + "' at " + path + " must be a number");
    const double v = s[kw].get<double>();
    if (!whole_bound(s[kw]))
      return error("'" + k + "' on a number at " + path +
                   " is not supported unless it is a whole number within 1e15");
    const bool open = k.rfind("exclusive", 0) == 0;
    if (k == "minimum" || k == "exclusiveMinimum") {
      if (v > lo || (v == lo && open)) {
        lo = v;
        lo_open = open;
      }
    } else if (v < hi || (v == hi && open)) {
      hi = v;
      hi_open = open;
    }
  }
  const bool lo_inf = lo < -kMaxBound;
  const bool hi_inf = hi > kMaxBound;
  const std::string frac = "( \".\" [0-9]{1," + std::to_string(frac_digits) + "} )?";
  // A fraction of at most frac_digits digits that are not all zeros (trailing zeros allowed, as
  // in frac): k zeros, a non-zero digit, then any.
  std::vector<std::string> nz;
  for (int k = 0; k < frac_digits; ++k) {
    std::string a = k ? "\"" + std::string(static_cast<size_t>(k), '0') + "\" [1-9]" : "[1-9]";
    if (frac_digits - 1 - k > 0) a += " [0-9]{0," + std::to_string(frac_digits - 1 - k) + "}";
    nz.push_back(std::move(a));
  }
  const std::string nonzero = "\".\" ( " + gbnf_alternatives(nz) + " )";
  // y in [p, q] (q_inf: no upper end), p and q whole and >= 0.
  auto side = [&](int64_t p, bool p_open, int64_t q, bool q_open, bool q_inf) {
    std::vector<std::string> alts;
    if (q_inf || q > p) {
      const std::string ip = std::to_string(p);
      alts.push_back("\"" + ip + "\" " + (p_open ? nonzero : frac));
      const int64_t last = q_inf ? kMaxInteger : q - 1;  // integer parts strictly inside
      if (p + 1 <= last) alts.push_back("( " + integer_between(p + 1, last) + " ) " + frac);
      if (!q_inf && !q_open) alts.push_back("\"" + std::to_string(q) + "\"");
    } else if (q == p && !p_open && !q_open) {
      alts.push_back("\"" + std::to_string(p) + "\"");
    }
    return alts;
  };
  std::vector<std::string> alts;
  if (hi_inf || hi >= 0) {  // x >= 0
    const bool from_zero = lo_inf || lo < 0;
    for (std::string& a :
         side(from_zero ? 0 : static_cast<int64_t>(lo), from_zero ? false : lo_open,
              hi_inf ? 0 : static_cast<int64_t>(hi), hi_open, hi_inf))
      alts.push_back(std::move(a));
  }
  if (lo_inf || lo < 0) {  // x = -y < 0: y > max(-hi, 0), y <= -lo
    const int64_t p = hi_inf || hi > 0 ? 0 : static_cast<int64_t>(-hi);
    for (std::string& a :
         side(p, p == 0 || hi_open, lo_inf ? 0 : static_cast<int64_t>(-lo), lo_open, lo_inf))
      alts.push_back("\"-\" " + a);
  }
  if (alts.empty()) return error("no number within the bounds at " + path);
  return add_rule(hint, gbnf_alternatives(alts));
}

Result<std::string> SchemaCompiler::object_rule(const ojson& s, const std::string& path,
                                                const std::string& hint, int depth) {
  bool closed = false;  // additionalProperties false
  if (s.contains("additionalProperties")) {
    const ojson& a = s["additionalProperties"];
    if (a.is_boolean()) {
      closed = !a.get<bool>();
    } else if (!(a.is_object() && a.empty())) {
      return error("unsupported keyword 'additionalProperties' (a schema) at " + path);
    }
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return error("'required' at " + path + " must be an array");
    for (const ojson& r : s["required"]) {
      if (!r.is_string()) return error("'required' at " + path + " must list strings");
      required.insert(r.get<std::string>());
    }
  }
  if (!s.contains("properties")) {
    if (!required.empty())
      return error("'required' names '" + *required.begin() +
                   "', which is not in 'properties', at " + path);
    return closed ? add_rule(hint, R"("{" ws "}")") : std::string("object");
  }
  const ojson& props = s["properties"];
  if (!props.is_object()) return error("'properties' at " + path + " must be an object");
  for (const std::string& r : required)
    if (!props.contains(r))
      return error("'required' names '" + r + "', which is not in 'properties', at " + path);
  if (props.empty()) return add_rule(hint, R"("{" ws "}")");

  // One rule per key-value pair; tail j = the pairs from j on, each after a comma.
  const std::string name = new_name(hint);
  std::vector<std::string> kv;
  std::vector<bool> req;
  for (auto it = props.begin(); it != props.end(); ++it) {
    REWIND_TRY(const std::string value,
               visit(it.value(), path + "/properties/" + pointer_token(it.key()),
                     name + "-" + it.key(), depth + 1));
    REWIND_TRY(const std::string key, json_text(ojson(it.key()), path));
    kv.push_back(add_rule(name + "-kv", gbnf_literal(key) + " ws \":\" ws " + value + " ws"));
    req.push_back(required.count(it.key()) > 0);
  }
  const size_t n = kv.size();
  std::vector<std::string> tail(n + 1);  // tail[n] is empty
  for (size_t j = n; j-- > 0;) {
    std::string body = req[j] ? "\",\" ws " + kv[j] : "( \",\" ws " + kv[j] + " )?";
    if (!tail[j + 1].empty()) body += " " + tail[j + 1];
    tail[j] = add_rule(name + "-tail", body);
  }
  std::string alts;
  bool all_optional = true;
  for (size_t j = 0; j < n; ++j) {
    alts += (j ? " | " : "") + kv[j] + (j + 1 < n ? " " + tail[j + 1] : std::string());
    if (req[j]) {
      all_optional = false;
      break;
    }
  }
  rules_.emplace_back(name, "\"{\" ws ( " + alts + " )" + (all_optional ? "?" : "") + " \"}\"");
  return name;
}

Result<std::string> SchemaCompiler::array_rule(const ojson& s, const std::string& path,
                                               const std::string& hint, int depth) {
  int64_t lo = 0;
  int64_t hi = -1;
  if (s.contains("minItems")) {
    REWIND_TRY(lo, count(s, "minItems", path));
  }
  if (s.contains("maxItems")) {
    REWIND_TRY(hi, count(s, "maxItems", path));
  }
  if (hi >= 0 && hi < lo) return error("'maxItems' below 'minItems' at " + path);
  if (hi == 0) return add_rule(hint, R"("[" ws "]")");
  const std::string name = new_name(hint);
  std::string item = "value";
  if (s.contains("items")) {
    REWIND_TRY(item, visit(s["items"], path + "/items", name + "-item", depth + 1));
  }
  const int64_t more_lo = lo > 0 ? lo - 1 : 0;
  std::string reps = "{";
  reps += std::to_string(more_lo) + "," + (hi >= 0 ? std::to_string(hi - 1) : std::string()) + "}";
  const std::string items = item + " ws ( \",\" ws " + item + " ws )" + reps;
  rules_.emplace_back(name, "\"[\" ws " + (lo > 0 ? items : "( " + items + " )?") + " \"]\"");
  return name;
}

}  // namespace

Result<std::string> json_schema_to_gbnf(const ojson& schema) {
  std::set<std::string> names;
  std::vector<std::pair<std::string, std::string>> rules;
  SchemaCompiler c(schema, "root", names, rules);
  REWIND_TRY_STATUS(c.run());
  std::string out;
  for (const auto& [name, body] : rules) out += name + " ::= " + body + "\n";
  out += kPrimitives;
  return out;
}

Result<std::string> json_schema_rules(
    const std::vector<std::pair<std::string, nlohmann::ordered_json>>& schemas) {
  std::set<std::string> names;
  std::vector<std::pair<std::string, std::string>> rules;
  for (const auto& [name, schema] : schemas) {
    if (name.empty() || name.rfind("schema", 0) == 0 || name.rfind("ref-", 0) == 0 ||
        names.count(name))
      return make_error("json_schema: rule name '" + name + "' is taken");
    SchemaCompiler c(schema, name, names, rules);
    REWIND_TRY_STATUS(c.run());
  }
  std::string out;
  for (const auto& [name, body] : rules) out += name + " ::= " + body + "\n";
  out += kPrimitives;
  return out;
}

namespace {

// relax_json_schema's walk: s is the schema at `path` (a JSON pointer); `renamed` collects the
// pointers of oneOf arrays read as anyOf, for the $refs into them.
void relax_at(ojson& s, const std::string& path, std::vector<std::string>* notes,
              std::vector<std::string>* renamed, int depth) {
  if (depth > kMaxSchemaDepth || !s.is_object()) return;  // the compiler refuses these itself
  auto note = [&](const std::string& what) {
    if (notes) notes->push_back(what + " at " + path);
  };
  auto drop = [&](const std::string& key, const std::string& why) {
    if (!s.contains(key)) return;
    note("'" + key + "'" + why);
    s.erase(key);
  };
  // allOf of one schema beside annotations only: that schema; any other allOf is dropped.
  for (int guard = 0; s.contains("allOf") && guard <= kMaxSchemaDepth; ++guard) {
    if (s["allOf"].is_array() && s["allOf"].size() == 1 && s["allOf"][0].is_object() &&
        constraint_keys(s).size() == 1 && guard < kMaxSchemaDepth) {
      ojson only = std::move(s["allOf"][0]);
      s.erase("allOf");
      for (auto it = only.begin(); it != only.end(); ++it)
        if (!s.contains(it.key())) s[it.key()] = it.value();
      note("'allOf' of one schema read as that schema");
    } else {
      drop("allOf", "");
    }
  }
  if (s.contains("oneOf") && !s.contains("anyOf")) {
    ojson alts = std::move(s["oneOf"]);
    s.erase("oneOf");
    s["anyOf"] = std::move(alts);
    note("'oneOf' read as 'anyOf'");
    if (renamed) renamed->push_back(path.substr(1) + "/oneOf");
  }
  for (const std::string& k : constraint_keys(s))
    if (!kKeywords.count(k)) drop(k, "");
  // What the compiler takes only alone: $ref (the schema it names wins), anyOf beside other
  // keywords (the other keywords win: they describe the value itself), enum / const (with
  // a type).
  if (s.contains("$ref")) {
    for (const std::string& k : constraint_keys(s))
      if (k != "$ref") drop(k, " beside '$ref'");
  } else if (s.contains("anyOf") && constraint_keys(s).size() > 1) {
    drop("anyOf", " beside other keywords");
  }
  if (s.contains("enum") || s.contains("const")) {
    for (const std::string& k : constraint_keys(s))
      if (k != "enum" && k != "const" && k != "type") drop(k, " beside 'enum' / 'const'");
    if (s.contains("const")) drop("enum", " beside 'const'");
  }
  if (s.contains("format") && s["format"].is_string()) {
    const std::string f = s["format"].get<std::string>();
    if (!kFormats.count(f))
      drop("format", " '" + f + "'");
    else if (s.contains("minLength") || s.contains("maxLength"))
      drop("format", " with a length");
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) {
      drop("pattern", " (not a string)");
    } else if (s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      drop("pattern", " beside 'format' or a length");
    } else if (auto e = regex_to_gbnf(s["pattern"].get<std::string>()); !e.ok()) {
      drop("pattern", " (" + e.error_message() + ")");
    }
  }
  if (s.contains("additionalProperties") && s["additionalProperties"].is_object() &&
      !s["additionalProperties"].empty()) {
    s["additionalProperties"] = true;
    note("'additionalProperties' (a schema) read as true");
  }
  // required names that properties lacks: not required (it cannot be generated).
  if (s.contains("required") && s["required"].is_array()) {
    const bool props = s.contains("properties") && s["properties"].is_object();
    ojson kept = ojson::array();
    for (const ojson& r : s["required"]) {
      if (!r.is_string() || (props && s["properties"].contains(r.get<std::string>()))) {
        kept.push_back(r);
      } else {
        note("'required' '" + r.get<std::string>() + "' not in 'properties' dropped");
      }
    }
    s["required"] = std::move(kept);
  }
  bool number = false;
  if (s.contains("type")) {
    const ojson& t = s["type"];
    number = t == "number" || (t.is_array() && std::find(t.begin(), t.end(), "number") != t.end());
  }
  // multipleOf and bounds as the compiler reads them for each numeric type of the value (no
  // type: integers): a multipleOf it refuses goes first, then bounds on numbers that are not
  // whole.
  if (s.contains("multipleOf") || number) {
    const ojson t = s.contains("type") ? s["type"] : ojson("integer");
    auto has = [&](const char* ty) {
      return t == ty || (t.is_array() && std::find(t.begin(), t.end(), ty) != t.end());
    };
    auto compiles = [&](const char* ty) {  // the numeric keywords alone, as type ty
      ojson alone = {{"type", ty}};
      for (const char* kw :
           {"multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(kw)) alone[kw] = s[kw];
      return json_schema_to_gbnf(alone).ok();
    };
    for (const char* ty : {"integer", "number"}) {
      if (!has(ty) || compiles(ty)) continue;
      if (s.contains("multipleOf")) {
        const bool valid = multiple_of(s, std::string(ty) == "number", path).ok();
        drop("multipleOf", valid ? " with these bounds" : " " + s["multipleOf"].dump());
      }
      if (std::string(ty) == "number" && !compiles(ty))
        for (const char* kw : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
          if (s.contains(kw) && !whole_bound(s[kw]))
            drop(kw, " on a number (not a whole number within 1e15)");
    }
  }
  // The subschemas.
  for (const char* map : {"properties", "$defs", "definitions"})
    if (s.contains(map) && s[map].is_object())
      for (auto it = s[map].begin(); it != s[map].end(); ++it)
        relax_at(it.value(), path + "/" + map + "/" + pointer_token(it.key()), notes, renamed,
                 depth + 1);
  if (s.contains("items")) relax_at(s["items"], path + "/items", notes, renamed, depth + 1);
  if (s.contains("additionalProperties"))
    relax_at(s["additionalProperties"], path + "/additionalProperties", notes, renamed, depth + 1);
  if (s.contains("anyOf") && s["anyOf"].is_array())
    for (size_t i = 0; i < s["anyOf"].size(); ++i)
      relax_at(s["anyOf"][i], path + "/anyOf/" + std::to_string(i), notes, renamed, depth + 1);
}

// Calls f on every "$ref" string of v.
template <class F>
void each_ref(ojson& v, const F& f, int depth) {
  if (depth > 2 * kMaxSchemaDepth) return;
  if (v.is_object()) {
    if (v.contains("$ref") && v["$ref"].is_string()) f(v["$ref"]);
    for (auto it = v.begin(); it != v.end(); ++it) each_ref(it.value(), f, depth + 1);
  } else if (v.is_array()) {
    for (ojson& x : v) each_ref(x, f, depth + 1);
  }
}

// OpenAPI-style definitions outside $defs ("#/components/schemas/X"): each schema a $ref
// names under a root keyword the compiler does not know moves to $defs, the $refs with it.
void move_ref_targets(ojson& root, std::vector<std::string>* notes) {
  if (!root.is_object() || (root.contains("$defs") && !root["$defs"].is_object())) return;
  std::map<std::string, std::string> moved;  // old $ref -> new $ref
  std::set<std::string> keys;                // the root keywords moved out of
  std::vector<std::string> refs;             // gathered first: moving changes the tree
  each_ref(
      root, [&](ojson& ref) { refs.push_back(ref.get<std::string>()); }, 0);
  for (const std::string& r : refs) {
    if (r.rfind("#/", 0) != 0 || moved.count(r)) continue;
    const std::string first = r.substr(2, r.find('/', 2) - 2);
    if (first.empty() || kKeywords.count(first) || kAnnotations.count(first) ||
        first == "definitions" || !root.contains(first))
      continue;
    try {
      ojson target = root.at(ojson::json_pointer(r.substr(1)));
      std::string name = r.substr(2);
      std::replace(name.begin(), name.end(), '/', '.');
      root["$defs"][name] = std::move(target);
      moved[r] = "#/$defs/" + pointer_token(name);
      keys.insert(first);
    } catch (const std::exception&) {  // not a pointer into the document: left to the compiler
    }
  }
  if (moved.empty()) return;
  each_ref(
      root,
      [&](ojson& ref) {
        if (auto it = moved.find(ref.get<std::string>()); it != moved.end()) ref = it->second;
      },
      0);
  for (const std::string& k : keys) {
    root.erase(k);
    if (notes) notes->push_back("'" + k + "' (the schemas $refs name in it moved to '$defs') at #");
  }
}

}  // namespace

ojson relax_json_schema(const ojson& schema, std::vector<std::string>* relaxed) {
  ojson out = schema;
  std::vector<std::string> renamed;
  move_ref_targets(out, relaxed);
  relax_at(out, "#", relaxed, &renamed, 0);
  // Every $ref into a oneOf array read as anyOf follows it ("/a/oneOf": "#/a/oneOf[/...]").
  each_ref(
      out,
      [&](ojson& ref) {
        std::string r = ref.get<std::string>();
        for (const std::string& from : renamed)
          if (r.compare(0, from.size() + 1, "#" + from) == 0 &&
              (r.size() == from.size() + 1 || r[from.size() + 1] == '/')) {
            ref = r.replace(from.size() + 1 - 5, 5, "anyOf");  // "#" + from ends in oneOf
            break;
          }
      },
      0);
  return out;
}

Result<std::string> json_schema_text_to_gbnf(std::string_view schema_json) {
  ojson schema = ojson::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return make_error("json_schema: the schema is not valid JSON");
  return json_schema_to_gbnf(schema);
}

std::string json_object_gbnf() {
  return "root ::= object\n" + std::string(kPrimitives);
}

Result<Grammar> compile_json_schema(const ojson& schema) {
  REWIND_TRY(const std::string text, json_schema_to_gbnf(schema));
  auto g = parse_gbnf(text);
  if (!g.ok()) return make_error("json_schema: " + g.error_message());
  return g;
}

Result<std::optional<std::string>> response_format_to_gbnf(const ojson& format,
                                                           std::vector<std::string>* relaxed) {
  using Out = std::optional<std::string>;
  if (!format.is_object()) return make_error("'response_format' must be an object");
  if (!format.contains("type") || !format["type"].is_string())
    return make_error("'response_format.type' must be a string");
  const std::string type = format["type"].get<std::string>();
  // A schema not marked strict: relaxed to compile, each change named.
  auto relaxed_schema = [&](const ojson& schema) -> Result<Out> {
    std::vector<std::string> notes;
    REWIND_TRY(std::string text, json_schema_to_gbnf(relax_json_schema(schema, &notes)));
    if (relaxed)
      for (std::string& n : notes) relaxed->push_back("response_format: " + std::move(n));
    return Out{std::move(text)};
  };
  if (type == "text") return Out{};
  if (type == "json_object") {
    if (!format.contains("schema")) return Out{json_object_gbnf()};
    // llama.cpp's server takes a schema here too.
    if (!format["schema"].is_object())
      return make_error("'response_format.schema' must be an object");
    return relaxed_schema(format["schema"]);
  }
  if (type != "json_schema")
    return make_error("'response_format.type' '" + type +
                      "' is not one of text, json_object, json_schema");
  if (!format.contains("json_schema") || !format["json_schema"].is_object())
    return make_error("'response_format.json_schema' must be an object");
  const ojson& js = format["json_schema"];
  for (auto it = js.begin(); it != js.end(); ++it)
    if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" &&
        it.key() != "description")
      return make_error("unknown field 'response_format.json_schema." + it.key() + "'");
  if (js.contains("strict") && !js["strict"].is_boolean())
    return make_error("'response_format.json_schema.strict' must be a boolean");
  if (!js.contains("schema")) return Out{"root ::= value\n" + std::string(kPrimitives)};
  const bool strict = js.contains("strict") && js["strict"].get<bool>();
  if (strict) {
    REWIND_TRY(std::string text, json_schema_to_gbnf(js["schema"]));
    return Out{std::move(text)};
  }
  return relaxed_schema(js["schema"]);
}

}  // namespace rw
