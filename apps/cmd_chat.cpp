// `rewind chat`: an interactive chat in the terminal, as `llama-cli -cnv` or `ollama run` offer.
// Each turn renders the whole conversation with the model's chat template (the rendering
// /v1/chat/completions uses: load_chat_template, tokenize_chat with message starts as
// checkpoint boundaries) and runs it through the engine with the prefix cache, so a turn
// resumes from the checkpoint where it departs from the last one instead of re-running the
// conversation. Replies stream to stdout; reasoning blocks are dimmed on a terminal. Input:
// libedit (line editing, history) when stdin and stdout are terminals, plain lines otherwise
// (pipes); multi-line input and the slash commands are apps/chat_input.h's.
//
// Ctrl-C: SIGINT's handler only sets an atomic flag. The engine reads it before every step
// (Engine::generate's stop hook), so a streaming reply stops within one token; the part shown
// is kept as the assistant's message (as llama-cli does; a reply stopped before its first token
// is dropped with its user message). At the prompt the flag interrupts the read: the line is
// dropped, and a second Ctrl-C in a row (or Ctrl-D) leaves with status 0.
#include <histedit.h>
#include <langinfo.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "args.h"
#include "chat_input.h"
#include "commands.h"
#include "rewind/base/file.h"
#include "rewind/chat/chat_template.h"
#include "rewind/chat/text_stream.h"
#include "rewind/engine/engine.h"
#include "rewind/hub/store.h"
#include "rewind/server/generation_defaults.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw::app {

namespace {

// Set by SIGINT; read by the engine (before each step) and by the line readers.
std::atomic<bool> g_interrupt{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGINT handler stores to it");

void on_sigint(int) {
  g_interrupt.store(true, std::memory_order_relaxed);
}

// SIGINT's handler. The main thread keeps SIGINT blocked except while it waits for input (inside
// ppoll, read_byte) and while a reply is generated (SigintOpen), so at the prompt the signal can
// only arrive while the thread waits, never between a check of the flag and the wait.
void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

void set_sigint_blocked(bool blocked) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &s, nullptr);
}

// SIGINT deliverable for the scope (a reply being generated).
struct SigintOpen {
  SigintOpen() { set_sigint_blocked(false); }
  ~SigintOpen() { set_sigint_blocked(true); }
};

// One byte of `fd`: 1, 0 at the end of input (or a read error), -1 when Ctrl-C came first.
int read_byte(int fd, char* c) {
  sigset_t open;
  pthread_sigmask(SIG_SETMASK, nullptr, &open);
  sigdelset(&open, SIGINT);
  for (;;) {
    if (g_interrupt.load()) return -1;
    pollfd p{fd, POLLIN, 0};
    if (ppoll(&p, 1, nullptr, &open) < 0) {
      if (errno == EINTR) continue;
      return 0;
    }
    const ssize_t n = read(fd, c, 1);
    if (n == 1) return 1;
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return 0;
  }
}

enum class ReadResult { Line, Eof, Interrupted };

class LineReader {
 public:
  virtual ~LineReader() = default;
  // One line without its newline; after Ctrl-C (Interrupted), what had been typed of it.
  virtual ReadResult read(const std::string& prompt, std::string* line) = 0;
  virtual void remember(const std::string& line) {}  // history
  virtual void prefill(const std::string& text) {}   // the next line starts with `text`
};

// Plain lines from stdin (a pipe or a file): no prompt, no echo.
class PlainReader : public LineReader {
 public:
  ReadResult read(const std::string&, std::string* line) override {
    line->clear();
    if (eof_) return ReadResult::Eof;
    for (;;) {
      char c = 0;
      const int r = read_byte(STDIN_FILENO, &c);
      if (r < 0) return ReadResult::Interrupted;
      if (r == 0) {
        eof_ = true;
        if (line->empty()) return ReadResult::Eof;
        break;
      }
      if (c == '\n') break;
      *line += c;
    }
    if (!line->empty() && line->back() == '\r') line->pop_back();
    return ReadResult::Line;
  }

