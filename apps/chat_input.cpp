#include "chat_input.h"

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "args.h"

namespace rw::app {

namespace {

constexpr std::string_view kQuotes = "\"\"\"";

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::string trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return std::string(s);
}

struct CommandName {
  const char* name;
  ChatCommandKind kind;
  bool takes_text;  // an argument is allowed
  const char* help;
};

constexpr CommandName kCommands[] = {
    {"/regen", ChatCommandKind::Regen, false, "regenerate the last reply"},
    {"/edit", ChatCommandKind::Edit, true,
     "N [TEXT]: replace user message N (see /history) and regenerate from there; later turns "
     "are dropped. Without TEXT the next input is the new message (a command cancels)"},
    {"/undo", ChatCommandKind::Undo, false, "drop the last exchange (your message and the reply)"},
    {"/system", ChatCommandKind::System, true,
     "[TEXT]: set the system prompt (no TEXT: remove it); used from the next message on"},
    {"/history", ChatCommandKind::History, false, "list the conversation, user messages numbered"},
    {"/stats", ChatCommandKind::Stats, false,
     "per reply: prompt, cached and re-run tokens, prefill and decode tok/s, time to first token"},
    {"/clear", ChatCommandKind::Clear, false, "start a new conversation (the system prompt stays)"},
    {"/save", ChatCommandKind::Save, true,
     "FILE: write the conversation as an OpenAI request body ({\"messages\": [...]})"},
    {"/load", ChatCommandKind::Load, true,
     "FILE: replace the conversation with a saved one (a last user message is answered)"},
    {"/help", ChatCommandKind::Help, false, "this list"},
    {"/?", ChatCommandKind::Help, false, ""},
    {"/quit", ChatCommandKind::Quit, false, "leave (also /exit, /bye, Ctrl-D)"},
    {"/exit", ChatCommandKind::Quit, false, ""},
    {"/bye", ChatCommandKind::Quit, false, ""},
};

}  // namespace

bool InputAssembler::push(const std::string& line) {
  if (ready_) reset();
  switch (state_) {
    case State::Idle:
    case State::Continued:
      if (state_ == State::Idle && line.compare(0, kQuotes.size(), kQuotes) == 0) {
        const std::string rest = line.substr(kQuotes.size());
        if (ends_with(rest, kQuotes)) {  // """one line"""
          lines_.push_back(rest.substr(0, rest.size() - kQuotes.size()));
          block_ = ready_ = true;
          return true;
        }
        state_ = State::Block;
        block_ = true;
        if (!rest.empty()) lines_.push_back(rest);
        return false;
      }
      if (ends_with(line, "\\")) {
        lines_.push_back(line.substr(0, line.size() - 1));
        state_ = State::Continued;
        return false;
      }
      lines_.push_back(line);
      state_ = State::Idle;
      ready_ = true;
      return true;
    case State::Block:
      if (ends_with(line, kQuotes)) {
        const std::string last = line.substr(0, line.size() - kQuotes.size());
        if (!last.empty()) lines_.push_back(last);
        state_ = State::Idle;
        ready_ = true;
        return true;
      }
      lines_.push_back(line);
      return false;
  }
  return false;
}

std::string InputAssembler::take(bool* block) {
  std::string out;
  for (size_t i = 0; i < lines_.size(); ++i) out += (i ? "\n" : "") + lines_[i];
  if (block) *block = block_;
  reset();
  return out;
}

bool InputAssembler::finish() {
  if (state_ == State::Idle) return false;
  state_ = State::Idle;
  ready_ = true;
  return true;
}

void InputAssembler::reset() {
  state_ = State::Idle;
  lines_.clear();
  ready_ = block_ = false;
}

