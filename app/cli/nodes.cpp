// `flotilla nodes add|edit|list|probe|latency|links|trust|remove`: SSH nodes in the store, checked over SSH.
//
// Decision: every field is validated as a whole node before anything is stored or any
// connection is made (runs/node_admin.h, the SSH layer's own checks), and every problem is printed at once;
// nothing the user typed reaches a shell or an ssh command line (libssh takes the values as options, probe
// scripts are constants). Host keys follow the library's strict policy: an unknown host is
// refused with its SHA256 fingerprint and the exact `nodes trust` command, and `nodes trust`
// accepts only the key the node presents now (docs/reliability.md S1-S3).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/terminal.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "engine/core/probe.h"
#include "flotilla/build_info.h"
#include "runs/node_admin.h"
#include "runs/node_bridge.h"
#include "runs/node_ops.h"
#include "runs/power_settings.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;

void print_help() {
  std::printf(
      "Usage: flotilla nodes add NAME --host HOST [--port P] [--user U] [--key PATH]\n"
      "                          [--price-per-hour USD] [--spot] [--label L]...\n"
      "       flotilla nodes edit NAME [--name NEW] [--host H] [--port P] [--user U] [--key PATH]\n"
      "                          [--price-per-hour USD] [--spot|--on-demand] [--label L]...\n"
      "       flotilla nodes list [--json]\n"
      "       flotilla nodes probe NAME [--json]\n"
      "       flotilla nodes latency NAME,NAME[,...] [--count N] [--json]\n"
      "       flotilla nodes links [NAME,NAME[,...]] [--bytes SIZE] [--timeout S] [--no-intra] [--json]\n"
      "       flotilla nodes trust NAME --fingerprint SHA256:...\n"
      "       flotilla nodes forget-key NAME\n"
      "       flotilla nodes remove NAME\n"
      "       flotilla nodes autostop NAME [--idle 30m] [--stop-arg ARG]... [--start-arg ARG]...\n"
      "                          [--no-start-cmd] [--off] [--json]\n\n"
      "SSH nodes that runs can use (flotilla run CONFIG --nodes a,b). Host keys are kept in the\n"
      "workspace's own known_hosts file; an unknown node is refused until you verify its fingerprint\n"
      "and run `nodes trust`. No password or passphrase is ever stored: use ssh-agent, or type the\n"
      "key's passphrase when asked. A node whose host key changed is refused; once its administrator\n"
      "has confirmed the new fingerprint, `nodes forget-key NAME` removes the old key from that file and\n"
      "`nodes trust` records the new one.\n\n"
      "nodes latency is the reachability check (TCP connect time to sshd): it deploys the worker to\n"
      "each node (reused when present) and measures the median TCP connect time to each node's sshd\n"
      "from this machine and from every other node (N connects per link, default 5); the matrix is\n"
      "stored and shown on the Nodes page. It is not the speed of the links runs use: see nodes links.\n\n"
      "nodes links measures the link matrix on the collective path: the worker's ranks on the named\n"
      "nodes (two per node for the figure within a node, unless --no-intra) form one process group\n"
      "over the transport runs use (Gloo TCP; NCCL where GPUs are) and measure, one ordered pair at a\n"
      "time, the one-way latency and the bandwidth of --bytes messages (default 8M). Bounded by\n"
      "--timeout (default 60 s); a node that cannot take part gets error rows. The matrix is stored\n"
      "(the planner and a run's communication efficiency use it); with no names, the newest is shown.\n\n"
      "nodes autostop stops a rented node with your own command once no queued work has wanted it for\n"
      "--idle (30m, 90s, 2h), and starts it with your start command when work arrives (the queue then\n"
      "waits for its probe). Each command is given one argument per option, in order, e.g.\n"
      "  --stop-arg gcloud --stop-arg compute --stop-arg instances --stop-arg stop --stop-arg vm-1\n"
      "  --stop-arg=--zone=us-east1-b\n"
      "It runs on this machine without a shell; --off turns autostop off and keeps the commands.\n");
}

