// Typed, error-naming access to config.json fields, shared by the families' parsers
// (model/arch_*.cpp). Internal to the model layer.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/model/config.h"

namespace rw::cfg {

using nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 24;  // any width, count or vocab
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int64_t kMaxPositions = int64_t{1} << 40;

// A JSON value shortened for a one-line message.
inline std::string preview(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) {
    size_t n = 57;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    s = s.substr(0, n) + "...";
  }
  return s;
}

inline std::string one_line(std::string s) {
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
    return err("field '" + name(key) + "' must be " + expected + " (got " + v.type_name() + " " +
               preview(v) + ")");
  }
  Error out_of_range(const char* key, int64_t v, int64_t lo, int64_t hi) const {
    return err("field '" + name(key) + "' = " + std::to_string(v) + " is out of range [" +
               std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }

  Result<int64_t> to_int(const char* key, const json& v, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) return wrong_type(key, "an integer", v);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      return err("field '" + name(key) + "' = " + std::to_string(v.get<uint64_t>()) +
                 " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
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
inline Status check_rope_type(const Fields& f, const json& obj, const char* obj_key) {
  for (const char* k : {"rope_type", "type"}) {
    const auto it = obj.find(k);
    if (it == obj.end() || it->is_null()) continue;
    if (!it->is_string())
      return f.err("field '" + f.name(obj_key) + "." + k + "' must be a string (got " +
                   preview(*it) + ")");
    const auto& s = it->get_ref<const std::string&>();
    if (s != "default" && s != "mrope")
      return f.err("field '" + f.name(obj_key) + "." + k + "' is '" + s +
                   "': only default RoPE is supported (no RoPE scaling)");
  }
  return Ok{};
}

// Token id(s): an integer, or (when `allow_list`) a list of integers. Empty = absent.
inline Result<std::vector<int64_t>> token_ids(const Fields& text, const Fields& top,
                                              const char* key, bool allow_list) {
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

// Consistency of the Mamba2 sizes (heads per group, gated-norm groups), for the families' parsers.
inline Status check_mamba2_sizes(const Fields& f, const ModelConfig& c) {
  if (c.ssm_n_head % c.ssm_n_group != 0)
    return f.err("the Mamba2 heads (" + std::to_string(c.ssm_n_head) +
                 ") are not a multiple of the groups (" + std::to_string(c.ssm_n_group) + ")");
  if (c.ssm_d_inner() % c.ssm_norm_groups != 0)
    return f.err("d_inner (" + std::to_string(c.ssm_d_inner()) +
                 ") is not a multiple of the gated norm's groups (" +
                 std::to_string(c.ssm_norm_groups) + ")");
  return Ok{};
}

// The fields every flat (no text_config) config ends with: the norm epsilon under `eps_key`
// (positive), max_position_embeddings (4096), tie_word_embeddings (false), bos / eos token ids.
inline Status parse_flat_tail(const Fields& f, const char* eps_key, double eps_default,
                              ModelConfig* c) {
  REWIND_TRY(c->rms_norm_eps, f.num_opt(eps_key, eps_default));
  if (!std::isfinite(c->rms_norm_eps) || c->rms_norm_eps <= 0)
    return f.err("field '" + std::string(eps_key) + "' must be positive");
  REWIND_TRY(c->max_position_embeddings,
             f.int_opt("max_position_embeddings", 4096, 1, kMaxPositions));
  REWIND_TRY(c->tie_word_embeddings, f.bool_opt("tie_word_embeddings", false));
  REWIND_TRY(auto bos, token_ids(f, f, "bos_token_id", false));
  c->bos_token_id = bos.empty() ? -1 : bos[0];
  REWIND_TRY(c->eos_token_ids, token_ids(f, f, "eos_token_id", true));
  return Ok{};
}

}  // namespace rw::cfg
