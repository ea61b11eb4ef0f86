// tokenizer_config.h: a checkpoint's tokenizer_config.json.
#include "rewind/tokenizer/tokenizer_config.h"

#include <fstream>
#include <sstream>

namespace rw {

Result<nlohmann::json> read_tokenizer_config(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  std::ifstream f(path, std::ios::binary);
  if (!f) return nlohmann::json::object();
  std::ostringstream ss;
  ss << f.rdbuf();
  nlohmann::json cfg = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
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
