// Constrained decoding through the engine (docs/ARCHITECTURE.md, "Constrained decoding") on the
// built-in trained model (models/kjv-target, which has an MTP head, and models/kjv-draft): a
// schema-constrained greedy reply is token for token the same with every drafter and without
// speculation, cold and after a prefix-cache hit, alone and in a batch; every finished reply
// parses and validates against its schema, over random schemas and random sampling seeds
// (the model was trained on English text, so only the constraint makes its output JSON).
#include "rewind/engine/constrained.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "event_collector.h"
#include "json_schema_util.h"
#include "rewind/base/thread_pool.h"
#include "rewind/chat/chat_template.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/engine/engine.h"
#include "rewind/grammar/grammar_cache.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/tool_grammar.h"
#include "rewind/tokenizer/tokenizer.h"
#include "test_util.h"

namespace rw {
namespace {

using ojson = nlohmann::ordered_json;

std::string model_dir(const std::string& which) {
  return std::string(REWIND_TEST_DATA) + "/../../models/kjv-" + which;
}

struct Fixture {
  std::unique_ptr<Model> target, draft;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<GrammarCache> grammars;
  int32_t im_end = -1, eot = -1;
};

Fixture& fix() {
  static Fixture* f = [] {
    auto* f = new Fixture;
    LoadOptions lo;
    lo.mtp = true;
    auto t = Model::load(model_dir("target"), lo);
    auto d = Model::load(model_dir("draft"), LoadOptions{});
    auto tok = Tokenizer::load(model_dir("target") + "/tokenizer.json");
    if (!t.ok() || !d.ok() || !tok.ok()) {
      std::fprintf(stderr, "cannot load the built-in models\n");
      std::abort();
    }
    f->target = std::move(t).value();
    f->draft = std::move(d).value();
    f->tok = std::make_unique<Tokenizer>(std::move(tok).value());
    f->im_end = f->tok->token_id("<|im_end|>");
    f->eot = f->tok->token_id("<|endoftext|>");
    // As the server builds it: the tool-call tags, special in this tokenizer, kept.
    auto trie = std::make_shared<const VocabTrie>(VocabTrie::from_tokenizer(
        *f->tok, {f->im_end, f->eot},
        {tool_call_opening(ToolCallFormat::XmlTag), tool_call_closing(ToolCallFormat::XmlTag)}));
    f->grammars = std::make_unique<GrammarCache>(trie, 64);
    return f;
  }();
  return *f;
}

std::shared_ptr<GrammarAutomaton> schema_grammar(const ojson& schema) {
  auto text = json_schema_to_gbnf(schema);
  EXPECT_TRUE(text.ok()) << text.error_message();
  if (!text.ok()) return nullptr;
  auto a = fix().grammars->get(*text);
  EXPECT_TRUE(a.ok()) << a.error_message();
  return a.ok() ? a.value() : nullptr;
}

std::vector<int32_t> chat_prompt(const std::string& user) {
  return fix().tok->encode("<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n");
}

// The reply's text without its end-of-sequence token.
std::string reply_text(const std::vector<int32_t>& out) {
  std::vector<int32_t> ids = out;
  if (!ids.empty() && (ids.back() == fix().im_end || ids.back() == fix().eot)) ids.pop_back();
  return fix().tok->decode(ids);
}

// A nested schema whose every string and array is bounded, so a greedy reply must end.
const ojson& nested_schema() {
  static const ojson s = ojson::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer"},
      "kind": {"enum": ["king", "prophet", "priest"]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
      "home": {"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 10},
          "born": {"type": "string", "format": "date"},
          "ok": {"type": "boolean"}},
        "required": ["city", "ok"], "additionalProperties": false}
    },
    "required": ["name", "age", "kind", "home"],
    "additionalProperties": false})");
  return s;
}

const ojson& list_schema() {
  static const ojson s = ojson::parse(R"({
    "type": "array", "minItems": 1, "maxItems": 4,
    "items": {"anyOf": [
      {"type": "object", "properties": {"v": {"type": "number"}, "w": {"type": "null"}},
       "required": ["v"]},
      {"type": "string", "maxLength": 5}]}})");
  return s;
}

SpecConfig spec(SpecKind kind, int32_t k) {
  SpecConfig c;
  c.kind = kind;
  c.k = k;
  if (kind == SpecKind::Draft) c.draft = fix().draft.get();
  return c;
}

struct Out {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::None;
  RequestReport report;
};

Out run(Engine& e, Request r) {
  auto g = e.generate(r);
  EXPECT_TRUE(g.ok()) << g.error_message();
  if (!g.ok()) return {};
  return {g->tokens, g->finish, g->report};
}

Request constrained(const std::vector<int32_t>& prompt, const ojson& schema, int32_t max_tokens) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.stop_ids = {fix().im_end, fix().eot};
  r.grammar = schema_grammar(schema);
  return r;
}

