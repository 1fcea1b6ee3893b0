// `flotilla costs [--json]` and `flotilla pricing list|set|node`.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "runs/figures.h"
#include "runs/savings.h"

namespace flotilla::cli {
namespace {

// "$1.23", "$0.0053": the one money format (runs/figures.h).
std::string dollars(double usd) { return runs::usd_text(usd); }

using nlohmann::json;

// A line's dollars: null (JSON) or "unpriced" when none of its time had a price, never 0.
std::optional<double> line_usd(const db::CostLine& l) { return l.priced ? std::optional<double>(l.usd) : std::nullopt; }

json lines_json(const std::vector<db::CostLine>& lines) {
  json out = json::array();
  for (const auto& l : lines)
    out.push_back({{"key", l.key},
                   {"usd", l.priced ? json(l.usd) : json(nullptr)},
                   {"device_hours", l.gpu_hours},
                   {"device_hours_unit", l.unit},
                   {"running_s", l.running_s}});
  return out;
}

// Figures as the app's Costs page writes them (runs/figures.h).
void print_lines(const char* title, const std::vector<db::CostLine>& lines) {
  std::printf("%s\n", title);
  if (lines.empty()) std::printf("  (none)\n");
  for (const auto& l : lines)
    std::printf("  %-28s %12s  %16s  running time %s\n", l.key.c_str(), runs::usd_text(line_usd(l)).c_str(),
                runs::device_hours_text(l.gpu_hours, l.unit).c_str(), runs::clock_text(l.running_s).c_str());
}

int pricing_list(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  if (!args.positionals().empty()) throw UsageError("pricing list takes no positional arguments");
  const db::Database db = open_store(ctx);
  const auto prices = db::list_pricing(db);
  if (as_json) {
    json out = json::array();
    for (const auto& p : prices)
      out.push_back({{"provider", p.provider},
                     {"item", p.item},
                     {"gpu_type", p.gpu_type},
                     {"gpus", p.gpus},
                     {"on_demand_usd_per_hour", p.on_demand_usd_per_hour},
                     {"spot_usd_per_hour", p.spot_usd_per_hour ? json(*p.spot_usd_per_hour) : json(nullptr)},
                     {"as_of", p.as_of},
                     {"source", p.source},
                     {"user_edited", p.user_edited}});
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-8s %-20s %-16s %4s %10s %10s  %-8s %s\n", "PROVIDER", "ITEM", "GPU", "GPUS", "ON-DEMAND",
              "SPOT", "AS OF", "SOURCE");
  for (const auto& p : prices) {
    const std::string spot = p.spot_usd_per_hour ? dollars(*p.spot_usd_per_hour) : "-";
    std::printf("%-8s %-20s %-16s %4lld %10s %10s  %-8s %s%s\n", p.provider.c_str(), p.item.c_str(),
                p.gpu_type.c_str(), static_cast<long long>(p.gpus), dollars(p.on_demand_usd_per_hour).c_str(),
                spot.c_str(), p.as_of.c_str(), p.source.c_str(), p.user_edited ? " (edited)" : "");
  }
  return kExitOk;
}

int pricing_set(const Context& ctx, ArgReader& args) {
  const auto on_demand = args.number("--on-demand");
  const auto spot = args.number("--spot");
  const auto gpus = args.number("--gpus");
  const auto gpu_type = args.value("--gpu-type");
  const auto pos = args.positionals();
  if (pos.size() != 2)
    throw UsageError("pricing set needs PROVIDER ITEM (e.g. pricing set aws p5.48xlarge --spot 40)");
  db::Database db = open_store(ctx);
  db::PriceEntry p;
  if (auto existing = db::find_price(db, pos[0], pos[1])) {
    p = *existing;
  } else {
    if (!on_demand) throw UsageError("pricing set: a new entry needs --on-demand USD_PER_HOUR");
    p.provider = pos[0];
    p.item = pos[1];
  }
  if (on_demand) p.on_demand_usd_per_hour = *on_demand;
  if (spot) p.spot_usd_per_hour = *spot;
  if (gpus) p.gpus = static_cast<int64_t>(*gpus);
  if (gpu_type) p.gpu_type = *gpu_type;
  p.source = "user";
  db::set_price(db, p);
  std::printf("%s/%s: on-demand $%.4f/h, spot %s, %lld GPU(s)\n", p.provider.c_str(), p.item.c_str(),
              p.on_demand_usd_per_hour,
              p.spot_usd_per_hour ? (dollars(*p.spot_usd_per_hour) + "/h").c_str() : "-",
              static_cast<long long>(p.gpus));
  return kExitOk;
}

// pricing node NAME (--catalog PROVIDER/ITEM [--spot] | --usd-per-hour X | --watts W --tariff T)
int pricing_node(const Context& ctx, ArgReader& args) {
  const auto catalog = args.value("--catalog");
  const bool spot = args.flag("--spot");
  const auto flat = args.number("--usd-per-hour");
  const auto watts = args.number("--watts");
  const auto tariff = args.number("--tariff");
  const auto gpus = args.number("--gpus");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("pricing node needs the node's NAME (the local machine is 'local')");
  const int choices = (catalog ? 1 : 0) + (flat ? 1 : 0) + ((watts || tariff) ? 1 : 0);
  if (choices != 1 || (watts.has_value() != tariff.has_value()))
    throw UsageError(
        "pricing node: give one of --catalog PROVIDER/ITEM [--spot], --usd-per-hour X, or "
        "--watts W --tariff USD_PER_KWH");
  db::Database db = open_store(ctx);
  const int64_t node = db::ensure_node(db, pos[0], pos[0] == "local" ? "local" : "ssh");
  if (gpus) {
    db::set_node_gpu_count(db, node, static_cast<int64_t>(*gpus));
  }
  db::NodePricing np;
  if (catalog) {
    const auto slash = catalog->find('/');
    if (slash == std::string::npos) throw UsageError("pricing node: --catalog takes PROVIDER/ITEM");
    const auto p = db::find_price(db, catalog->substr(0, slash), catalog->substr(slash + 1));
    if (!p)
      throw db::DbError(db::DbErrorKind::kNotFound,
                        "no price " + *catalog + " in the catalogue (flotilla pricing list)");
    np.pricing_id = p->id;
    np.spot = spot;
  }
  np.usd_per_hour = flat;
  np.power_w = watts;
  np.tariff_usd_per_kwh = tariff;
  db::set_node_pricing(db, node, np);
  const db::Rate r = db::node_rate(db, node, gpus ? static_cast<int64_t>(*gpus) : 1);
  std::printf("node %s: $%.4f/h (%s); runs started from now on accrue at this rate\n", pos[0].c_str(),
              r.usd_per_hour, r.source.c_str());
  return kExitOk;
}

// `costs --savings`: runs/savings.h's table and summary, cell for cell as the Costs page shows them.
int print_savings(const db::Database& db, bool as_json) {
  const runs::Savings s = runs::scheduler_savings(db);
  if (as_json) {
    std::printf("%s\n", runs::savings_json(s).c_str());
    return kExitOk;
  }
  if (!s.runs.empty()) {
    std::string header;
    for (const std::string& c : runs::savings_columns()) header += c + "\t";
    header.pop_back();
    std::printf("%s\n", header.c_str());
    for (const runs::RunSavings& r : s.runs) {
      std::string line;
      for (const std::string& c : runs::savings_cells(r)) line += c + "\t";
      line.pop_back();
      std::printf("%s\n", line.c_str());
    }
  }
  std::printf("%s\n", runs::savings_summary(s).c_str());
  return kExitOk;
}

}  // namespace

int cmd_costs(const Context& ctx) {
  ArgReader args(ctx.args, "costs");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla costs [--json]\n\nAccrued cost, device-hours (GPU-h for GPU runs, CPU-h for CPU runs) and\n"
        "running time by run, by node and by UTC day. A line with no price reads \"unpriced\" (null in JSON).\n"
        "Idle: what each autostop node cost while powered with no run, and what autostop did.\n\n"
        "       flotilla costs --savings [--json]\n\n"
        "What the scheduler saved on the runs it started, against the most expensive place\n"
        "that fitted and the first free place, and what preemptions and idle machines cost\n"
        "(the Costs page's Scheduler savings, the same figures).\n");
    return kExitOk;
  }
  const bool as_json = args.flag("--json");
  const bool savings = args.flag("--savings");
  if (!args.positionals().empty()) throw UsageError("costs takes no positional arguments");
  const db::Database db = open_store(ctx);
  if (savings) return print_savings(db, as_json);
  const auto by_run = db::costs_by_run(db), by_node = db::costs_by_node(db), by_day = db::costs_by_day(db);
  double total = 0;
  for (const auto& l : by_run) total += l.usd;
  const auto idle = db::idle_costs_by_node(db);
  const auto power = db::power_events(db);
  if (as_json) {
    json j{{"total_usd", total},
           {"by_run", lines_json(by_run)},
           {"by_node", lines_json(by_node)},
           {"by_day", lines_json(by_day)}};
    json idle_j = json::array(), power_j = json::array();
    for (const auto& l : idle)
      idle_j.push_back({{"node", l.key}, {"usd", l.priced ? json(l.usd) : json(nullptr)}, {"idle_s", l.running_s}});
    for (const auto& e : power)
      power_j.push_back({{"time", e.time}, {"node", e.node}, {"level", e.level}, {"message", e.message}});
    j["idle_by_node"] = idle_j;
    j["idle_total_usd"] = db::idle_cost_usd(db);
    j["autostop"] = power_j;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  print_lines("by run", by_run);
  print_lines("by node", by_node);
  print_lines("by day (UTC)", by_day);
  if (!idle.empty() || !power.empty()) {
    std::printf("idle (powered, no run) by node\n");
    for (const auto& l : idle)
      std::printf("  %-28s %12s  idle %s\n", l.key.c_str(), runs::usd_text(line_usd(l)).c_str(),
                  runs::clock_text(l.running_s).c_str());
    for (const auto& e : power) std::printf("  %s  %s\n", format_time(e.time).c_str(), e.message.c_str());
    std::printf("idle total %s (not in the total below: no run was charged it)\n",
                runs::usd_text(db::idle_cost_usd(db)).c_str());
  }
  long long unpriced = 0;
  for (const auto& l : by_run) unpriced += l.priced ? 0 : 1;
  std::printf("total %s%s\n", runs::usd_text(total).c_str(),
              unpriced == 0   ? ""
              : unpriced == 1 ? " (1 unpriced run not counted)"
                              : (" (" + std::to_string(unpriced) + " unpriced runs not counted)").c_str());
  return kExitOk;
}

int cmd_pricing(const Context& ctx) {
  if (ctx.args.empty() || ctx.args[0] == "--help") {
    std::printf(
        "Usage: flotilla pricing list [--json]\n"
        "       flotilla pricing set PROVIDER ITEM [--on-demand USD] [--spot USD] [--gpus N] [--gpu-type T]\n"
        "       flotilla pricing node NAME (--catalog PROVIDER/ITEM [--spot] | --usd-per-hour USD |\n"
        "                                   --watts W --tariff USD_PER_KWH) [--gpus N]\n");
    return ctx.args.empty() ? kExitUsage : kExitOk;
  }
  const std::string sub = ctx.args[0];
  ArgReader args(std::vector<std::string>(ctx.args.begin() + 1, ctx.args.end()), "pricing " + sub);
  if (sub == "list") return pricing_list(ctx, args);
  if (sub == "set") return pricing_set(ctx, args);
  if (sub == "node") return pricing_node(ctx, args);
  throw UsageError("pricing: unknown subcommand '" + sub + "' (list, set, node)");
}

}  // namespace flotilla::cli
