// Fixture: a page reads a run's metrics stream by the store's offsets itself, on purpose.
#include "db/run_store.h"

long long bad(flotilla::db::Database& db, long long run, const std::string& key) {
  return flotilla::db::committed_offset(db, run, key);
}
