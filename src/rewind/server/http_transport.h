// The HTTP/1.1 transport under the server (Boost.Beast's request parser on Boost.Asio): it owns
// the listening socket and every connection, and hands complete requests to a handler. No
// Beast or Asio type appears here, so only http_transport.cpp pays for compiling them.
//
// Per connection (RFC 9112):
//   - a deadline for the whole request header (header_timeout; 408 and close when a client had
//     begun one, a silent close when it sent nothing), one for the whole body (body_timeout;
//     408 and close) and an idle keep-alive timeout between requests (idle_timeout; silent
//     close);
//   - limits: the header (max_header_bytes: 431, or 414 when the request line alone is over
//     it), the request-target (max_target_bytes: 414), the body (max_body: 413, from
//     Content-Length before reading, or when a chunked body passes it), all closing;
//   - request smuggling: conflicting, repeated-different or invalid Content-Length,
//     Transfer-Encoding together with Content-Length, a Transfer-Encoding whose last coding is
//     not chunked or that applies chunked twice, Transfer-Encoding in HTTP/1.0, a missing or
//     repeated Host in HTTP/1.1, a Host value that is not host[:port], two Authorization or
//     Content-Type fields, a malformed chunk, chunk extension or trailer: 400 and close;
//   - the request line: empty lines before it skipped (up to 64 bytes), a newer HTTP/1.x read
//     as HTTP/1.1, another version 505, a method over 32 bytes 501, the target `*` only with
//     OPTIONS;
//   - pipelining: bytes that arrive while a reply is being produced are kept and the next
//     request is parsed from them once the reply is written (answers keep the request order);
//   - half-close: an HTTP/1.1 client that sends its request and then shuts down its sending
//     side still gets its answer (and any pipelined ones); the connection closes after them
//     (HTTP/1.0: below);
//   - a closing answer (Connection: close, errors that close) is followed by a lingering close:
//     our side shuts down writing and discards what the client still sends for up to
//     linger_timeout, so that its unread request bytes cannot turn into a reset that destroys
//     the answer before the client has read it.
//
// A client that goes away while its reply is being produced is noticed from the socket: a
// pending read that fails (reset), a write that fails, or a write that does not complete
// within write_timeout. A read that returns end-of-stream cannot tell a half-close from a full
// close (TCP delivers the same FIN), so the transport then probes with writes that HTTP allows
// at that point, at 0, 0.25, 1 and 3 s after the FIN: for a streamed reply the handler's
// heartbeat chunk (an SSE comment), for a whole reply whose head is not written yet an interim
// `100 Continue` (RFC 9110 15.2: a client must accept unexpected 1xx; never sent to HTTP/1.0).
// A client that closed entirely answers the first probe with a reset, so the next one fails:
// the exchange's on_gone callback runs. A client that only half-closed reads the probes and
// gets its answer. An HTTP/1.0 whole reply cannot be probed (1.0 has no 1xx), so there the end of
// the client's input is taken as the client gone, as llama-server takes it (else a client could
// send a long request and leave it holding a sequence to its end): a 1.0 client that
// half-closes and waits gets no whole reply (it may stream, or speak HTTP/1.1).
//
// Memory: the transport holds at most max_buffered bytes for request bodies, read buffers and
// queued answers together. A request's body buffer is reserved as its bytes arrive (from 4 KiB,
// doubling up to its Content-Length or max_body, each buffer allocated at exactly its size),
// never in full from a Content-Length, so
// clients that announce large bodies and send nothing hold nothing; it is released once the
// request given to the handler (HttpRequest::body_hold) and its copies are gone. A
// Content-Length that does not fit beside what is held gets 503 (Retry-After) at once (before
// a 100 Continue), a body whose bytes stop fitting gets it then, and the connection closes (the
// rest unread). A body whose request was already answered from its header (401, 404, 415) is
// read and dropped, holding nothing. Answers count as they are queued but are never refused (their
// request was admitted), so they make later bodies wait. A connection's read buffer is at most
// max_header_bytes + 4 KiB; pipelined input beyond it stays in the socket.
//
// HEAD: an answer to a HEAD request is written without its body (Content-Length as for GET).
//
// Connection caps: over max_connections in total or max_connections_per_client from one client
// address, a new connection is answered 503 (Retry-After) and closed; over twice
// max_connections it is closed at once without an answer.
//
// Threads: one io_context on io_threads threads; each connection's work runs on its own strand
// (handlers, HttpExchange calls and timers of one connection never run at once). The handler
// runs on that strand and must not block: it answers later through the HttpExchange, from any
// thread. Shutdown: drain() stops accepting and closes connections that have no request in
// progress; each other connection closes after its answer (which says Connection: close).
// stop() closes everything now. run() returns once no connection is left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // as sent: "GET", "POST", ...
  std::string target;   // the request-target as sent
  std::string path;     // target up to '?'
  int version = 11;     // 10 or 11
  HttpHeaders headers;  // names in lower case, in the order sent
  std::string body;     // empty in the header-only view given to the precheck
  std::string peer;     // the client's address
  bool expect_continue = false;
  // The body's reservation against max_buffered: held while this request or a copy of it
  // lives, so a handler that hands the request to another thread keeps it counted.
  std::shared_ptr<const void> body_hold;
  // The first value of header `name` (lower case); nullptr when absent.
  const std::string* header(std::string_view name) const;
};

