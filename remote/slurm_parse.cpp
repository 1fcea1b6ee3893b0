// Parsers of Slurm command output (see slurm_parse.h for the fencing contract).
#include "remote/slurm_parse.h"

#include <cctype>
#include <cstdlib>

namespace flotilla::remote {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    start = end + 1;
  }
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return out;
}

// Digits only, no sign, fits: else nullopt.
std::optional<int64_t> to_int(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

int to_int_or(std::string_view s, int fallback) {
  const auto v = to_int(s);
  return v && *v <= 1 << 30 ? static_cast<int>(*v) : fallback;
}

bool is_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == ':';
}

}  // namespace

std::map<std::string, ProbeSection> split_probe_sections(std::string_view output) {
  std::map<std::string, ProbeSection> out;
  const auto all = lines_of(output);
  size_t i = 0;
  while (i < all.size() && trim(all[i]) != kProbeBegin) ++i;
  if (i == all.size()) return out;
  ProbeSection* current = nullptr;
  for (++i; i < all.size(); ++i) {
    const std::string_view line = all[i];
    if (trim(line) == kProbeEnd) break;
    if (line.rfind("@@section ", 0) == 0) {
      current = &out[std::string(trim(line.substr(10)))];
      continue;
    }
    if (line.rfind("@@rc ", 0) == 0 && current != nullptr) {
      current->rc = to_int_or(line.substr(5), -1);
      current = nullptr;
      continue;
    }
    if (current == nullptr) continue;
    current->text.append(line);
    current->text.push_back('\n');
  }
  return out;
}

SlurmConfig parse_scontrol_config(std::string_view text) {
  SlurmConfig c;
  for (std::string_view line : lines_of(text)) {
    const size_t eq = line.find(" = ");
    if (eq == std::string_view::npos) continue;
    const std::string_view key = trim(line.substr(0, eq));
    if (key.empty() || key.find(' ') != std::string_view::npos) continue;
    c.values[std::string(key)] = std::string(trim(line.substr(eq + 3)));
  }
  auto get = [&](const char* k) -> std::string {
    const auto it = c.values.find(k);
    return it == c.values.end() ? "" : it->second;
  };
  c.version = get("SLURM_VERSION");
  c.cluster_name = get("ClusterName");
  const std::string acct = get("AccountingStorageType");
  c.accounting = !acct.empty() && acct != "accounting_storage/none";
  c.requeue = get("JobRequeue") != "0";
  c.preempt_type = get("PreemptType");
  c.preempt_mode = get("PreemptMode");
  const std::string age = get("MinJobAge");  // "300 sec"
  if (const auto v = to_int(age.substr(0, age.find(' ')))) c.min_job_age_s = *v;
  return c;
}

int gres_gpu_count(std::string_view gres, std::string* first_type) {
  int total = 0;
  bool typed = false;
  // Entries are comma-separated, but an index list "(S:0-1)" or "(IDX:0,2)" may hold commas.
  std::vector<std::string> entries;
  std::string cur;
  int depth = 0;
  for (char ch : gres) {
    if (ch == '(') ++depth;
    if (ch == ')' && depth > 0) --depth;
    if (ch == ',' && depth == 0) {
      entries.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(ch);
    }
  }
  entries.push_back(cur);
  for (std::string e : entries) {
    e = std::string(trim(e));
    if (const auto paren = e.find('('); paren != std::string::npos) e.resize(paren);
    const auto parts = split(e, ':');
    if (parts.size() < 2 || parts[0] != "gpu") continue;
    const auto count = to_int(parts.back());
    if (!count || *count > 4096) continue;
    total += static_cast<int>(*count);
    if (!typed && parts.size() >= 3 && first_type != nullptr) {
      *first_type = std::string(parts[1]);
      typed = true;
    }
  }
  return total;
}

std::vector<SlurmNode> parse_sinfo_nodes(std::string_view text) {
  std::vector<SlurmNode> out;
  for (std::string_view line : lines_of(text)) {
    const auto f = split(trim(line), '|');
    if (f.size() != 6 || f[0].empty()) continue;
    std::string partition(trim(f[5]));
    if (!partition.empty() && partition.back() == '*') partition.pop_back();
    SlurmNode* n = nullptr;
    for (auto& existing : out)
      if (existing.name == f[0]) n = &existing;
    if (n == nullptr) {
      SlurmNode fresh;
      fresh.name = std::string(f[0]);
      std::string state(trim(f[1]));
      // sinfo marks "not responding" and similar flags with a trailing * ~ # ! % $ @.
      while (!state.empty() && std::string_view("*~#!%$@^-").find(state.back()) != std::string_view::npos)
        state.pop_back();
      fresh.state = state;
      fresh.cpus = to_int_or(f[2], 0);
      fresh.memory_mb = to_int(f[3]).value_or(0);
      fresh.gpus = gres_gpu_count(f[4], &fresh.gpu_type);
      out.push_back(fresh);
      n = &out.back();
    }
    if (!partition.empty()) n->partitions.push_back(partition);
  }
  return out;
}

