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
  Help,     // /help, /?
  Quit,     // /quit, /exit, /bye
};

struct ChatCommand {
  ChatCommandKind kind = ChatCommandKind::Message;
  std::string text;  // the message; /edit's and /system's text ("" when none was given)
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

}  // namespace rw::app
