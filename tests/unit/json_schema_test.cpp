// JSON Schema to grammar (grammar/json_schema.h): each keyword accepts and rejects what it
// should, unsupported keywords are refused by name, and a property test: random schemas, random
// walks through the matcher, every finished output parses and validates (a validator for the
// subset, written here independently of the compiler).
#include "rewind/grammar/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "json_schema_util.h"
#include "rewind/grammar/grammar_ref.h"
#include "rewind/grammar/matcher.h"

namespace rw {
namespace {

using ojson = nlohmann::ordered_json;
using schema_test::random_walk;
using schema_test::SchemaGen;
using schema_test::validate;

Grammar compile(const std::string& schema_text) {
  auto text = json_schema_text_to_gbnf(schema_text);
  EXPECT_TRUE(text.ok()) << text.error_message();
  if (!text.ok()) return Grammar{};
  auto g = parse_gbnf(*text);
  EXPECT_TRUE(g.ok()) << g.error_message() << "\n" << *text;
  return g.ok() ? std::move(g).value() : Grammar{};
}

std::string refusal(const std::string& schema_text) {
  auto text = json_schema_text_to_gbnf(schema_text);
  EXPECT_FALSE(text.ok()) << schema_text;
  return text.ok() ? std::string() : text.error_message();
}

bool accepts(const Grammar& g, const std::string& s) {
  return earley_recognise(g, s).complete;
}

// ---- keyword by keyword ----

TEST(JsonSchema, ObjectsWithRequiredAndOptionalPropertiesInOrder) {
  const Grammar g = compile(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(g, R"({"b":"x"})"));
  EXPECT_TRUE(accepts(g, R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(accepts(g, R"({"a": -12, "b": "x", "c": true})"));
  EXPECT_TRUE(accepts(g, "{\n  \"b\": \"x\",\n  \"c\": false\n}"));
  EXPECT_FALSE(accepts(g, R"({"a":1})"));          // b is required
  EXPECT_FALSE(accepts(g, R"({"b":"x","a":1})"));  // declaration order
  EXPECT_FALSE(accepts(g, R"({"b":"x","d":1})"));  // not declared
  EXPECT_FALSE(accepts(g, R"({"b":"x",})"));
  EXPECT_FALSE(accepts(g, R"({"a":1.5,"b":"x"})"));
  EXPECT_FALSE(accepts(g, R"( {"b":"x"})"));  // no whitespace around the top level
  EXPECT_FALSE(accepts(g, R"({"b":"x"} )"));
  EXPECT_FALSE(accepts(g, "{\"b\":  \"x\"}"));  // one space or a newline run
}

TEST(JsonSchema, AllOptionalPropertiesAllowEmptyObject) {
  const Grammar g = compile(R"({"properties":{"a":{"type":"null"},"b":{"type":"null"}}})");
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(g, R"({"b":null})"));
  EXPECT_TRUE(accepts(g, R"({"a":null,"b":null})"));
  EXPECT_FALSE(accepts(g, R"({,"b":null})"));
}

TEST(JsonSchema, ObjectsWithoutPropertiesAreAnyObject) {
  const Grammar any = compile(R"({"type":"object"})");
  EXPECT_TRUE(accepts(any, R"({"x":[1,{"y":null}],"z":"w"})"));
  EXPECT_FALSE(accepts(any, "[]"));
  const Grammar empty = compile(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(accepts(empty, "{}"));
  EXPECT_FALSE(accepts(empty, R"({"x":1})"));
}

TEST(JsonSchema, ArraysWithMinAndMaxItems) {
  const Grammar g =
      compile(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_TRUE(accepts(g, "[1,2]"));
  EXPECT_TRUE(accepts(g, "[1, 2, 3]"));
  EXPECT_FALSE(accepts(g, "[1,2,3,4]"));
  EXPECT_FALSE(accepts(g, "[1,\"a\"]"));
  const Grammar any = compile(R"({"type":"array"})");
  EXPECT_TRUE(accepts(any, "[]"));
  EXPECT_TRUE(accepts(any, R"([1,"a",[],{}])"));
  const Grammar none = compile(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(accepts(none, "[]"));
  EXPECT_FALSE(accepts(none, "[1]"));
}

TEST(JsonSchema, EnumAndConst) {
  const Grammar e = compile(R"({"enum":["red","gr\"een",3,null,{"k":[1]}]})");
  for (const char* ok : {R"("red")", R"("gr\"een")", "3", "null", R"({"k":[1]})"})
    EXPECT_TRUE(accepts(e, ok)) << ok;
  EXPECT_FALSE(accepts(e, R"("blue")"));
  EXPECT_FALSE(accepts(e, "4"));
  const Grammar typed = compile(R"({"type":"string","enum":["a",1]})");
  EXPECT_TRUE(accepts(typed, R"("a")"));
  EXPECT_FALSE(accepts(typed, "1"));
  const Grammar c = compile(R"({"const":"only"})");
  EXPECT_TRUE(accepts(c, R"("only")"));
  EXPECT_FALSE(accepts(c, R"("other")"));
}

TEST(JsonSchema, AnyOfAndTypeLists) {
  const Grammar g =
      compile(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"boolean"}}]})");
  EXPECT_TRUE(accepts(g, "7"));
  EXPECT_TRUE(accepts(g, "[true,false]"));
  EXPECT_FALSE(accepts(g, R"("x")"));
  const Grammar t = compile(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(t, "null"));
  EXPECT_TRUE(accepts(t, R"("s")"));
  EXPECT_FALSE(accepts(t, "1"));
}

TEST(JsonSchema, StringsEscapesAndLengths) {
  const Grammar s = compile(R"({"type":"string"})");
  EXPECT_TRUE(accepts(s, R"("a\"b\\c\/\b\f\n\r\t\u00e9\ud83d\ude00")"));
  EXPECT_TRUE(accepts(s, "\"é中\xF0\x9F\x98\x80\""));
  EXPECT_FALSE(accepts(s, "\"a\nb\""));     // a raw control character
  EXPECT_FALSE(accepts(s, R"("\ud83d")"));  // a lone surrogate escape
  EXPECT_FALSE(accepts(s, R"("\ude00\ud83d")"));
  EXPECT_FALSE(accepts(s, R"("\x")"));
  const Grammar len = compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(len, R"("a")"));
  EXPECT_TRUE(accepts(len, R"("ab")"));
  EXPECT_TRUE(accepts(len, "\"é中\\n\""));
  EXPECT_TRUE(accepts(len, R"("\ud83d\ude00x")"));  // a surrogate pair is one character
  EXPECT_FALSE(accepts(len, R"("abcd")"));
}

TEST(JsonSchema, NumbersAndIntegers) {
  const Grammar n = compile(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "2.5E-10", "9999999999999999"})
    EXPECT_TRUE(accepts(n, ok)) << ok;
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "1e123", "99999999999999999", "NaN"})
    EXPECT_FALSE(accepts(n, bad)) << bad;
  const Grammar i = compile(R"({"type":"integer"})");
  EXPECT_TRUE(accepts(i, "-42"));
  EXPECT_FALSE(accepts(i, "4.0"));
  EXPECT_FALSE(accepts(i, "1e3"));
}

