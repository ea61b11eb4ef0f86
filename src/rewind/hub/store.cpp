#include "rewind/hub/store.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "rewind/base/file.h"

namespace rw::hub {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string base_name(const std::string& path) {
  const size_t k = path.rfind('/');
  return k == std::string::npos ? path : path.substr(k + 1);
}

Result<json> read_manifest(const fs::path& file) {
  REWIND_TRY(const std::string text, read_whole_file(file.string()));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    return make_error(file.string() + ": not valid JSON (remove it and pull again)");
  }
  if (!j.is_object() || !j.contains("repo") || !j["repo"].is_string())
    return make_error(file.string() + ": not a rewind pull manifest (remove it and pull again)");
  return j;
}

json files_json(const std::vector<RepoFile>& files) {
  json a = json::array();
  for (const RepoFile& f : files)
    a.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  return a;
}

// True when every recorded file is on disk (stored under `name_of`) with its recorded size.
template <typename NameOf>
bool files_present(const fs::path& dir, const json& files, NameOf name_of, uint64_t* bytes) {
  bool ok = true;
  *bytes = 0;
  if (!files.is_array()) return false;
  for (const json& f : files) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned())
      return false;
    const uint64_t size = f["size"].get<uint64_t>();
    *bytes += size;
    std::error_code ec;
    const auto on_disk = fs::file_size(dir / name_of(f["path"].get<std::string>()), ec);
    if (ec || on_disk != size) ok = false;
  }
  return ok;
}

Result<std::vector<StoredModel>> models_in(const fs::path& dir) {
  std::vector<StoredModel> out;
  REWIND_TRY(json m, read_manifest(dir / kManifestName));
  const std::string repo = m["repo"].get<std::string>();
  if (m.contains("checkpoint") && m["checkpoint"].is_object()) {
    const json& c = m["checkpoint"];
    StoredModel s;
    s.name = repo;
    s.path = dir.string();
    s.revision = c.value("revision", "");
    s.complete = files_present(
        dir, c.value("files", json()), [](const std::string& p) { return p; }, &s.bytes);
    out.push_back(s);
  }
  if (m.contains("gguf") && m["gguf"].is_array()) {
    for (const json& g : m["gguf"]) {
      if (!g.is_object() || !g.contains("path") || !g["path"].is_string()) continue;
      const std::string path = g["path"].get<std::string>();
      StoredModel s;
      s.name = repo + ":" + quant_label(path);
      s.path = (dir / base_name(path)).string();
      s.revision = g.value("revision", "");
      s.complete = files_present(dir, json::array({g}), base_name, &s.bytes);
      out.push_back(s);
    }
  }
  return out;
}

std::string names_of(const std::vector<StoredModel>& v) {
  std::string out;
  for (const StoredModel& s : v)
    out += "\n  " + s.name + " (" + s.path + ")" + (s.complete ? "" : " [incomplete]");
  return out;
}

}  // namespace

Result<std::string> default_store_root() {
  if (const char* h = std::getenv("REWIND_HOME"); h && *h) return std::string(h);
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".cache" / "rewind").string();
  return make_error("neither REWIND_HOME nor HOME is set, so rewind has no model store");
}

std::string store_model_dir(const std::string& root, const std::string& repo) {
  return (fs::path(root) / "models" / repo).string();
}

Status record_pull(const std::string& dir, const std::string& repo, const std::string& revision,
                   const Selection& sel) {
  const fs::path file = fs::path(dir) / kManifestName;
  json m = {{"repo", repo}};
  std::error_code ec;
  if (fs::exists(file, ec)) {
    auto old = read_manifest(file);
    if (old.ok()) m = old.value();
  }
  m["repo"] = repo;
  if (sel.kind == Selection::Kind::Hf) {
    m["checkpoint"] = {{"revision", revision}, {"files", files_json(sel.files)}};
  } else {
    json list = json::array();
    if (m.contains("gguf") && m["gguf"].is_array())
      for (const json& g : m["gguf"])
        if (g.is_object() && g.value("path", "") != sel.files[0].path) list.push_back(g);
    for (const RepoFile& f : sel.files)
      list.push_back(
          {{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}, {"revision", revision}});
    m["gguf"] = list;
  }
  const fs::path tmp = fs::path(dir) / (std::string(kManifestName) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << m.dump(1) << "\n";
    if (!out) return make_error(tmp.string() + ": cannot be written");
  }
  fs::rename(tmp, file, ec);
  if (ec) return make_error(file.string() + ": cannot be written: " + ec.message());
  return Ok{};
}

