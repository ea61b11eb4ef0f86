// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (GPT-2 byte map, merges by
// rank, NFC normalizer, Split pre-tokenizer regex with Unicode classes via PCRE2, added/special
// tokens matched on the raw text before normalisation and never split). Also a small BPE
// trainer used by `rewind make-model` to write a working tokenizer.json for seeded models.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Parse tokenizer.json text; `where` names the file in errors. Errors for malformed JSON,
  // unsupported model type (only BPE), bad merges, ids out of range, invalid regex.
  static Result<Tokenizer> from_json(const std::string& json_text, const std::string& where);
  static Result<Tokenizer> load(const std::string& tokenizer_json_path);

  // Encode text. Special/added tokens in the text are recognised (parse_special = true) or
  // treated as plain text.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Decode ids to bytes (may end inside a multi-byte UTF-8 sequence; see StreamDecoder).
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes of one token (empty for unknown ids).
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;                 // 1 + the largest id (base vocab + added)
  int32_t token_id(std::string_view token_text) const;  // exact vocab/added lookup; -1 if absent
  bool is_special(int32_t id) const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streams decoded text as valid UTF-8: holds back an incomplete multi-byte sequence at the end
// until the next token completes it (invalid sequences become U+FFFD).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(int32_t id);  // text that became complete with this token
  std::string flush();           // whatever is still held back (as U+FFFD where invalid)

 private:
  const Tokenizer* tok_;
  std::string pending_;
};

struct BpeTrainOptions {
  int32_t n_merges = 256;  // number of merges to learn (vocab = 256 bytes + merges + specials)
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // The Qwen3.5 pre-tokenizer regex (ARCH-qwen35.md 7.1) is used by default.
};

// Learns a byte-level BPE from `corpus` deterministically and returns tokenizer.json text that
// Tokenizer::from_json (and Hugging Face `tokenizers`) can load: model BPE, NFC normalizer,
// Sequence[Split(regex, isolated), ByteLevel(add_prefix_space=false, use_regex=false)],
// ByteLevel decoder, added_tokens for the specials (ids after the merges).
std::string train_bpe_tokenizer_json(std::string_view corpus, const BpeTrainOptions& opt);

}  // namespace rw
