// Validators and shell quoting for remote commands (see validate.h for the grammar).
#include "remote/validate.h"

#include <arpa/inet.h>

#include <cstdio>

#include "engine/core/error.h"

namespace flotilla::remote {
namespace {

constexpr std::string_view kShellMeta = ";&|$`'\"<>()\\";
constexpr size_t kMaxHost = 253;  // RFC 1035 limit for a full DNS name
constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxUser = 32;  // useradd's limit on Linux

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Built by append: GCC 12 at -O3 reports a false -Wrestrict on `"'" + std::string`.
std::string quoted(std::string_view v) {
  std::string out(1, '\'');
  out.append(printable(v));
  out.push_back('\'');
  return out;
}

std::string char_name(char c) {
  if (c == '\'') return "a single quote";
  if (c == '"') return "a double quote";
  if (c == '\\') return "a backslash";
  if (c == '`') return "a backtick";
  std::string out(1, '\'');
  out.push_back(c);
  out.push_back('\'');
  return out;
}

// Checks shared by every field; "" when none applies.
std::string common_problems(const char* field, std::string_view v) {
  const std::string name = std::string(field) + " " + quoted(v);
  if (v.empty()) return std::string(field) + " is empty";
  if (v.front() == '-') return name + " must not start with '-' (ssh would read it as an option)";
  for (char c : v) {
    if (c == '\0') return name + " contains a NUL byte";
    if (is_space(c)) return name + " contains whitespace (a space, tab or line break)";
    if (kShellMeta.find(c) != std::string_view::npos)
      return name + " contains " + char_name(c) + ", a shell metacharacter";
  }
  return "";
}

// Dotted-quad IPv4 with no leading zeros (0127.0.0.1 could be read as octal elsewhere).
bool is_ipv4(std::string_view v) {
  int parts = 0;
  size_t i = 0;
  while (i <= v.size()) {
    const size_t dot = v.find('.', i);
    const std::string_view part = v.substr(i, dot == std::string_view::npos ? v.size() - i : dot - i);
    if (part.empty() || part.size() > 3 || (part.size() > 1 && part[0] == '0')) return false;
    int value = 0;
    for (char c : part) {
      if (!is_digit(c)) return false;
      value = value * 10 + (c - '0');
    }
    if (value > 255 || ++parts > 4) return false;
    if (dot == std::string_view::npos) break;
    i = dot + 1;
  }
  return parts == 4;
}

std::string dns_problem(std::string_view v) {
  size_t i = 0;
  while (true) {
    const size_t dot = v.find('.', i);
    const std::string_view label = v.substr(i, dot == std::string_view::npos ? v.size() - i : dot - i);
    if (label.empty()) return "has an empty label (two dots in a row, or a dot at an end)";
    if (label.size() > kMaxLabel) return "has a label longer than 63 characters";
    if (label.front() == '-' || label.back() == '-') return "has a label that starts or ends with '-'";
    if (dot == std::string_view::npos) break;
    i = dot + 1;
  }
  return "";
}

}  // namespace

std::string printable(std::string_view value) {
  std::string out;
  size_t shown = 0;
  for (char c : value) {
    if (shown++ == 60) {
      out += "...(" + std::to_string(value.size()) + " bytes)";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string validate_host(std::string_view host) {
  if (std::string problem = common_problems("host", host); !problem.empty()) return problem;
  const std::string name = "host " + quoted(host);
  if (host.size() > kMaxHost)
    return name + " is " + std::to_string(host.size()) + " characters long; a host name has at most 253";
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']')
      return name + " opens a '[' for an IPv6 address but does not close it";
    const std::string inner(host.substr(1, host.size() - 2));
    in6_addr addr{};
    if (inet_pton(AF_INET6, inner.c_str(), &addr) != 1)
      return name + " is not a valid bracketed IPv6 address";
    return "";
  }
  bool digits_and_dots = true;
  for (char c : host) {
    if (c == ':') return name + " contains ':'; write an IPv6 address in brackets, e.g. [::1]";
    if (!is_alnum(c) && c != '-' && c != '.')
      return name + " contains " + char_name(c) +
             ", which is not allowed in a host name (letters, digits, '-', '.')";
    if (!is_digit(c) && c != '.') digits_and_dots = false;
  }
  if (digits_and_dots) return is_ipv4(host) ? "" : name + " is not a valid IPv4 address (four numbers 0-255)";
  if (std::string problem = dns_problem(host); !problem.empty()) return name + " " + problem;
  return "";
}

std::string validate_user(std::string_view user) {
  if (std::string problem = common_problems("user", user); !problem.empty()) return problem;
  const std::string name = "user " + quoted(user);
  if (user.size() > kMaxUser)
    return name + " is " + std::to_string(user.size()) + " characters long; a user name has at most 32";
  for (char c : user)
    if (!is_alnum(c) && c != '_' && c != '.' && c != '-')
      return name + " contains " + char_name(c) +
             ", which is not allowed in a user name (letters, digits, '_', '.', '-')";
  return "";
}

std::string validate_port(std::string_view port) {
  if (std::string problem = common_problems("port", port); !problem.empty()) return problem;
  const std::string name = "port " + quoted(port);
  for (char c : port)
    if (!is_digit(c)) return name + " must be written in digits only";
  if (port.size() > 1 && port.front() == '0') return name + " must not have leading zeros";
  if (port.size() > 5) return name + " is out of range: a port is 1-65535";
  long value = 0;
  for (char c : port) value = value * 10 + (c - '0');
  return validate_port_number(value);
}

std::string validate_port_number(long port) {
  if (port < 1 || port > 65535) return "port " + std::to_string(port) + " is out of range: a port is 1-65535";
  return "";
}

std::string shell_quote(std::string_view arg) {
  std::string out;
  out.reserve(arg.size() + 2);
  out += '\'';
  for (char c : arg) {
    if (c == '\0')
      throw Error(ExitCode::kUsage,
                  "a remote command argument contains a NUL byte, which no command line can carry");
    if (c == '\'') {
      out += "'\\''";  // close the quote, an escaped quote, reopen
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

}  // namespace flotilla::remote
