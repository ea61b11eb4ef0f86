// `rewind serve --cache-redis`: the shared tier end to end, on the built binary (REWIND_BINARY),
// the tiny seeded model and redis-server processes the tests start on free ports (never fixed
// ones). Two replicas share one Redis: a conversation served by A, its edited turn sent to a
// fresh B, which resumes from A's snapshot and answers exactly as a cold server does (greedy text
// and the log-probabilities of every token with its top alternatives, the first token's
// included). Faults: a flipped byte in every Redis value, values written by another model, Redis
// paused (timeouts), killed and restarted under a running server; and a three-node Redis Cluster.
// Without redis-server and redis-cli the tests skip, or fail where the CI variable is set.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "loopback.h"
#include "require.h"
#include "rewind/cache/redis_client.h"
#include "rewind/cache/resp.h"
#include "rewind/cache/tier_format.h"
#include "scratch.h"
#include "test_util.h"
#include "tier_server.h"

namespace rw {
namespace {

using namespace test::tier;

// ---- redis-server processes ----

// The path of a program on PATH, or "".
std::string which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t at = 0;
  while (at <= p.size()) {
    const size_t colon = p.find(':', at);
    const std::string dir =
        p.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    const std::string f = dir + "/" + name;
    if (!dir.empty() && access(f.c_str(), X_OK) == 0) return f;
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  return "";
}

// Ends the test when redis-server or redis-cli is missing: a failure in CI, a skip elsewhere.
#define REQUIRE_REDIS()                                                                \
  REWIND_REQUIRE(which("redis-server").empty() || which("redis-cli").empty()           \
                     ? "redis-server or redis-cli is not installed (scripts/setup.sh " \
                       "installs redis-server and redis-tools)"                        \
                     : "")

// A free port (the kernel's choice) whose cluster bus port (+10000) is free too.
int free_port() {
  for (int i = 0; i < 100; ++i) {
    const int p = test::unused_port();
    if (p > 0 && p < 55000 && test::unused_port(p + 10000) == p + 10000) return p;
  }
  return 0;
}

std::string cli(int port, const std::string& args) {
  int rc = 0;
  return test::run_command(
      which("redis-cli") + " -p " + std::to_string(port) + " " + args + " 2>&1", &rc);
}

class RedisServer {
 public:
  // Starts redis-server on `port` (0: a free one), without persistence.
  static std::unique_ptr<RedisServer> start(int port = 0, bool cluster = false) {
    auto r = std::unique_ptr<RedisServer>(new RedisServer());
    for (int attempt = 0; attempt < 5; ++attempt) {
      r->port_ = port ? port : free_port();
      const std::string dir = tmp_path("redis");
      fs::create_directories(dir);
      std::vector<std::string> args = {which("redis-server"),
                                       "--port",
                                       std::to_string(r->port_),
                                       "--bind",
                                       "127.0.0.1",
                                       "--save",
                                       "",
                                       "--appendonly",
                                       "no",
                                       "--dir",
                                       dir};
      if (cluster)
        for (const char* a : {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "3000"})
          args.push_back(a);
      r->log_ = dir + "/log";
      r->pid_ = test::spawn_logged(args, r->log_);
      for (int i = 0; i < 250; ++i) {
        if (cli(r->port_, "ping").find("PONG") != std::string::npos) return r;
        int st = 0;
        if (waitpid(r->pid_, &st, WNOHANG) == r->pid_) {
          r->pid_ = -1;
          break;  // the port was taken after all: try another
        }
        std::this_thread::sleep_for(20ms);
      }
      r->kill9();
      if (port) break;
    }
    ADD_FAILURE() << "redis-server did not start: " << test::read_file(r->log_);
    return nullptr;
  }
  ~RedisServer() { kill9(); }
  void kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void pause() { kill(pid_, SIGSTOP); }
  void resume() { kill(pid_, SIGCONT); }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  RedisServer() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_;
};

// Three cluster nodes, all 16384 slots assigned, the cluster state ok on each.
struct RedisCluster {
  std::vector<std::unique_ptr<RedisServer>> nodes;
  std::string url() const {
    std::string u = "redis://";
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (i) u += ',';
      u += "127.0.0.1:";
      u += std::to_string(nodes[i]->port());
    }
    return u;
  }
  static std::unique_ptr<RedisCluster> start() {
    auto c = std::make_unique<RedisCluster>();
    std::string hosts;
    for (int i = 0; i < 3; ++i) {
      c->nodes.push_back(RedisServer::start(0, true));
      if (!c->nodes.back()) return nullptr;
      hosts += " 127.0.0.1:" + std::to_string(c->nodes.back()->port());
    }
    int rc = 0;
    const std::string out = test::run_command(which("redis-cli") + " --cluster create" + hosts +
                                                  " --cluster-replicas 0 --cluster-yes 2>&1",
                                              &rc);
    if (rc != 0) {
      ADD_FAILURE() << "redis-cli --cluster create failed: " << out;
      return nullptr;
    }
    for (int i = 0; i < 500; ++i) {
      bool ok = true;
      for (const auto& n : c->nodes)
        ok = ok && cli(n->port(), "cluster info").find("cluster_state:ok") != std::string::npos;
      if (ok) return c;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "the cluster did not reach state ok";
    return nullptr;
  }
};

// ---- rewind serve ----

// Replica A serves the original chat and publishes it.
void publish_original(const std::string& url) {
  auto a = Server::start({"--cache-redis", url});
  ASSERT_NE(a, nullptr);
  ask(*a, chat(kThird));
  EXPECT_TRUE(writes_settle(*a, "redis", 10)) << tier_stats(*a, "redis").dump();
  EXPECT_EQ(a->stop(SIGTERM), 0) << a->log();
}

// Every value of kind `ext` ("ckpt", "page", "*") in a standalone Redis, rewritten by `edit`;
// their keys.
std::vector<std::string> rewrite_values(int port, const std::string& ext,
                                        const std::function<void(std::string&)>& edit) {
  RedisClient c({{"127.0.0.1", port}}, 2000);
  auto keys = c.run({{"KEYS", "rw:*." + ext}});
  EXPECT_TRUE(keys.ok()) << keys.error_message();
  std::vector<std::string> out;
  if (!keys.ok()) return out;
  for (const RespValue& k : keys.value()[0].elements) {
    if (k.str.ends_with(".idx")) continue;
    auto v = c.run({{"GET", k.str}});
    EXPECT_TRUE(v.ok());
    std::string bytes = v.value()[0].str;
    edit(bytes);
    EXPECT_TRUE(c.run({{"SET", k.str, bytes}}).ok());
    out.push_back(k.str);
  }
  return out;
}

TEST(SharedCache, TwoReplicasShareSnapshots) {
  REQUIRE_REDIS();
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  publish_original(redis->url());
  auto b = Server::start({"--cache-redis", redis->url()});
  ASSERT_NE(b, nullptr);
  expect_edited_answer(*b, "redis");
  const json d = tier_stats(*b, "redis");
  EXPECT_EQ(d["errors"]["connection"].get<int>(), 0) << d.dump();
  EXPECT_EQ(d["down"].get<bool>(), false);
  // /metrics carries the same figures.
  const std::string m = curl(*b, "GET", "/metrics").body;
  EXPECT_NE(m.find("rewind_cache_redis_hits_total"), std::string::npos) << m;
  EXPECT_NE(m.find("rewind_cache_redis_read_bytes_total"), std::string::npos);
  EXPECT_NE(m.find("rewind_cache_redis_errors_total 0"), std::string::npos);
  EXPECT_NE(m.find("rewind_cache_tier_resumes_total 1"), std::string::npos);
  // B published what it computed beyond A's snapshot, not what it read from Redis.
  EXPECT_TRUE(writes_settle(*b, "redis", 1));
  EXPECT_LT(tier_stats(*b, "redis")["writes"].get<int>(),
            tier_stats(*b, "redis")["known_objects"].get<int>());
}

TEST(SharedCache, WithADiskTierBelowRam) {
  REQUIRE_REDIS();
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  publish_original(redis->url());
  // B with its own disk tier too: the Redis hit is read, then copied onto B's disk.
  const std::string dir = tmp_path("cache");
  auto b = Server::start({"--cache-redis", redis->url(), "--cache-dir", dir});
  ASSERT_NE(b, nullptr);
  expect_edited_answer(*b, "redis");
  int disk_writes = 0;
  for (int i = 0; i < 200 && disk_writes == 0; ++i) {
    disk_writes = curl(*b, "GET", "/v1/cache").j()["disk"]["writes"].get<int>();
    if (disk_writes == 0) std::this_thread::sleep_for(10ms);
  }
  EXPECT_GT(disk_writes, 0);
  // The resume came from Redis: counted over the tiers and as Redis reads, not as a disk hit.
  const std::string m = curl(*b, "GET", "/metrics").body;
  EXPECT_NE(m.find("rewind_cache_tier_resumes_total 1"), std::string::npos) << m;
  EXPECT_EQ(m.find("rewind_cache_disk_hits_total"), std::string::npos) << m;
  EXPECT_NE(m.find("rewind_cache_disk_reads_total 0"), std::string::npos) << m;
}

TEST(SharedCache, FlippedBytesInRedisValuesAreRecomputed) {
  REQUIRE_REDIS();
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  publish_original(redis->url());
  const auto damaged = rewrite_values(redis->port(), "ckpt", [](std::string& v) {
    if (v.size() > kTierHeaderBytes + 5) v[kTierHeaderBytes + 5] ^= 0x10;
  });
  ASSERT_GT(damaged.size(), 3u);
  auto b = Server::start({"--cache-redis", redis->url()});
  ASSERT_NE(b, nullptr);
  expect_edited_answer(*b, nullptr);
  const json d = tier_stats(*b, "redis");
  EXPECT_GE(d["errors"]["corrupt"].get<int>(), 1) << d.dump();
  EXPECT_NE(b->log().find("checksum mismatch"), std::string::npos) << b->log();
  EXPECT_NE(b->log().find("deleted"), std::string::npos) << b->log();
  EXPECT_TRUE(b->alive());
  // A damaged value met is deleted (then B, having recomputed the prefix, publishes it again).
  RedisClient c({{"127.0.0.1", redis->port()}}, 2000);
  int replaced = 0;
  for (const std::string& k : damaged) {
    auto r = c.run({{"GET", k}});
    ASSERT_TRUE(r.ok());
    const std::string& v = r.value()[0].str;
    const auto bytes = std::as_bytes(std::span<const char>(v.data(), v.size()));
    TierExpect want;
    const TierParse h = parse_tier_header(bytes, v.size(), want);
    want.fingerprint = h.header.fingerprint;
    want.kv_dtype = h.header.kv_dtype;
    replaced += r.value()[0].type == RespValue::Type::Nil || parse_tier_file(bytes, want).ok();
  }
  EXPECT_GE(replaced, 1);
}

TEST(SharedCache, ValuesOfAnotherModelAreSkipped) {
  REQUIRE_REDIS();
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  publish_original(redis->url());
  const size_t n = rewrite_values(redis->port(), "*", [](std::string& v) {
                     TierExpect any;
                     TierParse h = parse_tier_header(
                         std::as_bytes(std::span<const char>(v.data(), v.size())), v.size(), any);
                     ASSERT_EQ(h.error, TierFileError::Fingerprint);
                     h.header.fingerprint.lo ^= 0x1234;
                     const auto hd = encode_tier_header(h.header);
                     std::memcpy(v.data(), hd.data(), hd.size());
                   }).size();
  ASSERT_GT(n, 10u);
  auto b = Server::start({"--cache-redis", redis->url()});
  ASSERT_NE(b, nullptr);
  expect_edited_answer(*b, nullptr);
  const json d = tier_stats(*b, "redis");
  EXPECT_GE(d["errors"]["foreign"].get<int>(), 1) << d.dump();
  EXPECT_NE(b->log().find("another model"), std::string::npos) << b->log();
}

TEST(SharedCache, RedisPausedKilledAndRestartedUnderARunningServer) {
  REQUIRE_REDIS();
  auto redis = RedisServer::start();
  ASSERT_NE(redis, nullptr);
  const int port = redis->port();
  auto a = Server::start({"--cache-redis", redis->url(), "--cache-redis-timeout", "200"});
  ASSERT_NE(a, nullptr);
  // Paused: every call times out; the answer is a cold one and correct.
  redis->pause();
  expect_edited_answer(*a, nullptr);
  json d = tier_stats(*a, "redis");
  EXPECT_GE(d["errors"]["connection"].get<int>(), 1) << d.dump();
  EXPECT_TRUE(d["down"].get<bool>());
  redis->resume();
  // Killed: the same, and a fresh replica starts and serves without it.
  redis->kill9();
  ask(*a, chat(kThird));
  EXPECT_TRUE(a->alive());
  {
    auto c = Server::start({"--cache-redis", "redis://127.0.0.1:" + std::to_string(port)});
    ASSERT_NE(c, nullptr);
    expect_edited_answer(*c, nullptr);
  }
  const std::string log = a->log();
  EXPECT_NE(log.find("caching locally only"), std::string::npos) << log;
  // Restarted (empty): A reconnects after its backoff and publishes again; a fresh replica
  // resumes from what it published.
  redis = RedisServer::start(port);
  ASSERT_NE(redis, nullptr);
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    std::this_thread::sleep_for(100ms);
    ask(*a, chat(kThird));  // an exact repeat: from RAM, and published again once Redis is up
    d = tier_stats(*a, "redis");
    back = !d["down"].get<bool>() && d["reconnects"].get<int>() >= 1;
  }
  ASSERT_TRUE(back) << d.dump();
  EXPECT_TRUE(writes_settle(*a, "redis", 10)) << tier_stats(*a, "redis").dump();
  EXPECT_NE(a->log().find("answers again"), std::string::npos);
  auto b = Server::start({"--cache-redis", redis->url()});
  ASSERT_NE(b, nullptr);
  expect_edited_answer(*b, "redis");
}

TEST(SharedCache, ThreeNodeCluster) {
  REQUIRE_REDIS();
  auto cluster = RedisCluster::start();
  ASSERT_NE(cluster, nullptr);
  publish_original(cluster->url());
  // The objects are spread over the three masters by key slot.
  for (const auto& n : cluster->nodes)
    EXPECT_GT(std::atoi(cli(n->port(), "dbsize").c_str()), 0) << "node " << n->port();
  // A replica given one node only learns the others from CLUSTER SLOTS.
  auto b = Server::start({"--cache-redis", cluster->nodes[1]->url()});
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b->log().find("(cluster)"), std::string::npos) << b->log();
  // The slots holding the first node's keys move, with the keys, to the second: B's map is stale.
  // One slot is left half-way (migrating / importing, its keys moved already), where Redis
  // answers ASK; the others are handed over, where it answers MOVED.
  auto line = [](std::string v) { return v.substr(0, v.find_first_of("\r\n")); };
  const int p0 = cluster->nodes[0]->port(), p1 = cluster->nodes[1]->port();
  const std::string id0 = line(cli(p0, "cluster myid")), id1 = line(cli(p1, "cluster myid"));
  std::map<int, std::vector<std::string>> slots;
  {
    // redis-cli (not RedisClient, which would send KEYS to the slot owner of "rw:*").
    const std::string keys = cli(p0, "keys 'rw:*'");
    size_t at = 0;
    while (at < keys.size()) {
      const size_t nl = keys.find('\n', at);
      const std::string k = keys.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      if (k.rfind("rw:", 0) == 0) slots[key_slot(k)].push_back(k);
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  ASSERT_GE(slots.size(), 2u);
  bool first = true;
  for (const auto& [slot, keys] : slots) {
    const std::string sl = std::to_string(slot);
    EXPECT_EQ(line(cli(p1, "cluster setslot " + sl + " importing " + id0)), "OK");
    EXPECT_EQ(line(cli(p0, "cluster setslot " + sl + " migrating " + id1)), "OK");
    std::string ks;
    for (const auto& k : keys) ks += " " + k;
    EXPECT_EQ(line(cli(p0, "migrate 127.0.0.1 " + std::to_string(p1) + " '' 0 5000 keys" + ks)),
              "OK");
    if (!first) {
      for (const auto& n : cluster->nodes)
        EXPECT_EQ(line(cli(n->port(), "cluster setslot " + sl + " node " + id1)), "OK");
    }
    first = false;
  }
  EXPECT_EQ(std::atoi(cli(p0, "dbsize").c_str()), 0);
  expect_edited_answer(*b, "redis");
  EXPECT_GE(tier_stats(*b, "redis")["redirects"].get<int>(), 1) << tier_stats(*b, "redis").dump();
}

TEST(SharedCache, BadAddressesFailAtStart) {
  int rc = 0;
  const std::string bin = REWIND_BINARY;
  for (const char* bad : {"127.0.0.1:6379", "redis://", "redis://h:0", "redis://h:1,,"}) {
    const std::string out = test::run_command(
        bin + " serve --model " + model_dir() + " --port 0 --cache-redis '" + bad + "' 2>&1", &rc);
    EXPECT_NE(rc, 0) << bad;
    EXPECT_NE(out.find("--cache-redis"), std::string::npos) << out;
  }
  std::string out = test::run_command(
      bin + " serve --model " + model_dir() + " --port 0 --cache-redis-ttl 5 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("need --cache-redis"), std::string::npos) << out;
  out = test::run_command(
      bin + " serve --model " + model_dir() + " --port 0 --cache-redis redis://h:1 --no-cache 2>&1",
      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("drop --no-cache"), std::string::npos) << out;
}

}  // namespace
}  // namespace rw
