// Test fixture: SSH "nodes" in network namespaces joined by a rate-limited link (issue 36).
//
// tests/net/netns-nodes.sh builds them (CTest fixture netns_up, shared by every test labelled
// netns, torn down by netns_down); this header reads its state file and offers what the tests
// need: each node's address and HOME, the client key, changing a node's egress rate, and running
// a function inside a node's namespace (setns in a forked child: the raw TCP streams of the
// self-test). The script, not this header, owns the namespaces: a crashed test leaves nothing
// that `down` does not remove.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker_run.h"

namespace flotilla_test {

// Exit code a CTest test uses to say "skipped" (SKIP_RETURN_CODE in tests/net/CMakeLists.txt).
constexpr int kNetnsSkip = 77;

struct NetnsNode {
  std::string name, netns, ip, home;
  int port = 22;
};

class NetnsNodes {
 public:
  // Reads STATE_DIR/state.json as `netns-nodes.sh up` wrote it.
  explicit NetnsNodes(const std::string& state_dir) : dir_(state_dir) {
    const std::string text = read_file(dir_ + "/state.json");
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      reason_ = "no fixture state in " + dir_ +
                "/state.json (run `netns-nodes.sh up` first: CTest fixture netns_up)";
      return;
    }
    if (!j.value("available", false)) {
      reason_ = "network namespaces unavailable: " + j.value("reason", std::string("unknown"));
      return;
    }
    client_key_ = j.value("client_key", "");
    rate_ = j.value("rate", "off");
    for (const auto& n : j["nodes"])
      nodes_.push_back({n.value("name", ""), n.value("netns", ""), n.value("ip", ""), n.value("home", ""),
                        n.value("port", 22)});
    if (nodes_.empty()) reason_ = "the fixture has no nodes";
  }

  // "" when the nodes are up, else why a test should skip.
  const std::string& unavailable() const { return reason_; }
  const std::vector<NetnsNode>& nodes() const { return nodes_; }
  const NetnsNode& node(size_t i) const { return nodes_.at(i); }
  const std::string& client_key() const { return client_key_; }
  // The egress rate `up` set on every node, as tc writes it ("40mbit"; "off" = none).
  const std::string& rate() const { return rate_; }

  // Sets node i's egress rate ("off" removes the limit); true when tc accepted it.
  bool limit(size_t i, const std::string& rate) const {
    const std::string cmd =
        script() + " limit '" + dir_ + "' " + std::to_string(i) + " '" + rate + "' >/dev/null";
    return std::system(cmd.c_str()) == 0;
  }
  bool limit_all(const std::string& rate) const {
    bool ok = true;
    for (size_t i = 0; i < nodes_.size(); ++i) ok = limit(i, rate) && ok;
    return ok;
  }

  static std::string script() { return std::string(FLOTILLA_SOURCE_DIR) + "/tests/net/netns-nodes.sh"; }

 private:
  std::string dir_, reason_, client_key_, rate_;
  std::vector<NetnsNode> nodes_;
};

// A tc rate ("40mbit", "5mbps", "800kbit", "1gbit", plain bits) in bytes per second; 0 when
// unreadable. tc: "bit" units are bits/s, "bps" units BYTES/s; k/m/g are powers of 1000.
inline double tc_rate_bytes_per_s(const std::string& rate) {
  size_t i = 0;
  while (i < rate.size() && (std::isdigit(static_cast<unsigned char>(rate[i])) || rate[i] == '.')) ++i;
  if (i == 0) return 0;
  const double v = std::atof(rate.substr(0, i).c_str());
  std::string unit = rate.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (!unit.empty() && (unit[0] == 'k' || unit[0] == 'm' || unit[0] == 'g')) {
    scale = unit[0] == 'k' ? 1e3 : unit[0] == 'm' ? 1e6 : 1e9;
    unit = unit.substr(1);
  }
  if (unit.empty() || unit == "bit") return v * scale / 8;
  if (unit == "bps") return v * scale;
  return 0;
}

// Forks a child that enters network namespace `netns` and runs fn; returns the child's pid (its
// exit status is fn's result). The child is single-threaded, as setns(CLONE_NEWNET) requires.
inline pid_t fork_in_netns(const std::string& netns, const std::function<int()>& fn) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int fd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
  close(fd);
  _exit(fn());
}

}  // namespace flotilla_test
