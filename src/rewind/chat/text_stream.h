// Streaming splits of generated chat text, shared by the server (server/http_server.cpp) and
// `rewind chat` (apps/cmd_chat.cpp): stop-sequence matching on decoded text, and the split of a
// reply's reasoning block (<think> ... </think>) from its content. Pure value types, no I/O.
//
// Thread-safety: one object per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rw {

// Holds back streamed text that may still turn into a stop sequence, and cuts the text where
// one completes (the stop sequence itself is not returned). Matching is on bytes of the decoded
// text; the earliest match wins, the longest one on a tie. Cost: O(held bytes * stops) per push;
// at most max(stop length) - 1 bytes are ever held.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds text; returns what can no longer be part of a match. Once a stop sequence completes,
  // stopped() is true, the return value ends just before it, and the text after the match is
  // kept in rest(); later pushes return "" and add to rest().
  std::string push(std::string_view text);
  // Generation ended: returns the held-back text (empty after a match).
  std::string flush();
  bool stopped() const { return stopped_; }
  int matched_index() const { return matched_; }  // which stop sequence, -1 if none
  const std::string& rest() const { return rest_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string rest_;
  bool stopped_ = false;
  int matched_ = -1;
};

// Splits a reply's reasoning (Qwen3 style: between <think> and </think>) from its content,
// streaming: message.reasoning_content / delta.reasoning_content as the reasoning parsers of
// other OpenAI-compatible servers return it. The reply is reasoning when the prompt ended
// inside an open <think> block (the template's generation prompt opened it) or when the reply
// itself starts with <think> (after at most 16 characters of whitespace). The tags are dropped,
// and so are the whitespace that opens the reasoning and the newlines that follow </think> (an
// empty block, "<think>\n\n</think>\n\n", gives no reasoning at all). A partial tag is held
// back until it is decided; an unterminated block is all reasoning. Text with no tag at its
// start is all content, unchanged.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool prompt_opened_think = false);
  struct Out {
    std::string reasoning, content;
  };
  Out push(std::string_view text);
  Out finish();  // end of generation: whatever was held back
  // Where the next text goes: undecided (the reply's start is held back), or reasoning
  // (inside the block, its closing tag included).
  bool undecided() const { return state_ == State::Start; }
  bool in_reasoning() const { return state_ == State::Reasoning; }

 private:
  enum class State { Start, Reasoning, Content };
  State state_;
  std::string held_;                // Start: undecided prefix
  StopMatcher end_;                 // finds </think> in the reasoning
  bool strip_newlines_ = false;     // just after </think>
  bool reasoning_started_ = false;  // a non-space character of reasoning was emitted
  void to_content(std::string_view text, Out* o);
};

// True when a rendered chat prompt ends inside an open <think> block (after trailing spaces and
// newlines): the template's generation prompt opened the reasoning (Qwen3 with thinking on), so
// the reply starts as reasoning (ReasoningSplitter(true)).
bool prompt_opens_think(std::string_view rendered);

}  // namespace rw
