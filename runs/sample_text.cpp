// Decoding a run's text samples (see sample_text.h).
#include "runs/sample_text.h"

#include <sstream>

#include "engine/data/chat_format.h"
#include "engine/data/run_tokenizer.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::runs {

std::string run_tokenizer_path(const RunConfig& config) { return flotilla::run_tokenizer_path(config); }

std::vector<std::string> sample_worker_args(const SampleRequest& r) {
  auto number = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  std::vector<std::string> a{"sample",
                             "--checkpoint",
                             r.checkpoint,
                             "--tokens",
                             std::to_string(r.tokens),
                             "--temperature",
                             number(r.temperature),
                             "--top-k",
                             std::to_string(r.top_k),
                             "--top-p",
                             number(r.top_p),
                             "--seed",
                             std::to_string(r.seed)};
  if (r.tokenizer.empty()) {
    a.insert(a.end(),
             {"--prompt-ids", r.prompt.find_first_not_of(" \t\n") == std::string::npos ? "0" : r.prompt});
  } else {
    a.insert(a.end(), {"--tokenizer", r.tokenizer, "--prompt", r.prompt, "--chat", r.chat});
    if (!r.system.empty()) a.insert(a.end(), {"--system", r.system});
    for (const std::string& s : r.stops) a.insert(a.end(), {"--stop", s});
    if (r.special) a.push_back("--special");
  }
  if (r.json) a.push_back("--json");
  return a;
}

bool has_chat_template(const std::string& tokenizer_path) {
  return flotilla::has_chat_template(tokenizer_path);
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
