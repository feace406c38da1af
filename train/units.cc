// Parsing of memory sizes and link rates; see units.h.
#include "train/units.h"

#include <charconv>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "base/user_error.h"

namespace gpt {
namespace {

struct Prefix {
  const char* text;
  double factor;
};
constexpr Prefix kPrefixes[] = {
    {"", 1.0},
    {"k", 1e3},
    {"K", 1e3},
    {"M", 1e6},
    {"G", 1e9},
    {"T", 1e12},
    {"Ki", 1024.0},
    {"Mi", 1024.0 * 1024},
    {"Gi", 1024.0 * 1024 * 1024},
    {"Ti", 1024.0 * 1024 * 1024 * 1024},
};

struct Suffix {
  const char* text;
  double factor;  // 1 for bytes, 1/8 for bits
};

// The factor of `unit` written as a prefix and one of `suffixes`, or 0 when it is not of that form.
double unit_factor(const std::string& unit, std::initializer_list<Suffix> suffixes) {
  for (const Prefix& p : kPrefixes) {
    for (const Suffix& s : suffixes) {
      if (unit == std::string(p.text) + s.text) return p.factor * s.factor;
    }
  }
  return 0;
}

// Splits "32.5 GB" into 32.5 and "GB". False when the text does not start with a finite number.
bool split_number(const std::string& text, double* value, std::string* unit) {
  const char* end = text.data() + text.size();
  const auto [rest, error] = std::from_chars(text.data(), end, *value);
  if (error != std::errc() || !std::isfinite(*value)) return false;
  const char* u = rest;
  while (u < end && *u == ' ') ++u;  // "32 GB" reads like "32GB"
  unit->assign(u, end);
  return true;
}

std::string lead(const std::string& flag) {
  return flag.empty() ? "" : flag + ": ";
}

}  // namespace

double parse_bytes(const std::string& text, const std::string& flag) {
  double value = 0;
  std::string unit;
  if (split_number(text, &value, &unit)) {
    if (unit.empty()) unit = "B";
    if (const double factor = unit_factor(unit, {{"B", 1.0}}); factor > 0) {
      if (value > 0) return value * factor;
      throw UsageError(lead(flag) + "'" + text + "' must be positive, for example 32GB");
    }
    if (unit_factor(unit, {{"b", 1.0}, {"bit", 1.0}}) > 0) {
      throw UsageError(lead(flag) + "'" + text + "' is in bits; a memory size is in bytes, for example 32GB");
    }
  }
  throw UsageError(lead(flag) + "'" + text +
                   "' is not a memory size; write a number and a unit, for example 32GB (1e9 bytes), 32GiB "
                   "(2^30 bytes), 512MB or 32e9");
}

double parse_rate(const std::string& text, const std::string& flag) {
  double value = 0;
  std::string unit;
  if (split_number(text, &value, &unit)) {
    if (unit.empty()) unit = "B/s";
    const double factor = unit_factor(unit, {{"B/s", 1.0}, {"b/s", 0.125}, {"bit/s", 0.125}, {"bps", 0.125}});
    if (factor > 0) {
      if (value > 0) return value * factor;
      throw UsageError(lead(flag) + "'" + text + "' must be positive, for example 100Gb/s");
    }
    if (unit_factor(unit, {{"B", 1.0}, {"b", 0.125}, {"bit", 0.125}}) > 0) {
      throw UsageError(lead(flag) + "'" + text + "' is a size, not a rate; add /s, for example " + text +
                       "/s");
    }
  }
  throw UsageError(lead(flag) + "'" + text +
                   "' is not a rate; write a number and a unit, for example 150GB/s (bytes per second), or "
                   "100Gb/s, 100Gbit/s or 400Gbps (bits per second)");
}

}  // namespace gpt