void expect_valid(const std::vector<int32_t>& out, const ojson& schema, const std::string& what) {
  const std::string text = reply_text(out);
  const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << what << ": not JSON: " << text;
  std::string why;
  EXPECT_TRUE(schema_test::validate(v, schema, schema, why)) << what << ": " << why << "\n" << text;
}

TEST(Constrained, GreedyReplyFollowsTheSchemaAndEndsWithStop) {
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  for (const ojson* schema : {&nested_schema(), &list_schema()}) {
    Out o = run(e, constrained(chat_prompt("Who was David?"), *schema, 400));
    ASSERT_EQ(o.finish, FinishReason::Stop) << reply_text(o.tokens);
    EXPECT_TRUE(o.tokens.back() == fix().im_end || o.tokens.back() == fix().eot);
    expect_valid(o.tokens, *schema, "greedy");
  }
  // Without the grammar the model writes English, not JSON: the constraint is what makes it.
  Request plain = constrained(chat_prompt("Who was David?"), nested_schema(), 60);
  plain.grammar = nullptr;
  const std::string text = reply_text(run(e, plain).tokens);
  EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_discarded()) << text;
}

// Greedy constrained output equals plain (non-speculative) constrained output for all five
// drafter kinds: drafts are cut at the first refused token (n-gram, MTP, custom) or masked while
// drafting (draft model), each verified row is masked in the state after the drafts before it,
// and what the verification rejects is rolled back.
TEST(Constrained, GreedyIsTheSameWithEverySpecKind) {
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  const std::vector<std::pair<std::vector<int32_t>, const ojson*>> cases = {
      {chat_prompt("Who was David?"), &nested_schema()},
      {chat_prompt("List the kings."), &list_schema()},
      {chat_prompt("And the prophets?"), &nested_schema()},
  };
  int64_t accepted = 0;
  for (const auto& [prompt, schema] : cases) {
    Request base = constrained(prompt, *schema, 300);
    const Out want = run(e, base);
    ASSERT_EQ(want.finish, FinishReason::Stop);
    expect_valid(want.tokens, *schema, "plain");
    auto rng = std::make_shared<std::mt19937_64>(want.tokens.size());
    for (SpecKind kind : {SpecKind::Ngram, SpecKind::Draft, SpecKind::Mtp, SpecKind::Custom}) {
      for (int32_t k : {1, 3, 6}) {
        Request r = base;
        SpecConfig c;
        c.kind = kind;
        c.k = k;
        if (kind == SpecKind::Draft) c.draft = fix().draft.get();
        if (kind == SpecKind::Custom) {
          // Drafts from the right answer, corrupted at random: some cut by the grammar, some
          // rejected by the verification.
          const std::vector<int32_t> ref = want.tokens;
          const size_t n0 = prompt.size();
          const int32_t V = static_cast<int32_t>(fix().target->config().vocab_size);
          c.custom = [ref, n0, rng, V](std::span<const int32_t> ctx, int32_t kk) {
            std::vector<int32_t> d;
            for (size_t i = ctx.size() - n0; i < ref.size() && static_cast<int32_t>(d.size()) < kk;
                 ++i)
              d.push_back(ref[i]);
            if (!d.empty() && (*rng)() % 3 == 0)
              d[(*rng)() % d.size()] = static_cast<int32_t>((*rng)() % static_cast<uint64_t>(V));
            return d;
          };
        }
        r.spec = c;
        const Out got = run(e, r);
        EXPECT_EQ(got.tokens, want.tokens) << spec_kind_name(kind) << " k=" << k;
        EXPECT_EQ(got.finish, want.finish) << spec_kind_name(kind);
        EXPECT_GT(got.report.spec.rounds, 0) << spec_kind_name(kind);
        accepted += got.report.spec.accepted;
        if (kind == SpecKind::Custom) {
          EXPECT_GT(got.report.spec.accepted, 0);
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

// The same with log-probabilities asked for (every row masked in full, not only refused
// argmaxes) and the chosen tokens' log-probabilities equal too.
TEST(Constrained, LogprobsAreOfTheMaskedRowsAndTheSameUnderSpeculation) {
  EngineOptions opt;
  opt.cache_enabled = false;
  BatchEngine plain_eng(*fix().target, nullptr, opt, EngineThread::Caller);
  opt.spec.kind = SpecKind::Mtp;
  opt.spec.k = 3;
  BatchEngine spec_eng(*fix().target, nullptr, opt, EngineThread::Caller);
  std::vector<std::vector<std::pair<int32_t, float>>> got(2);
  int i = 0, short_top = 0;
  for (BatchEngine* eng : {&plain_eng, &spec_eng}) {
    Request r = constrained(chat_prompt("Who was Saul?"), nested_schema(), 300);
    r.logprobs = true;
    r.top_logprobs = 3;
    auto& into = got[static_cast<size_t>(i++)];
    ASSERT_TRUE(eng->submit(r,
                            [&](const TokenEvent& ev) {
                              if (ev.token < 0) return;
                              into.push_back({ev.token, ev.logprob});
                              // Alternatives are allowed tokens only (a refused one has -inf).
                              for (const auto& [t, lp] : ev.top)
                                EXPECT_TRUE(std::isfinite(lp)) << t;
                              short_top += ev.top.size() < 3;
                            })
                    .ok());
    eng->run_until_idle();
  }
  ASSERT_FALSE(got[0].empty());
  EXPECT_EQ(got[0], got[1]);
  EXPECT_GT(short_top, 0);  // rows where the grammar allowed fewer than 3 tokens
}

TEST(Constrained, CacheHitGivesTheColdReply) {
  EngineOptions off;
  off.cache_enabled = false;
  Engine cold(*fix().target, nullptr, off);
  EngineOptions on;
  on.cache.policy.interval = 16;
  Engine warm(*fix().target, nullptr, on);
  const std::vector<int32_t> p1 = chat_prompt("Who was David?");
  const Out a = run(cold, constrained(p1, nested_schema(), 300));
  const Out first = run(warm, constrained(p1, nested_schema(), 300));
  const Out again = run(warm, constrained(p1, nested_schema(), 300));
  EXPECT_EQ(first.tokens, a.tokens);
  EXPECT_EQ(again.tokens, a.tokens);
  EXPECT_GT(again.report.resumed_at, 0);
  // A follow-up turn through the first reply: an extension hit, with speculation too.
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), a.tokens.begin(), a.tokens.end());
  const std::vector<int32_t> more =
      fix().tok->encode("\n<|im_start|>user\nAnd Solomon?<|im_end|>\n<|im_start|>assistant\n");
  p2.insert(p2.end(), more.begin(), more.end());
  const Out b = run(cold, constrained(p2, list_schema(), 300));
  Request r = constrained(p2, list_schema(), 300);
  SpecConfig c;
  c.kind = SpecKind::Ngram;
  c.k = 4;
  r.spec = c;
  const Out hit = run(warm, r);
  EXPECT_EQ(hit.tokens, b.tokens);
  EXPECT_GT(hit.report.resumed_at, static_cast<int64_t>(p1.size()));
  expect_valid(b.tokens, list_schema(), "follow-up");
}

// The cache property test with schemas: random trees of conversations (follow-up turns
// through constrained replies, a reply cut in its middle and the conversation going on from
// there, exact repeats) on an engine with the cache and a checkpoint every 8 tokens, each
// request with a schema and one of the five decoding modes (plain and the four drafter kinds
// in turn): every greedy reply is token for token the cold, plain reply of the same prompt,
// and cut conversations resume from checkpoints inside the earlier reply.
TEST(Constrained, CachePropertyWithSchemasEveryDrafterAndMidReplyResumes) {
  EngineOptions off;
  off.cache_enabled = false;
  Engine cold(*fix().target, nullptr, off);
  EngineOptions on;
  on.cache.policy.interval = 8;
  Engine warm(*fix().target, nullptr, on);
  std::mt19937_64 rng(23);
  const std::vector<const ojson*> schemas = {&nested_schema(), &list_schema()};
  const char* questions[] = {"Who was David?", "List the kings.", "And Solomon?", "Who was Saul?"};
  const auto turn = [&](const char* q) {
    return fix().tok->encode(std::string("\n<|im_start|>user\n") + q +
                             "<|im_end|>\n<|im_start|>assistant\n");
  };
  struct Seen {
    std::vector<int32_t> prompt, reply;  // reply: without its end-of-sequence token
  };
  std::vector<Seen> seen;
  const int kModes = 5;  // none, then SpecKind::Ngram, Draft, Mtp, Custom
  std::vector<int> hits(kModes, 0);
  int mid_reply = 0;
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> prompt;
    const int op = seen.empty() ? 0 : 1 + static_cast<int>(rng() % 3);
    int64_t cut_from = -1, cut_to = -1;  // where a cut reply lies in the new prompt
    if (op == 0) {
      prompt = chat_prompt(questions[rng() % 4]);
    } else {
      const Seen& base = seen[rng() % seen.size()];
      prompt = base.prompt;
      if (op == 1) {  // a follow-up turn through the whole reply
        prompt.insert(prompt.end(), base.reply.begin(), base.reply.end());
        const auto more = turn(questions[rng() % 4]);
        prompt.insert(prompt.end(), more.begin(), more.end());
      } else if (op == 2 && base.reply.size() >= 4) {  // the reply cut in its middle
        const size_t keep = base.reply.size() / 2 + rng() % (base.reply.size() / 2);
        cut_from = static_cast<int64_t>(prompt.size());
        prompt.insert(prompt.end(), base.reply.begin(), base.reply.begin() + keep);
        cut_to = static_cast<int64_t>(prompt.size());
        const auto more = turn(questions[rng() % 4]);
        prompt.insert(prompt.end(), more.begin(), more.end());
      }  // op 3 (and a reply too short to cut): the same prompt again
    }
    const ojson& schema = *schemas[rng() % schemas.size()];
    const int mode = i % kModes;
    Request want_req = constrained(prompt, schema, 200);
    const Out want = run(cold, want_req);
    Request r = constrained(prompt, schema, 200);
    if (mode > 0) {
      const SpecKind kinds[] = {SpecKind::Ngram, SpecKind::Draft, SpecKind::Mtp, SpecKind::Custom};
      SpecConfig c = spec(kinds[mode - 1], 1 + static_cast<int32_t>(rng() % 4));
      if (c.kind == SpecKind::Custom) {
        // Drafts from the cold reply, one in three corrupted at a random place.
        const std::vector<int32_t> ref = want.tokens;
        const size_t n0 = prompt.size();
        auto drng = std::make_shared<std::mt19937_64>(i);
        const int32_t V = static_cast<int32_t>(fix().target->config().vocab_size);
        c.custom = [ref, n0, drng, V](std::span<const int32_t> ctx, int32_t kk) {
          std::vector<int32_t> d;
          for (size_t j = ctx.size() - n0; j < ref.size() && static_cast<int32_t>(d.size()) < kk;
               ++j)
            d.push_back(ref[j]);
          if (!d.empty() && (*drng)() % 3 == 0)
            d[(*drng)() % d.size()] = static_cast<int32_t>((*drng)() % static_cast<uint64_t>(V));
          return d;
        };
      }
      r.spec = c;
    }
    const Out got = run(warm, r);
    ASSERT_EQ(got.tokens, want.tokens) << "request " << i << " op " << op << " mode " << mode
                                       << " resumed at " << got.report.resumed_at;
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
    if (want.finish == FinishReason::Stop) expect_valid(want.tokens, schema, "cache property");
    if (got.report.resumed_at > 0) ++hits[static_cast<size_t>(mode)];
    if (cut_from >= 0 && got.report.resumed_at > cut_from && got.report.resumed_at <= cut_to)
      ++mid_reply;
    Seen s{prompt, want.tokens};
    if (!s.reply.empty() && (s.reply.back() == fix().im_end || s.reply.back() == fix().eot))
      s.reply.pop_back();
    seen.push_back(std::move(s));
  }
  for (int mode = 0; mode < kModes; ++mode) EXPECT_GT(hits[static_cast<size_t>(mode)], 0) << mode;
  EXPECT_GT(mid_reply, 0) << "no conversation resumed inside a cut reply";
}

// A lazy tool grammar (tool_choice "auto" with a strict tool, grammar/tool_grammar.h): free
// text until the tool-call tag, then the call. The reply is token for token the same with
// every drafter, and when the tag is there the rest is a call whose arguments follow the
// strict schema. (The JSON form, which this model was not trained on: it seldom opens a call
// here; LazyToolGrammarOpensTheCallOnTheSpecialTagToken below has the form it knows.)
TEST(Constrained, LazyToolGrammarIsExactUnderSpeculation) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "find",
      "strict": true, "parameters": {"type": "object", "properties": {
        "book": {"type": "string", "maxLength": 10},
        "chapter": {"type": "integer", "minimum": 1, "maximum": 150}},
      "required": ["book", "chapter"], "additionalProperties": false}}}])");
  ToolGrammarOptions to;
  to.format = ToolCallFormat::JsonTag;
  to.parallel = false;
  to.lazy = true;
  auto text = tool_call_gbnf(tools, to);
  ASSERT_TRUE(text.ok()) << text.error_message();
  auto g = fix().grammars->get(*text);
  ASSERT_TRUE(g.ok()) << g.error_message();
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  const std::string shown =
      "<tool_call>\n{\"name\": \"find\", \"arguments\": {\"book\": \"Ruth\", \"chapter\": 1}}"
      "\n</tool_call>";
  // The calls are shown spelled out (the tags as ordinary text, as the grammar spells them),
  // and "<" is favoured more or less: replies that come close to the tag.
  const auto spelled = [&](const std::string& t) { return fix().tok->encode(t, false); };
  const int32_t lt = spelled("<").front();
  for (int n = 0; n < 8; ++n) {
    std::vector<int32_t> prompt = fix().tok->encode("<|im_start|>user\n");
    std::string user = "And the LORD said";
    for (int k = 0; k <= n % 4; ++k) user += "\n" + shown + "\n" + shown;
    const auto u = spelled(user);
    prompt.insert(prompt.end(), u.begin(), u.end());
    const auto a = fix().tok->encode("<|im_end|>\n<|im_start|>assistant\n");
    prompt.insert(prompt.end(), a.begin(), a.end());
    const auto s1 = spelled(shown + "\n");
    prompt.insert(prompt.end(), s1.begin(), s1.end());
    Request base;
    base.prompt = prompt;
    base.max_tokens = 80;
    base.stop_ids = {fix().im_end, fix().eot};
    base.grammar = g.value();
    if (n >= 4) base.sampling.logit_bias = {{lt, 2.0f * static_cast<float>(n - 3)}};
    const Out want = run(e, base);
    const std::string reply = reply_text(want.tokens);
    const size_t at = reply.find("<tool_call>");
    if (at != std::string::npos && want.finish == FinishReason::Stop) {
      const std::string body = reply.substr(at + 12, reply.size() - at - 12 - 13);
      const nlohmann::json call = nlohmann::json::parse(body, nullptr, false);
      ASSERT_FALSE(call.is_discarded()) << reply;
      EXPECT_EQ(call["name"], "find");
      std::string why;
      const ojson& params = tools[0]["function"]["parameters"];
      EXPECT_TRUE(schema_test::validate(call["arguments"], params, params, why)) << why << reply;
    }
    for (SpecKind kind : {SpecKind::Ngram, SpecKind::Draft, SpecKind::Mtp}) {
      Request r = base;
      r.spec = spec(kind, 3);
      EXPECT_EQ(run(e, r).tokens, want.tokens) << spec_kind_name(kind) << " prompt " << n;
    }
  }
}

