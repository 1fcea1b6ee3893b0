// runs/comm_advice.h: each rule fires on a crafted input with the numbers that trigger it, gives the
// `--set` change the docs promise, and stays silent on a healthy run; run_advice reads a crafted store
// (config, comm/ metrics, per-rank step figures, a link measurement) into the same rules.
#include <cmath>
#include <string>
#include <vector>

#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/metric_sink.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "runs/comm_advice.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

bool has(const std::vector<runs::Advice>& a, const std::string& rule) {
  for (const auto& x : a)
    if (x.rule == rule) return true;
  return false;
}
const runs::Advice& get(const std::vector<runs::Advice>& a, const std::string& rule) {
  for (const auto& x : a)
    if (x.rule == rule) return x;
  return a.front();
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

runs::GroupEfficiency group(const std::string& name, int size, double bytes, double count, double ms,
                            double wait_ms, double link_bw, double latency_s, bool crosses) {
  runs::GroupEfficiency g;
  g.group = name;
  g.size = size;
  g.crosses_nodes = crosses;
  g.nodes = crosses ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{"a"};
  g.link.bytes_per_s = link_bw;
  g.link.latency_s = latency_s;
  g.link.from = "a";
  g.link.to = crosses ? "b" : "a";
  runs::OpEfficiency o;
  o.op = "all_reduce";
  o.count = count;
  o.bytes = bytes;
  o.ms = ms;
  o.wait_ms = wait_ms;
  o.busbw = bytes * runs::bus_factor("all_reduce", size) / (ms / 1000);
  o.share = *o.busbw / link_bw;
  g.ops = {o};
  g.bytes = bytes;
  g.ms = ms;
  g.wait_ms = wait_ms;
  g.busbw = o.busbw;
  g.share = o.share;
  g.hidden = 1 - wait_ms / ms;
  return g;
}

// A healthy dp=2 run across two nodes: 100 MB in 25 buckets of 4 MB over a 1.25 GB/s link with
// 50 us latency, 90% of the link, 90% hidden, 10 ms blocked of a 500 ms step.
runs::AdviceInput healthy() {
  runs::AdviceInput in;
  in.dp = 2;
  in.step_ms = 500;
  in.report.step_ms = 500;
  in.report.step = 10;
  in.bucket_bytes = 4e6;
  in.report.groups = {group("dp", 2, 100e6, 25, 100e6 / 1.125e9 * 1000, 10, 1.25e9, 50e-6, true)};
  in.rank_step_ms = {400, 405};
  in.rank_nodes = {"a", "b"};
  return in;
}

void put(db::Database& d, int64_t run, int64_t step,
         const std::vector<std::pair<std::string, double>>& values) {
  std::vector<db::MetricRow> rows;
  for (const auto& [n, v] : values) rows.push_back({run, n, step, v, 1000.0 + step});
  db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
}

}  // namespace

