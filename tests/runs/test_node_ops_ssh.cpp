// The one place for node operations outside a run (runs/node_ops.h), against a loopback sshd node
// through the one set of SSH options (runs/ssh_options.h): an unknown host key refuses the probe
// with the exact trust command; trusting the fingerprint it named lets the probe through (the
// node's system read and stored); forgetting the key refuses it again; the latency matrix of the
// node and this machine is measured and stored.
#include <atomic>
#include <filesystem>

#include "check.h"
#include "db/database.h"
#include "db/nodes.h"
#include "runs/node_ops.h"
#include "sshd_fixture.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_node_ops");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  std::filesystem::create_directories(fx.root() + "/ws");
  runs::SshAccess access;
  access.database_path = fx.root() + "/ws/store.db";
  db::Database d(access.database_path);
  db::SshNode n;
  n.name = "a";
  n.host = "127.0.0.1";
  n.port = fx.node(0).port;
  n.user = local_user_name();
  n.key_path = fx.client_key();
  db::add_ssh_node(d, n);

  // Unknown key: refused, naming the command that trusts it.
  std::string fingerprint;
  try {
    runs::check_node(access, d, "a");
    CHECK(false);
  } catch (const runs::Refusal& e) {
    const std::string m = e.what();
    const auto at = m.find("flotilla nodes trust a --fingerprint SHA256:");
    CHECK_MSG(at != std::string::npos, "%s", m.c_str());
    if (at != std::string::npos) fingerprint = m.substr(m.find("SHA256:", at));
  }
  CHECK(!fingerprint.empty());
  // A wrong fingerprint is refused; the right one is trusted in the workspace's known_hosts.
  bool wrong_refused = false;
  try {
    runs::trust_host_key(access, d, "a", "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
  } catch (const runs::Refusal&) {
    wrong_refused = true;
  }
  CHECK(wrong_refused);
  runs::trust_host_key(access, d, "a", fingerprint);
  CHECK(std::filesystem::exists(runs::workspace_known_hosts(access.database_path)));
  const runs::NodeCheck c = runs::check_node(access, d, "a");
  CHECK(c.probe.cpus > 0 && !c.probe.kernel.empty());
  CHECK(c.latency_s > 0 && c.latency_s < 1);
  CHECK(c.fingerprint == fingerprint);
  CHECK(db::get_ssh_node(d, "a").gpu_count == static_cast<int64_t>(c.probe.gpus.size()));

  // The latency matrix: this machine <-> a, stored.
  std::atomic<bool> cancel{false};
  const runs::LatencyJobResult lat =
      runs::measure_node_latency(access, {"a"}, FLOTILLA_WORKER_PATH, cancel, 2);
  CHECK_MSG(lat.problems.empty(), "%s", lat.problems.empty() ? "" : lat.problems[0].c_str());
  CHECK(!lat.rows.empty());

  // Forgotten: the next probe is refused again.
  CHECK(runs::forget_host_key(access, d, db::get_ssh_node(d, "a")) == 1);
  bool refused_again = false;
  try {
    runs::check_node(access, d, "a");
  } catch (const runs::Refusal&) {
    refused_again = true;
  }
  CHECK(refused_again);
  return summary("test_node_ops_ssh");
}
