// Finding a run's tokenizer (see run_tokenizer.h).
#include "engine/data/run_tokenizer.h"

#include <filesystem>
#include <vector>

#include "engine/interop/model_source.h"

namespace flotilla {

namespace fs = std::filesystem;

namespace {

bool holds_tokenizer(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  return fs::exists(dir / "tokenizer.json", ec) ||
         (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec)) ||
         fs::exists(dir / "tokenizer.flotilla.json", ec);
}

}  // namespace

std::string run_tokenizer_path(const RunConfig& config) {
  std::vector<fs::path> candidates;
  if (interop::is_hub_name(config.model.init_from)) {
    // A Hub name: its snapshot when the cache holds it (no download here: the app asks this too).
    const interop::hub::ModelRef ref =
        interop::hub::parse_model_ref(config.model.init_from, "model.init_from");
    if (const auto s =
            interop::hub::find_cached(ref, interop::hub::FileSet::kTokenizer, interop::hub::cache_dir().path))
      candidates.push_back(fs::path(s->folder));
  } else if (!config.model.init_from.empty()) {
    candidates.push_back(fs::path(config.model.init_from));
  }
  if (config.data.source != "synthetic" && !config.data.train.empty()) {
    const fs::path train(config.data.train);
    std::error_code ec;
    candidates.push_back(fs::is_directory(train, ec) ? train : train.parent_path());
  }
  for (const fs::path& dir : candidates)
    if (holds_tokenizer(dir)) return dir.string();
  return {};
}

}  // namespace flotilla
