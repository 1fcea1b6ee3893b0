// Estimate and choice (see queue_place.h; the rules and formulas: docs/scheduling.md "Placement").
//
// Decision: the layout on a place keeps the config's tp and pp (they shape the model's split and
// its checkpoint) and never more data-parallel ranks than the config asks; fewer only when the
// config fixes train.global_batch_tokens and it divides evenly, so every optimizer step trains
// the same tokens and the loss curve stays one curve. Of the layouts a place can hold, the one
// on all its devices (waiting for busy ones) and the one on its free devices now are both
// weighed, and the earlier finish is kept.
//
// Decision: the planner predicts each place's speed from its device profile (the GPU data sheet x
// kNominalEfficiency, a CPU core's nominal peak x kDefaultCpuEfficiency); when earlier runs of the
// same model shape ran on that place, the prediction is multiplied by the median of their measured
// / planned speed (each replanned on its own layout), so a place measured slow predicts slow.
#include <algorithm>
#include <cmath>
#include <map>

#include "db/database.h"
#include "engine/config/config_validate.h"
#include "engine/plan/calibration.h"
#include "runs/queue_place.h"

namespace flotilla::runs {
namespace {

constexpr int kCalibrationRuns = 5;  // newest same-shape runs a place's factor is the median of

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / double(1ull << 30));
  return buf;
}

std::string tok_s(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f tok/s", v);
  return buf;
}

const DeviceProfile& this_cpu_core() {
  static const DeviceProfile core = cpu_profile_nominal(1);
  return core;
}

// The device profile of one rank of `ranks` on the place, and whether it is only assumed.
DeviceProfile rank_profile(const PlaceOffer& o, bool gpu, const std::string& dtype, int ranks,
                           std::string* assumed) {
  DeviceProfile p;
  if (gpu) {
    std::string name = gpu_profile_for(o.gpu_type);
    if (name.empty()) {
      name = "l4";
      *assumed =
          "GPU '" + (o.gpu_type.empty() ? std::string("unknown") : o.gpu_type) + "' assumed as fast as an L4";
    }
    find_gpu_profile(name, dtype, &p);
    p.mem_bytes = o.gpu_mem_bytes;  // 0: unknown, not checked
    return p;
  }
  const double core = o.cpu_core_flops > 0 ? o.cpu_core_flops : this_cpu_core().flops_per_s;
  if (!(o.cpu_core_flops > 0)) *assumed = "CPU cores assumed as fast as this machine's";
  const int threads = std::max(1, o.cpu_ranks / std::max(1, ranks));
  p = this_cpu_core();
  p.name = "cpu";
  p.flops_per_s = core * threads;
  p.mem_bytes = o.host_mem_bytes;
  p.mem_shared_by_ranks = true;
  return p;
}

Plan plan_on(const RunConfig& cfg, const PlaceOffer& o, bool gpu, std::string* assumed) {
  const int ranks = std::max(1, cfg.parallel.dp * cfg.parallel.tp * cfg.parallel.pp);
  PlanOptions opt;
  opt.efficiency = gpu ? kNominalEfficiency : kDefaultCpuEfficiency;
  DeviceProfile p = rank_profile(o, gpu, cfg.train.dtype, ranks, assumed);
  if (o.link_bytes_per_s > 0) {  // a place of several nodes with its links measured
    p.link_bytes_per_s =
        p.link_bytes_per_s > 0 ? std::min(p.link_bytes_per_s, o.link_bytes_per_s) : o.link_bytes_per_s;
    p.link_latency_s += o.link_latency_s;
  }
  return make_plan(cfg, p, opt);
}

// dp values the config allows, the config's own first.
std::vector<int> dp_choices(const RunConfig& cfg) {
  std::vector<int> out{std::max(1, cfg.parallel.dp)};
  const int64_t gbt = cfg.train.global_batch_tokens;
  if (gbt <= 0) return out;
  const int64_t per = int64_t{cfg.train.micro_batch} * cfg.train.seq_len;
  for (int d = cfg.parallel.dp - 1; d >= 1; --d) {
    if (per <= 0 || gbt % (per * d) != 0) continue;
    const int64_t accum = gbt / (per * d);
    if (cfg.parallel.pp > 1 && accum % std::max(1, cfg.parallel.micro_batches) != 0) continue;
    out.push_back(d);
  }
  return out;
}

