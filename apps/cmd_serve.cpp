// `rewind serve`: the OpenAI-compatible HTTP server (src/rewind/server/http_server.h) over one
// model and one BatchEngine, or several (`--model NAME=PATH` repeated): each model gets its own
// engine and prefix cache and a lane of one thread pool of --threads threads (their shared jobs
// take turns); --cache-ram, --grammar-cache-ram and --cache-disk are split evenly between them;
// a --spec draft:DIR is loaded once and shared; the options of kPerModelOptions apply to every
// model unless `--model-opt NAME:OPTION=VALUE` sets one for a model, the others apply to all
// (docs/ARCHITECTURE.md, "Server", "Several models"; "Memory").
//
// Shutdown (graceful drain): SIGINT or SIGTERM stops accepting connections at once and closes
// idle ones; requests already running (streams and whole replies) get --shutdown-grace seconds
// (default 5) to finish. Then the engine shuts down without draining: what is left is
// cancelled, every open stream ends with a final chunk (finish_reason "length") and
// `data: [DONE]`, every waiting whole request gets 503. A second signal ends the grace period at
// once. The process exits 0 once the last connection has closed (at most a few seconds more:
// connections that do not take their last bytes are closed).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "args.h"
#include "cli.h"
#include "commands.h"
#include "rewind/base/file.h"
#include "rewind/base/memory.h"
#include "rewind/cache/disk_tier.h"
#include "rewind/cache/redis_tier.h"
#include "rewind/chat/chat_template.h"
#include "rewind/engine/batch_engine.h"
#include "rewind/grammar/matcher.h"
#include "rewind/model/fingerprint.h"
#include "rewind/server/access_log.h"
#include "rewind/server/generation_defaults.h"
#include "rewind/server/http_server.h"
#include "rewind/server/http_transport.h"
#include "rewind/server/openai_request.h"
#include "rewind/tokenizer/tokenizer.h"
#include "spec_args.h"