TEST(JsonSchema, Formats) {
  const Grammar d = compile(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(accepts(d, R"("2024-02-29")"));
  EXPECT_TRUE(accepts(d, R"("2000-02-29")"));
  EXPECT_FALSE(accepts(d, R"("1900-02-29")"));
  EXPECT_FALSE(accepts(d, R"("2023-02-29")"));
  EXPECT_FALSE(accepts(d, R"("2023-04-31")"));
  EXPECT_TRUE(accepts(d, R"("2023-12-31")"));
  EXPECT_FALSE(accepts(d, R"("2023-13-01")"));
  const Grammar dt = compile(R"({"format":"date-time"})");
  EXPECT_TRUE(accepts(dt, R"("2024-01-31T23:59:59.123Z")"));
  EXPECT_TRUE(accepts(dt, R"("2024-01-31T00:00:00+05:30")"));
  EXPECT_FALSE(accepts(dt, R"("2024-01-31T24:00:00Z")"));
  EXPECT_FALSE(accepts(dt, R"("2024-01-31 10:00:00Z")"));
  const Grammar t = compile(R"({"type":"string","format":"time"})");
  EXPECT_TRUE(accepts(t, R"("10:20:30Z")"));
  EXPECT_FALSE(accepts(t, R"("10:20Z")"));
  const Grammar u = compile(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts(u, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(accepts(u, R"("123e4567e89b12d3a456426614174000")"));
  const Grammar ip6 = compile(R"({"type":"string","format":"ipv6"})");
  for (const char* ok : {R"("::")", R"("::1")", R"("2001:db8::8a2e:370:7334")", R"("fe80::")",
                         R"("1:2:3:4:5:6:7:8")", R"("::ffff:192.168.0.1")", R"("1::2:3")"})
    EXPECT_TRUE(accepts(ip6, ok)) << ok;
  for (const char* bad : {R"("1:2:3:4:5:6:7")", R"("1::2::3")", R"("12345::")", R"(":1")",
                          R"("1:2:3:4:5:6:7:8:9")", R"("::ffff:256.0.0.1")"})
    EXPECT_FALSE(accepts(ip6, bad)) << bad;
  const Grammar host = compile(R"({"type":"string","format":"hostname"})");
  for (const char* ok : {R"("localhost")", R"("a-b.example.com")", R"("x1.y2.z3")"})
    EXPECT_TRUE(accepts(host, ok)) << ok;
  for (const char* bad : {R"("-a.com")", R"("a-.com")", R"("a..com")", R"("a_b.com")", R"("")"})
    EXPECT_FALSE(accepts(host, bad)) << bad;
  const Grammar mail = compile(R"({"type":"string","format":"email"})");
  for (const char* ok : {R"("john.doe@example.com")", R"("a+tag@mail.example.org")"})
    EXPECT_TRUE(accepts(mail, ok)) << ok;
  for (const char* bad : {R"("john@")", R"("@example.com")", R"("a..b@example.com")",
                          R"("a b@example.com")", R"("a@b@example.com")"})
    EXPECT_FALSE(accepts(mail, bad)) << bad;
  const Grammar dur = compile(R"({"type":"string","format":"duration"})");
  for (const char* ok :
       {R"("P3Y6M4DT12H30M5S")", R"("PT20M")", R"("P2W")", R"("P1D")", R"("PT1H30M")"})
    EXPECT_TRUE(accepts(dur, ok)) << ok;
  for (const char* bad :
       {R"("P")", R"("PT")", R"("P1H")", R"("P1DT")", R"("P1W2D")", R"("P1Y2D3M")", R"("1D")"})
    EXPECT_FALSE(accepts(dur, bad)) << bad;
  const Grammar ip = compile(R"({"type":"string","format":"ipv4"})");
  EXPECT_TRUE(accepts(ip, R"("192.168.0.255")"));
  EXPECT_FALSE(accepts(ip, R"("192.168.0.256")"));
  EXPECT_FALSE(accepts(ip, R"("01.1.1.1")"));
}

// A schema {"type":"string","pattern":P} for the pattern P (escaped into JSON here).
std::string pattern_schema(const std::string& p) {
  return ojson{{"type", "string"}, {"pattern", p}}.dump();
}

TEST(JsonSchema, PatternsMatchAnywhereUnlessAnchored) {
  const Grammar code = compile(pattern_schema(R"(^[A-Z]{3}-\d{4}$)"));
  EXPECT_TRUE(accepts(code, R"("ABC-1234")"));
  for (const char* bad : {R"("ABC-123")", R"("abc-1234")", R"("xABC-1234")", R"("ABC-12345")"})
    EXPECT_FALSE(accepts(code, bad)) << bad;
  const Grammar inside = compile(pattern_schema("abc"));
  EXPECT_TRUE(accepts(inside, R"("abc")"));
  EXPECT_TRUE(accepts(inside, R"("x\nabc\"y")"));
  EXPECT_FALSE(accepts(inside, R"("ab")"));
  const Grammar ends = compile(pattern_schema("^a|b$"));
  EXPECT_TRUE(accepts(ends, R"("a-")"));
  EXPECT_TRUE(accepts(ends, R"("-b")"));
  EXPECT_FALSE(accepts(ends, R"("-a-")"));
  const Grammar empty = compile(pattern_schema("^$"));
  EXPECT_TRUE(accepts(empty, R"("")"));
  EXPECT_FALSE(accepts(empty, R"(" ")"));
  const Grammar any = compile(pattern_schema(""));
  EXPECT_TRUE(accepts(any, R"("anything \u00e9")"));
}

TEST(JsonSchema, PatternSyntax) {
  struct Case {
    const char* pattern;
    std::vector<const char*> yes, no;  // JSON string texts
  };
  const Case cases[] = {
      {R"(^(?:ab)+$)", {R"("ab")", R"("abab")"}, {R"("")", R"("aba")"}},
      {R"(^(?<year>\d{4})-(0[1-9]|1[0-2])$)", {R"("2024-01")", R"("1999-12")"}, {R"("2024-13")"}},
      {R"(^a{2,}b?c{0,2}$)", {R"("aa")", R"("aaabcc")"}, {R"("a")", R"("aaccc")"}},
      {R"(^a+?b*?$)", {R"("a")", R"("aab")"}, {R"("b")"}},
      {R"(^.$)", {R"("é")", "\"\xF0\x9F\x98\x80\"", R"("\"")", R"("\t")"}, {R"("\n")", R"("ab")"}},
      {R"(^[^a]$)", {R"("b")", R"("\n")", R"("\\")"}, {R"("a")"}},
      {R"(^["\\]+$)", {R"("\"\\")"}, {R"("a")"}},
      {R"(^\u00e9\x41\u{1F600}\t$)",
       {"\"\xC3\xA9"
        "A\xF0\x9F\x98\x80\\t\""},
       {R"("eA")"}},
      {R"(^\uD83D\uDE00$)", {"\"\xF0\x9F\x98\x80\""}, {}},
      {R"(^\s\S\w\W\d\D$)", {R"(" x_-5x")", "\"\xE3\x80\x80xa.0a\""}, {R"("xx_-5x")"}},
      {R"(^[\d\-x]+$)", {R"("1-x")"}, {R"("y")"}},
      {R"(^\x01\cA[\b]$)", {R"("\u0001\u0001\b")"}, {R"("\u0001\u0001")"}},
      {R"(^\.\*\+\?\(\)\[\]\{\}\|\/\^\$$)", {R"(".*+?()[]{}|/^$")"}, {R"("a")"}},
      {R"(^a{,2}}]$)", {R"("a{,2}}]")"}, {R"("aa")"}},
      {R"(^(a|)$)", {R"("a")", R"("")"}, {R"("b")"}},
      // Repeats of items that can match nothing (GBNF refuses x* of an empty x).
      {R"(^(a*)*$)", {R"("")", R"("aaa")"}, {R"("b")"}},
      {R"(^(a?b?){0,3}$)", {R"("")", R"("abab")", R"("b")", R"("ababab")"}, {R"("abababab")"}},
      {R"(^(|a)+$)", {R"("")", R"("aa")"}, {R"("b")"}},
      {R"(^()*(?:)+$)", {R"("")"}, {R"("a")"}},
      {R"(^(?:a|b|)*?c$)", {R"("c")", R"("abc")"}, {R"("ab")"}},
      {R"(^(a{0,3}){2,}$)", {R"("")", R"("aaaaaaa")"}, {R"("ab")"}},
      {R"(^(a?){5000}$)", {R"("")", R"("aaaa")"}, {R"("b")"}},
  };
  for (const Case& c : cases) {
    const Grammar g = compile(pattern_schema(c.pattern));
    for (const char* y : c.yes) EXPECT_TRUE(accepts(g, y)) << c.pattern << " " << y;
    for (const char* n : c.no) EXPECT_FALSE(accepts(g, n)) << c.pattern << " " << n;
  }
}

// Random walks through pattern grammars: each finished string matches its pattern by
// std::regex (ECMAScript), an engine independent of the compiler. Negated classes and '.'
// appear only under * or +, as std::regex counts bytes where the pattern counts code points.
TEST(JsonSchema, PatternRandomWalksMatchByAnotherEngine) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"\\\"", "\\\\", "\\t", "ab", "-12", "é", "red,", "\\u00e9"})
    vocab.push_back(p);
  const int32_t eos = static_cast<int32_t>(vocab.size());
  auto trie = std::make_shared<VocabTrie>(vocab, std::vector<int32_t>{eos});
  const char* patterns[] = {
      R"(^[A-Z]{3}-\d{4}$)",
      R"(^(?:[a-z0-9._%+-]+)@[a-z0-9-]+\.[a-z]{2,}$)",
      R"(ab+c)",
      R"(^\(\d{3}\) \d{3}-\d{4}$)",
      R"(^(red|green|blue)(,(red|green|blue))*$)",
      R"(^[^"\\]*"[^x]+\\$)",
      R"(^.*\t.+$)",
      R"(^\w+( \w+)?$)",
      R"(x|^y|z$)",
      R"(^$)",
      R"(^a{2,4}?b{0,}c?$)",
      R"(^[\x20-\x7e]{1,8}$)",
      R"(^\S+\s\D+$)",
      R"(^(a*b?)*c$)",
      R"(^(x?y?){0,4}$)",
  };
  int walks = 0;
  for (const char* p : patterns) {
    const Grammar g = compile(pattern_schema(p));
    auto a = GrammarAutomaton::create(std::make_shared<Grammar>(g), trie).value();
    const std::regex re(p, std::regex::ECMAScript);
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(p)));
    for (int walk = 0; walk < 20; ++walk) {
      const std::string out = random_walk(a, eos, rng);
      const nlohmann::json v = nlohmann::json::parse(out, nullptr, false);
      ASSERT_TRUE(v.is_string()) << p << " gave " << out;
      EXPECT_TRUE(std::regex_search(v.get<std::string>(), re)) << p << " gave " << out;
      ++walks;
    }
  }
  EXPECT_EQ(walks, 15 * 20);
}

