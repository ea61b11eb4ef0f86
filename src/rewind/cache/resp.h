// The pure parts of the Redis client under the shared tier (cache/redis_tier.h): RESP replies
// as values, Redis Cluster key slots (CRC16 of the key or its {hash tag}), MOVED / ASK
// redirections, the CLUSTER SLOTS reply and the `redis://HOST:PORT[,HOST:PORT...]` address list.
// Every function is a pure function of its input; malformed input is an error, never a crash
// (tests/unit/resp_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"

struct redisReply;   // hiredis
struct redisReader;  // hiredis

namespace rw {

// One RESP2 reply (what hiredis returns, copied out of its tree).
struct RespValue {
  enum class Type : uint8_t { Nil, Status, Error, Integer, String, Array };
  Type type = Type::Nil;
  std::string str;  // Status, Error, String
  int64_t integer = 0;
  std::vector<RespValue> elements;  // Array
  bool is_error() const { return type == Type::Error; }
};

// Parses exactly one complete reply from raw RESP bytes (through hiredis's reader, the code
// the live client uses). Errors: a protocol error, an incomplete reply, bytes left over.
Result<RespValue> resp_parse(std::string_view bytes);
// A copy of a hiredis reply tree (null: Nil).
RespValue resp_from_reply(const redisReply* r);

// The most elements one RESP array may announce. hiredis allocates an array's element table when
// it reads the count, before any element arrives, so "*700000000" from a broken or hostile
// server would take 5.6 GB; the largest real reply, CLUSTER SLOTS, has at most 16384 ranges.
constexpr int kMaxRespElements = 1 << 16;
// What a guarded reader refused (0: nothing); the reader's privdata points at it.
struct RespGuard {
  int64_t refused_elements = 0;
  std::string message() const;  // "a reply announced N elements (at most 65536)"
};
// Makes `r` refuse arrays over kMaxRespElements (a reader error) and record it in `g`, which
// must outlive the reader.
void resp_guard_reader(redisReader* r, RespGuard* g);

// CRC16-CCITT (XModem: polynomial 0x1021, initial 0), the checksum Redis Cluster uses.
uint16_t crc16_xmodem(std::string_view bytes);
// The cluster slot of a key (0..16383): CRC16 of the key, or of its hash tag, the bytes between
// the first '{' and the next '}' when that is not empty.
int key_slot(std::string_view key);
constexpr int kClusterSlots = 16384;

struct RedisEndpoint {
  std::string host;
  int port = 0;
  bool operator==(const RedisEndpoint&) const = default;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "redis://HOST:PORT[,HOST:PORT...]" (the scheme once, in front; an IPv6 host in brackets).
Result<std::vector<RedisEndpoint>> parse_redis_url(std::string_view url);

// A cluster redirection: "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>".
struct RedisRedirect {
  enum class Kind : uint8_t { None, Moved, Ask };
  Kind kind = Kind::None;
  int slot = -1;
  RedisEndpoint to;
};
// Kind None when the error is not a redirection; an error when it is one but malformed.
Result<RedisRedirect> parse_redirect(std::string_view error);

// One range of the CLUSTER SLOTS reply: slots [lo, hi] served by `master`.
struct SlotRange {
  int lo = 0, hi = 0;
  RedisEndpoint master;
};
// The CLUSTER SLOTS reply: an array of [lo, hi, [host, port, id...], replicas...]. An empty
// host means the node that answered (`self`).
Result<std::vector<SlotRange>> parse_cluster_slots(const RespValue& reply,
                                                   const RedisEndpoint& self);

}  // namespace rw
