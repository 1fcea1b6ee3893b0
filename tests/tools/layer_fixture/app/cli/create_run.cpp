// Fixture: a command stores a new run row itself instead of asking the runs service, on purpose.
#include "db/run_store.h"

void bad(flotilla::db::Database& db, const flotilla::db::NewRun& row) { flotilla::db::create_run(db, row); }