TEST(JsonSchema, PatternsBeyondTheSubsetAreRefused) {
  struct Case {
    const char* pattern;
    const char* want;
  };
  const Case cases[] = {
      {R"((a)\1)", "backreferences are not supported at offset 3"},
      {R"(\k<x>)", "backreferences (\\k) are not supported at offset 0"},
      {R"(a(?=b))", "lookaround and other (?...) groups are not supported at offset 1"},
      {R"(a(?<!b))", "lookaround"},
      {R"(\bword)", "word boundaries (\\b) are not supported at offset 0"},
      {R"(\p{L})", "Unicode property escapes are not supported"},
      {R"(a^b)", "an anchor (^) that is not at an end"},
      {R"((^a))", "an anchor (^)"},
      {R"(a**)", "nothing to repeat at offset 2"},
      {R"(*a)", "nothing to repeat at offset 0"},
      {R"({2}a)", "nothing to repeat at offset 0"},
      {R"(^*)", "a quantifier on an anchor at offset 1"},
      {R"([z-a])", "a range out of order at offset 1"},
      {R"([\d-z])", "a range with a class escape"},
      {R"(a{3,2})", "a repetition {m,n} with n below m at offset 1"},
      {R"(a{20000})", "a repetition count above 10000"},
      {R"((ab)", "an unterminated group at offset 0"},
      {R"((?<a)b>c))", "a malformed group name at offset 0"},
      {R"((?<>a))", "a malformed group name at offset 0"},
      {R"(ab))", "unmatched ')' at offset 2"},
      {R"([ab)", "an unterminated character class at offset 0"},
      {R"([^\s\S])", "a character class that matches no character at offset 0"},
      {R"(\q)", "an unknown escape \\q at offset 0"},
      {R"(\x4)", "a truncated escape"},
      {R"(\x4g)", "a malformed hexadecimal escape at offset 3"},
      {R"(\u{110000})", "a code point escape past U+10FFFF"},
      {R"(a\)", "a pattern that ends in a backslash at offset 1"},
      {R"(\07)", "octal escapes and backreferences are not supported"},
  };
  for (const Case& c : cases) {
    const std::string err = refusal(pattern_schema(c.pattern));
    EXPECT_NE(err.find(c.want), std::string::npos) << c.pattern << "\ngot: " << err;
    EXPECT_NE(err.find("in 'pattern' at #"), std::string::npos) << err;
  }
  std::string deep;
  for (int k = 0; k < 70; ++k) deep += "(";
  deep += "a";
  for (int k = 0; k < 70; ++k) deep += ")";
  EXPECT_NE(refusal(pattern_schema(deep)).find("groups nested deeper than 64"), std::string::npos);
  // Nested repeats of items that can match nothing double the grammar at every level: refused
  // at the cap, not written out (this one took 42 s and 888 MB before the cap).
  std::string nested = "a?";
  for (int k = 0; k < 22; ++k) nested = "(b?" + nested + ")*";
  EXPECT_NE(refusal(pattern_schema(nested)).find("a pattern whose grammar passes 256 KiB"),
            std::string::npos);
  nested = "a?";  // a few levels still compile
  for (int k = 0; k < 6; ++k) nested = "(b?" + nested + ")*";
  EXPECT_TRUE(json_schema_text_to_gbnf(pattern_schema(nested)).ok());
  EXPECT_NE(refusal(R"({"type":"string","pattern":"a","maxLength":3})")
                .find("'pattern' with 'maxLength' at #"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"pattern":3})").find("'pattern' at # must be a string"), std::string::npos);
}

