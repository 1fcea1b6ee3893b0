// The planner checked against reality (issue 17 item 4): its step time from this machine's kept
// peak, an efficiency learned from earlier runs of the same model and layout, and communication
// over measured link figures, with its error on the last comparable run (docs/planner.md).
//
// Decision: the engine never reads the run store. The layer that can (runs/plan_history.h) hands
// the earlier runs in as RunObservations; the engine picks the comparable ones, learns from them
// and formats the lines, so the wizard, `flotilla plan` and `flotilla-worker plan` print one
// function's numbers. The error shown for the last comparable run is a genuine out-of-sample check:
// that run is predicted from the runs before it (or the default efficiency), never from itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/plan/planner.h"

namespace flotilla {

// Efficiency (fraction of the measured FMA ceiling) used when no earlier comparable run exists. A
// CPU step is priced in sgemm-FLOP equivalents (planner.h CpuWork), so this is the linear layers'
// sgemm rate: 0.88 of the FMA ceiling on the 2-core reference machine (oneDNN 0.91, OpenBLAS 0.85
// on SmolLM2-135M's shapes; docs/planner.md "Step time on a CPU"). Until issue 39 it was 0.45, the
// model FLOPs per CPU-second of tiny one-thread runs, which put every real model's step 80% long.
// It predicts a quiet machine; on a busy one the first run's learned efficiency takes over.
inline constexpr double kDefaultCpuEfficiency = 0.88;
// The nominal planner's figure: a data-sheet peak x 50% (what the wizard showed before calibration).
inline constexpr double kNominalEfficiency = 0.5;
// Comparable runs learned from: the newest ones only (the machine and the engine change over time).
inline constexpr int kLearnFromRuns = 5;
// A model's first run on a machine that ran others: the others' learned efficiency carried over,
// scaled by the architectures' efficiency gap (arch_efficiency), and a range of this factor either
// way around the step it gives (docs/planner.md "A model's first run").
inline constexpr double kFirstRunSpread = 1.6;
// An architecture's efficiency relative to GPT-2's on a CPU. llama-tiny against the demo was 0.67
// quiet on the reference machine (0.45 / 0.67 at one thread) but 1.06-1.10 under load there and
// 1.19 under load on issue 34's machine, so the gap follows the load: 0.86, the geometric middle of
// 0.67 and 1.1, with kFirstRunSpread covering both ends and the runs' own noise.
double arch_efficiency(const std::string& arch);

// Link figures for the planner's communication term: time = latency x collectives + bytes / bandwidth.
struct LinkFigures {
  double bytes_per_s = 0;  // bus bandwidth (nccl-tests busbw; the planner's bytes already carry 2(n-1)/n)
  double latency_s = 0;    // one small collective's time
  std::string source;      // "bench-comm, kept in <path>" or "default for Gloo on loopback (docs/planner.md)"
};

// One earlier run as the store holds it (built by runs/plan_history.h).
struct RunObservation {
  std::string name;
  RunConfig config;   // its resolved config
  double step_s = 0;  // measured: median step time over its steps after the first
  int64_t steps = 0;  // steps the median is over
  double when = 0;    // unix seconds it ended (or started); orders the history
  // Its start-up: from running (the worker started) to its first step record, less one median
  // step; 0 when unknown. Billed like training (issue 34 #7), so estimates add it.
  double startup_s = 0;
};

// A local run's start-up when no earlier run measured one: the worker, its launcher, the data and the
// model with a kept MFU ceiling (engine/cpu/peak_cache.h). scripts/bench-first-step measures it.
inline constexpr double kTypicalStartupS = 2.0;

// What the layer that can read the store and the caches passes in.
struct Calibration {
  // The measured ceiling for the run's dtype at one rank's threads; 0 = uncalibrated.
  double peak_flops_per_s = 0;
  // Where it came from: "fp32 FMA ceiling (avx512, 2 threads per rank), kept in <path>; matmul path ...".
  std::string peak_source;
  std::string kernel_path;  // the matmul path the engine uses for the dtype ("avx512", "avx2", ...)
  LinkFigures link;         // bytes_per_s 0 = keep the device profile's link
  double efficiency = 0;    // given by the user (plan --efficiency): used as is, nothing learned
  double load_average = 0;  // /proc/loadavg's 1-minute figure when planned (0 = not read)
  int cpus = 0;             // online CPUs
  std::vector<RunObservation> history;  // earlier runs on this machine, any order
};

// The planner's prediction for one earlier run against what it measured.
struct PlanCheck {
  std::string run;
  int B = 0, T = 0;
  double measured_s = 0, predicted_s = 0;
  double error = 0;      // (predicted - measured) / measured
  int learned_from = 0;  // comparable runs before it that the prediction learned from (0: default efficiency)
};

struct CalibratedPlan {
  Plan plan;
  bool calibrated = false;  // the compute term uses a measured peak
  // Where the efficiency came from: kGiven (--efficiency), kThisModel (earlier runs of this model and
  // layout), kOtherModels (this machine's runs of other models with this layout: a model's first
  // run here), kDefault (nothing learned).
  enum class Basis { kGiven, kThisModel, kOtherModels, kDefault };
  Basis basis = Basis::kDefault;
  int learned_from_others = 0;   // kOtherModels: the runs it came from
  double low_s = 0, high_s = 0;  // kOtherModels: the step time likely lies in [low_s, high_s]
  // "learned from 3 earlier runs of this model and layout", or which default.
  std::string efficiency_source;
  int learned_from = 0;
  double nominal_step_s = 0;      // the uncalibrated planner's step (data-sheet peak x kNominalEfficiency)
  std::optional<PlanCheck> last;  // the newest comparable run, predicted out of sample
  double load_average = 0;        // copied from the calibration: the busy-machine note
  int cpus = 0;
  // Seconds from start to the first step, billed like training: the median of the comparable
  // earlier runs' (else of any earlier run's on this machine), else kTypicalStartupS.
  double startup_s = kTypicalStartupS;
  std::string startup_source = "typical";  // "measured on 3 earlier runs", "typical"
};

// Same model, dtype, device, threads and layout (dp, tp, pp, ZeRO, recompute, schedule); batch may differ.
bool comparable_runs(const RunConfig& a, const RunConfig& b);
// The efficiency that makes the plan of `run` on `device` take `measured_step_s`:
// (compute + bubble at efficiency 1) / (measured - communication), at most 1.
double implied_efficiency(const RunConfig& run, double measured_step_s, const DeviceProfile& device);
// The median of implied_efficiency over the newest kLearnFromRuns of `observations` (all assumed
// comparable), preferring those with the same micro-batch and sequence length as `config`; 0 when none.
double learned_efficiency(const RunConfig& config, const std::vector<RunObservation>& observations,
                          const DeviceProfile& device, int* used = nullptr);

// The device with the calibration's peak and link put in (name says where they came from).
DeviceProfile calibrated_device(const DeviceProfile& nominal, const Calibration& calibration);
// The plan every surface shows: `nominal` is the device profile the surface would use uncalibrated
// (memory, link, data-sheet peak); the calibration replaces its peak and link and sets the efficiency.
CalibratedPlan plan_calibrated(const RunConfig& config, const DeviceProfile& nominal,
                               const Calibration& calibration);

// The speed lines shared by the wizard and both CLIs, e.g.
//   speed_line:       "1.12 s per step = compute 1.06 s + communication 55.6 ms; 1,829 tokens/s"
//   calibration_line: "calibrated on this machine: peak 241.8 GFLOP/s (...) x efficiency 0.085 (learned
//                     from 2 earlier runs of this model and layout); link 0.31 GB/s, ..."; its opening
//                     words say what is calibrated and from what: the peak (measured, or the data
//                     sheet's), the efficiency (this model's runs, other models' runs here, a default)
//   last_run_line:    "last comparable run demo-b (8 x 128): 1.12 s/step measured, predicted 1.10 s,
//                     error -2%"
std::string speed_line(const CalibratedPlan& cp);
// What the step time rests on, in words ("calibrated on this machine (…)", "first run of this model
// here, …", "UNCALIBRATED (…)"): calibration_line's opening and the wizard's Budget page.
std::string basis_words(const CalibratedPlan& cp);
std::string calibration_line(const CalibratedPlan& cp);
std::string last_run_line(const CalibratedPlan& cp);  // "" when there is no comparable run
// speed_line, calibration_line and last_run_line, one per line, each ending with '\n'.
std::string calibration_text(const CalibratedPlan& cp);
// plan_to_text followed by the section "speed, checked against this machine" (calibration_text).
std::string calibrated_plan_text(const CalibratedPlan& cp);
// plan_to_json with a "calibration" object: calibrated, efficiency and its source, nominal_step_s,
// and last_comparable_run {run, B, T, measured_s, predicted_s, error, learned_from} (null when none).
std::string calibrated_plan_to_json(const CalibratedPlan& cp, int indent = 2);

// ---- machine figures (machine_calibration.cpp): the caches this engine keeps ----------------------

// Threads one rank of `config` uses on this machine (run.threads, else the cores shared by the
// local ranks), as the trainer computes them.
int rank_threads(const RunConfig& config);
// The kept peak for this CPU, dtype and thread count (cpu-peaks.json), measured and kept when absent
// and `measure_if_absent`; peak_flops_per_s 0 ("uncalibrated") otherwise. The link figures are the
// kept bench-comm ones for `ranks` ranks on this host, else the loopback Gloo default.
Calibration machine_calibration(const RunConfig& config, bool measure_if_absent);

// bench-comm's all_reduce rows fitted to latency + bytes / bandwidth, kept in comm-links.json beside
// cpu-peaks.json keyed by backend and world size. Returns whether it was written.
struct LinkSample {
  double bytes = 0;   // buffer size
  double time_s = 0;  // mean time of one all_reduce
};
LinkFigures fit_link_figures(const std::vector<LinkSample>& all_reduce, int world_size);
std::string link_cache_path();
bool store_link_figures(const std::string& path, const std::string& backend, int world_size,
                        const LinkFigures& f);
std::optional<LinkFigures> load_link_figures(const std::string& path, const std::string& backend,
                                             int world_size);
// Gloo over TCP loopback on the reference machine (docs/planner.md), used when nothing is kept.
LinkFigures default_loopback_link();

}  // namespace flotilla
