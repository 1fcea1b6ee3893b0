// A run's price and limits (see pricing.h for the resolution order).
#include "runs/pricing.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "db/errors.h"
#include "db/run_store.h"

namespace flotilla::runs {
namespace {

std::string dollars(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.4g/h", v);
  return buf;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits `total` over the run's nodes by devices.
void split_total(RunPrice& p, double total, const std::string& why) {
  int64_t devices = 0;
  for (const auto& s : p.shares) devices += std::max<int64_t>(1, s.devices);
  p.usd_per_hour = total;
  p.source = why;
  for (auto& s : p.shares) {
    const double part = devices > 0 ? total * static_cast<double>(std::max<int64_t>(1, s.devices)) /
                                          static_cast<double>(devices)
                                    : 0;
    s.usd_per_hour = part;
    s.rate_source = why + (p.shares.size() > 1 ? ", " + std::to_string(s.devices) + " of " +
                                                     std::to_string(devices) + " devices"
                                               : std::string());
  }
}

// A catalogue entry named "provider:item" or "provider/item".
std::optional<db::PriceEntry> catalogue_entry(const db::Database& db, const std::string& name) {
  const size_t cut = name.find_first_of(":/");
  if (cut == std::string::npos || cut == 0 || cut + 1 >= name.size()) return std::nullopt;
  return db::find_price(db, name.substr(0, cut), name.substr(cut + 1));
}

double catalogue_rate(const db::PriceEntry& p, int64_t devices) {
  return p.on_demand_usd_per_hour / static_cast<double>(std::max<int64_t>(1, p.gpus)) *
         static_cast<double>(std::max<int64_t>(1, devices));
}

}  // namespace

RunPrice resolve_run_price(const db::Database& db, int64_t run_id, const RunConfig& config) {
  RunPrice p;
  p.shares = db::run_node_shares(db, run_id);
  const std::string source = config.budget.price_source;
  if (config.budget.usd_per_hour > 0) {
    std::string why = "run config: [budget] usd_per_hour = " + dollars(config.budget.usd_per_hour);
    split_total(p, config.budget.usd_per_hour, why);
    return p;
  }
  if (!source.empty()) {
    if (const auto node = db::find_node(db, source)) {
      int64_t devices = 0;
      for (const auto& s : p.shares) devices += std::max<int64_t>(1, s.devices);
      const db::Rate r = db::node_rate(db, node->id, std::max<int64_t>(1, devices));
      split_total(p, r.usd_per_hour, "run config: [budget] price_source = \"" + source + "\", " + r.source);
      return p;
    }
    if (const auto entry = catalogue_entry(db, source)) {
      int64_t devices = 0;
      for (const auto& s : p.shares) devices += std::max<int64_t>(1, s.devices);
      split_total(p, catalogue_rate(*entry, devices),
                  "run config: [budget] price_source = \"" + source + "\", " + entry->provider + "/" +
                      entry->item + " on-demand, " + std::to_string(devices) + "/" +
                      std::to_string(entry->gpus) + " GPUs");
      return p;
    }
    throw db::DbError(db::DbErrorKind::kNotFound,
                      "budget.price_source \"" + source +
                          "\" names no node and no catalogue entry: use a node name such as \"local\", or "
                          "\"provider:item\" from `flotilla pricing list`");
  }
  // What each node costs, else the catalogue's price for its GPU type.
  const std::vector<db::PriceEntry> catalogue = db::list_pricing(db);
  const std::vector<db::Node> nodes = db::list_nodes(db);
  std::string why;
  for (auto& s : p.shares) {
    db::Rate r = db::node_rate(db, s.node_id, s.devices);
    if (r.usd_per_hour <= 0) {
      std::string gpu;
      for (const auto& n : nodes)
        if (n.id == s.node_id) gpu = lower(n.gpu_type);
      const db::PriceEntry* best = nullptr;
      for (const auto& e : catalogue)
        if (!gpu.empty() && lower(e.gpu_type) == gpu &&
            (!best || catalogue_rate(e, 1) < catalogue_rate(*best, 1)))
          best = &e;
      if (best)
        r = {catalogue_rate(*best, s.devices), "catalogue " + best->provider + "/" + best->item +
                                                   " on-demand for " + std::to_string(s.devices) + " " + gpu +
                                                   " GPU(s)"};
    }
    s.usd_per_hour = r.usd_per_hour;
    s.rate_source = r.source;
    p.usd_per_hour += r.usd_per_hour;
    why += (why.empty() ? "" : "; ") + s.node_name + ": " + r.source;
  }
  if (p.usd_per_hour > 0) {
    p.source = why;
  } else {
    std::string names;
    for (const auto& s : p.shares) names += (names.empty() ? "" : ", ") + s.node_name;
    p.source = "no price for " + (names.empty() ? std::string("this run's machines") : names) +
               " (set [budget] usd_per_hour in the run config, or flotilla pricing node " +
               (p.shares.size() == 1 ? p.shares[0].node_name : std::string("NAME")) + " --usd-per-hour X)";
  }
  return p;
}

RunPrice price_run(db::Database& db, int64_t run_id, const RunConfig& config) {
  RunPrice p;
  db::write_tx(db, [&] {
    p = resolve_run_price(db, run_id, config);
    db::set_run_price(db, run_id, p.usd_per_hour, p.source, p.shares);
  });
  return p;
}

RunLimits limits_of(const RunConfig& config, std::optional<double> budget_usd) {
  RunLimits l;
  if (budget_usd)
    l.max_usd = *budget_usd;
  else if (config.budget.max_usd > 0)
    l.max_usd = config.budget.max_usd;
  l.warn_fraction =
      config.budget.warn_fraction > 0 && config.budget.warn_fraction <= 1 ? config.budget.warn_fraction : 0.8;
  if (config.budget.max_hours > 0) l.max_hours = config.budget.max_hours;
  return l;
}

void store_limits(db::Database& db, int64_t run_id, const RunLimits& limits) {
  db::write_tx(db, [&] {
    db::set_budget(db, run_id, limits.max_usd, limits.warn_fraction);
    db::set_max_hours(db, run_id, limits.max_hours);
  });
}

void check_budget_is_priced(const RunPrice& price, const RunLimits& limits, const std::string& run_name,
                            const std::vector<std::string>& node_names) {
  if (!limits.max_usd || price.priced()) return;
  std::string nodes;
  for (const auto& n : node_names) nodes += (nodes.empty() ? "" : ", ") + n;
  const std::string first = node_names.empty() ? std::string("local") : node_names.front();
  char cap[32];
  std::snprintf(cap, sizeof cap, "$%g", *limits.max_usd);
  throw db::DbError(
      db::DbErrorKind::kInvalid,
      "run " + run_name + " has a budget of " + cap + " but nothing prices it (" +
          (nodes.empty() ? std::string("this machine") : nodes) +
          " unpriced), so the cap could never be reached. Price it first: set "
          "budget.usd_per_hour (or budget.price_source) in the run config, or price the node with "
          "`flotilla pricing node " +
          first + " --usd-per-hour USD`" +
          (first == "local" ? std::string(" (in the app: Settings, this machine's price)")
                            : " (or `flotilla nodes edit " + first + " --price-per-hour USD`)"));
}

}  // namespace flotilla::runs
