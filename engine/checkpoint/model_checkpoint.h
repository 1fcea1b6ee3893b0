// A checkpoint's model, for the commands that only need the weights (export, sample): accepts a
// step-N directory, a checkpoints root or a run directory, verifies the checkpoint, and reads the
// model dimensions from the resolved config stored in trainer.json (never guessed from sizes).
// A tensor/pipeline-parallel checkpoint (trainer.json "parallel": tp or pp > 1) is gathered from
// every shard's rank file into the full layout, so export and sample work on it unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt.h"
#include "engine/model/lora.h"
#include "engine/model/param_layout.h"

namespace flotilla {

struct ModelCheckpoint {
  std::string dir;  // the verified step-N directory
  int64_t step = 0;
  ModelDims dims;
  LoraSpec lora;  // a LoRA run's adapters (rank 0: full training)
  // What trained: num_parameters(dims) floats in our layout, or under LoRA the whole adapter vector
  // (ParamLayout(dims, lora)); the frozen base is model.init_from's (interop/peft.h merges them).
  std::vector<float> params;
  std::string trainer_state_json;
  std::string init_from;     // the run's model.init_from ("" when it started from random weights)
  std::string base_weights;  // LoRA: the fingerprint of init_from's weight files when it was trained
};

// Throws Error(kCheckpoint) naming the directory and what is missing. Damaged newer checkpoints
// are skipped with a message appended to `warnings` (may be null).
ModelCheckpoint load_model_checkpoint(const std::string& path, std::vector<std::string>* warnings);

// The layout a checkpoint was saved under, from its trainer.json (older files: pure data parallel).
// zero is the stage the optimizer state is cut by (0 whenever dp was 1).
struct SavedLayout {
  int world = 1, dp = 1, tp = 1, pp = 1, zero = 0;
};
SavedLayout saved_layout(const std::string& trainer_state_json);

// A checkpoint's parameters and (moments = true) AdamW moments in the full layout of `table` (the
// architecture's, or a LoRA run's adapters), gathered from the rank files of `layout`: every TP/PP
// shard's first DP replica, and under ZeRO every replica's optimizer piece. `rank0` is the loaded
// rank-0 file (its sections are used when they are there; the other files are read and verified).
// Throws Error(kCheckpoint) naming the rank file that is missing a section or has the wrong size.
// Resume on another layout (train_detail::Loop::reshard) cuts the new shards from this.
struct FullState {
  std::vector<float> params, m, v;
};
void gather_full_state(const LoadedCheckpoint& rank0, const ModelDims& d, const ParamLayout& table,
                       const SavedLayout& layout, bool moments, FullState& out);

}  // namespace flotilla
