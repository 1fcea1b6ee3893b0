// Runs the store has as running on this machine whose worker is gone: found and settled by
// every command and by the app at start.
//
// Decision: "gone" is decided by the worker.pid in the run's folder (pid and start time, so a
// reused pid keeps nothing alive), never by age or by who started the run; a worker that is
// alive is left alone, however long nobody has watched it. Settling first stores what is left
// of its metrics.jsonl (from the committed offset), then ends the run as its summary record says,
// at the time the worker ended (the summary's time, else the file's), so its cost accrual closes
// there and not when somebody noticed. A row left `created` by a start that never happened
// (a full disk, a worker that could not start) is ended failed once it is a few minutes old; one
// whose folder has a worker.pid (its worker ran, but the store refused to record it running) is
// recorded running from the worker's start and settled as above, so what it trained is stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "db/run_store.h"
#include "db/writer.h"

namespace flotilla::runs {

struct SettledRun {
  int64_t run_id = 0;
  std::string name;
  db::RunStatus status = db::RunStatus::kFailed;  // what it was settled as
  std::string note;
  bool removed = false;  // a new run whose start the store refused, never trained: its row is gone
};

// Settles every stale local run of the store `writer` writes (see above); `origin` names who
// settled it ("flotilla runs list", "flotilla app at start"). Returns what was settled. Store
// errors are not thrown: a run that cannot be settled now stays as it is, for the next time.
std::vector<SettledRun> settle_stale_local_runs(db::Writer& writer, const std::string& origin,
                                                double created_grace_s = 300);

// Whether a stored run is on this machine (a local run dir, not "<node>:/...").
bool is_local_run(const db::Run& run);

// Why `run` must not be deleted now, "" when it may: a local run whose worker is alive is never
// deleted (its rows and costs would vanish while it trains unrecorded), whatever its status says.
// The CLI's `runs delete` (even with --force) and the app's Delete both ask this.
std::string live_worker_delete_refusal(const db::Run& run);

}  // namespace flotilla::runs
