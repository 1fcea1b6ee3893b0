// Remote argument validation and quoting (docs/reliability.md "Remote commands", fault row S7): every
// hostile host/user/port is refused with a message naming the field, ordinary values pass, and
// shell_quote() survives a real /bin/sh with the input unchanged and no command executed.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "remote/ssh_info.h"
#include "remote/validate.h"

namespace fs = std::filesystem;
using namespace flotilla::remote;

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_rejected(const char* field, const std::string& message, const std::string& input,
                     const std::string& reason) {
  CHECK_MSG(!message.empty(), "%s accepted: '%s'", field, printable(input).c_str());
  CHECK_MSG(starts_with(message, field), "message does not name %s: %s", field, message.c_str());
  CHECK_MSG(contains(message, reason), "message for '%s' lacks '%s': %s", printable(input).c_str(),
            reason.c_str(), message.c_str());
  CHECK_MSG(!contains(message, "\n"), "message carries a raw newline: %s", message.c_str());
}

const fs::path& canary() {
  static const fs::path p =
      fs::path(FLOTILLA_TEST_TMP) / ("remote_validate_canary_" + std::to_string(getpid()));
  return p;
}

// The S7 inputs: option injection, command separators, substitutions, line breaks, spaces,
// URL-encoded tricks and oversized values.
std::vector<std::pair<std::string, std::string>> hostile_hosts() {
  const std::string c = canary().string();
  return {
      {"-oProxyCommand=touch${IFS}" + c, "must not start with '-'"},
      {"a;touch " + c, "';'"},
      {"a;touch${IFS}" + c, "';'"},
      {"$(touch " + c + ")", "'$'"},
      {"$(touch${IFS}" + c + ")", "'$'"},
      {"`touch${IFS}" + c + "`", "backtick"},
      {"host\nProxyCommand x", "whitespace"},
      {"host name", "whitespace"},
      {"host\tname", "whitespace"},
      {"127.0.0.1%0a", "'%'"},
      {"a|b", "'|'"},
      {"a&b", "'&'"},
      {"a>b", "'>'"},
      {"a<b", "'<'"},
      {"a(b)", "'('"},
      {"a'b", "single quote"},
      {"a\"b", "double quote"},
      {"a\\b", "backslash"},
      {std::string("a\0b", 3), "NUL"},
      {"", "is empty"},
      {std::string(300, 'a'), "at most 253"},
      {std::string(64, 'a') + ".example.com", "longer than 63"},
      {"a..b", "empty label"},
      {"a.", "empty label"},
      {"x-.example.com", "starts or ends with '-'"},
      {"256.1.1.1", "not a valid IPv4"},
      {"01.2.3.4", "not a valid IPv4"},
      {"1.2.3", "not a valid IPv4"},
      {"1.2.3.4.5", "not a valid IPv4"},
      {"::1", "brackets"},
      {"[::1", "does not close"},
      {"[not-ipv6]", "not a valid bracketed IPv6"},
      {"[fe80::1%eth0]", "not a valid bracketed IPv6"},
      {"user@host", "'@'"},
      {"host:22", "brackets"},
      {"h_o", "'_'"},
  };
}

void test_hosts() {
  for (const auto& [host, reason] : hostile_hosts())
    expect_rejected("host", validate_host(host), host, reason);
  for (const char* good :
       {"gpu-node-1", "gpu1.example.com", "GPU1.Example.COM", "localhost", "10.0.0.7", "127.0.0.1",
        "255.255.255.255", "0.0.0.0", "[::1]", "[2001:db8::42]", "[::ffff:192.0.2.1]", "a", "x1"}) {
    const std::string m = validate_host(good);
    CHECK_MSG(m.empty(), "'%s' rejected: %s", good, m.c_str());
  }
  const std::string label63 = std::string(63, 'a') + ".b";
  CHECK(validate_host(label63).empty());
  // The message shows the value with control bytes escaped and long values cut.
  CHECK(contains(validate_host("host\nProxyCommand x"), "host\\nProxyCommand"));
  CHECK(validate_host(std::string(300, 'a')).size() < 200);
}

