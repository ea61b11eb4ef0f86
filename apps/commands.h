// Subcommands of the `rewind` binary and the helpers they share.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "args.h"
#include "rewind/base/thread_pool.h"
#include "rewind/chat/chat_template.h"
#include "rewind/model/model.h"
#include "rewind/sample/sampler.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw::app {

int cmd_make_model(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_cache_bench(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_chat(int argc, char** argv);  // apps/cmd_chat.cpp
int cmd_spec_bench(int argc, char** argv);
int cmd_pull(int argc, char** argv);    // apps/cmd_pull.cpp
int cmd_models(int argc, char** argv);  // apps/cmd_pull.cpp

// Parses a subcommand's arguments against its table in apps/cli.cpp.
Result<Args> parse_args(const std::string& command, int argc, char** argv);
// Prints the command's --help text (apps/cli.cpp) to stdout; returns 0.
int print_help(const std::string& command);

// Prints "rewind: <msg>" to stderr and returns exit code 1.
int fail(const std::string& msg);

// Default thread count: the machine's cores.
int default_threads();

// The model `run`, `serve`, `bench`, `cache-bench` and `spec-bench` use without --model: the
// trained checkpoint committed in the repository (models/README.md).
inline constexpr const char* kBuiltinModel = "models/kjv-target";

// The built-in model's directory: in the source tree the binary was built from, then in a
// source tree around its build folder (build/<preset>/rewind), then in an install
// (<prefix>/bin/rewind next to <prefix>/share/rewind/models/kjv-target). The error names the
// places it looked.
Result<std::string> builtin_model_dir();

// `given` (a --model value) if not empty; else the built-in model, with a line on stderr that
// says so unless `quiet` (-q).
Result<std::string> model_or_builtin(const std::string& given, bool quiet = false);

// `given` when it is an existing path; else the pulled model of that name in the store
// (`rewind pull`: "org/name", a unique "name", with ":QUANT" for one of several GGUF files).
Result<std::string> model_path_or_stored(const std::string& given);

// Loads a model, showing a progress line on stderr while packing large files (> 64 MiB).
// store: "auto", "f32", "bf16".
// mtp: also load the checkpoint's MTP head (for --spec mtp).
// kernels: how its kernels run (kernel_options_from).
// kv: how its states store K and V (kv_types_from).
Result<std::unique_ptr<Model>> load_model(const std::string& dir, const std::string& store,
                                          const KernelOptions& kernels, ThreadPool* pool,
                                          double* seconds, bool mtp = false,
                                          const KvTypes& kv = kDefaultKvTypes);

// The KV cache types of the command line: --cache-type-k and --cache-type-v, each f32, bf16,
// f16 or q8_0 (kDefaultKvTypes where absent).
Result<KvTypes> kv_types_from(const Args& a);

// The kernel options of the command line: --quant-dot auto (int8 where the CPU has AVX-512 VNNI
// or AVX2, else f32), int8 or f32 (kernels/kernel_options.h, QuantDot).
Result<KernelOptions> kernel_options_from(const Args& a);
// --repeat-penalty, --repeat-last-n, --presence-penalty, --frequency-penalty into *p (those
// given); errors name the option.
Status penalties_from(const Args& a, SamplingParams* p);
// --temperature, --top-k, --top-p, --min-p and the penalties into *p (those given, checked);
// errors name the option.
Status sampling_from(const Args& a, SamplingParams* p);
// llama.cpp's options that mean nothing on a CPU engine (cli.cpp, llama_compat_opts): -fa's
// value checked, a note on stderr for -ngl other than 0. --jinja needs nothing: templates are
// always rendered as Jinja.
Status llama_compat_from(const Args& a);
// `given` when not 0, else the model's context length (max_position_embeddings, below 2^31):
// `-c 0` and `run -n -1`, llama.cpp's "from the model" (a config without the field has the
// library default, as in transformers); an error naming `what` when that is below 2.
Result<int64_t> ctx_or_model(int64_t given, const ModelConfig& c, const std::string& what);
// The extension of a path's file name in lower case (".gguf"; "" without one).
std::string lower_extension(const std::string& path);

double now_seconds();

// A progress line on stderr for long work, on a terminal only (pipes and files get none):
// "\r<label>: 12.3% of <total / unit> <unit_name>, <rate> <unit_name>/s, ETA <s> s", for totals
// of at least min_total, at most 4 lines a second (and the last); finish() ends the line if one
// was shown.
class ProgressLine {
 public:
  ProgressLine(std::string label, double unit, std::string unit_name, size_t min_total)
      : label_(std::move(label)),
        unit_name_(std::move(unit_name)),
        unit_(unit),
        min_total_(min_total) {}
  void operator()(size_t done, size_t total);
  void finish();
  // --quiet: no progress lines from here on (every ProgressLine of the process).
  static void silence() { silenced_ = true; }

 private:
  std::string label_, unit_name_;
  double unit_;
  size_t min_total_;
  double last_ = 0;
  double start_ = 0;  // the first call's time, for the rate and the ETA
  bool shown_ = false;
  static inline bool silenced_ = false;
};

// The tokenizer of a model path: DIR/tokenizer.json, or the metadata of a .gguf file.
Result<Tokenizer> load_tokenizer(const std::string& model_path);
bool is_gguf_path(const std::string& model_path);  // a regular file (not a directory)

// The chat template `serve` and `chat` render with: the checkpoint's own (tokenizer_config.json
// `chat_template` or chat_template.jinja; a GGUF file's tokenizer.chat_template with its eos
// token), else rewind's ChatML template, with a line on stderr that says so. Errors: a template
// that is there but does not load, a malformed GGUF file.
// `template_file` (--chat-template-file), when not empty, replaces the model's template (its
// special tokens stay the model's); an unreadable or empty file or a template that does not parse
// is an error naming the file. `template_option` (--chat-template, llama-server's) the same
// with the template given as text, or "chatml" for rewind's ChatML template; not with a file.
// `source` (may be null): set to "model", "rewind-chatml", "file" or "option".
Result<ChatTemplate> load_chat_template(const std::string& model_path, const Tokenizer& tok,
                                        std::string* source = nullptr,
                                        const std::string& template_file = "",
                                        const std::string& template_option = "");

// Writes the HF checkpoint in `hf_dir` (config.json, safetensors, tokenizer.json, chat template
// in tokenizer_config.json or chat_template.jinja) as a GGUF file in llama.cpp's layout, with
// matrices stored as `type` (convert's --type), with a progress line on stderr.
// `name` goes to general.name ("" = the directory's name); `template_text`, when not empty,
// is written as the chat template in place of the checkpoint's.
Status convert_hf_to_gguf(const std::string& hf_dir, const std::string& out,
                          const std::string& type, const std::string& name = "",
                          const std::string& template_text = "");
// The text of a --chat-template-file: errors name the option and the file (unreadable, empty,
// or a template that does not parse).
Result<std::string> read_template_file(const std::string& path);

// The writing half of convert_hf_to_gguf, for a checkpoint already mapped: `tc` is the
// tokenizer_config.json object (special tokens), `chat_template` the template ("" = none).
// `prepare` is write_gguf_model's (make-model makes each weight there).
Status write_gguf_checkpoint(
    const std::string& out, const ModelConfig& cfg, const WeightSet& ws, const Tokenizer& tok,
    const nlohmann::json& tc, const std::string& chat_template, const std::string& type,
    const std::string& name,
    const std::function<void(const std::vector<const WeightSource*>&)>& prepare = nullptr);

}  // namespace rw::app
