// The Hugging Face Hub's side of `rewind pull`, without any network: repository references,
// the URLs of the Hub's endpoints, its file listing, which files a pull takes (an HF checkpoint
// directory or one GGUF file picked by quantisation name), and the architecture checks made
// before any weight file is fetched. The transfers are in hub/download.h.
//
// Endpoints (base URL $HF_ENDPOINT, default https://huggingface.co):
//   GET {base}/api/models/{repo}/tree/{revision}?recursive=true   JSON array of entries
//       {"type":"file","path":..,"size":..,"oid":..,"lfs":{"oid":sha256,"size":..}}; pages
//       continue through a `Link: <url>; rel="next"` header
//   GET {base}/{repo}/resolve/{revision}/{path}   the file (a 302 to a CDN for LFS files)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw::hub {

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

// "org/name[:FILE]": FILE is a quantisation name (Q4_K_M) or a file's path in the repository.
struct RepoRef {
  std::string repo;  // "org/name"
  std::string file;  // "" when not given
};
// Errors: not org/name, characters the Hub does not allow in names ([A-Za-z0-9._-]), "." or ".."
// parts, an empty FILE after ':'.
Result<RepoRef> parse_repo_ref(const std::string& text);

// Percent-encodes everything but RFC 3986's unreserved characters (and '/' when keep_slash).
std::string url_encode(const std::string& s, bool keep_slash);
// The endpoint without trailing slashes.
std::string normalise_endpoint(const std::string& endpoint);
std::string tree_url(const std::string& endpoint, const std::string& repo,
                     const std::string& revision);
std::string resolve_url(const std::string& endpoint, const std::string& repo,
                        const std::string& revision, const std::string& path);
// The rel="next" URL of a Link header ("" when there is none).
std::string next_page_url(const std::string& link_header);

// One file of a repository.
struct RepoFile {
  std::string path;    // relative to the repository root, '/'-separated
  uint64_t size = 0;   // bytes
  std::string sha256;  // LFS files: lfs.oid (64 hex digits); "" for files kept in git itself
};

// Parses one page of the tree listing; directory entries are skipped. Errors name `where` and
// the entry: not a JSON array, an entry that is not an object, a missing or ill-typed
// type/path/size, an lfs object without a 64-hex oid or with a size that differs from `size`, a
// path that is absolute or has "." / ".." / empty parts.
Result<std::vector<RepoFile>> parse_tree_listing(const std::string& json_text,
                                                 const std::string& where);

// True when the file's name (its last path part) carries `quant` as a whole token, case
// insensitive: Q4_K_M matches "Model-Q4_K_M.gguf" and "model.q4_k_m-00001-of-00002.gguf" but
// Q4_K does not match "Model-Q4_K_M.gguf".
bool quant_matches(const std::string& path, const std::string& quant);
// The quantisation name a GGUF file's name carries ("Model-UD-Q4_K_XL.gguf" -> "Q4_K_XL"): the
// last '-' or '.' separated part of the name without ".gguf" and a split suffix.
std::string quant_label(const std::string& path);
// "-00001-of-00003.gguf" style names (llama.cpp's gguf-split), which rewind cannot load.
bool is_split_gguf(const std::string& path);

// What a pull takes from a listing.
struct Selection {
  enum class Kind { Hf, Gguf } kind = Kind::Hf;
  std::vector<RepoFile> files;  // Hf: config.json first; Gguf: the one file
  std::string note;             // a line for the user when a choice was made for them
};
// With `file` empty: the HF checkpoint (config.json, every top-level *.safetensors, the shard
// index, tokenizer and template files) when the repository has config.json and safetensors;
// else its one GGUF file, or Q4_K_M among several (as llama.cpp's -hf does). With `file`: the
// path itself when the listing has it, else the GGUF files whose names carry it as a
// quantisation name. Projector files (mmproj*) are never picked. An ambiguous or unmatched
// choice is an error listing the candidates.
Result<Selection> select_files(const std::vector<RepoFile>& listing, const std::string& repo,
                               const std::string& file);

// `general.architecture` from the first bytes of a GGUF file (the metadata before it is
// skipped). Errors: bad magic or version, a malformed value, the key absent or not a string,
// or the prefix ending before the key ("... within the first N bytes").
Result<std::string> gguf_architecture(const void* data, size_t size);

// The checks made before weights are fetched: config.json's model_type (and architectures)
// must be one rewind runs, and the file must parse as rewind's config; a GGUF architecture must
// be one rewind runs. Errors name the architecture and list the supported ones.
Status check_hf_config(const std::string& config_json, const std::string& where);
Status check_gguf_architecture(const std::string& arch, const std::string& where);

// "1.23 GB", "512 KB", "17 B" (decimal units, as the Hub shows sizes).
std::string format_bytes(uint64_t n);

}  // namespace rw::hub
