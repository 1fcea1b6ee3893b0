// The small ~/.ssh/config reader: only Host/HostName/Port/User/IdentityFile; first value wins;
// patterns and negation; Match blocks and every policy keyword are ignored.
#include "check.h"
#include "remote/ssh_config.h"

using namespace flotilla::remote;

int main() {
  CHECK(ssh_pattern_match("*", "anything"));
  CHECK(ssh_pattern_match("gpu-?", "gpu-1"));
  CHECK(!ssh_pattern_match("gpu-?", "gpu-12"));
  CHECK(ssh_pattern_match("*.example.com", "a.b.EXAMPLE.com"));
  CHECK(!ssh_pattern_match("*.example.com", "example.com"));
  CHECK(ssh_pattern_match("a*b*c", "axxbyyc"));

  const std::string text =
      "# global\n"
      "StrictHostKeyChecking no\n"
      "UserKnownHostsFile /dev/null\n"
      "Host gpu1 gpu2\n"
      "  HostName 10.0.0.7\n"
      "  Port 2222\n"
      "  User=alice\n"
      "  IdentityFile ~/.ssh/gpu_key\n"
      "  ProxyCommand touch /tmp/never\n"
      "Host gpu*\n"
      "  HostName 10.9.9.9\n"
      "  User bob\n"
      "  IdentityFile \"%d/.ssh/second key\"\n"
      "Match exec \"touch /tmp/never\"\n"
      "  HostName 6.6.6.6\n"
      "Host * !gpu2\n"
      "  Port 99999\n";
  const auto e = parse_ssh_config(text, "gpu1", "/home/u", "u");
  CHECK(e.host_name && *e.host_name == "10.0.0.7");  // first value wins
  CHECK(e.port && *e.port == 2222);
  CHECK(e.user && *e.user == "alice");
  CHECK_MSG(e.identity_files.size() == 2, "%zu", e.identity_files.size());
  if (e.identity_files.size() == 2) {
    CHECK(e.identity_files[0] == "/home/u/.ssh/gpu_key");
    CHECK(e.identity_files[1] == "/home/u/.ssh/second key");
  }
  CHECK(e.problems.empty());  // Port 99999 comes after 2222 and is never looked at

  const auto other = parse_ssh_config(text, "cpu", "/home/u", "u");
  CHECK(!other.host_name);  // Match block skipped, no Host matched
  CHECK(!other.port);
  CHECK(other.problems.size() == 1);  // the bad port of "Host * !gpu2"
  const auto neg = parse_ssh_config(text, "gpu2", "/home/u", "u");
  CHECK(neg.port && *neg.port == 2222);
  const auto g3 = parse_ssh_config(text, "gpu3", "/h", "u");
  CHECK(g3.host_name && *g3.host_name == "10.9.9.9");
  CHECK(g3.user && *g3.user == "bob");
  CHECK(g3.problems.size() == 1);
  return flotilla_test::summary("ssh_config");
}
