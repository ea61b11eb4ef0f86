// GBNF parser (grammar/gbnf.h): the syntax, the lowering of classes to UTF-8, repetition, and
// every malformed input with its line:column message.
#include "rewind/grammar/gbnf.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "rewind/grammar/grammar_ref.h"
#include "rewind/grammar/matcher.h"

namespace rw {
namespace {

Grammar parse_ok(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g.ok()) << g.error_message() << "\n" << text;
  return g.ok() ? std::move(g).value() : Grammar{};
}

std::string parse_error(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? std::string() : g.error_message();
}

// Whether `s` is a string of `g`, by the Earley reference and by the automaton (which must agree).
bool matches(const Grammar& g, const std::string& s) {
  const EarleyResult ref = earley_recognise(g, s);
  std::vector<std::string> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  auto made = GrammarAutomaton::create(
      std::make_shared<Grammar>(g), std::make_shared<VocabTrie>(bytes, std::vector<int32_t>{256}));
  EXPECT_TRUE(made.ok()) << made.error_message();
  if (!made.ok()) return false;
  GrammarAutomaton& a = **made;
  auto st = a.step_bytes(a.initial_state(), s);
  EXPECT_TRUE(st.ok());
  const bool dfa = st.ok() && *st != GrammarAutomaton::kDead && a.is_accepting(*st);
  EXPECT_EQ(dfa, ref.complete) << "automaton and Earley disagree on '" << s << "'";
  EXPECT_EQ(st.ok() && *st != GrammarAutomaton::kDead, ref.viable) << s;
  return ref.complete;
}

TEST(Gbnf, SequenceAlternationGroupsAndComments) {
  const Grammar g = parse_ok(
      "# a comment line\n"
      "root ::= greeting \" \" ( \"world\" | name )  # trailing comment\n"
      "greeting ::= \"hello\" | \"hi\"\n"
      "name ::= [A-Z] [a-z]*\n");
  EXPECT_TRUE(matches(g, "hello world"));
  EXPECT_TRUE(matches(g, "hi Bob"));
  EXPECT_TRUE(matches(g, "hi B"));
  EXPECT_FALSE(matches(g, "hi bob"));
  EXPECT_FALSE(matches(g, "hello"));
  EXPECT_FALSE(matches(g, "hello world!"));
}

TEST(Gbnf, GroupsMaySpanLinesAndCrlfEndsRules) {
  const Grammar g = parse_ok("root ::= (\r\n  \"a\" |\r\n  \"b\"\r\n) x\r\nx ::= \"c\"\r\n");
  EXPECT_TRUE(matches(g, "ac"));
  EXPECT_TRUE(matches(g, "bc"));
  EXPECT_FALSE(matches(g, "c"));
}

TEST(Gbnf, RepetitionOperatorsCountExactly) {
  struct Case {
    const char* op;
    int lo, hi;  // hi -1: unbounded (checked up to 12)
  };
  for (const Case& c :
       {Case{"*", 0, -1}, Case{"+", 1, -1}, Case{"?", 0, 1}, Case{"{3}", 3, 3}, Case{"{2,}", 2, -1},
        Case{"{1,4}", 1, 4}, Case{"{0,2}", 0, 2}, Case{"{ 2 , 3 }", 2, 3}, Case{"{0}", 0, 0}}) {
    const Grammar g = parse_ok(std::string("root ::= \"ab\"") + c.op + " \"c\"\n");
    for (int n = 0; n <= 12; ++n) {
      std::string s;
      for (int k = 0; k < n; ++k) s += "ab";
      const bool want = n >= c.lo && (c.hi < 0 || n <= c.hi);
      EXPECT_EQ(matches(g, s + "c"), want) << c.op << " n=" << n;
    }
    EXPECT_FALSE(matches(g, "abac"));
  }
}

TEST(Gbnf, RepetitionAppliesToGroupsAndClasses) {
  const Grammar g = parse_ok("root ::= ( [0-9] \"-\" )+ [a-c]{2}\n");
  EXPECT_TRUE(matches(g, "1-2-ab"));
  EXPECT_TRUE(matches(g, "9-cc"));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_FALSE(matches(g, "1-abc"));
  EXPECT_FALSE(matches(g, "12-ab"));
}

TEST(Gbnf, ClassesRangesNegationAndUtf8) {
  const Grammar g = parse_ok("root ::= [a-cx-] [^a-z] [α-ω]\n");
  EXPECT_TRUE(matches(g, "aAα"));
  EXPECT_TRUE(matches(g, "x1ω"));
  EXPECT_TRUE(matches(g, "-éβ"));                        // é: a two-byte code point outside a-z
  EXPECT_TRUE(matches(g, "c\xF0\x9F\x98\x80\xCE\xBB"));  // a four-byte one, then λ
  EXPECT_FALSE(matches(g, "dAα"));
  EXPECT_FALSE(matches(g, "aaα"));
  EXPECT_FALSE(matches(g, "aAa"));
  EXPECT_FALSE(matches(g, "aA\xCF\x8A"));             // ϊ is past ω
  EXPECT_FALSE(matches(g, "a\xFF\xCE\xB1"));          // not UTF-8
  EXPECT_FALSE(matches(g, "a\xED\xA0\x80\xCE\xB1"));  // an encoded surrogate
  EXPECT_FALSE(matches(g, "a\xC0\x81\xCE\xB1"));      // overlong
}

TEST(Gbnf, AnyCharIsEveryCodePointAndNothingElse) {
  const Grammar g = parse_ok("root ::= . .\n");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, std::string("\0z", 2)));
  EXPECT_TRUE(matches(g, "\xF4\x8F\xBF\xBF\xEF\xBF\xBF"));  // U+10FFFF, U+FFFF
  EXPECT_TRUE(matches(g, "\xDF\xBF\xE0\xA0\x80"));          // U+07FF, U+0800
  EXPECT_FALSE(matches(g,
                       "\xF4\x90\x80\x80"
                       "a"));  // past U+10FFFF
  EXPECT_FALSE(matches(g,
                       "\xE0\x80\x80"
                       "a"));  // overlong three-byte
  EXPECT_FALSE(matches(g,
                       "\x80"
                       "a"));  // a lone continuation byte
  EXPECT_FALSE(matches(g, "a"));
}

