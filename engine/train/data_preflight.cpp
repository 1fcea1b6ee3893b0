// The data preflight (see data_preflight.h).
#include "engine/train/data_preflight.h"

#include "engine/core/error.h"

namespace flotilla {

namespace {

// Opens one split's loader, naming `key` in any failure.
std::unique_ptr<DataLoader> open_split(const LoaderOptions& options, const RunConfig& cfg, const char* key) {
  try {
    // Every shard's header, size and (checked mode) tokens, before the loader plans its batches.
    for (const auto& path : expand_shards(options.pattern))
      inspect_shard(path, cfg.model.vocab_size, cfg.data.checked);
    return std::make_unique<DataLoader>(options);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(key) + ": " + e.what());
  }
}

}  // namespace

RunData open_run_data(const RunConfig& cfg, const std::string& train_pattern, const std::string& val_pattern,
                      int dp_rank) {
  LoaderOptions lo;
  lo.pattern = train_pattern;
  lo.B = cfg.train.micro_batch;
  lo.T = cfg.train.seq_len;
  lo.rank = dp_rank;  // every TP rank and pipeline stage of a replica reads the same batches
  lo.world = cfg.parallel.dp;
  lo.shuffle = cfg.data.shuffle;
  lo.seed = cfg.run.seed;
  lo.checked = cfg.data.checked;
  lo.vocab_size = cfg.model.vocab_size;
  RunData out;
  out.train = open_split(lo, cfg, "data.train");
  if (!val_pattern.empty()) {
    LoaderOptions vo = lo;
    vo.pattern = val_pattern;
    vo.shuffle = false;
    out.val = open_split(vo, cfg, "data.val");
  }
  return out;
}

std::vector<ConfigProblem> preflight_data(const RunConfig& cfg) {
  if (cfg.data.source == "synthetic" || cfg.data.train.empty()) return {};
  try {
    open_run_data(cfg, cfg.data.train, cfg.data.val, 0);
  } catch (const Error& e) {
    std::string message = e.what();
    std::string path = "data";
    for (const char* key : {"data.train", "data.val"}) {
      const std::string prefix = std::string(key) + ": ";
      if (message.rfind(prefix, 0) == 0) {
        path = key;
        message = message.substr(prefix.size());
      }
    }
    return {{path, message}};
  }
  return {};
}

}  // namespace flotilla