 private:
  bool eof_ = false;
};

// libedit: emacs key bindings (or ~/.editrc), history (Up / Down, Ctrl-R) kept in `history_file`
// across sessions (libedit's format, mode 0600; "" keeps it for this session only).
class EditReader : public LineReader {
 public:
  explicit EditReader(std::string history_file) : file_(std::move(history_file)) {
    el_ = el_init("rewind", stdin, stdout, stderr);
    hist_ = history_init();
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, 1000);
    history(hist_, &ev, H_SETUNIQUE, 1);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, history, hist_);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_PROMPT, &EditReader::prompt_of);
    el_set(el_, EL_BIND, "^R", "em-inc-search-prev", nullptr);
    el_set(el_, EL_GETCFN, &EditReader::getc);
    el_source(el_, nullptr);
    if (!file_.empty()) history(hist_, &ev, H_LOAD, file_.c_str());  // absent on a first run
    saved_ = tcgetattr(STDIN_FILENO, &cooked_) == 0;
    hold_input();
  }
  ~EditReader() override {
    el_end(el_);
    history_end(hist_);
    if (saved_) tcsetattr(STDIN_FILENO, TCSANOW, &cooked_);
  }
  EditReader(const EditReader&) = delete;
  EditReader& operator=(const EditReader&) = delete;

  ReadResult read(const std::string& prompt, std::string* line) override {
    prompt_ = prompt;
    int count = 0;
    const char* s = el_gets(el_, &count);
    hold_input();
    if (g_interrupt.load()) {  // what was typed before Ctrl-C, which drops it
      const LineInfo* li = el_line(el_);
      line->assign(li->buffer, li->lastchar);
      return ReadResult::Interrupted;
    }
    if (!s || count <= 0) return ReadResult::Eof;
    line->assign(s, static_cast<size_t>(count));
    while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
    return ReadResult::Line;
  }
  void remember(const std::string& line) override {
    HistEvent ev;
    history(hist_, &ev, H_ENTER, line.c_str());
    if (!file_.empty() && history(hist_, &ev, H_SAVE, file_.c_str()) < 0 && !save_failed_) {
      save_failed_ = true;
      std::fprintf(stderr, "rewind: warning: cannot write the history file %s\n", file_.c_str());
    }
  }
  void prefill(const std::string& text) override { el_push(el_, text.c_str()); }

 private:
  // Between prompts (a reply streaming, the model loading) the terminal is kept out of canonical
  // mode and without echo: what is typed waits as plain bytes for the next prompt, Ctrl-D
  // included (canonical mode would make it an end-of-file mark that libedit's switch to its own
  // mode drops), and type-ahead does not echo into the reply. Ctrl-C still signals. libedit
  // ignores a non-canonical mode it finds and restores its saved cooked one when a line ends.
  void hold_input() const {
    if (!saved_) return;
    termios t = cooked_;
    t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &t);
  }
  // libedit's character source: read_byte's bytes decoded as the locale's multibyte text.
  static int getc(EditLine*, wchar_t* wc) {
    std::mbstate_t st{};
    for (;;) {
      char c = 0;
      const int r = read_byte(STDIN_FILENO, &c);
      if (r <= 0) {
        *wc = 0;
        if (r < 0) errno = EINTR;
        return r;
      }
      const size_t n = std::mbrtowc(wc, &c, 1, &st);
      if (n == static_cast<size_t>(-2)) continue;  // more bytes of this character
      if (n == static_cast<size_t>(-1)) {          // not a character: skipped
        st = std::mbstate_t{};
        continue;
      }
      return 1;
    }
  }
  static char* prompt_of(EditLine* el) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return const_cast<char*>(static_cast<EditReader*>(self)->prompt_.c_str());
  }
  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
  std::string prompt_;
  std::string file_;
  bool save_failed_ = false;
  termios cooked_{};  // the terminal's mode when the chat started, restored when it ends
  bool saved_ = false;
};

