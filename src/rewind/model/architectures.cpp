#include "rewind/model/architectures.h"

#include <algorithm>

namespace rw {

const std::vector<std::string>& supported_hf_model_types() {
  static const std::vector<std::string> v = {"qwen3_5", "qwen3_5_moe", "qwen3_5_text",
                                             "qwen3_5_moe_text", "qwen3_next"};
  return v;
}

const std::vector<std::string>& supported_gguf_architectures() {
  static const std::vector<std::string> v = {"qwen35", "qwen35moe", "qwen3next"};
  return v;
}

bool hf_model_type_supported(const std::string& model_type) {
  const auto& v = supported_hf_model_types();
  return std::find(v.begin(), v.end(), model_type) != v.end();
}

bool gguf_architecture_supported(const std::string& arch) {
  const auto& v = supported_gguf_architectures();
  return std::find(v.begin(), v.end(), arch) != v.end();
}

}  // namespace rw
