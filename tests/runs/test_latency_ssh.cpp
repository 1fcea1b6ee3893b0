// The latency matrix between SSH nodes against real sshd "nodes" on 127.0.0.1 (sshd_fixture.h):
// two nodes measure each other through their deployed workers (2x2, finite small RTTs off the
// diagonal, and from this machine); a third node whose sshd was stopped gives error cells
// ("refused" towards it, "not measured from" in its row) within seconds, not a hang; the store
// holds every link (runs/node_bridge.h's measure_and_store_latency); `flotilla nodes latency a,b` prints the
// matrix and stores it; hostile hosts and worker paths are refused before anything runs, and a
// canary is never created.
//
// Decision: no Qt here (the Nodes page's matrix is tests/ui/test_latencyview.cpp): the glue
// between db/ and remote/ is the runs layer's, so its test is too (moved from tests/ui).
#include <sys/stat.h>

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "flotilla/build_info.h"
#include "remote/deploy.h"
#include "remote/latency.h"
#include "runs/node_bridge.h"
#include "sshd_fixture.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool small_rtt(const remote::LatencyCell& c) {
  return c.error.empty() && std::isfinite(c.median_ms) && c.median_ms > 0 && c.median_ms < 100 && c.min_ms > 0 &&
         c.min_ms <= c.median_ms;
}

std::string deploy(remote::Session& s) {
  remote::DeployOptions d;
  d.worker_path = FLOTILLA_WORKER_PATH;
  d.version = FLOTILLA_VERSION_STRING;
  return remote::deploy_worker(s, d).worker;
}

