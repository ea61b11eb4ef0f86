// `rewind spec-bench`: speculative decoding against plain decoding, side by side in one run on
// the same prompt, greedy. Per method: decode tokens/s (after the first token), speedup over
// plain, drafted / accepted tokens, acceptance rate, replayed tokens, and whether the output is
// token-for-token identical to plain decoding (it must be). Methods:
//   plain      no speculation (the baseline, run first and again last to show its noise)
//   ngram      prompt lookup over the sequence's own tokens
//   draft      --draft DIR, a draft model with the same tokenizer
//   mtp        the checkpoint's MTP head (when it has one; with "plain+head", plain decoding of
//              the model loaded with its head, whose forward also fills the head's KV)
//   oracle     drafts = the plain output itself: every draft accepted; the ceiling for k
//   rejected   drafts that are always wrong at the first position: the cost of a fully
//              rejected round (one token per round, like plain, plus drafting + verification
//              of k+1 tokens + restore and replay)
// Prompt (--workload): "code" (a source file followed by the request to repeat it with one
// change: n-gram lookup has something to find), "text" (the built-in English text), or
// --prompt TEXT.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "args.h"
#include "commands.h"
#include "rewind/engine/engine.h"
#include "rewind/tokenizer/tokenizer.h"
#include "spec_args.h"

