// Batch script generation for Slurm runs (see slurm_script.h for the signal and requeue design).
#include "remote/slurm_script.h"

#include <cstdlib>

#include "engine/core/error.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

// A path that may stand unquoted in an #SBATCH directive: absolute, plain characters only.
bool plain_path(std::string_view p) {
  if (p.empty() || p.front() != '/') return false;
  for (char c : p)
    if (!name_char(c) && c != '/') return false;
  return true;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string field_value(std::string_view field, std::string_view value) {
  std::string out(field);
  out.append(" '");
  out.append(printable(value));
  out.append("'");
  return out;
}

}  // namespace

std::string validate_slurm_name(std::string_view field, std::string_view value) {
  const std::string what = field_value(field, value);
  if (value.empty()) return std::string(field) + " is empty";
  if (value.size() > 64) return what + " is longer than 64 characters";
  if (value.front() == '-') return what + " starts with '-' (it would be read as an option)";
  if (value.front() == '.') return what + " starts with '.'";
  for (char c : value)
    if (!name_char(c))
      return what + " may hold only letters, digits, '.', '_' and '-' (it reaches sbatch and a shell)";
  return "";
}

std::string validate_time_limit(std::string_view value) {
  const std::string what = field_value("time limit", value);
  std::string_view rest = value;
  long days = 0;
  if (const size_t dash = rest.find('-'); dash != std::string_view::npos) {
    if (!all_digits(rest.substr(0, dash)) || dash > 3) return what + " must be written [D-]HH:MM:SS";
    days = std::atol(std::string(rest.substr(0, dash)).c_str());
    rest = rest.substr(dash + 1);
  }
  if (rest.size() < 8 || rest[rest.size() - 3] != ':' || rest[rest.size() - 6] != ':')
    return what + " must be written [D-]HH:MM:SS (a finite limit; e.g. 02:00:00)";
  const std::string_view h = rest.substr(0, rest.size() - 6), m = rest.substr(rest.size() - 5, 2),
                         s = rest.substr(rest.size() - 2, 2);
  if (!all_digits(h) || h.size() > 4 || !all_digits(m) || !all_digits(s))
    return what + " must be written [D-]HH:MM:SS";
  if (std::atoi(std::string(m).c_str()) > 59 || std::atoi(std::string(s).c_str()) > 59)
    return what + ": minutes and seconds must be below 60";
  const long total = time_limit_seconds(value);
  if (total <= 0) return what + " must be longer than 0 s";
  if (days > 365 || total > 366L * 86400) return what + " is longer than a year";
  return "";
}

long time_limit_seconds(std::string_view value) {
  long days = 0;
  if (const size_t dash = value.find('-'); dash != std::string_view::npos) {
    days = std::atol(std::string(value.substr(0, dash)).c_str());
    value = value.substr(dash + 1);
  }
  if (value.size() < 8) return 0;
  const long h = std::atol(std::string(value.substr(0, value.size() - 6)).c_str());
  const long m = std::atol(std::string(value.substr(value.size() - 5, 2)).c_str());
  const long s = std::atol(std::string(value.substr(value.size() - 2, 2)).c_str());
  return days * 86400 + h * 3600 + m * 60 + s;
}

std::vector<std::string> validate_batch_spec(const BatchSpec& b) {
  std::vector<std::string> out;
  auto add = [&](std::string p) {
    if (!p.empty()) out.push_back(std::move(p));
  };
  add(validate_slurm_name("job name", b.job_name));
  if (!b.partition.empty()) add(validate_slurm_name("partition", b.partition));
  if (!b.account.empty()) add(validate_slurm_name("account", b.account));
  add(validate_time_limit(b.time_limit));
  if (b.nodes < 1 || b.nodes > 100000)
    out.push_back("nodes must be 1 or more (is " + std::to_string(b.nodes) + ")");
  if (b.tasks_per_node < 1 || b.tasks_per_node > 1024)
    out.push_back("tasks per node must be 1-1024 (is " + std::to_string(b.tasks_per_node) + ")");
  if (b.gpus_per_node < 0 || b.gpus_per_node > 1024)
    out.push_back("gpus per node must be 0-1024 (is " + std::to_string(b.gpus_per_node) + ")");
  if (b.cpus_per_task < 0 || b.cpus_per_task > 4096)
    out.push_back("cpus per task must be 0-4096 (is " + std::to_string(b.cpus_per_task) + ")");
  if (b.signal_lead_s < 0) out.push_back("signal lead must not be negative");
  if (out.empty() && b.signal_lead_s >= time_limit_seconds(b.time_limit))
    out.push_back("signal lead " + std::to_string(b.signal_lead_s) +
                  " s must be shorter than the time limit " + b.time_limit);
  if (!plain_path(b.run_dir))
    out.push_back(
        field_value("run dir", b.run_dir) +
        " must be an absolute path of letters, digits, '.', '_', '-' and '/' (it is an #SBATCH --output)");
  if (b.worker.empty() || b.worker.front() != '/')
    out.push_back(field_value("worker", b.worker) + " must be absolute");
  if (b.config.empty() || b.config.front() != '/')
    out.push_back(field_value("config", b.config) + " must be absolute");
  return out;
}

