// A real 2-node run over loopback sshd: the worker is deployed to both "nodes", both node ranks
// are started detached (dp over 2 nodes x 1 rank on Gloo, master 127.0.0.1), rank 0's metrics
// are tailed by byte offset, and the losses equal the same run launched locally with
// `launch --nproc-per-node 2`. Mid-run, node 0's sshd session is killed (S4): the run keeps going,
// the session reconnects, and tailing from the saved offset yields every step exactly once. A
// second start is refused (S5). The final checkpoint is listed and fetched, and matches.
#include <cstdlib>
#include <map>

#include "check.h"
#include "remote/deploy.h"
#include "remote/remote_run.h"
#include "sshd_fixture.h"

using namespace flotilla::remote;
using namespace flotilla_test;

namespace {

constexpr int kSteps = 600;  // long enough (seconds) that the session is killed mid-run on a fast CPU

std::string config_text() {
  return "[run]\nname = \"remote2\"\nseed = 11\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " + std::to_string(kSteps) + "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 200\nkeep_last = 2\n";
}

// Adds the step records of `lines` to `losses`, counting repeats.
void collect(const std::vector<std::string>& lines, std::map<int64_t, float>& losses, int& duplicates, int& bad) {
  for (const auto& line : lines) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ++bad;
      continue;
    }
    if (j.value("type", "") != "step") continue;
    const int64_t step = j["step"].get<int64_t>();
    if (losses.count(step)) ++duplicates;
    losses[step] = static_cast<float>(j["loss"].get<double>());
  }
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("remote_run");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string cfg = fx.root() + "/run.toml";
  write_text(cfg, config_text());

  // The local reference: one launch with two ranks.
  const std::string ref = fx.root() + "/ref";
  const pid_t local = spawn({FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2", "--master-port", "0",
                             "--no-bind", "--", "train", "--config", cfg, "--out-dir", ref},
                            {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"}, ref + ".log");
  CHECK_MSG(wait_exit(local) == 0, "%s", read_file(ref + ".log").c_str());
  const auto ref_losses = step_losses(ref);
  CHECK(static_cast<int>(ref_losses.size()) == kSteps);

  Session n0(fx.options(0)), n1(fx.options(1));
  trust_and_connect(n0);
  trust_and_connect(n1);
  Session* nodes[2] = {&n0, &n1};
  const int master_port = free_port();
  RemoteRunSpec spec;
  spec.run_id = "r-2nodes";
  spec.nnodes = 2;
  spec.nproc_per_node = 1;
  spec.master_addr = "127.0.0.1";
  spec.master_port = master_port;
  spec.launch_args = {"--no-bind"};
  spec.env = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};
  // The losses are compared bit for bit, so the remote ranks must pick the same BLAS kernels as
  // the local reference; sshd sessions do not inherit this process's OpenBLAS overrides.
  for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"})
    if (const char* value = std::getenv(name)) spec.env.push_back(std::string(name) + "=" + value);
  RemoteRunStatus started[2];
  for (int r = 1; r >= 0; --r) {
    Session& s = *nodes[r];
    DeployOptions d;
    d.worker_path = FLOTILLA_WORKER_PATH;
    d.version = "0.1.0";
    spec.worker = deploy_worker(s, d).worker;
    upload_run_config(s, spec.run_id, config_text());
    // The worker generates the synthetic corpus only on global rank 0, in its own run dir; a
    // second node needs it too (reported upstream). Same arguments give byte-identical shards.
    const ExecResult synth = s.exec_argv({spec.worker, "data", "synth", "--out",
                                          remote_run_dir(s, spec.run_id) + "/data/synthetic-v128-s11-n30000",
                                          "--vocab", "128", "--tokens", "30000", "--val-tokens", "3000", "--seed", "11"});
    CHECK_MSG(synth.exit_status == 0, "%s", synth.err.c_str());
    spec.node_rank = r;
    started[r] = start_remote_run(s, spec);
    CHECK(started[r].state == RunState::kRunning);
  }
  // S5: a second start of a node rank is refused while it runs.
  CHECK_THROWS(start_remote_run(n1, spec), "already active");

  // Tail rank 0; kill node 0's sshd session once some steps are in.
  std::map<int64_t, float> losses;
  int duplicates = 0, bad = 0, reconnects = 0;
  uint64_t offset = 0;
  bool killed = false, running_after_kill = false;
  size_t steps_at_kill = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      const TailChunk t = tail_run_file(n0, spec.run_id, offset);
      collect(t.lines, losses, duplicates, bad);
      offset = t.offset;
      if (!killed && !losses.empty()) {
        CHECK(fx.kill_sessions(0, SIGKILL) >= 1);  // S4
        killed = true;
        steps_at_kill = losses.size();
        continue;
      }
      const RemoteRunStatus st = remote_run_status(n0, spec.run_id);
      if (killed && reconnects == 1 && st.state == RunState::kRunning) running_after_kill = true;
      if (st.state == RunState::kExited) {
        const TailChunk last = tail_run_file(n0, spec.run_id, offset);  // lines written before the exit
        collect(last.lines, losses, duplicates, bad);
        offset = last.offset;
        CHECK_MSG(st.exit_code == 0, "node 0 exit %d: %s", st.exit_code,
                  read_file(fx.node(0).home + "/.flotilla/runs/r-2nodes/stdout.log").c_str());
        break;
      }
    } catch (const ConnectionLost&) {
      ++reconnects;
      n0.reconnect({0.1, 2, 1, 10});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(killed && reconnects == 1);
  CHECK(running_after_kill);
  CHECK_MSG(steps_at_kill < static_cast<size_t>(kSteps), "the run ended before the kill");
  std::printf("session killed after %zu of %d steps; %d reconnect(s)\n", steps_at_kill, kSteps, reconnects);
  CHECK_MSG(duplicates == 0 && bad == 0, "duplicates %d, unparsable %d", duplicates, bad);
  CHECK_MSG(static_cast<int>(losses.size()) == kSteps, "%zu steps", losses.size());
  int equal = 0;
  for (const auto& [step, loss] : ref_losses) equal += losses.count(step) && losses[step] == loss;
  CHECK_MSG(equal == kSteps, "%d of %d losses equal the local 2-rank run", equal, kSteps);
  const RemoteRunStatus s1 = remote_run_status(n1, spec.run_id);
  CHECK(wait_until([&] { return remote_run_status(n1, spec.run_id).state == RunState::kExited; }, 30));
  CHECK(remote_run_status(n1, spec.run_id).exit_code == 0);
  CHECK(s1.pid == started[1].pid && s1.started_at == started[1].started_at);

  // Checkpoints: listed, fetched, and equal to the local run's.
  const auto cps = list_remote_checkpoints(n0, spec.run_id);
  CHECK(!cps.empty() && cps.back().step == kSteps);
  const std::string fetched = fetch_remote_checkpoint(n0, spec.run_id, kSteps, fx.root() + "/fetched/checkpoints");
  CHECK(std::filesystem::exists(fetched + "/MANIFEST") || !std::filesystem::is_empty(fetched));
  const auto a = checkpoint_section(ref, kSteps, "params"), b = checkpoint_section(fx.root() + "/fetched", kSteps, "params");
  CHECK(!a.empty() && a == b);
  return summary("remote_run");
}
