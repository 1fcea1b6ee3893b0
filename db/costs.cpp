// Pricing catalogue, node rates, accrual splitting and cost queries (see costs.h).
#include "db/costs.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "db/errors.h"
#include "db/sql.h"
#include "engine/core/clock.h"
#include "flotilla/pricing_seed.h"

namespace flotilla::db {
namespace {

std::string money(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.2f", v);
  return buf;
}

// Dollars with the digits a small budget needs: 4 decimals under $1 ("$0.0201"), else 2; trailing
// zeros beyond 2 decimals dropped ("$0.02", not "$0.0200").
std::string money_exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", std::fabs(v) < 1 ? 4 : 2, v);
  std::string s = buf;
  const size_t dot = s.find('.');
  while (dot != std::string::npos && s.size() > dot + 3 && s.back() == '0') s.pop_back();
  return "$" + s;
}

std::string hours_text(double h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g h", h);
  return buf;
}

PriceEntry read_price(const Stmt& st) {
  PriceEntry p;
  p.id = st.i64(0);
  p.provider = st.text(1);
  p.item = st.text(2);
  p.gpu_type = st.text(3);
  p.gpus = st.i64(4);
  p.on_demand_usd_per_hour = st.f64(5);
  p.spot_usd_per_hour = st.opt_f64(6);
  p.as_of = st.text(7);
  p.source = st.text(8);
  p.user_edited = st.i64(9) != 0;
  return p;
}

constexpr const char* kPriceColumns =
    "id, provider, item, gpu_type, gpus, on_demand_usd_per_hour, spot_usd_per_hour, as_of, source, "
    "user_edited";

std::string utc_day(double t) {
  const std::time_t s = static_cast<std::time_t>(std::floor(t));
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

struct AccrualRow {
  Accrual a;
  std::string run_name, node_name;
  bool on_gpus = false;
};

std::vector<AccrualRow> all_accruals(const Database& db) {
  std::vector<AccrualRow> out;
  Stmt st(
      db,
      "SELECT a.run_id, a.node_id, a.status, a.start_time, a.end_time, a.devices, a.usd_per_hour, "
      "a.rate_source, r.name, n.name, r.config_json, a.start_boot, a.end_boot, a.boot_id FROM cost_accruals a "
      "JOIN runs r ON r.id = a.run_id "
      "JOIN nodes n ON n.id = a.node_id UNION ALL "
      "SELECT c.run_id, 0, c.status, c.start_time, c.end_time, c.devices, c.usd_per_hour, c.rate_source, "
      "r.name, "
      "k.name, r.config_json, c.start_boot, c.end_boot, c.boot_id FROM cluster_accruals c JOIN runs r ON r.id = "
      "c.run_id JOIN clusters k ON k.id = c.cluster_id "
      "ORDER BY 4");
  while (st.step()) {
    AccrualRow row;
    row.a = Accrual{st.i64(0),   st.i64(1),     st.text(2),     st.f64(3),     st.opt_f64(4), st.i64(5),
                    st.f64(6),   st.text(7),    st.opt_f64(11), st.opt_f64(12), st.text(13)};
    row.run_name = st.text(8);
    row.node_name = st.text(9);
    row.on_gpus = config_on_gpus(st.text(10));
    out.push_back(std::move(row));
  }
  return out;
}

// Seconds covered by these (start, seconds) spans, overlaps counted once. A span's own seconds are
// summed as they are, never as (start + seconds) - start: at Unix times near 1.8e9 that round trip
// loses about 1e-7 s, and running time x the price would no longer be the cost to the cent's
// millionth.
double union_seconds(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, open_end = 0, open_len = 0;
  bool open = false;
  for (const auto& [start, seconds] : spans) {
    if (seconds <= 0) continue;
    const double end = start + seconds;
    if (!open || start >= open_end) {
      total += open_len;
      open = true;
      open_end = end;
      open_len = seconds;
    } else if (end > open_end) {
      open_len += end - open_end;
      open_end = end;
    }
  }
  return total + open_len;
}

// Lines being summed, with each key's running spans (its hours are their union).
struct LineSums {
  std::map<std::string, CostLine> lines;
  std::map<std::string, std::vector<std::pair<double, double>>> spans;
};

std::vector<CostLine> to_lines(const LineSums& m) {
  std::vector<CostLine> out;
  for (const auto& [k, v] : m.lines) {
    out.push_back(v);
    out.back().running_s = union_seconds(m.spans.at(k));
    out.back().hours = out.back().running_s / 3600.0;
  }
  return out;
}

// One interval's part: `seconds` of running from `start` on `devices` devices at `usd_per_hour`.
void add_to(LineSums& m, const std::string& key, double start, double seconds, int64_t devices,
            double usd_per_hour, bool on_gpus) {
  CostLine& l = m.lines[key];
  l.key = key;
  const std::string unit = device_hours_unit(on_gpus);
  l.unit = l.unit.empty() || l.unit == unit ? unit : "device-h";
  l.usd += usd_per_hour * seconds / 3600.0;
  l.priced = l.priced || usd_per_hour > 0;
  l.gpu_hours += static_cast<double>(devices) * seconds / 3600.0;
  m.spans[key].emplace_back(start, seconds);
}

}  // namespace

const std::string& builtin_pricing_toml() {
  static const std::string text = kFlotillaPricingSeed;
  return text;
}

int seed_pricing(Database& db, const std::string& toml_text, const std::string& source_name) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source_name << ":" << e.source().begin.line << ": " << e.description();
    throw DbError(DbErrorKind::kInvalid, "pricing catalogue " + msg.str());
  }
  std::vector<PriceEntry> entries;
  if (const toml::array* prices = doc["price"].as_array()) {
    int index = 0;
    for (const toml::node& n : *prices) {
      ++index;
      const toml::table* t = n.as_table();
      const std::string where = source_name + ": [[price]] #" + std::to_string(index);
      if (!t) throw DbError(DbErrorKind::kInvalid, where + " is not a table");
      PriceEntry p;
      p.provider = (*t)["provider"].value_or(std::string());
      p.item = (*t)["item"].value_or(std::string());
      p.gpu_type = (*t)["gpu_type"].value_or(std::string());
      p.gpus = (*t)["gpus"].value_or(int64_t{1});
      const std::optional<double> od = (*t)["on_demand"].value<double>();
      p.spot_usd_per_hour = (*t)["spot"].value<double>();
      p.as_of = (*t)["as_of"].value_or(std::string());
      p.source = (*t)["source"].value_or(std::string());
      if (p.provider.empty() || p.item.empty() || !od || *od < 0 || p.gpus < 1 ||
          (p.spot_usd_per_hour && *p.spot_usd_per_hour < 0))
        throw DbError(DbErrorKind::kInvalid, where + " needs provider, item, gpus >= 1 and on_demand >= 0 (" +
                                                 "spot, when given, >= 0)");
      p.on_demand_usd_per_hour = *od;
      entries.push_back(p);
    }
  }
  int changed = 0;
  write_tx(db, [&] {
    Stmt ins(
        db,
        "INSERT INTO pricing(provider, item, gpu_type, gpus, on_demand_usd_per_hour, spot_usd_per_hour, "
        "as_of, source) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
        "ON CONFLICT(provider, item) DO UPDATE SET gpu_type = excluded.gpu_type, gpus = excluded.gpus, "
        "on_demand_usd_per_hour = excluded.on_demand_usd_per_hour, "
        "spot_usd_per_hour = excluded.spot_usd_per_hour, as_of = excluded.as_of, source = excluded.source "
        "WHERE pricing.user_edited = 0 AND pricing.as_of <> excluded.as_of");
    for (const PriceEntry& p : entries) {
      ins.bind(1, p.provider).bind(2, p.item).bind(3, p.gpu_type).bind(4, p.gpus);
      ins.bind(5, p.on_demand_usd_per_hour).bind(6, p.spot_usd_per_hour).bind(7, p.as_of).bind(8, p.source);
      ins.run();
      changed += static_cast<int>(changes_count(db));
      ins.reset();
    }
  });
  return changed;
}