// Colours only on a terminal, and not when NO_COLOR is set or TERM is dumb.
bool use_color(int fd) {
  if (!isatty(fd)) return false;
  if (const char* nc = std::getenv("NO_COLOR"); nc && *nc) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

constexpr const char* kDim = "\033[2m";
constexpr const char* kReset = "\033[0m";

struct Turn {
  std::string user;
  std::string reply, reasoning;
  bool replied = false;
  bool stopped = false;  // Ctrl-C ended the reply
};

// One generation, for /stats and the status line.
struct ReplyStats {
  size_t turn = 0;   // 1-based
  std::string kind;  // new, regen, edit
  RequestReport report;
  FinishReason finish = FinishReason::None;
};

std::string finish_word(FinishReason f) {
  switch (f) {
    case FinishReason::Stop:
      return "eos";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "stopped";
    default:
      return "error";
  }
}

// Prefill speed over the tokens the prompt re-ran (resumed ones cost nothing), from admission to
// the first token; decode speed over the tokens after the first.
double prefill_tps(const RequestReport& r) {
  const double s = (r.ttft_ms - r.queue_ms) / 1e3;
  return r.completion_tokens > 0 && s > 0 ? static_cast<double>(r.rerun_tokens) / s : 0.0;
}
double decode_tps(const RequestReport& r) {
  const double s = (r.total_ms - r.ttft_ms) / 1e3;
  return r.completion_tokens > 1 && s > 0 ? static_cast<double>(r.completion_tokens - 1) / s : 0.0;
}

struct ChatOptions {
  int64_t ctx = 4096;
  int64_t n_predict = -1;  // -1: up to the context
  SamplingParams sampling;
  uint64_t seed = 0;
  std::set<int32_t> stop_ids;
  int think = -1;  // enable_thinking: -1 the template's default
  bool quiet = false;
};

// A conversation saved by /save (or written by hand): the file's errors name the file.
Result<SavedConversation> read_conversation(const std::string& path) {
  REWIND_TRY(const std::string text, read_whole_file(path));
  auto c = parse_conversation(text);
  if (!c.ok()) return make_error(path + ": " + c.error_message());
  return c;
}

class ChatSession {
 public:
  ChatSession(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl, ChatOptions opt,
              std::string system)
      : engine_(engine),
        tok_(tok),
        tmpl_(tmpl),
        opt_(std::move(opt)),
        system_(std::move(system)),
        out_color_(use_color(STDOUT_FILENO)),
        err_color_(use_color(STDERR_FILENO)) {}

  // A new user message and its reply.
  void send(const std::string& text) {
    turns_.push_back({text, "", "", false, false});
    if (!reply(turns_.size() - 1, "new")) {
      turns_.pop_back();
      note("(no reply: the message was dropped; Up recalls it)");
    }
  }

  void regen() {
    if (turns_.empty()) return error("nothing to regenerate yet");
    const Turn old = turns_.back();
    if (!reply(turns_.size() - 1, "regen")) {
      turns_.back() = old;
      note("(no new reply: the previous one is kept)");
    }
  }

  // Checked before /edit N reads its text from the next input.
  bool can_edit(int64_t n) {
    if (n >= 1 && n <= static_cast<int64_t>(turns_.size())) return true;
    error(turns_.empty() ? "no user messages yet"
                         : "no user message " + std::to_string(n) + " (1.." +
                               std::to_string(turns_.size()) + "; see /history)");
    return false;
  }
  const std::string& user_text(int64_t n) const { return turns_[static_cast<size_t>(n - 1)].user; }

  void edit(int64_t n, const std::string& text) {
    if (!can_edit(n)) return;
    const size_t dropped = turns_.size() - static_cast<size_t>(n);
    turns_.resize(static_cast<size_t>(n));
    turns_.back() = {text, "", "", false, false};
    if (dropped)
      note("(" + std::to_string(dropped) + " later turn" + (dropped > 1 ? "s" : "") + " dropped)");
    if (!reply(turns_.size() - 1, "edit")) {
      turns_.pop_back();
      note("(no reply: the edited message was dropped)");
    }
  }

  void undo() {
    if (turns_.empty()) return error("nothing to undo");
    note("(dropped: " + abbreviate(turns_.back().user) + ")");
    turns_.pop_back();
  }

  void set_system(const std::string& text) {
    note(text.empty()
             ? (system_.empty() ? "(there was no system prompt)" : "(system prompt removed)")
             : "(system prompt set; it applies from the next message)");
    system_ = text;
  }

  void clear() {
    turns_.clear();
    note("(new conversation)");
  }

  // /save FILE: the conversation as an OpenAI request body, written whole or not at all.
  void save(const std::string& path) const {
    SavedConversation c;
    c.system = system_;
    for (const Turn& t : turns_) c.turns.push_back({t.user, t.reply, t.reasoning, t.replied});
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    const std::string text = conversation_json(c);
    const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (f && std::fclose(f) != 0) f = nullptr;
    if (!ok || !f || std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int e = errno;
      std::remove(tmp.c_str());
      return error("cannot write " + path + ": " + std::strerror(e));
    }
    note("(saved " + std::to_string(turns_.size()) + " turn" + (turns_.size() == 1 ? "" : "s") +
         " to " + path + ")");
  }

  // /load FILE and --load: replaces the conversation (and the system prompt); a last user
  // message without a reply is answered now. The first turn after it re-runs the whole prompt
  // unless the cache holds it.
  void load(const std::string& path) {
    auto c = read_conversation(path);
    if (!c.ok()) return error(c.error_message());
    restore(c.value(), path);
  }
  void restore(const SavedConversation& c, const std::string& path) {
    system_ = c.system;
    turns_.clear();
    for (const SavedTurn& t : c.turns)
      turns_.push_back({t.user, t.reply, t.reasoning, t.replied, false});
    note("(loaded " + std::to_string(turns_.size()) + " turn" + (turns_.size() == 1 ? "" : "s") +
         " from " + path + "; /history lists them)");
    if (!turns_.empty() && !turns_.back().replied && !reply(turns_.size() - 1, "new")) {
      turns_.pop_back();
      note("(no reply: the last message was dropped)");
    }
  }

  void history() const {
    if (!system_.empty()) std::printf("system: %s\n", indent(system_).c_str());
    if (turns_.empty()) std::printf("(no messages yet)\n");
    for (size_t i = 0; i < turns_.size(); ++i) {
      const Turn& t = turns_[i];
      std::printf("[%zu] user: %s\n", i + 1, indent(t.user).c_str());
      if (t.replied)
        std::printf("    assistant: %s%s\n", indent(t.reply).c_str(),
                    t.stopped ? " [stopped]" : "");
    }
    std::fflush(stdout);
  }

  void stats() const {
    if (stats_.empty()) {
      std::printf("(no replies yet)\n");
      std::fflush(stdout);
      return;
    }
    std::printf("%5s %-6s %7s %7s %7s %7s %14s %13s %9s  %s\n", "turn", "reply", "prompt", "cached",
                "re-run", "tokens", "prefill tok/s", "decode tok/s", "TTFT ms", "end");
    for (const ReplyStats& s : stats_) {
      const RequestReport& r = s.report;
      std::printf("%5zu %-6s %7lld %7lld %7lld %7lld %14.1f %13.1f %9.1f  %s\n", s.turn,
                  s.kind.c_str(), static_cast<long long>(r.prompt_tokens),
                  static_cast<long long>(r.resumed_at), static_cast<long long>(r.rerun_tokens),
                  static_cast<long long>(r.completion_tokens), prefill_tps(r), decode_tps(r),
                  r.completion_tokens > 0 ? r.ttft_ms : 0.0, finish_word(s.finish).c_str());
    }
    std::fflush(stdout);
  }

  void error(const std::string& msg) const {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    std::fflush(stderr);
  }
  void note(const std::string& msg) const {
    std::fprintf(stderr, "%s%s%s\n", err_color_ ? kDim : "", msg.c_str(), err_color_ ? kReset : "");
    std::fflush(stderr);
  }

 private:
  static std::string abbreviate(const std::string& s) {
    std::string one = s.substr(0, s.find('\n'));
    if (one.size() > 60 || one.size() < s.size()) one = one.substr(0, 60) + "...";
    return one;
  }
  static std::string indent(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '\n' ? std::string("\n    ") : std::string(1, c);
    return out;
  }

  // Streams reasoning (dim on a terminal, between <think> lines in a pipe) and content to stdout.
  class Printer {
   public:
    explicit Printer(bool color) : color_(color) {}
    void emit(const ReasoningSplitter::Out& o) {
      if (!o.reasoning.empty()) {
        if (!in_reasoning_) std::fputs(color_ ? kDim : "<think>\n", stdout);
        in_reasoning_ = true;
        std::fputs(o.reasoning.c_str(), stdout);
        reasoning += o.reasoning;
        last_ = o.reasoning.back();
      }
      if (!o.content.empty()) {
        close_reasoning();
        std::fputs(o.content.c_str(), stdout);
        content += o.content;
        last_ = o.content.back();
      }
      std::fflush(stdout);
    }
    void close_reasoning() {
      if (!in_reasoning_) return;
      if (last_ != '\n') std::fputs("\n", stdout);
      std::fputs(color_ ? kReset : "</think>", stdout);
      std::fputs(color_ ? "\n" : "\n\n", stdout);
      in_reasoning_ = false;
      last_ = '\n';
    }
    void end() {
      close_reasoning();
      if (last_ != 0 && last_ != '\n') std::fputs("\n", stdout);
      std::fflush(stdout);
    }
    std::string reasoning, content;

   private:
    bool color_;
    bool in_reasoning_ = false;
    char last_ = 0;
  };

  // Renders the conversation through turns_[i]'s user message and generates its reply into
  // turns_[i]. False when nothing was generated (an error, or Ctrl-C before the first token).
  bool reply(size_t i, const char* kind) {
    std::vector<ChatMessage> msgs;
    if (!system_.empty()) msgs.push_back({"system", system_, "", {}, "", ""});
    for (size_t j = 0; j < i; ++j) {
      msgs.push_back({"user", turns_[j].user, "", {}, "", ""});
      if (turns_[j].replied)
        msgs.push_back({"assistant", turns_[j].reply, turns_[j].reasoning, {}, "", ""});
    }
    msgs.push_back({"user", turns_[i].user, "", {}, "", ""});
    ChatRenderOptions ro;
    ro.enable_thinking = opt_.think;
    auto rendered = tmpl_.render(msgs, ro);
    if (!rendered.ok()) {
      error(rendered.error_message());  // "chat template: ..."
      return false;
    }
    Request req;
    req.prompt = tokenize_chat(tok_, rendered.value(), &req.boundaries, &req.anchor);
    const int64_t n = static_cast<int64_t>(req.prompt.size());
    if (n >= opt_.ctx) {
      error("the conversation is " + std::to_string(n) + " tokens and the context " +
            std::to_string(opt_.ctx) + ": /undo, /edit or /clear (or a larger -c)");
      return false;
    }
    int64_t max_tokens = opt_.ctx - n;
    if (opt_.n_predict > 0) max_tokens = std::min(max_tokens, opt_.n_predict);
    req.max_tokens = static_cast<int32_t>(std::min<int64_t>(max_tokens, INT32_MAX));
    req.sampling = opt_.sampling;
    req.sampling.seed = opt_.seed + generations_++;  // a /regen draws anew
    req.stop_ids = opt_.stop_ids;

    StreamDecoder dec(tok_);
    ReasoningSplitter split(prompt_opens_think(rendered->text));
    Printer out(out_color_);
    g_interrupt.store(false);
    SigintOpen sigint_open;
    auto gen = engine_.generate(
        req,
        [&](int32_t t) {
          if (req.stop_ids.count(t)) return;  // the end-of-sequence token is not text
          out.emit(split.push(dec.push(t)));
        },
        &g_interrupt);
    if (!gen.ok()) {
      out.end();
      error(gen.error_message());
      return false;
    }
    out.emit(split.push(dec.flush()));
    out.emit(split.finish());
    out.end();
    const bool stopped = gen->finish == FinishReason::Cancelled;
    g_interrupt.store(false);
    stats_.push_back({i + 1, kind, gen->report, gen->finish});
    if (!opt_.quiet) status_line(stats_.back());
    if (stopped && gen->tokens.empty()) return false;
    Turn& t = turns_[i];
    t.reply = out.content;
    t.reasoning = out.reasoning;
    t.replied = true;
    t.stopped = stopped;
    return true;
  }

  void status_line(const ReplyStats& s) const {
    const RequestReport& r = s.report;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "[%lld tokens (%s); prompt %lld: %lld cached, %lld re-run; prefill %.1f tok/s, "
                  "decode %.1f tok/s, TTFT %.1f ms]",
                  static_cast<long long>(r.completion_tokens), finish_word(s.finish).c_str(),
                  static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.resumed_at),
                  static_cast<long long>(r.rerun_tokens), prefill_tps(r), decode_tps(r),
                  r.completion_tokens > 0 ? r.ttft_ms : 0.0);
    note(buf);
  }

  Engine& engine_;
  const Tokenizer& tok_;
  const ChatTemplate& tmpl_;
  ChatOptions opt_;
  std::string system_;
  std::vector<Turn> turns_;
  std::vector<ReplyStats> stats_;
  uint64_t generations_ = 0;
  bool out_color_, err_color_;
};

}  // namespace

