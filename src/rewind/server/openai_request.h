// Parsers for the bodies of OpenAI-compatible requests (POST /v1/chat/completions and
// /v1/completions). They turn untrusted JSON text into plain structs, or an Error whose one-line
// message becomes the 400 response: malformed JSON, wrong types, missing fields, values out of
// range, and features rewind does not serve (image/audio/video content parts, echo, suffix,
// best_of; JSON Schema keywords outside the structured-outputs subset of grammar/json_schema.h).
// Nothing is clamped or dropped silently: a field that rewind knows is either honoured or
// refused. An integer field takes an integer written as a float (3.0, 1e3), never a fraction.
// Unknown top-level fields (OpenAI clients send new ones often, e.g. `user`, `store`,
// `metadata`) are ignored and listed in the request's `ignored_fields`, which the server
// returns in the answer's X-Rewind-Ignored-Fields header; the same rule holds on every
// endpoint with a JSON body (/v1/chat/completions, /v1/completions, /tokenize, /detokenize).
// JSON null counts as an absent optional field. Extensions beyond OpenAI's schema: top_k, min_p,
// repetition_penalty (or repeat_penalty) and repeat_last_n (llama.cpp's), ignore_eos (as vLLM),
// speculative, chat_template_kwargs.enable_thinking, grammar (GBNF, as llama.cpp) and a top-level
// json_schema (llama.cpp's; both endpoints); top-level
// and `developer` role names follow OpenAI (developer is rendered as system).
//
// The parsers are pure functions of (body, limits): no model, no tokenizer, no engine. That
// keeps them cheap to fuzz (tests/fuzz/fuzz_openai_request.cpp) and guarantees that a bad request
// changes nothing anywhere. Checks that need the tokenizer (the prompt's token count against the
// context size) happen in the server after parsing.
//
// Thread-safety: reentrant. Cost: linear in the body size.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/chat/chat_template.h"

