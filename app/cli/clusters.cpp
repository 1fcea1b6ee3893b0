// `flotilla clusters add|list|probe|trust|price|remove`: Slurm clusters reached at their login node.
//
// Decision: a cluster is checked as a whole before it is stored (login host, user and port as for
// SSH nodes, partition and account by the Slurm allow-list) and every problem is printed at once;
// the login node's host key follows the nodes' strict policy (an unknown key is refused with its
// fingerprint and the exact `clusters trust` command). Nothing typed here reaches a shell: the
// probe is a constant script (runs/node_ops.h).
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/terminal.h"
#include "db/clusters.h"
#include "db/errors.h"
#include "runs/cluster_admin.h"
#include "runs/node_admin.h"
#include "runs/node_ops.h"
#include "runs/slurm_run.h"

namespace flotilla::cli {
namespace {

void print_help() {
  std::printf(
      "Usage: flotilla clusters add NAME --login HOST [--user U] [--port P] [--key PATH]\n"
      "                             [--partition P] [--account A]\n"
      "       flotilla clusters list [--json]\n"
      "       flotilla clusters probe NAME [--json]\n"
      "       flotilla clusters trust NAME --fingerprint SHA256:...\n"
      "       flotilla clusters price NAME PARTITION [--gpu-hour USD] [--cpu-hour USD]\n"
      "       flotilla clusters remove NAME\n\n"
      "Slurm clusters that runs can use (flotilla run CONFIG --cluster NAME). Flotilla reaches a cluster\n"
      "through one SSH session to its login node (host keys as for nodes: the workspace's own\n"
      "known_hosts, an unknown key refused until `clusters trust`), runs Slurm's commands there in a\n"
      "login shell, and deploys the worker to the shared file system under ~/.flotilla. A probe reads\n"
      "scontrol show config, sinfo per node and the partitions. A price per partition ($ per allocated\n"
      "GPU-hour, or per CPU-hour for CPU partitions) makes costs and budgets work (docs/slurm.md).\n");
}

int clusters_add(const Context& ctx, ArgReader& args) {
  runs::ClusterFields f;
  const auto login = args.value("--login");
  const auto port = args.value("--port");
  f.user = args.value("--user").value_or("");
  f.key_path = args.value("--key").value_or("");
  f.partition = args.value("--partition").value_or("");
  f.account = args.value("--account").value_or("");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("clusters add needs exactly one NAME");
  if (!login) throw UsageError("clusters add needs --login HOST (the cluster's login node)");
  f.name = pos[0];
  f.login = *login;
  if (port) f.port = *port;
  // The checks the Clusters page's Add cluster… makes (runs/cluster_admin.h), every problem at once.
  const std::vector<runs::FieldProblem> problems = runs::validate_cluster_fields(f);
  for (const auto& p : problems) std::fprintf(stderr, "flotilla: clusters: %s\n", p.message.c_str());
  if (!problems.empty()) return kExitUsage;
  db::Database db = open_store(ctx);
  const db::SlurmCluster c = runs::add_cluster(db, f);
  std::printf("added cluster %s (login %s@%s:%d); next: flotilla clusters probe %s\n", c.name.c_str(),
              c.user.empty() ? "(local user)" : c.user.c_str(), c.login_host.c_str(), c.port, c.name.c_str());
  return kExitOk;
}

std::string price_text(const std::optional<double>& v, const char* unit) {
  if (!v) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, "$%.2f/%s", *v, unit);
  return buf;
}

int clusters_list(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  if (!args.positionals().empty()) throw UsageError("clusters list takes no NAME");
  db::Database db = open_store(ctx);
  const auto clusters = db::list_clusters(db);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : clusters) {
      nlohmann::json j = {{"name", c.name},      {"login", c.login_host}, {"port", c.port},
                          {"user", c.user},      {"key", c.key_path},     {"partition", c.partition},
                          {"account", c.account}};
      j["probe"] = c.probe_json.empty() ? nlohmann::json(nullptr)
                                        : nlohmann::json::parse(c.probe_json, nullptr, false);
      j["prices"] = nlohmann::json::array();
      for (const auto& p : db::partition_prices(db, c.id)) {
        nlohmann::json pj = {{"partition", p.partition}};
        pj["usd_per_gpu_hour"] =
            p.usd_per_gpu_hour ? nlohmann::json(*p.usd_per_gpu_hour) : nlohmann::json(nullptr);
        pj["usd_per_cpu_hour"] =
            p.usd_per_cpu_hour ? nlohmann::json(*p.usd_per_cpu_hour) : nlohmann::json(nullptr);
        j["prices"].push_back(pj);
      }
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  if (clusters.empty()) {
    std::printf("no clusters yet: flotilla clusters add NAME --login HOST\n");
    return kExitOk;
  }
  std::printf("%-14s %-28s %-10s %-10s %-8s %-6s %s\n", "NAME", "LOGIN", "PARTITION", "SLURM", "NODES",
              "GPUS", "PRICES");
  for (const auto& c : clusters) {
    const runs::ClusterProbe p = runs::cluster_probe_from_json(c.probe_json);
    int gpus = 0;
    for (const auto& n : p.nodes) gpus += n.gpus;
    std::string prices;
    for (const auto& pp : db::partition_prices(db, c.id)) {
      std::string t = price_text(pp.usd_per_gpu_hour, "GPU-h");
      const std::string cpu = price_text(pp.usd_per_cpu_hour, "CPU-h");
      if (!cpu.empty()) t += (t.empty() ? "" : " ") + cpu;
      prices += (prices.empty() ? "" : ", ") + pp.partition + " " + t;
    }
    const std::string login = c.login_host + ":" + std::to_string(c.port);
    std::printf("%-14s %-28s %-10s %-10s %-8s %-6s %s\n", c.name.c_str(), login.c_str(),
                c.partition.empty() ? "(default)" : c.partition.c_str(),
                p.config.version.empty() ? "(unprobed)" : p.config.version.c_str(),
                c.probe_json.empty() ? "-" : std::to_string(p.nodes.size()).c_str(),
                c.probe_json.empty() ? "-" : std::to_string(gpus).c_str(),
                prices.empty() ? "-" : prices.c_str());
  }
  return kExitOk;
}

int clusters_probe(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("clusters probe needs exactly one NAME");
  db::Database db = open_store(ctx);
  const db::SlurmCluster c = db::get_cluster(db, pos[0]);
  std::string stored;
  runs::ClusterProbe p;
  try {
    p = runs::check_cluster(ssh_access(ctx), db, c.name, &stored);
  } catch (const runs::Refusal& e) {
    note_stderr(e.what());
    return kExitRefused;
  }
  if (json) {
    std::printf("%s\n", nlohmann::json::parse(stored).dump(2).c_str());
    return kExitOk;
  }
  std::printf("cluster %s: Slurm %s (ClusterName %s)\n", c.name.c_str(), p.config.version.c_str(),
              p.config.cluster_name.c_str());
  std::printf("  accounting: %s\n", p.sacct ? "on (sacct answers)" : ("off: " + p.sacct_note).c_str());
  std::printf("  requeue: %s; preemption: %s (%s); finished jobs kept %lld s (MinJobAge)\n",
              p.config.requeue ? "allowed" : "off (JobRequeue=0)", p.config.preempt_type.c_str(),
              p.config.preempt_mode.c_str(), static_cast<long long>(p.config.min_job_age_s));
  std::printf("  squeue --json: %s\n", p.squeue_json ? "works" : "not available");
  std::printf("  partitions:\n");
  for (const auto& q : p.partitions) {
    const auto price = db::partition_price(db, c.id, q.name);
    std::string pt;
    if (price) {
      pt = price_text(price->usd_per_gpu_hour, "GPU-h");
      const std::string cpu = price_text(price->usd_per_cpu_hour, "CPU-h");
      if (!cpu.empty()) pt += (pt.empty() ? "" : " ") + cpu;
    }
    std::printf("    %-12s %-5s max %-10s %3d nodes %4d CPUs %3d GPUs  %s%s\n", q.name.c_str(),
                q.state.c_str(), q.max_time.c_str(), q.total_nodes, q.total_cpus, q.total_gpus,
                q.is_default ? "(default) " : "", pt.empty() ? "unpriced" : pt.c_str());
  }
  std::printf("  nodes:\n");
  for (const auto& n : p.nodes) {
    std::string gpus =
        n.gpus > 0 ? std::to_string(n.gpus) + "x " + (n.gpu_type.empty() ? "gpu" : n.gpu_type) : "-";
    std::printf("    %-12s %-10s %4d CPUs %8lld MB  GPUs %s\n", n.name.c_str(), n.state.c_str(), n.cpus,
                static_cast<long long>(n.memory_mb), gpus.c_str());
  }
  return kExitOk;
}

int clusters_trust(const Context& ctx, ArgReader& args) {
  const auto fp = args.value("--fingerprint");
  const auto pos = args.positionals();
  if (pos.size() != 1 || !fp) throw UsageError("clusters trust needs NAME --fingerprint SHA256:...");
  if (fp->rfind("SHA256:", 0) != 0)
    throw UsageError(
        "clusters trust: the fingerprint must be the SHA256:... text that clusters probe printed");
  db::Database db = open_store(ctx);
  const db::SlurmCluster c = db::get_cluster(db, pos[0]);
  try {
    runs::trust_host_key(ssh_access(ctx), db, c.name, *fp, true);
  } catch (const runs::Refusal& e) {  // "cluster NAME: ..."
    note_stderr(e.what());
    return kExitRefused;
  }
  std::printf("trusted %s for cluster %s (%s)\n", fp->c_str(), c.name.c_str(),
              runs::workspace_known_hosts(database_path(ctx)).c_str());
  return kExitOk;
}

std::optional<double> price_arg(ArgReader& args, const char* name) {
  const auto v = args.number(name);
  if (v && !(*v >= 0)) throw UsageError(std::string(name) + " must be a price of 0 or more (USD)");
  return v;
}

int clusters_price(const Context& ctx, ArgReader& args) {
  db::PartitionPrice p;
  p.usd_per_gpu_hour = price_arg(args, "--gpu-hour");
  p.usd_per_cpu_hour = price_arg(args, "--cpu-hour");
  const auto pos = args.positionals();
  if (pos.size() != 2)
    throw UsageError("clusters price needs NAME PARTITION [--gpu-hour USD] [--cpu-hour USD]");
  if (!p.usd_per_gpu_hour && !p.usd_per_cpu_hour)
    throw UsageError("clusters price needs --gpu-hour or --cpu-hour");
  if (const std::string why = runs::validate_slurm_name("partition", pos[1]); !why.empty()) {
    std::fprintf(stderr, "flotilla: clusters: %s\n", why.c_str());
    return kExitUsage;
  }
  p.partition = pos[1];
  db::Database db = open_store(ctx);
  const db::SlurmCluster c = db::get_cluster(db, pos[0]);
  db::set_partition_price(db, c.id, p);
  std::string t = price_text(p.usd_per_gpu_hour, "GPU-h");
  const std::string cpu = price_text(p.usd_per_cpu_hour, "CPU-h");
  if (!cpu.empty()) t += (t.empty() ? "" : " ") + cpu;
  std::printf("cluster %s partition %s: %s\n", c.name.c_str(), p.partition.c_str(), t.c_str());
  return kExitOk;
}

int clusters_remove(const Context& ctx, ArgReader& args) {
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("clusters remove needs exactly one NAME");
  db::Database db = open_store(ctx);
  db::remove_cluster(db, pos[0]);
  std::printf("removed cluster %s\n", pos[0].c_str());
  return kExitOk;
}

}  // namespace

int cmd_clusters(const Context& ctx) {
  ArgReader args(ctx.args, "clusters");
  if (ctx.args.empty() || args.flag("--help")) {
    print_help();
    return kExitOk;
  }
  std::vector<std::string> rest(ctx.args.begin() + 1, ctx.args.end());
  ArgReader sub(rest, "clusters " + ctx.args[0]);
  const std::string& what = ctx.args[0];
  if (what == "add") return clusters_add(ctx, sub);
  if (what == "list") return clusters_list(ctx, sub);
  if (what == "probe") return clusters_probe(ctx, sub);
  if (what == "trust") return clusters_trust(ctx, sub);
  if (what == "price") return clusters_price(ctx, sub);
  if (what == "remove") return clusters_remove(ctx, sub);
  throw UsageError("unknown clusters command '" + what + "' (add, list, probe, trust, price, remove)");
}

}  // namespace flotilla::cli
