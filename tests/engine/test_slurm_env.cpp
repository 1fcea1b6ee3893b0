// Slurm's task environment -> the torchrun contract (engine/comm/slurm_env.h): the mapping of a
// 2-node x 2-task job, MASTER_ADDR from `scontrol show hostnames` then the node's NodeAddr, a port
// every task agrees on that moves with SLURM_RESTART_COUNT, a hand-set RANK or MASTER_ADDR winning,
// malformed variables named in the error, and SLURM_TASKS_PER_NODE's compressed form.
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "engine/comm/slurm_env.h"
#include "engine/core/error.h"

using namespace flotilla::comm;

namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

struct FakeScontrol {
  std::vector<std::vector<std::string>> calls;
  bool has_addr = true;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& argv) -> std::optional<std::string> {
      calls.push_back(argv);
      if (argv.size() == 4 && argv[1] == "show" && argv[2] == "hostnames") {
        if (argv[3] == "gpu[07-08]") return "\ngpu07\ngpu08\n";
        return std::nullopt;
      }
      if (argv.size() == 5 && argv[2] == "node" && argv[4] == "gpu07")
        return has_addr
                   ? "NodeName=gpu07 Arch=x86_64 NodeAddr=10.1.2.7 NodeHostName=gpu07 OS=Linux 6.1 #1 SMP\n"
                   : "NodeName=gpu07 Arch=x86_64\n";
      return std::nullopt;
    };
  }
};

Env task(int procid, int localid, int nodeid) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_LOCALID", std::to_string(localid)},
          {"SLURM_NODEID", std::to_string(nodeid)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"},
          {"SLURM_JOB_ID", "4711"}};
}

std::map<std::string, std::string> as_map(const std::vector<std::pair<std::string, std::string>>& v) {
  return {v.begin(), v.end()};
}

void test_mapping() {
  FakeScontrol sc;
  const auto v = as_map(slurm_torchrun_env(lookup(task(2, 0, 1)), sc.runner()));
  CHECK(v.at("RANK") == "2");
  CHECK(v.at("WORLD_SIZE") == "4");
  CHECK(v.at("LOCAL_RANK") == "0");
  CHECK(v.at("LOCAL_WORLD_SIZE") == "2");
  CHECK(v.at("NODE_RANK") == "1");
  CHECK_MSG(v.at("MASTER_ADDR") == "10.1.2.7", "MASTER_ADDR %s", v.at("MASTER_ADDR").c_str());
  const int port = std::stoi(v.at("MASTER_PORT"));
  CHECK(port >= 20000 && port < 32768);
  CHECK(sc.calls.size() == 2 && sc.calls[0][0] == "scontrol" && sc.calls[0][3] == "gpu[07-08]");
  // Every task of the attempt computes the same address and port.
  FakeScontrol sc0;
  const auto v0 = as_map(slurm_torchrun_env(lookup(task(0, 0, 0)), sc0.runner()));
  CHECK(v0.at("MASTER_ADDR") == v.at("MASTER_ADDR") && v0.at("MASTER_PORT") == v.at("MASTER_PORT"));
  // A requeued attempt (same job id) gets another port.
  Env again = task(0, 0, 0);
  again["SLURM_RESTART_COUNT"] = "1";
  const auto v1 = as_map(slurm_torchrun_env(lookup(again), sc0.runner()));
  CHECK(v1.at("MASTER_PORT") != v0.at("MASTER_PORT"));
  // No NodeAddr: the host name itself.
  FakeScontrol no_addr;
  no_addr.has_addr = false;
  CHECK(as_map(slurm_torchrun_env(lookup(task(0, 0, 0)), no_addr.runner())).at("MASTER_ADDR") == "gpu07");
}

void test_precedence() {
  FakeScontrol sc;
  Env e = task(1, 1, 0);
  e["RANK"] = "0";
  CHECK(slurm_torchrun_env(lookup(e), sc.runner()).empty());   // a hand-set RANK wins entirely
  CHECK(slurm_torchrun_env(lookup({}), sc.runner()).empty());  // not a Slurm task
  e = task(1, 1, 0);
  e["MASTER_ADDR"] = "192.168.0.9";
  e["MASTER_PORT"] = "29501";
  const auto v = as_map(slurm_torchrun_env(lookup(e), sc.runner()));
  CHECK(!v.count("MASTER_ADDR") && !v.count("MASTER_PORT") && v.at("RANK") == "1");
  CHECK(sc.calls.empty());  // scontrol is not even asked
}

void test_errors() {
  FakeScontrol sc;
  Env e = task(0, 0, 0);
  e.erase("SLURM_NTASKS");
  CHECK_THROWS(slurm_torchrun_env(lookup(e), sc.runner()), "SLURM_NTASKS");
  e = task(0, 0, 0);
  e["SLURM_PROCID"] = "x1";
  CHECK_THROWS(slurm_torchrun_env(lookup(e), sc.runner()), "SLURM_PROCID='x1'");
  e = task(4, 0, 0);  // PROCID >= NTASKS
  CHECK_THROWS(slurm_torchrun_env(lookup(e), sc.runner()), "not below SLURM_NTASKS");
  e = task(0, 0, 0);
  e["SLURM_JOB_NODELIST"] = "other[1-2]";  // scontrol fails for it
  CHECK_THROWS(slurm_torchrun_env(lookup(e), sc.runner()), "scontrol show hostnames other[1-2]");
}

void test_tasks_per_node() {
  CHECK(slurm_tasks_on_node("2(x3),1", 0) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 3) == 1);
  CHECK(slurm_tasks_on_node("2(x3),1", 4) == 0);
  CHECK(slurm_tasks_on_node("4", 0) == 4);
  CHECK(slurm_tasks_on_node("2(y3)", 0) == 0);
  CHECK(slurm_tasks_on_node("", 0) == 0);
  CHECK(slurm_tasks_on_node("a", 0) == 0);
}

}  // namespace

int main() {
  test_mapping();
  test_precedence();
  test_errors();
  test_tasks_per_node();
  return flotilla_test::summary("test_slurm_env");
}
