#include "rewind/model/config.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "rewind/io/mmap_file.h"

// Rules beyond docs/QWEN35.md section 1 (each is an explicit choice, documented here once):
// * Sizes that fix tensor shapes (vocab, hidden, layers, heads, head_dim, GDN dims, conv
//   kernel; for MoE the expert counts and widths) are required. So is the RoPE base: it is
//   never defaulted (docs/QWEN35.md 1.3). Other fields take the HF class defaults:
//   full_attention_interval 4, partial_rotary_factor 0.25, rms_norm_eps 1e-6,
//   max_position_embeddings 32768, norm_topk_prob true, decoder_sparse_step 1,
//   mlp_only_layers [], mtp layers 0.
// * A JSON null counts as absent.
// * rope_parameters.X wins over a top-level X (rope_theta, partial_rotary_factor).
// * tie_word_embeddings: the text_config value if present, else the top-level value, else
//   false. bos/eos token ids: text_config first, then top level.
// * RoPE scaling other than "default"/"mrope" (e.g. YaRN), a non-silu hidden_act, and
//   attention_bias = true are errors: the engine does not implement them, and ignoring them
//   would silently change the model.
// * qwen3_5 ignores any MoE fields (it is dense); qwen3_5_moe ignores norm_topk_prob (always
//   renormalises, docs/QWEN35.md 1.2).
// * intermediate_size is required (> 0) only if some layer uses a dense MLP.

namespace rw {

namespace {

using nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 24;     // any width, count or vocab
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int64_t kMaxPositions = int64_t{1} << 40;

// A JSON value shortened for a one-line message.
std::string preview(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) {
    size_t n = 57;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    s = s.substr(0, n) + "...";
  }
  return s;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Typed access to the fields of one JSON object; fields are named `prefix + key` in errors.
class Fields {
 public:
  Fields(const json& obj, std::string prefix, const std::string& where)
      : obj_(obj), prefix_(std::move(prefix)), where_(where) {}

  // nullptr if the key is absent or null.
  const json* find(const char* key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }
  std::string name(const char* key) const { return prefix_ + key; }

  Error err(const std::string& msg) const { return make_error(where_ + ": " + msg); }
  Error missing(const char* key) const { return err("missing field '" + name(key) + "'"); }
  Error wrong_type(const char* key, const char* expected, const json& v) const {
    return err("field '" + name(key) + "' must be " + expected + " (got " + v.type_name() + " " + preview(v) + ")");
  }
  Error out_of_range(const char* key, int64_t v, int64_t lo, int64_t hi) const {
    return err("field '" + name(key) + "' = " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
               ", " + std::to_string(hi) + "]");
  }

  Result<int64_t> to_int(const char* key, const json& v, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) return wrong_type(key, "an integer", v);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      return err("field '" + name(key) + "' = " + std::to_string(v.get<uint64_t>()) + " is out of range [" +
                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const auto x = v.get<int64_t>();
    if (x < lo || x > hi) return out_of_range(key, x, lo, hi);
    return x;
  }
  Result<int64_t> int_req(const char* key, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) return missing(key);
    return to_int(key, *v, lo, hi);
  }
  Result<int64_t> int_opt(const char* key, int64_t def, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    return to_int(key, *v, lo, hi);
  }
  Result<double> num_opt(const char* key, double def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    return v->get<double>();
  }
  Result<bool> bool_opt(const char* key, bool def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) return wrong_type(key, "true or false", *v);
    return v->get<bool>();
  }
  Result<std::optional<std::string>> str_opt(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    return std::optional<std::string>(v->get<std::string>());
  }
  Result<const json*> obj_opt(const char* key) const {
    const json* v = find(key);
    if (v != nullptr && !v->is_object()) return wrong_type(key, "an object", *v);
    return v;
  }

 private:
  const json& obj_;
  std::string prefix_;
  const std::string& where_;
};

// The RoPE variants the engine implements: plain 1-D RoPE, and M-RoPE (equal to it for text).
Status check_rope_type(const Fields& f, const json& obj, const char* obj_key) {
  for (const char* k : {"rope_type", "type"}) {
    const auto it = obj.find(k);
    if (it == obj.end() || it->is_null()) continue;
    if (!it->is_string()) return f.err("field '" + f.name(obj_key) + "." + k + "' must be a string (got " + preview(*it) + ")");
    const auto& s = it->get_ref<const std::string&>();
    if (s != "default" && s != "mrope")
      return f.err("field '" + f.name(obj_key) + "." + k + "' is '" + s +
                   "': only default RoPE is supported (no RoPE scaling)");
  }
  return Ok{};
}

