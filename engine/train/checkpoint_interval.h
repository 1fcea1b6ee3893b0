// checkpoint.every = "auto": the checkpoint interval chosen from the measured save time and the
// place's mean time between interruptions (MTBI), by J. T. Daly's higher-order optimum ("A higher
// order estimate of the optimum checkpoint interval for restart dumps", Future Generation
// Computer Systems 22 (2006) 303-312), re-chosen as both are measured (docs/scheduling.md).
//
// Decisions:
// - Daly, not Young: Young's sqrt(2 delta M) (CACM 1974) is Daly's first term; the higher-order
//   terms matter once the save time is a noticeable share of the MTBI (a spot node with a slow
//   network disk), and for delta >= 2M Daly's answer is tau = M, where Young's keeps growing.
// - The interval is chosen in wall seconds and turned into steps with the measured wall time per
//   step (everything between two steps, saves excluded), because a run saves at step boundaries.
// - The save time (delta) is the last saves' seconds, smoothed (half the old value, half the new);
//   before this start's first save it is the previous start's last save (trainer.json keeps it)
//   or, on a fresh run, an estimate: the checkpoint's bytes at kAssumedWriteBytesPerSecond.
// - The MTBI comes from, newest information first: the file <run dir>/checkpoint.mtbi (which the
//   scheduler rewrites when it records a preemption on the run's place), checkpoint.mtbi_s (which
//   it passes at start), else kPriorMtbiSeconds. The file is looked at (its mtime and size) at
//   most every few seconds, so a step pays nothing for it.
// - Only rank 0 decides; its "save now" travels in the trainer's per-step exchange with the stop
//   and checkpoint-request flags, so every rank saves at the same step (trainer.cpp).
// - The choice is re-made after every step (arithmetic only) and every save, but a moved save or
//   step time changes the interval only when the steps differ by more than a quarter and more
//   than one step (measurement noise must not write a record every few steps; the expected
//   overhead near the optimum is flat: at most 4 % more within a quarter of tau); a changed MTBI
//   always does.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>

namespace flotilla {

// Young's first-order optimum, sqrt(2 delta M) (seconds; 0 when an input is not positive).
double young_interval_s(double write_s, double mtbi_s);
// Daly 2006, the higher-order estimate: for delta < 2M, sqrt(2 delta M) [1 + (1/3) sqrt(delta / 2M) + (1/9)
// delta / 2M]
// - delta; otherwise M.
double daly_interval_s(double write_s, double mtbi_s);
// Daly's model of the expected wall time to finish `solve_s` of work saved every `tau_s` (each
// save taking `write_s`, a restart `restart_s`) on a system with exponentially distributed
// interruptions of mean `mtbi_s`: M e^(R/M) (e^((tau + delta)/M) - 1) Ts / tau (the paper's
// complete cost function, which the higher-order estimate approximates the minimum of).
double daly_expected_wall_s(double solve_s, double tau_s, double write_s, double restart_s, double mtbi_s);

// The worker's stated prior when nothing says otherwise: one interruption per 30 days, what the
// runs layer assumes for this machine or an on-demand node (runs/interruptions.h says why).
inline constexpr double kPriorMtbiSeconds = 30 * 24 * 3600.0;
// The disk rate assumed for the first save's estimate: 125 MB/s, an AWS gp3 volume's baseline
// throughput (a slow cloud disk; a local NVMe is ten times faster, so the first interval errs on
// the short side and the first measured save corrects it).
inline constexpr double kAssumedWriteBytesPerSecond = 125e6;

// <run dir>/checkpoint.mtbi: one line "mtbi_s=21600 source=node b: 2 preemptions in 40 h\n" (the
// source runs to the end of the line; other "key=value" words before it are ignored, so the
// format can grow). Written by a temporary file and a rename.
inline constexpr char kMtbiFile[] = "checkpoint.mtbi";

struct MtbiNote {
  double mtbi_s = 0;
  std::string source;  // words: where the figure comes from
};

std::string format_mtbi_line(const MtbiNote& note);
std::optional<MtbiNote> parse_mtbi_line(const std::string& text);  // nullopt: not a positive mtbi_s
bool write_mtbi_file(const std::string& run_dir, const MtbiNote& note);
std::optional<MtbiNote> read_mtbi_file(const std::string& run_dir);

// "4 ms", "0.45 s", "12.3 s", "6.1 min", "6 h", "2.5 d".
std::string duration_words(double seconds);

// One choice of the interval and what it was made from.
struct IntervalChoice {
  int64_t steps = 0;        // save every this many steps
  double interval_s = 0;    // Daly's tau (compute seconds between saves)
  double write_s = 0;       // delta
  double mtbi_s = 0;        // M
  double step_s = 0;        // measured wall seconds per step
  std::string write_basis;  // "measured", "previous start", "estimated: 12.3 MB at 125 MB/s"
  std::string mtbi_basis;   // "prior", "checkpoint.mtbi_s", or the checkpoint.mtbi file's source
  std::string basis;        // "Daly 2006" (or "Daly 2006, delta >= 2M: tau = M")

