// GET /v1/cache/tree: the prefix tree drawn by the web page's cache view, as bounded JSON.
//
// The query string takes `max_nodes=N` (1..5000, default 400): past N nodes the tree lists the
// biggest subtrees and folds the rest of each parent's children into one aggregate entry
// (PrefixCache::dump), so the answer stays small however large the cache grows. The body:
//   {"enabled", "version" (changes whenever the tree or its LRU standing does), "budget_bytes",
//    "bytes": {"pages", "snapshots", "total"}, "over_budget", "page_tokens", "interval",
//    "total_nodes", "listed_nodes", "active_leases",
//    "snapshot_bytes_by_kind": {"grid", "boundary", "anchor", "prompt_end", "reply_end", "none"},
//    "nodes": [{"id", "parent" (index, -1: under the root), "start", "end", "pages",
//               "shared_pages", "kv_bytes", "pins", "pinned", "age", "evict_rank", "terminal",
//               "snapshots": [{"pos", "kinds": [...], "bytes", "pins", "age", "evict_rank"}],
//               "subtree": {"nodes", "tokens", "snapshots", "bytes"}}
//              | {"aggregate": true, "parent", "start", "end", "pinned", "subtree": {...}}],
//    "last": null | {"id" (chatcmpl-... as the client saw it, or null), "engine_id",
//                    "prompt_tokens", "diverged_at", "resumed_at", "history_tokens",
//                    "path" (node indices from the root down), "path_matched"}}
// Ages count cache operations (lookups and inserts) since last use; evict_rank 1 is what
// eviction takes next, 0 what it cannot take now (pinned, or a node with children).
//
// Pure functions (no HTTP, no engine thread); tests/unit/cache_view_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "rewind/base/result.h"
#include "rewind/engine/batch_engine.h"

namespace rw {

inline constexpr int64_t kCacheTreeDefaultNodes = 400;
inline constexpr int64_t kCacheTreeMaxNodes = 5000;

// The query string of /v1/cache/tree (after '?', may be empty): max_nodes. Errors name the
// parameter: an unknown or repeated one, a value that is not a decimal integer in
// [1, kCacheTreeMaxNodes].
Result<int64_t> parse_cache_tree_query(std::string_view query);

// The names of the CheckpointKind bits set in `kinds`, lowest bit first.
nlohmann::json checkpoint_kind_names(uint8_t kinds);

// The body above. `client_ids` maps engine request ids to the ids clients saw.
nlohmann::json cache_tree_json(const CacheTreeReport& r, const EngineOptions& opt,
                               const std::map<uint64_t, std::string>& client_ids);

}  // namespace rw
