// rewind: command-line entry point. Subcommands live in apps/cmd_*.cpp and apps/make_model.cpp.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "rewind/base/file.h"
#include "rewind/io/gguf.h"
#include "rewind/kernels/matmul.h"
#include "rewind/tokenizer/gguf_vocab.h"

namespace rw::app {

int fail(const std::string& msg) {
  std::fprintf(stderr, "rewind: %s\n", msg.c_str());
  return 1;
}

Result<Args> parse_args(const std::string& command, int argc, char** argv) {
  const CommandSpec* spec = command_spec(command);
  if (!spec) return make_error("no option table for command '" + command + "'");
  REWIND_TRY(Args a, Args::parse(argc, argv, *spec));
  if (find_option(*spec, "--n-gpu-layers")) REWIND_TRY_STATUS(llama_compat_from(a));
  return a;
}

int print_help(const std::string& command) {
  const CommandSpec* spec = command_spec(command);
  if (!spec) return fail("no help for command '" + command + "'");
  std::fputs(help_text(*spec).c_str(), stdout);
  return 0;
}

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ProgressLine::operator()(size_t done, size_t total) {
  // A terminal only: a pipe or a log file gets no carriage-return lines.
  static const bool tty = isatty(STDERR_FILENO) != 0;
  if (!tty || silenced_ || total < min_total_) return;
  const double t = now_seconds();
  if (start_ == 0) start_ = t;
  if (t - last_ < 0.25 && done < total) return;
  last_ = t;
  shown_ = true;
  const double frac = static_cast<double>(done) / static_cast<double>(total);
  const double secs = t - start_;
  std::string rate;
  if (secs > 0.5 && done > 0) {
    char buf[64];
    const double per_s = static_cast<double>(done) / secs;
    std::snprintf(buf, sizeof buf, ", %.2f %s/s, %s %.0f s", per_s / unit_, unit_name_.c_str(),
                  done < total ? "ETA" : "in",
                  done < total ? static_cast<double>(total - done) / per_s : secs);
    rate = buf;
  }
  std::fprintf(stderr, "\r%s: %5.1f%% of %.2f %s%s\033[K", label_.c_str(), 100.0 * frac,
               static_cast<double>(total) / unit_, unit_name_.c_str(), rate.c_str());
  std::fflush(stderr);
}

void ProgressLine::finish() {
  if (shown_) std::fprintf(stderr, "\n");
  shown_ = false;
}

Result<std::string> builtin_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
#ifdef REWIND_SOURCE_DIR
  candidates.push_back(fs::path(REWIND_SOURCE_DIR) / kBuiltinModel);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
    candidates.push_back(bin / ".." / ".." / kBuiltinModel);                // build/<preset>/rewind
    candidates.push_back(bin / ".." / "share" / "rewind" / kBuiltinModel);  // <prefix>/bin/rewind
  }
  std::vector<std::string> looked;
  for (const fs::path& c : candidates) {
    fs::path dir = fs::weakly_canonical(c, ec);
    if (ec) dir = c.lexically_normal();
    if (fs::is_regular_file(dir / "config.json", ec) &&
        fs::is_regular_file(dir / "model.safetensors", ec))
      return dir.string();
    if (std::find(looked.begin(), looked.end(), dir.string()) == looked.end())
      looked.push_back(dir.string());
  }
  std::string where;
  for (size_t i = 0; i < looked.size(); ++i)
    where += (i == 0 ? "" : i + 1 == looked.size() ? " or " : ", ") + looked[i];
  return make_error(std::string("no --model given, and the built-in model ") + kBuiltinModel +
                    " is not in " + (where.empty() ? "any known place" : where) +
                    "; pass --model DIR|FILE.gguf");
}

Result<std::string> model_or_builtin(const std::string& given, bool quiet) {
  if (!given.empty()) return model_path_or_stored(given);
  REWIND_TRY(std::string dir, builtin_model_dir());
  if (!quiet)
    std::fprintf(stderr, "rewind: no --model given; using the built-in model %s (%s)\n",
                 kBuiltinModel, dir.c_str());
  return dir;
}

bool is_gguf_path(const std::string& model_path) {
  return std::filesystem::is_regular_file(model_path);
}

Result<Tokenizer> load_tokenizer(const std::string& model_path) {
  if (!is_gguf_path(model_path)) return Tokenizer::load_dir(model_path);
  REWIND_TRY(GgufFile g, GgufFile::open(model_path));
  return tokenizer_from_gguf(g);
}

