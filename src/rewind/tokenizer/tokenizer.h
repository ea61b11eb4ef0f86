// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (GPT-2 byte map, merges by
// rank, NFC normalizer, Split pre-tokenizer regex with Unicode classes via PCRE2, added/special
// tokens matched on the raw text before normalisation and never split). Also a small BPE
// trainer used by `rewind make-model` to write a working tokenizer.json for seeded models.
//
// Supported tokenizer.json subset (anything else is an Error naming the file and the field):
//   normalizer     null | NFC | Sequence of those
//   pre_tokenizer  ByteLevel(add_prefix_space, use_regex) | Sequence[Split(pattern {Regex|String},
//                  behavior Isolated|Removed|MergedWithPrevious|MergedWithNext|Contiguous,
//                  invert)..., ByteLevel] with ByteLevel last
//   model          BPE (vocab, merges as "a b" or ["a", "b"], ignore_merges; no dropout, no
//                  subword prefix/suffix, no byte_fallback)
//   decoder        null | ByteLevel
//   post_processor null | ByteLevel | TemplateProcessing (its `single` template: the special
//                  tokens before and after $A) | Sequence of those; only encode_prompt uses it
//   added_tokens   id, content, special, normalized, lstrip, rstrip, single_word
// Regexes are Oniguruma syntax as HF writes them; they run on PCRE2 with \s, \w, \h rewritten to
// Oniguruma's meaning. Invalid UTF-8 in the input is kept byte for byte (it matches no regex
// class and NFC leaves it alone), so decode(encode(x)) == x for any bytes when the vocab has all
// 256 byte symbols; a byte whose symbol is missing from the vocab is dropped, as HF does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

// The Qwen3.5 pre-tokenizer regex (docs/QWEN35.md 7.1) and the Qwen2/Qwen3 one (no \p{M}).
inline constexpr std::string_view kQwen35PreTokenizerRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen3PreTokenizerRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3's (also GPT-4's cl100k, DBRX's and Granite 4.0's): digits in threes.
inline constexpr std::string_view kLlama3PreTokenizerRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken: words split at a lower-to-upper case change, single digits.
inline constexpr std::string_view kTekkenPreTokenizerRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct AddedToken {
  int32_t id = -1;
  std::string content;  // raw UTF-8, matched in the text as is
  bool special = true;
  bool normalized = false;  // true: matched after NFC instead of on the raw text
  bool lstrip = false, rstrip = false, single_word = false;
};

// A byte-level BPE tokenizer as parts, the shape GGUF stores it in.
struct BpeVocab {
  std::vector<std::string> tokens;  // id -> byte-level vocab text; "" for a hole
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<AddedToken> added;  // ids may point into `tokens` (that entry is replaced)
  std::string pre_regex = std::string(kQwen35PreTokenizerRegex);  // Split(Isolated); "" = none
  bool nfc = true;
  bool ignore_merges = false;  // a pre-token that is a vocab entry is that token (BPE model's)
  // The tokens encode_prompt puts around a text (GGUF's add_bos_token / add_eos_token).
  std::vector<int32_t> prefix, suffix;
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Parse tokenizer.json text; `where` names the file in errors. Errors for malformed JSON,
  // unsupported model type (only BPE), bad merges, ids out of range, invalid regex.
  static Result<Tokenizer> from_json(const std::string& json_text, const std::string& where);
  static Result<Tokenizer> load(const std::string& tokenizer_json_path);
  // A checkpoint directory's tokenizer.json, with tokenizer_config.json's boolean
  // add_bos_token / add_eos_token (when given) in place of the post_processor's choice, as
  // llama.cpp's converter reads them; the tokens are its bos_token / eos_token.
  static Result<Tokenizer> load_dir(const std::string& dir);
  // Builds from parts (e.g. GGUF tokenizer.ggml.tokens / merges / token_type). Same checks.
  static Result<Tokenizer> from_vocab(const BpeVocab& vocab, const std::string& where);

