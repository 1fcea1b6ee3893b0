// Node probes (see probe.h). The script is a constant; its output is one "key=value" per line
// and a "gpu:" line per nvidia-smi row.
#include "remote/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "remote/validate.h"

namespace flotilla::remote {
namespace {

constexpr const char* kProbeScript =
    "LC_ALL=C; export LC_ALL\n"
    "echo \"arch=$(uname -m)\"\n"
    "echo \"kernel=$(uname -r)\"\n"
    "os=$(. /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\"); echo \"os=${os:-$(uname -s)}\"\n"
    "echo \"glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null)\"\n"
    "echo \"cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)\"\n"
    "awk '/^MemTotal:/{print \"mem_total_kb=\" $2} /^MemAvailable:/{print \"mem_avail_kb=\" $2}' "
    "/proc/meminfo\n"
    "df -Pk \"$HOME\" 2>/dev/null | awk 'NR==2{print \"disk_free_kb=\" $4}'\n"
    "if command -v nvidia-smi >/dev/null 2>&1; then\n"
    "  nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,"
    "driver_version --format=csv,noheader,nounits 2>&1 | sed 's/^/gpu:/'\n"
    "  echo \"nvidia_smi_status=$?\"\n"
    "else echo nvidia_smi=absent; fi\n";

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

double number_or(const std::string& s, double fallback) {
  const std::string t = trim(s);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  return (t.empty() || end != t.c_str() + t.size()) ? fallback : v;
}

uint64_t u64(const std::string& s) {
  const double v = number_or(s, 0);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

}  // namespace

std::vector<GpuInfo> parse_nvidia_smi_csv(const std::string& csv) {
  std::vector<GpuInfo> out;
  std::istringstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    std::string x;
    while (std::getline(fields, x, ',')) f.push_back(trim(x));
    if (f.size() != 8 || number_or(f[0], -1) < 0) continue;
    GpuInfo g;
    g.index = static_cast<int>(number_or(f[0], 0));
    g.name = f[1];
    g.memory_total_bytes = u64(f[2]) << 20;
    g.memory_used_bytes = u64(f[3]) << 20;
    g.utilization_pct = number_or(f[4], -1);
    g.temperature_c = number_or(f[5], -1);
    g.power_w = number_or(f[6], -1);
    g.driver = f[7];
    out.push_back(g);
  }
  return out;
}

NodeProbe parse_probe_output(const std::string& text) {
  NodeProbe p;
  std::istringstream in(text);
  std::string line, gpu_csv;
  bool smi_absent = false;
  int smi_status = 0;
  while (std::getline(in, line)) {
    if (line.rfind("gpu:", 0) == 0) {
      gpu_csv += line.substr(4) + "\n";
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = trim(line.substr(eq + 1));
    if (k == "arch")
      p.arch = v;
    else if (k == "kernel")
      p.kernel = v;
    else if (k == "os")
      p.os = v;
    else if (k == "glibc")
      p.glibc = v.rfind("glibc ", 0) == 0 ? v.substr(6) : "";
    else if (k == "cpus")
      p.cpus = static_cast<int>(number_or(v, 0));
    else if (k == "mem_total_kb")
      p.memory_total_bytes = u64(v) * 1024;
    else if (k == "mem_avail_kb")
      p.memory_available_bytes = u64(v) * 1024;
    else if (k == "disk_free_kb")
      p.disk_free_bytes = u64(v) * 1024;
    else if (k == "nvidia_smi")
      smi_absent = true;
    else if (k == "nvidia_smi_status")
      smi_status = static_cast<int>(number_or(v, 1));
  }
  p.gpus = parse_nvidia_smi_csv(gpu_csv);
  if (smi_absent)
    p.gpu_status = "no GPU: nvidia-smi is not installed on the node";
  else if (smi_status != 0 && p.gpus.empty())
    p.gpu_status = "no GPU: nvidia-smi failed: " + printable(trim(gpu_csv));
  else if (p.gpus.empty())
    p.gpu_status = "no GPU: nvidia-smi lists none";
  else
    p.gpu_status = "ok";
  return p;
}

NodeProbe probe_node(Session& session) {
  session.connect();
  const ExecResult r = session.exec("sh -s", 30, kProbeScript);
  if (r.exit_status != 0 && r.out.empty())
    throw Error(ExitCode::kComm, "probe of " + session.target().host + " failed (exit " +
                                     std::to_string(r.exit_status) + "): " + printable(r.err));
  return parse_probe_output(r.out);
}

NodeProbe probe_worker(Session& session, const std::string& worker_path) {
  session.connect();
  const ExecResult r = session.exec(shell_quote(session.expand_home(worker_path)) + " probe --json", 60);
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (r.exit_status != 0 || j.is_discarded() || !j.is_object())
    throw Error(ExitCode::kComm, "`flotilla-worker probe --json` on " + session.target().host +
                                     " failed (exit " + std::to_string(r.exit_status) +
                                     "): " + printable(r.err));
  NodeProbe p;
  auto str = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : std::string(); };
  const auto& host = j.value("host", nlohmann::json::object());
  p.os = str(host.value("os", nlohmann::json()));
  p.kernel = str(host.value("kernel", nlohmann::json()));
  p.arch = str(host.value("arch", nlohmann::json()));
  p.cpus = j.value("cpu", nlohmann::json::object()).value("logical_cpus", 0);
  const auto& mem = j.value("memory", nlohmann::json::object());
  p.memory_total_bytes = mem.value("total_bytes", uint64_t{0});
  p.memory_available_bytes = mem.value("available_bytes", uint64_t{0});
  const auto& gpu = j.value("gpu", nlohmann::json::object());
  p.gpu_status = str(gpu.value("status", nlohmann::json()));
  for (const auto& d : gpu.value("devices", nlohmann::json::array())) {
    GpuInfo g;
    g.index = d.value("index", 0);
    g.name = d.value("name", "");
    g.memory_total_bytes = d.value("memory_total_bytes", uint64_t{0});
    g.memory_used_bytes =
        g.memory_total_bytes - std::min(g.memory_total_bytes, d.value("memory_free_bytes", uint64_t{0}));
    p.gpus.push_back(g);
  }
  const auto& ver = j.value("versions", nlohmann::json::object());
  p.cuda_version = str(ver.value("cuda_runtime", nlohmann::json()));
  p.nccl_version = str(ver.value("nccl", nlohmann::json()));
  return p;
}

double measure_latency(Session& session, int samples) {
  session.connect();
  std::vector<double> t;
  for (int i = 0; i < std::max(1, samples); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    session.exec("true", 10);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace flotilla::remote
