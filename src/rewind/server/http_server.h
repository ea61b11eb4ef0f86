// The OpenAI-compatible HTTP server (docs/DESIGN.md section 6) in front of one BatchEngine per
// served model (ServedModel: a request's "model" picks one), on the HTTP/1.1 transport of
// http_transport.h (Boost.Beast's parser on Boost.Asio). GET /v1/cache, /v1/cache/tree and
// /props answer for the model of `?model=NAME` (the first without one), /tokenize and
// /detokenize for their body's "model"; /metrics labels each model's figures model="ID" when
// several are served.
//
// Routes: POST /v1/chat/completions, POST /v1/completions (stream false: one JSON; stream true:
// server-sent events `data: {...}\n\n` ending with `data: [DONE]`; with n > 1 every choice's
// chunks carry its index, each choice ends with its own finish_reason chunk, and usage, which
// sums the choices' completion tokens, comes once at the end), POST /tokenize and
// POST /detokenize (llama.cpp's shapes: openai_request.h), GET /props (the server's settings,
// llama.cpp's shape where a field applies), GET /v1/models (every name; `root`: the id of the
// model it names),
// GET /v1/cache (prefix-cache figures and the recent requests' resume points; the budget is
// known from start-up), GET /v1/cache/tree?max_nodes=N (the prefix tree, bounded: cache_view.h),
// GET /metrics (Prometheus text), GET /health ({"status":"ok"}, never behind the API key), and
// the web page (web_assets.h: GET / and its /assets/..., never behind the API key; its API
// calls carry the key): ETag with 304 for a current copy, Cache-Control no-cache, and on the
// page a Content-Security-Policy that allows scripts, styles and fetches from this origin only.
// Chat and completion answers' usage carries rewind's figures (openai_response.h, RewindUsage).
// llama-server's spellings without /v1 (/chat/completions, /completions, /models) and its
// /v1/health are the same routes, logged and counted under the route's own path. HEAD on a GET
// route answers as GET without the body. OPTIONS on a route answers 204 with Allow (and the CORS
// preflight headers when the Origin is allowed).
//
// Every failure is a JSON body {"error": {"message", "type", "param", "code"}} whose message is
// ours (no parser or library internals):
//   400 invalid_request_error: malformed JSON, wrong types, missing fields, unsupported
//       features, prompt + max_tokens over the context size, chat template errors; malformed
//       HTTP (request smuggling shapes included: see http_transport.h), then the connection
//       closes; a whole (not streamed) answer whose JSON would pass max_buffered
//       (answer_too_large: every choice ends at once);
//   401 authentication_error: --api-key set and `Authorization: Bearer KEY` missing or wrong
//       (every route but /health and the web page; the scheme is case-insensitive, the key
//       compared in constant time; checked from the header, before the body is used);
//   404 not_found_error: unknown route; 404 invalid_request_error model_not_found: a "model"
//       that no served model has among its names, when names are set or several models are
//       served (OpenAI's shape), and GET /v1/models/{id} for any id /v1/models does not list;
//   405 invalid_request_error: a route with a method it does not answer (with Allow);
//   408 invalid_request_error: the header or body did not arrive within its deadline;
//   413 / 414 / 431 invalid_request_error: body over max_body (from Content-Length before
//       reading), request-target over max_target_bytes, header over max_header_bytes;
//   415 invalid_request_error: a POST whose Content-Type is not application/json (a web page
//       can POST text/plain to a local server without a CORS preflight; this refuses it);
//   429 rate_limit_error: the engine's queue is full (Retry-After: 1);
//   501 invalid_request_error: a transfer coding before chunked, or a method longer than any
//       (not_implemented);
//   503 server_error: shutting down, over the connection caps, or the request bodies and
//       answers held would pass max_buffered (Retry-After: 1);
//   500 server_error: anything else.
// A request is parsed, rendered and tokenized completely before it is submitted, so a bad
// request changes nothing in the engine.
//
// CORS: off (no Access-Control-* headers) unless ServerOptions::cors_origins names the
// request's Origin (or holds "*"); then answers carry Access-Control-Allow-Origin for it and
// preflights get 204 allowing the headers they ask for (plain header names).
//
// Prompts: chat messages are rendered with the model's chat template and tokenized so that
// message starts become checkpoint boundaries (tokenize_chat); a completions prompt is text
// (special tokens such as <|im_start|> are recognised) or token ids. Unset sampling fields take
// the model's defaults (generation_defaults.h); a request without a seed gets a random one;
// max_tokens defaults to the server's -n (GenerationDefaults::max_tokens, also the cap of a
// larger one), else to what is left of the context.
//
// Generation: the engine's token events are handed (on the engine thread, nothing more) to the
// connection's strand, where they go through a StreamDecoder (valid UTF-8), then the stop
// sequences (matched on the decoded text; the stop text is not returned; a match cancels the
// request in the engine at once and reports finish_reason "stop"), then, when tools were given,
// the tool-call splitter (finish_reason "tool_calls"), and are written asynchronously. No
// transport thread ever waits for the engine.
//
// A client that goes away is noticed from its socket (http_transport.h: a reset, a failed or
// stalled write, or a FIN followed by write probes that fail) and its request is cancelled,
// which frees its sequence at the next engine step; this holds for whole replies as for
// streams. An HTTP/1.1 client that only half-closed after sending its request gets its answer
// (an HTTP/1.0 one's end of input cancels a whole reply: http_transport.h).
//
// Shutdown (drain(), then the caller shuts the engine down): stop accepting; connections with
// no request in progress close; running requests go on. When the engine then cancels what is
// left, every open stream ends with the text so far, a final chunk with finish_reason "length"
// (usage when asked) and `data: [DONE]`; a waiting whole request gets 503 shutting_down. The
// engine's own failures end a stream with an error event and `data: [DONE]`.
//
// Access log (ServerOptions::access_log): one line per request when its answer is complete,
// generations with their token counts, time to first token and finish reason; answers the
// transport or the header checks gave (malformed, timeouts, 401, 404, 415) too.
//
// /v1/cache's recent requests carry the id their client saw (chatcmpl-..., cmpl-...).
//
// Metrics: rewind_requests_total{outcome} counts generation requests by how they ended for the
// client: stop, length, tool_calls (finish reasons), cancelled (client gone, or cut by
// shutdown), failed (engine error), rejected (any error answer to a request whose body named
// or defaulted to a served model: a malformed field, a full queue, a shutdown at submit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/memory.h"
#include "rewind/base/result.h"
#include "rewind/server/generation_defaults.h"

