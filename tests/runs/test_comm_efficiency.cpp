// runs/comm_efficiency.h on crafted store contents: a dp=2 run across two nodes whose link carries
// 12.5 MB/s; the comm/ metrics of two records give the bus bandwidth (nccl-tests' factor), the share
// of the link, the hidden share; the capacity is the run's own measurement first, the newest stored
// figure otherwise, none (with the command to run) when a pair is missing; a tp group inside one
// node is judged against that node's intra-node figure; one-rank runs and runs without records say
// why they are empty; the series has one point per record.
#include <cmath>
#include <string>
#include <vector>

#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/metric_sink.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "runs/comm_efficiency.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

db::NodeLink link(int64_t from, int64_t to, double bw, double lat = 1e-4) {
  db::NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.bytes_per_s = bw;
  l.latency_s = lat;
  return l;
}

int64_t make_run(db::Database& d, const std::string& name, const std::string& parallel,
                 const std::vector<int64_t>& nodes, int64_t per_node) {
  db::NewRun nr;
  nr.name = name;
  nr.config_json = R"({"parallel":)" + parallel + "}";
  const int64_t id = db::create_run(d, nr);
  for (int64_t n : nodes) db::attach_node(d, id, n, per_node);
  return id;
}

void put(db::Database& d, int64_t run, int64_t step,
         const std::vector<std::pair<std::string, double>>& values) {
  std::vector<db::MetricRow> rows;
  for (const auto& [n, v] : values) rows.push_back({run, n, step, v, 1000.0 + step});
  db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
}

}  // namespace

