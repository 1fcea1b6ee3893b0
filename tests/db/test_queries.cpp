// Queries: downsampling keeps every bucket's min, max and last (a single spike in 1M points is
// visible at 500 buckets, on the block path and the raw path, and equals a brute-force answer on a
// messy series); run lists filter and sort; summaries, aligned series and config differences.
#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "db/costs.h"
#include "db/metric_sink.h"
#include "db/queries.h"
#include "db/sql.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

void insert(Database& db, const std::vector<MetricRow>& rows) {
  MetricSink sink(db);
  db.write_transaction([&] { sink.insert(rows); });
}

void test_spike_in_a_million(const fs::path& dir) {
  Database db((dir / "spike.db").string());
  const int64_t run = make_run(db, "spike");
  constexpr int64_t kSpikeStep = 765432;
  std::vector<MetricRow> rows;
  for (int64_t s = 1; s <= 1000000; ++s) {
    rows.push_back({run, "loss", s, s == kSpikeStep ? 1000.0 : 2.0 + 1e-7 * static_cast<double>(s % 97),
                    1.7e9 + static_cast<double>(s)});
    if (rows.size() == 100000) {
      insert(db, rows);
      rows.clear();
    }
  }
  const auto buckets = metric_series(db, run, "loss", 500);
  CHECK(buckets.size() <= 500 && buckets.size() >= 490);
  int spikes = 0;
  int64_t covered = 0;
  for (const Bucket& b : buckets) {
    covered += b.count;
    if (b.max == 1000.0) {
      ++spikes;
      CHECK(b.first_step <= kSpikeStep && kSpikeStep <= b.last_step);
    }
  }
  CHECK(spikes == 1);
  CHECK(covered == 1000000);
  CHECK(buckets.back().last_step == 1000000);
  // A zoomed window not aligned to blocks, narrow enough for the raw path, still shows it.
  const auto zoom = metric_series(db, run, "loss", 500, kSpikeStep - 1000, kSpikeStep + 777);
  int zoom_spikes = 0;
  for (const Bucket& b : zoom) zoom_spikes += b.max == 1000.0;
  CHECK(zoom_spikes == 1);
  CHECK(!zoom.empty() && zoom.front().first_step == kSpikeStep - 1000 &&
        zoom.back().last_step == kSpikeStep + 777);
  // A wide window with unaligned ends (block path with raw edge blocks).
  const auto wide = metric_series(db, run, "loss", 100, 1000, 900123);
  int64_t wide_count = 0;
  for (const Bucket& b : wide) wide_count += b.count;
  CHECK(wide_count == 900123 - 1000 + 1);
  CHECK(wide.front().first_step == 1000 && wide.back().last_step == 900123);
}

// Every bucket agrees with a brute-force computation on a series with gaps, replacements and
// out-of-order batches.
void test_against_brute_force(const fs::path& dir) {
  Database db((dir / "brute.db").string());
  const int64_t run = make_run(db, "brute");
  std::mt19937 rng(7);
  std::map<int64_t, double> truth;
  for (int batch = 0; batch < 40; ++batch) {
    std::vector<MetricRow> rows;
    for (int i = 0; i < 500; ++i) {
      const int64_t step = std::uniform_int_distribution<int64_t>(0, 60000)(rng) * 3;  // gaps
      const double v = std::uniform_real_distribution<double>(-5, 5)(rng);
      rows.push_back({run, "x", step, v, static_cast<double>(step)});
      truth[step] = v;  // last write wins, as in the store
    }
    insert(db, rows);
  }
  for (int n : {1, 7, 100, 1000}) {
    const auto got = metric_series(db, run, "x", n);
    int64_t count = 0;
    for (const Bucket& b : got) {
      double mn = 1e300, mx = -1e300, last = 0;
      int64_t c = 0, last_step = -1;
      for (auto it = truth.lower_bound(b.first_step); it != truth.end() && it->first <= b.last_step; ++it) {
        mn = std::min(mn, it->second);
        mx = std::max(mx, it->second);
        last = it->second;
        last_step = it->first;
        ++c;
      }
      CHECK(c == b.count && mn == b.min && mx == b.max && last == b.last && last_step == b.last_step);
      count += b.count;
    }
    CHECK_MSG(count == static_cast<int64_t>(truth.size()), "n=%d: %lld of %zu points", n,
              static_cast<long long>(count), truth.size());
  }
}