namespace rw {

class AccessLog;
class BatchEngine;
class ChatTemplate;
class Tokenizer;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: an ephemeral port (bind() returns it)
  std::vector<std::string> api_keys;      // any of them authorises; none: no authentication
  size_t max_body = 8u << 20;             // bytes of a request body (413)
  size_t max_buffered = 64u << 20;        // bodies + read buffers + answers held (503 beyond)
  AccessLog* access_log = nullptr;        // one line per request (access_log.h); null: none
  int http_threads = 0;                   // transport (io) threads; 0: 2
  std::vector<std::string> cors_origins;  // origins allowed by CORS ("*": any); empty: CORS off
  bool web_page = true;                   // serve the web page at / (--no-webui: 404 there)
  double header_timeout_s = 10;           // the whole request header (408)
  double body_timeout_s = 30;             // the whole body, after the header (408)
  double idle_timeout_s = 5;              // a keep-alive connection between requests
  size_t max_header_bytes = 16384;        // request line + header fields (431)
  size_t max_target_bytes = 8192;         // request-target (414)
  int max_connections = 512;              // open connections in total (503 beyond)
  int max_connections_per_client = 64;    // open connections from one address (503 beyond)
  // The build, reported by GET /props ("rewind VERSION (commit C)").
  std::string build_info;
  // The memory bound's terms the models share (http, fixed: docs/ARCHITECTURE.md, "Memory");
  // each engine's own terms come from BatchEngine::set_memory_bound. /metrics sums both.
  MemoryReport shared_memory_bound;
};

// One model the server serves: its engine, tokenizer (the model's), chat template, sampling
// defaults and names. The pointers must outlive the server.
struct ServedModel {
  BatchEngine* engine = nullptr;
  const Tokenizer* tok = nullptr;
  const ChatTemplate* tmpl = nullptr;
  GenerationDefaults defaults;
  std::string id = "rewind";  // /v1/models id and the "model" of answers when none was asked
  // Names a request's "model" may give (--alias, or NAME=PATH). Routing: with one model and no
  // names, any "model" is accepted and `id` is shown; otherwise a request goes to the model
  // that has its name among its names (`id` when it has none), to the first model when it
  // names none, and any other name gets 404 model_not_found. An answer echoes the name asked
  // for (the first name when none was).
  std::vector<std::string> aliases;
  // Byte cap of the compiled grammars and their cached masks (grammar/grammar_cache.h).
  size_t grammar_cache_bytes = size_t{256} << 20;
  // Reported by GET /props: the model's path and where the chat template came from ("model",
  // "rewind-chatml" when the model has none, "file" or "option": --chat-template-file or
  // --chat-template).
  std::string model_path;
  std::string chat_template_source;
};

class HttpServer {
 public:
  // At least one model; the first is the default. Names must not repeat across models.
  HttpServer(std::vector<ServedModel> models, ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and listens; returns the port (the chosen one when port == 0). Error when
  // the address is already in use (also by another server: the port is never shared) or
  // cannot be bound.
  Result<int> bind();
  // Serves until drain() or stop() and the last connection has closed; blocks.
  void run();
  // Thread-safe, idempotent, also before run(): stops accepting and closes connections with no
  // request in progress; the others close after their answer.
  void drain();
  // Thread-safe: drain() and close every connection now (their requests are cancelled).
  void stop();
  // Requests being served now: generation requests (chat or completions) and the requests still
  // being prepared (parsed, rendered, tokenized). Thread-safe.
  int in_flight() const;
  // Bytes the HTTP layer holds now (read buffers, queued answers); for memory accounting.
  int64_t http_buffer_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rw
