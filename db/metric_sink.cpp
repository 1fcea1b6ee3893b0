// Metric rows and block summaries (see metric_sink.h for the append/recompute decision).
#include "db/metric_sink.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace flotilla::db {
namespace {

struct Agg {
  int64_t count = 0;
  double min = 0, max = 0;
  int64_t first_step = 0, last_step = 0;
  double last_value = 0, last_time = 0;
  bool increasing = true;  // steps strictly increasing within the batch
};

// (run, name, block); the name views the batch's rows, which outlive the map.
struct BlockKey {
  int64_t run_id;
  std::string_view name;
  int64_t block;
  bool operator==(const BlockKey& o) const {
    return run_id == o.run_id && block == o.block && name == o.name;
  }
};
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    return std::hash<std::string_view>{}(k.name) ^ (static_cast<size_t>(k.run_id) * 0x9E3779B97F4A7C15ull) ^
           (static_cast<size_t>(k.block) * 0xC2B2AE3D27D4EB4Full);
  }
};

}  // namespace

MetricSink::MetricSink(Database& db)
    : db_(db),
      upsert_(db,
              "INSERT INTO metrics(run_id, name, step, value, time) VALUES (?1, ?2, ?3, ?4, ?5) "
              "ON CONFLICT(run_id, name, step) DO UPDATE SET value = excluded.value, time = excluded.time"),
      read_block_(db,
                  "SELECT count, min_value, max_value, first_step, last_step FROM metric_blocks "
                  "WHERE run_id = ?1 AND name = ?2 AND block = ?3"),
      write_block_(
          db,
          "INSERT OR REPLACE INTO metric_blocks(run_id, name, block, count, min_value, max_value, "
          "first_step, last_step, last_value, last_time) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
      agg_block_(db,
                 "SELECT count(*), min(value), max(value), min(step) FROM metrics "
                 "WHERE run_id = ?1 AND name = ?2 AND step BETWEEN ?3 AND ?4"),
      last_in_block_(db,
                     "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 "
                     "AND step BETWEEN ?3 AND ?4 ORDER BY step DESC LIMIT 1"),
      delete_block_(db, "DELETE FROM metric_blocks WHERE run_id = ?1 AND name = ?2 AND block = ?3") {}

void MetricSink::insert(const std::vector<MetricRow>& rows) {
  std::unordered_map<BlockKey, Agg, BlockKeyHash> touched;
  std::vector<const BlockKey*> order;  // first-touch order, so block writes are deterministic
  for (const MetricRow& r : rows) {
    upsert_.bind(1, r.run_id).bind(2, r.name).bind(3, r.step).bind(4, r.value).bind(5, r.time);
    upsert_.run();
    upsert_.reset();
    auto [it, fresh] = touched.try_emplace(BlockKey{r.run_id, r.name, block_of(r.step)});
    Agg& a = it->second;
    if (fresh) {
      order.push_back(&it->first);
      a = Agg{1, r.value, r.value, r.step, r.step, r.value, r.time, true};
      continue;
    }
    if (r.step <= a.last_step) a.increasing = false;
    ++a.count;
    a.min = std::min(a.min, r.value);
    a.max = std::max(a.max, r.value);
    if (r.step >= a.last_step) {
      a.last_step = r.step;
      a.last_value = r.value;
      a.last_time = r.time;
    }
  }
  for (const BlockKey* key : order) {
    const Agg& a = touched.find(*key)->second;
    const int64_t run_id = key->run_id, block = key->block;
    const std::string name(key->name);
    if (!a.increasing) {
      rebuild_block(run_id, name, block);
      continue;
    }
    read_block_.bind(1, run_id).bind(2, name).bind(3, block);
    const bool exists = read_block_.step();
    Agg merged = a;
    bool append = true;
    if (exists) {
      const int64_t old_last = read_block_.i64(4);
      if (a.first_step > old_last) {
        merged.count += read_block_.i64(0);
        merged.min = std::min(a.min, read_block_.f64(1));
        merged.max = std::max(a.max, read_block_.f64(2));
        merged.first_step = read_block_.i64(3);
      } else {
        append = false;
      }
    }
    read_block_.reset();
    if (!append) {
      rebuild_block(run_id, name, block);
      continue;
    }
    write_block_.bind(1, run_id).bind(2, name).bind(3, block).bind(4, merged.count).bind(5, merged.min);
    write_block_.bind(6, merged.max).bind(7, merged.first_step).bind(8, merged.last_step);
    write_block_.bind(9, merged.last_value).bind(10, merged.last_time);
    write_block_.run();
    write_block_.reset();
  }
}

void MetricSink::rebuild_block(int64_t run_id, const std::string& name, int64_t block) {
  const int64_t lo = block << kBlockShift;
  const int64_t hi = lo + (int64_t{1} << kBlockShift) - 1;
  agg_block_.bind(1, run_id).bind(2, name).bind(3, lo).bind(4, hi);
  agg_block_.step();
  const int64_t count = agg_block_.i64(0);
  const double mn = agg_block_.f64(1), mx = agg_block_.f64(2);
  const int64_t first = agg_block_.i64(3);
  agg_block_.reset();
  if (count == 0) {
    delete_block_.bind(1, run_id).bind(2, name).bind(3, block);
    delete_block_.run();
    delete_block_.reset();
    return;
  }
  last_in_block_.bind(1, run_id).bind(2, name).bind(3, lo).bind(4, hi);
  last_in_block_.step();
  const int64_t last_step = last_in_block_.i64(0);
  const double last_value = last_in_block_.f64(1), last_time = last_in_block_.f64(2);
  last_in_block_.reset();
  write_block_.bind(1, run_id).bind(2, name).bind(3, block).bind(4, count).bind(5, mn).bind(6, mx);
  write_block_.bind(7, first).bind(8, last_step).bind(9, last_value).bind(10, last_time);
  write_block_.run();
  write_block_.reset();
}

}  // namespace flotilla::db