bool is_recorded(const std::string& dir, const RepoFile& f) {
  auto m = read_manifest(fs::path(dir) / kManifestName);
  if (!m.ok()) return false;
  auto same = [&](const json& e) {
    return e.is_object() && e.value("path", "") == f.path && e.value("sha256", "") == f.sha256 &&
           e.contains("size") && e["size"].is_number_unsigned() &&
           e["size"].get<uint64_t>() == f.size;
  };
  const json& j = m.value();
  if (j.contains("checkpoint") && j["checkpoint"].is_object() &&
      j["checkpoint"].contains("files") && j["checkpoint"]["files"].is_array())
    for (const json& e : j["checkpoint"]["files"])
      if (same(e)) return true;
  if (j.contains("gguf") && j["gguf"].is_array())
    for (const json& e : j["gguf"])
      if (same(e)) return true;
  return false;
}

Result<std::vector<StoredModel>> list_stored(const std::string& root) {
  std::vector<StoredModel> out;
  const fs::path models = fs::path(root) / "models";
  std::error_code ec;
  if (!fs::is_directory(models, ec)) return out;
  for (const auto& org : fs::directory_iterator(models, ec)) {
    if (!org.is_directory()) continue;
    for (const auto& name : fs::directory_iterator(org.path(), ec)) {
      if (!name.is_directory() || !fs::exists(name.path() / kManifestName)) continue;
      REWIND_TRY(auto v, models_in(name.path()));
      out.insert(out.end(), v.begin(), v.end());
    }
  }
  std::sort(out.begin(), out.end(),
            [](const StoredModel& a, const StoredModel& b) { return a.name < b.name; });
  return out;
}

Result<std::string> find_stored(const std::string& root, const std::string& name) {
  const size_t colon = name.find(':');
  const std::string base = name.substr(0, colon);
  const std::string pick = colon == std::string::npos ? "" : name.substr(colon + 1);
  REWIND_TRY(auto all, list_stored(root));
  const std::string where = (fs::path(root) / "models").string();
  // The pulled models of the repositories `base` names: org/name exactly, or */name.
  std::vector<StoredModel> repo_models;
  std::map<std::string, int> repos;
  for (const StoredModel& s : all) {
    const std::string repo = s.name.substr(0, s.name.find(':'));
    const bool hit = base.find('/') != std::string::npos ? repo == base
                                                         : repo.substr(repo.find('/') + 1) == base;
    if (!hit) continue;
    repo_models.push_back(s);
    repos[repo]++;
  }
  if (repo_models.empty())
    return make_error("'" + name + "' is neither a file, a directory nor a model in the store (" +
                      where + "); pull it with: rewind pull ORG/NAME" +
                      (all.empty() ? std::string() : "; the store has:" + names_of(all)));
  if (repos.size() > 1)
    return make_error("'" + base + "' names models of " + std::to_string(repos.size()) +
                      " repositories; write ORG/NAME:" + names_of(repo_models));
  std::vector<StoredModel> hits;
  for (const StoredModel& s : repo_models) {
    const bool is_gguf = s.name.find(':') != std::string::npos;
    if (pick.empty() ? true : is_gguf && (quant_matches(s.path, pick) || base_name(s.path) == pick))
      hits.push_back(s);
  }
  // Without a pick, a checkpoint wins over GGUF files of the same repository.
  if (pick.empty())
    for (const StoredModel& s : repo_models)
      if (s.name.find(':') == std::string::npos) hits = {s};
  if (hits.size() != 1)
    return make_error(
        "'" + name + "' " +
        (hits.empty() ? std::string("matches none") : "matches " + std::to_string(hits.size())) +
        " of the pulled models; name one of:" + names_of(repo_models));
  if (!hits[0].complete)
    return make_error(hits[0].name + " in the store (" + hits[0].path +
                      ") is missing files or has files of the wrong size; pull it again: rewind "
                      "pull " +
                      hits[0].name);
  return hits[0].path;
}

}  // namespace rw::hub
