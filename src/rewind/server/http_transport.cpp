#include "rewind/server/http_transport.h"

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "rewind/server/http_framing.h"

namespace rw {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

namespace {

std::chrono::steady_clock::duration secs(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && lower(a) == lower(b);
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::string reason(int status) {
  switch (status) {
    case 413:
      return "Content Too Large";  // RFC 9110's name
    default: {
      const auto r = http::obsolete_reason(static_cast<http::status>(status));
      return r.empty() ? "Unknown" : std::string(r);
    }
  }
}

// Our words for the parser's errors (the client sees these; no library names).
std::string parse_error_message(const error_code& ec) {
  if (ec == http::error::bad_content_length) return "invalid or conflicting Content-Length";
  if (ec == http::error::multiple_content_length) return "conflicting Content-Length headers";
  if (ec == http::error::bad_transfer_encoding)
    return "invalid Transfer-Encoding (repeated, or together with Content-Length)";
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension)
    return "malformed chunked body";
  if (ec == http::error::bad_method) return "malformed request method";
  if (ec == http::error::bad_target) return "malformed request target";
  if (ec == http::error::bad_version) return "malformed HTTP version";
  if (ec == http::error::bad_field || ec == http::error::bad_value) return "malformed header field";
  if (ec == http::error::bad_obs_fold) return "obsolete header line folding is not accepted";
  if (ec == http::error::bad_line_ending) return "malformed line ending";
  return "malformed HTTP request";
}

struct Counter {
  std::atomic<int64_t>& n;
  int64_t held = 0;
  void set(int64_t v) {
    n += v - held;
    held = v;
  }
  // Moves what is held to v when the total stays within cap (a body's growing reservation).
  bool try_grow(int64_t v, int64_t cap) {
    int64_t cur = n.load();
    do {
      if (cur + (v - held) > cap) return false;
    } while (!n.compare_exchange_weak(cur, cur + (v - held)));
    held = v;
    return true;
  }
  // What is held, handed to a token that gives it back when the last copy goes.
  std::shared_ptr<const void> hand_over() {
    const int64_t v = held;
    held = 0;
    return std::shared_ptr<const void>(nullptr, [&total = n, v](const void*) { total -= v; });
  }
  ~Counter() { n -= held; }
};

// A request body whose buffer is reserved against the transport's memory cap as its bytes
// arrive, never ahead of them beyond kBodyStep or its own size: a Content-Length alone (or a
// chunked header) holds nothing, so idle clients that announce large bodies cannot take the
// cap. The buffer doubles from kBodyStep up to the Content-Length (chunked: up to `max`, the
// body limit), each time into a new allocation of exactly that size; `grow(to)` asks for the
// room (false: none, the read fails). The old buffer lives on only while it is copied (at most
// half the new one, for microseconds). A body the server has already answered (`discard`) is
// read and dropped.
constexpr size_t kBodyStep = 4096;
struct BudgetedBody {
  struct value_type {
    std::string data;
    std::function<bool(size_t)> grow;
    size_t max = std::numeric_limits<size_t>::max();
    bool discard = false;
  };
  static std::uint64_t size(const value_type& b) { return b.data.size(); }
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& b) : b_(b) {}
    void init(const boost::optional<std::uint64_t>& length, error_code& ec) {
      ec = {};
      limit_ = length ? static_cast<size_t>(*length) : b_.max;
    }
    template <class Buffers>
    size_t put(const Buffers& buffers, error_code& ec) {
      ec = {};
      const size_t n = asio::buffer_size(buffers), at = b_.data.size();
      if (b_.discard) return n;
      const size_t cap = at == 0 ? 0 : b_.data.capacity();
      if (at + n > cap) {
        const size_t to = std::max(at + n, std::min(limit_, std::max(2 * cap, kBodyStep)));
        if (!b_.grow || !b_.grow(to)) {
          ec = http::error::buffer_overflow;  // the session knows it refused (body_refused_)
          return 0;
        }
        std::string fresh;
        fresh.reserve(to);  // from empty: exactly `to` (libstdc++ grows a used buffer 2x)
        fresh.append(b_.data);
        b_.data.swap(fresh);
      }
      b_.data.resize(at + n);
      asio::buffer_copy(asio::buffer(b_.data.data() + at, n), buffers);
      return n;
    }
    void finish(error_code& ec) { ec = {}; }

   private:
    value_type& b_;
    size_t limit_ = 0;  // the Content-Length, or the body limit
  };
};

// Bytes read from a socket at once beyond a full header: a connection's read buffer holds at
// most max_header_bytes + this (pipelined input beyond it waits in the socket).
constexpr size_t kReadSlack = 4096;

