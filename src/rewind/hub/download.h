// `rewind pull`'s transfers, with libcurl: the Hub's file listing, the architecture probe (a
// small config.json or the first bytes of a GGUF file, fetched with a Range request) and the
// downloads into the store (hub/store.h), each into `<file>.part`, resumed with a Range request
// after a dropped connection or an interrupted run, then checked against the Hub's size and
// sha256 and renamed into place. HF_TOKEN goes in an Authorization header that libcurl does not
// forward to the CDN host a redirect points at, and no message ever contains it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "rewind/base/result.h"
#include "rewind/hub/hub.h"

namespace rw::hub {

// Where one file's transfer stands (called as bytes arrive, and once when it is complete).
struct FileProgress {
  size_t index = 0, count = 0;   // this file is index + 1 of count
  std::string path;              // in the repository
  uint64_t done = 0, total = 0;  // bytes on disk / the file's size
  uint64_t resumed_from = 0;     // bytes that were on disk when this transfer began
  double seconds = 0;            // since this transfer began
  bool finished = false;
};

struct PullOptions {
  std::string endpoint = kDefaultEndpoint;  // $HF_ENDPOINT
  std::string token;                        // $HF_TOKEN ("" = none)
  std::string revision = "main";
  std::string store_root;      // hub/store.h
  int max_attempts = 5;        // per transfer; transient failures resume after a pause
  double retry_pause_s = 1.0;  // grows linearly with the attempt
  size_t gguf_probe_bytes = size_t{4} << 20;
  std::function<void(const std::string&)> note;  // one-line status messages
  std::function<void(const FileProgress&)> progress;
};

struct PullResult {
  std::string path;  // what --model takes: the checkpoint directory or the .gguf file
  std::string name;  // how --model names it: "org/name" or "org/name:Q4_K_M"
  Selection selection;
  uint64_t bytes_fetched = 0;  // over the network in this run
  uint64_t bytes_total = 0;    // of the selected files
};

// Lists the repository, selects files (select_files), checks the architecture before any weight
// file is fetched, downloads what is missing into the store and records the pull.
Result<PullResult> pull(const RepoRef& ref, const PullOptions& opt);

}  // namespace rw::hub