// A schema and JSON texts its grammar must accept (yes) and refuse (no).
struct SchemaCase {
  const char* schema;
  std::vector<const char*> yes, no;
};

void expect_cases(const std::vector<SchemaCase>& cases) {
  for (const SchemaCase& c : cases) {
    const Grammar g = compile(c.schema);
    for (const char* y : c.yes) EXPECT_TRUE(accepts(g, y)) << c.schema << " " << y;
    for (const char* n : c.no) EXPECT_FALSE(accepts(g, n)) << c.schema << " " << n;
  }
}

TEST(JsonSchema, NumberBoundsAreExactWithoutExponents) {
  expect_cases({
      {R"({"type":"number","minimum":0,"maximum":1})",
       {"0", "1", "0.5", "0.0001", "0.999"},
       {"-0.1", "1.5", "1.01", "2", "-0", "1e-2"}},
      {R"({"type":"number","exclusiveMinimum":0})",
       {"0.5", "1", "12.25", "0.01"},
       {"0", "0.0", "0.000", "-1", "-0.5"}},
      {R"({"type":"number","minimum":-2,"exclusiveMaximum":3})",
       {"-2", "-1.5", "0", "2.999", "-0.5"},
       {"-2.5", "-2.01", "3", "3.0", "-3"}},
      {R"({"type":"number","maximum":0})", {"0", "-7.5", "-1"}, {"0.5", "-0", "1"}},
      {R"({"type":"number","exclusiveMaximum":-1})", {"-1.5", "-20"}, {"-1", "-0.5", "0"}},
      {R"({"type":"number","minimum":5,"maximum":5})", {"5"}, {"5.5", "4.5", "6"}},
      {R"({"type":"number","minimum":1,"exclusiveMinimum":1,"maximum":2})",
       {"1.5", "2"},
       {"1", "1.0", "2.5"}},
      // Trailing zeros next to an open end, as anywhere else.
      {R"({"type":"number","exclusiveMinimum":0})",
       {"0.10", "0.100", "0.50", "0.0000000000000010"},
       {"0.00", "0.0000000000000000"}},
      {R"({"type":"number","minimum":-5,"maximum":5})", {"-0.10", "0.10", "-4.50"}, {"-5.10"}},
      {R"({"type":"number","exclusiveMaximum":0})", {"-0.10", "-0.50"}, {"-0.00", "0.10"}},
  });
  EXPECT_NE(refusal(R"({"type":"number","minimum":0.5})")
                .find("'minimum' on a number at # is not supported unless it is a whole number"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type":"number","minimum":3,"exclusiveMaximum":3})")
                .find("no number within the bounds at #"),
            std::string::npos);
}

