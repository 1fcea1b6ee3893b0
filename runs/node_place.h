// Internal to the runs layer (node_run.cpp, node_recover.cpp): a set of SSH nodes as a Place
// (place.h). Rank 0's metrics.jsonl on the master is tailed by offset (source
// "ssh:<master>:metrics.jsonl"), stop is TERM on every node, a checkpoint is SIGUSR1 to the
// master's launch, the end is the master's recorded exit; every few seconds each node's GPUs go
// into system_samples, and with a Recovery the place starts itself again after a preemption.
#pragma once

#include <chrono>
#include <vector>

#include "runs/node_run.h"
#include "runs/place.h"

namespace flotilla::runs {

class NodesPlace : public Place {
 public:
  // `recovery` null: a plain watch (watch_node_run); else supervise_node_run's recovery.
  NodesPlace(std::vector<Node>& nodes, Watch w, const Note& note, const Recovery* recovery = nullptr);

  int64_t run_id() const { return w_.run_id; }
  const std::string& run_name() const { return w_.name; }
  std::string source() const override;
  std::string label() const override { return "node " + nodes_[0].rec.name; }
  void begin(db::Writer* writer) override;
  MetricsChunk read(uint64_t offset) override;
  void stored(const std::vector<MetricsRecord>& records) override;
  void stop(StopCause cause, const std::string& why, const Note& note) override;
  void checkpoint(bool stopping, const Note& note) override;
  void kill(const Note& note) override { stop(StopCause::kKill, "kill requested", note); }
  bool turn(const Turn& t, db::Writer* writer, const Note& note) override;
  PlaceEnd end(const EndContext& c, db::Writer* writer, const Note& note) override;
  std::string vanished_note() const override { return "stopping the run on every node with a checkpoint"; }
  std::string lost_note(const std::string& what) const override;
  bool recover(db::Writer& writer, int exit_code, const WatchHooks& hooks) override;  // node_recover.cpp

 private:
  void mirror();
  void sample_gpus(db::Writer* writer);

  std::vector<Node>& nodes_;
  Watch w_;
  Note note_;
  const Recovery* recovery_;
  std::vector<db::SshNode> spares_;
  int recovered_ = 0;
  // per watch
  int64_t newest_checkpoint_ = 0, mirrored_ = 0;
  std::vector<bool> sample_;
  std::chrono::steady_clock::time_point last_gpus_{}, last_status_{};
  int final_exit_ = -1;
  int64_t final_ended_at_ = 0;
};

}  // namespace flotilla::runs