std::vector<PriceEntry> list_pricing(const Database& db) {
  std::vector<PriceEntry> out;
  Stmt st(db, std::string("SELECT ") + kPriceColumns + " FROM pricing ORDER BY provider, item");
  while (st.step()) out.push_back(read_price(st));
  return out;
}

std::optional<PriceEntry> find_price(const Database& db, const std::string& provider,
                                     const std::string& item) {
  Stmt st(db, std::string("SELECT ") + kPriceColumns + " FROM pricing WHERE provider = ?1 AND item = ?2");
  st.bind(1, provider).bind(2, item);
  if (!st.step()) return std::nullopt;
  return read_price(st);
}

int64_t set_price(Database& db, const PriceEntry& p) {
  if (p.provider.empty() || p.item.empty() || p.on_demand_usd_per_hour < 0 || p.gpus < 1 ||
      (p.spot_usd_per_hour && *p.spot_usd_per_hour < 0))
    throw DbError(DbErrorKind::kInvalid,
                  "a price needs a provider, an item, gpus >= 1 and non-negative $/hour figures");
  int64_t id = 0;
  write_tx(db, [&] {
    Stmt st(
        db,
        "INSERT INTO pricing(provider, item, gpu_type, gpus, on_demand_usd_per_hour, spot_usd_per_hour, "
        "as_of, "
        "source, user_edited) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1) "
        "ON CONFLICT(provider, item) DO UPDATE SET gpu_type = excluded.gpu_type, gpus = excluded.gpus, "
        "on_demand_usd_per_hour = excluded.on_demand_usd_per_hour, "
        "spot_usd_per_hour = excluded.spot_usd_per_hour, as_of = excluded.as_of, source = excluded.source, "
        "user_edited = 1");
    st.bind(1, p.provider)
        .bind(2, p.item)
        .bind(3, p.gpu_type)
        .bind(4, p.gpus)
        .bind(5, p.on_demand_usd_per_hour);
    st.bind(6, p.spot_usd_per_hour).bind(7, p.as_of).bind(8, p.source.empty() ? "user" : p.source).run();
    id = find_price(db, p.provider, p.item)->id;
  });
  return id;
}