TEST(Gbnf, EscapesInLiteralsAndClasses) {
  const Grammar g =
      parse_ok("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\" [\\[\\]] [\\x30-\\x39]\n");
  EXPECT_TRUE(matches(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\n\r\\\"[5"));
  EXPECT_TRUE(matches(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\n\r\\\"]0"));
  EXPECT_FALSE(matches(g, "A\xE9\xF0\x9F\x98\x80\t\n\r\\\"]0"));  // \u00e9 is UTF-8, not a byte
}

TEST(Gbnf, EmptyAlternativesAndOtherRoot) {
  auto g = parse_gbnf("start ::= \"a\" opt\nopt ::= \"b\" | \n", "start");
  ASSERT_TRUE(g.ok()) << g.error_message();
  EXPECT_TRUE(matches(*g, "a"));
  EXPECT_TRUE(matches(*g, "ab"));
  EXPECT_FALSE(matches(*g, "abb"));
}

TEST(Gbnf, RecursionThatIsNotLeftRecursion) {
  const Grammar g = parse_ok("root ::= \"(\" root \")\" | \"x\"\n");
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "(((x)))"));
  EXPECT_FALSE(matches(g, "((x)"));
}

TEST(Gbnf, UnproductiveAlternativesAreDropped) {
  // An empty class can never match: its alternative goes, the rest stays.
  const Grammar g = parse_ok("root ::= \"a\" [^\\x00-\\U0010FFFF] | \"b\"\n");
  EXPECT_EQ(g.rules[g.root].alts.size(), 1u);
  EXPECT_TRUE(matches(g, "b"));
  EXPECT_FALSE(matches(g, "a"));
}

TEST(Gbnf, LiteralHelperRoundTrips) {
  const std::string text = std::string("say \"hi\"\\ \x01\n\x7F é", 16);
  const Grammar g = parse_ok("root ::= " + gbnf_literal(text) + "\n");
  EXPECT_TRUE(matches(g, text));
  EXPECT_NE(g.to_string().find("root ::="), std::string::npos);
}

