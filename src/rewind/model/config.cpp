#include "rewind/model/config.h"

#include "rewind/io/mmap_file.h"
#include "rewind/model/arch.h"
#include "rewind/model/config_fields.h"

namespace rw {

const char* family_name(Family f) {
  switch (f) {
    case Family::Qwen35:
      return "qwen3_5";
    case Family::Qwen35Moe:
      return "qwen3_5_moe";
    case Family::Qwen3Next:
      return "qwen3_next";
    case Family::GraniteHybrid:
      return "granitemoehybrid";
    case Family::NemotronH:
      return "nemotron_h";
  }
  return "?";
}

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::GatedDeltaNet:
      return "gated_delta_net";
    case LayerKind::Attention:
      return "attention";
    case LayerKind::Mamba2:
      return "mamba2";
    case LayerKind::None:
      return "none";
  }
  return "?";
}

bool ModelConfig::has_mamba2() const {
  for (const auto k : layer_kinds)
    if (k == LayerKind::Mamba2) return true;
  return false;
}

int64_t ModelConfig::n_attention_layers() const {
  int64_t n = 0;
  for (const auto k : layer_kinds) n += k == LayerKind::Attention;
  return n;
}

int64_t ModelConfig::n_recurrent_layers() const {
  int64_t n = 0;
  for (const auto k : layer_kinds) n += k == LayerKind::GatedDeltaNet || k == LayerKind::Mamba2;
  return n;
}

namespace {
// Python's json module writes inf and nan as the bare tokens Infinity, -Infinity and NaN (a
// Nemotron-H config.json carries "time_step_limit": [0.0, Infinity]), which JSON lacks. Outside
// strings they become 1e308, -1e308 and null, so such a file parses; the parsers treat 1e308 and
// beyond as infinite where a field may be.
std::string replace_nonfinite_tokens(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool in_str = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (in_str) {
      out += ch;
      if (ch == '\\' && i + 1 < s.size())
        out += s[++i];
      else if (ch == '"')
        in_str = false;
      continue;
    }
    if (ch == '"') in_str = true;
    if (s.compare(i, 8, "Infinity") == 0) {
      out += "1e308";
      i += 7;
    } else if (s.compare(i, 3, "NaN") == 0) {
      out += "null";
      i += 2;
    } else {
      out += ch;
    }
  }
  return out;
}
}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& where) {
  using cfg::json;
  json root;
  try {
    root = json::parse(json_text.find("Infinity") != std::string::npos ||
                               json_text.find("NaN") != std::string::npos
                           ? replace_nonfinite_tokens(json_text)
                           : json_text);
  } catch (const json::exception& e) {
    std::string w = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    if (!w.empty() && w[0] == '[' && w.find("] ") != std::string::npos)
      w.erase(0, w.find("] ") + 2);
    return make_error(where + ": invalid JSON: " + cfg::one_line(w));
  }
  if (!root.is_object())
    return make_error(where + ": not a JSON object (got " + std::string(root.type_name()) + ")");
  const cfg::Fields top(root, "", where);
  REWIND_TRY(auto mt, top.str_opt("model_type"));
  if (!mt) return top.missing("model_type");
  const Architecture* a = architecture_for_hf(*mt);
  if (!a)
    return top.err("unknown model_type '" + *mt + "' (supported: " + supported_hf_model_types() +
                   ")");
  REWIND_TRY(ModelConfig c, a->parse_hf(root, *mt, where));
  REWIND_CHECK(static_cast<int64_t>(c.layer_kinds.size()) == c.n_layer &&
               static_cast<int64_t>(c.ffn_kinds.size()) == c.n_layer);
  return c;
}

Result<ModelConfig> load_model_config(const std::string& config_json_path) {
  REWIND_TRY(MappedFile m, MappedFile::open(config_json_path));
  return parse_model_config(std::string(m.text()), config_json_path);
}

}  // namespace rw
