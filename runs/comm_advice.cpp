// Advice on a run's communication (see comm_advice.h). The thresholds are named constants here and
// listed in docs/communication.md ("Advice"); every figure comes from comm_efficiency.h's report.
#include "runs/comm_advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_store.h"

namespace flotilla::runs {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// bucket_bdp: a ring all-reduce of a bucket of S bytes over n ranks takes 2(n-1) steps, each one
// latency L plus a chunk S/n at bandwidth B, so at most chunk/(chunk + B L) of the link is usable:
// a chunk under 4 bandwidth-delay products (B L) caps it at 80%. The rule fires when that model says
// so AND the measured share is below kShareLow; it suggests a chunk of 16 B L (94%). L is the link's
// measured one-way latency, or the per-step cost the run's own calls show when larger (the time per
// call that its bytes at B do not explain, over the ring's 2(n-1) steps: Gloo's per-call overhead).
constexpr double kBdpChunks = 4, kBdpTarget = 16, kShareLow = 0.6;
// bucket_overlap: fewer than this many buckets per step leave the last one (most of the bytes) to
// run after the backward pass; fires when the dp group's hidden share is under kHiddenLow.
constexpr double kFewBuckets = 4, kHiddenLow = 0.5, kTargetBuckets = 8;
// overlap off: fires when the dp group blocks more than this share of the step.
constexpr double kOverlapOffBlocked = 0.1;
// pipeline_bubble: the bubble above this share of the step; suggests the micro-batches that bring
// the 1F1B/GPipe bubble (pp-1)/(m+pp-1) to kBubbleTarget.
constexpr double kBubbleHigh = 0.25, kBubbleTarget = 0.2;
// straggler: a rank whose own work (step less communication) exceeds the median by this factor and
// by at least kStragglerMs.
constexpr double kStragglerFactor = 1.25, kStragglerMs = 5;
// exposed_comm: blocked communication (all groups) above this share of the step; warning above 0.5.
constexpr double kExposedShare = 0.3, kExposedWarning = 0.5;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
std::string pct(double v) { return fixed(v * 100.0, 0) + "%"; }
std::string mb(double bytes) { return fixed(bytes / 1e6, bytes >= 1e7 ? 0 : 1) + " MB"; }
std::string mib_value(double mib) { return mib == std::floor(mib) ? fixed(mib, 0) : fixed(mib, 2); }

// The smallest of 1, 2, 5 x 10^k MiB at or above `mib` (at least 1).
double nice_up(double mib) {
  double base = 1;
  while (true) {
    for (double f : {1.0, 2.0, 5.0})
      if (f * base >= mib) return f * base;
    base *= 10;
  }
}
// The largest of 1, 2, 5 x 10^k MiB at or below `mib` (at least 1).
double nice_down(double mib) {
  double best = 1;
  for (double base = 1; base <= mib; base *= 10)
    for (double f : {1.0, 2.0, 5.0})
      if (f * base <= mib) best = f * base;
  return best;
}

const GroupEfficiency* group(const CommReport& r, const std::string& name) {
  for (const auto& g : r.groups)
    if (g.group == name) return &g;
  return nullptr;
}

std::string link_text(const LinkCapacity& l) {
  if (!l.bytes_per_s) return "";
  return rate_text(*l.bytes_per_s) + " link " +
         (l.from == l.to ? l.from + " (intra-node)" : l.from + " -> " + l.to);
}

double ops_count(const GroupEfficiency& g) {
  double n = 0;
  for (const auto& o : g.ops) n += o.count;
  return n;
}

double step_ms_of(const AdviceInput& in) { return in.step_ms > 0 ? in.step_ms : in.report.step_ms; }

void bucket_rules(const AdviceInput& in, std::vector<Advice>& out) {
  const GroupEfficiency* dp = group(in.report, "dp");
  if (dp == nullptr || dp->size < 2) return;
  const double step = step_ms_of(in);
  const double bucket = in.bucket_bytes > 0 ? in.bucket_bytes : 0;
  std::optional<double> min_mib;  // the bucket bdp wants
  if (dp->crosses_nodes && bucket > 0 && dp->link.bytes_per_s && dp->link.latency_s &&
      *dp->link.latency_s > 0 && dp->share && *dp->share < kShareLow) {
    // The latency a ring step pays: the link's, or more when the measured calls say so (a
    // collective library's own per-call cost): per call, the time the bytes do not explain, over
    // the ring's 2 (n - 1) steps.
    double latency = *dp->link.latency_s;
    for (const auto& o : dp->ops)
      if ((o.op == "all_reduce" || o.op == "reduce_scatter") && o.count > 0 && o.ms > 0) {
        const double wire_s = o.bytes / o.count * bus_factor(o.op, dp->size) / *dp->link.bytes_per_s;
        const double overhead_s = o.ms / 1000.0 / o.count - wire_s;
        latency = std::max(latency, overhead_s / (2.0 * (dp->size - 1)));
        break;
      }
    const double bdp = *dp->link.bytes_per_s * latency;
    const double chunk = bucket / dp->size;
    if (chunk < kBdpChunks * bdp) {
      min_mib = nice_up(kBdpTarget * bdp * dp->size / kMiB);
      Advice a;
      a.rule = "bucket_bdp";
      a.severity = "warning";
      a.text = "dp's gradient sync reaches " + pct(*dp->share) + " of the " + link_text(dp->link) + ": its " +
               mb(bucket) + " buckets (" +
               (in.bucket_mb > 0 ? "parallel.bucket_mb = " + mib_value(in.bucket_mb) : "one per layer") +
               ") send " + mb(chunk) + " per ring step, under 4x the link's bandwidth-delay product (" +
               fixed(bdp / 1e3, 1) + " kB), so latency caps it at " + pct(chunk / (chunk + bdp)) +
               "; try parallel.bucket_mb = " + mib_value(*min_mib) + ".";
      a.figures = {
          {"share", *dp->share}, {"bucket_bytes", bucket}, {"bdp_bytes", bdp}, {"chunk_bytes", chunk}};
      a.change = "parallel.bucket_mb=" + mib_value(*min_mib);
      out.push_back(std::move(a));
    }
  }
  if (!in.overlap) {
    if (step > 0 && dp->wait_ms / step > kOverlapOffBlocked) {
      Advice a;
      a.rule = "bucket_overlap";
      a.severity = "warning";
      a.text = "parallel.overlap is off: dp's gradient sync blocks " + fixed(dp->wait_ms, 1) + " ms of the " +
               fixed(step, 1) + " ms step (" + pct(dp->wait_ms / step) +
               "); with it on, buckets go out while the backward pass runs.";
      a.figures = {{"wait_ms", dp->wait_ms}, {"step_ms", step}};
      a.change = "parallel.overlap=true";
      out.push_back(std::move(a));
    }
    return;
  }
  if (bucket <= 0 || !dp->hidden || *dp->hidden >= kHiddenLow) return;
  const double total = dp->bytes;
  const double buckets = bucket > 0 ? total / bucket : 0;
  if (in.bucket_mb <= 0 || buckets >= kFewBuckets) return;  // per-layer buckets are as small as they go
  double want = nice_down(total / kTargetBuckets / kMiB);
  if (min_mib) want = std::max(want, *min_mib);
  if (want >= in.bucket_mb) return;  // nothing smaller the link allows
  Advice a;
  a.rule = "bucket_overlap";
  a.severity = "warning";
  a.text = "dp's " + mb(total) + " of gradients go in " + fixed(buckets, 1) +
           " buckets of parallel.bucket_mb = " + mib_value(in.bucket_mb) + ", so only " + pct(*dp->hidden) +
           " of its sync overlaps the backward pass; try parallel.bucket_mb = " + mib_value(want) +
           " (about " + fixed(total / (want * kMiB), 0) + " buckets).";
  a.figures = {{"hidden", *dp->hidden}, {"buckets", buckets}, {"bucket_bytes", bucket}, {"bytes", total}};
  a.change = "parallel.bucket_mb=" + mib_value(want);
  out.push_back(std::move(a));
}

void tp_rule(const AdviceInput& in, std::vector<Advice>& out) {
  const GroupEfficiency* tp = group(in.report, "tp");
  if (tp == nullptr || !tp->crosses_nodes) return;
  const double step = step_ms_of(in);
  int per_node = 0;  // ranks on the first node
  for (const auto& n : in.rank_nodes) per_node += n == in.rank_nodes.front() ? 1 : 0;
  int t = 1;
  for (int c = std::min(per_node, in.tp); c >= 1; --c)
    if (in.tp % c == 0) {
      t = c;
      break;
    }
  Advice a;
  a.rule = "tp_across_nodes";
  a.severity = "warning";
  a.text = "the tensor-parallel group spans nodes " +
           [&] {
             std::string s;
             for (const auto& n : tp->nodes) s += (s.empty() ? "" : ", ") + n;
             return s;
           }() +
           ": its " + fixed(ops_count(*tp), 0) + " operations per step (" + mb(tp->bytes) + ") take " +
           fixed(tp->ms, 1) + " ms" + (step > 0 ? " of the " + fixed(step, 1) + " ms step" : "") +
           (tp->link.bytes_per_s ? " over the " + link_text(tp->link) : "") +
           "; keep tp inside a node (parallel.tp <= ranks per node" +
           (per_node > 0 ? " = " + std::to_string(per_node) : "") + ") and spread dp across nodes.";
  a.figures = {{"tp_ms", tp->ms}, {"tp_bytes", tp->bytes}, {"step_ms", step}};
  if (tp->link.bytes_per_s) a.figures.push_back({"link_bytes_per_s", *tp->link.bytes_per_s});
  if (t < in.tp)
    a.change = "parallel.tp=" + std::to_string(t) + " parallel.dp=" + std::to_string(in.dp * in.tp / t);
  out.push_back(std::move(a));
}

void bubble_rule(const AdviceInput& in, std::vector<Advice>& out) {
  if (in.pp < 2) return;
  const int m = std::max(1, in.micro_batches);
  const double step = step_ms_of(in);
  const double model = static_cast<double>(in.pp - 1) / (m + in.pp - 1);
  const bool measured = in.bubble_ms > 0 && step > 0;
  const double share = measured ? in.bubble_ms / step : model;
  if (share <= kBubbleHigh) return;
  // (pp-1)/(m+pp-1) <= target  <=>  m >= (pp-1)(1-target)/target
  int want = static_cast<int>(std::ceil((in.pp - 1) * (1 - kBubbleTarget) / kBubbleTarget - 1e-9));
  want = std::max(want, 2 * m);
  Advice a;
  a.rule = "pipeline_bubble";
  a.severity = share > 0.4 ? "warning" : "info";
  a.text = "the pipeline bubble is " + pct(share) + " of the step" +
           (measured ? " (" + fixed(in.bubble_ms, 1) + " of " + fixed(step, 1) + " ms)"
                     : " by the schedule's formula") +
           " with pp = " + std::to_string(in.pp) + " and " + std::to_string(m) + " micro-batches; with " +
           std::to_string(want) + " it would be about " +
           pct(static_cast<double>(in.pp - 1) / (want + in.pp - 1)) +
           ": try parallel.micro_batches = " + std::to_string(want) +
           " (it must divide the accumulation steps).";
  a.figures = {{"bubble_share", share}, {"micro_batches", m}, {"pp", in.pp}};
  a.change = "parallel.micro_batches=" + std::to_string(want);
  out.push_back(std::move(a));
}

void straggler_rule(const AdviceInput& in, std::vector<Advice>& out) {
  if (in.rank_step_ms.size() < 2) return;
  std::vector<double> sorted = in.rank_step_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  const auto slow = std::max_element(in.rank_step_ms.begin(), in.rank_step_ms.end());
  const size_t rank = static_cast<size_t>(slow - in.rank_step_ms.begin());
  if (median <= 0 || *slow < kStragglerFactor * median || *slow - median < kStragglerMs) return;
  const std::string node = rank < in.rank_nodes.size() ? " on " + in.rank_nodes[rank] : "";
  Advice a;
  a.rule = "straggler";
  a.severity = "warning";
  a.text = "rank " + std::to_string(rank) + node + " works " + fixed(*slow, 1) +
           " ms per step against a median of " + fixed(median, 1) + " ms (" + pct(*slow / median - 1) +
           " slower); every other rank waits for it at each collective: check that node's load, clocks and "
           "device.";
  a.figures = {{"rank", static_cast<double>(rank)}, {"rank_ms", *slow}, {"median_ms", median}};
  out.push_back(std::move(a));
}

void exposed_rule(const AdviceInput& in, std::vector<Advice>& out) {
  const double step = step_ms_of(in);
  if (step <= 0 || in.report.groups.empty()) return;
  double blocked = 0;
  const GroupEfficiency* worst = nullptr;
  for (const auto& g : in.report.groups) {
    blocked += g.wait_ms;
    if (worst == nullptr || g.wait_ms > worst->wait_ms) worst = &g;
  }
  const double share = blocked / step;
  if (share <= kExposedShare || worst == nullptr) return;
  const OpEfficiency* op = worst->ops.empty() ? nullptr : &worst->ops.front();
  for (const auto& o : worst->ops)
    if (o.wait_ms > op->wait_ms) op = &o;
  Advice a;
  a.rule = "exposed_comm";
  a.severity = share > kExposedWarning ? "warning" : "info";
  a.text = "communication blocks " + fixed(blocked, 1) + " ms of the " + fixed(step, 1) + " ms step (" +
           pct(share) + "), most in " + worst->group + "'s " + (op ? op->op : std::string("operations")) +
           " (" + fixed(worst->wait_ms, 1) + " ms" +
           (worst->share ? ", " + pct(*worst->share) + " of the " + link_text(worst->link) : "") + ")";
  if (worst->group == "dp" && !in.overlap) {
    a.text += "; parallel.overlap is off.";
    a.change = "parallel.overlap=true";
  } else if (worst->share && *worst->share >= kShareLow) {
    a.text +=
        ": the link itself is the limit; fewer nodes, a faster link or fewer bytes (a larger batch per step) "
        "help.";
  } else {
    a.text += ".";
  }
  a.figures = {{"blocked_ms", blocked}, {"step_ms", step}, {"share", share}};
  out.push_back(std::move(a));
}

// Means over the last `n` rows of each name (NaN where none).
std::vector<double> recent_means(const db::Database& db, int64_t run_id,
                                 const std::vector<std::string>& names, int64_t up_to, size_t n = 20) {
  std::vector<double> sum(names.size(), 0), count(names.size(), 0);
  const auto rows = db::step_rows(db, run_id, names, up_to);
  for (size_t i = rows.size() > n ? rows.size() - n : 0; i < rows.size(); ++i)
    for (size_t k = 0; k < names.size() && k < rows[i].values.size(); ++k)
      if (std::isfinite(rows[i].values[k])) {
        sum[k] += rows[i].values[k];
        count[k] += 1;
      }
  std::vector<double> out(names.size(), std::nan(""));
  for (size_t k = 0; k < names.size(); ++k)
    if (count[k] > 0) out[k] = sum[k] / count[k];
  return out;
}

}  // namespace

