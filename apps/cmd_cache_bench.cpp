// `rewind cache-bench`: scripted multi-request workloads through the engine with the prefix
// cache on, and the same requests with the cache off (a cold run each), side by side in one
// run. Per request: prompt tokens, diverged-at (L), resumed-at (p), re-run tokens, tokens lost to
// checkpoint spacing, time to first token with and without the cache, and whether the logits of
// the first generated token were bit-identical (memcmp) to the cache-off run.
//
// Workloads are token-id scripts (seeded random ids; chat boundaries given as positions):
//   shared-system  one system prompt, then several requests with different user messages
//   edit-turn      system + three long user turns; then the third turn edited; then the
//                  system prompt edited
//   long-branch    one long prompt, then a change a few thousand tokens before its end
//   repeat         the same prompt twice
//   chat           a conversation that extends through its own generated replies
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "args.h"
#include "commands.h"
#include "rewind/engine/engine.h"

namespace rw::app {

namespace {

struct Step {
  std::vector<int32_t> prompt;
  std::vector<int64_t> boundaries;
  int64_t anchor = -1;
  bool extend_with_reply = false;  // chat: the next prompt = this prompt + reply + new turn
};

struct Workload {
  std::string name;
  std::vector<Step> steps;  // chat steps with extend_with_reply get their prompt built at run time
  int64_t chat_turn = 0;    // tokens per new chat user turn
};

class Script {
 public:
  Script(uint64_t seed, int64_t vocab) : rng_(seed), vocab_(vocab) {}
  std::vector<int32_t> tokens(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng_() % static_cast<uint64_t>(vocab_));
    return t;
  }
  int32_t other(int32_t t) {
    return static_cast<int32_t>((t + 1 + rng_() % (vocab_ - 1)) % vocab_);
  }