namespace rw {

// What a request may ask for. Defaults are the server's (see `rewind serve --help`).
struct Limits {
  int64_t ctx_size = 32768;       // prompt + max_tokens must fit (checked by the server)
  int64_t max_tokens = 0;         // the most a request's max_tokens may be; 0: ctx_size
  int64_t vocab_size = 0;         // token-id prompts must be in [0, vocab_size); 0: unchecked
  int32_t max_stop = 4;           // stop sequences per request (OpenAI: 4)
  size_t max_stop_bytes = 1024;   // bytes of one stop sequence
  int32_t max_top_logprobs = 20;  // chat top_logprobs / completions logprobs upper bound
  static constexpr int32_t kMaxChoices = 8;  // n: at most this (the engine's Request too)
  int32_t max_choices = kMaxChoices;         // and at most the server's --parallel
  size_t max_messages = 65536;               // messages per chat request
  int max_json_depth = 64;                   // nesting depth of the request JSON
};

// The parsed tree of a request body is bounded by its size: at most 1024 + bytes / 4 values
// and 64 + bytes / 24 objects and arrays (checked on the text before parsing), so a body of b
// bytes parses into at most about kJsonTreeFactor x b bytes (a body of empty objects, "[{},{},
// ...]", would otherwise take some 20 times its size). Ordinary requests, token-id prompts
// included, are far from both limits.
inline constexpr int64_t kJsonTreeFactor = 12;

// Sampling fields as the client sent them; unset ones take the model's defaults
// (generation_config.json) in the server.
struct SamplingOverrides {
  std::optional<double> temperature;  // [0, 2]
  std::optional<double> top_p;        // [0, 1]
  std::optional<int32_t> top_k;       // >= 0 (0: off); -1 is accepted as "off" (vLLM)
  std::optional<double> min_p;        // [0, 1]
  std::optional<uint64_t> seed;       // any integer (negative values wrap to uint64)
  // Logit adjustments (sample/logit_adjust.h): OpenAI's penalties in [-2, 2] over the generated
  // tokens, llama.cpp's repetition penalty in (0, 10] over the last repeat_last_n tokens
  // (>= -1; -1: the whole sequence), OpenAI's logit_bias {"token id": bias in [-100, 100]}
  // with ids below Limits::vocab_size.
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> repetition_penalty;
  std::optional<int32_t> repeat_last_n;
  std::vector<std::pair<int32_t, float>> logit_bias;  // in the client's order, ids unique
};

// Fields the two endpoints share.
struct CommonRequest {
  std::string model;  // routes to a served model; checked when names are set (http_server.h)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (stream only)
  // max_tokens, max_completion_tokens or llama.cpp's n_predict (-1 there: unset); >= 1.
  std::optional<int32_t> max_tokens;
  SamplingOverrides sampling;
  std::vector<std::string> stop;  // non-empty strings, at most Limits::max_stop
  bool logprobs = false;          // report the chosen tokens' log-probabilities
  int32_t top_logprobs = 0;       // alternatives per token
  bool ignore_eos = false;        // extension (as vLLM): generate through end-of-sequence ids
  // Extension: "speculative": "off" | "ngram" | "draft" | "mtp", or {"method": one of those,
  // "k": 1..16}. Empty: the server's default (--spec).
  std::string speculative;
  int32_t speculative_k = 0;  // 0: the server's --draft-k
  // Choices (1..8): the prompt runs once, choice i samples with seed + i (engine/request.h).
  int32_t n = 1;
  // Top-level fields not known to this endpoint, in the client's order: ignored.
  std::vector<std::string> ignored_fields;
  // Structured output: GBNF text from response_format (json_object, json_schema: compiled
  // here, so a refused schema keyword is a parse error naming it) or from the `grammar`
  // extension (llama.cpp's GBNF, parsed by the server); empty: unconstrained. grammar_from
  // names the field it came from.
  std::string grammar;
  std::string grammar_from;
  // Where a json_schema not marked strict was relaxed to compile (relax_json_schema).
  std::vector<std::string> schema_relaxed;
};

struct ParsedChatRequest : CommonRequest {
  std::vector<ChatMessage> messages;  // at least one; text content only
  // Array of {type:"function", function:{name,...}} or null, keys in the client's order.
  nlohmann::ordered_json tools = nullptr;
  bool parse_tools = false;  // tools given and tool_choice is not "none"
  // tool_choice "required" or naming a function (tool_choice_name): the reply is constrained
  // to tool calls of the declared functions, arguments by their parameter schemas.
  bool tool_required = false;
  std::string tool_choice_name;
  bool parallel_tool_calls = true;
  int enable_thinking = -1;  // chat_template_kwargs.enable_thinking: -1 absent, 0/1
  // llama-server's reasoning_format: "none" leaves a <think> block in the content (0),
  // "deepseek" / "auto" split it into reasoning_content (1); -1 absent (the server's).
  int split_reasoning = -1;
};

// llama-server's reasoning formats: "none" (false), "deepseek" and "auto" (true); false when
// the name is none of them.
bool parse_reasoning_format(const std::string& name, bool* split);

// One prompt of a completion request: text (to be tokenized, special tokens recognised) or
// token ids.
struct CompletionPrompt {
  bool tokens = false;
  std::string text;
  std::vector<int32_t> ids;
};

struct ParsedCompletionRequest : CommonRequest {
  // "prompt": a string or an array of token ids (one prompt), or an array of strings and
  // arrays of token ids (a batch: one answer, `n` choices per prompt, prompt i's choice c at
  // index i * n + c, as OpenAI's). At most kMaxBatchPrompts.
  static constexpr size_t kMaxBatchPrompts = 64;
  std::vector<CompletionPrompt> prompts;
  bool echo = false;  // each choice's text starts with its prompt (not with logprobs)
};

// POST /tokenize (llama.cpp's shape): {"content": text, "add_special": bool, "parse_special":
// bool, "with_pieces": bool}. add_special (false by default, as llama.cpp's) adds the tokens the
// model's tokenizer puts around a completion prompt (a BOS for some), so that with it the ids
// are what /v1/completions runs for the same text.
struct TokenizeRequest {
  std::string model;  // which served model's tokenizer ("" : the first); as a chat request's
  std::string content;
  bool add_special = false;
  bool parse_special = true;  // recognise special tokens written in the text
  bool with_pieces = false;   // [{"id", "piece"}] instead of ids
  std::vector<std::string> ignored_fields;
};

// POST /detokenize: {"tokens": [ids below Limits::vocab_size]}, at most Limits::ctx_size of
// them. (The server refuses a /tokenize text of more than ctx_size tokens the same way: the
// answers stay bounded like a prompt's.)
struct DetokenizeRequest {
  std::string model;  // as TokenizeRequest::model
  std::vector<int32_t> tokens;
  std::vector<std::string> ignored_fields;
};

// Errors name the field (`messages[2].content[0].type`), e.g.
//   "messages[0].content[1]: content part type 'image_url' is not supported (rewind serves
//    text-only models)".
Result<ParsedChatRequest> parse_chat_request(std::string_view body, const Limits& limits);
Result<ParsedCompletionRequest> parse_completion_request(std::string_view body,
                                                         const Limits& limits);
Result<TokenizeRequest> parse_tokenize_request(std::string_view body, const Limits& limits);
Result<DetokenizeRequest> parse_detokenize_request(std::string_view body, const Limits& limits);

// The top-level "model" string of a JSON body, read without building the tree, so the server
// can pick the model (and its Limits) before the full parse: "" when the body has none, when it
// is not a string, or when the body is not JSON (the full parse then reports it). The last of
// repeated "model" keys counts, as in the full parse.
std::string peek_model_name(std::string_view body);

// RFC 3986 percent-decoding of one URL component; with plus_is_space (query strings) '+' is a
// space. Errors: a '%' not followed by two hex digits.
Result<std::string> percent_decode(std::string_view s, bool plus_is_space);

// A GET route's query string (after '?', may be empty) split into its `model` parameter
// (percent-decoded; "+" is a space) and the other parameters, unchanged and in their order.
// Errors: `model` repeated or empty, a bad percent escape, a name over 256 bytes.
struct ModelQuery {
  std::optional<std::string> model;
  std::string rest;
};
Result<ModelQuery> split_model_query(std::string_view query);

}  // namespace rw
