// Chat templates: renders a checkpoint's Jinja chat template (tokenizer_config.json
// `chat_template`, or chat_template.jinja) for OpenAI-style messages, and reports where each
// message starts so the engine can take checkpoints there (the anchor at the end of the system
// prompt, each message start, the prompt end). Also parses tool calls back out of generated text.
// The template language and the variables are those of Hugging Face transformers (jinja.h says
// which subset); the template sees `messages`, `tools` (only when given), `add_generation_prompt`,
// `enable_thinking` (only when set), `bos_token` and `eos_token`. A message is a dict with role,
// content, and when non-empty reasoning_content, tool_calls ([{id, type: "function",
// function: {name, arguments}}] with arguments a parsed JSON object, or the text when it is not
// JSON), tool_call_id and name.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/chat/jinja.h"

namespace rw {

class Tokenizer;

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments_json;  // a JSON object as text
};

struct ChatMessage {
  std::string role;     // system | user | assistant | tool
  std::string content;  // text only (images/video are refused before this point)
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::string tool_call_id;
  std::string name;
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  int enable_thinking = -1;        // -1: not passed to the template (its default), 0/1: false/true
  nlohmann::json tools = nullptr;  // array of OpenAI tool objects, or null
  // The same, keeping the client's key order (Hugging Face renders tools with their keys in
  // the order they were sent, and nlohmann::json sorts them). Used instead of `tools` when set.
  nlohmann::ordered_json tools_ordered = nullptr;
  // Bounds on one render (output and string size, memory, steps, loop iterations, nesting);
  // exceeding one is an error naming it. The defaults suit any real chat template.
  jinja::Limits limits;
  // strftime_now's clock (jinja::RenderOptions::now): the system's unless set.
  std::optional<std::tm> now;
  // The last message (an assistant's) is a reply to go on with, not a finished turn: rendered
  // without the generation prompt and cut right after that message's text (found by a marker
  // rendered after it; Hugging Face's continue_final_message). Errors: the last message is not
  // final_message_continuable, or the template does not write its text once as it is (the text
  // kept whole up to its end, so trailing spaces stay).
  bool continue_final_message = false;
};

// Whether the last message can be continued (ChatRenderOptions::continue_final_message): an
// assistant's, with text other than whitespace and no tool calls.
bool final_message_continuable(const std::vector<ChatMessage>& messages);

struct RenderedChat {
  std::string text;
  // Byte offsets into text where each message's rendering starts (one per message, ascending),
  // found by tracing the template's loop over `messages` (the last pass in message order that
  // wrote output; messages the loop renders elsewhere, such as a leading system message written
  // before it, start at 0 or where the next rendered message starts). Empty when the template
  // never loops over `messages`.
  std::vector<size_t> message_starts;
  // Where the system part ends: the start of the first non-system message (with only system
  // messages: where the first one's rendering ends). npos when that is 0 (no system part, not
  // even one the template adds itself, such as a tools prompt) or message_starts is empty.
  size_t system_end = std::string::npos;
};

// The chat template text of a checkpoint directory, where ChatTemplate::load_dir finds it:
// chat_template.jinja, else tokenizer_config.json `chat_template` (a string, or the "default"
// entry of a list of {name, template}); "" when there is neither. *where (may be null) names
// the file it came from. Errors: a malformed tokenizer_config.json or chat_template entry.
Result<std::string> chat_template_source(const std::string& dir, std::string* where = nullptr);

class ChatTemplate {
 public:
  // From a checkpoint directory: tokenizer_config.json `chat_template` (string, or list of
  // {name, template} where "default" is used) or chat_template.jinja. Error if neither, or if
  // the template does not parse (with line and column).
  // With `source` (not null): that template text, read from `where` (named in errors), with the
  // directory's special tokens (a template given in place of the checkpoint's).
  static Result<ChatTemplate> load_dir(const std::string& dir, const std::string* source = nullptr,
                                       const std::string& where = "");
  static Result<ChatTemplate> from_string(const std::string& source, const std::string& bos_token,
                                          const std::string& eos_token);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Renders; errors (one line, "chat template: line L, column C: ...") for templates that fail
  // at run time (raise_exception, undefined attributes, type errors, a limit). Thread-safe
  // (a ChatTemplate is immutable). Cost: about linear in the text (a 200-message, 400 KB chat
  // takes ~2 ms with the Qwen3.5 template).
  Result<RenderedChat> render(const std::vector<ChatMessage>& messages,
                              const ChatRenderOptions& opt) const;
  // Whether the template's source mentions <think> or </think> (DeepSeek-R1's strips earlier
  // replies' reasoning and leaves <think> to the model): a template that does neither has no
  // reasoning blocks, so a reply's start need not be held back to look for one.
  bool mentions_think() const;
  // Whether the template's source names enable_thinking: one that does not (Nemotron-Nano-v2's
  // reads /think or /no_think in the system prompt instead) renders the same either way.
  bool reads_enable_thinking() const;
  // The bos_token / eos_token texts the template renders with ("" when the model names none).
  const std::string& bos_token() const;
  const std::string& eos_token() const;

 private:
  ChatTemplate();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Tokenizes a rendered chat so that the message starts become exact token positions: the text
// is encoded segment by segment, cut at every message start and at system_end (with ChatML the
// cuts sit next to special tokens such as <|im_start|>, so the ids equal encoding the whole
// text; with templates that cut inside plain text they may differ from it). Returns the ids and,
// in *boundaries, the token positions of every cut strictly inside (0, n), ascending, without
// duplicates; *anchor gets the token position of system_end (n when it is the end of the text),
// or -1 when there is none. Either pointer may be null.
std::vector<int32_t> tokenize_chat(const Tokenizer& tok, const RenderedChat& chat,
                                   std::vector<int64_t>* boundaries, int64_t* anchor);

// Parses tool calls out of generated assistant text, in each model family's format:
// <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// (Qwen3.5 XML, also Nemotron-3), <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
// (Qwen3 and Granite-4.0 JSON) and <TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL>
// (Nemotron-Nano-v2 JSON list). Returns the text with the tool-call blocks removed (trimmed) in
// *content; calls get ids call_0, call_1, ... in order (the server replaces them with random ids).
std::vector<ToolCall> parse_tool_calls(const std::string& text, std::string* content);
// The same, typed by the request's OpenAI tools array: an XML parameter whose schema type is
// "string" keeps its text as a JSON string even when it would parse as JSON (e.g. "42").
std::vector<ToolCall> parse_tool_calls(const std::string& text, std::string* content,
                                       const nlohmann::json& tools);
// The opening tags of the formats parse_tool_calls reads ("<tool_call>", "<TOOLCALL>"): where a
// streamed reply may start holding text back for tool calls.
std::vector<std::string> tool_call_markers();

// Parses JSON text keeping the key order of objects, in linear time (nlohmann's
// ordered_json::parse is quadratic in the number of keys of an object). A repeated key keeps
// its first position and its last value, as in Python. Nesting deeper than 256 is an error.
// Used for tool-call arguments; also suits request bodies whose key order matters (tools).
Result<nlohmann::ordered_json> parse_json_ordered(std::string_view text);

// A ChatML template in the format of the Qwen3.5 family (system, user, assistant with reasoning
// blocks, tools in the system prompt, XML tool calls, tool responses merged into a user turn,
// enable_thinking), written for rewind's own models (make-model, the trained default model).
const char* rewind_chatml_template();

}  // namespace rw