struct HttpReply {
  int status = 200;
  std::string content_type;
  std::string body;     // a whole reply's body (ignored by start_stream)
  HttpHeaders headers;  // more headers (never Content-Length, Transfer-Encoding or Connection)
  // start_stream only: bytes that may be sent as a chunk at any point between chunks without
  // changing the stream's meaning (e.g. an SSE comment); used to probe a client that sent a FIN.
  std::string heartbeat;
};

// One request's answer. Thread-safe: every call may come from any thread (the work runs on the
// connection's strand, in call order). After the client has gone, calls do nothing.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void reply(HttpReply r) = 0;              // a whole answer; ends the exchange
  virtual void start_stream(HttpReply head) = 0;    // chunked (HTTP/1.0: until close)
  virtual void send_chunk(std::string data) = 0;    // empty data is ignored
  virtual void end_stream() = 0;                    // ends the exchange
  virtual void post(std::function<void()> fn) = 0;  // runs fn on the connection's strand
  // fn runs once, on the strand, if the client is found gone before the exchange has ended
  // (at once when that is already known); never after the answer has been written.
  virtual void on_gone(std::function<void()> fn) = 0;
};

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: an ephemeral port
  int io_threads = 2;
  int backlog = 0;                      // listen backlog; 0: the system's maximum (SOMAXCONN)
  double header_timeout_s = 10;         // the whole request header, from its first byte awaited
  double body_timeout_s = 30;           // the whole body, from the end of the header
  double idle_timeout_s = 5;            // between requests on a keep-alive connection
  double write_timeout_s = 30;          // one write (a client that stops reading)
  double linger_timeout_s = 2;          // discarding input after a closing answer
  size_t max_header_bytes = 16384;      // request line + header fields (431)
  size_t max_target_bytes = 8192;       // request-target (414)
  size_t max_body = 8u << 20;           // body (413)
  size_t max_buffered = 64u << 20;      // bodies + read buffers + queued answers (503 beyond)
  int max_connections = 512;            // open connections in total
  int max_connections_per_client = 64;  // open connections from one client address
};

// Whether a server could bind host:port now (the same resolution, options and errors as
// HttpTransport::bind), checked and released: `serve` asks before it spends minutes loading
// models. Another process may still take the port before the real bind.
Status check_bindable(const std::string& host, int port);

class HttpTransport {
 public:
  // Called on the connection's strand with a complete request; answers through the exchange.
  using Handler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;
  // Called with the request's header (body empty) before the body is read: an answer here is
  // sent instead of calling the handler (after discarding the body, or before reading it and
  // then closing when the client asked `Expect: 100-continue`).
  using Precheck = std::function<std::optional<HttpReply>(const HttpRequest&)>;
  // Builds the transport's own error answers (400, 408, 413, 414, 417, 431, 503, 505).
  using ErrorReply =
      std::function<HttpReply(int status, const std::string& message, const std::string& code)>;
  // Every answer written (or begun, for streams).
  struct Answer {
    const std::string& method;  // "" when no request line was parsed
    const std::string& path;    // likewise
    const std::string& peer;    // the client's address
    int status;
    bool from_handler;  // given through the HttpExchange; else the precheck's or the transport's
  };
  using Observer = std::function<void(const Answer&)>;

  HttpTransport(TransportOptions opt, Handler handler, Precheck precheck, ErrorReply error,
                Observer observer);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port. Error when the address is in use (no SO_REUSEPORT:
  // a second server cannot share a port) or is not this machine's.
  Result<int> bind();
  // Serves until drain() or stop() and every connection has closed; blocks.
  void run();
  // Thread-safe, idempotent; also before run() (run() then returns at once).
  void drain();
  void stop();
  // Open connections now. Thread-safe.
  int connections() const;
  // Bytes the transport holds for connections now: read buffers (including pipelined requests),
  // the reservations of bodies being read or handled, and answers queued for writing.
  // Thread-safe; the figure TransportOptions::max_buffered limits.
  int64_t buffered_bytes() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace rw
