#include "rewind/hub/hub.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "rewind/model/arch.h"
#include "rewind/model/config.h"

namespace rw::hub {

using json = nlohmann::json;

namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

// Each '/'-separated part is non-empty and neither "." nor "..".
bool clean_relative_path(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    const std::string part = p.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    i = j + 1;
  }
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string base_name(const std::string& path) {
  const size_t k = path.rfind('/');
  return k == std::string::npos ? path : path.substr(k + 1);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The name without ".gguf" and without a "-00001-of-00003" split suffix.
std::string gguf_stem(const std::string& path) {
  std::string n = base_name(path);
  if (ends_with(lower(n), ".gguf")) n.resize(n.size() - 5);
  if (is_split_gguf(path)) n.resize(n.size() - std::strlen("-00001-of-00003"));
  return n;
}

bool is_gguf(const RepoFile& f) {
  const std::string n = lower(base_name(f.path));
  return ends_with(n, ".gguf") && n.rfind("mmproj", 0) != 0;
}

std::string candidate_lines(const std::vector<RepoFile>& files) {
  std::string out;
  for (const RepoFile& f : files) {
    char line[512];
    std::snprintf(line, sizeof line, "\n  %-10s %s (%s)%s", quant_label(f.path).c_str(),
                  f.path.c_str(), format_bytes(f.size).c_str(),
                  is_split_gguf(f.path) ? ", split" : "");
    out += line;
  }
  return out;
}

std::string supported_list() {
  return "rewind runs Hugging Face model_type " + supported_hf_model_types() +
         " and GGUF architectures " + supported_gguf_archs();
}

}  // namespace

Result<RepoRef> parse_repo_ref(const std::string& text) {
  RepoRef r;
  const size_t colon = text.find(':');
  r.repo = text.substr(0, colon);
  if (colon != std::string::npos) {
    r.file = text.substr(colon + 1);
    if (r.file.empty())
      return make_error("'" + text + "': nothing after ':' (write ORG/NAME:Q4_K_M or ORG/NAME)");
  }
  const size_t slash = r.repo.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == r.repo.size() ||
      r.repo.find('/', slash + 1) != std::string::npos)
    return make_error("'" + r.repo + "' is not a repository name of the form ORG/NAME");
  for (char c : r.repo)
    if (c != '/' && !name_char(c))
      return make_error("'" + r.repo + "' has a character a Hub repository name cannot have");
  if (!clean_relative_path(r.repo)) return make_error("'" + r.repo + "' has a '.' or '..' part");
  if (!r.file.empty() && !clean_relative_path(r.file))
    return make_error("'" + r.file + "' is not a file path inside the repository");
  return r;
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string normalise_endpoint(const std::string& endpoint) {
  std::string e = endpoint.empty() ? kDefaultEndpoint : endpoint;
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string tree_url(const std::string& endpoint, const std::string& repo,
                     const std::string& revision) {
  return normalise_endpoint(endpoint) + "/api/models/" + url_encode(repo, true) + "/tree/" +
         url_encode(revision, false) + "?recursive=true";
}

std::string resolve_url(const std::string& endpoint, const std::string& repo,
                        const std::string& revision, const std::string& path) {
  return normalise_endpoint(endpoint) + "/" + url_encode(repo, true) + "/resolve/" +
         url_encode(revision, false) + "/" + url_encode(path, true);
}

std::string next_page_url(const std::string& link_header) {
  // Link: <url1>; rel="next", <url2>; rel="last"
  size_t i = 0;
  while ((i = link_header.find('<', i)) != std::string::npos) {
    const size_t close = link_header.find('>', i);
    if (close == std::string::npos) return "";
    const std::string url = link_header.substr(i + 1, close - i - 1);
    size_t end = link_header.find('<', close);
    const std::string params = link_header.substr(
        close + 1, end == std::string::npos ? std::string::npos : end - close - 1);
    const std::string p = lower(params);
    if (p.find("rel=\"next\"") != std::string::npos || p.find("rel=next") != std::string::npos)
      return url;
    i = close;
  }
  return "";
}

Result<std::vector<RepoFile>> parse_tree_listing(const std::string& json_text,
                                                 const std::string& where) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return make_error(where + ": the file listing is not valid JSON");
  }
  if (!root.is_array())
    return make_error(where + ": the file listing is not a JSON array (got " +
                      std::string(root.type_name()) + ")");
  std::vector<RepoFile> out;
  for (size_t i = 0; i < root.size(); ++i) {
    const json& e = root[i];
    const std::string at = where + ": listing entry " + std::to_string(i);
    if (!e.is_object()) return make_error(at + " is not an object");
    auto type = e.find("type");
    if (type == e.end() || !type->is_string())
      return make_error(at + ": 'type' is missing or not a string");
    auto path = e.find("path");
    if (path == e.end() || !path->is_string())
      return make_error(at + ": 'path' is missing or not a string");
    if (*type != "file") continue;  // directories (recursive listings name them too)
    RepoFile f;
    f.path = path->get<std::string>();
    if (!clean_relative_path(f.path))
      return make_error(at + ": path '" + f.path +
                        "' is not a relative path inside the repository");
    auto size = e.find("size");
    if (size == e.end() || !size->is_number_integer() || size->get<int64_t>() < 0)
      return make_error(at + " (" + f.path + "): 'size' is missing or not a non-negative integer");
    f.size = size->get<uint64_t>();
    auto lfs = e.find("lfs");
    if (lfs != e.end() && !lfs->is_null()) {
      if (!lfs->is_object()) return make_error(at + " (" + f.path + "): 'lfs' is not an object");
      auto oid = lfs->find("oid");
      if (oid == lfs->end() || !oid->is_string() || !is_hex64(oid->get<std::string>()))
        return make_error(at + " (" + f.path + "): 'lfs.oid' is not a sha256 (64 hex digits)");
      auto lsize = lfs->find("size");
      if (lsize == lfs->end() || !lsize->is_number_integer() || lsize->get<int64_t>() < 0)
        return make_error(at + " (" + f.path + "): 'lfs.size' is missing or not an integer");
      if (lsize->get<uint64_t>() != f.size)
        return make_error(at + " (" + f.path + "): 'lfs.size' " +
                          std::to_string(lsize->get<uint64_t>()) + " differs from 'size' " +
                          std::to_string(f.size));
      f.sha256 = lower(oid->get<std::string>());
    }
    out.push_back(std::move(f));
  }
  return out;
}

