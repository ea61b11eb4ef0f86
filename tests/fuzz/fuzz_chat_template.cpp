// libFuzzer target for chat templates: the input is parsed as a Jinja chat template (any error
// must be a Result, never a crash, hang or leak) and, when it parses, rendered for a fixed
// conversation (system, user, assistant with reasoning and tool calls, two tool results) with
// and without tools and thinking, under small limits; a rendering's message starts must be
// monotonic and inside the text, and tokenize_chat's boundaries ascending inside (0, n).
// The same bytes are also read as model output by parse_tool_calls, whose calls must carry a
// JSON object. Seeds: tests/fuzz/seeds/chat_template (the checkpoints' templates of
// tests/data/templates, and model output in each tool-call format). Build (clang):
// cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DREWIND_BUILD_FUZZ=ON
// -DREWIND_BUILD_TESTS=OFF && ninja -C build/fuzz fuzz_chat_template; run:
// build/fuzz/fuzz_chat_template -max_total_time=60 CORPUS_DIR tests/fuzz/seeds/chat_template
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rewind/chat/chat_template.h"
#include "rewind/tokenizer/tokenizer.h"

namespace {

const rw::Tokenizer& fixed_tokenizer() {
  static const rw::Tokenizer tok = [] {
    rw::BpeTrainOptions opt;
    opt.n_merges = 300;
    opt.special_tokens = {"<|endoftext|>", "<|im_start|>",    "<|im_end|>",
                          "<think>",       "</think>",        "<tool_call>",
                          "</tool_call>",  "<tool_response>", "</tool_response>"};
    auto t = rw::Tokenizer::from_json(
        rw::train_bpe_tokenizer_json(rw::builtin_training_text(), opt), "fuzz-trained");
    if (!t.ok()) std::abort();
    return std::move(t).value();
  }();
  return tok;
}

const std::vector<rw::ChatMessage>& conversation() {
  static const std::vector<rw::ChatMessage> m = [] {
    auto msg = [](const char* role, const char* content) {
      rw::ChatMessage x;
      x.role = role;
      x.content = content;
      return x;
    };
    rw::ChatMessage a = msg("assistant", "<think>\nhmm\n</think>\n\nLet me look.");
    rw::ToolCall c;
    c.id = "call_0";
    c.name = "get_weather";
    c.arguments_json = R"({"city": "Paris", "days": [1, 2], "x": null})";
    a.tool_calls = {c};
    rw::ChatMessage t1 = msg("tool", "sunny");
    t1.tool_call_id = "call_0";
    rw::ChatMessage last = msg("assistant", "Sunny.");
    last.reasoning_content = "easy";
    return std::vector<rw::ChatMessage>{
        msg("system", "Be brief."), msg("user", "Weather?"), a, t1, msg("tool", "warm"), last,
        msg("user", "Thanks")};
  }();
  return m;
}

void check_render(const rw::ChatTemplate& t, const rw::ChatRenderOptions& opt) {
  auto r = t.render(conversation(), opt);
  if (!r.ok()) return;
  const rw::RenderedChat& c = *r;
  if (!c.message_starts.empty() && c.message_starts.size() != conversation().size()) std::abort();
  for (size_t i = 0; i < c.message_starts.size(); ++i) {
    if (c.message_starts[i] > c.text.size()) std::abort();
    if (i > 0 && c.message_starts[i] < c.message_starts[i - 1]) std::abort();
  }
  if (c.system_end != std::string::npos && c.system_end > c.text.size()) std::abort();
  std::vector<int64_t> boundaries;
  int64_t anchor = 0;
  const auto ids = rw::tokenize_chat(fixed_tokenizer(), c, &boundaries, &anchor);
  const int64_t n = static_cast<int64_t>(ids.size());
  for (size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] <= 0 || boundaries[i] >= n) std::abort();
    if (i > 0 && boundaries[i] <= boundaries[i - 1]) std::abort();
  }
  if (anchor < -1 || anchor > n) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);

  auto t = rw::ChatTemplate::from_string(input, "<s>", "</s>");
  if (t.ok()) {
    rw::ChatRenderOptions opt;
    opt.limits.max_output_bytes = 64 << 10;
    opt.limits.max_total_bytes = 8 << 20;
    opt.limits.max_steps = 200'000;
    opt.limits.max_loop_iterations = 20'000;
    check_render(*t, opt);
    opt.enable_thinking = 0;
    opt.tools_ordered = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "get_weather", "parameters":
            {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    check_render(*t, opt);
  }

  std::string content;
  for (const rw::ToolCall& c : rw::parse_tool_calls(input, &content)) {
    const auto j = nlohmann::json::parse(c.arguments_json, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || c.name.empty() || c.id.empty()) std::abort();
  }
  return 0;
}
