// libFuzzer target for the tokenizer: the input is parsed as tokenizer.json (any error must be
// a Result, never a crash; a tokenizer that loads must encode, wrap a prompt in tokens of its
// vocab and decode), and encoded with a fixed tokenizer trained on the built-in text, where
// decode(encode(x)) must equal NFC(x) for any bytes and the stream decoder must emit valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rewind/tokenizer/text.h"
#include "rewind/tokenizer/tokenizer.h"

namespace {

const rw::Tokenizer& fixed_tokenizer() {
  static const rw::Tokenizer tok = [] {
    rw::BpeTrainOptions opt;
    opt.n_merges = 300;
    auto t = rw::Tokenizer::from_json(
        rw::train_bpe_tokenizer_json(rw::builtin_training_text(), opt), "fuzz-trained");
    if (!t.ok()) std::abort();
    return std::move(t).value();
  }();
  return tok;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const rw::text::Utf8Step st = rw::text::utf8_step(s, i);
    if (st.kind != rw::text::Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);

  auto parsed = rw::Tokenizer::from_json(input, "fuzz.json");
  if (parsed.ok()) {
    const auto ids = parsed->encode(input);
    for (int32_t id : ids)
      if (id < 0 || id >= parsed->vocab_size()) std::abort();
    (void)parsed->decode(ids);
    // A prompt is the text between the post_processor's tokens, every one in the vocab.
    const auto prompt = parsed->encode_prompt(input);
    const size_t np = parsed->prefix_ids().size(), ns = parsed->suffix_ids().size();
    if (prompt.size() != np + ids.size() + ns) std::abort();
    for (int32_t id : prompt)
      if (parsed->token_text(id).empty()) std::abort();
  }

  const rw::Tokenizer& tok = fixed_tokenizer();
  const auto ids = tok.encode(input, /*parse_special=*/false);
  if (tok.decode(ids) != rw::text::nfc(input)) std::abort();
  const auto with_specials = tok.encode(input, /*parse_special=*/true);
  rw::StreamDecoder stream(tok);
  std::string out;
  for (int32_t id : with_specials) out += stream.push(id);
  out += stream.flush();
  if (!valid_utf8(out)) std::abort();
  return 0;
}
