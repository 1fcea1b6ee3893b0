// `flotilla nodes links [NAME,NAME,...] [--json] [--bytes SIZE] [--timeout S]`: the link matrix on
// the collective path (runs/link_job.h), measured among the named nodes and stored; with no names,
// the newest stored one.
//
// Decision: the same job the Nodes page runs, so the CLI and the app store and show the same thing;
// a node that cannot take part is a problem line and error rows, not a refusal, and the exit status
// is 0 whenever a matrix was stored (1 when nothing could be measured).
#include <cctype>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/terminal.h"
#include "db/links.h"
#include "db/run_store.h"
#include "runs/link_job.h"
#include "runs/node_admin.h"
#include "runs/node_bridge.h"
#include "runs/ssh_options.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

int64_t parse_bytes(const std::string& text) {
  std::string digits = text;
  int64_t mult = 1;
  const char last =
      text.empty() ? '\0' : static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? int64_t{1} << 10 : last == 'M' ? int64_t{1} << 20 : int64_t{1} << 30;
    digits = text.substr(0, text.size() - 1);
  }
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("nodes links: --bytes must be a size such as 8M, 512K or 1048576");
  const int64_t v = std::stoll(digits) * mult;
  if (v < 1024 || v > (int64_t{1} << 30)) throw UsageError("nodes links: --bytes must be between 1K and 1G");
  return v;
}

nlohmann::json measurement_json(const db::Database& db, const db::LinkMeasurement& m) {
  std::map<int64_t, std::string> names;
  for (const db::Node& n : db::list_nodes(db)) names[n.id] = n.name;
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : m.links) {
    nlohmann::json j = {{"from", names[l.from_node]}, {"to", names[l.to_node]}};
    j["latency_s"] = l.latency_s ? nlohmann::json(*l.latency_s) : nlohmann::json(nullptr);
    j["bytes_per_s"] = l.bytes_per_s ? nlohmann::json(*l.bytes_per_s) : nlohmann::json(nullptr);
    j["error"] = l.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.error);
    links.push_back(j);
  }
  nlohmann::json out = {{"id", m.id},
                        {"measured_at", m.measured_at},
                        {"transport", m.transport},
                        {"seconds", m.seconds},
                        {"note", m.note},
                        {"links", links}};
  out["run_id"] = m.run_id ? nlohmann::json(*m.run_id) : nlohmann::json(nullptr);
  if (const auto s = runs::slowest_link(db, m))
    out["slowest"] = {
        {"from", s->from}, {"to", s->to}, {"bytes_per_s", s->bytes_per_s}, {"latency_s", s->latency_s}};
  else
    out["slowest"] = nullptr;
  return out;
}

}  // namespace

int nodes_links(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  runs::LinkJobOptions job;
  if (auto v = args.value("--bytes")) job.bytes = parse_bytes(*v);
  if (auto v = args.number("--timeout")) {
    if (*v < 10 || *v > 3600) throw UsageError("nodes links: --timeout must be 10-3600 seconds");
    job.timeout_s = *v;
  }
  const bool intra = !args.flag("--no-intra");
  job.intra_node = intra;
  const auto pos = args.positionals();
  if (pos.size() > 1) throw UsageError("nodes links takes the nodes as one list: NAME,NAME[,...]");
  db::Database db = open_store(ctx);
  if (pos.empty()) {
    const auto m = db::latest_link_measurement(db);
    if (!m) {
      std::printf("no link matrix stored yet: flotilla nodes links NAME,NAME measures one\n");
      return kExitOk;
    }
    if (json)
      std::printf("%s\n", measurement_json(db, *m).dump(2).c_str());
    else
      std::printf("%s", runs::link_matrix_text(db, *m).c_str());
    return kExitOk;
  }
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (size_t start = 0;;) {
    const size_t comma = pos[0].find(',', start);
    const std::string name =
        pos[0].substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty())
      throw UsageError("nodes links: an empty node name in '" + runs::printable(pos[0]) + "'");
    if (!seen.insert(name).second)
      throw UsageError("nodes links: node '" + runs::printable(name) + "' is listed twice");
    if (name != "local") db::get_ssh_node(db, name);  // an unknown name: not found, nothing runs
    names.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const runs::SshAccess access = ssh_access(ctx);
  const std::atomic<bool> cancel{false};
  const runs::LinkJobResult r = runs::run_link_job(
      database_path(ctx), names, runs::find_worker(),
      [&](const db::SshNode& rec) { return runs::ssh_session_options(access, rec); }, cancel, job);
  if (!r.measurement) {
    for (const auto& p : r.problems) note_stderr(p);
    return 1;
  }
  if (json)
    std::printf("%s\n", measurement_json(db, *r.measurement).dump(2).c_str());
  else
    std::printf("%s", runs::link_matrix_text(db, *r.measurement).c_str());
  return kExitOk;
}

}  // namespace flotilla::cli
