// The command-line option parser of the rewind subcommands. Each command declares its options
// once (CommandSpec: long name, optional short form and aliases, value placeholder, one-line
// description); the parser, `--help` and `rewind help COMMAND` all read that table, so help
// lists every option the parser takes. Accepted: `--name value`, `--name=value`, `-x value`,
// boolean `--flag`; `-h` / `--help` on every command. Unknown options, missing values, values
// given to flags, stray arguments and malformed numbers are errors that name the option, with
// "did you mean --x?" when a known option is close to what was typed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "rewind/base/result.h"

namespace rw::app {

struct OptSpec {
  OptSpec(std::string name_, std::string short_name_, std::string value_, std::string help_,
          std::vector<std::string> aliases_ = {}, bool repeatable_ = false)
      : name(std::move(name_)),
        short_name(std::move(short_name_)),
        value(std::move(value_)),
        help(std::move(help_)),
        aliases(std::move(aliases_)),
        repeatable(repeatable_) {}
  std::string name;                  // "--threads": the canonical name values are read by
  std::string short_name;            // "-t", or ""
  std::string value;                 // placeholder ("N", "DIR|FILE.gguf"); "" for a flag
  std::string help;                  // one line
  std::vector<std::string> aliases;  // other long spellings ("--temp" for --temperature)
  bool repeatable = false;           // every occurrence is kept (Args::all); else the last wins
  // Non-empty: the value may be left out (no argument follows, or the next one is an option),
  // and then is this (llama.cpp's bare -fa is "-fa on").
  std::string implicit_value;
};

struct CommandSpec {
  std::string name;     // "run"
  std::string summary;  // one line, for `rewind help`
  std::string usage;    // what follows "rewind NAME": "--prompt TEXT [options]"
  std::vector<OptSpec> options;
  std::string notes;  // text after the option list ("" for none)
};

// The option of `spec` that `arg` names (long name, short form or alias); nullptr if none.
const OptSpec* find_option(const CommandSpec& spec, const std::string& arg);

// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
// neighbours each cost 1.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `typed` if it is close enough to be a likely typo (distance at most
// 2, or a third of the length for long names; or `typed` is a prefix of exactly one candidate);
// "" otherwise.
std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates);

// The `--help` text of a command: usage, summary, every option with its description, notes.
std::string help_text(const CommandSpec& spec);

class Args {
 public:
  // Parses argv[0..argc) (the arguments after the subcommand) against `spec`.
  static Result<Args> parse(int argc, char** argv, const CommandSpec& spec);

  // All lookups take the canonical long name ("--threads", also when "-t" was typed).
  bool has(const std::string& name) const { return values_.count(name) || flags_.count(name); }
  std::string str(const std::string& name, const std::string& def = "") const;
  // Every value of a repeatable option, in the order given.
  std::vector<std::string> all(const std::string& name) const;
  Result<int64_t> int_(const std::string& name, int64_t def) const;
  Result<double> num(const std::string& name, double def) const;
  Result<std::vector<int64_t>> int_list(const std::string& name) const;  // "1,2,3"
  // Replaces an option's value (a command that re-runs itself with changed options).
  void set(const std::string& name, const std::string& value) { values_[name] = {value}; }
  void set_flag(const std::string& name) { flags_[name] = true; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, bool> flags_;
};

}  // namespace rw::app
