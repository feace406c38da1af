// FlagParser: see flags.h.
#include "base/flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace gpt {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

template <typename Int>
Int parse_integer(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    // Accept integral floating-point spellings such as 1e6 (DeepSpeed configs use them).
    double d = 0;
    std::istringstream in(text);
    if ((in >> d) && in.eof() && std::floor(d) == d && std::fabs(d) < 9e18) {
      value = static_cast<int64_t>(d);
    } else {
      throw UsageError(flag + " expects an integer, got '" + text + "'");
    }
  }
  if (value < min || value > max) {
    throw UsageError(flag + " is " + text + ", outside its range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return static_cast<Int>(value);
}

std::string format_double(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

FlagParser::FlagParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagParser::group(const std::string& heading) {
  current_group_ = heading;
}

FlagParser::Flag& FlagParser::add(const std::string& name, const std::string& help, std::string value_hint,
                                  std::string default_text, bool takes_value,
                                  std::function<void(const std::string&)> set) {
  Flag flag;
  flag.name = name;
  flag.help = help;
  flag.group = current_group_;
  flag.value_hint = std::move(value_hint);
  flag.default_text = std::move(default_text);
  flag.takes_value = takes_value;
  flag.set = std::move(set);
  std::erase_if(flags_, [&](const Flag& f) { return f.name == name; });
  flags_.push_back(std::move(flag));
  return flags_.back();
}

void FlagParser::add_int(const std::string& name, int* target, const std::string& help, int64_t min,
                         int64_t max) {
  add(name, help, "N", std::to_string(*target), true,
      [=](const std::string& v) { *target = parse_integer<int>(name, v, min, max); });
}

void FlagParser::add_int64(const std::string& name, int64_t* target, const std::string& help, int64_t min,
                           int64_t max) {
  add(name, help, "N", std::to_string(*target), true,
      [=](const std::string& v) { *target = parse_integer<int64_t>(name, v, min, max); });
}

void FlagParser::add_double(const std::string& name, double* target, const std::string& help, double min,
                            double max) {
  add(name, help, "X", format_double(*target), true, [=](const std::string& v) {
    double value = 0;
    std::istringstream in(v);
    if (!(in >> value) || !in.eof() || !std::isfinite(value)) {
      throw UsageError(name + " expects a number, got '" + v + "'");
    }
    if (value < min || value > max) {
      throw UsageError(name + " is " + v + ", outside its range [" + format_double(min) + ", " +
                       format_double(max) + "]");
    }
    *target = value;
  });
}

void FlagParser::add_string(const std::string& name, std::string* target, const std::string& help) {
  add(name, help, "S", *target, true, [=](const std::string& v) { *target = v; });
}

void FlagParser::add_switch(const std::string& name, bool* target, const std::string& help) {
  add(name, help, "", "", false, [=](const std::string&) { *target = true; });
}

void FlagParser::add_alias(const std::string& alias, const std::string& name) {
  aliases_.emplace_back(alias, name);
}

void FlagParser::add_positional(const std::string& hint, std::vector<std::string>* target) {
  positional_hint_ = hint;
  positional_ = target;
}

FlagParser::Flag* FlagParser::find(const std::string& name) {
  return const_cast<Flag*>(static_cast<const FlagParser*>(this)->find(name));
}

const FlagParser::Flag* FlagParser::find(const std::string& name) const {
  std::string resolved = name;
  for (const auto& [alias, target] : aliases_) {
    if (alias == name) resolved = target;
  }
  for (const Flag& f : flags_) {
    if (f.name == resolved) return &f;
  }
  return nullptr;
}

std::string FlagParser::closest(const std::string& name) const {
  std::string best;
  size_t best_distance = SIZE_MAX;
  auto consider = [&](const std::string& candidate) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  };
  for (const Flag& f : flags_) consider(f.name);
  for (const auto& alias : aliases_) consider(alias.first);
  return best;
}

bool FlagParser::given(const std::string& name) const {
  const Flag* f = find(name);
  return f && f->seen;
}

bool FlagParser::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--", 0) != 0 && positional_) {
      positional_->push_back(arg);
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      throw UsageError("unexpected argument '" + arg + "'; every option is a --flag (see --help)");
    }
    std::string name = arg, value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    Flag* flag = find(name);
    if (!flag && flags_.empty())
      throw UsageError("unknown flag " + name + "; this program takes no flags (see --help)");
    if (!flag)
      throw UsageError("unknown flag " + name + "; did you mean " + closest(name) + "? (see --help)");
    if (flag->takes_value) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError(name + " needs a value");
        value = argv[++i];
      }
      flag->set(value);
    } else {
      if (inline_value) throw UsageError(name + " is a switch and takes no value");
      flag->set("");
    }
    flag->seen = true;
  }
  return true;
}

std::string FlagParser::help() const {
  std::ostringstream out;
  out << "usage: " << program_ << " [flags]" << (positional_ ? " " + positional_hint_ + "..." : "") << "\n"
      << summary_ << "\n";
  std::string group = "\x01";
  for (const Flag& f : flags_) {
    if (f.group != group) {
      group = f.group;
      if (!group.empty()) out << "\n" << group << ":\n";
    }
    std::string left = "  " + f.name + (f.takes_value ? " " + f.value_hint : "");
    for (const auto& [alias, target] : aliases_) {
      if (target == f.name) left += ", " + alias;
    }
    out << left;
    out << std::string(left.size() < 38 ? 38 - left.size() : 1, ' ') << f.help;
    if (f.takes_value && !f.default_text.empty()) out << " (default " << f.default_text << ")";
    out << "\n";
  }
  return out.str();
}

}  // namespace gpt