// Seconds until `need` devices are free: the busy runs' ends in order; -1 when one that must end
// first has no known end.
double wait_for(int free, int need, std::vector<BusyRun> busy) {
  if (free >= need) return 0;
  std::sort(busy.begin(), busy.end(), [](const BusyRun& a, const BusyRun& b) {
    const double x = a.seconds_left < 0 ? 1e300 : a.seconds_left,
                 y = b.seconds_left < 0 ? 1e300 : b.seconds_left;
    return x < y;
  });
  for (const auto& b : busy) {
    if (b.seconds_left < 0) return -1;
    free += b.devices;
    if (free >= need) return b.seconds_left;
  }
  return -1;
}

// Several stored nodes as one place: the layout's ranks spread evenly, so each node gives what the
// smallest gives; the price is each node's for its share.
PlaceOffer combine(const PlaceKey& key, const std::vector<PlaceOffer>& offers, std::string* missing) {
  PlaceOffer c;
  c.key = key;
  c.label = place_key_text(key);
  const int n = static_cast<int>(key.nodes.size());
  int gpus = 1 << 30, gpus_free = 1 << 30, cpus = 1 << 30, cpus_free = 1 << 30;
  c.gpu_price.priced = c.cpu_price.priced = true;
  for (const auto& name : key.nodes) {
    const PlaceOffer* o = nullptr;
    for (const auto& x : offers)
      if (x.key.kind == PlaceKeyKind::kNode && x.key.nodes[0] == name) o = &x;
    if (!o) {
      *missing = "node " + name + " is not stored";
      return c;
    }
    gpus = std::min(gpus, o->gpus);
    gpus_free = std::min(gpus_free, o->gpus - o->gpus_busy);
    cpus = std::min(cpus, o->cpu_ranks);
    cpus_free = std::min(cpus_free, o->cpu_ranks - o->cpus_busy);
    c.gpu_type = c.gpu_type.empty() ? o->gpu_type : c.gpu_type;
    c.gpu_mem_bytes = c.gpu_mem_bytes ? std::min(c.gpu_mem_bytes, o->gpu_mem_bytes) : o->gpu_mem_bytes;
    c.host_mem_bytes = c.host_mem_bytes ? std::min(c.host_mem_bytes, o->host_mem_bytes) : o->host_mem_bytes;
    c.cpu_core_flops = o->cpu_core_flops;
    for (PriceRule* r : {&c.gpu_price, &c.cpu_price}) {
      const PriceRule& from = r == &c.gpu_price ? o->gpu_price : o->cpu_price;
      r->priced = r->priced && from.priced;
      r->usd_fixed_per_hour += from.usd_fixed_per_hour;
      r->usd_per_device_hour += from.usd_per_device_hour / n;
      r->source += (r->source.empty() ? "" : "; ") + name + ": " + from.source;
    }
    c.busy_gpu_runs.insert(c.busy_gpu_runs.end(), o->busy_gpu_runs.begin(), o->busy_gpu_runs.end());
    c.busy_cpu_runs.insert(c.busy_cpu_runs.end(), o->busy_cpu_runs.begin(), o->busy_cpu_runs.end());
    if (o->power_state != "on") {
      c.power_state = o->power_state;
      c.wake_s = std::max(c.wake_s, o->wake_s);
    }
  }
  // The slowest measured link between two of its nodes (none when a pair was never measured).
  double slowest = 0, latency = 0;
  bool all = n > 1;
  for (const auto& from : key.nodes)
    for (const auto& to : key.nodes) {
      if (from == to || !all) continue;
      const PlaceOffer::Link* l = nullptr;
      for (const auto& x : offers)
        if (x.key.kind == PlaceKeyKind::kNode && x.key.nodes[0] == from)
          for (const auto& y : x.links)
            if (y.to == to && y.bytes_per_s > 0) l = &y;
      if (l == nullptr) {
        all = false;
      } else if (slowest == 0 || l->bytes_per_s < slowest) {
        slowest = l->bytes_per_s;
        latency = l->latency_s;
      }
    }
  if (all) {
    c.link_bytes_per_s = slowest;
    c.link_latency_s = 2.0 * (n - 1) * latency;
  }
  c.gpus = gpus * n;
  c.gpus_busy = c.gpus - gpus_free * n;
  c.cpu_ranks = cpus * n;
  c.cpus_busy = c.cpu_ranks - cpus_free * n;
  return c;
}

struct Ctx {
  const RunConfig& cfg;
  bool gpu;
  int64_t steps;
  int64_t tokens_per_step;
  const SpeedHistory& history;
};