int cmd_chat(int argc, char** argv) {
  auto args = parse_args("chat", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("chat");
  auto model_arg = model_or_builtin(args->str("--model"), args->has("--quiet"));
  if (!model_arg.ok()) return fail(model_arg.error_message());
  const std::string dir = model_arg.value();
  auto ctx = args->int_("--ctx-size", 4096);
  auto n_pred = args->int_("--n-predict", -1);
  auto seed = args->int_("--seed", 0);
  auto th = args->int_("--threads", default_threads());
  auto cache_ram = args->int_("--cache-ram", 1024);
  for (auto* r : {&ctx, &n_pred, &seed, &th, &cache_ram})
    if (!r->ok()) return fail(r->error_message());
  // The sampling options checked before the model loads (applied over its defaults below).
  SamplingParams scratch;
  if (Status ss = sampling_from(*args, &scratch); !ss.ok()) return fail(ss.error_message());
  if ((ctx.value() < 2 && ctx.value() != 0) || ctx.value() > (int64_t{1} << 31) - 1)
    return fail("-c/--ctx-size must be in [2, 2^31), or 0 (the model's context length)");
  if (n_pred.value() != -1 && n_pred.value() < 1)
    return fail("-n/--n-predict must be >= 1, or -1 (up to the context)");
  if (th.value() < 1) return fail("--threads must be >= 1");
  if (cache_ram.value() < 1) return fail("--cache-ram must be >= 1 (MiB); --no-cache turns it off");
  int think = -1;
  if (args->has("--think")) {
    const std::string v = args->str("--think");
    if (v != "on" && v != "off") return fail("--think must be on or off (got '" + v + "')");
    think = v == "on" ? 1 : 0;
  }

  // --load's file is read before the model: a bad one ends the program at once.
  std::optional<SavedConversation> loaded;
  if (args->has("--load")) {
    auto c = read_conversation(args->str("--load"));
    if (!c.ok()) return fail(c.error_message());
    loaded = std::move(c).value();
  }

  auto tok = load_tokenizer(dir);
  if (!tok.ok()) return fail(tok.error_message());
  auto tmpl = load_chat_template(dir, tok.value(), nullptr, args->str("--chat-template-file"),
                                 args->str("--chat-template"));
  if (!tmpl.ok()) return fail(tmpl.error_message());
  if (think >= 0 && !tmpl->reads_enable_thinking())
    std::fprintf(stderr,
                 "rewind: warning: this model's chat template does not read enable_thinking, so "
                 "--think changes nothing (some templates read /think or /no_think in the system "
                 "prompt)\n");
  // The pool's threads never take SIGINT: the main thread must, to interrupt its read.
  set_sigint_blocked(true);
  ThreadPool pool(static_cast<int>(th.value()));
  set_sigint_blocked(false);  // while loading, Ctrl-C ends the program
  const std::string store = args->str("--weights", "auto");
  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  auto kv = kv_types_from(*args);
  if (!kv.ok()) return fail(kv.error_message());
  double load_s = 0;
  auto model = load_model(dir, store, kernels.value(), &pool, &load_s, false, kv.value());
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();
  auto ctx_r = ctx_or_model(ctx.value(), m.config(), "-c 0");
  if (!ctx_r.ok()) return fail(ctx_r.error_message());
  const int64_t ctx_n = ctx_r.value();

  // Sampling: the model's generation_config.json, then the options given.
  GenerationDefaults defaults =
      load_generation_defaults(dir, m.config().eos_token_ids, tok.value());
  for (const auto& w : defaults.warnings) std::fprintf(stderr, "rewind: warning: %s\n", w.c_str());
  ChatOptions co;
  co.ctx = ctx_n;
  co.n_predict = n_pred.value();
  co.sampling = defaults.sampling;
  if (Status ss = sampling_from(*args, &co.sampling); !ss.ok()) return fail(ss.error_message());
  co.seed = args->has("--seed")
                ? static_cast<uint64_t>(seed.value())
                : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (!args->has("--ignore-eos")) co.stop_ids = defaults.stop_ids;
  if (co.stop_ids.empty() && !args->has("--ignore-eos"))
    std::fprintf(stderr, "rewind: warning: no end-of-sequence token found; replies end at -n\n");
  co.think = think;
  co.quiet = args->has("--quiet");

  EngineOptions eo;
  eo.ctx_size = ctx_n;
  eo.cache_enabled = !args->has("--no-cache");
  eo.cache.budget_bytes = static_cast<size_t>(cache_ram.value()) << 20;
  eo.cache.policy.size_by_state = true;
  eo.sample_vocab =
      static_cast<int32_t>(std::min<int64_t>(tok->vocab_size(), m.config().vocab_size));
  Engine engine(m, &pool, eo);

  const bool interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  // Typed text is the locale's multibyte text; models speak UTF-8, so C.UTF-8 when the
  // environment names no UTF-8 locale.
  if (!std::setlocale(LC_CTYPE, "") || std::strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
    std::setlocale(LC_CTYPE, "C.UTF-8");
  std::unique_ptr<LineReader> reader;
  if (interactive) {
    // The input history: --history FILE, else <store>/chat_history; --no-history keeps none.
    std::string hist;
    if (args->has("--history")) {
      hist = args->str("--history");
    } else if (!args->has("--no-history")) {
      if (auto root = hub::default_store_root(); root.ok()) {
        std::error_code ec;
        std::filesystem::create_directories(root.value(), ec);
        if (!ec) hist = root.value() + "/chat_history";
      }
    }
    reader = std::make_unique<EditReader>(hist);
  } else
    reader = std::make_unique<PlainReader>();
  if (!co.quiet)
    std::fprintf(stderr,
                 "rewind chat: %s (%s, loaded in %.2f s), context %lld tokens, cache %s; /help "
                 "lists the commands, Ctrl-D leaves\n",
                 dir.c_str(), m.isa(), load_s, static_cast<long long>(ctx_n),
                 eo.cache_enabled ? (std::to_string(cache_ram.value()) + " MiB").c_str() : "off");
  ChatSession chat(engine, tok.value(), tmpl.value(), std::move(co), args->str("--system"));
  if (loaded) chat.restore(*loaded, args->str("--load"));
  set_sigint_blocked(true);
  install_sigint_handler();

  InputAssembler input;
  int64_t editing = 0;  // /edit N without text: the next input replaces message N
  int interrupts = 0;   // Ctrl-C at the prompt in a row
  for (;;) {
    std::string line;
    g_interrupt.store(false);
    const ReadResult r = reader->read(input.pending() ? "... "
                                      : editing       ? "edit> "
                                                      : ">>> ",
                                      &line);
    if (r == ReadResult::Interrupted) {
      g_interrupt.store(false);
      if (interactive) std::fputs("\n", stdout);
      if (input.pending() || editing || !line.empty()) {
        input.reset();
        editing = 0;
        chat.note("(input dropped)");
        interrupts = 0;
        continue;
      }
      if (++interrupts >= 2) break;
      chat.note("(Ctrl-C again or Ctrl-D to leave)");
      continue;
    }
    bool complete = false;
    if (r == ReadResult::Eof) {
      complete = input.finish();
      if (!complete) break;
    } else {
      interrupts = 0;
      if (!line.empty()) reader->remember(line);
      complete = input.push(line);
    }
    if (complete) {
      bool block = false;
      const std::string text = input.take(&block);
      const bool blank = text.find_first_not_of(" \t\r\n") == std::string::npos;
      auto cmd = block || blank
                     ? Result<ChatCommand>(ChatCommand{ChatCommandKind::Message, text, 0})
                     : parse_chat_input(text);
      bool edited = false;
      if (editing) {
        // The replacement is read as any input is ("//text" is "/text"); a command, or an
        // empty line, cancels the edit (the command then runs).
        const int64_t n = editing;
        editing = 0;
        edited = !blank && cmd.ok() && cmd->kind == ChatCommandKind::Message;
        if (edited)
          chat.edit(n, cmd->text);
        else
          chat.note("(edit cancelled)");
      }
      if (!blank && !edited) {
        if (!cmd.ok()) {
          chat.error(cmd.error_message());
        } else {
          switch (cmd->kind) {
            case ChatCommandKind::Message:
              chat.send(cmd->text);
              break;
            case ChatCommandKind::Regen:
              chat.regen();
              break;
            case ChatCommandKind::Edit:
              if (!cmd->text.empty()) {
                chat.edit(cmd->n, cmd->text);
              } else if (chat.can_edit(cmd->n)) {
                editing = cmd->n;
                chat.note("(the next input replaces message " + std::to_string(cmd->n) +
                          "; an empty one, a command or Ctrl-C cancels)");
                const std::string& old = chat.user_text(cmd->n);
                if (interactive && old.find('\n') == std::string::npos) reader->prefill(old);
              }
              break;
            case ChatCommandKind::Undo:
              chat.undo();
              break;
            case ChatCommandKind::System:
              chat.set_system(cmd->text);
              break;
            case ChatCommandKind::History:
              chat.history();
              break;
            case ChatCommandKind::Stats:
              chat.stats();
              break;
            case ChatCommandKind::Clear:
              chat.clear();
              break;
            case ChatCommandKind::Save:
              chat.save(cmd->text);
              break;
            case ChatCommandKind::Load:
              chat.load(cmd->text);
              break;
            case ChatCommandKind::Help:
              std::fputs(chat_commands_help().c_str(), stdout);
              std::fflush(stdout);
              break;
            case ChatCommandKind::Quit:
              return 0;
          }
        }
      }
    }
    if (r == ReadResult::Eof) break;
  }
  if (interactive) std::fputs("\n", stdout);
  return 0;
}

}  // namespace rw::app
