#include "rewind/cache/redis_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "rewind/cache/tier_format.h"

namespace rw {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr size_t kBatchObjects = 32;
constexpr size_t kKnownCap = size_t{1} << 22;  // the known set is cleared past this many
}  // namespace

struct RedisTier::Job {
  TierPut obj;
  Id id;
  uint64_t bytes = 0;
};

std::string RedisTier::object_key(const ContentKey& key, TierKind kind) {
  return "rw:" + key.hex() + "." + tier_kind_name(kind);
}

std::string RedisTier::index_key(const ContentKey& page_start) {
  return "rw:" + page_start.hex() + ".idx";
}

RedisTier::RedisTier(const Options& opt)
    : opt_(opt),
      reader_(opt.endpoints, opt.timeout_ms),
      writer_client_(opt.endpoints, opt.timeout_ms) {
  opt.fingerprint.to_bytes(fp_bytes_);
  st_.enabled = true;
  st_.name = "redis";
}

std::unique_ptr<RedisTier> RedisTier::open(const Options& opt) {
  std::unique_ptr<RedisTier> t(new RedisTier(opt));
  {
    std::lock_guard<std::mutex> lock(t->read_mu_);
    // One command to learn the topology now; PING has no key, so ask for an absent one.
    auto r = t->reader_.run({{"EXISTS", "rw:hello"}});
    if (r.ok())
      t->say("redis tier: connected to " + opt.endpoints[0].str() +
             (t->reader_.cluster() ? " (cluster)" : " (standalone)"));
    else
      t->call_failed(r.error_message());
  }
  t->thread_ = std::thread([p = t.get()] { p->writer(); });
  return t;
}

RedisTier::~RedisTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RedisTier::say(const std::string& line) const {
  if (opt_.log) opt_.log(line);
}

bool RedisTier::may_call() {
  std::lock_guard<std::mutex> lock(mu_);
  return !down_ || now_s() >= retry_at_;
}

void RedisTier::call_failed(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++st_.errors;
  backoff_ms_ =
      backoff_ms_ == 0 ? opt_.backoff_min_ms : std::min(opt_.backoff_max_ms, 2 * backoff_ms_);
  retry_at_ = now_s() + backoff_ms_ / 1e3;
  if (!down_) say("redis tier: " + why + "; caching locally only, retrying in the background");
  down_ = true;
  st_.down = true;
}

void RedisTier::call_ok() {
  std::lock_guard<std::mutex> lock(mu_);
  if (down_) {
    // Redis may have restarted empty: what it held is not known any more.
    known_.clear();
    ++st_.reconnects;
    say("redis tier: " + opt_.endpoints[0].str() + " answers again");
  }
  down_ = false;
  st_.down = false;
  backoff_ms_ = 0;
}

void RedisTier::remember_locked(const Id& id) {
  if (known_.size() >= kKnownCap) known_.clear();
  known_.insert(id);
}

bool RedisTier::contains(const ContentKey& key, TierKind kind) const {
  const Id id{key, kind};
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.count(id) > 0 || known_.count(id) > 0;
}

void RedisTier::put(TierPut obj) {
  auto job = std::make_shared<Job>();
  job->id = Id{obj.key, obj.kind};
  job->bytes = obj.layout.total();
  job->obj = std::move(obj);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_.count(job->id) || known_.count(job->id)) return;
    const bool skip = down_ && now_s() < retry_at_;
    if (skip || st_.queued_bytes + job->bytes > opt_.queue_bytes) {
      ++st_.dropped;
      return;
    }
    queued_[job->id] = job;
    queue_.push_back(job);
    ++st_.queued;
    st_.queued_bytes += job->bytes;
  }
  cv_.notify_one();
}

void RedisTier::writer() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    std::vector<std::shared_ptr<Job>> batch;
    while (!queue_.empty() && batch.size() < kBatchObjects) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    sending_ = true;
    const bool skip = down_ && now_s() < retry_at_;
    lock.unlock();
    if (!skip) send_batch(batch);
    lock.lock();
    if (skip) st_.dropped += static_cast<int64_t>(batch.size());
    for (const auto& j : batch) {
      queued_.erase(j->id);
      --st_.queued;
      st_.queued_bytes -= j->bytes;
    }
    sending_ = false;
    if (queue_.empty()) done_cv_.notify_all();
    // At exit with Redis down, what is left is dropped rather than waited for.
    if (stop_ && down_) {
      st_.dropped += static_cast<int64_t>(queue_.size());
      queue_.clear();
      queued_.clear();
      st_.queued = 0;
      st_.queued_bytes = 0;
      done_cv_.notify_all();
    }
  }
  done_cv_.notify_all();
}

