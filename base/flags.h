// The command-line parser every binary uses: Megatron-style flags `--name value` or `--name=value`, typed
// targets with ranges, boolean switches, aliases, groups for --help, optional positional arguments (files),
// and errors that name the flag, the bad value and the fix (an unknown flag names the closest known one).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/user_error.h"

namespace gpt {

class FlagParser {
 public:
  FlagParser(std::string program, std::string summary);

  // Flags registered after this call are listed under this heading in --help.
  void group(const std::string& heading);

  void add_int(const std::string& name, int* target, const std::string& help, int64_t min, int64_t max);
  void add_int64(const std::string& name, int64_t* target, const std::string& help, int64_t min, int64_t max);
  void add_double(const std::string& name, double* target, const std::string& help, double min, double max);
  void add_string(const std::string& name, std::string* target, const std::string& help);
  void add_switch(const std::string& name, bool* target, const std::string& help);  // no value; sets true
  void add_alias(const std::string& alias, const std::string& name);
  // Registering a name again replaces the earlier flag (a tool that reuses another's flag set can give one of
  // them its own default, range or meaning); it moves to the current group.

  // Arguments that are not flags are appended to *target (shown as `hint...` in the usage line); without
  // this call they are refused.
  void add_positional(const std::string& hint, std::vector<std::string>* target);

  // Parses argv[1..]; throws UsageError. Returns false when --help was given (the help has been printed).
  bool parse(int argc, const char* const* argv);
  // Whether a flag (or one of its aliases) appeared on the command line.
  bool given(const std::string& name) const;

  std::string help() const;
  const std::string& program() const { return program_; }

 private:
  struct Flag {
    std::string name, help, group, value_hint;
    bool takes_value = true;
    bool seen = false;
    std::function<void(const std::string&)> set;  // throws UsageError with the value problem
    std::string default_text;
  };
  Flag& add(const std::string& name, const std::string& help, std::string value_hint,
            std::string default_text, bool takes_value, std::function<void(const std::string&)> set);
  Flag* find(const std::string& name);
  const Flag* find(const std::string& name) const;
  std::string closest(const std::string& name) const;

  std::string program_, summary_, current_group_, positional_hint_;
  std::vector<std::string>* positional_ = nullptr;
  std::vector<Flag> flags_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // alias -> name
};

}  // namespace gpt
