// rewind: command-line entry point. Subcommands live in apps/cmd_*.cpp and apps/make_model.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "rewind/io/gguf.h"
#include "rewind/kernels/matmul.h"
#include "rewind/tokenizer/gguf_vocab.h"

namespace rw::app {

int fail(const std::string& msg) {
  std::fprintf(stderr, "rewind: %s\n", msg.c_str());
  return 1;
}

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ProgressLine::operator()(size_t done, size_t total) {
  if (total < min_total_) return;
  const double t = now_seconds();
  if (t - last_ < 0.25 && done < total) return;
  last_ = t;
  shown_ = true;
  std::fprintf(stderr, "\r%s: %5.1f%% of %.2f %s", label_.c_str(),
               100.0 * static_cast<double>(done) / static_cast<double>(total),
               static_cast<double>(total) / unit_, unit_name_.c_str());
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

Result<std::string> model_or_builtin(const std::string& given) {
  if (!given.empty()) return model_path_or_stored(given);
  REWIND_TRY(std::string dir, builtin_model_dir());
  std::fprintf(stderr, "rewind: no --model given; using the built-in model %s (%s)\n",
               kBuiltinModel, dir.c_str());
  return dir;
}

bool is_gguf_path(const std::string& model_path) {
  return std::filesystem::is_regular_file(model_path);
}

Result<Tokenizer> load_tokenizer(const std::string& model_path) {
  if (!is_gguf_path(model_path)) return Tokenizer::load(model_path + "/tokenizer.json");
  REWIND_TRY(GgufFile g, GgufFile::open(model_path));
  return tokenizer_from_gguf(g);
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

Result<std::unique_ptr<Model>> load_model(const std::string& dir, const std::string& store,
                                          const KernelOptions& kernels, ThreadPool* pool,
                                          double* seconds, bool mtp) {
  LoadOptions opt;
  opt.pool = pool;
  opt.mtp = mtp;
  opt.kernels = kernels;
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
  const char* usage =
      "usage: rewind <command> [options]\n"
      "commands:\n"
      "  make-model  write a seeded random model in the Hugging Face layout (or as GGUF)\n"
      "  convert     write a Hugging Face checkpoint as a GGUF file (f32, bf16, f16, q8_0, "
      "k-quants, ...)\n"
      "  run         generate text from a prompt\n"
      "  logits      print the logits of a token list as JSON\n"
      "  bench       prefill/decode throughput against this machine's limits\n"
      "  cache-bench scripted multi-request workloads with the prefix cache on and off\n"
      "  spec-bench  speculative decoding (n-gram, draft model, MTP) against plain decoding\n"
      "  serve       OpenAI-compatible HTTP server (chat, completions, streaming, metrics)\n"
      "  pull        download a model from the Hugging Face Hub; models lists the pulled ones\n"
      "Run 'rewind <command> --help' for its options.\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "make-model") return cmd_make_model(argc - 2, argv + 2);
  if (cmd == "convert") return cmd_convert(argc - 2, argv + 2);
  if (cmd == "run") return cmd_run(argc - 2, argv + 2);
  if (cmd == "logits") return cmd_logits(argc - 2, argv + 2);
  if (cmd == "bench") return cmd_bench(argc - 2, argv + 2);
  if (cmd == "cache-bench") return cmd_cache_bench(argc - 2, argv + 2);
  if (cmd == "serve") return cmd_serve(argc - 2, argv + 2);
  if (cmd == "spec-bench") return cmd_spec_bench(argc - 2, argv + 2);
  if (cmd == "pull") return cmd_pull(argc - 2, argv + 2);
  if (cmd == "models") return cmd_models(argc - 2, argv + 2);
  std::fprintf(stderr, "rewind: unknown command '%s'\n%s", cmd.c_str(), usage);
  return 2;
}
