// grammar_bench: the per-token cost of grammar-constrained decoding (grammar/matcher.h) on a
// Qwen3.5-sized vocabulary, for a nested JSON schema, at batch 1 and batch 8.
//
// The vocabulary is synthetic (a generated model's tokenizer has ~2300 real tokens): 248320
// byte strings made from a seed: the 256 bytes, words and subwords in several scripts with and
// without a leading space, CJK characters and pairs, punctuation runs, JSON pieces, whitespace
// runs, code-like identifiers and cut UTF-8 sequences, in proportions like a byte-level BPE
// vocabulary. Documents are valid instances of the schema (seeded), pretty-printed or compact,
// cut into tokens by longest match over the vocabulary and replayed through the matcher the way
// a decoder would: mask the logits, then accept the sampled token.
//
// Reported per token: the mask (allowed-token bitset applied to a 248k-float logit row) and the
// accept, for the first document on a fresh automaton (every state new), for later documents
// (states seen before come from the cache) and for a second pass over all documents (all
// cached); and per step of 8 sequences in lockstep, the masks a step misses computed row after
// row or together across its rows (GrammarAutomaton::prefetch, as the engine does). Pass
// --step-ms (a decode step's time measured by `rewind bench` on the same host) to print each
// figure as a share of a step.
//
// Greedy rows (engine/constrained.h, lazy_greedy): the engine masks such a row only when its
// argmax is refused. Modelled here with rows whose maximum is the document's token with
// probability --agree (default 0.9) and otherwise a token the grammar refuses, so that 1 -
// agree of the rows need the mask; reported for a fresh automaton at batch 1 and batch 8, the
// cost including the argmax pass the check needs.
//
// The decode step compared with is measured in the same run when --model names a model (a
// Q4_K GGUF of the qwen3.5-0.8b shape: `rewind make-model --preset qwen3.5-0.8b --format gguf
// --type q4_k_m`): the median of --steps forwards of one token at batch 1, and of one token
// for each of 8 sequences at batch 8, on --threads threads; each batch's figures are then a
// share of its own step. --step-ms gives one step time for both instead.
//
// Usage: grammar_bench [--docs N] [--vocab N] [--seed S] [--step-ms MS] [--agree P]
//                      [--model PATH] [--threads N] [--steps N]
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rewind/base/thread_pool.h"
#include "rewind/engine/constrained.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/matcher.h"
#include "rewind/model/model.h"
#include "rewind/sample/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

