// The tokenizer and chat template stored in a GGUF file's metadata (llama.cpp's keys):
// tokenizer.ggml.model "gpt2" (byte-level BPE), tokenizer.ggml.tokens / token_type / merges /
// pre, tokenizer.chat_template. Token types: 1 normal, 2 unknown, 3 control (special added
// token), 4 user-defined (non-special added token), 5 unused (a hole: padding rows), 6 byte.
// Pre-tokenizers: "qwen35" (Qwen3.5 regex) and "qwen2" (the Qwen2/Qwen3 regex); others are
// errors, as is any other tokenizer model.
#pragma once

#include <string>

#include "rewind/base/result.h"
#include "rewind/io/gguf.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

// Errors name the file and key (missing tokens or merges, a merge without a space, a
// token_type array of the wrong length, an unknown type or pre-tokenizer).
Result<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

// tokenizer.chat_template, or "" when absent (an ill-typed value is an error).
Result<std::string> chat_template_from_gguf(const GgufFile& file);

// The pre-tokenizer name llama.cpp uses for `tok`'s pre-tokenizer regex ("qwen35" or "qwen2"),
// found by probing a text the two regexes split differently; an error for anything else.
Result<std::string> gguf_pre_name(const Tokenizer& tok);

}  // namespace rw