// The model was trained to answer a verse lookup with a call of lookup_verse in the XML form,
// the tags written as this tokenizer's special tokens. Under a lazy grammar with the tool
// strict (tool_choice "auto"), the grammar's vocabulary keeps those two tags, so the greedy
// reply opens the call on the model's own <tool_call> token, and the call follows the schema;
// token for token the same with every drafter and after a prefix-cache hit. With the tags left
// out of the vocabulary (as before), the same request could open no call.
TEST(Constrained, LazyToolGrammarOpensTheCallOnTheSpecialTagToken) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {
      "name": "lookup_verse", "strict": true,
      "description": "Look up one verse of the King James Bible by its reference.",
      "parameters": {"type": "object", "properties": {
        "book": {"type": "string", "description": "Book name, e.g. Genesis", "maxLength": 20},
        "chapter": {"type": "integer", "description": "Chapter number", "minimum": 1,
                    "maximum": 150},
        "verse": {"type": "integer", "description": "Verse number", "minimum": 1,
                  "maximum": 176}},
      "required": ["book", "chapter", "verse"], "additionalProperties": false}}}])");
  ToolGrammarOptions to;
  to.format = ToolCallFormat::XmlTag;
  to.lazy = true;
  auto text = tool_call_gbnf(tools, to);
  ASSERT_TRUE(text.ok()) << text.error_message();
  auto g = fix().grammars->get(*text);
  ASSERT_TRUE(g.ok()) << g.error_message();
  auto tmpl = ChatTemplate::load_dir(model_dir("target"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.error_message();
  const int32_t open = fix().tok->token_id("<tool_call>");
  const int32_t close = fix().tok->token_id("</tool_call>");
  ASSERT_TRUE(fix().tok->is_special(open) && fix().tok->is_special(close));
  // The old vocabulary, special tokens all left out.
  auto plain_trie = std::make_shared<const VocabTrie>(
      VocabTrie::from_tokenizer(*fix().tok, {fix().im_end, fix().eot}));
  GrammarCache plain(plain_trie, 4);
  auto g_plain = plain.get(*text);
  ASSERT_TRUE(g_plain.ok()) << g_plain.error_message();
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  EngineOptions copt;
  Engine cached(*fix().target, nullptr, copt);
  int calls = 0;
  const char* asks[] = {"Look up John 3:16.", "Please look up Genesis 1:1.",
                        "Find the verse Psalms 23:4.", "What does Ruth 1:16 say?"};
  for (const char* ask : asks) {
    ChatMessage sys, user;
    sys.role = "system";
    sys.content = "You are a helpful assistant.";
    user.role = "user";
    user.content = ask;
    ChatRenderOptions ro;
    ro.tools_ordered = tools;
    ro.enable_thinking = 0;  // the prompt closes an empty think block: the reply is the call
    auto rendered = tmpl->render({sys, user}, ro);
    ASSERT_TRUE(rendered.ok()) << rendered.error_message();
    Request base;
    base.prompt = fix().tok->encode(rendered->text);
    base.max_tokens = 80;
    base.stop_ids = {fix().im_end, fix().eot};
    base.grammar = g.value();
    const Out want = run(e, base);
    ASSERT_EQ(want.finish, FinishReason::Stop) << ask << ": " << reply_text(want.tokens);
    const auto at = std::find(want.tokens.begin(), want.tokens.end(), open);
    ASSERT_NE(at, want.tokens.end()) << ask << ": " << reply_text(want.tokens);
    EXPECT_NE(std::find(at, want.tokens.end(), close), want.tokens.end());
    std::string content;
    const std::vector<ToolCall> got =
        parse_tool_calls(reply_text(want.tokens), &content, nlohmann::json::parse(tools.dump()));
    ASSERT_EQ(got.size(), 1u) << reply_text(want.tokens);
    EXPECT_EQ(got[0].name, "lookup_verse");
    const nlohmann::json args = nlohmann::json::parse(got[0].arguments_json, nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << got[0].arguments_json;
    std::string why;
    const ojson& params = tools[0]["function"]["parameters"];
    EXPECT_TRUE(schema_test::validate(args, params, params, why)) << why << " " << args.dump();
    ++calls;
    for (SpecKind kind : {SpecKind::Ngram, SpecKind::Draft, SpecKind::Mtp}) {
      Request r = base;
      r.spec = spec(kind, 3);
      EXPECT_EQ(run(e, r).tokens, want.tokens) << spec_kind_name(kind) << " " << ask;
    }
    // Cold, then a cache hit on the same prompt (with n-gram drafts the second time).
    EXPECT_EQ(run(cached, base).tokens, want.tokens) << ask;
    Request again = base;
    again.spec = spec(SpecKind::Ngram, 3);
    const Out hit = run(cached, again);
    EXPECT_EQ(hit.tokens, want.tokens) << ask;
    EXPECT_GT(hit.report.resumed_at, 0) << ask;
    // The old vocabulary: the model's tag token is refused, and it opens no call.
    Request old = base;
    old.grammar = g_plain.value();
    const Out o = run(e, old);
    EXPECT_EQ(std::find(o.tokens.begin(), o.tokens.end(), open), o.tokens.end());
  }
  EXPECT_EQ(calls, 4);
}

TEST(Constrained, RowInABatchGivesTheSameTokensAsAlone) {
  EngineOptions off;
  off.cache_enabled = false;
  Engine alone(*fix().target, nullptr, off);
  struct Case {
    Request req;
    Out want;
  };
  std::vector<Case> cases;
  const char* users[] = {"Who was David?",    "Name a king.", "Who was Saul?",
                         "Tell me of Moses.", "And Elijah?",  "Who built the temple?"};
  for (int i = 0; i < 6; ++i) {
    Request r = constrained(chat_prompt(users[i]), i % 2 ? list_schema() : nested_schema(), 200);
    if (i == 4) r.grammar = nullptr;  // plain rows share the batch
    if (i == 5) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 77;
    }
    if (i == 3) r.spec = spec(SpecKind::Ngram, 3);
    cases.push_back({r, run(alone, r)});
  }
  EngineOptions opt;
  opt.cache_enabled = false;
  opt.max_running = 6;
  opt.step_tokens = 37;
  // On one thread, then on a pool of three (every job shared): a step's missing masks are then
  // computed together across its rows (BatchEngine::prefetch_masks), the bits unchanged.
  // Fresh automata for the pool's run (the runs above cached every mask they needed).
  ThreadPool pool(3, 0);
  std::map<const GrammarAutomaton*, std::shared_ptr<GrammarAutomaton>> fresh;
  for (const auto& c : cases)
    if (c.req.grammar && !fresh.count(c.req.grammar.get()))
      fresh[c.req.grammar.get()] =
          GrammarAutomaton::create(std::make_shared<const Grammar>(c.req.grammar->grammar()),
                                   fix().grammars->vocab_ptr())
              .value();
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    BatchEngine eng(*fix().target, p, opt);
    test::Collector col;
    std::vector<uint64_t> ids;
    for (auto& c : cases) {
      Request r = c.req;
      if (p && r.grammar) r.grammar = fresh[r.grammar.get()];
      auto id = eng.submit(r, col.cb());
      ASSERT_TRUE(id.ok()) << id.error_message();
      ids.push_back(id.value());
    }
    col.wait(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(col.tokens[ids[i]], cases[i].want.tokens) << i << (p ? " pool" : "");
      EXPECT_EQ(col.final_ev[ids[i]].finish, cases[i].want.finish) << i;
    }
  }
  int64_t prefetched = 0;
  for (const auto& [old, a] : fresh) prefetched += a->stats().prefetched;
  EXPECT_GT(prefetched, 0) << "no step had two masks to compute together";
}

