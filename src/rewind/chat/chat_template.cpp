// ChatTemplate (chat_template.h): loads a checkpoint's Jinja chat template, renders it with
// the variables Hugging Face passes (messages, tools, add_generation_prompt, enable_thinking,
// bos_token, eos_token), and finds where each message starts by tracing the template's loop
// over `messages` (jinja.h, RenderOptions::tracked).
//
// Message starts. The renderer records every `for` loop that wrote to the output and iterated
// elements of `messages` (by identity, so `messages[1:]` counts too). The last such loop whose
// elements came in increasing order and that wrote something (or, if none wrote anything, the
// last one in increasing order) is the rendering pass; message i
// starts where its iteration started. A message the pass did not visit starts where the next
// visited one starts (a system message that the template renders before the loop, or whose
// iteration writes nothing, starts at 0). system_end is the start of the first non-system
// message (if all are system messages: where the first one's rendering ends); npos when that
// is 0 (no system part). Templates that never loop over `messages` render normally with
// message_starts empty and system_end npos; so do (defensively) passes whose offsets are not
// monotonic.
#include "rewind/chat/chat_template.h"

#include <algorithm>
#include <cctype>

#include "rewind/base/file.h"
#include "rewind/chat/jinja.h"
#include "rewind/tokenizer/tokenizer.h"
#include "rewind/tokenizer/tokenizer_config.h"

namespace rw {

using ojson = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  jinja::Template tmpl;
  std::string bos, eos;
  bool mentions_think = false;
  bool reads_enable_thinking = false;
};

namespace {
// Whether `src` names enable_thinking as a variable: not an attribute (ns.enable_thinking) nor a
// keyword argument or assignment target (namespace(enable_thinking=true)), which
// Nemotron-Nano-v2's template has.
bool names_enable_thinking(const std::string& src) {
  constexpr std::string_view kName = "enable_thinking";
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = src.find(kName); at != std::string::npos; at = src.find(kName, at + 1)) {
    if (at > 0 && (word(src[at - 1]) || src[at - 1] == '.')) continue;
    size_t end = at + kName.size();
    if (end < src.size() && word(src[end])) continue;
    while (end < src.size() && (src[end] == ' ' || src[end] == '\t')) ++end;
    if (end < src.size() && src[end] == '=' && (end + 1 >= src.size() || src[end + 1] != '='))
      continue;
    return true;
  }
  return false;
}
}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

