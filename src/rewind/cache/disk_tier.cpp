#include "rewind/cache/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "rewind/cache/tier_format.h"

namespace rw {

namespace {

// An object file that open() refuses for good (its permissions, a link loop, a directory)
// rather than for a passing shortage (descriptors, memory, a signal) or because it is gone.
bool unopenable(int e) {
  return e == EACCES || e == EPERM || e == ELOOP || e == EISDIR || e == ENXIO || e == ENODEV;
}
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool write_all(int fd, const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes at off; false on error or end of file (errno 0 then).
bool pread_all(int fd, std::byte* p, size_t n, off_t off) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) {
      errno = 0;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return true;
}

// "<32 hex>.page" / "<32 hex>.ckpt" -> key and kind.
bool parse_name(const std::string& name, ContentKey* key, TierKind* kind) {
  if (name.size() != 37 || name[32] != '.') return false;
  const std::string ext = name.substr(33);
  if (ext == "page")
    *kind = TierKind::Page;
  else if (ext == "ckpt")
    *kind = TierKind::Checkpoint;
  else
    return false;
  return Hash128::from_hex(std::string_view(name).substr(0, 32), key);
}
}  // namespace

struct DiskTier::Job {
  Id id;
  TierPut obj;
  uint64_t payload = 0;
};

DiskTier::DiskTier(const Options& opt) : opt_(opt) {
  opt.fingerprint.to_bytes(fp_bytes_);
  st_.enabled = true;
  st_.name = "disk";
  st_.budget_bytes = opt.budget_bytes;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const Options& opt) {
  std::error_code ec;
  std::filesystem::create_directories(opt.dir, ec);
  if (ec) return make_error("--cache-dir " + opt.dir + ": " + ec.message());
  std::unique_ptr<DiskTier> t(new DiskTier(opt));
  const std::string lock = opt.dir + "/lock";
  t->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (t->lock_fd_ < 0) return make_error("--cache-dir " + opt.dir + ": " + std::strerror(errno));
  if (::flock(t->lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return make_error("--cache-dir " + opt.dir + " is in use by another process");
  REWIND_TRY_STATUS(t->scan());
  t->thread_ = std::thread([p = t.get()] { p->writer(); });
  return t;
}

DiskTier::~DiskTier() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

std::string DiskTier::path_of(const ContentKey& key, TierKind kind) const {
  return opt_.dir + "/" + key.hex() + "." + tier_kind_name(kind);
}

void DiskTier::say(const std::string& line) const {
  if (opt_.log) opt_.log(line);
}

Status DiskTier::scan() {
  struct Found {
    int64_t mtime_ns;
    Id id;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::error_code ec;
  int told = 0;
  auto tell = [&](const std::string& line) {
    if (++told <= 20) say(line);
  };
  for (const auto& de : std::filesystem::directory_iterator(opt_.dir, ec)) {
    const std::string name = de.path().filename().string();
    const std::string path = de.path().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      ::unlink(path.c_str());  // a write the process did not finish
      ++st_.stale_temp;
      continue;
    }
    Id id;
    if (!parse_name(name, &id.key, &id.kind)) continue;  // not ours (lock, other files)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (unopenable(e)) {  // skipped and removed like a damaged file
        tell("rewind: cache: skipped " + path + ": cannot open: " + std::strerror(e));
        ++st_.corrupt;
        ::unlink(path.c_str());
      } else {  // a passing shortage (descriptors, memory): left for the next start
        tell("rewind: cache: skipped " + path + " for now: " + std::strerror(e));
      }
      continue;
    }
    struct stat sb {};
    std::byte hdr[kTierHeaderBytes];
    size_t got = 0;
    if (::fstat(fd, &sb) == 0) {
      const ssize_t r = ::pread(fd, hdr, sizeof hdr, 0);
      got = r > 0 ? static_cast<size_t>(r) : 0;
    }
    ::close(fd);
    TierExpect want;
    want.fingerprint = opt_.fingerprint;
    want.kv_dtype = opt_.kv_dtype;
    want.key = &id.key;
    want.kind = id.kind;
    const TierParse p = parse_tier_header(std::span<const std::byte>(hdr, got),
                                          static_cast<uint64_t>(sb.st_size), want);
    if (!p.ok()) {
      const bool foreign = tier_file_error_foreign(p.error);
      tell("rewind: cache: skipped " + path + ": " + p.message);
      if (foreign) {
        ++st_.foreign;
      } else {
        ++st_.corrupt;
        ::unlink(path.c_str());
      }
      continue;
    }
    found.push_back({static_cast<int64_t>(sb.st_mtim.tv_sec) * 1000000000 + sb.st_mtim.tv_nsec, id,
                     static_cast<uint64_t>(sb.st_size)});
  }
  if (ec) return make_error("--cache-dir " + opt_.dir + ": " + ec.message());
  if (told > 20) say("rewind: cache: ... and " + std::to_string(told - 20) + " more files skipped");
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime_ns, a.id.key.hi, a.id.key.lo) <
           std::tie(b.mtime_ns, b.id.key.hi, b.id.key.lo);
  });
  std::vector<std::string> remove;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Found& f : found) {
      Entry e;
      e.bytes = f.bytes;
      e.tick = ++tick_;
      index_.emplace(f.id, e);
      lru_.emplace(e.tick, f.id);
      st_.bytes += f.bytes;
      ++st_.objects;
    }
    st_.restored = static_cast<int64_t>(found.size());
    evict_to_budget_locked(&remove);
  }
  for (const auto& r : remove) ::unlink(r.c_str());
  return Ok{};
}

