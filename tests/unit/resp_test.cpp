// The pure parts of the shared tier's Redis client (cache/resp.h): RESP parsing (through hiredis's
// reader) with malformed replies, CRC16 key slots against Redis Cluster's published values, MOVED
// and ASK parsing, the CLUSTER SLOTS reply and the redis:// address list; and the shared tier
// against an address where nothing listens: misses and dropped puts, never a failure.
#include "rewind/cache/resp.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "loopback.h"
#include "rewind/cache/redis_client.h"
#include "rewind/cache/redis_tier.h"

namespace rw {
namespace {

TEST(Resp, ParsesEveryReplyType) {
  auto s = resp_parse("+OK\r\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->type, RespValue::Type::Status);
  EXPECT_EQ(s->str, "OK");
  auto e = resp_parse("-MOVED 1 a:2\r\n");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->is_error());
  EXPECT_EQ(e->str, "MOVED 1 a:2");
  auto i = resp_parse(":-42\r\n");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->integer, -42);
  auto b = resp_parse(std::string("$5\r\na\0b\r\n\r\n", 11));
  ASSERT_TRUE(b.ok()) << b.error_message();
  EXPECT_EQ(b->str, std::string("a\0b\r\n", 5)) << "binary-safe bulk strings";
  auto n = resp_parse("$-1\r\n");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->type, RespValue::Type::Nil);
  auto a = resp_parse("*3\r\n:1\r\n*1\r\n$1\r\nx\r\n*-1\r\n");
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->elements.size(), 3u);
  EXPECT_EQ(a->elements[1].elements[0].str, "x");
  EXPECT_EQ(a->elements[2].type, RespValue::Type::Nil);
}

TEST(Resp, MalformedRepliesAreErrors) {
  for (const char* bad : {"", "+OK", "$5\r\nab\r\n", "*2\r\n:1\r\n", "?x\r\n", ":12a\r\n",
                          "$x\r\nab\r\n", "*x\r\n", "+OK\r\n+OK\r\n", ":1\r\njunk"}) {
    auto r = resp_parse(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "'";
  }
}

TEST(Resp, HugeArrayCountsAreRefusedBeforeAllocating) {
  // Found by fuzz_resp: hiredis would calloc 700710207 pointers (5.6 GB) for the count alone.
  auto r = resp_parse("*2\r\n*700710207\r\n$0\r\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("700710207 elements"), std::string::npos) << r.error_message();
  auto nested = resp_parse("*1\r\n*1\r\n*65537\r\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.error_message().find("65537 elements"), std::string::npos);
  std::string at_limit = "*65536\r\n";
  for (int i = 0; i < kMaxRespElements; ++i) at_limit += ":1\r\n";
  auto ok = resp_parse(at_limit);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(ok->elements.size(), 65536u);
}

TEST(ClusterSlot, Crc16AndSlotsMatchRedis) {
  // The check value of CRC16/XMODEM and the examples of the Redis Cluster specification.
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(crc16_xmodem(""), 0);
  EXPECT_EQ(key_slot("123456789"), 0x31C3 & 16383);
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("{user1000}.followers"), key_slot("user1000"));
  // An empty tag hashes the whole key; only the first '{' opens a tag.
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16_xmodem("foo{}{bar}") & 16383);
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
  EXPECT_EQ(key_slot("{"), crc16_xmodem("{") & 16383);
  for (const std::string k : {"a", "rw:0123456789abcdef0123456789abcdef.page", "\xff\xfe"})
    EXPECT_LT(key_slot(k), kClusterSlots);
}

TEST(ClusterSlot, RedirectionsParse) {
  auto m = resp_parse("-MOVED 3999 127.0.0.1:6381\r\n");
  ASSERT_TRUE(m.ok());
  auto r = parse_redirect(m->str);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RedisRedirect::Kind::Moved);
  EXPECT_EQ(r->slot, 3999);
  EXPECT_EQ(r->to, (RedisEndpoint{"127.0.0.1", 6381}));
  r = parse_redirect("ASK 16383 [::1]:7000");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RedisRedirect::Kind::Ask);
  EXPECT_EQ(r->slot, 16383);
  EXPECT_EQ(r->to, (RedisEndpoint{"::1", 7000}));
  r = parse_redirect("ERR unknown command");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RedisRedirect::Kind::None);
  r = parse_redirect("OOM command not allowed when used memory > 'maxmemory'.");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RedisRedirect::Kind::None);
  for (const char* bad : {"MOVED ", "MOVED 12", "MOVED abc h:1", "MOVED 16384 h:1", "MOVED -1 h:1",
                          "MOVED 1 host", "MOVED 1 host:0", "MOVED 1 host:65536", "ASK 1 :80",
                          "ASK 1 h:80x", "MOVED 1  h:1", "ASK 99999999999999999999 h:1"})
    EXPECT_FALSE(parse_redirect(bad).ok()) << bad;
}

