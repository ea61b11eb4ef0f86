// Byte-level BPE tokenizer: tokenizer.json parsing, added-token matching, normalisation,
// pre-tokenisation and the BPE merge loop, following Hugging Face `tokenizers` step by step
// (added_vocabulary.rs, normalizer.rs split behaviours, models/bpe/word.rs merge_all).
#include "rewind/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "rewind/base/file.h"
#include "rewind/tokenizer/text.h"
#include "rewind/tokenizer/tokenizer_config.h"

namespace rw {

namespace {

using json = nlohmann::json;

// Ids above this are rejected: the id -> token index table is dense. Real vocabularies are
// below 300k.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;
// Pre-tokens longer than this are not cached (long runs are rare and would bloat the cache).
constexpr size_t kMaxCachedPiece = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;
// Sequence normalizers / pre-tokenizers nest at most this deep (real files: 1 level).
constexpr int kMaxNesting = 8;

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct StepSpec {
  bool byte_level = false;
  // Split
  std::string pattern;
  bool literal = false;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = false;
};

// Everything from_json or from_vocab reads, before validation.
struct Spec {
  std::vector<std::pair<std::string, int64_t>> vocab;  // text -> id (model tokens)
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added;
  bool nfc = false;
  std::vector<StepSpec> steps;
  bool ignore_merges = false;
  std::vector<int32_t> prefix, suffix;  // encode_prompt's wrapping
  bool has_template = false;            // a TemplateProcessing was read
};

struct Step {
  StepSpec spec;
  text::Regex re;  // the Split pattern, or the GPT-2 regex for ByteLevel(use_regex)
  bool has_re = false;
};

// A byte trie over added-token contents for leftmost-longest matching.
class AddedMatcher {
 public:
  void add(std::string_view content, int32_t index) {
    int32_t node = 0;
    for (char c : content) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
      auto it = next_.find(key);
      if (it == next_.end()) {
        it = next_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    if (!content.empty()) {
      terminal_[node] = index;
      first_[static_cast<uint8_t>(content[0])] = true;
      empty_ = false;
    }
  }
  bool empty() const { return empty_; }
  // The longest token starting at s[i]: (index, length), or (-1, 0).
  std::pair<int32_t, size_t> longest_at(std::string_view s, size_t i) const {
    if (!first_[static_cast<uint8_t>(s[i])]) return {-1, 0};
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t node = 0;
    for (size_t j = i; j < s.size(); ++j) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(s[j]);
      const auto it = next_.find(key);
      if (it == next_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) best = {terminal_[node], j + 1 - i};
    }
    return best;
  }

 private:
  std::unordered_map<uint64_t, int32_t> next_;  // (node << 8 | byte) -> node
  std::vector<int32_t> terminal_ = {-1};        // node -> added-token index or -1
  std::array<bool, 256> first_{};
  bool empty_ = true;
};

struct Segment {
  size_t begin, end;
  int32_t id;  // added token id, or -1 for text
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 60)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

}  // namespace

struct Tokenizer::Impl {
  struct Entry {
    std::string text;   // vocab text (byte-level) or added content
    std::string bytes;  // decoded bytes
    bool added = false, special = false;
  };
  std::vector<Entry> entries;
  std::vector<int32_t> slot;                                // id -> entry index, -1 for a hole
  std::unordered_map<std::string, int32_t> model_by_text;   // vocab text -> id
  std::unordered_map<std::string, int32_t> model_by_bytes;  // decoded bytes -> id (ignore_merges)
  std::unordered_map<std::string, int32_t> added_by_content;
  std::array<int32_t, 256> byte_id{};                                   // -1: byte not in vocab
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_map;  // (a, b) -> (rank, id)
  std::vector<std::pair<int32_t, int32_t>> merge_list;                  // rank -> (a, b)
  std::vector<AddedToken> added;
  AddedMatcher raw_matcher, norm_matcher;
  bool nfc = false;
  bool ignore_merges = false;
  std::vector<Step> steps;
  std::vector<int32_t> prefix, suffix;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  const Entry* entry(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= slot.size() || slot[id] < 0) return nullptr;
    return &entries[slot[id]];
  }

  std::string normalize(std::string_view s) const { return nfc ? text::nfc(s) : std::string(s); }

  void split_added(std::string_view s, const AddedMatcher& m, bool parse_special,
                   std::vector<Segment>& out) const;
  void pre_tokenize(std::string_view s, std::vector<std::string>& pieces) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const;
};

