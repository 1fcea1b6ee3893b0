// Placement by measured cost (issue 37 item 2, runs/queue_place.h) against a real SQLite store:
// places and prices read through the db/ API, earlier runs' measured speeds from stored summaries,
// a busy node from a running run's stored steps. No process is started: the choice is pure.
//
// What each part proves:
//  - keys: the accepted forms round-trip, and hostile or malformed keys are refused naming the key
//    and the accepted forms, before any store access;
//  - inventory: nodes with their GPUs and prices (node_rate's rule), a cluster's partitions from its
//    stored probe and partition prices, a powered-off node's wake time;
//  - choice: the cheapest place wins and the words say why; a deadline moves it to the faster place
//    and says "past the deadline"; a deadline or a budget no place meets is refused with every
//    place's figures; a place measured 2x slower than the planner says loses; a busy place with a
//    known end waits ("free in ~N min"), one with no known end gives way;
//  - the decision JSON round-trips.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "check.h"
#include "db/clusters.h"
#include "db/costs.h"
#include "db/metric_sink.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "remote/slurm_cluster.h"
#include "runs/queue_place.h"

namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;
using flotilla::RunConfig;

namespace {

std::string scratch(const std::string& name) {
  const fs::path dir = fs::path(FLOTILLA_TEST_TMP) / ("queue_place_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return (dir / "store.db").string();
}

RunConfig gpu_config() {
  RunConfig c;
  c.run.device = "cuda";
  c.parallel.dp = 2;
  c.train.steps = 20000;
  return c;
}

int64_t add_node(db::Database& d, const std::string& name, const std::string& gpu, int gpus,
                 double usd_per_hour) {
  db::SshNode n;
  n.name = name;
  n.host = "127.0.0.1";
  const int64_t id = db::add_ssh_node(d, n);
  db::set_node_gpus(d, id, gpu, gpus);
  db::NodePricing p;
  p.usd_per_hour = usd_per_hour;
  db::set_node_pricing(d, id, p);
  return id;
}

void set_price(db::Database& d, const std::string& node, double usd_per_hour) {
  db::NodePricing p;
  p.usd_per_hour = usd_per_hour;
  db::set_node_pricing(d, db::get_ssh_node(d, node).id, p);
}

const runs::PlaceEstimate& at(const runs::Decision& d, const std::string& key) {
  for (const auto& p : d.places)
    if (p.key == key) return p;
  std::fprintf(stderr, "no estimate for %s in: %s\n", key.c_str(), d.words.c_str());
  std::abort();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

runs::InventoryOptions inventory(double now) {
  runs::InventoryOptions o;
  runs::LocalFacts f;  // this machine: no GPUs, two cores (the same on every test machine)
  f.cpu_cores = 2;
  f.host_mem_bytes = 8ull << 30;
  o.local = f;
  o.now = now;
  return o;
}

// A stored run on `target` with `config` and, when tokens_per_s > 0, a summary measuring it.
int64_t stored_run(db::Database& d, const std::string& name, const std::string& target,
                   const RunConfig& config, double tokens_per_s, db::RunStatus to) {
  db::NewRun r;
  r.name = name;
  r.config_toml = flotilla::config_to_toml(config);
  r.target = target;
  const int64_t id = db::create_run(d, r);
  db::set_status(d, id, db::RunStatus::kRunning);
  if (tokens_per_s > 0)
    db::set_run_summary(d, id,
                        "{\"v\":1,\"type\":\"summary\",\"time\":2,\"rank\":0,\"steps\":100,\"tokens\":409600,"
                        "\"final_loss\":5,\"best_val_loss\":null,\"wall_s\":1,\"mean_tokens_per_s\":" +
                            std::to_string(tokens_per_s) + ",\"mean_mfu\":0.3,\"exit\":\"completed\"}");
  if (to != db::RunStatus::kRunning) db::set_status(d, id, to);
  return id;
}

void keys() {
  const auto round = [](const std::string& k) { return runs::parse_place_key(k).key(); };
  CHECK(round("local") == "local");
  CHECK(round("node:b") == "node:b");
  CHECK(round("nodes:a,b") == "nodes:a,b");
  CHECK(round("nodes:a") == "node:a");
  CHECK(round("cluster:hpc") == "cluster:hpc");
  CHECK(round("cluster:hpc/gpu") == "cluster:hpc/gpu");
  CHECK(runs::place_key_text(runs::parse_place_key("local")) == "this machine");
  CHECK(runs::place_key_text(runs::parse_place_key("node:b")) == "node b");
  CHECK(runs::place_key_text(runs::parse_place_key("nodes:a,b")) == "nodes a, b");
  CHECK(runs::place_key_text(runs::parse_place_key("cluster:hpc/gpu")) == "cluster hpc (partition gpu)");
  for (const std::string& bad : std::vector<std::string>{
           "", "gpu", "here", "node:", "node:-rf", "node:a;b", "node:$(reboot)", "node:a b", "nodes:a,,b",
           "nodes:a,a", "cluster:", "cluster:hpc/", "cluster:hpc/../etc", "cluster:-x", "node:a\nb", "vm:a",
           "node:" + std::string(70, 'x')})
    CHECK_THROWS(runs::parse_place_key(bad),
                 "accepted: local, node:NAME, nodes:A,B, cluster:NAME[/PARTITION]");
  CHECK_THROWS(runs::parse_place_key("node:a\nb"), "place 'node:a\\nb'");  // shown escaped
  CHECK(runs::run_place_key("local") == "local");
  CHECK(runs::run_place_key("a,b") == "nodes:a,b");
  CHECK(runs::run_place_key("b") == "node:b");
  CHECK(runs::run_place_key("slurm:hpc", "gpu") == "cluster:hpc/gpu");
  CHECK(runs::place_allows(runs::parse_place_key("cluster:hpc"), runs::parse_place_key("cluster:hpc/gpu")));
  CHECK(!runs::place_allows(runs::parse_place_key("cluster:hpc/cpu"),
                            runs::parse_place_key("cluster:hpc/gpu")));
  CHECK(runs::slurm_time_limit(3600) == "01:40:00");
  CHECK(runs::slurm_time_limit(86400 * 2) == "3-00:10:00");
}

void inventory_and_placement() {
  db::Database d(scratch("inventory"));
  const double now = db::now_seconds();
  add_node(d, "cheap", "NVIDIA L4", 2, 0.5);
  const int64_t fast = add_node(d, "fast", "NVIDIA H100 80GB HBM3", 4, 8.0);
  d.exec("INSERT INTO node_power(node_id, state, since) VALUES (" + std::to_string(fast) + ", 'stopped', 1)");
  db::SlurmCluster c;
  c.name = "hpc";
  c.login_host = "127.0.0.1";
  const int64_t cid = db::add_cluster(d, c);
  flotilla::remote::ClusterProbe probe;
  flotilla::remote::SlurmPartition gpu, cpu;
  gpu.name = "gpu";
  gpu.total_gpus = 8;
  gpu.total_cpus = 64;
  cpu.name = "cpu";
  cpu.is_default = true;
  cpu.total_cpus = 128;
  probe.partitions = {gpu, cpu};
  flotilla::remote::SlurmNode n1;
  n1.name = "n1";
  n1.gpus = 8;
  n1.gpu_type = "a100";
  n1.partitions = {"gpu"};
  probe.nodes = {n1};
  db::set_cluster_probe(d, cid, flotilla::remote::cluster_probe_json(probe), now);
  db::PartitionPrice price;
  price.partition = "gpu";
  price.usd_per_gpu_hour = 2.0;
  db::set_partition_price(d, cid, price);

  const std::vector<runs::PlaceOffer> offers = runs::list_places(d, inventory(now));
  CHECK_MSG(offers.size() == 5, "offers: %zu", offers.size());  // local, 2 nodes, 2 partitions
  for (const auto& o : offers) {
    if (o.key.key() == "local") {
      CHECK(o.gpus == 0 && o.cpu_ranks == 2 && !o.cpu_price.priced);
    } else if (o.key.key() == "node:cheap") {
      CHECK(o.gpus == 2 && o.gpu_price.priced);
      CHECK_NEAR(o.gpu_price.usd_per_device_hour, 0.25, 1e-9);  // flat $0.5/h over 2 GPUs
      CHECK(o.gpu_mem_bytes == 24ull << 30);                    // the L4 data sheet
      CHECK(o.power_state == "on" && o.wake_s == 0);
    } else if (o.key.key() == "node:fast") {
      CHECK(o.power_state == "stopped" && o.wake_s > 0);
    } else if (o.key.key() == "cluster:hpc/gpu") {
      CHECK(o.gpus == 8 && o.gpu_type == "a100" && o.gpu_price.priced);
      CHECK_NEAR(o.gpu_price.usd_per_device_hour, 2.0, 1e-9);
    } else {
      CHECK_MSG(o.key.key() == "cluster:hpc/cpu", "unexpected offer %s", o.key.key().c_str());
      CHECK(o.cpu_ranks == 128 && !o.cpu_price.priced && o.gpus == 0);
    }
  }

  // Without a probe, this machine's GPUs are those stored for node local (`pricing node local --gpus`).
  db::ensure_node(d, "local", "local", "NVIDIA L4", 1);
  runs::InventoryOptions unprobed;
  unprobed.now = now;
  CHECK(runs::list_places(d, unprobed).front().gpus == 1 &&
        runs::list_places(d, unprobed).front().gpu_type == "NVIDIA L4");
  CHECK(runs::list_places(d, inventory(now)).front().gpus == 0);  // a probe wins

  // The stopped node is woken first; a cluster with jobs ahead says so.
  runs::EntryNeeds needs;
  needs.now = now;
  needs.allowed = {"node:fast"};
  runs::Decision dec = runs::choose_place(gpu_config(), needs, offers, {});
  CHECK_MSG(!dec.start && dec.waits && dec.chosen == "node:fast", "%s", dec.words.c_str());
  CHECK(dec.wake_nodes == std::vector<std::string>{"fast"});
  CHECK_MSG(has(dec.words, "powered off"), "%s", dec.words.c_str());
  // Two nodes as one place: one GPU on each, each node's price for its share; only the stopped one woken.
  needs.allowed = {"nodes:cheap,fast"};
  dec = runs::choose_place(gpu_config(), needs, offers, {});
  CHECK_MSG(dec.chosen == "nodes:cheap,fast" && dec.waits && at(dec, "nodes:cheap,fast").devices == 2, "%s",
            dec.words.c_str());
  CHECK_NEAR(at(dec, "nodes:cheap,fast").usd_per_hour, 0.25 + 8.0 / 4, 1e-9);
  CHECK(dec.wake_nodes == std::vector<std::string>{"fast"});
  std::vector<runs::PlaceOffer> queued = offers;
  for (auto& o : queued)
    if (o.key.key() == "cluster:hpc/gpu") o.jobs_ahead = 2;
  needs.allowed = {"cluster:hpc"};
  dec = runs::choose_place(gpu_config(), needs, queued, {});
  CHECK_MSG(has(dec.words, "on cluster hpc (partition gpu): 2 jobs ahead, "), "%s", dec.words.c_str());
  // Slurm queues the job: it is submitted now, its jobs ahead counted in its finish time.
  CHECK_MSG(dec.start && !dec.waits && dec.chosen == "cluster:hpc/gpu", "%s", dec.words.c_str());
  CHECK_NEAR(at(dec, "cluster:hpc/gpu").wait_s, 2 * 900, 1e-9);
  CHECK_MSG(has(at(dec, "cluster:hpc/cpu").why_not, "no GPUs"), "%s", dec.words.c_str());

  // The Placement of each key.
  const runs::Placement pn =
      runs::placement_for(runs::parse_place_key("nodes:cheap,fast"), d, {4, true, 100});
  CHECK(pn.kind == runs::PlaceKind::kNodes && pn.nodes.size() == 2 && pn.nproc_per_node == 2);
  const runs::Placement pc =
      runs::placement_for(runs::parse_place_key("cluster:hpc/gpu"), d, {2, true, 3600});
  CHECK(pc.kind == runs::PlaceKind::kSlurm && pc.cluster == "hpc" && pc.partition == "gpu" &&
        pc.gpus_per_node == 2 && pc.time_limit == "01:40:00");
  CHECK(runs::placement_for(runs::parse_place_key("local"), d).kind == runs::PlaceKind::kHere);
  const runs::Placement pd = runs::decision_placement(dec, d);  // the cluster chosen above, 2 GPUs
  CHECK(pd.kind == runs::PlaceKind::kSlurm && pd.partition == "gpu" && pd.gpus_per_node == 2 &&
        pd.tasks_per_node == 2);
  CHECK(runs::place_words("cluster:hpc/gpu") == "cluster hpc (partition gpu)" &&
        runs::place_words("x;y") == "x;y");
  CHECK_THROWS(runs::placement_for(runs::parse_place_key("node:gone"), d), "gone");
  CHECK_THROWS(runs::placement_for(runs::parse_place_key("cluster:gone"), d), "gone");
}

void choice() {
  db::Database d(scratch("choice"));
  const double now = db::now_seconds();
  add_node(d, "cheap", "NVIDIA L4", 2, 0.5);
  add_node(d, "fast", "NVIDIA H100 80GB HBM3", 2, 1.0);
  const RunConfig cfg = gpu_config();
  runs::EntryNeeds needs;
  needs.now = now;

  // Price node fast so that its run costs 1.5 x node cheap's (both predicted by the planner).
  runs::Decision dec =
      runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  {
    const auto cheap = at(dec, "node:cheap"), fast = at(dec, "node:fast");
    CHECK(cheap.fits && fast.fits && cheap.layout_text == "dp=2 tp=1 pp=1");
    CHECK_MSG(cheap.seconds > 2 * fast.seconds, "an L4 pair should be slower: %g vs %g s", cheap.seconds,
              fast.seconds);
    set_price(d, "fast", fast.usd_per_hour * 1.5 * cheap.usd / fast.usd);
  }
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  const runs::PlaceEstimate cheap = at(dec, "node:cheap"), fast = at(dec, "node:fast");
  CHECK_NEAR(fast.usd / cheap.usd, 1.5, 1e-6);
  CHECK_MSG(dec.start && dec.chosen == "node:cheap", "%s", dec.words.c_str());
  CHECK_MSG(dec.words.rfind("on node cheap: " + runs::usd_words(cheap.usd) + " and " +
                                runs::duration_words(cheap.seconds) + " to finish",
                            0) == 0,
            "%s", dec.words.c_str());
  CHECK_MSG(has(dec.words, "this machine: does not fit (no GPUs)"), "%s", dec.words.c_str());
  CHECK(has(cheap.basis, "uncalibrated"));

  // A deadline only the fast node meets: it wins, and the words say why the cheap one lost.
  needs.deadline = now + 0.5 * (cheap.seconds + fast.seconds);
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(dec.start && dec.chosen == "node:fast", "%s", dec.words.c_str());
  CHECK_MSG(has(dec.words, "node cheap: " + runs::usd_words(cheap.usd) + " but " +
                               runs::duration_words(cheap.seconds) + ", past the deadline (" +
                               runs::time_words(*needs.deadline) + ")"),
            "%s", dec.words.c_str());

  // A deadline no place meets: refused with every place's figures.
  needs.deadline = now + 0.5 * fast.seconds;
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(!dec.start && !dec.waits && dec.chosen.empty(), "%s", dec.words.c_str());
  CHECK_MSG(dec.words.rfind("no place meets the deadline (", 0) == 0, "%s", dec.words.c_str());
  for (const auto* p : {&cheap, &fast})
    CHECK_MSG(has(dec.words,
                  p->label + ": " + runs::usd_words(p->usd) + " but " + runs::duration_words(p->seconds)),
              "%s", dec.words.c_str());

  // Budget: a cap below every place's cost is refused; one between them keeps the cheap node; with the
  // deadline only the fast node meets, a cap below its cost is refused naming the budget.
  needs.deadline.reset();
  needs.max_usd = 0.5 * cheap.usd;
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(!dec.start &&
                dec.words.rfind("no place finishes within the " + runs::usd_words(*needs.max_usd) + " budget",
                                0) == 0,
            "%s", dec.words.c_str());
  CHECK_MSG(has(dec.words, "node fast: " + runs::usd_words(fast.usd) + ", over the"), "%s",
            dec.words.c_str());
  needs.max_usd = 1.2 * cheap.usd;
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(dec.start && dec.chosen == "node:cheap", "%s", dec.words.c_str());
  needs.deadline = now + 0.5 * (cheap.seconds + fast.seconds);
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(!dec.start && dec.words.rfind("no place finishes within the", 0) == 0, "%s", dec.words.c_str());
  needs.deadline.reset();
  needs.max_usd.reset();

  // Measured history: node cheap ran this model shape at half the planner's speed, so its run costs
  // 2 x as predicted, more than node fast's 1.5 x: node fast wins, and says what it rests on.
  stored_run(d, "earlier", "cheap", cfg, cheap.tokens_per_s / 2, db::RunStatus::kCompleted);
  RunConfig other = cfg;  // another shape measured there changes nothing
  other.model.n_layer = 2;
  stored_run(d, "other-shape", "cheap", other, cheap.tokens_per_s * 10, db::RunStatus::kCompleted);
  const runs::SpeedHistory history = runs::speed_history(d);
  CHECK(history.samples.size() == 2 && history.samples[0].place == "node:cheap");
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), history);
  CHECK_MSG(dec.start && dec.chosen == "node:fast", "%s", dec.words.c_str());
  CHECK_NEAR(at(dec, "node:cheap").tokens_per_s, cheap.tokens_per_s / 2, cheap.tokens_per_s * 1e-3);
  CHECK_MSG(has(at(dec, "node:cheap").basis, "measured: 1 run"), "%s", at(dec, "node:cheap").basis.c_str());

  // This shape measured on this machine at a quarter of the planner's speed calibrates node fast,
  // never measured with it (said as such): it now costs 4 x as planned and node cheap (2 x) wins;
  // node cheap keeps its own measurement.
  const double fast_planned = at(dec, "node:fast").tokens_per_s;
  stored_run(d, "here", "local", cfg, fast_planned / 4, db::RunStatus::kCompleted);
  runs::Decision local_cal =
      runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(local_cal.start && local_cal.chosen == "node:cheap", "%s", local_cal.words.c_str());
  CHECK_NEAR(at(local_cal, "node:fast").tokens_per_s, fast_planned / 4, fast_planned * 1e-3);
  CHECK_MSG(has(at(local_cal, "node:fast").basis, "never measured here: planner x 0.25"), "%s",
            at(local_cal, "node:fast").basis.c_str());
  CHECK(has(at(local_cal, "node:cheap").basis, "measured: 1 run"));

  // The decision JSON round-trips (the Costs page reads it back).
  const std::string json = runs::decision_json(dec);
  const runs::Decision back = runs::parse_decision_json(json);
  CHECK(back.chosen == dec.chosen && back.words == dec.words && back.start == dec.start &&
        back.places.size() == dec.places.size());
  CHECK(back.layout.text() == dec.layout.text());
  CHECK(runs::decision_json(back) == json);
  if (std::getenv("QUEUE_PLACE_SHOW")) std::printf("%s\n", json.c_str());
  const auto& bp = at(back, "node:cheap");
  CHECK(bp.fits && bp.priced && bp.basis == at(dec, "node:cheap").basis);
  CHECK_NEAR(bp.usd, at(dec, "node:cheap").usd, 1e-9);
  CHECK_THROWS(runs::parse_decision_json("[1]"), "not a JSON object");
}

void busy() {
  db::Database d(scratch("busy"));
  const double now = db::now_seconds();
  const int64_t cheap_id = add_node(d, "cheap", "NVIDIA L4", 2, 0.5);
  add_node(d, "fast", "NVIDIA H100 80GB HBM3", 2, 50.0);
  const RunConfig cfg = gpu_config();
  runs::EntryNeeds needs;
  needs.now = now;
  // A run holding both of node cheap's GPUs, with no steps yet: its end is not known.
  RunConfig hog_cfg = cfg;
  hog_cfg.train.steps = 100;
  db::NewRun r;
  r.name = "hog";
  r.config_toml = flotilla::config_to_toml(hog_cfg);
  r.config_json = flotilla::config_to_json(hog_cfg);
  r.target = "cheap";
  const int64_t hog = db::create_run(d, r);
  db::attach_node(d, hog, cheap_id, 2);
  db::set_status(d, hog, db::RunStatus::kRunning);
  runs::Decision dec =
      runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(dec.start && dec.chosen == "node:fast", "%s", dec.words.c_str());
  CHECK_MSG(has(dec.words, "node cheap: busy until an unknown time"), "%s", dec.words.c_str());

  // 50 of its 100 steps at 10 s each: free in ~8 min (500 s), and node cheap is still the cheaper
  // place by far: the entry waits for it.
  std::vector<db::MetricRow> rows;
  for (int s = 1; s <= 50; ++s) rows.push_back({hog, "loss", s, 5.0, now - 500 + 10.0 * s});
  db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(!dec.start && dec.waits && dec.chosen == "node:cheap", "%s", dec.words.c_str());
  CHECK_MSG(dec.words.rfind("waits for 2 GPUs on node cheap (free in ~8 min)", 0) == 0, "%s",
            dec.words.c_str());
  CHECK_NEAR(at(dec, "node:cheap").wait_s, 500, 1);

  // A place the entry names but the workspace does not have: refused, saying so.
  needs.allowed = {"node:gone"};
  dec = runs::choose_place(cfg, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(!dec.start && dec.words == "no place fits: node gone: not in this workspace", "%s",
            dec.words.c_str());

  // A CPU run on this machine: fits on its cores, $0 without a price.
  RunConfig cpu = cfg;
  cpu.run.device = "cpu";
  cpu.parallel.dp = 1;
  needs.allowed = {"local"};
  dec = runs::choose_place(cpu, needs, runs::list_places(d, inventory(now)), runs::speed_history(d));
  CHECK_MSG(dec.start && dec.chosen == "local" && has(dec.words, "on this machine: $0 (no price set) and "),
            "%s", dec.words.c_str());
}

}  // namespace

int main() {
  keys();
  inventory_and_placement();
  choice();
  busy();
  return flotilla_test::summary("test_queue_place");
}