TEST(Gbnf, MalformedInputsNameLineAndColumn) {
  struct Case {
    std::string text, want;
  };
  const Case cases[] = {
      {"root ::= \"abc", "grammar 1:10: unterminated string literal"},
      {"root ::= [a-", "grammar 1:10: unterminated character class"},
      {"root ::= [ab", "grammar 1:10: unterminated character class"},
      {"root ::= foo\n", "grammar 1:10: undefined rule 'foo'"},
      {"root ::= \"a\"\nroot ::= \"b\"\n",
       "grammar 2:1: rule 'root' is defined twice (first at 1:1)"},
      {"root = \"a\"\n", "grammar 1:6: expected '::=' after rule name 'root', found '='"},
      {"root ::= (\"a\"\n",
       "grammar 2:1: expected ')' to close the group at 1:10, found the end of the grammar"},
      {"root ::= \"a\" )\n", "grammar 1:14: unexpected ')' in rule 'root'"},
      {"root ::= *\n", "grammar 1:10: '*' must follow an item"},
      {"root ::= \"a\" | +\n", "grammar 1:16: '+' must follow an item"},
      {"root ::= \"a\"{2,1}\n", "grammar 1:13: repetition {m,n} with n < m"},
      {"root ::= \"a\"{99999}\n", "grammar 1:14: repetition bound larger than 10000"},
      {"root ::= \"a\"{x}\n", "grammar 1:14: expected a number in '{m,n}', found 'x'"},
      {"root ::= \"a\"{2\n", "grammar 1:15: expected '}' to close '{' at 1:13, found a line break"},
      {"root ::= \"\\q\"\n", "grammar 1:11: unknown escape '\\q'"},
      {"root ::= \"\\x4\"\n", "grammar 1:11: escape '\\x' needs 2 hex digits"},
      {"root ::= \"\\U00110000\"\n", "grammar 1:11: code point past U+10FFFF"},
      {"root ::= \"\\ud800\"\n", "grammar 1:11: a surrogate code point has no UTF-8 encoding"},
      {"root ::= [z-a]\n", "grammar 1:11: character range ends before it starts"},
      {"root ::= \"\xFF\"\n", "grammar 1:11: invalid UTF-8"},
      {"root ::= \"\xC3\"\n", "grammar 1:11: invalid UTF-8"},
      {"root ::= \"\xED\xA0\x80\"\n", "grammar 1:11: invalid UTF-8"},
      {"root ::= root \"a\" | \"b\"\n",
       "grammar 1:1: rule 'root' is left-recursive (root -> root)"},
      {"root ::= x \"a\"\nx ::= \"b\"? y\ny ::= root | \"c\"\n", "is left-recursive"},
      {"root ::= (\"a\"?)*\n", "is left-recursive"},
      {"root ::= \"a\" root\n", "grammar 1:1: rule 'root' derives no finite string"},
      {"root ::= \"a\" | x\nx ::= \"b\" x\n", "grammar 2:1: rule 'x' derives no finite string"},
      {"a ::= \"x\"\n", "grammar: no rule named 'root'"},
      {"", "grammar: no rule named 'root'"},
      {"  # only a comment\n", "grammar: no rule named 'root'"},
      {"::= \"a\"\n", "grammar 1:1: expected a rule name, found ':'"},
      {"root ::= <think>\n", "grammar 1:10: token references (<...>) are not supported"},
      {"root ::= \"a\"\n| \"b\"\n", "grammar 2:1: expected a rule name, found '|'"},
      {"root ::= \"a\" \\\n", "grammar 1:14: unexpected '\\' in rule 'root'"},
      {"root ::= [\\", "grammar 1:11: unfinished escape"},
      {"root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')') + "\n",
       "groups nested deeper than 256"},
  };
  for (const Case& c : cases) {
    const std::string err = parse_error(c.text);
    EXPECT_NE(err.find(c.want), std::string::npos) << "input: " << c.text << "\ngot:  " << err;
  }
}

TEST(Gbnf, TooLargeGrammarsAreRefused) {
  std::string text = "root ::= x{10000}\nx ::= y{10000}\ny ::= \"a\"{10000}\n";
  // The nested repetitions stay small as rules; a literal repeated past the element limit
  // is refused.
  EXPECT_TRUE(parse_gbnf(text).ok());
  std::string big = "root ::= ";
  for (int k = 0; k < 120; ++k) big += "\"a\"{10000} ";
  EXPECT_NE(parse_error(big + "\n").find("grammar larger than"), std::string::npos);
}

TEST(Gbnf, EveryPrefixOfAGrammarParsesOrFailsCleanly) {
  const std::string text =
      "root ::= obj ( \",\" ws obj )*  # objects\n"
      "obj ::= \"{\" ws [a-zA-Z_\\u00e9]+ ws \":\" ws ( [0-9]{1,3} | \"\\\"\" [^\"]* \"\\\"\" ) ws "
      "\"}\"\n"
      "ws ::= [ \\t\\n]{0,4}\n";
  parse_ok(text);
  for (size_t n = 0; n < text.size(); ++n) {
    auto g = parse_gbnf(text.substr(0, n));
    if (!g.ok()) {
      EXPECT_EQ(g.error_message().rfind("grammar", 0), 0u) << g.error_message();
    }
  }
}

}  // namespace
}  // namespace rw
