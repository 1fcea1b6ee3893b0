// runs/plan_links.h: a layout planned across stored nodes uses the slowest link measured among them.
// On a crafted store (two nodes, a 12.5 MB/s link one way and 100 MB/s back, 100 us one-way), the
// dp=2 plan's communication time is exactly bytes / 12.5 MB/s + collectives x (host latency + 2 x
// 100 us), more than the host's loopback figures give; an unmeasured pair keeps the host's figures
// and names the command that measures it; one node changes nothing. parallel.bucket_mb's merged
// buckets lower the planned collectives as DataParallel merges them. The scheduler's estimate for a
// place of two nodes slows down once their slow link is measured.
#include <cmath>
#include <string>
#include <vector>

#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "engine/config/run_config.h"
#include "engine/plan/calibration.h"
#include "engine/plan/planner.h"
#include "runs/plan_links.h"
#include "runs/queue_place.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

db::NodeLink link(int64_t from, int64_t to, double bw, double lat) {
  db::NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.bytes_per_s = bw;
  l.latency_s = lat;
  return l;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  const std::string root = fresh_dir("plan_links");
  db::Database d(root + "/store.db");
  const int64_t a = db::ensure_node(d, "node-a", "ssh");
  const int64_t b = db::ensure_node(d, "node-b", "ssh");
  db::ensure_node(d, "node-c", "ssh");

  RunConfig cfg;
  cfg.run.device = "cpu";
  cfg.parallel.dp = 2;
  const DeviceProfile nominal = cpu_profile_nominal(1);
  Calibration host;
  host.peak_flops_per_s = 1e10;
  host.link.bytes_per_s = 0.31e9;
  host.link.latency_s = 1.8e-3;
  host.link.source = "default for Gloo on loopback";
  const CalibratedPlan before = plan_calibrated(cfg, nominal, host);
  CHECK(before.plan.comm_s > 0);

  // Nothing measured yet: the host's figures, and the command to run.
  Calibration cal = host;
  std::string line = runs::apply_measured_link(d, {"node-a", "node-b"}, cal);
  CHECK(contains(line, "no link measured node-a -> node-b: flotilla nodes links node-a,node-b"));
  CHECK(cal.link.bytes_per_s == host.link.bytes_per_s && cal.link.latency_s == host.link.latency_s);

  db::LinkMeasurement m;
  m.transport = "gloo/tcp";
  m.measured_at = 1.8e9;  // 2027-01-15 08:00 UTC
  m.links = {link(a, b, 12.5e6, 1e-4), link(b, a, 100e6, 1e-4), link(a, a, 2e9, 1e-5)};
  db::store_link_measurement(d, m);

  cal = host;
  line = runs::apply_measured_link(d, {"node-a", "node-b"}, cal);
  CHECK(contains(line, "measured node-a -> node-b at 2027-01-15 08:00 UTC"));
  CHECK(contains(line, "12.5 MB/s, 100 us one-way"));
  CHECK(cal.link.bytes_per_s == 12.5e6);
  CHECK(std::fabs(cal.link.latency_s - (1.8e-3 + 2e-4)) < 1e-12);
  const CalibratedPlan after = plan_calibrated(cfg, nominal, cal);
  const StagePlan& st = after.plan.stages.front();
  const double bytes = st.comm_dp_bytes + st.comm_tp_bytes + st.comm_pp_bytes;
  CHECK(bytes > 0 && st.collectives > 0);
  const double formula = bytes / 12.5e6 + st.collectives * (1.8e-3 + 2e-4);
  CHECK(std::fabs(after.plan.comm_s - formula) < 1e-9 * formula);
  CHECK(after.plan.comm_s > before.plan.comm_s * 5);
  CHECK(after.plan.step_s > before.plan.step_s);

  // parallel.bucket_mb merges layer buckets as the engine does: one bucket pays the latency once.
  RunConfig merged = cfg;
  merged.parallel.bucket_mb = 1e4;
  const CalibratedPlan one_bucket = plan_calibrated(merged, nominal, cal);
  CHECK(st.n_layers > 1);
  CHECK(one_bucket.plan.stages.front().collectives == st.collectives - (st.n_layers - 1));
  CHECK(one_bucket.plan.comm_s < after.plan.comm_s);

  // A fast measured link does not beat the host's own collective ceiling.
  const auto fast = runs::measured_link(d, {"node-a", "node-b"}, LinkFigures{1e6, 0, ""});
  CHECK(fast.link && fast.link->bytes_per_s == 1e6);
  // node-c was never measured against the others.
  cal = host;
  line = runs::apply_measured_link(d, {"node-a", "node-b", "node-c"}, cal);
  CHECK(contains(line, "no link measured node-a -> node-c") && cal.link.bytes_per_s == host.link.bytes_per_s);
  // One node: no inter-node link, nothing said.
  cal = host;
  CHECK(runs::apply_measured_link(d, {"node-a"}, cal).empty() &&
        cal.link.bytes_per_s == host.link.bytes_per_s);
  CHECK(contains(runs::apply_measured_link(d, {"node-a", "nope"}, cal), "nope is not stored"));

  // The scheduler's estimate for a place of two nodes plans over their measured link.
  {
    db::Database s(root + "/sched.db");
    for (const char* name : {"n1", "n2"}) {
      db::SshNode n;
      n.name = name;
      n.host = "127.0.0.1";
      db::add_ssh_node(s, n);
    }
    runs::InventoryOptions inv;
    inv.include_local = false;
    inv.node_cpu_ranks = 2;
    runs::EntryNeeds needs;
    needs.allowed = {"nodes:n1,n2"};
    const auto speed = [&] {
      const runs::Decision dec = runs::choose_place(cfg, needs, runs::list_places(s, inv), {});
      for (const auto& p : dec.places)
        if (p.key == "nodes:n1,n2") return p.tokens_per_s;
      return -1.0;
    };
    const double unmeasured = speed();
    CHECK(unmeasured > 0);
    db::LinkMeasurement slow;
    slow.transport = "gloo/tcp";
    const int64_t n1 = db::find_node(s, "n1")->id, n2 = db::find_node(s, "n2")->id;
    slow.links = {link(n1, n2, 1e6, 1e-3), link(n2, n1, 1e6, 1e-3)};
    db::store_link_measurement(s, slow);
    const auto offers = runs::list_places(s, inv);
    CHECK(offers.size() == 2 && offers[0].links.size() == 1 && offers[0].links[0].bytes_per_s == 1e6);
    const double measured = speed();
    CHECK_MSG(measured > 0 && measured < unmeasured / 2, "%g vs %g tok/s", measured, unmeasured);
  }
  return summary("test_plan_links");
}
