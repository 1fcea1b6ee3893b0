// Detached remote runs: start under a lock, status, tail by byte offset, stop, checkpoints.
// The shell scripts below are constants; only shell_quote()d, validated values are appended.
#include "remote/remote_run.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "remote/sftp.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

// Runs the worker as a child so it can (1) forward TERM to it and (2) record its exit code.
// It must contain no single quote: it travels inside one.
constexpr const char* kWrapper =
    "\"$@\" & c=$!; echo \"$c\" > worker.pid; "
    "trap \"kill -TERM $c 2>/dev/null\" TERM INT HUP; "
    "while :; do wait \"$c\"; s=$?; kill -0 \"$c\" 2>/dev/null || break; done; "
    "echo \"$s\" > exit_code.tmp && mv -f exit_code.tmp exit_code";

bool valid_env_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

std::string q(const std::string& s) { return shell_quote(s); }

RemoteRunStatus parse_status(const std::string& out) {
  RemoteRunStatus st;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "state")
      st.state = v == "running"  ? RunState::kRunning
                 : v == "exited" ? RunState::kExited
                                 : RunState::kNotStarted;
    else if (k == "pid")
      st.pid = std::atol(v.c_str());
    else if (k == "started_at")
      st.started_at = std::atoll(v.c_str());
    else if (k == "exit_code" && !v.empty())
      st.exit_code = std::atoi(v.c_str());
    else if (k == "ended_at" && !v.empty())
      st.ended_at = std::atoll(v.c_str());
  }
  return st;
}

// Prints state=/pid=/started_at=/exit_code=/ended_at= for "$d". Holds the lock for an instant.
constexpr const char* kStatusScript =
    "cd \"$d\" 2>/dev/null && [ -f pid ] || { echo state=none; exit 0; }\n"
    "echo \"pid=$(cat pid)\"; echo \"started_at=$(cat started_at 2>/dev/null)\"\n"
    "exec 8>>run.lock\n"
    "if flock -n 8; then echo state=exited; echo \"exit_code=$(cat exit_code 2>/dev/null)\"; "
    "echo \"ended_at=$(stat -c %Y exit_code 2>/dev/null)\"; "
    "else echo state=running; fi\n";

std::string with_dir(Session& s, const std::string& run_id) {
  std::string out = "d=";
  out += q(remote_run_dir(s, run_id));
  out += '\n';
  return out;
}

void check_spec(const RemoteRunSpec& spec) {
  if (std::string p = validate_run_id(spec.run_id); !p.empty()) throw_usage(p);
  if (std::string p = validate_host(spec.master_addr); !p.empty()) throw_usage("master address: " + p);
  if (std::string p = validate_port_number(spec.master_port); !p.empty()) throw_usage("master " + p);
  if (spec.nnodes < 1 || spec.node_rank < 0 || spec.node_rank >= spec.nnodes)
    throw_usage("node rank " + std::to_string(spec.node_rank) + " is not in 0.." +
                std::to_string(spec.nnodes - 1));
  if (spec.nproc_per_node < 1) throw_usage("nproc per node must be at least 1");
  if (spec.worker.empty() || spec.worker[0] != '/')
    throw_usage("the remote worker path '" + printable(spec.worker) +
                "' must be absolute (DeployResult::worker)");
  check_remote_path(spec.worker);
  if (!spec.config_path.empty()) check_remote_path(spec.config_path);
  for (const auto& a : spec.launch_args) check_remote_path(a.empty() ? std::string("x") : a);
  for (const auto& a : spec.train_args) check_remote_path(a.empty() ? std::string("x") : a);
  for (const auto& e : spec.env) {
    const auto eq = e.find('=');
    if (eq == std::string::npos || !valid_env_name(e.substr(0, eq)))
      throw_usage("environment entry '" + printable(e) + "' is not NAME=value with a plain NAME");
    check_remote_path(e);
  }
}

}  // namespace

std::string validate_run_id(std::string_view id) {
  const std::string shown = "run id '" + printable(id) + "'";
  if (id.empty()) return "run id is empty";
  if (id.size() > 100) return shown + " is longer than 100 characters";
  if (id[0] == '-' || id[0] == '.') return shown + " must not start with '-' or '.'";
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return shown + " may contain only letters, digits, '.', '_' and '-'";
  return "";
}

