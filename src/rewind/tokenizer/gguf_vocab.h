// The tokenizer and chat template stored in a GGUF file's metadata (llama.cpp's keys):
// tokenizer.ggml.model "gpt2" (byte-level BPE), tokenizer.ggml.tokens / token_type / merges /
// pre, tokenizer.chat_template. Token types: 1 normal, 2 unknown, 3 control (special added
// token), 4 user-defined (non-special added token), 5 unused (a hole: padding rows), 6 byte.
// Pre-tokenizers (tokenizer.ggml.pre) as llama.cpp reads them, for the byte-level BPE regexes
// of the families rewind runs (kGgufPreTokenizers); others are errors, as is any other tokenizer
// model. A file without one is read with the Qwen2 regex and a warning.
#pragma once

#include <string>

#include "rewind/base/result.h"
#include "rewind/io/gguf.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

// A tokenizer.ggml.pre name, its regex and whether the BPE model ignores merges for a pre-token
// that is a vocab entry (llama.cpp's llama_vocab::load and llm_tokenizer_bpe).
// add_bos: a completion prompt starts with BOS when the file has no tokenizer.ggml.add_bos_token.
// nfc: the text is NFC-normalised first, as the Qwen tokenizers' own normalizer does (the
// others have none; llama.cpp normalises nothing).
struct GgufPreTokenizer {
  std::string_view name, regex;
  bool ignore_merges, nfc, add_bos;
};
inline constexpr GgufPreTokenizer kGgufPreTokenizers[] = {
    {"qwen35", kQwen35PreTokenizerRegex, false, true, false},
    {"qwen2", kQwen3PreTokenizerRegex, false, true, false},
    {"deepseek-r1-qwen", kQwen3PreTokenizerRegex, false, true, false},
    // Llama 3's regex, with ignore_merges (llama.cpp's LLAMA3 pre-type; Nemotron-H files carry
    // "pixtral").
    {"llama3", kLlama3PreTokenizerRegex, true, false, true},
    {"llama-v3", kLlama3PreTokenizerRegex, true, false, true},
    {"llama-bpe", kLlama3PreTokenizerRegex, true, false, true},
    {"falcon3", kLlama3PreTokenizerRegex, true, false, true},
    {"falcon-h1", kLlama3PreTokenizerRegex, true, false, true},
    {"pixtral", kLlama3PreTokenizerRegex, true, false, true},
    // The same regex without ignore_merges (DBRX's and Granite 4.0's GPT-4 style vocabulary).
    {"dbrx", kLlama3PreTokenizerRegex, false, false, false},
    {"smaug-bpe", kLlama3PreTokenizerRegex, false, false, false},
    {"tekken", kTekkenPreTokenizerRegex, true, false, true},
};
const GgufPreTokenizer* find_gguf_pre_tokenizer(std::string_view name);

// Errors name the file and key (missing tokens or merges, a merge without a space, a
// token_type array of the wrong length, an unknown type or pre-tokenizer).
Result<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

// tokenizer.chat_template, or "" when absent (an ill-typed value is an error).
Result<std::string> chat_template_from_gguf(const GgufFile& file);

// The tokenizer.ggml.pre name for `tok`'s pre-tokenizer ("qwen35", "qwen2", "llama-bpe" or
// "dbrx" (Llama 3's regex with or without ignore_merges), "tekken"), found by probing texts the
// regexes split differently; an error for anything else.
Result<std::string> gguf_pre_name(const Tokenizer& tok);

}  // namespace rw