void test_users() {
  const std::string c = canary().string();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"-oProxyCommand=touch${IFS}" + c, "must not start with '-'"},
      {"root;touch " + c, "';'"},
      {"$(id)", "'$'"},
      {"`id`", "backtick"},
      {"ana\nProxyCommand x", "whitespace"},
      {"ana b", "whitespace"},
      {"", "is empty"},
      {std::string(33, 'u'), "at most 32"},
      {"ana@host", "'@'"},
      {"ana/..", "'/'"},
      {std::string("an\0a", 4), "NUL"},
  };
  for (const auto& [user, reason] : bad) expect_rejected("user", validate_user(user), user, reason);
  const std::vector<std::string> good = {"root",       "ana",    "ubuntu", "ml_ops",
                                         "first.last", "user-2", "_svc",   std::string(32, 'u')};
  for (const std::string& user : good)
    CHECK_MSG(validate_user(user).empty(), "'%s' rejected: %s", user.c_str(), validate_user(user).c_str());
}

void test_ports() {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"0", "out of range"},      {"65536", "out of range"}, {"99999", "out of range"},
      {"123456", "out of range"}, {"22abc", "digits only"},  {"-22", "must not start with '-'"},
      {"+22", "digits only"},     {" 22", "whitespace"},     {"22\n", "whitespace"},
      {"", "is empty"},           {"022", "leading zeros"},  {"2 2", "whitespace"},
      {"$(id)", "'$'"},           {"0x16", "digits only"},   {"22;id", "';'"},
  };
  for (const auto& [port, reason] : bad) expect_rejected("port", validate_port(port), port, reason);
  for (const char* good : {"1", "22", "2222", "65535", "8080"})
    CHECK_MSG(validate_port(good).empty(), "'%s' rejected: %s", good, validate_port(good).c_str());
  CHECK(validate_port_number(22).empty());
  CHECK(starts_with(validate_port_number(0), "port"));
  CHECK(!validate_port_number(65536).empty());
  CHECK(!validate_port_number(-1).empty());
}

// Runs /bin/sh -c "printf %s <quoted>" and returns what the shell printed.
std::string shell_echo(const std::string& arg) {
  int out[2];
  if (pipe(out) != 0) return "<pipe failed>";
  const std::string script = "printf %s " + shell_quote(arg);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string result;
  std::array<char, 4096> buf{};
  ssize_t n;
  while ((n = read(out[0], buf.data(), buf.size())) > 0) result.append(buf.data(), static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "<sh failed>";
  return result;
}

void test_shell_quote() {
  CHECK(shell_quote("abc") == "'abc'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK_THROWS(shell_quote(std::string("a\0b", 3)), "NUL");

  const std::string c = canary().string();
  std::vector<std::string> hostile = {
      "plain",
      "",
      "with space",
      "'",
      "''",
      "it's",
      "'; touch " + c + "; echo '",
      "$(touch " + c + ")",
      "`touch " + c + "`",
      "${IFS}$HOME$((1+1))",
      "a;touch " + c,
      "a && touch " + c + " || touch " + c,
      "line1\nline2\ntouch " + c,
      "-oProxyCommand=touch${IFS}" + c,
      "\\\\'\\\"\"\\n",
      "*?[a-z]~",
      "!event !! ^x^y",
      "%s %n %x",
      "\t\r\x01\x7f\xff\xc3\xa9",
      std::string(5000, '\''),
  };
  for (const auto& [host, reason] : hostile_hosts())
    if (host.find('\0') == std::string::npos) hostile.push_back(host);
  for (const std::string& arg : hostile) {
    const std::string echoed = shell_echo(arg);
    CHECK_MSG(echoed == arg, "round trip changed '%s' into '%s'", printable(arg).c_str(),
              printable(echoed).c_str());
  }
  CHECK_MSG(!fs::exists(canary()), "the shell ran an injected command: %s exists", canary().c_str());
}

}  // namespace

int main() {
  fs::create_directories(FLOTILLA_TEST_TMP);
  fs::remove(canary());
  test_hosts();
  test_users();
  test_ports();
  test_shell_quote();
  const std::string version = libssh_version();
  CHECK_MSG(starts_with(version, "0.") && version.size() >= 4, "libssh version '%s'", version.c_str());
  return flotilla_test::summary("test_validate");
}
