// Issue 19, defect 4: the remedy for a changed host key is reachable from a terminal. The refusal
// names `flotilla nodes forget-key NAME`; that command removes exactly the node's address lines
// from the workspace's known_hosts (other hosts' lines stay, byte for byte) without connecting.
// No sshd needed: the known_hosts file is written by the test.
#include <fstream>

#include "check.h"
#include "cli_fixture.h"
#include "remote/node_fields.h"

using namespace flotilla_test;

int main() {
  const std::string root = fresh_dir("cli-forget-key");
  CliWorkspace ws(root);
  ProcResult add = ws.run({"nodes", "add", "gpu1", "--host", "127.0.0.1", "--port", "2222"});
  CHECK_MSG(add.exit_code == 0, "%s", add.output.c_str());
  const std::string kh = flotilla::remote::workspace_known_hosts_path(ws.db());
  const std::string other =
      "[127.0.0.1]:2223 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherHostOtherHostOtherHostOtherHost\n";
  const std::string mine =
      "[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMineMineMineMineMineMineMineMineMine\n";
  write_text(kh, "# app known_hosts\n" + other + mine);

  ProcResult f = ws.run({"nodes", "forget-key", "gpu1"});
  CHECK_MSG(f.exit_code == 0 && contains(f.output, "forgot 1 host key of node gpu1 ([127.0.0.1]:2222)") &&
                contains(f.output, "flotilla nodes trust gpu1"),
            "exit %d: %s", f.exit_code, f.output.c_str());
  CHECK(read_file(kh) == "# app known_hosts\n" + other);

  ProcResult again = ws.run({"nodes", "forget-key", "gpu1"});
  CHECK_MSG(again.exit_code == 0 && contains(again.output, "no host key recorded for node gpu1"), "%s",
            again.output.c_str());
  CHECK(read_file(kh) == "# app known_hosts\n" + other);

  ProcResult unknown = ws.run({"nodes", "forget-key", "nosuch"});
  CHECK_MSG(unknown.exit_code != 0 && contains(unknown.output, "nosuch"), "exit %d: %s", unknown.exit_code,
            unknown.output.c_str());
  ProcResult usage = ws.run({"nodes", "forget-key"});
  CHECK(usage.exit_code == 2);
  ProcResult help = ws.run({"nodes", "--help"});
  CHECK(contains(help.output, "flotilla nodes forget-key NAME"));
  return flotilla_test::summary("test_cli_forget_key");
}