// Adds Retry-After: 1 unless the answer has one.
void add_retry_after(HttpReply& r) {
  for (const auto& [k, v] : r.headers)
    if (iequals(k, "retry-after")) return;
  r.headers.push_back({"Retry-After", "1"});
}

}  // namespace

class Session;

struct HttpTransport::Impl : std::enable_shared_from_this<HttpTransport::Impl> {
  TransportOptions opt;
  Handler handler;
  Precheck precheck;
  ErrorReply error;
  Observer observer;
  asio::io_context ioc;
  tcp::acceptor acceptor{asio::make_strand(ioc)};
  std::atomic<bool> draining{false}, stopping{false};
  std::atomic<int64_t> buffered{0};

  mutable std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // guarded by mu
  std::map<std::string, int> per_client;                          // guarded by mu
  int open = 0;                                                   // guarded by mu

  std::mutex run_mu;
  std::condition_variable run_cv;
  bool running = false, ran = false;
  std::thread stopper;

  void accept();
  void close_all(bool force);
};

// One connection.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<HttpTransport::Impl> t, tcp::socket sock, std::string peer, bool reject)
      : t_(std::move(t)),
        sock_(std::move(sock)),
        timer_(sock_.get_executor()),
        write_timer_(sock_.get_executor()),
        probe_timer_(sock_.get_executor()),
        peer_(std::move(peer)),
        reject_(reject),
        read_bytes_{t_->buffered},
        write_bytes_{t_->buffered},
        body_bytes_{t_->buffered},
        buf_(t_->opt.max_header_bytes + kReadSlack) {}

  ~Session() { unregister(); }

  void start() {
    asio::dispatch(sock_.get_executor(), [self = shared_from_this()] {
      if (self->reject_) {
        self->keep_alive_ = false;
        HttpReply r =
            self->t_->error(503, "too many connections; retry later", "too_many_connections");
        add_retry_after(r);
        self->send_reply(std::move(r), /*ends=*/true);
        return;
      }
      self->read_request(/*first=*/true);
    });
  }

  // Shutdown: drain closes a connection with no request in progress; force closes any.
  void shut(bool force) {
    asio::dispatch(sock_.get_executor(), [self = shared_from_this(), force] {
      if (force && self->phase_ == Phase::Busy) return self->gone();  // cancels its work
      if (force || self->phase_ == Phase::Idle || self->phase_ == Phase::Head) self->close();
    });
  }

  // ---- the exchange's side (all on the strand) ----
  void ex_reply(uint64_t ex, HttpReply r) {
    if (ex != ex_id_ || phase_ != Phase::Busy || streaming_) return;
    send_reply(std::move(r), true, /*from_handler=*/true);
  }
  void ex_start_stream(uint64_t ex, HttpReply h) {
    if (ex != ex_id_ || phase_ != Phase::Busy || streaming_ || head_written_) return;
    streaming_ = true;
    head_written_ = true;
    heartbeat_ = std::move(h.heartbeat);
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    std::string head = status_line(h.status) + "Content-Type: " + h.content_type + "\r\n";
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    head += connection_header();
    for (const auto& [k, v] : h.headers) head += k + ": " + v + "\r\n";
    head += "\r\n";
    if (t_->observer) t_->observer({method_, path_, peer_, h.status, true});
    enqueue(std::move(head));
  }
  void ex_chunk(uint64_t ex, std::string data) {
    if (ex != ex_id_ || phase_ != Phase::Busy || !streaming_ || data.empty() || head_only_) return;
    enqueue(chunked_ ? chunk(data) : std::move(data));  // HTTP/1.0: the close ends the body
  }
  void ex_end(uint64_t ex) {
    if (ex != ex_id_ || phase_ != Phase::Busy || !streaming_) return;
    if (chunked_ && !head_only_) enqueue("0\r\n\r\n");
    ending_ = true;
    if (!writing_) after_reply();
  }
  void ex_on_gone(uint64_t ex, std::function<void()> fn) {
    if (ex != ex_id_ || phase_ != Phase::Busy) {
      if (ex == ex_id_ && phase_ == Phase::Closed && gone_) fn();
      return;
    }
    if (gone_) return fn();
    on_gone_ = std::move(fn);
  }
  asio::any_io_executor executor() { return sock_.get_executor(); }

 private:
  enum class Phase { Idle, Head, Body, Busy, Linger, Closed };

  // ---- reading requests ----

  void read_request(bool first) {
    if (t_->draining.load()) return close();
    phase_ = Phase::Idle;
    if (peer_eof_ && buf_.size() == 0) return close();
    blank_bytes_ = 0;
    if (first || buf_.size() > 0) return start_head();
    // Keep-alive: wait (idle timeout) for the next request's first byte.
    arm(t_->opt.idle_timeout_s);
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      if (self->phase_ != Phase::Idle) return;
      if (ec) return self->close();
      self->start_head();
    });
  }

  // RFC 9112 2.2: empty lines (CRLF or LF) before a request line are ignored (a client may send
  // a CRLF after a body). Called when the parser failed on the first byte of the method, so the
  // buffer still starts where the request does; consumes those lines, at most kMaxBlankBytes
  // between two requests; true when there were some.
  // A CR alone at the end of the buffer may be an empty line whose LF has not arrived: then the
  // parse restarts once more bytes are read (Beast refuses a lone CR at once).
  static constexpr size_t kMaxBlankBytes = 64;
  bool skip_blank_lines() {
    const std::string_view s(static_cast<const char*>(buf_.data().data()), buf_.size());
    const size_t n = http_framing::leading_empty_lines(s);
    const bool cr_last = s.size() == n + 1 && s.back() == '\r';
    if ((n == 0 && !cr_last) || blank_bytes_ + n + (cr_last ? 1 : 0) > kMaxBlankBytes) return false;
    blank_bytes_ += n;
    buf_.consume(n);
    if (!cr_last) {
      start_head(false);
    } else {
      sock_.async_read_some(buf_.prepare(std::min<size_t>(512, buf_.max_size() - buf_.size())),
                            [self = shared_from_this()](error_code ec, size_t k) {
                              if (self->phase_ != Phase::Head) return;
                              if (ec) return self->on_head(ec);
                              self->buf_.commit(k);
                              self->start_head(false);
                            });
    }
    return true;
  }

  // The buffered request line's version (http_framing::request_line_version); a 1.x newer than
  // 1.1 is rewritten to 1.1 in the buffer, as RFC 9110 2.5 asks (a recipient processes a newer
  // minor version as its own highest).
  int request_line_version() {
    auto* p = static_cast<char*>(buf_.data().data());
    size_t minor_at = 0;
    const int v = http_framing::request_line_version(std::string_view(p, buf_.size()), &minor_at);
    if (v / 10 == 1 && v % 10 > 1) p[minor_at] = '1';
    return v;
  }

  void start_head(bool arm_deadline = true) {
    phase_ = Phase::Head;
    method_.clear();
    path_.clear();
    timed_out_ = false;
    head_only_ = false;
    parser_.emplace();
    // The body's buffer is reserved as its bytes arrive (BudgetedBody): past max_buffered, 503
    // and close instead of growing memory.
    body_refused_ = false;
    parser_->get().body().max = t_->opt.max_body;
    parser_->get().body().grow = [this](size_t to) {
      if (phase_ != Phase::Closed &&
          body_bytes_.try_grow(static_cast<int64_t>(to),
                               static_cast<int64_t>(t_->opt.max_buffered)))
        return true;
      body_refused_ = true;
      return false;
    };
    parser_->header_limit(static_cast<uint32_t>(t_->opt.max_header_bytes));
    parser_->body_limit(t_->opt.max_body);
    if (arm_deadline) arm(t_->opt.header_timeout_s);
    http::async_read_header(
        sock_, buf_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(error_code ec) {
    if (phase_ != Phase::Head) return;
    read_bytes_.set(static_cast<int64_t>(buf_.capacity()));
    if (ec) {
      if (timed_out_) {
        if (!parser_->got_some() && buf_.size() == 0) return close();  // sent nothing
        return fail(
            408, "the request header did not arrive within " + num(t_->opt.header_timeout_s) + " s",
            "request_timeout");
      }
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        // 414 when the request line alone did not fit (the parser had no target yet) or its
        // target is too long, else 431.
        const size_t target = parser_->get().target().size();
        if (target == 0 && http_framing::method_too_long(std::string_view(
                               static_cast<const char*>(buf_.data().data()), buf_.size())))
          return fail(501, "the method is longer than any this server implements",
                      "not_implemented");
        if (target == 0 || target > t_->opt.max_target_bytes)
          return fail(414,
                      "the request target is longer than " +
                          std::to_string(t_->opt.max_target_bytes) + " bytes",
                      "uri_too_long");
        return fail(431,
                    "the request header is larger than " +
                        std::to_string(t_->opt.max_header_bytes) + " bytes",
                    "request_header_fields_too_large");
      }
      if (ec == http::error::body_limit) {  // a Content-Length past the limit: the head is read
        if (!parser_->get().target().empty()) {  // the request line was read
          method_ = std::string(parser_->get().method_string());
          path_ = std::string(parser_->get().target());
          path_ = path_.substr(0, path_.find('?'));
        }
        return too_large();
      }
      if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
          ec == asio::error::eof ||
          &ec.category() != &http::make_error_code(http::error::end_of_stream).category() ||
          t_->stopping.load())
        return close();  // the client left (or the socket broke) before a whole header
      // A restart keeps the deadline armed at the request's first byte.
      if (ec == http::error::bad_method && parser_->get().method_string().empty() &&
          skip_blank_lines())
        return;
      if (ec == http::error::bad_version) {
        const int v = request_line_version();
        if (v / 10 == 1 && v % 10 > 1) return start_head(false);  // rewritten to HTTP/1.1
        if (v >= 0 && v / 10 != 1)
          return fail(505, "only HTTP/1.0 and HTTP/1.1 are served", "http_version_not_supported");
      }
      return fail(400, parse_error_message(ec), "malformed_request");
    }
    const auto& m = parser_->get();
    version_ = m.version();
    HttpRequest head;
    head.method = std::string(m.method_string());
    // The absolute form (RFC 9112 3.2.2), which a server must accept, read as its origin form.
    head.target = http_framing::origin_form(m.target());
    head.path = head.target.substr(0, head.target.find('?'));
    head.version = version_ >= 11 ? 11 : 10;
    head.peer = peer_;
    path_ = head.path;
    method_ = head.method;
    head_only_ = head.method == "HEAD";
    int hosts = 0, auths = 0, types = 0;
    bool bad_host = false;
    std::string te;  // every Transfer-Encoding field, joined as one list (RFC 9110 5.3)
    bool has_te = false;
    for (const auto& f : m) {
      head.headers.emplace_back(lower(f.name_string()), std::string(f.value()));
      const std::string& name = head.headers.back().first;
      if (name == "host") {
        ++hosts;
        bad_host = bad_host || !http_framing::valid_host(head.headers.back().second);
      }
      auths += name == "authorization";
      types += name == "content-type";
      if (head.headers.back().first == "transfer-encoding") {
        te += (has_te ? ", " : "") + head.headers.back().second;
        has_te = true;
      }
    }
    keep_alive_ = m.keep_alive();
    if (version_ != 10 && version_ != 11)
      return fail(505, "only HTTP/1.0 and HTTP/1.1 are served", "http_version_not_supported");
    if (head.method.size() > http_framing::kMaxMethodBytes)
      return fail(501, "the method is longer than any this server implements", "not_implemented");
    if (head.target.size() > t_->opt.max_target_bytes)
      return fail(414,
                  "the request target is longer than " + std::to_string(t_->opt.max_target_bytes) +
                      " bytes",
                  "uri_too_long");
    if (has_te) {
      if (version_ < 11)
        return fail(400, "Transfer-Encoding in an HTTP/1.0 request", "malformed_request");
      const http_framing::TransferEncoding c = http_framing::check_transfer_encoding(te);
      if (c.status != 0)
        return fail(c.status, c.message, c.status == 501 ? "not_implemented" : "malformed_request");
      if (!parser_->chunked())
        return fail(400, "unsupported Transfer-Encoding (the last coding must be chunked)",
                    "malformed_request");
    }
    // The asterisk form is only for a server-wide OPTIONS (RFC 9112 3.2.4).
    if (head.target == "*" && head.method != "OPTIONS")
      return fail(400, "the request target '*' is only for OPTIONS", "malformed_request");
    if (version_ >= 11 && hosts != 1)
      return fail(400, hosts ? "more than one Host header" : "missing Host header",
                  "malformed_request");
    if (bad_host) return fail(400, "the Host header is not a valid host", "malformed_request");
    // Fields that hold one value: two of them leave the request ambiguous (RFC 9110 5.3), and
    // which credentials or media type counts must not depend on a proxy's choice.
    if (auths > 1) return fail(400, "more than one Authorization header", "malformed_request");
    if (types > 1) return fail(400, "more than one Content-Type header", "malformed_request");
    if (const std::string* e = head.header("expect")) {
      if (!iequals(trim(*e), "100-continue"))
        return fail(417, "unsupported Expect header", "expectation_failed");
      head.expect_continue = version_ >= 11;
    }
    // A body whose announced length does not fit beside what is held now is refused before
    // any of it is read (before a 100 Continue); nothing is reserved for it yet.
    if (const auto len = parser_->content_length();
        len && static_cast<int64_t>(*len) >
                   static_cast<int64_t>(t_->opt.max_buffered) - body_bytes_.n.load())
      return server_busy();
    pending_.reset();
    if (t_->precheck) pending_ = t_->precheck(head);
    // Answered already (401, 404, 415...): the body is read and dropped, holding no room.
    if (pending_) parser_->get().body().discard = true;
    if (pending_ && head.expect_continue && !parser_->is_done()) {
      // The client waits before sending the body: answer now and close.
      keep_alive_ = false;
      HttpReply r = std::move(*pending_);
      pending_.reset();
      parser_.reset();
      body_bytes_.set(0);
      phase_ = Phase::Busy;
      return send_reply(std::move(r), true);
    }
    request_ = std::move(head);
    if (parser_->is_done()) return on_body({});
    if (request_.expect_continue) {
      phase_ = Phase::Body;
      arm(t_->opt.body_timeout_s);
      continue_buf_ = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(sock_, asio::buffer(continue_buf_),
                        [self = shared_from_this()](error_code ec, size_t) {
                          if (self->phase_ != Phase::Body) return;
                          if (ec) return self->close();
                          self->read_body();
                        });
      return;
    }
    phase_ = Phase::Body;
    arm(t_->opt.body_timeout_s);
    read_body();
  }

  void read_body() {
    http::async_read(sock_, buf_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (phase_ != Phase::Head && phase_ != Phase::Body) return;
    if (ec) {
      if (timed_out_)
        return fail(408,
                    "the request body did not arrive within " + num(t_->opt.body_timeout_s) + " s",
                    "request_timeout");
      if (ec == http::error::body_limit) return too_large();
      if (body_refused_) return server_busy();
      // A parser error (a malformed chunk, extension or trailer) is the client's: 400. The end
      // of the stream before the body's end, or a broken socket: the client left.
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
        return fail(400, "a chunk line or trailer of the body is too long", "malformed_request");
      if (&ec.category() == &http::make_error_code(http::error::end_of_stream).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message)
        return fail(400, parse_error_message(ec), "malformed_request");
      return close();
    }
    disarm();
    phase_ = Phase::Busy;
    streaming_ = head_written_ = ending_ = false;
    ++ex_id_;
    read_bytes_.set(static_cast<int64_t>(buf_.capacity()));
    if (pending_) {
      HttpReply r = std::move(*pending_);
      pending_.reset();
      parser_.reset();
      body_bytes_.set(0);
      return send_reply(std::move(r), true);
    }
    request_.body = std::move(parser_->get().body().data);
    request_.body_hold = body_bytes_.hand_over();  // the reservation ends with the request
    parser_.reset();
    watch();
    t_->handler(std::move(request_), make_exchange());
  }

  std::shared_ptr<HttpExchange> make_exchange();

  // ---- while a reply is produced: pipelined bytes, FIN, reset ----

  void watch() {
    if (watching_ || peer_eof_ || phase_ != Phase::Busy) return;
    // Backpressure: pipelined input beyond the read buffer's limit waits in the socket.
    if (buf_.size() + rbuf_.size() > buf_.max_size()) return;
    watching_ = true;
    sock_.async_read_some(asio::buffer(rbuf_),
                          [self = shared_from_this()](error_code ec, size_t n) {
                            self->watching_ = false;
                            if (n > 0) {
                              auto mb = self->buf_.prepare(n);
                              asio::buffer_copy(mb, asio::buffer(self->rbuf_.data(), n));
                              self->buf_.commit(n);
                              self->read_bytes_.set(static_cast<int64_t>(self->buf_.capacity()));
                            }
                            if (self->phase_ == Phase::Closed) return;
                            if (ec == asio::error::eof) {
                              self->peer_eof_ = true;
                              if (self->phase_ == Phase::Busy) self->probe(0);
                            } else if (ec && ec != asio::error::operation_aborted) {
                              if (self->phase_ == Phase::Busy) return self->gone();
                              return self->close();
                            }
                            if (self->phase_ == Phase::Busy) return self->watch();
                            if (self->phase_ == Phase::Idle && self->after_reply_pending_) {
                              self->after_reply_pending_ = false;
                              self->next_request();
                            }
                          });
  }

  // The n-th write probe after a FIN (see the header comment).
  void probe(int n) {
    static constexpr double kAt[] = {0, 0.25, 1, 3};
    if (n >= 4 || phase_ != Phase::Busy) return;
    const bool can = streaming_ ? !heartbeat_.empty() : (!head_written_ && version_ >= 11);
    // HTTP/1.0 has no interim answer to probe a whole reply with: its end of input is taken as
    // the client gone, as llama-server takes it (http_transport.h, the half-close rule).
    if (!can && !streaming_ && !head_written_ && version_ < 11 && peer_eof_) return gone();
    if (!can) return;
    probe_timer_.expires_after(secs(n == 0 ? 0 : kAt[n] - kAt[n - 1]));
    probe_timer_.async_wait([self = shared_from_this(), n](error_code ec) {
      if (ec || self->phase_ != Phase::Busy) return;
      if (self->streaming_)
        self->enqueue(self->chunked_ ? self->chunk(self->heartbeat_) : self->heartbeat_);
      else if (!self->head_written_)
        self->enqueue("HTTP/1.1 100 Continue\r\n\r\n");
      self->probe(n + 1);
    });
  }

  void gone() {
    if (gone_) return;
    gone_ = true;
    auto fn = std::move(on_gone_);
    on_gone_ = nullptr;
    close();
    if (fn) fn();
  }

  // ---- writing ----

  std::string status_line(int status) const {
    return (version_ >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ") + std::to_string(status) + " " +
           reason(status) + "\r\n";
  }
  std::string connection_header() {
    if (t_->draining.load()) keep_alive_ = false;
    if (!keep_alive_) return "Connection: close\r\n";
    return version_ < 11 ? "Connection: keep-alive\r\n" : "";
  }
  std::string chunk(const std::string& data) const {
    char hex[20];
    std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
    return hex + data + "\r\n";
  }

  void send_reply(HttpReply r, bool ends, bool from_handler = false) {
    head_written_ = true;
    std::string out = status_line(r.status);
    if (!r.content_type.empty()) out += "Content-Type: " + r.content_type + "\r\n";
    // 304 has no content and must not announce a length other than the full answer's, and 204
    // must not carry the field at all (RFC 9110 8.6): none is sent for either.
    if (r.status != 304 && r.status != 204)
      out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    out += connection_header();
    for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
    out += "\r\n";
    if (!head_only_) out += r.body;  // HEAD: GET's head, Content-Length included, no body
    if (t_->observer) t_->observer({method_, path_, peer_, r.status, from_handler});
    ending_ = ends;
    if (phase_ != Phase::Busy) phase_ = Phase::Busy;
    enqueue(std::move(out));
  }

  void enqueue(std::string s) {
    if (phase_ == Phase::Closed) return;
    outq_ += s;
    write_bytes_.set(static_cast<int64_t>(outq_.size() + writing_buf_.size()));
    if (!writing_) write_next();
  }

  void write_next() {
    if (outq_.empty()) {
      writing_ = false;
      write_bytes_.set(0);
      if (ending_ && phase_ == Phase::Busy) after_reply();
      return;
    }
    writing_ = true;
    writing_buf_ = std::move(outq_);
    outq_.clear();
    write_timer_.expires_after(secs(t_->opt.write_timeout_s));
    write_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && self->writing_) self->gone();  // the client stopped reading
    });
    asio::async_write(sock_, asio::buffer(writing_buf_),
                      [self = shared_from_this()](error_code ec, size_t) {
                        self->write_timer_.cancel();
                        self->writing_buf_.clear();
                        if (self->phase_ == Phase::Closed) return;
                        if (ec) {
                          if (self->phase_ == Phase::Busy) return self->gone();
                          return self->close();
                        }
                        self->write_next();
                      });
  }

  // The answer has been written.
  void after_reply() {
    on_gone_ = nullptr;
    ending_ = false;
    ++ex_id_;  // the exchange is over: its later calls do nothing
    probe_timer_.cancel();
    phase_ = Phase::Idle;
    if (watching_) {  // let the pending read finish first (it may hold a pipelined request)
      after_reply_pending_ = true;
      error_code ec;
      sock_.cancel(ec);
      return;
    }
    next_request();
  }

  void next_request() {
    if (!keep_alive_ || t_->draining.load()) return linger();
    read_request(false);
  }

  // An error answer that closes the connection.
  void fail(int status, const std::string& message, const std::string& code) {
    keep_alive_ = false;
    phase_ = Phase::Busy;
    ++ex_id_;
    parser_.reset();
    body_bytes_.set(0);
    HttpReply r = t_->error(status, message, code);
    if (status == 503) add_retry_after(r);
    send_reply(std::move(r), true);
  }
  void server_busy() {
    fail(503, "the server holds too many request bodies and answers; retry later", "server_busy");
  }
  void too_large() {
    fail(413, "request body is larger than " + std::to_string(t_->opt.max_body) + " bytes",
         "request_too_large");
  }

  // Lingering close (see the header comment).
  void linger() {
    if (phase_ == Phase::Closed) return;
    phase_ = Phase::Linger;
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec || peer_eof_) return close();
    arm(t_->opt.linger_timeout_s);
    discard();
  }
  void discard() {
    sock_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](error_code ec, size_t) {
      if (self->phase_ != Phase::Linger) return;
      if (ec) return self->close();
      self->discard();
    });
  }

  // ---- timers ----

  void arm(double seconds) {
    timer_.expires_after(secs(seconds));
    timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_](error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      self->on_timeout();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }
  void on_timeout() {
    switch (phase_) {
      case Phase::Idle:
      case Phase::Linger:
        return close();
      case Phase::Head:
      case Phase::Body: {
        timed_out_ = true;
        error_code ec;
        sock_.cancel(ec);
        return;
      }
      default:
        return;
    }
  }

  void close() {
    if (phase_ == Phase::Closed) return;
    phase_ = Phase::Closed;
    on_gone_ = nullptr;
    disarm();
    write_timer_.cancel();
    probe_timer_.cancel();
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    outq_.clear();
    buf_.clear();
    buf_.shrink_to_fit();
    // parser_ stays: a read completing after the close still writes into it (the session,
    // which a pending read keeps alive, frees it).
    read_bytes_.set(0);
    write_bytes_.set(0);
    body_bytes_.set(0);
    unregister();
  }

  void unregister() {
    if (unregistered_) return;
    unregistered_ = true;
    std::lock_guard<std::mutex> lock(t_->mu);
    t_->sessions.erase(this);
    if (!reject_) {
      if (--t_->per_client[peer_] <= 0) t_->per_client.erase(peer_);
      --t_->open;
    }
  }

  static std::string num(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    return b;
  }

  std::shared_ptr<HttpTransport::Impl> t_;
  tcp::socket sock_;
  asio::steady_timer timer_, write_timer_, probe_timer_;
  std::string peer_;
  bool reject_ = false;
  Counter read_bytes_, write_bytes_, body_bytes_;
  bool body_refused_ = false;  // the body's buffer found no room under max_buffered

  Phase phase_ = Phase::Idle;
  uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  beast::flat_buffer buf_;
  size_t blank_bytes_ = 0;  // empty lines skipped before this request's line
  std::optional<http::request_parser<BudgetedBody>> parser_;
  std::array<char, 4096> rbuf_{};
  HttpRequest request_;
  std::optional<HttpReply> pending_;
  std::string method_, path_, continue_buf_;
  unsigned version_ = 11;
  bool keep_alive_ = true, head_only_ = false;

  uint64_t ex_id_ = 0;
  bool streaming_ = false, chunked_ = false, head_written_ = false, ending_ = false;
  std::string heartbeat_;
  std::function<void()> on_gone_;
  bool watching_ = false, after_reply_pending_ = false, peer_eof_ = false, gone_ = false;

  std::string outq_, writing_buf_;
  bool writing_ = false;
  bool unregistered_ = false;
};

