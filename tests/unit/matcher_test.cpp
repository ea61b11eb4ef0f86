// Token-level grammar matching (grammar/matcher.h): masks against a brute-force check of every
// token by the Earley reference (grammar/grammar_ref.h), cache and rollback exactness, UTF-8
// split across tokens, end-of-sequence handling, limits.
#include "rewind/grammar/matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rewind/base/thread_pool.h"
#include "rewind/grammar/grammar_cache.h"
#include "rewind/grammar/grammar_ref.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {
namespace {

// Every single byte, then multi-byte pieces (JSON punctuation, words, whitespace runs, UTF-8
// characters whole and cut); the end-of-sequence id follows them.
std::vector<std::string> test_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p :
       {"{\"",   "\":",    "\": ",     "\",",   "\", \"",  "},",   "}",     "]}",
        "[{",    "[\"",    "\"]",      "true",  "false",   "null", "nul",   " \"",
        "\n  ",  "\n    ", "  ",       "12",    "2024",    "-0",   ".5",    "e+",
        "e-1",   "0.",     "name",     "id",    "the",     " the", "items", "tags",
        "value", "a\"",    "\\n",      "\\u00", "\\ud83d", "é",    "ü",     "中文",
        "\xC3",  "\xA9\"", "\xE4\xB8", "\xAD",  "0-",      "-01-", "T12:",  ":00Z\"",
        "ab",    "abc",    "(",        "((",    "))",      "x)",   ""}) {
    v.push_back(p);  // "" is a hole: never allowed
  }
  return v;
}

struct Fixture {
  std::shared_ptr<Grammar> grammar;
  std::shared_ptr<VocabTrie> vocab;
  std::shared_ptr<GrammarAutomaton> automaton;
  int32_t eos;
};

Fixture make(const std::string& gbnf, AutomatonLimits limits = {}) {
  Fixture f;
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error_message();
  f.grammar = std::make_shared<Grammar>(std::move(g).value());
  const auto v = test_vocab();
  f.eos = static_cast<int32_t>(v.size());
  f.vocab = std::make_shared<VocabTrie>(v, std::vector<int32_t>{f.eos});
  f.automaton = GrammarAutomaton::create(f.grammar, f.vocab, limits).value();
  return f;
}

std::vector<int32_t> allowed_ids(const GrammarMatcher& m, const VocabTrie& v) {
  TokenMask mask(static_cast<size_t>(v.n_words()));
  EXPECT_TRUE(m.allowed(mask.data()).ok());
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < v.n_vocab(); ++id)
    if (mask_test(mask.data(), id)) ids.push_back(id);
  return ids;
}

// The brute-force mask: each token's bytes appended to the text so far, checked by Earley.
std::vector<int32_t> brute_force_ids(const Fixture& f, const std::string& text) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < f.vocab->n_vocab(); ++id) {
    if (id == f.eos) {
      if (earley_recognise(*f.grammar, text).complete) ids.push_back(id);
      continue;
    }
    const std::string& b = f.vocab->bytes(id);
    if (!b.empty() && earley_recognise(*f.grammar, text + b).viable) ids.push_back(id);
  }
  return ids;
}

// Random walks; at every step the mask must equal the brute-force one.
void check_masks_against_brute_force(const std::string& gbnf, int walks, int steps, uint32_t seed) {
  Fixture f = make(gbnf);
  std::mt19937 rng(seed);
  int checked = 0;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(f.automaton);
    std::string text;
    for (int s = 0; s < steps && !m.is_ended(); ++s) {
      const std::vector<int32_t> got = allowed_ids(m, *f.vocab);
      ASSERT_EQ(got, brute_force_ids(f, text)) << "after '" << text << "'";
      ++checked;
      ASSERT_FALSE(got.empty()) << "dead end after '" << text << "'";
      const int32_t id = got[std::uniform_int_distribution<size_t>(0, got.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(id).ok());
      if (id != f.eos) text += f.vocab->bytes(id);
    }
  }
  EXPECT_GT(checked, walks);
}