namespace {
// True when the checkpoint directory ships a chat template (tokenizer_config.json
// `chat_template` or chat_template.jinja); then it must load.
bool has_chat_template(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir + "/chat_template.jinja", ec)) return true;
  auto text = read_whole_file(dir + "/tokenizer_config.json");
  if (!text.ok()) return false;
  auto j = nlohmann::json::parse(text.value(), nullptr, false);
  return !j.is_discarded() && j.is_object() && j.contains("chat_template") &&
         !j["chat_template"].is_null();
}
}  // namespace

Result<std::string> read_template_file(const std::string& path) {
  const std::string what = "--chat-template-file " + path;
  auto read = read_whole_file(path);
  if (!read.ok()) return make_error("--chat-template-file: " + read.error_message());
  const std::string text = std::move(read).value();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return make_error(what + ": the file is empty");
  auto t = ChatTemplate::from_string(text, "", "");
  if (!t.ok()) return make_error(what + ": " + t.error_message());
  return text;
}

Result<ChatTemplate> load_chat_template(const std::string& model_path, const Tokenizer& tok,
                                        std::string* source, const std::string& template_file,
                                        const std::string& template_option) {
  if (!template_file.empty() && !template_option.empty())
    return make_error("--chat-template and --chat-template-file both give a template; keep one");
  // A GGUF file's template is tokenizer.chat_template (eos: tokenizer.ggml.eos_token_id).
  // bos_token is the text of tokenizer.ggml.bos_token_id ("" without one), as llama.cpp's.
  std::string gguf_template, gguf_eos = "<|im_end|>", gguf_bos;
  const bool gguf = is_gguf_path(model_path);
  if (gguf) {
    REWIND_TRY(GgufFile g, GgufFile::open(model_path));
    REWIND_TRY(gguf_template, chat_template_from_gguf(g));
    auto text_of = [&](int64_t id) {
      return id >= 0 && id < tok.vocab_size() ? tok.token_text(static_cast<int32_t>(id)) : "";
    };
    REWIND_TRY(int64_t eos, g.get_int_or("tokenizer.ggml.eos_token_id", -1));
    if (!text_of(eos).empty()) gguf_eos = text_of(eos);
    REWIND_TRY(int64_t bos, g.get_int_or("tokenizer.ggml.bos_token_id", -1));
    gguf_bos = text_of(bos);
  }
  if (!template_file.empty() || !template_option.empty()) {
    // The given template in place of the model's, with the model's special tokens.
    std::string text, what;
    if (!template_file.empty()) {
      REWIND_TRY(text, read_template_file(template_file));
      what = "--chat-template-file " + template_file;
    } else {
      // llama-server's --chat-template: Jinja text (as with --jinja), or a built-in name, of
      // which rewind has ChatML.
      what = "--chat-template";
      text = template_option == "chatml" ? rewind_chatml_template() : template_option;
      if (text.find("{{") == std::string::npos && text.find("{%") == std::string::npos) {
        std::string m = "--chat-template '";
        m.append(template_option.substr(0, 40))
            .append("': neither a Jinja template nor a built-in name (rewind has chatml); ")
            .append("--chat-template-file reads one from a file");
        return make_error(m);
      }
    }
    if (source) *source = template_file.empty() ? "option" : "file";
    if (!gguf) return ChatTemplate::load_dir(model_path, &text, what);
    auto t = ChatTemplate::from_string(text, gguf_bos, gguf_eos);
    if (!t.ok()) return make_error(what + ": " + t.error_message());
    return t;
  }
  const bool has_template = gguf ? !gguf_template.empty() : has_chat_template(model_path);
  if (source) *source = has_template ? "model" : "rewind-chatml";
  auto tmpl = !has_template ? ChatTemplate::from_string(rewind_chatml_template(), "", "<|im_end|>")
              : gguf        ? ChatTemplate::from_string(gguf_template, gguf_bos, gguf_eos)
                            : ChatTemplate::load_dir(model_path);
  if (!tmpl.ok()) return make_error(tmpl.error_message());  // names the template
  if (!has_template)
    std::fprintf(stderr,
                 "rewind: %s has no chat template; using rewind's ChatML template "
                 "(--chat-template-file gives another)\n",
                 model_path.c_str());
  return tmpl;
}

