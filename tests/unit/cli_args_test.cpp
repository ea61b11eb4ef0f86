// The rewind binary's option parser and command table (apps/args.h, apps/cli.h): short forms map
// to their long names, "did you mean" for mistyped options and commands, help lists every
// option, malformed command lines are errors that say what is wrong.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "args.h"
#include "cli.h"

namespace rw::app {
namespace {

// Parses `words` as the arguments of `command`.
Result<Args> parse(const std::string& command, std::vector<std::string> words) {
  const CommandSpec* spec = command_spec(command);
  EXPECT_NE(spec, nullptr) << command;
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return Args::parse(static_cast<int>(argv.size()), argv.data(), *spec);
}

std::string error_of(const std::string& command, std::vector<std::string> words) {
  auto r = parse(command, std::move(words));
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error_message();
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST(CliArgs, ShortFormsReadAsTheirLongNames) {
  auto r = parse("run", {"-m", "dir", "-p", "In the beginning", "-n", "7", "-t", "2", "-s", "9",
                         "--temp", "0.5", "-h"});
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->str("--model"), "dir");
  EXPECT_EQ(r->str("--prompt"), "In the beginning");
  EXPECT_EQ(r->int_("--n-predict", 0).value(), 7);
  EXPECT_EQ(r->int_("--threads", 0).value(), 2);
  EXPECT_EQ(r->int_("--seed", 0).value(), 9);
  EXPECT_DOUBLE_EQ(r->num("--temperature", 0).value(), 0.5);
  EXPECT_TRUE(r->has("--help"));
  EXPECT_FALSE(r->has("-m"));  // values are kept under the long name only

  auto s = parse("serve", {"-c", "4096", "-np", "2", "-a", "x", "-q"});
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(s->int_("--ctx-size", 0).value(), 4096);
  EXPECT_EQ(s->int_("--parallel", 0).value(), 2);
  EXPECT_EQ(s->all("--alias"), std::vector<std::string>{"x"});
  EXPECT_TRUE(s->has("--quiet"));

  // bench follows llama-bench: -p is the prompt's length, -n the tokens to decode.
  auto b = parse("bench", {"-p", "64", "-n", "16"});
  ASSERT_TRUE(b.ok()) << b.error_message();
  EXPECT_EQ(b->int_("--n-prompt", 0).value(), 64);
  EXPECT_EQ(b->int_("--n-gen", 0).value(), 16);
}

// llama.cpp's options a CPU engine has no use for parse on every command that runs a model;
// -fa may stand alone (older llama.cpp), then it means on.
TEST(CliArgs, LlamaCppCompatOptions) {
  for (const char* cmd : {"run", "chat", "serve", "bench", "logits"}) {
    auto r = parse(cmd, {"--jinja", "-ngl", "all", "-fa"});
    ASSERT_TRUE(r.ok()) << cmd << ": " << r.error_message();
    EXPECT_TRUE(r->has("--jinja"));
    EXPECT_EQ(r->str("--n-gpu-layers"), "all");
    EXPECT_EQ(r->str("--flash-attn"), "on") << cmd;
  }
  auto r = parse("serve", {"-fa", "-c", "64", "--flash-attn=off"});
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->str("--flash-attn"), "off");
  EXPECT_EQ(r->int_("--ctx-size", 0).value(), 64);
  auto v = parse("serve", {"-fa", "auto", "-b", "256"});
  ASSERT_TRUE(v.ok()) << v.error_message();
  EXPECT_EQ(v->str("--flash-attn"), "auto");
  EXPECT_EQ(v->int_("--chunk", 0).value(), 256);
}

// llama.cpp's short flags exist on every command that has their long form, and -h everywhere.
TEST(CliArgs, ShortFlagsWhereverTheLongFormExists) {
  const std::vector<std::pair<std::string, std::string>> expected = {{"--model", "-m"},
                                                                     {"--ctx-size", "-c"},
                                                                     {"--prompt", "-p"},
                                                                     {"--n-predict", "-n"},
                                                                     {"--threads", "-t"}};
  for (const CommandSpec& c : command_specs()) {
    for (const auto& [long_name, short_name] : expected) {
      const OptSpec* o = find_option(c, long_name);
      if (!o) continue;
      EXPECT_EQ(o->short_name, short_name) << c.name << " " << long_name;
    }
    const OptSpec* h = find_option(c, "-h");
    ASSERT_NE(h, nullptr) << c.name;
    EXPECT_EQ(h->name, "--help");
  }
  for (const char* with_model : {"run", "serve", "bench", "cache-bench", "spec-bench", "logits"})
    EXPECT_NE(find_option(*command_spec(with_model), "-m"), nullptr) << with_model;
  EXPECT_NE(find_option(*command_spec("serve"), "-c"), nullptr);
}

TEST(CliArgs, NamesAreUniqueInEachCommand) {
  for (const CommandSpec& c : command_specs()) {
    std::set<std::string> seen = {"--help", "-h"};
    for (const OptSpec& o : c.options) {
      EXPECT_TRUE(seen.insert(o.name).second) << c.name << " " << o.name;
      if (!o.short_name.empty()) {
        EXPECT_TRUE(seen.insert(o.short_name).second) << o.short_name;
      }
      for (const std::string& a : o.aliases) EXPECT_TRUE(seen.insert(a).second) << a;
    }
  }
}

TEST(CliArgs, EqualsFormAndLastValueWins) {
  auto r = parse("run", {"--threads=3", "--prompt=a=b", "-t", "4", "--threads", "5"});
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->int_("--threads", 0).value(), 5);
  EXPECT_EQ(r->str("--prompt"), "a=b");
  // A repeatable option keeps every value in order.
  auto s = parse("serve", {"--alias", "a", "-a", "b,c", "--alias=d"});
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(s->all("--alias"), (std::vector<std::string>{"a", "b,c", "d"}));
  // Negative numbers are values, not options.
  auto n = parse("run", {"--seed", "-1"});
  ASSERT_TRUE(n.ok()) << n.error_message();
  EXPECT_EQ(n->int_("--seed", 0).value(), -1);
}

