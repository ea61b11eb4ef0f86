#include "rewind/model/fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "rewind/io/file_digest.h"

namespace rw {

Result<Hash128> model_fingerprint(const std::string& path, const Model& m,
                                  const std::string& digest_cache, const std::string& kv_type) {
  std::vector<std::string> files;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    for (const auto& de : std::filesystem::directory_iterator(path, ec)) {
      const std::string name = de.path().filename().string();
      const bool weights =
          name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
      if (de.is_regular_file() && (weights || name == "config.json"))
        files.push_back(de.path().string());
    }
    if (ec) return make_error(path + ": " + ec.message());
    std::sort(files.begin(), files.end());
  }
  const ModelConfig& c = m.config();
  const StateShape sh = m.state_shape();
  std::ostringstream d;
  d << "rewind-model-fingerprint-1\n"
    << "family " << family_name(c.family) << " model_type " << c.model_type << "\n"
    << "vocab " << c.vocab_size << " hidden " << c.hidden_size << " layers " << c.n_layer << "\n"
    << "state " << sh.n_attn_layers << " " << sh.kv_dim << " " << sh.n_rec_layers << " "
    << sh.conv_rows << " " << sh.conv_dim << " " << sh.ssm_layer_floats << " " << sh.page_tokens
    << " " << sh.lagged_attn_layers << " " << sh.carry_floats << "\n"
    << "kv " << kv_type << "\n"
    << "packed " << m.packed_bytes() << " quantised " << m.quantised_bytes() << " dot "
    << (m.quantised_bytes() > 0 ? quant_dot_name(m.kernel_options().quant_dot) : "-") << " mtp "
    << m.mtp_loaded() << "\n";
  for (const auto& f : files) {
    REWIND_TRY(Hash128 h, file_digest(f, digest_cache));
    d << "file " << std::filesystem::path(f).filename().string() << " " << h.hex() << "\n";
  }
  const std::string s = d.str();
  return xxh3_128(s.data(), s.size());
}

}  // namespace rw
