#include "rewind/server/generation_defaults.h"

#include <nlohmann/json.hpp>

#include "rewind/base/file.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

GenerationDefaults load_generation_defaults(const std::string& dir,
                                            const std::vector<int64_t>& config_eos_ids,
                                            const Tokenizer& tok) {
  GenerationDefaults d;
  d.sampling.temperature = 1.0f;
  const std::string path = dir + "/generation_config.json";
  nlohmann::json j = nlohmann::json::object();
  bool missing = false;
  if (auto text = read_whole_file(path, &missing); text.ok()) {
    j = nlohmann::json::parse(text.value(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      d.warnings.push_back(path + " is not a JSON object; ignored");
      j = nlohmann::json::object();
    }
  } else if (!missing) {
    d.warnings.push_back(text.error_message() + "; ignored");
  }
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    if (it->is_number_integer()) d.stop_ids.insert(it->get<int32_t>());
    if (it->is_array())
      for (const auto& v : *it)
        if (v.is_number_integer()) d.stop_ids.insert(v.get<int32_t>());
  }
  if (d.stop_ids.empty())
    for (int64_t e : config_eos_ids) d.stop_ids.insert(static_cast<int32_t>(e));
  if (d.stop_ids.empty())
    for (const char* s : {"<|im_end|>", "<|endoftext|>"})
      if (tok.token_id(s) >= 0) d.stop_ids.insert(tok.token_id(s));

  // A value from the file if it is a number in [lo, hi] (lo excluded when lo_open).
  auto take = [&](const char* k, double lo, double hi, bool lo_open, auto* out) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return;
    const double v = it->is_number() ? it->get<double>() : -1e300;
    if (!it->is_number() || v < lo || v > hi || (lo_open && v == lo)) {
      d.warnings.push_back(path + ": " + k + " = " + it->dump() + " is out of range; ignored");
      return;
    }
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(v);
  };
  take("temperature", 0.0, 1e6, false, &d.sampling.temperature);
  take("top_p", 0.0, 1.0, true, &d.sampling.top_p);
  take("top_k", 0.0, 1e9, false, &d.sampling.top_k);
  take("min_p", 0.0, 1.0, false, &d.sampling.min_p);
  if (auto it = j.find("do_sample"); it != j.end() && it->is_boolean() && !it->get<bool>())
    d.sampling.temperature = 0.0f;
  return d;
}

}  // namespace rw
