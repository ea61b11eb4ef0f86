// Test helpers for JSON Schema output (tests/unit/json_schema_test.cpp, tests/exact/
// constrained_test.cpp): a validator for the structured-outputs subset written independently
// of the compiler, a generator of random schemas in that subset, and a random walk through a
// grammar's matcher that ends it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "rewind/grammar/matcher.h"

namespace rw::schema_test {

using ojson = nlohmann::ordered_json;

// ---- a validator for the subset, independent of the compiler ----

inline int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool valid_date(const std::string& s) {
  static const std::regex re(R"(^(\d{4})-(\d{2})-(\d{2})$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  if (mo < 1 || mo > 12 || d < 1) return false;
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return d <= days[mo - 1];
}

inline bool valid_time(const std::string& s) {
  static const std::regex re(
      R"(^([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$)");
  return std::regex_match(s, re);
}

inline bool valid_format(const std::string& f, const std::string& s) {
  if (f == "date") return valid_date(s);
  if (f == "time") return valid_time(s);
  if (f == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t != std::string::npos && valid_date(s.substr(0, t)) && valid_time(s.substr(t + 1));
  }
  if (f == "uuid") {
    static const std::regex re(
        R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
    return std::regex_match(s, re);
  }
  if (f == "ipv6") {
    unsigned char buf[16];
    return inet_pton(AF_INET6, s.c_str(), buf) == 1;
  }
  if (f == "hostname") {  // RFC 1123: labels of 1-63, letters, digits, inner hyphens; 253 in all
    static const std::regex label(R"(^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$)");
    if (s.empty() || s.size() > 253) return false;
    for (size_t b = 0;;) {
      const size_t e = std::min(s.find('.', b), s.size());
      if (!std::regex_match(s.substr(b, e - b), label)) return false;
      if (e == s.size()) return true;
      b = e + 1;
    }
  }
  if (f == "email") {  // RFC 5321 Mailbox: a dot-atom local part of at most 64, a host name
    static const std::regex local(
        R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$)");
    const size_t at = s.rfind('@');
    return at != std::string::npos && at <= 64 && s.size() <= 254 &&
           std::regex_match(s.substr(0, at), local) && valid_format("hostname", s.substr(at + 1));
  }
  if (f == "duration") {  // RFC 3339 Appendix A (ISO 8601 durations)
    static const std::regex re(
        R"(^P((\d+D|\d+M(\d+D)?|\d+Y(\d+M(\d+D)?)?)(T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S))?)"
        R"(|T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S)|\d+W)$)");
    return std::regex_match(s, re);
  }
  if (f == "ipv4") {
    static const std::regex re(R"(^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$)");
    std::smatch m;
    if (!std::regex_match(s, m, re)) return false;
    for (int k = 1; k <= 4; ++k) {
      const std::string o = m[k];
      if ((o.size() > 1 && o[0] == '0') || std::stoi(o) > 255) return false;
    }
    return true;
  }
  return false;
}

inline const ojson* resolve(const ojson& root, const std::string& ref) {
  const ojson* t = &root;
  size_t i = 2;
  while (ref.size() > 1 && i <= ref.size()) {
    size_t e = ref.find('/', i);
    if (e == std::string::npos) e = ref.size();
    const std::string tok = ref.substr(i, e - i);
    if (!t->contains(tok)) return nullptr;
    t = &(*t)[tok];
    i = e + 1;
  }
  return t;
}

// Whether `v` validates against `s` (only the keywords of the subset; an unknown one fails).
inline bool validate(const nlohmann::json& v, const ojson& s, const ojson& root, std::string& why) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const ojson* t = resolve(root, s["$ref"].get<std::string>());
    return t && validate(v, *t, root, why);
  }
  if (s.contains("anyOf")) {
    for (const ojson& alt : s["anyOf"])
      if (validate(v, alt, root, why)) return true;
    why = "no anyOf branch matches " + v.dump();
    return false;
  }
  if (s.contains("const") && nlohmann::json::parse(s["const"].dump()) != v) {
    why = "const differs: " + v.dump();
    return false;
  }
  if (s.contains("enum")) {
    bool found = false;
    for (const ojson& e : s["enum"]) found |= nlohmann::json::parse(e.dump()) == v;
    if (!found) {
      why = "not in enum: " + v.dump();
      return false;
    }
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string()) {
      types.push_back(s["type"]);
    } else {
      for (const ojson& t : s["type"]) types.push_back(t);
    }
    bool ok = false;
    for (const std::string& t : types)
      ok |= (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
            (t == "integer" &&
             (v.is_number_integer() ||
              (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))) ||
            (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
            (t == "object" && v.is_object()) || (t == "array" && v.is_array());
    if (!ok) {
      why = "wrong type: " + v.dump() + " for " + s["type"].dump();
      return false;
    }
  }
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    why = "a number that is not finite";
    return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    const bool out = (s.contains("minimum") && x < s["minimum"].get<double>()) ||
                     (s.contains("maximum") && x > s["maximum"].get<double>()) ||
                     (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) ||
                     (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>());
    if (out) {
      why = "out of bounds: " + v.dump();
      return false;
    }
  }
  if (v.is_number() && s.contains("multipleOf")) {  // exact for integers, else to 1e-6
    const double m = s["multipleOf"].get<double>(), q = v.get<double>() / m;
    const bool whole = s["multipleOf"].is_number_integer() && v.is_number_integer();
    if (whole ? v.get<int64_t>() % s["multipleOf"].get<int64_t>() != 0
              : std::fabs(q - std::round(q)) > 1e-6 * std::max(1.0, std::fabs(q))) {
      why = "not a multiple of " + s["multipleOf"].dump() + ": " + v.dump();
      return false;
    }
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const ojson& r : s["required"])
        if (!v.contains(r.get<std::string>())) {
          why = "missing required " + r.dump();
          return false;
        }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (s.contains("properties") && s["properties"].contains(it.key())) {
        if (!validate(it.value(), s["properties"][it.key()], root, why)) return false;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        why = "additional property " + it.key();
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) {
      why = "too few items";
      return false;
    }
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) {
      why = "too many items";
      return false;
    }
    if (s.contains("items"))
      for (const auto& x : v)
        if (!validate(x, s["items"], root, why)) return false;
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<int64_t>()) {
      why = "string too short";
      return false;
    }
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<int64_t>()) {
      why = "string too long";
      return false;
    }
    if (s.contains("format") && !valid_format(s["format"], str)) {
      why = "bad " + s["format"].get<std::string>() + ": " + str;
      return false;
    }
  }
  return true;
}

