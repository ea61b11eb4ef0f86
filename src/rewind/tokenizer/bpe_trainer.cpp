// Deterministic byte-level BPE trainer: Qwen3.5 pre-tokenisation, pair counts over distinct
// words weighted by their counts (kept incrementally), a max-heap with lazy invalidation for
// the most frequent pair (ties: smallest (left id, right id)), and tokenizer.json output.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "rewind/tokenizer/text.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Distinct pre-token words of the corpus (special tokens cut out first), sorted, with counts.
std::vector<std::pair<std::string, int64_t>> count_words(std::string_view corpus,
                                                         const std::vector<std::string>& specials) {
  auto re = text::Regex::compile(kQwen35PreTokenizerRegex, false);
  REWIND_CHECK_MSG(re.ok(), re.error_message());
  std::unordered_map<std::string, int64_t> counts;
  std::vector<std::pair<size_t, size_t>> matches;
  auto add_chunk = [&](std::string_view chunk) {
    const std::string norm = text::nfc(chunk);
    const std::string_view s = norm;
    re->find_all(s, matches);
    size_t prev = 0;
    auto add = [&](size_t b, size_t e) {
      if (e > b) ++counts[std::string(s.substr(b, e - b))];
    };
    for (const auto& [b, e] : matches) {
      add(prev, b);
      add(b, e);
      prev = e;
    }
    add(prev, s.size());
  };
  size_t start = 0;
  for (size_t i = 0; i < corpus.size();) {
    size_t len = 0;  // the longest special token at i
    for (const std::string& sp : specials)
      if (sp.size() > len && corpus.substr(i, sp.size()) == sp) len = sp.size();
    if (len == 0) {
      ++i;
      continue;
    }
    add_chunk(corpus.substr(start, i - start));
    i += len;
    start = i;
  }
  add_chunk(corpus.substr(start));
  std::vector<std::pair<std::string, int64_t>> words(counts.begin(), counts.end());
  std::sort(words.begin(), words.end());
  return words;
}

struct HeapEntry {
  int64_t count;
  int32_t a, b;
  // priority_queue pops the "largest": highest count, then the smallest pair.
  bool operator<(const HeapEntry& o) const {
    if (count != o.count) return count < o.count;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

}  // namespace

std::string train_bpe_tokenizer_json(std::string_view corpus, const BpeTrainOptions& opt) {
  std::vector<std::string> specials;
  for (const std::string& s : opt.special_tokens)
    if (!s.empty() && std::find(specials.begin(), specials.end(), s) == specials.end())
      specials.push_back(s);

  const auto words = count_words(corpus, specials);
  const auto n_words = static_cast<int32_t>(words.size());
  std::vector<std::vector<int32_t>> syms(words.size());
  std::vector<std::string> tok_bytes(256);
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    tok_bytes[b] = std::string(1, static_cast<char>(b));
    id_of.emplace(tok_bytes[b], b);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // pair -> words (may repeat)
  for (int32_t w = 0; w < n_words; ++w) {
    for (char c : words[w].first) syms[w].push_back(static_cast<uint8_t>(c));
    for (size_t i = 0; i + 1 < syms[w].size(); ++i) {
      const uint64_t k = pair_key(syms[w][i], syms[w][i + 1]);
      pair_count[k] += words[w].second;
      where[k].push_back(w);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, n] : pair_count)
    heap.push({n, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<int32_t> stamp(words.size(), -1);
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<int32_t> merged;
  while (static_cast<int32_t>(merges.size()) < opt.n_merges && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.a, top.b);
    const auto pc = pair_count.find(key);
    if (pc == pair_count.end() || pc->second != top.count || top.count <= 0) continue;  // stale

    std::string text = tok_bytes[top.a] + tok_bytes[top.b];
    int32_t id;
    if (const auto it = id_of.find(text); it != id_of.end()) {
      id = it->second;  // the text already exists (reached by other merges): reuse its id
    } else {
      id = static_cast<int32_t>(tok_bytes.size());
      id_of.emplace(text, id);
      tok_bytes.push_back(std::move(text));
    }
    const auto merge_index = static_cast<int32_t>(merges.size());
    merges.emplace_back(top.a, top.b);

    delta.clear();
    std::vector<int32_t> touched = std::move(where[key]);
    where.erase(key);
    for (int32_t w : touched) {
      if (stamp[w] == merge_index) continue;
      stamp[w] = merge_index;
      std::vector<int32_t>& s = syms[w];
      merged.clear();
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == top.a && s[i + 1] == top.b) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      if (merged.size() == s.size()) continue;
      const int64_t cnt = words[w].second;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pair_key(s[i], s[i + 1])] -= cnt;
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        const uint64_t k = pair_key(merged[i], merged[i + 1]);
        delta[k] += cnt;
        if (merged[i] == id || merged[i + 1] == id) where[k].push_back(w);
      }
      s.swap(merged);
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      const int64_t n = (pair_count[k] += d);
      if (n <= 0) {
        pair_count.erase(k);
      } else {
        heap.push({n, static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFFu)});
      }
    }
  }

  using ojson = nlohmann::ordered_json;
  const auto n_model = static_cast<int32_t>(tok_bytes.size());
  ojson added = ojson::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", n_model + static_cast<int32_t>(i)},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const ojson byte_level = {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", false},
                            {"use_regex", false}};
  ojson vocab = ojson::object();
  std::vector<std::string> level(tok_bytes.size());
  for (int32_t id = 0; id < n_model; ++id) {
    level[id] = text::bytes_to_byte_level(tok_bytes[id]);
    vocab[level[id]] = id;
  }
  ojson merge_list = ojson::array();
  for (const auto& [a, b] : merges) merge_list.push_back(level[a] + " " + level[b]);

  ojson j = ojson::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       ojson::array({ojson{{"type", "Split"},
                           {"pattern", {{"Regex", std::string(kQwen35PreTokenizerRegex)}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                     byte_level})}};
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merge_list)}};
  return j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace rw