// Reads the options of `nodes add` into `f`.
void read_fields(ArgReader& args, runs::NodeFields& f, bool* spot) {
  if (auto v = args.value("--host")) f.host = *v;
  if (auto v = args.value("--port")) f.port = *v;
  if (auto v = args.value("--user")) f.user = *v;
  if (auto v = args.value("--key")) f.key_path = *v;
  if (auto v = args.value("--price-per-hour")) f.price_per_hour = *v;
  const auto labels = args.values("--label");
  if (!labels.empty()) f.labels = labels;
  if (args.flag("--spot")) *spot = true;
  if (args.flag("--on-demand")) *spot = false;
}

// Validates; on problems prints them all and returns false.
bool check_fields(const runs::NodeFields& f) {
  const auto problems = runs::validate_node_fields(f);
  for (const auto& p : problems) std::fprintf(stderr, "flotilla: nodes: %s\n", p.message.c_str());
  return problems.empty();
}

int nodes_add(const Context& ctx, ArgReader& args) {
  runs::NodeFields f;
  bool spot = false;
  read_fields(args, f, &spot);
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes add needs exactly one NAME");
  f.name = pos[0];
  if (f.host.empty()) throw UsageError("nodes add needs --host HOST");
  if (!check_fields(f)) return kExitUsage;
  db::Database db = open_store(ctx);
  if (db::find_node(db, f.name))
    throw UsageError("a node named '" + f.name + "' exists: nodes edit changes it");
  f.spot = spot;
  db::add_ssh_node(db, runs::node_from_fields(f));
  std::printf("added node %s (%s@%s:%s); next: flotilla nodes probe %s\n", f.name.c_str(),
              f.user.empty() ? "(local user)" : f.user.c_str(), f.host.c_str(), f.port.c_str(),
              f.name.c_str());
  return kExitOk;
}

int nodes_edit(const Context& ctx, ArgReader& args) {
  const auto new_name = args.value("--name");
  db::Database db = open_store(ctx);
  // Options first (ArgReader consumes them), then the positional NAME.
  runs::NodeFields given;
  given.port.clear();
  if (auto v = args.value("--host")) given.host = *v;
  if (auto v = args.value("--port")) given.port = *v;
  if (auto v = args.value("--user")) given.user = *v;
  const auto key = args.value("--key");
  const auto price = args.value("--price-per-hour");
  given.labels = args.values("--label");
  const bool spot_given = args.flag("--spot");
  const bool on_demand_given = args.flag("--on-demand");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes edit needs exactly one NAME");
  const db::SshNode old = db::get_ssh_node(db, pos[0]);
  runs::NodeFields f = runs::fields_from_node(old);
  bool spot = old.spot;
  if (new_name) f.name = *new_name;
  if (!given.host.empty()) f.host = given.host;
  if (!given.port.empty()) f.port = given.port;
  if (!given.user.empty()) f.user = given.user;
  if (key) f.key_path = *key;
  if (price) f.price_per_hour = *price;
  if (!given.labels.empty()) f.labels = given.labels;
  if (spot_given) spot = true;
  if (on_demand_given) spot = false;
  if (!check_fields(f)) return kExitUsage;
  f.spot = spot;
  db::update_ssh_node(db, old.name, runs::node_from_fields(f));
  std::printf("updated node %s\n", f.name.c_str());
  return kExitOk;
}

