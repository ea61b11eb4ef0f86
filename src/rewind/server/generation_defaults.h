// What a served model does when a request leaves a choice open: the token ids that end a
// reply and the sampling parameters of a request that names none.
//
// Stop ids: generation_config.json `eos_token_id` (an int or a list), else the model config's
// eos_token_id(s) (config.json, or a GGUF file's tokenizer.ggml.eos_token_id; the caller passes
// ModelConfig::eos_token_ids: the server does not read the model layer), else the tokenizer's
// <|im_end|> and <|endoftext|>.
// Sampling: generation_config.json `do_sample: false` means greedy (temperature 0); otherwise
// the file's temperature / top_p / top_k / min_p where present, and OpenAI's defaults where not
// (temperature 1, top_p 1, top_k off, min_p off). A request's own fields override these.
// A missing generation_config.json is not an error (every field falls back); an unreadable or
// malformed one, or a sampling value out of range in it, is ignored with a line in `warnings`
// (which `rewind serve` prints), never clamped.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "rewind/sample/sampler.h"

namespace rw {

class Tokenizer;

struct GenerationDefaults {
  std::set<int32_t> stop_ids;
  SamplingParams sampling;  // seed unused (a request without a seed gets a random one)
  // The most tokens of a reply (serve -n): a request's max_tokens when it gives none, and the
  // cap of a larger one (as llama-server's -n); 0: up to what is left of the context.
  int32_t max_tokens = 0;
  // A chat reply's <think> block goes to reasoning_content (serve --reasoning-format deepseek
  // or auto); false: it stays in the content (none).
  bool split_reasoning = true;
  // The chat template's enable_thinking when a request sets none (serve --chat-template-kwargs
  // or --reasoning-budget 0): -1 the template's own default, 0 false, 1 true.
  int enable_thinking = -1;
  std::vector<std::string> warnings;
};

// Reads `dir`/generation_config.json if present. Cost: one small file read.
// config_eos_ids: the model config's end-of-sequence ids (ModelConfig::eos_token_ids).
GenerationDefaults load_generation_defaults(const std::string& dir,
                                            const std::vector<int64_t>& config_eos_ids,
                                            const Tokenizer& tok);

}  // namespace rw
