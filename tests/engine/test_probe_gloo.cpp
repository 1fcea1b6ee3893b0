// Issue 19, defect 4: `probe` reports the Gloo the worker is linked with (Probe::gloo was never set,
// so probe always said "Gloo not available" even though multi-rank CPU training uses Gloo).
#include <nlohmann/json.hpp>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;

int main() {
  const ProcResult j = run_worker({"probe", "--json"});
  CHECK_MSG(j.exit_code == 0, "probe --json exited %d: %s", j.exit_code, j.output.c_str());
  const auto doc = nlohmann::json::parse(j.output, nullptr, false);
  CHECK(!doc.is_discarded());
  const ProcResult t = run_worker({"probe"});
#if defined(FLOTILLA_HAVE_GLOO)
  const auto gloo = doc.is_discarded() ? nlohmann::json() : doc["versions"]["gloo"];
  CHECK_MSG(gloo.is_string() && gloo.get<std::string>().find('.') != std::string::npos, "gloo = %s",
            gloo.dump().c_str());
  CHECK_MSG(
      t.output.find("Gloo      " + (gloo.is_string() ? gloo.get<std::string>() : "?")) != std::string::npos,
      "%s", t.output.c_str());
#else
  CHECK(doc.is_discarded() || doc["versions"]["gloo"].is_null());
#endif
  return flotilla_test::summary("test_probe_gloo");
}