std::string remote_run_dir(Session& session, const std::string& run_id) {
  if (std::string p = validate_run_id(run_id); !p.empty()) throw_usage(p);
  return session.remote_home() + "/.flotilla/runs/" + run_id;
}

std::string upload_run_config(Session& session, const std::string& run_id, const std::string& toml_text) {
  const std::string dir = remote_run_dir(session, run_id);
  Sftp sftp(session);
  sftp.mkdir_p(dir, 0700);
  sftp.upload_bytes(toml_text, dir + "/run.toml", 0600);
  return dir + "/run.toml";
}

RemoteRunStatus start_remote_run(Session& session, const RemoteRunSpec& spec) {
  check_spec(spec);
  session.connect();
  const std::string dir = remote_run_dir(session, spec.run_id);
  std::vector<std::string> argv;
  if (!spec.env.empty()) {
    argv.push_back("env");
    argv.insert(argv.end(), spec.env.begin(), spec.env.end());
  }
  for (const std::string& a :
       {spec.worker, std::string("launch"), std::string("--nproc-per-node"),
        std::to_string(spec.nproc_per_node), std::string("--nnodes"), std::to_string(spec.nnodes),
        std::string("--node-rank"), std::to_string(spec.node_rank), std::string("--master-addr"),
        spec.master_addr, std::string("--master-port"), std::to_string(spec.master_port)})
    argv.push_back(a);
  argv.insert(argv.end(), spec.launch_args.begin(), spec.launch_args.end());
  for (const std::string& a :
       {std::string("--"), std::string("train"), std::string("--config"),
        spec.config_path.empty() ? dir + "/run.toml" : spec.config_path, std::string("--out-dir"), dir})
    argv.push_back(a);
  argv.insert(argv.end(), spec.train_args.begin(), spec.train_args.end());
  std::string words;
  for (const auto& a : argv) {
    words += ' ';
    words += q(a);
  }

  // Built by append: GCC 12 reports a false -Wrestrict on `"literal" + std::string`.
  std::string script = "d=";
  script += q(dir);
  script +=
      "\n"
      "command -v flock >/dev/null 2>&1 || { echo 'FLOTILLA_ERROR flock (util-linux) is not installed on the "
      "node'; "
      "exit 77; }\n"
      "command -v setsid >/dev/null 2>&1 || { echo 'FLOTILLA_ERROR setsid (util-linux) is not installed on "
      "the node'; "
      "exit 77; }\n"
      "mkdir -p \"$d\" && cd \"$d\" || { echo 'FLOTILLA_ERROR cannot create the run directory'; exit 77; }\n"
      "exec 9>>run.lock\n"
      "flock -n 9 || { echo \"FLOTILLA_BUSY pid=$(cat pid 2>/dev/null) since=$(cat started_at "
      "2>/dev/null)\"; "
      "exit 75; }\n";
  if (!spec.allow_restart)
    script +=
        "[ -f pid ] && { echo \"FLOTILLA_DONE pid=$(cat pid) exit=$(cat exit_code 2>/dev/null)\"; exit 76; "
        "}\n";
  script +=
      "rm -f exit_code exit_code.tmp worker.pid\n"
      "date +%s > started_at\n"
      "setsid nohup sh -c '";
  script += kWrapper;
  script += "' flotilla-run";
  script += words;
  script +=
      " >>stdout.log 2>&1 </dev/null &\n"
      "echo \"$!\" > pid.tmp && mv -f pid.tmp pid\n"
      "echo \"FLOTILLA_STARTED pid=$!\"\n";
  const ExecResult r = session.exec(script, 60);
  const std::string where = "run " + spec.run_id + " on " + session.target().host;
  if (r.exit_status == 75 || r.exit_status == 76) {
    const RemoteRunStatus st = remote_run_status(session, spec.run_id);
    const std::string since = st.started_at ? " since epoch " + std::to_string(st.started_at) : "";
    throw RunAlreadyStarted(
        r.exit_status == 75
            ? where + " is already active (pid " + std::to_string(st.pid) + since + "); not started again"
            : where + " was already started (pid " + std::to_string(st.pid) + since + ", exit code " +
                  std::to_string(st.exit_code) + "); allow a restart to resume it in the same directory",
        st);
  }
  if (r.exit_status != 0 || r.out.find("FLOTILLA_STARTED") == std::string::npos)
    throw Error(ExitCode::kComm, "cannot start " + where + ": " + printable(r.out + r.err));
  return remote_run_status(session, spec.run_id);
}

