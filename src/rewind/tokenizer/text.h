// Text primitives shared by the tokenizer and the BPE trainer (internal to the tokenizer layer):
// UTF-8 scanning with the Unicode "maximal subpart" rule for invalid bytes, the GPT-2 byte <->
// unicode map, NFC (utf8proc) that leaves invalid bytes untouched, and a PCRE2 regex wrapper
// that finds all matches the way Hugging Face `tokenizers` (Oniguruma) iterates them.
//
// Everything here accepts arbitrary bytes: invalid UTF-8 never crashes, never matches a regex
// character class, and passes through normalisation unchanged, so decode(encode(x)) == x for
// any byte string x (given a vocab with all 256 byte symbols).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/base/result.h"

namespace rw::text {

// The GPT-2 regex that ByteLevel(use_regex = true) applies.
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// One step of UTF-8 scanning at s[i] (i < s.size()).
struct Utf8Step {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  int len;      // bytes consumed: the sequence (valid), its maximal subpart (invalid, >= 1),
                // or the valid prefix that runs into the end of the input (truncated)
  char32_t cp;  // the code point when valid
};
Utf8Step utf8_step(std::string_view s, size_t i);

void append_utf8(std::string& out, char32_t cp);
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// GPT-2 bytes_to_unicode: byte -> code point, and its UTF-8 spelling.
char32_t byte_to_codepoint(uint8_t b);
const std::string& byte_to_utf8(uint8_t b);
// The byte-level text of raw bytes (each byte -> its code point).
std::string bytes_to_byte_level(std::string_view bytes);
// The inverse; false when some character is not in the map (out is then unspecified).
bool byte_level_to_bytes(std::string_view text, std::string& out);

// NFC of the valid UTF-8 runs of s; invalid bytes are copied as they are.
std::string nfc(std::string_view s);

// Unicode White_Space (Rust char::is_whitespace) and "word character" (alphanumeric or '_').
bool is_whitespace(char32_t cp);
bool is_word_char(char32_t cp);

// A compiled PCRE2 pattern (UTF, UCP, MATCH_INVALID_UTF, JIT when available). Immutable after
// compile, so one Regex may be used from many threads (each call makes its own match data).
class Regex {
 public:
  // literal = true matches `pattern` as a plain string (Split {String: ...}).
  static Result<Regex> compile(std::string_view pattern, bool literal);
  // The [begin, end) byte ranges of the non-overlapping matches in s, left to right. After an
  // empty match the search moves on by one character (empty matches are reported).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

// Regex pattern text rewritten from Oniguruma to PCRE2 meaning where they differ (checked
// against HF tokenizers): \s is U+0009..U+000D, U+0085 and Z (PCRE2's UCP \s adds U+180E);
// \w is L, M, N and Pc (PCRE2: L, N, '_'); \h is a hex digit (PCRE2: horizontal space).
// Negated shorthands inside a class keep PCRE2's meaning, except \S (U+180E added).
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace rw::text
