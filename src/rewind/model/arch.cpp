#include "rewind/model/arch.h"

#include <algorithm>

namespace rw {

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> all = {&kQwen35Arch, &kGraniteArch,
                                                       &kNemotronHArch};
  return all;
}

const Architecture* architecture_for_hf(std::string_view model_type) {
  for (const Architecture* a : architectures())
    for (const std::string& t : a->hf_model_types)
      if (t == model_type) return a;
  return nullptr;
}

const Architecture* architecture_for_gguf(std::string_view arch) {
  for (const Architecture* a : architectures())
    for (const std::string& t : a->gguf_archs)
      if (t == arch) return a;
  return nullptr;
}

const Architecture& architecture_of(Family f) {
  for (const Architecture* a : architectures())
    if (std::find(a->families.begin(), a->families.end(), f) != a->families.end()) return *a;
  REWIND_CHECK_MSG(false, std::string("no architecture for family ") + family_name(f));
  return kQwen35Arch;
}

namespace {
std::string join(std::vector<std::string> Architecture::*list) {
  std::string s;
  for (const Architecture* a : architectures())
    for (const std::string& t : a->*list) (s.empty() ? s : s += ", ") += t;
  return s;
}
}  // namespace

std::string supported_hf_model_types() {
  return join(&Architecture::hf_model_types);
}

std::string supported_gguf_archs() {
  return join(&Architecture::gguf_archs);
}

}  // namespace rw
