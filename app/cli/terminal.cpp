// The terminal around the runs service (see terminal.h).
#include "app/cli/terminal.h"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "db/costs.h"
#include "runs/comm_advice.h"
#include "runs/comm_efficiency.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "runs/figures.h"
#include "engine/eval/task.h"
#include "runs/process.h"
#include "runs/run_speed.h"
#include "runs/run_status.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;

// Reads one line from /dev/tty with echo off; nullopt without a terminal.
std::optional<std::string> ask_passphrase(const std::string& key_path) {
  const int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  const std::string prompt = "Passphrase for " + key_path + " (not stored): ";
  if (::write(fd, prompt.data(), prompt.size()) < 0) {
    ::close(fd);
    return std::nullopt;
  }
  termios old{};
  const bool have_termios = ::tcgetattr(fd, &old) == 0;
  if (have_termios) {
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(fd, TCSAFLUSH, &quiet);
  }
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  if (have_termios) ::tcsetattr(fd, TCSAFLUSH, &old);
  if (::write(fd, "\n", 1) < 0) {
  }
  ::close(fd);
  return line;
}

std::atomic<int> g_signal{0};
void on_stop_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
}

void print_progress(const MetricsRecord& e, int64_t total_steps) {
  static auto last = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (e.type == MetricsRecordType::kStep) {
    if (e.rank != 0) return;
    const StepRecord& s = e.step();
    if (now - last < std::chrono::seconds(1) && s.step != total_steps) return;
    last = now;
    // A null MFU (the ceiling read below the run's speed) reads as 0: not known, so "n/a".
    char mfu[32] = "n/a";
    if (s.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", s.mfu * 100);
    std::printf("step %lld/%lld  loss %s  %s tok/s  mfu %s\n", static_cast<long long>(s.step),
                static_cast<long long>(total_steps), format_number(s.loss).c_str(),
                format_number(s.tokens_per_s).c_str(), mfu);
  } else if (e.type == MetricsRecordType::kEval) {
    std::printf("eval at step %lld  val_loss %s\n", static_cast<long long>(e.eval().step),
                format_number(e.eval().val_loss).c_str());
  } else if (e.type == MetricsRecordType::kTask) {  // eval.tasks: "task arc-mini at step 200  acc 0.31 ..."
    std::printf("task %s at step %lld: %s\n", e.task().task.c_str(), static_cast<long long>(e.task().step),
                eval::scores_line(e.task().scores).c_str());
  } else if (e.type == MetricsRecordType::kCheckpoint) {
    std::printf("checkpoint at step %lld  %s\n", static_cast<long long>(e.checkpoint().step),
                e.checkpoint().dir.c_str());
  } else if (e.type == MetricsRecordType::kEvent &&
             (e.event().level == "warning" || e.event().level == "error")) {
    std::printf("%s: %s\n", e.event().level.c_str(), e.event().message.c_str());
  } else if (e.type == MetricsRecordType::kEvent &&
             e.event().fields_json.find("\"ckpt_interval_steps\"") != std::string::npos) {
    std::printf("%s\n", e.event().message.c_str());  // checkpoint.every = "auto" (docs/scheduling.md)
  } else if (e.type == MetricsRecordType::kRunStart) {
    std::printf("worker started at step %lld\n", static_cast<long long>(e.run_start().start_step));
  } else {
    return;
  }
  std::fflush(stdout);
}

}  // namespace

runs::SshAccess ssh_access(const Context& ctx) {
  runs::SshAccess a;
  a.database_path = database_path(ctx);
  a.passphrase = [](const std::string&, const std::string& key_path) { return ask_passphrase(key_path); };
  return a;  // host keys refused in the CLI's words (runs::host_key_cli_text)
}

