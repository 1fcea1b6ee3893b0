// The planner's calibration math (engine/plan/calibration.h) on a fake store history and a fake
// peak: which runs are comparable, the efficiency a measured step implies (communication taken out
// first), the median over the newest runs, the out-of-sample check on the last comparable run, the
// communication term with latency, the link fit bench-comm keeps, and the kept-peak reading.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/peak_cache.h"
#include "engine/plan/calibration.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

RunConfig cfg(const std::vector<std::string>& overrides) {
  RunConfig c;
  apply_overrides(c, {"model.preset=tiny", "model.vocab_size=512", "model.max_seq_len=256",
                      "train.micro_batch=8", "train.seq_len=128", "data.synthetic_tokens=100000"});
  apply_overrides(c, overrides);
  validate_or_throw(c);
  return c;
}

DeviceProfile device(double flops, double link = 1e9, double latency = 0) {
  DeviceProfile d{"fake", flops, 1ull << 40, link};
  d.link_latency_s = latency;
  return d;
}

// A run that measured the step the plan predicts at efficiency `eff` on `d`.
RunObservation observed(const std::string& name, const RunConfig& c, const DeviceProfile& d, double eff,
                        double when) {
  PlanOptions o;
  o.efficiency = eff;
  return RunObservation{name, c, make_plan(c, d, o).step_s, 10, when};
}

void test_comparable() {
  const RunConfig a = cfg({});
  CHECK(comparable_runs(a, cfg({"train.micro_batch=4"})));  // batch may differ
  CHECK(comparable_runs(a, cfg({"train.steps=7", "optim.lr=1e-3"})));
  CHECK(!comparable_runs(a, cfg({"parallel.dp=2"})));
  CHECK(!comparable_runs(a, cfg({"model.n_layer=2"})));
  CHECK(!comparable_runs(a, cfg({"model.vocab_size=1024"})));
  CHECK(!comparable_runs(a, cfg({"run.threads=1"})));
  CHECK(!comparable_runs(cfg({"parallel.dp=2"}), cfg({"parallel.dp=2", "parallel.zero=1"})));
}

void test_implied_and_learned_efficiency() {
  const DeviceProfile d = device(100e9, 1e9, 1e-4);
  const RunConfig one = cfg({});
  const RunObservation o = observed("a", one, d, 0.2, 1);
  CHECK_NEAR(implied_efficiency(one, o.step_s, d), 0.2, 1e-12);
  // dp = 2: the communication term is taken out before the efficiency is solved for.
  const RunConfig two = cfg({"parallel.dp=2"});
  PlanOptions at;
  at.efficiency = 0.3;
  const Plan p2 = make_plan(two, d, at);
  CHECK(p2.comm_s > 0);
  CHECK_NEAR(implied_efficiency(two, p2.step_s, d), 0.3, 1e-12);
  // A measured step faster than its compute at full peak cannot claim more than 1.
  CHECK(implied_efficiency(one, 1e-9, d) == 1.0);
  CHECK(implied_efficiency(one, 0, d) == 0.0);

  // Median over the newest kLearnFromRuns, same micro-batch and length preferred.
  std::vector<RunObservation> h = {observed("r1", one, d, 0.10, 1), observed("r2", one, d, 0.40, 2),
                                   observed("r3", one, d, 0.20, 3),
                                   observed("b4", cfg({"train.micro_batch=4"}), d, 0.9, 4)};
  int used = 0;
  CHECK_NEAR(learned_efficiency(one, h, d, &used), 0.20, 1e-12);
  CHECK(used == 3);
  // No run of this batch: all of them are used (median of 0.1, 0.2, 0.4, 0.9).
  CHECK_NEAR(learned_efficiency(cfg({"train.micro_batch=2"}), h, d, &used), 0.3, 1e-12);
  CHECK(used == 4);
  // Older than the newest five are not.
  std::vector<RunObservation> many;
  for (int i = 0; i < 8; ++i) many.push_back(observed(std::to_string(i) + "m", one, d, i < 3 ? 0.9 : 0.1, i));
  CHECK_NEAR(learned_efficiency(one, many, d, &used), 0.1, 1e-12);
  CHECK(used == kLearnFromRuns);
  CHECK(learned_efficiency(one, {}, d, &used) == 0.0 && used == 0);
}

