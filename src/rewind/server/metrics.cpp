#include "rewind/server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace rw {

namespace {

const std::vector<double> kLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                            1,     2.5,  5,     10,   30,  60,   120};

// Shortest of %.15g / %.17g that reads back as the same double (integers print as integers).
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The page's families in the order first declared; a family declared again (once per model)
// collects more samples under its one HELP and TYPE, as the text format requires.
class Page {
 public:
  void family(const std::string& name, const char* type, const std::string& help) {
    const auto it = index_.find(name);
    if (it != index_.end()) {
      cur_ = it->second;
      return;
    }
    index_.emplace(name, fams_.size());
    cur_ = fams_.size();
    fams_.push_back("# HELP " + name + ' ' + help + '\n' + "# TYPE " + name + ' ' + type + '\n');
  }
  // Labels put first on every later sample (a model's), "" for none.
  void set_label(std::string l) { label_ = std::move(l); }
  void sample(const std::string& name, const std::string& labels, double v) {
    std::string all = label_;
    if (!labels.empty()) all += (all.empty() ? "" : ",") + labels;
    std::string& f = fams_[cur_];
    f += name;
    if (!all.empty()) f += '{' + all + '}';
    f += ' ' + num(v) + '\n';
  }
  void one(const std::string& name, const char* type, const std::string& help, double v) {
    family(name, type, help);
    sample(name, "", v);
  }
  void histogram(const std::string& name, const std::string& help, const Histogram& h) {
    family(name, "histogram", help);
    int64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      sample(name + "_bucket", "le=\"" + num(h.bounds[i]) + "\"", static_cast<double>(cum));
    }
    cum += h.counts.back();
    sample(name + "_bucket", "le=\"+Inf\"", static_cast<double>(cum));
    sample(name + "_sum", "", h.sum);
    sample(name + "_count", "", static_cast<double>(h.count));
  }
  std::string str() const {
    std::string out;
    for (const std::string& f : fams_) out += f;
    return out;
  }

 private:
  std::vector<std::string> fams_;
  std::map<std::string, size_t> index_;
  size_t cur_ = 0;
  std::string label_;
};

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

ServerMetrics::ServerMetrics() = default;

void ServerMetrics::count_response(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[{endpoint, status}];
}

void ServerMetrics::track_memory(std::string kind, std::function<int64_t()> bytes,
                                 std::string model) {
  std::lock_guard<std::mutex> lock(mu_);
  memory_sources_.push_back({std::move(kind), std::move(model), std::move(bytes)});
}

ServerMetrics::Latency& ServerMetrics::latency(const std::string& model) {
  auto it = latency_.find(model);
  if (it == latency_.end())
    it = latency_.emplace(model, Latency{Histogram(kLatencyBounds), Histogram(kLatencyBounds)})
             .first;
  return it->second;
}

void ServerMetrics::observe_request(double ttft_ms, double total_ms, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  Latency& l = latency(model);
  if (ttft_ms > 0) l.ttft.observe(ttft_ms / 1000.0);
  l.request.observe(total_ms / 1000.0);
}

void ServerMetrics::count_outcome(const std::string& outcome, const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  ++outcomes_[{model, outcome}];
}

std::string ServerMetrics::prometheus(const EngineMetrics& em) const {
  return prometheus(std::vector<ModelMetrics>{{"", em}});
}

