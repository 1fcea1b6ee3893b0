// docs/reliability.md C2: a kill at every I/O point of a save. A dry run records the labels of all fault-hook
// calls of "save step 20 over an existing step 10 with keep_last 1" (writes, fsyncs, closes, MANIFEST
// rename, directory fsyncs, the commit rename, LATEST, purge). Then for every N a forked child runs the
// same save with a hook that _exit(9)s at the Nth call. The parent checks that loading gives exactly
// step 10 if the kill came before the commit rename and exactly step 20 after it, never a partial
// checkpoint; that cleanup_tmp() leaves no *.tmp-*; and that the next save (step 30) succeeds.
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace ckpt_test;

namespace {

// Tensors larger than the writer's 4 KiB coalescing limit, so each section is its own write(2).
const State kPrev(10, 3000), kNext(20, 3000), kAfter(30, 3000);

std::vector<std::string> record_labels(const std::string& root) {
  CheckpointStore store(root);
  store.save(kPrev.request(), 1);
  std::vector<std::string> labels;
  store.set_fault_hook([&labels](const std::string& op, int*) {
    labels.push_back(op);
    return true;
  });
  store.save(kNext.request(), 1);
  return labels;
}

}  // namespace

int main() {
  const std::string base = fresh_dir("ckpt-crash");
  const std::vector<std::string> labels = record_labels(base + "/dry");
  size_t commit_index = 0;  // 1-based index of "rename dir"
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] == "rename dir") commit_index = i + 1;
  CHECK(commit_index > 0);
  // Every kind of point named in docs/reliability.md C2 is enumerated.
  for (const char* must : {"write rank-0.bin", "fsync rank-0.bin", "close rank-0.bin", "write trainer.json",
                           "write MANIFEST.tmp", "rename manifest", "fsync dir", "rename dir", "fsync root",
                           "latest", "rename LATEST", "purge", "purge files"}) {
    bool seen = false;
    for (const auto& l : labels) seen |= l == must;
    CHECK_MSG(seen, "hook label '%s' never called", must);
  }
  int write_points = 0;
  for (const auto& l : labels) write_points += l == "write rank-0.bin";
  CHECK_MSG(write_points >= 3, "only %d write points in rank-0.bin", write_points);

  for (size_t n = 1; n <= labels.size(); ++n) {
    const std::string root = base + "/kill-" + std::to_string(n);
    {
      CheckpointStore store(root);
      store.save(kPrev.request(), 1);
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      CheckpointStore store(root);
      size_t calls = 0;
      store.set_fault_hook([&calls, n](const std::string&, int*) {
        if (++calls == n) ::_exit(9);  // killed just before operation n
        return true;
      });
      try {
        store.save(kNext.request(), 1);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 9, "kill point %zu (%s): child status %d", n,
              labels[n - 1].c_str(), status);

    CheckpointStore store(root);
    std::vector<std::string> warnings;
    auto loaded = store.load_latest(0, &warnings);
    const State& expect = n > commit_index ? kNext : kPrev;
    CHECK_MSG(loaded && expect.matches(*loaded), "kill before op %zu (%s): loaded step %lld, expected %lld",
              n, labels[n - 1].c_str(), loaded ? static_cast<long long>(loaded->step) : -1LL,
              static_cast<long long>(expect.step));
    // Never a committed-looking step-20 without a valid MANIFEST.
    for (const auto& w : warnings) CHECK_MSG(!contains(w, "step-00000020:"), "kill %zu: %s", n, w.c_str());

    store.cleanup_tmp();
    CHECK_MSG(tmp_dirs_in(root).empty(), "kill %zu: tmp dir left after cleanup_tmp", n);
    CHECK(!fs::exists(root + "/LATEST.tmp"));
    // The run goes on: the next save commits and becomes the newest.
    try {
      store.save(kAfter.request(), 1);
    } catch (const std::exception& e) {
      CHECK_MSG(false, "kill %zu: save after the crash failed: %s", n, e.what());
    }
    auto after = store.load_latest(0, nullptr);
    CHECK(after && kAfter.matches(*after));
    fs::remove_all(root);
  }
  std::printf("C2: %zu kill points, commit at point %zu\n", labels.size(), commit_index);
  return flotilla_test::summary("test_checkpoint_crash");
}