RemoteRunStatus remote_run_status(Session& session, const std::string& run_id) {
  session.connect();
  const ExecResult r = session.exec(with_dir(session, run_id) + kStatusScript, 30);
  if (r.exit_status != 0)
    throw Error(ExitCode::kComm, "cannot read the status of run " + run_id + " on " + session.target().host +
                                     ": " + printable(r.err));
  return parse_status(r.out);
}

TailChunk tail_run_file(Session& session, const std::string& run_id, uint64_t offset, const std::string& file,
                        size_t max_bytes) {
  if (file.empty() || file.find('/') != std::string::npos || file[0] == '.')
    throw_usage("run file '" + printable(file) + "' must be a plain file name in the run directory");
  session.connect();
  const std::string path = remote_run_dir(session, run_id) + "/" + file;
  Sftp sftp(session);
  TailChunk t;
  t.offset = offset;
  const RemoteStat st = sftp.stat(path);
  if (!st.exists) {
    t.file_missing = true;
    return t;
  }
  if (st.size < offset)
    throw Error(ExitCode::kComm, path + " on " + session.target().host + " is shorter (" +
                                     std::to_string(st.size) + " bytes) than the saved offset " +
                                     std::to_string(offset) + "; it was replaced, not appended to");
  if (st.size == offset) return t;
  const std::string data = sftp.read_range(path, offset, max_bytes);
  size_t start = 0;
  while (true) {
    const size_t nl = data.find('\n', start);
    if (nl == std::string::npos) break;
    t.lines.push_back(data.substr(start, nl - start));
    start = nl + 1;
  }
  t.offset = offset + start;
  return t;
}

RemoteRunStatus stop_remote_run(Session& session, const std::string& run_id, double grace_s,
                                const std::string& stop_request) {
  session.connect();
  const int ticks = std::max(1, static_cast<int>(grace_s * 10));
  std::string quoted;  // single-quoted for sh: ' as '\''
  for (char c : stop_request) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  const std::string request =
      stop_request.empty()
          ? std::string()
          : "printf '%s\\n' '" + quoted + "' > stop.request.tmp && mv -f stop.request.tmp stop.request\n";
  const std::string script = with_dir(session, run_id) +
                             "cd \"$d\" 2>/dev/null && [ -f pid ] || exit 0\n"
                             "p=$(cat pid)\n"
                             "exec 8>>run.lock\n"
                             "flock -n 8 && exit 0\n" +
                             request +
                             "kill -TERM \"$p\" 2>/dev/null\n"
                             "i=0; while [ \"$i\" -lt " +
                             std::to_string(ticks) +
                             " ]; do flock -n 8 && exit 0; sleep 0.1; i=$((i+1)); done\n"
                             "pkill -KILL -s \"$p\" 2>/dev/null || kill -KILL -- \"-$p\" 2>/dev/null\n"
                             "flock -w 10 8; [ -f exit_code ] || echo 137 > exit_code\n";
  const ExecResult r = session.exec(script, grace_s + 60);
  if (r.exit_status != 0)
    throw Error(ExitCode::kComm,
                "cannot stop run " + run_id + " on " + session.target().host + ": " + printable(r.err));
  return remote_run_status(session, run_id);
}

bool request_remote_checkpoint(Session& session, const std::string& run_id) {
  session.connect();
  // The lock says whether the run lives (a stale worker.pid of an ended run is never signalled).
  const std::string script = with_dir(session, run_id) +
                             "cd \"$d\" 2>/dev/null && [ -f worker.pid ] || exit 3\n"
                             "exec 8>>run.lock\n"
                             "flock -n 8 && exit 3\n"
                             "kill -USR1 \"$(cat worker.pid)\" 2>/dev/null || exit 4\n";
  const ExecResult r = session.exec(script, 30);
  if (r.exit_status == 0) return true;
  if (r.exit_status == 3) return false;
  throw Error(ExitCode::kComm, "cannot ask run " + run_id + " on " + session.target().host +
                                   " for a checkpoint (exit " + std::to_string(r.exit_status) +
                                   "): " + printable(r.err));
}

