// The trainer's communication meter (see comm_meter.h).
#include "engine/train/comm_meter.h"

#include <algorithm>

namespace flotilla {

const char* CommMeter::record_op_name(comm::OpKind kind) {
  return kind == comm::OpKind::kSendRecv ? "send_recv" : comm::op_name(kind);
}

void CommMeter::add_group(const comm::ProcessGroup* group) {
  if (group == nullptr || group->size() < 2) return;
  if (std::any_of(groups_.begin(), groups_.end(), [&](const Group& g) { return g.group == group; })) return;
  Group g;
  g.group = group;
  groups_.push_back(g);
}

void CommMeter::begin_step() {
  for (Group& g : groups_) g.before = g.group->stats();
}

void CommMeter::end_step(double step_ms) {
  for (Group& g : groups_) {
    const comm::CommStats now = g.group->stats();
    for (int k = 0; k < comm::kOpKinds; ++k) {
      comm::OpStats& s = g.sum.per_op[k];
      const comm::OpStats& a = g.before.per_op[k];
      const comm::OpStats& b = now.per_op[k];
      s.count += b.count - a.count;
      s.bytes += b.bytes - a.bytes;
      s.busy_s += b.busy_s - a.busy_s;
      s.wait_s += b.wait_s - a.wait_s;
    }
  }
  ++steps_;
  step_ms_ += step_ms;
}

CommRecord CommMeter::take(int64_t step) {
  CommRecord r;
  r.step = step;
  r.steps = steps_;
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  r.step_ms = step_ms_ / n;
  for (Group& g : groups_) {
    CommGroupRecord out;
    out.group = g.group->name();
    out.size = g.group->size();
    for (int k = 0; k < comm::kOpKinds; ++k) {
      const comm::OpStats& s = g.sum.per_op[k];
      if (s.count == 0) continue;
      CommOpRecord o;
      o.op = record_op_name(static_cast<comm::OpKind>(k));
      o.count = static_cast<double>(s.count) / n;
      o.bytes = static_cast<double>(s.bytes) / n;
      o.ms = s.busy_s * 1000.0 / n;
      o.wait_ms = s.wait_s * 1000.0 / n;
      out.ops.push_back(o);
    }
    r.groups.push_back(std::move(out));
    g.sum = comm::CommStats{};
  }
  steps_ = 0;
  step_ms_ = 0;
  return r;
}

}  // namespace flotilla
