// flotilla-worker links end to end (issue 36): real worker processes forming one Gloo group on
// loopback. Two "nodes" of two ranks each under `flotilla-worker launch` give figures for every
// ordered pair (0->1, 1->0) and both intra-node pairs; a rank that never joins, or one that dies
// in the middle, gives error rows within the budget instead of a hang.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

pid_t spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env, int out_fd,
            int err_fd) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                          "MASTER_PORT", "FLOTILLA_TEST_LINKS_EXIT_AT_PAIR"})
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

// Starts one process per entry (its args and extra environment) and collects them all.
std::vector<Run> run_all(
    const std::vector<std::pair<std::vector<std::string>, std::map<std::string, std::string>>>& procs) {
  std::vector<Run> runs(procs.size());
  std::vector<pid_t> pids;
  std::vector<std::pair<int, int>> fds;
  for (const auto& [args, env] : procs) {
    int out[2], err[2];
    CHECK(pipe(out) == 0 && pipe(err) == 0);
    pids.push_back(spawn(args, env, out[1], err[1]));
    close(out[1]);
    close(err[1]);
    fds.emplace_back(out[0], err[0]);
  }
  for (size_t r = 0; r < procs.size(); ++r) {
    runs[r].out = slurp(fds[r].first);
    runs[r].err = slurp(fds[r].second);
    close(fds[r].first);
    close(fds[r].second);
    int st = 0;
    waitpid(pids[r], &st, 0);
    runs[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  return runs;
}

// The first line of `out` that parses as the links report.
nlohmann::json report_of(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    try {
      auto j = nlohmann::json::parse(out.substr(pos, end - pos));
      if (j.is_object() && j.contains("links")) return j;
    } catch (const std::exception&) {
    }
    pos = end + 1;
  }
  return nlohmann::json();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Four ranks by hand: node i = ranks 2i, 2i+1. `skip`: a rank not started; `die`: rank -> pair index.
std::vector<Run> four_ranks(int skip, std::map<int, std::string> die, const std::vector<std::string>& extra) {
  const int port = flotilla::comm::find_free_port();
  std::vector<std::pair<std::vector<std::string>, std::map<std::string, std::string>>> procs;
  for (int r = 0; r < 4; ++r) {
    if (r == skip) continue;
    std::vector<std::string> args = {"links", "--json", "--bytes", "256K", "--iters", "5"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"},
                                              {"RANK", std::to_string(r)},
                                              {"LOCAL_RANK", std::to_string(r % 2)},
                                              {"WORLD_SIZE", "4"},
                                              {"LOCAL_WORLD_SIZE", "2"},
                                              {"MASTER_ADDR", "127.0.0.1"},
                                              {"MASTER_PORT", std::to_string(port)}};
    if (die.count(r)) env["FLOTILLA_TEST_LINKS_EXIT_AT_PAIR"] = die[r];
    procs.emplace_back(args, env);
  }
  return run_all(procs);
}

}  // namespace

int main() {
  // 1. Two "nodes" of two ranks, each started by its own launch (as on two machines).
  {
    const int port = flotilla::comm::find_free_port();
    std::vector<std::pair<std::vector<std::string>, std::map<std::string, std::string>>> procs;
    for (int node = 0; node < 2; ++node)
      procs.push_back({{"launch",
                        "--nproc-per-node",
                        "2",
                        "--nnodes",
                        "2",
                        "--node-rank",
                        std::to_string(node),
                        "--master-addr",
                        "127.0.0.1",
                        "--master-port",
                        std::to_string(port),
                        "--no-bind",
                        "--",
                        "links",
                        "--json",
                        "--bytes",
                        "1M",
                        "--iters",
                        "5",
                        "--budget",
                        "40"},
                       {{"OMP_NUM_THREADS", "1"}}});
    const auto runs = run_all(procs);
    CHECK_MSG(runs[0].status == 0 && runs[1].status == 0, "exit %d / %d: %s %s", runs[0].status,
              runs[1].status, runs[0].err.c_str(), runs[1].err.c_str());
    const nlohmann::json j = report_of(runs[0].out);
    CHECK_MSG(j.is_object(), "no report in: %s\n%s", runs[0].out.c_str(), runs[0].err.c_str());
    CHECK(report_of(runs[1].out).is_null());  // only rank 0 prints
    if (j.is_object()) {
      CHECK(j["transport"] == "gloo/tcp" && j["nodes"] == 2 && j["ranks_per_node"] == 2);
      CHECK(j["seconds"].get<double>() > 0 && j["seconds"].get<double>() < 40);
      std::map<std::pair<int, int>, nlohmann::json> links;
      for (const auto& l : j["links"]) links[{l["from"].get<int>(), l["to"].get<int>()}] = l;
      CHECK(links.size() == 4);
      for (const auto& pair : {std::pair{0, 1}, std::pair{1, 0}, std::pair{0, 0}, std::pair{1, 1}}) {
        const auto it = links.find(pair);
        CHECK_MSG(it != links.end(), "pair %d -> %d missing", pair.first, pair.second);
        if (it == links.end()) continue;
        CHECK_MSG(!it->second.contains("error"), "%s", it->second.dump().c_str());
        if (it->second.contains("error")) continue;
        const double lat = it->second["latency_s"], bw = it->second["bytes_per_s"];
        CHECK_MSG(lat > 0 && lat < 0.05, "latency %g", lat);  // loopback: microseconds
        CHECK_MSG(bw > 1e6, "bandwidth %g", bw);              // loopback: far above 1 MB/s
      }
    }
  }
  // 2. Rank 3 (node 1's second rank) never starts: rank 0 reports within the budget, every row an
  //    error naming the missing rank.
  {
    const auto t0 = std::chrono::steady_clock::now();
    const auto runs = four_ranks(3, {}, {"--budget", "6", "--timeout", "2"});
    const double took = seconds_since(t0);
    CHECK_MSG(took < 20, "took %.1f s with a budget of 6 s", took);
    CHECK_MSG(runs[0].status == 0, "rank 0 exit %d: %s", runs[0].status, runs[0].err.c_str());
    const nlohmann::json j = report_of(runs[0].out);
    CHECK_MSG(j.is_object(), "no report: %s\n%s", runs[0].out.c_str(), runs[0].err.c_str());
    if (j.is_object()) {
      CHECK(j["links"].size() == 4);
      for (const auto& l : j["links"]) {
        CHECK_MSG(l.contains("error") && !l.contains("bytes_per_s"), "%s", l.dump().c_str());
        if (l.contains("error"))
          CHECK_MSG(l["error"].get<std::string>().find("3") != std::string::npos, "%s", l.dump().c_str());
      }
    }
  }
  // 3. Rank 2 (node 1's first rank) dies as pair 1 (node 1 -> node 0) starts: pair 0 measured,
  //    the rest error rows, bounded.
  {
    const auto t0 = std::chrono::steady_clock::now();
    const auto runs = four_ranks(-1, {{2, "1"}}, {"--budget", "20", "--timeout", "3"});
    const double took = seconds_since(t0);
    CHECK_MSG(took < 25, "took %.1f s", took);
    CHECK_MSG(runs[0].status == 0, "rank 0 exit %d: %s", runs[0].status, runs[0].err.c_str());
    CHECK(runs[2].status == 9);
    const nlohmann::json j = report_of(runs[0].out);
    CHECK_MSG(j.is_object(), "no report: %s\n%s", runs[0].out.c_str(), runs[0].err.c_str());
    if (j.is_object() && j["links"].size() == 4) {
      CHECK_MSG(j["links"][0].contains("bytes_per_s"), "%s", j["links"][0].dump().c_str());
      for (int i = 1; i < 4; ++i)
        CHECK_MSG(j["links"][i].contains("error"), "%s", j["links"][i].dump().c_str());
    }
  }
  // Usage: one rank has nothing to measure.
  {
    const auto solo = run_all({{{"links"}, {}}});
    CHECK(solo[0].status == 2 && solo[0].err.find("at least two ranks") != std::string::npos);
  }
  return flotilla_test::summary("test_links_cli");
}
