// The trainer's communication meter (issue 36): rank 0's process groups' time and volume per step,
// turned into the `comm` metrics record (metrics.h CommRecord, docs/metrics-protocol.md).
//
// Decisions:
// - Only the steps count: the meter adds the comm::CommStats delta between the start and the end of
//   each train_step, so evaluation, checkpoint broadcasts and the per-step exchange of timings (on
//   the world group, never metered) do not dilute the training step's figures.
// - A group is metered once however many roles it has (with pp = 2 the tied embedding's sum runs on
//   the pipeline group); groups of one rank move nothing and are left out.
// - The figures are means per step over the steps since the last record, so a record is comparable
//   whatever train.log_every is.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/train/metrics.h"

namespace flotilla {

class CommMeter {
 public:
  // Meters `group` (null, a one-rank group or one already metered is ignored).
  void add_group(const comm::ProcessGroup* group);
  bool empty() const { return groups_.empty(); }

  void begin_step();              // before a training step
  void end_step(double step_ms);  // after it: adds the groups' deltas since begin_step()
  // The record for the steps since the last take (step: the step record it follows), then starts
  // over. steps == 0 when no step ended since.
  CommRecord take(int64_t step);

  // The protocol's op name for an operation kind ("send/recv" -> "send_recv").
  static const char* record_op_name(comm::OpKind kind);

 private:
  struct Group {
    const comm::ProcessGroup* group = nullptr;
    comm::CommStats before{};  // at begin_step()
    comm::CommStats sum{};     // deltas summed since the last take
  };
  std::vector<Group> groups_;
  int64_t steps_ = 0;
  double step_ms_ = 0;
};

}  // namespace flotilla