int nodes_list(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  if (!args.positionals().empty()) throw UsageError("nodes list takes no NAME");
  db::Database db = open_store(ctx);
  const auto nodes = db::list_ssh_nodes(db);
  std::map<int64_t, db::NodePower> power;
  for (auto& p : db::list_node_power(db)) power[p.node_id] = p;
  // "30 min (on)", "30 min (stopped)", "-": the idle limit and the node's power state.
  const auto autostop_text = [&](int64_t id) -> std::string {
    const auto it = power.find(id);
    if (it == power.end() || !it->second.idle_limit_s) return "-";
    return runs::idle_duration_text(*it->second.idle_limit_s) + " (" + it->second.state + ")";
  };
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& n : nodes) {
      nlohmann::json j = {{"name", n.name},     {"host", n.host},         {"port", n.port},
                          {"user", n.user},     {"key", n.key_path},      {"spot", n.spot},
                          {"labels", n.labels}, {"gpu_type", n.gpu_type}, {"gpu_count", n.gpu_count}};
      j["price_per_hour"] = n.usd_per_hour ? nlohmann::json(*n.usd_per_hour) : nlohmann::json(nullptr);
      const auto it = power.find(n.id);
      if (it != power.end() && it->second.idle_limit_s)
        j["autostop"] = {{"idle_limit_s", *it->second.idle_limit_s},
                         {"state", it->second.state},
                         {"stop_argv", it->second.stop_argv},
                         {"start_argv", it->second.start_argv}};
      else
        j["autostop"] = nullptr;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  if (nodes.empty()) {
    std::printf("no nodes yet: flotilla nodes add NAME --host HOST\n");
    return kExitOk;
  }
  std::printf("%-16s %-28s %-10s %-10s %-14s %-18s %s\n", "NAME", "HOST", "USER", "$/HOUR", "GPUS", "AUTOSTOP",
              "LABELS");
  for (const auto& n : nodes) {
    const std::string addr = n.host + ":" + std::to_string(n.port);
    char price[32] = "-";
    if (n.usd_per_hour) std::snprintf(price, sizeof price, "%.2f%s", *n.usd_per_hour, n.spot ? " spot" : "");
    const std::string gpus = n.gpu_count > 0 ? std::to_string(n.gpu_count) + "x " + n.gpu_type : "-";
    std::printf("%-16s %-28s %-10s %-10s %-14s %-18s %s\n", n.name.c_str(), addr.c_str(),
                n.user.empty() ? "-" : n.user.c_str(), price, gpus.c_str(), autostop_text(n.id).c_str(),
                db::join_labels(n.labels).c_str());
  }
  return kExitOk;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

int nodes_probe(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes probe needs exactly one NAME");
  db::Database db = open_store(ctx);
  const db::SshNode node = db::get_ssh_node(db, pos[0]);
  runs::NodeCheck check;
  try {
    check = runs::check_node(ssh_access(ctx), db, node.name, 3);
  } catch (const runs::Refusal& e) {
    note_stderr(e.what());
    return kExitRefused;
  }
  const runs::NodeProbe& p = check.probe;
  const double latency = check.latency_s;
  if (json) {
    nlohmann::json j = {{"name", node.name},
                        {"reachable", true},
                        {"fingerprint", check.fingerprint},
                        {"os", p.os},
                        {"kernel", p.kernel},
                        {"arch", p.arch},
                        {"glibc", p.glibc},
                        {"cpus", p.cpus},
                        {"memory_total_bytes", p.memory_total_bytes},
                        {"memory_available_bytes", p.memory_available_bytes},
                        {"disk_free_bytes", p.disk_free_bytes},
                        {"gpu_status", p.gpu_status},
                        {"latency_ms", latency * 1000}};
    j["gpus"] = nlohmann::json::array();
    for (const auto& g : p.gpus)
      j["gpus"].push_back({{"index", g.index},
                           {"name", g.name},
                           {"memory_total_bytes", g.memory_total_bytes},
                           {"memory_used_bytes", g.memory_used_bytes},
                           {"utilization_pct", g.utilization_pct},
                           {"temperature_c", g.temperature_c},
                           {"power_w", g.power_w},
                           {"driver", g.driver}});
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("node        %s (%s, host key %s)\n", node.name.c_str(), check.known_hosts_name.c_str(),
              check.fingerprint.c_str());
  std::printf("os          %s, kernel %s, %s, glibc %s\n", p.os.c_str(), p.kernel.c_str(), p.arch.c_str(),
              p.glibc.empty() ? "-" : p.glibc.c_str());
  std::printf("cpus        %d\nmemory      %s total, %s available\ndisk free   %s (home)\n", p.cpus,
              gib(p.memory_total_bytes).c_str(), gib(p.memory_available_bytes).c_str(),
              gib(p.disk_free_bytes).c_str());
  if (p.gpus.empty()) std::printf("gpus        none (%s)\n", p.gpu_status.c_str());
  for (const auto& g : p.gpus)
    std::printf("gpu %-7d %s, %s / %s, %.0f%% busy, %.0f C, %.0f W, driver %s\n", g.index, g.name.c_str(),
                gib(g.memory_used_bytes).c_str(), gib(g.memory_total_bytes).c_str(), g.utilization_pct,
                g.temperature_c, g.power_w, g.driver.c_str());
  std::printf("latency     %.1f ms (median round trip)\n", latency * 1000);
  return kExitOk;
}

// "refused", "timed out", ... : the part of an error before its first ':' (at most 14 characters).
std::string short_error(const std::string& e) {
  std::string s = e.substr(0, e.find(':'));
  if (s.size() > 14) s = s.substr(0, 13) + "~";
  return s;
}

int nodes_latency(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  const auto count_v = args.number("--count");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes latency needs the nodes as one list: NAME,NAME[,...]");
  int count = 5;
  if (count_v) {
    if (*count_v != std::floor(*count_v) || *count_v < 1 || *count_v > kMaxConnectCount)
      throw UsageError("nodes latency: --count must be a whole number 1-" + std::to_string(kMaxConnectCount));
    count = static_cast<int>(*count_v);
  }
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (size_t start = 0;;) {
    const size_t comma = pos[0].find(',', start);
    const std::string name =
        pos[0].substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty())
      throw UsageError("nodes latency: an empty node name in '" + runs::printable(pos[0]) + "'");
    if (!seen.insert(name).second)
      throw UsageError("nodes latency: node '" + runs::printable(name) + "' is listed twice");
    names.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  db::Database db = open_store(ctx);
  std::vector<db::SshNode> recs;
  for (const auto& name : names) recs.push_back(db::get_ssh_node(db, name));
  std::vector<db::NodeLatency> rows;
  try {
    rows = runs::measure_latency_matrix(
        ssh_access(ctx), db, recs, count, runs::find_worker(), FLOTILLA_VERSION_STRING,
        [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  } catch (const runs::Refusal& e) {
    note_stderr(e.what());
    return kExitRefused;
  }

  std::map<int64_t, std::string> name_of;
  const int64_t here = db::ensure_node(db, "local", "local");
  name_of[here] = "this machine";
  for (const auto& r : recs) name_of[r.id] = r.name;
  if (json) {
    nlohmann::json out = {{"nodes", names}, {"count", count}, {"links", nlohmann::json::array()}};
    for (const auto& r : rows)
      out["links"].push_back({{"from", name_of[r.from_node]},
                              {"to", name_of[r.to_node]},
                              {"rtt_ms", r.rtt_ms ? nlohmann::json(*r.rtt_ms) : nlohmann::json(nullptr)},
                              {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
                              {"measured_at", r.measured_at}});
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::map<std::pair<int64_t, int64_t>, const db::NodeLatency*> cell;
  for (const auto& r : rows) cell[{r.from_node, r.to_node}] = &r;
  std::printf("reachability (TCP connect time to sshd): median ms, %d per link, %s\n", count,
              format_time(rows.empty() ? db::now_seconds() : rows.front().measured_at).c_str());
  std::printf("%-16s", "from \\ to");
  for (const auto& r : recs) std::printf(" %14s", r.name.c_str());
  std::printf("\n");
  std::vector<int64_t> froms = {here};
  for (const auto& r : recs) froms.push_back(r.id);
  std::vector<std::string> errors;
  for (int64_t from : froms) {
    std::printf("%-16s", name_of[from].c_str());
    for (const auto& to : recs) {
      const auto it = cell.find({from, to.id});
      std::string text = "-";
      if (it != cell.end() && it->second->rtt_ms) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", *it->second->rtt_ms);
        text = *it->second->rtt_ms < 0.05 ? "<0.1" : buf;  // not "0.0", which reads as unmeasured
      } else if (it != cell.end()) {
        text = short_error(it->second->error);
        errors.push_back(name_of[from] + " -> " + to.name + ": " + it->second->error);
      }
      std::printf(" %14s", text.c_str());
    }
    std::printf("\n");
  }
  for (const auto& e : errors) std::printf("  %s\n", e.c_str());
  return kExitOk;
}

int nodes_trust(const Context& ctx, ArgReader& args) {
  const auto fp = args.value("--fingerprint");
  const auto pos = args.positionals();
  if (pos.size() != 1 || !fp) throw UsageError("nodes trust needs NAME --fingerprint SHA256:...");
  if (fp->rfind("SHA256:", 0) != 0)
    throw UsageError("nodes trust: the fingerprint must be the SHA256:... text that nodes probe printed");
  db::Database db = open_store(ctx);
  const db::SshNode node = db::get_ssh_node(db, pos[0]);
  try {
    runs::trust_host_key(ssh_access(ctx), db, node.name, *fp);
  } catch (const runs::Refusal& e) {  // "node NAME: ..."
    note_stderr(e.what());
    return kExitRefused;
  }
  std::printf("trusted %s for node %s (%s)\n", fp->c_str(), node.name.c_str(),
              runs::workspace_known_hosts(database_path(ctx)).c_str());
  return kExitOk;
}

// The host-key remedy for a node that was reinstalled: drops its address's lines from the app's
// known_hosts (no connection is made); `nodes trust` then records the new key.
int nodes_forget_key(const Context& ctx, ArgReader& args) {
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes forget-key needs exactly one NAME");
  db::Database db = open_store(ctx);
  const db::SshNode node = db::get_ssh_node(db, pos[0]);
  const std::string kh_name = runs::known_hosts_name(node);
  const std::string file = runs::workspace_known_hosts(database_path(ctx));
  const int forgotten = runs::forget_host_key(ssh_access(ctx), db, node);
  if (forgotten == 0) {
    std::printf("no host key recorded for node %s (%s) in %s; nothing changed\n", node.name.c_str(),
                kh_name.c_str(), file.c_str());
    return kExitOk;
  }
  std::printf(
      "forgot %d host key%s of node %s (%s) in %s\nnext: flotilla nodes probe %s, verify the fingerprint "
      "it prints, then flotilla nodes trust %s --fingerprint SHA256:...\n",
      forgotten, forgotten == 1 ? "" : "s", node.name.c_str(), kh_name.c_str(), file.c_str(),
      node.name.c_str(), node.name.c_str());
  return kExitOk;
}

int nodes_remove(const Context& ctx, ArgReader& args) {
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes remove needs exactly one NAME");
  db::Database db = open_store(ctx);
  const db::SshNode node = db::get_ssh_node(db, pos[0]);
  db::remove_node(db, node.name);
  // Another node at the same address keeps the key.
  const int forgotten = runs::forget_host_key(ssh_access(ctx), db, node, true);
  std::printf("removed node %s%s\n", node.name.c_str(), forgotten > 0 ? " and its host key" : "");
  return kExitOk;
}

}  // namespace

int cmd_nodes(const Context& ctx) {
  ArgReader args(ctx.args, "nodes");
  if (ctx.args.empty() || args.flag("--help")) {
    print_help();
    return kExitOk;
  }
  std::vector<std::string> rest(ctx.args.begin() + 1, ctx.args.end());
  ArgReader sub(rest, "nodes " + ctx.args[0]);
  const std::string& verb = ctx.args[0];
  if (verb == "add") return nodes_add(ctx, sub);
  if (verb == "edit") return nodes_edit(ctx, sub);
  if (verb == "list") return nodes_list(ctx, sub);
  if (verb == "probe") return nodes_probe(ctx, sub);
  if (verb == "latency") return nodes_latency(ctx, sub);
  if (verb == "links") return nodes_links(ctx, sub);
  if (verb == "trust") return nodes_trust(ctx, sub);
  if (verb == "forget-key") return nodes_forget_key(ctx, sub);
  if (verb == "remove") return nodes_remove(ctx, sub);
  if (verb == "autostop") return nodes_autostop(ctx, sub);
  throw UsageError("unknown nodes command '" + verb +
                   "' (add, edit, list, probe, latency, links, trust, forget-key, remove, autostop)");
}

}  // namespace flotilla::cli
