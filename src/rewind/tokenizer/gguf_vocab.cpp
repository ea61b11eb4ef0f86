#include "rewind/tokenizer/gguf_vocab.h"

namespace rw {

Result<Tokenizer> tokenizer_from_gguf(const GgufFile& g) {
  const std::string& w = g.path();
  REWIND_TRY(std::string model, g.get_string("tokenizer.ggml.model"));
  if (model != "gpt2")
    return make_error(w + ": key 'tokenizer.ggml.model' is '" + model +
                      "': only 'gpt2' (byte-level BPE) is supported");
  REWIND_TRY(std::string pre, g.get_string_or("tokenizer.ggml.pre", "qwen2"));
  BpeVocab v;
  if (pre == "qwen35") {
    v.pre_regex = std::string(kQwen35PreTokenizerRegex);
  } else if (pre == "qwen2") {
    v.pre_regex = std::string(kQwen3PreTokenizerRegex);
  } else {
    return make_error(w + ": key 'tokenizer.ggml.pre' is '" + pre +
                      "': supported are 'qwen35' and 'qwen2'");
  }
  REWIND_TRY(std::vector<std::string> tokens, g.get_strings("tokenizer.ggml.tokens"));
  std::vector<int64_t> types(tokens.size(), 1);
  if (g.get("tokenizer.ggml.token_type")) {
    REWIND_TRY(types, g.get_ints("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size())
      return make_error(w + ": key 'tokenizer.ggml.token_type' has " +
                        std::to_string(types.size()) + " entries but 'tokenizer.ggml.tokens' has " +
                        std::to_string(tokens.size()));
  }
  v.tokens.resize(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    switch (types[id]) {
      case 1:
      case 6:
        v.tokens[id] = std::move(tokens[id]);
        break;
      case 2:
      case 5:
        break;  // a hole
      case 3:
      case 4: {
        AddedToken a;
        a.id = static_cast<int32_t>(id);
        a.content = std::move(tokens[id]);
        a.special = types[id] == 3;
        v.added.push_back(std::move(a));
        break;
      }
      default:
        return make_error(w + ": key 'tokenizer.ggml.token_type': token " + std::to_string(id) +
                          " has unknown type " + std::to_string(types[id]));
    }
  }
  REWIND_TRY(std::vector<std::string> merges, g.get_strings("tokenizer.ggml.merges"));
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t sp = merges[i].find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == merges[i].size() ||
        merges[i].find(' ', sp + 1) != std::string::npos)
      return make_error(w + ": key 'tokenizer.ggml.merges': entry " + std::to_string(i) +
                        " is not two tokens separated by one space");
    v.merges.emplace_back(merges[i].substr(0, sp), merges[i].substr(sp + 1));
  }
  return Tokenizer::from_vocab(v, w);
}

Result<std::string> chat_template_from_gguf(const GgufFile& g) {
  return g.get_string_or("tokenizer.chat_template", "");
}

Result<std::string> gguf_pre_name(const Tokenizer& tok) {
  // U+0301 (a combining mark with no precomposed form after 'x'): the Qwen3.5 regex keeps marks
  // inside words, the Qwen2 one starts a new piece at the mark.
  const auto pieces = tok.pre_tokenize("x\xcc\x81y");
  if (pieces == std::vector<std::string>{"x\xcc\x81y"}) return std::string("qwen35");
  if (pieces == std::vector<std::string>{"x", "\xcc\x81y"}) return std::string("qwen2");
  return make_error(
      "tokenizer: its pre-tokenizer is neither the Qwen3.5 nor the Qwen2 regex (GGUF needs one of "
      "them)");
}

}  // namespace rw
