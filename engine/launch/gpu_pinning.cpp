// GPU pinning for `launch` and the ranks (see gpu_pinning.h).
#include "engine/launch/gpu_pinning.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "engine/backend/cuda_plugin.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"

namespace flotilla {
namespace {

// A non-negative decimal integer, or -1.
int parse_ordinal(const std::string& s) {
  if (s.empty() || s.size() > 6) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string plural(int n, const char* one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

}  // namespace

std::vector<int> parse_gpu_list(const std::string& text, const std::string& option) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::set<int> seen;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const int v = parse_ordinal(item);
    if (v < 0)
      throw_usage(option + " '" + text + "': '" + item +
                  "' is not a GPU ordinal; give comma-separated ordinals such as 0,2");
    if (!seen.insert(v).second)
      throw_usage(option + " '" + text + "' lists GPU " + item +
                  " twice; one rank per GPU (NCCL cannot put two ranks of a group on one device)");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<int> assign_gpus(int nproc, int visible, const std::vector<int>& gpus, const std::string& note) {
  const std::string shown = plural(visible, "GPU") + (visible == 1 ? " is" : " are") + " visible" +
                            (note.empty() ? std::string() : " (" + note + ")");
  if (!gpus.empty() && static_cast<int>(gpus.size()) != nproc)
    throw_config("launch: --gpus lists " + plural(static_cast<int>(gpus.size()), "GPU") +
                 " but --nproc-per-node is " + std::to_string(nproc) + ": list exactly one GPU per rank");
  if (nproc > visible)
    throw_config("launch: --nproc-per-node " + std::to_string(nproc) + " starts one rank per GPU, but " +
                 (visible == 0 ? shown : "only " + shown) + ": " +
                 (visible == 0
                      ? std::string("train with run.device = \"cpu\", or run on a machine with GPUs")
                      : "lower --nproc-per-node to " + std::to_string(visible) +
                            ", or make more GPUs visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)"));
  std::vector<int> out;
  for (int l = 0; l < nproc; ++l) {
    const int g = gpus.empty() ? l : gpus[static_cast<size_t>(l)];
    if (g >= visible)
      throw_config("launch: --gpus names GPU " + std::to_string(g) + " for local rank " + std::to_string(l) +
                   ", but only " + shown + " (ordinals 0-" + std::to_string(visible - 1) +
                   "): use ordinals below " + std::to_string(visible));
    out.push_back(g);
  }
  return out;
}

int rank_cuda_device(const char* env_value, int local_rank, int visible) {
  if (visible < 1) throw_config("no CUDA device is visible to this rank: check CUDA_VISIBLE_DEVICES");
  if (env_value == nullptr) return (local_rank < 0 ? 0 : local_rank) % visible;
  const int v = parse_ordinal(env_value);
  if (v < 0 || v >= visible)
    throw_config(std::string(kCudaDeviceEnv) + "=" + env_value + " is not one of this rank's " +
                 plural(visible, "visible GPU") + " (ordinals 0-" + std::to_string(visible - 1) +
                 "); start ranks with flotilla-worker launch, or unset it");
  return v;
}

int visible_gpu_count(std::string* why) {
  if (const char* fake = std::getenv(kTestGpuCountEnv)) {
    if (why) *why = std::string(kTestGpuCountEnv) + " (test hook)";
    return std::max(0, parse_ordinal(fake));
  }
  if (!cuda_plugin::built()) {
    if (why) *why = "this worker was built without CUDA";
    return 0;
  }
  std::string reason;
  const cuda_plugin::CudaApi* cuda = cuda_plugin::api(&reason);
  if (cuda == nullptr) {
    if (why) *why = reason;
    return 0;
  }
  return cuda->visible_gpu_count(why);  // engine/cuda/plugin_api.cpp
}

std::string worker_run_device(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "train") return "";
  std::string config;
  std::vector<std::string> sets;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_next = i + 1 < args.size();
    if (a == "--config" && has_next) {
      config = args[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      config = a.substr(9);
    } else if (a == "--set" && has_next) {
      sets.push_back(args[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    }
  }
  if (config.empty()) return "";
  try {
    return load_config(config, sets).run.device;
  } catch (const std::exception&) {
    return "";  // the ranks report the config problem with its full message
  }
}

}  // namespace flotilla
