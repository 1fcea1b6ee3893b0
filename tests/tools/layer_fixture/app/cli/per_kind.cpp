// Fixture: a command drives one kind of run's own lifecycle instead of the runs service, on purpose.
#include "runs/local_run.h"

int bad(flotilla::db::Writer* writer, const flotilla::runs::LocalWatch& w) {
  return flotilla::runs::watch_local_run(writer, w, {}).exit_code;
}
