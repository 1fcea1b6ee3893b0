// Calibration math: comparable runs, the efficiency they imply, the calibrated plan, its check on
// the last comparable run, and the speed lines every surface prints.
//
// Decision: efficiency is learned as the median of the newest runs' implied efficiencies, not a
// fit over all of them: one run slowed by a busy machine moves a median of five runs little, and an
// engine that got faster is followed within a few runs. The communication term is priced over the
// link figures before the efficiency is solved for, so a slow link is not mistaken for slow kernels.
#include "engine/plan/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/config/config_validate.h"

namespace flotilla {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "0.66 s", "6.5 ms", "120 us": three significant figures, the unit that reads naturally.
std::string seconds_text(double s) {
  if (s <= 0) return "0 s";
  if (s < 1e-3) return fmt("%.3g us", s * 1e6);
  if (s < 0.1) return fmt("%.3g ms", s * 1e3);
  return fmt("%.3g s", s);
}

std::string commas(double v) {
  std::string s = std::to_string(static_cast<long long>(std::llround(v))), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0 && s[i - 1] != '-') out += ',';
    out += s[i];
  }
  return out;
}

bool same_dims(const ModelDims& a, const ModelDims& b) {
  return a.arch == b.arch && a.n_layer == b.n_layer && a.n_embd == b.n_embd && a.n_head == b.n_head &&
         a.kv_heads() == b.kv_heads() && a.hd() == b.hd() && a.ffn() == b.ffn() &&
         a.vocab_size == b.vocab_size && a.padded_vocab == b.padded_vocab && a.tied() == b.tied() &&
         a.qk_norm == b.qk_norm && a.has_qkv_bias() == b.has_qkv_bias();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<RunObservation> newest_first(std::vector<RunObservation> v) {
  std::stable_sort(v.begin(), v.end(),
                   [](const RunObservation& a, const RunObservation& b) { return a.when > b.when; });
  return v;
}

double default_efficiency(const RunConfig& config, const Calibration& cal) {
  return cal.peak_flops_per_s > 0 && config.run.device == "cpu" ? kDefaultCpuEfficiency : kNominalEfficiency;
}

// Same device, dtype, threads and layout; any model (a run of another model on this machine).
bool same_layout(const RunConfig& a, const RunConfig& b) {
  const auto& p = a.parallel;
  const auto& q = b.parallel;
  return a.train.dtype == b.train.dtype && a.run.device == b.run.device && a.run.threads == b.run.threads &&
         p.dp == q.dp && p.tp == q.tp && p.pp == q.pp && p.zero == q.zero &&
         a.train.recompute == b.train.recompute &&
         (p.pp == 1 || (p.schedule == q.schedule && p.micro_batches == q.micro_batches));
}

}  // namespace

double arch_efficiency(const std::string& arch) { return arch == "llama" ? 0.86 : 1.0; }

bool comparable_runs(const RunConfig& a, const RunConfig& b) {
  const auto& p = a.parallel;
  const auto& q = b.parallel;
  return same_dims(dims_from_config(a.model), dims_from_config(b.model)) && a.train.dtype == b.train.dtype &&
         a.run.device == b.run.device && a.run.threads == b.run.threads && p.dp == q.dp && p.tp == q.tp &&
         p.pp == q.pp && p.zero == q.zero && a.train.recompute == b.train.recompute &&
         (p.pp == 1 || (p.schedule == q.schedule && p.micro_batches == q.micro_batches));
}

double implied_efficiency(const RunConfig& run, double measured_step_s, const DeviceProfile& device) {
  if (!(measured_step_s > 0) || !(device.flops_per_s > 0)) return 0;
  PlanOptions unit;
  unit.efficiency = 1.0;
  const Plan p = make_plan(run, device, unit);
  const double at_full_peak = p.compute_s + p.bubble_s;
  // A run faster than its communication alone allows (overlap): price the compute over what is left
  // of a fifth of the step at least, so one such run cannot claim an efficiency near infinity.
  const double compute_measured = std::max(measured_step_s - p.comm_s, 0.2 * measured_step_s);
  return std::min(1.0, at_full_peak / compute_measured);
}

