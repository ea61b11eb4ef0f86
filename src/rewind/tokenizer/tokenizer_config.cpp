// tokenizer_config.h: a checkpoint's tokenizer_config.json.
#include "rewind/tokenizer/tokenizer_config.h"

#include "rewind/base/file.h"

namespace rw {

Result<nlohmann::json> read_tokenizer_config(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  bool missing = false;
  auto text = read_whole_file(path, &missing);
  if (!text.ok()) {
    if (missing) return nlohmann::json::object();
    return text.error();
  }
  nlohmann::json cfg = nlohmann::json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !cfg.is_object()) return make_error(path + ": not a JSON object");
  return cfg;
}

std::string special_token_text(const nlohmann::json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return {};
}

}  // namespace rw
