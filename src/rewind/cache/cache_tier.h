// A tier under the prefix cache's RAM: KV pages and checkpoints kept by content key, so they
// outlive an eviction, a restart or (for a shared tier) the process. The disk tier
// (cache/disk_tier.h) is the first implementation; a remote one (a key-value server shared by
// replicas) fits the same interface, since keys name contents, not places.
//
// Content keys. key(tokens[0, k)) is a chain hash over the model fingerprint and the token ids:
//   key_0     = XXH3-128(fingerprint bytes || "rewind-chain-1")
//   key_{k+1} = XXH3-128(key_k as 16 bytes (lo then hi, little-endian) || token_k as int32 LE)
// Bit-exactness (docs/ARCHITECTURE.md) makes the state after a prefix a function of the prefix
// alone, so one key names one content on any machine running the same model (fingerprint).
//
// Objects. A page object at key(tokens[0, 64(i+1))) is KV page i, full. A checkpoint object at
// key(tokens[0, q)) is the recurrent snapshot at q (when the model has recurrent layers) followed
// by page floor(q/64) when q is not a page boundary (its rows below q are the prefix's). Resuming
// at q takes the full pages below q and the checkpoint at q. Payloads are opaque bytes; the tier
// records their sizes and the KV element type and refuses an object whose layout differs.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/hash.h"

