// What each place offers now, and the measured speeds of earlier runs per place (see queue_place.h).
//
// Decision: a place's price per hour for N devices is read through db::node_rate, the rule every
// accrual charges by (a catalogue price per GPU x devices; a flat or power rate x devices /
// gpu_count, the whole node when gpu_count is 0), as a fixed part and a part per device, so the
// predicted cost is what the Costs page will show for the same hours. When the node has no price,
// the catalogue's cheapest on-demand entry for its probed GPU type is used, as runs/pricing.h
// resolve_run_price does when the run starts; a Slurm partition is charged per allocated GPU (GPU
// runs) or CPU (CPU runs), as runs/slurm_run.cpp charges its jobs.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <thread>

#include "db/clusters.h"
#include "db/costs.h"
#include "db/links.h"
#include "db/nodes.h"
#include "db/place_reads.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "remote/slurm_cluster.h"
#include "runs/plan_history.h"
#include "runs/queue_place.h"
#include "runs/run_speed.h"

namespace flotilla::runs {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string dollars(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.4g", v);
  return buf;
}

// node_rate is linear in the devices: rate(1) and rate(2) give its fixed and per-device parts.
PriceRule node_price_rule(const db::Database& db, const db::Node& node,
                          const std::vector<db::PriceEntry>& catalogue, bool gpu_run) {
  PriceRule r;
  const db::Rate one = db::node_rate(db, node.id, 1), two = db::node_rate(db, node.id, 2);
  if (one.usd_per_hour > 0) {
    r.priced = true;
    r.usd_per_device_hour = std::max(0.0, two.usd_per_hour - one.usd_per_hour);
    r.usd_fixed_per_hour = std::max(0.0, one.usd_per_hour - r.usd_per_device_hour);
    r.source = one.source;
    return r;
  }
  const std::string gpu = lower(node.gpu_type);
  const db::PriceEntry* best = nullptr;
  const auto per_gpu = [](const db::PriceEntry& e) {
    return e.on_demand_usd_per_hour / static_cast<double>(std::max<int64_t>(1, e.gpus));
  };
  if (gpu_run && !gpu.empty())
    for (const auto& e : catalogue)
      if (lower(e.gpu_type) == gpu && (!best || per_gpu(e) < per_gpu(*best))) best = &e;
  if (best) {
    r.priced = true;
    r.usd_per_device_hour = per_gpu(*best);
    r.source = "catalogue " + best->provider + "/" + best->item + " on-demand, " +
               dollars(r.usd_per_device_hour) + "/GPU-h";
    return r;
  }
  r.source = "no price set for " + (node.name == "local" ? std::string("this machine") : "node " + node.name);
  return r;
}

struct Busy {
  int gpus = 0, cpus = 0;
  std::vector<BusyRun> gpu_runs, cpu_runs;
  void add(const BusyRun& b, bool gpu) {
    (gpu ? gpus : cpus) += b.devices;
    (gpu ? gpu_runs : cpu_runs).push_back(b);
  }
};

uint64_t sheet_memory(const std::string& gpu_type) {
  DeviceProfile p;
  const std::string name = gpu_profile_for(gpu_type);
  return !name.empty() && find_gpu_profile(name, "bf16", &p) ? p.mem_bytes : 0;
}

}  // namespace

std::string gpu_profile_for(const std::string& gpu_type) {
  const std::string t = lower(gpu_type);
  const auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("h200")) return "h200";
  if (has("h100")) return "h100-sxm";
  if (has("a100")) return has("40g") ? "a100-40gb" : "a100-80gb";
  if (has("l40s")) return "l40s";
  if (has("a10")) return "a10-24gb";
  if (has("4090")) return "rtx-4090";
  if (has("l4")) return "l4";
  return "";
}

LocalFacts local_facts(const ProbeResult& probe) {
  LocalFacts f;
  f.gpus = static_cast<int>(probe.gpus.size());
  if (!probe.gpus.empty()) {
    f.gpu_type = probe.gpus[0].name;
    f.gpu_mem_bytes = probe.gpus[0].memory_total_bytes;
    for (const auto& g : probe.gpus) f.gpu_mem_bytes = std::min(f.gpu_mem_bytes, g.memory_total_bytes);
  }
  f.cpu_cores = probe.physical_cores > 0 ? probe.physical_cores : probe.logical_cpus;
  f.host_mem_bytes = probe.memory_available_bytes;
  return f;
}

