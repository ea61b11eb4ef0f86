#include "rewind/chat/text_stream.h"

#include <algorithm>

namespace rw {

// ---- StopMatcher ----

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) {
    rest_.append(text);
    return {};
  }
  if (stops_.empty()) return std::string(text);
  held_.append(text);
  // Earliest complete match (longest on a tie).
  size_t best = std::string::npos, best_len = 0;
  int best_i = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t p = held_.find(stops_[i]);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && stops_[i].size() > best_len)) {
      best = p;
      best_len = stops_[i].size();
      best_i = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    std::string out = held_.substr(0, best);
    rest_ = held_.substr(best + best_len);
    held_.clear();
    stopped_ = true;
    matched_ = best_i;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop sequence.
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t max_l = std::min(s.size() - 1, held_.size());
    for (size_t l = max_l; l > keep; --l) {
      if (held_.compare(held_.size() - l, l, s, 0, l) == 0) {
        keep = l;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

// ---- reasoning ----

namespace {
constexpr std::string_view kThinkOpen = "<think>";
// Whitespace a reply may open with before its <think>: past it the reply is content, so a reply
// of spaces and newlines streams instead of waiting for its first other character.
constexpr size_t kMaxSpaceBeforeThink = 16;
}  // namespace

ReasoningSplitter::ReasoningSplitter(bool prompt_opened_think)
    : state_(prompt_opened_think ? State::Reasoning : State::Start), end_({"</think>"}) {}

void ReasoningSplitter::to_content(std::string_view text, Out* o) {
  if (strip_newlines_) {
    size_t i = 0;
    while (i < text.size() && (text[i] == '\n' || text[i] == '\r')) ++i;
    text.remove_prefix(i);
    if (!text.empty()) strip_newlines_ = false;
  }
  o->content += text;
}

ReasoningSplitter::Out ReasoningSplitter::push(std::string_view text) {
  Out o;
  if (state_ == State::Start) {
    held_ += text;
    size_t i = 0;
    while (i < held_.size() &&
           (held_[i] == ' ' || held_[i] == '\n' || held_[i] == '\r' || held_[i] == '\t'))
      ++i;
    const std::string_view rest = std::string_view(held_).substr(i);
    if (rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest &&
        i <= kMaxSpaceBeforeThink)
      return o;  // undecided
    if (rest.substr(0, kThinkOpen.size()) == kThinkOpen && i <= kMaxSpaceBeforeThink) {
      state_ = State::Reasoning;
      const std::string after(rest.substr(kThinkOpen.size()));
      held_.clear();
      Out more = push(after);
      return more;
    }
    state_ = State::Content;
    o.content = std::move(held_);
    held_.clear();
    return o;
  }
  if (state_ == State::Reasoning) {
    o.reasoning = end_.push(text);
    if (!reasoning_started_) {  // whitespace before the first word of reasoning is dropped
      size_t i = 0;
      while (i < o.reasoning.size() && (o.reasoning[i] == '\n' || o.reasoning[i] == '\r' ||
                                        o.reasoning[i] == ' ' || o.reasoning[i] == '\t'))
        ++i;
      o.reasoning.erase(0, i);
      reasoning_started_ = !o.reasoning.empty();
    }
    if (end_.stopped()) {
      state_ = State::Content;
      strip_newlines_ = true;
      to_content(end_.rest(), &o);
    }
    return o;
  }
  to_content(text, &o);
  return o;
}

ReasoningSplitter::Out ReasoningSplitter::finish() {
  Out o;
  if (state_ == State::Start) o.content = std::move(held_);
  if (state_ == State::Reasoning) {
    o.reasoning = end_.flush();
    if (!reasoning_started_ && o.reasoning.find_first_not_of(" \t\r\n") == std::string::npos)
      o.reasoning.clear();
  }
  held_.clear();
  return o;
}

bool prompt_opens_think(std::string_view t) {
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
  return t.size() >= kThinkOpen.size() && t.substr(t.size() - kThinkOpen.size()) == kThinkOpen;
}

}  // namespace rw