// EXISTS for every object, then SET (and SADD to the page's checkpoint index) for the missing.
void RedisTier::send_batch(std::vector<std::shared_ptr<Job>>& batch) {
  const double t0 = now_s();
  std::vector<RedisClient::Command> cmds;
  for (const auto& j : batch) cmds.push_back({"EXISTS", object_key(j->id.key, j->id.kind)});
  const int64_t r0 = writer_client_.redirects();
  auto ex = writer_client_.run(cmds);
  if (!ex.ok()) {
    call_failed(ex.error_message());
    std::lock_guard<std::mutex> lock(mu_);
    st_.dropped += static_cast<int64_t>(batch.size());
    return;
  }
  call_ok();
  cmds.clear();
  std::vector<size_t> sent;  // batch index of each SET
  std::vector<size_t> first_cmd;
  int64_t existing = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const RespValue& r = ex.value()[i];
    if (r.type == RespValue::Type::Integer && r.integer == 1) {
      ++existing;
      std::lock_guard<std::mutex> lock(mu_);
      remember_locked(batch[i]->id);
      continue;
    }
    const TierPut& o = batch[i]->obj;
    const auto hd = tier_header_of(o, opt_.fingerprint, opt_.kv_dtype);
    std::string value(reinterpret_cast<const char*>(hd.data()), hd.size());
    for (const auto& part : o.parts)
      value.append(reinterpret_cast<const char*>(part.data()), part.size());
    first_cmd.push_back(cmds.size());
    sent.push_back(i);
    RedisClient::Command set = {"SET", object_key(o.key, o.kind), std::move(value)};
    if (opt_.ttl_s > 0) {
      set.push_back("EX");
      set.push_back(std::to_string(opt_.ttl_s));
    }
    cmds.push_back(std::move(set));
  }
  // Each checkpoint joins the index of the page it lies in (TierPut::page_start).
  std::vector<size_t> idx_cmd(batch.size(), SIZE_MAX);
  for (size_t i : sent) {
    const TierPut& o = batch[i]->obj;
    if (o.kind != TierKind::Checkpoint || o.page_tokens <= 0) continue;
    idx_cmd[i] = cmds.size();
    cmds.push_back({"SADD", index_key(o.page_start), std::to_string(o.pos % o.page_tokens)});
    if (opt_.ttl_s > 0)
      cmds.push_back({"EXPIRE", index_key(o.page_start), std::to_string(opt_.ttl_s)});
  }
  uint64_t bytes = 0;
  int64_t writes = 0, errors = 0;
  std::string err;
  if (!cmds.empty()) {
    auto rs = writer_client_.run(cmds);
    if (!rs.ok()) {
      call_failed(rs.error_message());
      std::lock_guard<std::mutex> lock(mu_);
      st_.dropped += static_cast<int64_t>(sent.size());
      st_.existing += existing;
      return;
    }
    for (size_t k = 0; k < sent.size(); ++k) {
      const size_t i = sent[k];
      const RespValue& r = rs.value()[first_cmd[k]];
      bool ok = !r.is_error();
      if (ok && idx_cmd[i] != SIZE_MAX && rs.value()[idx_cmd[i]].is_error()) ok = false;
      if (!ok) {
        ++errors;
        err = r.is_error() ? r.str : rs.value()[idx_cmd[i]].str;
        continue;
      }
      ++writes;
      bytes += cmds[first_cmd[k]][2].size();
      std::lock_guard<std::mutex> lock(mu_);
      remember_locked(batch[i]->id);
    }
  }
  redirects_ += writer_client_.redirects() - r0;
  std::lock_guard<std::mutex> lock(mu_);
  st_.existing += existing;
  st_.writes += writes;
  st_.bytes_written += bytes;
  st_.bytes += bytes;
  st_.objects = static_cast<int64_t>(known_.size());
  st_.write_errors += errors;
  st_.write_seconds += now_s() - t0;
  if (errors > 0 && err != last_write_error_)
    say("redis tier: a write failed: " + err + " (objects dropped; counted in write_errors)");
  last_write_error_ = errors > 0 ? err : std::string();
}

void RedisTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return queue_.empty() && !sending_; });
}