namespace {

class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session> s, uint64_t id) : s_(std::move(s)), id_(id) {}
  void reply(HttpReply r) override {
    run([s = s_, id = id_, r = std::move(r)]() mutable { s->ex_reply(id, std::move(r)); });
  }
  void start_stream(HttpReply h) override {
    run([s = s_, id = id_, h = std::move(h)]() mutable { s->ex_start_stream(id, std::move(h)); });
  }
  void send_chunk(std::string d) override {
    if (d.empty()) return;
    run([s = s_, id = id_, d = std::move(d)]() mutable { s->ex_chunk(id, std::move(d)); });
  }
  void end_stream() override {
    run([s = s_, id = id_] { s->ex_end(id); });
  }
  void post(std::function<void()> fn) override { asio::post(s_->executor(), std::move(fn)); }
  void on_gone(std::function<void()> fn) override {
    run([s = s_, id = id_, fn = std::move(fn)]() mutable { s->ex_on_gone(id, std::move(fn)); });
  }

 private:
  template <class F>
  void run(F&& f) {
    asio::dispatch(s_->executor(), std::forward<F>(f));
  }
  std::shared_ptr<Session> s_;
  uint64_t id_;
};

}  // namespace

std::shared_ptr<HttpExchange> Session::make_exchange() {
  return std::make_shared<Exchange>(shared_from_this(), ex_id_);
}