std::vector<PlaceOffer> list_places(const db::Database& db, const InventoryOptions& options) {
  const double now = options.now > 0 ? options.now : db::now_seconds();
  const std::vector<db::PriceEntry> catalogue = db::list_pricing(db);

  // Devices held now by running runs, per node name and per cluster key.
  std::map<std::string, Busy> by_node, by_cluster;
  db::RunFilter running;
  running.statuses = {db::RunStatus::kRunning};
  for (const db::RunListItem& item : db::list_runs(db, running)) {
    const db::Run& run = item.run;
    const bool gpu = db::config_on_gpus(run.config_json);
    BusyRun b;
    b.run = run.name;
    int64_t planned = 0;
    try {
      planned = stored_run_config(run).train.steps;
    } catch (const std::exception&) {
      planned = 0;
    }
    const double pace = measured_seconds_per_step(db, run.id);
    b.seconds_left = planned > 0 ? remaining_seconds(planned, item.last_step, pace) : -1;
    if (run.target.rfind("slurm:", 0) == 0) {
      const auto job = db::find_slurm_job(db, run.id);
      b.devices =
          static_cast<int>(job && job->alloc_devices ? *job->alloc_devices : run.world_size.value_or(1));
      by_cluster[run_place_key(run.target, job ? job->partition : "")].add(b, gpu);
      continue;
    }
    const std::vector<db::RunNodeRef> nodes = db::list_run_nodes(db, run.id);
    if (nodes.empty()) {  // a run stored before it was attached: its ranks on its target
      b.devices = static_cast<int>(run.world_size.value_or(1));
      by_node[run.target.empty() ? "local" : run.target.substr(0, run.target.find(','))].add(b, gpu);
    }
    for (const auto& n : nodes) {
      BusyRun part = b;
      part.devices = static_cast<int>(n.devices);
      by_node[n.name].add(part, gpu);
    }
  }
  const auto put_busy = [](PlaceOffer& o, const Busy& b) {
    o.gpus_busy = b.gpus;
    o.cpus_busy = b.cpus;
    o.busy_gpu_runs = b.gpu_runs;
    o.busy_cpu_runs = b.cpu_runs;
  };

  std::vector<PlaceOffer> out;
  if (options.include_local) {
    PlaceOffer o;
    o.label = place_key_text(o.key);
    LocalFacts f = options.local.value_or(LocalFacts{});
    const std::optional<db::Node> row = db::find_node(db, "local");
    // Not probed: the GPUs the store says this machine has (`flotilla pricing node local --gpus N`,
    // Settings), else none.
    if (!options.local && row && row->gpu_count > 0) {
      f.gpus = static_cast<int>(row->gpu_count);
      f.gpu_type = row->gpu_type;
      o.note = "GPUs as stored for node local (not probed)";
    } else if (!options.local) {
      o.note = "this machine's GPUs not probed: CPU ranks only";
    }
    o.gpus = f.gpus;
    o.gpu_type = f.gpu_type;
    o.gpu_mem_bytes = f.gpu_mem_bytes ? f.gpu_mem_bytes : sheet_memory(f.gpu_type);
    const DeviceProfile core = cpu_profile_nominal(1);
    o.cpu_ranks =
        f.cpu_cores > 0 ? f.cpu_cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // What this process may use (a cgroup or rlimit binds below what the probe saw available).
    o.host_mem_bytes = f.host_mem_bytes && core.mem_bytes ? std::min(f.host_mem_bytes, core.mem_bytes)
                                                          : std::max(f.host_mem_bytes, core.mem_bytes);
    o.cpu_core_flops = core.flops_per_s;
    if (row) {
      o.gpu_price = node_price_rule(db, *row, catalogue, true);
      o.cpu_price = node_price_rule(db, *row, catalogue, false);
    } else {
      o.gpu_price.source = o.cpu_price.source = "no price set for this machine";
    }
    if (const auto it = by_node.find("local"); it != by_node.end()) put_busy(o, it->second);
    out.push_back(std::move(o));
  }

  // Measured links between stored nodes (`flotilla nodes links`): a place of several plans over them.
  const std::vector<db::SshNode> ssh_nodes = db::list_ssh_nodes(db);
  std::map<int64_t, std::string> node_names;
  for (const db::SshNode& n : ssh_nodes) node_names[n.id] = n.name;
  const std::vector<db::NodeLink> measured = db::latest_links(db);
  for (const db::SshNode& n : ssh_nodes) {
    PlaceOffer o;
    for (const db::NodeLink& l : measured)
      if (l.from_node == n.id && l.to_node != n.id && l.bytes_per_s && *l.bytes_per_s > 0 &&
          node_names.count(l.to_node))
        o.links.push_back({node_names[l.to_node], *l.bytes_per_s, l.latency_s.value_or(0)});
    o.key.kind = PlaceKeyKind::kNode;
    o.key.nodes = {n.name};
    o.label = place_key_text(o.key);
    o.gpus = static_cast<int>(n.gpu_count);
    o.gpu_type = n.gpu_type;
    for (const auto& s : db::latest_system_samples(db, n.id))
      if (s.memory_total && *s.memory_total > 0)
        o.gpu_mem_bytes = o.gpu_mem_bytes
                              ? std::min<uint64_t>(o.gpu_mem_bytes, static_cast<uint64_t>(*s.memory_total))
                              : static_cast<uint64_t>(*s.memory_total);
    if (!o.gpu_mem_bytes) o.gpu_mem_bytes = sheet_memory(n.gpu_type);
    o.cpu_ranks = options.node_cpu_ranks;
    o.note =
        "CPU ranks assumed: " + std::to_string(options.node_cpu_ranks) + " (a node's probe counts GPUs only)";
    db::Node row;
    row.id = n.id;
    row.name = n.name;
    row.gpu_type = n.gpu_type;
    row.gpu_count = n.gpu_count;
    row.kind = "ssh";
    o.gpu_price = node_price_rule(db, row, catalogue, true);
    o.cpu_price = node_price_rule(db, row, catalogue, false);
    const db::NodePowerState power = db::node_power_state(db, n.id);
    o.power_state = power.state;
    // A node already starting has part of its wake behind it.
    if (power.state == "starting" && power.since > 0)
      o.wake_s = std::max(0.0, options.wake_s - std::max(0.0, now - power.since));
    else if (power.state != "on")
      o.wake_s = options.wake_s;
    if (const auto it = by_node.find(n.name); it != by_node.end()) put_busy(o, it->second);
    out.push_back(std::move(o));
  }

  for (const db::SlurmCluster& c : db::list_clusters(db)) {
    const remote::ClusterProbe probe = remote::cluster_probe_from_json(c.probe_json);
    std::vector<remote::SlurmPartition> parts = probe.partitions;
    if (parts.empty()) {  // never probed: the cluster's default partition, capacity unknown
      remote::SlurmPartition p;
      p.name = c.partition;
      parts.push_back(p);
    }
    for (const auto& part : parts) {
      PlaceOffer o;
      o.key.kind = PlaceKeyKind::kCluster;
      o.key.cluster = c.name;
      o.key.partition = part.name;
      o.label = place_key_text(o.key);
      o.gpus = part.total_gpus;
      o.cpu_ranks = part.total_cpus > 0 ? part.total_cpus : options.node_cpu_ranks;
      for (const auto& node : probe.nodes)
        if (node.gpus > 0 && !node.gpu_type.empty() &&
            std::find(node.partitions.begin(), node.partitions.end(), part.name) != node.partitions.end()) {
          o.gpu_type = node.gpu_type;
          break;
        }
      o.gpu_mem_bytes = sheet_memory(o.gpu_type);
      if (probe.partitions.empty()) o.note = "never probed: capacity unknown, CPU ranks assumed";
      if (const auto price = db::partition_price(db, c.id, part.name)) {
        if (price->usd_per_gpu_hour) {
          o.gpu_price.priced = true;
          o.gpu_price.usd_per_device_hour = *price->usd_per_gpu_hour;
          o.gpu_price.source = "partition " + part.name + ": " + dollars(*price->usd_per_gpu_hour) + "/GPU-h";
        }
        if (price->usd_per_cpu_hour) {
          o.cpu_price.priced = true;
          o.cpu_price.usd_per_device_hour = *price->usd_per_cpu_hour;
          o.cpu_price.source = "partition " + part.name + ": " + dollars(*price->usd_per_cpu_hour) + "/CPU-h";
        }
      }
      if (!o.gpu_price.priced) o.gpu_price.source = "no GPU price set for partition " + part.name;
      if (!o.cpu_price.priced) o.cpu_price.source = "no CPU price set for partition " + part.name;
      o.seconds_per_job_ahead = options.seconds_per_job_ahead;
      if (const auto it = by_cluster.find(o.key.key()); it != by_cluster.end()) put_busy(o, it->second);
      if (part.is_default)
        if (const auto it = by_cluster.find("cluster:" + c.name); it != by_cluster.end())
          put_busy(o, it->second);
      out.push_back(std::move(o));
    }
  }
  return out;
}

