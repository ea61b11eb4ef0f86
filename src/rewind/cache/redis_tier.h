// The shared tier (cache/cache_tier.h) on Redis 7, standalone or Cluster (cache/redis_client.h):
// replicas of one model share KV pages and checkpoints by content key, so a replica that misses
// locally resumes from what another one published.
//
// Keys and values. An object is the string `rw:<content key, 32 hex>.<page|ckpt>` holding the
// disk tier's object bytes (cache/tier_format.h: header with format version, model fingerprint,
// key, layout and checksums, then the payload), so a value is used only after the same checks
// as a file: another model's or format version's value is skipped and left (`foreign`), a
// damaged one deleted (`corrupt`), one log line each. The key already names the model (the chain
// starts at its fingerprint), so other models never collide. A checkpoint at q is also listed in
// the set `rw:<key of t[0, 64*floor(q/64))>.idx` (members: q mod 64, in decimal), so one round
// trip before a lookup (probe) learns every page and checkpoint stored along a prompt: for each
// page, EXISTS of the page and SMEMBERS of its index.
//
// Publishing is asynchronous: put() queues (bounded by bytes; dropped and counted beyond) and one
// writer thread sends batches: EXISTS first (what another replica already published is not sent
// again), then SET (with EX when a TTL is set) and SADD for what is missing. Eviction is Redis's
// own (maxmemory-policy allkeys-lru is the intended setting; an index entry that outlives its
// checkpoint costs one failed GET).
//
// Failures never fail a request: every call has a timeout; a connection error, a timeout or a
// protocol error puts the tier down (one log line; `errors` counts each) and until the backoff
// (100 ms doubling to 5 s) has passed every get is a miss and every put is dropped, then the next
// call reconnects (one log line when it answers again). An error reply to a write (a full Redis:
// OOM) drops that object (`write_errors`, one log line per run of the same error).
//
// Thread-safety: every method may be called from any thread; reads (get, probe, evict) share one
// connection under a mutex, the writer has its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "rewind/cache/cache_tier.h"
#include "rewind/cache/redis_client.h"

namespace rw {

class RedisTier final : public CacheTier {
 public:
  struct Options {
    std::vector<RedisEndpoint> endpoints;
    Hash128 fingerprint;   // the model's
    uint8_t kv_dtype = 0;  // as in the disk tier's headers
    int timeout_ms = 250;  // connect, and each command batch's reads and writes
    int backoff_min_ms = 100;
    int backoff_max_ms = 5000;
    int64_t ttl_s = 0;                          // EX on each object (0: none)
    uint64_t queue_bytes = uint64_t{64} << 20;  // payload bytes waiting to be sent, at most
    std::function<void(const std::string&)> log;
  };

  // Starts the writer and tries to connect once (a failure is logged, not fatal: the tier
  // retries in the background).
  static std::unique_ptr<RedisTier> open(const Options& opt);
  ~RedisTier() override;  // sends what is queued (while Redis answers), then stops

  std::span<const uint8_t> fingerprint() const override { return {fp_bytes_, 16}; }
  bool contains(const ContentKey& key, TierKind kind) const override;
  void put(TierPut obj) override;
  void touch(const ContentKey&, TierKind) override {}  // Redis keeps its own LRU
  bool get(const ContentKey& key, TierKind kind, const TierLayout& layout,
           std::span<std::byte> out) override;
  void evict(const ContentKey& key, TierKind kind) override;
  void flush() override;
  void probe(std::span<const ContentKey> prefix_keys, int64_t page_tokens, int64_t from) override;
  TierStats stats() const override;

  // The Redis key of an object, and of the checkpoint index of the page starting at `key`.
  static std::string object_key(const ContentKey& key, TierKind kind);
  static std::string index_key(const ContentKey& page_start);

 private:
  struct Job;
  using Id = TierId;
  using IdHash = TierIdHash;

  explicit RedisTier(const Options& opt);
  void writer();
  void send_batch(std::vector<std::shared_ptr<Job>>& batch);
  // Health: true when calls may go to Redis now (up, or the backoff has passed).
  bool may_call();
  void call_failed(const std::string& why);
  void call_ok();
  void remember_locked(const Id& id);
  void say(const std::string& line) const;

  Options opt_;
  uint8_t fp_bytes_[16];

  mutable std::mutex mu_;  // queue, known set, stats, health
  std::condition_variable cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::unordered_map<Id, std::shared_ptr<Job>, IdHash> queued_;
  std::unordered_set<Id, IdHash> known_;  // stored in Redis, as far as this process knows
  bool sending_ = false;
  bool stop_ = false;
  bool down_ = false;
  double retry_at_ = 0;
  int backoff_ms_ = 0;
  std::string last_write_error_;
  std::atomic<int64_t> redirects_{0};  // both clients' MOVED / ASK followed
  TierStats st_;

  std::mutex read_mu_;  // the reading connection
  RedisClient reader_;
  RedisClient writer_client_;
  std::thread thread_;
};

}  // namespace rw
