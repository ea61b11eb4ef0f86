#include "rewind/server/http_server.h"

#include <httplib.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <mutex>
#include <random>

#include "rewind/chat/chat_template.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/server/metrics.h"
#include "rewind/server/openai_request.h"
#include "rewind/server/openai_response.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

// One request's events, handed from the engine thread to the HTTP thread.
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TokenEvent> events;

  void push(const TokenEvent& ev) {
    {
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(ev);
    }
    cv.notify_one();
  }
  // Waits up to `timeout` for the next event.
  bool pop(TokenEvent* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return !events.empty(); })) return false;
    *out = std::move(events.front());
    events.pop_front();
    return true;
  }
};

struct HttpError {
  int status = 500;
  std::string message, type, code;
};

HttpError bad_request(std::string msg, std::string code = "") {
  return {400, std::move(msg), "invalid_request_error", std::move(code)};
}

// The socket of a request's connection, found by its addresses (cpp-httplib 0.11 gives a
// handler no way to learn that its client has gone; newer versions have
// Request::is_connection_closed). The handler's thread owns the connection while it runs, so
// the descriptor cannot be closed or reused under it. -1 when not found.
int connection_fd(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    auto addr_port = [](const sockaddr_storage& a, std::string* host) {
      char buf[INET6_ADDRSTRLEN] = {0};
      if (a.ss_family == AF_INET) {
        auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
        inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
        *host = buf;
        return static_cast<int>(ntohs(v4->sin_port));
      }
      if (a.ss_family == AF_INET6) {
        auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
        inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
        *host = buf;
        return static_cast<int>(ntohs(v6->sin6_port));
      }
      return -1;
    };
    std::string ph, sh;
    if (addr_port(peer, &ph) == req.remote_port && ph == req.remote_addr &&
        addr_port(self, &sh) == req.local_port) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

// True when the peer has closed its side of the connection (or it broke). A client that sends
// its next request early is still there: unread bytes are peeked, not consumed.
bool peer_gone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

// Everything about one accepted generation request, fixed before it is submitted.
struct Plan {
  bool chat = true;
  std::string id;
  int64_t created = 0;
  Request sub;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, parse_tools = false;
  bool think_open = false;  // the rendered prompt ends inside an open <think> block
  json tools;  // the request's tools when parse_tools (types parsed tool-call arguments)
  bool logprobs = false;
  int32_t top_logprobs = 0;
};

// Turns token events into text: UTF-8 streaming, stop sequences, finish reasons, logprobs.
class Generation {
 public:
  Generation(const Tokenizer& tok, const std::set<int32_t>& stop_ids, const Plan& plan)
      : stop_ids_(stop_ids), plan_(plan), dec_(tok), stop_(plan.stop) {}

  struct Piece {
    std::string text;               // text that became final with this event
    std::vector<TokenLogprob> lps;  // the event's token, when logprobs were asked for
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
      ttft_ms_ = ev.report.ttft_ms;
      total_ms_ = ev.report.total_ms;
    }
    if (stop_.stopped() || ev.token < 0) {
      if (done_ && !stop_.stopped()) p.text = stop_.push(dec_.flush()) + stop_.flush();
      return p;
    }
    ++completion_tokens_;
    if (plan_.logprobs) p.lps.push_back({ev.token, ev.logprob, ev.top});
    std::string piece;
    const bool eos = ev.finish == FinishReason::Stop && stop_ids_.count(ev.token);
    if (!eos) piece = dec_.push(ev.token);
    if (done_) piece += dec_.flush();
    p.text = stop_.push(piece);
    if (stop_.stopped()) {
      stopped_by_string_ = true;
      *cancel = !done_;
    } else if (done_) {
      p.text += stop_.flush();
    }
    return p;
  }

  bool done() const { return done_; }
  // Empty when the request ended normally; else the error to report.
  std::optional<HttpError> failure() const {
    if (stopped_by_string_) return std::nullopt;
    if (engine_finish_ == FinishReason::Error)
      return HttpError{500, "generation failed: " + error_, "server_error", "generation_failed"};
    if (engine_finish_ == FinishReason::Cancelled)
      return HttpError{503, "the request was cancelled (server shutting down)", "server_error",
                       "cancelled"};
    return std::nullopt;
  }
  std::string finish_reason() const {
    if (stopped_by_string_ || engine_finish_ == FinishReason::Stop) return "stop";
    return "length";
  }
  UsageCounts usage() const {
    UsageCounts u = usage_;
    u.completion_tokens = completion_tokens_;
    return u;
  }
  double ttft_ms() const { return ttft_ms_; }
  double total_ms() const { return total_ms_; }

 private:
  const std::set<int32_t>& stop_ids_;
  const Plan& plan_;
  StreamDecoder dec_;
  StopMatcher stop_;
  bool done_ = false, stopped_by_string_ = false;
  FinishReason engine_finish_ = FinishReason::None;
  std::string error_;
  UsageCounts usage_;
  int64_t completion_tokens_ = 0;
  double ttft_ms_ = 0, total_ms_ = 0;
};

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& x = a.size() == b.size() ? b : a;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ x[i]);
  return diff == 0;
}

}  // namespace

