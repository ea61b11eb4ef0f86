// `rewind chat`'s input rules (apps/chat_input.h): how typed lines join into one input
// (backslash continuation, """ blocks, unterminated input at the end) and how an input reads as
// a command, with every malformed command an error that names what is wrong.
#include "chat_input.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rw::app {
namespace {

// Feeds lines; returns the inputs completed (blocks marked with a leading "B:").
std::vector<std::string> assemble(const std::vector<std::string>& lines, bool at_eof = true) {
  InputAssembler a;
  std::vector<std::string> out;
  auto take = [&] {
    bool block = false;
    std::string t = a.take(&block);
    out.push_back((block ? "B:" : "") + t);
  };
  for (const std::string& l : lines)
    if (a.push(l)) take();
  if (at_eof && a.finish()) take();
  return out;
}

using V = std::vector<std::string>;

TEST(ChatInput, PlainLinesAreInputs) {
  EXPECT_EQ(assemble({"hello", "", "  two words  "}), (V{"hello", "", "  two words  "}));
}

TEST(ChatInput, BackslashContinues) {
  EXPECT_EQ(assemble({"first \\", "second\\", "third", "next"}),
            (V{"first \nsecond\nthird", "next"}));
  EXPECT_EQ(assemble({"\\", "x"}), (V{"\nx"}));
  // The last line ends in a backslash at end of input: what was typed is still sent.
  EXPECT_EQ(assemble({"a\\"}), (V{"a"}));
  EXPECT_EQ(assemble({"a\\"}, false), (V{}));
}

TEST(ChatInput, TripleQuoteBlocks) {
  EXPECT_EQ(assemble({"\"\"\"", "line 1", "", "line 3 \\", "\"\"\"", "after"}),
            (V{"B:line 1\n\nline 3 \\", "after"}));
  // Text on the opening and closing lines belongs to the block.
  EXPECT_EQ(assemble({"\"\"\"start", "end\"\"\""}), (V{"B:start\nend"}));
  EXPECT_EQ(assemble({"\"\"\"one line\"\"\""}), (V{"B:one line"}));
  EXPECT_EQ(assemble({"\"\"\"\"\"\""}), (V{"B:"}));
  // Only a line that starts with """ opens a block; quotes elsewhere are text.
  EXPECT_EQ(assemble({"say \"\"\"", "x"}), (V{"say \"\"\"", "x"}));
  // A continued line does not open a block on its next line.
  EXPECT_EQ(assemble({"a\\", "\"\"\"b"}), (V{"a\n\"\"\"b"}));
  // Unterminated at the end of input: sent as it is.
  EXPECT_EQ(assemble({"\"\"\"", "never closed"}), (V{"B:never closed"}));
  EXPECT_EQ(assemble({"\"\"\"", "never closed"}, false), (V{}));
}

TEST(ChatInput, PendingAndReset) {
  InputAssembler a;
  EXPECT_FALSE(a.pending());
  EXPECT_FALSE(a.push("\"\"\""));
  EXPECT_TRUE(a.pending());
  EXPECT_FALSE(a.push("dropped"));
  a.reset();  // Ctrl-C at the continuation prompt
  EXPECT_FALSE(a.pending());
  EXPECT_FALSE(a.finish());
  EXPECT_TRUE(a.push("fresh"));
  bool block = true;
  EXPECT_EQ(a.take(&block), "fresh");
  EXPECT_FALSE(block);
  EXPECT_FALSE(a.push("x\\"));
  EXPECT_TRUE(a.pending());
}

ChatCommand ok(const std::string& s) {
  auto r = parse_chat_input(s);
  EXPECT_TRUE(r.ok()) << s << ": " << r.error_message();
  return r.ok() ? r.value() : ChatCommand{};
}

std::string err(const std::string& s) {
  auto r = parse_chat_input(s);
  EXPECT_FALSE(r.ok()) << s;
  return r.ok() ? "" : r.error_message();
}

TEST(ChatInput, Commands) {
  EXPECT_EQ(ok("hello /regen").kind, ChatCommandKind::Message);
  EXPECT_EQ(ok(" /regen").kind, ChatCommandKind::Message);  // only a first '/' is a command
  EXPECT_EQ(ok("hello").text, "hello");
  ChatCommand slash = ok("//etc/passwd is a path");
  EXPECT_EQ(slash.kind, ChatCommandKind::Message);
  EXPECT_EQ(slash.text, "/etc/passwd is a path");
  EXPECT_EQ(ok("/regen").kind, ChatCommandKind::Regen);
  EXPECT_EQ(ok("/regen  ").kind, ChatCommandKind::Regen);
  EXPECT_EQ(ok("/undo").kind, ChatCommandKind::Undo);
  EXPECT_EQ(ok("/history").kind, ChatCommandKind::History);
  EXPECT_EQ(ok("/stats").kind, ChatCommandKind::Stats);
  EXPECT_EQ(ok("/clear").kind, ChatCommandKind::Clear);
  EXPECT_EQ(ok("/help").kind, ChatCommandKind::Help);
  EXPECT_EQ(ok("/?").kind, ChatCommandKind::Help);
  for (const char* q : {"/quit", "/exit", "/bye"}) EXPECT_EQ(ok(q).kind, ChatCommandKind::Quit);
  ChatCommand sys = ok("/system  You are terse.\nVery terse. ");
  EXPECT_EQ(sys.kind, ChatCommandKind::System);
  EXPECT_EQ(sys.text, "You are terse.\nVery terse.");
  EXPECT_EQ(ok("/system").text, "");
  ChatCommand e = ok("/edit 2 new text\nsecond line");
  EXPECT_EQ(e.kind, ChatCommandKind::Edit);
  EXPECT_EQ(e.n, 2);
  EXPECT_EQ(e.text, "new text\nsecond line");
  ChatCommand e1 = ok("/edit 1");
  EXPECT_EQ(e1.n, 1);
  EXPECT_EQ(e1.text, "");
  EXPECT_EQ(ok("/edit\n3").n, 3);
}

TEST(ChatInput, MalformedCommands) {
  EXPECT_NE(err("/regn").find("unknown command '/regn'; did you mean /regen?"), std::string::npos);
  EXPECT_NE(err("/hist").find("did you mean /history?"), std::string::npos);
  EXPECT_NE(err("/sytem hi").find("did you mean /system?"), std::string::npos);
  EXPECT_EQ(err("/zzzzzz").find("did you mean"), std::string::npos);
  EXPECT_NE(err("/").find("unknown command '/'"), std::string::npos);
  EXPECT_NE(err("/regen now").find("/regen takes no argument"), std::string::npos);
  EXPECT_NE(err("/quit please").find("takes no argument"), std::string::npos);
  EXPECT_NE(err("/edit").find("/edit needs a user message number"), std::string::npos);
  EXPECT_NE(err("/edit   ").find("/edit needs a user message number"), std::string::npos);
  for (const char* bad : {"/edit x", "/edit 0", "/edit -1", "/edit +2", "/edit 1.5", "/edit 2x",
                          "/edit 99999999999999999999999"})
    EXPECT_NE(err(bad).find("is not a user message number"), std::string::npos) << bad;
}

TEST(ChatInput, HelpNamesEveryCommand) {
  const std::string h = chat_commands_help();
  for (const char* c : {"/regen", "/edit", "/undo", "/system", "/history", "/stats", "/clear",
                        "/save", "/load", "/help", "/quit"})
    EXPECT_NE(h.find(c), std::string::npos) << c;
}

TEST(ChatInput, SaveAndLoadNeedAFile) {
  EXPECT_EQ(ok("/save chat.json").kind, ChatCommandKind::Save);
  EXPECT_EQ(ok("/save  my chat.json ").text, "my chat.json");
  EXPECT_EQ(ok("/load chat.json").kind, ChatCommandKind::Load);
  EXPECT_NE(err("/save").find("/save needs a file name"), std::string::npos);
  EXPECT_NE(err("/load  ").find("/load needs a file name"), std::string::npos);
}

TEST(Conversation, RoundTrip) {
  SavedConversation c;
  c.system = "Be brief.";
  c.turns.push_back({"hi \"there\"\nsecond line", "hello", "they greet me", true});
  c.turns.push_back({"and now?", "", "", false});
  const std::string j = conversation_json(c);
  EXPECT_NE(j.find("\"messages\""), std::string::npos);
  EXPECT_NE(j.find("\"reasoning_content\": \"they greet me\""), std::string::npos);
  auto back = parse_conversation(j);
  ASSERT_TRUE(back.ok()) << back.error_message();
  EXPECT_EQ(back->system, c.system);
  ASSERT_EQ(back->turns.size(), 2u);
  EXPECT_EQ(back->turns[0].user, c.turns[0].user);
  EXPECT_EQ(back->turns[0].reply, "hello");
  EXPECT_EQ(back->turns[0].reasoning, "they greet me");
  EXPECT_TRUE(back->turns[0].replied);
  EXPECT_EQ(back->turns[1].user, "and now?");
  EXPECT_FALSE(back->turns[1].replied);
  EXPECT_EQ(conversation_json(back.value()), j);
}

TEST(Conversation, ReadsOpenAIShapes) {
  // A bare array, text parts, a developer message as the system prompt, null content.
  auto c = parse_conversation(
      R"([{"role":"developer","content":"sys"},)"
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},)"
      R"({"role":"assistant","content":null}])");
  ASSERT_TRUE(c.ok()) << c.error_message();
  EXPECT_EQ(c->system, "sys");
  ASSERT_EQ(c->turns.size(), 1u);
  EXPECT_EQ(c->turns[0].user, "a\nb");  // parts joined by newlines
  EXPECT_TRUE(c->turns[0].replied);
  EXPECT_EQ(c->turns[0].reply, "");
  auto empty = parse_conversation(R"({"messages": []})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->turns.empty());
}