bool DiskTier::contains(const ContentKey& key, TierKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(Id{key, kind}) > 0;
}

void DiskTier::touch_locked(const Id& id, Entry& e) {
  lru_.erase(e.tick);
  e.tick = ++tick_;
  lru_.emplace(e.tick, id);
}

void DiskTier::touch(const ContentKey& key, TierKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(Id{key, kind});
  if (it != index_.end()) touch_locked(it->first, it->second);
}

void DiskTier::put(TierPut obj) {
  const Id id{obj.key, obj.kind};
  uint64_t payload = 0;
  for (const auto& p : obj.parts) payload += p.size();
  REWIND_CHECK(payload == obj.layout.total());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    auto it = index_.find(id);
    if (it != index_.end()) {
      touch_locked(id, it->second);
      return;
    }
    const uint64_t bytes = kTierHeaderBytes + payload;
    if (bytes > opt_.budget_bytes || st_.queued_bytes + payload > opt_.queue_bytes) {
      ++st_.dropped;
      return;
    }
    auto job = std::make_shared<Job>();
    job->id = id;
    job->payload = payload;
    job->obj = std::move(obj);
    Entry e;
    e.bytes = bytes;
    e.tick = ++tick_;
    e.job = job;
    index_.emplace(id, e);
    lru_.emplace(e.tick, id);
    queue_.push_back(std::move(job));
    ++st_.queued;
    st_.queued_bytes += payload;
  }
  cv_.notify_one();
}

void DiskTier::erase_locked(const Id& id) {
  auto it = index_.find(id);
  if (it == index_.end()) return;
  lru_.erase(it->second.tick);
  if (!it->second.job) {
    st_.bytes -= it->second.bytes;
    --st_.objects;
  }
  index_.erase(it);
}

void DiskTier::evict_to_budget_locked(std::vector<std::string>* remove) {
  auto it = lru_.begin();
  while (st_.bytes > opt_.budget_bytes && it != lru_.end()) {
    const Id id = it->second;
    ++it;
    const Entry& e = index_.at(id);
    if (e.job) continue;  // not written yet
    remove->push_back(path_of(id.key, id.kind));
    erase_locked(id);
    ++st_.evictions;
  }
}

void DiskTier::evict(const ContentKey& key, TierKind kind) {
  bool on_disk = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(Id{key, kind});
    if (it == index_.end()) return;
    on_disk = !it->second.job;
    erase_locked(Id{key, kind});
  }
  if (on_disk) ::unlink(path_of(key, kind).c_str());
}