struct HttpServer::Impl {
  BatchEngine& engine;
  const Tokenizer& tok;
  const ChatTemplate& tmpl;
  GenerationDefaults defaults;
  ServerOptions opt;
  Limits limits;
  httplib::Server svr;
  ServerMetrics metrics;
  std::atomic<int> in_flight{0};
  std::atomic<bool> stop_requested{false}, stopped{false};
  int bound_port = -1;

  Impl(BatchEngine& e, const Tokenizer& t, const ChatTemplate& c, GenerationDefaults d,
       ServerOptions o)
      : engine(e), tok(t), tmpl(c), defaults(std::move(d)), opt(std::move(o)) {
    limits.ctx_size = engine.options().ctx_size;
    limits.vocab_size = engine.model().config().vocab_size;
    setup();
  }

  // ---- plumbing ----

  static void send_error(httplib::Response& res, const HttpError& e) {
    res.status = e.status;
    res.set_content(dump_json(error_json(e.message, e.type, e.code)) + "\n", kJson);
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return false;
    return constant_time_equal(h.substr(prefix.size()), opt.api_key);
  }

  static HttpError unauthorized() {
    return {401, "missing or invalid API key (send 'Authorization: Bearer KEY')",
            "authentication_error", "invalid_api_key"};
  }

  HttpError too_large() const {
    return {413, "request body is larger than " + std::to_string(opt.max_body) + " bytes",
            "invalid_request_error", "request_too_large"};
  }

  // Reads the body with the size limit; nullopt when too large (an error response is set).
  std::optional<std::string> read_body(const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) {
    std::string body;
    bool too_big = false;
    const bool ok = reader([&](const char* d, size_t n) {
      if (body.size() + n > opt.max_body) {
        too_big = true;
        return false;
      }
      body.append(d, n);
      return true;
    });
    if (too_big || res.status == 413 ||
        (req.has_header("Content-Length") &&
         req.get_header_value<uint64_t>("Content-Length") > opt.max_body)) {
      res.set_header("Connection", "close");
      send_error(res, too_large());
      return std::nullopt;
    }
    if (!ok) {
      send_error(res, bad_request("could not read the request body"));
      return std::nullopt;
    }
    return body;
  }

