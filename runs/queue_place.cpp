// Place keys, their words, the Placement a key starts, and the decision JSON (see queue_place.h).
#include "runs/queue_place.h"

#include "runs/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "db/clusters.h"
#include "db/errors.h"
#include "db/nodes.h"
#include "engine/core/error.h"
#include "remote/node_fields.h"
#include "remote/slurm_script.h"
#include "remote/validate.h"

namespace flotilla::runs {
namespace {

[[noreturn]] void bad_key(std::string_view text, const std::string& why) {
  throw Error(ExitCode::kUsage,
              "place '" + remote::printable(text) + "': " + why + " (accepted: " + place_key_forms() + ")");
}

std::string check_node(std::string_view text, std::string_view name) {
  if (name.empty()) bad_key(text, "a node name is empty");
  if (const std::string why = remote::validate_node_name(name); !why.empty()) bad_key(text, why);
  return std::string(name);
}

}  // namespace

const char* place_key_forms() { return "local, node:NAME, nodes:A,B, cluster:NAME[/PARTITION]"; }

std::string PlaceKey::key() const {
  switch (kind) {
    case PlaceKeyKind::kLocal:
      return "local";
    case PlaceKeyKind::kNode:
      return "node:" + (nodes.empty() ? std::string() : nodes[0]);
    case PlaceKeyKind::kNodes: {
      std::string s = "nodes:";
      for (size_t i = 0; i < nodes.size(); ++i) s += (i ? "," : "") + nodes[i];
      return s;
    }
    case PlaceKeyKind::kCluster:
      return "cluster:" + cluster + (partition.empty() ? "" : "/" + partition);
  }
  return "";
}

PlaceKey parse_place_key(std::string_view text) {
  // Length first, so a huge value is not copied into a message (printable() cuts at 60 anyway).
  if (text.size() > 1024) bad_key(text.substr(0, 60), "longer than 1024 characters");
  PlaceKey k;
  if (text == "local") return k;
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) bad_key(text, "not a place key");
  const std::string_view kind = text.substr(0, colon), rest = text.substr(colon + 1);
  if (kind == "node") {
    k.kind = PlaceKeyKind::kNode;
    k.nodes.push_back(check_node(text, rest));
  } else if (kind == "nodes") {
    k.kind = PlaceKeyKind::kNodes;
    size_t at = 0;
    while (true) {
      const size_t comma = rest.find(',', at);
      const std::string name =
          check_node(text, rest.substr(at, comma == std::string_view::npos ? rest.npos : comma - at));
      if (std::find(k.nodes.begin(), k.nodes.end(), name) != k.nodes.end())
        bad_key(text, "node " + name + " is named twice");
      k.nodes.push_back(name);
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    if (k.nodes.size() == 1) k.kind = PlaceKeyKind::kNode;  // "nodes:a" is node a
  } else if (kind == "cluster") {
    k.kind = PlaceKeyKind::kCluster;
    const size_t slash = rest.find('/');
    const std::string_view name = rest.substr(0, slash);
    if (const std::string why = remote::validate_slurm_name("cluster", name); !why.empty())
      bad_key(text, why);
    k.cluster = std::string(name);
    if (slash != std::string_view::npos) {
      const std::string_view part = rest.substr(slash + 1);
      if (const std::string why = remote::validate_slurm_name("partition", part); !why.empty())
        bad_key(text, why);
      k.partition = std::string(part);
    }
  } else {
    bad_key(text, "unknown kind '" + remote::printable(kind) + "'");
  }
  return k;
}

std::string place_key_text(const PlaceKey& key) {
  switch (key.kind) {
    case PlaceKeyKind::kLocal:
      return "this machine";
    case PlaceKeyKind::kNode:
      return "node " + (key.nodes.empty() ? std::string() : key.nodes[0]);
    case PlaceKeyKind::kNodes: {
      std::string s = "nodes ";
      for (size_t i = 0; i < key.nodes.size(); ++i) s += (i ? ", " : "") + key.nodes[i];
      return s;
    }
    case PlaceKeyKind::kCluster:
      return "cluster " + key.cluster + (key.partition.empty() ? "" : " (partition " + key.partition + ")");
  }
  return "";
}

bool place_allows(const PlaceKey& allowed, const PlaceKey& offer) {
  if (allowed.kind == PlaceKeyKind::kCluster && offer.kind == PlaceKeyKind::kCluster)
    return allowed.cluster == offer.cluster &&
           (allowed.partition.empty() || allowed.partition == offer.partition);
  return allowed.key() == offer.key();
}

std::string run_place_key(const std::string& target, const std::string& slurm_partition) {
  if (target.empty() || target == "local") return "local";
  if (target.rfind("slurm:", 0) == 0)
    return "cluster:" + target.substr(6) + (slurm_partition.empty() ? "" : "/" + slurm_partition);
  const size_t n = static_cast<size_t>(std::count(target.begin(), target.end(), ',')) + 1;
  return (n > 1 ? "nodes:" : "node:") + target;
}

std::string slurm_time_limit(double seconds) {
  double s = std::isfinite(seconds) && seconds > 0 ? 1.5 * seconds + 600 : 3600;
  s = std::clamp(s, 900.0, 7 * 86400.0);
  const auto total = static_cast<int64_t>(std::ceil(s / 60.0)) * 60;  // whole minutes
  const int64_t d = total / 86400, h = total % 86400 / 3600, m = total % 3600 / 60;
  char buf[32];
  if (d > 0)
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:00", static_cast<long long>(d),
                  static_cast<long long>(h), static_cast<long long>(m));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld:00", static_cast<long long>(h), static_cast<long long>(m));
  return buf;
}

