// trainer.json: the non-tensor state of a checkpoint (step, tokens, RNG, data cursor, config).
//
// The RNG's spare normal is stored as its IEEE bits so the restored stream is bit-identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/rng.h"

namespace flotilla {

struct TrainerState {
  int64_t step = 0;                   // completed optimizer steps
  int64_t tokens = 0;                 // tokens consumed by all ranks
  Rng::State rng;                     // trainer RNG (sampling)
  std::vector<int64_t> train_cursor;  // DataLoader::cursor() of this rank
  float best_val_loss = 0;            // 0 = none yet
  double last_save_seconds = -1;      // duration of the previous save (preemption policy)
  int world_size = 1;
  int dp = 0, tp = 1, pp = 1;  // rank grid the shards were saved under (dp 0 = world_size: older files)
  int zero = 0;                // ZeRO stage the optimizer state was saved under
  std::string config_json;     // resolved config (JSON object text)
  std::string config_toml;     // resolved config (TOML text)
  std::string engine_version;
  // LoRA: the frozen base the adapters were trained on (model.init_from) and the fingerprint of its
  // weight files (interop::base_weights_fingerprint); empty for full training.
  std::string base_model;
  std::string base_weights;
  // checkpoint.keep_best: the task score kept by, and its best so far among saved checkpoints
  // (this one included); best_task_step -1 = none yet.
  std::string best_task_metric;
  int64_t best_task_step = -1;
  double best_task_value = 0;
};

std::string trainer_state_to_json(const TrainerState& state);
// Throws Error(kCheckpoint) naming `source` when the JSON lacks a field or has the wrong type.
TrainerState parse_trainer_state(const std::string& json_text, const std::string& source);

}  // namespace flotilla