// Concatenation by append (GCC 12 warns falsely on "literal" + std::string temporaries).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class VocabGen {
 public:
  explicit VocabGen(uint32_t seed) : rng_(seed) {}

  std::string word(int min_len, int max_len) {
    static const char* onset[] = {"b",  "c",  "d",  "f",  "g",  "h",  "j",   "k",  "l",  "m",  "n",
                                  "p",  "r",  "s",  "t",  "v",  "w",  "z",   "br", "ch", "cl", "dr",
                                  "fl", "gr", "pl", "pr", "sh", "st", "str", "th", "tr", "wh", ""};
    static const char* vowel[] = {"a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "io", "ou", "oo"};
    static const char* coda[] = {"",   "",   "n",  "r",  "s",  "t", "l",
                                 "nd", "ng", "st", "ck", "rt", "m"};
    const int len = pick(min_len, max_len);
    std::string w;
    while (static_cast<int>(w.size()) < len) {
      w += onset[pick(0, 32)];
      w += vowel[pick(0, 11)];
      w += coda[pick(0, 12)];
    }
    return w.substr(0, static_cast<size_t>(len));
  }

  std::vector<std::string> vocab(int n) {
    std::vector<std::string> out;
    std::unordered_set<std::string> seen;
    auto add = [&](const std::string& s) {
      if (!s.empty() && static_cast<int>(out.size()) < n && seen.insert(s).second) out.push_back(s);
    };
    for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
    for (int k = 1; k <= 64; ++k) add(std::string(static_cast<size_t>(k), ' '));
    for (int k = 1; k <= 8; ++k) add(std::string(static_cast<size_t>(k), '\n'));
    for (int k = 1; k <= 16; ++k) add(std::string(static_cast<size_t>(k), '\t'));
    for (int k = 1; k <= 32; ++k) {
      const std::string sp(static_cast<size_t>(k), ' ');
      for (const char* pre : {"\n", "\n\n", ",\n", "[\n"}) add(cat({pre, sp}));
      add(cat({"{\n", sp, "\""}));
      for (const char* post : {"\"", "}", "]"}) add(cat({"\n", sp, post}));
    }
    static const char* json_pieces[] = {
        "{\"",  "\":",   "\": ", "\":\"", "\": \"", "\",",   "\", \"", "\",\"",  "\"}",  "\"},",
        "\"]",  "},",    "}]",   "}}",    "]}",     "],",    "[{",     "[\"",    "\":[", "\": [",
        "\":{", "\": {", "null", "true",  "false",  " null", " true",  " false", "\\n",  "\\\"",
        "\\u",  "\\\\",  "\"\n", "\",\n", "},\n",   "}\n",   "]\n"};
    for (const char* p : json_pieces) add(p);
    const char punct[] = "{}[]\":,.;!?()-_/\\'*#@&%$=+<>|~`^";
    for (int k = 0; k < 12000; ++k) {
      std::string s = pick(0, 3) == 0 ? " " : "";
      for (int j = 0, len = pick(1, 4); j < len; ++j) s.push_back(punct[pick(0, 32)]);
      if (pick(0, 5) == 0) s += "\n";
      add(s);
    }
    for (int k = 0; k < 1500; ++k) {  // cut UTF-8: a lead byte with some of its continuation
      std::string s;
      utf8(s, static_cast<uint32_t>(pick(0x80, 0xFFFF)));
      add(s.substr(0, static_cast<size_t>(pick(1, static_cast<int>(s.size()) - 1))));
      if (s.size() == 3) add(s.substr(1));
    }
    for (uint32_t cp = 0x4E00; cp < 0x4E00 + 21000; ++cp) {  // CJK characters
      std::string s;
      utf8(s, cp);
      add(s);
    }
    for (int k = 0; k < 45000; ++k) {  // CJK words of 2-3 characters
      std::string s;
      for (int j = 0, len = pick(2, 3); j < len; ++j)
        utf8(s, static_cast<uint32_t>(pick(0x4E00, 0x4E00 + 3000)));
      add(s);
    }
    for (int k = 0; k < 20000; ++k) {  // Cyrillic and Greek words
      std::string s = pick(0, 1) ? " " : "";
      const uint32_t base = pick(0, 1) ? 0x430 : 0x3B1;
      for (int j = 0, len = pick(2, 8); j < len; ++j)
        utf8(s, base + static_cast<uint32_t>(pick(0, 24)));
      add(s);
    }
    for (int k = 0; k < 20000; ++k) {  // identifiers
      std::string s = word(2, 6);
      if (pick(0, 1)) {
        s.push_back('_');
        s += word(2, 6);
      } else {
        s.push_back(static_cast<char>(std::toupper(word(2, 2)[0])));
        s += word(2, 5);
      }
      add(pick(0, 2) == 0 ? cat({".", s}) : s);
    }
    while (static_cast<int>(out.size()) < n) {  // words, spaced and capitalised
      std::string w = word(2, 12);
      const int v = pick(0, 9);
      if (v < 4) {
        add(cat({" ", w}));
      } else if (v < 7) {
        add(w);
      } else if (v < 9) {
        w[0] = static_cast<char>(std::toupper(w[0]));
        add(pick(0, 1) ? cat({" ", w}) : w);
      } else {
        add(cat({w, pick_of({"\":", "\",", "\"", "s", "ed", "ing"})}));
      }
    }
    return out;
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::string pick_of(std::initializer_list<const char*> xs) {
    return *(xs.begin() + pick(0, static_cast<int>(xs.size()) - 1));
  }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "maxLength": 64},
    "created": {"type": "string", "format": "date-time"},
    "status": {"enum": ["active", "inactive", "pending"]},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "owner": {"$ref": "#/$defs/person"},
    "items": {"type": "array", "minItems": 1, "items": {
      "type": "object",
      "properties": {
        "sku": {"type": "string"},
        "qty": {"type": "integer"},
        "price": {"type": "number"},
        "options": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}
      },
      "required": ["sku", "qty", "price"],
      "additionalProperties": false}},
    "notes": {"type": ["string", "null"]}
  },
  "required": ["id", "name", "created", "status", "score", "tags", "owner", "items", "notes"],
  "additionalProperties": false,
  "$defs": {
    "person": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "email": {"type": "string"},
        "address": {"type": "object", "properties": {
          "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"}},
          "required": ["street", "city", "zip"], "additionalProperties": false}
      },
      "required": ["name", "email", "address"],
      "additionalProperties": false
    }
  }
})";

