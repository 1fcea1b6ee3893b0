// A small, strict command-line parser for flotilla-worker subcommands.
//
// Options are declared as they are read; finish() rejects anything left over, naming it, so a
// typo never silently changes a run. Supports "--key value", "--key=value", repeated options,
// flags and positionals.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace flotilla::cli {

class Args {
 public:
  explicit Args(std::vector<std::string> args) : args_(std::move(args)), used_(args_.size(), false) {}

  bool flag(const std::string& name);                         // --name
  std::optional<std::string> value(const std::string& name);  // --name V | --name=V
  std::string value_or(const std::string& name, const std::string& fallback);
  long long int_or(const std::string& name, long long fallback);
  double double_or(const std::string& name, double fallback);
  std::vector<std::string> values(const std::string& name);  // repeated --name V
  std::vector<std::string> positionals();                    // everything not an option
  // Everything after a bare "--" (consumed).
  std::vector<std::string> rest_after_dashdash();
  // Throws Error(kUsage) naming the first unused argument.
  void finish(const std::string& command) const;

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

long long parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);
// A positive byte count with an optional K, M or G suffix (powers of 1024): "8M", "512K", "4096".
// `what` names the command and option in the usage error ("links: --bytes").
size_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace flotilla::cli
