// flotilla-worker bench-comm end to end: two real worker processes with the torchrun environment;
// rank 0's --json output has every operation and size, busbw = algbw x nccl-tests' factor, a
// memcpy baseline and the ratios; usage errors (one rank, an unknown op) exit with code 2.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/comm/socket_io.h"
#include "tests/tools/check.h"

namespace {

struct Run {
  int status = -1;
  std::string out, err;
};

// Runs the worker with extra environment; captures stdout and stderr.
pid_t spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env, int out_fd,
            int err_fd) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      unsetenv(v);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(FLOTILLA_WORKER_PATH));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(FLOTILLA_WORKER_PATH, argv.data());
    _exit(127);
  }
  return pid;
}

std::string slurp(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

// Starts `ranks` workers with the same arguments; returns each one's result.
std::vector<Run> run_workers(int ranks, const std::vector<std::string>& args) {
  const int port = flotilla::comm::find_free_port();
  std::vector<Run> runs(static_cast<size_t>(ranks));
  std::vector<pid_t> pids;
  std::vector<std::pair<int, int>> fds;
  for (int r = 0; r < ranks; ++r) {
    int out[2], err[2];
    CHECK(pipe(out) == 0 && pipe(err) == 0);
    std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}};
    if (ranks > 1) {
      env["RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = std::to_string(ranks);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(port);
    }
    pids.push_back(spawn(args, env, out[1], err[1]));
    close(out[1]);
    close(err[1]);
    fds.emplace_back(out[0], err[0]);
  }
  for (int r = 0; r < ranks; ++r) {
    // The outputs are small: read one stream to EOF, then the other.
    runs[static_cast<size_t>(r)].out = slurp(fds[static_cast<size_t>(r)].first);
    runs[static_cast<size_t>(r)].err = slurp(fds[static_cast<size_t>(r)].second);
    close(fds[static_cast<size_t>(r)].first);
    close(fds[static_cast<size_t>(r)].second);
    int st = 0;
    waitpid(pids[static_cast<size_t>(r)], &st, 0);
    runs[static_cast<size_t>(r)].status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  return runs;
}

}  // namespace

int main() {
  const auto runs =
      run_workers(2, {"bench-comm", "--bytes", "4K..16K", "--iters", "3", "--json", "--timeout", "20"});
  CHECK_MSG(runs[0].status == 0 && runs[1].status == 0, "exit %d / %d: %s %s", runs[0].status, runs[1].status,
            runs[0].err.c_str(), runs[1].err.c_str());
  CHECK(runs[1].out.empty());  // only rank 0 prints
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(runs[0].out);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "bad JSON: %s\n%s", e.what(), runs[0].out.c_str());
  }
  if (j.is_object()) {
    CHECK(j["backend"] == "gloo" && j["world_size"] == 2);
    const std::map<std::string, double> factor = {
        {"all_reduce", 1.0}, {"reduce_scatter", 0.5}, {"all_gather", 0.5}, {"broadcast", 1.0}};
    std::map<std::string, int> rows;
    for (const auto& r : j["results"]) {
      const std::string op = r["op"];
      rows[op] += 1;
      const double algbw = r["algbw_gbps"], busbw = r["busbw_gbps"], time_us = r["time_us"];
      const double bytes = r["bytes"];
      CHECK(time_us > 0);
      CHECK_NEAR(algbw, bytes / (time_us * 1e-6) / 1e9, 1e-6 * algbw + 1e-12);
      CHECK_NEAR(busbw, algbw * factor.at(op), 1e-9 + 1e-9 * busbw);
    }
    CHECK(rows.size() == 4);
    for (const auto& [op, n] : rows)
      CHECK_MSG(n == 2, "%s: %d sizes (4 KiB and 16 KiB expected)", op.c_str(), n);
    CHECK(j["memcpy"].size() == 2 && j["memcpy"][1]["gbps"].get<double>() > 0);
    CHECK(j["at_64MiB"]["bytes"] == 16384);  // the largest size measured stands in for 64 MiB
    for (const auto& [op, f] : factor) CHECK(j["at_64MiB"][op]["ratio_to_memcpy"].get<double>() > 0);
  }
  // One rank: there is nothing to measure.
  const auto solo = run_workers(1, {"bench-comm", "--bytes", "4K"});
  CHECK(solo[0].status == 2 && solo[0].err.find("measures communication between ranks") != std::string::npos);
  const auto bad = run_workers(1, {"bench-comm", "--ops", "all_to_all"});
  CHECK(bad[0].status == 2 && bad[0].err.find("unknown operation 'all_to_all'") != std::string::npos);
  return flotilla_test::summary("test_comm_bench_cli");
}