// Integer bounds written as integers are exact past 2^53, where a double rounds them.
TEST(JsonSchema, IntegerBoundsPastADoublesPrecision) {
  expect_cases({
      {R"({"type":"integer","minimum":9007199254740993})",
       {"9007199254740993", "9007199254740994"},
       {"9007199254740992"}},
      {R"({"type":"integer","maximum":9007199254740995})",
       {"9007199254740995", "-3"},
       {"9007199254740996"}},
      {R"({"type":"integer","exclusiveMaximum":9999999999999999})",
       {"9999999999999998"},
       {"9999999999999999"}},
      {R"({"type":"integer","exclusiveMinimum":-9999999999999999})",
       {"-9999999999999998", "0"},
       {"-9999999999999999"}},
  });
  // Past the 16 digits the rule spells nothing is left.
  EXPECT_NE(
      refusal(R"({"type":"integer","minimum":18446744073709551615})").find("within the bounds"),
      std::string::npos);
}

TEST(JsonSchema, MultipleOf) {
  expect_cases({
      {R"({"type":"integer","multipleOf":3})",
       {"0", "3", "-3", "12", "999999", "1234567890123456"},
       {"1", "-4", "10", "-0", "03", "3.0", "123456789012345678"}},
      {R"({"type":"integer","multipleOf":5,"minimum":1,"exclusiveMaximum":20})",
       {"5", "10", "15"},
       {"0", "20", "25", "7"}},
      {R"({"type":"number","multipleOf":0.01})",
       {"1.25", "0", "-3", "10.5"},
       {"1.255", "1e2", "0.001"}},
      {R"({"type":"number","multipleOf":0.01,"minimum":0,"maximum":1})",
       {"0", "0.99", "1", "0.5"},
       {"1.01", "0.123", "-0.01"}},
      {R"({"type":"number","multipleOf":5,"minimum":0.5})",
       {"5", "10", "100"},
       {"0", "10.5", "12"}},
      {R"({"type":"number","multipleOf":1})", {"7", "-2"}, {"7.5"}},
      {R"({"multipleOf":4})", {"8", "-12"}, {"6", "\"8\""}},
      {R"({"type":"integer","multipleOf":97})", {"97", "9999999999999938"}, {"96", "1994001"}},
      {R"({"type":"integer","multipleOf":5,"minimum":0})", {"0", "5", "123455"}, {"-5", "7"}},
      {R"({"type":"integer","multipleOf":5,"exclusiveMinimum":0})", {"5", "100"}, {"0", "-5"}},
      {R"({"type":"integer","multipleOf":5,"minimum":3})", {"5", "100"}, {"0", "-5", "3"}},
      {R"({"type":"integer","multipleOf":5,"maximum":0})", {"0", "-5", "-100"}, {"5", "-3"}},
  });
}

TEST(JsonSchema, DefsRefsAndRecursion) {
  const Grammar g = compile(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[]})"));
  EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"v":2}]})"));
  const Grammar root = compile(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},
      {"type":"null"}]}},"required":["next"]})");
  EXPECT_TRUE(accepts(root, R"({"next":{"next":null}})"));
  const Grammar defs = compile(R"({"definitions":{"a~b/c":{"type":"boolean"}},
      "type":"array","items":{"$ref":"#/definitions/a~0b~1c"}})");
  EXPECT_TRUE(accepts(defs, "[true]"));
}

