// A run's communication efficiency (see comm_efficiency.h).
#include "runs/comm_efficiency.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "db/links.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_store.h"

namespace flotilla::runs {
namespace {

constexpr const char* kPrefix = "comm/";

struct Layout {
  int dp = 1, tp = 1, pp = 1;
};

Layout layout_of(const db::Run& run) {
  Layout l;
  const auto j = nlohmann::json::parse(run.config_json, nullptr, false);
  if (j.is_object() && j.contains("parallel") && j["parallel"].is_object()) {
    const auto& p = j["parallel"];
    auto get = [&](const char* k) {
      return p.contains(k) && p[k].is_number_integer() ? std::max(1, p[k].get<int>()) : 1;
    };
    l.dp = get("dp");
    l.tp = get("tp");
    l.pp = get("pp");
  }
  return l;
}

// Rank 0's members of `group` under the rank grid's order (TP innermost, then DP, then PP).
std::vector<int> members_of(const std::string& group, const Layout& l, int world) {
  std::vector<int> m;
  if (group == "tp") {
    for (int i = 0; i < l.tp; ++i) m.push_back(i);
  } else if (group == "dp") {
    for (int i = 0; i < l.dp; ++i) m.push_back(i * l.tp);
  } else if (group == "pp") {
    for (int i = 0; i < l.pp; ++i) m.push_back(i * l.dp * l.tp);
  } else if (group == "tied" || group == "embed") {  // the first and the last pipeline stage's rank 0
    // (the worker's group for the tied embedding's gradient when pp > 2 is named "embed")
    m = {0, (l.pp - 1) * l.dp * l.tp};
  } else {  // the world, or a group this build does not know: every rank (the most it can cross)
    for (int i = 0; i < world; ++i) m.push_back(i);
  }
  return m;
}

struct Names {
  std::string group, op, field;  // op empty for "comm/<g>/size"
};

// "comm/dp/all_reduce/bytes" -> {dp, all_reduce, bytes}; "comm/dp/size" -> {dp, "", size}.
std::optional<Names> split(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  std::vector<std::string> parts;
  size_t at = std::string(kPrefix).size();
  while (true) {
    const size_t slash = name.find('/', at);
    parts.push_back(name.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  if (parts.size() == 2) return Names{parts[0], "", parts[1]};
  if (parts.size() == 3) return Names{parts[0], parts[1], parts[2]};
  return std::nullopt;
}

struct NodeSpan {
  std::vector<db::RunNodeRef> nodes;  // launch order
  int64_t per_node = 1;
  const db::RunNodeRef* node_of(int rank) const {
    if (nodes.empty()) return nullptr;
    const size_t i = static_cast<size_t>(rank / std::max<int64_t>(1, per_node));
    return i < nodes.size() ? &nodes[i] : &nodes.back();
  }
};

struct Links {
  std::vector<db::NodeLink> rows;
  bool at_start = false;
  const db::NodeLink* find(int64_t from, int64_t to) const {
    for (const auto& l : rows)
      if (l.from_node == from && l.to_node == to && l.bytes_per_s) return &l;
    return nullptr;
  }
};

LinkCapacity capacity_of(const std::vector<const db::RunNodeRef*>& nodes, const Links& links) {
  LinkCapacity c;
  const std::string where =
      links.at_start ? "measured at the run's start" : "newest measurement (flotilla nodes links)";
  std::vector<std::string> missing;
  auto consider = [&](const db::RunNodeRef& a, const db::RunNodeRef& b) {
    const db::NodeLink* l = links.find(a.node_id, b.node_id);
    if (l == nullptr) {
      missing.push_back(a.node_id == b.node_id ? a.name + " (intra-node)" : a.name + " -> " + b.name);
      return;
    }
    if (!c.bytes_per_s || *l->bytes_per_s < *c.bytes_per_s) {
      c.bytes_per_s = l->bytes_per_s;
      c.latency_s = l->latency_s;
      c.from = a.name;
      c.to = b.name;
    }
  };
  if (nodes.size() == 1) {
    consider(*nodes[0], *nodes[0]);
  } else {
    for (const auto* a : nodes)
      for (const auto* b : nodes)
        if (a != b) consider(*a, *b);
  }
  if (!missing.empty()) {
    // A capacity from part of the links could be too high: report none rather than a wrong share.
    std::string names;
    for (const auto* n : nodes) names += (names.empty() ? "" : ",") + n->name;
    c = LinkCapacity{};
    c.source = "no link measured for " + missing.front() +
               (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more" : "") +
               ": flotilla nodes links " + names;
  } else if (nodes.empty()) {
    c.source = "the run's nodes are not known";
  } else {
    c.source = where;
  }
  return c;
}

struct Context {
  Layout layout;
  NodeSpan span;
  Links links;
  int world = 1;
};

Context context_of(const db::Database& db, int64_t run_id) {
  Context cx;
  const db::Run run = db::get_run(db, run_id);
  cx.layout = layout_of(run);
  cx.world = cx.layout.dp * cx.layout.tp * cx.layout.pp;
  cx.span.nodes = db::list_run_nodes(db, run_id);
  if (!cx.span.nodes.empty()) cx.span.per_node = std::max<int64_t>(1, cx.span.nodes.front().devices);
  std::vector<int64_t> ids;
  for (const auto& n : cx.span.nodes) ids.push_back(n.node_id);
  if (auto m = db::run_link_measurement(db, run_id)) {
    cx.links.rows = m->links;
    cx.links.at_start = true;
  }
  // Pairs the run's own measurement lacks come from the newest figures stored.
  for (auto& l : db::latest_links(db, ids))
    if (!cx.links.find(l.from_node, l.to_node) && l.bytes_per_s) cx.links.rows.push_back(l);
  return cx;
}

GroupEfficiency group_of(const std::string& name, int size,
                         const std::map<std::string, std::map<std::string, double>>& ops, const Context& cx) {
  GroupEfficiency g;
  g.group = name;
  g.size = size;
  std::vector<const db::RunNodeRef*> nodes;
  for (int r : members_of(name, cx.layout, cx.world)) {
    const db::RunNodeRef* n = cx.span.node_of(r);
    if (n != nullptr && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  for (const auto* n : nodes) g.nodes.push_back(n->name);
  g.crosses_nodes = nodes.size() > 1;
  g.link = capacity_of(nodes, cx.links);
  double moved = 0, moving_ms = 0;          // ops whose messages are large enough to judge
  double moved_all = 0, moving_ms_all = 0;  // every op that moves data
  for (const auto& [op, f] : ops) {
    OpEfficiency o;
    o.op = op;
    auto get = [&](const char* k) {
      auto it = f.find(k);
      return it == f.end() || !std::isfinite(it->second) ? 0.0 : it->second;
    };
    o.count = get("count");
    o.bytes = get("bytes");
    o.ms = get("ms");
    o.wait_ms = get("wait_ms");
    if (o.count <= 0) continue;
    const double factor = bus_factor(op, size);
    if (o.ms > 0 && factor > 0 && o.bytes > 0) {
      o.busbw = o.bytes * factor / (o.ms / 1000.0);
      moved_all += o.bytes * factor;
      moving_ms_all += o.ms;
      if (o.bytes / o.count >= kShareMinMessageBytes) {
        moved += o.bytes * factor;
        moving_ms += o.ms;
        if (g.link.bytes_per_s) o.share = *o.busbw / *g.link.bytes_per_s;
      }
    }
    g.bytes += o.bytes;
    g.ms += o.ms;
    g.wait_ms += o.wait_ms;
    g.ops.push_back(o);
  }
  std::sort(g.ops.begin(), g.ops.end(),
            [](const OpEfficiency& a, const OpEfficiency& b) { return a.bytes > b.bytes; });
  if (moving_ms > 0) {
    g.busbw = moved / (moving_ms / 1000.0);
    if (g.link.bytes_per_s) g.share = *g.busbw / *g.link.bytes_per_s;
  } else if (moving_ms_all > 0) {
    g.busbw = moved_all / (moving_ms_all / 1000.0);  // only small messages: a rate, but no share
  }
  if (g.ms > 0) g.hidden = std::clamp(1.0 - g.wait_ms / g.ms, 0.0, 1.0);
  return g;
}

int group_rank(const std::string& g) { return g == "dp" ? 0 : g == "tp" ? 1 : g == "pp" ? 2 : 3; }

// Every comm/ name of the run, and its rows up to `up_to`.
struct Rows {
  std::vector<std::string> names;
  std::vector<db::StepRow> rows;  // only rows with comm/step_ms
};

Rows comm_rows(const db::Database& db, int64_t run_id, int64_t up_to) {
  Rows r;
  r.names.push_back("comm/step_ms");
  for (const auto& n : db::metric_names(db, run_id))
    if (n.rfind(kPrefix, 0) == 0 && n != "comm/step_ms") r.names.push_back(n);
  if (r.names.size() == 1) return r;
  for (auto& row : db::step_rows(db, run_id, r.names, up_to))
    if (!row.values.empty() && std::isfinite(row.values[0])) r.rows.push_back(std::move(row));
  return r;
}

std::vector<GroupEfficiency> groups_at(const Rows& r, const db::StepRow& row, const Context& cx) {
  std::map<std::string, std::map<std::string, std::map<std::string, double>>> ops;  // group -> op -> field
  std::map<std::string, int> sizes;
  for (size_t i = 1; i < r.names.size(); ++i) {
    const double v = row.values[i];
    if (!std::isfinite(v)) continue;
    const auto n = split(r.names[i]);
    if (!n) continue;
    if (n->op.empty()) {
      if (n->field == "size") sizes[n->group] = static_cast<int>(v);
    } else {
      ops[n->group][n->op][n->field] = v;
    }
  }
  std::vector<GroupEfficiency> out;
  for (const auto& [group, o] : ops) {
    const int size = sizes.count(group) ? sizes[group] : 1;
    if (size < 2) continue;
    GroupEfficiency g = group_of(group, size, o, cx);
    if (!g.ops.empty()) out.push_back(std::move(g));
  }
  std::stable_sort(out.begin(), out.end(), [](const GroupEfficiency& a, const GroupEfficiency& b) {
    return group_rank(a.group) < group_rank(b.group);
  });
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string share_text(const std::optional<double>& v) { return v ? fixed(*v * 100.0, 0) + "%" : "-"; }

CommHeadline comm_headline(const CommReport& report) {
  CommHeadline h;
  double ms = 0, wait_ms = 0;
  for (const GroupEfficiency& g : report.groups) {
    if (g.group == "dp") h.dp_share = g.share;
    ms += g.ms;
    wait_ms += g.wait_ms;
  }
  if (ms > 0) h.hidden = std::clamp(1.0 - wait_ms / ms, 0.0, 1.0);
  return h;
}

double bus_factor(const std::string& op, int n) {
  if (n < 2) return 0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather") return static_cast<double>(n - 1) / n;
  if (op == "broadcast" || op == "send_recv") return 1.0;
  return 0;
}

std::string rate_text(double bytes_per_s) {
  if (bytes_per_s >= 1e9) return fixed(bytes_per_s / 1e9, 2) + " GB/s";
  if (bytes_per_s >= 1e6) return fixed(bytes_per_s / 1e6, bytes_per_s >= 1e8 ? 0 : 1) + " MB/s";
  return fixed(bytes_per_s / 1e3, 0) + " kB/s";
}

CommReport comm_report(const db::Database& db, int64_t run_id, std::optional<int64_t> step) {
  CommReport rep;
  const Context cx = context_of(db, run_id);
  if (cx.world < 2) {
    rep.note = "a one-rank run does not communicate";
    return rep;
  }
  const Rows r = comm_rows(db, run_id, step.value_or(INT64_MAX));
  if (r.rows.empty()) {
    rep.note = "no communication figures stored yet (they come with the worker's comm records)";
    return rep;
  }
  const db::StepRow& row = r.rows.back();
  rep.step = row.step;
  rep.step_ms = row.values[0];
  rep.groups = groups_at(r, row, cx);
  if (rep.groups.empty()) rep.note = "no process group of more than one rank communicated";
  return rep;
}

std::vector<CommPoint> comm_series(const db::Database& db, int64_t run_id, const std::string& group) {
  std::vector<CommPoint> out;
  const Context cx = context_of(db, run_id);
  const Rows r = comm_rows(db, run_id, INT64_MAX);
  for (const auto& row : r.rows) {
    for (const auto& g : groups_at(r, row, cx)) {
      if (g.group != group) continue;
      CommPoint p;
      p.step = row.step;
      p.time = row.time;
      p.ms = g.ms;
      p.wait_ms = g.wait_ms;
      p.bytes = g.bytes;
      p.busbw = g.busbw;
      p.share = g.share;
      p.hidden = g.hidden;
      out.push_back(p);
    }
  }
  return out;
}

std::string comm_table_text(const CommReport& report) {
  if (report.empty())
    return "communication: " + (report.note.empty() ? std::string("none") : report.note) + "\n";
  std::string out = "communication at step " + std::to_string(report.step) + " (per step of " +
                    fixed(report.step_ms, 1) + " ms; link = the slowest link the group crosses):\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-6s %-15s %9s %9s %12s  %-28s %6s %7s\n", "group", "op", "MB/step",
                "ms/step", "busbw", "link", "share", "hidden");
  out += line;
  for (const auto& g : report.groups) {
    std::string link = "-";
    if (g.link.bytes_per_s)
      link = rate_text(*g.link.bytes_per_s) + " (" +
             (g.link.from == g.link.to ? g.link.from + ", intra" : g.link.from + " -> " + g.link.to) + ")";
    bool first = true;
    for (const auto& o : g.ops) {
      std::snprintf(line, sizeof line, "  %-6s %-15s %9s %9s %12s  %-28s %6s %7s\n",
                    first ? g.group.c_str() : "", o.op.c_str(), fixed(o.bytes / 1e6, 2).c_str(),
                    fixed(o.ms, 1).c_str(), o.busbw ? rate_text(*o.busbw).c_str() : "-",
                    first ? link.c_str() : "", share_text(o.share).c_str(),
                    first ? share_text(g.hidden).c_str() : "");
      out += line;
      first = false;
    }
    if (!g.link.bytes_per_s) out += "         (" + g.link.source + ")\n";
  }
  return out;
}

}  // namespace flotilla::runs
