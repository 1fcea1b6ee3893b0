// The link-matrix job (see link_job.h): connect, deploy, one `launch ... links` per node, store.
#include "runs/link_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "db/run_store.h"
#include "flotilla/build_info.h"
#include "remote/deploy.h"
#include "runs/argv_command.h"
#include "runs/comm_efficiency.h"

namespace flotilla::runs {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One requested node.
struct Part {
  std::string name;
  int64_t node_id = 0;  // 0: not a stored node
  bool local = false;
  db::SshNode rec;
  std::unique_ptr<remote::Session> session;
  remote::Session* borrowed = nullptr;  // a session the caller owns (a run's start)
  std::string worker;
  remote::Session& ssh() { return borrowed != nullptr ? *borrowed : *session; }
  std::string problem;  // "": it takes part
};

// The first line of `out` that parses as the worker's links report (launch may interleave events).
std::optional<nlohmann::json> report_of(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    try {
      auto j = nlohmann::json::parse(out.substr(pos, end - pos));
      if (j.is_object() && j.contains("links") && j["links"].is_array()) return j;
    } catch (const std::exception&) {
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  const auto nl = t.rfind('\n');
  std::string line = nl == std::string::npos ? t : t.substr(nl + 1);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

std::vector<std::string> worker_args(const LinkJobOptions& job, int k, int nnodes, int node_rank,
                                     const std::string& master, int port, double budget) {
  const std::string b = std::to_string(static_cast<int>(std::max(2.0, budget)));
  return {"launch",
          "--nproc-per-node",
          std::to_string(k),
          "--nnodes",
          std::to_string(nnodes),
          "--node-rank",
          std::to_string(node_rank),
          "--master-addr",
          master,
          "--master-port",
          std::to_string(port),
          "--no-bind",
          "--init-timeout",
          std::to_string(static_cast<int>(budget) + 60),
          "--",
          "links",
          "--json",
          "--bytes",
          std::to_string(job.bytes),
          "--budget",
          b,
          "--timeout",
          std::to_string(static_cast<int>(std::clamp(budget / 4, 2.0, 10.0)))};
}

// Rows of the worker's report, node indexes mapped to node ids.
void add_report_rows(const nlohmann::json& report, const std::vector<int64_t>& ids, db::LinkMeasurement& m) {
  if (report.contains("transport") && report["transport"].is_string()) m.transport = report["transport"];
  for (const auto& l : report["links"]) {
    const int from = l.value("from", -1), to = l.value("to", -1);
    if (from < 0 || to < 0 || from >= static_cast<int>(ids.size()) || to >= static_cast<int>(ids.size()))
      continue;
    db::NodeLink row;
    row.from_node = ids[static_cast<size_t>(from)];
    row.to_node = ids[static_cast<size_t>(to)];
    if (l.contains("latency_s") && l.contains("bytes_per_s") && l["bytes_per_s"].get<double>() > 0) {
      row.latency_s = l["latency_s"].get<double>();
      row.bytes_per_s = l["bytes_per_s"].get<double>();
    } else {
      row.error = l.value("error", std::string("not measured"));
    }
    m.links.push_back(row);
  }
}

bool has_pair(const db::LinkMeasurement& m, int64_t from, int64_t to) {
  return std::any_of(m.links.begin(), m.links.end(),
                     [&](const db::NodeLink& l) { return l.from_node == from && l.to_node == to; });
}

void add_error(db::LinkMeasurement& m, int64_t from, int64_t to, const std::string& error) {
  if (from == 0 || to == 0 || has_pair(m, from, to)) return;
  db::NodeLink row;
  row.from_node = from;
  row.to_node = to;
  row.error = error;
  m.links.push_back(row);
}

// Measures among `parts` (ssh ones connected with their worker deployed, or with a problem) and
// stores the matrix; problems go to `out` and the measurement's note.
void measure_parts(db::Database& db, std::vector<Part>& parts, const std::string& worker_path,
                   const LinkJobOptions& job, Clock::time_point t0, LinkJobResult& out) {
  auto left = [&] { return job.timeout_s - since(t0); };
  const int k = job.intra_node ? 2 : 1;
  std::vector<Part*> ssh;  // the ssh nodes that take part, in the order given (node 0 = master)
  for (Part& p : parts)
    if (!p.local && p.problem.empty()) ssh.push_back(&p);

  db::LinkMeasurement m;
  m.transport = "gloo/tcp";
  m.run_id = job.run_id;
  const double budget = std::max(2.0, left() - 8);  // the workers stop before the job's own limit
  // The SSH nodes: one launch per node, all at once, each on its own thread and session.
  if (ssh.size() >= 2 || (ssh.size() == 1 && k >= 2)) {
    std::random_device rd;
    const int port = 20000 + static_cast<int>(rd() % 12768);
    const std::string master = ssh[0]->rec.host;
    std::vector<remote::ExecResult> results(ssh.size());
    std::vector<std::string> failures(ssh.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ssh.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          std::vector<std::string> argv = {ssh[i]->worker};
          for (auto& a :
               worker_args(job, k, static_cast<int>(ssh.size()), static_cast<int>(i), master, port, budget))
            argv.push_back(a);
          results[i] = ssh[i]->ssh().exec_argv(argv, budget + 6);
        } catch (const std::exception& e) {
          failures[i] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    std::vector<int64_t> ids;
    for (Part* p : ssh) ids.push_back(p->node_id);
    const auto report = failures[0].empty() ? report_of(results[0].out) : std::nullopt;
    if (report) {
      add_report_rows(*report, ids, m);
    } else {
      const std::string why = !failures[0].empty() ? failures[0]
                              : !results[0].err.empty()
                                  ? last_line(results[0].err)
                                  : "exit status " + std::to_string(results[0].exit_status);
      out.problems.push_back("The measurement on node " + ssh[0]->name + " gave no report: " + why);
      for (Part* a : ssh)
        for (Part* b : ssh)
          if (a != b || k >= 2)
            add_error(m, a->node_id, b->node_id, "no report from node " + ssh[0]->name + ": " + why);
    }
    for (size_t i = 1; i < ssh.size(); ++i)
      if (!failures[i].empty()) out.problems.push_back("Node " + ssh[i]->name + ": " + failures[i]);
  }
  // This machine: its intra-node figure only (it is not a node of a run).
  for (Part& p : parts) {
    if (!p.local || k < 2) continue;
    std::vector<std::string> argv = {worker_path};
    for (auto& a : worker_args(job, 2, 1, 0, "127.0.0.1", 0, std::max(2.0, left() - 3))) argv.push_back(a);
    ArgvCommand cmd;
    std::string why;
    if (!cmd.start(argv, std::max(3.0, left()), "", &why)) {
      p.problem = "This machine (local): " + why;
    } else {
      const CommandOutcome r = cmd.wait();
      if (const auto report = report_of(r.output)) {
        add_report_rows(*report, {p.node_id}, m);
      } else {
        p.problem = "This machine (local) gave no report: " + r.description + " " + last_line(r.output);
      }
    }
  }
  // Nodes that could not take part: error rows for their pairs with every other requested node.
  for (Part& p : parts) {
    if (p.problem.empty()) continue;
    out.problems.push_back(p.problem);
    for (Part& q : parts) {
      if (&q == &p) {
        if (k >= 2) add_error(m, p.node_id, p.node_id, p.problem);
        continue;
      }
      if (q.local || p.local) continue;
      add_error(m, p.node_id, q.node_id, p.problem);
      add_error(m, q.node_id, p.node_id, p.problem);
    }
  }
  if (m.links.empty()) {
    if (out.problems.empty())
      out.problems.push_back(
          "Nothing to measure: name at least two SSH nodes, or one with the intra-node figure.");
    return;
  }
  for (const std::string& s : out.problems) m.note += (m.note.empty() ? "" : "\n") + s;
  m.seconds = since(t0);
  const int64_t id = db::store_link_measurement(db, m);
  out.measurement = db::link_measurement(db, id);
}

}  // namespace

LinkJobResult run_link_job(const std::string& database_path, const std::vector<std::string>& node_names,
                           const std::string& worker_path,
                           const std::function<remote::SessionOptions(const db::SshNode&)>& options,
                           const std::atomic<bool>& cancel, const LinkJobOptions& job) {
  const auto t0 = Clock::now();
  LinkJobResult out;
  auto left = [&] { return job.timeout_s - since(t0); };
  try {
    db::OpenOptions o;
    o.create = false;
    o.quick_check = false;
    db::Database db(database_path, o);
    std::vector<Part> parts;
    std::set<std::string> seen;
    for (const std::string& name : node_names) {
      if (!seen.insert(name).second) continue;
      Part p;
      p.name = name;
      if (name == "local") {
        p.local = true;
        p.node_id = db::ensure_node(db, "local", "local");
      } else if (auto rec = db::find_ssh_node(db, name)) {
        p.rec = *rec;
        p.node_id = rec->id;
      } else {
        p.problem = "Node " + name + " is not a stored SSH node (see flotilla nodes list).";
      }
      parts.push_back(std::move(p));
    }
    // Connect and deploy, one node after the other (each bounded by its session's timeouts).
    remote::DeployOptions deploy;
    deploy.worker_path = worker_path;
    deploy.version = FLOTILLA_VERSION_STRING;
    for (Part& p : parts) {
      if (cancel) return out;
      if (p.local || !p.problem.empty()) continue;
      if (left() < 5) {
        p.problem = "Node " + p.name + " was not reached: the " +
                    std::to_string(static_cast<int>(job.timeout_s)) + " s of the measurement ran out first.";
        continue;
      }
      remote::SessionOptions so = options(p.rec);
      so.connect_timeout_s = std::min(so.connect_timeout_s, std::max(2.0, left() / 2));
      p.session = std::make_unique<remote::Session>(so);
      try {
        p.session->connect();
        p.worker = remote::deploy_worker(*p.session, deploy).worker;
      } catch (const remote::HostKeyError& e) {
        p.problem =
            e.problem() == remote::HostKeyProblem::kUnknown
                ? "Node " + p.name +
                      ": its host key is not trusted yet, so it was not logged into; select it and use "
                      "Verify host key…"
                : "Node " + p.name + ": " + e.what();
      } catch (const remote::AuthError& e) {
        p.problem = "Node " + p.name + ": " + e.what();
      } catch (const std::exception& e) {
        p.problem = "Node " + p.name + " is unreachable: " + e.what();
      }
    }
    if (cancel) return out;
    measure_parts(db, parts, worker_path, job, t0, out);
  } catch (const std::exception& e) {
    out.problems.push_back(std::string("The links could not be measured: ") + e.what());
  }
  return out;  // the sessions disconnect here, on this thread
}

LinkJobResult measure_links_on_nodes(db::Database& db, const std::vector<LinkNode>& nodes,
                                     const LinkJobOptions& job) {
  const auto t0 = Clock::now();
  LinkJobResult out;
  try {
    std::vector<Part> parts;
    for (const LinkNode& n : nodes) {
      Part p;
      p.name = n.rec.name;
      p.rec = n.rec;
      p.node_id = n.rec.id;
      p.borrowed = n.session;
      p.worker = n.worker;
      if (n.session == nullptr || n.worker.empty()) p.problem = "Node " + n.rec.name + " is not connected.";
      parts.push_back(std::move(p));
    }
    measure_parts(db, parts, "", job, t0, out);
  } catch (const std::exception& e) {
    out.problems.push_back(std::string("The links could not be measured: ") + e.what());
  }
  return out;
}

namespace {

std::map<int64_t, std::string> node_names(const db::Database& db) {
  std::map<int64_t, std::string> names;
  for (const db::Node& n : db::list_nodes(db)) names[n.id] = n.name;
  return names;
}

std::string name_of(const std::map<int64_t, std::string>& names, int64_t id) {
  const auto it = names.find(id);
  return it == names.end() ? "node " + std::to_string(id) : it->second;
}

std::string latency_text(double s) {
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

}  // namespace

std::optional<SlowestLink> slowest_link(const db::Database& db, const db::LinkMeasurement& m) {
  const db::NodeLink* inter = nullptr;
  const db::NodeLink* intra = nullptr;
  for (const db::NodeLink& l : m.links) {
    if (!l.bytes_per_s) continue;
    const db::NodeLink*& slot = l.from_node == l.to_node ? intra : inter;
    if (slot == nullptr || *l.bytes_per_s < *slot->bytes_per_s) slot = &l;
  }
  const db::NodeLink* pick = inter != nullptr ? inter : intra;
  if (pick == nullptr) return std::nullopt;
  const auto names = node_names(db);
  SlowestLink s;
  s.from = name_of(names, pick->from_node);
  s.to = name_of(names, pick->to_node);
  s.bytes_per_s = *pick->bytes_per_s;
  s.latency_s = pick->latency_s.value_or(0);
  return s;
}

std::string link_matrix_text(const db::Database& db, const db::LinkMeasurement& m) {
  const auto names = node_names(db);
  std::string out;
  char when[32] = "?";
  const std::time_t t = static_cast<std::time_t>(m.measured_at);
  std::tm tm{};
  if (gmtime_r(&t, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", m.seconds);
  out += "links measured " + std::string(when) + " over " + m.transport + " in " + secs + " s" +
         (m.run_id ? " (at the start of run " + std::to_string(*m.run_id) + ")" : "") + "\n";
  size_t width = 12;
  for (const auto& l : m.links)
    width = std::max(width, name_of(names, l.from_node).size() + name_of(names, l.to_node).size() + 4);
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %12s %14s\n", static_cast<int>(width), "from -> to", "latency",
                "bandwidth");
  out += line;
  for (const auto& l : m.links) {
    const std::string pair = l.from_node == l.to_node
                                 ? name_of(names, l.from_node) + " (within)"
                                 : name_of(names, l.from_node) + " -> " + name_of(names, l.to_node);
    if (l.bytes_per_s && l.latency_s)
      std::snprintf(line, sizeof line, "%-*s %12s %14s\n", static_cast<int>(width), pair.c_str(),
                    latency_text(*l.latency_s).c_str(), rate_text(*l.bytes_per_s).c_str());
    else
      std::snprintf(line, sizeof line, "%-*s   error: %s\n", static_cast<int>(width), pair.c_str(),
                    l.error.c_str());
    out += line;
  }
  if (const auto s = slowest_link(db, m))
    out += "slowest link: " + s->from + (s->from == s->to ? " (within the node)" : " -> " + s->to) + " " +
           rate_text(s->bytes_per_s) + ", " + latency_text(s->latency_s) + "\n";
  else
    out += "slowest link: none measured\n";
  if (!m.note.empty())
    out += "problems:\n  " + [&] {
      std::string n = m.note;
      for (size_t i = 0; (i = n.find('\n', i)) != std::string::npos; i += 3) n.replace(i, 1, "\n  ");
      return n;
    }() + "\n";
  return out;
}

}  // namespace flotilla::runs