 private:
  std::mt19937_64 rng_;
  int64_t vocab_;
};

std::vector<int32_t> cat(std::initializer_list<const std::vector<int32_t>*> parts) {
  std::vector<int32_t> out;
  for (auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

Result<std::vector<Workload>> build(const std::string& which, double scale, Script& s) {
  auto sz = [&](double base) {
    return std::max<int64_t>(4, static_cast<int64_t>(std::llround(base * scale)));
  };
  std::vector<Workload> all;
  auto want = [&](const char* n) { return which == "all" || which == n; };
  if (want("shared-system")) {
    Workload w{"shared-system", {}, 0};
    auto sys = s.tokens(sz(1024));
    const int64_t S = static_cast<int64_t>(sys.size());
    for (int i = 0; i < 4; ++i) {
      auto user = s.tokens(sz(200));
      w.steps.push_back({cat({&sys, &user}), {S}, S});
    }
    all.push_back(std::move(w));
  }
  if (want("edit-turn")) {
    Workload w{"edit-turn", {}, 0};
    auto sys = s.tokens(sz(1024));
    auto t1 = s.tokens(sz(3800)), t2 = s.tokens(sz(3800)), t3 = s.tokens(sz(3800));
    const int64_t S = static_cast<int64_t>(sys.size());
    const int64_t b2 = S + static_cast<int64_t>(t1.size()),
                  b3 = b2 + static_cast<int64_t>(t2.size());
    std::vector<int64_t> bounds = {S, b2, b3};
    auto full = cat({&sys, &t1, &t2, &t3});
    w.steps.push_back({full, bounds, S});
    auto edit3 = full;
    const int64_t e3 = b3 + static_cast<int64_t>(t3.size()) / 2;
    edit3[e3] = s.other(edit3[e3]);
    w.steps.push_back({edit3, bounds, S});
    auto edit_sys = full;
    edit_sys[S / 2] = s.other(edit_sys[S / 2]);
    w.steps.push_back({edit_sys, bounds, S});
    all.push_back(std::move(w));
  }
  if (want("long-branch")) {
    Workload w{"long-branch", {}, 0};
    auto a = s.tokens(sz(8192));
    w.steps.push_back({a, {}, -1});
    auto b = a;
    const int64_t at = static_cast<int64_t>(a.size()) - sz(3000);
    b[at] = s.other(b[at]);
    w.steps.push_back({b, {}, -1});
    all.push_back(std::move(w));
  }
  if (want("repeat")) {
    Workload w{"repeat", {}, 0};
    auto a = s.tokens(sz(2048));
    w.steps.push_back({a, {}, -1});
    w.steps.push_back({a, {}, -1});
    all.push_back(std::move(w));
  }
  if (want("chat")) {
    Workload w{"chat", {}, sz(300)};
    auto sys = s.tokens(sz(512));
    auto u1 = s.tokens(sz(300));
    const int64_t S = static_cast<int64_t>(sys.size());
    w.steps.push_back({cat({&sys, &u1}), {S}, S, true});
    for (int i = 0; i < 3; ++i) w.steps.push_back({s.tokens(w.chat_turn), {}, S, i < 2});
    all.push_back(std::move(w));
  }
  if (all.empty())
    return make_error("unknown workload '" + which +
                      "' (shared-system, edit-turn, long-branch, repeat, chat, all)");
  return all;
}

}  // namespace

int cmd_cache_bench(int argc, char** argv) {
  auto args = parse_args("cache-bench", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("cache-bench");
  auto model_arg = model_or_builtin(args->str("--model"), args->has("--quiet"));
  if (!model_arg.ok()) return fail(model_arg.error_message());
  const std::string dir = model_arg.value();
  auto scale = args->num("--scale", 1.0);
  auto interval = args->int_("--interval", 512);
  auto budget = args->int_("--budget-mib", 4096);
  auto mpb = args->int_("--max-per-branch", 32);
  auto n_gen = args->int_("--n-predict", 4);
  auto th = args->int_("--threads", default_threads());
  auto seed = args->int_("--seed", 1);
  auto chunk = args->int_("--chunk", 512);
  for (auto* r : {&interval, &budget, &mpb, &n_gen, &th, &seed, &chunk})
    if (!r->ok()) return fail(r->error_message());
  if (!scale.ok()) return fail(scale.error_message());
  if (scale.value() <= 0) return fail("--scale must be > 0");
  if (interval.value() < 0 || budget.value() < 1 || mpb.value() < 2 || n_gen.value() < 1 ||
      th.value() < 1 || chunk.value() < 1)
    return fail("--interval >= 0, --budget-mib >= 1, --max-per-branch >= 2, -n, -t, --chunk >= 1");
  const bool json = args->has("--json");

  ThreadPool pool(static_cast<int>(th.value()));
  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  auto kv = kv_types_from(*args);
  if (!kv.ok()) return fail(kv.error_message());
  auto model = load_model(dir, args->str("--weights", "auto"), kernels.value(), &pool, nullptr,
                          false, kv.value());
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();
  Script script(static_cast<uint64_t>(seed.value()), m.config().vocab_size);
  auto wls = build(args->str("--workload", "all"), scale.value(), script);
  if (!wls.ok()) return fail(wls.error_message());

  EngineOptions on;
  on.cache.budget_bytes = static_cast<size_t>(budget.value()) << 20;
  on.cache.policy.interval = interval.value();
  on.cache.policy.size_by_state = !args->has("--interval");  // an explicit interval is kept
  on.cache.policy.max_per_branch = mpb.value();
  on.step_tokens = chunk.value();
  on.ctx_size = int64_t{1} << 40;  // the workloads' conversations grow as long as they are scaled
  EngineOptions off = on;
  off.cache_enabled = false;

  // Warm-up (scratch buffers, first-touch page faults) so the first timed request is not charged
  // for them.
  {
    Engine warm(m, &pool, off);
    Request g;
    g.prompt = script.tokens(std::min<int64_t>(512, m.config().vocab_size));
    g.max_tokens = 2;
    auto w = warm.generate(g);
    if (!w.ok()) return fail(w.error_message());
  }
  bool all_identical = true;
  int request = 0;
  for (auto& w : wls.value()) {
    Engine cached(m, &pool, on);  // a fresh cache per workload
    Engine cold(m, &pool, off);
    if (request == 0)  // the grid the engine chose for this model (CheckpointPolicy::size_grid)
      std::fprintf(stderr, "checkpoint grid: %s\n",
                   cached.options().cache.policy.grid_note.c_str());
    std::vector<int32_t> history;  // chat: prompt + reply so far
    for (auto& step : w.steps) {
      Request req;
      req.max_tokens = static_cast<int32_t>(n_gen.value());
      req.keep_first_logits = true;
      req.anchor = step.anchor;
      if (!history.empty()) {
        req.prompt = history;
        req.boundaries = step.boundaries;
        req.boundaries.push_back(static_cast<int64_t>(history.size()));  // new message start
        req.prompt.insert(req.prompt.end(), step.prompt.begin(), step.prompt.end());
      } else {
        req.prompt = step.prompt;
        req.boundaries = step.boundaries;
      }
      auto a = cached.generate(req);
      if (!a.ok()) return fail(a.error_message());
      Request cold_req = req;
      cold_req.publish = false;
      auto b = cold.generate(cold_req);
      if (!b.ok()) return fail(b.error_message());
      const Generation& g = a.value();
      const RequestReport& r = g.report;
      const bool same = g.first_logits.size() == b->first_logits.size() &&
                        std::memcmp(g.first_logits.data(), b->first_logits.data(),
                                    g.first_logits.size() * sizeof(float)) == 0 &&
                        g.tokens == b->tokens;
      all_identical = all_identical && same;
      if (step.extend_with_reply) {
        history = req.prompt;
        history.insert(history.end(), g.tokens.begin(), g.tokens.end());
      }
      ++request;
      if (json) {
        std::printf(
            "{\"request\":%d,\"workload\":\"%s\",\"prompt_tokens\":%lld,\"diverged_at\":%lld,"
            "\"resumed_at\":%lld,\"rerun_tokens\":%lld,\"lost_to_spacing\":%lld,\"hit\":\"%s\","
            "\"ttft_ms\":%.3f,\"ttft_ms_cache_off\":%.3f,\"snapshots\":%lld,\"snapshot_ms\":%.3f,"
            "\"bit_identical\":%s}\n",
            request, w.name.c_str(), static_cast<long long>(r.prompt_tokens),
            static_cast<long long>(r.diverged_at), static_cast<long long>(r.resumed_at),
            static_cast<long long>(r.rerun_tokens), static_cast<long long>(r.lost_to_spacing),
            hit_kind_name(r.hit), r.ttft_ms, b->report.ttft_ms,
            static_cast<long long>(r.snapshots_taken), r.snapshot_ms, same ? "true" : "false");
      } else {
        std::printf(
            "%3d %-13s prompt %6lld  L %6lld  p %6lld  rerun %6lld  lost %4lld  %-10s ttft %9.1f ms"
            "  (off %9.1f ms, x%.1f)  snaps %2lld (%.1f ms)  %s\n",
            request, w.name.c_str(), static_cast<long long>(r.prompt_tokens),
            static_cast<long long>(r.diverged_at), static_cast<long long>(r.resumed_at),
            static_cast<long long>(r.rerun_tokens), static_cast<long long>(r.lost_to_spacing),
            hit_kind_name(r.hit), r.ttft_ms, b->report.ttft_ms,
            b->report.ttft_ms / std::max(1e-9, r.ttft_ms),
            static_cast<long long>(r.snapshots_taken), r.snapshot_ms,
            same ? "bit-identical" : "DIFFERENT");
      }
      std::fflush(stdout);
    }
    const CacheStats st = cached.cache()->stats();
    if (!json)
      std::printf(
          "    %s cache: %lld lookups (exact %lld, extension %lld, checkpoint %lld, miss %lld), "
          "reused %lld, re-run %lld, lost to spacing %lld; %.1f MiB pages + %.1f MiB snapshots "
          "(%lld snapshots), %lld evictions\n",
          w.name.c_str(), static_cast<long long>(st.lookups), static_cast<long long>(st.hits_exact),
          static_cast<long long>(st.hits_extension), static_cast<long long>(st.hits_checkpoint),
          static_cast<long long>(st.misses), static_cast<long long>(st.tokens_reused),
          static_cast<long long>(st.tokens_rerun), static_cast<long long>(st.lost_to_spacing),
          static_cast<double>(st.bytes_pages) / 1048576.0,
          static_cast<double>(st.bytes_snapshots) / 1048576.0,
          static_cast<long long>(st.n_snapshots),
          static_cast<long long>(st.evictions_nodes + st.evictions_snapshots));
  }
  return all_identical ? 0 : 3;
}

}  // namespace rw::app