runs::ServiceOptions service_options(const Context& ctx, const std::string& origin) {
  runs::ServiceOptions o;
  o.ssh = ssh_access(ctx);
  o.runs_root = (fs::current_path() / "runs").string();
  o.version = FLOTILLA_VERSION_STRING;
  o.origin = origin;
  o.working_dir = fs::current_path().string();  // relative paths in a config mean what they meant here
  o.stop_with_parent = true;
  return o;
}

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_[0]);
  ::sigaction(SIGTERM, &sa, &old_[1]);
  ::sigaction(SIGHUP, &sa, &old_[2]);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old_[3]);
}

StopSignals::~StopSignals() {
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
  for (int i = 0; i < 4; ++i) ::sigaction(sigs[i], &old_[i], nullptr);
}

bool StopSignals::requested() { return g_signal.load() != 0; }

void note_stderr(const std::string& text) { std::fprintf(stderr, "flotilla: %s\n", text.c_str()); }

int watch_run(const Context& ctx, runs::ActiveRun& run, bool quiet) {
  runs::WatchHooks hooks;
  hooks.note = note_stderr;
  const int64_t total = run.total_steps();
  if (!quiet) hooks.on_record = [total](const MetricsRecord& e) { print_progress(e, total); };
  hooks.stop_requested = [] { return StopSignals::requested(); };
  const runs::WatchResult out = run.watch(hooks);
  // Its row was deleted while it ran (runs delete --force of a run nobody marked as running): the
  // watcher said so once and stopped the worker; there is no run left to summarise.
  if (out.vanished) return kExitNotFound;
  // The place was lost (the nodes or the login node stopped answering): the run is still
  // 'running' where it is; the watcher said why.
  if (!out.recorded && out.exit_code == static_cast<int>(ExitCode::kComm)) {
    note_stderr("run " + run.name() + " is no longer watched; flotilla runs attach " + run.name() +
                " picks it up again from where the store stopped");
    return out.exit_code;
  }
  if (!quiet) {
    const db::Database reader(database_path(ctx));
    const db::RunSummary s = runs::run_summary(reader, run.id());
    const db::Run r = db::get_run(reader, run.id());
    // The durations by name (db/queries.h RunSummary), as Runs, Live, Compare and `runs show` say.
    std::printf("run %s %s: %lld steps, final loss %s, running time %s (training %s), %llu metric rows stored, "
                "%s\n",
                run.name().c_str(), out.recorded ? runs::status_text(r).c_str() : "(end not recorded)",
                static_cast<long long>(s.steps), s.final_loss ? format_number(*s.final_loss).c_str() : "-",
                runs::clock_text(s.running_s).c_str(), runs::clock_text(s.training_s).c_str(),
                static_cast<unsigned long long>(out.committed_rows), runs::usd_text(s.cost_usd).c_str());
    // A multi-rank run: how well it used its links (runs/comm_efficiency.h), as `runs show` prints it.
    if (r.world_size.value_or(1) > 1) {
      const runs::CommReport comm = runs::comm_report(reader, run.id());
      if (!comm.empty())
        std::printf("%s%s", runs::comm_table_text(comm).c_str(),
                    runs::advice_text(runs::run_advice(reader, run.id())).c_str());
    }
  }
  if (out.end.status == db::RunStatus::kFailed) {
    // What the worker said last: the reason is usually there (a missing shard, a bad value).
    for (const std::string& line : runs::worker_log_tail(run.folder_text(), 6))
      std::fprintf(stderr, "flotilla: worker.log: %s\n", line.c_str());
  }
  if (!out.stored_all || !out.recorded) {
    std::fprintf(stderr,
                 "flotilla: the run database could not store everything (%s); metrics.jsonl in %s has every "
                 "record: once the database has space again, any `flotilla runs` command stores the rest and "
                 "the run's end\n",
                 out.store_error.c_str(), run.folder_text().c_str());
    return out.exit_code == 0 ? kExitStore : out.exit_code;
  }
  return out.exit_code;
}

}  // namespace flotilla::cli
