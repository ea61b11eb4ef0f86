// libFuzzer target for the server's request parsers (src/rewind/server/openai_request.h: chat,
// completions, /tokenize, /detokenize): any
// bytes must give a parsed request or an Error, never a crash, a hang or a sanitizer report; an
// accepted request must satisfy the limits it was parsed under.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rewind/server/openai_request.h"

namespace {

void check_common(const rw::CommonRequest& c, const rw::Limits& lim) {
  if (static_cast<int64_t>(c.stop.size()) > lim.max_stop) std::abort();
  for (const auto& s : c.stop)
    if (s.empty() || s.size() > lim.max_stop_bytes) std::abort();
  if (c.max_tokens && (*c.max_tokens < 1 || *c.max_tokens > lim.ctx_size)) std::abort();
  if (c.top_logprobs < 0 || c.top_logprobs > lim.max_top_logprobs) std::abort();
  if (c.include_usage && !c.stream) std::abort();
  const auto& s = c.sampling;
  if (s.temperature && !(*s.temperature >= 0 && *s.temperature <= 2)) std::abort();
  if (s.top_p && !(*s.top_p > 0 && *s.top_p <= 1)) std::abort();
  if (s.min_p && !(*s.min_p >= 0 && *s.min_p <= 1)) std::abort();
  if (s.top_k && *s.top_k < 0) std::abort();
  if (c.n < 1 || c.n > 8) std::abort();
  if (s.presence_penalty && !(*s.presence_penalty >= -2 && *s.presence_penalty <= 2)) std::abort();
  if (s.frequency_penalty && !(*s.frequency_penalty >= -2 && *s.frequency_penalty <= 2))
    std::abort();
  if (s.repetition_penalty && !(*s.repetition_penalty > 0 && *s.repetition_penalty <= 10))
    std::abort();
  if (s.repeat_last_n && *s.repeat_last_n < -1) std::abort();
  for (const auto& [t, b] : s.logit_bias)
    if (t < 0 || t >= lim.vocab_size || !(b >= -100 && b <= 100)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  rw::Limits lim;
  lim.ctx_size = 4096;
  lim.vocab_size = 1000;
  auto chat = rw::parse_chat_request(body, lim);
  if (chat.ok()) {
    check_common(chat.value(), lim);
    if (chat->messages.empty() || chat->messages.size() > lim.max_messages) std::abort();
    for (const auto& m : chat->messages)
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
        std::abort();
    if (chat->parse_tools && !chat->tools.is_array()) std::abort();
  } else if (chat.error_message().empty()) {
    std::abort();
  }
  auto comp = rw::parse_completion_request(body, lim);
  if (comp.ok()) {
    check_common(comp.value(), lim);
    if (comp->prompts.empty() ||
        comp->prompts.size() > rw::ParsedCompletionRequest::kMaxBatchPrompts)
      std::abort();
    for (const rw::CompletionPrompt& p : comp->prompts) {
      if (p.tokens) {
        if (p.ids.empty()) std::abort();
        for (int32_t t : p.ids)
          if (t < 0 || t >= lim.vocab_size) std::abort();
      } else if (p.text.empty()) {
        std::abort();
      }
    }
  } else if (comp.error_message().empty()) {
    std::abort();
  }
  // The model name read ahead of the full parse: what the full parse reads when it accepts.
  const std::string peeked = rw::peek_model_name(body);
  if (chat.ok() && chat->model != peeked) std::abort();
  (void)rw::split_model_query(body);
  // Percent-decoding never grows a text, and a text without '%' (or '+', as a path) is itself.
  for (bool plus : {false, true}) {
    auto dec = rw::percent_decode(body, plus);
    if (dec.ok() && dec->size() > body.size()) std::abort();
    if (!dec.ok() && dec.error_message().empty()) std::abort();
    if (body.find('%') == std::string::npos && !plus && (!dec.ok() || *dec != body)) std::abort();
  }
  auto tk = rw::parse_tokenize_request(body, lim);
  if (!tk.ok() && tk.error_message().empty()) std::abort();
  auto dt = rw::parse_detokenize_request(body, lim);
  if (dt.ok()) {
    for (int32_t t : dt->tokens)
      if (t < 0 || t >= lim.vocab_size) std::abort();
  } else if (dt.error_message().empty()) {
    std::abort();
  }
  return 0;
}