TEST(GrammarMatcher, MaskEqualsBruteForceOnSmallGrammars) {
  check_masks_against_brute_force("root ::= \"(\" root \")\" | \"x\" | \"ab\" [c-e]*\n", 20, 12, 1);
  check_masks_against_brute_force(
      "root ::= [^\"\\\\]{0,3} \"\\\"\" | \"a\" | \"abc\" \"x\"? | "
      "[\\u00e0-\\u00ff\\u4e00-\\u4eff]+\n",
      20, 8, 2);
  check_masks_against_brute_force(
      "root ::= \"[\" ( item ( \",\" \" \"? item )* )? \"]\"\nitem ::= \"true\" | \"null\" | "
      "[0-9]+\n",
      20, 20, 3);
}

TEST(GrammarMatcher, MaskEqualsBruteForceOnJsonObjects) {
  check_masks_against_brute_force(json_object_gbnf(), 12, 30, 4);
}

TEST(GrammarMatcher, MaskEqualsBruteForceWhereMasksAreSplit) {
  // Strings in several properties and depths: new states share their string part with known
  // ones, so their masks are split (matcher.h); tokens with a quote reach into the context.
  auto text = json_schema_text_to_gbnf(R"({"type":"object","properties":{
      "ab":{"type":"string"},"the":{"type":"array","items":{"type":"string"}},
      "x":{"type":"object","properties":{"ab":{"type":"string"},"id":{"type":"string"}},
      "required":["ab","id"]}},"required":["ab","the","x"]})");
  ASSERT_TRUE(text.ok()) << text.error_message();
  Fixture f = make(*text);
  std::mt19937 rng(9);
  for (int w = 0; w < 8; ++w) {
    GrammarMatcher m(f.automaton);
    std::string done;
    for (int s = 0; s < 40 && !m.is_ended(); ++s) {
      const std::vector<int32_t> got = allowed_ids(m, *f.vocab);
      ASSERT_EQ(got, brute_force_ids(f, done)) << "after '" << done << "'";
      // Prefer short tokens and closing quotes so that the walks get through the object.
      int32_t id = got[std::uniform_int_distribution<size_t>(0, got.size() - 1)(rng)];
      for (int32_t c : got)
        if (f.vocab->bytes(c) == "\"" && rng() % 3 == 0) id = c;
      ASSERT_TRUE(m.accept(id).ok());
      if (id != f.eos) done += f.vocab->bytes(id);
    }
  }
  EXPECT_GT(f.automaton->stats().split_hits, 0);
}