// The calibration factor of the place for this model shape, with the words that say so: the
// median measured/planned ratio of the newest same-shape runs there; for a place never measured
// with this shape, the ratio measured on this machine (the planner already takes a node's cores as
// fast as this machine's; the ratio carries how far this model runs from the planner there), said
// as such; else the planner alone. Another node's ratio is not carried over: it may be that node's.
double calibration(const Ctx& x, const PlaceOffer& o, std::string* basis) {
  std::vector<double> ratios, measured, other_ratios;
  for (const SpeedSample& s : x.history.samples) {
    if (static_cast<int>(ratios.size()) >= kCalibrationRuns) break;
    PlaceKey where;
    try {
      where = parse_place_key(s.place);
    } catch (const std::exception&) {
      continue;
    }
    if (!same_model_shape(s.config, x.cfg)) continue;
    const bool here = place_allows(where, o.key);
    if (!here &&
        (where.kind != PlaceKeyKind::kLocal || static_cast<int>(other_ratios.size()) >= kCalibrationRuns))
      continue;
    std::string ignored;
    const Plan planned = plan_on(s.config, o, x.gpu, &ignored);
    if (!(planned.tokens_per_s > 0)) continue;
    if (!here) {
      other_ratios.push_back(s.tokens_per_s / planned.tokens_per_s);
      continue;
    }
    ratios.push_back(s.tokens_per_s / planned.tokens_per_s);
    measured.push_back(s.tokens_per_s);
  }
  char buf[200];
  if (ratios.empty() && !other_ratios.empty()) {
    const double f = median(other_ratios);
    std::snprintf(buf, sizeof buf,
                  "never measured here: planner x %.2f, as %zu run%s of this shape measured on this machine",
                  f, other_ratios.size(), other_ratios.size() == 1 ? "" : "s");
    *basis = buf;
    return f;
  }
  if (ratios.empty()) {
    *basis = x.gpu ? "planner, uncalibrated (GPU data sheet x 50%)"
                   : "planner, uncalibrated (CPU nominal peak x 45%)";
    return 1.0;
  }
  const double f = median(ratios);
  std::snprintf(buf, sizeof buf, "measured: %zu run%s, median %s (planner x %.2f)", ratios.size(),
                ratios.size() == 1 ? "" : "s", tok_s(median(measured)).c_str(), f);
  *basis = buf;
  return f;
}

PlaceEstimate estimate(const Ctx& x, const PlaceOffer& o, const EntryNeeds& needs, double now) {
  PlaceEstimate e;
  e.key = o.key.key();
  e.label = o.label.empty() ? place_key_text(o.key) : o.label;
  e.gpus = x.gpu;
  const int group = std::max(1, x.cfg.parallel.tp * x.cfg.parallel.pp);
  const int total = x.gpu ? o.gpus : o.cpu_ranks;
  const int free = std::max(0, total - (x.gpu ? o.gpus_busy : o.cpus_busy));
  const char* unit = x.gpu ? "GPU" : "CPU rank";
  const auto devices = [&](int n) { return std::to_string(n) + " " + unit + (n == 1 ? "" : "s"); };
  if (x.gpu && total == 0) {
    e.why_not = "no GPUs";
    return e;
  }
  if (total < group) {
    e.why_not = "has " + devices(total) + ", the layout needs tp x pp = " + std::to_string(group);
    return e;
  }
  // Candidate layouts: the largest dp on all devices, and the largest on the free ones now.
  std::string memory_why, assumed;
  struct Cand {
    int dp = 0;
    Plan plan;
  };
  std::vector<Cand> cands;
  for (const int cap : {total, free}) {
    for (const int d : dp_choices(x.cfg)) {
      if (d * group > cap) continue;
      RunConfig c = x.cfg;
      c.parallel.dp = d;
      Plan p = plan_on(c, o, x.gpu, &assumed);
      if (p.device.mem_bytes > 0 && !p.fits) {
        memory_why = "needs " + gib(p.needed_bytes() + p.margin_bytes()) + " per " +
                     (x.gpu ? "GPU" : "machine") + " at dp=" + std::to_string(d) + ", has " +
                     gib(p.device.mem_bytes);
        continue;
      }
      if (std::none_of(cands.begin(), cands.end(), [&](const Cand& k) { return k.dp == d; }))
        cands.push_back({d, std::move(p)});
      break;
    }
  }
  if (cands.empty()) {
    e.why_not = !memory_why.empty() ? memory_why
                                    : "has " + devices(total) + ", the layout needs " +
                                          devices(dp_choices(x.cfg).back() * group);
    return e;
  }
  std::string basis;
  const double factor = calibration(x, o, &basis);
  if (!assumed.empty()) basis += "; " + assumed;
  if (o.gpu_mem_bytes == 0 && x.gpu) basis += "; GPU memory not known, not checked";
  const PriceRule& price = x.gpu ? o.gpu_price : o.cpu_price;
  bool first = true;
  for (const Cand& c : cands) {
    PlaceEstimate k = e;
    k.fits = true;
    k.devices = c.dp * group;
    k.layout.dp = c.dp;
    k.layout.tp = x.cfg.parallel.tp;
    k.layout.pp = x.cfg.parallel.pp;
    k.layout_text = k.layout.text();
    k.tokens_per_s = c.plan.tokens_per_s * factor;
    k.basis = basis;
    const double busy_wait = wait_for(free, k.devices, x.gpu ? o.busy_gpu_runs : o.busy_cpu_runs);
    k.wait_known = busy_wait >= 0;
    k.wait_s = std::max(std::max(0.0, busy_wait), o.power_state != "on" ? o.wake_s : 0.0) +
               o.jobs_ahead * o.seconds_per_job_ahead;
    const double run_s = k.tokens_per_s > 0 ? static_cast<double>(x.steps) *
                                                  static_cast<double>(x.tokens_per_step) / k.tokens_per_s
                                            : INFINITY;
    k.seconds = k.wait_s + run_s;
    if (x.cfg.budget.usd_per_hour > 0) {  // the config prices the whole run's hardware (pricing.h)
      k.priced = true;
      k.usd_per_hour = x.cfg.budget.usd_per_hour;
    } else {
      k.priced = price.priced;
      k.usd_per_hour = price.priced ? price.usd_fixed_per_hour + price.usd_per_device_hour * k.devices : 0;
    }
    k.usd = k.usd_per_hour * run_s / 3600.0;
    k.meets_deadline = !needs.deadline || (k.wait_known && now + k.seconds <= *needs.deadline);
    k.within_budget = !needs.max_usd || (k.priced && k.usd <= *needs.max_usd);
    // The earlier finish of the two layouts (a known wait beats an unknown one).
    if (first || (k.wait_known && (!e.wait_known || k.seconds < e.seconds))) e = k;
    first = false;
  }
  return e;
}

