// A model loaded for inference, from what the user points at: a checkpoint (a step-N folder, a
// checkpoints folder or a run folder: its newest verified checkpoint; a tensor- or
// pipeline-parallel one gathered onto one device), or a Hugging Face folder (or Hub name). A LoRA
// checkpoint is its base (the run's model.init_from) with the adapters applied unmerged, a QLoRA one
// over the base quantised to NF4 as it trained. Used by sample, eval and chat alike.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace flotilla::infer {

struct LoadRequest {
  std::string checkpoint;  // one of checkpoint / hf_model
  std::string hf_model;    // a Hugging Face folder or org/name[@revision]
  std::string device = "cpu";  // "cpu" or "cuda" (where the worker has the CUDA plugin)
};

struct LoadedModel {
  std::unique_ptr<Model> model;  // in evaluation mode (set_training(false))
  std::string source;            // the verified checkpoint folder, or the Hugging Face folder
  int64_t step = -1;             // a checkpoint's step (-1: a Hugging Face folder)
  std::string tokenizer;         // the tokenizer's folder or file found for it ("" when none)
  std::string description;       // one line for stderr: what was loaded ("LoRA r 8 on q,v over ...")
  std::vector<std::string> warnings;  // damaged newer checkpoints skipped, and the like
};

// Throws Error naming the path and what to do (kUsage: neither or both given; kCheckpoint: no
// verified checkpoint; kConfig: a folder that is not a model).
LoadedModel load_for_inference(const LoadRequest& request);

}  // namespace flotilla::infer