std::string cli_path() {
  const std::string worker = FLOTILLA_WORKER_PATH;
  return worker.substr(0, worker.rfind('/')) + "/flotilla";
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("latency_ssh");
  for (int i = 0; i < 3; ++i) CHECK_MSG(fx.start(i), "%s", fx.last_error().c_str());
  remote::Session a(fx.options(0)), b(fx.options(1));
  {
    remote::Session c(fx.options(2));
    trust_and_connect(c);  // c is known, then its sshd goes away
  }
  trust_and_connect(a);
  trust_and_connect(b);
  const std::string wa = deploy(a), wb = deploy(b);
  CHECK(!wa.empty() && !wb.empty());
  fx.stop(2);

  // --- the remote layer: 2x2, then 3x3 with a stopped node ---
  std::vector<remote::LatencyEndpoint> two = {{"a", &a, wa, "", 0, ""}, {"b", &b, wb, "", 0, ""}};
  auto t0 = std::chrono::steady_clock::now();
  const remote::LatencyMatrix m2 = remote::measure_latency_matrix(two);
  std::printf("2 nodes measured in %.2f s\n", seconds_since(t0));
  CHECK(m2.size == 2 && m2.cells.size() == 4 && m2.from_here.size() == 2);
  CHECK_MSG(small_rtt(m2.at(0, 1)), "a->b %.3f ms '%s'", m2.at(0, 1).median_ms, m2.at(0, 1).error.c_str());
  CHECK_MSG(small_rtt(m2.at(1, 0)), "b->a %.3f ms '%s'", m2.at(1, 0).median_ms, m2.at(1, 0).error.c_str());
  CHECK(m2.at(0, 0).median_ms < 0 && m2.at(1, 1).median_ms < 0);  // the diagonal is not a link
  CHECK(small_rtt(m2.from_here[0]) && small_rtt(m2.from_here[1]));
  std::printf("a->b %.3f ms, b->a %.3f ms, here->a %.3f ms\n", m2.at(0, 1).median_ms, m2.at(1, 0).median_ms,
              m2.from_here[0].median_ms);

  const int port_c = fx.node(2).port;
  std::vector<remote::LatencyEndpoint> three = two;
  three.push_back({"c", nullptr, "", "127.0.0.1", port_c, "unreachable: sshd stopped"});
  t0 = std::chrono::steady_clock::now();
  const remote::LatencyMatrix m3 = remote::measure_latency_matrix(three);
  const double took = seconds_since(t0);
  CHECK_MSG(took < 30, "a stopped node took %.1f s", took);
  CHECK(small_rtt(m3.at(0, 1)) && small_rtt(m3.at(1, 0)));
  CHECK_MSG(m3.at(0, 2).error == "refused", "a->c '%s'", m3.at(0, 2).error.c_str());
  CHECK(m3.at(1, 2).error == "refused" && m3.from_here[2].error == "refused");
  CHECK(m3.at(2, 0).error.find("not measured from c: unreachable") == 0 && m3.at(2, 1).median_ms < 0);

  // --- hostile input: refused before anything runs anywhere ---
  const std::string canary = fx.root() + "/canary";
  for (const std::string& host :
       std::vector<std::string>{"a;touch " + canary, "$(touch " + canary + ")", "-oProxyCommand=touch",
                                "`touch " + canary + "`", "a\nb", "a b", "::1"}) {
    auto bad = two;
    bad.push_back({"evil", nullptr, "", host, 22, "not connected"});
    bool refused = false;
    try {
      remote::measure_latency_matrix(bad);
    } catch (const Error& e) {
      refused = e.code() == ExitCode::kUsage && std::string(e.what()).find("node evil: host") == 0;
    }
    CHECK_MSG(refused, "host '%s' accepted", host.c_str());
  }
  auto bad_port = two;
  bad_port[1].port = 70000;
  CHECK_THROWS(remote::measure_latency_matrix(bad_port), "node b: port 70000");
  auto bad_worker = two;
  bad_worker[0].worker = "$(touch " + canary + ")";
  CHECK_THROWS(remote::measure_latency_matrix(bad_worker), "node a: the worker path");
  // An absolute path full of shell syntax is passed as one literal word: it names no program.
  bad_worker[0].worker = "/nonexistent/x;touch " + canary + ";";
  const remote::LatencyMatrix quoted = remote::measure_latency_matrix(bad_worker);
  CHECK(quoted.at(0, 1).error.find("not measured from a") == 0 && small_rtt(quoted.at(1, 0)));
  CHECK(!std::filesystem::exists(canary));

  // --- the store, through the glue the app and the CLI share ---
  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  std::vector<db::SshNode> recs;
  {
    db::Database d(dbPath);
    for (int i = 0; i < 3; ++i) {
      db::SshNode n;
      n.name = std::string(1, static_cast<char>('a' + i));
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = local_user_name();
      n.key_path = fx.client_key();
      n.id = db::add_ssh_node(d, n);
      recs.push_back(n);
    }
    std::vector<runs::LatencyNode> nodes = {
        {recs[0], &a, wa, ""}, {recs[1], &b, wb, ""}, {recs[2], nullptr, "", "sshd stopped"}};
    const auto rows = runs::measure_and_store_latency(d, nodes, 3);
    CHECK(rows.size() == 3 + 6);
    const auto stored = db::node_latency_matrix(d);
    CHECK(stored.size() == 9);
    const auto local = db::find_node(d, "local");
    CHECK(local.has_value());
    int measured = 0, refused = 0;
    for (const auto& r : stored) {
      if (r.rtt_ms) {
        ++measured;
        CHECK(*r.rtt_ms > 0 && *r.rtt_ms < 100 && r.error.empty());
        CHECK(r.to_node != recs[2].id && r.from_node != recs[2].id);
      }
      if (r.error == "refused") ++refused;
      CHECK(r.measured_at > 1.6e9);
    }
    CHECK_MSG(measured == 4, "measured %d", measured);  // here->a, here->b, a->b, b->a
    CHECK_MSG(refused == 3, "refused %d", refused);     // here->c, a->c, b->c
    CHECK(db::node_latency_matrix(d, {recs[0].id, recs[1].id}).size() == 2);
  }

  // --- the headless command ---
  const std::string cli = cli_path();
  CHECK_MSG(access(cli.c_str(), X_OK) == 0, "%s is not built (ninja flotilla)", cli.c_str());
  std::filesystem::copy_file(fx.known_hosts(), remote::workspace_known_hosts_path(dbPath),
                             std::filesystem::copy_options::overwrite_existing);
  const std::string home = fx.root() + "/client-home";
  std::filesystem::create_directories(home);
  auto run_cli = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {cli, "--db", dbPath};
    argv.insert(argv.end(), args.begin(), args.end());
    static int n = 0;
    const std::string log = fx.root() + "/cli" + std::to_string(++n) + ".log";
    ProcResult r;
    r.exit_code = wait_exit(spawn(argv, {"HOME=" + home, "SSH_AUTH_SOCK="}, log));
    r.output = read_file(log);
    return r;
  };
  ProcResult r = run_cli({"nodes", "latency", "a,b", "--count", "3"});
  CHECK_MSG(r.exit_code == 0, "exit %d: %s", r.exit_code, r.output.c_str());
  CHECK(r.output.find("from \\ to") != std::string::npos);
  CHECK(r.output.find("this machine") != std::string::npos);
  CHECK(r.output.find("(reused)") != std::string::npos);  // the bundle deployed above
  std::printf("%s", r.output.c_str());
  r = run_cli({"nodes", "latency", "a,b,c", "--json"});
  CHECK_MSG(r.exit_code == 0, "exit %d: %s", r.exit_code, r.output.c_str());
  const auto json = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
  CHECK(json.is_object() && json["links"].size() == 9);
  if (json.is_object()) {
    int ok = 0;
    for (const auto& l : json["links"]) {
      if (l["rtt_ms"].is_number()) ++ok;
      if (l["from"] == "a" && l["to"] == "c") CHECK(l["error"] == "refused");
      if (l["from"] == "c") CHECK(l["error"].get<std::string>().find("unreachable") != std::string::npos);
    }
    CHECK_MSG(ok == 4, "%d links measured", ok);
  }
  r = run_cli({"nodes", "latency", "a;touch " + canary});
  CHECK(r.exit_code == 4 && r.output.find("no ssh node") != std::string::npos);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"nodes", "latency", "a,,b"},
                                             {"nodes", "latency", "a,a"},
                                             {"nodes", "latency", "a,b", "--count", "0"},
                                             {"nodes", "latency", "a,b", "--count", "1.5"},
                                             {"nodes", "latency"}}) {
    r = run_cli(args);
    CHECK_MSG(r.exit_code == 2, "exit %d for %s", r.exit_code, args.back().c_str());
  }
  {
    // A store edited behind the app's back: the address is checked again before any connection.
    db::Database d(dbPath);
    db::Stmt st(d, "UPDATE nodes SET host = ?1 WHERE name = 'c'");
    st.bind(1, "x;touch " + canary).run();
  }
  r = run_cli({"nodes", "latency", "a,c"});
  CHECK_MSG(r.exit_code == 2 && r.output.find("node c: host") != std::string::npos, "exit %d: %s", r.exit_code,
            r.output.c_str());
  CHECK(!std::filesystem::exists(canary));
  return summary("latency_ssh");
}
