// Audit 2, D10: a `data prepare` killed in its write phase left whole, valid shards renamed into
// place one by one and nothing saying the set was incomplete: `data inspect` said "validation ok",
// training would use a shorter data set, and a re-run said "already holds shards". The real worker
// is SIGKILLed after its third shard (a test hook at a known point of the write phase); then
// `data inspect`, `train` (the trainer's data check, as launch's preflight and the wizard use it)
// and a re-run must all say the prepare was interrupted and to run it again with --force; the
// re-run with --force writes the same shards as an uninterrupted prepare. A prepare still running
// is told apart, and shards made without `data prepare` (llm.c-style) keep working.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "check.h"
#include "test_data_util.h"

using data_test::contains;
using data_test::run;
namespace fs = std::filesystem;

namespace {

int count_shards(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".bin") ++n;
  return n;
}

}  // namespace

int main() {
  const std::string w = FLOTILLA_WORKER_PATH;
  const std::string dir = data_test::scratch("data_prepare_interrupted");
  std::string out;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "The cat sat on the mat; the dog did not, on line " + std::to_string(i) + " of the corpus.\n";
  data_test::write_bytes(dir + "/corpus.txt", text);
  const std::string tok = dir + "/tok.json";
  CHECK(run(w + " tokenizer train --input " + dir + "/corpus.txt --vocab-size 300 --out " + tok, &out) == 0);
  const std::string args = " data prepare --input " + dir + "/corpus.txt --tokenizer " + tok +
                           " --val-fraction 0.1 --shard-tokens 1000 --out ";

  // The whole set, for comparison.
  const std::string full = dir + "/full";
  int rc = run(w + args + full, &out);
  CHECK_MSG(rc == 0, "%s", out.c_str());
  const int all = count_shards(full);
  CHECK_MSG(all >= 5, "only %d shards: the corpus is too small for this test", all);
  CHECK(!fs::exists(full + "/.prepare-incomplete"));

  // Killed after its third shard is in place.
  const std::string p = dir + "/p";
  rc = run("FLOTILLA_TEST_PREPARE_KILL_AFTER_SHARDS=3 " + w + args + p, &out);
  CHECK_MSG(rc != 0, "the prepare was not killed: %s", out.c_str());
  CHECK_MSG(count_shards(p) == 3 && fs::exists(p + "/train_000.bin"), "%d shards", count_shards(p));
  CHECK(data_test::read_bytes(p + "/train_000.bin") == data_test::read_bytes(full + "/train_000.bin"));

  // inspect flags every shard of the set.
  rc = run(w + " data inspect '" + p + "/*.bin'", &out);
  CHECK_MSG(rc == 4 && contains(out, "data prepare into " + p + " was interrupted") &&
                contains(out, "Run it again with --force") && !contains(out, "validation   ok"),
            "rc %d: %s", rc, out.c_str());

  // train refuses it (exit 4, naming the key), before any step.
  const std::string cfg = dir + "/run.toml";
  data_test::write_bytes(cfg,
                         "[run]\nname = \"partial\"\nthreads = 1\n"
                         "[model]\npreset = \"custom\"\nn_layer = 1\nn_head = 2\nn_embd = 32\n"
                         "vocab_size = 300\nmax_seq_len = 32\n"
                         "[data]\nsource = \"shards\"\ntrain = \"" +
                             p + "/train_*.bin\"\nval = \"" + p +
                             "/val_*.bin\"\n"
                             "[train]\nsteps = 2\nmicro_batch = 2\nseq_len = 16\n");
  rc = run("OMP_NUM_THREADS=1 " + w + " train --config " + cfg + " --out-dir " + dir + "/run --quiet", &out);
  CHECK_MSG(
      rc == 4 && contains(out, "data prepare into " + p + " was interrupted") && contains(out, "--force"),
      "rc %d: %s", rc, out.c_str());
  CHECK(!fs::exists(dir + "/run/metrics.jsonl") ||
        !contains(data_test::read_bytes(dir + "/run/metrics.jsonl"), "\"type\":\"step\""));

  // A re-run without --force says what the folder holds.
  rc = run(w + args + p, &out);
  CHECK_MSG(rc == 2 && contains(out, "holds an interrupted prepare") && contains(out, "--force"), "rc %d: %s",
            rc, out.c_str());

  // With --force: the same shards as the uninterrupted prepare, and nothing flagged any more.
  rc = run(w + args + p + " --force", &out);
  CHECK_MSG(rc == 0, "%s", out.c_str());
  CHECK(count_shards(p) == all && !fs::exists(p + "/.prepare-incomplete"));
  for (const auto& e : fs::directory_iterator(full))
    if (e.path().extension() == ".bin")
      CHECK(data_test::read_bytes(e.path().string()) ==
            data_test::read_bytes(p + "/" + e.path().filename().string()));
  CHECK(run(w + " data inspect '" + p + "/*.bin' --check-vocab 300", &out) == 0);
  rc = run("OMP_NUM_THREADS=1 " + w + " train --config " + cfg + " --out-dir " + dir + "/run --quiet", &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out.c_str());

  // A prepare still running (its pid's command line is a data prepare) is told apart.
  const pid_t busy = fork();
  if (busy == 0) {
    setpgid(0, 0);  // its sleep goes with it below
    execl("/bin/sh", "/bin/sh", "-c", "sleep 30; true", "flotilla-worker", "data", "prepare", "--out", "x",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  usleep(100 * 1000);
  data_test::write_bytes(p + "/.prepare-incomplete", "pid " + std::to_string(busy) + "\n");
  rc = run(w + " data inspect " + p + "/train_000.bin", &out);
  CHECK_MSG(rc == 4 && contains(out, "is still running (pid " + std::to_string(busy) + ")"), "%s",
            out.c_str());
  kill(-busy, SIGKILL);
  waitpid(busy, nullptr, 0);

  // Shards that no `data prepare` made (llm.c-style, here from synth) have no marker and load.
  CHECK(run(w + " data synth --out " + dir + "/syn --vocab 128 --tokens 5000", &out) == 0);
  CHECK(run(w + " data inspect '" + dir + "/syn/*.bin'", &out) == 0 && contains(out, "validation   ok"));

  fs::remove_all(dir);
  return flotilla_test::summary("data_prepare_interrupted");
}
