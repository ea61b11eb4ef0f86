// `rewind chat` run as a user would, on the built-in model: from a pipe (messages, /regen,
// /edit, /undo, /history, /stats: the second turn resumes from the cache, a regenerated reply
// re-runs only the prompt's last token, an edit of the first message resumes after the system
// prompt), and under a pseudo-terminal (libedit's prompt, a streamed reply stopped by Ctrl-C
// with the program still alive and the partial reply kept, Ctrl-C at the prompt, Ctrl-D leaving
// with status 0). Nothing here is timed: the waits only bound a hung program.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace rw {
namespace {

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Runs `rewind chat ARGS` with `input` on stdin; *err gets stderr, the result is stdout.
std::string chat_pipe(const std::string& args, const std::string& input, std::string* err,
                      int* rc) {
  const std::string dir = test::made_scratch_dir("chat_pipe");
  const std::string in = dir + "/in.txt", errf = dir + "/err.txt";
  std::ofstream(in, std::ios::binary) << input;
  const std::string out = test::run_command(
      std::string(REWIND_BINARY) + " chat " + args + " < " + in + " 2> " + errf, rc);
  *err = test::read_file(errf);
  return out;
}

struct StatsRow {
  int64_t turn = 0;
  std::string kind;
  int64_t prompt = 0, cached = 0, rerun = 0, tokens = 0;
  std::string end;
};

// The rows of /stats' table.
std::vector<StatsRow> stats_rows(const std::string& out) {
  std::vector<StatsRow> rows;
  static const std::regex row(
      R"(^ *(\d+) (new|regen|edit) +(\d+) +(\d+) +(\d+) +(\d+) +[0-9.]+ +[0-9.]+ +[0-9.]+ +(\w+)$)");
  size_t i = 0;
  while (i < out.size()) {
    size_t e = out.find('\n', i);
    if (e == std::string::npos) e = out.size();
    std::smatch m;
    const std::string line = out.substr(i, e - i);
    if (std::regex_match(line, m, row))
      rows.push_back({std::stoll(m[1]), m[2], std::stoll(m[3]), std::stoll(m[4]), std::stoll(m[5]),
                      std::stoll(m[6]), m[7]});
    i = e + 1;
  }
  return rows;
}

TEST(ChatPipe, TurnsRegenEditUndoStats) {
  std::string err;
  int rc = -1;
  const std::string out =
      chat_pipe("-n 12 --temperature 0 --seed 1 -t 2 --system 'You are a scribe.'",
                "Recite Genesis 1:3.\n"
                "What verse comes after this one?\n"
                "/regen\n"
                "/edit 1 Recite Exodus 2:1.\n"
                "/undo\n"
                "/undo\n"
                "/history\n"
                "/stats\n",
                &err, &rc);
  ASSERT_EQ(rc, 0) << out << err;
  const std::vector<StatsRow> rows = stats_rows(out);
  ASSERT_EQ(rows.size(), 4u) << out;
  const StatsRow &first = rows[0], &second = rows[1], &regen = rows[2], &edit = rows[3];
  EXPECT_EQ(first.turn, 1);
  EXPECT_EQ(first.kind, "new");
  EXPECT_EQ(first.cached, 0);  // nothing cached yet
  EXPECT_EQ(first.rerun, first.prompt);
  // The second turn resumes from the first one's checkpoints.
  EXPECT_EQ(second.turn, 2);
  EXPECT_EQ(second.kind, "new");
  EXPECT_GT(second.prompt, first.prompt);
  EXPECT_GT(second.cached, 0) << out;
  EXPECT_EQ(second.cached + second.rerun, second.prompt);
  // /regen: the same prompt again; only its last token runs (the checkpoint at the prompt end).
  EXPECT_EQ(regen.turn, 2);
  EXPECT_EQ(regen.kind, "regen");
  EXPECT_EQ(regen.prompt, second.prompt);
  EXPECT_GE(regen.rerun, 1);
  EXPECT_LE(regen.rerun, 4) << out;
  EXPECT_EQ(regen.cached + regen.rerun, regen.prompt);
  // /edit 1: the first user message changed; the system prompt before it is still cached.
  EXPECT_EQ(edit.turn, 1);
  EXPECT_EQ(edit.kind, "edit");
  EXPECT_GT(edit.cached, 0) << out;
  EXPECT_LT(edit.cached, first.prompt);
  for (const StatsRow& r : rows) {
    EXPECT_GT(r.tokens, 0);
    EXPECT_LE(r.tokens, 12);
  }
  // The edit dropped turn 2; two /undo left no messages (the system prompt stays); one status
  // line on stderr per reply.
  EXPECT_TRUE(contains(err, "(1 later turn dropped)")) << err;
  EXPECT_TRUE(contains(out, "system: You are a scribe.\n(no messages yet)\n")) << out;
  size_t status = 0;
  for (size_t p = err.find(" cached, "); p != std::string::npos; p = err.find(" cached, ", p + 1))
    ++status;
  EXPECT_EQ(status, 4u) << err;
}

TEST(ChatPipe, MultiLineInputAndErrors) {
  std::string err;
  int rc = -1;
  const std::string out = chat_pipe("-n 3 --temperature 0 -t 2 -q",
                                    "/regen\n"
                                    "/undo\n"
                                    "/edit 1 x\n"
                                    "/regn\n"
                                    "/edit one\n"
                                    "first line \\\n"
                                    "second line\n"
                                    "\"\"\"\n"
                                    "/not a command\n"
                                    "\n"
                                    "block end\"\"\"\n"
                                    "//slash\n"
                                    "/history\n"
                                    "\"\"\"unterminated\n",
                                    &err, &rc);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_TRUE(contains(err, "error: nothing to regenerate yet")) << err;
  EXPECT_TRUE(contains(err, "error: nothing to undo")) << err;
  EXPECT_TRUE(contains(err, "error: no user messages yet")) << err;
  EXPECT_TRUE(contains(err, "error: unknown command '/regn'; did you mean /regen?")) << err;
  EXPECT_TRUE(contains(err, "error: /edit: 'one' is not a user message number")) << err;
  EXPECT_TRUE(contains(out, "[1] user: first line \n    second line\n")) << out;
  EXPECT_TRUE(contains(out, "[2] user: /not a command\n    \n    block end\n")) << out;
  EXPECT_TRUE(contains(out, "[3] user: /slash\n")) << out;
  EXPECT_FALSE(contains(err, "[")) << err;  // -q: no status lines
}

// The input after a bare /edit N is read as any input is: "//text" sends "/text", and a command
// cancels the edit and runs (it used to become the message's new text).
TEST(ChatPipe, BareEditReadsItsInputAsAnyInput) {
  std::string err;
  int rc = -1;
  std::string out =
      chat_pipe("-n 2 --temperature 0 -t 2 -q",
                "one\n/edit 1\n//slash\n/edit 1\n/history\n/quit\nafter\n", &err, &rc);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_TRUE(contains(out, "[1] user: /slash\n")) << out;
  EXPECT_TRUE(contains(err, "(edit cancelled)")) << err;
  EXPECT_FALSE(contains(out, "user: /history")) << out;
  EXPECT_FALSE(contains(out, "after")) << out;  // /quit left before it
}

// With thinking on, the template's generation prompt opens <think>, so the reply is reasoning:
// in a pipe it is written between <think> lines and kept apart from the (empty) content.
TEST(ChatPipe, ReasoningBetweenThinkLines) {
  std::string err;
  int rc = -1;
  const std::string out =
      chat_pipe("-n 6 --temperature 0 --think on -q -t 2", "Hello\n/history\n", &err, &rc);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_EQ(out.rfind("<think>\n", 0), 0u) << out;
  EXPECT_TRUE(contains(out, "\n</think>\n\n[1] user: Hello\n    assistant: \n")) << out;
  EXPECT_GT(out.find("</think>"), std::string("<think>\n").size()) << out;  // some reasoning
}

TEST(ChatPipe, RejectsBadOptions) {
  std::string err;
  int rc = -1;
  chat_pipe("-c 1", "", &err, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(err, "-c/--ctx-size must be")) << err;
  chat_pipe("-n 0", "", &err, &rc);
  EXPECT_EQ(rc, 1);
  chat_pipe("--think maybe", "", &err, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(err, "--think must be on or off")) << err;
  // A conversation longer than the context is refused, the program goes on.
  const std::string out =
      chat_pipe("-c 8 -q", "a long message that will not fit\n/history\n", &err, &rc);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(contains(err, "and the context 8: /undo, /edit or /clear")) << err;
  EXPECT_TRUE(contains(out, "(no messages yet)")) << out;
}

// /save writes an OpenAI request body; --load and /load bring it back, and a last user message
// without a reply is answered on loading.
TEST(ChatPipe, SaveAndLoad) {
  const std::string dir = test::made_scratch_dir("chat_save");
  const std::string file = dir + "/chat.json";
  std::string err;
  int rc = -1;
  chat_pipe("-n 4 --temperature 0 -q -t 2 --system 'Be terse.'",
            "First question\nSecond question\n/save " + file + "\n", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_TRUE(contains(err, "(saved 2 turns to " + file + ")")) << err;
  const std::string saved = test::read_file(file);
  EXPECT_EQ(saved.rfind("{\n  \"messages\": [", 0), 0u) << saved;
  EXPECT_TRUE(contains(saved, "\"content\": \"Be terse.\"")) << saved;
  EXPECT_TRUE(contains(saved, "\"content\": \"Second question\"")) << saved;
  std::string out =
      chat_pipe("-n 4 --temperature 0 -q -t 2 --load " + file, "/history\n", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_TRUE(contains(err, "(loaded 2 turns from " + file)) << err;
  EXPECT_TRUE(contains(out, "system: Be terse.\n[1] user: First question\n")) << out;
  EXPECT_TRUE(contains(out, "[2] user: Second question\n")) << out;
  // A file that ends with a user message: loading answers it.
  std::ofstream(dir + "/ask.json") << R"({"messages":[{"role":"user","content":"Hi"}]})";
  out = chat_pipe("-n 4 --temperature 0 -t 2", "/load " + dir + "/ask.json\n/stats\n", &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  const auto rows = stats_rows(out);
  ASSERT_EQ(rows.size(), 1u) << out;
  EXPECT_EQ(rows[0].tokens, 4);
  // Errors leave the conversation as it was.
  std::ofstream(dir + "/bad.json") << R"([{"role":"tool","content":"x"}])";
  out = chat_pipe("-n 2 -q -t 2",
                  "Keep me\n/load " + dir + "/bad.json\n/load " + dir + "/none.json\n/save " + dir +
                      "/no/such/dir.json\n/history\n",
                  &err, &rc);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_TRUE(contains(err, "bad.json: message 1: role 'tool' cannot be loaded")) << err;
  EXPECT_TRUE(contains(err, "error: cannot read " + dir + "/none.json")) << err;
  EXPECT_TRUE(contains(err, "error: cannot write " + dir + "/no/such/dir.json")) << err;
  EXPECT_TRUE(contains(out, "[1] user: Keep me")) << out;
  // --load's errors end the program before anything is chatted.
  for (const std::string f : {"bad.json", "none.json"}) {
    out = chat_pipe("-n 2 -q -t 2 --load " + dir + "/" + f, "Not read\n", &err, &rc);
    EXPECT_NE(rc, 0) << f;
    EXPECT_TRUE(contains(err, dir + "/" + f)) << err;
    EXPECT_EQ(out, "") << out;
  }
}

// A child under a pseudo-terminal, its output collected as it comes.
class PtyChat {
 public:
  // REWIND_HOME is a scratch directory (the input history's default place) unless `home` is set.
  explicit PtyChat(std::vector<std::string> args, std::string home = "") {
    if (home.empty()) home = test::made_scratch_dir("chat_pty_home");
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = 200;
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      setenv("REWIND_HOME", home.c_str(), 1);
      unsetenv("NO_COLOR");
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~PtyChat() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0; }
  void send(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), ssize_t(s.size())); }
  // Reads until `needle` appears at or after `from`; true when it did within `seconds`.
  bool wait_for(const std::string& needle, size_t from, double seconds = 120) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out.find(needle, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() > end || !read_some(100)) return false;
    }
    return true;
  }
  // Waits for the child to exit; its status (-1 when it did not within `seconds`).
  int wait_exit(double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      read_some(50);
    }
    return -1;
  }
  // Reads what comes for `seconds`.
  void pump(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end && read_some(50)) {
    }
  }
  // Waits until the terminal is out of canonical mode (libedit's, or the chat's own between
  // prompts): a Ctrl-D typed before then, while the program is still starting, is an end-of-file
  // mark that the switch drops.
  bool wait_editing(double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      termios t{};
      if (tcgetattr(fd_, &t) == 0 && !(t.c_lflag & ICANON)) return true;
      read_some(10);
    }
    return false;
  }
  bool alive() {
    int st = 0;
    return !exited_ && waitpid(pid_, &st, WNOHANG) == 0;
  }
  std::string out;

 private:
  // False once the terminal is closed (the child exited).
  bool read_some(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return true;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    out.append(buf, static_cast<size_t>(n));
    return true;
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
};

