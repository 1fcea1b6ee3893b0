// One micro-batch as the trainer hands it to the model (host memory), and how its loss is weighed.
//
// Non-obvious decision: a step's micro-batches are read before its first forward, so the number of
// targets with a loss in the whole global batch (all micro-batches of all data-parallel ranks) is
// known before the first backward. With masked fine-tuning data (engine/data/loader.h) each
// counted target then gets d(loss) = 1 / that number, which is what transformers' Trainer does
// (num_items_in_batch), instead of a mean of per-micro-batch means that over-weighs micro-batches
// with few answer tokens. For data with no ignored target the scales are exactly 1/accum, the
// arithmetic the trainer has always used.
#pragma once

#include <cstdint>
#include <vector>

namespace flotilla {

struct MicroBatch {
  std::vector<int32_t> inputs, targets, positions;  // B*T each; positions empty = 0..T-1 per row
  int64_t counted = 0;                              // targets with a loss (not kIgnoreTarget)
  float loss_scale = 1;    // the model's backward(loss_scale): d(loss) per target = loss_scale / counted
  double loss_weight = 1;  // what this micro-batch's mean loss weighs in the step's reported loss sum
  const int32_t* pos() const { return positions.empty() ? nullptr : positions.data(); }
};

// How a step's (or an evaluation's) weighted loss sum becomes its mean on one rank.
struct LossMean {
  bool weighted = false;  // some target is ignored: divide by the counted targets
  double factor = 0;      // weighted: dp / (counted targets of the global batch)
  double of(double sum, int64_t count) const {
    return weighted ? sum * factor : sum / static_cast<double>(count);
  }
};

}  // namespace flotilla