namespace {

ojson message_json(const ChatMessage& m) {
  ojson j = ojson::object();
  j["role"] = m.role;
  j["content"] = m.content;
  if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ToolCall& c : m.tool_calls) {
      auto parsed = parse_json_ordered(c.arguments_json);
      ojson args = parsed.ok() ? std::move(parsed).value()
                               : ojson(c.arguments_json);  // not JSON: the template sees the text
      ojson fn = ojson::object();
      fn["name"] = c.name;
      fn["arguments"] = std::move(args);
      ojson call = ojson::object();
      call["id"] = c.id;
      call["type"] = "function";
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    j["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.name.empty()) j["name"] = m.name;
  return j;
}

void find_message_starts(const std::vector<ChatMessage>& msgs,
                         const std::vector<jinja::LoopPass>& passes, RenderedChat* out) {
  constexpr size_t npos = std::string::npos;
  const size_t n = msgs.size();
  const jinja::LoopPass* pass = nullptr;   // the last increasing pass that wrote something
  const jinja::LoopPass* quiet = nullptr;  // the last increasing pass
  for (const auto& p : passes) {
    bool increasing = true;
    for (size_t i = 1; i < p.iterations.size(); ++i)
      if (p.iterations[i].index <= p.iterations[i - 1].index) increasing = false;
    if (!increasing) continue;
    quiet = &p;
    if (p.end > p.begin) pass = &p;
  }
  if (!pass) pass = quiet;  // e.g. only a system message, rendered before the loop
  if (!pass || n == 0) return;
  std::vector<size_t> start(n, npos), end(n, npos);
  for (const auto& it : pass->iterations) {
    if (it.index < 0 || static_cast<size_t>(it.index) >= n) return;
    start[static_cast<size_t>(it.index)] = it.begin;
    end[static_cast<size_t>(it.index)] = it.end;
  }
  if (msgs[0].role == "system" && (start[0] == npos || end[0] == start[0])) start[0] = 0;
  size_t next = pass->end;
  for (size_t i = n; i-- > 0;) {
    if (start[i] == npos)
      start[i] = next;
    else
      next = start[i];
  }
  for (size_t i = 0; i < n; ++i)
    if (start[i] > out->text.size() || (i > 0 && start[i] < start[i - 1])) return;
  size_t system_end = npos;
  for (size_t i = 0; i < n; ++i)
    if (msgs[i].role != "system") {
      system_end = start[i];
      break;
    }
  if (system_end == npos && msgs[0].role == "system")
    system_end = (end[0] != npos && end[0] > start[0]) ? end[0] : pass->end;
  out->message_starts = std::move(start);
  out->system_end = system_end == 0 ? npos : system_end;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_string(const std::string& source,
                                               const std::string& bos_token,
                                               const std::string& eos_token) {
  auto t = jinja::Template::parse(source);
  if (!t.ok()) return make_error("chat template: " + t.error_message());
  ChatTemplate ct;
  ct.impl_ = std::make_unique<Impl>();
  ct.impl_->tmpl = std::move(t).value();
  ct.impl_->bos = bos_token;
  ct.impl_->eos = eos_token;
  ct.impl_->mentions_think =
      source.find("<think>") != std::string::npos || source.find("</think>") != std::string::npos;
  ct.impl_->reads_enable_thinking = names_enable_thinking(source);
  return ct;
}

const std::string& ChatTemplate::bos_token() const {
  return impl_->bos;
}

const std::string& ChatTemplate::eos_token() const {
  return impl_->eos;
}

bool ChatTemplate::mentions_think() const {
  return impl_->mentions_think;
}

bool ChatTemplate::reads_enable_thinking() const {
  return impl_->reads_enable_thinking;
}

Result<std::string> chat_template_source(const std::string& dir, std::string* where_out) {
  REWIND_TRY(const nlohmann::json cfg, read_tokenizer_config(dir));
  const std::string cfg_path = dir + "/tokenizer_config.json";
  std::string source, where;
  const std::string jinja_path = dir + "/chat_template.jinja";
  bool missing = false;
  if (auto jinja = read_whole_file(jinja_path, &missing); jinja.ok()) {
    source = std::move(jinja).value();
    where = jinja_path;  // as in transformers, the separate file wins over the config entry
  } else if (!missing) {
    return jinja.error();
  } else if (auto it = cfg.find("chat_template"); it != cfg.end() && !it->is_null()) {
    where = cfg_path + " chat_template";
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      std::string names;
      bool found = false;
      for (const auto& e : *it) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) continue;
        const std::string name = e["name"].get<std::string>();
        names += (names.empty() ? "" : ", ") + name;
        if (name == "default" && e.contains("template") && e["template"].is_string()) {
          source = e["template"].get<std::string>();
          found = true;
        }
      }
      if (!found)
        return make_error(where + ": no template named \"default\" (found: " + names + ")");
    } else {
      return make_error(where + ": must be a string or a list of {name, template}");
    }
  }
  if (where_out) *where_out = where;
  return source;
}

Result<ChatTemplate> ChatTemplate::load_dir(const std::string& dir, const std::string* given,
                                            const std::string& given_where) {
  REWIND_TRY(const nlohmann::json cfg, read_tokenizer_config(dir));
  std::string source, where;
  if (given) {
    source = *given;
    where = given_where;
  } else {
    REWIND_TRY(source, chat_template_source(dir, &where));
    if (where.empty())
      return make_error("no chat template in " + dir +
                        " (no chat_template.jinja, no chat_template in tokenizer_config.json)");
  }
  auto t = from_string(source, special_token_text(cfg, "bos_token"),
                       special_token_text(cfg, "eos_token"));
  if (!t.ok()) return make_error(where + ": " + t.error_message());
  return t;
}