// Bounds every string and array of a random schema so that a sampled reply ends within the
// token budget most of the time (an unbounded string of a model that never closes quotes
// would only test max_tokens).
void bound(ojson& s) {
  if (!s.is_object()) return;
  for (auto it = s.begin(); it != s.end(); ++it) bound(it.value());
  if (s.contains("properties") && s["properties"].is_object())
    for (auto& p : s["properties"]) bound(p);
  if (s.contains("type") && s["type"] == "string" && !s.contains("maxLength") &&
      !s.contains("format") && !s.contains("pattern"))
    s["maxLength"] = std::min<int64_t>(8, s.value("minLength", int64_t{0}) + 8);
  if (s.contains("type") && s["type"] == "array" && !s.contains("maxItems"))
    s["maxItems"] = s.value("minItems", int64_t{0}) + 2;
}

// Every reply that finishes parses as JSON and validates against its schema: random schemas,
// random sampling seeds, with and without speculation (a sampled draft model drafts from the
// masked distribution; the n-gram drafter's drafts are cut by the grammar).
TEST(Constrained, SampledRepliesOverRandomSchemasValidate) {
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  int finished = 0, total = 0, with_spec = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    ojson schema = schema_test::SchemaGen(seed).root();
    bound(schema);
    Request r = constrained(chat_prompt("Answer in JSON."), schema, 400);
    if (!r.grammar) continue;
    r.sampling.temperature = seed % 3 == 0 ? 1.2f : 0.9f;
    r.sampling.top_k = seed % 4 == 0 ? 40 : 0;
    r.sampling.top_p = seed % 5 == 0 ? 0.9f : 1.0f;
    r.sampling.seed = 1000 + seed;
    if (seed % 3 == 1) r.spec = spec(SpecKind::Draft, 3);
    if (seed % 3 == 2) r.spec = spec(SpecKind::Ngram, 4);
    const Out o = run(e, r);
    ++total;
    if (o.finish != FinishReason::Stop) {
      std::printf("seed %u: %s after %zu tokens: %s\n", seed, finish_reason_name(o.finish),
                  o.tokens.size(), reply_text(o.tokens).substr(0, 160).c_str());
      continue;
    }
    ++finished;
    with_spec += r.spec.has_value();
    expect_valid(o.tokens, schema, "seed " + std::to_string(seed) + " schema " + schema.dump());
  }
  EXPECT_EQ(total, 40);
  // Random schemas may hold unbounded parts (keys of free objects, recursive lists) that a
  // model trained on English text rarely closes: most replies (over half) still finish.
  EXPECT_GE(finished, 21) << "of " << total;
  EXPECT_GE(with_spec, 12);
}

