// `rewind logits`: runs a token list through the model in one forward pass and prints
// {"positions":[...],"logits":[[...],...]} with every float written so that it reads back
// exactly (%.9g). Tests and outside checks compare against references with it. With --prompt
// instead of --tokens the text is encoded by the model's tokenizer and the ids are printed too
// ("tokens":[...]), to compare a tokenizer with another implementation's.
#include <algorithm>
#include <cstdio>

#include "args.h"
#include "commands.h"

namespace rw::app {

int cmd_logits(int argc, char** argv) {
  auto args = parse_args("logits", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("logits");
  if (args->str("--model").empty()) return fail("--model DIR|FILE.gguf|NAME is required");
  auto model_arg = model_path_or_stored(args->str("--model"));  // a pulled name too
  if (!model_arg.ok()) return fail(model_arg.error_message());
  const std::string dir = model_arg.value();
  const bool from_text = args->has("--prompt");
  if (from_text == args->has("--tokens")) return fail("give one of --tokens and --prompt");
  auto toks = args->int_list("--tokens");
  if (!toks.ok()) return fail(toks.error_message());
  if (!from_text && toks->empty()) return fail("--tokens needs at least one token id");
  auto pos = args->int_list("--positions");
  if (!pos.ok()) return fail(pos.error_message());
  auto th = args->int_("--threads", default_threads());
  if (!th.ok()) return fail(th.error_message());
  if (th.value() < 1) return fail("--threads must be >= 1");
  ThreadPool pool(static_cast<int>(th.value()));
  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  auto kv = kv_types_from(*args);
  if (!kv.ok()) return fail(kv.error_message());
  auto model = load_model(dir, args->str("--weights", "auto"), kernels.value(), &pool, nullptr,
                          false, kv.value());
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();

  std::vector<int64_t> ids = toks.value();
  if (from_text) {
    auto tok = load_tokenizer(dir);
    if (!tok.ok()) return fail(tok.error_message());
    for (int32_t t : tok->encode_prompt(args->str("--prompt"))) ids.push_back(t);
    if (ids.empty()) return fail("the prompt encodes to no tokens");
  }
  std::vector<int32_t> tokens;
  for (int64_t t : ids) {
    if (t < 0 || t >= m.config().vocab_size)
      return fail("token id " + std::to_string(t) + " out of range [0, " +
                  std::to_string(m.config().vocab_size) + ")");
    tokens.push_back(static_cast<int32_t>(t));
  }
  std::vector<int64_t> positions = pos.value();
  if (positions.empty())
    for (size_t i = 0; i < tokens.size(); ++i) positions.push_back(static_cast<int64_t>(i));
  // The forward wants ascending unique rows; print in the order asked.
  std::vector<int32_t> rows;
  for (int64_t p : positions) {
    if (p < 0 || p >= static_cast<int64_t>(tokens.size()))
      return fail("position " + std::to_string(p) + " out of range [0, " +
                  std::to_string(tokens.size()) + ")");
    rows.push_back(static_cast<int32_t>(p));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());

  SequenceState st = m.new_state();
  SeqInput in{&st, tokens, rows};
  std::vector<float> logits;
  Status s = m.forward(std::span<SeqInput>(&in, 1), &logits, &pool);
  if (!s.ok()) return fail(s.error_message());
  const int64_t V = m.config().vocab_size;
  std::printf("{");
  if (from_text) {
    std::printf("\"tokens\":[");
    for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%d", i ? "," : "", tokens[i]);
    std::printf("],");
  }
  std::printf("\"positions\":[");
  for (size_t i = 0; i < positions.size(); ++i)
    std::printf("%s%lld", i ? "," : "", static_cast<long long>(positions[i]));
  std::printf("],\"logits\":[");
  for (size_t i = 0; i < positions.size(); ++i) {
    const size_t r = static_cast<size_t>(std::lower_bound(rows.begin(), rows.end(), positions[i]) -
                                         rows.begin());
    std::printf("%s[", i ? "," : "");
    for (int64_t v = 0; v < V; ++v) std::printf("%s%.9g", v ? "," : "", logits[r * V + v]);
    std::printf("]");
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace rw::app