TEST(GrammarMatcher, CachedMasksEqualFreshOnes) {
  Fixture f = make(json_object_gbnf());
  std::mt19937 rng(5);
  for (int w = 0; w < 6; ++w) {
    GrammarMatcher m(f.automaton);
    std::vector<int32_t> tokens;
    for (int s = 0; s < 25 && !m.is_ended(); ++s) {
      const std::vector<int32_t> warm = allowed_ids(m, *f.vocab);
      ASSERT_EQ(warm, allowed_ids(m, *f.vocab));  // the cache hit gives the same mask
      // A new automaton knows no state: it computes everything again from the same tokens.
      GrammarMatcher cold(GrammarAutomaton::create(f.grammar, f.vocab).value());
      for (int32_t id : tokens) ASSERT_TRUE(cold.accept(id).ok());
      ASSERT_EQ(warm, allowed_ids(cold, *f.vocab));
      const int32_t id = warm[std::uniform_int_distribution<size_t>(0, warm.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(id).ok());
      tokens.push_back(id);
    }
  }
  EXPECT_GT(f.automaton->stats().mask_hits, 0);
}

TEST(GrammarMatcher, RollbackRestoresMasksExactly) {
  Fixture f = make(json_object_gbnf());
  std::mt19937 rng(6);
  GrammarMatcher m(f.automaton);
  std::vector<std::vector<int32_t>> masks = {allowed_ids(m, *f.vocab)};
  for (int s = 0; s < 40 && !m.is_ended(); ++s) {
    const auto& now = masks.back();
    ASSERT_TRUE(m.accept(now[std::uniform_int_distribution<size_t>(0, now.size() - 1)(rng)]).ok());
    masks.push_back(allowed_ids(m, *f.vocab));
  }
  // Roll back by random amounts (a rejected speculative draft), compare, take a new branch.
  for (int r = 0; r < 30 && m.n_accepted() > 0; ++r) {
    const size_t n =
        std::uniform_int_distribution<size_t>(1, std::min<size_t>(m.n_accepted(), 6))(rng);
    m.rollback(n);
    masks.resize(masks.size() - n);
    ASSERT_EQ(allowed_ids(m, *f.vocab), masks.back());
    const auto& now = masks.back();
    if (now.empty()) continue;
    const int32_t id = now[std::uniform_int_distribution<size_t>(0, now.size() - 1)(rng)];
    ASSERT_TRUE(m.accept(id).ok());
    masks.push_back(allowed_ids(m, *f.vocab));
  }
  // A copy is an independent sequence.
  GrammarMatcher copy = m;
  if (!masks.back().empty()) {
    ASSERT_TRUE(copy.accept(masks.back()[0]).ok());
    EXPECT_EQ(copy.n_accepted(), m.n_accepted() + 1);
    EXPECT_EQ(allowed_ids(m, *f.vocab), masks.back());
  }
}

TEST(GrammarMatcher, SpeculativeDraftStopsAtFirstDisallowedToken) {
  Fixture f = make("root ::= \"abc\" \"x\"*\n");
  GrammarMatcher m(f.automaton);
  const int32_t a = 'a', b = 'b', c = 'c', x = 'x', z = 'z';
  auto n = m.accept_prefix({a, b, c, x, z, x});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4u);
  EXPECT_TRUE(m.is_accepting());
  m.rollback(*n);
  EXPECT_EQ(m.n_accepted(), 0u);
  EXPECT_FALSE(m.is_accepting());
}

TEST(GrammarMatcher, Utf8CharacterSplitAcrossTokens) {
  // é is C3 A9; the vocabulary has "\xC3" and "\xA9\"" besides the whole "é" and the bytes.
  Fixture f = make("root ::= [^\"a-z]+ \"\\\"\"\n");
  const auto v = test_vocab();
  auto id_of = [&](const std::string& s) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == s) return static_cast<int32_t>(i);
    return -1;
  };
  GrammarMatcher m(f.automaton);
  const std::vector<int32_t> start = allowed_ids(m, *f.vocab);
  EXPECT_TRUE(std::count(start.begin(), start.end(), id_of("\xC3")));
  EXPECT_TRUE(std::count(start.begin(), start.end(), id_of("é")));
  EXPECT_FALSE(std::count(start.begin(), start.end(), 0xA9));  // a lone continuation byte
  EXPECT_FALSE(std::count(start.begin(), start.end(), 'a'));
  ASSERT_TRUE(m.accept(id_of("\xC3")).ok());
  // Inside the character only continuation bytes fit, and only the code points of the class.
  const std::vector<int32_t> mid = allowed_ids(m, *f.vocab);
  for (int32_t id : mid) {
    const unsigned char b0 = static_cast<unsigned char>(f.vocab->bytes(id)[0]);
    EXPECT_TRUE(b0 >= 0x80 && b0 <= 0xBF) << id;
  }
  EXPECT_TRUE(std::count(mid.begin(), mid.end(), id_of("\xA9\"")));
  EXPECT_FALSE(std::count(mid.begin(), mid.end(), id_of("\"")));
  EXPECT_FALSE(m.accept('"').ok());
  ASSERT_TRUE(m.accept(id_of("\xA9\"")).ok());
  EXPECT_TRUE(m.is_accepting());
  EXPECT_EQ(allowed_ids(m, *f.vocab), std::vector<int32_t>{f.eos});
}