TEST(CliArgs, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("temperature", "temprature"), 1u);
  EXPECT_EQ(edit_distance("serve", "sevre"), 1u);  // a swap of neighbours costs 1
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("bench", "bench"), 0u);
}

TEST(CliArgs, DidYouMeanForMistypedOptions) {
  std::string e = error_of("run", {"--temprature", "0.7"});
  EXPECT_TRUE(contains(e, "unknown option '--temprature'")) << e;
  EXPECT_TRUE(contains(e, "did you mean --temperature?")) << e;
  EXPECT_TRUE(contains(e, "rewind run --help")) << e;
  e = error_of("serve", {"--ctx", "100"});  // a prefix of one option
  EXPECT_TRUE(contains(e, "did you mean --ctx-size?")) << e;
  e = error_of("serve", {"--aliass", "x"});
  EXPECT_TRUE(contains(e, "did you mean --alias?")) << e;
  e = error_of("run", {"-temperature", "1"});  // one dash
  EXPECT_TRUE(contains(e, "did you mean --temperature?")) << e;
  e = error_of("run", {"--zzzzzzzz"});  // nothing close: no guess
  EXPECT_TRUE(contains(e, "unknown option '--zzzzzzzz'")) << e;
  EXPECT_FALSE(contains(e, "did you mean")) << e;
  EXPECT_EQ(did_you_mean("--x", {"--max-queue", "--ctx-size"}), "");
}