namespace rw {

using ContentKey = Hash128;

enum class TierKind : uint8_t { Page = 1, Checkpoint = 2 };
const char* tier_kind_name(TierKind k);  // "page", "ckpt"

// The chain hash of the header comment.
ContentKey chain_root(std::span<const uint8_t> fingerprint);
ContentKey chain_next(const ContentKey& k, int32_t token);

// The sizes an object's payload must have: `rec_bytes` of recurrent snapshot then `kv_bytes`
// of KV page.
struct TierLayout {
  uint64_t rec_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t total() const { return rec_bytes + kv_bytes; }
  bool operator==(const TierLayout&) const = default;
};

// One object to store: its payload is `parts` concatenated; `owner` keeps them alive (and
// unchanged) until the tier has written them.
struct TierPut {
  ContentKey key;
  TierKind kind = TierKind::Page;
  int64_t pos = 0;  // tokens of the prefix it belongs to (kept in the header, for people)
  TierLayout layout;
  std::vector<std::span<const std::byte>> parts;
  std::shared_ptr<const void> owner;
  // Checkpoints: the page size and the key of t[0, page_tokens * floor(pos / page_tokens)), for a
  // tier that indexes checkpoints by page (the shared one); page_tokens 0: not given.
  int64_t page_tokens = 0;
  ContentKey page_start;
};

// An object's identity in a tier (the key of the tiers' own indexes).
struct TierId {
  ContentKey key;
  TierKind kind = TierKind::Page;
  bool operator==(const TierId&) const = default;
};
struct TierIdHash {
  size_t operator()(const TierId& i) const {
    return Hash128Hasher()(i.key) ^ static_cast<size_t>(i.kind);
  }
};

// Copies the payload of `obj` (its parts, in order) into `out` when its layout is `layout`;
// false, copying nothing, otherwise. For a get() of an object still queued.
bool copy_payload(const TierPut& obj, const TierLayout& layout, std::span<std::byte> out);

struct TierStats {
  bool enabled = false;
  std::string name;  // "disk", "redis"
  // Objects and bytes held now (written), the budget, the write queue.
  int64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t budget_bytes = 0;
  int64_t queued = 0;
  uint64_t queued_bytes = 0;
  // Cumulative.
  int64_t reads = 0;  // objects read (get() that returned them)
  uint64_t bytes_read = 0;
  double read_seconds = 0;  // time in get(), successful or not
  int64_t writes = 0;       // objects written
  uint64_t bytes_written = 0;
  double write_seconds = 0;  // writer thread time per object
  int64_t write_errors = 0;  // a failed write (no space, I/O error): the object is dropped
  int64_t dropped = 0;       // put() refused: queue full or larger than the budget
  int64_t evictions = 0;     // objects removed by the budget (LRU)
  int64_t corrupt = 0;       // truncated, bad checksum, unreadable: removed, recomputed
  int64_t foreign = 0;       // another model or format version: skipped, left alone
  int64_t stale_temp = 0;    // unfinished temporary files found at start and removed
  int64_t restored = 0;      // objects indexed at start
  // Remote tiers (the shared one).
  int64_t get_misses = 0;    // get() of an object the tier did not have (or could not read)
  int64_t errors = 0;        // connection errors, timeouts, protocol errors
  bool down = false;         // calls are skipped until the backoff has passed
  int64_t reconnects = 0;    // times the server answered again after being down
  int64_t existing = 0;      // put()s not sent: another process had stored the object already
  int64_t redirects = 0;     // cluster MOVED / ASK replies followed
  int64_t probes = 0;        // probe() round trips
  double probe_seconds = 0;  // time in probe()
};

// The figures of the tier named `name` ("disk", "redis") among `tiers`; enabled false when
// there is none.
TierStats tier_named(const std::vector<TierStats>& tiers, std::string_view name);

class CacheTier {
 public:
  virtual ~CacheTier() = default;
  // The model fingerprint its keys and files are bound to.
  virtual std::span<const uint8_t> fingerprint() const = 0;
  // True when the tier holds or has queued the object.
  virtual bool contains(const ContentKey& key, TierKind kind) const = 0;
  // Queues the object for writing without blocking on I/O (write-behind). An object already
  // held is only marked used. Refused (counted in `dropped`) when the queue is full.
  virtual void put(TierPut obj) = 0;
  // Marks an object used (LRU), if held.
  virtual void touch(const ContentKey& key, TierKind kind) = 0;
  // Reads the payload of an object with layout `layout` into `out` (layout.total() bytes).
  // False when it is absent or unusable: a bad one is forgotten (counted, one log line).
  virtual bool get(const ContentKey& key, TierKind kind, const TierLayout& layout,
                   std::span<std::byte> out) = 0;
  // Forgets an object (and removes what stores it).
  virtual void evict(const ContentKey& key, TierKind kind) = 0;
  // Blocks until every queued write has been done or dropped.
  virtual void flush() = 0;
  virtual TierStats stats() const = 0;
  // Before a lookup asks contains() along one prompt: `prefix_keys[k]` is the key of its first k
  // tokens, and positions at or below `from` need no answer. A remote tier learns in one round
  // trip which pages (every `page_tokens`) and checkpoints it holds there; a local one has nothing
  // to do.
  virtual void probe(std::span<const ContentKey> /*prefix_keys*/, int64_t /*page_tokens*/,
                     int64_t /*from*/) {}
  // Each tier's own figures (a TierStack: one per tier, top first).
  virtual std::vector<TierStats> all_stats() const { return {stats()}; }
};

// Tiers on top of each other (the disk, then the shared Redis tier): contains() asks each, put()
// goes to every tier that lacks the object, get() reads the first tier holding a good copy and
// copies it up into the tiers above (a Redis hit lands on disk too), probe(), touch(), evict()
// and flush() go to all. stats() is the top tier's.
class TierStack final : public CacheTier {
 public:
  explicit TierStack(std::vector<std::shared_ptr<CacheTier>> tiers);
  std::span<const uint8_t> fingerprint() const override { return tiers_[0]->fingerprint(); }
  bool contains(const ContentKey& key, TierKind kind) const override;
  void put(TierPut obj) override;
  void touch(const ContentKey& key, TierKind kind) override;
  bool get(const ContentKey& key, TierKind kind, const TierLayout& layout,
           std::span<std::byte> out) override;
  void evict(const ContentKey& key, TierKind kind) override;
  void flush() override;
  TierStats stats() const override { return tiers_[0]->stats(); }
  void probe(std::span<const ContentKey> prefix_keys, int64_t page_tokens, int64_t from) override;
  std::vector<TierStats> all_stats() const override;

 private:
  std::vector<std::shared_ptr<CacheTier>> tiers_;
};

}  // namespace rw