namespace rw::app {

namespace {

std::string code_prompt() {
  std::string file;
  const char* names[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
  for (int i = 0; i < 6; ++i) {
    const std::string n = names[i];
    file += "static int " + n +
            "_count(const struct list *l, int key) {\n"
            "  int found = 0;\n"
            "  for (const struct node *p = l->head; p != NULL; p = p->next) {\n"
            "    if (p->key == key) found++;\n"
            "  }\n"
            "  return found;\n"
            "}\n\n";
  }
  return "Here is a C file:\n\n" + file +
         "Rewrite the file with `found` renamed to `hits`. Answer with the whole file.\n\n" +
         file.substr(0, file.size() / 3);
}

struct Row {
  std::string method;
  double tok_s = 0, ms = 0;
  SpecStats st;
  bool identical = true;
  size_t n_out = 0;
};

}  // namespace

int cmd_spec_bench(int argc, char** argv) {
  auto args = parse_args("spec-bench", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("spec-bench");
  auto model_arg = model_or_builtin(args->str("--model"), args->has("--quiet"));
  if (!model_arg.ok()) return fail(model_arg.error_message());
  const std::string dir = model_arg.value();
  auto n_gen = args->int_("--n-predict", 64);
  auto k = args->int_("--draft-k", 4);
  auto th = args->int_("--threads", default_threads());
  for (auto* r : {&n_gen, &k, &th})
    if (!r->ok()) return fail(r->error_message());
  if (n_gen.value() < 2) return fail("-n must be >= 2");
  if (k.value() < 1 || k.value() > SpecConfig::kMaxDraft)
    return fail("--draft-k must be in [1, 16]");
  const std::string workload = args->str("--workload", "code");
  if (workload != "code" && workload != "text") return fail("--workload must be code or text");
  const std::string store = args->str("--weights", "auto");

  auto tok = load_tokenizer(dir);
  if (!tok.ok()) return fail(tok.error_message());
  ThreadPool pool(static_cast<int>(th.value()));
  double load_s = 0;
  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  auto kv = kv_types_from(*args);
  if (!kv.ok()) return fail(kv.error_message());
  auto model = load_model(dir, store, kernels.value(), &pool, &load_s, false, kv.value());
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();
  std::unique_ptr<Model> draft;
  if (args->has("--draft")) {
    double ds = 0;
    auto d =
        load_model(args->str("--draft"), store, kernels.value(), &pool, &ds, false, kv.value());
    if (!d.ok()) return fail(d.error_message());
    draft = std::move(d).value();
  }
  const std::string text = args->has("--prompt") ? args->str("--prompt")
                           : workload == "code"
                               ? code_prompt()
                               : std::string(builtin_training_text().substr(0, 1500));
  std::vector<int32_t> prompt = tok->encode_prompt(text);
  if (prompt.empty()) return fail("the prompt encodes to no tokens");

  EngineOptions eo;
  eo.cache_enabled = false;
  eo.ctx_size = static_cast<int64_t>(prompt.size()) + n_gen.value();
  eo.sample_vocab = std::min(static_cast<int32_t>(m.config().vocab_size), tok->vocab_size());
  Engine engine(m, &pool, eo);
  std::vector<int32_t> ref;
  auto run = [&](const std::string& name, SpecConfig sc) -> Result<Row> {
    Request r;
    r.prompt = prompt;
    r.max_tokens = static_cast<int32_t>(n_gen.value());  // no stop ids: always n tokens
    r.spec = sc;
    REWIND_TRY(Generation gen, engine.generate(r));
    const RequestReport& rep = gen.report;
    Row row;
    row.method = name;
    row.ms = rep.total_ms - rep.ttft_ms;
    row.n_out = gen.tokens.size();
    row.tok_s = static_cast<double>(gen.tokens.size() - 1) / (row.ms / 1e3);
    row.st = rep.spec;
    if (ref.empty()) ref = gen.tokens;
    row.identical = gen.tokens == ref;
    return row;
  };
  SpecConfig base;
  base.k = static_cast<int32_t>(k.value());
  base.adaptive = !args->has("--spec-fixed-k");
  std::vector<Row> rows;
  auto add = [&](const std::string& name, SpecConfig sc) -> bool {
    if (sc.kind != SpecKind::Off) {
      if (Status s = spec_check(m, sc); !s.ok()) {
        std::fprintf(stderr, "rewind: %s skipped: %s\n", name.c_str(), s.error_message().c_str());
        return true;
      }
    }
    auto r = run(name, sc);
    if (!r.ok()) {
      fail(name + ": " + r.error_message());
      return false;
    }
    rows.push_back(r.value());
    return true;
  };
  {
    Request warm;  // page in the weights and warm the caches
    warm.prompt = prompt;
    warm.max_tokens = 2;
    if (auto w = engine.generate(warm); !w.ok()) return fail(w.error_message());
  }
  if (!add("plain", SpecConfig{})) return 1;
  SpecConfig c = base;
  c.kind = SpecKind::Ngram;
  if (!add("ngram", c)) return 1;
  if (draft) {
    c = base;
    c.kind = SpecKind::Draft;
    c.draft = draft.get();
    if (!add("draft", c)) return 1;
  }
  const size_t np = prompt.size();
  c = base;
  c.kind = SpecKind::Custom;
  c.adaptive = false;
  c.custom = [&](std::span<const int32_t> ctx, int32_t kk) {
    std::vector<int32_t> d;
    for (size_t j = ctx.size() - np; j < ref.size() && static_cast<int32_t>(d.size()) < kk; ++j)
      d.push_back(ref[j]);
    return d;
  };
  if (!add("oracle", c)) return 1;
  const int32_t V = eo.sample_vocab;
  c.custom = [&](std::span<const int32_t> ctx, int32_t kk) {
    std::vector<int32_t> d;
    const size_t j = ctx.size() - np;
    for (int32_t i = 0; i < kk; ++i)
      d.push_back(static_cast<int32_t>(((j + i < ref.size() ? ref[j + i] : 0) + 1) % V));
    return d;
  };
  if (!add("rejected", c)) return 1;
  if (!add("plain-again", SpecConfig{})) return 1;
  // MTP: the same checkpoint loaded again with its head (every forward then also fills the
  // head's KV, so its own plain baseline is measured too).
  std::unique_ptr<Model> with_mtp;
  if (m.weights().has_mtp()) {
    double ms = 0;
    auto wm = load_model(dir, store, kernels.value(), &pool, &ms, true, kv.value());
    if (!wm.ok()) return fail(wm.error_message());
    with_mtp = std::move(wm).value();
    Engine mtp_engine(*with_mtp, &pool, eo);
    auto run_mtp = [&](const std::string& name, SpecConfig sc) -> bool {
      Request r;
      r.prompt = prompt;
      r.max_tokens = static_cast<int32_t>(n_gen.value());
      r.spec = sc;
      auto rep = mtp_engine.generate(r);
      if (!rep.ok()) {
        fail(name + ": " + rep.error_message());
        return false;
      }
      Row row;
      row.method = name;
      row.ms = rep->report.total_ms - rep->report.ttft_ms;
      row.n_out = rep->tokens.size();
      row.tok_s = static_cast<double>(rep->tokens.size() - 1) / (row.ms / 1e3);
      row.st = rep->report.spec;
      row.identical = rep->tokens == ref;
      rows.push_back(row);
      return true;
    };
    if (!run_mtp("plain+head", SpecConfig{})) return 1;
    c = base;
    c.kind = SpecKind::Mtp;
    if (!run_mtp("mtp", c)) return 1;
  } else {
    std::fprintf(stderr, "rewind: mtp skipped: the checkpoint has no MTP head\n");
  }

  const double plain = rows[0].tok_s;
  if (args->has("--json")) {
    nlohmann::json j = {{"model", dir},
                        {"prompt_tokens", np},
                        {"generated", n_gen.value()},
                        {"k", k.value()},
                        {"threads", th.value()},
                        {"workload", workload},
                        {"adaptive", base.adaptive},
                        {"rows", nlohmann::json::array()}};
    for (const Row& r : rows)
      j["rows"].push_back(
          {{"method", r.method},
           {"tok_s", r.tok_s},
           {"speedup", r.tok_s / plain},
           {"rounds", r.st.rounds},
           {"drafted", r.st.drafted},
           {"accepted", r.st.accepted},
           {"acceptance", r.st.drafted ? double(r.st.accepted) / double(r.st.drafted) : 0.0},
           {"replayed", r.st.replayed},
           {"identical", r.identical}});
    std::printf("%s\n", j.dump().c_str());  // one line
  } else {
    std::printf("model %s, %zu prompt tokens (%s), %lld generated greedy, k %lld%s, %lld threads\n",
                dir.c_str(), np, args->has("--prompt") ? "--prompt" : workload.c_str(),
                static_cast<long long>(n_gen.value()), static_cast<long long>(k.value()),
                base.adaptive ? " adaptive" : " fixed", static_cast<long long>(th.value()));
    std::printf("%-12s %9s %8s %7s %8s %8s %7s %8s %9s\n", "method", "tok/s", "speedup", "rounds",
                "drafted", "accepted", "accept", "replayed", "identical");
    for (const Row& r : rows)
      std::printf("%-12s %9.2f %7.2fx %7lld %8lld %8lld %6.1f%% %8lld %9s\n", r.method.c_str(),
                  r.tok_s, r.tok_s / plain, static_cast<long long>(r.st.rounds),
                  static_cast<long long>(r.st.drafted), static_cast<long long>(r.st.accepted),
                  r.st.drafted ? 100.0 * double(r.st.accepted) / double(r.st.drafted) : 0.0,
                  static_cast<long long>(r.st.replayed), r.identical ? "yes" : "NO");
  }
  for (const Row& r : rows)
    if (!r.identical) return fail(r.method + ": output differs from plain greedy decoding");
  return 0;
}

}  // namespace rw::app