double learned_efficiency(const RunConfig& config, const std::vector<RunObservation>& observations,
                          const DeviceProfile& device, int* used) {
  std::vector<RunObservation> pool;
  for (const auto& o : newest_first(observations))
    if (o.step_s > 0 && o.config.train.micro_batch == config.train.micro_batch &&
        o.config.train.seq_len == config.train.seq_len)
      pool.push_back(o);
  if (pool.empty())
    for (const auto& o : newest_first(observations))
      if (o.step_s > 0) pool.push_back(o);
  if (pool.size() > static_cast<size_t>(kLearnFromRuns)) pool.resize(kLearnFromRuns);
  std::vector<double> eff;
  for (const auto& o : pool) {
    const double e = implied_efficiency(o.config, o.step_s, device);
    if (e > 0) eff.push_back(e);
  }
  if (used) *used = static_cast<int>(eff.size());
  return median(eff);
}

DeviceProfile calibrated_device(const DeviceProfile& nominal, const Calibration& cal) {
  DeviceProfile d = nominal;
  if (cal.peak_flops_per_s > 0) {
    d.flops_per_s = cal.peak_flops_per_s;
    d.name = cal.peak_source.empty() ? "measured peak" : cal.peak_source;
  }
  if (cal.link.bytes_per_s > 0) {
    d.link_bytes_per_s = cal.link.bytes_per_s;
    d.link_latency_s = cal.link.latency_s;
  }
  return d;
}

CalibratedPlan plan_calibrated(const RunConfig& config, const DeviceProfile& nominal,
                               const Calibration& cal) {
  CalibratedPlan cp;
  const DeviceProfile device = calibrated_device(nominal, cal);
  cp.calibrated = cal.peak_flops_per_s > 0;
  cp.load_average = cal.load_average;
  cp.cpus = cal.cpus;

  std::vector<RunObservation> comparable;
  for (const auto& o : cal.history)
    if (o.step_s > 0 && comparable_runs(config, o.config)) comparable.push_back(o);
  comparable = newest_first(comparable);

  PlanOptions options;
  const double learned =
      cal.efficiency > 0 ? 0.0 : learned_efficiency(config, comparable, device, &cp.learned_from);
  if (cal.efficiency > 0) {
    options.efficiency = cal.efficiency;
    cp.efficiency_source = "given";
    cp.basis = CalibratedPlan::Basis::kGiven;
  } else if (learned > 0) {
    options.efficiency = learned;
    cp.basis = CalibratedPlan::Basis::kThisModel;
    cp.efficiency_source = "learned from " + std::to_string(cp.learned_from) + " earlier run" +
                           (cp.learned_from == 1 ? "" : "s") + " of this model and layout";
  } else {
    // A model this machine never ran: what its runs of other models with this layout reached, as
    // this model's architecture would (arch_efficiency), before any default.
    std::vector<double> carried;
    std::vector<std::string> archs;
    for (const auto& o : newest_first(cal.history)) {
      if (!(o.step_s > 0) || !same_layout(config, o.config)) continue;
      const double e = implied_efficiency(o.config, o.step_s, device);
      if (!(e > 0)) continue;
      carried.push_back(
          std::min(1.0, e * arch_efficiency(config.model.arch) / arch_efficiency(o.config.model.arch)));
      if (std::find(archs.begin(), archs.end(), o.config.model.arch) == archs.end())
        archs.push_back(o.config.model.arch);
      if (carried.size() == static_cast<size_t>(kLearnFromRuns)) break;
    }
    if (!carried.empty()) {
      options.efficiency = median(carried);
      cp.basis = CalibratedPlan::Basis::kOtherModels;
      cp.learned_from_others = static_cast<int>(carried.size());
      std::string from;
      for (const std::string& a : archs) from += (from.empty() ? "" : ", ") + a;
      cp.efficiency_source = "from " + std::to_string(carried.size()) + " earlier run" +
                             (carried.size() == 1 ? "" : "s") + " of other models on this machine (" + from +
                             ")" +
                             (std::any_of(archs.begin(), archs.end(),
                                          [&](const std::string& a) { return a != config.model.arch; })
                                  ? fmt(", x %.2f for the ",
                                        arch_efficiency(config.model.arch) / arch_efficiency(archs.front())) +
                                        config.model.arch + " architecture"
                                  : std::string());
    } else {
      options.efficiency = default_efficiency(config, cal);
      cp.efficiency_source = cp.calibrated && config.run.device == "cpu"
                                 ? "default for a CPU run, no earlier run of this model and layout"
                                 : "nominal default, no earlier run on this machine";
    }
  }
  cp.plan = make_plan(config, device, options);
  {
    // The newest few: start-up changes with the engine (a kept ceiling made it seconds shorter).
    constexpr size_t kStartupRuns = 5;
    std::vector<double> startups, any;
    for (const auto& o : newest_first(cal.history)) {
      if (!(o.startup_s > 0)) continue;
      auto& into = comparable_runs(config, o.config) ? startups : any;
      if (into.size() < kStartupRuns) into.push_back(o.startup_s);
    }
    if (startups.empty()) startups = any;
    if (!startups.empty()) {
      cp.startup_s = median(startups);
      cp.startup_source = "measured on " + std::to_string(startups.size()) + " earlier run" +
                          (startups.size() == 1 ? "" : "s");
    }
  }
  if (cp.basis == CalibratedPlan::Basis::kOtherModels) {
    cp.low_s = cp.plan.step_s / kFirstRunSpread;
    cp.high_s = cp.plan.step_s * kFirstRunSpread;
  }
  PlanOptions nominal_options;
  nominal_options.efficiency = kNominalEfficiency;
  cp.nominal_step_s = make_plan(config, nominal, nominal_options).step_s;

  if (!comparable.empty()) {
    const RunObservation& last = comparable.front();
    const std::vector<RunObservation> before(comparable.begin() + 1, comparable.end());
    PlanCheck check;
    check.run = last.name;
    check.B = last.config.train.micro_batch;
    check.T = last.config.train.seq_len;
    check.measured_s = last.step_s;
    PlanOptions o;
    o.efficiency = learned_efficiency(last.config, before, device, &check.learned_from);
    if (!(o.efficiency > 0)) o.efficiency = default_efficiency(last.config, cal);
    check.predicted_s = make_plan(last.config, device, o).step_s;
    check.error = (check.predicted_s - check.measured_s) / check.measured_s;
    cp.last = check;
  }
  return cp;
}