TEST(JsonSchema, AnnotationsAreIgnoredAndEmptySchemaIsAnyValue) {
  const Grammar g = compile(R"({"title":"t","description":"d","$schema":"x","default":1,
      "examples":[1],"properties":{"a":{"description":"x","type":"null"}},"required":["a"]})");
  EXPECT_TRUE(accepts(g, R"({"a":null})"));
  const Grammar any = compile("{}");
  EXPECT_TRUE(accepts(any, R"([{"a":"b"},1.5,true,null])"));
  EXPECT_TRUE(accepts(compile("true"), "false"));
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  std::mt19937 rng(12);
  for (int round = 0; round < 12; ++round) {
    const int lo = std::uniform_int_distribution<int>(-1200, 1200)(rng);
    const int hi = lo + std::uniform_int_distribution<int>(0, 1300)(rng);
    const bool excl = round % 3 == 0;
    ojson s = {{"type", "integer"}};
    s[excl ? "exclusiveMinimum" : "minimum"] = excl ? lo - 1 : lo;
    s[excl ? "exclusiveMaximum" : "maximum"] = excl ? hi + 1 : hi;
    const Grammar g = compile(s.dump());
    for (int x = -1600; x <= 1600; ++x)
      ASSERT_EQ(accepts(g, std::to_string(x)), x >= lo && x <= hi) << x << " in " << s.dump();
    EXPECT_FALSE(accepts(g, "-0"));
    EXPECT_FALSE(accepts(g, "0" + std::to_string(std::max(hi, 1))));
  }
  // zod's integers: the safe-integer range, one side only, fractional bounds.
  const Grammar safe =
      compile(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})");
  EXPECT_TRUE(accepts(safe, "9007199254740991"));
  EXPECT_TRUE(accepts(safe, "-9007199254740991"));
  EXPECT_TRUE(accepts(safe, "8999999999999999"));
  EXPECT_FALSE(accepts(safe, "9007199254740992"));
  EXPECT_FALSE(accepts(safe, "-9007199254740992"));
  EXPECT_FALSE(accepts(safe, "10000000000000000"));
  const Grammar pos = compile(R"({"type":"integer","exclusiveMinimum":0})");
  EXPECT_TRUE(accepts(pos, "1"));
  EXPECT_TRUE(accepts(pos, "9999999999999999"));
  EXPECT_FALSE(accepts(pos, "0"));
  EXPECT_FALSE(accepts(pos, "-1"));
  const Grammar frac = compile(R"({"minimum":-2.5,"maximum":3.5})");
  for (const char* ok : {"-2", "0", "3"}) EXPECT_TRUE(accepts(frac, ok)) << ok;
  for (const char* bad : {"-3", "4", "2.5"}) EXPECT_FALSE(accepts(frac, bad)) << bad;
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByName) {
  struct Case {
    const char* schema;
    const char* want;
  };
  const Case cases[] = {
      {R"({"type":"number","minimum":1.5})", "'minimum' on a number at # is not supported"},
      {R"({"type":"integer","minimum":5,"exclusiveMaximum":5})", "no integer within the bounds"},
      {R"({"type":"integer","maximum":"7"})", "'maximum' at # must be a number"},
      {R"({"properties":{"x":{"type":"number","multipleOf":0.25}}})",
       "'multipleOf' 0.25 at #/properties/x is not supported"},
      {R"({"type":"integer","multipleOf":0})", "'multipleOf' at # must be a number above 0"},
      {R"({"type":"integer","multipleOf":1001})", "'multipleOf' 1001 at # is not supported"},
      {R"({"type":"integer","multipleOf":101})",
       "'multipleOf' 101 at # above 100 needs bounds that hold at most 1000 multiples"},
      {R"({"type":"integer","multipleOf":0.01})", "'multipleOf' 0.01 at # is not supported"},
      {R"({"type":"integer","multipleOf":7,"minimum":1,"maximum":6})",
       "no multiple of 7 within the bounds at #"},
      {R"({"type":"integer","multipleOf":2,"minimum":0,"maximum":5000})",
       "'multipleOf' with bounds that hold more than 1000 multiples at #"},
      {R"({"type":"integer","multipleOf":5,"minimum":0,"maximum":1e16})",
       "'multipleOf' with bounds that hold more than 1000 multiples at #"},
      {R"({"oneOf":[{"type":"string"}]})", "unsupported keyword 'oneOf' at #"},
      {R"({"allOf":[{"type":"string"}]})", "unsupported keyword 'allOf' at #"},
      {R"({"not":{"type":"string"}})", "unsupported keyword 'not' at #"},
      {R"({"type":"array","prefixItems":[]})", "unsupported keyword 'prefixItems' at #"},
      {R"({"type":"array","items":{"type":"string","uniqueItems":true}})",
       "unsupported keyword 'uniqueItems' at #/items"},
      {R"({"type":"string","format":"uri"})", "unsupported format 'uri' at #"},
      {R"({"type":"object","additionalProperties":{"type":"string"}})",
       "unsupported keyword 'additionalProperties' (a schema) at #"},
      {R"({"$ref":"http://example.com/s.json"})", "points outside the schema"},
      {R"({"$ref":"#/$defs/missing"})", "'$ref' '#/$defs/missing' at # does not resolve"},
      {R"({"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}})", "'$ref' with 'type' at #"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", "'anyOf' with 'type' at #"},
      {R"({"anyOf":[]})", "'anyOf' at # must be a non-empty array"},
      {R"({"type":"strin"})", "unknown type 'strin' at #"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "'required' names 'b'"},
      {R"({"type":"array","minItems":3,"maxItems":2})", "'maxItems' below 'minItems' at #"},
      {R"({"type":"array","minItems":-1})", "'minItems' at # must be a non-negative integer"},
      {R"({"type":"string","maxLength":100000})", "'maxLength' at # is larger than 10000"},
      {R"({"enum":[1,2],"type":"string"})", "no value of 'enum' at # has the schema's type"},
      {R"({"enum":[1],"minLength":2})", "'enum' with 'minLength' at #"},
      {R"(false)", "schema false at # accepts nothing"},
      {R"({"properties":{"a":false}})", "schema false at #/properties/a"},
      {R"(3)", "the schema at # must be an object or a boolean"},
      {R"({"type":"obj)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    const std::string err = refusal(c.schema);
    EXPECT_NE(err.find(c.want), std::string::npos) << c.schema << "\ngot: " << err;
    EXPECT_EQ(err.rfind("json_schema: ", 0), 0u) << err;
  }
}