void set_node_pricing(Database& db, int64_t node_id, const NodePricing& np) {
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT OR REPLACE INTO node_pricing(node_id, pricing_id, spot, usd_per_hour, power_w, "
            "tariff_usd_per_kwh) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    st.bind(1, node_id).bind(2, np.pricing_id).bind(3, np.spot ? 1 : 0).bind(4, np.usd_per_hour);
    st.bind(5, np.power_w).bind(6, np.tariff_usd_per_kwh).run();
  });
}

std::optional<NodePricing> node_pricing(const Database& db, int64_t node_id) {
  Stmt st(db,
          "SELECT pricing_id, spot, usd_per_hour, power_w, tariff_usd_per_kwh FROM node_pricing WHERE "
          "node_id = ?1");
  st.bind(1, node_id);
  if (!st.step()) return std::nullopt;
  return NodePricing{st.opt_i64(0), st.i64(1) != 0, st.opt_f64(2), st.opt_f64(3), st.opt_f64(4)};
}

Rate node_rate(const Database& db, int64_t node_id, int64_t devices) {
  const auto np = node_pricing(db, node_id);
  if (!np) return {0, "unpriced"};
  Stmt n(db, "SELECT gpu_count FROM nodes WHERE id = ?1");
  n.bind(1, node_id);
  const int64_t gpu_count = n.step() ? n.i64(0) : 0;
  const double share =
      gpu_count > 0 ? std::min(1.0, static_cast<double>(devices) / static_cast<double>(gpu_count)) : 1.0;
  if (np->pricing_id) {
    Stmt st(db, std::string("SELECT ") + kPriceColumns + " FROM pricing WHERE id = ?1");
    st.bind(1, *np->pricing_id);
    if (st.step()) {
      const PriceEntry p = read_price(st);
      const bool spot = np->spot && p.spot_usd_per_hour.has_value();
      const double instance = spot ? *p.spot_usd_per_hour : p.on_demand_usd_per_hour;
      const double per_gpu = instance / static_cast<double>(p.gpus);
      const double n_dev = static_cast<double>(std::max<int64_t>(devices, 1));
      return {per_gpu * n_dev, p.provider + "/" + p.item + (spot ? " spot" : " on-demand") + " " +
                                   std::to_string(std::max<int64_t>(devices, 1)) + "/" +
                                   std::to_string(p.gpus) + " GPUs"};
    }
  }
  if (np->usd_per_hour) return {*np->usd_per_hour * share, "flat " + money(*np->usd_per_hour) + "/h"};
  if (np->power_w && np->tariff_usd_per_kwh)
    return {*np->power_w / 1000.0 * *np->tariff_usd_per_kwh * share,
            std::to_string(static_cast<int64_t>(*np->power_w)) + " W x " + money(*np->tariff_usd_per_kwh) +
                "/kWh"};
  return {0, "unpriced"};
}