// A valid instance of kSchema, with prose-like strings.
ojson instance(VocabGen& g) {
  auto text = [&](int words) {
    std::string s;
    for (int k = 0; k < words; ++k) {
      if (k) s.push_back(' ');
      s += g.word(2, 9);
    }
    return s;
  };
  auto hex = [&](int n) {
    std::string s;
    for (int k = 0; k < n; ++k) s += "0123456789abcdef"[g.pick(0, 15)];
    return s;
  };
  char date[64];
  std::snprintf(date, sizeof date, "20%02d-%02d-%02dT%02d:%02d:%02dZ", g.pick(0, 30), g.pick(1, 12),
                g.pick(1, 28), g.pick(0, 23), g.pick(0, 59), g.pick(0, 59));
  ojson doc;
  doc["id"] = hex(8) + "-" + hex(4) + "-" + hex(4) + "-" + hex(4) + "-" + hex(12);
  doc["name"] = text(g.pick(1, 5)).substr(0, 64);
  doc["created"] = date;
  doc["status"] = g.pick_of({"active", "inactive", "pending"});
  doc["score"] = g.pick(0, 100000) / 100.0;
  doc["tags"] = ojson::array();
  for (int k = 0, n = g.pick(0, 5); k < n; ++k) doc["tags"].push_back(g.word(3, 8));
  doc["owner"] = {{"name", text(2)},
                  {"email", g.word(3, 8) + "@" + g.word(3, 8) + ".com"},
                  {"address",
                   {{"street", std::to_string(g.pick(1, 999)) + " " + text(2)},
                    {"city", text(1)},
                    {"zip", std::to_string(g.pick(10000, 99999))}}}};
  doc["items"] = ojson::array();
  for (int k = 0, n = g.pick(1, 4); k < n; ++k) {
    ojson item = {{"sku", "SKU-" + std::to_string(g.pick(1000, 9999))},
                  {"qty", g.pick(1, 20)},
                  {"price", g.pick(100, 99999) / 100.0}};
    if (g.pick(0, 1)) {
      item["options"] = ojson::array();
      for (int j = 0, m = g.pick(1, 3); j < m; ++j) {
        if (g.pick(0, 1)) {
          item["options"].push_back(g.word(3, 7));
        } else {
          item["options"].push_back(g.pick(0, 500));
        }
      }
    }
    doc["items"].push_back(item);
  }
  doc["notes"] = g.pick(0, 1) ? ojson(text(g.pick(3, 12))) : ojson(nullptr);
  return doc;
}

// Longest-match tokenisation over the vocabulary's trie (by a hash set of prefixes).
std::vector<int32_t> tokenize(const std::string& s, const std::vector<std::string>& vocab) {
  static std::unordered_map<std::string, int32_t> ids;
  static size_t max_len = 0;
  if (ids.empty())
    for (size_t i = 0; i < vocab.size(); ++i) {
      ids.emplace(vocab[i], static_cast<int32_t>(i));
      max_len = std::max(max_len, vocab[i].size());
    }
  std::vector<int32_t> out;
  for (size_t i = 0; i < s.size();) {
    for (size_t len = std::min(max_len, s.size() - i); len > 0; --len) {
      auto it = ids.find(s.substr(i, len));
      if (it != ids.end()) {
        out.push_back(it->second);
        i += len;
        break;
      }
    }
  }
  return out;
}

