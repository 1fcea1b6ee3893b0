// Slurm over SSH: the fenced login-shell runner, probe, sbatch, squeue, sacct, scancel (slurm_cluster.h).
#include "remote/slurm_cluster.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

std::string tail_of(const std::string& s, size_t n = 600) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

bool digits(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  return s.substr(i);
}

}  // namespace

std::string cluster_probe_json(const ClusterProbe& p) {
  nlohmann::json j;
  j["version"] = p.config.version;
  j["cluster_name"] = p.config.cluster_name;
  j["accounting"] = p.config.accounting;
  j["requeue"] = p.config.requeue;
  j["preempt_type"] = p.config.preempt_type;
  j["preempt_mode"] = p.config.preempt_mode;
  j["min_job_age_s"] = p.config.min_job_age_s;
  j["squeue_json"] = p.squeue_json;
  j["sacct"] = p.sacct;
  j["sacct_note"] = p.sacct_note;
  j["nodes"] = nlohmann::json::array();
  for (const auto& n : p.nodes)
    j["nodes"].push_back({{"name", n.name},
                          {"state", n.state},
                          {"cpus", n.cpus},
                          {"memory_mb", n.memory_mb},
                          {"gpus", n.gpus},
                          {"gpu_type", n.gpu_type},
                          {"partitions", n.partitions}});
  j["partitions"] = nlohmann::json::array();
  for (const auto& q : p.partitions)
    j["partitions"].push_back({{"name", q.name},
                               {"default", q.is_default},
                               {"state", q.state},
                               {"max_time", q.max_time},
                               {"default_time", q.default_time},
                               {"max_nodes", q.max_nodes},
                               {"nodes", q.nodes},
                               {"total_cpus", q.total_cpus},
                               {"total_nodes", q.total_nodes},
                               {"total_gpus", q.total_gpus}});
  return j.dump();
}

ClusterProbe cluster_probe_from_json(const std::string& text) {
  ClusterProbe p;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return p;
  try {
    p.config.version = j.value("version", "");
    p.config.cluster_name = j.value("cluster_name", "");
    p.config.accounting = j.value("accounting", false);
    p.config.requeue = j.value("requeue", true);
    p.config.preempt_type = j.value("preempt_type", "");
    p.config.preempt_mode = j.value("preempt_mode", "");
    p.config.min_job_age_s = j.value("min_job_age_s", int64_t{-1});
    p.squeue_json = j.value("squeue_json", false);
    p.sacct = j.value("sacct", false);
    p.sacct_note = j.value("sacct_note", "");
    for (const auto& n : j.value("nodes", nlohmann::json::array())) {
      SlurmNode node;
      node.name = n.value("name", "");
      node.state = n.value("state", "");
      node.cpus = n.value("cpus", 0);
      node.memory_mb = n.value("memory_mb", int64_t{0});
      node.gpus = n.value("gpus", 0);
      node.gpu_type = n.value("gpu_type", "");
      node.partitions = n.value("partitions", std::vector<std::string>{});
      p.nodes.push_back(node);
    }
    for (const auto& q : j.value("partitions", nlohmann::json::array())) {
      SlurmPartition part;
      part.name = q.value("name", "");
      part.is_default = q.value("default", false);
      part.state = q.value("state", "");
      part.max_time = q.value("max_time", "");
      part.default_time = q.value("default_time", "");
      part.max_nodes = q.value("max_nodes", "");
      part.nodes = q.value("nodes", "");
      part.total_cpus = q.value("total_cpus", 0);
      part.total_nodes = q.value("total_nodes", 0);
      part.total_gpus = q.value("total_gpus", 0);
      p.partitions.push_back(part);
    }
  } catch (const nlohmann::json::exception&) {
    return ClusterProbe{};  // a field of the wrong type: nothing is trusted
  }
  return p;
}

const std::string& cluster_probe_script() {
  static const std::string s =
      std::string("printf '\\n%s\\n' '") + kProbeBegin +
      "'\n"
      "echo '@@section config'; scontrol show config 2>&1; echo \"@@rc $?\"\n"
      "echo '@@section nodes'; sinfo -h -N -o '" +
      kSinfoFormat +
      "' 2>&1; echo \"@@rc $?\"\n"
      "echo '@@section partitions'; scontrol show partition -o 2>&1; echo \"@@rc $?\"\n"
      "echo '@@section squeue-json'; squeue --json >/dev/null 2>&1; echo \"@@rc $?\"\n"
      "echo '@@section sacct'; sacct -n -X -P -o JobID -S now 2>&1 | head -n 5; "
      "echo \"@@rc $(sacct -n -X -P -o JobID -S now >/dev/null 2>&1; echo $?)\"\n"
      "printf '%s\\n' '" +
      kProbeEnd + "'\n";
  return s;
}