bool DiskTier::write_file(const Job& job, std::string* err) {
  const std::string path = path_of(job.id.key, job.id.kind);
  const std::string tmp = path + ".tmp";
  const auto header = tier_header_of(job.obj, opt_.fingerprint, opt_.kv_dtype);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    last_errno_ = errno;
    *err = std::string("create ") + tmp + ": " + std::strerror(last_errno_);
    return false;
  }
  // Writes a chunk; the injected fault acts as a full disk once the limit is passed.
  auto chunk = [&](const std::byte* p, size_t n) {
    if (opt_.fail_after_bytes >= 0 &&
        written_total_ + n > static_cast<uint64_t>(opt_.fail_after_bytes)) {
      errno = ENOSPC;
      return false;
    }
    if (!write_all(fd, p, n)) return false;
    written_total_ += n;
    return true;
  };
  bool ok = chunk(header.data(), header.size());
  uint64_t done = 0;
  for (const auto& p : job.obj.parts) {
    if (!ok) break;
    size_t first = p.size();
    if (opt_.write_pause_ms > 0 && done < job.payload / 2 && done + p.size() >= job.payload / 2)
      first = static_cast<size_t>(job.payload / 2 - done);
    ok = chunk(p.data(), first);
    if (ok && first < p.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(opt_.write_pause_ms));
      ok = chunk(p.data() + first, p.size() - first);
    }
    done += p.size();
  }
  if (ok && opt_.fsync) ok = ::fdatasync(fd) == 0;
  const int saved = errno;
  if (::close(fd) != 0 && ok) ok = false;
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = false;
  if (!ok) {
    const int e = errno ? errno : saved;
    *err = "write " + path + ": " + std::strerror(e);
    last_errno_ = e;
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

void DiskTier::writer() {
  // Behind the engine: a lower priority, so the writer takes the cores the forward leaves.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  int dir_fd = -1;
  bool dir_dirty = false;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stop_ and nothing left
      job = queue_.front();
      writing_ = true;
    }
    std::string err;
    const double t0 = now_s();
    const int prev_errno = last_errno_;
    const bool ok = write_file(*job, &err);
    const double dt = now_s() - t0;
    if (!ok && last_errno_ != prev_errno) say("rewind: cache: " + err + " (dropped; counted)");
    if (ok) last_errno_ = 0;
    dir_dirty = dir_dirty || ok;
    std::vector<std::string> remove;
    bool drained = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      writing_ = false;
      --st_.queued;
      st_.queued_bytes -= job->payload;
      auto it = index_.find(job->id);
      const bool current = it != index_.end() && it->second.job == job;
      if (ok) {
        ++st_.writes;
        st_.bytes_written += kTierHeaderBytes + job->payload;
        st_.write_seconds += dt;
      } else {
        ++st_.write_errors;
      }
      if (current && ok) {
        it->second.job.reset();
        st_.bytes += it->second.bytes;
        ++st_.objects;
      } else if (current) {
        lru_.erase(it->second.tick);
        index_.erase(it);
      } else if (ok) {
        remove.push_back(path_of(job->id.key, job->id.kind));  // evicted while queued
      }
      evict_to_budget_locked(&remove);
      drained = queue_.empty();
    }
    job.reset();
    for (const auto& r : remove) ::unlink(r.c_str());
    if (drained && dir_dirty && opt_.fsync) {
      if (dir_fd < 0) dir_fd = ::open(opt_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir_fd >= 0) ::fsync(dir_fd);
      dir_dirty = false;
    }
    if (drained) done_cv_.notify_all();
  }
  if (dir_fd >= 0) {
    if (opt_.fsync) ::fsync(dir_fd);
    ::close(dir_fd);
  }
  done_cv_.notify_all();
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return queue_.empty() || !thread_.joinable(); });
}

void DiskTier::bad_file(const Id& id, const std::string& path, const std::string& why,
                        bool foreign) {
  say("rewind: cache: skipped " + path + ": " + why + " (recomputed)");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it != index_.end() && !it->second.job) erase_locked(id);
  if (foreign) {
    ++st_.foreign;
  } else {
    ++st_.corrupt;
    ::unlink(path.c_str());
  }
}

bool DiskTier::get(const ContentKey& key, TierKind kind, const TierLayout& layout,
                   std::span<std::byte> out) {
  REWIND_CHECK(out.size() == layout.total());
  const Id id{key, kind};
  const double t0 = now_s();
  auto account = [&](bool ok, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    st_.read_seconds += now_s() - t0;
    if (!ok) return;
    ++st_.reads;
    st_.bytes_read += bytes;
    auto it = index_.find(id);
    if (it != index_.end()) touch_locked(id, it->second);
  };
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    if (it->second.job) {
      // Still queued: the bytes are in memory.
      std::shared_ptr<Job> job = it->second.job;
      lock.unlock();
      if (!copy_payload(job->obj, layout, out)) return false;
      account(true, 0);
      return true;
    }
  }
  const std::string path = path_of(key, kind);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (unopenable(e)) {  // there but never readable: a bad file
      bad_file(id, path, std::string("cannot open: ") + std::strerror(e), false);
      account(false, 0);
      return false;
    }
    // Gone (removed by hand): forget it quietly. A passing shortage (descriptors, memory):
    // a miss this time, the file kept.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(id);
    if (e == ENOENT && it != index_.end() && !it->second.job) erase_locked(id);
    st_.read_seconds += now_s() - t0;
    return false;
  }
  struct stat sb {};
  std::byte hdr[kTierHeaderBytes];
  size_t got = 0;
  if (::fstat(fd, &sb) == 0) {
    const ssize_t r = ::pread(fd, hdr, sizeof hdr, 0);
    got = r > 0 ? static_cast<size_t>(r) : 0;
  }
  const TierExpect want = expect_object(opt_.fingerprint, opt_.kv_dtype, key, kind, layout);
  TierParse p = parse_tier_header(std::span<const std::byte>(hdr, got),
                                  static_cast<uint64_t>(sb.st_size), want);
  if (p.ok() && !pread_all(fd, out.data(), out.size(), static_cast<off_t>(kTierHeaderBytes))) {
    p.error = TierFileError::Truncated;
    p.message = "short read";
  }
  if (p.ok() && xxh3_64(out.data(), out.size()) != p.header.payload_hash) {
    p.error = TierFileError::PayloadChecksum;
    p.message = "payload checksum mismatch";
  }
  if (p.ok()) ::futimens(fd, nullptr);  // the modification time orders the LRU after a restart
  ::close(fd);
  if (!p.ok()) {
    bad_file(id, path, p.message, tier_file_error_foreign(p.error));
    account(false, 0);
    return false;
  }
  account(true, kTierHeaderBytes + out.size());
  return true;
}

TierStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

}  // namespace rw
