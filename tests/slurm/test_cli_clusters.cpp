// `flotilla clusters` against the real loopback Slurm, reached over a loopback sshd login node
// whose login shell prints a banner that imitates the probe's fence: add (hostile partition,
// account and name refused before anything is stored or any shell runs), probe (the unknown host
// key refused with the trust command; then Slurm's version, accounting off, requeue, MinJobAge,
// both partitions and both nodes with their state, squeue --json), a node drained by scontrol seen
// by the next probe, price, list --json, remove.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/clusters.h"
#include "slurm_fixture.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

int main() {
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  SshdFixture fx("slurm_cli_clusters");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  CliWorkspace ws(fx.root());
  const std::string port = std::to_string(fx.node(0).port);
  const std::string canary = fx.root() + "/pwned";
  const std::vector<std::string> login = {"--login", "127.0.0.1",       "--port", port,
                                          "--user",  local_user_name(), "--key",  fx.client_key()};

  // Hostile values: refused, each named, nothing stored.
  for (const auto& [opt, value] :
       std::vector<std::pair<std::string, std::string>>{{"--partition", "cpu;touch " + canary},
                                                        {"--account", "$(touch " + canary + ")"},
                                                        {"--partition", "--wrap=touch " + canary},
                                                        {"--account", "a b"}}) {
    std::vector<std::string> args = {"clusters", "add", "evil"};
    args.insert(args.end(), login.begin(), login.end());
    args.push_back(opt);
    args.push_back(value);
    const ProcResult r = ws.run(args);
    CHECK_MSG(r.exit_code == 2, "%s '%s' accepted (exit %d): %s", opt.c_str(), value.c_str(), r.exit_code,
              r.output.c_str());
    CHECK_MSG(contains(r.output, opt.substr(2)), "message does not name %s: %s", opt.c_str(),
              r.output.c_str());
  }
  {
    std::vector<std::string> args = {"clusters", "add", "bad;name"};
    args.insert(args.end(), login.begin(), login.end());
    CHECK(ws.run(args).exit_code == 2);
  }
  CHECK(!fs::exists(canary));
  {
    flotilla::db::Database db(ws.db());
    CHECK(flotilla::db::list_clusters(db).empty());
  }

  std::vector<std::string> add = {"clusters", "add", "flo"};
  add.insert(add.end(), login.begin(), login.end());
  add.insert(add.end(), {"--partition", "cpu"});
  ProcResult r = ws.run(add);
  CHECK_MSG(r.exit_code == 0, "add: %s", r.output.c_str());
  CHECK(ws.run(add).exit_code != 0);  // the name is taken

  // Unknown host key: refused with the exact trust command.
  r = ws.run({"clusters", "probe", "flo"});
  CHECK_MSG(r.exit_code == 9, "probe of an unknown host: exit %d: %s", r.exit_code, r.output.c_str());
  CHECK(contains(r.output, "flotilla clusters trust flo --fingerprint SHA256:"));
  const std::string fp = fingerprint_in(r.output);
  CHECK(!fp.empty());
  r = ws.run({"clusters", "trust", "flo", "--fingerprint", fp});
  CHECK_MSG(r.exit_code == 0, "trust: %s", r.output.c_str());

  r = ws.run({"clusters", "probe", "flo"});
  CHECK_MSG(r.exit_code == 0, "probe: %s", r.output.c_str());
  CHECK_MSG(contains(r.output, "Slurm 22.05") || contains(r.output, "Slurm 2"), "%s", r.output.c_str());
  CHECK(contains(r.output, "ClusterName flotest"));
  CHECK(contains(r.output, "accounting: off"));
  CHECK(contains(r.output, "requeue: allowed"));
  CHECK(contains(r.output, "kept 300 s"));
  CHECK(!contains(r.output, "fake"));  // the banner's imitation of the fence is not a node

  r = ws.run({"clusters", "probe", "flo", "--json"});
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  CHECK_MSG(!j.is_discarded(), "probe --json: %s", r.output.c_str());
  if (!j.is_discarded()) {
    CHECK(j["accounting"] == false && j["sacct"] == false && j["requeue"] == true);
    CHECK(j["min_job_age_s"] == 300);
    CHECK_MSG(j["nodes"].size() == 2, "nodes: %s", j["nodes"].dump().c_str());
    if (j["nodes"].size() == 2) {
      CHECK(j["nodes"][0]["name"] == "n1" && j["nodes"][0]["state"] == "idle" && j["nodes"][0]["cpus"] == 2);
      CHECK(j["nodes"][1]["name"] == "n2");
    }
    CHECK(j["partitions"].size() == 2);
    if (j["partitions"].size() == 2)
      CHECK(j["partitions"][0]["name"] == "cpu" && j["partitions"][0]["default"] == true);
    std::printf("squeue --json on Debian's Slurm: %s\n",
                j["squeue_json"] == true ? "works" : "not available");
  }

  // A drained node shows in the next probe.
  const std::string env = "SLURM_CONF=" + conf;
  CHECK(system((env + " scontrol update nodename=n2 state=drain reason=flotilla-test").c_str()) == 0);
  r = ws.run({"clusters", "probe", "flo", "--json"});
  const auto d = nlohmann::json::parse(r.output, nullptr, false);
  CHECK(!d.is_discarded() && d["nodes"].size() == 2 && d["nodes"][1]["state"] == "drained");
  CHECK(system((env + " scontrol update nodename=n2 state=resume").c_str()) == 0);

  r = ws.run({"clusters", "price", "flo", "cpu", "--cpu-hour", "0.05"});
  CHECK_MSG(r.exit_code == 0, "price: %s", r.output.c_str());
  CHECK(ws.run({"clusters", "price", "flo", "cpu;x", "--cpu-hour", "1"}).exit_code == 2);
  CHECK(ws.run({"clusters", "price", "flo", "cpu", "--gpu-hour", "-1"}).exit_code == 2);
  r = ws.run({"clusters", "list", "--json"});
  const auto l = nlohmann::json::parse(r.output, nullptr, false);
  CHECK(!l.is_discarded() && l.size() == 1);
  if (!l.is_discarded() && l.size() == 1) {
    CHECK(l[0]["name"] == "flo" && l[0]["partition"] == "cpu" && l[0]["probe"]["cluster_name"] == "flotest");
    CHECK(l[0]["prices"].size() == 1 && l[0]["prices"][0]["usd_per_cpu_hour"] == 0.05);
  }
  r = ws.run({"clusters", "list"});
  CHECK_MSG(contains(r.output, "cpu $0.05/CPU-h"), "%s", r.output.c_str());

  r = ws.run({"clusters", "remove", "flo"});
  CHECK_MSG(r.exit_code == 0, "remove: %s", r.output.c_str());
  CHECK(ws.run({"clusters", "probe", "flo"}).exit_code == 4);
  return summary("test_cli_clusters");
}
