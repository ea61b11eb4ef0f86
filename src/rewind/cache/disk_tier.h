// The disk tier (cache/cache_tier.h): one file per object in one directory, named
// <content key as 32 hex digits>.<page|ckpt>, in the format of cache/tier_format.h.
//
// Writes are behind: put() queues the object (the queue is bounded by bytes; a put that does not
// fit is dropped and counted) and one writer thread writes it to <name>.tmp, then renames it to
// <name>, so a file under its final name is always complete; a crash loses at most what was
// still queued. fsync policy: by default none (a process crash loses nothing the kernel has;
// after a power loss a file may come back torn or empty, which its checksum catches, so it is
// skipped and recomputed); with Options::fsync each file is fdatasync'ed before its rename and
// the directory fsync'ed when the queue drains.
//
// Start: the directory is locked (flock on DIR/lock: one process a directory), unfinished .tmp
// files are removed, and every object file's header is read into the index (no payload): files
// of another model or format version are skipped and left alone, damaged ones removed, one log
// line each. LRU order starts from the files' modification times (a read sets it to now).
// Payloads are read on demand by get(), which checks the whole file (header, size, payload
// checksum); a bad file is removed, logged once and counted, and the caller recomputes.
//
// Budget: the files' bytes (headers included); after each write the least recently used objects
// are removed until the total fits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "rewind/base/result.h"
#include "rewind/cache/cache_tier.h"

namespace rw {

class DiskTier final : public CacheTier {
 public:
  struct Options {
    std::string dir;
    uint64_t budget_bytes = uint64_t{16} << 30;
    Hash128 fingerprint;   // the model's (computed by the model layer)
    uint8_t kv_dtype = 0;  // the KV element type code written in headers (0: f32)
    bool fsync = false;
    uint64_t queue_bytes = uint64_t{64} << 20;  // payload bytes waiting to be written, at most
    // Receives one line per notable event (a skipped file, the first of a run of write errors).
    std::function<void(const std::string&)> log;
    // Fault injection for tests: writes fail with ENOSPC once this many bytes have been written
    // (-1: never); each write pauses this long halfway through its payload.
    int64_t fail_after_bytes = -1;
    int write_pause_ms = 0;
  };

  // Creates the directory if needed, locks it and reads the index. Errors: the directory cannot
  // be made or read, or another process holds it.
  static Result<std::unique_ptr<DiskTier>> open(const Options& opt);
  ~DiskTier() override;  // writes what is queued, then stops the writer

  std::span<const uint8_t> fingerprint() const override { return {fp_bytes_, 16}; }
  bool contains(const ContentKey& key, TierKind kind) const override;
  void put(TierPut obj) override;
  void touch(const ContentKey& key, TierKind kind) override;
  bool get(const ContentKey& key, TierKind kind, const TierLayout& layout,
           std::span<std::byte> out) override;
  void evict(const ContentKey& key, TierKind kind) override;
  void flush() override;
  TierStats stats() const override;

  // The file that holds (or would hold) an object.
  std::string path_of(const ContentKey& key, TierKind kind) const;

 private:
  struct Job;
  using Id = TierId;
  using IdHash = TierIdHash;
  struct Entry {
    uint64_t bytes = 0;  // file size
    uint64_t tick = 0;
    std::shared_ptr<Job> job;  // while queued (not yet written)
  };

  explicit DiskTier(const Options& opt);
  Status scan();
  void writer();
  bool write_file(const Job& job, std::string* err);
  void touch_locked(const Id& id, Entry& e);
  void erase_locked(const Id& id);
  void evict_to_budget_locked(std::vector<std::string>* remove);
  void bad_file(const Id& id, const std::string& path, const std::string& why, bool foreign);
  void say(const std::string& line) const;

  Options opt_;
  uint8_t fp_bytes_[16];
  int lock_fd_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::unordered_map<Id, Entry, IdHash> index_;
  std::map<uint64_t, Id> lru_;  // tick -> object
  std::deque<std::shared_ptr<Job>> queue_;
  bool writing_ = false;  // the writer holds a job taken from the queue
  bool stop_ = false;
  uint64_t tick_ = 0;
  uint64_t written_total_ = 0;  // bytes written by this process (fault injection)
  int last_errno_ = 0;
  TierStats st_;
  std::thread thread_;
};

}  // namespace rw