bool quant_matches(const std::string& path, const std::string& quant) {
  if (quant.empty()) return false;
  const std::string n = lower(base_name(path));
  const std::string q = lower(quant);
  auto boundary = [](char c) { return c == '-' || c == '.' || c == ' '; };
  for (size_t i = n.find(q); i != std::string::npos; i = n.find(q, i + 1)) {
    const bool start_ok = i == 0 || boundary(n[i - 1]);
    const size_t end = i + q.size();
    const bool end_ok = end == n.size() || boundary(n[end]);
    if (start_ok && end_ok) return true;
  }
  return false;
}

std::string quant_label(const std::string& path) {
  const std::string stem = gguf_stem(path);
  const size_t k = stem.find_last_of("-.");
  return k == std::string::npos ? stem : stem.substr(k + 1);
}

bool is_split_gguf(const std::string& path) {
  // "...-00001-of-00003.gguf"
  const std::string n = lower(base_name(path));
  const size_t len = std::strlen("-00001-of-00003.gguf");
  if (n.size() < len || !ends_with(n, ".gguf")) return false;
  const std::string s = n.substr(n.size() - len, len - 5);
  for (size_t i : {1, 2, 3, 4, 5, 10, 11, 12, 13, 14})
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return s[0] == '-' && s.compare(6, 4, "-of-") == 0;
}

