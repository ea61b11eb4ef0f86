// `rewind run`: tokenizes a prompt, prefills it (in chunks), then decodes up to N tokens with
// the chosen sampler (optionally speculatively), streaming valid UTF-8 to stdout; then prints
// load time, prefill and decode times and rates and speculation figures (or one JSON object).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "rewind/base/file.h"
#include "rewind/engine/engine.h"
#include "rewind/sample/sampler.h"
#include "rewind/server/generation_defaults.h"
#include "rewind/tokenizer/tokenizer.h"
#include "spec_args.h"

namespace rw::app {

namespace {

std::string json_escape(const std::string& s) {
  return nlohmann::json(s).dump();
}

// Below this many prompt tokens the prefill rate is mostly the first step's fixed costs
// (sampling, waking the threads), and the printed line says so.
constexpr int64_t kFewPromptTokens = 32;

}  // namespace

int cmd_run(int argc, char** argv) {
  auto args = parse_args("run", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("run");
  if (args->has("--prompt") == args->has("--file"))
    return fail(args->has("--prompt") ? "-p/--prompt and -f/--file both give the prompt; keep one"
                                      : "-p/--prompt TEXT or -f/--file FILE is required (rewind "
                                        "run --help)");
  std::string prompt_text = args->str("--prompt");
  if (args->has("--file")) {
    auto text = read_whole_file(args->str("--file"));
    if (!text.ok()) return fail("-f/--file: " + text.error_message());
    prompt_text = std::move(text).value();
  }
  auto model_arg = model_or_builtin(args->str("--model"), args->has("--quiet"));
  if (!model_arg.ok()) return fail(model_arg.error_message());
  const std::string dir = model_arg.value();
  auto n_gen = args->int_("--n-predict", 32);
  auto temp = args->num("--temperature", 0.0);
  auto top_k = args->int_("--top-k", 0);
  auto top_p = args->num("--top-p", 1.0);
  auto min_p = args->num("--min-p", 0.0);
  auto seed = args->int_("--seed", 0);
  auto th = args->int_("--threads", default_threads());
  auto chunk = args->int_("--chunk", 512);
  auto ctx = args->int_("--ctx-size", -1);  // -1: not given
  for (auto* r : {&n_gen, &top_k, &seed, &th, &chunk, &ctx})
    if (!r->ok()) return fail(r->error_message());
  for (auto* r : {&temp, &top_p, &min_p})
    if (!r->ok()) return fail(r->error_message());
  if ((n_gen.value() < 1 && n_gen.value() != -1) || n_gen.value() > (int64_t{1} << 30))
    return fail("-n/--n-predict must be >= 1, or -1 (up to the model's context length)");
  if (args->has("--ctx-size") && (ctx.value() == 1 || ctx.value() < 0))
    return fail("-c/--ctx-size must be >= 2, or 0 (the model's)");
  if (ctx.value() > (int64_t{1} << 31) - 1) return fail("-c/--ctx-size must be < 2^31");
  if (th.value() < 1) return fail("--threads must be >= 1");
  if (chunk.value() < 1) return fail("--chunk must be >= 1");
  if (temp.value() < 0) return fail("--temperature must be >= 0");
  if (!(top_p.value() >= 0 && top_p.value() <= 1)) return fail("--top-p must be in [0, 1]");
  if (min_p.value() < 0 || min_p.value() > 1) return fail("--min-p must be in [0, 1]");
  if (top_k.value() < 0) return fail("--top-k must be >= 0");
  const bool json = args->has("--json");
  const bool quiet = args->has("--quiet");
  if (quiet) ProgressLine::silence();

  auto tok = load_tokenizer(dir);
  if (!tok.ok()) return fail(tok.error_message());
  ThreadPool pool(static_cast<int>(th.value()));
  const std::string store = args->str("--weights", "auto");
  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  auto kv = kv_types_from(*args);
  if (!kv.ok()) return fail(kv.error_message());
  auto spec = spec_from_args(args.value(), store, kernels.value(), &pool);
  if (!spec.ok()) return fail(spec.error_message());
  double load_s = 0;
  auto model =
      load_model(dir, store, kernels.value(), &pool, &load_s, spec->wants_mtp(), kv.value());
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();
  if (Status sc = spec_check(m, spec->cfg); !sc.ok()) return fail(sc.error_message());

  std::vector<int32_t> prompt = tok->encode_prompt(prompt_text);
  if (prompt.empty()) return fail("the prompt encodes to no tokens");
  for (int32_t t : prompt)
    if (t >= m.config().vocab_size)
      return fail("tokenizer id " + std::to_string(t) + " is outside the model's vocab");

  // The context: -c (0: the model's), else with -n -1 (llama.cpp's "until the end") the model's;
  // generation stops where it is full.
  int64_t n_new = n_gen.value();
  if (ctx.value() >= 0 || n_new == -1) {
    const bool given = ctx.value() >= 0;
    auto mc = ctx_or_model(given ? ctx.value() : 0, m.config(), given ? "-c 0" : "-n -1");
    if (!mc.ok()) return fail(mc.error_message());
    const int64_t left = mc.value() - static_cast<int64_t>(prompt.size());
    if (left < 1)
      return fail("the prompt (" + std::to_string(prompt.size()) + " tokens) fills " +
                  (given && ctx.value() > 0 ? "--ctx-size " : "the model's context length ") +
                  std::to_string(mc.value()));
    n_new = n_new == -1 ? left : std::min(n_new, left);
  }

  EngineOptions eo;
  eo.cache_enabled = false;
  eo.step_tokens = chunk.value();
  eo.ctx_size = static_cast<int64_t>(prompt.size()) + n_new;  // what this one request needs
  // Ids past the tokenizer (padding rows of the embedding) are never sampled.
  eo.sample_vocab = std::min(static_cast<int32_t>(m.config().vocab_size), tok->vocab_size());
  Engine engine(m, &pool, eo);
  Request req;
  req.prompt = prompt;
  req.max_tokens = static_cast<int32_t>(n_new);
  req.sampling.temperature = static_cast<float>(temp.value());
  req.sampling.top_k = static_cast<int32_t>(top_k.value());
  req.sampling.top_p = static_cast<float>(top_p.value());
  req.sampling.min_p = static_cast<float>(min_p.value());
  req.sampling.seed = static_cast<uint64_t>(seed.value());
  if (Status ps = penalties_from(*args, &req.sampling); !ps.ok()) return fail(ps.error_message());
  if (!args->has("--ignore-eos"))
    req.stop_ids = load_generation_defaults(dir, m.config().eos_token_ids, tok.value()).stop_ids;
  req.spec = spec->cfg;
  // A long prompt's first prefill shows progress on a terminal.
  ProgressLine prefill_progress("prefill", 1e3, "k tokens", 2048);
  req.on_prefill = [&](int64_t done, int64_t total) {
    prefill_progress(static_cast<size_t>(done), static_cast<size_t>(total));
    if (done == total) prefill_progress.finish();
  };
  StreamDecoder dec(tok.value());
  std::string text;
  auto on_token = [&](int32_t t) {
    if (req.stop_ids.count(t)) return;  // the end-of-sequence token is not text
    std::string piece = dec.push(t);
    text += piece;
    if (!json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
  };
  auto rep = engine.generate(req, on_token);
  if (!rep.ok()) return fail(rep.error_message());
  const std::string tail = dec.flush();
  text += tail;
  const std::vector<int32_t>& out = rep->tokens;
  const bool eos = !out.empty() && req.stop_ids.count(out.back());
  const int64_t n = static_cast<int64_t>(prompt.size());
  // Prefill: from the request's start (the model loaded, the prompt tokenized) to the first
  // generated token, so its time includes the first step's sampling and waking the pool's
  // threads; the rate is the prompt's tokens over that time (for a few tokens it is mostly
  // that fixed cost). Decode: the tokens after the first, over the time after it.
  const double prefill_ms = rep->report.ttft_ms,
               decode_ms = rep->report.total_ms - rep->report.ttft_ms;
  const double prefill_tps = prefill_ms > 0 ? static_cast<double>(n) / (prefill_ms / 1e3) : 0.0;
  const int64_t n_dec = std::max<int64_t>(0, static_cast<int64_t>(out.size()) - 1);
  const double decode_tps =
      n_dec > 0 && decode_ms > 0 ? static_cast<double>(n_dec) / (decode_ms / 1e3) : 0.0;
  const SpecStats& ss = rep->report.spec;
  const double acc =
      ss.drafted ? static_cast<double>(ss.accepted) / static_cast<double>(ss.drafted) : 0.0;
  if (json) {
    std::printf("{\"text\":%s,\"tokens\":[", json_escape(text).c_str());
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf(
        "],\"prompt_tokens\":%lld,\"generated_tokens\":%zu,\"stop\":\"%s\",\"load_s\":%.3f,"
        "\"prefill_ms\":%.3f,\"prefill_tok_s\":%.2f,\"decode_tokens\":%lld,\"decode_ms\":%.3f,"
        "\"decode_tok_s\":%.2f,\"threads\":%lld,\"steps_alone\":%lld,\"isa\":\"%s\","
        "\"spec\":\"%s\",\"spec_rounds\":%lld,\"spec_drafted\":%lld,\"spec_accepted\":%lld,"
        "\"spec_replayed\":%lld,\"acceptance\":%.4f}\n",
        static_cast<long long>(n), out.size(), eos ? "eos" : "length", load_s, prefill_ms,
        prefill_tps, static_cast<long long>(n_dec), decode_ms, decode_tps,
        static_cast<long long>(th.value()), static_cast<long long>(pool.steps_alone()), m.isa(),
        spec_kind_name(spec->cfg.kind), static_cast<long long>(ss.rounds),
        static_cast<long long>(ss.drafted), static_cast<long long>(ss.accepted),
        static_cast<long long>(ss.replayed), acc);
  } else {
    // Steps the pool ran on this thread alone: too small to share, or measured faster alone
    // (another process on a core; base/thread_pool.h).
    const std::string alone_note =
        th.value() > 1 && pool.steps_alone() > 0
            ? " (" + std::to_string(pool.steps_alone()) + " steps on one: small or faster so)"
            : "";
    std::fputs(tail.c_str(), stdout);
    std::printf("\n");
    if (quiet) return 0;
    std::fprintf(stderr,
                 "\n[%lld prompt tokens, %zu generated (%s)] load %.2f s; prefill %.2f ms to the "
                 "first token (%.1f tok/s%s); decode %lld tokens after the first in %.2f ms "
                 "(%.1f tok/s); %lld threads%s, %s\n",
                 static_cast<long long>(n), out.size(), eos ? "eos" : "length", load_s, prefill_ms,
                 prefill_tps, n < kFewPromptTokens ? ", mostly fixed costs for so few tokens" : "",
                 static_cast<long long>(n_dec), decode_ms, decode_tps,
                 static_cast<long long>(th.value()), alone_note.c_str(), m.isa());
    if (spec->cfg.kind != SpecKind::Off)
      std::fprintf(stderr,
                   "[speculative %s, k %d: %lld rounds, %lld drafted, %lld accepted (%.1f%%), "
                   "%lld tokens replayed]\n",
                   spec_kind_name(spec->cfg.kind), spec->cfg.k, static_cast<long long>(ss.rounds),
                   static_cast<long long>(ss.drafted), static_cast<long long>(ss.accepted),
                   100.0 * acc, static_cast<long long>(ss.replayed));
  }
  return 0;
}

}  // namespace rw::app