// Token id(s): an integer, or (when `allow_list`) a list of integers. Empty = absent.
Result<std::vector<int64_t>> token_ids(const Fields& text, const Fields& top, const char* key, bool allow_list) {
  const Fields& f = text.has(key) ? text : top;
  const json* v = f.find(key);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->is_array() && allow_list) {
    for (const auto& e : *v) {
      REWIND_TRY(int64_t id, f.to_int(key, e, 0, std::numeric_limits<int32_t>::max()));
      out.push_back(id);
    }
    return out;
  }
  if (!v->is_number_integer())
    return f.wrong_type(key, allow_list ? "an integer or a list of integers" : "an integer", *v);
  REWIND_TRY(int64_t id, f.to_int(key, *v, 0, std::numeric_limits<int32_t>::max()));
  out.push_back(id);
  return out;
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::Qwen35: return "qwen3_5";
    case Family::Qwen35Moe: return "qwen3_5_moe";
    case Family::Qwen3Next: return "qwen3_next";
  }
  return "?";
}

bool ModelConfig::layer_is_moe(int64_t il) const {
  REWIND_CHECK(il >= 0 && il < n_layer);
  switch (family) {
    case Family::Qwen35: return false;
    case Family::Qwen35Moe: return n_expert > 0;
    case Family::Qwen3Next:
      if (n_expert <= 0) return false;
      for (const int64_t m : mlp_only_layers)
        if (m == il) return false;
      return (il + 1) % decoder_sparse_step == 0;
  }
  return false;
}

int64_t ModelConfig::n_full_layers() const {
  int64_t n = 0;
  for (const auto k : layer_kinds) n += k == LayerKind::Full;
  return n;
}

