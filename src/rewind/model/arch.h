// The architecture registry: one entry per model family, each declared in one file
// (model/arch_qwen35.cpp, model/arch_granite.cpp, model/arch_nemotron_h.cpp). An entry says which
// Hugging Face model_type values and GGUF architectures it reads, parses their configuration
// into a ModelConfig (which mixer and FFN each layer has, and their sizes), and maps the
// checkpoint's tensors to the canonical weights of model/weight_source.h. Loading
// (Model::load, WeightSet::from_hf / from_gguf) finds the entry here and nowhere else switches
// on file formats. How to add a family: docs/ARCHITECTURE.md, "Adding a model family".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/io/gguf.h"
#include "rewind/io/safetensors.h"
#include "rewind/model/config.h"
#include "rewind/model/weight_source.h"

namespace rw {

struct Architecture {
  const char* name;  // for messages: "Qwen3.5", "Granite-4.0-H", "Nemotron-H"
  std::vector<Family> families;
  std::vector<std::string> hf_model_types;
  std::vector<std::string> gguf_archs;  // general.architecture values; empty: HF only
  // config.json's root object -> configuration. Errors name `where` and the field.
  Result<ModelConfig> (*parse_hf)(const nlohmann::json& root, const std::string& model_type,
                                  const std::string& where);
  // The checkpoint's tensors -> canonical weights (WeightSet::put), shapes checked.
  Status (*map_hf)(const TensorSet& tensors, const ModelConfig& cfg, WeightSet* ws);
  // GGUF metadata -> configuration and tensors -> canonical weights; null without GGUF support.
  Result<ModelConfig> (*parse_gguf)(const GgufFile& file);
  Status (*map_gguf)(const GgufFile& file, const ModelConfig& cfg, WeightSet* ws);
};

const std::vector<const Architecture*>& architectures();
const Architecture* architecture_for_hf(std::string_view model_type);  // null: unknown
const Architecture* architecture_for_gguf(std::string_view arch);      // null: unknown
const Architecture& architecture_of(Family f);
// "qwen3_5, qwen3_5_moe, ..." / "qwen35, qwen35moe, ..." for messages.
std::string supported_hf_model_types();
std::string supported_gguf_archs();

// The entries (defined in their family files).
extern const Architecture kQwen35Arch;
extern const Architecture kGraniteArch;
extern const Architecture kNemotronHArch;

}  // namespace rw
