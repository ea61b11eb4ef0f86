// Speculative-decoding options shared by `rewind run`, `rewind serve` and `rewind spec-bench`:
//   --spec off|ngram|draft:DIR|mtp   the drafter (default off)
//   --draft-k K                      most drafts per round (default 4, 1..16)
//   --spec-fixed-k                   keep k fixed (default: adaptive, shrinks after rejections)
#pragma once

#include <memory>
#include <string>

#include "args.h"
#include "rewind/engine/speculative.h"

namespace rw::app {

inline const char* kSpecValueOpts[] = {"--spec", "--draft-k"};
inline const char* kSpecFlagOpts[] = {"--spec-fixed-k"};
inline const char* kSpecHelp =
    "  --spec METHOD        speculative decoding: off (default), ngram (prompt lookup),\n"
    "                       draft:DIR (a draft model with the same tokenizer), mtp (the\n"
    "                       checkpoint's own MTP head); greedy output is identical either way\n"
    "  --draft-k K          most draft tokens per round (default 4, 1..16)\n"
    "  --spec-fixed-k       do not adapt k (default: shrink after rejections, grow back)\n";

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