struct Figures {
  double mask_ms = 0, accept_ms = 0;
  std::vector<double> each;  // mask + accept per token (or step)
  int64_t tokens = 0, misses = 0;
  void add(double mask, double accept) {
    mask_ms += mask;
    accept_ms += accept;
    each.push_back(mask + accept);
    ++tokens;
  }
  double quantile(double q) {
    if (each.empty()) return 0;
    std::sort(each.begin(), each.end());
    return each[std::min(each.size() - 1,
                         static_cast<size_t>(q * static_cast<double>(each.size())))];
  }
};

void print(const char* what, Figures& f, double step_ms) {
  const double n = static_cast<double>(std::max<int64_t>(f.tokens, 1));
  const double per = (f.mask_ms + f.accept_ms) / n;
  std::printf(
      "%-32s %5lld  mask %7.4f  accept %7.4f  mean %7.4f  p50 %7.4f  p99 %7.3f  max %7.3f  misses "
      "%lld",
      what, static_cast<long long>(f.tokens), f.mask_ms / n, f.accept_ms / n, per, f.quantile(0.5),
      f.quantile(0.99), f.quantile(1.0), static_cast<long long>(f.misses));
  if (step_ms > 0) std::printf("  mean = %.2f%% of a step", 100.0 * per / step_ms);
  std::printf("\n");
}

