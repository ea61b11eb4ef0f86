// A small synchronous Redis client over hiredis (Debian's libhiredis-dev) for the shared tier
// (cache/redis_tier.h): standalone or Redis Cluster, found out on connecting (CLUSTER SLOTS;
// "cluster support disabled" means standalone). Commands are pipelined, one batch per node;
// in a cluster each goes to its key's slot owner (argv[1] is always the key), and a MOVED or
// ASK reply is followed (at most 5 hops) and a MOVED refreshes the slot map. Every connect,
// write and read has a timeout (SO_SNDTIMEO / SO_RCVTIMEO). A connection error or timeout drops
// every connection and fails the whole call; the next call connects anew.
// Not thread-safe: one client per thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/cache/resp.h"

struct redisContext;  // hiredis

namespace rw {

class RedisClient {
 public:
  using Command = std::vector<std::string>;  // argv; argv[1] is the key

  RedisClient(std::vector<RedisEndpoint> seeds, int timeout_ms);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // The replies, one per command, in order (an error reply is a value, not a failure).
  // Fails on a connection error, a timeout or a reply that cannot be parsed.
  Result<std::vector<RespValue>> run(const std::vector<Command>& cmds);
  // Drops every connection (the next run() connects again).
  void disconnect();
  bool cluster() const { return cluster_; }
  int64_t redirects() const { return redirects_; }

 private:
  struct Ctx;
  Status connect();
  Result<redisContext*> node(const RedisEndpoint& e);
  Status refresh_slots(redisContext* c, const RedisEndpoint& self);
  int16_t master_index(const RedisEndpoint& e);  // its index in masters_, added if new
  Result<RespValue> one(const RedisEndpoint& e, const Command& cmd, bool asking);

  std::vector<RedisEndpoint> seeds_;
  int timeout_ms_;
  bool cluster_ = false;
  bool slots_stale_ = false;
  RedisEndpoint standalone_;
  std::vector<RedisEndpoint> masters_;                 // cluster: the slot owners
  std::vector<int16_t> slot_owner_;                    // cluster: slot -> index in masters_
  std::map<std::string, std::unique_ptr<Ctx>> nodes_;  // "host:port" -> connection
  int64_t redirects_ = 0;
};

}  // namespace rw
