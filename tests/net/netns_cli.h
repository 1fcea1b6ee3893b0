// The headless `flotilla` command against netns_fixture.h nodes: adds a node by its namespace
// address and trusts the host key it presents, exactly as a user does with a new machine
// (nodes add, probe refused with the fingerprint, nodes trust). Shared by the tests/net tests.
#pragma once

#include <string>

#include "netns_fixture.h"
#include "tests/remote/cli_fixture.h"

namespace flotilla_test {

// "" when node `n` was added as `name` and its key trusted, else the failing step and its output.
inline std::string add_trusted_netns_node(CliWorkspace& ws, const NetnsNodes& net, size_t i,
                                          const std::string& name) {
  const NetnsNode& n = net.node(i);
  const ProcResult add = ws.run({"nodes", "add", name, "--host", n.ip, "--port", std::to_string(n.port),
                                 "--user", local_user_name(), "--key", net.client_key()});
  if (add.exit_code != 0) return "nodes add " + name + " failed: " + add.output;
  const ProcResult refused = ws.run({"nodes", "probe", name});
  if (refused.exit_code != 9) return "nodes probe " + name + " was not refused as unknown: " + refused.output;
  const std::string fp = fingerprint_in(refused.output);
  if (fp.empty()) return "no fingerprint in: " + refused.output;
  const ProcResult trust = ws.run({"nodes", "trust", name, "--fingerprint", fp});
  if (trust.exit_code != 0) return "nodes trust " + name + " failed: " + trust.output;
  const ProcResult probe = ws.run({"nodes", "probe", name, "--json"});
  if (probe.exit_code != 0) return "nodes probe " + name + " failed after trust: " + probe.output;
  const auto pj = nlohmann::json::parse(probe.output, nullptr, false);
  if (pj.is_discarded() || pj.value("fingerprint", "") != fp)
    return "probe does not show the trusted key: " + probe.output;
  return "";
}

}  // namespace flotilla_test
