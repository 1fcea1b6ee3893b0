// Node records: the store API (db/nodes.h) on a real SQLite file, and whole-node validation
// (remote/node_fields.h) returning every problem with its field.
#include <filesystem>

#include "check.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "remote/node_fields.h"
#include "worker_run.h"

using namespace flotilla;

namespace {

void test_store(const std::string& dir) {
  db::Database d(dir + "/flotilla.db");
  db::SshNode n;
  n.name = "gpu-1";
  n.host = "10.0.0.5";
  n.port = 2222;
  n.user = "ubuntu";
  n.key_path = "/home/me/.ssh/id_ed25519";
  n.usd_per_hour = 2.5;
  n.spot = true;
  n.labels = {"zone:eu", "a100"};
  const int64_t id = db::add_ssh_node(d, n);
  CHECK(id > 0);
  CHECK_THROWS(db::add_ssh_node(d, n), "");  // name taken
  const db::SshNode back = db::get_ssh_node(d, "gpu-1");
  CHECK(back.host == "10.0.0.5" && back.port == 2222 && back.user == "ubuntu" && back.key_path == n.key_path);
  CHECK(back.usd_per_hour && *back.usd_per_hour == 2.5 && back.spot);
  CHECK(back.labels.size() == 2 && back.labels[1] == "a100");
  CHECK_NEAR(db::node_rate(d, id, 1).usd_per_hour, 2.5, 1e-12);  // whole node while no GPUs are known

  n.name = "gpu-renamed";
  n.port = 22;
  n.usd_per_hour.reset();
  n.spot = false;
  db::update_ssh_node(d, "gpu-1", n);
  CHECK(!db::find_ssh_node(d, "gpu-1"));
  const db::SshNode renamed = db::get_ssh_node(d, "gpu-renamed");
  CHECK(renamed.id == id && renamed.port == 22 && !renamed.usd_per_hour && !renamed.spot);
  CHECK(db::list_ssh_nodes(d).size() == 1);
  db::ensure_node(d, "local", "local");
  CHECK(db::list_ssh_nodes(d).size() == 1);  // only ssh nodes

  db::set_node_gpus(d, id, "H100", 8);
  CHECK(db::get_ssh_node(d, "gpu-renamed").gpu_count == 8);
  std::vector<db::SystemSample> samples;
  for (int t = 0; t < 3; ++t)
    for (int dev = 0; dev < 2; ++dev) {
      db::SystemSample s;
      s.node_id = id;
      s.device = dev;
      s.time = 1000 + t;
      s.utilization = 10.0 * t + dev;
      s.memory_used = int64_t{1} << (20 + t);
      s.memory_total = int64_t{80} << 30;
      samples.push_back(s);
    }
  db::insert_system_samples(d, samples);
  db::insert_system_samples(d, {samples.back()});  // same (node, device, time): replaced, not doubled
  CHECK(db::system_samples(d, id).size() == 6);
  CHECK(db::system_samples(d, id, 1001.5).size() == 2);
  const auto latest = db::latest_system_samples(d, id);
  CHECK(latest.size() == 2 && latest[1].time == 1002 && latest[1].utilization && *latest[1].utilization == 21);
  CHECK(!latest[0].power_w);  // not reported stays NULL

  // A node used by a run cannot be removed; an unused one takes its samples with it.
  db::NewRun nr;
  nr.name = "r";
  const int64_t run = db::create_run(d, nr);
  db::attach_node(d, run, id, 1);
  CHECK_THROWS(db::remove_node(d, "gpu-renamed"), "delete those runs first");
  db::delete_run(d, run);
  db::remove_node(d, "gpu-renamed");
  CHECK(db::list_ssh_nodes(d).empty());
  CHECK(db::system_samples(d, id).empty());
  CHECK_THROWS(db::remove_node(d, "gpu-renamed"), "no node named");
}

void test_validation() {
  remote::NodeFields ok;
  ok.name = "lab-1";
  ok.host = "gpu.example.org";
  ok.port = "22";
  ok.user = "alice";
  ok.key_path = "/home/alice/.ssh/id_ed25519";
  ok.price_per_hour = "1.25";
  ok.labels = {"zone:eu", "tier=spot"};
  CHECK(remote::validate_node_fields(ok).empty());
  remote::NodeFields bad;
  bad.name = "-x";
  bad.host = "a;touch /tmp/c";
  bad.port = "22abc";
  bad.user = "$(id)";
  bad.key_path = "-oProxyCommand=x";
  bad.price_per_hour = "-1";
  bad.labels = {"a,b"};
  const auto problems = remote::validate_node_fields(bad);
  CHECK_MSG(problems.size() == 7, "%zu problems", problems.size());
  const char* fields[] = {"name", "host", "port", "user", "key", "price", "label"};
  for (size_t i = 0; i < problems.size() && i < 7; ++i)
    CHECK_MSG(problems[i].field == fields[i] && problems[i].message.rfind(fields[i], 0) == 0,
              "%s: %s", problems[i].field.c_str(), problems[i].message.c_str());
  CHECK(!remote::validate_node_name(std::string(65, 'a')).empty());
  CHECK(!remote::validate_key_path("k\nProxyCommand x").empty());
  CHECK(remote::validate_price("").empty() && !remote::validate_price("1e3").empty());
  CHECK(db::split_labels(db::join_labels({"a", "", "b"})) == std::vector<std::string>({"a", "b"}));
}

}  // namespace

int main() {
  const std::string dir = flotilla_test::fresh_dir("node_store");
  test_store(dir);
  test_validation();
  return flotilla_test::summary("test_node_store");
}
