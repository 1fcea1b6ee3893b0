// Latest step times (see step_times.h).
#include "db/step_times.h"

#include "db/sql.h"

namespace flotilla::db {

std::vector<StepTime> latest_step_times(const Database& db, int64_t run_id, int limit) {
  Stmt st(db,
          "SELECT step, time FROM metrics WHERE run_id = ?1 AND name = 'loss' ORDER BY step DESC LIMIT ?2");
  st.bind(1, run_id).bind(2, limit);
  std::vector<StepTime> out;
  while (st.step()) out.push_back(StepTime{st.i64(0), st.f64(1)});
  return out;
}

}  // namespace flotilla::db