namespace rw::app {

namespace {

// Splits "a,b,c" at sep (empty items dropped).
std::vector<std::string> split_at(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t e = s.find(sep, i);
    if (e == std::string::npos) e = s.size();
    if (e > i) out.push_back(s.substr(i, e - i));
    i = e + 1;
  }
  return out;
}
std::vector<std::string> split_commas(const std::string& s) {
  return split_at(s, ',');
}
// The memory bound's fixed term: code and libraries, the tokenizer and chat template, allocator
// bookkeeping (docs/ARCHITECTURE.md, "Memory"), plus each thread's stack and arena share.
constexpr int64_t kFixedOverhead = int64_t{48} << 20;
constexpr int64_t kPerThreadOverhead = int64_t{256} << 10;

std::string basename_of(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t s = dir.find_last_of('/');
  return s == std::string::npos ? dir : dir.substr(s + 1);
}

// A served model's names (a comma list): non-empty, without spaces. Appends to *names.
Status add_names(const std::string& list, const std::string& what,
                 std::vector<std::string>* names) {
  size_t i = 0;
  while (i <= list.size()) {
    const size_t e = std::min(list.find(',', i), list.size());
    const std::string name = list.substr(i, e - i);
    if (name.empty() || name.find_first_of(" \t\r\n") != std::string::npos)
      return make_error(what + " '" + list + "': a model name must be non-empty, without spaces");
    if (std::find(names->begin(), names->end(), name) == names->end()) names->push_back(name);
    i = e + 1;
  }
  return Ok{};
}

// One --model value: "NAME=PATH" (NAME a comma list of names, without '/') or a path or store
// name as --model takes it.
struct ModelArg {
  std::vector<std::string> names;
  std::string given;
};
Result<ModelArg> parse_model_arg(const std::string& v) {
  ModelArg a;
  const size_t eq = v.find('=');
  if (eq == std::string::npos || v.substr(0, eq).find('/') != std::string::npos) {
    a.given = v;
    return a;
  }
  a.given = v.substr(eq + 1);
  if (a.given.empty()) return make_error("--model '" + v + "': NAME=PATH needs a path");
  REWIND_TRY_STATUS(add_names(v.substr(0, eq), "--model", &a.names));
  return a;
}

// The options a served model may set for itself (--model-opt NAME:OPTION=VALUE); every other
// option is the server's, or the same for every model.
const char* const kPerModelOptions[] = {"--ctx-size",
                                        "--n-predict",
                                        "--parallel",
                                        "--chunk",
                                        "--mixed-chunk",
                                        "--itl-target",
                                        "--max-queue",
                                        "--checkpoint-interval",
                                        "--checkpoint-max",
                                        "--no-cache",
                                        "--spec",
                                        "--model-draft",
                                        "--draft-k",
                                        "--spec-fixed-k",
                                        "--weights",
                                        "--cache-type-k",
                                        "--cache-type-v",
                                        "--temperature",
                                        "--top-k",
                                        "--top-p",
                                        "--min-p",
                                        "--repeat-penalty",
                                        "--repeat-last-n",
                                        "--presence-penalty",
                                        "--frequency-penalty",
                                        "--chat-template-file",
                                        "--chat-template",
                                        "--reasoning-format",
                                        "--chat-template-kwargs",
                                        "--reasoning-budget"};

// A step that decodes beside a prefill aims at 6 times a step of its decode rows alone.
constexpr const char* kDefaultItlTarget = "6x";

// The engine's sizes from one model's options, checked.
struct ModelSettings {
  int64_t parallel = 0, ctx = 0, chunk = 0, mixed_chunk = 0, max_queue = 0, ck_int = 0, ck_max = 0;
  int64_t n_predict = -1;  // -1: up to the context
  bool split_reasoning = true;
  int enable_thinking = -1;  // GenerationDefaults::enable_thinking
  StepTarget itl_target;
};
Result<ModelSettings> model_settings(const Args& a) {
  ModelSettings s;
  REWIND_TRY(s.parallel, a.int_("--parallel", 4));
  REWIND_TRY(s.ctx, a.int_("--ctx-size", 32768));
  REWIND_TRY(s.n_predict, a.int_("--n-predict", -1));
  REWIND_TRY(s.chunk, a.int_("--chunk", 512));
  REWIND_TRY(s.mixed_chunk, a.int_("--mixed-chunk", s.chunk));
  REWIND_TRY(s.max_queue, a.int_("--max-queue", 64));
  REWIND_TRY(s.ck_int, a.int_("--checkpoint-interval", 512));
  REWIND_TRY(s.ck_max, a.int_("--checkpoint-max", 32));
  if (s.parallel < 1 || s.parallel > 4096) return make_error("--parallel must be in [1, 4096]");
  // A step's decode rows come first; the prefill gets what they leave.
  if (s.chunk <= s.parallel)
    return make_error(
        "--chunk must exceed --parallel (a step's decode rows take their share first)");
  if (s.mixed_chunk < 1) return make_error("--mixed-chunk must be >= 1");
  auto target = parse_step_target(a.str("--itl-target", kDefaultItlTarget));
  if (!target.ok()) return make_error("--itl-target: " + target.error_message());
  s.itl_target = target.value();
  // 0: the model's context length, known once it loads (ctx_or_model).
  if (s.ctx < 2 && s.ctx != 0) return make_error("--ctx-size must be >= 2, or 0 (the model's)");
  if (s.ctx > (int64_t{1} << 31) - 1) return make_error("--ctx-size must be < 2^31");
  // llama-server's -1 and -2 (until the context is full) are the same here; a cap past the
  // context never binds.
  if (s.n_predict == -2) s.n_predict = -1;
  if (s.n_predict != -1 && (s.n_predict < 1 || s.n_predict > (int64_t{1} << 31) - 1))
    return make_error("-n/--n-predict must be >= 1, or -1 (up to the context)");
  if (s.ck_int < 0) return make_error("--checkpoint-interval must be >= 0");
  if (s.ck_max < 0 || s.ck_max == 1)
    return make_error("--checkpoint-max must be 0 (no limit) or >= 2");
  if (s.max_queue < 0 || s.max_queue > 65536)
    return make_error("--max-queue must be in [0, 65536]");
  if (const std::string f = a.str("--reasoning-format", "auto");
      !parse_reasoning_format(f, &s.split_reasoning))
    return make_error("--reasoning-format must be none, deepseek or auto (got '" + f + "')");
  // llama-server's --chat-template-kwargs JSON (enable_thinking, as a request's) and
  // --reasoning-budget (-1 unrestricted, 0 no thinking): a request's own kwargs win.
  if (a.has("--chat-template-kwargs")) {
    const auto k = nlohmann::json::parse(a.str("--chat-template-kwargs"), nullptr, false);
    if (k.is_discarded() || !k.is_object())
      return make_error(
          "--chat-template-kwargs must be a JSON object, as {\"enable_thinking\": false}");
    for (auto it = k.begin(); it != k.end(); ++it) {
      if (it.key() != "enable_thinking")
        return make_error("--chat-template-kwargs: '" + it.key() +
                          "' is not supported (only enable_thinking)");
      if (!it->is_boolean())
        return make_error("--chat-template-kwargs: enable_thinking must be true or false");
      s.enable_thinking = it->get<bool>() ? 1 : 0;
    }
  }
  if (a.has("--reasoning-budget")) {
    REWIND_TRY(const int64_t b, a.int_("--reasoning-budget", -1));
    if (b != -1 && b != 0)
      return make_error(
          "--reasoning-budget must be -1 (unrestricted) or 0 (no thinking), as "
          "llama-server's");
    if (b == 0) {
      if (s.enable_thinking == 1)
        return make_error(
            "--reasoning-budget 0 and --chat-template-kwargs enable_thinking true "
            "disagree");
      s.enable_thinking = 0;
    }
  }
  // The sampling defaults checked before any model loads (applied over the model's below).
  SamplingParams scratch;
  REWIND_TRY_STATUS(sampling_from(a, &scratch));
  return s;
}

// One --model-opt value: "NAME:OPTION=VALUE", or "NAME:OPTION" for a flag (a name holds no '=',
// so the last ':' before the first '=' ends it). Sets the option in *a, the model's copy of the
// options, when OPTION is one of kPerModelOptions.
Status apply_model_opt(const std::string& v, const std::string& opt, const std::string& value,
                       bool has_value, Args* a) {
  const CommandSpec* spec = command_spec("serve");
  const OptSpec* o = spec ? find_option(*spec, "--" + opt) : nullptr;
  bool allowed = false;
  for (const char* n : kPerModelOptions) allowed = allowed || (o && o->name == n);
  if (!allowed) {
    std::string list;
    for (const char* n : kPerModelOptions) list += std::string(list.empty() ? "" : ", ") + (n + 2);
    return make_error("--model-opt '" + v + "': a model may set only " + list);
  }
  if (o->value.empty() && has_value)
    return make_error("--model-opt '" + v + "': " + o->name + " takes no value");
  if (!o->value.empty() && (!has_value || value.empty()))
    return make_error("--model-opt '" + v + "': " + o->name + " needs a value (NAME:" + opt + "=" +
                      o->value + ")");
  if (o->value.empty()) {
    a->set_flag(o->name);
  } else {
    a->set(o->name, value);
  }
  return Ok{};
}

// A --spec draft:DIR model with several models served: loaded once per (path, weight store, KV
// types) and shared by the models that name it, its forwards serialised by a lock
// (SpecConfig::draft_lock).
struct SharedDraft {
  std::unique_ptr<Model> model;
  std::shared_ptr<std::mutex> lock = std::make_shared<std::mutex>();
  std::vector<std::string> users;  // the models' ids
};

// Everything one served model owns; its address stays fixed (the engine points into it).
struct LoadedModel {
  std::string dir, id;
  std::vector<std::string> aliases;
  std::optional<Args> args;  // the server's options with this model's --model-opt values
  ModelSettings settings;
  std::optional<Tokenizer> tok;
  std::optional<ChatTemplate> tmpl;
  std::string template_source;  // "model", "rewind-chatml" or "file"
  std::unique_ptr<ThreadPool> pool;
  std::optional<SpecSetup> spec;
  std::unique_ptr<Model> model;
  double load_s = 0;
  EngineOptions eo;
  std::shared_ptr<DiskTier> disk;
  std::shared_ptr<RedisTier> redis;
  uint64_t disk_queue = 0, redis_queue = 0;
  std::unique_ptr<BatchEngine> engine;
  GenerationDefaults defaults;
};

}  // namespace