  // Encode text. Special/added tokens in the text are recognised (parse_special = true) or
  // treated as plain text. parse_special = false only ignores tokens marked special (like HF's
  // encode_special_tokens); non-special added tokens are still matched. Never adds BOS/EOS.
  // Thread-safe (the per-pre-token BPE cache is behind a mutex). Cost: linear in the text plus
  // O(n log n) BPE per uncached pre-token.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // A prompt's text as Hugging Face's tokenizer(text) and llama.cpp's completion prompts encode
  // it: encode(text) between prefix_ids() and suffix_ids() (e.g. a BOS first). Chat prompts use
  // encode alone: the template writes their special tokens (HF's apply_chat_template).
  std::vector<int32_t> encode_prompt(std::string_view text, bool parse_special = true) const;
  const std::vector<int32_t>& prefix_ids() const;
  const std::vector<int32_t>& suffix_ids() const;

  // The normalised pre-tokens of `text` (raw bytes, before the byte-level map), with no added
  // token matching. For tests and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // Decode ids to bytes (may end inside a multi-byte UTF-8 sequence; see StreamDecoder).
  // Unknown ids add nothing. Special tokens decode to their content.
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes of one token (empty for unknown ids).
  std::string token_bytes(int32_t id) const;
  // The token as written in the vocab: byte-level text for model tokens (e.g. "Ġthe"), the
  // content for added tokens; empty for unknown ids.
  std::string token_text(int32_t id) const;
  // The model's merges in rank order, as vocab texts.
  std::vector<std::pair<std::string, std::string>> merges() const;

  int32_t vocab_size() const;  // 1 + the largest id (base vocab + added)
  // Exact lookup of an added token's content or a model token's vocab text (byte-level, e.g.
  // "Ġthe", not " the"); -1 if absent.
  int32_t token_id(std::string_view token_text) const;
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;  // an added_tokens entry (special or not)
  bool ignores_merges() const;      // the BPE model's ignore_merges
  bool normalizes_nfc() const;      // an NFC normalizer runs first

  struct Impl;  // opaque; named here so the implementation's helpers can build one

 private:
  Tokenizer();
  std::unique_ptr<Impl> impl_;
};

// Streams decoded text as valid UTF-8: holds back an incomplete multi-byte sequence at the end
// until the next token completes it (invalid sequences become U+FFFD, one per maximal invalid
// subpart, as Python's errors="replace" and Rust's from_utf8_lossy do). The Tokenizer must
// outlive it. Not thread-safe; one per stream.
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
  // Merges to learn (vocab = 256 bytes + merges + specials). The built-in text supports about
  // 2300 before no pair is left.
  int32_t n_merges = 256;
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // The Qwen3.5 pre-tokenizer regex (docs/QWEN35.md 7.1) is used by default.
};

// Learns a byte-level BPE from `corpus` deterministically and returns tokenizer.json text that
// Tokenizer::from_json (and Hugging Face `tokenizers`) can load: model BPE, NFC normalizer,
// Sequence[Split(regex, isolated), ByteLevel(add_prefix_space=false, use_regex=false)],
// ByteLevel decoder, added_tokens for the specials (ids after the merges).
// Pair counts are taken over pre-token words weighted by their counts; the most frequent pair is
// merged, ties going to the smallest (left id, right id). Stops early when no pair is left.
// A merge whose text already exists reuses that id (as HF's trainer does), so the vocab is
// 256 + (distinct merged texts, at most n_merges) + specials. Special tokens found in the corpus
// are cut out before counting. Cost: about linear in the corpus plus the words each merge
// touches; ~50 KB and a few thousand merges take well under a second.
std::string train_bpe_tokenizer_json(std::string_view corpus, const BpeTrainOptions& opt);

// ~40 KB of plain English prose (written for rewind, public domain) with digits, punctuation,
// quotes, contractions and newlines, for `rewind make-model` to train its tokenizer on.
// Deterministic; the view points at storage that lives for the whole program.
std::string_view builtin_training_text();

}  // namespace rw