TEST(GrammarMatcher, EndOfSequenceOnlyWhenComplete) {
  Fixture f = make("root ::= \"ab\" \"c\"?\n");
  GrammarMatcher m(f.automaton);
  EXPECT_FALSE(m.accept(f.eos).ok());
  ASSERT_TRUE(m.accept('a').ok());
  EXPECT_FALSE(m.is_accepting());
  ASSERT_TRUE(m.accept('b').ok());
  EXPECT_TRUE(m.is_accepting());
  std::vector<int32_t> ids = allowed_ids(m, *f.vocab);
  EXPECT_EQ(ids, (std::vector<int32_t>{'c', f.eos}));
  ASSERT_TRUE(m.accept(f.eos).ok());
  EXPECT_TRUE(m.is_ended());
  EXPECT_TRUE(allowed_ids(m, *f.vocab).empty());
  EXPECT_FALSE(m.accept('c').ok());
  EXPECT_FALSE(m.accept(f.eos).ok());
  m.rollback(1);
  EXPECT_EQ(allowed_ids(m, *f.vocab), (std::vector<int32_t>{'c', f.eos}));
}

TEST(GrammarMatcher, RejectedTokenChangesNothing) {
  Fixture f = make("root ::= \"abc\"\n");
  GrammarMatcher m(f.automaton);
  const auto before = allowed_ids(m, *f.vocab);
  const auto err = m.accept('z');
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error_message().find("not allowed"), std::string::npos);
  EXPECT_FALSE(m.accept(-1).ok());
  EXPECT_FALSE(m.accept(1 << 30).ok());
  EXPECT_EQ(m.n_accepted(), 0u);
  EXPECT_EQ(allowed_ids(m, *f.vocab), before);
}

TEST(GrammarMatcher, MinBytesToAccept) {
  Fixture f = make("root ::= \"abc\" | \"de\" x\nx ::= \"f\"{3}\n");
  GrammarMatcher m(f.automaton);
  EXPECT_EQ(m.min_bytes_to_accept(), 3u);
  ASSERT_TRUE(m.accept('d').ok());
  EXPECT_EQ(m.min_bytes_to_accept(), 4u);
  ASSERT_TRUE(m.accept('e').ok());
  EXPECT_EQ(m.min_bytes_to_accept(), 3u);
}

TEST(GrammarMatcher, LimitsAreErrorsNotCrashes) {
  AutomatonLimits tiny;
  tiny.max_states = 8;
  Fixture f = make(json_object_gbnf(), tiny);
  GrammarMatcher m(f.automaton);
  TokenMask mask(static_cast<size_t>(f.vocab->n_words()));
  std::string error;
  for (int s = 0; s < 50 && error.empty(); ++s) {
    const Status st = m.allowed(mask.data());
    if (!st.ok()) {
      error = st.error_message();
      break;
    }
    int32_t id = 0;
    while (!mask_test(mask.data(), id)) ++id;
    const Status acc = m.accept(id);
    if (!acc.ok()) error = acc.error_message();
  }
  EXPECT_NE(error.find("limit of 8 states"), std::string::npos) << error;
}

TEST(GrammarMatcher, MaskCacheStaysWithinItsBudget) {
  AutomatonLimits small;
  small.mask_cache_bytes = 3 * ((test_vocab().size() + 1 + 63) / 64) * 8;  // three masks
  Fixture f = make(json_object_gbnf(), small);
  std::mt19937 rng(8);
  GrammarMatcher m(f.automaton);
  for (int s = 0; s < 30 && !m.is_ended(); ++s) {
    const auto ids = allowed_ids(m, *f.vocab);
    ASSERT_LE(f.automaton->stats().mask_bytes, small.mask_cache_bytes);
    ASSERT_TRUE(m.accept(ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)]).ok());
  }
}