TEST(ClusterSlot, ClusterSlotsReply) {
  // Three masters, one with a replica; the third's host empty (the node that answered).
  const std::string ok =
      "*3\r\n"
      "*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
      "*4\r\n:5461\r\n:10922\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n*2\r\n$9\r\n127.0.0.1\r\n:"
      "7004\r\n"
      "*3\r\n:10923\r\n:16383\r\n*2\r\n$0\r\n\r\n:7002\r\n";
  auto v = resp_parse(ok);
  ASSERT_TRUE(v.ok()) << v.error_message();
  auto s = parse_cluster_slots(v.value(), RedisEndpoint{"10.0.0.9", 7002});
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].lo, 0);
  EXPECT_EQ((*s)[0].hi, 5460);
  EXPECT_EQ((*s)[1].master, (RedisEndpoint{"127.0.0.1", 7001}));
  EXPECT_EQ((*s)[2].master, (RedisEndpoint{"10.0.0.9", 7002}));

  const std::vector<std::string> bad = {
      "-ERR This instance has cluster support disabled\r\n",
      ":1\r\n",
      "*0\r\n",                                                   // no slot served
      "*1\r\n:1\r\n",                                             // entry not an array
      "*1\r\n*2\r\n:0\r\n:1\r\n",                                 // no master
      "*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n",          // lo > hi
      "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",      // slot out of range
      "*1\r\n*3\r\n:-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",         // negative
      "*1\r\n*3\r\n$1\r\n0\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",     // slot as a string
      "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n$4\r\n7000\r\n",  // port as a string
      "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:0\r\n",          // port 0
      "*1\r\n*3\r\n:0\r\n:5\r\n*1\r\n$1\r\nh\r\n",                // master without a port
      "*1\r\n*3\r\n:0\r\n:5\r\n:7\r\n",                           // master not an array
  };
  for (const std::string& b : bad) {
    auto p = resp_parse(b);
    ASSERT_TRUE(p.ok()) << b;
    EXPECT_FALSE(parse_cluster_slots(p.value(), RedisEndpoint{"h", 1}).ok()) << b;
  }
}

TEST(RedisUrl, ParsesAddressLists) {
  auto one = parse_redis_url("redis://127.0.0.1:6379");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0], (RedisEndpoint{"127.0.0.1", 6379}));
  auto three = parse_redis_url("redis://a:1,b.example:2,[::1]:3/");
  ASSERT_TRUE(three.ok()) << three.error_message();
  ASSERT_EQ(three->size(), 3u);
  EXPECT_EQ((*three)[1], (RedisEndpoint{"b.example", 2}));
  EXPECT_EQ((*three)[2], (RedisEndpoint{"::1", 3}));
  for (const char* bad :
       {"", "127.0.0.1:6379", "http://a:1", "redis://", "redis://a", "redis://a:", "redis://:1",
        "redis://a:0", "redis://a:65536", "redis://a:1,", "redis://a:1,,b:2", "redis://a b:1",
        "redis://u@a:1", "redis://a:1x", "redis://a:1/0/x"})
    EXPECT_FALSE(parse_redis_url(bad).ok()) << bad;
}

TEST(RedisClient, HugeArrayFromAServerIsAnErrorNotAnAllocation) {
  // A server that answers every read with an array header announcing 700 million elements.
  const test::LoopbackSocket ls = test::bind_loopback();
  ASSERT_GE(ls.fd, 0);
  const int lfd = ls.fd;
  ASSERT_EQ(listen(lfd, 1), 0);
  std::thread server([lfd] {
    const int fd = accept(lfd, nullptr, nullptr);
    char buf[4096];
    if (fd >= 0 && read(fd, buf, sizeof buf) > 0) {
      const std::string reply = "*700710207\r\n:1\r\n";
      (void)!write(fd, reply.data(), reply.size());
      (void)!read(fd, buf, sizeof buf);  // until the client hangs up
    }
    if (fd >= 0) close(fd);
  });
  {
    RedisClient c({{"127.0.0.1", ls.port}}, 2000);
    auto r = c.run({{"GET", "k"}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error_message().find("700710207 elements"), std::string::npos) << r.error_message();
  }
  server.join();
  close(lfd);
}

TEST(RedisTier, DeadServerMeansMissesAndDroppedPutsNeverAFailure) {
  RedisTier::Options o;
  o.endpoints = {{"127.0.0.1", test::unused_port()}};
  o.timeout_ms = 100;
  o.backoff_min_ms = 50;
  o.backoff_max_ms = 200;
  std::vector<std::string> lines;
  std::mutex mu;
  o.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  auto t = RedisTier::open(o);
  const ContentKey k = chain_next(chain_root(t->fingerprint()), 7);
  auto buf = std::make_shared<std::vector<std::byte>>(64);
  TierPut p;
  p.key = k;
  p.kind = TierKind::Page;
  p.layout = TierLayout{0, 64};
  p.parts.push_back(std::span<const std::byte>(buf->data(), buf->size()));
  p.owner = buf;
  t->put(p);
  t->flush();
  std::vector<std::byte> out(64);
  EXPECT_FALSE(t->get(k, TierKind::Page, p.layout, out));
  std::vector<ContentKey> keys(130, k);
  t->probe(keys, 64, 0);
  EXPECT_FALSE(t->contains(k, TierKind::Page));
  const TierStats s = t->stats();
  EXPECT_TRUE(s.down);
  EXPECT_GE(s.errors, 1);
  EXPECT_EQ(s.dropped, 1);
  EXPECT_EQ(s.writes, 0);
  EXPECT_EQ(s.get_misses, 1);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 1u) << "one log line for the outage";
  EXPECT_NE(lines[0].find("caching locally only"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace rw