TEST(ChatPty, CtrlCStopsAReplyNotTheProgram) {
  PtyChat c({REWIND_BINARY, "chat", "-n", "100000", "--ignore-eos", "-c", "110000", "--temperature",
             "0", "-t", "2"});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for(">>> ", 0)) << c.out;
  size_t mark = c.out.size();
  c.send("Hello there\r");
  ASSERT_TRUE(c.wait_for("Hello there", mark)) << c.out;
  // The reply streams: text arrives while it is still running (no status line yet).
  const size_t reply_at = c.out.find("Hello there", mark) + 11;
  const auto streamed = [&] { return c.out.size() > reply_at + 40; };
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!streamed() && std::chrono::steady_clock::now() < end) c.pump(0.2);
  ASSERT_TRUE(streamed()) << c.out;
  EXPECT_FALSE(contains(c.out.substr(reply_at), "tokens (")) << c.out;
  ASSERT_TRUE(c.alive());
  mark = c.out.size();
  c.send("\x03");
  ASSERT_TRUE(c.wait_for("tokens (stopped)", mark)) << c.out;
  const size_t stopped_at = c.out.find("tokens (stopped)", mark);
  ASSERT_TRUE(c.wait_for(">>> ", stopped_at)) << c.out;
  EXPECT_TRUE(c.alive());
  // The partial reply is kept in the conversation.
  mark = c.out.size();
  c.send("/history\r");
  ASSERT_TRUE(c.wait_for("[stopped]", mark)) << c.out;
  ASSERT_TRUE(c.wait_for(">>> ", c.out.find("[stopped]", mark))) << c.out;
  EXPECT_TRUE(contains(c.out.substr(mark), "[1] user: Hello there")) << c.out;
  // Ctrl-C at the prompt: a notice, and the program goes on.
  mark = c.out.size();
  c.send("\x03");
  ASSERT_TRUE(c.wait_for("Ctrl-C again or Ctrl-D to leave", mark)) << c.out;
  ASSERT_TRUE(c.wait_for(">>> ", c.out.find("Ctrl-D to leave", mark))) << c.out;
  EXPECT_TRUE(c.alive());
  // Ctrl-D at an empty prompt leaves with status 0.
  ASSERT_TRUE(c.wait_editing()) << c.out;
  c.send("\x04");
  EXPECT_EQ(c.wait_exit(), 0) << c.out;
}