// A temperature-only row is drawn whole and masked only when the draw is refused: the tokens
// must follow the masked distribution (chi-square over many seeds against the first row's
// masked softmax, which a request with keep_first_logits reports after masking it in full).
TEST(Constrained, LazySampledRowsFollowTheMaskedDistribution) {
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  auto g = fix().grammars->get("root ::= [ A-Z] [a-z ]*\n");
  ASSERT_TRUE(g.ok()) << g.error_message();
  Request r;
  r.prompt = chat_prompt("Name a city.");
  r.max_tokens = 1;
  r.grammar = g.value();
  r.sampling.temperature = 1.0f;
  r.keep_first_logits = true;  // not lazy: the row is masked in full
  auto full = e.generate(r);
  ASSERT_TRUE(full.ok()) << full.error_message();
  const std::vector<float>& row = full->first_logits;
  const int32_t V = static_cast<int32_t>(row.size());
  double mx = -INFINITY, sum = 0;
  for (float x : row) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(static_cast<size_t>(V));
  for (int32_t v = 0; v < V; ++v) sum += p[v] = std::exp(static_cast<double>(row[v]) - mx);
  for (double& x : p) x /= sum;
  // How much of the unmasked mass the grammar allows: the lazy path must see refusals.
  r.grammar = nullptr;
  auto raw = e.generate(r);
  ASSERT_TRUE(raw.ok());
  double rmx = -INFINITY, rsum = 0, allowed = 0;
  for (float x : raw->first_logits) rmx = std::max(rmx, static_cast<double>(x));
  for (int32_t v = 0; v < V; ++v) {
    const double w = std::exp(static_cast<double>(raw->first_logits[v]) - rmx);
    rsum += w;
    if (p[v] > 0) allowed += w;
  }
  EXPECT_LT(allowed / rsum, 0.9);
  EXPECT_GT(allowed / rsum, 0.01);
  r.keep_first_logits = false;
  r.grammar = g.value();
  const int n = 2000;
  std::map<int32_t, int> count;
  for (int i = 0; i < n; ++i) {
    r.sampling.seed = 9000 + static_cast<uint64_t>(i);
    auto o = e.generate(r);
    ASSERT_TRUE(o.ok()) << o.error_message();
    ASSERT_EQ(o->tokens.size(), 1u);
    ASSERT_GT(p[o->tokens[0]], 0.0) << "a refused token was sampled";
    ++count[o->tokens[0]];
  }
  // Bins of expected count >= 5 (the rest pooled).
  double chi2 = 0, pool_e = 0;
  int pool_o = 0, df = -1;
  for (int32_t v = 0; v < V; ++v) {
    const double ex = p[v] * n;
    if (p[v] == 0) continue;
    const int ob = count.count(v) ? count[v] : 0;
    if (ex < 5) {
      pool_e += ex;
      pool_o += ob;
      continue;
    }
    chi2 += (ob - ex) * (ob - ex) / ex;
    ++df;
  }
  if (pool_e > 0) {
    chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
    ++df;
  }
  ASSERT_GT(df, 3);
  EXPECT_LT(chi2, df + 5 * std::sqrt(2.0 * df)) << "df " << df;
}