namespace {
// ChatRenderOptions::continue_final_message: the final message's text is rendered with this
// marker after it, and the prompt is cut where the marker is (so the cut can land neither in an
// earlier message holding the same words nor in the template's text after the reply).
constexpr std::string_view kContinueMark = "[[rewind:continue:7c1e]]";
}  // namespace

bool final_message_continuable(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return false;
  const ChatMessage& m = messages.back();
  return m.role == "assistant" && m.tool_calls.empty() &&
         m.content.find_first_not_of(" \t\r\n") != std::string::npos;
}

Result<RenderedChat> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                          const ChatRenderOptions& opt) const {
  ojson vars = ojson::object();
  ojson msgs = ojson::array();
  for (const ChatMessage& m : messages) msgs.push_back(message_json(m));
  if (opt.continue_final_message) {
    if (!final_message_continuable(messages))
      return make_error(
          "only a final assistant message with text and no tool calls can be continued");
    ChatMessage last = messages.back();
    last.content += kContinueMark;
    msgs.back() = message_json(last);
  }
  vars["messages"] = std::move(msgs);
  nlohmann::json more = nlohmann::json::object();
  if (!opt.tools_ordered.is_null()) {
    vars["tools"] = opt.tools_ordered;
  } else if (!opt.tools.is_null()) {
    more["tools"] = opt.tools;
  }
  vars["add_generation_prompt"] = opt.add_generation_prompt && !opt.continue_final_message;
  if (opt.enable_thinking >= 0) vars["enable_thinking"] = opt.enable_thinking != 0;
  vars["bos_token"] = impl_->bos;
  vars["eos_token"] = impl_->eos;

  std::vector<jinja::LoopPass> passes;
  jinja::RenderOptions ro;
  ro.limits = opt.limits;
  ro.now = opt.now;
  ro.tracked = "messages";
  ro.trace = &passes;
  auto text = impl_->tmpl.render(vars, more, ro);
  if (!text.ok()) return make_error("chat template: " + text.error_message());
  RenderedChat out;
  out.text = std::move(text).value();
  find_message_starts(messages, passes, &out);
  if (opt.continue_final_message) {
    const size_t at = out.text.find(kContinueMark);
    const size_t from = out.message_starts.empty() ? 0 : out.message_starts.back();
    if (at == std::string::npos || at < from ||
        out.text.find(kContinueMark, at + 1) != std::string::npos)
      return make_error(
          "chat template: it does not write the final assistant message's text once, as it is, "
          "so the message cannot be continued");
    out.text.resize(at);
    if (out.system_end != std::string::npos && out.system_end > at) out.system_end = at;
  }
  return out;
}

std::vector<int32_t> tokenize_chat(const Tokenizer& tok, const RenderedChat& chat,
                                   std::vector<int64_t>* boundaries, int64_t* anchor) {
  const std::string& text = chat.text;
  std::vector<size_t> cuts;
  for (size_t s : chat.message_starts)
    if (s > 0 && s < text.size()) cuts.push_back(s);
  const bool has_anchor =
      chat.system_end != std::string::npos && chat.system_end > 0 && chat.system_end <= text.size();
  if (has_anchor) cuts.push_back(chat.system_end);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  std::vector<int32_t> ids;
  std::vector<int64_t> at;  // token position of each cut
  size_t prev = 0;
  for (size_t c : cuts) {
    const auto part = tok.encode(std::string_view(text).substr(prev, c - prev));
    ids.insert(ids.end(), part.begin(), part.end());
    at.push_back(static_cast<int64_t>(ids.size()));
    prev = c;
  }
  const auto tail = tok.encode(std::string_view(text).substr(prev));
  ids.insert(ids.end(), tail.begin(), tail.end());

  const int64_t n = static_cast<int64_t>(ids.size());
  if (boundaries) {
    boundaries->clear();
    for (int64_t p : at)
      if (p > 0 && p < n && (boundaries->empty() || boundaries->back() < p))
        boundaries->push_back(p);
  }
  if (anchor) {
    *anchor = -1;
    if (has_anchor)
      for (size_t i = 0; i < cuts.size(); ++i)
        if (cuts[i] == chat.system_end) *anchor = at[i];
  }
  return ids;
}

}  // namespace rw
