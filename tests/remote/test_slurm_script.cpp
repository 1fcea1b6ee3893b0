// The Slurm batch script (remote/slurm_script.h): the directives it must carry, hostile partition,
// account and job names refused before any script exists, quoted paths that reach a real /bin/sh
// unchanged, and the signal path run for real under /bin/sh with stand-in srun and scontrol: a
// USR1 (the time-limit lead) becomes a TERM for the tasks, the exit marker records it, and the job
// is requeued only when auto-resume is on.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "check.h"
#include "engine/core/error.h"
#include "remote/slurm_parse.h"
#include "remote/slurm_script.h"
#include "worker_run.h"

namespace fs = std::filesystem;
using namespace flotilla::remote;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

BatchSpec base_spec(const std::string& dir) {
  BatchSpec b;
  b.job_name = "flotilla-run1";
  b.partition = "cpu";
  b.account = "proj_a";
  b.nodes = 2;
  b.tasks_per_node = 1;
  b.time_limit = "00:10:00";
  b.signal_lead_s = 120;
  b.run_dir = dir;
  b.worker = dir + "/bin dir/it's a worker";
  b.config = dir + "/run.toml";
  return b;
}

void test_directives() {
  BatchSpec b = base_spec("/shared/home/u/.flotilla/runs/r1");
  b.gpus_per_node = 4;
  const std::string s = batch_script(b);
  for (const char* d :
       {"#SBATCH --job-name=flotilla-run1\n", "#SBATCH --partition=cpu\n", "#SBATCH --account=proj_a\n",
        "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=1\n", "#SBATCH --gpus-per-node=4\n",
        "#SBATCH --time=00:10:00\n", "#SBATCH --signal=B:USR1@120\n", "#SBATCH --no-requeue\n",
        "#SBATCH --open-mode=append\n", "#SBATCH --output=/shared/home/u/.flotilla/runs/r1/slurm.out\n",
        "srun --kill-on-bad-exit=1 --ntasks-per-node=1 \"$worker\" train"})
    CHECK_MSG(contains(s, d), "script lacks %s", d);
  CHECK(s.rfind("#!/bin/sh\n", 0) == 0);
  CHECK(contains(s, "worker='/shared/home/u/.flotilla/runs/r1/bin dir/it'\\''s a worker'\n"));
  b.requeue = true;
  CHECK(contains(batch_script(b), "#SBATCH --requeue\n"));
  b.partition.clear();
  b.account.clear();
  b.gpus_per_node = 0;
  const std::string plain = batch_script(b);
  CHECK(!contains(plain, "--partition"));
  CHECK(!contains(plain, "--account"));
  CHECK(!contains(plain, "--gpus-per-node"));
}

void test_hostile_names() {
  const char* hostile[] = {"a;touch /tmp/x", "$(id)", "`id`",    "-p", "--wrap=id", "a b", "a\nb", "a'b",
                           "a\"b",           "a|b",   ".hidden", "",   "x/y",       "a&b", "a>b"};
  for (const char* field : {"partition", "account", "job name"}) {
    for (const char* v : hostile) {
      BatchSpec b = base_spec("/tmp/r");
      if (std::string(field) == "partition") b.partition = v;
      if (std::string(field) == "account") b.account = v;
      if (std::string(field) == "job name") b.job_name = v;
      if (std::string(field) != "job name" && std::string(v).empty()) continue;  // "" = the default
      const std::string why = validate_slurm_name(field, v);
      CHECK_MSG(!why.empty(), "%s '%s' accepted", field, v);
      CHECK_MSG(why.rfind(field, 0) == 0, "message does not name %s: %s", field, why.c_str());
      CHECK_MSG(!contains(why, "\n"), "raw newline in: %s", why.c_str());
      CHECK_THROWS(batch_script(b), field);
    }
  }
  for (const char* ok : {"gpu", "a100-80g", "proj_a.b", "X9"})
    CHECK(validate_slurm_name("partition", ok).empty());
  CHECK(!validate_slurm_name("partition", std::string(65, 'a')).empty());
}

void test_time_limits() {
  for (const char* ok : {"00:10:00", "2-00:00:00", "100:00:00", "00:00:01"}) {
    CHECK_MSG(validate_time_limit(ok).empty(), "%s refused: %s", ok, validate_time_limit(ok).c_str());
  }
  for (const char* bad : {"", "10", "UNLIMITED", "INFINITE", "00:00:00", "00:60:00", "1:2:3", "-1-00:00:00",
                          "00:10:00;id", "400-00:00:00", "aa:bb:cc"}) {
    CHECK_MSG(!validate_time_limit(bad).empty(), "%s accepted", bad);
  }
  CHECK(time_limit_seconds("1-02:03:04") == 86400 + 7384);
  BatchSpec b = base_spec("/tmp/r");
  b.signal_lead_s = 600;  // longer than the 10 minute limit
  CHECK_THROWS(batch_script(b), "signal lead");
  b = base_spec("/tmp/r w");
  CHECK_THROWS(batch_script(b), "run dir");
}

