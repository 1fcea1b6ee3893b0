// The small ~/.ssh/config reader (see ssh_config.h for what is read and what never is).
#include "remote/ssh_config.h"

#include <cctype>

namespace flotilla::remote {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits a config line into words: whitespace separates, an optional '=' after the keyword,
// double quotes group a word. Comments start with '#' at the beginning of a word.
std::vector<std::string> words_of(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= line.size() || line[i] == '#') break;
    std::string word;
    if (line[i] == '"') {
      const size_t end = line.find('"', i + 1);
      word = std::string(
          line.substr(i + 1, end == std::string_view::npos ? std::string_view::npos : end - i - 1));
      i = end == std::string_view::npos ? line.size() : end + 1;
    } else {
      while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) word += line[i++];
    }
    out.push_back(word);
  }
  // "Keyword=value" and "Keyword = value" forms.
  if (!out.empty()) {
    const size_t eq = out[0].find('=');
    if (eq != std::string::npos) {
      std::string rest = out[0].substr(eq + 1);
      out[0].resize(eq);
      if (!rest.empty()) out.insert(out.begin() + 1, rest);
    }
    if (out.size() > 1 && out[1] == "=")
      out.erase(out.begin() + 1);
    else if (out.size() > 1 && out[1].front() == '=')
      out[1].erase(0, 1);
  }
  return out;
}

// True when the Host line's pattern list selects `host`: some positive pattern matches and no
// negated one does.
bool host_line_matches(const std::vector<std::string>& words, const std::string& host) {
  bool any = false;
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& p = words[i];
    if (!p.empty() && p[0] == '!') {
      if (ssh_pattern_match(std::string_view(p).substr(1), host)) return false;
    } else if (ssh_pattern_match(p, host)) {
      any = true;
    }
  }
  return any;
}

std::string expand(const std::string& value, const std::string& home, const std::string& user,
                   const std::string& host) {
  std::string v = value;
  if (v == "~")
    v = home;
  else if (v.rfind("~/", 0) == 0)
    v = home + v.substr(1);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != '%' || i + 1 == v.size()) {
      out += v[i];
      continue;
    }
    const char t = v[++i];
    if (t == 'd')
      out += home;
    else if (t == 'u')
      out += user;
    else if (t == 'h')
      out += host;
    else if (t == '%')
      out += '%';
    else
      out += std::string("%") + t;  // left as is; the key file will simply not be found
  }
  return out;
}

}  // namespace

bool ssh_pattern_match(std::string_view pattern, std::string_view value) {
  // Iterative glob with backtracking on the last '*'.
  size_t p = 0, v = 0, star = std::string_view::npos, mark = 0;
  auto eq = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  };
  while (v < value.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || eq(pattern[p], value[v]))) {
      ++p;
      ++v;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = v;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      v = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

SshConfigEntry parse_ssh_config(std::string_view text, const std::string& host, const std::string& home,
                                const std::string& local_user) {
  SshConfigEntry e;
  bool active = true;  // lines before the first Host/Match apply to every host
  size_t start = 0;
  int line_no = 0;
  while (start <= text.size()) {
    const size_t nl = text.find('\n', start);
    std::string_view line =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\0') != std::string_view::npos) {  // not a text line (found by fuzz_ssh_config)
      e.problems.push_back("line " + std::to_string(line_no) + ": contains a NUL byte; ignored");
      continue;
    }
    const auto w = words_of(line);
    if (w.empty()) continue;
    const std::string key = lower(w[0]);
    if (key == "host") {
      active = host_line_matches(w, host);
      continue;
    }
    if (key == "match") {
      active = false;  // never evaluated: Match exec would run a program
      continue;
    }
    if (!active || w.size() < 2) continue;
    const std::string& value = w[1];
    const std::string where = "line " + std::to_string(line_no) + ": ";
    if (key == "hostname" && !e.host_name) {
      e.host_name = expand(value, home, local_user, host);
    } else if (key == "user" && !e.user) {
      e.user = value;
    } else if (key == "port" && !e.port) {
      bool digits = !value.empty() && value.size() <= 5;
      for (char c : value) digits = digits && std::isdigit(static_cast<unsigned char>(c));
      const long n = digits ? std::stol(value) : 0;
      if (n >= 1 && n <= 65535)
        e.port = static_cast<int>(n);
      else
        e.problems.push_back(where + "Port '" + value + "' is not a port number 1-65535");
    } else if (key == "identityfile") {
      e.identity_files.push_back(expand(value, home, local_user, host));
    }
  }
  return e;
}

}  // namespace flotilla::remote