std::vector<RunNodeShare> run_node_shares(const Database& db, int64_t run_id) {
  std::vector<RunNodeShare> out;
  Stmt st(db,
          "SELECT rn.node_id, n.name, rn.devices, rn.usd_per_hour, rn.rate_source FROM run_nodes rn "
          "JOIN nodes n ON n.id = rn.node_id WHERE rn.run_id = ?1 ORDER BY rn.node_id");
  st.bind(1, run_id);
  while (st.step()) out.push_back({st.i64(0), st.text(1), st.i64(2), st.opt_f64(3), st.text(4)});
  return out;
}

void set_run_price(Database& db, int64_t run_id, double usd_per_hour, const std::string& source,
                   const std::vector<RunNodeShare>& shares) {
  if (!(usd_per_hour >= 0) || !std::isfinite(usd_per_hour))
    throw DbError(DbErrorKind::kInvalid, "a run's price must be a finite number of dollars per hour >= 0");
  write_tx(db, [&] {
    Stmt run(db, "UPDATE runs SET usd_per_hour = ?2, price_source = ?3 WHERE id = ?1");
    run.bind(1, run_id).bind(2, usd_per_hour).bind(3, source).run();
    if (changes_count(db) == 0)
      throw DbError(DbErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
    Stmt share(db,
               "UPDATE run_nodes SET usd_per_hour = ?3, rate_source = ?4 WHERE run_id = ?1 AND node_id = ?2");
    for (const RunNodeShare& s : shares) {
      share.bind(1, run_id)
          .bind(2, s.node_id)
          .bind(3, s.usd_per_hour.value_or(0))
          .bind(4, s.rate_source)
          .run();
      share.reset();
    }
  });
}

void split_accruals(Database& db, int64_t run_id, RunStatus to, double at, double at_boot) {
  const std::string boot = clk::boot_id();
  if (boot.empty()) at_boot = 0;  // readings of an unknown boot cannot be compared later
  // The close's boot reading: the one given, else the wall difference clamped to what the boot
  // clock saw since the open (a stepped wall clock then neither inflates nor zeroes it). Only a row
  // opened in this boot gets one.
  const std::string close_boot =
      "CASE WHEN start_boot IS NULL OR boot_id IS NOT ?3 THEN NULL WHEN ?4 > 0 THEN max(start_boot, ?4) "
      "ELSE min(max(start_boot, ?5), start_boot + max(0, ?2 - start_time)) END";
  for (const char* table : {"cost_accruals", "cluster_accruals"}) {
    Stmt close(db, std::string("UPDATE ") + table + " SET end_time = max(start_time, ?2), end_boot = " +
                       close_boot + " WHERE run_id = ?1 AND end_time IS NULL");
    close.bind(1, run_id).bind(2, at).bind(3, boot).bind(4, at_boot).bind(5, clk::boot_now()).run();
  }
  // The open's reading and boot (NULL when unknown: the row is then charged by its wall times).
  const auto bind_boot = [&](Stmt& st, int at_index) {
    if (at_boot > 0)
      st.bind(at_index, at_boot).bind(at_index + 1, boot);
    else
      st.bind_null(at_index).bind_null(at_index + 1);
  };
  if (to != RunStatus::kRunning) return;
  // A Slurm run (clusters.h): one accrual on its cluster at the run's stored price; its device-hours
  // count what Slurm allocated once the job started (GPUs of a GPU job, CPUs of a CPU job), else
  // what was requested (nodes x GPUs per node, or nodes x tasks per node).
  Stmt slurm(
      db,
      "SELECT j.cluster_id, COALESCE(j.alloc_devices, CASE WHEN j.gpus_per_node > 0 THEN j.nodes * "
      "j.gpus_per_node ELSE j.nodes * j.tasks_per_node END), COALESCE(r.usd_per_hour, 0), r.price_source FROM "
      "slurm_jobs j JOIN runs r ON r.id = j.run_id WHERE j.run_id = ?1");
  slurm.bind(1, run_id);
  if (slurm.step()) {
    Stmt open_cluster(
        db,
        "INSERT INTO cluster_accruals(run_id, cluster_id, status, start_time, devices, usd_per_hour, "
        "rate_source, start_boot, boot_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    open_cluster.bind(1, run_id)
        .bind(2, slurm.i64(0))
        .bind(3, to_string(to))
        .bind(4, at)
        .bind(5, slurm.i64(1));
    open_cluster.bind(6, slurm.f64(2)).bind(7, slurm.text(3));
    bind_boot(open_cluster, 8);
    open_cluster.run();
  }
  Stmt open(
      db,
      "INSERT INTO cost_accruals(run_id, node_id, status, start_time, devices, usd_per_hour, rate_source, "
      "start_boot, boot_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  for (const RunNodeShare& n : run_node_shares(db, run_id)) {
    const Rate r =
        n.usd_per_hour ? Rate{*n.usd_per_hour, n.rate_source} : node_rate(db, n.node_id, n.devices);
    open.bind(1, run_id).bind(2, n.node_id).bind(3, to_string(to)).bind(4, at).bind(5, n.devices);
    open.bind(6, r.usd_per_hour).bind(7, r.source);
    bind_boot(open, 8);
    open.run();
    open.reset();
  }
}

double Accrual::seconds(double now) const {
  // The monotonic evidence: how long the row lasted (closed) or has lasted so far (open, this boot).
  std::optional<double> mono;
  if (start_boot) {
    if (end && end_boot)
      mono = std::max(0.0, *end_boot - *start_boot);
    else if (!end && !boot_id.empty() && boot_id == clk::boot_id())
      mono = std::max(0.0, clk::boot_now() - *start_boot);
  }
  if (now <= 0) {
    if (mono) return *mono;
    now = now_seconds();
  }
  const double stop = end ? std::min(*end, now) : now;  // "up to min(end, now)", as the header says
  const double wall = std::max(0.0, stop - start);
  return mono ? std::min(wall, *mono) : wall;
}

std::vector<Accrual> run_accruals(const Database& db, int64_t run_id) {
  std::vector<Accrual> out;
  Stmt st(db,
          "SELECT run_id, node_id, status, start_time, end_time, devices, usd_per_hour, rate_source, "
          "start_boot, end_boot, boot_id FROM cost_accruals WHERE run_id = ?1 UNION ALL "
          "SELECT run_id, 0, status, start_time, end_time, devices, usd_per_hour, rate_source, "
          "start_boot, end_boot, boot_id FROM cluster_accruals WHERE run_id = ?1 ORDER BY 4, 2");
  st.bind(1, run_id);
  while (st.step()) {
    out.push_back(Accrual{st.i64(0), st.i64(1), st.text(2), st.f64(3), st.opt_f64(4), st.i64(5), st.f64(6),
                          st.text(7), st.opt_f64(8), st.opt_f64(9), st.text(10)});
  }
  return out;
}

double accrued_until(const std::vector<Accrual>& accruals, double t, bool dollars) {
  double total = 0;
  for (const Accrual& a : accruals) total += dollars ? a.usd(t) : a.gpu_hours(t);
  return total;
}

bool config_on_gpus(const std::string& config_json) {
  if (config_json.empty()) return false;
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (!j.is_object() || !j.contains("run") || !j["run"].is_object()) return false;
  const auto& run = j["run"];
  return run.contains("device") && run["device"].is_string() && run["device"].get<std::string>() == "cuda";
}

const char* device_hours_unit(bool on_gpus) { return on_gpus ? "GPU-h" : "CPU-h"; }

std::vector<CostLine> costs_by_run(const Database& db, double now) {
  LineSums m;
  for (const AccrualRow& r : all_accruals(db))
    add_to(m, r.run_name, r.a.start, r.a.seconds(now), r.a.devices, r.a.usd_per_hour, r.on_gpus);
  return to_lines(m);
}

std::vector<CostLine> costs_by_node(const Database& db, double now) {
  LineSums m;
  for (const AccrualRow& r : all_accruals(db))
    add_to(m, r.node_name, r.a.start, r.a.seconds(now), r.a.devices, r.a.usd_per_hour, r.on_gpus);
  return to_lines(m);
}

std::vector<CostLine> costs_by_day(const Database& db, double now) {
  LineSums m;
  for (const AccrualRow& r : all_accruals(db)) {
    // The interval's seconds laid from its start: the days then sum to costs_by_run's total even
    // when the wall clock stepped inside it.
    const double stop = r.a.start + r.a.seconds(now);
    double t = r.a.start;
    while (t < stop) {
      const double day_end = (std::floor(t / 86400.0) + 1) * 86400.0;  // UTC midnight
      const double piece = std::min(stop, day_end) - t;
      add_to(m, utc_day(t), t, piece, r.a.devices, r.a.usd_per_hour, r.on_gpus);
      t = std::min(stop, day_end);
    }
  }
  return to_lines(m);
}

double run_cost_usd(const Database& db, int64_t run_id, double now) {
  return accrued_until(run_accruals(db, run_id), now, true);
}

double run_running_seconds(const Database& db, int64_t run_id, double now) {
  return running_until(run_accruals(db, run_id), now);
}

double running_until(const std::vector<Accrual>& accruals, double t) {
  std::vector<std::pair<double, double>> spans;
  for (const Accrual& a : accruals) spans.emplace_back(a.start, a.seconds(t));
  return union_seconds(std::move(spans));
}

bool any_priced(const std::vector<Accrual>& accruals) {
  return std::any_of(accruals.begin(), accruals.end(), [](const Accrual& a) { return a.usd_per_hour > 0; });
}

BudgetStatus budget_status(const Database& db, int64_t run_id, double now) {
  const Run r = get_run(db, run_id);
  BudgetStatus b;
  b.spent_usd = run_cost_usd(db, run_id, now);
  b.cap_usd = r.budget_usd;
  b.max_hours = r.max_hours;
  if (r.max_hours) {
    b.running_hours = run_running_seconds(db, run_id, now) / 3600.0;
    if (b.running_hours >= *r.max_hours) {
      b.action = BudgetAction::kStop;
      b.note = "time limit reached: " + hours_text(b.running_hours) + " of " + hours_text(*r.max_hours);
      b.message = "run '" + r.name + "' reached its time limit (" + hours_text(b.running_hours) + " of " +
                  hours_text(*r.max_hours) + " running); stop it with a checkpoint";
      return b;
    }
  }
  if (!r.budget_usd) return b;
  b.warn_at_usd = *r.budget_usd * r.budget_warn_fraction;
  if (b.spent_usd >= *r.budget_usd) {
    b.action = BudgetAction::kStop;
    b.note = "budget reached: " + money_exact(b.spent_usd) + " of " + money_exact(*r.budget_usd);
    b.message = "run '" + r.name + "' reached its budget: " + money_exact(b.spent_usd) + " of " +
                money_exact(*r.budget_usd) + "; stop it with a checkpoint";
  } else if (b.spent_usd >= b.warn_at_usd) {
    b.action = BudgetAction::kWarn;
    b.message = "run '" + r.name + "' has spent " + money_exact(b.spent_usd) + " of its " +
                money_exact(*r.budget_usd) + " budget";
  }
  return b;
}

void delete_user_price(Database& db, int64_t price_id) {
  write_tx(db, [&] {
    Stmt st(db, "DELETE FROM pricing WHERE id = ?1 AND user_edited = 1");
    st.bind(1, price_id).run();
    if (changes_count(db) != 1)
      throw DbError(DbErrorKind::kInvalid,
                    "only entries you added or edited can be deleted; list prices stay (price id " +
                        std::to_string(price_id) + ")");
  });
}

int reset_user_prices(Database& db) {
  int reset = 0;
  write_tx(db, [&] {
    std::map<int64_t, std::string> edited;  // id -> as_of before the reset
    for (const auto& p : list_pricing(db))
      if (p.user_edited) edited[p.id] = p.as_of;
    // An impossible as_of makes the seed refresh every listed row; rows it does not know keep it.
    Stmt clear(db, "UPDATE pricing SET user_edited = 0, as_of = '\x01reset' WHERE user_edited = 1");
    clear.run();
    seed_pricing(db);
    Stmt restore(db, "UPDATE pricing SET user_edited = 1, as_of = ?2 WHERE id = ?1 AND as_of = '\x01reset'");
    for (const auto& [id, as_of] : edited) {
      restore.bind(1, id).bind(2, as_of).run();
      if (changes_count(db) == 0) ++reset;
      restore.reset();
    }
  });
  return reset;
}

}  // namespace flotilla::db

namespace flotilla::db {
void ensure_pricing_seeded(Database& db) {
  const std::string stamp = std::to_string(std::hash<std::string>{}(builtin_pricing_toml()));
  if (db.meta("pricing_seed") == stamp) return;
  write_tx(db, [&] {
    seed_pricing(db);
    db.set_meta("pricing_seed", stamp);
  });
}
}  // namespace flotilla::db