// The token ids a mask allows.
std::vector<int32_t> allowed_ids(const TokenMask& mask, const VocabTrie& vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.n_vocab(); ++id)
    if (mask_test(mask.data(), id)) ids.push_back(id);
  return ids;
}

// A random allowed id, turned into a closing quote now and then to get through an object.
int32_t pick_towards_quotes(const std::vector<int32_t>& ids, const VocabTrie& vocab,
                            std::mt19937& rng) {
  int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
  for (int32_t c : ids)
    if (vocab.bytes(c) == "\"" && rng() % 3 == 0) id = c;
  return id;
}

// The nested schema of the threaded-mask tests and test_vocab() plus 6000 random JSON-ish
// words (a vocabulary big enough to be cut into many chunks).
void nested_schema_and_big_vocab(std::mt19937& rng, std::shared_ptr<Grammar>* grammar,
                                 std::shared_ptr<VocabTrie>* vocab) {
  auto text = json_schema_text_to_gbnf(R"({"type":"object","properties":{
      "ab":{"type":"string"},"the":{"type":"array","items":{"type":"string"}},
      "x":{"type":"object","properties":{"ab":{"type":"string"},"n":{"type":"integer"}},
      "required":["ab","n"]}},"required":["ab","the","x"]})");
  ASSERT_TRUE(text.ok()) << text.error_message();
  auto g = parse_gbnf(*text);
  ASSERT_TRUE(g.ok());
  *grammar = std::make_shared<Grammar>(std::move(g).value());
  std::vector<std::string> v = test_vocab();
  const std::string pieces[] = {"\"", ",", ":", "{",  "}", "[", "]",        " ", "\n", "a",
                                "b",  "1", "0", "\\", "e", "x", "\xC3\xA9", "-", "n",  "t"};
  for (int i = 0; i < 6000; ++i) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < len; ++k) s += pieces[rng() % 20];
    v.push_back(s);
  }
  const int32_t eos = static_cast<int32_t>(v.size());
  *vocab = std::make_shared<VocabTrie>(v, std::vector<int32_t>{eos});
}

// Masks computed by a pool's threads (whole-trie walks shared, unknown transitions left to
// the caller) equal the ones one thread computes, split states included, on a vocabulary big
// enough to be cut into many chunks.
TEST(GrammarMatcher, MasksOnAThreadPoolEqualOneThreads) {
  std::mt19937 rng(31);
  std::shared_ptr<Grammar> grammar;
  std::shared_ptr<VocabTrie> vocab;
  ASSERT_NO_FATAL_FAILURE(nested_schema_and_big_vocab(rng, &grammar, &vocab));
  auto one = GrammarAutomaton::create(grammar, vocab).value();
  auto shared = GrammarAutomaton::create(grammar, vocab).value();
  ThreadPool pool(3, 0);  // every job shared, however small
  TokenMask a(static_cast<size_t>(vocab->n_words())), b(a.size());
  int steps = 0;
  for (int w = 0; w < 6; ++w) {
    GrammarMatcher m1(one), m2(shared);
    for (int s = 0; s < 40 && !m1.is_ended(); ++s, ++steps) {
      ASSERT_TRUE(m1.allowed(a.data()).ok());
      ASSERT_TRUE(m2.allowed(b.data(), &pool).ok());
      ASSERT_EQ(a, b) << "walk " << w << " step " << s;
      const std::vector<int32_t> ids = allowed_ids(a, *vocab);
      ASSERT_FALSE(ids.empty());
      const int32_t id = pick_towards_quotes(ids, *vocab, rng);
      ASSERT_TRUE(m1.accept(id).ok());
      ASSERT_TRUE(m2.accept(id).ok());
    }
  }
  EXPECT_GT(steps, 60);
  EXPECT_GT(shared->stats().split_misses, 0);
}