ClusterProbe parse_cluster_probe(const std::string& output) {
  ClusterProbe p;
  auto sections = split_probe_sections(output);
  p.config = parse_scontrol_config(sections["config"].text);
  p.nodes = parse_sinfo_nodes(sections["nodes"].text);
  p.partitions = parse_partitions(sections["partitions"].text);
  p.squeue_json = sections["squeue-json"].rc == 0;
  const ProbeSection& sacct = sections["sacct"];
  p.sacct = sacct.rc == 0 && p.config.accounting;
  if (!p.sacct) {
    p.sacct_note = trim(sacct.text);
    if (p.sacct_note.empty())
      p.sacct_note =
          p.config.accounting ? "sacct failed" : "accounting storage is off (AccountingStorageType=none)";
  }
  const size_t begin = output.find(kProbeBegin);
  p.raw = begin == std::string::npos ? output : output.substr(begin);
  return p;
}

namespace {

// `script` in a login shell (bash -l, else sh -l; `flotilla` is its $0, `args` its $1..); throws
// Error(kComm) when the begin marker never appeared (the login shell itself failed).
std::string login_exec(Session& session, const std::string& script, const std::vector<std::string>& args,
                       double timeout_s, const char* what) {
  std::string quoted_args;
  for (const auto& a : args) {
    quoted_args.push_back(' ');
    quoted_args += shell_quote(a);
  }
  const std::string q = shell_quote(script);
  const std::string cmd = "if command -v bash >/dev/null 2>&1; then exec bash -l -c " + q + " flotilla" +
                          quoted_args + "; else exec sh -l -c " + q + " flotilla" + quoted_args + "; fi";
  const ExecResult r = session.exec(cmd, timeout_s);
  if (r.out.find(kProbeBegin) == std::string::npos)
    throw Error(ExitCode::kComm, std::string("the login shell on ") + session.target().host +
                                     " did not run " + what + " (exit " + std::to_string(r.exit_status) +
                                     "): " + tail_of(r.out + r.err));
  return r.out;
}

}  // namespace

std::map<std::string, ProbeSection> run_fenced(Session& session, const std::string& script,
                                               const std::vector<std::string>& args, double timeout_s) {
  return split_probe_sections(login_exec(session, script, args, timeout_s, "the Slurm command"));
}

ClusterProbe probe_cluster(Session& session) {
  const std::string out = login_exec(session, cluster_probe_script(), {}, 60, "the Slurm probe");
  ClusterProbe p = parse_cluster_probe(out);
  auto sections = split_probe_sections(out);
  if (sections["config"].rc != 0 || p.config.version.empty())
    throw Error(ExitCode::kComm, "`scontrol show config` failed on " + session.target().host +
                                     " (is Slurm's client installed and on the login shell's PATH?): " +
                                     tail_of(sections["config"].text));
  return p;
}

std::string submit_batch(Session& session, const std::string& script_path) {
  static const std::string script =
      std::string("printf '%s\\n' '") + kProbeBegin +
      "'\necho '@@section sbatch'; sbatch --parsable \"$1\" 2>&1; echo \"@@rc $?\"\n"
      "printf '%s\\n' '" +
      kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {script_path});
  const ProbeSection& s = sections["sbatch"];
  // --parsable prints "jobid" or "jobid;cluster"; warnings may come first.
  std::string last;
  for (size_t start = 0; start < s.text.size();) {
    size_t end = s.text.find('\n', start);
    if (end == std::string::npos) end = s.text.size();
    const std::string line = trim(s.text.substr(start, end - start));
    if (!line.empty()) last = line;
    start = end + 1;
  }
  const std::string id = last.substr(0, last.find(';'));
  if (s.rc != 0 || !digits(id))
    throw Error(ExitCode::kComm, "sbatch refused the job: " + tail_of(trim(s.text)));
  return id;
}

std::vector<SqueueJob> poll_jobs(Session& session, const std::vector<std::string>& job_ids) {
  if (job_ids.empty()) return {};
  std::string list;
  for (const auto& id : job_ids) {
    if (!digits(id)) throw Error(ExitCode::kUsage, "job id '" + printable(id) + "' is not a number");
    list += (list.empty() ? "" : ",") + id;
  }
  static const std::string script =
      std::string("printf '%s\\n' '") + kProbeBegin + "'\necho '@@section squeue'; squeue -h -o '" +
      kSqueueFormat + "' -j \"$1\" 2>&1; echo \"@@rc $?\"\nprintf '%s\\n' '" + kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {list});
  // squeue exits 1 with "Invalid job id specified" when every listed job has left the queue.
  return parse_squeue(sections["squeue"].text);
}

std::optional<QueuePlace> queue_place(Session& session, const std::string& job_id) {
  if (!digits(job_id)) throw Error(ExitCode::kUsage, "job id '" + printable(job_id) + "' is not a number");
  static const std::string script = std::string("printf '%s\\n' '") + kProbeBegin +
                                    "'\necho '@@section queue'; squeue -h -t PD -o '" + kQueueOrderFormat +
                                    "' --sort=-p,i 2>&1; echo \"@@rc $?\"\nprintf '%s\\n' '" + kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {});
  return parse_queue_place(sections["queue"].text, job_id);
}