// Median decode step (ms) of `model` at batch `batch`: each sequence prefilled with a short
// seeded prompt, then `steps` timed forwards of one token per sequence (after one untimed).
double measure_step_ms(rw::Model& model, rw::ThreadPool& pool, int batch, int steps) {
  const int32_t V = static_cast<int32_t>(model.config().vocab_size);
  std::vector<rw::SequenceState> states;
  for (int s = 0; s < batch; ++s) states.push_back(model.new_state());
  std::vector<float> logits;
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  for (auto& p : prompts) {
    p.resize(64);
    for (auto& t : p) t = std::uniform_int_distribution<int32_t>(0, V - 1)(rng);
  }
  auto run = [&](bool prefill) {
    std::vector<rw::SeqInput> in(static_cast<size_t>(batch));
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int s = 0; s < batch; ++s) {
      next[s] = std::uniform_int_distribution<int32_t>(0, V - 1)(rng);
      in[s].state = &states[s];
      in[s].tokens =
          prefill ? std::span<const int32_t>(prompts[s]) : std::span<const int32_t>(&next[s], 1);
      in[s].logit_rows = {static_cast<int32_t>(in[s].tokens.size()) - 1};
    }
    rw::Status st = model.forward(std::span<rw::SeqInput>(in), &logits, &pool);
    if (!st.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", st.error_message().c_str());
      std::exit(1);
    }
  };
  run(true);
  run(false);
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const auto a = Clock::now();
    run(false);
    t.push_back(ms_since(a));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int n_docs = 16, n_vocab = 248320;
  uint32_t seed = 1;
  double step_ms = 0, agree = 0.9;
  std::string model_path;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int steps = 16;
  int mask_threads = 1;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "grammar_bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--docs")) {
      n_docs = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--vocab")) {
      n_vocab = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--seed")) {
      seed = static_cast<uint32_t>(std::atoi(next()));
    } else if (!std::strcmp(argv[i], "--step-ms")) {
      step_ms = std::atof(next());
    } else if (!std::strcmp(argv[i], "--agree")) {
      agree = std::atof(next());
    } else if (!std::strcmp(argv[i], "--model")) {
      model_path = next();
    } else if (!std::strcmp(argv[i], "--threads")) {
      threads = std::max(1, std::atoi(next()));
    } else if (!std::strcmp(argv[i], "--mask-threads")) {
      mask_threads = std::max(1, std::atoi(next()));
    } else if (!std::strcmp(argv[i], "--steps")) {
      steps = std::max(1, std::atoi(next()));
    } else {
      std::fprintf(stderr,
                   "usage: grammar_bench [--docs N] [--vocab N] [--seed S] [--step-ms MS] "
                   "[--agree P] [--model PATH] [--threads N] [--steps N] [--mask-threads N]\n");
      return 2;
    }
  }
  if (n_docs < 8 || n_vocab < 1000) {
    std::fprintf(stderr, "grammar_bench: --docs must be >= 8 and --vocab >= 1000\n");
    return 2;
  }
  // The decode steps compared with: measured now (before the vocabulary takes memory and
  // cache), or one --step-ms for both batches.
  double step1_ms = step_ms, step8_ms = step_ms;
  if (!model_path.empty()) {
    rw::ThreadPool pool(threads);
    rw::LoadOptions lo;
    lo.pool = &pool;
    auto model = rw::Model::load(model_path, lo);
    if (!model.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", model.error_message().c_str());
      return 1;
    }
    step1_ms = measure_step_ms(**model, pool, 1, steps);
    step8_ms = measure_step_ms(**model, pool, 8, steps);
    std::printf(
        "decode step of %s on %d threads (median of %d): batch 1 %.2f ms, batch 8 %.2f ms\n",
        model_path.c_str(), threads, steps, step1_ms, step8_ms);
  }
  VocabGen gen(seed);
  auto t0 = Clock::now();
  std::vector<std::string> vocab = gen.vocab(n_vocab - 2);
  const int32_t eos = static_cast<int32_t>(vocab.size());  // plus one more special after it
  const double gen_ms = ms_since(t0);
  t0 = Clock::now();
  auto trie = std::make_shared<rw::VocabTrie>(vocab, std::vector<int32_t>{eos, eos + 1});
  const double trie_ms = ms_since(t0);
  std::printf(
      "vocabulary %d tokens (generated in %.0f ms), trie %zu nodes, %.1f MiB, built in %.0f ms\n",
      trie->n_vocab(), gen_ms, trie->n_nodes(), trie->memory_bytes() / 1048576.0, trie_ms);

  t0 = Clock::now();
  auto g = rw::compile_json_schema(ojson::parse(kSchema));
  if (!g.ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", g.error_message().c_str());
    return 1;
  }
  auto grammar = std::make_shared<rw::Grammar>(std::move(g).value());
  std::printf("schema compiled in %.2f ms: %zu rules, %zu elements\n", ms_since(t0),
              grammar->rules.size(), grammar->elements.size());

  std::vector<std::vector<int32_t>> docs;
  size_t total_tokens = 0;
  for (int d = 0; d < n_docs; ++d) {
    const ojson doc = instance(gen);
    const std::string text = d % 2 ? doc.dump() : doc.dump(2);
    docs.push_back(tokenize(text, vocab));
    docs.back().push_back(eos);
    total_tokens += docs.back().size();
  }
  std::printf("%d documents, %zu tokens (pretty-printed and compact alternately)\n", n_docs,
              total_tokens);

  std::vector<float> row(static_cast<size_t>(trie->n_vocab()));
  // Masks that walk the whole trie share it among --mask-threads threads (the engine passes
  // its pool, idle while it samples).
  rw::ThreadPool mask_pool(mask_threads);
  rw::ThreadPool* mp = mask_threads > 1 ? &mask_pool : nullptr;
  std::printf("masks computed on %d thread(s)\n", mask_threads);
  auto automaton = rw::GrammarAutomaton::create(grammar, trie).value();
  auto replay = [&](const std::vector<int32_t>& doc, Figures& f) {
    rw::GrammarMatcher m(automaton);
    for (int32_t id : doc) {
      std::fill(row.begin(), row.end(), 0.0f);
      const int64_t miss0 = automaton->stats().mask_misses;
      const auto a = Clock::now();
      rw::Status st = m.mask_logits(row.data(), mp);
      const double mask = ms_since(a);
      if (!st.ok() || row[id] != 0.0f) {
        std::fprintf(stderr, "grammar_bench: token %d not allowed: %s\n", id,
                     st.error_message().c_str());
        std::exit(1);
      }
      const auto b = Clock::now();
      st = m.accept(id);
      const double acc = ms_since(b);
      if (!st.ok()) {
        std::fprintf(stderr, "grammar_bench: %s\n", st.error_message().c_str());
        std::exit(1);
      }
      f.misses += automaton->stats().mask_misses - miss0;
      f.add(mask, acc);
    }
    if (!m.is_ended()) {
      std::fprintf(stderr, "grammar_bench: a document did not end the grammar\n");
      std::exit(1);
    }
  };
  Figures first, later, cached;
  replay(docs[0], first);
  for (int d = 1; d < n_docs; ++d) replay(docs[d], later);
  for (int d = 0; d < n_docs; ++d) replay(docs[d], cached);
  std::printf("\nbatch 1, ms per token (mask: the allowed set applied to one logit row)\n");
  print("first document, fresh automaton", first, step1_ms);
  print("documents 2.., warm automaton", later, step1_ms);
  print("second pass, all cached", cached, step1_ms);

  // Applying a mask alone (no lookup), for scale.
  {
    rw::TokenMask mask(static_cast<size_t>(trie->n_words()));
    rw::GrammarMatcher m(automaton);
    (void)m.allowed(mask.data());
    const auto a = Clock::now();
    for (int r = 0; r < 200; ++r) rw::apply_token_mask(mask.data(), row.data(), trie->n_vocab());
    std::printf("apply_token_mask alone (the start state's mask): %.4f ms\n", ms_since(a) / 200);
    // The argmax pass the greedy rows below include (greedy decoding does one anyway).
    volatile int32_t sink = 0;
    const auto c = Clock::now();
    for (int r = 0; r < 200; ++r) sink = sink + rw::argmax(row.data(), trie->n_vocab());
    std::printf("argmax of one row alone: %.4f ms\n", ms_since(c) / 200);
  }

  // Batch 8: sequences in lockstep on a fresh automaton, then again all cached. `together`:
  // a step's missing masks are first computed at once across its rows (GrammarAutomaton::
  // prefetch, as the engine does), else row after row.
  auto batch = [&](Figures& f, bool together) {
    std::vector<rw::GrammarMatcher> ms;
    for (int s = 0; s < 8; ++s) ms.emplace_back(automaton);
    std::vector<float> rows(static_cast<size_t>(trie->n_vocab()) * 8);
    size_t longest = 0;
    for (int s = 0; s < 8; ++s) longest = std::max(longest, docs[s].size());
    for (size_t t = 0; t < longest; ++t) {
      const int64_t miss0 = automaton->stats().mask_misses;
      const auto a = Clock::now();
      if (together) {
        std::vector<int32_t> states;
        for (int s = 0; s < 8; ++s)
          if (t < docs[s].size()) states.push_back(ms[s].state());
        (void)automaton->prefetch(states, mp);
      }
      for (int s = 0; s < 8; ++s)
        if (t < docs[s].size())
          (void)ms[s].mask_logits(rows.data() + static_cast<size_t>(s) * trie->n_vocab(), mp);
      const double mask = ms_since(a);
      const auto b = Clock::now();
      for (int s = 0; s < 8; ++s)
        if (t < docs[s].size() && !ms[s].accept(docs[s][t]).ok()) std::exit(1);
      f.misses += automaton->stats().mask_misses - miss0;
      f.add(mask, ms_since(b));
    }
  };
  automaton = rw::GrammarAutomaton::create(grammar, trie).value();
  Figures b_cold_rows;
  batch(b_cold_rows, false);
  automaton = rw::GrammarAutomaton::create(grammar, trie).value();
  Figures b_cold, b_warm;
  batch(b_cold, true);
  batch(b_warm, true);
  std::printf("\nbatch 8, ms per step (8 masks and 8 accepts)\n");
  print("fresh, row after row", b_cold_rows, step8_ms);
  print("fresh, a step's masks together", b_cold, step8_ms);
  print("all cached", b_warm, step8_ms);
  const rw::AutomatonStats st = automaton->stats();
  std::printf(
      "\nautomaton: %lld states, %lld stack frames, %lld transitions, %lld masks computed "
      "(%.1f MiB), %lld context-free parts (%.1f MiB, %lld reused)\n",
      static_cast<long long>(st.states), static_cast<long long>(st.stacks),
      static_cast<long long>(st.transitions), static_cast<long long>(st.mask_misses),
      st.mask_bytes / 1048576.0, static_cast<long long>(st.split_misses),
      st.split_bytes / 1048576.0, static_cast<long long>(st.split_hits));
  // Greedy rows, masked only when the argmax is refused: a fresh automaton each time.
  auto lazy = [&](int batch_size, Figures& f, bool together) {
    automaton = rw::GrammarAutomaton::create(grammar, trie).value();
    std::mt19937 rng(seed + 7);
    const int32_t V = trie->n_vocab();
    std::vector<rw::GrammarMatcher> ms;
    for (int s = 0; s < batch_size; ++s) ms.emplace_back(automaton);
    std::vector<float> rows(static_cast<size_t>(V) * batch_size, 0.0f);
    size_t longest = 0;
    for (int s = 0; s < batch_size; ++s) longest = std::max(longest, docs[s].size());
    for (size_t t = 0; t < longest; ++t) {
      // The rows: 1 at the document's token, and 2 at a refused token unless the model agrees.
      for (int s = 0; s < batch_size; ++s) {
        if (t >= docs[s].size()) continue;
        float* r = rows.data() + static_cast<size_t>(s) * V;
        std::fill(r, r + V, 0.0f);
        r[docs[s][t]] = 1.0f;
        if (std::uniform_real_distribution<double>(0, 1)(rng) >= agree)
          for (int tries = 0; tries < 64; ++tries) {
            const int32_t x = std::uniform_int_distribution<int32_t>(0, V - 1)(rng);
            auto n = automaton->step_token(ms[s].state(), x);
            if (n.ok() && n.value() == rw::GrammarAutomaton::kDead) {
              r[x] = 2.0f;
              break;
            }
          }
      }
      const int64_t miss0 = automaton->stats().mask_misses;
      const auto a = Clock::now();
      // As the engine's prefetch: each row's argmax checked first, the refused rows' masks
      // computed together, the argmax passed on.
      std::vector<int32_t> hint(static_cast<size_t>(batch_size), -1);
      if (together) {
        std::vector<int32_t> states;
        for (int s = 0; s < batch_size; ++s) {
          if (t >= docs[s].size()) continue;
          hint[s] = rw::argmax(rows.data() + static_cast<size_t>(s) * V, V);
          auto n = automaton->step_token(ms[s].state(), hint[s]);
          if (n.ok() && n.value() == rw::GrammarAutomaton::kDead) states.push_back(ms[s].state());
        }
        if (states.size() >= 2) (void)automaton->prefetch(states, mp);
      }
      for (int s = 0; s < batch_size; ++s) {
        if (t >= docs[s].size()) continue;
        float* r = rows.data() + static_cast<size_t>(s) * V;
        if (!rw::constrain_logits(*automaton, ms[s].state(), r, V, true, nullptr, mp, hint[s])
                 .ok() ||
            rw::argmax(r, V) != docs[s][t]) {
          std::fprintf(stderr, "grammar_bench: the lazy mask chose another token\n");
          std::exit(1);
        }
      }
      const double mask = ms_since(a);
      const auto b = Clock::now();
      for (int s = 0; s < batch_size; ++s)
        if (t < docs[s].size() && !ms[s].accept(docs[s][t]).ok()) std::exit(1);
      f.misses += automaton->stats().mask_misses - miss0;
      f.add(mask, ms_since(b));
    }
  };
  Figures l1, l8_rows, l8;
  lazy(1, l1, false);
  lazy(8, l8_rows, false);
  lazy(8, l8, true);
  std::printf(
      "\ngreedy rows masked only when the argmax is refused (%.0f%% agree), fresh "
      "automaton\n",
      100 * agree);
  print("batch 1, ms per token", l1, step1_ms);
  print("batch 8, row after row", l8_rows, step8_ms);
  print("batch 8, refused rows together", l8, step8_ms);

  return 0;
}
