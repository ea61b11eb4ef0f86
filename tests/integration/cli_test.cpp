// The rewind binary's command-line conventions, run as a user would: `--version` / `version`
// (the commit and the kernel paths), `help [COMMAND]` and `COMMAND --help` (every option of the
// table in apps/cli.cpp), "did you mean" for a mistyped command or option with exit status 2 or
// 1, short flags accepted by a real run, and `convert` writing Q8_0 by default and saying so
// (an explicit --type still wins), progress lines on a terminal only.
#include "cli.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "rewind/io/gguf.h"
#include "test_util.h"

namespace rw {
namespace {

std::string rewind(const std::string& args, int* rc) {
  return test::run_command(std::string(REWIND_BINARY) + " " + args + " 2>&1", rc);
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST(Cli, Version) {
  int rc = -1;
  const std::string v = rewind("--version", &rc);
  EXPECT_EQ(rc, 0) << v;
  EXPECT_TRUE(std::regex_search(v, std::regex(R"(^rewind \d+\.\d+\.\d+ \(commit [0-9a-f]{7,}\))")))
      << v;
  EXPECT_TRUE(contains(v, std::string("(commit ") + REWIND_GIT_COMMIT + ")")) << v;
  EXPECT_TRUE(contains(v, "kernels built in: ")) << v;
  EXPECT_TRUE(std::regex_search(v, std::regex(R"(this CPU: f32/bf16 matmul (avx512|avx2|scalar))")))
      << v;
  EXPECT_EQ(v, app::version_text());
  EXPECT_EQ(rewind("version", &rc), v);
  EXPECT_EQ(rc, 0);
  rewind("version extra", &rc);
  EXPECT_EQ(rc, 1);
}

TEST(Cli, HelpListsCommandsAndEveryOption) {
  int rc = -1;
  const std::string top = rewind("help", &rc);
  EXPECT_EQ(rc, 0) << top;
  EXPECT_EQ(rewind("--help", &rc), top);
  EXPECT_EQ(rewind("-h", &rc), top);
  for (const app::CommandSpec& c : app::command_specs()) {
    EXPECT_TRUE(contains(top, "  " + c.name + " ")) << c.name;
    const std::string h = rewind("help " + c.name, &rc);
    EXPECT_EQ(rc, 0) << h;
    EXPECT_EQ(h, app::help_text(c));
    EXPECT_EQ(rewind(c.name + " --help", &rc), h);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(rewind(c.name + " -h", &rc), h);
    for (const app::OptSpec& o : c.options) {
      EXPECT_TRUE(contains(h, o.name)) << c.name << " " << o.name;
      EXPECT_TRUE(contains(h, o.help)) << c.name << " " << o.name;
    }
  }
  // No arguments: the list on stderr and status 2 (a usage error).
  EXPECT_EQ(rewind("", &rc), top);
  EXPECT_EQ(rc, 2);
}

TEST(Cli, DidYouMean) {
  int rc = -1;
  std::string out = rewind("serv --port 0", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_TRUE(contains(out, "rewind: unknown command 'serv'; did you mean serve?")) << out;
  out = rewind("help bnech", &rc);
  EXPECT_EQ(rc, 2);
  EXPECT_TRUE(contains(out, "did you mean bench?")) << out;
  out = rewind("run --prompt x --temprature 0.7", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out,
                       "unknown option '--temprature' for rewind run; did you mean "
                       "--temperature?"))
      << out;
  out = rewind("serve --log-fromat json", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "did you mean --log-format?")) << out;
}

TEST(Cli, ShortFlagsRunTheBuiltInModel) {
  int rc = -1;
  const std::string a = rewind("run -p 'And God said' -n 4 -t 1 --temp 0 --json", &rc);
  ASSERT_EQ(rc, 0) << a;
  const std::string b =
      rewind("run --prompt 'And God said' --n-predict 4 --threads 1 --temperature 0 --json", &rc);
  ASSERT_EQ(rc, 0) << b;
  auto tokens = [](const std::string& out) {
    const size_t at = out.find("\"tokens\":");
    return out.substr(at, out.find(']', at) - at);
  };
  EXPECT_EQ(tokens(a), tokens(b));
  EXPECT_TRUE(contains(a, "\"generated_tokens\":4")) << a;
}

// llama.cpp's penalty options change a greedy reply, keep it identical with speculation on,
// and refuse values out of range naming the option.
TEST(Cli, PenaltiesChangeGreedyRunAndComposeWithSpeculation) {
  int rc = -1;
  auto tokens = [](const std::string& out) {
    const size_t at = out.find("\"tokens\":");
    return out.substr(at, out.find(']', at) - at);
  };
  const std::string base = "run -p 'And God said, And God said' -n 16 -t 1 --ignore-eos --json";
  const std::string plain = rewind(base, &rc);
  ASSERT_EQ(rc, 0) << plain;
  const std::string pen_opts =
      " --repeat-penalty 1.8 --repeat-last-n 32 --presence-penalty 1 --frequency-penalty 0.5";
  const std::string pen = rewind(base + pen_opts, &rc);
  ASSERT_EQ(rc, 0) << pen;
  EXPECT_NE(tokens(pen), tokens(plain));
  const std::string spec = rewind(base + pen_opts + " --spec ngram", &rc);
  ASSERT_EQ(rc, 0) << spec;
  EXPECT_EQ(tokens(spec), tokens(pen));
  for (const std::string bad : {"--repeat-penalty 0", "--repeat-last-n -2", "--presence-penalty 3",
                                "--frequency-penalty x"}) {
    const std::string out = rewind("run -p x -n 1 " + bad, &rc);
    EXPECT_NE(rc, 0) << bad;
    EXPECT_TRUE(contains(out, bad.substr(0, bad.find(' ')))) << out;
  }
}

// A long prompt's prefill shows a progress line on a terminal (here a pseudo-terminal from
// util-linux's `script`), none in a pipe, none with -q; -q also drops the figures line.
TEST(Cli, PrefillProgressOnATerminalOnly) {
  std::string prompt;
  for (int i = 0; i < 400; ++i) prompt += "And God said unto Moses, ";
  const std::string run =
      std::string(REWIND_BINARY) + " run -p '" + prompt + "' -n 2 -t 1 --chunk 256";
  int rc = -1;
  const std::string tty =
      test::run_command("script -qec \"" + run + "\" /dev/null < /dev/null 2>&1", &rc);
  ASSERT_EQ(rc, 0) << tty;
  EXPECT_TRUE(contains(tty, "prefill: 100.0% of")) << tty;
  EXPECT_TRUE(contains(tty, "prompt tokens")) << tty;
  const std::string quiet =
      test::run_command("script -qec \"" + run + " -q\" /dev/null < /dev/null 2>&1", &rc);
  ASSERT_EQ(rc, 0) << quiet;
  EXPECT_FALSE(contains(quiet, "prefill:")) << quiet;
  EXPECT_FALSE(contains(quiet, "prompt tokens")) << quiet;
  const std::string pipe = test::run_command(run + " 2>&1 | cat", &rc);
  ASSERT_EQ(rc, 0) << pipe;
  EXPECT_FALSE(contains(pipe, "prefill:")) << pipe;
  EXPECT_TRUE(contains(pipe, "prompt tokens")) << pipe;
}

TEST(Cli, ConvertDefaultsToQ8_0AndSaysSo) {
  const std::string dir = test::made_scratch_dir("cli_convert");
  int rc = -1;
  std::string out = rewind("make-model --preset tiny --out " + dir + "/hf", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = rewind("convert --in " + dir + "/hf -o " + dir + "/default.gguf", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "no --type given; writing q8_0")) << out;
  EXPECT_TRUE(contains(out, "(q8_0, ")) << out;
  out = rewind("convert --in " + dir + "/hf --outfile " + dir + "/f32.gguf --outtype f32", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_FALSE(contains(out, "no --type given")) << out;
  auto count = [](const std::string& path, GgmlType t) {
    auto g = GgufFile::open(path);
    EXPECT_TRUE(g.ok()) << g.error_message();
    int n = 0;
    if (g.ok())
      for (const GgufTensor& x : g->tensors()) n += x.type == t;
    return n;
  };
  EXPECT_GT(count(dir + "/default.gguf", GgmlType::Q8_0), 0);
  EXPECT_EQ(count(dir + "/f32.gguf", GgmlType::Q8_0), 0);
  EXPECT_GT(count(dir + "/f32.gguf", GgmlType::F32), 0);
  out = rewind("convert --in " + dir + "/hf -o " + dir + "/bad.gguf --type q9", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--type must be")) << out;
  // llama.cpp's upper-case spelling names the same type.
  out = rewind("convert --in " + dir + "/hf -o " + dir + "/upper.gguf --outtype Q8_0", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(test::read_file(dir + "/upper.gguf") == test::read_file(dir + "/default.gguf"));
  // An output that is a directory, or one of the checkpoint's files, is refused before any
  // work, and nothing is left behind or replaced.
  const std::string shard = dir + "/hf/model.safetensors";
  const std::string before = test::read_file(shard);
  ASSERT_FALSE(before.empty());
  out = rewind("convert --in " + dir + "/hf -o " + shard, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is one of the checkpoint's files")) << out;
  EXPECT_TRUE(test::read_file(shard) == before);
  out = rewind("convert --in " + dir + "/hf -o " + dir, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is a directory")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
}

// The checkpoint's template goes into the GGUF file, chat_template.jinja before the
// tokenizer_config.json entry (as transformers and the HF loader read them), and
// --chat-template-file replaces it; a template that does not parse is refused before writing.
TEST(Cli, ConvertWritesTheTemplateTheModelRendersWith) {
  const std::string dir = test::made_scratch_dir("cli_convert_template");
  int rc = -1;
  std::string out = rewind("make-model --preset tiny --out " + dir + "/hf", &rc);
  ASSERT_EQ(rc, 0) << out;
  auto stored = [](const std::string& path) {
    auto g = GgufFile::open(path);
    EXPECT_TRUE(g.ok()) << g.error_message();
    return g.ok() ? g->get_string_or("tokenizer.chat_template", "").value() : std::string();
  };
  const std::string jinja = "{{ messages[0].content }}(from the .jinja file)";
  test::write_file(dir + "/hf/chat_template.jinja", jinja);
  out = rewind("convert -q --in " + dir + "/hf -o " + dir + "/a.gguf --type f32", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(stored(dir + "/a.gguf"), jinja);
  const std::string given = "{{ messages[0].content }}(given)";
  test::write_file(dir + "/given.jinja", given);
  out = rewind("convert -q --in " + dir + "/hf -o " + dir + "/b.gguf --type f32 " +
                   "--chat-template-file " + dir + "/given.jinja",
               &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(stored(dir + "/b.gguf"), given);
  test::write_file(dir + "/bad.jinja", "{% if %}");
  out = rewind("convert -q --in " + dir + "/hf -o " + dir + "/c.gguf --chat-template-file " + dir +
                   "/bad.jinja",
               &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--chat-template-file " + dir + "/bad.jinja: chat template")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/c.gguf"));
}

// What a user coming from llama.cpp mistypes gets a message that says what to do instead: a
// GGUF given to convert (no requantising), --type on an HF make-model, a directory that is no
// model, a draft that does not exist (named as the draft).
// llama.cpp's "from the model": run -n -1 generates up to the model's context length, chat -c 0
// takes it as its context (serve -c 0: ServerLimits.LlamaServerCommandLine); one too short is
// refused, naming the option.
TEST(Cli, ContextFromTheModel) {
  const std::string dir = test::made_scratch_dir("cli_model_ctx");
  int rc = -1;
  std::string out = rewind("make-model --preset tiny --out " + dir + "/hf", &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string cfg = dir + "/hf/config.json";
  std::string text = test::read_file(cfg);
  const std::regex mpe("\"max_position_embeddings\": *[0-9]+");
  ASSERT_TRUE(std::regex_search(text, mpe)) << text;
  test::write_file(cfg, std::regex_replace(text, mpe, "\"max_position_embeddings\": 24"));
  out = rewind("run -m " + dir + "/hf -p 'And God said' -n -1 -t 1 --ignore-eos --json -q", &rc);
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("\"prompt_tokens\":([0-9]+)"))) << out;
  const int prompt = std::stoi(m[1]);
  EXPECT_TRUE(contains(out, "\"generated_tokens\":" + std::to_string(24 - prompt))) << out;
  out = rewind("chat -m " + dir + "/hf -c 0 -n 2 -t 1 < /dev/null", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "context 24 tokens")) << out;
  // A length too short to hold a token after the prompt: refused, naming the option.
  test::write_file(cfg, std::regex_replace(text, mpe, "\"max_position_embeddings\": 1"));
  out = rewind("run -m " + dir + "/hf -p x -n -1 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "-n -1 takes the model's context length")) << out;
  out = rewind("run -p x -n -2 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "-n/--n-predict must be >= 1, or -1")) << out;
  // -c caps the prompt and the reply together (0: the model's), and -f reads the prompt.
  test::write_file(cfg, std::regex_replace(text, mpe, "\"max_position_embeddings\": 24"));
  test::write_file(dir + "/prompt.txt", "And God said");
  out = rewind("run -m " + dir + "/hf -f " + dir + "/prompt.txt -c " + std::to_string(prompt + 3) +
                   " -n 50 -t 1 --ignore-eos --json -q",
               &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "\"prompt_tokens\":" + std::to_string(prompt))) << out;
  EXPECT_TRUE(contains(out, "\"generated_tokens\":3")) << out;
  out = rewind("run -m " + dir + "/hf -f " + dir +
                   "/prompt.txt -c 0 -n 50 -t 1 --ignore-eos "
                   "--json -q",
               &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "\"generated_tokens\":" + std::to_string(24 - prompt))) << out;
  out =
      rewind("run -m " + dir + "/hf -p 'And God said' -c " + std::to_string(prompt) + " -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "fills --ctx-size " + std::to_string(prompt))) << out;
  out = rewind("run -p x -f " + dir + "/prompt.txt -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "-p/--prompt and -f/--file both give the prompt")) << out;
  out = rewind("run -f " + dir + "/none.txt -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "-f/--file: cannot read " + dir + "/none.txt")) << out;
  out = rewind("run -p x -c 5000000000 -n -1 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "-c/--ctx-size must be < 2^31")) << out;
  out = rewind("run -p x -c 1 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "-c/--ctx-size must be >= 2, or 0")) << out;
}

TEST(Cli, MistakesSayWhatToDo) {
  const std::string dir = test::made_scratch_dir("cli_mistakes");
  int rc = -1;
  std::string out = rewind("make-model --preset tiny --type q8_0 --out " + dir + "/hf", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--type sets a GGUF file's weight type: add --format gguf")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/hf"));
  out = rewind("make-model --preset tiny --format gguf --type q8_0 --out " + dir + "/m.gguf", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = rewind("convert --in " + dir + "/m.gguf -o " + dir + "/m2.gguf --type q4_k_m", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is a file: convert reads a Hugging Face directory")) << out;
  out = rewind("run -m " + dir + " -p x -n 1 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is a directory without config.json")) << out;
  out = rewind("run -p x -n 1 -t 1 --spec draft:" + dir + "/nosuch", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--spec draft:" + dir + "/nosuch: ")) << out;
  // llama-server's -md is --spec draft:, and conflicts with another --spec.
  out = rewind("run -p x -n 1 -t 1 -md " + dir + "/nosuch", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--spec draft:" + dir + "/nosuch: ")) << out;
  out = rewind("run -p x -n 1 -t 1 --spec ngram --model-draft " + dir + "/nosuch", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--model-draft and --spec ngram both choose the speculation")) << out;
  out = rewind("run -p x -n 1 -t 1 --spec ngram --draft-max 99", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "--draft-k must be in [1, 16]")) << out;
  // A file of an HF model where its directory is meant; an HF model onto an existing file.
  out = rewind("make-model --preset tiny --out " + dir + "/hf", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = rewind("run -m " + dir + "/hf/config.json -p x -n 1 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(
      contains(out, "is a file of a Hugging Face model: pass its directory (" + dir + "/hf)"))
      << out;
  out = rewind("make-model --preset tiny --out " + dir + "/m.gguf", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is a file: an HF model is a directory")) << out;
  // convert: the input checked before the type note; GGUF written under another format's name
  // refused, under an odd name noted.
  out = rewind("convert --in " + dir + "/nosuch -o " + dir + "/x.gguf", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "no such directory")) << out;
  EXPECT_FALSE(contains(out, "no --type given")) << out;
  out = rewind("convert --in " + dir + " -o " + dir + "/x.gguf", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is a directory without config.json")) << out;
  out = rewind("convert --in " + dir + "/hf -o " + dir + "/x.safetensors", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "convert writes a GGUF file; name it .gguf")) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.safetensors"));
  out = rewind("convert --in " + dir + "/hf -o " + dir + "/x.q8 --type q8_0", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "is a GGUF file, without the .gguf name")) << out;
  out = rewind("run -m nosuch-model-xyz -p x -n 1 -t 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(out, "is neither a file, a directory nor a model in the store")) << out;
}

}  // namespace
}  // namespace rw
