// Link matrices (db/links.h, schema v12): a measurement comes back whole with its links; a bad link
// is refused naming the pair and nothing is stored; a run's measurement is the newest for that run;
// latest_links keeps the newest figure per ordered pair, an older figure beats a newer error, and
// deleting a run or a node removes what belongs to it.
#include <string>
#include <vector>

#include "db/errors.h"
#include "db/links.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

NodeLink figures(int64_t from, int64_t to, double lat, double bw) {
  NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.latency_s = lat;
  l.bytes_per_s = bw;
  return l;
}
NodeLink failed(int64_t from, int64_t to, const std::string& why) {
  NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.error = why;
  return l;
}

void test_round_trip(Database& db) {
  const int64_t a = ensure_node(db, "link-a", "ssh");
  const int64_t b = ensure_node(db, "link-b", "ssh");
  LinkMeasurement m;
  m.measured_at = 1000;
  m.transport = "gloo/tcp";
  m.seconds = 2.5;
  m.note = "node c: not connected";
  m.links = {figures(a, a, 2e-5, 5e9), figures(a, b, 1e-4, 1.2e7), figures(b, a, 1.1e-4, 1.25e7),
             failed(b, b, "node link-b: rank 1 did not join in 20 s")};
  const int64_t id = store_link_measurement(db, m);
  CHECK(id > 0);
  auto got = link_measurement(db, id);
  CHECK(got && got->transport == "gloo/tcp" && got->seconds == 2.5 && !got->run_id && got->links.size() == 4);
  CHECK(got && got->note == "node c: not connected" && got->measured_at == 1000);
  CHECK(got && got->links[1].from_node == a && got->links[1].to_node == b && *got->links[1].bytes_per_s == 1.2e7);
  CHECK(got && got->links[3].error.find("did not join") != std::string::npos && !got->links[3].latency_s);
  CHECK(latest_link_measurement(db) && latest_link_measurement(db)->id == id);

  // Refusals name the pair and store nothing.
  LinkMeasurement bad = m;
  bad.links = {figures(a, b, 1e-4, 1e7), failed(a, b, "again")};
  CHECK_THROWS(store_link_measurement(db, bad), "appears twice");
  NodeLink bare;
  bare.from_node = a;
  bare.to_node = b;
  bad.links = {bare};
  CHECK_THROWS(store_link_measurement(db, bad), "neither a latency and a bandwidth nor an error");
  bad.links = {figures(a, b, -1, 1e7)};
  CHECK_THROWS(store_link_measurement(db, bad), "negative latency");
  bad.links = {figures(a, b, 1e-4, 0)};
  CHECK_THROWS(store_link_measurement(db, bad), "not above 0");
  bad.transport = "";
  CHECK_THROWS(store_link_measurement(db, bad), "transport");
  CHECK(raw_int(db.path(), "SELECT COUNT(*) FROM link_measurements") == 1);

  // Newest per pair; an older figure beats a newer error; intra-node pairs included.
  LinkMeasurement later;
  later.measured_at = 2000;
  later.transport = "gloo/tcp";
  later.links = {figures(a, b, 2e-4, 6e6), failed(b, a, "node link-b: timed out")};
  store_link_measurement(db, later);
  const auto latest = latest_links(db, {a, b});
  CHECK(latest.size() == 4);
  for (const auto& l : latest) {
    if (l.from_node == a && l.to_node == b) CHECK(*l.bytes_per_s == 6e6 && l.measured_at == 2000);
    if (l.from_node == b && l.to_node == a) CHECK(l.error.empty() && *l.bytes_per_s == 1.25e7);
    if (l.from_node == b && l.to_node == b) CHECK(!l.error.empty());
  }
  CHECK(latest_links(db, {a}).size() == 1);

  // A run's own measurement; deleting the run deletes it.
  const int64_t run = make_run(db, "links-run");
  LinkMeasurement at_start = later;
  at_start.measured_at = 1500;
  at_start.run_id = run;
  const int64_t rid = store_link_measurement(db, at_start);
  auto r = run_link_measurement(db, run);
  CHECK(r && r->id == rid && r->run_id && *r->run_id == run);
  CHECK(!run_link_measurement(db, run + 1000));
  delete_run(db, run);
  CHECK(!link_measurement(db, rid));
  // Deleting a node removes its links.
  remove_node(db, "link-b");
  CHECK(latest_links(db).size() == 1);
}

}  // namespace

int main() {
  const auto dir = scratch("node_links", "store");
  Database db((dir / "flotilla.db").string());
  test_round_trip(db);
  return flotilla_test::summary("test_node_links");
}