std::string batch_script(const BatchSpec& b) {
  const auto problems = validate_batch_spec(b);
  if (!problems.empty()) {
    std::string m = "slurm batch script: ";
    for (size_t i = 0; i < problems.size(); ++i) m += (i ? "; " : "") + problems[i];
    throw Error(ExitCode::kUsage, m);
  }
  std::string s = "#!/bin/sh\n";
  auto directive = [&](const std::string& d) { s += "#SBATCH " + d + "\n"; };
  directive("--job-name=" + b.job_name);
  if (!b.partition.empty()) directive("--partition=" + b.partition);
  if (!b.account.empty()) directive("--account=" + b.account);
  directive("--nodes=" + std::to_string(b.nodes));
  directive("--ntasks-per-node=" + std::to_string(b.tasks_per_node));
  if (b.gpus_per_node > 0) directive("--gpus-per-node=" + std::to_string(b.gpus_per_node));
  if (b.cpus_per_task > 0) directive("--cpus-per-task=" + std::to_string(b.cpus_per_task));
  directive("--time=" + b.time_limit);
  directive("--signal=B:USR1@" + std::to_string(b.signal_lead_s));
  directive(b.requeue ? "--requeue" : "--no-requeue");
  directive("--open-mode=append");
  directive("--output=" + b.run_dir + "/slurm.out");
  directive("--chdir=" + b.run_dir);
  s += "# Generated by Flotilla (docs/slurm.md). USR1 (the time-limit lead) and TERM (a cancel) become a\n"
       "# TERM for the tasks: checkpoint at the next step, exit 10.\n";
  s += "run_dir=" + shell_quote(b.run_dir) + "\n";
  s += "worker=" + shell_quote(b.worker) + "\n";
  s += "config=" + shell_quote(b.config) + "\n";
  s += std::string("requeue=") + (b.requeue ? "1" : "0") + "\n";
  s += "restarts=\"${SLURM_RESTART_COUNT:-0}\"\n"
       "echo \"flotilla: job $SLURM_JOB_ID attempt $restarts on $SLURM_JOB_NODELIST at $(date +%s)\"\n"
       "reason=\n"
       "srun_pid=\n"
       "# TERM goes to the tasks through Slurm (every step, not this shell): srun itself turns a TERM\n"
       "# into a KILL of its tasks, which would lose the checkpoint.\n"
       "on_signal() { reason=$1; scancel --signal=TERM \"$SLURM_JOB_ID\" 2>/dev/null; }\n"
       "trap 'on_signal time-limit' USR1\n"
       "trap 'on_signal cancel' TERM\n"
       "srun --kill-on-bad-exit=1 --ntasks-per-node=" +
       std::to_string(b.tasks_per_node) +
       " \"$worker\" train --config \"$config\" --out-dir \"$run_dir\" --no-stdout-metrics";
  for (const auto& a : b.train_args) {
    s.push_back(' ');  // appended, not " " + ...: GCC 12 reports a false -Wrestrict there
    s += shell_quote(a);
  }
  s += " &\n"
       "srun_pid=$!\n"
       "# wait returns early when a trapped signal arrives: wait again until srun has really ended.\n"
       "while :; do\n"
       "  wait \"$srun_pid\"\n"
       "  rc=$?\n"
       "  kill -0 \"$srun_pid\" 2>/dev/null || break\n"
       "done\n"
       "echo \"exit=$rc restarts=$restarts time=$(date +%s) reason=${reason:-none}\" >> "
       "\"$run_dir/slurm-exit\"\n"
       "if [ \"$rc\" -eq " +
       std::to_string(kResumeExitCode) +
       " ] && [ \"$reason\" = time-limit ] && [ \"$requeue\" = 1 ]; then\n"
       "  echo \"flotilla: checkpointed before the time limit; requeueing job $SLURM_JOB_ID\"\n"
       "  scontrol requeue \"$SLURM_JOB_ID\"\n"
       "fi\n"
       "exit \"$rc\"\n";
  return s;
}

}  // namespace flotilla::remote