bool same_model_shape(const RunConfig& a, const RunConfig& b) {
  return a.model.arch == b.model.arch && a.model.n_layer == b.model.n_layer &&
         a.model.n_embd == b.model.n_embd && a.model.n_head == b.model.n_head &&
         a.model.vocab_size == b.model.vocab_size && a.train.seq_len == b.train.seq_len &&
         a.train.micro_batch == b.train.micro_batch && a.lora.enabled == b.lora.enabled &&
         a.run.device == b.run.device && a.train.dtype == b.train.dtype;
}

SpeedHistory speed_history(const db::Database& db, int limit) {
  SpeedHistory h;
  db::RunFilter filter;
  filter.sort = db::RunFilter::Sort::kCreated;
  filter.descending = true;
  for (const db::RunListItem& item : db::list_runs(db, filter)) {
    if (static_cast<int>(h.samples.size()) >= limit) break;
    const db::Run& run = item.run;
    if (run.status == db::RunStatus::kCreated) continue;
    SpeedSample s;
    try {
      s.config = stored_run_config(run);
    } catch (const std::exception&) {  // an older engine's keys, or no config at all
      continue;
    }
    s.tokens_per_s = run_speed(db, run).tokens_per_s;
    if (!(s.tokens_per_s > 0)) continue;
    std::string partition;
    if (run.target.rfind("slurm:", 0) == 0)
      if (const auto job = db::find_slurm_job(db, run.id)) partition = job->partition;
    s.place = run_place_key(run.target, partition);
    s.run = run.name;
    s.when = run.ended_at.value_or(run.started_at.value_or(run.created_at));
    h.samples.push_back(std::move(s));
  }
  return h;
}

}  // namespace flotilla::runs
