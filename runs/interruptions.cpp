// A place's mean time between interruptions (interruptions.h says how and why).
#include "runs/interruptions.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "db/interruptions_reads.h"
#include "engine/train/checkpoint_interval.h"

namespace flotilla::runs {
namespace {

std::string hours_text(double h) {
  char b[32];
  std::snprintf(b, sizeof b, h < 10 ? "%.1f h" : "%.0f h", h);
  return b;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(sep, pos), s.size());
    if (end > pos) out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// One node or cluster: the estimate and its words.
Mtbi one(const std::string& label, const db::PlaceExposure& e, double prior_hours,
         const std::string& prior_words) {
  Mtbi m;
  m.preemptions = e.preemptions;
  m.observed_hours = e.running_s / 3600.0;
  m.seconds = (m.observed_hours + prior_hours) * 3600.0 / static_cast<double>(e.preemptions + 1);
  const std::string seen = std::to_string(e.preemptions) +
                           (e.preemptions == 1 ? " preemption in " : " preemptions in ") +
                           hours_text(m.observed_hours);
  m.basis = label + ": " + seen + " (" + prior_words + ")";
  return m;
}

Mtbi node_mtbi(const db::Database& db, const std::string& name, double now) {
  const db::PlaceExposure e = db::node_exposure(db, name, now);
  const bool spot = e.spot;
  const double prior = spot ? kSpotPriorHours : kOnDemandPriorHours;
  const std::string words = std::string(spot              ? "spot prior"
                                        : name == "local" ? "prior"
                                                          : "on-demand prior") +
                            ": 1 per " + hours_text(prior);
  return one(name == "local" ? std::string("this machine") : "node " + name, e, prior, words);
}

}  // namespace

Mtbi place_mtbi(const db::Database& db, const std::string& place_key, double now) {
  if (place_key == "local") return node_mtbi(db, "local", now);
  if (place_key.rfind("node:", 0) == 0) return node_mtbi(db, place_key.substr(5), now);
  if (place_key.rfind("nodes:", 0) == 0) {
    const std::vector<std::string> names = split(place_key.substr(6), ',');
    if (names.empty()) return {};
    Mtbi all;
    double rate = 0;
    for (const auto& n : names) {
      const Mtbi m = node_mtbi(db, n, now);
      rate += 1.0 / m.seconds;
      all.preemptions += m.preemptions;
      all.observed_hours += m.observed_hours;
      all.basis += (all.basis.empty() ? "" : "; ") + m.basis;
    }
    all.seconds = 1.0 / rate;
    if (names.size() > 1)
      all.basis += "; any of " + std::to_string(names.size()) + " nodes interrupts the run";
    return all;
  }
  if (place_key.rfind("cluster:", 0) == 0) {
    const std::string rest = place_key.substr(8);
    const size_t slash = rest.find('/');
    const std::string name = rest.substr(0, slash);
    const std::string partition = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (name.empty()) return {};
    const db::PlaceExposure e = db::cluster_exposure(db, name, partition, now);
    const std::string label =
        "cluster " + name + (partition.empty() ? std::string() : " (partition " + partition + ")");
    return one(label, e, kOnDemandPriorHours, "cluster prior: 1 per " + hours_text(kOnDemandPriorHours));
  }
  return {};
}

bool write_mtbi_file(const std::string& run_dir, const Mtbi& mtbi) {
  if (!(mtbi.seconds > 0)) return false;
  return flotilla::write_mtbi_file(run_dir, MtbiNote{mtbi.seconds, mtbi.basis});
}

std::string mtbi_override(const Mtbi& mtbi) {
  return "checkpoint.mtbi_s=" + std::to_string(std::max<long long>(1, std::llround(mtbi.seconds)));
}

}  // namespace flotilla::runs