Result<Selection> select_files(const std::vector<RepoFile>& listing, const std::string& repo,
                               const std::string& file) {
  std::vector<RepoFile> ggufs;
  for (const RepoFile& f : listing)
    if (is_gguf(f)) ggufs.push_back(f);

  auto pick_one = [&](const std::vector<RepoFile>& matches,
                      const std::string& what) -> Result<Selection> {
    if (matches.size() == 1 && !is_split_gguf(matches[0].path)) {
      Selection s;
      s.kind = Selection::Kind::Gguf;
      s.files = matches;
      return s;
    }
    if (!matches.empty() && std::all_of(matches.begin(), matches.end(),
                                        [](const RepoFile& f) { return is_split_gguf(f.path); }))
      return make_error(repo + ": " + what + " is split into " + std::to_string(matches.size()) +
                        " files (gguf-split), and rewind loads single-file GGUFs: merge them with "
                        "llama-gguf-split --merge, or pick another quantisation:" +
                        candidate_lines(ggufs));
    return make_error(repo + ": " + what + " matches " + std::to_string(matches.size()) +
                      " GGUF files; name one by its file path (" + repo +
                      ":PATH) or a longer quantisation name:" + candidate_lines(matches));
  };

  if (!file.empty()) {
    for (const RepoFile& f : listing) {
      if (f.path != file) continue;
      if (!ends_with(lower(f.path), ".gguf"))
        return make_error(repo + ": '" + file +
                          "' is not a .gguf file; rewind pull takes a whole checkpoint (" + repo +
                          ") or one GGUF file (" + repo + ":Q4_K_M)");
      return pick_one({f}, "'" + file + "'");
    }
    if (ggufs.empty())
      return make_error(repo + " has no GGUF files, so '" + file +
                        "' names nothing; pull the checkpoint with: rewind pull " + repo);
    std::vector<RepoFile> matches;
    for (const RepoFile& f : ggufs)
      if (quant_matches(f.path, file)) matches.push_back(f);
    if (matches.empty())
      return make_error(repo + ": no GGUF file carries the quantisation '" + file +
                        "'; the candidates are:" + candidate_lines(ggufs));
    return pick_one(matches, "'" + file + "'");
  }

  bool has_config = false, has_safetensors = false, has_tokenizer = false;
  for (const RepoFile& f : listing) {
    has_config |= f.path == "config.json";
    has_tokenizer |= f.path == "tokenizer.json";
    has_safetensors |= f.path.find('/') == std::string::npos && ends_with(f.path, ".safetensors");
  }
  if (has_config && has_safetensors) {
    if (!has_tokenizer)
      return make_error(repo + " has no tokenizer.json, which rewind needs next to the weights");
    static const char* kSmall[] = {
        "config.json",           "generation_config.json",  "tokenizer.json",
        "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
        "chat_template.jinja",   "chat_template.json"};
    Selection s;
    for (const char* name : kSmall)
      for (const RepoFile& f : listing)
        if (f.path == name) s.files.push_back(f);
    for (const RepoFile& f : listing)
      if (f.path.find('/') == std::string::npos && ends_with(f.path, ".safetensors.index.json"))
        s.files.push_back(f);
    for (const RepoFile& f : listing)
      if (f.path.find('/') == std::string::npos && ends_with(f.path, ".safetensors"))
        s.files.push_back(f);
    return s;
  }
  if (ggufs.empty()) {
    if (has_config)
      return make_error(repo +
                        " has config.json but no *.safetensors weights (rewind reads safetensors "
                        "checkpoints and GGUF files, not PyTorch .bin files)");
    return make_error(repo +
                      " has neither a checkpoint (config.json with *.safetensors) nor GGUF "
                      "files");
  }
  if (ggufs.size() == 1) return pick_one(ggufs, "its GGUF file");
  std::vector<RepoFile> q4km;
  for (const RepoFile& f : ggufs)
    if (quant_matches(f.path, "Q4_K_M")) q4km.push_back(f);
  if (q4km.size() == 1 && !is_split_gguf(q4km[0].path)) {
    Selection s;
    s.kind = Selection::Kind::Gguf;
    s.files = q4km;
    s.note = "picked Q4_K_M among " + std::to_string(ggufs.size()) +
             " GGUF files; name another with " + repo + ":QUANT";
    return s;
  }
  return make_error(repo + " has " + std::to_string(ggufs.size()) +
                    " GGUF files; pick one by quantisation (rewind pull " + repo +
                    ":Q4_K_M):" + candidate_lines(ggufs));
}