// A decode step's masks computed together (GrammarAutomaton::prefetch: the walks of several
// states shared across the pool's threads) equal the ones one thread computes row by row, for
// eight sequences in lockstep, split states included; then the rows find them cached. With a
// mask cache too small for a step's masks, the rows still get the same bits.
TEST(GrammarMatcher, PrefetchedMasksOfARowBatchEqualOneThreads) {
  std::mt19937 rng(57);
  std::shared_ptr<Grammar> grammar;
  std::shared_ptr<VocabTrie> vocab;
  ASSERT_NO_FATAL_FAILURE(nested_schema_and_big_vocab(rng, &grammar, &vocab));
  ThreadPool pool(3, 0);  // every job shared, however small
  for (const size_t cache_bytes : {size_t{256} << 20, size_t{3} * vocab->n_words() * 8}) {
    AutomatonLimits lim;
    lim.mask_cache_bytes = cache_bytes;
    auto one = GrammarAutomaton::create(grammar, vocab).value();
    auto batch = GrammarAutomaton::create(grammar, vocab, lim).value();
    std::vector<GrammarMatcher> m1, m2;
    for (int s = 0; s < 8; ++s) {
      m1.emplace_back(one);
      m2.emplace_back(batch);
    }
    TokenMask a(static_cast<size_t>(vocab->n_words())), b(a.size());
    int rows = 0;
    for (int step = 0; step < 30; ++step) {
      std::vector<int32_t> states;
      for (const GrammarMatcher& m : m2)
        if (!m.is_ended()) states.push_back(m.state());
      if (states.empty()) break;
      ASSERT_TRUE(batch->prefetch(states, &pool).ok());
      const int64_t misses = batch->stats().mask_misses;
      for (size_t s = 0; s < 8; ++s) {
        if (m1[s].is_ended()) continue;
        ASSERT_TRUE(m1[s].allowed(a.data()).ok());
        ASSERT_TRUE(m2[s].allowed(b.data()).ok());
        ASSERT_EQ(a, b) << "sequence " << s << " step " << step;
        ++rows;
        const std::vector<int32_t> ids = allowed_ids(a, *vocab);
        ASSERT_FALSE(ids.empty());
        const int32_t id = pick_towards_quotes(ids, *vocab, rng);
        ASSERT_TRUE(m1[s].accept(id).ok());
        ASSERT_TRUE(m2[s].accept(id).ok());
      }
      // With room for every mask, the rows computed none themselves (one, when only one was
      // missing: then there is nothing to share).
      if (cache_bytes > (size_t{1} << 20)) {
        EXPECT_LE(batch->stats().mask_misses - misses, 1) << "step " << step;
      }
    }
    EXPECT_GT(rows, 100);
    EXPECT_GT(batch->stats().split_misses, 0);
  }
  // Nothing to share: one thread, or fewer than two masks missing, leaves the rows to compute.
  Fixture f = make(json_object_gbnf());
  ThreadPool alone(1);
  ASSERT_TRUE(f.automaton->prefetch({f.automaton->initial_state()}, &pool).ok());
  ASSERT_TRUE(
      f.automaton->prefetch({f.automaton->initial_state(), GrammarAutomaton::kDead}, &alone).ok());
  EXPECT_EQ(f.automaton->stats().mask_misses, 0);
}

// Random walks through `a`, each mask compared with a fresh automaton's (no budget).
void walk_against_unbounded(const Fixture& f, std::shared_ptr<GrammarAutomaton> a, int walks,
                            uint32_t seed, size_t cap) {
  auto ref = GrammarAutomaton::create(f.grammar, f.vocab).value();
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(a), r(ref);
    for (int s = 0; s < 25 && !m.is_ended(); ++s) {
      const auto ids = allowed_ids(m, *f.vocab);
      ASSERT_EQ(ids, allowed_ids(r, *f.vocab));
      ASSERT_LE(a->memory_bytes(), cap);
      const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(id).ok());
      ASSERT_TRUE(r.accept(id).ok());
    }
  }
}