// Runs the script with stand-in srun/scontrol; `signal` is sent to the script once srun runs.
struct Outcome {
  int exit_code = -1;
  std::string srun_args, scontrol_args, scancel_args, marker;
};
Outcome run_script(const fs::path& dir, bool requeue, int signal) {
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  auto write_exe = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir / "bin" / name) << body;
    fs::permissions(dir / "bin" / name, fs::perms::owner_all);
  };
  // srun: records its argv one per line, then waits. A TERM to srun itself would be a KILL of the
  // tasks on a real cluster: here it exits 137, so the test fails if the script signals srun
  // instead of the job's steps. USR2 stands for the TERM that reaches the tasks (exit 10).
  write_exe("srun", "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > " +
                        (dir / "srun.args").string() + "\necho $$ > " + (dir / "srun.pid").string() +
                        "\ntrap 'exit 137' TERM\ntrap 'exit 10' USR2\ntouch " + (dir / "srun.up").string() +
                        "\nif [ \"$FAKE_SRUN_WAIT\" = 1 ]; then i=0; while [ $i -lt 200 ]; do sleep 0.05; "
                        "i=$((i+1)); done; exit 99; fi\nexit 0\n");
  // scancel --signal=TERM JOBID (every step): the tasks get TERM.
  write_exe("scancel", "#!/bin/sh\necho \"$@\" >> " + (dir / "scancel.args").string() +
                           "\nkill -USR2 $(cat " + (dir / "srun.pid").string() + ")\n");
  write_exe("scontrol", "#!/bin/sh\necho \"$@\" >> " + (dir / "scontrol.args").string() + "\n");
  BatchSpec b = base_spec(dir.string());
  b.requeue = requeue;
  b.train_args = {"--set", "train.steps=$(touch " + (dir / "pwned").string() + ")"};
  std::ofstream(dir / "job.sh") << batch_script(b);
  const std::string path = "PATH=" + (dir / "bin").string() + ":/usr/bin:/bin";
  const pid_t pid =
      flotilla_test::spawn({"/bin/sh", (dir / "job.sh").string()},
                           {path, "SLURM_JOB_ID=42", "SLURM_RESTART_COUNT=3", "SLURM_JOB_NODELIST=n[1-2]",
                            std::string("FAKE_SRUN_WAIT=") + (signal ? "1" : "0")},
                           (dir / "out.log").string());
  if (signal != 0) {
    for (int i = 0; i < 200 && !fs::exists(dir / "srun.up"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(pid, signal);
  }
  Outcome o;
  o.exit_code = flotilla_test::wait_exit(pid);
  o.srun_args = flotilla_test::read_file((dir / "srun.args").string());
  o.scontrol_args = flotilla_test::read_file((dir / "scontrol.args").string());
  o.marker = flotilla_test::read_file((dir / "slurm-exit").string());
  o.scancel_args = flotilla_test::read_file((dir / "scancel.args").string());
  CHECK_MSG(!fs::exists(dir / "pwned"), "a train argument was executed by the shell");
  return o;
}

void test_script_runs() {
  const fs::path root = fs::path(FLOTILLA_TEST_TMP) / ("slurm_script_" + std::to_string(getpid()));
  // Plain end: srun exits 0, marker exit=0, no requeue.
  Outcome o = run_script(root / "plain", true, 0);
  CHECK_MSG(o.exit_code == 0, "exit %d", o.exit_code);
  CHECK_MSG(contains(o.srun_args, "--kill-on-bad-exit=1\n--ntasks-per-node=1\n" + (root / "plain").string() +
                                      "/bin dir/it's a worker\ntrain\n--config\n"),
            "srun argv:\n%s", o.srun_args.c_str());
  CHECK_MSG(contains(o.srun_args, "train.steps=$(touch "), "train argument not passed verbatim:\n%s",
            o.srun_args.c_str());
  auto m = parse_exit_marker(o.marker);
  CHECK(m && m->exit_code == 0 && m->restarts == 3);
  CHECK(o.scontrol_args.empty());
  // Time-limit lead with auto-resume: USR1 -> srun gets TERM -> exit 10 -> requeue.
  o = run_script(root / "lead", true, SIGUSR1);
  CHECK_MSG(o.exit_code == kResumeExitCode, "exit %d", o.exit_code);
  CHECK_MSG(contains(o.marker, "exit=10 restarts=3") && contains(o.marker, "reason=time-limit"), "marker: %s",
            o.marker.c_str());
  CHECK_MSG(o.scontrol_args == "requeue 42\n", "scontrol: '%s'", o.scontrol_args.c_str());
  CHECK_MSG(o.scancel_args == "--signal=TERM 42\n", "scancel: '%s'", o.scancel_args.c_str());
  // Same without auto-resume: checkpoint and exit 10, no requeue.
  o = run_script(root / "lead-norequeue", false, SIGUSR1);
  CHECK(o.exit_code == kResumeExitCode);
  CHECK_MSG(o.scontrol_args.empty(), "requeued without auto-resume: %s", o.scontrol_args.c_str());
  // scancel's TERM: exit 10, recorded as a cancel, never requeued.
  o = run_script(root / "cancel", true, SIGTERM);
  CHECK(o.exit_code == kResumeExitCode);
  CHECK_MSG(contains(o.marker, "reason=cancel"), "marker: %s", o.marker.c_str());
  CHECK(o.scontrol_args.empty());
  fs::remove_all(root);
}

}  // namespace

int main() {
  test_directives();
  test_hostile_names();
  test_time_limits();
  test_script_runs();
  return flotilla_test::summary("test_slurm_script");
}