Status penalties_from(const Args& a, SamplingParams* p) {
  REWIND_TRY(double rep, a.num("--repeat-penalty", p->repetition_penalty));
  REWIND_TRY(int64_t last_n, a.int_("--repeat-last-n", p->repeat_last_n));
  REWIND_TRY(double pres, a.num("--presence-penalty", p->presence_penalty));
  REWIND_TRY(double freq, a.num("--frequency-penalty", p->frequency_penalty));
  if (!(rep > 0 && rep <= 10)) return make_error("--repeat-penalty must be in (0, 10]");
  if (last_n < -1 || last_n > (int64_t{1} << 30))
    return make_error("--repeat-last-n must be >= -1");
  if (!(pres >= -2 && pres <= 2)) return make_error("--presence-penalty must be in [-2, 2]");
  if (!(freq >= -2 && freq <= 2)) return make_error("--frequency-penalty must be in [-2, 2]");
  p->repetition_penalty = static_cast<float>(rep);
  p->repeat_last_n = static_cast<int32_t>(last_n);
  p->presence_penalty = static_cast<float>(pres);
  p->frequency_penalty = static_cast<float>(freq);
  return Ok{};
}

Status sampling_from(const Args& a, SamplingParams* p) {
  REWIND_TRY(double temp, a.num("--temperature", p->temperature));
  REWIND_TRY(int64_t top_k, a.int_("--top-k", p->top_k));
  REWIND_TRY(double top_p, a.num("--top-p", p->top_p));
  REWIND_TRY(double min_p, a.num("--min-p", p->min_p));
  if (!(temp >= 0 && temp <= 1e6)) return make_error("--temperature must be >= 0");
  if (top_k < 0 || top_k > (int64_t{1} << 30)) return make_error("--top-k must be >= 0");
  if (!(top_p >= 0 && top_p <= 1)) return make_error("--top-p must be in [0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return make_error("--min-p must be in [0, 1]");
  p->temperature = static_cast<float>(temp);
  p->top_k = static_cast<int32_t>(top_k);
  p->top_p = static_cast<float>(top_p);
  p->min_p = static_cast<float>(min_p);
  return penalties_from(a, p);
}

Result<int64_t> ctx_or_model(int64_t given, const ModelConfig& c, const std::string& what) {
  if (given != 0) return given;
  if (c.max_position_embeddings < 2)
    return make_error(what + " takes the model's context length, and its max_position_embeddings " +
                      std::to_string(c.max_position_embeddings) + " is too small; give a size");
  return std::min<int64_t>(c.max_position_embeddings, (int64_t{1} << 31) - 1);
}

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

Status llama_compat_from(const Args& a) {
  // llama.cpp's values: -ngl a count, auto or all; -fa on|off|auto or its truthy, falsey and
  // auto spellings.
  if (a.has("--n-gpu-layers")) {
    const std::string ngl = a.str("--n-gpu-layers");
    if (ngl != "auto" && ngl != "all") {
      auto n = a.int_("--n-gpu-layers", 0);
      if (!n.ok())
        return make_error("-ngl/--n-gpu-layers must be a count, auto or all (got '" + ngl + "')");
    }
    if (ngl != "0")
      std::fprintf(stderr, "rewind: note: -ngl %s ignored: rewind runs on the CPU\n", ngl.c_str());
  }
  if (a.has("--flash-attn")) {
    static const std::set<std::string> kValues = {
        "on", "off", "auto", "1", "0", "-1", "true", "false", "yes", "no", "enabled", "disabled"};
    const std::string fa = a.str("--flash-attn");
    if (!kValues.count(fa))
      return make_error("-fa/--flash-attn must be on, off or auto (got '" + fa + "')");
  }
  if (a.has("--ubatch-size")) {
    REWIND_TRY(int64_t ub, a.int_("--ubatch-size", 512));
    if (ub < 1) return make_error("-ub/--ubatch-size must be >= 1");
    std::fprintf(stderr, "rewind: note: -ub %lld ignored: rewind sizes its own matmul tiles\n",
                 static_cast<long long>(ub));
  }
  if (a.has("--threads-batch")) {
    REWIND_TRY(int64_t tb, a.int_("--threads-batch", 1));
    if (tb < 1 && tb != -1) return make_error("-tb/--threads-batch must be >= 1, or -1");
    REWIND_TRY(int64_t t, a.int_("--threads", default_threads()));
    if (tb != -1 && tb != t)
      std::fprintf(stderr,
                   "rewind: note: -tb %lld ignored: the prefill runs on the --threads threads "
                   "(%lld)\n",
                   static_cast<long long>(tb), static_cast<long long>(t));
  }
  return Ok{};
}

Result<KernelOptions> kernel_options_from(const Args& a) {
  KernelOptions k;
  const std::string mode = a.str("--quant-dot", "auto");
  if (mode == "int8") {
    if (!matmul_int8_simd())
      std::fprintf(stderr,
                   "rewind: warning: this CPU has neither AVX-512 VNNI nor AVX2; the int8 dot "
                   "runs its scalar reference (slow)\n");
    k.quant_dot = QuantDot::Int8;
  } else if (mode == "f32") {
    k.quant_dot = QuantDot::F32;
  } else if (mode != "auto") {
    return make_error("--quant-dot must be auto, int8 or f32 (got '" + mode + "')");
  }
  return k;
}

Result<KvTypes> kv_types_from(const Args& a) {
  KvTypes t = kDefaultKvTypes;
  for (auto [flag, out] : {std::pair{"--cache-type-k", &t.k}, std::pair{"--cache-type-v", &t.v}}) {
    if (!a.has(flag)) continue;
    const std::string v = a.str(flag, "");
    if (!parse_kv_type(v, out))
      return make_error(std::string(flag) + " must be f32, bf16, f16 or q8_0 (got '" + v + "')");
  }
  return t;
}

Result<std::unique_ptr<Model>> load_model(const std::string& dir, const std::string& store,
                                          const KernelOptions& kernels, ThreadPool* pool,
                                          double* seconds, bool mtp, const KvTypes& kv) {
  LoadOptions opt;
  opt.pool = pool;
  opt.mtp = mtp;
  opt.kernels = kernels;
  opt.kv_types = kv;
  if (store == "auto") {
    opt.store = WeightStore::Auto;
  } else if (store == "f32") {
    opt.store = WeightStore::F32;
  } else if (store == "bf16") {
    opt.store = WeightStore::BF16;
  } else {
    return make_error("--weights must be auto, f32 or bf16 (got '" + store + "')");
  }
  const double t0 = now_seconds();
  ProgressLine progress("loading " + dir, 1e9, "GB", size_t{64} << 20);
  opt.progress = [&](size_t done, size_t total) { progress(done, total); };
  auto m = Model::load(dir, opt);
  progress.finish();
  if (seconds) *seconds = now_seconds() - t0;
  return m;
}

}  // namespace rw::app