// Asking for log-probabilities only reports: a sampled reply under a grammar is the same
// token for token with and without them (the lazy draw is kept; the row is masked after it),
// for seeds whose draws the grammar refuses as well as accepts, and every reported
// log-probability is of the masked row (the chosen token's finite, the alternatives allowed).
TEST(Constrained, LogprobsDoNotChangeASampledReply) {
  EngineOptions opt;
  opt.cache_enabled = false;
  BatchEngine eng(*fix().target, nullptr, opt, EngineThread::Caller);
  auto g = fix().grammars->get("root ::= [ A-Z] [a-z ]{20}\n");
  ASSERT_TRUE(g.ok()) << g.error_message();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::vector<int32_t> got[2];
    for (int with = 0; with < 2; ++with) {
      Request r;
      r.prompt = chat_prompt("Name a city.");
      r.max_tokens = 24;
      r.grammar = g.value();
      r.sampling.temperature = 1.0f;
      r.sampling.seed = seed;
      r.logprobs = with == 1;
      r.top_logprobs = with == 1 ? 4 : 0;
      ASSERT_TRUE(eng.submit(r,
                             [&, with](const TokenEvent& ev) {
                               if (ev.token < 0) return;
                               got[with].push_back(ev.token);
                               if (with == 0) return;
                               EXPECT_TRUE(std::isfinite(ev.logprob)) << ev.token;
                               EXPECT_LE(ev.logprob, 0.0f);
                               EXPECT_FALSE(ev.top.empty());
                               for (const auto& [t, lp] : ev.top)
                                 EXPECT_TRUE(std::isfinite(lp)) << t;
                             })
                      .ok());
      eng.run_until_idle();
    }
    ASSERT_FALSE(got[0].empty());
    EXPECT_EQ(got[1], got[0]) << "seed " << seed;
  }
}