namespace {
// Memory kinds the engine reports process-wide (pages and snapshots count themselves): with
// several models they are shown once, without a model label.
bool process_wide_kind(const std::string& kind) {
  return kind == "kv_pages" || kind == "snapshots";
}
std::string model_label(const std::string& name) {
  return name.empty() ? "" : "model=\"" + escape_label(name) + "\"";
}

// The families one engine's figures fill.
void engine_part(Page& p, const EngineMetrics& em) {
  p.family("rewind_engine_requests_total", "counter", "Engine requests by outcome.");
  p.sample("rewind_engine_requests_total", "outcome=\"finished\"",
           static_cast<double>(em.requests_finished));
  p.sample("rewind_engine_requests_total", "outcome=\"cancelled\"",
           static_cast<double>(em.requests_cancelled));
  p.sample("rewind_engine_requests_total", "outcome=\"rejected\"",
           static_cast<double>(em.requests_rejected));
  p.sample("rewind_engine_requests_total", "outcome=\"failed\"",
           static_cast<double>(em.requests_failed));
  p.one("rewind_requests_submitted_total", "counter", "Requests accepted by the engine.",
        static_cast<double>(em.requests_submitted));
  p.one("rewind_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
        static_cast<double>(em.prompt_tokens));
  p.one("rewind_generated_tokens_total", "counter", "Tokens generated.",
        static_cast<double>(em.generated_tokens));
  p.one("rewind_prefill_tokens_run_total", "counter",
        "Prompt tokens actually run through the model (not resumed from the cache).",
        static_cast<double>(em.prefill_tokens_run));
  p.one("rewind_engine_steps_total", "counter", "Forward steps of the engine.",
        static_cast<double>(em.steps));
  p.family("rewind_step_fit_ms", "gauge",
           "The step-time line --itl-target sizes mixed steps by: ms fixed, per decode token, "
           "per prefill token (0 before it has one).");
  p.sample("rewind_step_fit_ms", "term=\"fixed\"", em.step_fit.fixed_ms);
  p.sample("rewind_step_fit_ms", "term=\"decode_token\"", em.step_fit.decode_ms_per_token);
  p.sample("rewind_step_fit_ms", "term=\"prefill_token\"", em.step_fit.prefill_ms_per_token);
  p.one("rewind_step_mixed_prefill_budget_tokens", "gauge",
        "Prefill tokens --itl-target last gave a step that decoded beside a prefill (0: none).",
        static_cast<double>(em.mixed_prefill_budget));
  p.one("rewind_requests_running", "gauge", "Sequences prefilling or decoding now.", em.running);
  p.one("rewind_requests_queued", "gauge", "Requests waiting for a free sequence slot.", em.queued);
  const SpecStats& sp = em.spec;
  p.one("rewind_spec_rounds_total", "counter",
        "Speculative rounds with at least one draft (finished requests).",
        static_cast<double>(sp.rounds));
  p.one("rewind_spec_drafted_tokens_total", "counter", "Draft tokens proposed.",
        static_cast<double>(sp.drafted));
  p.one("rewind_spec_accepted_tokens_total", "counter", "Draft tokens accepted by the target.",
        static_cast<double>(sp.accepted));
  p.one("rewind_spec_acceptance_rate", "gauge",
        "Accepted / drafted tokens so far (0 before any draft).",
        sp.drafted ? static_cast<double>(sp.accepted) / static_cast<double>(sp.drafted) : 0.0);
  p.one("rewind_spec_replayed_tokens_total", "counter",
        "Tokens whose recurrence was replayed after a partly accepted round.",
        static_cast<double>(sp.replayed));
  p.one("rewind_spec_full_rounds_total", "counter", "Rounds where every draft was accepted.",
        static_cast<double>(sp.full));
  p.one("rewind_spec_failed_rounds_total", "counter",
        "Rounds that failed before verification (the request failed, its state stayed committed).",
        static_cast<double>(em.spec_failed_rounds));

  const CacheStats& c = em.cache;
  auto counter = [&](const std::string& field, const std::string& help, int64_t v) {
    p.one("rewind_cache_" + field + "_total", "counter", help, static_cast<double>(v));
  };
  auto gauge = [&](const char* field, const char* help, double v) {
    p.one(std::string("rewind_cache_") + field, "gauge", help, v);
  };
  counter("lookups", "Prefix cache lookups.", c.lookups);
  counter("hits_exact", "Lookups whose prompt was a repeat or prefix of a cached history.",
          c.hits_exact);
  counter("hits_extension", "Lookups that extended a cached history.", c.hits_extension);
  counter("hits_checkpoint", "Lookups resumed from a checkpoint on a diverged path.",
          c.hits_checkpoint);
  counter("misses", "Lookups that resumed nothing.", c.misses);
  counter("tokens_reused", "Prompt tokens resumed from the cache.", c.tokens_reused);
  counter("tokens_rerun", "Prompt tokens re-run after the resume point.", c.tokens_rerun);
  counter("lost_to_spacing", "Tokens matched but re-run for want of a checkpoint.",
          c.lost_to_spacing);
  counter("evictions_nodes", "Tree nodes evicted for the budget.", c.evictions_nodes);
  counter("evictions_snapshots", "Snapshots evicted for the budget.", c.evictions_snapshots);
  counter("thinned_snapshots", "Snapshots dropped by per-branch thinning.", c.thinned_snapshots);
  counter("inserts", "Histories published into the cache.", c.inserts);
  counter("over_budget_events", "Inserts or releases that ended over budget.",
          c.over_budget_events);
  gauge("bytes_pages", "Bytes of KV pages referenced by the cache.",
        static_cast<double>(c.bytes_pages));
  gauge("bytes_snapshots", "Bytes of recurrent-state snapshots in the cache.",
        static_cast<double>(c.bytes_snapshots));
  gauge("budget_bytes", "Byte budget of the cache.", static_cast<double>(c.budget_bytes));
  gauge("pages", "Distinct KV pages referenced by the cache.", static_cast<double>(c.n_pages));
  gauge("snapshots", "Snapshots in the cache.", static_cast<double>(c.n_snapshots));
  gauge("nodes", "Tree nodes (excluding the root).", static_cast<double>(c.n_nodes));
  gauge("active_leases", "Cache leases held by running requests.",
        static_cast<double>(c.active_leases));
  gauge("over_budget", "1 when the cache is over its budget (everything left is pinned).",
        c.over_budget ? 1.0 : 0.0);
  // What the disk and the shared tier count alike, `where` naming the tier in the help texts.
  auto tier_io = [&](const std::string& tier, const TierStats& t, const std::string& where) {
    counter(tier + "_read_bytes", "Bytes read from " + where + ".",
            static_cast<int64_t>(t.bytes_read));
    p.one("rewind_cache_" + tier + "_read_seconds_total", "counter", "Time spent reading objects.",
          t.read_seconds);
    counter(tier + "_writes", "Objects written to " + where + ".", t.writes);
    counter(tier + "_written_bytes", "Bytes written to " + where + ".",
            static_cast<int64_t>(t.bytes_written));
    p.one("rewind_cache_" + tier + "_write_seconds_total", "counter",
          "Writer thread time spent writing objects.", t.write_seconds);
  };
  if (const TierStats d = tier_named(c.tiers, "disk"); d.enabled) {
    // The disk tier (--cache-dir). Its lookup figures only when it is the one tier: with
    // Redis under it a resume may read from both, and the tier_* counters below cover them.
    if (c.tiers.size() == 1) {
      counter("disk_hits", "Lookups resumed deeper thanks to the disk tier.", c.tier_hits);
      counter("disk_misses", "Lookups where the disk tier had nothing deeper than RAM.",
              c.tier_misses);
      counter("disk_tokens", "Prompt tokens resumed from the disk tier beyond RAM's resume point.",
              c.tier_tokens);
      p.one("rewind_cache_disk_load_seconds_total", "counter",
            "Time lookups spent finding and reading the disk tier's objects.",
            c.tier_load_ms / 1e3);
    }
    counter("disk_reads", "Objects read from the disk tier.", d.reads);
    tier_io("disk", d, "the disk tier");
    counter("disk_write_errors", "Writes that failed (no space, I/O error); the object dropped.",
            d.write_errors);
    counter("disk_dropped", "Objects not queued: the write queue was full or the object too large.",
            d.dropped);
    counter("disk_evictions", "Objects removed for the disk budget (LRU).", d.evictions);
    counter("disk_corrupt", "Damaged files (truncated, bad checksum) skipped and removed.",
            d.corrupt);
    counter("disk_foreign", "Files of another model or format version skipped.", d.foreign);
    gauge("disk_bytes", "Bytes of the disk tier's files.", static_cast<double>(d.bytes));
    gauge("disk_objects", "Objects in the disk tier.", static_cast<double>(d.objects));
    gauge("disk_budget_bytes", "Byte budget of the disk tier.",
          static_cast<double>(d.budget_bytes));
    gauge("disk_queued", "Objects waiting for the disk tier's writer.",
          static_cast<double>(d.queued));
  }
  if (!c.tiers.empty()) {
    // Lookups over all tiers together (disk, then Redis).
    counter("tier_resumes", "Lookups resumed deeper than RAM from a tier (disk or Redis).",
            c.tier_hits);
    counter("tier_misses", "Lookups where no tier had anything deeper than RAM.", c.tier_misses);
    counter("tier_tokens", "Prompt tokens resumed from a tier beyond RAM's resume point.",
            c.tier_tokens);
    p.one("rewind_cache_tier_load_seconds_total", "counter",
          "Time lookups spent asking the tiers and reading their objects.", c.tier_load_ms / 1e3);
  }
  if (const TierStats r = tier_named(c.tiers, "redis"); r.enabled) {
    // The shared tier (--cache-redis): hits and misses are objects asked of it.
    counter("redis_hits", "Objects read from the shared (Redis) tier.", r.reads);
    counter("redis_misses", "Objects asked of the shared tier that it did not have.", r.get_misses);
    tier_io("redis", r, "the shared tier");
    counter("redis_probes", "Round trips asking which pages and checkpoints lie along a prompt.",
            r.probes);
    p.one("rewind_cache_redis_probe_seconds_total", "counter", "Time spent in those round trips.",
          r.probe_seconds);
    counter("redis_existing", "Objects not sent: another replica had published them.", r.existing);
    counter("redis_errors", "Connection errors, timeouts and protocol errors.", r.errors);
    counter("redis_write_errors", "Writes refused by Redis (out of memory); the object dropped.",
            r.write_errors);
    counter("redis_dropped", "Objects not published: the queue was full or Redis was down.",
            r.dropped);
    counter("redis_corrupt", "Damaged values (bad checksum, size) skipped and deleted.", r.corrupt);
    counter("redis_foreign", "Values of another model or format version skipped.", r.foreign);
    counter("redis_reconnects", "Times Redis answered again after being down.", r.reconnects);
    counter("redis_redirects", "Cluster MOVED and ASK replies followed.", r.redirects);
    gauge("redis_down", "1 while the shared tier is down (local-only caching).",
          r.down ? 1.0 : 0.0);
    gauge("redis_queued", "Objects waiting for the shared tier's publisher.",
          static_cast<double>(r.queued));
  }
}
}  // namespace

