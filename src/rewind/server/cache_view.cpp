#include "rewind/server/cache_view.h"

#include <utility>

namespace rw {

using nlohmann::json;

Result<int64_t> parse_cache_tree_query(std::string_view query) {
  int64_t max_nodes = kCacheTreeDefaultNodes;
  bool seen = false;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq);
    if (key != "max_nodes")
      return make_error("unknown query parameter '" + std::string(key.substr(0, 40)) +
                        "' (known: max_nodes)");
    if (seen) return make_error("max_nodes given twice");
    seen = true;
    const std::string_view v =
        eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1);
    int64_t x = 0;
    bool ok = !v.empty() && v.size() <= 6;
    for (char c : v) {
      if (c < '0' || c > '9') ok = false;
      x = x * 10 + (c - '0');
    }
    if (!ok || x < 1 || x > kCacheTreeMaxNodes)
      return make_error("max_nodes must be an integer from 1 to " +
                        std::to_string(kCacheTreeMaxNodes));
    max_nodes = x;
  }
  return max_nodes;
}

json checkpoint_kind_names(uint8_t kinds) {
  static const char* const kNames[] = {"grid", "boundary", "anchor", "prompt_end", "reply_end"};
  json a = json::array();
  for (int b = 0; b < 5; ++b)
    if (kinds & (1u << b)) a.push_back(kNames[b]);
  return a;
}

nlohmann::json cache_tree_json(const CacheTreeReport& r, const EngineOptions& opt,
                               const std::map<uint64_t, std::string>& client_ids) {
  const CacheTree& t = r.tree;
  const CacheStats& stats = r.stats;
  json nodes = json::array();
  for (const CacheTreeNode& n : t.nodes) {
    json sub = {{"nodes", n.sub_nodes},
                {"tokens", n.sub_tokens},
                {"snapshots", n.sub_snapshots},
                {"bytes", n.sub_bytes}};
    if (n.aggregate) {
      nodes.push_back({{"aggregate", true},
                       {"parent", n.parent},
                       {"start", n.start},
                       {"end", n.end},
                       {"pinned", n.pinned},
                       {"subtree", std::move(sub)}});
      continue;
    }
    json snaps = json::array();
    for (const CacheTreeSnapshot& s : n.snaps)
      snaps.push_back({{"pos", s.pos},
                       {"kinds", checkpoint_kind_names(s.kinds)},
                       {"bytes", s.bytes},
                       {"pins", s.pins},
                       {"age", s.age},
                       {"evict_rank", s.evict_rank}});
    nodes.push_back({{"id", n.id},
                     {"parent", n.parent},
                     {"start", n.start},
                     {"end", n.end},
                     {"pages", n.n_pages},
                     {"shared_pages", n.shared_pages},
                     {"kv_bytes", n.kv_bytes},
                     {"pins", n.pins},
                     {"pinned", n.pinned},
                     {"age", n.age},
                     {"evict_rank", n.evict_rank},
                     {"terminal", n.terminal},
                     {"snapshots", std::move(snaps)},
                     {"subtree", std::move(sub)}});
  }
  json last = nullptr;
  if (r.last_id != 0) {
    const auto id = client_ids.find(r.last_id);
    last = {{"id", id == client_ids.end() ? json(nullptr) : json(id->second)},
            {"engine_id", r.last_id},
            {"prompt_tokens", r.last_prompt_tokens},
            {"diverged_at", r.last_diverged_at},
            {"resumed_at", r.last_resumed_at},
            {"history_tokens", r.last_history_tokens},
            {"path", t.path},
            {"path_matched", t.path_matched}};
  }
  const auto& kb = t.snapshot_bytes_by_kind;
  return {{"enabled", r.enabled},
          {"version", t.version},
          {"budget_bytes", stats.budget_bytes},
          {"bytes",
           {{"pages", stats.bytes_pages},
            {"snapshots", stats.bytes_snapshots},
            {"total", stats.bytes_pages + stats.bytes_snapshots}}},
          {"over_budget", stats.over_budget},
          {"page_tokens", opt.cache.page_tokens},
          {"interval", opt.cache.policy.interval},
          {"total_nodes", t.total_nodes},
          {"listed_nodes", t.listed_nodes},
          {"active_leases", stats.active_leases},
          {"snapshot_bytes_by_kind",
           {{"grid", kb[0]},
            {"boundary", kb[1]},
            {"anchor", kb[2]},
            {"prompt_end", kb[3]},
            {"reply_end", kb[4]},
            {"none", kb[5]}}},
          {"nodes", std::move(nodes)},
          {"last", std::move(last)}};
}

}  // namespace rw