std::string speed_line(const CalibratedPlan& cp) {
  const Plan& p = cp.plan;
  std::string s = seconds_text(p.step_s) + " per step = compute " + seconds_text(p.compute_s);
  if (p.bubble_s > 0) s += " + bubble " + seconds_text(p.bubble_s);
  s += " + communication " + seconds_text(p.comm_s) + "; " + commas(p.tokens_per_s) + " tokens/s";
  return s;
}

std::string basis_words(const CalibratedPlan& cp) {
  switch (cp.basis) {
    case CalibratedPlan::Basis::kThisModel:
      return cp.calibrated ? "calibrated on this machine (measured peak, learned efficiency)"
                           : "calibrated on this machine by earlier runs (the peak is the data sheet's, not "
                             "measured; the efficiency learned against it)";
    case CalibratedPlan::Basis::kOtherModels:
      return "first run of this model here, estimated from other models' runs on this machine";
    case CalibratedPlan::Basis::kGiven:
      return cp.calibrated ? "measured peak, given efficiency" : "data-sheet peak, given efficiency";
    case CalibratedPlan::Basis::kDefault:
      break;
  }
  return cp.calibrated ? "calibrated peak, default efficiency (no earlier run of this model here)"
                       : "UNCALIBRATED (no measured peak, no earlier run on this machine)";
}

