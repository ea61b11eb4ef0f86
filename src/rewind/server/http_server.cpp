#include "rewind/server/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <tuple>

#include "rewind/chat/chat_template.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/grammar/grammar_cache.h"
#include "rewind/grammar/tool_grammar.h"
#include "rewind/server/access_log.h"
#include "rewind/server/cache_view.h"
#include "rewind/server/http_transport.h"
#include "rewind/server/metrics.h"
#include "rewind/server/openai_request.h"
#include "rewind/server/openai_response.h"
#include "rewind/server/web_assets.h"
#include "rewind/tokenizer/text.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

struct HttpError {
  int status = 500;
  std::string message, type, code;
};

HttpError bad_request(std::string msg, std::string code = "") {
  return {400, std::move(msg), "invalid_request_error", std::move(code)};
}

// The OpenAI error type of a status.
std::string error_type(int status) {
  if (status == 401) return "authentication_error";
  if (status == 404) return "not_found_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

HttpReply error_reply(const HttpError& e) {
  HttpReply r;
  r.status = e.status;
  r.content_type = kJson;
  r.body = dump_json(error_json(e.message, e.type, e.code)) + "\n";
  if (e.status == 429 || e.status == 503) r.headers.push_back({"Retry-After", "1"});
  if (e.status == 401) r.headers.push_back({"WWW-Authenticate", "Bearer"});
  return r;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Compares in time that depends only on the lengths, never on where the first difference is.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

struct Route {
  const char* path;
  const char* method;        // GET routes answer HEAD too
  bool auth;                 // behind the API key
  bool json_body;            // a POST whose body must be JSON
  bool also_delete = false;  // a GET route that answers DELETE too
  // The methods the path answers (RFC 9110 10.2.1: the Allow header of 405 and OPTIONS).
  const char* allow() const {
    if (std::string_view(method) != "GET") return "POST, OPTIONS";
    return also_delete ? "GET, HEAD, DELETE, OPTIONS" : "GET, HEAD, OPTIONS";
  }
  bool answers(const std::string& m) const {
    return m == method || (m == "HEAD" && std::string_view(method) == "GET") ||
           (m == "DELETE" && also_delete);
  }
};

// One route a line.
// clang-format off
constexpr Route kRoutes[] = {
    {"/health", "GET", false, false},
    {"/metrics", "GET", true, false},
    {"/v1/models", "GET", true, false},
    {"/v1/cache", "GET", true, false, true},
    {"/v1/cache/tree", "GET", true, false},
    {"/v1/chat/completions", "POST", true, true},
    {"/v1/completions", "POST", true, true},
    {"/tokenize", "POST", true, true},
    {"/detokenize", "POST", true, true},
    {"/apply-template", "POST", true, true},
    {"/props", "GET", true, false},
};
// clang-format on

// The web page's files (web_assets.h): public, like the page of any local server; the API
// calls the page makes carry the key.
constexpr Route kAssetRoute = {"(web page)", "GET", false, false};
// GET /v1/models/{id}: one model (the id percent-decoded; it may hold '/').
constexpr std::string_view kModelPrefix = "/v1/models/";
constexpr Route kModelRoute = {"/v1/models/{id}", "GET", true, false};

// llama-server's spellings without /v1 (clients whose base URL lacks it), and its /v1/health:
// the same routes.
constexpr std::pair<std::string_view, std::string_view> kRouteAliases[] = {
    {"/chat/completions", "/v1/chat/completions"},
    {"/completions", "/v1/completions"},
    {"/models", "/v1/models"},
    {"/v1/health", "/health"}};

// The route's own path for an alias, else `path`.
std::string_view canonical_path(std::string_view path) {
  for (const auto& [alias, canonical] : kRouteAliases)
    if (path == alias) return canonical;
  return path;
}

// web_page: the page's files are routes (ServerOptions::web_page).
const Route* find_route(const std::string& given, bool web_page) {
  const std::string_view path = canonical_path(given);
  for (const Route& r : kRoutes)
    if (path == r.path) return &r;
  if (path.size() > kModelPrefix.size() && path.starts_with(kModelPrefix)) return &kModelRoute;
  if (web_page && find_web_asset(path)) return &kAssetRoute;
  return nullptr;
}

// The page's own rules: scripts and styles only from this server, no plugins, no framing, and
// API calls only to this origin; so even markup that got past the sanitiser cannot run inline
// script or load anything from elsewhere.
constexpr const char* kPagePolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

// A web asset, or 304 when the client's copy (If-None-Match) is current. Clients revalidate
// every time (no-cache): the page changes with the binary.
HttpReply asset_reply(const WebAsset& a, const HttpRequest& req) {
  HttpReply r;
  r.headers = {{"ETag", std::string(a.etag)},
               {"Cache-Control", "no-cache"},
               {"X-Content-Type-Options", "nosniff"}};
  if (a.path == "/") {
    r.headers.push_back({"Content-Security-Policy", kPagePolicy});
    r.headers.push_back({"Referrer-Policy", "no-referrer"});
    r.headers.push_back({"X-Frame-Options", "DENY"});
  }
  if (const std::string* inm = req.header("if-none-match")) {
    std::string_view v = *inm;
    bool match = false;
    while (!v.empty()) {  // a list of entity tags (RFC 9110 13.1.2), weak ones compared weakly
      const size_t comma = v.find(',');
      std::string_view tag = trim(v.substr(0, comma));
      v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
      if (tag.substr(0, 2) == "W/") tag.remove_prefix(2);
      if (tag == "*" || tag == a.etag) match = true;
    }
    if (match) {
      r.status = 304;
      return r;
    }
  }
  r.content_type = std::string(a.content_type);
  r.body = std::string(a.body);
  return r;
}

struct Served;

// Everything about one accepted generation request, fixed before it is submitted.
struct Plan {
  const Served* model = nullptr;  // the model that answers
  bool chat = true;
  std::string id;
  std::string model_asked;  // the request's "model" ("" when none)
  std::string model_id;     // the "model" of the answer ("" until routed)
  int64_t created = 0;
  Request sub;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, parse_tools = false;
  bool think_open = false;  // the rendered prompt ends inside an open <think> block
  // A chat reply goes through the reasoning split: the prompt opened a block, or the template
  // writes them.
  bool split_reasoning = false;
  json tools;  // the request's tools when parse_tools (types parsed tool-call arguments)
  bool logprobs = false;
  int32_t top_logprobs = 0;
  int32_t n = 1;  // choices per prompt (prompt k's engine ids ids[k] .. ids[k] + n - 1)
  // A completion batch's prompts after the first (sub's): their tokens and max_tokens.
  std::vector<std::pair<std::vector<int32_t>, int32_t>> more;
  int32_t prompts() const { return 1 + static_cast<int32_t>(more.size()); }
  // Completions with echo: each prompt's text, which its choices' texts start with.
  std::vector<std::string> echo;
  std::vector<std::string> ignored_fields;  // X-Rewind-Ignored-Fields
  std::vector<std::string> schema_relaxed;  // X-Rewind-Schema-Relaxed
};

// A header listing `items` (none when there are none), each cut to `max_item` bytes and joined
// by `sep`, about 2000 bytes at most. A header value holds visible ASCII (and spaces when
// `spaces`): other bytes, and the separator's first character, become '?'.
void add_list_header(HttpHeaders* h, const char* name, const std::vector<std::string>& items,
                     const std::string& sep, size_t max_item, bool spaces) {
  if (items.empty()) return;
  std::string v;
  for (const std::string& item : items) {
    std::string clean = item.substr(0, max_item);
    for (char& c : clean)
      if (c < (spaces ? 0x20 : 0x21) || c > 0x7e || c == sep[0]) c = '?';
    v += (v.empty() ? "" : sep) + clean;
    if (v.size() > 2000) break;
  }
  h->push_back({name, v});
}

// X-Rewind-Schema-Relaxed: where the schemas a client did not mark strict were relaxed to
// compile (relax_json_schema), "; "-separated.
void add_relaxed_header(HttpHeaders* h, const std::vector<std::string>& notes) {
  add_list_header(h, "X-Rewind-Schema-Relaxed", notes, "; ", 200, true);
}

// X-Rewind-Ignored-Fields naming a request's unknown top-level fields, comma-separated: the one
// policy of every endpoint with a JSON body (openai_request.h).
void add_ignored_header(HttpHeaders* h, const std::vector<std::string>& fields) {
  add_list_header(h, "X-Rewind-Ignored-Fields", fields, ",", 100, false);
}

// Turns token events into text: UTF-8 streaming, a chat reply's reasoning split from its
// content, stop sequences (on the content only), finish reasons, logprobs (of the content's
// tokens only: a chat reply's reasoning and tags have none, as with OpenAI's reasoning models).
class Generation {
 public:
  Generation(const Tokenizer& tok, const std::set<int32_t>& stop_ids, const Plan& plan)
      : stop_ids_(stop_ids), plan_(plan), dec_(tok), stop_(plan.stop), split_(plan.think_open) {}

  struct Piece {
    std::string text;               // content that became final with this event
    std::string reasoning;          // chat: reasoning that became final with this event
    std::vector<TokenLogprob> lps;  // the content's tokens, when logprobs were asked for
  };

  // Consumes one event. Sets *cancel when a stop sequence just matched and the engine request
  // is still running.
  Piece on_event(const TokenEvent& ev, bool* cancel) {
    Piece p;
    *cancel = false;
    if (ev.finish != FinishReason::None) {
      done_ = true;
      engine_finish_ = ev.finish;
      error_ = ev.error;
      usage_.prompt_tokens = ev.report.prompt_tokens;
      usage_.cached_tokens = ev.report.resumed_at;
      RewindUsage& ru = usage_.rewind.emplace();
      ru.rerun_tokens = ev.report.rerun_tokens;
      ru.diverged_at = ev.report.diverged_at;
      ru.resumed_at = ev.report.resumed_at;
      ru.lost_to_spacing = ev.report.lost_to_spacing;
      ru.tier_tokens = ev.report.tier_tokens;
      ru.hit = hit_kind_name(ev.report.hit);
      rerun_tokens_ = ev.report.rerun_tokens;
      ttft_ms_ = ev.report.ttft_ms;
      total_ms_ = ev.report.total_ms;
    }
    if (stop_.stopped() || ev.token < 0) {
      if (done_ && !stop_.stopped()) {
        add(dec_.flush(), nullptr, &p);
        release(stop_.flush(), &p);
      }
      return p;
    }
    ++completion_tokens_;
    std::string piece;
    const bool eos = ev.finish == FinishReason::Stop && stop_ids_.count(ev.token);
    // The end-of-turn token is no text, so it has no log-probability entry either (OpenAI's).
    std::optional<TokenLogprob> lp;
    if (plan_.logprobs && !eos) lp = TokenLogprob{ev.token, ev.logprob, ev.top};
    if (!eos) piece = dec_.push(ev.token);
    if (done_) piece += dec_.flush();
    add(piece, lp ? &*lp : nullptr, &p, /*token=*/!eos);
    if (stop_.stopped()) {
      stopped_by_string_ = true;
      *cancel = !done_;
    } else if (done_) {
      release(stop_.flush(), &p);
    }
    return p;
  }

  bool done() const { return done_; }
  // Empty when the request ended normally; else the error to report.
  std::optional<HttpError> failure() const {
    if (stopped_by_string_) return std::nullopt;
    if (engine_finish_ == FinishReason::Error)
      return HttpError{500, "generation failed: " + error_, "server_error", "generation_failed"};
    if (cancelled())
      return HttpError{503, "the server is shutting down; the request was not completed",
                       "server_error", "shutting_down"};
    return std::nullopt;
  }
  // The engine failed the request.
  bool failed() const { return engine_finish_ == FinishReason::Error; }
  // The request was cut short (client gone, server shutting down), not by a stop string.
  bool cancelled() const {
    return engine_finish_ == FinishReason::Cancelled && !stopped_by_string_;
  }
  // A streamed reply cut short by the server ends as truncated: "length".
  std::string finish_reason() const {
    if (stopped_by_string_ || engine_finish_ == FinishReason::Stop) return "stop";
    return "length";
  }
  // `queue_ms`: the request complete to its submission (the engine times from there).
  UsageCounts usage(double queue_ms = 0) const {
    UsageCounts u = usage_;
    u.completion_tokens = completion_tokens_;
    if (plan_.split_reasoning) u.reasoning_tokens = reasoning_tokens_;
    if (u.rewind && completion_tokens_ > 0) {
      u.rewind->ttft_ms = queue_ms + ttft_ms_;
      u.rewind->decode_ms = std::max(0.0, total_ms_ - ttft_ms_);
    }
    return u;
  }
  int64_t rerun_tokens() const { return rerun_tokens_; }
  double ttft_ms() const { return ttft_ms_; }
  double total_ms() const { return total_ms_; }

 private:
  // Decoded text (and its token's logprob, or null) into p: a chat reply's through the
  // reasoning split first (when it has one); the content through the stop matcher. A token's
  // logprob goes with the content when the split gives content with it; it waits (held_lps_)
  // while its text is undecided (the reply's start held back, or part of a character still
  // being decoded), and goes with the reasoning, the tags and the newlines after </think> (no
  // logprob). At the end, what the split held back. Generated tokens (`token`) are counted the
  // same way: those that go with the reasoning are its tokens (usage's reasoning_tokens).
  void add(const std::string& text, const TokenLogprob* lp, Piece* p, bool token = false) {
    if (!plan_.split_reasoning) {
      if (lp) held_lps_.push_back(*lp);
      feed(text, p);
      return;
    }
    ReasoningSplitter::Out o = split_.push(text);
    if (done_) {
      ReasoningSplitter::Out f = split_.finish();
      o.reasoning += f.reasoning;
      o.content += f.content;
    }
    if (lp) held_lps_.push_back(*lp);
    if (token) ++held_tokens_;
    if (o.content.empty() && (done_ || !o.reasoning.empty() || split_.in_reasoning() ||
                              !(text.empty() || split_.undecided()))) {
      held_lps_.clear();  // reasoning, tags, the newlines after </think>, or nothing more
      reasoning_tokens_ += held_tokens_;
      held_tokens_ = 0;
    }
    p->reasoning += o.reasoning;
    if (!o.content.empty()) {
      held_tokens_ = 0;
      feed(o.content, p);  // with the held tokens' logprobs
    }
  }
  // Content into the stop matcher, with the held tokens' logprobs (held_lps_), which start at
  // its current end. A logprob goes out once the matcher has released a byte past its token's
  // start; those of tokens that start at or after a stop sequence's match are dropped, as the
  // text they belong to is.
  void feed(const std::string& content, Piece* p) {
    if (content.empty() && held_lps_.empty()) return;
    for (TokenLogprob& lp : held_lps_) pending_lps_.push_back({fed_, std::move(lp)});
    held_lps_.clear();
    fed_ += static_cast<int64_t>(content.size());
    release(stop_.push(content), p);
  }
  // Text the stop matcher released (after a match: the text before it) into p, with the
  // logprobs whose tokens start within what is released so far.
  void release(const std::string& out, Piece* p) {
    p->text += out;
    released_ += static_cast<int64_t>(out.size());
    const bool all = done_ && !stop_.stopped();  // the end: every token's text is out
    while (!pending_lps_.empty() && (all || pending_lps_.front().first < released_)) {
      p->lps.push_back(std::move(pending_lps_.front().second));
      pending_lps_.pop_front();
    }
    if (stop_.stopped()) pending_lps_.clear();  // their text is the stop sequence or after it
  }

  const std::set<int32_t>& stop_ids_;
  const Plan& plan_;
  StreamDecoder dec_;
  StopMatcher stop_;
  ReasoningSplitter split_;
  std::vector<TokenLogprob> held_lps_;
  // Content tokens' logprobs waiting on the stop matcher, each with the content byte its text
  // starts at; fed_ / released_: the content bytes given to / released by the matcher.
  std::deque<std::pair<int64_t, TokenLogprob>> pending_lps_;
  int64_t fed_ = 0, released_ = 0;
  bool done_ = false, stopped_by_string_ = false;
  FinishReason engine_finish_ = FinishReason::None;
  std::string error_;
  UsageCounts usage_;
  int64_t completion_tokens_ = 0, rerun_tokens_ = 0;
  // Tokens whose text went to the reasoning, and those whose text is still undecided.
  int64_t reasoning_tokens_ = 0, held_tokens_ = 0;
  double ttft_ms_ = 0, total_ms_ = 0;
};

// One served model: its engine, tokenizer, template and defaults, the request limits they set,
// its compiled grammars and the ids its clients saw.
struct Served {
  Served(ServedModel s, std::string label_)
      : engine(*s.engine),
        tok(*s.tok),
        tmpl(*s.tmpl),
        defaults(std::move(s.defaults)),
        id(std::move(s.id)),
        aliases(std::move(s.aliases)),
        grammar_cache_bytes(s.grammar_cache_bytes),
        model_path(std::move(s.model_path)),
        chat_template_source(std::move(s.chat_template_source)),
        label(std::move(label_)) {
    limits.ctx_size = engine.options().ctx_size;
    limits.vocab_size = engine.model().config().vocab_size;
    static_assert(Limits::kMaxChoices == Request::kMaxChoices);
    limits.max_choices = std::min(Request::kMaxChoices, engine.options().max_running);
    // With serve -n a larger max_tokens is capped, not refused (as llama-server's -n).
    if (defaults.max_tokens > 0) limits.max_tokens = std::numeric_limits<int32_t>::max();
    tool_format = probe_tool_format();
  }
  BatchEngine& engine;
  const Tokenizer& tok;
  const ChatTemplate& tmpl;
  GenerationDefaults defaults;
  std::string id;
  std::vector<std::string> aliases;
  size_t grammar_cache_bytes;
  std::string model_path, chat_template_source;
  std::string label;  // its metrics label ("" with one model)
  Limits limits;
  // Engine request id -> the id its client saw, for /v1/cache (the engine keeps 32 recent rows).
  mutable std::mutex ids_mu;
  mutable std::deque<std::pair<uint64_t, std::string>> client_ids;
  static constexpr size_t kClientIdsMax = 256;
  static constexpr size_t kGrammarCacheEntries = 8;  // compiled grammars kept (LRU)
  // Constrained decoding: the vocabulary trie and the compiled grammars (built on the first
  // request that asks for a grammar), and the chat template's tool-call syntax.
  mutable std::once_flag grammar_once;
  mutable std::unique_ptr<GrammarCache> grammars;
  mutable std::atomic<const GrammarCache*> grammars_ready{nullptr};  // for /metrics
  std::optional<ToolCallFormat> tool_format;

  // The names a request may give for this model.
  std::vector<std::string> names() const {
    return aliases.empty() ? std::vector<std::string>{id} : aliases;
  }

  // The tool-call syntax of the chat template, from a rendered call (none: forced tool calls
  // are refused).
  std::optional<ToolCallFormat> probe_tool_format() const {
    ChatMessage user;
    user.role = "user";
    user.content = "hi";
    ChatMessage call;
    call.role = "assistant";
    call.tool_calls = {{"call_0", "probe_fn", R"({"x": 1})"}};
    ChatRenderOptions ro;
    ro.add_generation_prompt = false;
    ro.tools = json::parse(
        R"([{"type":"function","function":{"name":"probe_fn","parameters":{"type":"object",)"
        R"("properties":{"x":{"type":"integer"}}}}}])");
    auto r = tmpl.render({user, call}, ro);
    if (!r.ok()) return std::nullopt;
    const std::string& t = r->text;
    if (t.find("<function=probe_fn>") != std::string::npos) return ToolCallFormat::XmlTag;
    if (t.find("<TOOLCALL>") != std::string::npos) return ToolCallFormat::JsonList;
    if (t.find("<tool_call>") != std::string::npos) return ToolCallFormat::JsonTag;
    return std::nullopt;
  }

  // The compiled grammar of `gbnf` for p's request. A prompt that ends inside an open <think>
  // block gets the reasoning first: free text up to "</think>" (any '<' in it not followed by
  // '/'), then the grammar.
  std::optional<HttpError> attach_grammar(const std::string& gbnf, const std::string& from,
                                          Plan* p) const {
    std::call_once(grammar_once, [this] {
      std::vector<int32_t> eos(defaults.stop_ids.begin(), defaults.stop_ids.end());
      AutomatonLimits lim;
      lim.mask_cache_bytes = size_t{64} << 20;
      // The template's tool-call tags stay in the vocabulary when the tokenizer marks them
      // special: a model writes them as those tokens, and a lazy grammar opens its calls on them.
      std::vector<std::string> tags;
      if (tool_format) tags = {tool_call_opening(*tool_format), tool_call_closing(*tool_format)};
      grammars = std::make_unique<GrammarCache>(
          std::make_shared<const VocabTrie>(VocabTrie::from_tokenizer(tok, std::move(eos), tags)),
          kGrammarCacheEntries, lim, grammar_cache_bytes);
      grammars_ready.store(grammars.get());
    });
    if (grammars->vocab().eos_ids().empty())
      return bad_request("'" + from +
                         "': the model has no end-of-sequence token to end a "
                         "constrained reply");
    std::string text = gbnf;
    std::string root = "root";
    if (p->think_open) {
      root = "rewind-reasoned-reply";
      text += "\n" + root + " ::= ( [^<] | \"<\" [^/] )* \"</think>\" [ \\n]{0,4} root\n";
    }
    auto a = grammars->get(text, root);
    if (!a.ok()) return bad_request("'" + from + "': " + a.error_message());
    p->sub.grammar = a.value();
    // The grammar ends the reply with one of these (ignore_eos too); never shown as text.
    const auto& eos = grammars->vocab().eos_ids();
    p->sub.stop_ids.insert(eos.begin(), eos.end());
    return std::nullopt;
  }

  // The engine's figures, with the cache budget known from the start (the engine reports the
  // cache's own figures only after its first step).
  EngineMetrics engine_metrics() const {
    EngineMetrics m = engine.metrics();
    if (engine.options().cache_enabled && m.cache.budget_bytes == 0)
      m.cache.budget_bytes = engine.options().cache.budget_bytes;
    return m;
  }

  // ---- llama.cpp's /tokenize, /detokenize and /props ----

  // {"tokens": [ids]} or, with_pieces, {"tokens": [{"id", "piece"}]}: a piece is the token's
  // text when its bytes are valid UTF-8, else the list of its bytes (as llama.cpp).
  Result<json> tokenize(const std::string& body, std::vector<std::string>* ignored) const {
    REWIND_TRY(TokenizeRequest t, parse_tokenize_request(body, limits));
    *ignored = t.ignored_fields;
    const std::vector<int32_t> ids = t.add_special ? tok.encode_prompt(t.content, t.parse_special)
                                                   : tok.encode(t.content, t.parse_special);
    if (static_cast<int64_t>(ids.size()) > limits.ctx_size)
      return make_error("'content' encodes to " + std::to_string(ids.size()) + " tokens; at most " +
                        std::to_string(limits.ctx_size) + " (the context size) are allowed");
    json toks = json::array();
    for (int32_t id : ids) {
      if (!t.with_pieces) {
        toks.push_back(id);
        continue;
      }
      const std::string piece = tok.token_bytes(id);
      bool valid = true;
      for (size_t i = 0; i < piece.size() && valid;) {
        const text::Utf8Step st = text::utf8_step(piece, i);
        valid = st.kind == text::Utf8Step::kValid;
        i += static_cast<size_t>(st.len);
      }
      json p = json::array();
      if (valid) {
        p = piece;
      } else {
        for (unsigned char b : piece) p.push_back(static_cast<int>(b));
      }
      toks.push_back({{"id", id}, {"piece", std::move(p)}});
    }
    return json{{"tokens", std::move(toks)}};
  }

  // A chat request's prompt as its generation would render it: the generation prompt added,
  // or, when the last message is final_message_continuable, that reply continued (llama.cpp's
  // assistant prefill).
  Result<RenderedChat> render_chat(const ParsedChatRequest& c) const {
    ChatRenderOptions ro;
    ro.add_generation_prompt = true;
    ro.continue_final_message = final_message_continuable(c.messages);
    ro.enable_thinking = c.enable_thinking >= 0 ? c.enable_thinking : defaults.enable_thinking;
    if (c.parse_tools) ro.tools_ordered = c.tools;
    return tmpl.render(c.messages, ro);
  }

  // POST /apply-template (llama.cpp's): a chat request's rendered prompt, {"prompt": text}.
  // Appends to `ignored` the template kwargs a request set that the template never reads.
  void note_unread_kwargs(const ParsedChatRequest& c, std::vector<std::string>* ignored) const {
    if (c.enable_thinking >= 0 && !tmpl.reads_enable_thinking())
      ignored->push_back("chat_template_kwargs.enable_thinking");
  }

  Result<json> apply_template(const std::string& body, std::vector<std::string>* ignored) const {
    REWIND_TRY(ParsedChatRequest c, parse_chat_request(body, limits));
    *ignored = c.ignored_fields;
    note_unread_kwargs(c, ignored);
    REWIND_TRY(RenderedChat r, render_chat(c));
    return json{{"prompt", std::move(r.text)}};
  }

  // {"content": text}; bytes that do not form UTF-8 (a character cut between tokens) become
  // U+FFFD.
  Result<json> detokenize(const std::string& body, std::vector<std::string>* ignored) const {
    REWIND_TRY(DetokenizeRequest d, parse_detokenize_request(body, limits));
    *ignored = d.ignored_fields;
    return json{{"content", tok.decode(d.tokens)}};
  }

  // The server's settings in llama.cpp's /props shape where a field applies (n_ctx,
  // total_slots, model_path, default_generation_settings, build_info, chat template), plus
  // rewind's cache and speculation settings.
  json props_json(const std::string& build_info) const {
    const EngineOptions& eo = engine.options();
    const SamplingParams& d = defaults.sampling;
    const SpecConfig& sc = eo.spec;
    json stops = json::array();
    for (int32_t t : defaults.stop_ids) stops.push_back(t);
    json params = {{"temperature", d.temperature},
                   {"top_k", d.top_k},
                   {"top_p", d.top_p},
                   {"min_p", d.min_p},
                   {"repeat_penalty", d.repetition_penalty},
                   {"repeat_last_n", d.repeat_last_n},
                   {"presence_penalty", d.presence_penalty},
                   {"frequency_penalty", d.frequency_penalty},
                   {"n_predict", defaults.max_tokens > 0 ? defaults.max_tokens : -1},
                   {"stop_token_ids", std::move(stops)},
                   {"speculative", spec_kind_name(sc.kind)},
                   {"speculative.n_max", sc.k}};
    return {
        {"model_alias", names()[0]},
        {"model_path", model_path},
        {"n_ctx", eo.ctx_size},
        {"total_slots", eo.max_running},
        {"max_choices", limits.max_choices},
        {"vocab_size", engine.model().config().vocab_size},
        {"default_generation_settings", {{"n_ctx", eo.ctx_size}, {"params", std::move(params)}}},
        {"chat_template_source", chat_template_source},
        {"bos_token", tmpl.bos_token()},
        {"eos_token", tmpl.eos_token()},
        {"completion_prompt", {{"prefix_ids", tok.prefix_ids()}, {"suffix_ids", tok.suffix_ids()}}},
        {"cache",
         {{"enabled", eo.cache_enabled},
          {"budget_bytes", eo.cache_enabled ? eo.cache.budget_bytes : 0},
          {"checkpoint_interval", eo.cache.policy.interval},
          {"checkpoint_interval_why", eo.cache.policy.grid_note},
          {"checkpoint_max_per_branch", eo.cache.policy.max_per_branch}}},
        {"speculative",
         {{"kind", spec_kind_name(sc.kind)},
          {"k", sc.k},
          {"adaptive", sc.adaptive},
          {"ngram_min", sc.ngram_min},
          {"ngram_max", sc.ngram_max},
          {"draft_model", sc.draft != nullptr},
          {"mtp", engine.model().mtp_loaded()}}},
        {"build_info", build_info},
    };
  }

  // ---- requests ----

  SamplingParams sampling_of(const SamplingOverrides& o) const {
    SamplingParams s = defaults.sampling;
    if (o.temperature) s.temperature = static_cast<float>(*o.temperature);
    if (o.top_p) s.top_p = static_cast<float>(*o.top_p);
    if (o.top_k) s.top_k = *o.top_k;
    if (o.min_p) s.min_p = static_cast<float>(*o.min_p);
    if (o.presence_penalty) s.presence_penalty = static_cast<float>(*o.presence_penalty);
    if (o.frequency_penalty) s.frequency_penalty = static_cast<float>(*o.frequency_penalty);
    if (o.repetition_penalty) s.repetition_penalty = static_cast<float>(*o.repetition_penalty);
    if (o.repeat_last_n) s.repeat_last_n = *o.repeat_last_n;
    if (!o.logit_bias.empty()) s.logit_bias = o.logit_bias;
    if (o.seed) {
      s.seed = *o.seed;
    } else {
      static std::mutex mu;
      static std::mt19937_64 rng(std::random_device{}());
      std::lock_guard<std::mutex> lock(mu);
      s.seed = rng();
    }
    return s;
  }

  // Fills what both endpoints share and checks the prompt against the context size.
  std::optional<HttpError> finish_plan(const CommonRequest& c, Plan* p) const {
    const int64_t n = static_cast<int64_t>(p->sub.prompt.size());
    const int64_t ctx = engine.options().ctx_size;
    if (n == 0) return bad_request("the prompt encodes to no tokens");
    if (n >= ctx)
      return bad_request("the prompt has " + std::to_string(n) + " tokens; the context size is " +
                             std::to_string(ctx) + " (at least one token must be left to generate)",
                         "context_length_exceeded");
    // The server's -n is the default and the cap: a max_tokens it replaced is the server's
    // choice, which the context's end bounds as when none is given; only the client's own
    // max_tokens must fit.
    const int32_t cap = defaults.max_tokens;
    const bool own = c.max_tokens && (cap == 0 || *c.max_tokens <= cap);
    if (own && n + *c.max_tokens > ctx)
      return bad_request("prompt (" + std::to_string(n) + " tokens) + max_tokens (" +
                             std::to_string(*c.max_tokens) + ") exceed the context size " +
                             std::to_string(ctx),
                         "context_length_exceeded");
    const int64_t want = own ? *c.max_tokens : cap > 0 ? cap : ctx - n;
    p->sub.max_tokens = static_cast<int32_t>(std::min<int64_t>(want, ctx - n));
    p->sub.sampling = sampling_of(c.sampling);
    if (!c.ignore_eos) p->sub.stop_ids = defaults.stop_ids;
    p->sub.logprobs = c.logprobs;
    p->sub.top_logprobs = c.top_logprobs;
    if (!c.speculative.empty()) {
      p->sub.spec_kind = c.speculative == "off"     ? SpecKind::Off
                         : c.speculative == "ngram" ? SpecKind::Ngram
                         : c.speculative == "draft" ? SpecKind::Draft
                                                    : SpecKind::Mtp;
    }
    p->sub.spec_k = c.speculative_k;
    p->sub.n = c.n;
    p->n = c.n;
    p->ignored_fields = c.ignored_fields;
    p->schema_relaxed = c.schema_relaxed;
    if (auto sc = resolve_spec(engine.model(), engine.options().spec, p->sub); !sc.ok())
      return bad_request(sc.error_message());
    p->stop = c.stop;
    p->stream = c.stream;
    p->include_usage = c.include_usage;
    p->logprobs = c.logprobs;
    p->top_logprobs = c.top_logprobs;
    p->created = static_cast<int64_t>(std::time(nullptr));
    return std::nullopt;
  }

  std::optional<HttpError> plan_chat(const std::string& body, Plan* p) const {
    auto r = parse_chat_request(body, limits);
    if (!r.ok()) return bad_request(r.error_message());
    const ParsedChatRequest& c = r.value();
    if (p->model_asked.empty()) p->model_asked = c.model;
    auto rendered = render_chat(c);
    if (!rendered.ok()) return bad_request(rendered.error_message());  // "chat template: ..."
    p->chat = true;
    p->id = random_id("chatcmpl-");
    p->sub.prompt = tokenize_chat(tok, rendered.value(), &p->sub.boundaries, &p->sub.anchor);
    p->parse_tools = c.parse_tools;
    if (c.parse_tools) p->tools = json::parse(c.tools.dump());
    p->think_open = prompt_opens_think(rendered->text);
    p->split_reasoning =
        (c.split_reasoning >= 0 ? c.split_reasoning == 1 : defaults.split_reasoning) &&
        (p->think_open || tmpl.mentions_think());
    if (auto e = finish_plan(c, p)) return e;
    note_unread_kwargs(c, &p->ignored_fields);
    if (c.tool_required) {
      if (!tool_format)
        return bad_request(
            "'tool_choice': this model's chat template has no tool-call syntax "
            "rewind can constrain (use \"auto\")");
      ToolGrammarOptions to;
      to.format = *tool_format;
      to.only = c.tool_choice_name;
      to.parallel = c.parallel_tool_calls && c.tool_choice_name.empty();
      to.relaxed = &p->schema_relaxed;
      auto g = tool_call_gbnf(c.tools, to);
      if (!g.ok()) return bad_request(g.error_message());
      return attach_grammar(g.value(), "tool_choice", p);
    }
    if (!c.grammar.empty()) return attach_grammar(c.grammar, c.grammar_from, p);
    if (c.parse_tools && tool_format && has_strict_tool(c.tools)) {
      // tool_choice "auto" with strict tools: free text until the template's tool-call tag,
      // then calls whose strict functions' arguments follow their schemas.
      ToolGrammarOptions to;
      to.format = *tool_format;
      to.parallel = c.parallel_tool_calls;
      to.lazy = true;
      auto g = tool_call_gbnf(c.tools, to);
      if (!g.ok()) return bad_request(g.error_message());
      return attach_grammar(g.value(), "tools", p);
    }
    return std::nullopt;
  }

  std::optional<HttpError> plan_completion(const std::string& body, Plan* p) const {
    auto r = parse_completion_request(body, limits);
    if (!r.ok()) return bad_request(r.error_message());
    const ParsedCompletionRequest& c = r.value();
    if (p->model_asked.empty()) p->model_asked = c.model;
    p->chat = false;
    p->id = random_id("cmpl-");
    // Each prompt is checked as a request of its own; the last first, so that sub ends as the
    // first prompt's.
    if (c.echo)
      for (const CompletionPrompt& cp : c.prompts)
        p->echo.push_back(cp.tokens ? tok.decode(cp.ids) : cp.text);
    for (size_t i = c.prompts.size(); i-- > 0;) {
      const CompletionPrompt& cp = c.prompts[i];
      p->sub.prompt = cp.tokens ? cp.ids : tok.encode_prompt(cp.text);
      if (auto e = finish_plan(c, p)) {
        if (c.prompts.size() > 1) e->message = "prompt[" + std::to_string(i) + "]: " + e->message;
        return e;
      }
      if (i > 0) p->more.insert(p->more.begin(), {std::move(p->sub.prompt), p->sub.max_tokens});
    }
    // A batch is queued whole: more prompts than the engine can hold at once never fit.
    const EngineOptions& eo = engine.options();
    const int64_t fits = eo.max_running / std::max(1, c.n) + eo.max_queued;
    if (c.prompts.size() > 1 && static_cast<int64_t>(c.prompts.size()) > fits)
      return bad_request("a batch of " + std::to_string(c.prompts.size()) + " prompts (" +
                         std::to_string(c.n) + " choices each) does not fit: --parallel " +
                         std::to_string(eo.max_running) + " and --max-queue " +
                         std::to_string(eo.max_queued) + " hold " + std::to_string(fits) +
                         " such requests at once");
    if (!c.grammar.empty()) return attach_grammar(c.grammar, c.grammar_from, p);
    return std::nullopt;
  }

  void remember_client_id(uint64_t engine_id, const std::string& id) const {
    std::lock_guard<std::mutex> lock(ids_mu);
    client_ids.emplace_back(engine_id, id);
    if (client_ids.size() > kClientIdsMax) client_ids.pop_front();
  }
  std::map<uint64_t, std::string> client_id_map() const {
    std::lock_guard<std::mutex> lock(ids_mu);
    return {client_ids.begin(), client_ids.end()};
  }
};

// Threads for a request's work before the engine sees it (the JSON parse, the chat template,
// the tokenizer): a body of megabytes takes a second there, which on the transport's threads
// would hold every other connection. Tasks run in arrival order; the destructor runs what is
// queued, then joins.
class PrepThreads {
 public:
  explicit PrepThreads(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~PrepThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void run(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

struct HttpServer::Impl {
  using Clock = std::chrono::steady_clock;
  ServerOptions opt;
  std::vector<std::unique_ptr<Served>> models;  // the first is the default
  // Requests must name a served model (several models, or names given): unknown names get 404.
  bool strict = false;
  ServerMetrics metrics;
  // /v1/models' "created": when the server started, the same in every answer.
  const int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::atomic<int> in_flight{0};
  std::atomic<int> preparing{0};  // requests on the preparation threads, not yet submitted
  std::unique_ptr<HttpTransport> transport;
  // The preparation threads (reset first by ~Impl: their queued work still finds the rest).
  std::unique_ptr<PrepThreads> prep = std::make_unique<PrepThreads>(2);

  // One generation request from submit to its final event; its events run on the
  // connection's strand, one at a time.
  struct Job {
    std::shared_ptr<Plan> plan;
    std::shared_ptr<HttpExchange> ex;
    HttpHeaders cors;
    // Prompt k's engine id (a completion batch has several prompts): its choice c is ids[k] + c.
    std::vector<uint64_t> ids;
    // One per choice: prompt k's choice c at k * Plan::n + c.
    struct Choice {
      std::unique_ptr<Generation> gen;
      ToolCallSplitter tools;
      std::string reasoning;  // chat, not streamed: the reply's reasoning
      int64_t text_offset = 0;
      std::string text;               // whole replies: the text so far
      std::vector<TokenLogprob> lps;  // whole replies: the logprobs so far
      std::string finish;             // the finish_reason the client was given
    };
    std::vector<Choice> choices;
    int32_t n_done = 0;  // choices whose final event arrived
    bool ended = false;  // the answer is complete (every choice done, or one failed a stream)
    // For the access log:
    std::string peer, method, path;
    Clock::time_point t0, t_submit;  // the request complete; its submission to the engine
    int status = 200;                // a whole reply's status
    bool client_gone = false;
    // Whole replies: an upper bound of the answer's JSON text so far (answer_bytes_bound);
    // past max_buffered the request ends with a 400 (too_large).
    int64_t answer_bytes = 0;
    bool too_large = false;
  };

  // What the HTTP layer holds at most: request bodies, buffers and answers (at least one body).
  size_t buffered_cap() const { return std::max(opt.max_buffered, opt.max_body); }

  // The preparation threads go first (what they hold is answered through a live transport);
  // handlers the transport runs as it closes then answer 503 (prepare).
  ~Impl() { prep.reset(); }

  Impl(std::vector<ServedModel> served, ServerOptions o) : opt(std::move(o)) {
    REWIND_CHECK(!served.empty());
    strict = served.size() > 1 || !served[0].aliases.empty();
    for (ServedModel& s : served) {
      REWIND_CHECK(s.engine && s.tok && s.tmpl);
      std::string label = served.size() > 1 ? s.id : "";
      models.push_back(std::make_unique<Served>(std::move(s), std::move(label)));
    }
    std::set<std::string> seen;
    for (const auto& m : models)
      for (const std::string& n : m->names()) REWIND_CHECK(seen.insert(n).second);
    TransportOptions to;
    to.host = opt.host;
    to.port = opt.port;
    to.io_threads = opt.http_threads > 0 ? opt.http_threads : 2;
    to.header_timeout_s = opt.header_timeout_s;
    to.body_timeout_s = opt.body_timeout_s;
    to.idle_timeout_s = opt.idle_timeout_s;
    to.max_header_bytes = opt.max_header_bytes;
    to.max_target_bytes = opt.max_target_bytes;
    to.max_body = opt.max_body;
    to.max_buffered = buffered_cap();
    to.max_connections = opt.max_connections;
    to.max_connections_per_client = opt.max_connections_per_client;
    transport = std::make_unique<HttpTransport>(
        to, [this](HttpRequest r, std::shared_ptr<HttpExchange> ex) { handle(std::move(r), ex); },
        [this](const HttpRequest& r) { return precheck(r); },
        [](int status, const std::string& message, const std::string& code) {
          return error_reply({status, message, error_type(status), code});
        },
        [this](const HttpTransport::Answer& a) {
          // By route, so that the label takes a bounded set of values.
          const Route* r = find_route(a.path, opt.web_page);
          metrics.count_response(r == &kAssetRoute ? a.path : r ? r->path : "other", a.status);
          // The handler's answers are logged where they end (with their tokens); these are the
          // header checks' and the transport's own.
          if (!a.from_handler) log_plain(random_id("req-"), a.peer, a.method, a.path, a.status);
        });
    // Bytes the transport holds or has reserved (bodies, read buffers, queued answers): in
    // /metrics, under the cap max_buffered.
    metrics.track_memory("http_buffers", [this] { return transport->buffered_bytes(); });
    for (const auto& m : models)
      metrics.track_memory(
          "grammar",
          [s = m.get()] {
            const GrammarCache* g = s->grammars_ready.load();
            return g ? static_cast<int64_t>(g->memory_bytes() + g->vocab().memory_bytes()) : 0;
          },
          m->label);
  }

  // ---- checks on the header alone ----

  bool authorized(const HttpRequest& req) const {
    if (opt.api_keys.empty()) return true;
    const std::string* h = req.header("authorization");
    if (!h) return false;
    // credentials = auth-scheme 1*SP token68; the scheme is case-insensitive (RFC 9110 11.1).
    const std::string_view v = trim(*h);
    const size_t sp = v.find_first_of(" \t");
    if (sp == std::string_view::npos || lower(v.substr(0, sp)) != "bearer") return false;
    const std::string given(trim(v.substr(sp)));
    bool ok = false;  // every key compared, so the time says nothing of which one matched
    for (const std::string& k : opt.api_keys) ok = constant_time_equal(given, k) || ok;
    return ok;
  }

  static HttpError unauthorized() {
    return {401, "missing or invalid API key (send 'Authorization: Bearer KEY')",
            "authentication_error", "invalid_api_key"};
  }

  bool cors_allowed(const std::string& origin) const {
    for (const auto& o : opt.cors_origins)
      if (o == "*" || o == origin) return true;
    return false;
  }

  // The CORS headers of an answer to `req` (none unless its Origin is allowed).
  HttpHeaders cors_headers(const HttpRequest& req) const {
    const std::string* origin = req.header("origin");
    if (!origin || !cors_allowed(*origin)) return {};
    // A page may read the ignored-fields header (browsers hide other headers by default).
    return {{"Access-Control-Allow-Origin", *origin},
            {"Access-Control-Expose-Headers", "X-Rewind-Ignored-Fields, X-Rewind-Schema-Relaxed"},
            {"Vary", "Origin"}};
  }

  // The headers a preflight from an allowed origin may send: those it asks for
  // (Access-Control-Request-Headers, when a plain list of header names: OpenAI's SDKs send
  // their own x-stainless-* headers from a page), else Authorization and Content-Type.
  static std::string allowed_request_headers(const HttpRequest& req) {
    const std::string* asked = req.header("access-control-request-headers");
    const bool plain = asked && !trim(*asked).empty() && asked->size() <= 2048 &&
                       std::all_of(asked->begin(), asked->end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                                c == '_' || c == ',' || c == ' ';
                       });
    return plain ? std::string(trim(*asked)) : "Authorization, Content-Type";
  }

  std::optional<HttpReply> precheck(const HttpRequest& req) {
    std::optional<HttpReply> r = precheck_plain(req);
    if (r)
      for (auto& h : cors_headers(req)) r->headers.push_back(std::move(h));
    return r;
  }

  std::optional<HttpReply> precheck_plain(const HttpRequest& req) {
    if (req.target == "*") {  // the asterisk form: OPTIONS asks about the server as a whole
      HttpReply r;
      r.status = 204;
      r.headers = {{"Allow", "GET, HEAD, POST, DELETE, OPTIONS"}};
      return r;
    }
    const Route* route = find_route(req.path, opt.web_page);
    if (!route)
      return error_reply(
          {404, "no route for " + req.method + " " + req.path, "not_found_error", "not_found"});
    if (req.method == "OPTIONS") {
      // The path's methods (no API key: browsers send none with a preflight); the CORS
      // preflight headers only for an allowed origin.
      HttpReply r;
      r.status = 204;
      r.headers = {{"Allow", route->allow()}};
      if (!cors_headers(req).empty()) {
        r.headers.push_back({"Access-Control-Allow-Methods", route->allow()});
        r.headers.push_back({"Access-Control-Allow-Headers", allowed_request_headers(req)});
        r.headers.push_back({"Access-Control-Max-Age", "600"});
      }
      return r;
    }
    if (!route->answers(req.method)) {
      HttpReply r = error_reply(
          {405,
           req.method + " is not allowed on " + req.path + " (allowed: " + route->allow() + ")",
           "invalid_request_error", "method_not_allowed"});
      r.headers.push_back({"Allow", route->allow()});
      return r;
    }
    if (route->auth && !authorized(req)) return error_reply(unauthorized());
    if (route->json_body) {
      const std::string* ct = req.header("content-type");
      const std::string media = ct ? lower(trim(ct->substr(0, ct->find(';')))) : "";
      if (media != "application/json")
        return error_reply({415,
                            "Content-Type must be application/json" +
                                (ct ? " (got '" + std::string(trim(*ct)).substr(0, 100) + "')"
                                    : std::string(" (none sent)")) +
                                (media == "application/x-www-form-urlencoded"
                                     ? "; curl -d sends that unless given -H 'Content-Type: "
                                       "application/json'"
                                     : ""),
                            "invalid_request_error", "unsupported_media_type"});
    }
    return std::nullopt;
  }

  // ---- routes ----

  void handle(HttpRequest req, const std::shared_ptr<HttpExchange>& ex) {
    const Clock::time_point t0 = Clock::now();
    req.path = std::string(canonical_path(req.path));
    const HttpHeaders cors = cors_headers(req);
    const Route* route = find_route(req.path, opt.web_page);
    std::string log_model;  // the model a per-model route answered for
    auto send = [&](HttpReply r) { answer(req, t0, ex, cors, std::move(r), log_model); };
    auto json_reply = [&](std::string body) {
      HttpReply r;
      r.content_type = kJson;
      r.body = std::move(body);
      send(std::move(r));
    };
    // The model a GET route's `?model=NAME` names (the first model without one); null after
    // answering an error.
    auto query_model = [&](std::string* rest) -> const Served* {
      const size_t q = req.target.find('?');
      auto mq = split_model_query(
          q == std::string::npos ? std::string_view{} : std::string_view(req.target).substr(q + 1));
      if (!mq.ok()) {
        send(error_reply(bad_request(mq.error_message())));
        return nullptr;
      }
      if (rest) *rest = mq->rest;
      HttpError err;
      const Served* m = find_model(mq->model.value_or(""), &err);
      log_model = m ? m->names()[0] : mq->model.value_or("");
      if (!m) send(error_reply(err));
      return m;
    };
    // JSON text holds no raw NUL (RFC 8259: control characters only escaped); the parser would
    // take one as the end of the text and ignore what follows, which a proxy would not.
    if (route && route->json_body && req.body.find('\0') != std::string::npos)
      return send(error_reply(bad_request("the body holds a NUL byte, which JSON does not allow")));
    try {
      if (req.path == "/health") return json_reply("{\"status\":\"ok\"}\n");
      if (req.path == "/metrics") {
        HttpReply r;
        r.content_type = "text/plain; version=0.0.4";
        std::vector<ModelMetrics> mm;
        for (const auto& m : models) mm.push_back({m->label, m->engine_metrics()});
        r.body = metrics.prometheus(mm, opt.shared_memory_bound);
        return send(std::move(r));
      }
      if (req.path == "/v1/models" || route == &kModelRoute) {
        const int64_t created = started;
        auto entry = [&](const Served& m, const std::string& id) {
          return json{{"id", id},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "rewind"},
                      {"root", m.names()[0]},  // the served model this name is of
                      {"max_model_len", m.engine.options().ctx_size}};
        };
        if (route == &kModelRoute) {
          auto id = percent_decode(std::string_view(req.path).substr(kModelPrefix.size()), false);
          if (!id.ok()) return send(error_reply(bad_request("model id: " + id.error_message())));
          // A listed id, else 404 (OpenAI's retrieve), even where a request's `model` may be
          // any name (one model without names).
          HttpError err;
          const Served* m = find_model(id.value(), &err, /*listed_only=*/true);
          if (!m) return send(error_reply(err));
          return json_reply(dump_json(entry(*m, id.value())) + "\n");
        }
        json data = json::array();
        for (const auto& m : models)
          for (const std::string& id : m->names()) data.push_back(entry(*m, id));
        return json_reply(dump_json({{"object", "list"}, {"data", std::move(data)}}) + "\n");
      }
      if (req.path == "/v1/cache" && req.method == "DELETE") {
        const Served* m = query_model(nullptr);
        if (!m) return;
        return clear_cache(*m, req, t0, ex, cors);
      }
      if (req.path == "/v1/cache") {
        const Served* m = query_model(nullptr);
        if (!m) return;
        json j = cache_json(m->engine_metrics(), m->engine.options(), m->client_id_map());
        j["model"] = m->names()[0];
        return json_reply(dump_json(j) + "\n");
      }
      if (req.path == "/v1/cache/tree") {
        std::string rest;
        const Served* m = query_model(&rest);
        if (!m) return;
        return cache_tree(*m, rest, req, t0, ex, cors);
      }
      if (req.path == "/props") {
        const Served* m = query_model(nullptr);
        if (!m) return;
        return json_reply(dump_json(m->props_json(opt.build_info)) + "\n");
      }
      // The routes that parse, render or tokenize a body run on the preparation threads.
      if (req.path == "/tokenize" || req.path == "/detokenize" || req.path == "/apply-template")
        return prepare(std::move(req), t0, ex, cors, &Impl::utility);
      if (req.path == "/v1/chat/completions" || req.path == "/v1/completions")
        return prepare(std::move(req), t0, ex, cors, &Impl::generation);
      if (route == &kAssetRoute) return send(asset_reply(*find_web_asset(req.path), req));
      send(error_reply(
          {404, "no route for " + req.method + " " + req.path, "not_found_error", "not_found"}));
    } catch (const std::exception& e) {
      internal_error(req, t0, ex, cors, e, log_model);
    }
  }

  // A prepared route; `hold` counts the request in in_flight() until it is submitted or
  // answered, so a drain waits for it.
  using Prepared = void (Impl::*)(const HttpRequest&, Clock::time_point,
                                  const std::shared_ptr<HttpExchange>&, const HttpHeaders&,
                                  const std::shared_ptr<void>& hold);
  // Runs `fn` on the preparation threads (an exception answers 500, as on the strand).
  void prepare(HttpRequest req, Clock::time_point t0, const std::shared_ptr<HttpExchange>& ex,
               const HttpHeaders& cors, Prepared fn) {
    if (!prep) {  // the server is being destroyed: the transport's last handlers
      HttpReply r =
          error_reply({503, "the server is shutting down", "server_error", "shutting_down"});
      for (const auto& h : cors) r.headers.push_back(h);
      return ex->reply(std::move(r));
    }
    ++preparing;
    std::shared_ptr<void> hold(nullptr, [this](void*) { --preparing; });
    prep->run([this, req = std::move(req), t0, ex, cors, fn, hold = std::move(hold)] {
      try {
        (this->*fn)(req, t0, ex, cors, hold);
      } catch (const std::exception& e) {
        internal_error(req, t0, ex, cors, e);
      }
    });
  }

  // Sends `r` to the request's client with the CORS headers, logged with `model` and `id` (a
  // fresh request id when empty).
  void answer(const HttpRequest& req, Clock::time_point t0, const std::shared_ptr<HttpExchange>& ex,
              const HttpHeaders& cors, HttpReply r, const std::string& model = "",
              const std::string& id = "") {
    for (const auto& h : cors) r.headers.push_back(h);
    log_plain(id.empty() ? random_id("req-") : id, req.peer, req.method, req.path, r.status,
              ms_since(t0), model);
    ex->reply(std::move(r));
  }

  void internal_error(const HttpRequest& req, Clock::time_point t0,
                      const std::shared_ptr<HttpExchange>& ex, const HttpHeaders& cors,
                      const std::exception& e, const std::string& model = "") {
    std::fprintf(stderr, "rewind serve: internal error on %s: %s\n", req.path.c_str(), e.what());
    answer(req, t0, ex, cors,
           error_reply({500, "internal error", "server_error", "internal_error"}), model);
  }

  // POST /tokenize, /detokenize, /apply-template (on a preparation thread).
  void utility(const HttpRequest& req, Clock::time_point t0,
               const std::shared_ptr<HttpExchange>& ex, const HttpHeaders& cors,
               const std::shared_ptr<void>& /*hold*/) {
    std::string log_model;
    auto send = [&](HttpReply r) { answer(req, t0, ex, cors, std::move(r), log_model); };
    HttpError err;
    const Served* m = find_model(strict ? peek_model_name(req.body) : "", &err);
    if (!m) {
      log_model = peek_model_name(req.body);
      return send(error_reply(err));
    }
    log_model = m->names()[0];
    std::vector<std::string> ignored;
    auto body = req.path == "/tokenize"     ? m->tokenize(req.body, &ignored)
                : req.path == "/detokenize" ? m->detokenize(req.body, &ignored)
                                            : m->apply_template(req.body, &ignored);
    if (!body.ok()) return send(error_reply(bad_request(body.error_message())));
    HttpReply r;
    r.content_type = kJson;
    r.body = dump_json(body.value()) + "\n";
    add_ignored_header(&r.headers, ignored);
    send(std::move(r));
  }

  // The sender of an answer made later, on the connection's strand (after the engine thread
  // has done its part): the CORS headers, the access log line, the reply.
  auto later_reply(const Served& m, const HttpRequest& req, Clock::time_point t0,
                   const std::shared_ptr<HttpExchange>& ex, const HttpHeaders& cors) {
    return [this, ex, cors, t0, peer = req.peer, method = req.method, path = req.path,
            name = m.names()[0]](HttpReply r) {
      for (const auto& h : cors) r.headers.push_back(h);
      log_plain(random_id("req-"), peer, method, path, r.status, ms_since(t0), name);
      ex->reply(std::move(r));
    };
  }

  // The tree is read on the engine thread between steps; its answer is built and written on the
  // connection's strand, so no transport thread waits for the engine. `query`: the query string
  // without its `model` parameter.
  void cache_tree(const Served& m, const std::string& query, const HttpRequest& req,
                  Clock::time_point t0, const std::shared_ptr<HttpExchange>& ex,
                  const HttpHeaders& cors) {
    auto max_nodes = parse_cache_tree_query(query);
    auto finish = later_reply(m, req, t0, ex, cors);
    if (!max_nodes.ok()) return finish(error_reply(bad_request(max_nodes.error_message())));
    m.engine.cache_tree(max_nodes.value(), [ex, finish, mp = &m](CacheTreeReport rep) {
      ex->post([finish, mp, rep = std::move(rep)] {
        HttpReply r;
        r.content_type = kJson;
        r.headers = {{"Cache-Control", "no-store"}};
        json j = cache_tree_json(rep, mp->engine.options(), mp->client_id_map());
        j["model"] = mp->names()[0];
        r.body = dump_json(j) + "\n";
        finish(std::move(r));
      });
    });
  }

  // DELETE /v1/cache: the model's RAM tier emptied on the engine thread between steps; the
  // answer says what it held (nodes, snapshots, pages, bytes) and which tiers keep theirs.
  void clear_cache(const Served& m, const HttpRequest& req, Clock::time_point t0,
                   const std::shared_ptr<HttpExchange>& ex, const HttpHeaders& cors) {
    auto finish = later_reply(m, req, t0, ex, cors);
    const bool enabled = m.engine.options().cache_enabled;
    m.engine.clear_cache([ex, finish, enabled, name = m.names()[0]](CacheStats st) {
      ex->post([finish, enabled, name, st = std::move(st)] {
        json kept = json::array();
        for (const TierStats& t : st.tiers)
          if (t.enabled) kept.push_back(t.name);
        json j = {{"model", name},
                  {"enabled", enabled},
                  {"cleared",
                   {{"nodes", st.n_nodes},
                    {"snapshots", st.n_snapshots},
                    {"pages", st.n_pages},
                    {"bytes", st.bytes_pages + st.bytes_snapshots}}},
                  {"tiers_kept", std::move(kept)}};
        HttpReply r;
        r.content_type = kJson;
        r.headers = {{"Cache-Control", "no-store"}};
        r.body = dump_json(j) + "\n";
        finish(std::move(r));
      });
    });
  }

  // ---- generation ----

  // An error answer to a generation request (its plan names it and its model in the log).
  void generation_error(const HttpRequest& req, const Plan& plan, Clock::time_point t0,
                        const std::shared_ptr<HttpExchange>& ex, const HttpHeaders& cors,
                        const HttpError& e) {
    answer(req, t0, ex, cors, error_reply(e),
           plan.model_id.empty() ? plan.model_asked : plan.model_id, plan.id);
  }

  // POST /v1/chat/completions and /v1/completions: parsed, rendered and tokenized on a
  // preparation thread, then submitted on the connection's strand.
  void generation(const HttpRequest& req, Clock::time_point t0,
                  const std::shared_ptr<HttpExchange>& ex, const HttpHeaders& cors,
                  const std::shared_ptr<void>& hold) {
    const bool chat = req.path == "/v1/chat/completions";
    auto plan = std::make_shared<Plan>();
    auto send = [&](const HttpError& e) { generation_error(req, *plan, t0, ex, cors, e); };
    // Several models: the body's "model" picks one before the full parse (its limits apply).
    if (auto e = route(strict ? peek_model_name(req.body) : "", plan.get())) return send(*e);
    const Served& m = *plan->model;
    if (auto e =
            chat ? m.plan_chat(req.body, plan.get()) : m.plan_completion(req.body, plan.get())) {
      metrics.count_outcome("rejected", m.label);  // refused before the engine saw it
      return send(*e);
    }
    // Planned: only the request line and peer are needed from here (not the body).
    HttpRequest head;
    head.method = req.method;
    head.target = req.target;
    head.path = req.path;
    head.peer = req.peer;
    ex->post([this, head = std::move(head), t0, ex, cors, plan, hold] {
      try {
        submit(head, t0, ex, cors, plan);
      } catch (const std::exception& e) {
        internal_error(head, t0, ex, cors, e);
      }
    });
  }

  // Submits a planned request (on the connection's strand, so that its events, posted there by
  // the engine thread, run after the rest of this function: the stream's head first).
  void submit(const HttpRequest& req, Clock::time_point t0, const std::shared_ptr<HttpExchange>& ex,
              const HttpHeaders& cors, const std::shared_ptr<Plan>& plan) {
    auto send = [&](const HttpError& e) { generation_error(req, *plan, t0, ex, cors, e); };
    const Served& m = *plan->model;
    auto job = std::make_shared<Job>();
    job->plan = plan;
    job->ex = ex;
    job->cors = cors;
    job->peer = req.peer;
    job->method = req.method;
    job->path = req.path;
    job->t0 = t0;
    job->t_submit = Clock::now();
    const int32_t n = plan->n, n_prompts = plan->prompts();
    job->choices.resize(static_cast<size_t>(n * n_prompts));
    for (Job::Choice& c : job->choices) {
      c.gen = std::make_unique<Generation>(m.tok, plan->sub.stop_ids, *plan);
      c.tools = ToolCallSplitter(plan->tools);
    }
    ++in_flight;
    for (int32_t k = 0; k < n_prompts; ++k) {
      Request sub = plan->sub;
      if (k > 0) std::tie(sub.prompt, sub.max_tokens) = plan->more[static_cast<size_t>(k - 1)];
      // The engine thread only hands each event to the connection's strand. This runs on that
      // strand, so every event runs after the rest of this function (the stream's head first).
      auto id = m.engine.submit(std::move(sub), [this, job, k](const TokenEvent& ev) {
        job->ex->post([this, job, ev, k] { on_event(*job, ev, k); });
      });
      if (!id.ok()) {
        // A batch is answered whole or not at all: the prompts already queued are cancelled.
        job->ended = true;
        for (const uint64_t e : job->ids)
          for (int32_t c = 0; c < n; ++c) m.engine.cancel(e + static_cast<uint64_t>(c));
        --in_flight;
        metrics.count_outcome("rejected", m.label);
        const std::string& msg = id.error_message();
        if (msg == "queue full")
          return send({429, "the server is busy: the request queue is full; retry later",
                       "rate_limit_error", "queue_full"});
        if (msg.find("shutting down") != std::string::npos)
          return send({503, "the server is shutting down", "server_error", "shutting_down"});
        return send(bad_request(msg));
      }
      job->ids.push_back(id.value());
      m.remember_client_id(id.value(), plan->id);
    }
    if (plan->stream) {
      HttpReply head;
      head.content_type = "text/event-stream";
      head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
      for (const auto& h : cors) head.headers.push_back(h);
      add_ignored_header(&head.headers, plan->ignored_fields);
      add_relaxed_header(&head.headers, plan->schema_relaxed);
      head.heartbeat = ": keep-alive\n\n";
      ex->start_stream(std::move(head));
      if (plan->chat) {
        std::string roles;
        for (int32_t c = 0; c < plan->n; ++c)
          roles += sse_event(chat_chunk_json(plan->id, plan->created, plan->model_id,
                                             {{"role", "assistant"}, {"content", ""}}, nullptr,
                                             nullptr, c));
        ex->send_chunk(std::move(roles));
      }
      if (!plan->echo.empty()) {  // each choice's stream starts with its prompt
        std::string echoed;
        for (int32_t slot = 0; slot < n * n_prompts; ++slot)
          echoed += sse_event(completion_chunk_json(plan->id, plan->created, plan->model_id,
                                                    plan->echo[static_cast<size_t>(slot / n)],
                                                    nullptr, nullptr, slot));
        ex->send_chunk(std::move(echoed));
      }
    }
    // The client went away: free its sequences at the engine's next step. (A weak reference: the
    // exchange must not keep the job alive, the job holds the exchange.)
    ex->on_gone([engine = &m.engine, ids = job->ids, n, weak = std::weak_ptr<Job>(job)] {
      if (auto j = weak.lock()) j->client_gone = true;
      for (const uint64_t id : ids)
        for (int32_t c = 0; c < n; ++c) engine->cancel(id + static_cast<uint64_t>(c));
    });
  }

  // The engine id of the choice at `slot` (prompt slot / n, choice slot % n).
  static uint64_t engine_id(const Job& j, int32_t slot) {
    const int32_t n = j.plan->n;
    return j.ids[static_cast<size_t>(slot / n)] + static_cast<uint64_t>(slot % n);
  }

  // An event of prompt k's engine request.
  void on_event(Job& j, const TokenEvent& ev, int32_t k) {
    if (j.ended || ev.choice < 0 || ev.choice >= j.plan->n) return;
    const int32_t slot = k * j.plan->n + ev.choice;
    Job::Choice& c = j.choices[static_cast<size_t>(slot)];
    if (c.gen->done()) return;
    bool cancel = false;
    Generation::Piece p = c.gen->on_event(ev, &cancel);
    BatchEngine& engine = j.plan->model->engine;
    if (cancel) engine.cancel(engine_id(j, slot));
    if (c.gen->done()) ++j.n_done;
    const bool all = j.n_done == static_cast<int32_t>(j.choices.size());
    if (j.plan->stream) {
      std::string out = chunk_for(j, c, slot, p);
      if (c.gen->failed()) {
        // A failed choice ends the stream with the error; the others are cancelled.
        const HttpError e = *c.gen->failure();
        out += sse_event(error_json(e.message, e.type, e.code));
        out += kSseDone;
        j.ended = true;
        for (int32_t o = 0; o < static_cast<int32_t>(j.choices.size()); ++o)
          if (!j.choices[static_cast<size_t>(o)].gen->done()) engine.cancel(engine_id(j, o));
      } else if (c.gen->done()) {
        out += finish_chunks(j, c, slot);
        if (all) {
          out += usage_chunk(j);
          j.ended = true;
        }
      }
      j.ex->send_chunk(std::move(out));
      if (j.ended) j.ex->end_stream();
    } else if (!j.too_large) {
      j.answer_bytes += answer_bytes_bound(j.plan->model->tok, p);
      if (j.answer_bytes > static_cast<int64_t>(buffered_cap())) {
        // Held whole, the answer would pass what the server holds for answers: end every
        // choice now; the last final event answers 400.
        j.too_large = true;
        for (int32_t o = 0; o < static_cast<int32_t>(j.choices.size()); ++o)
          if (!j.choices[static_cast<size_t>(o)].gen->done()) engine.cancel(engine_id(j, o));
        for (Job::Choice& o : j.choices) {
          o.text.clear();
          o.reasoning.clear();
          o.lps.clear();
        }
      } else {
        c.text += p.text;
        c.reasoning += p.reasoning;
        for (auto& lp : p.lps) c.lps.push_back(std::move(lp));
      }
    }
    if (!j.plan->stream && all) {
      whole(j);
      j.ended = true;
    }
    if (!j.ended) return;
    --in_flight;
    const std::string outcome = j.too_large ? "rejected" : outcome_of(j);
    metrics.count_outcome(outcome, j.plan->model->label);
    const Generation& g = *j.choices[0].gen;
    if (outcome != "failed" && outcome != "cancelled")
      metrics.observe_request(g.ttft_ms(), g.total_ms(), j.plan->model->label);
    log_generation(j, outcome);
  }

  // How a request ended for its client: failed or cancelled when any choice was, else choice
  // 0's finish_reason.
  static std::string outcome_of(const Job& j) {
    for (const Job::Choice& c : j.choices)
      if (c.gen->failed()) return "failed";
    for (const Job::Choice& c : j.choices)
      if (c.gen->cancelled()) return "cancelled";
    return j.choices[0].finish;
  }

  // The request's usage: choice 0's (the prompt and its cache figures, usage.rewind), with the
  // completion tokens of every choice and the prompt and cached tokens of every prompt.
  static UsageCounts usage_of(const Job& j) {
    UsageCounts u = j.choices[0].gen->usage(queue_ms(j));
    u.completion_tokens = 0;
    u.reasoning_tokens.reset();
    for (const Job::Choice& c : j.choices) {
      const UsageCounts cu = c.gen->usage();
      u.completion_tokens += cu.completion_tokens;
      if (cu.reasoning_tokens)
        u.reasoning_tokens = u.reasoning_tokens.value_or(0) + *cu.reasoning_tokens;
    }
    // A batch: every prompt's tokens (its first choice's report), as OpenAI counts them.
    for (size_t k = 1; k < j.ids.size(); ++k) {
      const UsageCounts o = j.choices[k * static_cast<size_t>(j.plan->n)].gen->usage();
      u.prompt_tokens += o.prompt_tokens;
      u.cached_tokens += o.cached_tokens;
    }
    return u;
  }

  // ---- the access log and /v1/cache's ids ----

  static double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  static double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // A request without tokens: a route other than generation, a refused generation, or an
  // answer of the header checks or the transport (no total time: it was not timed).
  void log_plain(const std::string& id, const std::string& peer, const std::string& method,
                 const std::string& path, int status, std::optional<double> total_ms = {},
                 const std::string& model = "") {
    if (!opt.access_log) return;
    AccessRecord r;
    r.unix_time = unix_now();
    r.id = id;
    r.client = peer.empty() ? "-" : peer;
    r.method = method.empty() ? "-" : method;
    r.path = path.empty() ? "-" : path;
    r.status = status;
    r.model = model;
    r.total_ms = total_ms;
    opt.access_log->write(r);
  }

  void log_generation(const Job& j, const std::string& outcome) {
    if (!opt.access_log) return;
    const Generation& g = *j.choices[0].gen;
    const UsageCounts u = usage_of(j);
    AccessRecord r;
    r.unix_time = unix_now();
    r.id = j.plan->id;
    r.client = j.peer;
    r.method = j.method;
    r.path = j.path;
    // 499 (as nginx logs it): the client closed the connection before its answer was complete.
    r.status = j.client_gone ? 499 : j.plan->stream ? 200 : j.status;
    r.model = j.plan->model_id;
    r.stream = j.plan->stream;
    r.prompt_tokens = u.prompt_tokens;
    r.cached_tokens = u.cached_tokens;
    r.rerun_tokens = g.rerun_tokens();
    r.completion_tokens = u.completion_tokens;
    if (u.completion_tokens > 0)
      r.ttft_ms =
          std::chrono::duration<double, std::milli>(j.t_submit - j.t0).count() + g.ttft_ms();
    r.total_ms = ms_since(j.t0);
    r.finish = outcome;
    opt.access_log->write(r);
  }

  // The model a request names ("": none), or 404 model_not_found (OpenAI's shape).
  // listed_only: the name must be one of /v1/models' ids even without names set.
  const Served* find_model(const std::string& asked, HttpError* err,
                           bool listed_only = false) const {
    if (!listed_only && (!strict || asked.empty())) return models[0].get();
    for (const auto& m : models)
      for (const std::string& n : m->names())
        if (n == asked) return m.get();
    std::string served;
    for (const auto& m : models)
      for (const std::string& n : m->names()) served += (served.empty() ? "'" : ", '") + n + "'";
    const std::string shown = asked.size() > 100 ? asked.substr(0, 100) + "..." : asked;
    *err = HttpError{404, "The model '" + shown + "' does not exist; this server serves " + served,
                     "invalid_request_error", "model_not_found"};
    return nullptr;
  }

  // Routes a generation request: its model, and the name its answer carries (the name asked
  // for when names are set, else the model's id).
  std::optional<HttpError> route(const std::string& asked, Plan* p) const {
    p->model_asked = asked;
    HttpError err;
    p->model = find_model(asked, &err);
    if (!p->model) return err;
    p->model_id = !strict ? p->model->id : asked.empty() ? p->model->names()[0] : asked;
    return std::nullopt;
  }

  static double queue_ms(const Job& j) {
    return std::chrono::duration<double, std::milli>(j.t_submit - j.t0).count();
  }

  // At least the bytes a piece adds to a whole answer's JSON: its text escaped (6 bytes a byte at
  // most, \u00XX), and per logprob entry, the chosen token's and each alternative's, the token
  // escaped, its bytes as numbers (4 a byte) and 64 for the rest.
  static int64_t answer_bytes_bound(const Tokenizer& tok, const Generation::Piece& p) {
    int64_t n = 6 * static_cast<int64_t>(p.text.size() + p.reasoning.size());
    auto entry = [&](int32_t id) {
      return 10 * static_cast<int64_t>(tok.token_bytes(id).size()) + 64;
    };
    for (const TokenLogprob& l : p.lps) {
      n += entry(l.token);
      for (const auto& [id, lp] : l.top) n += entry(id);
    }
    return n;
  }

  void whole(Job& j) {
    const Plan& plan = *j.plan;
    const Tokenizer& tok = plan.model->tok;
    HttpReply r;
    std::optional<HttpError> err;
    if (j.too_large)
      err = bad_request("the whole answer would pass " + std::to_string(buffered_cap()) +
                            " bytes (--max-buffered): ask with \"stream\": true, or for fewer "
                            "tokens, choices or logprobs",
                        "answer_too_large");
    for (const Job::Choice& c : j.choices)
      if (!err) err = c.gen->failure();
    if (err) {
      r = error_reply(*err);
    } else {
      const UsageCounts usage = usage_of(j);
      std::vector<json> bodies;
      for (size_t slot = 0; slot < j.choices.size(); ++slot) {
        Job::Choice& c = j.choices[slot];
        c.finish = c.gen->finish_reason();
        if (plan.chat) {
          auto [content, calls] = split_tool_calls(c.text, plan.parse_tools, plan.tools);
          c.finish = chat_finish_reason(c.finish, !calls.empty());
          bodies.push_back(chat_completion_json(
              plan.id, plan.created, plan.model_id, content, calls, c.finish,
              plan.logprobs ? chat_logprobs_json(tok, c.lps) : json(nullptr), usage, c.reasoning));
        } else {
          const std::string echoed =
              plan.echo.empty() ? "" : plan.echo[slot / static_cast<size_t>(plan.n)];
          bodies.push_back(completion_json(
              plan.id, plan.created, plan.model_id, echoed + c.text, c.finish,
              plan.logprobs ? completion_logprobs_json(tok, c.lps, plan.top_logprobs > 0, 0)
                            : json(nullptr),
              usage));
        }
      }
      r.content_type = kJson;
      r.body = dump_json(merge_choices(std::move(bodies))) + "\n";
      add_ignored_header(&r.headers, plan.ignored_fields);
      add_relaxed_header(&r.headers, plan.schema_relaxed);
    }
    j.status = r.status;
    for (const auto& h : j.cors) r.headers.push_back(h);
    j.ex->reply(std::move(r));
  }

  std::string chunk_for(Job& st, Job::Choice& c, int32_t index, Generation::Piece& p) {
    const Plan& plan = *st.plan;
    const Tokenizer& tok = plan.model->tok;
    if (plan.chat)
      return chat_delta(st, index, p.reasoning, plan.parse_tools ? c.tools.push(p.text) : p.text,
                        p.lps);
    if (p.text.empty() && p.lps.empty()) return {};
    json lp = p.lps.empty()
                  ? json(nullptr)
                  : completion_logprobs_json(tok, p.lps, plan.top_logprobs > 0, c.text_offset);
    for (const auto& l : p.lps) c.text_offset += utf8_chars(tok.token_bytes(l.token));
    return sse_event(
        completion_chunk_json(plan.id, plan.created, plan.model_id, p.text, nullptr, lp, index));
  }

  // One chat chunk with reasoning and/or content (and the token logprobs); "" when empty.
  std::string chat_delta(const Job& st, int32_t index, const std::string& reasoning,
                         const std::string& content, const std::vector<TokenLogprob>& lps) {
    if (reasoning.empty() && content.empty() && lps.empty()) return {};
    json delta = json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!content.empty() || reasoning.empty()) delta["content"] = content;
    json lp = lps.empty() ? json(nullptr) : chat_logprobs_json(st.plan->model->tok, lps);
    return sse_event(chat_chunk_json(st.plan->id, st.plan->created, st.plan->model_id, delta,
                                     nullptr, lp, index));
  }

  // The end of one choice's stream: what its splitters held back, then its finish_reason.
  std::string finish_chunks(Job& st, Job::Choice& c, int32_t index) {
    const Plan& plan = *st.plan;
    std::string out;
    if (plan.chat) {
      std::string finish = c.gen->finish_reason();
      if (plan.parse_tools) {
        auto [content, calls] = c.tools.finish();
        if (!content.empty())
          out += sse_event(chat_chunk_json(plan.id, plan.created, plan.model_id,
                                           {{"content", content}}, nullptr, nullptr, index));
        if (!calls.empty()) {
          out += sse_event(chat_chunk_json(plan.id, plan.created, plan.model_id,
                                           {{"tool_calls", tool_calls_json(calls, true)}}, nullptr,
                                           nullptr, index));
          finish = chat_finish_reason(finish, true);
        }
      }
      c.finish = finish;
      out += sse_event(chat_chunk_json(plan.id, plan.created, plan.model_id, json::object(), finish,
                                       nullptr, index));
    } else {
      c.finish = c.gen->finish_reason();
      out += sse_event(completion_chunk_json(plan.id, plan.created, plan.model_id, "", c.finish,
                                             nullptr, index));
    }
    return out;
  }

  // The end of the stream, once every choice has finished: the usage chunk when asked, [DONE].
  std::string usage_chunk(const Job& st) {
    const Plan& plan = *st.plan;
    std::string out;
    if (plan.include_usage) {
      const UsageCounts u = usage_of(st);
      out += sse_event(plan.chat
                           ? chat_usage_chunk_json(plan.id, plan.created, plan.model_id, u)
                           : completion_usage_chunk_json(plan.id, plan.created, plan.model_id, u));
    }
    out += kSseDone;
    return out;
  }
};

HttpServer::HttpServer(std::vector<ServedModel> models, ServerOptions opt)
    : impl_(std::make_unique<Impl>(std::move(models), std::move(opt))) {}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind() {
  return impl_->transport->bind();
}
void HttpServer::run() {
  impl_->transport->run();
}
void HttpServer::drain() {
  impl_->transport->drain();
}
void HttpServer::stop() {
  impl_->transport->stop();
}
int HttpServer::in_flight() const {
  return impl_->in_flight.load() + impl_->preparing.load();
}
int64_t HttpServer::http_buffer_bytes() const {
  return impl_->transport->buffered_bytes();
}

}  // namespace rw