TEST(ChatPty, CtrlDLeaves) {
  PtyChat c({REWIND_BINARY, "chat", "-n", "4", "-q", "-t", "2"});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for(">>> ", 0)) << c.out;
  size_t mark = c.out.size();
  c.send("Hello\r");
  ASSERT_TRUE(c.wait_for(">>> ", mark + 1)) << c.out;
  ASSERT_TRUE(c.wait_editing()) << c.out;
  c.send("\x04");
  EXPECT_EQ(c.wait_exit(), 0) << c.out;
}

TEST(ChatPty, SecondCtrlCLeaves) {
  PtyChat c({REWIND_BINARY, "chat", "-n", "4", "-q", "-t", "2"});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for(">>> ", 0)) << c.out;
  // Ctrl-C with text on the line drops the line and does not count towards leaving.
  size_t mark = c.out.size();
  // Ctrl-C only once libedit has read the text (the terminal flushes unread input on a signal):
  // Ctrl-L after it makes libedit clear the screen, which it does only after reading all before.
  c.send("typed but dropped\x0c");
  ASSERT_TRUE(c.wait_for("\x1b[2J", mark)) << c.out;
  c.send("\x03");
  ASSERT_TRUE(c.wait_for("(input dropped)", mark)) << c.out;
  ASSERT_TRUE(c.wait_for(">>> ", c.out.find("(input dropped)", mark))) << c.out;
  mark = c.out.size();
  c.send("\x03");
  ASSERT_TRUE(c.wait_for("Ctrl-D to leave", mark)) << c.out;
  ASSERT_TRUE(c.wait_for(">>> ", c.out.find("Ctrl-D to leave", mark))) << c.out;
  EXPECT_TRUE(c.alive());
  c.send("\x03");
  EXPECT_EQ(c.wait_exit(), 0) << c.out;
}