std::string calibration_line(const CalibratedPlan& cp) {
  const Plan& p = cp.plan;
  // The opening words say what is calibrated, and from what; the factors follow.
  std::string s = basis_words(cp) + ": ";
  s += fmt("%.1f GFLOP/s", p.device.flops_per_s / 1e9) + " (" + p.device.name +
       (cp.calibrated ? "" : ", data sheet") + ") x efficiency " + fmt("%.3f", p.efficiency) + " (" +
       cp.efficiency_source + ")";
  if (cp.basis == CalibratedPlan::Basis::kOtherModels)
    s += "; expect " + seconds_text(cp.low_s) + " to " + seconds_text(cp.high_s) +
         " per step until this model has run here";
  if (cp.basis == CalibratedPlan::Basis::kDefault && !cp.calibrated)
    s += "; a busy machine can be several times slower (docs/planner.md): the first run here calibrates it";
  if (p.ranks > 1)
    s += "; link " +
         (p.device.link_bytes_per_s >= 1e9 ? fmt("%.2f GB/s", p.device.link_bytes_per_s / 1e9)
                                           : fmt("%.1f MB/s", p.device.link_bytes_per_s / 1e6)) +
         ", " + seconds_text(p.device.link_latency_s) + " per collective";
  s += "; nominal planner: " + seconds_text(cp.nominal_step_s);
  // Other processes' load is not modelled: a learned efficiency holds the load its runs met, the
  // default a quiet machine's; a machine busier than its CPUs is named so the gap is not a surprise.
  if (cp.cpus > 0 && cp.load_average > cp.cpus)
    s += fmt("; this machine is busy (load %.1f", cp.load_average) + " on " + std::to_string(cp.cpus) +
         " CPUs): steps may take longer than predicted";
  return s;
}

std::string last_run_line(const CalibratedPlan& cp) {
  if (!cp.last) return "";
  const PlanCheck& c = *cp.last;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%+.0f%%", c.error * 100);
  return "last comparable run " + c.run + " (" + std::to_string(c.B) + " x " + std::to_string(c.T) +
         "): " + seconds_text(c.measured_s) + "/step measured, predicted " + seconds_text(c.predicted_s) +
         ", error " + buf;
}

std::string calibration_text(const CalibratedPlan& cp) {
  std::string s = speed_line(cp) + "\n" + calibration_line(cp) + "\n";
  const std::string last = last_run_line(cp);
  if (!last.empty()) s += last + "\n";
  return s;
}

std::string calibrated_plan_text(const CalibratedPlan& cp) {
  std::string out = plan_to_text(cp.plan) + "\nspeed, checked against this machine\n";
  const std::string lines = calibration_text(cp);
  for (size_t at = 0; at < lines.size();) {
    const size_t end = lines.find('\n', at);
    out += "  " + lines.substr(at, end - at) + "\n";
    at = end == std::string::npos ? lines.size() : end + 1;
  }
  return out;
}

std::string calibrated_plan_to_json(const CalibratedPlan& cp, int indent) {
  auto j = nlohmann::ordered_json::parse(plan_to_json(cp.plan));
  nlohmann::ordered_json c = {{"calibrated", cp.calibrated},
                              {"efficiency", cp.plan.efficiency},
                              {"efficiency_source", cp.efficiency_source},
                              {"learned_from", cp.learned_from},
                              {"basis", cp.basis == CalibratedPlan::Basis::kThisModel     ? "this model"
                                        : cp.basis == CalibratedPlan::Basis::kOtherModels ? "other models"
                                        : cp.basis == CalibratedPlan::Basis::kGiven       ? "given"
                                                                                          : "default"},
                              {"learned_from_other_models", cp.learned_from_others},
                              {"step_s_low", cp.low_s},
                              {"step_s_high", cp.high_s},
                              {"link_latency_s", cp.plan.device.link_latency_s},
                              {"nominal_step_s", cp.nominal_step_s},
                              {"last_comparable_run", nullptr}};
  if (cp.last)
    c["last_comparable_run"] = {{"run", cp.last->run},
                                {"B", cp.last->B},
                                {"T", cp.last->T},
                                {"measured_s", cp.last->measured_s},
                                {"predicted_s", cp.last->predicted_s},
                                {"error", cp.last->error},
                                {"learned_from", cp.last->learned_from}};
  j["calibration"] = c;
  return j.dump(indent);
}

}  // namespace flotilla