void HttpTransport::Impl::accept() {
  acceptor.async_accept(
      asio::make_strand(ioc), [self = shared_from_this()](error_code ec, tcp::socket sock) {
        if (self->draining.load() || !self->acceptor.is_open()) return;
        if (!ec) {
          error_code e2;
          const auto ep = sock.remote_endpoint(e2);
          const std::string peer = e2 ? std::string("?") : ep.address().to_string();
          bool reject = false, drop = false;
          {
            std::lock_guard<std::mutex> lock(self->mu);
            if (self->open >= self->opt.max_connections ||
                self->per_client[peer] >= self->opt.max_connections_per_client) {
              reject = true;
              drop = static_cast<int>(self->sessions.size()) >= 2 * self->opt.max_connections;
              if (self->per_client[peer] == 0) self->per_client.erase(peer);
            } else {
              ++self->open;
              ++self->per_client[peer];
            }
          }
          if (drop) {
            sock.close(e2);
          } else {
            sock.set_option(tcp::no_delay(true), e2);
            auto s = std::make_shared<Session>(self, std::move(sock), peer, reject);
            {
              std::lock_guard<std::mutex> lock(self->mu);
              self->sessions[s.get()] = s;
            }
            s->start();
          }
        } else if (ec == asio::error::operation_aborted) {
          return;
        }
        // Out of descriptors (EMFILE) and similar: keep accepting, the condition passes.
        self->accept();
      });
}

