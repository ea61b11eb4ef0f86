// `rewind run`: tokenizes a prompt, prefills it (in chunks), then decodes up to N tokens with
// the chosen sampler, streaming valid UTF-8 to stdout; then prints load time, prefill and
// decode throughput (or one JSON object with --json).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "rewind/sample/sampler.h"
#include "rewind/server/generation_defaults.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw::app {

namespace {

std::string json_escape(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

int cmd_run(int argc, char** argv) {
  auto args = Args::parse(
      argc, argv,
      {"--model", "--prompt", "-n", "--temperature", "--top-k", "--top-p", "--min-p", "--seed",
       "--threads", "-t", "--weights", "--chunk"},
      {"--json", "--ignore-eos", "--help"});
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) {
    std::printf(
        "usage: rewind run --model DIR|FILE.gguf --prompt TEXT [-n N] [--temperature T] [--top-k "
        "K]\n"
        "                  [--top-p P] [--min-p P] [--seed S] [--threads N] [--chunk N]\n"
        "                  [--weights auto|f32|bf16] [--ignore-eos] [--json]\n"
        "  -n N          tokens to generate (default 32)\n"
        "  --temperature 0 = greedy (default)\n"
        "  --chunk N     prefill chunk size (default 512; results do not depend on it)\n");
    return 0;
  }
  const std::string dir = args->str("--model");
  if (dir.empty()) return fail("--model DIR|FILE.gguf is required");
  if (!args->has("--prompt")) return fail("--prompt TEXT is required");
  auto n_gen = args->int_("-n", 32);
  auto temp = args->num("--temperature", 0.0);
  auto top_k = args->int_("--top-k", 0);
  auto top_p = args->num("--top-p", 1.0);
  auto min_p = args->num("--min-p", 0.0);
  auto seed = args->int_("--seed", 0);
  auto th = args->int_(args->has("-t") ? "-t" : "--threads", default_threads());
  auto chunk = args->int_("--chunk", 512);
  for (auto* r : {&n_gen, &top_k, &seed, &th, &chunk})
    if (!r->ok()) return fail(r->error_message());
  for (auto* r : {&temp, &top_p, &min_p})
    if (!r->ok()) return fail(r->error_message());
  if (n_gen.value() < 0) return fail("-n must be >= 0");
  if (th.value() < 1) return fail("--threads must be >= 1");
  if (chunk.value() < 1) return fail("--chunk must be >= 1");
  if (temp.value() < 0) return fail("--temperature must be >= 0");
  if (top_p.value() <= 0 || top_p.value() > 1) return fail("--top-p must be in (0, 1]");
  if (min_p.value() < 0 || min_p.value() > 1) return fail("--min-p must be in [0, 1]");
  if (top_k.value() < 0) return fail("--top-k must be >= 0");
  const bool json = args->has("--json");

  auto tok = load_tokenizer(dir);
  if (!tok.ok()) return fail(tok.error_message());
  ThreadPool pool(static_cast<int>(th.value()));
  double load_s = 0;
  auto model = load_model(dir, args->str("--weights", "auto"), &pool, &load_s);
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();

  std::vector<int32_t> prompt = tok->encode(args->str("--prompt"));
  if (prompt.empty()) return fail("the prompt encodes to no tokens");
  for (int32_t t : prompt)
    if (t >= m.config().vocab_size)
      return fail("tokenizer id " + std::to_string(t) + " is outside the model's vocab");
  const std::set<int32_t> stops = load_generation_defaults(dir, m.config(), tok.value()).stop_ids;

  SamplingParams sp;
  sp.temperature = static_cast<float>(temp.value());
  sp.top_k = static_cast<int32_t>(top_k.value());
  sp.top_p = static_cast<float>(top_p.value());
  sp.min_p = static_cast<float>(min_p.value());
  sp.seed = static_cast<uint64_t>(seed.value());
  Sampler sampler(sp);

  SequenceState st = m.new_state();
  std::vector<float> logits;
  const double t0 = now_seconds();
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t b = 0; b < n; b += chunk.value()) {
    const int64_t e = std::min(n, b + chunk.value());
    SeqInput in{&st, std::span<const int32_t>(prompt.data() + b, static_cast<size_t>(e - b)), {}};
    if (e == n) in.logit_rows = {static_cast<int32_t>(e - b - 1)};
    Status s = m.forward(std::span<SeqInput>(&in, 1), &logits, &pool);
    if (!s.ok()) return fail(s.error_message());
  }
  const double t1 = now_seconds();
  const int32_t V = static_cast<int32_t>(m.config().vocab_size);
  const int32_t n_tok_vocab = std::min(V, tok->vocab_size());

  StreamDecoder dec(tok.value());
  std::string text;
  std::vector<int32_t> out;
  std::string stop_reason = "length";
  for (int64_t i = 0; i < n_gen.value(); ++i) {
    // Ids past the tokenizer (padding rows of the embedding) are never sampled.
    const int32_t next = sampler.sample(logits.data(), n_tok_vocab);
    out.push_back(next);
    if (!args->has("--ignore-eos") && stops.count(next)) {
      stop_reason = "eos";
      break;
    }
    std::string piece = dec.push(next);
    text += piece;
    if (!json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == n_gen.value()) break;
    SeqInput in{&st, std::span<const int32_t>(&out.back(), 1), {0}};
    Status s = m.forward(std::span<SeqInput>(&in, 1), &logits, &pool);
    if (!s.ok()) return fail(s.error_message());
  }
  const std::string tail = dec.flush();
  text += tail;
  const double t2 = now_seconds();
  const double prefill_tps = static_cast<double>(n) / (t1 - t0);
  // Decode speed counts forward passes after the prefill (one per generated token but the last).
  const int64_t n_dec = std::max<int64_t>(0, static_cast<int64_t>(out.size()) - 1);
  const double decode_tps = n_dec > 0 ? static_cast<double>(n_dec) / (t2 - t1) : 0.0;
  if (json) {
    std::printf("{\"text\":%s,\"tokens\":[", json_escape(text).c_str());
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf("],\"prompt_tokens\":%lld,\"generated_tokens\":%zu,\"stop\":\"%s\",\"load_s\":%.3f,"
                "\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f,\"threads\":%lld,\"isa\":\"%s\"}\n",
                static_cast<long long>(n), out.size(), stop_reason.c_str(), load_s, prefill_tps,
                decode_tps, static_cast<long long>(th.value()), m.isa());
  } else {
    std::fputs(tail.c_str(), stdout);
    std::printf("\n");
    std::fprintf(stderr,
                 "\n[%lld prompt tokens, %zu generated (%s)] load %.2f s, prefill %.1f tok/s, "
                 "decode %.1f tok/s, %lld threads, %s\n",
                 static_cast<long long>(n), out.size(), stop_reason.c_str(), load_s, prefill_tps,
                 decode_tps, static_cast<long long>(th.value()), m.isa());
  }
  return 0;
}

}  // namespace rw::app