class SchemaGen {
 public:
  explicit SchemaGen(uint32_t seed) : rng_(seed) {}

  ojson root() {
    ojson s = gen(0);
    if (pick(3) == 0) {  // definitions referenced from inside
      ojson defs = ojson::object();
      defs["d0"] = gen(2);
      defs["node"] = {{"type", "object"},
                      {"properties",
                       {{"n", {{"type", "integer"}}},
                        {"next", {{"anyOf", {{{"$ref", "#/$defs/node"}}, {{"type", "null"}}}}}}}},
                      {"required", {"n", "next"}},
                      {"additionalProperties", false}};
      ojson obj = {
          {"type", "object"},
          {"properties",
           {{"main", s}, {"d", {{"$ref", "#/$defs/d0"}}}, {"list", {{"$ref", "#/$defs/node"}}}}},
          {"required", {"main", "list"}}};
      obj["$defs"] = defs;
      return obj;
    }
    return s;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  ojson value() {
    switch (pick(6)) {
      case 0:
        return pick(2) == 0;
      case 1:
        return pick(100) - 50;
      case 2:
        return "s" + std::to_string(pick(10)) + (pick(2) ? "é\"" : "");
      case 3:
        return nullptr;
      case 4:
        return 0.25 * pick(9);
      default:
        return ojson{{"k", pick(3)}};
    }
  }

  ojson gen(int depth) {
    const int kind = depth >= 3 ? pick(8) : pick(13);
    switch (kind) {
      case 0:
        return {{"type", "string"}};
      case 1: {
        ojson s = {{"type", "string"}};
        const int lo = pick(4);
        if (pick(2)) s["minLength"] = lo;
        if (pick(2)) s["maxLength"] = lo + pick(4);
        return s;
      }
      case 2: {
        const char* f[] = {"date", "time",     "date-time", "uuid",    "ipv4",
                           "ipv6", "hostname", "email",     "duration"};
        return {{"type", "string"}, {"format", f[pick(9)]}};
      }
      case 3: {
        if (pick(2)) return {{"type", pick(2) ? "number" : "integer"}};
        // Bounds: inclusive, exclusive, one side or both, wide or a step or two apart.
        ojson n = {{"type", pick(3) ? "integer" : "number"}};
        const int lo = pick(2000) - 1000;
        if (pick(3)) n[pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
        if (pick(3))
          n[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2 + pick(pick(2) ? 2 : 50000);
        // multipleOf: 0.01 on numbers whatever the bounds; 3 where the digit rule or a list of
        // at most 1000 multiples holds it (no bounds, or both a few apart).
        const bool has_lo = n.contains("minimum") || n.contains("exclusiveMinimum");
        const bool has_hi = n.contains("maximum") || n.contains("exclusiveMaximum");
        const int span = has_hi ? n.value("maximum", n.value("exclusiveMaximum", 0)) - lo : 0;
        if (pick(4) == 0) {
          if (n["type"] == "number" && pick(2))
            n["multipleOf"] = 0.01;
          else if ((!has_lo && !has_hi) || (has_lo && has_hi && span >= 6 && span < 3000))
            n["multipleOf"] = 3;
        }
        return n;
      }
      case 4:
        return {{"type", pick(2) ? "boolean" : "null"}};
      case 5: {
        ojson e = ojson::array();
        for (int k = 0, n = 1 + pick(4); k < n; ++k) e.push_back(value());
        return {{"enum", e}};
      }
      case 6:
        return {{"const", value()}};
      case 7:
        return {{"type", {"string", "null"}}, {"description", "nullable"}};
      case 8:
      case 9: {
        ojson props = ojson::object();
        ojson req = ojson::array();
        for (int k = 0, n = 1 + pick(4); k < n; ++k) {
          const std::string key = std::string("p") + std::to_string(k) + (pick(4) ? "" : " \"q\"");
          props[key] = gen(depth + 1);
          if (pick(2)) req.push_back(key);
        }
        ojson s = {{"type", "object"}, {"properties", props}, {"required", req}};
        if (pick(2)) s["additionalProperties"] = false;
        return s;
      }
      case 10: {
        ojson s = {{"type", "array"}, {"items", gen(depth + 1)}};
        const int lo = pick(3);
        if (pick(2)) s["minItems"] = lo;
        if (pick(2)) s["maxItems"] = lo + pick(3);
        return s;
      }
      case 11: {
        ojson alts = ojson::array();
        for (int k = 0, n = 2 + pick(2); k < n; ++k) alts.push_back(gen(depth + 1));
        return {{"anyOf", alts}};
      }
      default:
        return pick(3) ? ojson::object() : ojson{{"type", "object"}};  // any value / object
    }
  }

  std::mt19937 rng_;
};

// A random walk through the matcher: random allowed tokens for a while, then the token that
// brings the grammar closest to its end, then end-of-sequence. Returns the text.
inline std::string random_walk(const std::shared_ptr<GrammarAutomaton>& a, int32_t eos,
                               std::mt19937& rng) {
  const VocabTrie& v = a->vocab();
  GrammarMatcher m(a);
  TokenMask mask(static_cast<size_t>(v.n_words()));
  std::string text;
  const int wander = std::uniform_int_distribution<int>(0, 80)(rng);
  for (int step = 0; step < 5000; ++step) {
    EXPECT_TRUE(m.allowed(mask.data()).ok());
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < v.n_vocab(); ++id)
      if (mask_test(mask.data(), id)) ids.push_back(id);
    EXPECT_FALSE(ids.empty()) << "dead end after: " << text;
    if (ids.empty()) return text;
    int32_t choice = -1;
    if (m.is_accepting() &&
        (step >= wander || std::uniform_int_distribution<int>(0, 3)(rng) == 0)) {
      choice = eos;
    } else if (step < wander) {
      choice = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      if (choice == eos) continue;
    } else {
      uint32_t best = kGrammarInf;
      std::vector<int32_t> best_ids;
      for (int32_t id : ids) {
        if (id == eos) continue;
        GrammarMatcher probe = m;
        EXPECT_TRUE(probe.accept(id).ok());
        const uint32_t d = probe.min_bytes_to_accept();
        if (d < best) best_ids.clear(), best = d;
        if (d == best) best_ids.push_back(id);
      }
      choice = best_ids[std::uniform_int_distribution<size_t>(0, best_ids.size() - 1)(rng)];
    }
    EXPECT_TRUE(m.accept(choice).ok());
    if (choice == eos) return text;
    text += v.bytes(choice);
  }
  ADD_FAILURE() << "the walk did not finish: " << text;
  return text;
}

}  // namespace rw::schema_test