TEST(JsonSchema, RefCyclesWithoutAnEndAreRefusedWhenCompiled) {
  for (const char* schema :
       {R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
        R"({"type":"object","properties":{"x":{"$ref":"#"}},"required":["x"]})"}) {
    auto g = compile_json_schema(ojson::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(g.error_message().rfind("json_schema: grammar", 0), 0u) << g.error_message();
  }
  // An optional self-reference ends: it compiles.
  EXPECT_TRUE(
      compile_json_schema(ojson::parse(R"({"type":"object","properties":{"x":{"$ref":"#"}}})"))
          .ok());
}

TEST(JsonSchema, ResponseFormat) {
  auto text = response_format_to_gbnf(ojson::parse(R"({"type":"text"})"));
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->has_value());
  auto obj = response_format_to_gbnf(ojson::parse(R"({"type":"json_object"})"));
  ASSERT_TRUE(obj.ok() && obj->has_value());
  auto g = parse_gbnf(**obj);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(accepts(*g, R"({"a":[1]})"));
  EXPECT_FALSE(accepts(*g, "[1]"));
  // llama.cpp's json_object with a schema: the schema holds (relaxed, as it is not strict).
  std::vector<std::string> notes;
  auto objs = response_format_to_gbnf(
      ojson::parse(R"({"type":"json_object","schema":{"type":"object","properties":)"
                   R"({"n":{"type":"integer","multipleOf":0.5}},"required":["n"]}})"),
      &notes);
  ASSERT_TRUE(objs.ok() && objs->has_value()) << objs.error_message();
  auto og = parse_gbnf(**objs);
  ASSERT_TRUE(og.ok());
  EXPECT_TRUE(accepts(*og, R"({"n":3})"));
  EXPECT_FALSE(accepts(*og, R"({"a":[1]})"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("response_format: 'multipleOf'"), std::string::npos) << notes[0];
  EXPECT_FALSE(response_format_to_gbnf(ojson::parse(R"({"type":"json_object","schema":1})")).ok());
  auto js = response_format_to_gbnf(ojson::parse(
      R"({"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"boolean"}}})"));
  ASSERT_TRUE(js.ok() && js->has_value()) << js.error_message();
  auto jg = parse_gbnf(**js);
  ASSERT_TRUE(jg.ok());
  EXPECT_TRUE(accepts(*jg, "true"));
  for (const char* bad : {R"([])", R"({"type":"yaml"})", R"({"type":"json_schema"})",
                          R"({"type":"json_schema","json_schema":{"strict":1}})",
                          R"({"type":"json_schema","json_schema":{"schema":{},"extra":1}})",
                          R"({"type":"json_schema","json_schema":{"schema":{"type":7}}})",
                          R"({"type":"json_schema","json_schema":{"strict":true,)"
                          R"("schema":{"pattern":"(a)\\1"}}})"})
    EXPECT_FALSE(response_format_to_gbnf(ojson::parse(bad)).ok()) << bad;
  // Not strict: what the subset lacks is relaxed, and each change is named.
  std::vector<std::string> relaxed;
  auto loose = response_format_to_gbnf(
      ojson::parse(
          R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object",)"
          R"("properties":{"a":{"type":"string","pattern":"^(a)\\1$"}},"required":["a"]}}})"),
      &relaxed);
  ASSERT_TRUE(loose.ok() && loose->has_value()) << loose.error_message();
  EXPECT_EQ(relaxed, std::vector<std::string>{
                         "response_format: 'pattern' (pattern: backreferences are not supported "
                         "at offset 4) at #/properties/a"});
  auto lg = parse_gbnf(**loose);
  ASSERT_TRUE(lg.ok());
  EXPECT_TRUE(accepts(*lg, R"({"a":"b"})"));
  EXPECT_FALSE(accepts(*lg, R"({"b":"a"})"));  // the rest still holds
}

// relax_json_schema takes out exactly what the compiler refuses, and says where.
TEST(JsonSchema, RelaxedSchemasCompileAndNameEachChange) {
  const ojson schema = ojson::parse(R"({
    "type": "object",
    "properties": {
      "mail": {"type": "string", "format": "uri"},
      "price": {"type": "number", "minimum": 0.5, "multipleOf": 0.03},
      "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
      "kind": {"oneOf": [{"const": "a"}, {"$ref": "#/$defs/k", "description": "d", "title": "t"}]},
      "day": {"type": "string", "format": "date", "maxLength": 10},
      "n": {"enum": [1, 2], "minimum": 1}
    },
    "required": ["mail"],
    "$defs": {"k": {"type": "string", "pattern": "\\bx"}}
  })");
  EXPECT_FALSE(json_schema_to_gbnf(schema).ok());
  std::vector<std::string> notes;
  const ojson r = relax_json_schema(schema, &notes);
  EXPECT_EQ(notes,
            (std::vector<std::string>{
                "'format' 'uri' at #/properties/mail", "'multipleOf' 0.03 at #/properties/price",
                "'minimum' on a number (not a whole number within 1e15) at #/properties/price",
                "'additionalProperties' (a schema) read as true at #/properties/tags",
                "'oneOf' read as 'anyOf' at #/properties/kind",
                "'format' with a length at #/properties/day",
                "'minimum' beside 'enum' / 'const' at #/properties/n",
                "'pattern' (pattern: word boundaries (\\b) are not supported at offset 0) "
                "at #/$defs/k"}));
  EXPECT_EQ(r["properties"]["kind"]["anyOf"][1]["title"], "t");  // annotations stay
  auto text = json_schema_to_gbnf(r);
  ASSERT_TRUE(text.ok()) << text.error_message();
  auto g = parse_gbnf(*text);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_TRUE(accepts(*g, R"({"mail":"m","kind":"a","n":2})"));
  EXPECT_FALSE(accepts(*g, R"({"kind":"a"})"));  // mail is still required
  EXPECT_FALSE(accepts(*g, R"({"mail":"m","n":3})"));
  // Combinators beside the object's own keywords: the object wins (oneOf / allOf dropped, the
  // required names its properties lack not required); allOf of one schema is that schema; a
  // $ref into a oneOf read as anyOf follows it.
  for (const char* text :
       {R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},)"
        R"("oneOf":[{"required":["a"]},{"required":["b"]}]})",
        R"({"type":"object","allOf":[{"properties":{"a":{"type":"string"}}}],"required":["a"]})",
        R"({"type":"object","properties":{"a":{"allOf":[{"$ref":"#/$defs/x"}],"title":"t"}},)"
        R"("required":["a"],"$defs":{"x":{"type":"integer"}}})",
        R"({"type":"object","properties":{"k":{"oneOf":[{"type":"integer"},{"type":"null"}]},)"
        R"("j":{"$ref":"#/properties/k/oneOf/0"}},"required":["k","j","gone"]})"}) {
    notes.clear();
    const ojson relaxed = relax_json_schema(ojson::parse(text), &notes);
    EXPECT_FALSE(notes.empty()) << text;
    auto t = json_schema_to_gbnf(relaxed);
    ASSERT_TRUE(t.ok()) << text << "\n" << t.error_message() << "\n" << relaxed.dump();
    auto gg = parse_gbnf(*t);
    ASSERT_TRUE(gg.ok()) << gg.error_message();
  }
  // OpenAPI's components: the schemas named by $refs move to $defs.
  notes.clear();
  const ojson openapi = relax_json_schema(
      ojson::parse(R"({"type":"object","properties":{"p":{"$ref":"#/components/schemas/Pet"}},)"
                   R"("components":{"schemas":{"Pet":{"type":"object","properties":{"tag":)"
                   R"({"$ref":"#/components/schemas/Tag"}}},"Tag":{"type":"string"}}}})"),
      &notes);
  EXPECT_EQ(notes, std::vector<std::string>{
                       "'components' (the schemas $refs name in it moved to '$defs') at #"});
  auto ot = json_schema_to_gbnf(openapi);
  ASSERT_TRUE(ot.ok()) << ot.error_message() << "\n" << openapi.dump();
  auto og = parse_gbnf(*ot);
  ASSERT_TRUE(og.ok()) << og.error_message();
  EXPECT_TRUE(accepts(*og, R"({"p":{"tag":"x"}})"));
  EXPECT_FALSE(accepts(*og, R"({"p":{"tag":1}})"));
  const ojson inlined = relax_json_schema(
      ojson::parse(R"({"properties":{"a":{"allOf":[{"$ref":"#/$defs/x"}],"title":"t"}},)"
                   R"("$defs":{"x":{"type":"integer"}}})"),
      nullptr);
  EXPECT_EQ(inlined["properties"]["a"], ojson::parse(R"({"title":"t","$ref":"#/$defs/x"})"));
  // A schema the compiler takes is left as it is.
  const ojson fine = ojson::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  notes.clear();
  EXPECT_EQ(relax_json_schema(fine, &notes), fine);
  EXPECT_TRUE(notes.empty());
}

// ---- the property test ----

TEST(JsonSchema, RandomSchemasRandomWalksProduceValidJson) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"",   "\":",    "\": ", "\",",    "\", \"", "},",   "}",
                        "]}",    "[{",     "true", "false",  "null",   "\n  ", "12",
                        "2024-", "-02-29", "T23:", ":59Z\"", "0.",     "e-",   "p0",
                        "p1\"",  "é",      "\xC3", "\xA9",   "中",     "\\u",  "\\ud83d\\ude00",
                        "s1"})
    vocab.push_back(p);
  const int32_t eos = static_cast<int32_t>(vocab.size());
  auto trie = std::make_shared<VocabTrie>(vocab, std::vector<int32_t>{eos});
  int outputs = 0, nontrivial = 0;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    SchemaGen gen(seed);
    const ojson schema = gen.root();
    auto text = json_schema_to_gbnf(schema);
    ASSERT_TRUE(text.ok()) << text.error_message() << "\n" << schema.dump();
    auto g = parse_gbnf(*text);
    ASSERT_TRUE(g.ok()) << g.error_message() << "\n" << *text;
    auto a =
        GrammarAutomaton::create(std::make_shared<Grammar>(std::move(g).value()), trie).value();
    std::mt19937 rng(seed * 7919);
    for (int walk = 0; walk < 6; ++walk) {
      const std::string out = random_walk(a, eos, rng);
      const nlohmann::json parsed = nlohmann::json::parse(out, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << "not JSON: " << out << "\nschema " << schema.dump();
      std::string why;
      ASSERT_TRUE(validate(parsed, schema, schema, why))
          << why << "\noutput " << out << "\nschema " << schema.dump();
      ++outputs;
      nontrivial += out.size() > 12;
    }
  }
  EXPECT_EQ(outputs, 900);
  EXPECT_GT(nontrivial, 300);  // the walks reach into the schemas, not only their shortest values
}

