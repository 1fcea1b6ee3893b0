// The export command's arguments (see export_args.h).
#include "runs/export_args.h"

#include <filesystem>

namespace flotilla::runs {

std::vector<std::string> export_worker_args(const ExportRequest& r) {
  std::string out = r.out;
  if (r.format == "safetensors" && (out.empty() || out.back() != '/')) out += '/';
  std::vector<std::string> a{"export", "--checkpoint", r.checkpoint, "--format", r.format, "--out", out};
  if (r.format != "safetensors" && !r.dtype.empty()) a.insert(a.end(), {"--dtype", r.dtype});
  std::error_code ec;
  if (r.format == "hf" && !r.tokenizer.empty() && std::filesystem::is_directory(r.tokenizer, ec))
    a.insert(a.end(), {"--tokenizer", r.tokenizer});
  return a;
}

}  // namespace flotilla::runs
