#include "args.h"

#include <cerrno>
#include <cstdlib>

namespace rw::app {

Result<Args> Args::parse(int argc, char** argv, const std::set<std::string>& value_opts,
                         const std::set<std::string>& flag_opts) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string s = argv[i];
    if (value_opts.count(s)) {
      if (i + 1 >= argc) return make_error("option " + s + " needs a value");
      a.values_[s] = argv[++i];
    } else if (flag_opts.count(s)) {
      a.flags_.insert(s);
    } else {
      return make_error("unknown option '" + s + "' (see --help)");
    }
  }
  return a;
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

Result<int64_t> Args::int_(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno || end == it->second.c_str() || *end)
    return make_error("option " + name + ": '" + it->second + "' is not an integer");
  return static_cast<int64_t>(v);
}

Result<double> Args::num(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (errno || end == it->second.c_str() || *end)
    return make_error("option " + name + ": '" + it->second + "' is not a number");
  return v;
}

Result<std::vector<int64_t>> Args::int_list(const std::string& name) const {
  std::vector<int64_t> out;
  auto it = values_.find(name);
  if (it == values_.end()) return out;
  const std::string& s = it->second;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string part = s.substr(i, j - i);
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || errno || *end)
      return make_error("option " + name + ": '" + part + "' is not an integer");
    out.push_back(v);
    i = j + 1;
  }
  return out;
}

}  // namespace rw::app
