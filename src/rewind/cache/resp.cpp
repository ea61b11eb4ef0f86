#include "rewind/cache/resp.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <memory>

namespace rw {

RespValue resp_from_reply(const redisReply* r) {
  RespValue v;
  if (!r) return v;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      v.type = RespValue::Type::String;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      v.type = RespValue::Type::Status;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      v.type = RespValue::Type::Error;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      v.type = RespValue::Type::Integer;
      v.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      v.type = RespValue::Type::Array;
      v.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) v.elements.push_back(resp_from_reply(r->element[i]));
      break;
    default:
      break;  // nil
  }
  return v;
}

namespace {

void* (*g_create_array)(const redisReadTask*, int) = nullptr;

void* bounded_array(const redisReadTask* t, int n) {
  if (n > kMaxRespElements) {
    if (t->privdata) static_cast<RespGuard*>(t->privdata)->refused_elements = n;
    return nullptr;  // the reader turns this into an error
  }
  return g_create_array(t, n);
}

}  // namespace

std::string RespGuard::message() const {
  return "a reply announced " + std::to_string(refused_elements) + " elements (at most " +
         std::to_string(kMaxRespElements) + ")";
}

void resp_guard_reader(redisReader* r, RespGuard* g) {
  // hiredis's default functions are one static table; copy it once with createArray bounded.
  static redisReplyObjectFunctions bounded = [r] {
    redisReplyObjectFunctions f = *r->fn;
    g_create_array = f.createArray;
    f.createArray = bounded_array;
    return f;
  }();
  r->fn = &bounded;
  r->privdata = g;
}

Result<RespValue> resp_parse(std::string_view bytes) {
  std::unique_ptr<redisReader, void (*)(redisReader*)> rd(redisReaderCreate(), redisReaderFree);
  if (!rd) return make_error("RESP: out of memory");
  RespGuard guard;
  resp_guard_reader(rd.get(), &guard);
  if (redisReaderFeed(rd.get(), bytes.data(), bytes.size()) != REDIS_OK)
    return make_error(std::string("RESP: ") + rd->errstr);
  void* out = nullptr;
  if (redisReaderGetReply(rd.get(), &out) != REDIS_OK)
    return make_error("RESP: " + (guard.refused_elements ? guard.message() : rd->errstr));
  if (!out) return make_error("RESP: incomplete reply");
  std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(out),
                                                     freeReplyObject);
  void* more = nullptr;
  if (redisReaderGetReply(rd.get(), &more) != REDIS_OK || more || rd->pos < rd->len) {
    if (more) freeReplyObject(more);
    return make_error("RESP: bytes after the reply");
  }
  return resp_from_reply(reply.get());
}

uint16_t crc16_xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc = static_cast<uint16_t>(crc ^ (c << 8));
    for (int i = 0; i < 8; ++i)
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

int key_slot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return crc16_xmodem(key) & (kClusterSlots - 1);
}

namespace {

bool parse_int(std::string_view s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty()) return false;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// "'s': why" (appended piecewise: GCC 12 warns falsely on `"'" + std::string(s) + ...`).
Error endpoint_error(std::string_view s, const char* why) {
  std::string m = "'";
  m.append(s);
  m += "' ";
  m += why;
  return make_error(std::move(m));
}

// "host:port" (the last colon splits, so an IPv6 address works; "[::1]:6379" too).
Result<RedisEndpoint> parse_endpoint(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return endpoint_error(s, "is not HOST:PORT");
  std::string_view host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int64_t port = 0;
  if (host.empty() || !parse_int(s.substr(colon + 1), 1, 65535, &port))
    return endpoint_error(s, "is not HOST:PORT (port 1-65535)");
  for (char c : host)
    if (c <= ' ' || c == '/' || c == ',' || c == '@' || c == 127)
      return endpoint_error(s, "has a bad character in the host");
  return RedisEndpoint{std::string(host), static_cast<int>(port)};
}

}  // namespace

Result<std::vector<RedisEndpoint>> parse_redis_url(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme)
    return make_error("redis address '" + std::string(url) + "' must start with redis://");
  std::string_view rest = url.substr(kScheme.size());
  std::vector<RedisEndpoint> out;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view one = rest.substr(0, comma);
    if (!one.empty() && one.back() == '/') one.remove_suffix(1);
    auto e = parse_endpoint(one);
    if (!e.ok()) return make_error("redis address: " + e.error_message());
    out.push_back(std::move(e).value());
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

Result<RedisRedirect> parse_redirect(std::string_view error) {
  RedisRedirect r;
  if (error.substr(0, 6) == "MOVED ")
    r.kind = RedisRedirect::Kind::Moved;
  else if (error.substr(0, 4) == "ASK ")
    r.kind = RedisRedirect::Kind::Ask;
  else
    return r;
  std::string_view rest = error.substr(r.kind == RedisRedirect::Kind::Moved ? 6 : 4);
  const size_t sp = rest.find(' ');
  int64_t slot = 0;
  if (sp == std::string_view::npos || !parse_int(rest.substr(0, sp), 0, kClusterSlots - 1, &slot))
    return make_error("malformed redirection '" + std::string(error) + "'");
  auto to = parse_endpoint(rest.substr(sp + 1));
  if (!to.ok()) return make_error("malformed redirection: " + to.error_message());
  r.slot = static_cast<int>(slot);
  r.to = std::move(to).value();
  return r;
}

Result<std::vector<SlotRange>> parse_cluster_slots(const RespValue& reply,
                                                   const RedisEndpoint& self) {
  if (reply.is_error()) return make_error("CLUSTER SLOTS: " + reply.str);
  if (reply.type != RespValue::Type::Array) return make_error("CLUSTER SLOTS: not an array");
  std::vector<SlotRange> out;
  for (const RespValue& e : reply.elements) {
    if (e.type != RespValue::Type::Array || e.elements.size() < 3)
      return make_error("CLUSTER SLOTS: an entry is not [lo, hi, master, ...]");
    const RespValue& lo = e.elements[0];
    const RespValue& hi = e.elements[1];
    const RespValue& m = e.elements[2];
    if (lo.type != RespValue::Type::Integer || hi.type != RespValue::Type::Integer ||
        lo.integer < 0 || hi.integer >= kClusterSlots || lo.integer > hi.integer)
      return make_error("CLUSTER SLOTS: bad slot range");
    if (m.type != RespValue::Type::Array || m.elements.size() < 2 ||
        m.elements[0].type != RespValue::Type::String ||
        m.elements[1].type != RespValue::Type::Integer || m.elements[1].integer < 1 ||
        m.elements[1].integer > 65535)
      return make_error("CLUSTER SLOTS: bad master [host, port]");
    SlotRange r;
    r.lo = static_cast<int>(lo.integer);
    r.hi = static_cast<int>(hi.integer);
    r.master.host = m.elements[0].str.empty() ? self.host : m.elements[0].str;
    r.master.port = static_cast<int>(m.elements[1].integer);
    out.push_back(std::move(r));
  }
  if (out.empty()) return make_error("CLUSTER SLOTS: no slot is served");
  return out;
}

}  // namespace rw
