// The local model store that `rewind pull` fills and `--model NAME` reads: $REWIND_HOME (or
// ~/.cache/rewind) /models/<org>/<name>/ holds a pulled checkpoint's files and/or pulled GGUF
// files, with a manifest (.rewind-pull.json) written once every file of a pull is complete and
// checked. No network here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/hub/hub.h"

namespace rw::hub {

inline constexpr const char* kManifestName = ".rewind-pull.json";

// $REWIND_HOME, else $HOME/.cache/rewind; an error when neither is set.
Result<std::string> default_store_root();
// <root>/models/<org>/<name>
std::string store_model_dir(const std::string& root, const std::string& repo);

// One pulled model as `--model` names it.
struct StoredModel {
  std::string name;      // "org/name" (a checkpoint) or "org/name:Q4_K_M" (a GGUF file)
  std::string path;      // the directory or the .gguf file
  std::string revision;  // as pulled
  uint64_t bytes = 0;
  bool complete = true;  // false when a recorded file is missing or has another size
};

// Adds a finished pull to the directory's manifest (kept: other GGUF files pulled before; a
// checkpoint pull replaces the previous checkpoint record). Written to a temporary file and
// renamed.
Status record_pull(const std::string& dir, const std::string& repo, const std::string& revision,
                   const Selection& sel);

// True when the directory's manifest records `f` (its path, size and sha256) as pulled, so a file
// of that size on disk needs no new transfer or hashing.
bool is_recorded(const std::string& dir, const RepoFile& f);

// Every pulled model under root, sorted by name. Directories without a manifest are skipped; an
// unreadable manifest is an error naming it.
Result<std::vector<StoredModel>> list_stored(const std::string& root);

// The path of a pulled model: "org/name" or a unique "name", with ":QUANT" or ":FILE" to pick
// one of several GGUF files. Errors say what is stored and what to run.
Result<std::string> find_stored(const std::string& root, const std::string& name);

}  // namespace rw::hub