void test_calibrated_plan() {
  const DeviceProfile nominal = device(400e9, 2e9);  // a data-sheet peak 4x the measured one
  Calibration cal;
  cal.peak_flops_per_s = 100e9;
  cal.peak_source = "fake FMA ceiling";
  cal.link = {1e9, 1e-4, "fake link"};
  const DeviceProfile d = calibrated_device(nominal, cal);
  CHECK(d.flops_per_s == 100e9 && d.link_bytes_per_s == 1e9 && d.link_latency_s == 1e-4);
  const RunConfig one = cfg({});

  // No history: the CPU default efficiency on the measured peak.
  CalibratedPlan cp = plan_calibrated(one, nominal, cal);
  CHECK(cp.calibrated && !cp.last && cp.learned_from == 0);
  CHECK(cp.plan.efficiency == kDefaultCpuEfficiency);
  PlanOptions nom;
  nom.efficiency = kNominalEfficiency;
  CHECK_NEAR(cp.nominal_step_s, make_plan(one, nominal, nom).step_s, 1e-15);
  CHECK(calibration_line(cp).find("calibrated peak, default efficiency (no earlier run of this model here): "
                                  "100.0 GFLOP/s (fake FMA ceiling) x efficiency 0.880") == 0);

  // History: two old runs at 0.2 (one of another layout, ignored), the newest at 0.25. The plan
  // learns the median of all comparable ones; the last run is predicted from those before it.
  cal.history = {observed("old1", one, d, 0.2, 1), observed("dp2", cfg({"parallel.dp=2"}), d, 0.9, 2),
                 observed("old2", one, d, 0.2, 3), observed("newest", one, d, 0.25, 4)};
  cp = plan_calibrated(one, nominal, cal);
  CHECK(cp.learned_from == 3);
  CHECK_NEAR(cp.plan.efficiency, 0.2, 1e-12);
  CHECK(cp.efficiency_source == "learned from 3 earlier runs of this model and layout");
  CHECK(cp.basis == CalibratedPlan::Basis::kThisModel);
  CHECK(calibration_line(cp).find("calibrated on this machine (measured peak, learned efficiency): ") == 0);
  CHECK(cp.last && cp.last->run == "newest" && cp.last->learned_from == 2);
  // Compute-bound (1 rank: no communication), so predicted / measured = 0.25 / 0.2.
  CHECK_NEAR(cp.last->error, 0.25 / 0.2 - 1, 1e-9);
  CHECK(last_run_line(cp).find("last comparable run newest (8 x 128): ") == 0);
  CHECK(last_run_line(cp).find("error +25%") != std::string::npos);

  // The only comparable run is predicted with the default efficiency (nothing before it).
  cal.history = {observed("only", one, d, 0.30, 1)};
  cp = plan_calibrated(one, nominal, cal);
  CHECK(cp.last && cp.last->learned_from == 0);
  CHECK_NEAR(cp.last->error, 0.30 / kDefaultCpuEfficiency - 1, 1e-9);

  // A machine busier than its CPUs is named; a quiet one is not.
  CHECK(calibration_line(cp).find("busy") == std::string::npos);
  cal.load_average = 14.2;
  cal.cpus = 2;
  CHECK(calibration_line(plan_calibrated(one, nominal, cal))
            .find("this machine is busy (load 14.2 on 2 CPUs)") != std::string::npos);

  // A given efficiency is used as is.
  cal.efficiency = 0.42;
  cp = plan_calibrated(one, nominal, cal);
  CHECK(cp.plan.efficiency == 0.42 && cp.efficiency_source == "given");

  // Uncalibrated: no peak, no history: the nominal planner, and it says so.
  cp = plan_calibrated(one, nominal, Calibration{});
  CHECK(!cp.calibrated && cp.plan.efficiency == kNominalEfficiency);
  CHECK_NEAR(cp.plan.step_s, cp.nominal_step_s, 1e-15);
  CHECK(calibration_line(cp).find("UNCALIBRATED") == 0);
  CHECK(calibration_line(cp).find("several times slower") != std::string::npos);
}