TEST(GrammarMatcher, SharedBudgetCapsMemoryAndKeepsMasksExact) {
  Fixture f = make(json_object_gbnf());
  // Measure what an unbounded automaton holds after some walks, then cap a second one below.
  walk_against_unbounded(f, f.automaton, 4, 11, size_t{1} << 40);
  const size_t full = f.automaton->memory_bytes();
  const size_t masks = f.automaton->stats().mask_bytes;
  ASSERT_GT(masks, 0u);
  // Room for the same states but only half the masks: the others are dropped or not kept.
  const size_t cap = full - masks / 2;
  AutomatonLimits capped;
  capped.budget = std::make_shared<GrammarMemoryBudget>(cap);
  auto a = GrammarAutomaton::create(f.grammar, f.vocab, capped).value();
  walk_against_unbounded(f, a, 4, 11, cap);
  EXPECT_EQ(capped.budget->used.load(), a->memory_bytes());  // the charge is the footprint
  EXPECT_LE(capped.budget->used.load(), cap);
  EXPECT_LT(a->stats().mask_bytes, masks);
  EXPECT_GT(a->stats().uncached + a->stats().mask_hits, 0);
  a.reset();
  EXPECT_EQ(capped.budget->used.load(), 0u);  // given back when the automaton goes
}

// An initial state past a limit (the first byte may start more alternatives than a state may
// hold) is create()'s error, not a failed check: the grammar comes from a request.
TEST(GrammarMatcher, InitialStatePastItsLimitIsAnError) {
  std::string gbnf = "root ::= \"x0\"";
  for (int i = 1; i < 40; ++i) gbnf += " | \"x" + std::to_string(i) + "\"";
  Fixture f = make(gbnf);
  AutomatonLimits small;
  small.max_state_stacks = 39;
  auto a = GrammarAutomaton::create(f.grammar, f.vocab, small);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error_message().find("39 stacks in one state"), std::string::npos)
      << a.error_message();
  small.max_state_stacks = 40;
  EXPECT_TRUE(GrammarAutomaton::create(f.grammar, f.vocab, small).ok());
}

TEST(GrammarMatcher, BudgetTooSmallForStatesIsAnError) {
  Fixture f = make(json_object_gbnf());
  AutomatonLimits capped;
  capped.budget = std::make_shared<GrammarMemoryBudget>(1);  // smaller than the first state
  auto a = GrammarAutomaton::create(f.grammar, f.vocab, capped).value();
  GrammarMatcher m(a);
  std::string error;
  TokenMask mask(static_cast<size_t>(f.vocab->n_words()));
  const Status st = m.allowed(mask.data());  // the walk needs new states
  if (!st.ok()) error = st.error_message();
  EXPECT_NE(error.find("memory cap"), std::string::npos) << error;
  EXPECT_EQ(m.state(), a->initial_state());  // nothing changed
}