void test_lists_summaries_alignment(const fs::path& dir) {
  Database db((dir / "runs.db").string());
  const int64_t a = make_run(db, "alpha", R"({"train":{"steps":100,"lr":0.001},"model":{"preset":"tiny"}})");
  const int64_t b = make_run(db, "beta", R"({"train":{"steps":100,"lr":0.003},"model":{"preset":"tiny"}})");
  const int64_t c = make_run(db, "gamma", R"({"train":{"steps":50}})");
  set_tags(db, b, {"sweep", "lr"});
  std::vector<MetricRow> rows;
  for (int s = 1; s <= 100; ++s) {
    rows.push_back({a, "loss", s, 5.0 - s * 0.02, 1000.0 + s});
    rows.push_back({a, "tokens", s, s * 1000.0, 1000.0 + s});
    rows.push_back({a, "tokens_per_s", s, 500.0, 1000.0 + s});
    rows.push_back({b, "loss", s, 5.0 - s * 0.03, 2000.0 + 2 * s});
    rows.push_back({b, "tokens", s, s * 2000.0, 2000.0 + 2 * s});
  }
  rows.push_back({a, "val_loss", 50, 4.2, 1050});
  rows.push_back({a, "val_loss", 100, 3.1, 1100});
  insert(db, rows);
  set_status(db, a, RunStatus::kRunning, 1000);
  set_status(db, a, RunStatus::kCompleted, 1100);

  RunFilter f;
  f.sort = RunFilter::Sort::kFinalLoss;
  f.descending = false;
  auto list = list_runs(db, f);
  CHECK(list.size() == 3 && list[0].run.name == "beta" && list[1].run.name == "alpha" &&
        list[2].run.name == "gamma");
  CHECK(list[0].last_step == 100 && list[0].last_loss && std::abs(*list[0].last_loss - 2.0) < 1e-9);
  f = RunFilter{};
  f.tag = "sweep";
  list = list_runs(db, f);
  CHECK(list.size() == 1 && list[0].run.name == "beta");
  f = RunFilter{};
  f.statuses = {RunStatus::kCompleted};
  CHECK(list_runs(db, f).size() == 1);
  f = RunFilter{};
  f.name_contains = "mm";
  f.sort = RunFilter::Sort::kName;
  CHECK(list_runs(db, f).size() == 1);
  f = RunFilter{};
  f.limit = 2;
  f.sort = RunFilter::Sort::kName;
  list = list_runs(db, f);
  CHECK(list.size() == 2 && list[0].run.name == "gamma");  // descending by default

  const RunSummary s = run_summary(db, a, 5000);
  CHECK(s.steps == 100);
  CHECK_NEAR(*s.final_loss, 3.0, 1e-9);
  CHECK_NEAR(*s.best_loss, 3.0, 1e-9);
  CHECK_NEAR(*s.best_val_loss, 3.1, 1e-9);
  CHECK_NEAR(s.tokens, 100000, 1e-9);
  CHECK_NEAR(*s.tokens_per_s, 500, 1e-9);
  CHECK_NEAR(s.training_s, 99, 1e-9);
  CHECK(!s.usd_per_million_tokens);  // no accruals: unknown, not zero

  const auto by_tokens = aligned_series(db, {a, b}, "loss", XAxis::kTokens, 10);
  CHECK(by_tokens.size() == 2);
  CHECK(by_tokens[0].points.back().x == 100000 && by_tokens[1].points.back().x == 200000);
  const auto by_wall = aligned_series(db, {a, b}, "loss", XAxis::kWallTime, 1000);
  CHECK(by_wall[1].points.size() == 100 && std::abs(by_wall[1].points.back().x - 198) < 1e-9);

  Run ra = get_run(db, a), rb = get_run(db, b), rc = get_run(db, c);
  const auto diffs = config_differences({ra, rb, rc});
  std::map<std::string, std::vector<std::string>> d;
  for (const auto& x : diffs) d[x.key] = x.values;
  CHECK(d.size() == 3);
  CHECK((d["train.lr"] == std::vector<std::string>{"0.001", "0.003", ""}));
  CHECK((d["train.steps"] == std::vector<std::string>{"100", "100", "50"}));
  CHECK((d["model.preset"] == std::vector<std::string>{"tiny", "tiny", ""}));
  CHECK(config_differences({ra, ra}).empty());
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_queries", "all");
  test_spike_in_a_million(dir);
  test_against_brute_force(dir);
  test_lists_summaries_alignment(dir);
  return flotilla_test::summary("test_queries");
}
