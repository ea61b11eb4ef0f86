// `rewind pull REPO[:FILE]`: downloads a checkpoint or one GGUF file from the Hugging Face Hub into
// the local model store (hub/download.h, hub/store.h); `rewind models` (or `pull --list`) lists
// the store; model_path_or_stored lets every --model name a pulled model. docs/MODELS.md.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "rewind/hub/download.h"
#include "rewind/hub/store.h"

namespace rw::app {

namespace {

int terminal_columns() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40) return w.ws_col;
  return 80;
}

std::string clock_text(double s) {
  if (!(s >= 0) || s > 359999) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// "\r[2/5] name  45% [#####.....] 1.23 GB / 2.70 GB  45.6 MB/s  ETA 0:32" on a terminal; the
// bar goes first, then the name shrinks, when the line would not fit.
void draw(const hub::FileProgress& p) {
  const double frac = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1;
  const double rate = p.seconds > 0 ? static_cast<double>(p.done - p.resumed_from) / p.seconds : 0;
  const std::string head = "[" + std::to_string(p.index + 1) + "/" + std::to_string(p.count) + "] ";
  std::string tail, bar;
  if (p.finished) {
    tail = hub::format_bytes(p.total) + "  done";
  } else {
    const int width = 20;
    const int fill = static_cast<int>(frac * width);
    bar = "[" + std::string(fill, '#') + std::string(width - fill, '.') + "] ";
    tail = hub::format_bytes(p.done) + " / " + hub::format_bytes(p.total) + "  " +
           (rate > 0 ? hub::format_bytes(static_cast<uint64_t>(rate)) + "/s" : "--") + "  ETA " +
           clock_text(rate > 0 ? static_cast<double>(p.total - p.done) / rate : -1);
    tail = std::to_string(static_cast<int>(frac * 100)) + "% " + "@" + tail;
  }
  const int cols = terminal_columns() - 1;
  auto room = [&] { return cols - static_cast<int>(head.size() + tail.size() + 1); };
  const size_t at = tail.find('@');
  if (at != std::string::npos) {
    tail.replace(at, 1, bar);
    if (room() < std::min<int>(24, static_cast<int>(p.path.size())))
      tail.erase(at, bar.size());  // no room for the bar
  }
  std::string name = p.path + " ";
  if (room() < static_cast<int>(name.size()))
    name = room() > 5 ? "..." + name.substr(name.size() - static_cast<size_t>(room() - 3)) : "";
  std::fprintf(stderr, "\r%s%s %s\x1b[K%s", head.c_str(), name.c_str(), tail.c_str(),
               p.finished ? "\n" : "");
  std::fflush(stderr);
}

int list_models() {
  auto root = hub::default_store_root();
  if (!root.ok()) return fail(root.error_message());
  auto models = hub::list_stored(root.value());
  if (!models.ok()) return fail(models.error_message());
  if (models.value().empty()) {
    std::printf("no models in %s/models; pull one with: rewind pull ORG/NAME\n",
                root.value().c_str());
    return 0;
  }
  size_t w = 4;
  for (const auto& m : models.value()) w = std::max(w, m.name.size());
  std::printf("%-*s  %9s  %s\n", static_cast<int>(w), "NAME", "SIZE", "PATH");
  for (const auto& m : models.value())
    std::printf("%-*s  %9s  %s%s\n", static_cast<int>(w), m.name.c_str(),
                hub::format_bytes(m.bytes).c_str(), m.path.c_str(),
                m.complete ? "" : "  [incomplete: pull again]");
  return 0;
}

}  // namespace

Result<std::string> model_path_or_stored(const std::string& given) {
  std::error_code ec;
  if (std::filesystem::is_directory(given, ec) &&
      !std::filesystem::exists(std::filesystem::path(given) / "config.json", ec))
    return make_error("'" + given +
                      "' is a directory without config.json, so not a Hugging Face model (a "
                      "model is such a directory, a .gguf file or a pulled name)");
  // A file of a Hugging Face directory (config.json, a shard): the model is the directory.
  if (std::filesystem::is_regular_file(given, ec)) {
    const std::filesystem::path p(given);
    const std::string ext = lower_extension(given);
    if (ext == ".json" || ext == ".safetensors" || ext == ".jinja") {
      std::string m = "'";
      m.append(given).append("' is a file of a Hugging Face model: pass its directory (");
      m.append(p.has_parent_path() ? p.parent_path().string() : std::string("."));
      return make_error(m.append("), or a .gguf file"));
    }
  }
  if (std::filesystem::exists(given, ec)) return given;
  REWIND_TRY(std::string root, hub::default_store_root());
  return hub::find_stored(root, given);
}

int cmd_models(int argc, char** argv) {
  auto args = parse_args("models", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("models");
  return list_models();
}

int cmd_pull(int argc, char** argv) {
  std::vector<char*> rest;
  std::string repo_arg;
  for (int i = 0; i < argc; ++i) {
    const bool takes_value = !std::strcmp(argv[i], "--revision");
    if (argv[i][0] != '-' && repo_arg.empty()) {
      repo_arg = argv[i];
      continue;
    }
    rest.push_back(argv[i]);
    if (takes_value && i + 1 < argc) rest.push_back(argv[++i]);
  }
  auto args = parse_args("pull", static_cast<int>(rest.size()), rest.data());
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("pull");
  if (args->has("--list")) return list_models();
  if (repo_arg.empty()) {
    std::fputs(help_text(*command_spec("pull")).c_str(), stderr);
    return 2;
  }
  auto ref = hub::parse_repo_ref(repo_arg);
  if (!ref.ok()) return fail(ref.error_message());
  auto root = hub::default_store_root();
  if (!root.ok()) return fail(root.error_message());

  const bool quiet = args->has("--quiet");
  const bool bar = !quiet && isatty(STDERR_FILENO);
  hub::PullOptions opt;
  if (const char* e = std::getenv("HF_ENDPOINT"); e && *e) opt.endpoint = e;
  if (const char* t = std::getenv("HF_TOKEN"); t && *t) opt.token = t;
  opt.revision = args->str("--revision", "main");
  if (opt.revision.empty()) return fail("--revision needs a branch, tag or commit");
  opt.store_root = root.value();
  bool mid_line = false;  // a bar is drawn and its line not ended
  if (!quiet)
    opt.note = [&](const std::string& s) {
      std::fprintf(stderr, "%s%s\n", mid_line ? "\r\x1b[K" : "", s.c_str());
      mid_line = false;
    };
  double last_draw = 0;
  if (bar)
    opt.progress = [&](const hub::FileProgress& p) {
      const double t = now_seconds();
      if (!p.finished && t - last_draw < 0.25) return;
      last_draw = t;
      draw(p);
      mid_line = !p.finished;
    };
  const double t0 = now_seconds();
  auto r = hub::pull(ref.value(), opt);
  if (!r.ok()) {
    if (mid_line) std::fprintf(stderr, "\n");
    return fail(r.error_message());
  }
  const auto& res = r.value();
  if (!quiet)
    std::fprintf(
        stderr, "pulled %s (%s, %s fetched in %.1f s); run it with: rewind run --model %s\n",
        res.name.c_str(), hub::format_bytes(res.bytes_total).c_str(),
        hub::format_bytes(res.bytes_fetched).c_str(), now_seconds() - t0, res.name.c_str());
  std::printf("%s\n", res.path.c_str());
  return 0;
}

}  // namespace rw::app
