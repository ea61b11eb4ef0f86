// The OpenAI-compatible HTTP server (docs/DESIGN.md section 6) on cpp-httplib, in front of one
// BatchEngine.
//
// Routes: POST /v1/chat/completions, POST /v1/completions (stream false: one JSON; stream true:
// server-sent events `data: {...}\n\n` ending with `data: [DONE]`), GET /v1/models,
// GET /v1/cache (prefix-cache figures and the recent requests' resume points), GET /metrics
// (Prometheus text), GET /health ({"status":"ok"}, never behind the API key).
//
// Every failure is a JSON body {"error": {"message", "type", "param", "code"}}:
//   400 malformed JSON, wrong types, missing fields, unsupported features, prompt + max_tokens
//       over the context size, chat template errors;
//   401 --api-key set and the `Authorization: Bearer KEY` header missing or wrong (/v1/* and
//       /metrics; checked before the body is used);
//   404 unknown route; 413 body over max_body (refused from Content-Length before reading when
//       the client sent one; a chunked body is cut off at the limit);
//   429 the engine's queue is full; 503 the server is shutting down; 500 anything else.
// A request is parsed, rendered and tokenized completely before it is submitted, so a bad
// request changes nothing in the engine.
//
// Prompts: chat messages are rendered with the model's chat template and tokenized so that
// message starts become checkpoint boundaries (tokenize_chat); a completions prompt is text
// (special tokens such as <|im_start|> are recognised) or token ids. Unset sampling fields take
// the model's defaults (generation_defaults.h); a request without a seed gets a random one;
// max_tokens defaults to what is left of the context.
//
// Generation: the engine's token events go through a StreamDecoder (valid UTF-8), then the
// stop sequences (matched on the decoded text; the stop text is not returned; a match cancels
// the request in the engine at once and reports finish_reason "stop"), then, when tools were
// given, the tool-call splitter (finish_reason "tool_calls"). A streaming client that goes
// away is noticed when a write fails (or the socket stops accepting data for the write
// timeout, 5 s) and its request is cancelled, which frees its sequence at the next engine
// step. A non-streaming request runs to its end even if its client left (cpp-httplib 0.11
// gives no way to notice), bounded by max_tokens.
//
// Threads: cpp-httplib serves each connection on a thread of its own pool (sized by
// ServerOptions::http_threads); handlers block on their request's events. The engine's
// callbacks only append to a per-request queue under a mutex. SIGPIPE is ignored process-wide
// once run() starts (writes to closed sockets must fail, not kill the process).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "rewind/base/result.h"
#include "rewind/server/generation_defaults.h"

namespace rw {

class BatchEngine;
class ChatTemplate;
class Tokenizer;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: an ephemeral port (bind() returns it)
  std::string api_key;              // empty: no authentication
  size_t max_body = 8u << 20;       // bytes of a request body
  std::string model_id = "rewind";  // /v1/models id and the "model" of every response
  int http_threads = 0;             // 0: the engine's max_running + max_queued + 8
};

class HttpServer {
 public:
  // `engine`, `tok` and `tmpl` must outlive the server. `tok` must be the model's tokenizer.
  HttpServer(BatchEngine& engine, const Tokenizer& tok, const ChatTemplate& tmpl,
             GenerationDefaults defaults, ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port (the chosen one when port == 0). Error when the address
  // cannot be bound.
  Result<int> bind();
  // Serves until stop(); blocks. Returns once every connection's handler has returned (streams
  // end at stop(); a non-streaming request waits for its engine request to end).
  void run();
  // Thread-safe, idempotent: stops accepting and makes run() return as described. Before run()
  // it makes run() return at once; a call that races with run() starting to listen can be
  // missed, so a caller that cannot order them calls it again until run() has returned.
  void stop();
  // Generation requests (chat or completions) being served now. Thread-safe.
  int in_flight() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rw
