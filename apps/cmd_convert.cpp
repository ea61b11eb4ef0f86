// `rewind convert`: writes a Hugging Face checkpoint directory as one GGUF file in llama.cpp's
// layout (model/gguf_model.h), with the matrices in F32, F16, BF16, Q8_0 (the default), Q4_K,
// Q5_K or Q6_K (or llama-quantize's Q4_K_M / Q5_K_M mixtures), and the tokenizer and chat
// template in the metadata.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "args.h"
#include "cli.h"
#include "commands.h"
#include "rewind/chat/chat_template.h"
#include "rewind/io/safetensors.h"
#include "rewind/model/gguf_model.h"
#include "rewind/tokenizer/gguf_vocab.h"
#include "rewind/tokenizer/tokenizer_config.h"

namespace rw::app {

namespace {

Result<DType> parse_type(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (s == "q4_k_m") return DType::Q4_K;  // with the mixture rule below
  if (s == "q5_k_m") return DType::Q5_K;
  if (const QuantTraits* q = quant_traits_by_arg(s)) return q->type;
  std::string types = "f32, f16, bf16, q4_k_m, q5_k_m";
  for (const QuantTraits& q : kQuantTraits)
    (types += &q == &kQuantTraits[kNumQuant - 1] ? " or " : ", ") += q.arg;
  return make_error("--type must be " + types + " (got '" + s + "')");
}

}  // namespace

Status write_gguf_checkpoint(
    const std::string& out, const ModelConfig& cfg, const WeightSet& ws, const Tokenizer& tok,
    const nlohmann::json& tc, const std::string& chat_template, const std::string& type,
    const std::string& name,
    const std::function<void(const std::vector<const WeightSource*>&)>& prepare) {
  REWIND_TRY(DType t, parse_type(type));
  GgufVocab v;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string text = tok.token_text(id);
    if (text.empty()) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.token_type.push_back(5);
    } else {
      v.tokens.push_back(text);
      v.token_type.push_back(tok.is_special(id) ? 3 : tok.is_added(id) ? 4 : 1);
    }
  }
  for (auto& [a, b] : tok.merges()) v.merges.push_back(a + " " + b);
  REWIND_TRY(v.pre, gguf_pre_name(tok));
  v.chat_template = chat_template;
  auto special_id = [&](const char* key) -> int64_t {
    const std::string text = special_token_text(tc, key);
    return text.empty() ? -1 : tok.token_id(text);
  };
  v.eos_id = special_id("eos_token");
  if (v.eos_id < 0 && !cfg.eos_token_ids.empty()) v.eos_id = cfg.eos_token_ids[0];
  v.pad_id = special_id("pad_token");
  v.bos_id = special_id("bos_token");
  if (v.bos_id < 0 && tok.prefix_ids().size() == 1) v.bos_id = tok.prefix_ids()[0];
  // What the tokenizer puts around a prompt, in GGUF's terms: a BOS first, an EOS last.
  auto says = [&](const std::vector<int32_t>& ids, int64_t id, bool* add, const char* what) {
    *add = !ids.empty();
    if (ids.empty() || (ids.size() == 1 && ids[0] == id)) return Status(Ok{});
    return Status(make_error("the tokenizer puts " + std::to_string(ids.size()) + " token(s) " +
                             what + " a prompt (first id " + std::to_string(ids[0]) +
                             "), which GGUF's add_bos_token / " + "add_eos_token cannot say"));
  };
  REWIND_TRY_STATUS(says(tok.prefix_ids(), v.bos_id, &v.add_bos, "before"));
  REWIND_TRY_STATUS(says(tok.suffix_ids(), v.eos_id, &v.add_eos, "after"));
  if (ws.has_mtp() && gguf_mtp_blocks(cfg, ws) == 0)
    std::fprintf(stderr,
                 "rewind: note: the MTP head is not written (llama.cpp's qwen3next has no MTP "
                 "block)\n");
  // llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M / _Q5_K_M.
  const bool mix = type == "q4_k_m" || type == "q5_k_m";
  // Progress on stderr for checkpoints of 64M values or more.
  ProgressLine progress("writing " + out + " (" + type + ")", 1e9, "G values", size_t{64} << 20);
  Status st = write_gguf_model(
      out, cfg, ws, v, t, name.empty() ? "rewind" : name,
      mix ? gguf_k_m_rule(cfg, gguf_mtp_blocks(cfg, ws), t) : nullptr,
      !mix               ? -1
      : t == DType::Q4_K ? 15
                         : 17,
      [&](size_t done, size_t total) { progress(done, total); }, prepare);
  progress.finish();
  return st;
}

