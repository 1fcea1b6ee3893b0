// The link matrix on the collective path (runs/link_job.h) against real sshd "nodes" on 127.0.0.1
// (sshd_fixture.h): a, b and c, c's sshd stopped. The job deploys the worker, starts `launch ...
// links` on a and b, stores figures for a -> b, b -> a and both intra-node pairs, gives c error rows
// (c -> a, a -> c, b -> c, c -> b, c within) and a sentence, all within its time bound; the text
// names the slowest link; "local" gives this machine's within-node figure; `flotilla nodes links a,b`
// measures and prints, with no names the newest.
#include <chrono>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/nodes.h"
#include "remote/node_fields.h"
#include "runs/link_job.h"
#include "sshd_fixture.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("link_job_ssh");
  for (int i = 0; i < 3; ++i) CHECK_MSG(fx.start(i), "%s", fx.last_error().c_str());
  for (int i = 0; i < 3; ++i) {
    remote::Session s(fx.options(i));
    trust_and_connect(s);
  }
  fx.stop(2);
  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string db_path = ws + "/flotilla.db";
  std::map<int64_t, std::string> name_of;
  {
    db::Database d(db_path);
    for (int i = 0; i < 3; ++i) {
      db::SshNode n;
      n.name = std::string(1, static_cast<char>('a' + i));
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = local_user_name();
      n.key_path = fx.client_key();
      name_of[db::add_ssh_node(d, n)] = n.name;
    }
  }
  const auto options = [&](const db::SshNode& n) { return fx.options(n.name[0] - 'a'); };
  const std::atomic<bool> cancel{false};
  runs::LinkJobOptions job;
  job.bytes = 1 << 20;
  job.timeout_s = 60;
  const auto t0 = std::chrono::steady_clock::now();
  const runs::LinkJobResult r =
      runs::run_link_job(db_path, {"a", "b", "c"}, FLOTILLA_WORKER_PATH, options, cancel, job);
  const double took = seconds_since(t0);
  std::printf("measured in %.1f s\n", took);
  CHECK_MSG(took < 60, "took %.1f s", took);
  CHECK_MSG(r.measurement.has_value(), "nothing stored: %s", r.problems.empty() ? "" : r.problems[0].c_str());
  CHECK_MSG(r.problems.size() == 1 && r.problems[0].find("Node c") == 0, "%zu problems: %s",
            r.problems.size(), r.problems.empty() ? "" : r.problems[0].c_str());
  if (r.measurement) {
    const db::LinkMeasurement& m = *r.measurement;
    CHECK(m.id > 0 && m.transport == "gloo/tcp" && !m.run_id && m.seconds > 0);
    CHECK(m.note.find("Node c") == 0);
    std::map<std::string, const db::NodeLink*> by;
    for (const auto& l : m.links) by[name_of[l.from_node] + ">" + name_of[l.to_node]] = &l;
    CHECK_MSG(m.links.size() == 9, "%zu links", m.links.size());
    for (const std::string pair : {"a>b", "b>a", "a>a", "b>b"}) {
      const auto it = by.find(pair);
      CHECK_MSG(it != by.end() && it->second->bytes_per_s && it->second->latency_s,
                "%s missing or unmeasured: %s", pair.c_str(),
                it == by.end() ? "" : it->second->error.c_str());
      if (it != by.end() && it->second->bytes_per_s) {
        CHECK(*it->second->bytes_per_s > 1e6 && *it->second->latency_s > 0 && *it->second->latency_s < 0.05);
        std::printf("%s: %.1f us, %.1f MB/s\n", pair.c_str(), *it->second->latency_s * 1e6,
                    *it->second->bytes_per_s / 1e6);
      }
    }
    for (const std::string pair : {"a>c", "c>a", "b>c", "c>b", "c>c"}) {
      const auto it = by.find(pair);
      CHECK_MSG(it != by.end() && !it->second->bytes_per_s && it->second->error.find("Node c") == 0, "%s",
                pair.c_str());
    }
    db::Database d(db_path);
    const std::string text = runs::link_matrix_text(d, m);
    std::printf("%s", text.c_str());
    const auto slow = runs::slowest_link(d, m);
    CHECK(slow && ((slow->from == "a" && slow->to == "b") || (slow->from == "b" && slow->to == "a")));
    if (slow) CHECK(text.find("slowest link: " + slow->from + " -> " + slow->to) != std::string::npos);
    CHECK(text.find("a (within)") != std::string::npos && text.find("error: Node c") != std::string::npos);
    CHECK(db::latest_links(d, {}).size() == 9);
  }

  // "local": this machine's within-node figure only (no peer of the nodes is attempted).
  {
    const runs::LinkJobResult l =
        runs::run_link_job(db_path, {"local"}, FLOTILLA_WORKER_PATH, options, cancel, job);
    CHECK_MSG(l.measurement && l.problems.empty(), "%s", l.problems.empty() ? "" : l.problems[0].c_str());
    if (l.measurement) {
      CHECK(l.measurement->links.size() == 1);
      const db::NodeLink& x = l.measurement->links[0];
      CHECK(x.from_node == x.to_node && x.bytes_per_s && *x.bytes_per_s > 1e6);
    }
  }

  // The headless command: measure a,b and print; no names: the newest stored.
  const std::string worker = FLOTILLA_WORKER_PATH;
  const std::string cli = worker.substr(0, worker.rfind('/')) + "/flotilla";
  std::filesystem::copy_file(fx.known_hosts(), remote::workspace_known_hosts_path(db_path),
                             std::filesystem::copy_options::overwrite_existing);
  const std::string home = fx.root() + "/client-home";
  std::filesystem::create_directories(home);
  auto run_cli = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {cli, "--db", db_path};
    argv.insert(argv.end(), args.begin(), args.end());
    static int n = 0;
    const std::string log = fx.root() + "/cli" + std::to_string(++n) + ".log";
    ProcResult p;
    p.exit_code = wait_exit(spawn(argv, {"HOME=" + home, "SSH_AUTH_SOCK="}, log));
    p.output = read_file(log);
    return p;
  };
  ProcResult p = run_cli({"nodes", "links", "a,b", "--bytes", "512K", "--json"});
  CHECK_MSG(p.exit_code == 0, "exit %d: %s", p.exit_code, p.output.c_str());
  const auto json =
      nlohmann::json::parse(p.output.substr(std::min(p.output.find('{'), p.output.size())), nullptr, false);
  CHECK_MSG(json.is_object() && json["links"].size() == 4 && json["slowest"].is_object(), "%s",
            p.output.c_str());
  p = run_cli({"nodes", "links"});
  CHECK_MSG(p.exit_code == 0 && p.output.find("slowest link: ") != std::string::npos &&
                p.output.find("c ->") == std::string::npos,
            "%s", p.output.c_str());  // the newest: a,b only
  p = run_cli({"nodes", "links", "a,a"});
  CHECK(p.exit_code == 2);
  p = run_cli({"nodes", "links", "a,zz"});
  CHECK(p.exit_code == 4);
  return summary("link_job_ssh");
}