int64_t ModelConfig::n_linear_layers() const {
  int64_t n = 0;
  for (const auto k : layer_kinds) n += k == LayerKind::Linear;
  return n;
}

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& where) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    std::string w = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    if (!w.empty() && w[0] == '[' && w.find("] ") != std::string::npos) w.erase(0, w.find("] ") + 2);
    return make_error(where + ": invalid JSON: " + one_line(w));
  }
  if (!root.is_object()) return make_error(where + ": not a JSON object (got " + std::string(root.type_name()) + ")");

  const Fields top(root, "", where);
  ModelConfig c;
  {
    REWIND_TRY(auto mt, top.str_opt("model_type"));
    if (!mt) return top.missing("model_type");
    c.model_type = *mt;
  }
  const json* text_obj = &root;
  std::string prefix;
  const std::string& mt = c.model_type;
  if (mt == "qwen3_next" || mt == "qwen3_5_text" || mt == "qwen3_5_moe_text") {
    c.family = mt == "qwen3_next" ? Family::Qwen3Next : mt == "qwen3_5_text" ? Family::Qwen35 : Family::Qwen35Moe;
  } else if (mt == "qwen3_5" || mt == "qwen3_5_moe") {
    c.family = mt == "qwen3_5" ? Family::Qwen35 : Family::Qwen35Moe;
    c.multimodal_prefix = true;
    REWIND_TRY(text_obj, top.obj_opt("text_config"));
    if (text_obj == nullptr) return top.err("model_type '" + mt + "' needs a 'text_config' object");
    prefix = "text_config.";
    const Fields tc(*text_obj, prefix, where);
    REWIND_TRY(auto tmt, tc.str_opt("model_type"));
    if (tmt && *tmt != mt + "_text")
      return tc.err("field 'text_config.model_type' is '" + *tmt + "' but model_type '" + mt + "' needs '" + mt +
                    "_text'");
  } else {
    return top.err("unknown model_type '" + mt +
                   "' (supported: qwen3_5, qwen3_5_moe, qwen3_5_text, qwen3_5_moe_text, qwen3_next)");
  }
  const Fields f(*text_obj, prefix, where);

  // Sizes.
  REWIND_TRY(c.vocab_size, f.int_req("vocab_size", 1, kMaxDim));
  REWIND_TRY(c.hidden_size, f.int_req("hidden_size", 1, kMaxDim));
  REWIND_TRY(c.n_layer, f.int_req("num_hidden_layers", 1, kMaxLayers));
  REWIND_TRY(c.n_head, f.int_req("num_attention_heads", 1, kMaxDim));
  REWIND_TRY(c.n_head_kv, f.int_req("num_key_value_heads", 1, kMaxDim));
  REWIND_TRY(c.head_dim, f.int_req("head_dim", 1, kMaxDim));
  REWIND_TRY(c.lin_n_head_k, f.int_req("linear_num_key_heads", 1, kMaxDim));
  REWIND_TRY(c.lin_n_head_v, f.int_req("linear_num_value_heads", 1, kMaxDim));
  REWIND_TRY(c.lin_dk, f.int_req("linear_key_head_dim", 1, kMaxDim));
  REWIND_TRY(c.lin_dv, f.int_req("linear_value_head_dim", 1, kMaxDim));
  REWIND_TRY(c.conv_kernel, f.int_req("linear_conv_kernel_dim", 1, kMaxDim));
  if (c.n_head % c.n_head_kv != 0)
    return f.err("field '" + f.name("num_attention_heads") + "' = " + std::to_string(c.n_head) +
                 " is not a multiple of '" + f.name("num_key_value_heads") + "' = " + std::to_string(c.n_head_kv));
  if (c.lin_n_head_v % c.lin_n_head_k != 0)
    return f.err("field '" + f.name("linear_num_value_heads") + "' = " + std::to_string(c.lin_n_head_v) +
                 " is not a multiple of '" + f.name("linear_num_key_heads") + "' = " + std::to_string(c.lin_n_head_k));

  // Layer kinds: layer_types, else every n-th layer is full attention.
  if (const json* lt = f.find("layer_types")) {
    if (!lt->is_array()) return f.wrong_type("layer_types", "a list of strings", *lt);
    if (static_cast<int64_t>(lt->size()) != c.n_layer)
      return f.err("field '" + f.name("layer_types") + "' has " + std::to_string(lt->size()) + " entries but '" +
                   f.name("num_hidden_layers") + "' is " + std::to_string(c.n_layer));
    for (size_t il = 0; il < lt->size(); ++il) {
      const json& e = (*lt)[il];
      const std::string name = f.name("layer_types") + "[" + std::to_string(il) + "]";
      if (e.is_string() && e.get_ref<const std::string&>() == "linear_attention") {
        c.layer_kinds.push_back(LayerKind::Linear);
      } else if (e.is_string() && e.get_ref<const std::string&>() == "full_attention") {
        c.layer_kinds.push_back(LayerKind::Full);
      } else {
        return f.err("field '" + name + "' is " + preview(e) +
                     " (expected \"linear_attention\" or \"full_attention\")");
      }
    }
  } else {
    REWIND_TRY(int64_t n, f.int_opt("full_attention_interval", 4, 1, kMaxLayers));
    for (int64_t il = 0; il < c.n_layer; ++il)
      c.layer_kinds.push_back((il + 1) % n == 0 ? LayerKind::Full : LayerKind::Linear);
  }

  // RoPE: rope_parameters.X, else X; partial rotary only; the base is required.
  {
    REWIND_TRY(const json* rp, f.obj_opt("rope_parameters"));
    static const json kEmpty = json::object();
    const Fields rpf(rp != nullptr ? *rp : kEmpty, prefix + "rope_parameters.", where);
    std::optional<double> theta;
    double prf = 0.25;
    if (rp != nullptr) {
      REWIND_TRY_STATUS(check_rope_type(f, *rp, "rope_parameters"));
      if (rpf.has("rope_theta")) {
        REWIND_TRY(theta, rpf.num_opt("rope_theta", 0.0));
      }
      if (rpf.has("partial_rotary_factor")) {
        REWIND_TRY(prf, rpf.num_opt("partial_rotary_factor", 0.25));
      }
    }
    if (!theta && f.has("rope_theta")) {
      REWIND_TRY(theta, f.num_opt("rope_theta", 0.0));
    }
    if (!theta)
      return f.err("missing field '" + f.name("rope_parameters.rope_theta") + "' (or '" + f.name("rope_theta") + "')");
    if ((rp == nullptr || !rpf.has("partial_rotary_factor")) && f.has("partial_rotary_factor")) {
      REWIND_TRY(prf, f.num_opt("partial_rotary_factor", 0.25));
    }
    REWIND_TRY(const json* rs, f.obj_opt("rope_scaling"));
    if (rs != nullptr) REWIND_TRY_STATUS(check_rope_type(f, *rs, "rope_scaling"));
    if (!std::isfinite(*theta) || *theta <= 0)
      return f.err("RoPE base rope_theta = " + std::to_string(*theta) + " must be a positive number");
    if (!std::isfinite(prf) || prf <= 0 || prf > 1)
      return f.err("partial_rotary_factor = " + std::to_string(prf) + " must be in (0, 1]");
    c.rope_theta = *theta;
    c.rope_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * prf);  // Python int(): truncates
    if (c.rope_dim <= 0 || c.rope_dim % 2 != 0)
      return f.err("rotary dim int(head_dim * partial_rotary_factor) = int(" + std::to_string(c.head_dim) + " * " +
                   std::to_string(prf) + ") = " + std::to_string(c.rope_dim) + " must be even and positive");
  }

  // FFN.
  REWIND_TRY(c.intermediate_size, f.int_opt("intermediate_size", 0, 0, kMaxDim));
  if (c.family != Family::Qwen35) {
    const int64_t min_experts = c.family == Family::Qwen35Moe ? 1 : 0;
    REWIND_TRY(c.n_expert, f.int_req("num_experts", min_experts, kMaxDim));
    if (c.n_expert > 0) {
      REWIND_TRY(c.n_expert_used, f.int_req("num_experts_per_tok", 1, kMaxDim));
      if (c.n_expert_used > c.n_expert)
        return f.err("field '" + f.name("num_experts_per_tok") + "' = " + std::to_string(c.n_expert_used) +
                     " exceeds '" + f.name("num_experts") + "' = " + std::to_string(c.n_expert));
      REWIND_TRY(c.moe_intermediate_size, f.int_req("moe_intermediate_size", 1, kMaxDim));
      REWIND_TRY(c.shared_expert_intermediate_size, f.int_req("shared_expert_intermediate_size", 1, kMaxDim));
    }
  }
  if (c.family == Family::Qwen3Next) {
    REWIND_TRY(c.norm_topk_prob, f.bool_opt("norm_topk_prob", true));
    REWIND_TRY(c.decoder_sparse_step, f.int_opt("decoder_sparse_step", 1, 1, kMaxLayers));
    if (const json* m = f.find("mlp_only_layers")) {
      if (!m->is_array()) return f.wrong_type("mlp_only_layers", "a list of layer indices", *m);
      for (size_t i = 0; i < m->size(); ++i) {
        const std::string name = "mlp_only_layers[" + std::to_string(i) + "]";
        REWIND_TRY(int64_t il, f.to_int(name.c_str(), (*m)[i], 0, c.n_layer - 1));
        c.mlp_only_layers.push_back(il);
      }
    }
  } else {
    c.norm_topk_prob = true;  // qwen3_5_moe always renormalises; unused for dense qwen3_5
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (!c.layer_is_moe(il) && c.intermediate_size <= 0)
      return f.err("field '" + f.name("intermediate_size") + "' is missing or 0, but layer " + std::to_string(il) +
                   " has a dense MLP");
  }

  // Everything else.
  REWIND_TRY(c.rms_norm_eps, f.num_opt("rms_norm_eps", 1e-6));
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0)
    return f.err("field '" + f.name("rms_norm_eps") + "' = " + std::to_string(c.rms_norm_eps) + " must be positive");
  REWIND_TRY(c.max_position_embeddings, f.int_opt("max_position_embeddings", 32768, 1, kMaxPositions));
  REWIND_TRY(c.mtp_num_hidden_layers, f.int_opt("mtp_num_hidden_layers", 0, 0, kMaxLayers));
  {
    REWIND_TRY(auto act, f.str_opt("hidden_act"));
    if (act && *act != "silu")
      return f.err("field '" + f.name("hidden_act") + "' is '" + *act + "': only 'silu' is supported");
    REWIND_TRY(bool bias, f.bool_opt("attention_bias", false));
    if (bias) return f.err("field '" + f.name("attention_bias") + "' is true: attention biases are not supported");
  }
  {
    const Fields& tf = f.has("tie_word_embeddings") ? f : top;
    REWIND_TRY(c.tie_word_embeddings, tf.bool_opt("tie_word_embeddings", false));
  }
  {
    REWIND_TRY(auto bos, token_ids(f, top, "bos_token_id", false));
    c.bos_token_id = bos.empty() ? -1 : bos[0];
    REWIND_TRY(c.eos_token_ids, token_ids(f, top, "eos_token_id", true));
  }
  return c;
}

Result<ModelConfig> load_model_config(const std::string& config_json_path) {
  REWIND_TRY(MappedFile m, MappedFile::open(config_json_path));
  return parse_model_config(std::string(m.text()), config_json_path);
}

}  // namespace rw