// ---- added tokens ------------------------------------------------------------------------

// AddedVocabulary::find_matches: leftmost-longest matches, then single_word / lstrip / rstrip.
void Tokenizer::Impl::split_added(std::string_view s, const AddedMatcher& m, bool parse_special,
                                  std::vector<Segment>& out) const {
  out.clear();
  size_t start_offset = 0;
  if (!m.empty()) {
    for (size_t i = 0; i < s.size();) {
      const auto [index, len] = m.longest_at(s, i);
      if (index < 0) {
        ++i;
        continue;
      }
      const AddedToken& tok = added[index];
      size_t start = i, stop = i + len;
      i = stop;  // the match iterator resumes after the raw match
      if (start < start_offset) continue;
      if (!parse_special && tok.special) continue;
      if (tok.single_word) {
        bool start_space = true, stop_space = true;
        if (start > 0) {  // the character before the match
          size_t b = start - 1;
          while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80 && start - b < 4) --b;
          const text::Utf8Step st = text::utf8_step(s, b);
          start_space = !(st.kind == text::Utf8Step::kValid && b + st.len == start &&
                          text::is_word_char(st.cp));
        }
        if (stop < s.size()) {
          const text::Utf8Step st = text::utf8_step(s, stop);
          stop_space = !(st.kind == text::Utf8Step::kValid && text::is_word_char(st.cp));
        }
        if (!start_space || !stop_space) continue;
      }
      if (tok.lstrip) {
        size_t ns = start;
        while (ns > start_offset) {
          size_t b = ns - 1;
          while (b > start_offset && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80 && ns - b < 4) --b;
          const text::Utf8Step st = text::utf8_step(s, b);
          if (st.kind != text::Utf8Step::kValid || b + st.len != ns || !text::is_whitespace(st.cp))
            break;
          ns = b;
        }
        start = ns;
      }
      if (tok.rstrip) {
        while (stop < s.size()) {
          const text::Utf8Step st = text::utf8_step(s, stop);
          if (st.kind != text::Utf8Step::kValid || !text::is_whitespace(st.cp)) break;
          stop += st.len;
        }
        i = std::max(i, stop);
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, tok.id});
      start_offset = stop;
    }
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), -1});
}

// ---- pre-tokenisation --------------------------------------------------------------------

namespace {

// NormalizedString::split: (range, is_match) pieces covering s -> kept pieces.
void split_pieces(std::string_view s, const std::vector<std::pair<size_t, size_t>>& matches,
                  Behavior behavior, bool invert, std::vector<std::string>& out) {
  struct P {
    size_t b, e;
    bool match;
  };
  std::vector<P> parts;
  if (s.empty()) {
    parts.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      if (prev != b) parts.push_back({prev, b, false});
      parts.push_back({b, e, true});
      prev = e;
    }
    if (prev != s.size()) parts.push_back({prev, s.size(), false});
  }
  if (invert)
    for (P& p : parts) p.match = !p.match;

  std::vector<P> kept;  // .match now means "remove"
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      kept = parts;
      break;
    case Behavior::kIsolated:
      for (const P& p : parts) kept.push_back({p.b, p.e, false});
      break;
    case Behavior::kMergedWithPrevious:
      for (const P& p : parts) {
        if (p.match && !previous_match && !kept.empty()) {
          kept.back().e = p.e;
        } else {
          kept.push_back({p.b, p.e, false});
        }
        previous_match = p.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        const P& p = parts[k];
        if (p.match && !previous_match && !kept.empty()) {
          kept.back().b = p.b;
        } else {
          kept.push_back({p.b, p.e, false});
        }
        previous_match = p.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::kContiguous:
      for (const P& p : parts) {
        if (p.match == previous_match && !kept.empty()) {
          kept.back().e = p.e;
        } else {
          kept.push_back({p.b, p.e, false});
        }
        previous_match = p.match;
      }
      break;
  }
  for (const P& p : kept)
    if (!p.match && p.e > p.b) out.emplace_back(s.substr(p.b, p.e - p.b));
}

}  // namespace

void Tokenizer::Impl::pre_tokenize(std::string_view s, std::vector<std::string>& pieces) const {
  pieces.clear();
  if (s.empty()) return;
  pieces.emplace_back(s);
  std::vector<std::string> next;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.spec.byte_level) {
        if (step.spec.add_prefix_space && piece[0] != ' ') piece.insert(piece.begin(), ' ');
        if (!step.has_re) {
          next.push_back(std::move(piece));
          continue;
        }
        step.re.find_all(piece, matches);
        split_pieces(piece, matches, Behavior::kIsolated, false, next);
      } else {
        step.re.find_all(piece, matches);
        split_pieces(piece, matches, step.spec.behavior, step.spec.invert, next);
      }
    }
    pieces.swap(next);
  }
}

