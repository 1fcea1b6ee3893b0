// Slurm -> torchrun environment (see slurm_env.h for why it is written into the environment).
#include "engine/comm/slurm_env.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

int parse_count(const std::string& text, const char* name, int min_value) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || v < min_value || v > (1 << 20))
    throw Error(ExitCode::kUsage, std::string(name) + "='" + text + "' is not a number >= " +
                                      std::to_string(min_value) + " (set by Slurm; is this a Slurm task?)");
  return static_cast<int>(v);
}

std::string required(const EnvLookup& env, const char* name) {
  const auto v = env(name);
  if (!v || v->empty())
    throw Error(ExitCode::kUsage, std::string("SLURM_PROCID is set but ") + name +
                                      " is not: run the worker through srun, or set RANK, WORLD_SIZE and "
                                      "MASTER_ADDR by hand");
  return *v;
}

std::string first_line(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) return line;
  }
  return "";
}

// NodeAddr=VALUE in `scontrol show node -o NAME` output.
std::string node_addr(const std::string& text) {
  const auto at = text.find("NodeAddr=");
  if (at == std::string::npos) return "";
  const auto start = at + 9;
  return text.substr(start, text.find_first_of(" \n", start) - start);
}

std::optional<std::string> run_command(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

}  // namespace

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  // "2(x3),1": groups of "count" or "count(xrepeat)".
  int node = 0;
  std::istringstream in(tasks_per_node);
  std::string group;
  while (std::getline(in, group, ',')) {
    char* end = nullptr;
    const long count = std::strtol(group.c_str(), &end, 10);
    if (end == group.c_str() || count < 1) return 0;
    long repeat = 1;
    if (*end == '(') {
      if (end[1] != 'x') return 0;
      char* end2 = nullptr;
      repeat = std::strtol(end + 2, &end2, 10);
      if (repeat < 1 || *end2 != ')' || end2[1] != '\0') return 0;
    } else if (*end != '\0') {
      return 0;
    }
    if (node_id < node + repeat) return static_cast<int>(count);
    node += static_cast<int>(repeat);
  }
  return 0;
}

std::vector<std::pair<std::string, std::string>> slurm_torchrun_env(const EnvLookup& env,
                                                                    const CommandRunner& run) {
  if (env("RANK") || !env("SLURM_PROCID")) return {};
  const int rank = parse_count(required(env, "SLURM_PROCID"), "SLURM_PROCID", 0);
  const int world = parse_count(required(env, "SLURM_NTASKS"), "SLURM_NTASKS", 1);
  const int local = parse_count(required(env, "SLURM_LOCALID"), "SLURM_LOCALID", 0);
  const int node = parse_count(required(env, "SLURM_NODEID"), "SLURM_NODEID", 0);
  if (rank >= world)
    throw Error(ExitCode::kUsage, "SLURM_PROCID=" + std::to_string(rank) +
                                      " is not below SLURM_NTASKS=" + std::to_string(world));
  int local_world = 0;
  if (const auto tpn = env("SLURM_TASKS_PER_NODE")) local_world = slurm_tasks_on_node(*tpn, node);
  if (local_world <= local) local_world = local + 1;

  std::vector<std::pair<std::string, std::string>> out = {
      {"RANK", std::to_string(rank)},        {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(local)}, {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
      {"NODE_RANK", std::to_string(node)},
  };
  if (!env("MASTER_ADDR")) {
    const std::string nodelist = required(env, "SLURM_JOB_NODELIST");
    const auto hosts = run({"scontrol", "show", "hostnames", nodelist});
    const std::string first = hosts ? first_line(*hosts) : "";
    if (first.empty())
      throw Error(ExitCode::kUsage, "cannot find the master's host: `scontrol show hostnames " + nodelist +
                                        "` failed or printed nothing (set MASTER_ADDR by hand)");
    const auto shown = run({"scontrol", "show", "node", "-o", first});
    const std::string addr = shown ? node_addr(*shown) : "";
    out.emplace_back("MASTER_ADDR", addr.empty() ? first : addr);
  }
  if (!env("MASTER_PORT")) {
    const long job = std::atol(required(env, "SLURM_JOB_ID").c_str());
    const auto restarts = env("SLURM_RESTART_COUNT");
    const long attempt = restarts ? std::atol(restarts->c_str()) : 0;
    // 20000-32767: below Linux's ephemeral range (see runs/node_run.h, random_master_port).
    const long port = 20000 + (job * 31 + attempt * 7919) % 12768;
    out.emplace_back("MASTER_PORT", std::to_string(port));
  }
  return out;
}

int apply_slurm_env() {
  const EnvLookup env = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  const auto vars = slurm_torchrun_env(env, run_command);
  for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  return static_cast<int>(vars.size());
}

}  // namespace flotilla::comm
