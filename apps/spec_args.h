// Speculative-decoding options shared by `rewind run` and `rewind serve` (declared in
// apps/cli.cpp):
//   --spec off|ngram|draft:DIR|mtp   the drafter (default off)
//   --draft-k K                      most drafts per round (default 4, 1..16)
//   --spec-fixed-k                   keep k fixed (default: adaptive, shrinks after rejections)
#pragma once

#include <memory>
#include <string>

#include "args.h"
#include "rewind/engine/speculative.h"

namespace rw::app {

struct SpecSetup {
  SpecConfig cfg;                // cfg.draft points into `draft` when kind is Draft
  std::unique_ptr<Model> draft;  // owned draft model
  bool wants_mtp() const { return cfg.kind == SpecKind::Mtp; }
};

// Parses the options and loads the draft model (same weight store and kernel options as the
// target).
// Does not check against the target: call spec_check once it is loaded.
Result<SpecSetup> spec_from_args(const Args& a, const std::string& store,
                                 const KernelOptions& kernels, ThreadPool* pool);

}  // namespace rw::app
