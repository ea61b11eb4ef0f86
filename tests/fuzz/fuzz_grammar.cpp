// libFuzzer target for the grammar layer. The first input byte picks the parser: even, the rest
// is GBNF text (parse_gbnf); odd, the rest is a JSON Schema (json_schema_text_to_gbnf, then
// parse_gbnf, which must accept what the compiler writes unless a $ref cycle makes a rule
// left-recursive or endless). Any error must be a Result with a message, never a crash. A
// grammar that parses is walked through the matcher with choices taken from the input: every
// reachable state must allow some token (no dead ends), the walk's text must be a viable prefix
// by the Earley reference, and a finished JSON Schema output must parse as JSON. The schema's
// relaxed form (relax_json_schema) must be a fixed point of relaxing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/grammar_ref.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/matcher.h"

namespace {

std::shared_ptr<const rw::VocabTrie> vocab() {
  static const auto v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p :
         {"{\"", "\":", "\",", "}", "true", "null", "\n  ", "12", "ab", "é", "\xC3"})
      t.push_back(p);
    return std::make_shared<const rw::VocabTrie>(
        t, std::vector<int32_t>{static_cast<int32_t>(t.size())});
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool schema = data[0] & 1;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  rw::Result<rw::Grammar> g = rw::make_error("unset");
  if (schema) {
    // relax_json_schema (schemas not marked strict) is idempotent: what it leaves compiles as
    // far as the subset goes, so a second pass changes nothing.
    const auto parsed = nlohmann::ordered_json::parse(input, nullptr, false);
    if (!parsed.is_discarded()) {
      std::vector<std::string> notes, again;
      const auto relaxed = rw::relax_json_schema(parsed, &notes);
      if (rw::relax_json_schema(relaxed, &again) != relaxed || !again.empty()) std::abort();
      (void)rw::json_schema_to_gbnf(relaxed);  // a Result either way, never a crash
    }
    auto text = rw::json_schema_text_to_gbnf(input);
    if (!text.ok()) {
      if (text.error_message().empty()) std::abort();
      return 0;
    }
    g = rw::parse_gbnf(*text);
    if (!g.ok() && g.error_message().find("left-recursive") == std::string::npos &&
        g.error_message().find("derives no finite string") == std::string::npos)
      std::abort();  // the compiler wrote a grammar its own parser refuses
  } else {
    g = rw::parse_gbnf(input);
  }
  if (!g.ok()) {
    if (g.error_message().rfind("grammar", 0) != 0) std::abort();
    return 0;
  }
  auto grammar = std::make_shared<const rw::Grammar>(std::move(g).value());
  (void)grammar->to_string();
  rw::AutomatonLimits limits;
  limits.max_states = 2048;
  limits.max_stacks = 1 << 16;
  auto a = rw::GrammarAutomaton::create(grammar, vocab(), limits);
  if (!a.ok()) return 0;  // the initial state passed a limit: an error, fine
  rw::GrammarMatcher m(a.value());
  const auto& v = *vocab();
  rw::TokenMask mask(static_cast<size_t>(v.n_words()));
  std::string text;
  for (size_t step = 0; step < 48 && !m.is_ended(); ++step) {
    if (!m.allowed(mask.data()).ok()) return 0;  // an automaton limit: an error, fine
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < v.n_vocab(); ++id)
      if (rw::mask_test(mask.data(), id)) ids.push_back(id);
    if (ids.empty()) std::abort();  // a dead end
    const int32_t id = ids[(data[step % size] * 131u + step * 7u) % ids.size()];
    if (!m.accept(id).ok()) std::abort();
    if (!v.is_eos(id)) text += v.bytes(id);
  }
  if (text.size() <= 24 && !rw::earley_recognise(*grammar, text).viable) std::abort();
  if (schema && m.is_ended() && nlohmann::json::parse(text, nullptr, false).is_discarded())
    std::abort();
  return 0;
}