int main() {
  // Healthy: nothing to say.
  {
    const auto in = healthy();
    CHECK(in.report.groups[0].share && *in.report.groups[0].share > 0.8);
    const auto a = runs::advise(in);
    CHECK(a.empty());
    CHECK(runs::advice_text(a).empty());
  }
  // bucket_bdp: 4 kB buckets over a 1.25 GB/s link with 1 ms latency (BDP 1.25 MB): chunk 2 kB,
  // and the measured share is 20%. Suggest 16 x BDP x n = 40 MB -> 50 MiB.
  {
    auto in = healthy();
    in.bucket_bytes = 4e3;
    in.report.groups = {group("dp", 2, 100e6, 25000, 100e6 / 0.25e9 * 1000, 10, 1.25e9, 1e-3, true)};
    const auto a = runs::advise(in);
    CHECK(has(a, "bucket_bdp"));
    const auto& x = get(a, "bucket_bdp");
    CHECK(x.change == "parallel.bucket_mb=50");
    CHECK(contains(x.text, "20%") && contains(x.text, "1250.0 kB") && contains(x.text, "one per layer"));
    CHECK(contains(runs::advice_text(a), "(try: --set parallel.bucket_mb=50)"));
    // The same buckets on a link that the measurement shows used well: silent (the model alone is not
    // enough).
    in.report.groups = {group("dp", 2, 100e6, 25000, 100e6 / 1.2e9 * 1000, 10, 1.25e9, 1e-3, true)};
    CHECK(!has(runs::advise(in), "bucket_bdp"));
    // Inside one node: not this rule's business.
    in.report.groups = {group("dp", 2, 100e6, 25000, 100e6 / 0.25e9 * 1000, 10, 1.25e9, 1e-3, false)};
    CHECK(!has(runs::advise(in), "bucket_bdp"));
  }
  // bucket_bdp from the calls' own cost: a 12.5 MB/s link with 100 us latency (BDP 1.25 kB) but 50
  // all-reduces of 200 kB taking 40 ms each where the bytes explain 16: 12 ms per ring step, so the
  // 100 kB chunks are under 4 x 150 kB; suggest 16 x 150 kB x 2 = 4.6 MiB -> 5.
  {
    auto in = healthy();
    in.bucket_bytes = 200e3;
    in.report.groups = {group("dp", 2, 10e6, 50, 50 * 40, 10, 12.5e6, 1e-4, true)};
    auto a = runs::advise(in);
    CHECK(has(a, "bucket_bdp") && get(a, "bucket_bdp").change == "parallel.bucket_mb=5");
    // The same bytes in calls that cost what the bytes explain (17 ms): silent.
    in.report.groups = {group("dp", 2, 10e6, 50, 50 * 17, 10, 12.5e6, 1e-4, true)};
    CHECK(!has(runs::advise(in), "bucket_bdp"));
  }
  // bucket_overlap: 100 MB in 2 buckets of bucket_mb = 50, 10% hidden -> 10 MiB (100 MB / 8 = 11.9 MiB
  // rounded down to 1-2-5).
  {
    auto in = healthy();
    in.bucket_mb = 50;
    in.bucket_bytes = 50e6;
    in.report.groups = {group("dp", 2, 100e6, 2, 100, 90, 1.25e9, 50e-6, true)};
    auto a = runs::advise(in);
    CHECK(has(a, "bucket_overlap") && get(a, "bucket_overlap").change == "parallel.bucket_mb=10");
    CHECK(contains(get(a, "bucket_overlap").text, "10% of its sync overlaps"));
    // Overlap off, dp blocking 90 of 500 ms: turn it on.
    in.overlap = false;
    a = runs::advise(in);
    CHECK(has(a, "bucket_overlap") && get(a, "bucket_overlap").change == "parallel.overlap=true");
    CHECK(contains(get(a, "bucket_overlap").text, "90.0 ms of the 500.0 ms"));
    // Per-layer buckets (bucket_mb = 0) with overlap on: they are as small as they go.
    in.overlap = true;
    in.bucket_mb = 0;
    CHECK(!has(runs::advise(in), "bucket_overlap"));
  }
  // tp_across_nodes: tp=2 on two nodes of one rank each -> pure dp.
  {
    runs::AdviceInput in;
    in.tp = 2;
    in.step_ms = 800;
    in.report.step_ms = 800;
    in.report.groups = {group("tp", 2, 400e6, 48, 300, 300, 12.5e6, 1e-4, true)};
    in.rank_nodes = {"a", "b"};
    auto a = runs::advise(in);
    CHECK(has(a, "tp_across_nodes") && get(a, "tp_across_nodes").change == "parallel.tp=1 parallel.dp=2");
    CHECK(contains(get(a, "tp_across_nodes").text, "spans nodes a, b") &&
          contains(get(a, "tp_across_nodes").text, "12.5 MB/s"));
    CHECK(contains(runs::advice_text(a), "--set parallel.tp=1 --set parallel.dp=2"));
    // tp=4 on two nodes of two ranks: tp=2 inside each node, dp=2.
    in.tp = 4;
    in.report.groups[0].size = 4;
    in.rank_nodes = {"a", "a", "b", "b"};
    CHECK(get(runs::advise(in), "tp_across_nodes").change == "parallel.tp=2 parallel.dp=2");
    // Inside one node: silent.
    in.report.groups[0].crosses_nodes = false;
    CHECK(!has(runs::advise(in), "tp_across_nodes"));
  }
  // pipeline_bubble: pp=4, 2 micro-batches, measured bubble 300 of 500 ms -> 12 micro-batches
  // ((4-1)/(12+3) = 20%).
  {
    runs::AdviceInput in;
    in.pp = 4;
    in.micro_batches = 2;
    in.step_ms = 500;
    in.bubble_ms = 300;
    auto a = runs::advise(in);
    CHECK(has(a, "pipeline_bubble") && get(a, "pipeline_bubble").change == "parallel.micro_batches=12");
    CHECK(contains(get(a, "pipeline_bubble").text, "60% of the step") &&
          get(a, "pipeline_bubble").severity == "warning");
    // Without a measured bubble, the formula: (4-1)/(16+3) = 16%: silent.
    in.bubble_ms = 0;
    in.micro_batches = 16;
    CHECK(!has(runs::advise(in), "pipeline_bubble"));
    in.micro_batches = 4;  // 3/7 = 43%
    CHECK(has(runs::advise(in), "pipeline_bubble"));
  }
  // straggler: rank 3 on node b works 600 ms against a median of 400.
  {
    auto in = healthy();
    in.rank_step_ms = {400, 401, 399, 600};
    in.rank_nodes = {"a", "a", "b", "b"};
    const auto a = runs::advise(in);
    CHECK(has(a, "straggler") && contains(get(a, "straggler").text, "rank 3 on b") &&
          get(a, "straggler").change.empty());
    in.rank_step_ms = {400, 401, 399, 440};  // 10%: noise
    CHECK(!has(runs::advise(in), "straggler"));
  }
  // exposed_comm: 300 of 500 ms blocked in dp with overlap off -> overlap on; with it on and the link
  // used at 90%, the link is the limit (no change).
  {
    auto in = healthy();
    in.overlap = false;
    in.report.groups = {group("dp", 2, 100e6, 25, 300, 300, 0.37e9, 50e-6, true)};
    auto a = runs::advise(in);
    CHECK(has(a, "exposed_comm") && get(a, "exposed_comm").change == "parallel.overlap=true");
    CHECK(contains(get(a, "exposed_comm").text, "300.0 ms of the 500.0 ms step (60%)") &&
          get(a, "exposed_comm").severity == "warning");
    in.overlap = true;
    a = runs::advise(in);
    CHECK(has(a, "exposed_comm") && get(a, "exposed_comm").change.empty() &&
          contains(get(a, "exposed_comm").text, "the link itself is the limit"));
  }

  // run_advice on a crafted store: dp=2 over node-a, node-b (a 12.5 MB/s link at the run's start),
  // overlap off, dp blocking 600 of 1000 ms; rank 1 (node-b) works much longer.
  {
    const std::string root = fresh_dir("comm_advice");
    db::Database d(root + "/store.db");
    const int64_t a = db::ensure_node(d, "node-a", "ssh");
    const int64_t b = db::ensure_node(d, "node-b", "ssh");
    db::NewRun nr;
    nr.name = "dp2";
    nr.config_json = R"({"parallel":{"dp":2,"tp":1,"pp":1,"overlap":false,"bucket_mb":0}})";
    const int64_t run = db::create_run(d, nr);
    db::attach_node(d, run, a, 1);
    db::attach_node(d, run, b, 1);
    CHECK(runs::run_advice(d, run).empty());  // nothing stored yet
    db::LinkMeasurement m;
    m.transport = "gloo/tcp";
    m.measured_at = 900;
    m.run_id = run;
    for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
      db::NodeLink l;
      l.from_node = f;
      l.to_node = t;
      l.bytes_per_s = 12.5e6;
      l.latency_s = 1e-4;
      m.links.push_back(l);
    }
    db::store_link_measurement(d, m);
    for (int64_t step : {10, 20}) {
      put(d, run, step,
          {{"step_ms", 1000},
           {"time_ms.bubble", 0},
           {"ranks.0.step_ms", 1000},
           {"ranks.0.comm_ms", 650},
           {"ranks.1.step_ms", 1000},
           {"ranks.1.comm_ms", 50}});
      put(d, run, step,
          {{"comm/step_ms", 1000},
           {"comm/dp/size", 2},
           {"comm/dp/all_reduce/count", 10},
           {"comm/dp/all_reduce/bytes", 6e6},
           {"comm/dp/all_reduce/ms", 650},
           {"comm/dp/all_reduce/wait_ms", 600}});
    }
    const auto adv = runs::run_advice(d, run);
    CHECK(has(adv, "exposed_comm") && get(adv, "exposed_comm").change == "parallel.overlap=true");
    CHECK(has(adv, "bucket_overlap") && get(adv, "bucket_overlap").change == "parallel.overlap=true");
    // Rank 1 worked 950 ms, rank 0 350 ms: rank 1 on node-b is the straggler.
    CHECK(has(adv, "straggler") && contains(get(adv, "straggler").text, "rank 1 on node-b"));
    // 6 MB per step over 650 ms at 12.5 MB/s: 74% of the link (busbw 9.2 MB/s).
    CHECK(contains(get(adv, "exposed_comm").text, "74% of the 12.5 MB/s link node-a -> node-b"));
    const std::string text = runs::advice_text(adv);
    CHECK(text.rfind("advice:\n  - ", 0) == 0 && contains(text, "(try: --set parallel.overlap=true)"));
  }
  return summary("test_comm_advice");
}