void HttpTransport::Impl::close_all(bool force) {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [p, w] : sessions)
      if (auto s = w.lock()) all.push_back(std::move(s));
  }
  for (auto& s : all) s->shut(force);
}

HttpTransport::HttpTransport(TransportOptions opt, Handler handler, Precheck precheck,
                             ErrorReply error, Observer observer)
    : impl_(std::make_shared<Impl>()) {
  impl_->opt = std::move(opt);
  impl_->handler = std::move(handler);
  impl_->precheck = std::move(precheck);
  impl_->error = std::move(error);
  impl_->observer = std::move(observer);
}

HttpTransport::~HttpTransport() {
  stop();
  if (impl_->stopper.joinable()) impl_->stopper.join();
  // Handlers queued after run() returned (stop's close_all, drain's) and sessions cut off by a
  // stop hold the Impl inside its own io_context, a cycle that would outlive this object: run
  // what is left, with every connection closed, until nothing holds it (bounded).
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    if (s.running) return;  // run() is still going: the stopper let it be
  }
  s.ioc.restart();
  asio::post(s.ioc, [im = impl_] { im->close_all(true); });
  s.ioc.run_for(std::chrono::seconds(2));
}

namespace {
// Resolves host (numeric service: port), opens `acceptor` and binds it; the errors name the
// address.
Status open_and_bind(asio::io_context& ioc, tcp::acceptor& acceptor, const std::string& host,
                     int port) {
  error_code ec;
  tcp::resolver res(ioc);
  auto eps = res.resolve(host, std::to_string(port),
                         tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || eps.empty()) return make_error("cannot resolve host '" + host + "'");
  const tcp::endpoint ep = eps.begin()->endpoint();
  const std::string where = host + ":" + std::to_string(port);
  acceptor.open(ep.protocol(), ec);
  if (ec) return make_error("cannot open a socket for " + where + ": " + ec.message());
  // SO_REUSEADDR only lets a restarted server bind over connections in TIME_WAIT; unlike
  // SO_REUSEPORT it never lets two listeners share the port.
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  acceptor.bind(ep, ec);
  if (ec == asio::error::address_in_use)
    return make_error("cannot bind " + where + ": the address is already in use");
  if (ec) return make_error("cannot bind " + where + ": " + ec.message());
  return Ok{};
}
}  // namespace

