#include "rewind/cache/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>

namespace rw {

struct RedisClient::Ctx {
  redisContext* c = nullptr;
  RespGuard guard;
  ~Ctx() {
    if (c) redisFree(c);
  }
};

namespace {
timeval tv_of(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

std::string ctx_error(const redisContext* c) {
  if (!c) return "out of memory";
  if (c->reader && c->reader->privdata) {
    const auto* g = static_cast<const RespGuard*>(c->reader->privdata);
    if (g->refused_elements) return g->message();
  }
  std::string e = c->errstr;
  // A receive timeout reads as EAGAIN ("Resource temporarily unavailable").
  if (e.find("temporarily unavailable") != std::string::npos) return "timed out";
  return e;
}

void append(redisContext* c, const RedisClient::Command& cmd) {
  std::vector<const char*> argv;
  std::vector<size_t> len;
  for (const auto& a : cmd) {
    argv.push_back(a.data());
    len.push_back(a.size());
  }
  redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data());
}

Result<RespValue> read_reply(redisContext* c, const RedisEndpoint& e) {
  void* r = nullptr;
  if (redisGetReply(c, &r) != REDIS_OK || !r)
    return make_error("redis " + e.str() + ": " + ctx_error(c));
  RespValue v = resp_from_reply(static_cast<redisReply*>(r));
  freeReplyObject(r);
  return v;
}
}  // namespace

RedisClient::RedisClient(std::vector<RedisEndpoint> seeds, int timeout_ms)
    : seeds_(std::move(seeds)), timeout_ms_(std::max(1, timeout_ms)) {}

RedisClient::~RedisClient() = default;

void RedisClient::disconnect() {
  nodes_.clear();
  masters_.clear();
  slot_owner_.clear();
}

Result<redisContext*> RedisClient::node(const RedisEndpoint& e) {
  const std::string name = e.str();
  auto it = nodes_.find(name);
  if (it != nodes_.end()) return it->second->c;
  auto ctx = std::make_unique<Ctx>();
  ctx->c = redisConnectWithTimeout(e.host.c_str(), e.port, tv_of(timeout_ms_));
  if (!ctx->c || ctx->c->err) return make_error("redis " + name + ": " + ctx_error(ctx->c));
  resp_guard_reader(ctx->c->reader, &ctx->guard);
  if (redisSetTimeout(ctx->c, tv_of(timeout_ms_)) != REDIS_OK)
    return make_error("redis " + name + ": cannot set the timeout");
  redisEnableKeepAlive(ctx->c);
  redisContext* c = ctx->c;
  nodes_[name] = std::move(ctx);
  return c;
}

int16_t RedisClient::master_index(const RedisEndpoint& e) {
  auto at = std::find(masters_.begin(), masters_.end(), e);
  if (at == masters_.end()) at = masters_.insert(masters_.end(), e);
  return static_cast<int16_t>(at - masters_.begin());
}

Status RedisClient::refresh_slots(redisContext* c, const RedisEndpoint& self) {
  append(c, {"CLUSTER", "SLOTS"});
  auto r = read_reply(c, self);
  if (!r.ok()) return r.error();
  if (r->is_error() && r->str.find("cluster support disabled") != std::string::npos) {
    cluster_ = false;
    standalone_ = self;
    return Ok{};
  }
  auto ranges = parse_cluster_slots(r.value(), self);
  if (!ranges.ok()) return make_error("redis " + self.str() + ": " + ranges.error_message());
  cluster_ = true;
  masters_.clear();
  slot_owner_.assign(kClusterSlots, -1);
  for (const SlotRange& s : ranges.value()) {
    const int16_t idx = master_index(s.master);
    for (int k = s.lo; k <= s.hi; ++k) slot_owner_[static_cast<size_t>(k)] = idx;
  }
  slots_stale_ = false;
  return Ok{};
}

Status RedisClient::connect() {
  if (!nodes_.empty() && !slots_stale_) return Ok{};
  std::string why;
  // A stale slot map is refreshed through a node already connected, else through a seed.
  std::vector<RedisEndpoint> order;
  for (const auto& [name, ctx] : nodes_) {
    (void)ctx;
    for (const auto& m : masters_)
      if (m.str() == name) order.push_back(m);
  }
  for (const auto& s : seeds_) order.push_back(s);
  for (const RedisEndpoint& e : order) {
    auto c = node(e);
    if (!c.ok()) {
      why = c.error_message();
      nodes_.erase(e.str());
      continue;
    }
    Status st = refresh_slots(c.value(), e);
    if (st.ok()) return st;
    why = st.error_message();
    nodes_.erase(e.str());
  }
  disconnect();
  return make_error(why.empty() ? "redis: no address" : why);
}

Result<RespValue> RedisClient::one(const RedisEndpoint& e, const Command& cmd, bool asking) {
  auto c = node(e);
  if (!c.ok()) return c.error();
  if (asking) append(c.value(), {"ASKING"});
  append(c.value(), cmd);
  if (asking) {
    auto a = read_reply(c.value(), e);
    if (!a.ok()) return a;
  }
  return read_reply(c.value(), e);
}

Result<std::vector<RespValue>> RedisClient::run(const std::vector<Command>& cmds) {
  auto fail = [&](const Error& err) -> Result<std::vector<RespValue>> {
    disconnect();
    return err;
  };
  if (Status st = connect(); !st.ok()) return fail(st.error());
  std::vector<RespValue> out(cmds.size());
  // Group by node (standalone: one group), keeping the order inside each.
  std::map<int, std::vector<size_t>> groups;
  for (size_t i = 0; i < cmds.size(); ++i) {
    int owner = 0;
    if (cluster_) {
      REWIND_CHECK(cmds[i].size() >= 2);
      owner = slot_owner_[static_cast<size_t>(key_slot(cmds[i][1]))];
    }
    groups[owner].push_back(i);
  }
  for (const auto& [owner, idx] : groups) {
    if (cluster_ && owner < 0) return fail(make_error("redis cluster: a slot has no owner"));
    const RedisEndpoint e = cluster_ ? masters_[static_cast<size_t>(owner)] : standalone_;
    auto c = node(e);
    if (!c.ok()) return fail(c.error());
    for (size_t i : idx) append(c.value(), cmds[i]);
    for (size_t i : idx) {
      auto r = read_reply(c.value(), e);
      if (!r.ok()) return fail(r.error());
      out[i] = std::move(r).value();
    }
  }
  // Redirections, one command at a time.
  for (size_t i = 0; i < cmds.size(); ++i) {
    for (int hop = 0; hop < 5 && out[i].is_error(); ++hop) {
      auto rd = parse_redirect(out[i].str);
      if (!rd.ok()) return fail(rd.error());
      if (rd->kind == RedisRedirect::Kind::None) break;
      ++redirects_;
      const bool ask = rd->kind == RedisRedirect::Kind::Ask;
      if (!ask) {
        slots_stale_ = true;
        const int16_t idx = master_index(rd->to);
        if (!slot_owner_.empty()) slot_owner_[static_cast<size_t>(rd->slot)] = idx;
      }
      auto r = one(rd->to, cmds[i], ask);
      if (!r.ok()) return fail(r.error());
      out[i] = std::move(r).value();
    }
  }
  if (slots_stale_) {
    // Learn the new map now; a failure fails the call like any connection error.
    if (Status st = connect(); !st.ok()) return fail(st.error());
  }
  return out;
}

}  // namespace rw
