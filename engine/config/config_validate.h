// Semantic validation of a RunConfig, and the values derived from it (batch geometry, run dir).
//
// Decision: validate() returns every problem rather than throwing at the first, and each message
// shows all the factors involved with their field paths ("train.global_batch_tokens: 500000 is
// not a multiple of train.micro_batch 8 x train.seq_len 256 x parallel.dp 2 = 4096"), so a user
// sees what to change without reading code. It is pure: no file system, no environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla {

struct ConfigProblem {
  std::string path;     // the field at fault, e.g. "model.n_head" ("parallel" for layout-wide ones)
  std::string message;  // what is wrong, with every factor shown
};

// "path: message".
std::string to_string(const ConfigProblem& problem);

// What a config is checked for. kPlan (plan, plan --recommend) needs the model's shape but not
// the weights a LoRA run freezes, so a LoRA fine-tune of a preset can be planned before its
// weights are downloaded; kTrain checks every rule.
enum class ValidateFor { kTrain, kPlan };

// Every problem of the config. world_size > 0 also checks dp*tp*pp against it (the number of
// ranks `launch` started; 1 for a plain `train`); 0 skips that check.
std::vector<ConfigProblem> validate(const RunConfig& config, int world_size = 0,
                                    ValidateFor purpose = ValidateFor::kTrain);

// Throws Error(kConfig) listing every problem, one per line; returns when there are none.
void validate_or_throw(const RunConfig& config, int world_size = 0,
                       ValidateFor purpose = ValidateFor::kTrain);

// Tokens per optimizer step: train.global_batch_tokens, or when 0 micro_batch * seq_len * dp
// (times parallel.micro_batches when pp > 1: a pipeline step runs that many micro-batches).
int64_t tokens_per_step(const RunConfig& config);

// Micro-batches each data-parallel rank runs per optimizer step:
// tokens_per_step / (micro_batch * seq_len * dp). With pp > 1 the pipeline runs them
// parallel.micro_batches at a time (validate() requires that to divide this).
int64_t grad_accum_steps(const RunConfig& config);

// run.out_dir, or "runs/<run.name>" when it is empty.
std::string resolved_out_dir(const RunConfig& config);

}  // namespace flotilla
