// `flotilla plan CONFIG --nodes a,b` (issue 36) as a user meets it: with a link measured between the
// stored nodes a and b (12.5 MB/s, 100 us one-way), the speed section names it and when it was
// measured and the communication time is the formula's over that link; --json carries it as
// calibration.link; a pair never measured is named with the command that measures it; without
// --nodes nothing changes.
#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/run_store.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(
      argv, {"DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM=", "FLOTILLA_CACHE_DIR=" + g_root + "/cache"},
      log));
  r.output = read_file(log);
  return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  g_root = fresh_dir("plan_nodes_cli");
  const std::string demo = std::string(FLOTILLA_SOURCE_DIR) + "/resources/configs/demo.toml";
  {
    flotilla::db::Database d(g_root + "/store.db");
    const int64_t a = flotilla::db::ensure_node(d, "a", "ssh");
    const int64_t b = flotilla::db::ensure_node(d, "b", "ssh");
    flotilla::db::ensure_node(d, "c", "ssh");
    flotilla::db::LinkMeasurement m;
    m.transport = "gloo/tcp";
    m.measured_at = 1.8e9;
    for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
      flotilla::db::NodeLink l;
      l.from_node = f;
      l.to_node = t;
      l.bytes_per_s = 12.5e6;
      l.latency_s = 1e-4;
      m.links.push_back(l);
    }
    flotilla::db::store_link_measurement(d, m);
  }
  const ProcResult plain = cli({"plan", demo, "--set", "parallel.dp=2"});
  CHECK_MSG(plain.exit_code == 0 && !has(plain.output, "link: "), "%s", plain.output.c_str());

  const ProcResult text = cli({"plan", demo, "--set", "parallel.dp=2", "--nodes", "a,b"});
  CHECK_MSG(text.exit_code == 0, "%s", text.output.c_str());
  CHECK_MSG(
      has(text.output,
          "link: measured a -> b at 2027-01-15 08:00 UTC (slowest of 2 nodes): 12.5 MB/s, 100 us one-way"),
      "%s", text.output.c_str());

  const ProcResult js = cli({"plan", demo, "--set", "parallel.dp=2", "--nodes", "a,b", "--json"});
  CHECK_MSG(js.exit_code == 0, "%s", js.output.c_str());
  const auto j = nlohmann::json::parse(js.output, nullptr, false);
  CHECK_MSG(j.is_object() && j.contains("calibration") && j["calibration"].contains("link"), "%s",
            js.output.c_str());
  if (j.is_object() && j.contains("calibration") && j["calibration"].contains("link")) {
    CHECK(j["calibration"]["link"]["bytes_per_s"].get<double>() == 12.5e6);
    CHECK(has(j["calibration"]["link"]["source"].get<std::string>(), "measured a -> b"));
  }

  const ProcResult missing = cli({"plan", demo, "--set", "parallel.dp=2", "--nodes", "a,c"});
  CHECK_MSG(
      missing.exit_code == 0 && has(missing.output, "no link measured a -> c: flotilla nodes links a,c"),
      "%s", missing.output.c_str());
  return summary("test_plan_nodes_cli");
}
