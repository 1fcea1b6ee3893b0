// Latency matrix over the nodes' deployed workers (see latency.h).
#include "remote/latency.h"

#include <algorithm>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

// The first line of `text`, printable, for a cell's error.
std::string first_line(const std::string& text) {
  const auto start = text.find_first_not_of(" \n\t");
  if (start == std::string::npos) return "";
  return printable(text.substr(start, text.find('\n', start) - start));
}

std::vector<ConnectTarget> validated_targets(const std::vector<LatencyEndpoint>& nodes) {
  std::vector<ConnectTarget> out;
  for (const auto& n : nodes) {
    ConnectTarget t;
    t.host = n.host.empty() && n.session ? n.session->target().host : n.host;
    t.port = n.port == 0 && n.session ? n.session->target().port : n.port;
    const std::string who = "node " + printable(n.name) + ": ";
    if (t.host.empty()) throw Error(ExitCode::kUsage, who + "no address to measure the latency to");
    if (const std::string why = validate_host(t.host); !why.empty()) throw Error(ExitCode::kUsage, who + why);
    if (const std::string why = validate_port_number(t.port); !why.empty())
      throw Error(ExitCode::kUsage, who + why);
    if (n.session && n.unavailable.empty()) {
      const bool path_ok = !n.worker.empty() && (n.worker.front() == '/' || n.worker.rfind("~/", 0) == 0) &&
                           n.worker.find('\0') == std::string::npos;
      if (!path_ok)
        throw Error(ExitCode::kUsage, who + "the worker path '" + printable(n.worker) +
                                          "' is not absolute (deploy the worker first: remote/deploy.h)");
    }
    out.push_back(t);
  }
  return out;
}

// Row `from`: `<worker> probe --json --connect <the others>` on that node.
void measure_row(const LatencyEndpoint& node, const std::vector<ConnectTarget>& targets, size_t from,
                 int count, std::vector<LatencyCell>& row) {
  std::vector<std::string> expected;
  for (size_t j = 0; j < targets.size(); ++j)
    if (j != from) expected.push_back(targets[j].text());
  std::vector<LatencyCell> got;
  try {
    Session& s = *node.session;
    const std::vector<std::string> argv = {s.expand_home(node.worker),
                                           "probe",
                                           "--json",
                                           "--connect",
                                           connect_list(targets, from),
                                           "--connect-count",
                                           std::to_string(count)};
    // Each connect gives up after 2 s: the probe is bounded by its targets, plus its machine probe.
    const double timeout = 60 + static_cast<double>(expected.size()) * count * 2.5;
    const ExecResult r = s.exec_argv(argv, timeout);
    if (r.exit_status != 0) {
      const std::string why = first_line(r.err.empty() ? r.out : r.err);
      throw Error(ExitCode::kComm, "the worker's probe failed (exit " + std::to_string(r.exit_status) + ")" +
                                       (why.empty() ? "" : ": " + why));
    }
    got = parse_connect_json(r.out, expected);
  } catch (const std::exception& e) {
    got.assign(expected.size(),
               LatencyCell{-1, -1, std::string("not measured from ") + node.name + ": " + e.what()});
  }
  for (size_t j = 0, k = 0; j < targets.size(); ++j)
    if (j != from) row[j] = got[k++];
}

}  // namespace

std::string connect_list(const std::vector<ConnectTarget>& targets, size_t except) {
  std::string out;
  for (size_t j = 0; j < targets.size(); ++j) {
    if (j == except) continue;
    if (!out.empty()) out += ',';
    out += targets[j].text();
  }
  return out;
}

std::vector<LatencyCell> parse_connect_json(const std::string& json,
                                            const std::vector<std::string>& expected) {
  std::vector<LatencyCell> out(expected.size());
  const auto doc = nlohmann::json::parse(json, nullptr, false);
  const bool has = doc.is_object() && doc.contains("connect") && doc["connect"].is_array();
  for (size_t k = 0; k < expected.size(); ++k) {
    LatencyCell& c = out[k];
    c.error = has ? "the worker's probe did not report " + expected[k]
                  : "the worker's probe output has no \"connect\" results (an older worker?)";
    if (!has) continue;
    for (const auto& e : doc["connect"]) {
      if (!e.is_object() || e.value("target", std::string()) != expected[k]) continue;
      const auto& median = e.value("median_ms", nlohmann::json());
      const auto& error = e.value("error", nlohmann::json());
      if (median.is_number() && median.get<double>() >= 0) {
        c.median_ms = median.get<double>();
        const auto& min = e.value("min_ms", nlohmann::json());
        c.min_ms = min.is_number() ? min.get<double>() : c.median_ms;
        c.error.clear();
      } else {
        c.error = error.is_string() ? printable(error.get<std::string>()) : "no connect completed";
      }
      break;
    }
  }
  return out;
}

LatencyMatrix measure_latency_matrix(const std::vector<LatencyEndpoint>& nodes,
                                     const LatencyOptions& options) {
  if (options.count < 1 || options.count > kMaxConnectCount)
    throw Error(ExitCode::kUsage, "latency: count " + std::to_string(options.count) + " is outside 1-" +
                                      std::to_string(kMaxConnectCount));
  const std::vector<ConnectTarget> targets = validated_targets(nodes);
  const size_t m = nodes.size();
  LatencyMatrix mx;
  mx.size = m;
  mx.cells.assign(m * m, LatencyCell{});
  mx.from_here.assign(m, LatencyCell{});
  std::vector<std::vector<LatencyCell>> rows(m, std::vector<LatencyCell>(m));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < m; ++i) {
    const LatencyEndpoint& n = nodes[i];
    if (m < 2) break;
    if (!n.session || !n.unavailable.empty()) {
      const std::string why = n.unavailable.empty() ? "not connected" : n.unavailable;
      for (size_t j = 0; j < m; ++j)
        if (j != i) rows[i][j].error = "not measured from " + n.name + ": " + why;
      continue;
    }
    threads.emplace_back([&, i] { measure_row(nodes[i], targets, i, options.count, rows[i]); });
  }
  if (options.from_here) {
    for (size_t j = 0; j < m; ++j) {
      const ConnectProbe p = probe_connect(targets[j], options.count);
      mx.from_here[j] = LatencyCell{p.min_ms, p.median_ms, p.error};
    }
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < m; ++j) mx.cells[i * m + j] = rows[i][j];
  return mx;
}

}  // namespace flotilla::remote
