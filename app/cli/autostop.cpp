// `flotilla nodes autostop NAME [--idle 30m] [--stop-arg ARG]... [--start-arg ARG]... [--no-start-cmd]
// [--off] [--json]`: a rented node's idle limit and the commands that stop and start it.
//
// Decision: a command is given one argument per option (`--stop-arg gcloud --stop-arg compute ...`,
// an argument that starts with '-' as `--stop-arg=--zone=us-east1-b`), in order, so the shell the
// user typed in is the only one that ever splits it: Flotilla stores the list and runs it with
// execv, never through a shell, and never puts anything read from the node into it. Every problem
// is printed at once, each naming its option.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "runs/argv_command.h"
#include "runs/power_settings.h"

namespace flotilla::cli {
namespace {

// The option a settings field is typed in.
std::string option_of(const std::string& field) {
  if (field == "idle limit") return "--idle";
  if (field == "stop command") return "--stop-arg";
  return "--start-arg";
}

void print_settings(const std::string& name, const std::optional<db::NodePower>& p, bool json) {
  if (json) {
    nlohmann::json j = {{"name", name}};
    if (p) {
      j["idle_limit_s"] = p->idle_limit_s ? nlohmann::json(*p->idle_limit_s) : nlohmann::json(nullptr);
      j["stop_argv"] = p->stop_argv;
      j["start_argv"] = p->start_argv;
      j["state"] = p->state;
      j["since"] = p->since;
      j["idle_since"] = p->idle_since ? nlohmann::json(*p->idle_since) : nlohmann::json(nullptr);
    } else {
      j["idle_limit_s"] = nullptr;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (!p || !p->idle_limit_s) {
    std::printf("node %s: autostop off%s\n", name.c_str(),
                p && !p->stop_argv.empty() ? " (its commands are kept)" : "");
    if (!p) return;
  } else {
    std::printf("node %s: stopped after %s with no work (%s since %s)\n", name.c_str(),
                runs::idle_duration_text(*p->idle_limit_s).c_str(), p->state.c_str(),
                format_time(p->since).c_str());
  }
  std::printf("  stop command:  %s\n", p->stop_argv.empty() ? "-" : runs::command_text(p->stop_argv).c_str());
  std::printf("  start command: %s\n",
              p->start_argv.empty() ? "- (start it yourself)" : runs::command_text(p->start_argv).c_str());
}

}  // namespace

int nodes_autostop(const Context& ctx, ArgReader& args) {
  const bool json = args.flag("--json");
  const bool off = args.flag("--off");
  const bool no_start = args.flag("--no-start-cmd");
  const auto idle = args.value("--idle");
  const auto stop = args.values("--stop-arg");
  const auto start = args.values("--start-arg");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("nodes autostop needs exactly one NAME");
  if (off && (idle || !stop.empty() || !start.empty() || no_start))
    throw UsageError("nodes autostop: --off takes no other setting (it keeps the commands)");
  if (no_start && !start.empty())
    throw UsageError("nodes autostop: --no-start-cmd and --start-arg cannot be given together");
  std::optional<double> limit;
  if (idle) {
    std::string why;
    limit = runs::parse_idle_duration(*idle, &why);
    if (!limit) throw UsageError("nodes autostop: --idle " + why);
  }
  db::Database db = open_store(ctx);
  const db::SshNode node = db::get_ssh_node(db, pos[0]);
  auto current = db::node_power(db, node.id);
  if (off) {
    db::clear_idle_limit(db, node.id);
    std::printf("autostop off for node %s\n", node.name.c_str());
    return kExitOk;
  }
  if (!idle && stop.empty() && start.empty() && !no_start) {
    print_settings(node.name, current, json);
    return kExitOk;
  }
  db::NodePower p = current.value_or(db::NodePower{});
  p.node_id = node.id;
  if (limit) p.idle_limit_s = limit;
  if (!stop.empty()) p.stop_argv = stop;
  if (!start.empty()) p.start_argv = start;
  if (no_start) p.start_argv.clear();
  const auto problems = runs::validate_power_settings(p.idle_limit_s, p.stop_argv, p.start_argv);
  for (const auto& pr : problems) {
    // "stop command: ..." as the option: "--stop-arg: ..."
    const std::string rest = pr.message.substr(pr.message.find(':') + 1);
    std::fprintf(stderr, "flotilla: nodes autostop: %s:%s\n", option_of(pr.field).c_str(), rest.c_str());
  }
  if (!problems.empty()) return kExitUsage;
  db::set_node_power(db, p);
  print_settings(node.name, db::node_power(db, node.id), json);
  return kExitOk;
}

}  // namespace flotilla::cli
