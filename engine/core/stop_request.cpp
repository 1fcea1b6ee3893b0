// stop.request: written by the runs layer before its SIGTERM, read by the worker (see stop_request.h).
#include "engine/core/stop_request.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace flotilla {

namespace {
std::string path_of(const std::string& run_dir) { return run_dir + "/" + kStopRequestFile; }
}  // namespace

bool write_stop_request(const std::string& run_dir, const StopRequest& request) {
  if (run_dir.empty()) return false;
  const std::string path = path_of(run_dir), tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << nlohmann::json{{"cause", request.cause}, {"note", request.note}, {"by", request.by}}.dump()
        << "\n";
    if (!out.flush()) return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::optional<StopRequest> read_stop_request(const std::string& run_dir, double not_before) {
  if (run_dir.empty()) return std::nullopt;
  const std::string path = path_of(run_dir);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
  if (not_before > 0 && mtime + 1.0 < not_before) return std::nullopt;  // an earlier start's leftover
  std::ifstream in(path);
  try {
    const auto j = nlohmann::json::parse(in);
    StopRequest r;
    r.cause = j.value("cause", std::string());
    r.note = j.value("note", std::string());
    r.by = j.value("by", std::string());
    if (r.cause.empty()) return std::nullopt;
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void remove_stop_request(const std::string& run_dir) {
  if (run_dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path_of(run_dir), ec);
}

std::string stop_checkpoint_reason(const std::optional<StopRequest>& request) {
  if (!request) return "preempted";
  return request->cause == "budget" ? "budget" : "stop";
}

std::string checkpoint_reason_words(const std::string& reason) {
  if (reason == "periodic") return "periodic";
  if (reason == "request") return "checkpoint now";
  if (reason == "final") return "final";
  if (reason == "stop") return "stopped on request";
  if (reason == "budget") return "budget reached";
  if (reason == "preempted") return "preempted by the system";
  // Before issue 34 a Stop, a budget stop and a preemption were all stored as "preempt".
  if (reason == "preempt") return "stop signal (a Stop, a budget or a preemption)";
  return reason;
}

}  // namespace flotilla
