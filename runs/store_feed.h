// A stored run's records read back from the run store as it grows: the one feed of records a page
// that shows a run draws from, whoever started the run (this window, another window, `flotilla run`
// in a terminal, an app before a restart) and whoever watches it (this process, another, nobody).
//
// Decision: the store is the one truth about a run, so the Live page reads every run from it, not
// from the watcher that happens to be in this process. The watcher stores a chunk of the worker's
// metrics and its offset in one transaction; this reader turns what the store holds into the
// engine's typed records (the same type a worker writes: run_start, step, eval, task, comm,
// checkpoint, event, sample, summary) past a cursor per kind, so each call returns only what was
// committed since the last one, every record once, in step order, with the run's row (its status,
// note, times) read in the same call. A step comes back whole: step_values_after() stops at the
// highest step committed when it began. What the store does not keep is not invented: a run stored
// before its run_start facts were recorded with fields starts from its row (planned steps from its
// config). Values of steps a resumed worker computed again after a checkpoint replace stored rows
// the reader has passed; it does not read them again. A comm record comes back whole (its comm/
// rows commit together; the read stops at the highest step whose comm/step_ms it saw) with its
// groups and ops as the worker wrote them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/run_store.h"
#include "engine/train/metrics_reader.h"

namespace flotilla::runs {

struct StoreRead {
  std::vector<MetricsRecord> records;  // new since the previous read, in order
  db::Run run;                         // the run's row as the store has it now
  // The run's row says it ended (completed, stopped, failed, preempted): after this read nothing
  // more comes unless the run is resumed in the same row.
  bool ended = false;
};

class StoreFeedReader {
 public:
  explicit StoreFeedReader(int64_t run_id) : run_id_(run_id) {}
  int64_t run_id() const { return run_id_; }
  // What the store has of the run past the cursors. Throws db::DbError when the store cannot be
  // read (the run's row is gone: kNotFound).
  StoreRead read(const db::Database& db);
  // How many records read() has returned so far.
  uint64_t records_read() const { return count_; }

 private:
  int64_t run_id_;
  bool started_ = false;  // a run_start record was returned
  int64_t last_step_ = 0, last_eval_ = 0, last_checkpoint_ = -1, last_event_ = 0;
  int64_t last_comm_ = 0;
  std::map<std::string, int64_t> last_task_;  // task name -> its highest step returned
  std::string summary_;  // the summary line returned last ("": none)
  uint64_t count_ = 0;
};

}  // namespace flotilla::runs
