// Issue 33 D2 (audit row 70), the runs side: a run is never recorded "completed" on a record that
// does not say so whole.
// - `flotilla run` with its run folder on a small tmpfs that fills mid-run (about 40 KiB left,
//   checkpoints off, 400 steps): it was recorded "completed: 27 steps". Now the worker fails (exit
//   6) and the run is recorded failed with the step and the reason. Needs root (skipped otherwise).
// - the watcher's own check, with a worker that exits 0 after a torn metrics.jsonl, and one that
//   exits 0 with step records short of its summary: both recorded failed ("record incomplete"),
//   never completed.
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "runs/local_run.h"
#include "runs_fixture.h"
#include "worker_run.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

uint64_t free_bytes(const std::string& path) {
  struct statvfs v {};
  return ::statvfs(path.c_str(), &v) == 0 ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize : 0;
}

void fill_to(const std::string& dir, uint64_t left) {
  const uint64_t free = free_bytes(dir);
  if (free <= left) return;
  std::ofstream f(dir + "/filler", std::ios::binary);
  const std::string block(4096, '\0');
  for (uint64_t n = 0; n + left < free; n += block.size()) f.write(block.data(), block.size());
}

void cli_run_on_a_full_disk(const std::string& dir) {
  const std::string cfg = dir + "/full.toml";
  flotilla_test::write_text(cfg, tiny_config(400, "save_final = false\n", 0));
  // The synthetic corpus, made on a normal disk and copied in.
  const flotilla_test::ProcResult p =
      flotilla_test::run_worker({"train", "--config", cfg, "--out-dir", dir + "/probe", "--quiet",
                                 "--no-stdout-metrics", "--set", "train.steps=1"},
                                {"OMP_NUM_THREADS=1"});
  CHECK_MSG(p.exit_code == 0, "%s", p.output.c_str());
  const std::string mnt = dir + "/mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=3m") != 0) {
    std::printf("test_run_dir_full_cli: the tmpfs part is skipped: cannot mount a tmpfs (%s); needs root\n",
                std::strerror(errno));
    return;
  }
  const std::string run_dir = mnt + "/r";
  fs::create_directories(run_dir);
  fs::copy(dir + "/probe/data", run_dir + "/data", fs::copy_options::recursive);
  fill_to(mnt, 40 * 1024);
  const std::string log = dir + "/cli.log";
  const pid_t pid = flotilla_test::spawn(
      {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir, FLOTILLA_CLI_PATH, "--db", dir + "/store.db", "run",
       cfg, "--name", "full", "--max-restarts", "0", "--set", "run.out_dir=" + run_dir},
      {"OMP_NUM_THREADS=1", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log);
  const int code = flotilla_test::wait_exit(pid);
  const std::string out = flotilla_test::read_file(log);
  CHECK_MSG(code != 0, "flotilla run exited 0 on a run whose record could not be written:\n%s", out.c_str());
  const db::Run r = db::get_run(db::Database(dir + "/store.db"), "full");
  CHECK_MSG(r.status == db::RunStatus::kFailed, "recorded %s (%s)\n%s", db::to_string(r.status),
            r.status_note.c_str(), out.c_str());
  CHECK_MSG(has(r.status_note, "exit 6") && has(r.status_note, "step ") &&
                (has(r.status_note, "No space left on device") || has(r.status_note, "bytes free")),
            "the recorded end does not give the step and the reason: %s", r.status_note.c_str());
  CHECK_MSG(!has(out, "completed"), "%s", out.c_str());
  ::umount2(mnt.c_str(), MNT_DETACH);
}

// A "worker" (a shell script) that writes `metrics` to metrics.jsonl and exits 0.
runs::LocalOutcome fake_worker(db::Writer& writer, const std::string& dir, const std::string& name,
                               const std::string& metrics) {
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(200));
  req.name = name;
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  const runs::NewRun run = runs::create_local_run(writer, req);
  const std::string file = run.run_dir + "/record.txt";
  flotilla_test::write_text(file, metrics);
  runs::SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", "cat \"$0\" > \"$1\"/metrics.jsonl; exit 0", file, run.run_dir};
  spawn.run_dir = run.run_dir;
  const runs::LocalWatch w = runs::start_local_run(&writer, run.run_id, run.name, spawn, "test", 200);
  return runs::watch_local_run(&writer, w, {});
}

std::string step_line(int step) {
  return "{\"v\":1,\"type\":\"step\",\"time\":1,\"rank\":0,\"step\":" + std::to_string(step) +
         ",\"tokens\":64,\"loss\":5.0,\"lr\":0.001,\"grad_norm\":1,\"tokens_per_s\":100,\"mfu\":0.1}\n";
}

void exit_0_on_an_incomplete_record(const std::string& dir) {
  db::Writer writer(dir + "/fake.db");
  std::string steps;
  for (int s = 1; s <= 27; ++s) steps += step_line(s);

  // Torn: the last line stops mid-record, no summary.
  runs::LocalOutcome o =
      fake_worker(writer, dir, "torn",
                  steps + "{\"v\":1,\"type\":\"step\",\"time\":1,\"rank\":0,\"step\":28,\"lr\":0.00053");
  db::Run r = stored(writer.path(), db::get_run(db::Database(writer.path()), "torn").id);
  CHECK_MSG(r.status == db::RunStatus::kFailed && has(r.status_note, "torn") && has(r.status_note, "step 27"),
            "torn record recorded %s (%s)", db::to_string(r.status), r.status_note.c_str());
  CHECK(o.exit_code != 0);

  // Whole lines, but the summary counts 200 steps and the record holds 27.
  o = fake_worker(writer, dir, "short",
                  steps +
                      "{\"v\":1,\"type\":\"summary\",\"time\":2,\"rank\":0,\"steps\":200,\"tokens\":12800,"
                      "\"final_loss\":5,\"best_val_loss\":null,\"wall_s\":1,\"mean_tokens_per_s\":100,"
                      "\"mean_mfu\":null,\"exit\":\"completed\"}\n");
  r = stored(writer.path(), db::get_run(db::Database(writer.path()), "short").id);
  CHECK_MSG(r.status == db::RunStatus::kFailed && has(r.status_note, "stops at step 27") &&
                has(r.status_note, "200 steps"),
            "short record recorded %s (%s)", db::to_string(r.status), r.status_note.c_str());

  // A whole record is still completed.
  o = fake_worker(writer, dir, "whole",
                  steps +
                      "{\"v\":1,\"type\":\"summary\",\"time\":2,\"rank\":0,\"steps\":27,\"tokens\":1728,"
                      "\"final_loss\":5,\"best_val_loss\":null,\"wall_s\":1,\"mean_tokens_per_s\":100,"
                      "\"mean_mfu\":null,\"exit\":\"completed\"}\n");
  r = stored(writer.path(), db::get_run(db::Database(writer.path()), "whole").id);
  CHECK_MSG(r.status == db::RunStatus::kCompleted, "whole record recorded %s (%s)", db::to_string(r.status),
            r.status_note.c_str());
  CHECK(o.exit_code == 0);
}

}  // namespace

int main() {
  const std::string dir = scratch("dir_full");
  exit_0_on_an_incomplete_record(dir);
  cli_run_on_a_full_disk(dir);
  return flotilla_test::summary("test_run_dir_full_cli");
}
