// The response side of the OpenAI schema: JSON bodies of chat and text completions (whole and
// streamed chunks), usage, logprobs, errors; the split of generated text into content and tool
// calls (stop sequences and reasoning blocks: chat/text_stream.h). Pure functions and small value
// types, no HTTP and no engine, so every rule is unit-testable
// (tests/unit/openai_request_test.cpp).
//
// JSON text is always produced with dump_json, which replaces invalid UTF-8 (a token's raw
// bytes can be a partial character) with U+FFFD instead of throwing.
//
// Thread-safety: the free functions are reentrant; ToolCallSplitter is a value type, one per
// stream.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/chat/chat_template.h"
#include "rewind/chat/text_stream.h"

namespace rw {

class Tokenizer;

// Serialises JSON compactly; invalid UTF-8 inside strings becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);

// {"error": {"message", "type", "code", "param": null}}. `code` may be empty (then null).
nlohmann::json error_json(const std::string& message, const std::string& type,
                          const std::string& code = "");

// An id with a prefix and 24 random hex digits ("chatcmpl-...", "cmpl-...", "call_...").
// Thread-safe.
std::string random_id(const std::string& prefix);

// rewind's own figures of a request, beside OpenAI's usage (clients ignore fields they do not
// know): how the prefix cache served the prompt and how long the reply took.
struct RewindUsage {
  int64_t rerun_tokens = 0;     // prompt tokens run (n - resumed_at)
  int64_t diverged_at = 0;      // L: the prompt's common prefix with the cache
  int64_t resumed_at = 0;       // p: the checkpoint the prompt resumed from (= cached tokens)
  int64_t lost_to_spacing = 0;  // min(L, n-1) - p: matched tokens run again for want of one
  int64_t tier_tokens = 0;      // of p, tokens read back from a tier (disk, Redis), not RAM
  std::string hit;              // miss, exact, extension, checkpoint
  double ttft_ms = 0;           // the request complete to its first generated token
  double decode_ms = 0;         // the first generated token to the last
};

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  std::optional<RewindUsage> rewind;  // set: usage.rewind
  // Chat replies whose reasoning is split off: the completion tokens that went to it (its tags
  // included), completion_tokens_details.reasoning_tokens as OpenAI reports them.
  std::optional<int64_t> reasoning_tokens;
};
// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}, "completion_tokens_details": {"reasoning_tokens"} when that is set, and
// when u.rewind is set "rewind": {"cached_tokens", "rerun_tokens",
// "diverged_at", "resumed_at", "lost_to_spacing", "tier_tokens", "hit", "ttft_ms", "decode_ms"}
nlohmann::json usage_json(const UsageCounts& u);

// One generated token with its log-probability and the alternatives asked for (best first).
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token","logprob","bytes"}]}]}
nlohmann::json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);
// Completions: {"tokens", "token_logprobs", "top_logprobs" ([{token: logprob}] or null when no
// alternatives were asked for), "text_offset"}; `offset0`: the characters that started before
// the first token. Offsets count characters (code points, as a client's string indexes them)
// from the completion's start, as vLLM's do without echo; a token that begins inside a
// character (byte-level tokens split them) gets that character's offset.
int64_t utf8_chars(std::string_view bytes);  // the characters that start in `bytes`
nlohmann::json completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                                        bool with_top, int64_t offset0);

// Streams assistant text while tool calls may appear: text before the first tool-call marker
// (tool_call_markers(): "<tool_call>", "<TOOLCALL>") is content (a partial marker is held back);
// from the marker on, everything is buffered and parsed at the end with parse_tool_calls. If that
// finds no call, the buffered text is content after all, so no generated text is ever lost.
class ToolCallSplitter {
 public:
  // `tools`: the request's tools (types the parsed arguments; see parse_tool_calls), or null.
  explicit ToolCallSplitter(nlohmann::json tools = nullptr);
  std::string push(std::string_view text);  // content to emit now
  // End of generation: the remaining content and the parsed calls (ids filled in).
  std::pair<std::string, std::vector<ToolCall>> finish();

 private:
  StopMatcher marker_;
  nlohmann::json tools_;
};

// Splits a whole reply: tool calls parsed out (ids filled in when the text gave none), and the
// remaining content. When `parse_tools` is false the text is all content. `tools` as above.
std::pair<std::string, std::vector<ToolCall>> split_tool_calls(
    const std::string& text, bool parse_tools, const nlohmann::json& tools = nullptr);

// A chat choice's finish_reason: "tool_calls" when the reply holds calls, unless max_tokens cut
// it ("length" stays: the reply may end in a call that was never finished).
std::string chat_finish_reason(const std::string& engine_finish, bool has_calls);

// message.tool_calls / delta.tool_calls entries:
// {"id","type":"function","function":{name,arguments}} (deltas also carry "index").
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// A whole chat completion ("object": "chat.completion"). `finish_reason` is "stop", "length"
// or "tool_calls"; content is null when empty and tool calls are present.
// message.reasoning_content is present only when `reasoning` is not empty.
nlohmann::json chat_completion_json(const std::string& id, int64_t created,
                                    const std::string& model, const std::string& content,
                                    const std::vector<ToolCall>& calls,
                                    const std::string& finish_reason,
                                    const nlohmann::json& logprobs, const UsageCounts& usage,
                                    const std::string& reasoning = "");
// One streamed chunk ("object": "chat.completion.chunk") with one choice, number `index` of
// the request's n; finish_reason and logprobs may be null.
nlohmann::json chat_chunk_json(const std::string& id, int64_t created, const std::string& model,
                               const nlohmann::json& delta, const nlohmann::json& finish_reason,
                               const nlohmann::json& logprobs, int index = 0);
// The last streamed chunk when stream_options.include_usage is set: no choices, the usage.
nlohmann::json chat_usage_chunk_json(const std::string& id, int64_t created,
                                     const std::string& model, const UsageCounts& usage);

// A whole text completion ("object": "text_completion").
nlohmann::json completion_json(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason,
                               const nlohmann::json& logprobs, const UsageCounts& usage);
// One streamed text-completion chunk (same object, one choice, number `index`, usage absent).
nlohmann::json completion_chunk_json(const std::string& id, int64_t created,
                                     const std::string& model, const std::string& text,
                                     const nlohmann::json& finish_reason,
                                     const nlohmann::json& logprobs, int index = 0);
// A whole answer of n choices from n one-choice answers (chat_completion_json or
// completion_json, each with the request's usage): the first's envelope and usage, with every
// answer's choice in order, "index" 0..n-1.
nlohmann::json merge_choices(std::vector<nlohmann::json> bodies);
nlohmann::json completion_usage_chunk_json(const std::string& id, int64_t created,
                                           const std::string& model, const UsageCounts& usage);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace rw
