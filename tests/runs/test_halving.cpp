// Successive halving (runs/halving.h) on a crafted store: six runs of one sweep with validation
// losses at a rung (tokens from the stored cumulative `tokens` metric), arriving one by one:
// - each run is judged against the runs that reached the rung before it (asynchronous): what is
//   decided with three arrivals stays decided when the other three come;
// - an arrival order where every worse run comes after enough better ones stops exactly the worse
//   half, and the words name the rung, the loss, the place and how many are kept;
// - ties and fewer than eta runs at a rung continue; a loss measured before the rung does not count;
// - the tick records a "halving" event and calls the stop once per run, never again on later ticks,
//   and never for a run that is not running; a sweep without halving stops nothing.
#include <string>
#include <vector>

#include "db/metric_sink.h"
#include "db/queue.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "runs/halving.h"
#include "store_fixture.h"

using namespace store_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

// A sweep `group` with halving at `rungs`, and one running run per entry of `losses`: each logs
// `tokens` (100 per step) for steps 1..30, and a validation loss at step 10 (1000 tokens, reached
// at time arrive[i]) and one at step 5 (before the rung, better than everything: must not count).
std::vector<int64_t> make_sweep(db::Database& d, const std::string& group, const std::vector<double>& losses,
                                const std::vector<double>& arrive, const std::string& halving) {
  db::Sweep s;
  s.name = group;
  s.halving_json = halving;
  s.created_at = 50;
  db::add_sweep(d, s);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < losses.size(); ++i) {
    const std::string name = group + "-" + std::to_string(i + 1);
    db::NewQueueEntry e;
    e.name = name;
    e.config_toml = "[run]\nname = \"" + name + "\"\n";
    e.group = group;
    const int64_t entry = db::add_queue_entry(d, e, 60);
    const int64_t run = make_run(d, name);
    db::set_status(d, run, db::RunStatus::kRunning, 70);
    CHECK(db::claim_queue_entry(d, entry, "tok", "local", "", "{}", 70));
    CHECK(db::set_queue_entry_run(d, entry, "tok", run, 70));
    std::vector<db::MetricRow> rows;
    for (int step = 1; step <= 30; ++step) rows.push_back({run, "tokens", step, 100.0 * step, 70.0 + step});
    rows.push_back({run, "val_loss", 5, 0.5, 70});
    rows.push_back({run, "val_loss", 10, losses[i], arrive[i]});
    db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
    ids.push_back(run);
  }
  return ids;
}

std::vector<int64_t> stopped_ids(const std::vector<runs::HalvingStop>& stops) {
  std::vector<int64_t> out;
  for (const auto& s : stops) out.push_back(s.run_id);
  return out;
}

void test_worse_half(db::Database& d) {
  // Arrival order: 2.0, 1.0, 4.0, 1.5, 5.0, 6.0 (times 100..105).
  const auto ids = make_sweep(d, "half", {2.0, 1.0, 4.0, 1.5, 5.0, 6.0}, {100, 101, 102, 103, 104, 105},
                              R"({"eta":2,"rungs":[1000]})");
  const auto all = runs::halving_decisions(d, "half", 1000);
  CHECK_MSG(stopped_ids(all) == (std::vector<int64_t>{ids[2], ids[4], ids[5]}), "stops %zu runs", all.size());
  // The words: the rung, the loss, its place among the arrivals then, and how many are kept.
  CHECK_MSG(all.size() == 3 && all[0].why ==
                                   "stopped by successive halving at 1k tokens: val loss 4, 3rd of 3 at this "
                                   "rung (keeps the best 2)",
            "%s", all.empty() ? "" : all[0].why.c_str());
  CHECK(all.size() == 3 && all[2].why.find("6th of 6 at this rung (keeps the best 3)") != std::string::npos);
  // Asynchronous: at time 102.5 only three have arrived; the third is already out.
  CHECK(stopped_ids(runs::halving_decisions(d, "half", 102.5)) == (std::vector<int64_t>{ids[2]}));
  CHECK(runs::halving_decisions(d, "half", 101.5).empty());  // two runs: the second is better

  // The tick: an event, one stop per run, none on the next ticks.
  std::vector<int64_t> calls;
  const runs::StopRunFn stop = [&](int64_t run, const std::string&) { calls.push_back(run); };
  runs::halving_tick(stop, d, 1000);
  CHECK(calls == (std::vector<int64_t>{ids[2], ids[4], ids[5]}));
  runs::halving_tick(stop, d, 1001);  // the runs still say running (the stop takes a while): not again
  runs::halving_tick(stop, d, 1002);
  CHECK_MSG(calls.size() == 3, "stopped %zu times", calls.size());
  CHECK(runs::halving_reason(d, ids[2]).find("val loss 4, 3rd of 3") != std::string::npos);
  CHECK(runs::halving_reason(d, ids[0]).empty());
  CHECK(raw_int(d.path(), "SELECT COUNT(*) FROM events WHERE kind = 'halving'") == 3);
}

