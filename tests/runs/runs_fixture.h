// Helpers for the runs layer's tests: a scratch store, a tiny config the real worker trains in
// seconds, and a watcher running on its own thread with requests the test can make.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "check.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "runs/local_run.h"
#include "runs/run_setup.h"
#include "runs/worker_command.h"

namespace runs_test {

namespace fs = std::filesystem;

inline std::string scratch(const std::string& name) {
  const fs::path dir = fs::path(FLOTILLA_TEST_TMP) / ("runs_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// A 2-layer model on the synthetic corpus: hundreds of steps a second on one core.
inline std::string tiny_config(int steps, const std::string& extra = "", int every = 50) {
  return "[run]\nname = \"tiny\"\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " +
         std::to_string(steps) + "\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = " + std::to_string(every) +
         "\n" + extra;
}

inline flotilla::RunConfig config_of(const std::string& toml) { return flotilla::parse_config_toml(toml, "test"); }

template <typename F>
bool wait_until(F pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

inline flotilla::db::Run stored(const std::string& db, int64_t id) {
  const flotilla::db::Database d(db);
  return flotilla::db::get_run(d, id);
}

inline int64_t steps_stored(const std::string& db, int64_t id) {
  const flotilla::db::Database d(db);
  return static_cast<int64_t>(flotilla::db::metric_points(d, id, "loss").size());
}

// A run created through the runs layer and started the way the CLI starts it.
struct Started {
  flotilla::runs::NewRun run;
  flotilla::runs::LocalWatch watch;
};

inline Started create_and_start(flotilla::db::Writer& writer, const std::string& dir, const std::string& toml,
                                const std::string& name, std::optional<double> budget = std::nullopt) {
  flotilla::runs::NewRunRequest req;
  req.config = config_of(toml);
  req.name = name;
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  req.budget_usd = budget;
  Started s;
  s.run = flotilla::runs::create_local_run(writer, req);
  flotilla::runs::TrainCommand c;
  c.worker = flotilla::runs::find_worker(FLOTILLA_WORKER_PATH);
  c.config_path = s.run.config_path;
  c.ranks = flotilla::runs::ranks_of(s.run.config);
  c.max_restarts = s.run.config.run.max_restarts;
  c.no_bind = true;
  flotilla::runs::SpawnOptions spawn;
  spawn.argv = flotilla::runs::train_argv(c);
  spawn.run_dir = s.run.run_dir;
  spawn.env = {"OMP_NUM_THREADS=1"};
  s.watch = flotilla::runs::start_local_run(&writer, s.run.run_id, s.run.name, spawn, "test", s.run.config.train.steps);
  return s;
}

// A watcher on a thread of its own, with the requests a test makes.
class Watcher {
 public:
  Watcher(flotilla::db::Writer* writer, flotilla::runs::LocalWatch w) {
    hooks_.note = [this](const std::string& n) {
      std::lock_guard<std::mutex> lock(mutex_);
      notes_ += n + "\n";
    };
    hooks_.on_committed = [this](const std::vector<flotilla::MetricsRecord>& r, uint64_t) { records_ += r.size(); };
    hooks_.stop_requested = [this] { return stop_.load(); };
    hooks_.kill_requested = [this] { return kill_.load(); };
    hooks_.leave_requested = [this] { return leave_.load(); };
    hooks_.checkpoint_requested = [this] { return checkpoint_.exchange(false); };
    thread_ = std::thread([this, writer, w] {
      out_ = flotilla::runs::watch_local_run(writer, w, hooks_);
      done_ = true;
    });
  }
  ~Watcher() {
    if (thread_.joinable()) {
      kill_ = true;
      thread_.join();
    }
  }
  void stop() { stop_ = true; }
  void kill() { kill_ = true; }
  void leave() { leave_ = true; }
  void checkpoint() { checkpoint_ = true; }
  // Waits for the end (false on a timeout).
  bool wait(double seconds) {
    const bool ended = wait_until([this] { return done_.load(); }, seconds);
    if (ended) thread_.join();
    return ended;
  }
  const flotilla::runs::LocalOutcome& outcome() const { return out_; }
  std::string notes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return notes_;
  }
  size_t records() const { return records_.load(); }

 private:
  flotilla::runs::WatchHooks hooks_;
  std::atomic<bool> stop_{false}, kill_{false}, leave_{false}, checkpoint_{false}, done_{false};
  std::atomic<size_t> records_{0};
  std::mutex mutex_;
  std::string notes_;
  flotilla::runs::LocalOutcome out_;
  std::thread thread_;
};

}  // namespace runs_test
