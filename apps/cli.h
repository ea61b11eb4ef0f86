// The rewind binary's commands and their options, in one table: the parser of each subcommand,
// `rewind COMMAND --help`, `rewind help [COMMAND]` and the tests read it (apps/args.h).
#pragma once

#include <string>
#include <vector>

#include "args.h"

namespace rw::app {

// What `rewind convert` writes without --type.
inline constexpr const char* kDefaultConvertType = "q8_0";

// Every subcommand, in the order `rewind help` lists them.
const std::vector<CommandSpec>& command_specs();
// The spec of `name`; nullptr when there is no such command.
const CommandSpec* command_spec(const std::string& name);
// `rewind help`: the commands with their summaries and how to get more.
std::string top_level_help();
// The error line for an unknown command, with "did you mean" when one is close.
std::string unknown_command_message(const std::string& typed);
// `rewind --version`: the version, the git commit it was built from, the kernel paths built in
// and the ones this CPU takes.
std::string version_text();

}  // namespace rw::app