std::string ServerMetrics::prometheus(const std::vector<ModelMetrics>& models,
                                      const MemoryReport& shared_bound) const {
  Page p;
  const bool several = models.size() > 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.family("rewind_requests_total", "counter",
             "Generation requests by how they ended for the client.");
    for (const ModelMetrics& m : models) {
      p.set_label(model_label(m.name));
      for (const char* o : {"stop", "length", "tool_calls", "cancelled", "failed", "rejected"}) {
        const auto it = outcomes_.find({m.name, o});
        p.sample("rewind_requests_total", std::string("outcome=\"") + o + "\"",
                 it == outcomes_.end() ? 0.0 : static_cast<double>(it->second));
      }
    }
  }
  for (const ModelMetrics& m : models) {
    p.set_label(model_label(m.name));
    engine_part(p, m.em);
  }

  std::lock_guard<std::mutex> lock(mu_);
  p.family("rewind_memory_bytes", "gauge", "Bytes allocated now, by kind.");
  for (const ModelMetrics& m : models) {
    p.set_label(model_label(m.name));
    MemoryReport mem;
    for (const auto& [kind, bytes] : m.em.memory.kinds)
      if (!several || !process_wide_kind(kind)) mem.add(kind, bytes);
    for (const MemorySource& s : memory_sources_)
      if (s.model == m.name) mem.add(s.kind, s.bytes());
    for (const auto& [kind, bytes] : mem.kinds)
      p.sample("rewind_memory_bytes", "kind=\"" + escape_label(kind) + "\"",
               static_cast<double>(bytes));
  }
  p.set_label("");
  {
    MemoryReport mem;
    if (several)
      for (const auto& [kind, bytes] : models[0].em.memory.kinds)
        if (process_wide_kind(kind)) mem.add(kind, bytes);
    for (const MemorySource& s : memory_sources_) {
      bool of_model = false;
      for (const ModelMetrics& m : models) of_model = of_model || s.model == m.name;
      if (!of_model) mem.add(s.kind, s.bytes());
    }
    for (const auto& [kind, bytes] : mem.kinds)
      p.sample("rewind_memory_bytes", "kind=\"" + escape_label(kind) + "\"",
               static_cast<double>(bytes));
  }
  p.one("rewind_process_resident_bytes", "gauge", "Resident set of the process.",
        static_cast<double>(process_resident_bytes()));
  int64_t bound = shared_bound.total();
  for (const ModelMetrics& m : models) bound += m.em.memory_bound.total();
  p.one("rewind_memory_bound_bytes", "gauge",
        "The memory bound the options allow (sum of rewind_memory_bound_term_bytes; 0: unset).",
        static_cast<double>(bound));
  p.family("rewind_memory_bound_term_bytes", "gauge", "The memory bound's terms.");
  for (const ModelMetrics& m : models) {
    p.set_label(model_label(m.name));
    for (const auto& [term, bytes] : m.em.memory_bound.kinds)
      p.sample("rewind_memory_bound_term_bytes", "term=\"" + escape_label(term) + "\"",
               static_cast<double>(bytes));
  }
  p.set_label("");
  for (const auto& [term, bytes] : shared_bound.kinds)
    p.sample("rewind_memory_bound_term_bytes", "term=\"" + escape_label(term) + "\"",
             static_cast<double>(bytes));
  const Histogram empty(kLatencyBounds);
  for (const ModelMetrics& m : models) {
    p.set_label(model_label(m.name));
    const auto it = latency_.find(m.name);
    p.histogram("rewind_time_to_first_token_seconds", "Submit to first generated token.",
                it == latency_.end() ? empty : it->second.ttft);
    p.histogram("rewind_request_duration_seconds", "Submit to last event of a request.",
                it == latency_.end() ? empty : it->second.request);
  }
  p.set_label("");
  p.family("rewind_http_responses_total", "counter", "HTTP responses by endpoint and status.");
  for (const auto& [k, v] : responses_)
    p.sample(
        "rewind_http_responses_total",
        "endpoint=\"" + escape_label(k.first) + "\",status=\"" + std::to_string(k.second) + "\"",
        static_cast<double>(v));
  return p.str();
}