Result<std::string> gguf_architecture(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t pos = 0;
  auto need = [&](size_t n, const char* what) -> Status {
    if (size - pos < n)
      return make_error("the GGUF header ends (" + std::string(what) + ") before " +
                        "'general.architecture' within the first " + std::to_string(size) +
                        " bytes");
    return Ok{};
  };
  auto u32 = [&]() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{p[pos + i]} << (8 * i);
    pos += 4;
    return v;
  };
  auto u64 = [&]() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{p[pos + i]} << (8 * i);
    pos += 8;
    return v;
  };
  REWIND_TRY_STATUS(need(24, "magic, version and counts"));
  if (std::memcmp(p, "GGUF", 4) != 0) return make_error("not a GGUF file (bad magic)");
  pos = 4;
  const uint32_t version = u32();
  if (version != 2 && version != 3)
    return make_error("GGUF version " + std::to_string(version) + " (rewind reads 2 and 3)");
  u64();  // tensors
  const uint64_t n_kv = u64();
  // Byte sizes of the fixed-size value types (GgufValueType codes 0..12; 8, 9 are variable).
  static constexpr size_t kFixed[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  for (uint64_t k = 0; k < n_kv; ++k) {
    REWIND_TRY_STATUS(need(8, "a key length"));
    const uint64_t key_len = u64();
    REWIND_TRY_STATUS(need(key_len, "a key"));
    const std::string key(reinterpret_cast<const char*>(p + pos), key_len);
    pos += key_len;
    REWIND_TRY_STATUS(need(4, "a value type"));
    const uint32_t type = u32();
    if (key == "general.architecture") {
      if (type != 8) return make_error("'general.architecture' is not a string");
      REWIND_TRY_STATUS(need(8, "a string length"));
      const uint64_t n = u64();
      REWIND_TRY_STATUS(need(n, "the architecture"));
      return std::string(reinterpret_cast<const char*>(p + pos), n);
    }
    if (type > 12)
      return make_error("key '" + key + "' has unknown value type " + std::to_string(type));
    if (type == 8) {
      REWIND_TRY_STATUS(need(8, "a string length"));
      const uint64_t n = u64();
      REWIND_TRY_STATUS(need(n, "a string"));
      pos += n;
    } else if (type == 9) {
      REWIND_TRY_STATUS(need(12, "an array header"));
      const uint32_t elem = u32();
      const uint64_t count = u64();
      if (elem > 12 || elem == 9)
        return make_error("key '" + key + "' is an array of unknown or nested type " +
                          std::to_string(elem));
      if (elem == 8) {
        for (uint64_t j = 0; j < count; ++j) {
          REWIND_TRY_STATUS(need(8, "a string length"));
          const uint64_t n = u64();
          REWIND_TRY_STATUS(need(n, "a string"));
          pos += n;
        }
      } else {
        if (count > (size - pos) / kFixed[elem])
          return make_error(
              "the GGUF header ends (an array) before 'general.architecture' "
              "within the first " +
              std::to_string(size) + " bytes");
        pos += count * kFixed[elem];
      }
    } else {
      REWIND_TRY_STATUS(need(kFixed[type], "a value"));
      pos += kFixed[type];
    }
  }
  return make_error("the GGUF metadata has no 'general.architecture'");
}

Status check_hf_config(const std::string& config_json, const std::string& where) {
  json root;
  try {
    root = json::parse(config_json);
  } catch (const json::exception&) {
    return make_error(where + " is not valid JSON");
  }
  if (!root.is_object()) return make_error(where + " is not a JSON object");
  auto mt = root.find("model_type");
  if (mt == root.end() || !mt->is_string())
    return make_error(where + " has no model_type, so rewind cannot tell its architecture; " +
                      supported_list());
  const std::string model_type = mt->get<std::string>();
  if (architecture_for_hf(model_type) == nullptr) {
    std::string arch;
    auto archs = root.find("architectures");
    if (archs != root.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string())
      arch = " (" + (*archs)[0].get<std::string>() + ")";
    return make_error(where + ": model_type '" + model_type + "'" + arch +
                      " is an architecture rewind cannot run; " + supported_list());
  }
  auto cfg = parse_model_config(config_json, where);
  if (!cfg.ok()) return make_error("rewind cannot load this checkpoint: " + cfg.error_message());
  return Ok{};
}

Status check_gguf_architecture(const std::string& arch, const std::string& where) {
  if (architecture_for_gguf(arch) != nullptr) return Ok{};
  return make_error(where + ": GGUF architecture '" + arch + "' is one rewind cannot run; " +
                    supported_list());
}

std::string format_bytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else
    std::snprintf(buf, sizeof buf, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, kUnits[u]);
  return buf;
}

}  // namespace rw::hub