std::optional<SacctJob> parse_sacct(const std::string& text, const std::string& job_id) {
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    std::vector<std::string> f;
    for (size_t a = 0;;) {
      const size_t b = line.find('|', a);
      f.push_back(line.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    if (f.size() < 5 || f[0] != job_id) continue;
    SacctJob j;
    j.state = f[1].substr(0, f[1].find(' '));  // "CANCELLED by 0"
    const std::string code = f[2].substr(0, f[2].find(':'));
    if (digits(code)) j.exit_code = std::stoi(code);
    j.elapsed_s = parse_slurm_duration(f[3]);
    j.alloc_tres = trim(f[4]);
    return j;
  }
  return std::nullopt;
}

std::optional<SacctJob> sacct_job(Session& session, const std::string& job_id) {
  if (!digits(job_id)) throw Error(ExitCode::kUsage, "job id '" + printable(job_id) + "' is not a number");
  static const std::string script =
      std::string("printf '%s\\n' '") + kProbeBegin +
      "'\necho '@@section sacct'; sacct -n -X -P -o JobID,State,ExitCode,Elapsed,AllocTRES "
      "-j \"$1\" 2>&1; echo \"@@rc $?\"\nprintf '%s\\n' '" +
      kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {job_id});
  if (sections["sacct"].rc != 0) return std::nullopt;
  return parse_sacct(sections["sacct"].text, job_id);
}

std::map<std::string, std::string> show_job(Session& session, const std::string& job_id) {
  if (!digits(job_id)) throw Error(ExitCode::kUsage, "job id '" + printable(job_id) + "' is not a number");
  static const std::string script =
      std::string("printf '%s\\n' '") + kProbeBegin +
      "'\necho '@@section job'; scontrol show job -o \"$1\" 2>&1; echo \"@@rc $?\"\n"
      "printf '%s\\n' '" +
      kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {job_id});
  if (sections["job"].rc != 0) return {};
  auto record = parse_scontrol_record(sections["job"].text);
  if (record["JobId"] != job_id) return {};
  return record;
}

void write_remote_file(Session& session, const std::string& path, const std::string& text) {
  const ExecResult r = session.exec("cat > " + shell_quote(path + ".part") + " && mv -f " +
                                        shell_quote(path + ".part") + " " + shell_quote(path),
                                    60, text);
  if (r.exit_status != 0) throw Error(ExitCode::kComm, "writing " + path + " failed: " + tail_of(r.err));
}

void cancel_job(Session& session, const std::string& job_id, bool graceful) {
  if (!digits(job_id)) throw Error(ExitCode::kUsage, "job id '" + printable(job_id) + "' is not a number");
  static const std::string script =
      std::string("printf '%s\\n' '") + kProbeBegin +
      "'\necho '@@section scancel'; if [ \"$2\" = graceful ]; then scancel "
      "--signal=TERM \"$1\" 2>&1; else scancel \"$1\" 2>&1; fi; echo \"@@rc $?\"\n"
      "printf '%s\\n' '" +
      kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {job_id, graceful ? "graceful" : "now"});
  if (sections["scancel"].rc != 0)
    throw Error(ExitCode::kComm, "scancel " + job_id + " failed: " + tail_of(trim(sections["scancel"].text)));
}

std::vector<JobNodeGpus> sample_job_gpus(Session& session, const std::string& job_id, int nodes) {
  if (!digits(job_id)) throw Error(ExitCode::kUsage, "job id '" + printable(job_id) + "' is not a number");
  if (nodes < 1) throw Error(ExitCode::kUsage, "a job has at least one node, not " + std::to_string(nodes));
  // The task's script: its node, then one CSV row per GPU it can see (the columns of
  // parse_nvidia_smi_csv), or the marker of a node without nvidia-smi.
  static const std::string task =
      "echo \"@@node ${SLURMD_NODENAME:-$(hostname)}\"; if command -v nvidia-smi >/dev/null 2>&1; then "
      "nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu,temperature.gpu,"
      "power.draw,driver_version --format=csv,noheader,nounits; else echo flotilla:no-nvidia-smi; fi";
  static const std::string script =
      std::string("printf '%s\\n' '") + kProbeBegin +
      "'\necho '@@section gpus'; timeout 20 srun --jobid=\"$1\" --overlap --nodes=\"$2\" --ntasks=\"$2\" "
      "--ntasks-per-node=1 --label --quiet --job-name=flotilla-gpus sh -c \"$3\" 2>&1; echo \"@@rc $?\"\n"
      "printf '%s\\n' '" +
      kProbeEnd + "'\n";
  auto sections = run_fenced(session, script, {job_id, std::to_string(nodes), task}, 30);
  const ProbeSection& s = sections["gpus"];
  std::vector<JobNodeGpus> out = parse_job_gpus(s.text);
  if (s.rc != 0 && out.empty())
    throw Error(ExitCode::kComm, "srun --overlap into job " + job_id + " failed (exit " + std::to_string(s.rc) +
                                     "): " + tail_of(trim(s.text)));
  return out;
}

}  // namespace flotilla::remote