const char* const kFollowUpNote =
    "a follow-up chat turn resumes at the start of the previous reply: the chat template "
    "re-renders that reply from its text (without the reasoning block the model generated before "
    "it, tokenized afresh), so the new prompt leaves the cached tokens there and the cache resumes "
    "from the checkpoint at the end of the previous prompt (lost_to_spacing 1: its last token "
    "runs again)";

namespace {
// Milliseconds per event from seconds in all (0 before any).
double avg_ms(double seconds, int64_t n) {
  return n > 0 ? seconds * 1e3 / static_cast<double>(n) : 0.0;
}
// The disk tier's figures for /v1/cache ({"enabled": false} without --cache-dir).
nlohmann::json disk_json(const CacheStats& c) {
  const TierStats d = tier_named(c.tiers, "disk");
  if (!d.enabled) return {{"enabled", false}};
  return {{"enabled", true},
          {"objects", d.objects},
          {"bytes", d.bytes},
          {"budget_bytes", d.budget_bytes},
          {"queued", d.queued},
          {"queued_bytes", d.queued_bytes},
          {"restored_at_start", d.restored},
          {"hits", c.tier_hits},
          {"misses", c.tier_misses},
          {"tokens", c.tier_tokens},
          {"load_ms", c.tier_load_ms},
          {"reads", d.reads},
          {"bytes_read", d.bytes_read},
          {"read_ms_avg", avg_ms(d.read_seconds, d.reads)},
          {"writes", d.writes},
          {"bytes_written", d.bytes_written},
          {"write_ms_avg", avg_ms(d.write_seconds, d.writes)},
          {"evictions", d.evictions},
          {"errors",
           {{"write", d.write_errors},
            {"dropped", d.dropped},
            {"corrupt", d.corrupt},
            {"foreign", d.foreign},
            {"stale_temp", d.stale_temp}}}};
}
// The shared tier's figures for /v1/cache ({"enabled": false} without --cache-redis).
nlohmann::json redis_json(const CacheStats& c) {
  const TierStats r = tier_named(c.tiers, "redis");
  if (!r.enabled) return {{"enabled", false}};
  return {{"enabled", true},
          {"down", r.down},
          {"known_objects", r.objects},
          {"queued", r.queued},
          {"queued_bytes", r.queued_bytes},
          {"hits", r.reads},
          {"misses", r.get_misses},
          {"bytes_read", r.bytes_read},
          {"read_ms_avg", avg_ms(r.read_seconds, r.reads + r.get_misses)},
          {"probes", r.probes},
          {"probe_ms_avg", avg_ms(r.probe_seconds, r.probes)},
          {"writes", r.writes},
          {"bytes_written", r.bytes_written},
          {"write_ms_avg", avg_ms(r.write_seconds, r.writes)},
          {"existing", r.existing},
          {"reconnects", r.reconnects},
          {"redirects", r.redirects},
          {"errors",
           {{"connection", r.errors},
            {"write", r.write_errors},
            {"dropped", r.dropped},
            {"corrupt", r.corrupt},
            {"foreign", r.foreign}}}};
}
}  // namespace

