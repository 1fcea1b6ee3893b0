// Where a run executes and on what layout, from the command line (see run_args.h).
#include "app/cli/run_args.h"

#include <algorithm>
#include <cstdlib>

namespace flotilla::cli {
namespace {

// A whole number from `lo` to `hi` given as `opt`, or nullopt when the option was not given.
std::optional<int> whole(const std::optional<double>& v, const std::string& opt, int lo, int hi) {
  if (!v) return std::nullopt;
  if (*v < lo || *v > hi || *v != static_cast<double>(static_cast<int>(*v)))
    throw UsageError(opt + " needs a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(*v);
}

}  // namespace

std::vector<std::string> parse_node_list(const std::string& text, const std::string& option) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string name =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty())
      throw UsageError(option + " needs node names separated by commas, e.g. " + option + " a,b");
    for (const auto& seen : out)
      if (seen == name) throw UsageError(option + " names node '" + name + "' twice");
    out.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<runs::RecoveryChoice> read_recovery(ArgReader& args) {
  const bool on = args.flag("--auto-recover");
  const std::optional<std::string> spare_list = args.value("--spare");
  const std::optional<double> max_recoveries = args.number("--max-recoveries");
  const std::optional<double> recover_after = args.number("--recover-after");
  const bool mirror = args.flag("--mirror-checkpoints");
  if (!on && (spare_list || max_recoveries || recover_after || mirror))
    throw UsageError(
        "--spare, --max-recoveries, --recover-after and --mirror-checkpoints go with --auto-recover");
  if (!on) return std::nullopt;
  runs::RecoveryChoice r;
  r.enabled = true;
  r.mirror = mirror;
  if (const auto k = whole(max_recoveries, "--max-recoveries", 1, 100)) r.max_recoveries = *k;
  if (recover_after) {
    if (!(*recover_after >= 0 && *recover_after <= 3600))
      throw UsageError("--recover-after needs seconds from 0 to 3600");
    r.settle_seconds = *recover_after;
  }
  if (spare_list) r.spares = parse_node_list(*spare_list, "--spare");
  return r;
}

PlaceArgs read_place(ArgReader& args, bool recovery_needs_nodes) {
  PlaceArgs out;
  const bool local = args.flag("--local");
  const std::optional<std::string> cluster = args.value("--cluster");
  const std::optional<std::string> node_list = args.value("--nodes");
  const std::optional<double> tasks = args.number("--tasks-per-node");
  const std::optional<double> gpus = args.number("--gpus-per-node");
  const std::optional<std::string> time_limit = args.value("--time");
  const std::optional<std::string> partition = args.value("--partition");
  const std::optional<std::string> account = args.value("--account");
  const std::optional<double> lead = args.number("--signal-lead");
  const bool auto_resume = args.flag("--auto-resume");
  const std::optional<double> nproc = args.number("--nproc-per-node");
  const std::optional<double> master_port = args.number("--master-port");
  out.no_bind = args.flag("--no-bind");
  const std::optional<runs::RecoveryChoice> recovery = read_recovery(args);
  out.recovery = recovery;
  if (!cluster && (tasks || gpus || time_limit || partition || account || lead || auto_resume))
    throw UsageError(
        "--tasks-per-node, --gpus-per-node, --time, --partition, --account, --signal-lead and --auto-resume "
        "go "
        "with --cluster");
  if ((!node_list || cluster) &&
      (nproc || master_port || (recovery && (recovery_needs_nodes || cluster || local))))
    throw UsageError("--nproc-per-node, --master-port and --auto-recover go with --nodes");
  if (local && (cluster || node_list))
    throw UsageError("--local, --nodes and --cluster name one place: choose one");
  if (local) out.where = runs::Placement::here();
  if (cluster) {
    runs::Placement p = runs::Placement::on_cluster(*cluster);
    if (node_list) {
      char* end = nullptr;
      const long n = std::strtol(node_list->c_str(), &end, 10);
      if (node_list->empty() || *end != '\0' || n < 1 || n > 100000)
        throw UsageError("with --cluster, --nodes needs a number of nodes (is '" + *node_list + "')");
      p.slurm_nodes = static_cast<int>(n);
    }
    p.tasks_per_node = whole(tasks, "--tasks-per-node", 1, 1024);
    p.gpus_per_node = whole(gpus, "--gpus-per-node", 0, 1024).value_or(0);
    p.signal_lead_s = whole(lead, "--signal-lead", 0, 86400).value_or(300);
    if (time_limit) p.time_limit = *time_limit;
    if (partition) p.partition = *partition;
    if (account) p.account = *account;
    p.auto_resume = auto_resume;
    out.where = p;
  } else if (node_list) {
    runs::Placement p = runs::Placement::on_nodes(parse_node_list(*node_list));
    p.nproc_per_node = whole(nproc, "--nproc-per-node", 1, 1024);
    p.master_port = whole(master_port, "--master-port", 1, 65535);
    p.no_bind = out.no_bind;
    if (recovery) {
      for (const auto& spare : recovery->spares)
        if (std::find(p.nodes.begin(), p.nodes.end(), spare) != p.nodes.end())
          throw UsageError("--spare names node '" + spare + "', which is already in --nodes");
      p.recovery = *recovery;
    }
    out.where = p;
  }
  return out;
}

runs::Layout read_layout(ArgReader& args) {
  runs::Layout layout;
  const std::optional<std::string> text = args.value("--layout");
  if (!text) return layout;
  const std::string help = " (--layout takes dp=N,tp=N,pp=N,zero=N, any of them, e.g. --layout dp=2,tp=1)";
  size_t start = 0;
  for (;;) {
    const size_t comma = text->find(',', start);
    const std::string part =
        text->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = part.find('=');
    if (eq == std::string::npos) throw UsageError("--layout: '" + part + "' is not KEY=N" + help);
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    const long lo = key == "zero" ? 0 : 1;
    if (value.empty() || *end != '\0' || n < lo || n > 4096)
      throw UsageError("--layout: " + key + " needs a whole number from " + std::to_string(lo) + " (is '" +
                       value + "')" + help);
    std::optional<int>* field = key == "dp"     ? &layout.dp
                                : key == "tp"   ? &layout.tp
                                : key == "pp"   ? &layout.pp
                                : key == "zero" ? &layout.zero
                                                : nullptr;
    if (!field) throw UsageError("--layout: unknown key '" + key + "'" + help);
    if (*field) throw UsageError("--layout: " + key + " given twice");
    *field = static_cast<int>(n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return layout;
}

}  // namespace flotilla::cli
