// chat/text_stream.h: stop-sequence matching on streamed text and the split of a reply's
// reasoning block from its content, whatever the pieces the text arrives in.
#include "rewind/chat/text_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace rw {
namespace {

// ---- StopMatcher ------------------------------------------------------------------------------

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, HoldsBackPartialMatchesAndCutsAcrossPushes) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("hello E"), "hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("D tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched_index(), 0);
  EXPECT_EQ(m.rest(), " tail");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("xEN"), "x");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_EQ(m.push("E"), "");
  EXPECT_EQ(m.flush(), "E");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestMatchWinsThenLongest) {
  StopMatcher m({"cd", "bcd", "b"});
  EXPECT_EQ(m.push("abcde"), "a");
  EXPECT_EQ(m.matched_index(), 1);  // "bcd" and "b" both start at 1; the longer wins
  StopMatcher m2({"xyz", "a"});
  EXPECT_EQ(m2.push("123a xyz"), "123");
  EXPECT_EQ(m2.matched_index(), 1);
}

TEST(StopMatcher, MatchInsideOnePush) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("line\n\nnext"), "line");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultibyteStops) {
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(m.push("un \xC3\xA9"), "un ");
  EXPECT_EQ(m.push("t"), "");
  EXPECT_EQ(m.push("\xC3\xA9!"), "");
  EXPECT_TRUE(m.stopped());
}

// ---- ReasoningSplitter ------------------------------------------------------------------------

// Feeds `text` in pieces of `step` bytes; returns {reasoning, content}.
std::pair<std::string, std::string> split_reasoning(const std::string& text, size_t step,
                                                    bool opened) {
  ReasoningSplitter s(opened);
  std::string r, c;
  for (size_t i = 0; i < text.size(); i += step) {
    auto o = s.push(std::string_view(text).substr(i, step));
    r += o.reasoning;
    c += o.content;
  }
  auto o = s.finish();
  return {r + o.reasoning, c + o.content};
}

TEST(ReasoningSplitter, SplitsThinkBlocksWhateverThePieceSize) {
  for (size_t step : {1, 2, 3, 5, 7, 100}) {
    EXPECT_EQ(split_reasoning("<think>\nLet me see.\n</think>\n\nThe answer is 4.", step, false),
              std::make_pair(std::string("Let me see.\n"), std::string("The answer is 4.")))
        << step;
    // The generation prompt opened the block: the reply starts inside it.
    EXPECT_EQ(split_reasoning("Thinking...</think>\n\nDone <think> stays", step, true),
              std::make_pair(std::string("Thinking..."), std::string("Done <think> stays")))
        << step;
    // No tag at the start: all content, unchanged (a tag later is just text).
    EXPECT_EQ(split_reasoning("Hello <think>x</think>", step, false),
              std::make_pair(std::string(""), std::string("Hello <think>x</think>")))
        << step;
    // A prefix of the tag that turns out not to be one is content after all.
    EXPECT_EQ(split_reasoning("<thin ice", step, false),
              std::make_pair(std::string(""), std::string("<thin ice")))
        << step;
    // Unterminated: everything is reasoning; a partial end tag is given back at the end.
    EXPECT_EQ(split_reasoning("<think>still going </thi", step, false),
              std::make_pair(std::string("still going </thi"), std::string("")))
        << step;
    // An empty block (what a template writes when thinking is off) is no reasoning at all.
    EXPECT_EQ(split_reasoning("<think>\n\n</think>\n\nHello", step, false),
              std::make_pair(std::string(""), std::string("Hello")))
        << step;
    EXPECT_EQ(split_reasoning("<think>\n\n", step, false),
              std::make_pair(std::string(""), std::string("")))
        << step;
    EXPECT_EQ(split_reasoning("  \n<think>a</think>b", step, false),
              std::make_pair(std::string("a"), std::string("b")))
        << step;
  }
  // Whitespace is held back only as long as a <think> may follow it: past 16 characters the
  // reply is content and streams (a piece of more whitespace comes out as it arrives).
  for (size_t step : {1, 2, 3, 5, 7, 100}) {
    EXPECT_EQ(split_reasoning(std::string(16, '\n') + "<think>a</think>b", step, false),
              std::make_pair(std::string("a"), std::string("b")))
        << step;
    EXPECT_EQ(split_reasoning(std::string(17, '\n') + "<think>a</think>b", step, false),
              std::make_pair(std::string(""), std::string(17, '\n') + "<think>a</think>b"))
        << step;
  }
  {
    ReasoningSplitter s(false);
    std::string streamed;
    for (int i = 0; i < 30; ++i) streamed += s.push("\n").content;
    EXPECT_EQ(streamed, std::string(30, '\n'));
  }
  EXPECT_EQ(split_reasoning("", 1, false), std::make_pair(std::string(""), std::string("")));
  EXPECT_EQ(split_reasoning("<th", 1, false), std::make_pair(std::string(""), std::string("<th")));
}

TEST(ReasoningSplitter, PromptOpensThink) {
  EXPECT_TRUE(prompt_opens_think("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_think("<think>  \n\n"));
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_think("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_think("think>"));
  EXPECT_FALSE(prompt_opens_think(""));
  EXPECT_FALSE(prompt_opens_think("\n \n"));
}

}  // namespace
}  // namespace rw