// Issue 34 item 12: the label says what is calibrated and from what, never "UNCALIBRATED" beside a
// learned efficiency; a model the machine never ran is estimated from its runs of other models
// (scaled by the architectures' gap) with a range, not from the nominal default.
void test_label_and_first_run_of_a_model() {
  const DeviceProfile nominal = device(166.2e9, 2e9);  // no measured peak: the data sheet's
  const RunConfig gpt2 = cfg({});
  const RunConfig llama = cfg({"model.arch=llama", "model.n_kv_head=2"});
  Calibration cal;
  // Four runs of the GPT-2 model at efficiency 0.144 (the review's figure), no measured peak.
  for (int i = 0; i < 4; ++i)
    cal.history.push_back(observed("demo-" + std::to_string(i), gpt2, nominal, 0.144, i));
  CalibratedPlan cp = plan_calibrated(gpt2, nominal, cal);
  CHECK(!cp.calibrated && cp.basis == CalibratedPlan::Basis::kThisModel && cp.learned_from == 4);
  std::string line = calibration_line(cp);
  CHECK_MSG(line.find("UNCALIBRATED") == std::string::npos, "%s", line.c_str());
  CHECK_MSG(
      line.find("calibrated on this machine by earlier runs (the peak is the data sheet's, not measured") ==
          0,
      "%s", line.c_str());
  CHECK(line.find("learned from 4 earlier runs of this model and layout") != std::string::npos);

  // llama never ran here: the GPT-2 runs' efficiency x the architectures' gap, with a range.
  cp = plan_calibrated(llama, nominal, cal);
  CHECK(cp.basis == CalibratedPlan::Basis::kOtherModels && cp.learned_from == 0 &&
        cp.learned_from_others == 4);
  CHECK_NEAR(cp.plan.efficiency, 0.144 * arch_efficiency("llama") / arch_efficiency("gpt2"), 1e-9);
  CHECK(cp.plan.efficiency < kNominalEfficiency / 3);  // not the nominal 0.5 that was 6x off
  CHECK_NEAR(cp.low_s * kFirstRunSpread, cp.plan.step_s, 1e-12);
  CHECK_NEAR(cp.high_s, cp.plan.step_s * kFirstRunSpread, 1e-12);
  line = calibration_line(cp);
  CHECK_MSG(
      line.find("first run of this model here, estimated from other models' runs on this machine: ") == 0,
      "%s", line.c_str());
  CHECK_MSG(line.find("from 4 earlier runs of other models on this machine (gpt2), x 0.86 for the llama "
                      "architecture") != std::string::npos &&
                line.find("expect ") != std::string::npos &&
                line.find(" per step until this model has run here") != std::string::npos &&
                line.find("UNCALIBRATED") == std::string::npos,
            "%s", line.c_str());
  // Runs of another layout are not carried over: the default, and it says so.
  const RunConfig llama_dp2 = cfg({"model.arch=llama", "model.n_kv_head=2", "parallel.dp=2"});
  cp = plan_calibrated(llama_dp2, nominal, cal);
  CHECK(cp.basis == CalibratedPlan::Basis::kDefault && cp.plan.efficiency == kNominalEfficiency);
  CHECK(calibration_line(cp).find("UNCALIBRATED (no measured peak, no earlier run on this machine)") == 0);
  // Once llama has run, its own runs take over.
  cal.history.push_back(observed("llama-1", llama, nominal, 0.08, 10));
  cp = plan_calibrated(llama, nominal, cal);
  CHECK(cp.basis == CalibratedPlan::Basis::kThisModel && cp.learned_from == 1);
  CHECK_NEAR(cp.plan.efficiency, 0.08, 1e-9);
}

