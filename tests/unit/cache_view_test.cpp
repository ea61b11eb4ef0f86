// /v1/cache/tree's pure parts: the query parser (every malformed shape) and the JSON body built
// from a CacheTreeReport.
#include "rewind/server/cache_view.h"

#include <gtest/gtest.h>

namespace rw {
namespace {

using nlohmann::json;

TEST(CacheTreeQuery, DefaultsAndValues) {
  EXPECT_EQ(parse_cache_tree_query("").value(), kCacheTreeDefaultNodes);
  EXPECT_EQ(parse_cache_tree_query("&").value(), kCacheTreeDefaultNodes);
  EXPECT_EQ(parse_cache_tree_query("max_nodes=1").value(), 1);
  EXPECT_EQ(parse_cache_tree_query("max_nodes=250").value(), 250);
  EXPECT_EQ(parse_cache_tree_query("max_nodes=5000").value(), 5000);
  EXPECT_EQ(parse_cache_tree_query("&max_nodes=7&").value(), 7);
  EXPECT_EQ(parse_cache_tree_query("max_nodes=007").value(), 7);
}

TEST(CacheTreeQuery, MalformedIsAnErrorNamingTheParameter) {
  for (const char* q : {"max_nodes", "max_nodes=", "max_nodes=0", "max_nodes=5001", "max_nodes=-3",
                        "max_nodes=+3", "max_nodes=1e3", "max_nodes=12x", "max_nodes= 5",
                        "max_nodes=99999999999999999999", "max_nodes=%31"}) {
    auto r = parse_cache_tree_query(q);
    ASSERT_FALSE(r.ok()) << q;
    EXPECT_NE(r.error_message().find("max_nodes"), std::string::npos) << q;
  }
  auto twice = parse_cache_tree_query("max_nodes=3&max_nodes=4");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error_message().find("twice"), std::string::npos);
  for (const char* q : {"nodes=3", "=3", "max_nodes=3&depth=2", "MAX_NODES=3"}) {
    auto r = parse_cache_tree_query(q);
    ASSERT_FALSE(r.ok()) << q;
    EXPECT_NE(r.error_message().find("unknown query parameter"), std::string::npos) << q;
  }
  // A long unknown name is cut in the message.
  auto r = parse_cache_tree_query(std::string(1000, 'x') + "=1");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.error_message().size(), 120u);
}

TEST(CacheTreeJson, KindNames) {
  EXPECT_EQ(checkpoint_kind_names(0), json::array());
  EXPECT_EQ(checkpoint_kind_names(kCheckpointGrid | kCheckpointPromptEnd),
            (json{"grid", "prompt_end"}));
  EXPECT_EQ(checkpoint_kind_names(0xff),
            (json{"grid", "boundary", "anchor", "prompt_end", "reply_end"}));
}

TEST(CacheTreeJson, BodyCarriesNodesAggregatesAndTheLastRequest) {
  CacheTreeReport r;
  r.enabled = true;
  r.stats.budget_bytes = 1000;
  r.stats.bytes_pages = 300;
  r.stats.bytes_snapshots = 200;
  r.stats.active_leases = 1;
  r.tree.version = 9;
  r.tree.total_nodes = 5;
  r.tree.listed_nodes = 2;
  r.tree.snapshot_bytes_by_kind = {1, 2, 3, 4, 5, 6};
  CacheTreeNode a;
  a.id = 3;
  a.start = 0;
  a.end = 40;
  a.n_pages = 1;
  a.kv_bytes = 300;
  a.snaps.push_back({12, kCheckpointBoundary, 100, 1, 2, 0});
  a.pinned = true;
  a.pins = 1;
  a.sub_nodes = 5;
  CacheTreeNode b;
  b.id = 4;
  b.parent = 0;
  b.start = 40;
  b.end = 50;
  b.evict_rank = 1;
  CacheTreeNode agg;
  agg.aggregate = true;
  agg.parent = 0;
  agg.start = 40;
  agg.end = 90;
  agg.sub_nodes = 3;
  r.tree.nodes = {a, b, agg};
  r.tree.path = {0, 1};
  r.tree.path_matched = 50;
  r.last_id = 7;
  r.last_prompt_tokens = 45;
  r.last_diverged_at = 41;
  r.last_resumed_at = 12;
  r.last_history_tokens = 50;
  EngineOptions opt;
  const json j = cache_tree_json(r, opt, {{7, "chatcmpl-abc"}});
  EXPECT_EQ(j["version"], 9);
  EXPECT_EQ(j["budget_bytes"], 1000);
  EXPECT_EQ(j["bytes"]["total"], 500);
  EXPECT_EQ(j["active_leases"], 1);
  EXPECT_EQ(j["total_nodes"], 5);
  EXPECT_EQ(j["snapshot_bytes_by_kind"]["reply_end"], 5);
  EXPECT_EQ(j["snapshot_bytes_by_kind"]["none"], 6);
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["nodes"][0]["parent"], -1);
  EXPECT_EQ(j["nodes"][0]["snapshots"][0]["kinds"], json{"boundary"});
  EXPECT_EQ(j["nodes"][0]["snapshots"][0]["pins"], 1);
  EXPECT_EQ(j["nodes"][0]["pinned"], true);
  EXPECT_EQ(j["nodes"][1]["evict_rank"], 1);
  EXPECT_EQ(j["nodes"][2]["aggregate"], true);
  EXPECT_EQ(j["nodes"][2]["subtree"]["nodes"], 3);
  EXPECT_FALSE(j["nodes"][2].contains("snapshots"));
  EXPECT_EQ(j["last"]["id"], "chatcmpl-abc");
  EXPECT_EQ(j["last"]["diverged_at"], 41);
  EXPECT_EQ(j["last"]["resumed_at"], 12);
  EXPECT_EQ(j["last"]["path"], (json{0, 1}));
  // No request yet: last is null; an engine id the server did not map: id null.
  r.last_id = 0;
  EXPECT_TRUE(cache_tree_json(r, opt, {})["last"].is_null());
  r.last_id = 8;
  EXPECT_TRUE(cache_tree_json(r, opt, {{7, "x"}})["last"]["id"].is_null());
}

}  // namespace
}  // namespace rw
