// Issue 33 D3 (audit row 67): a step folder in checkpoints/ that is a symbolic link to an archived
// checkpoint outside the run. The purge (keep_last) deleted the MANIFEST through the link, so the
// archive no longer loaded. Now every deletion path removes a link, never what it points to:
// - the exact reproduction with the real worker: archive/step-00000025 linked in as the run's
//   step-25, train to 30 with keep_last 1: the run resumes from it, the purge removes the link
//   (saying so), and the archive is byte for byte what it was;
// - a linked step folder that does not verify goes to trash/ as a link; a linked tmp folder is
//   cleaned up as a link; the targets are unchanged.
#include <unistd.h>

#include <filesystem>
#include <map>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(
[run]
name = "symlink"
threads = 1
[model]
preset = "custom"
n_layer = 1
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 20000
[train]
steps = 30
micro_batch = 2
seq_len = 16
[checkpoint]
every = 5
keep_last = 2
)";

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

void test_purge_of_a_linked_checkpoint(const std::string& root) {
  const std::string cfg = root + "/run.toml", base = root + "/base";
  write_text(cfg, kConfig);
  ProcResult r = run_worker({"train", "--config", cfg, "--out-dir", base, "--quiet", "--no-stdout-metrics",
                             "--set", "train.steps=25"},
                            kEnv);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  // The archive outside the run, and the run that links it in as its step-25.
  const std::string archive = root + "/archive/step-00000025";
  fs::create_directories(root + "/archive");
  fs::copy(base + "/checkpoints/step-00000025", archive, fs::copy_options::recursive);
  const auto before = snapshot_files(root + "/archive");
  const std::string run = root + "/sl";
  fs::create_directories(run + "/checkpoints");
  fs::copy(base + "/data", run + "/data", fs::copy_options::recursive);
  fs::create_symlink(archive, run + "/checkpoints/step-00000025");

  r = run_worker({"train", "--config", cfg, "--out-dir", run, "--set", "checkpoint.keep_last=1"}, kEnv);
  CHECK_MSG(r.exit_code == 0, "exited %d: %s", r.exit_code, r.output.c_str());
  CHECK_MSG(contains(r.output, "resumed from " + run + "/checkpoints/step-00000025 at step 25"), "%s",
            r.output.c_str());
  CHECK(fs::exists(run + "/checkpoints/step-00000030/MANIFEST"));
  CHECK_MSG(!fs::exists(fs::symlink_status(run + "/checkpoints/step-00000025")), "the link is still there");
  CHECK_MSG(snapshot_files(root + "/archive") == before,
            "the purge changed the archived checkpoint outside the run");
  CHECK_MSG(fs::exists(archive + "/MANIFEST"), "the archive's MANIFEST was deleted through the link");
  bool said = false;
  for (const auto& j : read_metrics(run))
    said |= j.value("type", "") == "event" && contains(j.value("message", ""), "is a symbolic link") &&
            contains(j.value("message", ""), "left untouched");
  CHECK_MSG(said, "no event says the link was removed and its target left");
  // The archived checkpoint still loads.
  flotilla::CheckpointStore store(root + "/archive");
  auto loaded = store.load_latest(0, nullptr);
  CHECK(loaded && loaded->step == 25);
}

// The trash paths with links: a linked step folder that does not verify, a linked tmp folder.
void test_trash_of_links(const std::string& root) {
  const std::string ck = root + "/trash-links/checkpoints", outside = root + "/outside";
  fs::create_directories(ck);
  fs::create_directories(outside + "/bad");
  write_text(outside + "/bad/MANIFEST", "not a manifest");
  write_text(outside + "/bad/rank-0.bin", "precious");
  fs::create_directories(outside + "/tmp");
  write_text(outside + "/tmp/rank-0.bin", "precious too");
  const auto before = snapshot_files(outside);
  fs::create_symlink(outside + "/bad", ck + "/step-00000010");
  fs::create_symlink(outside + "/tmp", ck + "/step-00000020.tmp-0123456789abcdef");

  flotilla::CheckpointStore store(ck);
  store.cleanup_tmp();  // the linked tmp folder: its link goes, its target stays
  CHECK(!fs::exists(fs::symlink_status(ck + "/step-00000020.tmp-0123456789abcdef")));
  std::vector<float> params(100, 1.0f);
  flotilla::CheckpointSaveRequest req;
  req.step = 30;
  req.config_hash = 7;
  req.tensors.push_back({"params", {100}, params.data(), params.size() * 4});
  req.trainer_state_json = "{}";
  store.save(req, 1);  // the purge: the linked step-10 does not verify and goes to trash/ as a link
  CHECK(!fs::exists(fs::symlink_status(ck + "/step-00000010")));
  int links = 0;
  for (const auto& e : fs::directory_iterator(ck + "/trash")) links += fs::is_symlink(e.symlink_status());
  CHECK_MSG(links == 1, "%d link(s) in trash/, want 1", links);
  CHECK_MSG(snapshot_files(outside) == before, "a trash path changed files outside the run");
}

}  // namespace

int main() {
  const std::string root = fresh_dir("ckpt-symlink-purge");
  test_purge_of_a_linked_checkpoint(root);
  test_trash_of_links(root);
  return flotilla_test::summary("test_checkpoint_symlink_purge");
}