Result<ChatCommand> parse_chat_input(const std::string& input) {
  ChatCommand c;
  if (input.empty() || input[0] != '/') {
    c.text = input;
    return c;
  }
  if (input.size() > 1 && input[1] == '/') {  // "//text" sends "/text"
    c.text = input.substr(1);
    return c;
  }
  const size_t end = input.find_first_of(" \t\r\n");
  const std::string name = input.substr(0, end);
  const std::string arg = end == std::string::npos ? "" : trim(input.substr(end));
  const CommandName* cmd = nullptr;
  for (const CommandName& k : kCommands)
    if (name == k.name) cmd = &k;
  if (!cmd) {
    std::vector<std::string> names;
    for (const CommandName& k : kCommands)
      if (k.help[0]) names.push_back(k.name);
    const std::string hint = did_you_mean(name, names);
    return make_error("unknown command '" + name + "'" +
                      (hint.empty() ? "" : "; did you mean " + hint + "?") +
                      " (/help lists the commands; //text sends a message that starts with /)");
  }
  c.kind = cmd->kind;
  if (!cmd->takes_text && !arg.empty()) return make_error(name + " takes no argument");
  if (c.kind == ChatCommandKind::Edit) {
    if (arg.empty()) return make_error("/edit needs a user message number (see /history)");
    const size_t sp = arg.find_first_of(" \t\r\n");
    const std::string num = arg.substr(0, sp);
    errno = 0;
    char* e = nullptr;
    const long long v = std::strtoll(num.c_str(), &e, 10);
    if (num[0] == '-' || num[0] == '+' || errno || *e || v < 1)
      return make_error("/edit: '" + num + "' is not a user message number (see /history)");
    c.n = v;
    c.text = sp == std::string::npos ? "" : trim(arg.substr(sp));
    return c;
  }
  if ((c.kind == ChatCommandKind::Save || c.kind == ChatCommandKind::Load) && arg.empty())
    return make_error(name + " needs a file name");
  c.text = arg;
  return c;
}

namespace {

// A message's text: a string, or an array's {"type": "text"} parts joined by newlines (as the
// server joins them).
Result<std::string> message_text(const nlohmann::json& m, size_t pos) {
  const std::string where = "message " + std::to_string(pos);
  if (!m.contains("content") || m["content"].is_null()) return std::string();
  const nlohmann::json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return make_error(where + ": content must be a string or an array of parts");
  std::string out;
  for (const auto& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return make_error(where +
                        ": only text parts ({\"type\": \"text\", \"text\": ...}) "
                        "can be read");
    if (!out.empty()) out += '\n';
    out += part["text"].get<std::string>();
  }
  return out;
}

}  // namespace

Result<SavedConversation> parse_conversation(const std::string& json) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded()) return make_error("not JSON");
  if (doc.is_object()) {
    if (!doc.contains("messages")) return make_error("no \"messages\" array");
    doc = doc["messages"];
  }
  if (!doc.is_array()) return make_error("\"messages\" must be an array");
  SavedConversation out;
  size_t pos = 0;
  for (const auto& m : doc) {
    ++pos;
    const std::string where = "message " + std::to_string(pos);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return make_error(where + ": an object with a \"role\" is expected");
    const std::string role = m["role"].get<std::string>();
    auto text = message_text(m, pos);
    if (!text.ok()) return text.error();
    if (role == "system" || role == "developer") {
      if (pos != 1) return make_error(where + ": a system message can only come first");
      out.system = text.value();
    } else if (role == "user") {
      if (!out.turns.empty() && !out.turns.back().replied)
        return make_error(where + ": two user messages in a row");
      out.turns.push_back({text.value(), "", "", false});
    } else if (role == "assistant") {
      if (out.turns.empty() || out.turns.back().replied)
        return make_error(where + ": an assistant message must answer a user message");
      if (m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].empty())
        return make_error(where + ": tool calls cannot be loaded into a terminal chat");
      SavedTurn& t = out.turns.back();
      t.reply = text.value();
      if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
        t.reasoning = m["reasoning_content"].get<std::string>();
      t.replied = true;
    } else {
      return make_error(where + ": role '" + role +
                        "' cannot be loaded (only system, user and assistant)");
    }
  }
  return out;
}

std::string conversation_json(const SavedConversation& c) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  if (!c.system.empty()) msgs.push_back({{"role", "system"}, {"content", c.system}});
  for (const SavedTurn& t : c.turns) {
    msgs.push_back({{"role", "user"}, {"content", t.user}});
    if (!t.replied) continue;
    nlohmann::ordered_json a = {{"role", "assistant"}, {"content", t.reply}};
    if (!t.reasoning.empty()) a["reasoning_content"] = t.reasoning;
    msgs.push_back(std::move(a));
  }
  nlohmann::ordered_json doc = {{"messages", std::move(msgs)}};
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string chat_commands_help() {
  std::string out = "commands:\n";
  for (const CommandName& k : kCommands) {
    if (!k.help[0]) continue;
    std::string n = k.name;
    n.resize(10, ' ');
    out += "  " + n + k.help + "\n";
  }
  out +=
      "input: a line ending in \\ continues on the next line; \"\"\" opens and closes a block of "
      "lines.\n"
      "Ctrl-C stops a reply (the part shown is kept); at the prompt, Ctrl-C twice or Ctrl-D "
      "leaves.\n";
  return out;
}

}  // namespace rw::app