Placement placement_for(const PlaceKey& key, const db::Database& db, const PlaceShape& shape) {
  const int ranks = std::max(1, shape.ranks);
  switch (key.kind) {
    case PlaceKeyKind::kLocal:
      return Placement::here();
    case PlaceKeyKind::kNode:
    case PlaceKeyKind::kNodes: {
      for (const auto& n : key.nodes) (void)db::get_ssh_node(db, n);  // kNotFound names it
      Placement p = Placement::on_nodes(key.nodes);
      const int per = ranks / static_cast<int>(key.nodes.size());
      if (per > 0 && per * static_cast<int>(key.nodes.size()) == ranks) p.nproc_per_node = per;
      return p;
    }
    case PlaceKeyKind::kCluster: {
      const db::SlurmCluster c = db::get_cluster(db, key.cluster);
      Placement p = Placement::on_cluster(c.name);
      p.partition = key.partition;
      p.slurm_nodes = 1;
      p.tasks_per_node = ranks;
      p.gpus_per_node = shape.gpus ? ranks : 0;
      p.time_limit = slurm_time_limit(shape.predicted_s);
      p.auto_resume = true;
      return p;
    }
  }
  return Placement::here();
}

Placement decision_placement(const Decision& decision, const db::Database& db) {
  const PlaceEstimate* e = decision.chosen_estimate();
  if (decision.chosen.empty() || !e) throw Error(ExitCode::kUsage, "the placement decision chose no place");
  PlaceShape shape;
  shape.ranks = std::max(1, e->devices);
  shape.gpus = e->gpus;
  shape.predicted_s = std::isfinite(e->seconds) ? e->seconds - e->wait_s : 0;
  return placement_for(parse_place_key(decision.chosen), db, shape);
}

std::string place_words(const std::string& key) {
  try {
    return place_key_text(parse_place_key(key));
  } catch (const std::exception&) {
    return key;
  }
}

// ---- words -----------------------------------------------------------------------------------------

std::string duration_words(double seconds) {
  if (!std::isfinite(seconds)) return "unknown time";
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lld min", static_cast<long long>((s + 30) / 60));
  } else if (s < 48 * 3600) {
    const int64_t m = (s + 30) / 60;
    if (m % 60)
      std::snprintf(buf, sizeof buf, "%lld h %lld min", static_cast<long long>(m / 60),
                    static_cast<long long>(m % 60));
    else
      std::snprintf(buf, sizeof buf, "%lld h", static_cast<long long>(m / 60));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f days", static_cast<double>(s) / 86400.0);
  }
  return buf;
}

std::string usd_words(double usd) {
  if (usd == 0) return "$0";
  return usd_text(usd);  // the money format of every page (runs/figures.h): "$1.92", "$0.0042", "$0.000031"
}

std::string time_words(double unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%a %H:%M", &tm);
  return buf;
}

// ---- decision JSON ------------------------------------------------------------------------------

const PlaceEstimate* Decision::chosen_estimate() const {
  for (const auto& p : places)
    if (p.key == chosen) return &p;
  return nullptr;
}