void test_arrival_order(db::Database& d) {
  // 3.0, 2.0, 3.5, 1.5, 2.5, 4.0: the first run (3.0) went on when it was 1st of 1; by the end it is
  // 4th of 6, but a decision is never taken back. 3.5 is 3rd of 3 (keep 2), 4.0 is 6th of 6.
  const auto ids = make_sweep(d, "async", {3.0, 2.0, 3.5, 1.5, 2.5, 4.0}, {200, 201, 202, 203, 204, 205},
                              R"({"eta":2,"rungs":[1000]})");
  CHECK(stopped_ids(runs::halving_decisions(d, "async", 1000)) == (std::vector<int64_t>{ids[2], ids[5]}));
  const auto standings =
      runs::halving_standings(d, "async", runs::parse_halving_json(R"({"eta":2,"rungs":[1000]})"), 0);
  CHECK(standings.size() == 6 && standings[0].rungs.size() == 1 && standings[0].rungs[0].continues &&
        standings[0].rungs[0].of == 1);
  CHECK(standings.size() == 6 && standings[4].rungs[0].place == 3 && standings[4].rungs[0].keep == 3);
  // Arrival by time, not by id: the same losses arriving in reverse order stop a different set.
  const auto rev = make_sweep(d, "reverse", {3.0, 2.0, 3.5, 1.5, 2.5, 4.0}, {305, 304, 303, 302, 301, 300},
                              R"({"eta":2,"rungs":[1000]})");
  // Arrivals: 4.0, 2.5, 1.5, 3.5 (3rd of 4, keep 2: out), 2.0, 3.0 (4th of 6, keep 3: out).
  CHECK(stopped_ids(runs::halving_decisions(d, "reverse", 1000)) == (std::vector<int64_t>{rev[0], rev[2]}));
}

void test_ties_and_edges(db::Database& d) {
  // Ties share the better place; eta 3 with two arrivals compares nobody.
  const auto tie = make_sweep(d, "tie", {2.0, 2.0, 2.0}, {400, 401, 402}, R"({"eta":2,"rungs":[1000]})");
  CHECK(runs::halving_decisions(d, "tie", 1000).empty());
  const auto few = make_sweep(d, "few", {1.0, 9.0}, {500, 501}, R"({"eta":3,"rungs":[1000]})");
  CHECK(runs::halving_decisions(d, "few", 1000).empty());
  // A rung no run has reached (the losses at 500 and 1000 tokens are before it): nothing.
  make_sweep(d, "far", {1.0, 9.0, 8.0}, {600, 601, 602}, R"({"eta":2,"rungs":[2000]})");
  CHECK(runs::halving_decisions(d, "far", 1000).empty());
  // Halving off, or no such sweep: nothing.
  make_sweep(d, "off", {1.0, 9.0, 8.0}, {700, 701, 702}, "{}");
  CHECK(runs::halving_decisions(d, "off", 1000).empty());
  CHECK(runs::halving_decisions(d, "nope", 1000).empty());
  // A run that is no longer running is not stopped (completed before the tick saw it).
  const auto done = make_sweep(d, "done", {1.0, 9.0}, {800, 801}, R"({"eta":2,"rungs":[1000]})");
  db::set_status(d, done[1], db::RunStatus::kCompleted, 900);
  CHECK(runs::halving_decisions(d, "done", 1000).empty());
  (void)tie;
  (void)few;
}

void test_tokens_without_metric(db::Database& d) {
  // No `tokens` metric: tokens = step x the config's tokens per step (micro_batch 2 x seq_len 16).
  db::Sweep s;
  s.name = "cfg";
  s.halving_json = R"({"eta":2,"rungs":[300]})";
  db::add_sweep(d, s);
  std::vector<int64_t> ids;
  const double losses[] = {1.0, 2.0};
  for (int i = 0; i < 2; ++i) {
    const std::string name = "cfg-" + std::to_string(i + 1);
    db::NewQueueEntry e;
    e.name = name;
    e.config_toml = "[run]\nname = \"" + name + "\"\n";
    e.group = "cfg";
    const int64_t entry = db::add_queue_entry(d, e, 60);
    db::NewRun r;
    r.name = name;
    r.config_toml = "[train]\nmicro_batch = 2\nseq_len = 16\n";
    const int64_t run = db::create_run(d, r);
    db::set_status(d, run, db::RunStatus::kRunning, 70);
    db::claim_queue_entry(d, entry, "tok", "local", "", "{}", 70);
    db::set_queue_entry_run(d, entry, "tok", run, 70);
    // Step 9 is 288 tokens (before the rung), step 10 is 320 (the rung's loss).
    std::vector<db::MetricRow> rows = {{run, "val_loss", 9, 0.1, 80},
                                       {run, "val_loss", 10, losses[i], 90.0 + i}};
    db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
    ids.push_back(run);
  }
  const auto stops = runs::halving_decisions(d, "cfg", 1000);
  CHECK(stopped_ids(stops) == (std::vector<int64_t>{ids[1]}));
  CHECK(stops.size() == 1 && stops[0].why.find("at 300 tokens: val loss 2, 2nd of 2") != std::string::npos);
}

void test_rungs_and_words() {
  CHECK(runs::auto_rungs(64000, 2) == (std::vector<int64_t>{8000, 16000, 32000}));
  CHECK(runs::auto_rungs(64000, 2, 10000) == (std::vector<int64_t>{16000, 32000}));
  CHECK(runs::auto_rungs(90, 3, 5) == (std::vector<int64_t>{10, 30}));
  CHECK(runs::tokens_words(4096) == "4.1k tokens");
  CHECK(runs::tokens_words(1500000) == "1.5M tokens");
  const runs::HalvingSettings h = runs::parse_halving_json(R"({"eta":3,"rungs":[9000,3000],"auto":true})");
  CHECK(h.eta == 3 && h.rungs == (std::vector<int64_t>{3000, 9000}) && h.auto_rungs);
  CHECK(runs::parse_halving_json(runs::halving_json(h)).rungs == h.rungs);
  CHECK(runs::halving_json(runs::HalvingSettings{}) == "{}");
  CHECK(!runs::parse_halving_json("{}").on());
}

}  // namespace

int main() {
  const auto dir = scratch("runs_halving", "store");
  db::Database d((dir / "store.db").string());
  test_worse_half(d);
  test_arrival_order(d);
  test_ties_and_edges(d);
  test_tokens_without_metric(d);
  test_rungs_and_words();
  return flotilla_test::summary("test_halving");
}