// Typed while a reply streams, text waits for the next prompt (not echoed into the reply) and a
// Ctrl-D after it still leaves once the prompt comes.
TEST(ChatPty, TypeAheadAndCtrlDDuringAReply) {
  PtyChat c({REWIND_BINARY, "chat", "-n", "5000", "-c", "6000", "--ignore-eos", "--temperature",
             "0", "-t", "2"});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for(">>> ", 0)) << c.out;
  size_t mark = c.out.size();
  c.send("Hello\r");
  ASSERT_TRUE(c.wait_for("Hello", mark)) << c.out;
  const size_t reply_at = c.out.find("Hello", mark) + 5;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (c.out.size() < reply_at + 40 && std::chrono::steady_clock::now() < end) c.pump(0.05);
  ASSERT_FALSE(contains(c.out.substr(reply_at), "tokens (")) << "the reply ended too soon";
  c.send("/history\r\x04");  // typed during the reply
  ASSERT_TRUE(c.wait_for("tokens (length)", mark)) << c.out;
  const size_t status = c.out.find("tokens (length)", mark);
  EXPECT_FALSE(contains(c.out.substr(mark, status - mark), "/history")) << c.out;
  ASSERT_TRUE(c.wait_for("[1] user: Hello", status)) << c.out;
  EXPECT_EQ(c.wait_exit(), 0) << c.out;
}