TEST(GrammarCache, ByteCapEvictsIdleAutomataLeastRecentFirst) {
  const auto v = test_vocab();
  auto vocab = std::make_shared<VocabTrie>(v, std::vector<int32_t>{static_cast<int32_t>(v.size())});
  // A cap about three small automata fill to three quarters: the first ones go once idle.
  size_t one = 0;
  {
    GrammarCache probe(vocab, 64, {}, size_t{1} << 30);
    auto a = probe.get("root ::= \"a\" [0-9]* \"z\"\n");
    ASSERT_TRUE(a.ok());
    TokenMask mask(static_cast<size_t>(vocab->n_words()));
    ASSERT_TRUE(GrammarMatcher(*a).allowed(mask.data()).ok());
    one = probe.memory_bytes();
    ASSERT_GT(one, 0u);
  }
  GrammarCache cache(vocab, 64, {}, one * 4);
  std::vector<std::shared_ptr<GrammarAutomaton>> held;
  TokenMask mask(static_cast<size_t>(vocab->n_words()));
  for (int i = 0; i < 8; ++i) {
    auto a =
        cache.get("root ::= \"" + std::string(1, static_cast<char>('a' + i)) + "\" [0-9]* \"z\"\n");
    ASSERT_TRUE(a.ok()) << a.error_message();
    ASSERT_TRUE(GrammarMatcher(*a).allowed(mask.data()).ok());
    EXPECT_LE(cache.memory_bytes(), cache.max_bytes());
    if (i == 0) held.push_back(*a);  // in use: never evicted
  }
  EXPECT_LT(cache.size(), 8u);
  EXPECT_GE(cache.size(), 2u);
  const int64_t misses = cache.misses();
  ASSERT_TRUE(cache.get("root ::= \"a\" [0-9]* \"z\"\n").ok());  // held, still cached
  EXPECT_EQ(cache.misses(), misses);
  ASSERT_TRUE(cache.get("root ::= \"h\" [0-9]* \"z\"\n").ok());  // the newest: still cached
  EXPECT_EQ(cache.misses(), misses);
  ASSERT_TRUE(cache.get("root ::= \"b\" [0-9]* \"z\"\n").ok());  // evicted: compiled again
  EXPECT_EQ(cache.misses(), misses + 1);
}

TEST(GrammarMatcher, ApplyTokenMask) {
  const int32_t n = 130;
  TokenMask mask((n + 63) / 64, 0);
  std::vector<float> logits(n, 1.0f);
  for (int32_t id : {0, 63, 64, 127, 129}) mask[id >> 6] |= uint64_t{1} << (id & 63);
  mask[1] = ~uint64_t{0};  // a full word is left alone
  apply_token_mask(mask.data(), logits.data(), n);
  for (int32_t id = 0; id < n; ++id) {
    const bool keep = id == 0 || id == 63 || (id >= 64 && id < 128) || id == 129;
    EXPECT_EQ(logits[id], keep ? 1.0f : -INFINITY) << id;
  }
}

TEST(GrammarMatcher, VocabFromTokenizerLeavesOutSpecialTokens) {
  BpeTrainOptions opt;
  opt.n_merges = 64;
  auto tok = Tokenizer::from_json(train_bpe_tokenizer_json(builtin_training_text(), opt), "test");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  const int32_t im_end = tok->token_id("<|im_end|>");
  ASSERT_GE(im_end, 0);
  auto vocab = std::make_shared<VocabTrie>(VocabTrie::from_tokenizer(*tok, {im_end}));
  EXPECT_EQ(vocab->n_vocab(), tok->vocab_size());
  auto g = parse_gbnf("root ::= [^x]* \"x\"\n");
  ASSERT_TRUE(g.ok());
  auto a = GrammarAutomaton::create(std::make_shared<Grammar>(std::move(g).value()), vocab).value();
  GrammarMatcher m(a);
  TokenMask mask(static_cast<size_t>(vocab->n_words()));
  ASSERT_TRUE(m.allowed(mask.data()).ok());
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    if (tok->is_special(id)) {
      EXPECT_FALSE(mask_test(mask.data(), id)) << tok->token_text(id);
    } else {
      // An ordinary token is allowed at the start when the grammar can begin with its bytes:
      // no 'x' before its end and UTF-8 (or a cut UTF-8 sequence at its end).
      const std::string b = tok->token_bytes(id);
      EXPECT_EQ(mask_test(mask.data(), id), earley_recognise(a->grammar(), b).viable) << b;
      if (b.find('x') == std::string::npos && static_cast<unsigned char>(b[0]) < 0x80) {
        EXPECT_TRUE(mask_test(mask.data(), id)) << b;
      }
    }
  }
  // The text of the tokens (encode) is accepted token by token.
  for (int32_t id : tok->encode("hello there, fox")) ASSERT_TRUE(m.accept(id).ok());
  EXPECT_TRUE(m.is_accepting());
  ASSERT_TRUE(m.accept(im_end).ok());
}

}  // namespace
}  // namespace rw