std::map<std::string, std::string> parse_scontrol_record(std::string_view line) {
  std::map<std::string, std::string> out;
  line = trim(line);
  // Positions where a key starts: the line start, or after a space, a word then '='.
  std::vector<size_t> starts;
  for (size_t i = 0; i < line.size(); ++i) {
    if (i != 0 && line[i - 1] != ' ') continue;
    size_t j = i;
    while (j < line.size() && is_key_char(line[j])) ++j;
    if (j > i && j < line.size() && line[j] == '=') starts.push_back(i);
  }
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : line.size();
    const std::string_view item = line.substr(starts[k], end - starts[k]);
    const size_t eq = item.find('=');
    out[std::string(item.substr(0, eq))] = std::string(trim(item.substr(eq + 1)));
  }
  return out;
}

std::vector<SlurmPartition> parse_partitions(std::string_view text) {
  std::vector<SlurmPartition> out;
  for (std::string_view line : lines_of(text)) {
    auto r = parse_scontrol_record(line);
    if (r["PartitionName"].empty()) continue;
    SlurmPartition p;
    p.name = r["PartitionName"];
    p.is_default = r["Default"] == "YES";
    p.state = r["State"];
    p.max_time = r["MaxTime"];
    p.default_time = r["DefaultTime"];
    p.max_nodes = r["MaxNodes"];
    p.nodes = r["Nodes"];
    p.total_cpus = to_int_or(r["TotalCPUs"], 0);
    p.total_nodes = to_int_or(r["TotalNodes"], 0);
    for (std::string_view t : split(r["TRES"], ',')) {
      if (t.rfind("gres/gpu=", 0) == 0) p.total_gpus = to_int_or(t.substr(9), 0);
    }
    out.push_back(p);
  }
  return out;
}

std::optional<int64_t> parse_slurm_duration(std::string_view text) {
  text = trim(text);
  if (text == "UNLIMITED" || text == "INFINITE") return -1;
  if (text.empty()) return std::nullopt;
  int64_t days = 0;
  if (const size_t dash = text.find('-'); dash != std::string_view::npos) {
    const auto d = to_int(text.substr(0, dash));
    if (!d) return std::nullopt;
    days = *d;
    text = text.substr(dash + 1);
  }
  const auto parts = split(text, ':');
  if (parts.size() > 3) return std::nullopt;
  std::vector<int64_t> v;
  for (auto p : parts) {
    const auto n = to_int(p);
    if (!n) return std::nullopt;
    v.push_back(*n);
  }
  int64_t s = 0;
  if (days != 0 || parts.size() == 3) {
    // days-hours[:minutes[:seconds]] or hours:minutes:seconds
    s = v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) + (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 2) {
    s = v[0] * 60 + v[1];  // minutes:seconds
  } else {
    s = v[0] * 60;  // minutes
  }
  return days * 86400 + s;
}

std::optional<QueuePlace> parse_queue_place(std::string_view text, const std::string& job_id) {
  std::vector<std::pair<std::string, std::string>> order;  // job id, partition, in Slurm's order
  for (std::string_view line : lines_of(text)) {
    const auto f = split(trim(line), '|');
    if (f.size() != 2 || !to_int(f[0].substr(0, f[0].find('_')))) continue;
    order.emplace_back(std::string(f[0]), std::string(f[1]));
  }
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i].first != job_id) continue;
    QueuePlace place;
    place.partition = order[i].second;
    for (size_t k = 0; k < i; ++k)
      if (order[k].second == place.partition) ++place.ahead;
    return place;
  }
  return std::nullopt;
}

std::string queue_place_text(const QueuePlace& place) {
  if (place.ahead == 0) return "next in partition " + place.partition + "'s queue";
  return std::to_string(place.ahead) + (place.ahead == 1 ? " job" : " jobs") + " ahead in partition " +
         place.partition;
}