int main() {
  const std::string root = fresh_dir("comm_efficiency");
  db::Database d(root + "/store.db");
  const int64_t b = db::ensure_node(d, "node-b", "ssh");  // id order differs from launch order
  const int64_t a = db::ensure_node(d, "node-a", "ssh");

  // dp=2 over node-a (ranks 0) then node-b (rank 1).
  const int64_t run = make_run(d, "dp2", R"({"dp":2,"tp":1,"pp":1})", {a, b}, 1);
  CHECK(db::list_run_nodes(d, run).front().name == "node-a");  // launch order, not id order
  auto empty = runs::comm_report(d, run);
  CHECK(empty.empty() && empty.note.find("no communication figures") != std::string::npos);

  // 12 MB per step in 25 all-reduces taking 960 ms, 240 ms of it blocking.
  put(d, run, 10,
      {{"comm/step_ms", 1100},
       {"comm/dp/size", 2},
       {"comm/dp/all_reduce/count", 25},
       {"comm/dp/all_reduce/bytes", 12e6},
       {"comm/dp/all_reduce/ms", 960},
       {"comm/dp/all_reduce/wait_ms", 240},
       {"comm/dp/broadcast/count", 0}});
  put(d, run, 20,
      {{"comm/step_ms", 1000},
       {"comm/dp/size", 2},
       {"comm/dp/all_reduce/count", 25},
       {"comm/dp/all_reduce/bytes", 12e6},
       {"comm/dp/all_reduce/ms", 1200},
       {"comm/dp/all_reduce/wait_ms", 600}});
  put(d, run, 21, {{"loss", 3.0}});  // a step without a comm record

  // No link measured yet: figures, but no share, and the command that measures it.
  auto r = runs::comm_report(d, run);
  CHECK(r.step == 20 && r.step_ms == 1000 && r.groups.size() == 1);
  const auto& g = r.groups[0];
  CHECK(g.group == "dp" && g.size == 2 && g.crosses_nodes && g.nodes.size() == 2 && g.nodes[0] == "node-a");
  CHECK(g.ops.size() == 1 && g.ops[0].op == "all_reduce");
  // busbw = 12e6 x 2(2-1)/2 / 1.2 s = 10 MB/s.
  CHECK(g.busbw && std::fabs(*g.busbw - 10e6) < 1);
  CHECK(!g.share && g.link.source.find("flotilla nodes links node-a,node-b") != std::string::npos);
  CHECK(g.hidden && std::fabs(*g.hidden - 0.5) < 1e-12);

  // A stored measurement (by hand) gives the share; the slowest direction counts.
  db::LinkMeasurement m;
  m.transport = "gloo/tcp";
  m.measured_at = 900;
  m.links = {link(a, b, 12.5e6), link(b, a, 20e6), link(a, a, 2e9), link(b, b, 2e9)};
  db::store_link_measurement(d, m);
  r = runs::comm_report(d, run);
  CHECK(r.groups[0].share && std::fabs(*r.groups[0].share - 0.8) < 1e-9);
  CHECK(r.groups[0].link.from == "node-a" && r.groups[0].link.to == "node-b");
  CHECK(r.groups[0].link.source.find("newest measurement") != std::string::npos);
  // The run's own measurement wins over a newer one by hand.
  db::LinkMeasurement own = m;
  own.run_id = run;
  own.measured_at = 800;
  own.links = {link(a, b, 25e6), link(b, a, 25e6)};
  db::store_link_measurement(d, own);
  r = runs::comm_report(d, run);
  CHECK(r.groups[0].share && std::fabs(*r.groups[0].share - 0.4) < 1e-9);
  CHECK(r.groups[0].link.source == "measured at the run's start");
  // At an earlier step: the record at or before it.
  r = runs::comm_report(d, run, 15);
  CHECK(r.step == 10 && std::fabs(*r.groups[0].busbw - 12e6 / 0.96) < 1);
  CHECK(r.groups[0].hidden && std::fabs(*r.groups[0].hidden - 0.75) < 1e-12);
  const auto series = runs::comm_series(d, run, "dp");
  CHECK(series.size() == 2 && series[0].step == 10 && series[1].step == 20 && series[1].share);
  const std::string text = runs::comm_table_text(runs::comm_report(d, run));
  CHECK(text.find("all_reduce") != std::string::npos && text.find("40%") != std::string::npos &&
        text.find("node-a -> node-b") != std::string::npos && text.find("50%") != std::string::npos);

  // dp=2 x tp=2 on two nodes of two ranks: tp inside node-a (intra-node figure), dp across.
  const int64_t mixed = make_run(d, "dp2tp2", R"({"dp":2,"tp":2,"pp":1})", {a, b}, 2);
  put(d, mixed, 5,
      {{"comm/step_ms", 500},
       {"comm/tp/size", 2},
       {"comm/tp/all_reduce/count", 48},
       {"comm/tp/all_reduce/bytes", 4e8},
       {"comm/tp/all_reduce/ms", 400},
       {"comm/tp/all_reduce/wait_ms", 400},
       {"comm/dp/size", 2},
       {"comm/dp/all_reduce/count", 1},
       {"comm/dp/all_reduce/bytes", 1e6},
       {"comm/dp/all_reduce/ms", 100},
       {"comm/dp/all_reduce/wait_ms", 100},
       // 10 kB in 10 messages: latency-bound, a rate but no share (it read 748% once)
       {"comm/tp/all_gather/count", 10},
       {"comm/tp/all_gather/bytes", 1e4},
       {"comm/tp/all_gather/ms", 1},
       {"comm/tp/all_gather/wait_ms", 1}});
  r = runs::comm_report(d, mixed);
  CHECK(r.groups.size() == 2 && r.groups[0].group == "dp" && r.groups[1].group == "tp");
  CHECK(!r.groups[1].crosses_nodes && r.groups[1].link.from == "node-a" && r.groups[1].link.to == "node-a");
  CHECK(r.groups[1].share && std::fabs(*r.groups[1].share - 1e9 / 2e9) < 1e-9);  // 4e8 x 1 / 0.4 s
  CHECK(r.groups[1].hidden && *r.groups[1].hidden == 0);
  CHECK(r.groups[1].ops.size() == 2 && r.groups[1].ops[1].op == "all_gather" && r.groups[1].ops[1].busbw &&
        !r.groups[1].ops[1].share);
  CHECK(r.groups[0].crosses_nodes && r.groups[0].link.to == "node-b");

  // Compare's figures (issue 36 eff): the dp group's share, and the hidden share over every group:
  // 1 - (100 + 400) / (100 + 400) = 0 here; 0.5 for the dp2 run (40% of its link).
  CHECK(runs::comm_headline(r).dp_share == r.groups[0].share && runs::comm_headline(r).hidden == 0.0);
  const runs::CommHeadline h2 = runs::comm_headline(runs::comm_report(d, run));
  CHECK(h2.dp_share && std::fabs(*h2.dp_share - 0.4) < 1e-9 && h2.hidden &&
        std::fabs(*h2.hidden - 0.5) < 1e-12);
  CHECK(runs::share_text(h2.dp_share) == "40%" && runs::share_text(std::nullopt) == "-");
  CHECK(!runs::comm_headline(runs::CommReport{}).hidden);

  // pp=3 on three nodes: the worker's tied-embedding group "embed" joins the first and the last stage
  // (ranks 0 and 2: node-a and node-c), never the middle one.
  const int64_t c = db::ensure_node(d, "node-c", "ssh");
  const int64_t pp3 = make_run(d, "pp3", R"({"dp":1,"tp":1,"pp":3})", {a, b, c}, 1);
  put(d, pp3, 4,
      {{"comm/step_ms", 100},
       {"comm/embed/size", 2},
       {"comm/embed/all_reduce/count", 1},
       {"comm/embed/all_reduce/bytes", 4096},
       {"comm/embed/all_reduce/ms", 2},
       {"comm/embed/all_reduce/wait_ms", 2}});
  r = runs::comm_report(d, pp3);
  CHECK(r.groups.size() == 1 && r.groups[0].group == "embed");
  CHECK(r.groups.size() == 1 && r.groups[0].nodes == std::vector<std::string>({"node-a", "node-c"}));

  // A one-rank run.
  const int64_t solo = make_run(d, "solo", R"({"dp":1})", {a}, 1);
  CHECK(runs::comm_report(d, solo).note.find("one-rank") != std::string::npos);
  // Factors as nccl-tests.
  CHECK(runs::bus_factor("all_reduce", 4) == 1.5 && runs::bus_factor("all_gather", 4) == 0.75);
  CHECK(runs::bus_factor("broadcast", 3) == 1 && runs::bus_factor("barrier", 4) == 0 &&
        runs::bus_factor("all_reduce", 1) == 0);
  CHECK(runs::rate_text(12.5e6) == "12.5 MB/s" && runs::rate_text(2e9) == "2.00 GB/s");
  return summary("test_comm_efficiency");
}