// ---- BPE ---------------------------------------------------------------------------------

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    const auto it = model_by_bytes.find(std::string(piece));
    if (it != model_by_bytes.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedPiece) {
    bpe_uncached(piece, out);
    return;
  }
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe_uncached(piece, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() >= kMaxCacheEntries) cache.clear();
  cache.emplace(std::move(key), std::move(ids));
}

// Word::merge_all: repeatedly merge the adjacent pair of lowest rank (leftmost on ties).
void Tokenizer::Impl::bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  std::vector<Sym> sym;
  sym.reserve(piece.size());
  for (char c : piece) {
    const int32_t id = byte_id[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // no symbol for this byte and no unk token: dropped, as in HF
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto push = [&](int32_t pos) {
    const int32_t nx = sym[pos].next;
    if (nx < 0) return;
    const auto it = merge_map.find(pair_key(sym[pos].id, sym[nx].id));
    if (it != merge_map.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Sym& a = sym[top.pos];
    if (!a.alive || a.next < 0) continue;
    const auto it = merge_map.find(pair_key(a.id, sym[a.next].id));
    if (it == merge_map.end() || it->second.second != top.new_id) continue;  // stale entry
    Sym& b = sym[a.next];
    a.id = top.new_id;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) sym[b.next].prev = top.pos;
    if (a.prev >= 0) push(a.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

// ---- construction ------------------------------------------------------------------------

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

namespace {

Result<std::unique_ptr<Tokenizer::Impl>> build(const Spec& spec, const std::string& where) {
  auto fail = [&](const std::string& what) { return make_error(where + ": " + what); };
  auto impl = std::make_unique<Tokenizer::Impl>();
  Tokenizer::Impl& t = *impl;
  t.nfc = spec.nfc;
  t.ignore_merges = spec.ignore_merges;
  t.byte_id.fill(-1);

  if (spec.vocab.empty()) return fail("model.vocab is empty");
  int64_t max_id = -1;
  for (const auto& [text, id] : spec.vocab) {
    if (id < 0 || id > kMaxTokenId)
      return fail("model.vocab token " + quote(text) + " has id " + std::to_string(id) +
                  ", outside [0, " + std::to_string(kMaxTokenId) + "]");
    max_id = std::max(max_id, id);
  }
  for (const AddedToken& a : spec.added) {
    if (a.id < 0 || a.id > kMaxTokenId)
      return fail("added token " + quote(a.content) + " has id " + std::to_string(a.id) +
                  ", outside [0, " + std::to_string(kMaxTokenId) + "]");
    if (a.content.empty())
      return fail("added token with id " + std::to_string(a.id) + " has empty content");
    max_id = std::max<int64_t>(max_id, a.id);
  }
  t.slot.assign(static_cast<size_t>(max_id + 1), -1);
  t.entries.reserve(spec.vocab.size() + spec.added.size());
  t.model_by_text.reserve(spec.vocab.size());
  for (const auto& [text, id] : spec.vocab) {
    if (t.slot[id] >= 0)
      return fail("model.vocab id " + std::to_string(id) + " is used by both " +
                  quote(t.entries[t.slot[id]].text) + " and " + quote(text));
    if (!t.model_by_text.emplace(text, static_cast<int32_t>(id)).second)
      return fail("model.vocab token " + quote(text) + " appears twice");
    Tokenizer::Impl::Entry e;
    e.text = text;
    // ByteLevel decoder: a token whose characters are not all in the byte map decodes to its
    // own UTF-8 text.
    if (!text::byte_level_to_bytes(text, e.bytes)) {
      e.bytes = text;
    } else {
      if (e.bytes.size() == 1)
        t.byte_id[static_cast<uint8_t>(e.bytes[0])] = static_cast<int32_t>(id);
      if (spec.ignore_merges) t.model_by_bytes.emplace(e.bytes, static_cast<int32_t>(id));
    }
    t.slot[id] = static_cast<int32_t>(t.entries.size());
    t.entries.push_back(std::move(e));
  }

  t.merge_map.reserve(spec.merges.size());
  t.merge_list.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& a = spec.merges[r].first;  // not a structured binding: lambdas capture it
    const std::string& b = spec.merges[r].second;
    auto rank = [&] {
      return "model.merges[" + std::to_string(r) + "] (" + quote(a) + " " + quote(b) + ")";
    };
    const auto ia = t.model_by_text.find(a);
    if (ia == t.model_by_text.end())
      return fail(rank() + " refers to " + quote(a) + ", not in model.vocab");
    const auto ib = t.model_by_text.find(b);
    if (ib == t.model_by_text.end())
      return fail(rank() + " refers to " + quote(b) + ", not in model.vocab");
    const auto im = t.model_by_text.find(a + b);
    if (im == t.model_by_text.end())
      return fail(rank() + ": the merged token " + quote(a + b) + " is not in model.vocab");
    // A repeated pair takes the later rank, as HF's HashMap collect does.
    t.merge_map[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(r), im->second};
    t.merge_list.emplace_back(ia->second, ib->second);
  }

  t.added = spec.added;
  for (size_t k = 0; k < t.added.size(); ++k) {
    const AddedToken& a = t.added[k];
    if (!t.added_by_content.emplace(a.content, a.id).second)
      return fail("added token " + quote(a.content) + " appears twice");
    int32_t& s = t.slot[a.id];
    if (s >= 0 && t.entries[s].added)
      return fail("added tokens " + quote(t.entries[s].text) + " and " + quote(a.content) +
                  " share id " + std::to_string(a.id));
    Tokenizer::Impl::Entry e;
    e.text = a.content;
    e.bytes = a.content;
    e.added = true;
    e.special = a.special;
    if (s >= 0) {
      t.entries[s] = std::move(e);  // an added token overrides the model token with its id
    } else {
      s = static_cast<int32_t>(t.entries.size());
      t.entries.push_back(std::move(e));
    }
    if (a.normalized) {
      t.norm_matcher.add(t.normalize(a.content), static_cast<int32_t>(k));
    } else {
      t.raw_matcher.add(a.content, static_cast<int32_t>(k));
    }
  }

  for (const StepSpec& s : spec.steps) {
    Step step;
    step.spec = s;
    if (!s.byte_level || s.use_regex) {
      auto re = text::Regex::compile(s.byte_level ? text::kGpt2Regex : std::string_view(s.pattern),
                                     s.literal);
      if (!re.ok()) return fail("pre_tokenizer: " + re.error_message());
      step.re = std::move(re).value();
      step.has_re = true;
    }
    t.steps.push_back(std::move(step));
  }
  for (const auto* ids : {&spec.prefix, &spec.suffix})
    for (int32_t id : *ids)
      if (t.entry(id) == nullptr)
        return fail("post_processor: its special token id " + std::to_string(id) +
                    " is not a token of the vocab");
  t.prefix = spec.prefix;
  t.suffix = spec.suffix;
  return impl;
}

// ---- tokenizer.json ----------------------------------------------------------------------

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string type_of(const json& j) {
  const json* t = field(j, "type");
  return t != nullptr && t->is_string() ? t->get<std::string>() : std::string();
}

// How an unsupported component is named in errors: its "type", or the JSON kind when it has
// none (never a dump, which could be huge or deeply nested).
std::string kind_of(const json& j, const std::string& type) {
  if (!type.empty()) return quote(type);
  return std::string("(a JSON ") + j.type_name() + (j.is_object() ? " without \"type\")" : ")");
}

// A boolean field that may be absent (default) or null (default).
Result<bool> get_bool(const json& obj, const char* key, bool def, const std::string& ctx) {
  const json* f = field(obj, key);
  if (f == nullptr || f->is_null()) return def;
  if (!f->is_boolean()) return make_error(ctx + "." + key + " is not a boolean");
  return f->get<bool>();
}

// A Sequence component's list `key`: each element through parse(element, spec, its ctx, depth).
template <class Parse>
Status each_in_sequence(const json& seq, const char* key, Spec& spec, const std::string& ctx,
                        int depth, Parse parse) {
  const json* list = field(seq, key);
  if (list == nullptr || !list->is_array()) return make_error(ctx + "." + key + " is not a list");
  for (size_t i = 0; i < list->size(); ++i)
    REWIND_TRY_STATUS(
        parse((*list)[i], spec, ctx + "." + key + "[" + std::to_string(i) + "]", depth + 1));
  return Ok{};
}

Status parse_normalizer(const json& n, Spec& spec, const std::string& ctx, int depth = 0) {
  if (n.is_null()) return Ok{};
  if (depth > kMaxNesting) return make_error(ctx + ": Sequences nested too deeply");
  const std::string type = type_of(n);
  if (type == "NFC") {
    spec.nfc = true;
    return Ok{};
  }
  if (type == "Sequence")
    return each_in_sequence(n, "normalizers", spec, ctx, depth, parse_normalizer);
  return make_error(ctx + ": unsupported normalizer type " + kind_of(n, type) +
                    " (supported: null, NFC, Sequence of NFC)");
}

// TemplateProcessing's `single` template: special tokens around the one sequence $A.
Status parse_template_processing(const json& p, Spec& spec, const std::string& ctx) {
  if (spec.has_template) return make_error(ctx + ": a second TemplateProcessing");
  spec.has_template = true;
  const json* single = field(p, "single");
  if (single == nullptr || !single->is_array()) return make_error(ctx + ".single is not a list");
  const json* specials = field(p, "special_tokens");
  if (specials != nullptr && !specials->is_null() && !specials->is_object())
    return make_error(ctx + ".special_tokens is not an object");
  bool seen_a = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string at = ctx + ".single[" + std::to_string(i) + "]";
    if (const json* seq = field(item, "Sequence")) {
      const json* id = field(*seq, "id");
      if (id == nullptr || !id->is_string() || id->get_ref<const std::string&>() != "A")
        return make_error(at + ": a single template's sequence is $A");
      if (seen_a) return make_error(at + ": $A appears twice");
      seen_a = true;
      continue;
    }
    const json* sp = field(item, "SpecialToken");
    const json* name = sp != nullptr ? field(*sp, "id") : nullptr;
    if (name == nullptr || !name->is_string())
      return make_error(at + " is neither a Sequence nor a SpecialToken with a string id");
    const json* entry =
        specials != nullptr ? field(*specials, name->get<std::string>().c_str()) : nullptr;
    const json* ids = entry != nullptr ? field(*entry, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array() || ids->empty())
      return make_error(at + ": special token " + quote(name->get<std::string>()) +
                        " has no ids in " + ctx + ".special_tokens");
    for (const json& v : *ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId)
        return make_error(at + ": special token " + quote(name->get<std::string>()) +
                          " has an id that is not a token id");
      (seen_a ? spec.suffix : spec.prefix).push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  if (!seen_a) return make_error(ctx + ".single has no $A");
  return Ok{};
}

// post_processor: only TemplateProcessing changes ids (ByteLevel's post-processing trims
// offsets, which rewind does not report).
Status parse_post_processor(const json& p, Spec& spec, const std::string& ctx, int depth = 0) {
  if (p.is_null()) return Ok{};
  if (depth > kMaxNesting) return make_error(ctx + ": Sequences nested too deeply");
  const std::string type = type_of(p);
  if (type == "ByteLevel") return Ok{};
  if (type == "TemplateProcessing") return parse_template_processing(p, spec, ctx);
  if (type == "Sequence")
    return each_in_sequence(p, "processors", spec, ctx, depth, parse_post_processor);
  return make_error(ctx + ": unsupported post_processor type " + kind_of(p, type) +
                    " (supported: null, ByteLevel, TemplateProcessing, Sequence of those)");
}

Status parse_pre_tokenizer(const json& p, Spec& spec, const std::string& ctx, int depth = 0) {
  if (depth > kMaxNesting) return make_error(ctx + ": Sequences nested too deeply");
  const std::string type = type_of(p);
  if (type == "Sequence")
    return each_in_sequence(p, "pretokenizers", spec, ctx, depth, parse_pre_tokenizer);
  StepSpec s;
  if (type == "ByteLevel") {
    s.byte_level = true;
    REWIND_TRY(s.add_prefix_space, get_bool(p, "add_prefix_space", true, ctx));
    REWIND_TRY(s.use_regex, get_bool(p, "use_regex", true, ctx));
    spec.steps.push_back(s);
    return Ok{};
  }
  if (type == "Split") {
    const json* pat = field(p, "pattern");
    const json* re = pat != nullptr ? field(*pat, "Regex") : nullptr;
    const json* str = pat != nullptr ? field(*pat, "String") : nullptr;
    if (re != nullptr && re->is_string()) {
      s.pattern = re->get<std::string>();
    } else if (str != nullptr && str->is_string()) {
      s.pattern = str->get<std::string>();
      s.literal = true;
    } else {
      return make_error(ctx + ".pattern is not {\"Regex\": string} or {\"String\": string}");
    }
    const json* beh = field(p, "behavior");
    const std::string b = beh != nullptr && beh->is_string() ? beh->get<std::string>() : "";
    if (b == "Isolated")
      s.behavior = Behavior::kIsolated;
    else if (b == "Removed")
      s.behavior = Behavior::kRemoved;
    else if (b == "MergedWithPrevious")
      s.behavior = Behavior::kMergedWithPrevious;
    else if (b == "MergedWithNext")
      s.behavior = Behavior::kMergedWithNext;
    else if (b == "Contiguous")
      s.behavior = Behavior::kContiguous;
    else
      return make_error(ctx + ".behavior " + quote(b) + " is not a split behavior");
    REWIND_TRY(s.invert, get_bool(p, "invert", false, ctx));
    spec.steps.push_back(s);
    return Ok{};
  }
  return make_error(ctx + ": unsupported pre-tokenizer type " + kind_of(p, type) +
                    " (supported: ByteLevel, Split, Sequence of those)");
}

Status parse_merges(const json& m, Spec& spec) {
  if (!m.is_array()) return make_error("model.merges is not a list");
  spec.merges.reserve(m.size());
  for (size_t r = 0; r < m.size(); ++r) {
    const json& e = m[r];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return make_error("model.merges[" + std::to_string(r) + "] " + quote(s) +
                          " is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      spec.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return make_error("model.merges[" + std::to_string(r) +
                        "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return Ok{};
}

Status parse_model(const json& m, Spec& spec) {
  if (!m.is_object()) return make_error("\"model\" is not an object");
  const std::string type = type_of(m);
  if (!type.empty() && type != "BPE")
    return make_error("model type " + quote(type) + " is not supported (only BPE)");
  const json* vocab = field(m, "vocab");
  if (vocab == nullptr || !vocab->is_object())
    return make_error("model.vocab is missing or not an object");
  const json* merges = field(m, "merges");
  if (merges == nullptr) return make_error("model.merges is missing");
  spec.vocab.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer())
      return make_error("model.vocab[" + quote(it.key()) + "] is not an integer id");
    spec.vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
  REWIND_TRY_STATUS(parse_merges(*merges, spec));
  if (const json* d = field(m, "dropout"); d != nullptr && !d->is_null()) {
    if (!d->is_number()) return make_error("model.dropout is not a number");
    const double p = d->get<double>();
    if (p != 0.0 && p != 1.0) return make_error("model.dropout (BPE dropout) is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* f = field(m, key);
    if (f != nullptr && !f->is_null() &&
        !(f->is_string() && f->get_ref<const std::string&>().empty()))
      return make_error(std::string("model.") + key + " must be empty for byte-level BPE");
  }
  REWIND_TRY(const bool byte_fallback, get_bool(m, "byte_fallback", false, "model"));
  if (byte_fallback) return make_error("model.byte_fallback is not supported");
  REWIND_TRY(spec.ignore_merges, get_bool(m, "ignore_merges", false, "model"));
  return Ok{};
}

Status parse_added(const json& list, Spec& spec) {
  if (list.is_null()) return Ok{};
  if (!list.is_array()) return make_error("added_tokens is not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& a = list[i];
    const std::string ctx = "added_tokens[" + std::to_string(i) + "]";
    const json* id = field(a, "id");
    const json* content = field(a, "content");
    if (id == nullptr || !id->is_number_integer())
      return make_error(ctx + ".id is missing or not an integer");
    if (content == nullptr || !content->is_string())
      return make_error(ctx + ".content is missing or not a string");
    const int64_t v = id->get<int64_t>();
    if (v < 0 || v > kMaxTokenId)
      return make_error(ctx + ".id " + std::to_string(v) + " is outside [0, " +
                        std::to_string(kMaxTokenId) + "]");
    AddedToken t;
    t.id = static_cast<int32_t>(v);
    t.content = content->get<std::string>();
    REWIND_TRY(t.special, get_bool(a, "special", false, ctx));
    REWIND_TRY(t.normalized, get_bool(a, "normalized", !t.special, ctx));
    REWIND_TRY(t.lstrip, get_bool(a, "lstrip", false, ctx));
    REWIND_TRY(t.rstrip, get_bool(a, "rstrip", false, ctx));
    REWIND_TRY(t.single_word, get_bool(a, "single_word", false, ctx));
    spec.added.push_back(std::move(t));
  }
  return Ok{};
}

Result<Spec> parse_spec(const json& root) {
  if (!root.is_object()) return make_error("the top level is not a JSON object");
  Spec spec;
  const json* model = field(root, "model");
  if (model == nullptr) return make_error("\"model\" is missing");
  REWIND_TRY_STATUS(parse_model(*model, spec));
  if (const json* n = field(root, "normalizer"); n != nullptr)
    REWIND_TRY_STATUS(parse_normalizer(*n, spec, "normalizer"));
  const json* pre = field(root, "pre_tokenizer");
  if (pre == nullptr || pre->is_null())
    return make_error("pre_tokenizer is missing; byte-level BPE needs a ByteLevel pre-tokenizer");
  REWIND_TRY_STATUS(parse_pre_tokenizer(*pre, spec, "pre_tokenizer"));
  int n_byte_level = 0;
  for (const StepSpec& s : spec.steps) n_byte_level += s.byte_level ? 1 : 0;
  if (n_byte_level != 1 || !spec.steps.back().byte_level)
    return make_error("pre_tokenizer must end with exactly one ByteLevel (byte-level BPE)");
  if (const json* d = field(root, "decoder"); d != nullptr && !d->is_null()) {
    std::string type = type_of(*d);
    if (type == "Sequence") {  // a Sequence of a single ByteLevel is the same decoder
      const json* list = field(*d, "decoders");
      type = list != nullptr && list->is_array() && list->size() == 1 ? type_of((*list)[0]) : "";
    }
    if (type != "ByteLevel")
      return make_error("decoder type " + kind_of(*d, type) + " is not supported (only ByteLevel)");
  }
  if (const json* a = field(root, "added_tokens"); a != nullptr)
    REWIND_TRY_STATUS(parse_added(*a, spec));
  if (const json* pp = field(root, "post_processor"); pp != nullptr)
    REWIND_TRY_STATUS(parse_post_processor(*pp, spec, "post_processor"));
  return spec;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(const std::string& json_text, const std::string& where) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return make_error(where + ": not valid JSON: " + e.what());
  }
  Result<Spec> spec = [&]() -> Result<Spec> {
    try {
      return parse_spec(root);
    } catch (const json::exception& e) {  // a type mismatch missed by the checks above
      return make_error(std::string("unexpected JSON shape: ") + e.what());
    }
  }();
  if (!spec.ok()) return make_error(where + ": " + spec.error_message());
  REWIND_TRY(auto impl, build(spec.value(), where));
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  REWIND_TRY(const std::string text, read_whole_file(path));
  return from_json(text, path);
}

Result<Tokenizer> Tokenizer::load_dir(const std::string& dir) {
  REWIND_TRY(Tokenizer t, load(dir + "/tokenizer.json"));
  const std::string path = dir + "/tokenizer_config.json";
  REWIND_TRY(const json cfg, read_tokenizer_config(dir));  // none: the post_processor decides
  // add_<kind>_token: true puts <kind>_token there (alone), false puts nothing.
  auto apply = [&](const char* kind, std::vector<int32_t>* ids) -> Status {
    const std::string flag = std::string("add_") + kind + "_token";
    const json* add = field(cfg, flag.c_str());
    if (add == nullptr || add->is_null()) return Ok{};
    if (!add->is_boolean()) return make_error(path + ": " + flag + " is not a boolean");
    ids->clear();
    if (!add->get<bool>()) return Ok{};
    const std::string key = std::string(kind) + "_token";
    const std::string text = special_token_text(cfg, key.c_str());
    if (text.empty()) return make_error(path + ": " + flag + " is true but " + key + " is not set");
    const int32_t id = t.token_id(text);
    if (id < 0)
      return make_error(path + ": " + key + " " + quote(text) +
                        " is not a token of tokenizer.json");
    ids->push_back(id);
    return Ok{};
  };
  REWIND_TRY_STATUS(apply("bos", &t.impl_->prefix));
  REWIND_TRY_STATUS(apply("eos", &t.impl_->suffix));
  return t;
}

Result<Tokenizer> Tokenizer::from_vocab(const BpeVocab& v, const std::string& where) {
  Spec spec;
  spec.nfc = v.nfc;
  spec.ignore_merges = v.ignore_merges;
  spec.vocab.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (!v.tokens[id].empty()) spec.vocab.emplace_back(v.tokens[id], static_cast<int64_t>(id));
  spec.merges = v.merges;
  // An added token replaces the vocab entry with its id (GGUF lists specials in `tokens`).
  for (const AddedToken& a : v.added) {
    if (a.id >= 0 && static_cast<size_t>(a.id) < v.tokens.size() && !v.tokens[a.id].empty()) {
      const auto it = std::find_if(spec.vocab.begin(), spec.vocab.end(),
                                   [&](const auto& e) { return e.second == a.id; });
      if (it != spec.vocab.end()) spec.vocab.erase(it);
    }
  }
  spec.added = v.added;
  spec.prefix = v.prefix;
  spec.suffix = v.suffix;
  if (!v.pre_regex.empty()) {
    StepSpec split;
    split.pattern = v.pre_regex;
    spec.steps.push_back(split);
  }
  StepSpec bl;
  bl.byte_level = true;
  spec.steps.push_back(bl);
  REWIND_TRY(auto impl, build(spec, where));
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

// ---- queries -----------------------------------------------------------------------------

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::vector<Segment> raw_segs, norm_segs;
  std::vector<std::string> pieces;
  t.split_added(text, t.raw_matcher, parse_special, raw_segs);
  for (const Segment& rs : raw_segs) {
    if (rs.id >= 0) {
      out.push_back(rs.id);
      continue;
    }
    const std::string norm = t.normalize(text.substr(rs.begin, rs.end - rs.begin));
    t.split_added(norm, t.norm_matcher, parse_special, norm_segs);
    for (const Segment& ns : norm_segs) {
      if (ns.id >= 0) {
        out.push_back(ns.id);
        continue;
      }
      t.pre_tokenize(std::string_view(norm).substr(ns.begin, ns.end - ns.begin), pieces);
      for (const std::string& p : pieces) t.bpe(p, out);
    }
  }
  return out;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  impl_->pre_tokenize(impl_->normalize(text), pieces);
  return pieces;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids)
    if (const Impl::Entry* e = impl_->entry(id)) out += e->bytes;
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const Impl::Entry* e = impl_->entry(id);
  return e != nullptr ? e->bytes : std::string();
}

std::string Tokenizer::token_text(int32_t id) const {
  const Impl::Entry* e = impl_->entry(id);
  return e != nullptr ? e->text : std::string();
}

std::vector<std::pair<std::string, std::string>> Tokenizer::merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->merge_list.size());
  for (const auto& [a, b] : impl_->merge_list) out.emplace_back(token_text(a), token_text(b));
  return out;
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out = impl_->prefix;
  const std::vector<int32_t> body = encode(text, parse_special);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
  return out;
}

const std::vector<int32_t>& Tokenizer::prefix_ids() const {
  return impl_->prefix;
}

const std::vector<int32_t>& Tokenizer::suffix_ids() const {
  return impl_->suffix;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->slot.size());
}

int32_t Tokenizer::token_id(std::string_view token_text) const {
  const std::string key(token_text);
  if (const auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end())
    return it->second;
  if (const auto it = impl_->model_by_text.find(key); it != impl_->model_by_text.end()) {
    const Impl::Entry* e = impl_->entry(it->second);
    if (e != nullptr && !e->added) return it->second;  // not overridden by an added token
  }
  return -1;
}

bool Tokenizer::is_special(int32_t id) const {
  const Impl::Entry* e = impl_->entry(id);
  return e != nullptr && e->special;
}

bool Tokenizer::is_added(int32_t id) const {
  const Impl::Entry* e = impl_->entry(id);
  return e != nullptr && e->added;
}

bool Tokenizer::ignores_merges() const {
  return impl_->ignore_merges;
}

bool Tokenizer::normalizes_nfc() const {
  return impl_->nfc;
}

// ---- streaming decode --------------------------------------------------------------------

namespace {

// Appends the complete part of `pending` to out (invalid sequences as U+FFFD) and returns the
// number of bytes consumed; a truncated sequence at the end stays unless `final`.
size_t drain_utf8(std::string_view pending, bool final, std::string& out) {
  size_t i = 0;
  while (i < pending.size()) {
    const text::Utf8Step st = text::utf8_step(pending, i);
    if (st.kind == text::Utf8Step::kValid) {
      out.append(pending.substr(i, st.len));
    } else if (st.kind == text::Utf8Step::kInvalid) {
      out += text::kReplacement;
    } else {  // truncated at the end
      if (!final) break;
      out += text::kReplacement;
    }
    i += st.len;
  }
  return i;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_->token_bytes(id);
  std::string out;
  pending_.erase(0, drain_utf8(pending_, false, out));
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  drain_utf8(pending_, true, out);
  pending_.clear();
  return out;
}

}  // namespace rw
