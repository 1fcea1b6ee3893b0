// Fixture: a page branches on the kind of a run, on purpose.
#include "runs/slurm_run.h"

bool bad(const flotilla::db::Run& run) {
  if (flotilla::runs::is_slurm_run(run)) return true;
  return false;
}