  // "checkpoint interval: every 120 steps (6.1 min; write 2.1 s, MTBI 6 h (prior), step 3.0 s;
  // Daly 2006)"
  std::string text() const;
  // The event's fields (docs/metrics-protocol.md): ckpt_interval_steps, interval_s, write_s,
  // mtbi_s, step_s, basis, write_basis, mtbi_basis.
  std::map<std::string, std::string> fields() const;
};

// A change of the interval driven by the measured step time alone is announced (and applied) at
// most this often: on a loaded machine the step time swings by more than the dead band from one
// step to the next, and a record per swing is noise in the run's log and on Live.
inline constexpr double kStepRelogS = 30;

class CheckpointInterval {
 public:
  struct Options {
    std::string run_dir;            // where checkpoint.mtbi is looked for
    double config_mtbi_s = 0;       // checkpoint.mtbi_s (0: the prior)
    uint64_t checkpoint_bytes = 0;  // what one save writes (the first estimate)
    double last_save_s = -1;        // the previous start's last save (trainer.json), -1: none
    int64_t start_step = 0;         // the step this start began at (a resume's step)
    double file_check_s = 2;        // the MTBI file is looked at most this often (monotonic seconds)
  };
  explicit CheckpointInterval(const Options& options);

  // After each step (rank 0), `now_s` a monotonic clock: the wall time since the previous step
  // (none right after a save, or at the first step) is the step time. Returns the choice when it
  // was first made (at the second step of a start) or changed at this step (to be reported).
  std::optional<IntervalChoice> after_step(int64_t step, double now_s);
  // Whether the interval is due at `step` (call after after_step).
  bool due(int64_t step) const;
  // After any save at `step` (periodic, requested, stopped) that took `write_s` seconds.
  std::optional<IntervalChoice> after_save(int64_t step, double write_s);

  const std::optional<IntervalChoice>& current() const { return current_; }

 private:
  // `now_s`: the step's monotonic time when a step time moved it (a change it drives is announced
  // at most every kStepRelogS; an MTBI or a save time changes it at once).
  std::optional<IntervalChoice> choose(bool mtbi_changed, std::optional<double> now_s = std::nullopt);
  bool poll_file(double now_s);  // true: the MTBI changed

  Options opt_;
  double write_s_ = 0;
  std::string write_basis_;
  double mtbi_s_ = 0;
  std::string mtbi_basis_;
  double step_ema_s_ = -1;
  std::optional<double> prev_now_;  // the previous after_step's time (none right after a save)
  double next_file_check_ = -1;
  bool file_seen_ = false;
  std::time_t file_mtime_ = 0;
  long long file_mtime_ns_ = 0;
  long long file_size_ = -1;
  int64_t last_save_step_ = 0;
  std::optional<double> last_step_record_s_;  // when a step-time change was last announced
  std::optional<IntervalChoice> current_;
};

}  // namespace flotilla
