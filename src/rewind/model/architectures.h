// The architectures rewind runs, as a checkpoint names them: Hugging Face config.json
// `model_type` values (model/config.cpp) and GGUF `general.architecture` values
// (model/gguf_model.cpp). `rewind pull` asks these before downloading weights; a later
// architecture registry can own the lists. tests/unit/hub_test.cpp checks them against the parsers.
#pragma once

#include <string>
#include <vector>

namespace rw {

// "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next".
const std::vector<std::string>& supported_hf_model_types();
// "qwen35", "qwen35moe", "qwen3next".
const std::vector<std::string>& supported_gguf_architectures();

bool hf_model_type_supported(const std::string& model_type);
bool gguf_architecture_supported(const std::string& arch);

}  // namespace rw
