// What a served model does when a request leaves a choice open: the token ids that end a
// reply and the sampling parameters of a request that names none.
//
// Stop ids: generation_config.json `eos_token_id` (an int or a list), else config.json's
// eos_token_id(s), else the tokenizer's <|im_end|> and <|endoftext|>.
// Sampling: generation_config.json `do_sample: false` means greedy (temperature 0); otherwise
// the file's temperature / top_p / top_k / min_p where present, and OpenAI's defaults where not
// (temperature 1, top_p 1, top_k off, min_p off). A request's own fields override these.
// A missing generation_config.json is not an error (every field falls back); a malformed one,
// or a sampling value out of range in it, is ignored with a line in `warnings` (which
// `rewind serve` prints), never clamped.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "rewind/sample/sampler.h"

namespace rw {

class Tokenizer;
struct ModelConfig;

struct GenerationDefaults {
  std::set<int32_t> stop_ids;
  SamplingParams sampling;  // seed unused (a request without a seed gets a random one)
  std::vector<std::string> warnings;
};

// Reads `dir`/generation_config.json if present. Cost: one small file read.
GenerationDefaults load_generation_defaults(const std::string& dir, const ModelConfig& cfg,
                                            const Tokenizer& tok);

}  // namespace rw