std::vector<Advice> advise(const AdviceInput& input) {
  std::vector<Advice> out;
  bucket_rules(input, out);
  tp_rule(input, out);
  bubble_rule(input, out);
  straggler_rule(input, out);
  exposed_rule(input, out);
  std::stable_sort(out.begin(), out.end(), [](const Advice& a, const Advice& b) {
    return (a.severity == "warning") > (b.severity == "warning");
  });
  return out;
}

std::vector<Advice> run_advice(const db::Database& db, int64_t run_id) {
  AdviceInput in;
  in.report = comm_report(db, run_id);
  const db::Run run = db::get_run(db, run_id);
  const auto j = nlohmann::json::parse(run.config_json, nullptr, false);
  if (j.is_object() && j.contains("parallel") && j["parallel"].is_object()) {
    const auto& p = j["parallel"];
    auto integer = [&](const char* k, int fallback) {
      return p.contains(k) && p[k].is_number_integer() ? p[k].get<int>() : fallback;
    };
    in.dp = std::max(1, integer("dp", 1));
    in.tp = std::max(1, integer("tp", 1));
    in.pp = std::max(1, integer("pp", 1));
    in.zero = integer("zero", 0);
    in.micro_batches = std::max(1, integer("micro_batches", 1));
    if (p.contains("bucket_mb") && p["bucket_mb"].is_number()) in.bucket_mb = p["bucket_mb"].get<double>();
    if (p.contains("overlap") && p["overlap"].is_boolean()) in.overlap = p["overlap"].get<bool>();
  }
  if (const GroupEfficiency* dp = group(in.report, "dp")) {
    for (const char* name : {"all_reduce", "reduce_scatter"}) {
      for (const auto& o : dp->ops)
        if (o.op == name && o.count > 0 && in.bucket_bytes <= 0) in.bucket_bytes = o.bytes / o.count;
    }
  }
  const int world = in.dp * in.tp * in.pp;
  const int64_t up_to = in.report.step >= 0 ? in.report.step : INT64_MAX;
  std::vector<std::string> names = {"step_ms", "time_ms.bubble"};
  if (world > 1)
    for (int r = 0; r < world; ++r) {
      names.push_back("ranks." + std::to_string(r) + ".step_ms");
      names.push_back("ranks." + std::to_string(r) + ".comm_ms");
    }
  const auto means = recent_means(db, run_id, names, up_to);
  if (std::isfinite(means[0])) in.step_ms = means[0];
  if (in.report.step_ms > 0) in.step_ms = in.report.step_ms;
  if (std::isfinite(means[1])) in.bubble_ms = means[1];
  // A synchronous step ends together on every rank, so a straggler shows in its own work: the step
  // less the communication it waited in.
  bool all = world > 1;
  for (int r = 0; r < world && all; ++r) {
    const double step = means[2 + 2 * r], comm = means[3 + 2 * r];
    if (!std::isfinite(step))
      all = false;
    else
      in.rank_step_ms.push_back(step - (std::isfinite(comm) ? comm : 0));
  }
  if (!all) in.rank_step_ms.clear();
  const auto nodes = db::list_run_nodes(db, run_id);
  if (!nodes.empty()) {
    const int64_t per = std::max<int64_t>(1, nodes.front().devices);
    for (int r = 0; r < world; ++r)
      in.rank_nodes.push_back(nodes[std::min<size_t>(static_cast<size_t>(r / per), nodes.size() - 1)].name);
  }
  return advise(in);
}

std::string advice_text(const std::vector<Advice>& advice) {
  if (advice.empty()) return "";
  std::string out = "advice:\n";
  for (const auto& a : advice) {
    out += "  - " + a.text;
    if (!a.change.empty()) {
      std::string sets;
      size_t at = 0;
      while (at < a.change.size()) {
        const size_t sp = a.change.find(' ', at);
        sets += (sets.empty() ? "" : " ") + std::string("--set ") +
                a.change.substr(at, sp == std::string::npos ? sp : sp - at);
        if (sp == std::string::npos) break;
        at = sp + 1;
      }
      out += " (try: " + sets + ")";
    }
    out += "\n";
  }
  return out;
}

}  // namespace flotilla::runs