std::string money(const PlaceEstimate& p) {
  if (p.priced) return usd_words(p.usd);
  return p.key == "local" ? "$0 (no price set)" : "unpriced";
}

// Cheaper first: a priced place (or this machine, $0 without a price) before an unpriced one, then
// dollars, then the earlier finish.
bool better(const PlaceEstimate& a, const PlaceEstimate& b) {
  const bool ua = !a.priced && a.key != "local", ub = !b.priced && b.key != "local";
  if (ua != ub) return ub;
  if (a.usd != b.usd) return a.usd < b.usd;
  return a.seconds < b.seconds;
}

std::string waiting_words(const PlaceEstimate& p, const PlaceOffer& o) {
  std::string s;
  if (o.jobs_ahead > 0) s = std::to_string(o.jobs_ahead) + " job" + (o.jobs_ahead == 1 ? "" : "s") + " ahead";
  if (o.power_state != "on")
    s += std::string(s.empty() ? "" : ", ") + (o.power_state == "stopped"    ? "powered off"
                                               : o.power_state == "starting" ? "starting up"
                                                                             : "stopping");
  if (!p.wait_known) s += std::string(s.empty() ? "" : ", ") + "busy until an unknown time";
  return s;
}

}  // namespace

Decision choose_place(const RunConfig& config, const EntryNeeds& needs, const std::vector<PlaceOffer>& offers,
                      const SpeedHistory& history) {
  Decision d;
  const double now = needs.now > 0 ? needs.now : db::now_seconds();
  d.time = now;
  const Ctx x{config, config.run.device == "cuda",
              needs.steps_to_go >= 0 ? needs.steps_to_go : config.train.steps,
              needs.tokens_per_step > 0 ? needs.tokens_per_step : tokens_per_step(config), history};

  std::vector<PlaceKey> allowed;
  for (const auto& a : needs.allowed) allowed.push_back(parse_place_key(a));
  std::vector<PlaceOffer> weigh;
  for (const auto& o : offers)
    if (allowed.empty() || std::any_of(allowed.begin(), allowed.end(),
                                       [&](const PlaceKey& a) { return place_allows(a, o.key); }))
      weigh.push_back(o);
  std::vector<std::string> missing_words;
  for (const auto& a : allowed) {
    if (a.kind == PlaceKeyKind::kNodes) {
      std::string missing;
      PlaceOffer c = combine(a, offers, &missing);
      if (missing.empty())
        weigh.push_back(std::move(c));
      else
        missing_words.push_back(place_key_text(a) + ": " + missing);
    } else if (std::none_of(offers.begin(), offers.end(),
                            [&](const PlaceOffer& o) { return place_allows(a, o.key); })) {
      missing_words.push_back(place_key_text(a) + ": not in this workspace");
    }
  }

  std::map<std::string, const PlaceOffer*> offer_of;
  for (const auto& o : weigh) {
    d.places.push_back(estimate(x, o, needs, now));
    offer_of[d.places.back().key] = &o;
  }
  const auto qualifies = [](const PlaceEstimate& p) {
    return p.fits && p.wait_known && std::isfinite(p.seconds) && p.meets_deadline && p.within_budget;
  };
  const PlaceEstimate* best = nullptr;
  for (const auto& p : d.places)
    if (qualifies(p) && (!best || better(p, *best))) best = &p;

  const std::string deadline = needs.deadline ? time_words(*needs.deadline) : "";
  for (auto& p : d.places) {
    const PlaceOffer& o = *offer_of[p.key];
    if (!p.fits) {
      p.clause = p.label + ": does not fit (" + p.why_not + ")";
      continue;
    }
    const std::string waits = waiting_words(p, o);
    const std::string head = p.label + ": " + (waits.empty() ? "" : waits + ", ");
    if (!p.wait_known)
      p.clause = head + money(p) + " once free";
    else if (&p == best)
      p.clause = "on " + head + money(p) + " and " + duration_words(p.seconds) + " to finish";
    else if (!p.meets_deadline)
      p.clause =
          head + money(p) + " but " + duration_words(p.seconds) + ", past the deadline (" + deadline + ")";
    else if (!p.within_budget)
      p.clause = head + money(p) +
                 (p.priced ? ", over the " + usd_words(*needs.max_usd) + " budget"
                           : ", cannot be held to the " + usd_words(*needs.max_usd) + " budget");
    else
      p.clause = head + money(p) + " and " + duration_words(p.seconds);
  }
  std::string clauses;
  if (best) clauses = best->clause;
  for (const auto& p : d.places)
    if (&p != best) clauses += (clauses.empty() ? "" : "; ") + p.clause;
  for (const auto& m : missing_words) clauses += (clauses.empty() ? "" : "; ") + m;

  if (best) {
    d.chosen = best->key;
    d.layout = best->layout;
    const PlaceOffer& o = *offer_of[best->key];
    for (const auto& n : o.key.nodes)
      for (const auto& single : offers)
        if (single.key.kind == PlaceKeyKind::kNode && single.key.nodes[0] == n && single.power_state != "on")
          d.wake_nodes.push_back(n);
    // A cluster's queue is Slurm's: the job is submitted now and waits there (its jobs ahead count
    // in its finish time). A node or this machine waits here, for busy devices or a wake.
    d.waits = best->wait_s > 0 && o.key.kind != PlaceKeyKind::kCluster;
    d.start = !d.waits;
    if (d.waits) {
      const int busy = x.gpu ? o.gpus_busy : o.cpus_busy, total = x.gpu ? o.gpus : o.cpu_ranks;
      const int short_by = std::max(0, best->devices - (total - busy));
      std::string why;
      if (short_by > 0)
        why = "waits for " + std::to_string(short_by) + (x.gpu ? " GPU" : " CPU rank") +
              (short_by == 1 ? "" : "s") + " on " + best->label + " (free in ~" +
              duration_words(best->wait_s) + ")";
      else
        why = "waits for " + best->label + " (" + waiting_words(*best, o) + ", ~" +
              duration_words(best->wait_s) + ")";
      d.words = why + ": " + clauses;
    } else {
      d.words = clauses;
    }
    return d;
  }
  bool any_fits = false, any_in_time = false;
  for (const auto& p : d.places) {
    any_fits = any_fits || (p.fits && p.wait_known);
    any_in_time = any_in_time || (p.fits && p.wait_known && p.meets_deadline);
  }
  std::string lead;
  if (!any_fits)
    lead = "no place fits";
  else if (!any_in_time)
    lead = "no place meets the deadline (" + deadline + ")";
  else if (needs.max_usd)
    lead = "no place finishes within the " + usd_words(*needs.max_usd) + " budget";
  else
    lead = "no place fits";
  d.words = lead + (clauses.empty() ? "" : ": " + clauses);
  return d;
}

}  // namespace flotilla::runs
