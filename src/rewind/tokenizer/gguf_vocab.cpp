#include "rewind/tokenizer/gguf_vocab.h"

#include <cstdio>

namespace rw {

Result<Tokenizer> tokenizer_from_gguf(const GgufFile& g) {
  const std::string& w = g.path();
  REWIND_TRY(std::string model, g.get_string("tokenizer.ggml.model"));
  if (model != "gpt2")
    return make_error(w + ": key 'tokenizer.ggml.model' is '" + model +
                      "': only 'gpt2' (byte-level BPE) is supported");
  REWIND_TRY(std::string pre, g.get_string_or("tokenizer.ggml.pre", ""));
  if (pre.empty()) {
    std::fprintf(stderr,
                 "rewind: warning: %s has no tokenizer.ggml.pre; tokenizing with the Qwen2 "
                 "pre-tokenizer, which may not be the model's (regenerate the file with a "
                 "current converter)\n",
                 w.c_str());
    pre = "qwen2";
  }
  const GgufPreTokenizer* p = find_gguf_pre_tokenizer(pre);
  if (!p) {
    std::string names;
    for (const GgufPreTokenizer& k : kGgufPreTokenizers)
      names += (names.empty() ? "'" : ", '") + std::string(k.name) + "'";
    return make_error(w + ": key 'tokenizer.ggml.pre' is '" + pre + "': supported are " + names);
  }
  BpeVocab v;
  v.pre_regex = std::string(p->regex);
  v.ignore_merges = p->ignore_merges;
  v.nfc = p->nfc;
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
  // A completion prompt's BOS / EOS, as llama.cpp adds them: add_bos_token defaults by
  // pre-tokenizer (Llama 3's add one), add_eos_token to false; a default never asks for a token
  // the file does not name.
  for (const bool bos : {true, false}) {
    const std::string kind = bos ? "bos" : "eos";
    const std::string flag = "tokenizer.ggml.add_" + kind + "_token";
    const std::string id_key = "tokenizer.ggml." + kind + "_token_id";
    REWIND_TRY(const int64_t id, g.get_int_or(id_key, -1));
    const bool given = g.get(flag) != nullptr;
    REWIND_TRY(const bool add, g.get_bool_or(flag, bos && p->add_bos));
    if (!add) continue;
    const bool usable =
        id >= 0 && id < static_cast<int64_t>(tokens.size()) && types[id] != 2 && types[id] != 5;
    if (!usable && !given) continue;  // the default asks only for a token the file has
    if (!usable)
      return make_error(w + ": key '" + flag + "' is true but '" + id_key + "' is " +
                        (id < 0 ? std::string("missing") : "not a token id"));
    (bos ? v.prefix : v.suffix).push_back(static_cast<int32_t>(id));
  }
  return Tokenizer::from_vocab(v, w);
}

Result<std::string> chat_template_from_gguf(const GgufFile& g) {
  return g.get_string_or("tokenizer.chat_template", "");
}

const GgufPreTokenizer* find_gguf_pre_tokenizer(std::string_view name) {
  for (const GgufPreTokenizer& p : kGgufPreTokenizers)
    if (p.name == name) return &p;
  return nullptr;
}

Result<std::string> gguf_pre_name(const Tokenizer& tok) {
  // Texts the four regexes split differently: a combining mark after a letter (U+0301; Qwen3.5
  // and Tekken keep it in the word), a case change inside a word (Tekken splits it) and digits
  // (Llama 3 takes three at a time).
  using Pieces = std::vector<std::string>;
  const Pieces mark = tok.pre_tokenize("x\xcc\x81y"), camel = tok.pre_tokenize("helloWorld"),
               digits = tok.pre_tokenize("12345");
  const Pieces whole = {"x\xcc\x81y"}, cut = {"x", "\xcc\x81y"}, word = {"helloWorld"};
  const Pieces singles = {"1", "2", "3", "4", "5"}, threes = {"123", "45"};
  std::string name;
  if (mark == whole && camel == word && digits == singles) name = "qwen35";
  if (mark == cut && camel == word && digits == singles) name = "qwen2";
  if (mark == cut && camel == word && digits == threes)
    name = tok.ignores_merges() ? "llama-bpe" : "dbrx";
  if (mark == whole && camel == Pieces{"hello", "World"} && digits == singles &&
      tok.ignores_merges())
    name = "tekken";
  if (!name.empty() && find_gguf_pre_tokenizer(name)->nfc != tok.normalizes_nfc())
    return make_error(std::string("tokenizer: its pre-tokenizer is GGUF's '") + name + "' but it " +
                      (tok.normalizes_nfc() ? "normalises" : "does not normalise") +
                      " to NFC, which GGUF readers take the other way");
  if (name.empty())
    return make_error(
        "tokenizer: its pre-tokenizer is none of the Qwen3.5, Qwen2, Llama 3 and Tekken regexes "
        "(one of those is what a GGUF file can name)");
  return name;
}

}  // namespace rw