void RedisTier::probe(std::span<const ContentKey> prefix_keys, int64_t page_tokens, int64_t from) {
  if (page_tokens <= 0 || prefix_keys.size() < 2 || !may_call()) return;
  const int64_t last = static_cast<int64_t>(prefix_keys.size()) - 1;
  const double t0 = now_s();
  std::vector<RedisClient::Command> cmds;
  std::vector<int64_t> what;  // >= 0: index of page start j*pt; < 0: ~(page end)
  for (int64_t start = (std::max<int64_t>(from, 0) / page_tokens) * page_tokens; start <= last;
       start += page_tokens) {
    cmds.push_back({"SMEMBERS", index_key(prefix_keys[static_cast<size_t>(start)])});
    what.push_back(start);
    const int64_t end = start + page_tokens;
    if (end <= last) {
      cmds.push_back({"EXISTS", object_key(prefix_keys[static_cast<size_t>(end)], TierKind::Page)});
      what.push_back(~end);
    }
  }
  std::unique_lock<std::mutex> rl(read_mu_);
  const int64_t r0 = reader_.redirects();
  auto rs = reader_.run(cmds);
  redirects_ += reader_.redirects() - r0;
  rl.unlock();
  if (!rs.ok()) {
    call_failed(rs.error_message());
    std::lock_guard<std::mutex> lock(mu_);
    ++st_.probes;
    st_.probe_seconds += now_s() - t0;
    return;
  }
  call_ok();
  std::lock_guard<std::mutex> lock(mu_);
  ++st_.probes;
  for (size_t i = 0; i < what.size(); ++i) {
    const RespValue& r = rs.value()[i];
    if (what[i] < 0) {
      if (r.type == RespValue::Type::Integer && r.integer == 1)
        remember_locked(Id{prefix_keys[static_cast<size_t>(~what[i])], TierKind::Page});
      continue;
    }
    if (r.type != RespValue::Type::Array) continue;
    for (const RespValue& m : r.elements) {
      // Members are offsets in the page, in decimal; anything else is ignored.
      if (m.type != RespValue::Type::String || m.str.empty() || m.str.size() > 6) continue;
      int64_t off = 0;
      bool digits = true;
      for (char c : m.str) {
        if (c < '0' || c > '9') digits = false;
        off = off * 10 + (c - '0');
      }
      const int64_t q = what[i] + off;
      if (!digits || off >= page_tokens || q <= 0 || q > last) continue;
      remember_locked(Id{prefix_keys[static_cast<size_t>(q)], TierKind::Checkpoint});
    }
  }
  st_.objects = static_cast<int64_t>(known_.size());
  st_.probe_seconds += now_s() - t0;
}

bool RedisTier::get(const ContentKey& key, TierKind kind, const TierLayout& layout,
                    std::span<std::byte> out) {
  REWIND_CHECK(out.size() == layout.total());
  const Id id{key, kind};
  const double t0 = now_s();
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = queued_.find(id);
    if (it != queued_.end()) {
      // Still queued: the bytes are in memory.
      std::shared_ptr<Job> job = it->second;
      lock.unlock();
      if (!copy_payload(job->obj, layout, out)) return false;
      lock.lock();
      ++st_.reads;
      return true;
    }
  }
  auto miss = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    known_.erase(id);
    ++st_.get_misses;
    st_.read_seconds += now_s() - t0;
    return false;
  };
  if (!may_call()) return miss();
  const std::string rkey = object_key(key, kind);
  std::unique_lock<std::mutex> rl(read_mu_);
  const int64_t r0 = reader_.redirects();
  auto rs = reader_.run({{"GET", rkey}});
  redirects_ += reader_.redirects() - r0;
  rl.unlock();
  if (!rs.ok()) {
    call_failed(rs.error_message());
    return miss();
  }
  call_ok();
  const RespValue& r = rs.value()[0];
  if (r.type != RespValue::Type::String) return miss();  // absent (evicted), or an error reply
  const TierExpect want = expect_object(opt_.fingerprint, opt_.kv_dtype, key, kind, layout);
  const TierParse p =
      parse_tier_file(std::as_bytes(std::span<const char>(r.str.data(), r.str.size())), want);
  if (!p.ok()) {
    const bool foreign = tier_file_error_foreign(p.error);
    say("redis tier: " + rkey + ": " + p.message +
        (foreign ? " (skipped)" : " (deleted; its prefix is recomputed)"));
    if (!foreign) {
      std::lock_guard<std::mutex> lk(read_mu_);
      (void)reader_.run({{"DEL", rkey}});
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++(foreign ? st_.foreign : st_.corrupt);
    }
    return miss();
  }
  std::memcpy(out.data(), r.str.data() + kTierHeaderBytes, out.size());
  std::lock_guard<std::mutex> lock(mu_);
  ++st_.reads;
  st_.bytes_read += r.str.size();
  st_.read_seconds += now_s() - t0;
  return true;
}

void RedisTier::evict(const ContentKey& key, TierKind kind) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    known_.erase(Id{key, kind});
  }
  if (!may_call()) return;
  std::lock_guard<std::mutex> rl(read_mu_);
  auto rs = reader_.run({{"DEL", object_key(key, kind)}});
  if (!rs.ok()) call_failed(rs.error_message());
}

TierStats RedisTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  TierStats s = st_;
  s.objects = static_cast<int64_t>(known_.size());
  s.redirects = redirects_.load();
  s.down = down_;
  return s;
}

}  // namespace rw
