// The input side of `rewind chat` (apps/cmd_chat.cpp), apart from the terminal so that
// tests/unit/chat_input_test.cpp can check every rule: how typed lines join into one input
// (a line ending in `\` continues; `"""` opens and closes a block, as llama.cpp and ollama
// users type them) and how an input is read as a slash command or a message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw::app {

// Joins typed lines into inputs. Outside a block, a line ending in `\` continues on the next
// line (the backslash becomes a newline); a line that starts with `"""` opens a block that ends
// at the first line ending in `"""` (the text between the quotes, newlines kept, is the input;
// `"""one line"""` is a block too). Inside a block a trailing backslash is just text.
class InputAssembler {
 public:
  // Adds one line (without its newline). True when an input is complete: take() returns it.
  bool push(const std::string& line);
  // Inside a continued line or an open block (the prompt shows that more is expected).
  bool pending() const { return state_ != State::Idle; }
  // The complete input; `*block` (may be null) tells whether it came from a """ block, which
  // is always a message, never a command.
  std::string take(bool* block = nullptr);
  // End of input while pending: what was typed so far counts as complete (an unterminated
  // block or a last line ending in `\` is still sent). False when nothing was pending.
  bool finish();
  // Drops a partial input (Ctrl-C at a continuation prompt).
  void reset();

 private:
  enum class State { Idle, Continued, Block };
  State state_ = State::Idle;
  std::vector<std::string> lines_;
  bool ready_ = false, block_ = false;
};

enum class ChatCommandKind {
  Message,  // text to send (also "//text", which sends "/text")
  Regen,    // /regen
  Edit,     // /edit N [TEXT]
  Undo,     // /undo
  System,   // /system [TEXT] (no text: clear)
  History,  // /history
  Stats,    // /stats
  Clear,    // /clear
  Save,     // /save FILE
  Load,     // /load FILE
  Help,     // /help, /?
  Quit,     // /quit, /exit, /bye
};

struct ChatCommand {
  ChatCommandKind kind = ChatCommandKind::Message;
  std::string text;  // the message; /edit's, /system's text, /save's and /load's file name
  int64_t n = 0;     // /edit's user message number (1-based)
};

// Reads one complete input. A first character other than '/' makes a message (taken as typed);
// otherwise the word up to the first space or newline names the command and the rest,
// trimmed, is its argument. Errors (one line, for the user): an unknown command (with "did you
// mean /x?" when one is close), an argument given to a command that takes none, /edit without
// a number or with a number that is not a positive integer.
Result<ChatCommand> parse_chat_input(const std::string& input);

// The /help text: every command with one line on what it does.
std::string chat_commands_help();

// A conversation as `/save` writes it and `/load` (and `--load`) reads it: the body of an OpenAI
// chat request, {"messages": [...]}, so a saved chat can be sent to `rewind serve` as it is.
struct SavedTurn {
  std::string user;
  std::string reply, reasoning;  // reasoning: the assistant's reasoning_content
  bool replied = false;          // false only for a last user message still to be answered
};
struct SavedConversation {
  std::string system;
  std::vector<SavedTurn> turns;
};

// Reads {"messages": [...]} (or a bare array of messages): an optional system message first,
// then user and assistant messages in turn, the last one a user message or an assistant reply.
// Content is a string or an array of {"type": "text"} parts. Errors name the message (its
// 1-based position) and what is wrong: not JSON, a role other than system / user / assistant
// (tool calls have no place in a terminal chat), two user or two assistant messages in a row,
// content that is not text.
Result<SavedConversation> parse_conversation(const std::string& json);
// The inverse: system first (when set), then each turn's user message and reply.
std::string conversation_json(const SavedConversation& c);

}  // namespace rw::app