std::string decision_json(const Decision& d) {
  nlohmann::json j;
  j["time"] = d.time;
  j["start"] = d.start;
  j["waits"] = d.waits;
  j["chosen"] = d.chosen;
  j["layout"] = d.layout.text();
  j["words"] = d.words;
  nlohmann::json places = nlohmann::json::array();
  for (const auto& p : d.places) {
    nlohmann::json o;
    o["key"] = p.key;
    o["label"] = p.label;
    o["fits"] = p.fits;
    o["why_not"] = p.why_not;
    o["layout"] = p.layout_text;
    o["devices"] = p.devices;
    o["gpus"] = p.gpus;
    o["tokens_per_s"] = p.tokens_per_s;
    o["basis"] = p.basis;
    o["wait_s"] = p.wait_known ? nlohmann::json(p.wait_s) : nlohmann::json(nullptr);
    o["seconds"] = std::isfinite(p.seconds) ? nlohmann::json(p.seconds) : nlohmann::json(nullptr);
    o["priced"] = p.priced;
    o["usd"] = p.priced || p.key == "local" ? nlohmann::json(p.usd) : nlohmann::json(nullptr);
    o["usd_per_hour"] =
        p.priced || p.key == "local" ? nlohmann::json(p.usd_per_hour) : nlohmann::json(nullptr);
    o["meets_deadline"] = p.meets_deadline;
    o["within_budget"] = p.within_budget;
    o["clause"] = p.clause;
    places.push_back(std::move(o));
  }
  j["places"] = std::move(places);
  return j.dump();
}

namespace {

template <typename T>
T get_or(const nlohmann::json& o, const char* key, T fallback) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

// "dp=2 tp=1 pp=1" back to a Layout (unknown words ignored).
Layout layout_of(const std::string& text) {
  Layout l;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    const size_t eq = word.find('=');
    if (eq != std::string::npos) {
      const std::string k = word.substr(0, eq);
      int v = 0;
      try {
        v = std::stoi(word.substr(eq + 1));
      } catch (const std::exception&) {
        v = 0;
      }
      if (v > 0 || (k == "zero" && v == 0)) {
        if (k == "dp") l.dp = v;
        if (k == "tp") l.tp = v;
        if (k == "pp") l.pp = v;
        if (k == "zero") l.zero = v;
      }
    }
    at = end + 1;
  }
  return l;
}

}  // namespace

Decision parse_decision_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) throw Error(ExitCode::kUsage, "a placement decision is not a JSON object");
  Decision d;
  d.time = get_or(j, "time", 0.0);
  d.start = get_or(j, "start", false);
  d.waits = get_or(j, "waits", false);
  d.chosen = get_or(j, "chosen", std::string());
  d.layout = layout_of(get_or(j, "layout", std::string()));
  d.words = get_or(j, "words", std::string());
  if (const auto it = j.find("places"); it != j.end() && it->is_array()) {
    for (const auto& o : *it) {
      if (!o.is_object()) continue;
      PlaceEstimate p;
      p.key = get_or(o, "key", std::string());
      p.label = get_or(o, "label", std::string());
      p.fits = get_or(o, "fits", false);
      p.why_not = get_or(o, "why_not", std::string());
      p.layout_text = get_or(o, "layout", std::string());
      p.layout = layout_of(p.layout_text);
      p.devices = get_or(o, "devices", 0);
      p.gpus = get_or(o, "gpus", false);
      p.tokens_per_s = get_or(o, "tokens_per_s", 0.0);
      p.basis = get_or(o, "basis", std::string());
      p.wait_known = o.contains("wait_s") && !o["wait_s"].is_null();
      p.wait_s = get_or(o, "wait_s", 0.0);
      p.seconds = get_or(o, "seconds", std::nan(""));
      p.priced = get_or(o, "priced", o.contains("usd") && !o["usd"].is_null());
      p.usd = get_or(o, "usd", 0.0);
      p.usd_per_hour = get_or(o, "usd_per_hour", 0.0);
      p.meets_deadline = get_or(o, "meets_deadline", true);
      p.within_budget = get_or(o, "within_budget", true);
      p.clause = get_or(o, "clause", std::string());
      d.places.push_back(std::move(p));
    }
  }
  return d;
}

}  // namespace flotilla::runs
