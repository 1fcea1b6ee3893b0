// Fixture: a page runs SQL and writes a run's status itself, on purpose.
#include "db/sql.h"

void bad(flotilla::db::Database& db) {
  flotilla::db::Stmt st(db, "SELECT value FROM metrics WHERE run_id = ?1");
  flotilla::db::set_status(db, 1, flotilla::db::RunStatus::kStopped);
}
