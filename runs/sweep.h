// Sweeps (issue 37, docs/scheduling.md): one config, several values of some of its keys, one
// queued run per point, all in one named group that Compare opens and successive halving prunes.
//
// Decision: a sweep is checked whole before anything is stored. Every axis key must be a config
// key (the --set reader's did-you-mean), every point's config must pass the same validation as
// `flotilla run` (the first bad point is named with its values), and the halving rungs must each
// get a validation loss; only then are the sweep row and all its entries written in one store
// transaction, so a refusal (or a taken run name) leaves nothing queued. Each entry carries its
// point's whole resolved config (run.name set to the point's name), so the scheduler starts it as
// any queued run. Random points come from a seeded 64-bit Mersenne Twister turned into doubles by
// our own arithmetic (not std::uniform_real_distribution, whose output differs between standard
// libraries), so a seed gives the same points on every build; the seed is stored in the sweep row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/database.h"
#include "engine/config/run_config.h"
#include "runs/halving.h"

namespace flotilla::runs {

// One --set of a sweep: KEY=V1,V2,... (a list: the grid's values, or the choices a random point
// picks from; KEY=a|b|c is the same), KEY=LO:HI (uniform) or KEY=LO:HI:log (log-uniform), ranges
// only with --random. A value holding ',' or '|' is written as a TOML string: KEY="q_proj,v_proj".
struct SweepAxis {
  enum class Kind { kList, kRange, kLogRange };
  std::string key;  // "optim.lr"
  Kind kind = Kind::kList;
  std::vector<std::string> values;  // kList: the values as given
  double lo = 0, hi = 0;            // ranges
  bool integer = false;             // an integer key: a sampled value is rounded
};

// Parses one axis and checks its key and each listed value against the config schema: throws
// flotilla::Error (kConfig) naming the --set, the key (with the reader's did-you-mean) or value.
SweepAxis parse_sweep_axis(const std::string& text);

struct SweepSpec {
  std::vector<SweepAxis> axes;
  int random = 0;     // 0: the grid (the cartesian product of list axes); N: N random points
  uint64_t seed = 0;  // random points' seed
};

// One point: (key, value text) in axis order; the text is what is applied (--set KEY=TEXT).
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> values;
  std::string words() const;  // "optim.lr=3e-4 lora.rank=16"
};

// The grid (first axis slowest) or `random` points. Throws flotilla::Error (kConfig) for a range
// in a grid, a grid over 1000 points, or no axis.
std::vector<SweepPoint> expand_sweep(const SweepSpec& spec);

// A sampled float as it is applied and shown: 4 significant digits ("0.0003162").
std::string sweep_number_text(double v);

struct PlannedPoint {
  std::string name;  // "<sweep>-<i>", i from 1
  SweepPoint point;
  RunConfig config;  // the base config with the point applied (run.name = name)
  std::string config_toml;
  int64_t total_tokens = 0;  // train.steps x tokens per step
};

struct SweepPlan {
  std::string name;
  std::string config_path;
  SweepSpec spec;
  std::vector<PlannedPoint> points;
  HalvingSettings halving;         // off when rungs is empty
  std::vector<std::string> notes;  // what was changed and why ("eval.every set to 25 steps ...")
};

struct HalvingRequest {
  bool auto_rungs = false;     // --halving auto
  std::vector<int64_t> rungs;  // --halving 4096,16384 (tokens)
  int eta = 2;
};

// Loads CONFIG, applies `fixed` (--set KEY=V with one value) then each point, validates every
// point (as `flotilla run`: its model resolved, dp*tp*pp ranks) and the halving rungs (each point
// must have a validation loss at every rung: eval.every 0 is set to the smallest rung's steps,
// saying so in notes; an eval.every too coarse for the rungs is refused with the figures).
// Throws flotilla::Error (kConfig) naming the first bad point with its values.
SweepPlan plan_sweep(const std::string& config_path, const std::string& name, const SweepSpec& spec,
                     const std::optional<HalvingRequest>& halving);

struct SweepQueueOptions {
  std::vector<std::string> places;  // place keys (empty: any)
  int64_t priority = 0;
  std::optional<double> deadline;
  std::optional<double> max_usd;  // per run
  int64_t max_restarts = 3;
};

// The sweep row (axes, seed, points and halving) and one queue entry per point (group = the
// sweep's name), in one store transaction. Returns the entries' ids in point order. DbError
// (kConstraint) when the sweep's or a point's name is taken: nothing is written then.
std::vector<int64_t> queue_sweep(db::Database& db, const SweepPlan& plan, const SweepQueueOptions& options,
                                 double now);

// The spec JSON stored in the sweep row, and the points read back from it ((name, words) pairs).
std::string sweep_spec_json(const SweepPlan& plan);
std::vector<std::pair<std::string, std::string>> sweep_points_of(const std::string& spec_json);

// A sweep name that is free: `base`, else base-2, ... (neither a sweep nor a run prefix taken).
std::string free_sweep_name(const db::Database& db, const std::string& base);

}  // namespace flotilla::runs