int main(int argc, char** argv) {
  using namespace rw::app;
  using Command = int (*)(int, char**);
  static const std::pair<const char*, Command> kCommands[] = {
      {"make-model", cmd_make_model},
      {"convert", cmd_convert},
      {"run", cmd_run},
      {"logits", cmd_logits},
      {"bench", cmd_bench},
      {"cache-bench", cmd_cache_bench},
      {"serve", cmd_serve},
      {"chat", cmd_chat},
      {"spec-bench", cmd_spec_bench},
      {"pull", cmd_pull},
      {"models", cmd_models},
  };
  if (argc < 2) {
    std::fputs(top_level_help().c_str(), stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") {
    std::fputs(top_level_help().c_str(), stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    if (argc > 2) return fail(cmd + " takes no arguments");
    std::fputs(version_text().c_str(), stdout);
    return 0;
  }
  if (cmd == "help") {
    if (argc == 2) {
      std::fputs(top_level_help().c_str(), stdout);
      return 0;
    }
    if (argc > 3) return fail("usage: rewind help [COMMAND]");
    if (const CommandSpec* spec = command_spec(argv[2])) {
      std::fputs(help_text(*spec).c_str(), stdout);
      return 0;
    }
    const std::string topic = argv[2];
    if (topic == "help" || topic == "version") {
      std::fputs(top_level_help().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "rewind: %s\n", unknown_command_message(topic).c_str());
    return 2;
  }
  for (const auto& [name, fn] : kCommands)
    if (cmd == name) return fn(argc - 2, argv + 2);
  std::fprintf(stderr, "rewind: %s\n", unknown_command_message(cmd).c_str());
  return 2;
}
