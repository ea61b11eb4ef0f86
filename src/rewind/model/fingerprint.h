// A loaded model's fingerprint: what a cache that outlives the process (the prefix cache's
// disk tier) binds its files to, so that state computed by one model is never read by another.
// XXH3-128 of: the architecture and every shape (the configuration, the state layout), the KV
// element type, the load choices that change results (the quantised dot, the packed stores,
// the MTP head), and the digest of every file the weights and configuration come from (each
// read once per file version, io/file_digest.h).
#pragma once

#include <string>

#include "rewind/base/hash.h"
#include "rewind/base/result.h"
#include "rewind/model/model.h"

namespace rw {

// `path`: what Model::load was given (a checkpoint directory or a GGUF file). `digest_cache`:
// the side file of io/file_digest.h ("" reads every file). `kv_type`: the KV element type's name.
Result<Hash128> model_fingerprint(const std::string& path, const Model& m,
                                  const std::string& digest_cache,
                                  const std::string& kv_type = "f32");

}  // namespace rw