nlohmann::json cache_json(const EngineMetrics& em, const EngineOptions& opt,
                          const std::map<uint64_t, std::string>& client_ids) {
  const CacheStats& c = em.cache;
  nlohmann::json recent = nlohmann::json::array();
  for (const auto& r : em.recent) {
    const auto id = client_ids.find(r.id);
    recent.push_back(
        {{"id", id == client_ids.end() ? nlohmann::json(nullptr) : nlohmann::json(id->second)},
         {"engine_id", r.id},
         {"prompt_tokens", r.prompt_tokens},
         {"diverged_at", r.diverged_at},
         {"resumed_at", r.resumed_at},
         {"rerun_tokens", r.rerun_tokens},
         {"lost_to_spacing", r.lost_to_spacing},
         {"hit", r.hit}});
  }
  return {{"enabled", opt.cache_enabled},
          {"budget_bytes", c.budget_bytes},
          {"bytes",
           {{"pages", c.bytes_pages},
            {"snapshots", c.bytes_snapshots},
            {"total", c.bytes_pages + c.bytes_snapshots}}},
          {"over_budget", c.over_budget},
          {"counts",
           {{"pages", c.n_pages},
            {"snapshots", c.n_snapshots},
            {"nodes", c.n_nodes},
            {"active_leases", c.active_leases}}},
          {"hits",
           {{"lookups", c.lookups},
            {"exact", c.hits_exact},
            {"extension", c.hits_extension},
            {"checkpoint", c.hits_checkpoint},
            {"misses", c.misses}}},
          {"tokens",
           {{"reused", c.tokens_reused},
            {"rerun", c.tokens_rerun},
            {"lost_to_spacing", c.lost_to_spacing}}},
          {"evictions",
           {{"nodes", c.evictions_nodes},
            {"snapshots", c.evictions_snapshots},
            {"thinned_snapshots", c.thinned_snapshots},
            {"over_budget_events", c.over_budget_events}}},
          {"inserts", c.inserts},
          {"disk", disk_json(c)},
          {"redis", redis_json(c)},
          {"tiers",
           {{"resumes", c.tier_hits},
            {"misses", c.tier_misses},
            {"tokens", c.tier_tokens},
            {"load_ms", c.tier_load_ms}}},
          {"policy",
           {{"interval", opt.cache.policy.interval},
            {"interval_why", opt.cache.policy.grid_note},
            {"max_per_branch", opt.cache.policy.max_per_branch},
            {"at_prompt_end", opt.cache.policy.at_prompt_end},
            {"page_tokens", opt.cache.page_tokens}}},
          {"kv_cache",
           {{"type_k", kv_type_name(opt.cache.kv_types.k)},
            {"type_v", kv_type_name(opt.cache.kv_types.v)},
            {"page_bytes", opt.cache.page_bytes},
            {"bytes_per_token",
             opt.cache.page_tokens > 0 ? opt.cache.page_bytes / opt.cache.page_tokens : 0}}},
          {"recent", std::move(recent)},
          {"notes", {{"follow_up_turn", kFollowUpNote}}}};
}

}  // namespace rw