Status check_bindable(const std::string& host, int port) {
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc);
  return open_and_bind(ioc, acceptor, host, port);  // closed again as acceptor goes
}

Result<int> HttpTransport::bind() {
  Impl& s = *impl_;
  REWIND_TRY_STATUS(open_and_bind(s.ioc, s.acceptor, s.opt.host, s.opt.port));
  error_code ec;
  s.acceptor.listen(s.opt.backlog > 0 ? s.opt.backlog : asio::socket_base::max_listen_connections,
                    ec);
  if (ec)
    return make_error("cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) + ": " +
                      ec.message());
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

void HttpTransport::run() {
  ::signal(SIGPIPE, SIG_IGN);  // writes to closed sockets must fail, not kill the process
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.run_mu);
    if (s.ran) return;
    s.running = true;
  }
  if (!s.draining.load() && s.acceptor.is_open())
    asio::dispatch(s.acceptor.get_executor(), [im = impl_] { im->accept(); });
  else
    asio::dispatch(s.acceptor.get_executor(), [im = impl_] {
      error_code ec;
      im->acceptor.close(ec);
    });
  const int n = std::max(1, s.opt.io_threads);
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
  std::lock_guard<std::mutex> lock(s.run_mu);
  s.running = false;
  s.ran = true;
  s.run_cv.notify_all();
}

void HttpTransport::drain() {
  Impl& s = *impl_;
  if (s.draining.exchange(true)) return;
  asio::dispatch(s.acceptor.get_executor(), [im = impl_] {
    error_code ec;
    im->acceptor.close(ec);
    im->close_all(false);
  });
}

void HttpTransport::stop() {
  Impl& s = *impl_;
  drain();
  if (s.stopping.exchange(true)) return;
  asio::post(s.ioc, [im = impl_] { im->close_all(true); });
  // Whatever still holds the io_context (a handler that never answers) does not hold run().
  s.stopper = std::thread([im = impl_] {
    std::unique_lock<std::mutex> lock(im->run_mu);
    if (!im->run_cv.wait_for(lock, std::chrono::seconds(3),
                             [&] { return im->ran || !im->running; }) ||
        im->running)
      im->ioc.stop();
  });
}

int HttpTransport::connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->open;
}

int64_t HttpTransport::buffered_bytes() const {
  return impl_->buffered.load();
}

}  // namespace rw
