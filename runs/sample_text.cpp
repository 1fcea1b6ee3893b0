// Decoding a run's text samples (see sample_text.h).
#include "runs/sample_text.h"

#include <filesystem>

#include "engine/tokenizer/bpe.h"

namespace flotilla::runs {

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
  if (!config.model.init_from.empty()) candidates.push_back(fs::path(config.model.init_from));
  if (config.data.source != "synthetic" && !config.data.train.empty()) {
    const fs::path train(config.data.train);
    std::error_code ec;
    candidates.push_back(fs::is_directory(train, ec) ? train : train.parent_path());
  }
  for (const fs::path& dir : candidates)
    if (holds_tokenizer(dir)) return dir.string();
  return {};
}

SampleDecoder::SampleDecoder(const std::string& path) {
  if (path.empty()) return;
  try {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(path));
  } catch (const std::exception& e) {
    error_ = e.what();
  }
}

SampleDecoder::~SampleDecoder() = default;

std::string SampleDecoder::text(const std::vector<int32_t>& ids, const std::string& text) const {
  if (!text.empty()) return text;
  if (tokenizer_) {
    std::vector<uint32_t> u;
    u.reserve(ids.size());
    bool ok = true;
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer_->vocab_size()) ok = false;
      u.push_back(static_cast<uint32_t>(id));
    }
    if (ok) return tokenizer_->decode(u);
  }
  std::string out = "ids:";
  for (int32_t id : ids) out += " " + std::to_string(id);
  return out;
}

}  // namespace flotilla::runs