TEST(Constrained, SubmitRefusesAGrammarOverALargerVocabulary) {
  EngineOptions opt;
  opt.cache_enabled = false;
  Engine e(*fix().target, nullptr, opt);
  std::vector<std::string> bytes(static_cast<size_t>(fix().target->config().vocab_size) + 10, "a");
  auto trie = std::make_shared<const VocabTrie>(bytes, std::vector<int32_t>{1});
  auto g = parse_gbnf("root ::= \"a\"+\n");
  ASSERT_TRUE(g.ok());
  Request r;
  r.prompt = chat_prompt("x");
  r.grammar =
      GrammarAutomaton::create(std::make_shared<Grammar>(std::move(g).value()), trie).value();
  auto out = e.generate(r);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error_message().find("vocabulary"), std::string::npos) << out.error_message();
}

// constrain_logits: a lazy greedy row is left alone exactly when its argmax is allowed, and the
// masked row's argmax is then the same token.
TEST(Constrained, LazyGreedyRowPicksWhatTheMaskedRowPicks) {
  auto a = schema_grammar(nested_schema());
  ASSERT_TRUE(a);
  const int32_t V = static_cast<int32_t>(fix().target->config().vocab_size);
  std::mt19937_64 rng(3);
  GrammarMatcher m(a);
  int lazy_kept = 0;
  for (int step = 0; step < 2000 && !m.is_ended(); ++step) {
    std::vector<float> row(static_cast<size_t>(V));
    for (auto& x : row) x = static_cast<float>(static_cast<int>(rng() % 64)) * 0.25f;  // ties
    std::vector<float> full = row;
    bool masked = true;
    ASSERT_TRUE(constrain_logits(*a, m.state(), row.data(), V, true, &masked).ok());
    ASSERT_TRUE(constrain_logits(*a, m.state(), full.data(), V, false).ok());
    const int32_t t = argmax(row.data(), V);
    EXPECT_EQ(t, argmax(full.data(), V));
    lazy_kept += !masked;
    ASSERT_TRUE(m.accept(t).ok());
  }
  EXPECT_TRUE(m.is_ended());
  EXPECT_GT(lazy_kept, 0);
}

}  // namespace
}  // namespace rw