int cmd_serve(int argc, char** argv) {
  auto args = parse_args("serve", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("serve");
  auto port = args->int_("--port", 8080);
  auto cache_ram = args->int_("--cache-ram", 4096);
  auto th = args->int_("--threads", default_threads());
  auto max_body = args->int_("--max-body", 8 << 20);
  auto max_buffered = args->int_("--max-buffered", 0);
  auto max_conns = args->int_("--max-connections", 512);
  auto max_conns_client = args->int_("--max-connections-per-client", 64);
  auto grammar_ram = args->int_("--grammar-cache-ram", 256);
  for (auto* r : {&port, &cache_ram, &th, &max_body, &max_buffered, &max_conns, &max_conns_client,
                  &grammar_ram})
    if (!r->ok()) return fail(r->error_message());
  auto grace = args->num("--shutdown-grace", 5);
  auto header_to = args->num("--header-timeout", 10);
  auto body_to = args->num("--body-timeout", 30);
  auto idle_to = args->num("--idle-timeout", 5);
  for (auto* r : {&grace, &header_to, &body_to, &idle_to})
    if (!r->ok()) return fail(r->error_message());
  if (!(grace.value() >= 0 && grace.value() <= 3600))
    return fail("--shutdown-grace must be in [0, 3600] seconds");
  for (auto [name, v] :
       {std::pair{"--header-timeout", header_to.value()},
        std::pair{"--body-timeout", body_to.value()}, std::pair{"--idle-timeout", idle_to.value()}})
    if (!(v > 0 && v <= 3600)) return fail(std::string(name) + " must be in (0, 3600] seconds");
  if (max_conns.value() < 1 || max_conns.value() > 1000000)
    return fail("--max-connections must be in [1, 1000000]");
  if (max_conns_client.value() < 1 || max_conns_client.value() > max_conns.value())
    return fail("--max-connections-per-client must be in [1, --max-connections]");
  if (port.value() < 0 || port.value() > 65535) return fail("--port must be in [0, 65535]");
  if (cache_ram.value() < 1)
    return fail("--cache-ram must be >= 1 (MiB); use --no-cache to turn it off");
  if (grammar_ram.value() < 1 || grammar_ram.value() > (int64_t{1} << 20))
    return fail("--grammar-cache-ram must be in [1, 1048576] (MiB)");
  if (th.value() < 1) return fail("--threads must be >= 1");
  if (max_body.value() < 1) return fail("--max-body must be >= 1");
  if (args->has("--max-buffered") && max_buffered.value() < max_body.value())
    return fail("--max-buffered must be >= --max-body");
  const int64_t buffered_cap = args->has("--max-buffered")
                                   ? max_buffered.value()
                                   : std::max<int64_t>(int64_t{64} << 20, max_body.value());
  const std::string host = args->str("--host", "127.0.0.1");
  // --alias NAME, repeatable, each also a comma list: the names a request's "model" may give.
  std::vector<std::string> aliases;
  for (const std::string& v : args->all("--alias"))
    if (Status st = add_names(v, "--alias", &aliases); !st.ok()) return fail(st.error_message());
  // --model [NAME=]PATH, repeatable: the models served, the first the default.
  std::vector<ModelArg> model_args;
  for (const std::string& v : args->all("--model")) {
    auto a = parse_model_arg(v);
    if (!a.ok()) return fail(a.error_message());
    model_args.push_back(std::move(a).value());
  }
  if (model_args.empty()) model_args.push_back({});
  const size_t n_models = model_args.size();
  if (!aliases.empty() && (n_models > 1 || !model_args[0].names.empty()))
    return fail(
        "--alias names the one model; with NAME=PATH or several --model, name each "
        "model as --model NAME=PATH (NAME may be a comma list)");
  if (n_models == 1 && model_args[0].names.empty()) model_args[0].names = aliases;
  std::map<std::string, SharedDraft> drafts;  // outlives the engines that use them
  std::vector<std::unique_ptr<LoadedModel>> loaded;
  {
    std::vector<std::string> seen;
    for (const ModelArg& a : model_args) {
      auto dir = model_or_builtin(a.given);
      if (!dir.ok()) return fail(dir.error_message());
      auto L = std::make_unique<LoadedModel>();
      L->dir = dir.value();
      L->aliases = a.names;
      L->id = a.names.empty() ? basename_of(L->dir) : a.names[0];
      for (const std::string& n :
           L->aliases.empty() ? std::vector<std::string>{L->id} : L->aliases) {
        if (std::find(seen.begin(), seen.end(), n) != seen.end())
          return fail("two models are named '" + n + "'; name them with --model NAME=PATH");
        seen.push_back(n);
      }
      L->args = args.value();
      loaded.push_back(std::move(L));
    }
  }
  // --model-opt NAME:OPTION=VALUE: one model's own value of a per-model option.
  for (const std::string& v : args->all("--model-opt")) {
    const size_t eq = v.find('=');
    const size_t colon = v.substr(0, eq).rfind(':');
    if (colon == std::string::npos || colon == 0)
      return fail("--model-opt '" + v +
                  "': expected NAME:OPTION=VALUE (or NAME:OPTION for a flag)");
    const std::string name = v.substr(0, colon);
    LoadedModel* target = nullptr;
    for (auto& L : loaded)
      if (L->id == name ||
          std::find(L->aliases.begin(), L->aliases.end(), name) != L->aliases.end())
        target = L.get();
    if (!target) return fail("--model-opt '" + v + "': no model is named '" + name + "'");
    const std::string opt = v.substr(colon + 1, eq == std::string::npos ? eq : eq - colon - 1);
    const std::string value = eq == std::string::npos ? "" : v.substr(eq + 1);
    if (Status st = apply_model_opt(v, opt, value, eq != std::string::npos, &*target->args);
        !st.ok())
      return fail(st.error_message());
  }
  for (auto& L : loaded) {
    auto st = model_settings(*L->args);
    if (!st.ok())
      return fail(n_models > 1 ? L->id + ": " + st.error_message() : st.error_message());
    L->settings = st.value();
  }
  AccessLogFormat log_format = AccessLogFormat::Text;
  if (!parse_access_log_format(args->str("--log-format", "text"), &log_format))
    return fail("--log-format must be text or json (got '" + args->str("--log-format") + "')");
  if (args->has("--quiet") && (args->has("--log-file") || args->has("--log-format")))
    return fail("--quiet turns the access log off; drop --log-file / --log-format, or --quiet");
  std::unique_ptr<AccessLog> access_log;
  if (!args->has("--quiet")) {
    auto opened = AccessLog::open(args->str("--log-file"), log_format);
    if (!opened.ok()) return fail(opened.error_message());
    access_log = std::move(opened).value();
  }

  // Signals go to one thread (sigwait), so block them before any thread is created.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);  // wakes the signal thread at a normal exit
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  if (!args->has("--cache-dir") && (args->has("--cache-disk") || args->has("--cache-fsync")))
    return fail("--cache-disk and --cache-fsync need --cache-dir");
  if (!args->has("--cache-redis") &&
      (args->has("--cache-redis-timeout") || args->has("--cache-redis-ttl")))
    return fail("--cache-redis-timeout and --cache-redis-ttl need --cache-redis");
  // A port another server holds is said now, not after minutes of loading models.
  if (Status st = check_bindable(host, static_cast<int>(port.value())); !st.ok())
    return fail(st.error_message());
  // Several models share the cache budgets evenly.
  const uint64_t cache_budget = (static_cast<uint64_t>(cache_ram.value()) << 20) / n_models;
  // One set of --threads threads for every model: each engine calls through its own lane, and
  // shared jobs of different engines take turns, so two busy models never oversubscribe the
  // cores while one busy model still gets them all (base/thread_pool.h, lane()).
  const ThreadPool workers(static_cast<int>(th.value()));
  // Loads one model and builds its engine (with its tiers).
  auto load = [&](LoadedModel& L) -> Status {
    const std::string& dir = L.dir;
    const Args& a = *L.args;
    const ModelSettings& ms = L.settings;
    REWIND_TRY(Tokenizer tok, load_tokenizer(dir));
    L.tok = std::move(tok);
    REWIND_TRY(ChatTemplate tmpl,
               load_chat_template(dir, *L.tok, &L.template_source, a.str("--chat-template-file"),
                                  a.str("--chat-template")));
    L.tmpl = std::move(tmpl);
    L.pool = workers.lane();
    REWIND_TRY(const KvTypes kv, kv_types_from(a));
    const std::string store = a.str("--weights", "auto");
    auto share_draft = [&](const std::string& ddir, KvTypes dkv, SpecConfig* cfg) -> Status {
      const std::string key =
          ddir + "\n" + store + "\n" + kv_type_name(dkv.k) + "/" + kv_type_name(dkv.v);
      SharedDraft& d = drafts[key];
      if (!d.model) {
        double secs = 0;
        REWIND_TRY(d.model,
                   load_model(ddir, store, kernels.value(), L.pool.get(), &secs, false, dkv));
      }
      d.users.push_back(L.id);
      cfg->draft = d.model.get();
      cfg->draft_lock = d.lock;
      return Ok{};
    };
    REWIND_TRY(SpecSetup spec,
               spec_from_args(a, store, kernels.value(), L.pool.get(),
                              n_models > 1 ? SharedDraftLoader(share_draft) : SharedDraftLoader()));
    L.spec = std::move(spec);
    REWIND_TRY(L.model, load_model(dir, store, kernels.value(), L.pool.get(), &L.load_s,
                                   L.spec->wants_mtp(), kv));
    Model& m = *L.model;
    REWIND_TRY(L.settings.ctx, ctx_or_model(L.settings.ctx, m.config(), "--ctx-size 0"));
    if (m.config().max_position_embeddings > 0 && ms.ctx > m.config().max_position_embeddings)
      std::fprintf(stderr,
                   "rewind: warning: --ctx-size %lld exceeds %s's max_position_embeddings %lld\n",
                   static_cast<long long>(ms.ctx), L.id.c_str(),
                   static_cast<long long>(m.config().max_position_embeddings));
    EngineOptions& eo = L.eo;
    eo.max_running = static_cast<int32_t>(ms.parallel);
    eo.step_tokens = ms.chunk;
    eo.mixed_step_tokens = ms.mixed_chunk;  // plan_step caps it at step_tokens
    eo.step_target = ms.itl_target;
    eo.max_queued = static_cast<int32_t>(ms.max_queue);
    eo.ctx_size = ms.ctx;
    eo.cache_enabled = !a.has("--no-cache");
    eo.cache.budget_bytes = static_cast<size_t>(cache_budget);
    eo.cache.policy.interval = ms.ck_int;
    eo.cache.policy.size_by_state = !a.has("--checkpoint-interval");  // explicit: as given
    eo.cache.policy.max_per_branch = ms.ck_max;
    eo.sample_vocab =
        static_cast<int32_t>(std::min<int64_t>(L.tok->vocab_size(), m.config().vocab_size));
    if (Status st = spec_check(m, L.spec->cfg); !st.ok())
      return make_error(st.error_message() + (L.spec->cfg.draft_lock
                                                  ? " (set --spec for each model with --model-opt "
                                                    "NAME:spec=...)"
                                                  : ""));
    eo.spec = L.spec->cfg;
    // The tiers under the prefix cache (docs/ARCHITECTURE.md, "Disk tier" and "Shared tier"):
    // both are bound to the model's fingerprint and the KV element types, which are part of
    // what a page's bytes mean: another choice is foreign (headers: K's type code in the high
    // nibble, V's in the low one; f32/f32 is 0).
    const KvTypes kvt = m.state_shape().kv_types;
    const uint8_t kv_code =
        static_cast<uint8_t>((static_cast<unsigned>(kvt.k) << 4) | static_cast<unsigned>(kvt.v));
    const std::string kv_name = std::string(kv_type_name(kvt.k)) + "/" + kv_type_name(kvt.v);
    std::optional<Hash128> fingerprint;
    if (args->has("--cache-dir")) {
      if (!eo.cache_enabled)
        return make_error("--cache-dir needs the prefix cache (drop --no-cache)");
      auto gib = args->num("--cache-disk", 16);
      if (!gib.ok()) return gib.error();
      if (!(gib.value() > 0)) return make_error("--cache-disk must be > 0 (GiB)");
      DiskTier::Options d;
      d.dir = args->str("--cache-dir");
      if (d.dir.empty()) return make_error("--cache-dir needs a directory");
      // Several models: a folder and an even share of the budget each.
      if (n_models > 1) d.dir += "/" + L.id;
      d.budget_bytes = static_cast<uint64_t>(gib.value() * 1073741824.0 / n_models);
      d.fsync = args->has("--cache-fsync");
      // Queued objects are shared with the RAM tree while it holds them; the queue can keep
      // alive at most this much that RAM has dropped (a term of the memory bound).
      d.queue_bytes = std::min<uint64_t>(uint64_t{1} << 30, eo.cache.budget_bytes);
      L.disk_queue = d.queue_bytes;
      std::error_code ec;
      std::filesystem::create_directories(d.dir, ec);
      if (ec) return make_error("--cache-dir " + d.dir + ": " + ec.message());
      const double t0 = now_seconds();
      d.kv_dtype = kv_code;
      REWIND_TRY(Hash128 fp, model_fingerprint(dir, m, d.dir + "/model-digests", kv_name));
      d.fingerprint = fp;
      fingerprint = fp;
      d.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
      // Fault injection for the tests (tests/integration/disk_tier_test.cpp).
      if (const char* e = std::getenv("REWIND_TEST_CACHE_FAIL_AFTER_BYTES"))
        d.fail_after_bytes = std::atoll(e);
      if (const char* e = std::getenv("REWIND_TEST_CACHE_WRITE_PAUSE_MS"))
        d.write_pause_ms = std::atoi(e);
      REWIND_TRY(L.disk, DiskTier::open(d));
      const TierStats ts = L.disk->stats();
      std::fprintf(stderr,
                   "rewind serve: cache dir %s: %lld objects, %.1f MiB of %.1f GiB (model %s, "
                   "indexed in %.2f s)\n",
                   d.dir.c_str(), static_cast<long long>(ts.objects), ts.bytes / 1048576.0,
                   d.budget_bytes / 1073741824.0, fp.hex().substr(0, 12).c_str(),
                   now_seconds() - t0);
      eo.cache.tier = L.disk;
    }
    if (args->has("--cache-redis")) {
      if (!eo.cache_enabled)
        return make_error("--cache-redis needs the prefix cache (drop --no-cache)");
      auto eps = parse_redis_url(args->str("--cache-redis"));
      if (!eps.ok()) return make_error("--cache-redis: " + eps.error_message());
      REWIND_TRY(int64_t to, args->int_("--cache-redis-timeout", 250));
      if (to < 1 || to > 60000) return make_error("--cache-redis-timeout: 1 to 60000 ms");
      REWIND_TRY(int64_t ttl, args->int_("--cache-redis-ttl", 0));
      if (ttl < 0) return make_error("--cache-redis-ttl must be >= 0");
      if (!fingerprint) {
        // Without --cache-dir the weight files' digests are computed at each start.
        REWIND_TRY(Hash128 fp, model_fingerprint(dir, m, "", kv_name));
        fingerprint = fp;
      }
      L.redis_queue = std::min<uint64_t>(uint64_t{256} << 20, eo.cache.budget_bytes);
      RedisTier::Options r;
      r.endpoints = std::move(eps).value();
      r.fingerprint = *fingerprint;
      r.kv_dtype = kv_code;
      r.timeout_ms = static_cast<int>(to);
      r.ttl_s = ttl;
      r.queue_bytes = L.redis_queue;
      r.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
      L.redis = RedisTier::open(r);
      if (L.disk)
        eo.cache.tier =
            std::make_shared<TierStack>(std::vector<std::shared_ptr<CacheTier>>{L.disk, L.redis});
      else
        eo.cache.tier = L.redis;
    }
    L.engine = std::make_unique<BatchEngine>(m, L.pool.get(), eo);
    L.defaults = load_generation_defaults(dir, m.config().eos_token_ids, *L.tok);
    L.defaults.max_tokens = ms.n_predict > 0 ? static_cast<int32_t>(ms.n_predict) : 0;
    L.defaults.split_reasoning = ms.split_reasoning;
    L.defaults.enable_thinking = ms.enable_thinking;
    if (ms.enable_thinking >= 0 && !L.tmpl->reads_enable_thinking())
      L.defaults.warnings.push_back(
          "the chat template never reads enable_thinking: --chat-template-kwargs / "
          "--reasoning-budget change nothing for this model");
    REWIND_TRY_STATUS(sampling_from(a, &L.defaults.sampling));  // the options over the model's
    for (const auto& w : L.defaults.warnings)
      std::fprintf(stderr, "rewind: warning: %s: %s\n", L.id.c_str(), w.c_str());
    if (L.defaults.stop_ids.empty())
      std::fprintf(stderr,
                   "rewind: warning: %s: no end-of-sequence token found; replies end at "
                   "max_tokens\n",
                   L.id.c_str());
    return Ok{};
  };
  // Stops the engines built so far (their threads must end before the process returns).
  auto shutdown_all = [&] {
    for (auto& L : loaded)
      if (L->engine) L->engine->shutdown(/*drain=*/false);
  };
  for (auto& L : loaded)
    if (Status st = load(*L); !st.ok()) {
      shutdown_all();
      return fail(n_models > 1 ? L->id + ": " + st.error_message() : st.error_message());
    }
  for (const auto& [key, d] : drafts) {
    std::string users;
    for (const std::string& u : d.users) users += (users.empty() ? "" : ", ") + u;
    std::fprintf(stderr, "rewind serve: draft model %s loaded once, shared by %s\n",
                 key.substr(0, key.find('\n')).c_str(), users.c_str());
  }

  ServerOptions so;
  so.host = host;
  so.port = static_cast<int>(port.value());
  // --api-key KEY (a comma list, repeatable) and --api-key-file FILE (a key a line), as
  // llama-server's: a request may give any of them.
  // A key is a token68 (RFC 9110 11.2): blanks around one are dropped.
  auto add_keys = [&](const std::string& text, char sep) {
    size_t n = 0;
    for (const std::string& item : split_at(text, sep)) {
      const size_t b = item.find_first_not_of(" \t\r\n\v\f");
      if (b == std::string::npos) continue;
      so.api_keys.push_back(item.substr(b, item.find_last_not_of(" \t\r\n\v\f") + 1 - b));
      ++n;
    }
    return n;
  };
  for (const std::string& v : args->all("--api-key")) add_keys(v, ',');
  for (const std::string& f : args->all("--api-key-file")) {
    auto text = read_whole_file(f);
    if (!text.ok()) return fail("--api-key-file: " + text.error_message());
    std::string t = std::move(text).value();
    if (t.rfind("\xEF\xBB\xBF", 0) == 0) t.erase(0, 3);  // a UTF-8 BOM
    if (add_keys(t, '\n') == 0) return fail("--api-key-file " + f + ": no key in it (one a line)");
  }
  if (args->has("--api-key") && so.api_keys.empty()) return fail("--api-key: an empty key");
  so.max_body = static_cast<size_t>(max_body.value());
  so.max_buffered = static_cast<size_t>(buffered_cap);
  {
    const std::string v = version_text();
    so.build_info = v.substr(0, v.find('\n'));
  }
  so.access_log = access_log.get();
  so.cors_origins = split_commas(args->str("--cors-origin"));
  so.web_page = !args->has("--no-webui");
  so.header_timeout_s = header_to.value();
  so.body_timeout_s = body_to.value();
  so.idle_timeout_s = idle_to.value();
  so.max_connections = static_cast<int>(max_conns.value());
  so.max_connections_per_client = static_cast<int>(max_conns_client.value());
  const size_t grammar_bytes = (static_cast<size_t>(grammar_ram.value()) << 20) / n_models;
  std::vector<ServedModel> served;
  {
    // The memory bound (docs/ARCHITECTURE.md, "Memory"): each engine's terms with its tiers'
    // queues and its grammars; shared by all, the HTTP layer's enforced cap on bodies and
    // answers, the header buffers of the open connections (at most max_header_bytes + 4 KiB
    // each) and a body's parsed tree on each transport thread (at most kJsonTreeFactor x the
    // body: openai_request.h), and a fixed overhead.
    const int64_t http_threads = so.http_threads > 0 ? so.http_threads : 2;
    so.shared_memory_bound.add(
        "http", buffered_cap +
                    max_conns.value() * static_cast<int64_t>(so.max_header_bytes + 4096) +
                    http_threads * kJsonTreeFactor * max_body.value());
    // Threads: the transport's, the pool's workers, each model's engine thread (its pool's
    // caller), the signal thread.
    so.shared_memory_bound.add("fixed", kFixedOverhead + (http_threads + (th.value() - 1) +
                                                          static_cast<int64_t>(n_models) + 1) *
                                                             kPerThreadOverhead);
    int64_t total = so.shared_memory_bound.total();
    std::vector<MemoryReport> bounds;
    for (auto& L : loaded) {
      MemoryReport bound = engine_memory_bound(*L->model, L->eo, static_cast<int>(th.value()));
      if (L->redis) bound.add("redis_queue", static_cast<int64_t>(L->redis_queue));
      if (L->disk) bound.add("disk_queue", static_cast<int64_t>(L->disk_queue));
      // Structured output: the vocabulary trie (built on the first grammar request) and the
      // grammar cache's byte cap, which every compiled automaton shares
      // (grammar/grammar_cache.h).
      bound.add("grammar", static_cast<int64_t>(VocabTrie::memory_bound(*L->tok) + grammar_bytes));
      total += bound.total();
      bounds.push_back(std::move(bound));
    }
    std::fprintf(stderr, "rewind serve: memory bound (the most these options allow) %.1f MiB (",
                 total / 1048576.0);
    for (size_t k = 0; k < loaded.size(); ++k) {
      if (n_models > 1) std::fprintf(stderr, "%s%s: ", k ? "; " : "", loaded[k]->id.c_str());
      for (size_t i = 0; i < bounds[k].kinds.size(); ++i)
        std::fprintf(stderr, "%s%s %.1f", i ? ", " : "", bounds[k].kinds[i].first.c_str(),
                     bounds[k].kinds[i].second / 1048576.0);
    }
    std::fprintf(stderr, "%s", n_models > 1 ? "; shared: " : ", ");
    for (size_t i = 0; i < so.shared_memory_bound.kinds.size(); ++i)
      std::fprintf(stderr, "%s%s %.1f", i ? ", " : "",
                   so.shared_memory_bound.kinds[i].first.c_str(),
                   so.shared_memory_bound.kinds[i].second / 1048576.0);
    std::fprintf(stderr, " MiB)\n");
    // A bound past what the machine (or its cgroup) holds is a server that can be killed once
    // its sequences and cache fill.
    if (const int64_t usable = usable_memory_bytes(); usable > 0 && total > usable)
      std::fprintf(
          stderr,
          "rewind serve: warning: the memory bound %.1f MiB exceeds the %.1f MiB this "
          "process may use; lower --parallel, --ctx-size, --checkpoint-max, --cache-ram or "
          "--grammar-cache-ram, or expect to run out of memory under full load\n",
          total / 1048576.0, static_cast<double>(usable) / 1048576.0);
    for (size_t k = 0; k < loaded.size(); ++k) {
      LoadedModel& L = *loaded[k];
      const StateShape sh = L.model->state_shape();
      const std::string who = n_models > 1 ? L.id + ": " : "";  // which model a line is about
      std::fprintf(stderr,
                   "rewind serve: %sKV cache K %s, V %s: %.1f KiB a token, %.1f KiB a page\n",
                   who.c_str(), kv_type_name(sh.kv_types.k), kv_type_name(sh.kv_types.v),
                   sh.kv_bytes_per_token() / 1024.0, static_cast<double>(sh.page_bytes()) / 1024.0);
      // A recurrent state's checkpoint against the cache budget: one that holds only a few
      // resumes little (a Mamba2 model's checkpoint is tens of MiB).
      const double ck = static_cast<double>(sh.rec_floats()) * sizeof(float);
      if (ck > 0 && L.eo.cache_enabled) {
        const double fits = static_cast<double>(L.eo.cache.budget_bytes) / ck;
        std::fprintf(stderr, "rewind serve: %sa checkpoint of the recurrent state: %.1f MiB\n",
                     who.c_str(), ck / 1048576.0);
        if (fits < 4)
          std::fprintf(stderr,
                       "rewind serve: warning: %sthe prefix cache's %.0f MiB hold %s, so few "
                       "conversations resume from one (--cache-ram raises it)\n",
                       who.c_str(), static_cast<double>(L.eo.cache.budget_bytes) / 1048576.0,
                       fits < 1 ? "no checkpoint of this model"
                                : ("at most " + std::to_string(static_cast<int>(fits)) +
                                   " of its checkpoints")
                                      .c_str());
      }
      // What the tokenizer puts around a completion prompt (chat prompts are the template's).
      const auto& pre = L.tok->prefix_ids();
      const auto& suf = L.tok->suffix_ids();
      if (!pre.empty() || !suf.empty()) {
        auto texts = [&](const std::vector<int32_t>& ids) {
          std::string out;
          for (int32_t id : ids) {
            if (!out.empty()) out += ' ';
            out.append(L.tok->token_text(id)).append(" (").append(std::to_string(id)).append(")");
          }
          return out;
        };
        const std::string what = (pre.empty() ? "" : texts(pre) + " before") +
                                 (pre.empty() || suf.empty() ? "" : " and ") +
                                 (suf.empty() ? "" : texts(suf) + " after");
        std::fprintf(stderr, "rewind serve: %sthe tokenizer adds %s a completion prompt\n",
                     who.c_str(), what.c_str());
      }
      L.engine->set_memory_bound(std::move(bounds[k]));
      ServedModel sm;
      sm.engine = L.engine.get();
      sm.tok = &*L.tok;
      sm.tmpl = &*L.tmpl;
      sm.defaults = std::move(L.defaults);
      sm.id = L.id;
      sm.aliases = L.aliases;
      sm.grammar_cache_bytes = grammar_bytes;
      sm.model_path = L.dir;
      sm.chat_template_source = L.template_source;
      served.push_back(std::move(sm));
    }
  }
  HttpServer server(std::move(served), so);
  auto bound = server.bind();
  if (!bound.ok()) {
    shutdown_all();
    return fail(bound.error_message());
  }
  // An IPv6 literal goes in brackets in a URL (RFC 3986: http://[::1]:8080).
  const std::string url = "http://" +
                          (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                          std::to_string(bound.value());
  std::string names;
  double load_s = 0;
  for (const auto& L : loaded) {
    names += (names.empty() ? "" : " ") + (L->aliases.empty() ? L->id : [&] {
               std::string a;
               for (const std::string& n : L->aliases) a += (a.empty() ? "" : ",") + n;
               return a;
             }());
    load_s += L->load_s;
  }
  // Each model's own sizes (--model-opt may set them apart), named when there are several.
  std::string sizes;
  for (const auto& L : loaded)
    sizes += (sizes.empty() ? "" : "; ") + (n_models > 1 ? L->id + ": " : std::string()) +
             "parallel " + std::to_string(L->settings.parallel) + ", ctx " +
             std::to_string(L->settings.ctx) +
             (L->settings.n_predict > 0
                  ? ", at most " + std::to_string(L->settings.n_predict) + " tokens a reply"
                  : std::string()) +
             ", itl target " + step_target_string(L->settings.itl_target);
  std::printf(
      "rewind serve: listening on %s (model%s %s, %s, loaded in %.2f s; %s, cache %s%s)\n",
      url.c_str(), n_models > 1 ? "s" : "", names.c_str(), loaded[0]->model->isa(), load_s,
      sizes.c_str(),
      loaded[0]->eo.cache_enabled ? (std::to_string(cache_ram.value()) + " MiB").c_str() : "off",
      n_models > 1 ? " split evenly" : "");
  std::printf(
      "try: curl %s/v1/chat/completions -H 'Content-Type: application/json'%s "
      "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'\n",
      url.c_str(), so.api_keys.empty() ? "" : " -H 'Authorization: Bearer <api-key>'");
  std::printf("web page: %s/ (chat and the prefix cache's tree)\n", url.c_str());
  std::fflush(stdout);

  const double grace_s = grace.value();
  std::atomic<bool> exiting{false};
  std::thread sig_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (exiting.load()) return;
    std::fprintf(stderr, "rewind serve: signal %d, draining (running requests get %g s)\n", sig,
                 grace_s);
    server.drain();  // stop accepting; idle connections close
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(grace_s));
    while (!exiting.load() && server.in_flight() > 0 &&
           std::chrono::steady_clock::now() < deadline) {
      timespec ts{0, 50 * 1000 * 1000};
      const int again = sigtimedwait(&sigs, nullptr, &ts);
      if (again == SIGINT || again == SIGTERM) break;  // no more grace
    }
    // Cancels what is left: streams end with a final chunk and [DONE], whole requests get 503.
    shutdown_all();
    // Their last bytes get a few seconds to leave; then every connection is closed.
    const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!exiting.load() && std::chrono::steady_clock::now() < hard) {
      timespec ts{0, 50 * 1000 * 1000};
      sigtimedwait(&sigs, nullptr, &ts);
    }
    if (!exiting.load()) server.stop();
  });
  server.run();
  exiting.store(true);
  pthread_kill(sig_thread.native_handle(), SIGUSR1);
  sig_thread.join();
  shutdown_all();
  for (auto& L : loaded) {
    if (L->disk) L->disk->flush();    // the checkpoints still queued reach the disk
    if (L->redis) L->redis->flush();  // and Redis, while it answers
  }
  std::fprintf(stderr, "rewind serve: stopped\n");
  return 0;
}

}  // namespace rw::app
