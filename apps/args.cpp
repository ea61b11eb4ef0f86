#include "args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace rw::app {

namespace {

const OptSpec kHelpOpt{"--help", "-h", "", "show this help and exit", {}, false};

std::string strip_dashes(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && i < 2 && s[i] == '-') ++i;
  return s.substr(i);
}

bool matches(const OptSpec& o, const std::string& arg) {
  if (arg == o.name || (!o.short_name.empty() && arg == o.short_name)) return true;
  return std::find(o.aliases.begin(), o.aliases.end(), arg) != o.aliases.end();
}

}  // namespace

const OptSpec* find_option(const CommandSpec& spec, const std::string& arg) {
  for (const OptSpec& o : spec.options)
    if (matches(o, arg)) return &o;
  return matches(kHelpOpt, arg) ? &kHelpOpt : nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between a[0, i) and b[0, j), kept as three rolling rows.
  std::vector<size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2.swap(prev);
    prev.swap(cur);
  }
  return prev[m];
}

std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates) {
  const std::string t = strip_dashes(typed);
  if (t.empty()) return "";
  const size_t limit = t.size() < 4 ? 0 : t.size() < 7 ? 1 : std::max<size_t>(2, t.size() / 4);
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(t, strip_dashes(c));
    if (d < best_d) best_d = d, best = c;
  }
  if (!best.empty()) return best;
  // A prefix of one name only ("--ctx" for --ctx-size).
  if (t.size() < 3) return "";
  std::string only;
  for (const std::string& c : candidates) {
    const std::string s = strip_dashes(c);
    if (s.size() > t.size() && s.compare(0, t.size(), t) == 0) {
      if (!only.empty() && only != c) return "";
      only = c;
    }
  }
  return only;
}

std::string help_text(const CommandSpec& spec) {
  std::string out = "usage: rewind " + spec.name + (spec.usage.empty() ? "" : " " + spec.usage) +
                    "\n" + spec.summary + "\n\noptions:\n";
  std::vector<const OptSpec*> all;
  for (const OptSpec& o : spec.options) all.push_back(&o);
  all.push_back(&kHelpOpt);
  auto left = [](const OptSpec& o) {
    std::string s = o.short_name.empty() ? "    " : o.short_name + ", ";
    if (s.size() < 4) s.resize(4, ' ');
    s += o.name;
    for (const std::string& a : o.aliases) s += ", " + a;
    if (!o.value.empty()) s += " " + o.value;
    return s;
  };
  size_t width = 0;
  for (const OptSpec* o : all) width = std::max(width, std::min<size_t>(left(*o).size(), 30));
  for (const OptSpec* o : all) {
    std::string l = left(*o);
    if (l.size() < width) l.resize(width, ' ');
    out += "  " + l + "  " + o->help + (o->repeatable ? " (repeatable)" : "") + "\n";
  }
  if (!spec.notes.empty()) out += "\n" + spec.notes + (spec.notes.back() == '\n' ? "" : "\n");
  return out;
}

Result<Args> Args::parse(int argc, char** argv, const CommandSpec& spec) {
  Args a;
  const std::string where = "rewind " + spec.name;
  for (int i = 0; i < argc; ++i) {
    std::string s = argv[i];
    std::string value;
    bool inline_value = false;
    if (s.rfind("--", 0) == 0) {
      if (const size_t eq = s.find('='); eq != std::string::npos) {
        value = s.substr(eq + 1);
        s = s.substr(0, eq);
        inline_value = true;
      }
    }
    const OptSpec* o = s.size() > 1 && s[0] == '-' ? find_option(spec, s) : nullptr;
    if (!o) {
      if (s.empty() || s[0] != '-' || s == "-")
        return make_error("unexpected argument '" + s + "' for " + where +
                          " (every argument is an option; see " + where + " --help)");
      std::vector<std::string> names;
      for (const OptSpec& c : spec.options) {
        names.push_back(c.name);
        for (const std::string& al : c.aliases) names.push_back(al);
      }
      names.push_back(kHelpOpt.name);
      const std::string hint = did_you_mean(s, names);
      return make_error("unknown option '" + s + "' for " + where +
                        (hint.empty() ? "" : "; did you mean " + hint + "?") + " (see " + where +
                        " --help)");
    }
    if (o->value.empty()) {
      if (inline_value) return make_error("option " + o->name + " takes no value");
      a.flags_[o->name] = true;
      continue;
    }
    if (!inline_value && !o->implicit_value.empty() && (i + 1 >= argc || argv[i + 1][0] == '-')) {
      value = o->implicit_value;
    } else if (!inline_value) {
      if (i + 1 >= argc) return make_error("option " + s + " needs a value (" + o->value + ")");
      value = argv[++i];
      // "--model --prompt x": a forgotten value, not a model named "--prompt".
      if (value.rfind("--", 0) == 0 && find_option(spec, value.substr(0, value.find('='))))
        return make_error("option " + s + " needs a value (" + o->value + "), got option " + value);
    }
    std::vector<std::string>& v = a.values_[o->name];
    if (!o->repeatable) v.clear();
    v.push_back(value);
  }
  return a;
}

std::string Args::str(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? def : it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

Result<int64_t> Args::int_(const std::string& name, int64_t def) const {
  if (!values_.count(name)) return def;
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || end == s.c_str() || *end)
    return make_error("option " + name + ": '" + s + "' is not an integer");
  return static_cast<int64_t>(v);
}

Result<double> Args::num(const std::string& name, double def) const {
  if (!values_.count(name)) return def;
  const std::string s = str(name);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno || end == s.c_str() || *end)
    return make_error("option " + name + ": '" + s + "' is not a number");
  return v;
}

Result<std::vector<int64_t>> Args::int_list(const std::string& name) const {
  std::vector<int64_t> out;
  if (!values_.count(name)) return out;
  const std::string s = str(name);
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
