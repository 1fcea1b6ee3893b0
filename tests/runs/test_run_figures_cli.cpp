// A run's time and money read the same in every `flotilla` command (issue 34 #8, #14, #17), over
// two real runs of the real worker started with the real `flotilla run`: one priced ($36/h in its
// config), one unpriced (no price anywhere).
// - one running time everywhere: `flotilla run`'s last line, `runs show` (text and JSON),
//   `compare` and `costs` name it and give the same figure, and $/h x running time = the cost;
// - training time (first to last step) is named as such and is not the running time;
// - an unpriced run's dollars read "unpriced" and are null in JSON, never $0.00 or 0;
// - compare writes money as the app does ("$0.0053", not "0.01"), MFU as a percentage, and
//   device-hours with the device's unit, under no "gpu_hours" row for CPU runs.
#include <cmath>
#include <cstdio>
#include <regex>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "runs/figures.h"
#include "runs/run_speed.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
using nlohmann::json;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "cd \"$0\" && exec \"$@\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code =
      wait_exit(spawn(argv, {"OMP_NUM_THREADS=1", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log));
  r.output = read_file(log);
  return r;
}

std::string config(const std::string& name, const std::string& extra) {
  const std::string path = g_root + "/" + name + ".toml";
  write_text(path,
             "[run]\nname = \"" + name +
                 "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
                 "vocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = 40\n"
                 "micro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 1000000\n" +
                 extra);
  return path;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The line of `text` that starts with `label` (after spaces), "" if none.
std::string line_of(const std::string& text, const std::string& label) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, label.size(), label) == 0 &&
        (line.size() == first + label.size() || line[first + label.size()] == ' '))
      return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

}  // namespace

