// Server-side observability: the Prometheus text of GET /metrics and the JSON of GET /v1/cache.
//
// /metrics (text format 0.0.4) holds
//   rewind_requests_total{outcome="stop|length|tool_calls|cancelled|failed|rejected"} (the
//   server's count of how generation requests ended for their clients: a stop string is
//   "stop", not "cancelled"; "rejected" counts errors after the body was parsed for a model,
//   the header-only refusals are only in rewind_http_responses_total),
//   rewind_engine_requests_total{outcome="finished|cancelled|
//   rejected|failed"} (the engine's own count: a request the server ended at a stop string is
//   "cancelled" there),
//   rewind_requests_submitted_total, rewind_prompt_tokens_total, rewind_generated_tokens_total,
//   rewind_prefill_tokens_run_total, rewind_engine_steps_total, rewind_requests_running,
//   rewind_requests_queued (gauges), rewind_http_responses_total{endpoint,status} (every HTTP
//   answer, 4xx included), rewind_time_to_first_token_seconds and rewind_request_duration_seconds
//   (histograms of the requests this server completed: cumulative since start, unlike
//   EngineMetrics' bounded samples), and every CacheStats field as rewind_cache_* (counters end in
//   _total), rewind_memory_bytes{kind} (EngineMetrics::memory plus track_memory's kinds),
//   rewind_process_resident_bytes (/proc/self/statm), rewind_memory_bound_bytes and
//   rewind_memory_bound_term_bytes{term} (EngineMetrics::memory_bound; docs/ARCHITECTURE.md,
//   "Memory"). With several models every figure of one model carries model="NAME" (pages
//   and snapshots are counted process-wide and carry none).
// /v1/cache: budget, bytes by kind, counts, hit counters and the engine's recent requests
//   (id as the client saw it, diverged_at / resumed_at / rerun_tokens / lost_to_spacing), and
//   a note on why a chat follow-up resumes where the previous reply began.
//
// Thread-safety: ServerMetrics is safe to use from every HTTP thread at once (one mutex; each
// call is a few map updates).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rewind/engine/batch_engine.h"

namespace rw {

// A Prometheus histogram with fixed upper bounds (seconds).
struct Histogram {
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // per bucket (not cumulative); last = +Inf
  double sum = 0;
  int64_t count = 0;
};

// One served model's engine figures for the /metrics page; `name` labels its samples
// (model="name"), "" for none (one model: the page as without models).
struct ModelMetrics {
  std::string name;
  EngineMetrics em;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // One HTTP answer (endpoint: the route, e.g. "/v1/chat/completions"; "other" for 404s).
  void count_response(const std::string& endpoint, int status);
  // A request that produced tokens: its time to first token and total time, from the engine;
  // `model`: the served model's label ("" for none).
  void observe_request(double ttft_ms, double total_ms, const std::string& model = "");
  // A generation request's end: "stop", "length", "tool_calls", "cancelled", "failed" or
  // "rejected".
  void count_outcome(const std::string& outcome, const std::string& model = "");
  // The whole /metrics page: every model's engine figures (labelled by name when named), the
  // memory bound as the sum of the engines' terms and `shared_bound`'s.
  std::string prometheus(const std::vector<ModelMetrics>& models,
                         const MemoryReport& shared_bound = {}) const;
  std::string prometheus(const EngineMetrics& em) const;  // one unnamed model
  // A component's own memory (e.g. the HTTP layer's buffers): `bytes` is called for each
  // /metrics page and shown as rewind_memory_bytes{kind=`kind`} next to the engine's kinds
  // (with model=`model` when it names a model of the page). It must be thread-safe and quick.
  void track_memory(std::string kind, std::function<int64_t()> bytes, std::string model = "");

 private:
  struct MemorySource {
    std::string kind, model;
    std::function<int64_t()> bytes;
  };
  struct Latency {
    Histogram ttft, request;
  };
  Latency& latency(const std::string& model);  // mu_ held
  std::vector<MemorySource> memory_sources_;   // guarded by mu_
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> responses_;
  std::map<std::pair<std::string, std::string>, int64_t> outcomes_;  // (model, outcome)
  std::map<std::string, Latency> latency_;                           // by model
};

// GET /v1/cache body. `client_ids`: engine request id -> the id its client saw (chatcmpl-...);
// a row whose id is not there gets "id": null. Every row keeps the engine's id as engine_id.
nlohmann::json cache_json(const EngineMetrics& em, const EngineOptions& opt,
                          const std::map<uint64_t, std::string>& client_ids = {});

// Why a chat follow-up turn resumes at the start of the previous reply (GET /v1/cache "notes").
extern const char* const kFollowUpNote;

}  // namespace rw