Status convert_hf_to_gguf(const std::string& hf_dir, const std::string& out,
                          const std::string& type, const std::string& name_in,
                          const std::string& template_text) {
  REWIND_TRY(DType t, parse_type(type));
  (void)t;  // checked before the checkpoint is read
  REWIND_TRY(ModelConfig cfg, load_model_config(hf_dir + "/config.json"));
  REWIND_TRY(TensorSet ts, TensorSet::open_dir(hf_dir));
  REWIND_TRY(WeightSet ws, WeightSet::from_hf(ts, cfg));
  REWIND_TRY(Tokenizer tok, Tokenizer::load_dir(hf_dir));

  // Special ids from tokenizer_config.json; the template given, else the checkpoint's
  // (chat_template.jinja, else tokenizer_config.json's).
  REWIND_TRY(const nlohmann::json tc, read_tokenizer_config(hf_dir));
  std::string chat_template = template_text;  // the given one, else the checkpoint's
  if (template_text.empty()) {
    REWIND_TRY(chat_template, chat_template_source(hf_dir));
  }
  const std::string name =
      name_in.empty() ? std::filesystem::path(hf_dir).lexically_normal().filename().string()
                      : name_in;
  return write_gguf_checkpoint(out, cfg, ws, tok, tc, chat_template, type, name);
}

int cmd_convert(int argc, char** argv) {
  auto args = parse_args("convert", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("convert");
  if (args->has("--quiet")) ProgressLine::silence();
  const std::string in = args->str("--in"), out = args->str("--out");
  if (in.empty() || out.empty()) return fail("--in HF_DIR and -o/--out FILE.gguf are required");
  if (std::filesystem::is_regular_file(in))
    return fail("--in " + in +
                " is a file: convert reads a Hugging Face directory (config.json and "
                "*.safetensors); it does not requantise a GGUF file (llama-quantize does)");
  if (std::error_code e; !std::filesystem::is_directory(in, e))
    return fail("--in " + in + ": no such directory");
  if (std::error_code e; !std::filesystem::exists(std::filesystem::path(in) / "config.json", e))
    return fail("--in " + in + " is a directory without config.json: not a Hugging Face model");
  if (const std::string to = args->str("--to", "gguf"); to != "gguf")
    return fail("--to must be gguf: convert writes a Hugging Face checkpoint as GGUF (got '" + to +
                "')");
  // Without --type: q8_0 (8.5 bits a weight, about half of bf16, close to its quality); said on
  // stderr so that nobody takes the file for a full-precision one.
  // Lower case, so that llama.cpp's spelling (--outtype Q4_K_M) names the same type.
  std::string type = args->str("--type", kDefaultConvertType);
  for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // The output must not be a directory, nor one of the checkpoint's own files (a rename would
  // replace them after the whole conversion).
  std::error_code ec;
  if (std::filesystem::is_directory(out, ec))
    return fail("-o/--out " + out + " is a directory: name the .gguf file to write");
  for (const auto& e : std::filesystem::directory_iterator(in, ec))
    if (std::error_code eq; std::filesystem::equivalent(e.path(), out, eq))
      return fail("-o/--out " + out + " is one of the checkpoint's files in " + in +
                  ": write the GGUF file elsewhere");
  // The file is GGUF whatever its name: another format's extension would mislead every reader.
  {
    const std::string ext = lower_extension(out);
    if (ext == ".safetensors" || ext == ".json" || ext == ".bin" || ext == ".pt" || ext == ".pth")
      return fail("-o/--out " + out + ": convert writes a GGUF file; name it .gguf");
    if (ext != ".gguf")
      std::fprintf(stderr, "rewind convert: note: %s is a GGUF file, without the .gguf name\n",
                   out.c_str());
  }
  if (!args->has("--type"))
    std::fprintf(stderr,
                 "rewind convert: no --type given; writing %s (--type f32 or bf16 keeps full "
                 "precision, q4_k_m is smaller)\n",
                 type.c_str());
  std::string template_text;
  if (args->has("--chat-template-file")) {
    auto t = read_template_file(args->str("--chat-template-file"));
    if (!t.ok()) return fail(t.error_message());
    template_text = std::move(t).value();
  }
  const double t0 = now_seconds();
  Status st = convert_hf_to_gguf(in, out, type, "", template_text);
  if (!st.ok()) return fail(st.error_message());
  const auto size = std::filesystem::file_size(out, ec);
  std::printf("wrote %s (%s, %.1f MB, %.1f s)\n", out.c_str(), type.c_str(),
              ec ? 0.0 : static_cast<double>(size) / 1e6, now_seconds() - t0);
  return 0;
}

}  // namespace rw::app
