// Strict option parsing for worker subcommands.
#include "engine/cli/args.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "engine/core/error.h"

namespace flotilla::cli {

bool Args::flag(const std::string& name) {
  bool found = false;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i] == "--") break;
    if (!used_[i] && args_[i] == name) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

std::optional<std::string> Args::value(const std::string& name) {
  auto all = values(name);
  if (all.empty()) return std::nullopt;
  if (all.size() > 1)
    throw_usage("option " + name + " given " + std::to_string(all.size()) + " times; give it once");
  return all.front();
}

std::vector<std::string> Args::values(const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i] == "--") break;
    if (used_[i]) continue;
    if (args_[i] == name) {
      if (i + 1 >= args_.size() || args_[i + 1] == "--") throw_usage("option " + name + " needs a value");
      used_[i] = used_[i + 1] = true;
      out.push_back(args_[i + 1]);
      ++i;
    } else if (args_[i].rfind(name + "=", 0) == 0) {
      used_[i] = true;
      out.push_back(args_[i].substr(name.size() + 1));
    }
  }
  return out;
}

std::string Args::value_or(const std::string& name, const std::string& fallback) {
  auto v = value(name);
  return v ? *v : fallback;
}

long long Args::int_or(const std::string& name, long long fallback) {
  auto v = value(name);
  return v ? parse_int(*v, name) : fallback;
}

double Args::double_or(const std::string& name, double fallback) {
  auto v = value(name);
  return v ? parse_double(*v, name) : fallback;
}

std::vector<std::string> Args::positionals() {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i] == "--") break;
    if (used_[i]) continue;
    if (args_[i].size() > 1 && args_[i][0] == '-') continue;
    used_[i] = true;
    out.push_back(args_[i]);
  }
  return out;
}

std::vector<std::string> Args::rest_after_dashdash() {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i] == "--" && !used_[i]) {
      for (size_t j = i; j < args_.size(); ++j) used_[j] = true;
      out.assign(args_.begin() + static_cast<long>(i) + 1, args_.end());
      break;
    }
  }
  return out;
}

void Args::finish(const std::string& command) const {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i])
      throw_usage("flotilla-worker " + command + ": unexpected argument '" + args_[i] +
                  "' (see flotilla-worker " + command + " --help)");
  }
}

long long parse_int(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') throw_usage(what + ": '" + text + "' is not an integer");
  return v;
}

size_t parse_byte_size(const std::string& text, const std::string& what) {
  if (text.empty()) throw_usage(what + ": empty value");
  size_t mult = 1;
  std::string digits = text;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? size_t{1} << 10 : last == 'M' ? size_t{1} << 20 : size_t{1} << 30;
    digits = text.substr(0, text.size() - 1);
  }
  const long long v = parse_int(digits, what);
  if (v <= 0) throw_usage(what + " " + text + " must be positive");
  return static_cast<size_t>(v) * mult;
}

double parse_double(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0') throw_usage(what + ": '" + text + "' is not a number");
  return v;
}

}  // namespace flotilla::cli