std::vector<SqueueJob> parse_squeue(std::string_view text) {
  std::vector<SqueueJob> out;
  for (std::string_view line : lines_of(text)) {
    const auto f = split(trim(line), '|');
    if (f.size() != 8 || !to_int(f[0].substr(0, f[0].find('_')))) continue;
    SqueueJob j;
    j.job_id = std::string(f[0]);
    j.state = std::string(f[1]);
    j.reason = std::string(f[2]);
    j.elapsed_s = parse_slurm_duration(f[3]);
    j.time_left_s = parse_slurm_duration(f[4]);
    j.expected_start = std::string(f[5]);
    j.nodes = to_int_or(f[6], 0);
    j.nodelist = std::string(f[7]);
    out.push_back(j);
  }
  return out;
}

std::string plain_reason(std::string_view reason) {
  static const std::map<std::string, std::string, std::less<>> kWords = {
      {"None", "no reason given"},
      {"Priority", "waiting behind jobs of higher priority"},
      {"Resources", "waiting for free nodes"},
      {"JobHeldUser", "held by its owner (scontrol release JOBID)"},
      {"JobHeldAdmin", "held by an administrator"},
      {"Dependency", "waiting for another job to finish"},
      {"DependencyNeverSatisfied", "its dependency can never be met: cancel it"},
      {"BeginTime", "its start time has not come yet"},
      {"ReqNodeNotAvail", "a requested node is not available (down, drained or reserved)"},
      {"PartitionDown", "the partition is down"},
      {"PartitionInactive", "the partition is inactive"},
      {"PartitionTimeLimit", "the time limit is longer than the partition allows"},
      {"PartitionNodeLimit", "more nodes than the partition allows"},
      {"AssocGrpGRES", "the account's GPU limit is reached"},
      {"QOSMaxWallDurationPerJobLimit", "the time limit is longer than the QOS allows"},
      {"NodeDown", "a node of the job is down"},
      {"BadConstraints", "the request can never be met on this cluster"},
      {"launch failed requeued held", "the launch failed; the job was requeued and held"},
  };
  // "ReqNodeNotAvail, UnavailableNodes:n[1-2]": the code, then details kept as they are.
  const size_t comma = reason.find(',');
  const auto it = kWords.find(reason.substr(0, comma));
  if (it == kWords.end()) return std::string(reason);
  return comma == std::string_view::npos
             ? it->second
             : it->second + " (" + std::string(trim(reason.substr(comma + 1))) + ")";
}

std::optional<ExitMarker> parse_exit_marker(std::string_view text) {
  // The last complete marker line wins (a requeued job appends one per attempt).
  std::optional<ExitMarker> out;
  for (std::string_view line : lines_of(text)) {
    ExitMarker m;
    bool have_exit = false;
    for (std::string_view word : split(trim(line), ' ')) {
      const size_t eq = word.find('=');
      if (eq == std::string_view::npos) continue;
      const auto key = word.substr(0, eq);
      const auto v = to_int(word.substr(eq + 1));
      if (!v) continue;
      if (key == "exit") {
        m.exit_code = static_cast<int>(*v & 0xffff);
        have_exit = true;
      } else if (key == "restarts") {
        m.restarts = static_cast<int>(*v & 0xffff);
      } else if (key == "time") {
        m.time = *v;
      }
    }
    if (have_exit) out = m;
  }
  return out;
}

std::vector<JobNodeGpus> parse_job_gpus(std::string_view text) {
  std::map<int, std::string> task_text;
  for (std::string_view line : lines_of(text)) {
    const std::string_view t = trim(line);
    const size_t colon = t.find(':');
    if (colon == 0 || colon == std::string_view::npos) continue;
    const std::string_view label = t.substr(0, colon);
    bool numeric = true;
    for (char c : label) numeric = numeric && std::isdigit(static_cast<unsigned char>(c));
    if (!numeric || label.size() > 6) continue;
    std::string_view rest = t.substr(colon + 1);
    if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    (task_text[std::atoi(std::string(label).c_str())] += rest) += '\n';
  }
  std::vector<JobNodeGpus> out;
  for (const auto& [task, body] : task_text) {
    JobNodeGpus n;
    std::string csv;
    for (std::string_view line : lines_of(body)) {
      if (line.rfind("@@node ", 0) == 0)
        n.node = std::string(trim(line.substr(7)));
      else if (trim(line) == "flotilla:no-nvidia-smi")
        n.nvidia_smi = false;
      else
        (csv += line) += '\n';
    }
    if (n.node.empty()) continue;  // not one of our tasks' outputs
    n.gpus = parse_nvidia_smi_csv(csv);
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace flotilla::remote