TEST(CliArgs, DidYouMeanForMistypedCommands) {
  EXPECT_TRUE(contains(unknown_command_message("serv"), "did you mean serve?"));
  EXPECT_TRUE(contains(unknown_command_message("bnech"), "did you mean bench?"));
  EXPECT_TRUE(contains(unknown_command_message("convet"), "did you mean convert?"));
  EXPECT_TRUE(contains(unknown_command_message("cache-bnch"), "did you mean cache-bench?"));
  EXPECT_TRUE(contains(unknown_command_message("hlep"), "did you mean help?"));
  const std::string none = unknown_command_message("xyzzy");
  EXPECT_TRUE(contains(none, "unknown command 'xyzzy'")) << none;
  EXPECT_FALSE(contains(none, "did you mean")) << none;
}

TEST(CliArgs, MalformedCommandLinesAreClearErrors) {
  std::string e = error_of("run", {"--prompt"});
  EXPECT_TRUE(contains(e, "option --prompt needs a value (TEXT)")) << e;
  e = error_of("run", {"--model", "--prompt", "hi"});  // a forgotten value
  EXPECT_TRUE(contains(e, "--model needs a value")) << e;
  EXPECT_TRUE(contains(e, "got option --prompt")) << e;
  e = error_of("run", {"--json=yes"});
  EXPECT_TRUE(contains(e, "option --json takes no value")) << e;
  e = error_of("run", {"hello"});
  EXPECT_TRUE(contains(e, "unexpected argument 'hello' for rewind run")) << e;
  auto r = parse("run", {"-n", "ten"});
  ASSERT_TRUE(r.ok());
  auto n = r->int_("--n-predict", 32);
  ASSERT_FALSE(n.ok());
  EXPECT_TRUE(contains(n.error_message(), "'ten' is not an integer")) << n.error_message();
  auto x = parse("run", {"--top-p", "0.9x"});
  ASSERT_TRUE(x.ok());
  EXPECT_FALSE(x->num("--top-p", 1).ok());
}

// Every option of every command is in its help, with a one-line description.
TEST(CliArgs, HelpListsEveryOption) {
  ASSERT_GE(command_specs().size(), 8u);
  const std::string top = top_level_help();
  for (const CommandSpec& c : command_specs()) {
    EXPECT_TRUE(contains(top, "  " + c.name + " ")) << c.name;
    EXPECT_FALSE(c.summary.empty()) << c.name;
    const std::string h = help_text(c);
    EXPECT_EQ(h.rfind("usage: rewind " + c.name, 0), 0u) << h;
    EXPECT_TRUE(contains(h, "-h, --help")) << c.name;
    for (const OptSpec& o : c.options) {
      EXPECT_FALSE(o.help.empty()) << c.name << " " << o.name;
      EXPECT_EQ(o.help.find('\n'), std::string::npos) << c.name << " " << o.name;
      // The option's line: short form, long name, aliases, placeholder, description.
      std::string line = o.short_name.empty() ? "" : o.short_name + ", ";
      line += o.name;
      for (const std::string& a : o.aliases) line += ", " + a;
      if (!o.value.empty()) line += " " + o.value;
      const size_t at = h.find("  " + line, h.find("\noptions:\n"));
      ASSERT_NE(at, std::string::npos) << c.name << ": " << line << "\n" << h;
      const std::string rest = h.substr(at, h.find('\n', at) - at);
      EXPECT_TRUE(contains(rest, o.help)) << rest;
    }
  }
}

TEST(CliArgs, ConvertDefaultsToQ8_0) {
  EXPECT_STREQ(kDefaultConvertType, "q8_0");
  const std::string h = help_text(*command_spec("convert"));
  EXPECT_TRUE(contains(h, "default q8_0")) << h;
}

TEST(CliArgs, VersionNamesCommitAndKernels) {
  const std::string v = version_text();
  EXPECT_EQ(v.rfind("rewind ", 0), 0u) << v;
  EXPECT_TRUE(contains(v, std::string("(commit ") + REWIND_GIT_COMMIT + ")")) << v;
  EXPECT_TRUE(contains(v, "kernels built in:")) << v;
  EXPECT_TRUE(contains(v, "this CPU: f32/bf16 matmul ")) << v;
  EXPECT_TRUE(contains(v, "int8 dot ")) << v;
}

}  // namespace
}  // namespace rw::app
