// Speculative-decoding options shared by `rewind run` and `rewind serve` (declared in
// apps/cli.cpp):
//   --spec off|ngram|draft:DIR|mtp   the drafter (default off)
//   --draft-k K                      most drafts per round (default 4, 1..16)
//   --spec-fixed-k                   keep k fixed (default: adaptive, shrinks after rejections)
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "args.h"
#include "rewind/engine/speculative.h"

namespace rw::app {

struct SpecSetup {
  SpecConfig cfg;                // cfg.draft points into `draft` (or a shared draft) for Draft
  std::unique_ptr<Model> draft;  // the draft model when it is this setup's own
  bool wants_mtp() const { return cfg.kind == SpecKind::Mtp; }
};

// A draft model loaded once for several targets (`rewind serve` with several models): given
// the draft's path and KV types, sets cfg->draft and cfg->draft_lock.
using SharedDraftLoader =
    std::function<Status(const std::string& dir, KvTypes kv, SpecConfig* cfg)>;

// Parses the options and loads the draft model (same weight store, kernel options and KV types
// as the target), or has `shared` load or find it when given.
// Does not check against the target: call spec_check once it is loaded.
Result<SpecSetup> spec_from_args(const Args& a, const std::string& store,
                                 const KernelOptions& kernels, ThreadPool* pool,
                                 const SharedDraftLoader& shared = {});

}  // namespace rw::app
