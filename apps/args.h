// Minimal command-line option parser for the rewind subcommands: `--name value`, `-x value`
// and boolean `--flag`. Unknown options, missing values and malformed numbers are errors that
// name the option; nothing is silently ignored.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw::app {

class Args {
 public:
  // value_opts take a value; flag_opts do not. Aliases like "-n" are listed as their own names.
  static Result<Args> parse(int argc, char** argv, const std::set<std::string>& value_opts,
                            const std::set<std::string>& flag_opts);

  bool has(const std::string& name) const { return values_.count(name) || flags_.count(name); }
  std::string str(const std::string& name, const std::string& def = "") const;
  Result<int64_t> int_(const std::string& name, int64_t def) const;
  Result<double> num(const std::string& name, double def) const;
  Result<std::vector<int64_t>> int_list(const std::string& name) const;  // "1,2,3"

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
};

}  // namespace rw::app