void test_communication_term() {
  const RunConfig two = cfg({"parallel.dp=2"});
  const DeviceProfile d = device(100e9, 1e9, 1e-4);
  const Plan p = make_plan(two, d);
  const StagePlan& s = p.stages[0];
  const int layers = two.model.n_layer;
  CHECK(s.collectives == layers + 1 + 2);  // one all-reduce per layer bucket, the rest, loss and norm
  CHECK_NEAR(p.comm_s, s.comm_dp_bytes / 1e9 + s.collectives * 1e-4, 1e-15);
  CHECK_NEAR(s.comm_dp_bytes, static_cast<double>(s.params) * 4, 1e-6);  // 2(n-1)/n = 1 for n = 2
  CHECK(make_plan(cfg({"parallel.dp=2", "parallel.zero=1"}), d).stages[0].collectives == 4);
  CHECK(make_plan(cfg({}), d).stages[0].collectives == 0);
  Calibration cal;
  cal.peak_flops_per_s = 100e9;
  cal.link = {1e9, 1e-4, "fake"};
  const CalibratedPlan cp = plan_calibrated(two, d, cal);
  const std::string line = speed_line(cp);
  CHECK_MSG(line.find(" per step = compute ") != std::string::npos &&
                line.find(" + communication ") != std::string::npos,
            "%s", line.c_str());
  CHECK(calibration_line(cp).find("link 1.00 GB/s, 100 us per collective") != std::string::npos);
  // A slow measured link reads in MB/s (issue 36's hand run printed "link 0.00 GB/s" for 4.8 MB/s).
  cal.link = {4.8e6, 1e-4, "fake"};
  CHECK(calibration_line(plan_calibrated(two, d, cal)).find("link 4.8 MB/s, 100 us per collective") !=
        std::string::npos);
}

void test_link_fit_and_cache() {
  // time = 120 us + bus bytes / 1.5 GB/s, 2 ranks (bus factor 1).
  std::vector<LinkSample> s;
  for (double b = 1024; b <= 256.0 * (1 << 20); b *= 4) s.push_back({b, 120e-6 + b / 1.5e9});
  const LinkFigures f = fit_link_figures(s, 2);
  CHECK_NEAR(f.latency_s, 120e-6 + 1024 / 1.5e9, 1e-12);
  CHECK_NEAR(f.bytes_per_s / 1.5e9, 1.0, 0.01);
  CHECK(fit_link_figures({}, 2).bytes_per_s == 0);

  const fs::path dir = fs::temp_directory_path() / ("plan_calibration_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string path = (dir / "comm-links.json").string();
  CHECK(!load_link_figures(path, "gloo", 2));
  CHECK(store_link_figures(path, "gloo", 2, f));
  const auto back = load_link_figures(path, "gloo", 2);
  CHECK(back && back->bytes_per_s == f.bytes_per_s && back->latency_s == f.latency_s);
  CHECK(back && back->source == "bench-comm, kept in " + path);
  CHECK(!load_link_figures(path, "gloo", 4) && !load_link_figures(path, "nccl", 2));
  std::ofstream(path) << "{ damaged";
  CHECK(!load_link_figures(path, "gloo", 2));

  // The kept peak: a fake cpu-peaks.json for this CPU is what machine_calibration reads.
  setenv("FLOTILLA_CACHE_DIR", dir.string().c_str(), 1);
  const RunConfig one = cfg({"run.threads=2"});
  Calibration none = machine_calibration(one, false);
  CHECK(none.peak_flops_per_s == 0);  // nothing kept, nothing measured: uncalibrated
  cpu::CpuPeak fake;
  fake.cpu_model = cpu::cpu_features().brand;
  fake.threads = 2;
  fake.fp32_isa = "avx2";
  fake.fp32_fma_gflops = 123.5;
  CHECK(cpu::store_peak(cpu::peak_cache_path(), fake));
  const Calibration kept = machine_calibration(one, false);
  CHECK_NEAR(kept.peak_flops_per_s, 123.5e9, 1);
  CHECK(kept.peak_source.find("fp32 FMA ceiling (avx2, 2 threads per rank), kept in ") == 0);
  CHECK(!kept.kernel_path.empty());
  CHECK(kept.link.bytes_per_s == 0);  // one rank: no link
  const Calibration two = machine_calibration(cfg({"run.threads=2", "parallel.dp=2"}), false);
  CHECK(two.link.source.find("default for Gloo on loopback") == 0);
  CHECK(store_link_figures(link_cache_path(), "gloo", 2, f));
  CHECK(machine_calibration(cfg({"run.threads=2", "parallel.dp=2"}), false).link.bytes_per_s ==
        f.bytes_per_s);
  fs::remove_all(dir);
}

}  // namespace

int main() {
  test_comparable();
  test_implied_and_learned_efficiency();
  test_calibrated_plan();
  test_label_and_first_run_of_a_model();
  test_communication_term();
  test_link_fit_and_cache();
  return flotilla_test::summary("test_plan_calibration");
}