// The input history outlives the session: Up at a new session's prompt recalls the last line.
TEST(ChatPty, HistoryFileAcrossSessions) {
  const std::string home = test::made_scratch_dir("chat_history_home");
  {
    PtyChat c({REWIND_BINARY, "chat", "-n", "2", "-q", "-t", "2"}, home);
    ASSERT_TRUE(c.started());
    ASSERT_TRUE(c.wait_for(">>> ", 0)) << c.out;
    const size_t mark = c.out.size();
    c.send("remember this line\r");
    ASSERT_TRUE(c.wait_for(">>> ", mark + 1)) << c.out;
    c.send("\x04");
    ASSERT_EQ(c.wait_exit(), 0) << c.out;
  }
  EXPECT_TRUE(contains(test::read_file(home + "/chat_history"), "remember")) << home;
  PtyChat c({REWIND_BINARY, "chat", "-n", "2", "-q", "-t", "2"}, home);
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for(">>> ", 0)) << c.out;
  c.send("\x1b[A\r");  // Up, Enter
  size_t mark = c.out.size();
  ASSERT_TRUE(c.wait_for(">>> ", mark)) << c.out;
  mark = c.out.size();
  c.send("/history\r");
  ASSERT_TRUE(c.wait_for("[1] user: remember this line", mark)) << c.out;
  c.send("\x04");
  EXPECT_EQ(c.wait_exit(), 0) << c.out;
  // --no-history neither reads nor writes it.
  PtyChat n({REWIND_BINARY, "chat", "-n", "2", "-q", "-t", "2", "--no-history"}, home);
  ASSERT_TRUE(n.started());
  ASSERT_TRUE(n.wait_for(">>> ", 0)) << n.out;
  mark = n.out.size();
  n.send("\x1b[A/history\r");
  ASSERT_TRUE(n.wait_for("(no messages yet)", mark)) << n.out;
  n.send("\x04");
  EXPECT_EQ(n.wait_exit(), 0) << n.out;
}

}  // namespace
}  // namespace rw