std::vector<RemoteCheckpoint> list_remote_checkpoints(Session& session, const std::string& run_id) {
  session.connect();
  const std::string dir = remote_run_dir(session, run_id) + "/checkpoints";
  Sftp sftp(session);
  std::vector<RemoteCheckpoint> out;
  if (!sftp.stat(dir).is_dir) return out;
  for (const RemoteEntry& e : sftp.list(dir)) {
    // Committed checkpoints only: step-NNNNNNNN (temporary folders carry a suffix).
    if (!e.is_dir || e.name.size() != 13 || e.name.rfind("step-", 0) != 0 ||
        e.name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    out.push_back({std::atoll(e.name.c_str() + 5), e.name});
  }
  return out;
}

std::string fetch_remote_checkpoint(Session& session, const std::string& run_id, int64_t step,
                                    const std::string& local_dir) {
  session.connect();
  char leaf[32];
  std::snprintf(leaf, sizeof leaf, "step-%08lld", static_cast<long long>(step));
  const std::string src = remote_run_dir(session, run_id) + "/checkpoints/" + leaf;
  const std::string dest = local_dir + "/" + leaf, part = dest + ".part";
  Sftp sftp(session);
  if (!sftp.stat(src).is_dir)
    throw Error(ExitCode::kCheckpoint, "checkpoint " + std::string(leaf) + " of run " + run_id +
                                           " is not on " + session.target().host);
  std::filesystem::remove_all(part);
  std::filesystem::create_directories(part);
  // Depth-first copy of the folder.
  std::vector<std::string> stack = {""};
  while (!stack.empty()) {
    const std::string rel = stack.back();
    stack.pop_back();
    for (const RemoteEntry& e : sftp.list(src + rel)) {
      const std::string child = rel + "/" + e.name;
      if (e.is_dir) {
        std::filesystem::create_directories(part + child);
        stack.push_back(child);
      } else {
        sftp.download(src + child, part + child);
      }
    }
  }
  std::filesystem::remove_all(dest);
  std::filesystem::rename(part, dest);
  return dest;
}

std::string upload_checkpoint(Session& session, const std::string& run_id,
                              const std::string& local_step_dir) {
  session.connect();
  const std::string leaf = std::filesystem::path(local_step_dir).filename().string();
  if (leaf.size() != 13 || leaf.rfind("step-", 0) != 0 ||
      leaf.find_first_not_of("0123456789", 5) != std::string::npos)
    throw Error(ExitCode::kUsage,
                "upload_checkpoint: '" + local_step_dir + "' is not a step-NNNNNNNN folder");
  const std::string root = remote_run_dir(session, run_id) + "/checkpoints";
  const std::string dest = root + "/" + leaf, part = dest + ".upload";
  Sftp sftp(session);
  sftp.mkdir_p(root);
  session.exec("rm -rf -- " + q(part), 60);
  sftp.mkdir_p(part);
  const std::filesystem::path base(local_step_dir);
  for (const auto& e : std::filesystem::recursive_directory_iterator(base)) {
    const std::string rel = std::filesystem::relative(e.path(), base).string();
    if (e.is_directory())
      sftp.mkdir_p(part + "/" + rel);
    else if (e.is_regular_file())
      sftp.upload_file(e.path().string(), part + "/" + rel);  // checksum-verified
  }
  // Published whole or not at all: the worker only takes committed step-NNNNNNNN folders.
  const ExecResult r = session.exec("rm -rf -- " + q(dest) + " && mv -- " + q(part) + " " + q(dest), 60);
  if (r.exit_status != 0)
    throw Error(ExitCode::kComm, "cannot publish checkpoint " + leaf + " of run " + run_id + " on " +
                                     session.target().host + ": " + printable(r.err));
  return dest;
}

}  // namespace flotilla::remote