  void setup() {
    svr.set_payload_max_length(opt.max_body);
    const int n_threads = opt.http_threads > 0
                              ? opt.http_threads
                              : engine.options().max_running + engine.options().max_queued + 8;
    svr.new_task_queue = [n_threads] {
      return new httplib::ThreadPool(static_cast<size_t>(n_threads));
    };

    // `Expect: 100-continue` (curl sends it for large bodies): refuse before the body is sent.
    // cpp-httplib 0.11 writes this answer without a Content-Length of its own, so set one (and
    // close the connection: the client may not send the body it announced).
    svr.set_expect_100_continue_handler(
        [this](const httplib::Request& req, httplib::Response& res) {
          std::optional<HttpError> e;
          if ((req.path.rfind("/v1/", 0) == 0 || req.path == "/metrics") && !authorized(req)) {
            e = unauthorized();
          } else if (req.has_header("Content-Length") &&
                     req.get_header_value<uint64_t>("Content-Length") > opt.max_body) {
            e = too_large();
          }
          if (!e) return 100;
          send_error(res, *e);
          res.set_header("Content-Length", std::to_string(res.body.size()));
          res.set_header("Connection", "close");
          return e->status;
        });
    svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      HttpError e;
      switch (res.status) {
        case 404:
          e = {404, "no route for " + req.method + " " + req.path, "not_found_error", "not_found"};
          break;
        case 413:
          e = too_large();
          break;
        case 401:
          e = unauthorized();
          break;
        case 400:
          e = bad_request("malformed HTTP request");
          break;
        default:
          e = {res.status, "HTTP error " + std::to_string(res.status), "server_error", ""};
          break;
      }
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = std::string("internal error: ") + e.what();
          } catch (...) {
          }
          send_error(res, {500, what, "server_error", "internal_error"});
        });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      static const std::set<std::string> known = {"/v1/chat/completions",
                                                  "/v1/completions",
                                                  "/v1/models",
                                                  "/v1/cache",
                                                  "/metrics",
                                                  "/health"};
      metrics.count_response(known.count(req.path) ? req.path : "other", res.status);
    });

    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}\n", kJson);
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, unauthorized());
      res.set_content(metrics.prometheus(engine.metrics()), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, unauthorized());
      json m = {{"id", opt.model_id},
                {"object", "model"},
                {"created", static_cast<int64_t>(std::time(nullptr))},
                {"owned_by", "rewind"},
                {"max_model_len", engine.options().ctx_size}};
      res.set_content(dump_json({{"object", "list"}, {"data", json::array({m})}}) + "\n", kJson);
    });
    svr.Get("/v1/cache", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req)) return send_error(res, unauthorized());
      res.set_content(dump_json(cache_json(engine.metrics(), engine.options())) + "\n", kJson);
    });
    auto generation = [this](bool chat) {
      return [this, chat](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& reader) {
        if (!authorized(req)) {
          size_t drained = 0;  // read what was sent (up to max_body) so the connection stays usable
          reader([&](const char*, size_t n) { return (drained += n) <= opt.max_body; });
          return send_error(res, unauthorized());
        }
        std::optional<std::string> body = read_body(req, res, reader);
        if (!body) return;
        handle_generation(chat, *body, res, connection_fd(req));
      };
    };
    svr.Post("/v1/chat/completions", generation(true));
    svr.Post("/v1/completions", generation(false));
  }

  // ---- requests ----

  SamplingParams sampling_of(const SamplingOverrides& o) const {
    SamplingParams s = defaults.sampling;
    if (o.temperature) s.temperature = static_cast<float>(*o.temperature);
    if (o.top_p) s.top_p = static_cast<float>(*o.top_p);
    if (o.top_k) s.top_k = *o.top_k;
    if (o.min_p) s.min_p = static_cast<float>(*o.min_p);
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
    if (c.max_tokens && n + *c.max_tokens > ctx)
      return bad_request("prompt (" + std::to_string(n) + " tokens) + max_tokens (" +
                             std::to_string(*c.max_tokens) + ") exceed the context size " +
                             std::to_string(ctx),
                         "context_length_exceeded");
    p->sub.max_tokens = c.max_tokens ? *c.max_tokens : static_cast<int32_t>(ctx - n);
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
    ChatRenderOptions ro;
    ro.add_generation_prompt = true;
    ro.enable_thinking = c.enable_thinking;
    if (c.parse_tools) ro.tools_ordered = c.tools;
    auto rendered = tmpl.render(c.messages, ro);
    if (!rendered.ok()) return bad_request("chat template: " + rendered.error_message());
    p->chat = true;
    p->id = random_id("chatcmpl-");
    p->sub.prompt = tokenize_chat(tok, rendered.value(), &p->sub.boundaries, &p->sub.anchor);
    p->parse_tools = c.parse_tools;
    if (c.parse_tools) p->tools = json::parse(c.tools.dump());
    {  // Did the generation prompt open a reasoning block (Qwen3 with thinking on)?
      std::string_view t = rendered->text;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
      p->think_open = t.size() >= 7 && t.substr(t.size() - 7) == "<think>";
    }
    return finish_plan(c, p);
  }

  std::optional<HttpError> plan_completion(const std::string& body, Plan* p) const {
    auto r = parse_completion_request(body, limits);
    if (!r.ok()) return bad_request(r.error_message());
    const ParsedCompletionRequest& c = r.value();
    p->chat = false;
    p->id = random_id("cmpl-");
    p->sub.prompt = c.has_token_prompt ? c.prompt_tokens : tok.encode(c.prompt_text, true);
    return finish_plan(c, p);
  }

  // conn_fd: the client's socket (-1 unknown), watched while a non-streaming reply runs.
  void handle_generation(bool chat, const std::string& body, httplib::Response& res, int conn_fd) {
    auto plan = std::make_shared<Plan>();
    if (auto e = chat ? plan_chat(body, plan.get()) : plan_completion(body, plan.get()))
      return send_error(res, *e);
    auto q = std::make_shared<EventQueue>();
    Request sub = plan->sub;
    auto id = engine.submit(std::move(sub), [q](const TokenEvent& ev) { q->push(ev); });
    if (!id.ok()) {
      const std::string& m = id.error_message();
      if (m == "queue full")
        return send_error(res, {429, "the server is busy: the request queue is full; retry later",
                                "rate_limit_error", "queue_full"});
      if (m.find("shutting down") != std::string::npos)
        return send_error(res,
                          {503, "the server is shutting down", "server_error", "shutting_down"});
      return send_error(res, bad_request(m));
    }
    ++in_flight;
    if (plan->stream) return stream(plan, q, id.value(), res);  // the releaser decrements
    struct Done {
      std::atomic<int>& n;
      ~Done() { --n; }
    } done{in_flight};
    whole(*plan, *q, id.value(), res, conn_fd);
  }

  void whole(const Plan& plan, EventQueue& q, uint64_t id, httplib::Response& res, int conn_fd) {
    Generation gen(tok, plan.sub.stop_ids, plan);
    std::string text;
    std::vector<TokenLogprob> lps;
    bool client_gone = false;
    auto next_check = std::chrono::steady_clock::now();
    while (!gen.done()) {
      // The client hung up while its whole reply was being generated: free the sequence.
      if (const auto now = std::chrono::steady_clock::now(); !client_gone && now >= next_check) {
        next_check = now + std::chrono::milliseconds(200);
        if (peer_gone(conn_fd)) {
          client_gone = true;
          engine.cancel(id);
        }
      }
      TokenEvent ev;
      if (!q.pop(&ev, std::chrono::milliseconds(200))) continue;
      bool cancel = false;
      Generation::Piece p = gen.on_event(ev, &cancel);
      if (cancel) engine.cancel(id);
      text += p.text;
      for (auto& lp : p.lps) lps.push_back(std::move(lp));
    }
    if (auto e = gen.failure()) return send_error(res, *e);
    metrics.observe_request(gen.ttft_ms(), gen.total_ms());
    json body;
    if (plan.chat) {
      ReasoningSplitter rs(plan.think_open);
      ReasoningSplitter::Out a = rs.push(text), b = rs.finish();
      auto [content, calls] = split_tool_calls(a.content + b.content, plan.parse_tools, plan.tools);
      const std::string finish = calls.empty() ? gen.finish_reason() : "tool_calls";
      body = chat_completion_json(plan.id, plan.created, opt.model_id, content, calls, finish,
                                  plan.logprobs ? chat_logprobs_json(tok, lps) : json(nullptr),
                                  gen.usage(), a.reasoning + b.reasoning);
    } else {
      body = completion_json(plan.id, plan.created, opt.model_id, text, gen.finish_reason(),
                             plan.logprobs
                                 ? completion_logprobs_json(tok, lps, plan.top_logprobs > 0, 0)
                                 : json(nullptr),
                             gen.usage());
    }
    res.set_content(dump_json(body) + "\n", kJson);
  }

  // State of one SSE stream, owned by the content provider.
  struct Stream {
    std::shared_ptr<Plan> plan;
    std::shared_ptr<EventQueue> q;
    uint64_t id = 0;
    std::unique_ptr<Generation> gen;
    ToolCallSplitter tools;
    ReasoningSplitter reasoning;
    bool started = false, finished = false;
    int64_t text_offset = 0;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };

  void stream(std::shared_ptr<Plan> plan, std::shared_ptr<EventQueue> q, uint64_t id,
              httplib::Response& res) {
    auto st = std::make_shared<Stream>();
    st->plan = std::move(plan);
    st->q = std::move(q);
    st->id = id;
    st->gen = std::make_unique<Generation>(tok, st->plan->sub.stop_ids, *st->plan);
    st->tools = ToolCallSplitter(st->plan->tools);
    st->reasoning = ReasoningSplitter(st->plan->think_open);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) { return provide(*st, sink); },
        [this, st](bool) {
          // Runs once the response is over, written or not: a request still running lost its
          // client (or the server stopped), so free its sequence now.
          if (!st->gen->done()) engine.cancel(st->id);
          --in_flight;
        });
  }

  // One call of the chunked content provider: waits briefly for events and writes them.
  // Returning false (or a failed write) ends the response; the releaser then cancels.
  bool provide(Stream& st, httplib::DataSink& sink) {
    const Plan& plan = *st.plan;
    std::string out;
    if (!st.started) {
      st.started = true;
      if (plan.chat)
        out +=
            sse_event(chat_chunk_json(plan.id, plan.created, opt.model_id,
                                      {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
    }
    TokenEvent ev;
    bool got = st.q->pop(&ev, std::chrono::milliseconds(250));
    while (got) {
      bool cancel = false;
      Generation::Piece p = st.gen->on_event(ev, &cancel);
      if (cancel) engine.cancel(st.id);
      out += chunk_for(st, p);
      if (st.gen->done()) break;
      got = st.q->pop(&ev, std::chrono::milliseconds(0));
    }
    if (st.gen->done()) out += final_chunks(st);
    const auto now = std::chrono::steady_clock::now();
    if (out.empty() && now - st.last_write > std::chrono::seconds(1))
      out = ": keep-alive\n\n";  // an SSE comment: lets a dead client show up while we wait
    if (!out.empty()) {
      st.last_write = now;
      if (!sink.write(out.data(), out.size())) {
        engine.cancel(st.id);
        return false;
      }
    }
    if (st.gen->done()) {
      if (!st.gen->failure()) metrics.observe_request(st.gen->ttft_ms(), st.gen->total_ms());
      sink.done();
    }
    return true;
  }

  std::string chunk_for(Stream& st, Generation::Piece& p) {
    const Plan& plan = *st.plan;
    if (plan.chat) {
      const ReasoningSplitter::Out r = st.reasoning.push(p.text);
      return chat_delta(st, r.reasoning, plan.parse_tools ? st.tools.push(r.content) : r.content,
                        p.lps);
    }
    if (p.text.empty() && p.lps.empty()) return {};
    json lp = p.lps.empty()
                  ? json(nullptr)
                  : completion_logprobs_json(tok, p.lps, plan.top_logprobs > 0, st.text_offset);
    for (const auto& l : p.lps)
      st.text_offset += static_cast<int64_t>(tok.token_bytes(l.token).size());
    return sse_event(
        completion_chunk_json(plan.id, plan.created, opt.model_id, p.text, nullptr, lp));
  }

  // One chat chunk with reasoning and/or content (and the token logprobs); "" when empty.
  std::string chat_delta(const Stream& st, const std::string& reasoning, const std::string& content,
                         const std::vector<TokenLogprob>& lps) {
    if (reasoning.empty() && content.empty() && lps.empty()) return {};
    json delta = json::object();
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!content.empty() || reasoning.empty()) delta["content"] = content;
    json lp = lps.empty() ? json(nullptr) : chat_logprobs_json(tok, lps);
    return sse_event(chat_chunk_json(st.plan->id, st.plan->created, opt.model_id, delta, nullptr, lp));
  }

  std::string final_chunks(Stream& st) {
    const Plan& plan = *st.plan;
    std::string out;
    if (auto e = st.gen->failure()) {
      out += sse_event(error_json(e->message, e->type, e->code));
      out += kSseDone;
      return out;
    }
    const UsageCounts u = st.gen->usage();
    if (plan.chat) {
      std::string finish = st.gen->finish_reason();
      const ReasoningSplitter::Out r = st.reasoning.finish();
      out += chat_delta(st, r.reasoning, plan.parse_tools ? st.tools.push(r.content) : r.content, {});
      if (plan.parse_tools) {
        auto [content, calls] = st.tools.finish();
        if (!content.empty())
          out += sse_event(chat_chunk_json(plan.id, plan.created, opt.model_id,
                                           {{"content", content}}, nullptr, nullptr));
        if (!calls.empty()) {
          out += sse_event(chat_chunk_json(plan.id, plan.created, opt.model_id,
                                           {{"tool_calls", tool_calls_json(calls, true)}}, nullptr,
                                           nullptr));
          finish = "tool_calls";
        }
      }
      out += sse_event(
          chat_chunk_json(plan.id, plan.created, opt.model_id, json::object(), finish, nullptr));
      if (plan.include_usage)
        out += sse_event(chat_usage_chunk_json(plan.id, plan.created, opt.model_id, u));
    } else {
      out += sse_event(completion_chunk_json(plan.id, plan.created, opt.model_id, "",
                                             st.gen->finish_reason(), nullptr));
      if (plan.include_usage)
        out += sse_event(completion_usage_chunk_json(plan.id, plan.created, opt.model_id, u));
    }
    out += kSseDone;
    return out;
  }
};

HttpServer::HttpServer(BatchEngine& engine, const Tokenizer& tok, const ChatTemplate& tmpl,
                       GenerationDefaults defaults, ServerOptions opt)
    : impl_(std::make_unique<Impl>(engine, tok, tmpl, std::move(defaults), std::move(opt))) {}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind() {
  Impl& s = *impl_;
  int port = s.opt.port;
  if (port == 0) {
    port = s.svr.bind_to_any_port(s.opt.host);
    if (port < 0) return make_error("cannot bind " + s.opt.host + " on any port");
  } else if (!s.svr.bind_to_port(s.opt.host, port)) {
    return make_error("cannot bind " + s.opt.host + ":" + std::to_string(port) +
                      " (in use, or not an address of this machine?)");
  }
  s.bound_port = port;
  return port;
}

void HttpServer::run() {
  ::signal(SIGPIPE, SIG_IGN);
  if (impl_->stop_requested.load()) return;
  impl_->svr.listen_after_bind();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  s.stop_requested.store(true);
  // cpp-httplib's stop() must run once, and only while it is listening.
  if (s.svr.is_running() && !s.stopped.exchange(true)) s.svr.stop();
}

int HttpServer::in_flight() const {
  return impl_->in_flight.load();
}

}  // namespace rw