int main() {
  g_root = fresh_dir("run_figures_cli");
  const ProcResult paid = cli({"run", config("paid", "[budget]\nusd_per_hour = 36.0\n")});
  CHECK_MSG(paid.exit_code == 0, "paid: exit %d\n%s", paid.exit_code, paid.output.c_str());
  const ProcResult free = cli({"run", config("free", "")});
  CHECK_MSG(free.exit_code == 0, "free: exit %d\n%s", free.exit_code, free.output.c_str());

  db::RunSummary s, f;
  double usd_per_hour = 0;
  {
    const db::Database d(g_root + "/store.db");
    const db::Run p = db::get_run(d, "paid");
    usd_per_hour = p.usd_per_hour.value_or(0);
    s = runs::run_summary(d, p.id);
    f = runs::run_summary(d, db::get_run(d, "free").id);
  }
  CHECK(usd_per_hour == 36.0);
  // The price multiplies the running time: $/h x running time = the cost shown.
  CHECK_MSG(s.cost_usd && std::fabs(*s.cost_usd - usd_per_hour * s.running_s / 3600.0) <= 1e-9,
            "cost %.6f, $/h x running %.6f", s.cost_usd.value_or(-1), usd_per_hour * s.running_s / 3600.0);
  CHECK_MSG(s.running_s > s.training_s && s.training_s > 0, "running %.3f s, training %.3f s", s.running_s,
            s.training_s);
  CHECK(!f.cost_usd && !f.usd_per_million_tokens);
  const std::string running = runs::clock_text(s.running_s), training = runs::clock_text(s.training_s);
  const std::string cost = runs::usd_text(s.cost_usd);
  std::printf("paid: running %s, training %s, %s at $36/h\n", running.c_str(), training.c_str(),
              cost.c_str());

  // flotilla run's last line: both durations by name, and the cost.
  CHECK_MSG(
      has(paid.output, "running time " + running + " (training " + training + ")") && has(paid.output, cost),
      "%s", paid.output.c_str());
  CHECK_MSG(has(free.output, "unpriced"), "%s", free.output.c_str());

  // runs show: text and JSON.
  ProcResult r = cli({"runs", "show", "paid"});
  CHECK(r.exit_code == 0);
  CHECK_MSG(has(line_of(r.output, "time"), "running " + running) &&
                has(line_of(r.output, "time"), "training " + training),
            "%s", r.output.c_str());
  CHECK_MSG(has(line_of(r.output, "cost"), cost) && has(line_of(r.output, "cost"), "CPU-h"), "%s",
            r.output.c_str());
  CHECK_MSG(has(line_of(r.output, "price"), "$36.00/h") && has(line_of(r.output, "price"), running), "%s",
            r.output.c_str());
  r = cli({"runs", "show", "paid", "--json"});
  json j = json::parse(r.output, nullptr, false);
  CHECK_MSG(!j.is_discarded() && j["summary"]["running_s"].is_number() &&
                j["summary"]["training_s"].is_number() && j["summary"]["cost_usd"].is_number(),
            "%s", r.output.c_str());
  if (!j.is_discarded() && j["summary"]["running_s"].is_number() && j["summary"]["cost_usd"].is_number()) {
    CHECK_NEAR(j["summary"]["running_s"].get<double>(), s.running_s, 1e-6);
    CHECK_NEAR(j["summary"]["cost_usd"].get<double>(), *s.cost_usd, 1e-9);
    CHECK(j["summary"]["device_hours_unit"] == "CPU-h" && !j["summary"].contains("gpu_hours"));
  }
  r = cli({"runs", "show", "free", "--json"});
  j = json::parse(r.output, nullptr, false);
  CHECK_MSG(!j.is_discarded() && j["summary"]["cost_usd"].is_null() &&
                j["summary"]["usd_per_million_tokens"].is_null(),
            "%s", r.output.c_str());
  CHECK(has(line_of(cli({"runs", "show", "free"}).output, "cost"), "unpriced"));

  // compare: text as the app writes it, JSON with numbers and nulls.
  r = cli({"compare", "free", "paid"});
  CHECK(r.exit_code == 0);
  const std::string cost_row = line_of(r.output, "cost_usd");
  CHECK_MSG(has(cost_row, "unpriced") && has(cost_row, cost), "%s", r.output.c_str());
  CHECK_MSG(has(line_of(r.output, "usd_per_million_tokens"), "unpriced"), "%s", r.output.c_str());
  CHECK_MSG(
      has(line_of(r.output, "running_time"), running) && has(line_of(r.output, "training_time"), training),
      "%s", r.output.c_str());
  CHECK_MSG(line_of(r.output, "gpu_hours").empty() && has(line_of(r.output, "device_hours"), " CPU-h"), "%s",
            r.output.c_str());
  if (s.mfu) CHECK_MSG(has(line_of(r.output, "mfu"), runs::mfu_text(*s.mfu)), "%s", r.output.c_str());
  // Money keeps its digits: a cost under $1 has four decimals (never "0.01" for $0.0053).
  CHECK_MSG(std::regex_search(cost_row, std::regex("\\$[0-9]+\\.[0-9]{2}")), "%s", cost_row.c_str());
  if (*s.cost_usd < 1)
    CHECK_MSG(std::regex_search(cost_row, std::regex("\\$0\\.[0-9]{4}\\b")), "%s", cost_row.c_str());
  r = cli({"compare", "free", "paid", "--json"});
  j = json::parse(r.output, nullptr, false);
  CHECK_MSG(!j.is_discarded() && j["runs"].size() == 2, "%s", r.output.c_str());
  if (!j.is_discarded() && j["runs"].size() == 2) {
    CHECK(j["runs"][0]["cost_usd"].is_null() && j["runs"][0]["usd_per_million_tokens"].is_null());
    CHECK(j["runs"][1]["cost_usd"].is_number() &&
          std::fabs(j["runs"][1]["cost_usd"].get<double>() - *s.cost_usd) <= 1e-9);
    CHECK(j["runs"][1]["running_s"].is_number() &&
          std::fabs(j["runs"][1]["running_s"].get<double>() - s.running_s) <= 1e-6);
    CHECK(j["runs"][1]["device_hours_unit"] == "CPU-h" && !j["runs"][1].contains("gpu_hours"));
  }

  // costs: the same figures, "unpriced" (null) for the free run.
  r = cli({"costs"});
  CHECK(r.exit_code == 0);
  CHECK_MSG(has(line_of(r.output, "free"), "unpriced"), "%s", r.output.c_str());
  CHECK_MSG(has(line_of(r.output, "paid"), cost) && has(line_of(r.output, "paid"), "running time " + running),
            "%s", r.output.c_str());
  r = cli({"costs", "--json"});
  j = json::parse(r.output, nullptr, false);
  bool seen_free = false, seen_paid = false;
  if (!j.is_discarded())
    for (const auto& l : j["by_run"]) {
      if (l["key"] == "free") seen_free = l["usd"].is_null();
      if (l["key"] == "paid")
        seen_paid = l["usd"].is_number() && l["running_s"].is_number() &&
                    std::fabs(l["usd"].get<double>() - *s.cost_usd) <= 1e-9 &&
                    std::fabs(l["running_s"].get<double>() - s.running_s) <= 1e-6;
    }
  CHECK_MSG(seen_free && seen_paid, "%s", r.output.c_str());
  return summary("test_run_figures_cli");
}