TEST(Conversation, MalformedFiles) {
  const auto bad = [](const std::string& j) {
    auto c = parse_conversation(j);
    return c.ok() ? std::string("(accepted)") : c.error_message();
  };
  EXPECT_EQ(bad("{\"messages\": ["), "not JSON");
  EXPECT_EQ(bad(""), "not JSON");
  EXPECT_NE(bad("{\"model\": \"x\"}").find("no \"messages\""), std::string::npos);
  EXPECT_NE(bad("{\"messages\": 3}").find("must be an array"), std::string::npos);
  EXPECT_NE(bad("[3]").find("message 1: an object with a \"role\""), std::string::npos);
  EXPECT_NE(bad(R"([{"content":"x"}])").find("message 1"), std::string::npos);
  EXPECT_NE(bad(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])")
                .find("message 2: two user messages in a row"),
            std::string::npos);
  EXPECT_NE(bad(R"([{"role":"assistant","content":"a"}])").find("must answer a user message"),
            std::string::npos);
  EXPECT_NE(bad(R"([{"role":"user","content":"a"},{"role":"system","content":"b"}])")
                .find("can only come first"),
            std::string::npos);
  EXPECT_NE(bad(R"([{"role":"user","content":"a"},{"role":"tool","content":"b"}])")
                .find("role 'tool' cannot be loaded"),
            std::string::npos);
  EXPECT_NE(bad(R"([{"role":"user","content":"a"},{"role":"assistant","content":"",)"
                R"("tool_calls":[{"id":"1"}]}])")
                .find("tool calls"),
            std::string::npos);
  EXPECT_NE(bad(R"([{"role":"user","content":[{"type":"image_url","image_url":{}}]}])")
                .find("only text parts"),
            std::string::npos);
  EXPECT_NE(bad(R"([{"role":"user","content":5}])").find("content must be a string"),
            std::string::npos);
}

}  // namespace
}  // namespace rw::app