// The validator itself must reject what it should, or the property test proves nothing.
TEST(JsonSchema, TestValidatorRejectsInvalidValues) {
  const ojson s =
      ojson::parse(R"({"type":"object","properties":{"d":{"type":"string","format":"date"},
      "n":{"type":"array","items":{"type":"integer"},"maxItems":1}},"required":["d"],"additionalProperties":false})");
  std::string why;
  EXPECT_TRUE(validate(nlohmann::json::parse(R"({"d":"2024-02-29","n":[1]})"), s, s, why)) << why;
  for (const char* bad :
       {R"({"d":"2023-02-29"})", R"({"n":[1]})", R"({"d":"2024-01-01","n":[1,2]})",
        R"({"d":"2024-01-01","n":[1.5]})", R"({"d":"2024-01-01","x":1})", "[]"})
    EXPECT_FALSE(validate(nlohmann::json::parse(bad), s, s, why)) << bad;
  struct Case {
    const char* format;
    const char* good;
    std::vector<std::string> bad;
  };
  const Case formats[] = {
      {"ipv6", "2001:db8::1", {"2001:db8::1::", "g::1", "1:2:3:4:5:6:7"}},
      {"hostname", "a.example.com", {"-a.com", "a..b", "a_b", std::string(64, 'a') + ".com"}},
      {"email", "a.b@c.de", {"a..b@c.de", "ab@", "a b@c.de", "a@-c.de"}},
      {"duration", "P1Y2M3DT4H5M6S", {"P", "PT", "P1H", "P1W2D", "P1D2Y"}},
  };
  const ojson m3 = ojson::parse(R"({"multipleOf":3})"),
              m01 = ojson::parse(R"({"multipleOf":0.01})");
  EXPECT_TRUE(validate(nlohmann::json(9), m3, m3, why));
  EXPECT_FALSE(validate(nlohmann::json(7), m3, m3, why));
  EXPECT_FALSE(validate(nlohmann::json(10000001), m3, m3, why));  // exact, however large
  EXPECT_TRUE(validate(nlohmann::json::parse("0.07"), m01, m01, why));
  EXPECT_FALSE(validate(nlohmann::json::parse("0.075"), m01, m01, why));
  for (const Case& c : formats) {
    EXPECT_TRUE(schema_test::valid_format(c.format, c.good)) << c.format;
    for (const std::string& b : c.bad) EXPECT_FALSE(schema_test::valid_format(c.format, b)) << b;
  }
}

}  // namespace
}  // namespace rw
