// docs/reliability.md C8, end to end with the real worker (issue 19, defect 1: data loss). A finished run
// holds step-25 and step-30; a byte flipped at offset 1000 of rank-0.bin in both. `train` with
// checkpoint.resume = auto must refuse with exit 5, name each checkpoint and its fault, say how to
// start fresh, and change nothing on disk (not even config.toml, with --set train.steps=12: audit 2,
// D18); `--resume none` then starts from step 0 and moves both
// to checkpoints/trash/ (never deletes them). Also: a trainer.json whose checksum is valid but whose
// JSON is broken is a damaged checkpoint: the worker says so and falls back to the previous one; so
// is one whose JSON is valid but holds values that cannot be true (issue 33 D19).
#include <filesystem>
#include <functional>
#include <map>

#include "check.h"
#include "engine/core/checksum.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(
[run]
name = "noverify"
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

void flip(const std::string& path, size_t offset) {
  std::string b = read_file(path);
  b.at(offset) = static_cast<char>(b[offset] ^ 0x5a);
  write_text(path, b);
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// A finished 30-step run in `out` (checkpoints step-25 and step-30).
void finished_run(const std::string& cfg, const std::string& out) {
  const ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(r.exit_code == 0, "first run exited %d: %s", r.exit_code, r.output.c_str());
  CHECK(fs::exists(out + "/checkpoints/step-00000025/MANIFEST"));
  CHECK(fs::exists(out + "/checkpoints/step-00000030/MANIFEST"));
}

void test_every_checkpoint_damaged(const std::string& root) {
  const std::string cfg = root + "/run.toml", out = root + "/run";
  write_text(cfg, kConfig);
  finished_run(cfg, out);
  const std::string ck = out + "/checkpoints";
  flip(ck + "/step-00000025/rank-0.bin", 1000);
  flip(ck + "/step-00000030/rank-0.bin", 1000);
  const auto before = snapshot_files(ck);
  const auto whole_run = snapshot_files(out);

  // Audit 2, D18: the refusal says "Nothing was changed", and nothing is: not even config.toml,
  // which `flotilla runs resume` reads (it was rewritten with the new steps before the decision).
  const ProcResult twelve = run_worker({"train", "--config", cfg, "--out-dir", out, "--set", "train.steps=12",
                                        "--quiet", "--no-stdout-metrics"},
                                       kEnv);
  CHECK_MSG(twelve.exit_code == 5 && contains(twelve.output, "Nothing was changed"), "exit %d: %s",
            twelve.exit_code, twelve.output.c_str());
  CHECK_MSG(read_file(out + "/config.toml") == whole_run.at("config.toml"), "config.toml was rewritten:\n%s",
            read_file(out + "/config.toml").c_str());
  CHECK_MSG(snapshot_files(out) == whole_run, "the refused start changed files under %s", out.c_str());

  const ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", out, "--resume", "auto", "--quiet"}, kEnv);
  CHECK_MSG(r.exit_code == 5, "resume = auto over damaged checkpoints exited %d (want 5): %s", r.exit_code,
            r.output.c_str());
  CHECK_MSG(contains(r.output, "step-00000030: rank-0.bin crc32c mismatch"), "%s", r.output.c_str());
  CHECK_MSG(contains(r.output, "step-00000025: rank-0.bin crc32c mismatch"), "%s", r.output.c_str());
  CHECK_MSG(contains(r.output, "--resume none") && contains(r.output, "trash/"), "%s", r.output.c_str());
  CHECK_MSG(snapshot_files(ck) == before, "the refused start changed files under %s", ck.c_str());
  CHECK(!fs::exists(ck + "/trash"));
  // A second refused start is still a refusal (nothing was purged or replaced in between).
  CHECK(run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet"}, kEnv).exit_code == 5);

  // export of the run: nothing verifies, so it fails and lists every checkpoint with its fault (it
  // said "see the warnings" and printed none).
  const ProcResult ex = run_worker(
      {"export", "--checkpoint", out, "--format", "safetensors", "--out", root + "/model.safetensors"}, kEnv);
  CHECK_MSG(ex.exit_code == 5, "export exited %d: %s", ex.exit_code, ex.output.c_str());
  CHECK_MSG(contains(ex.output, "step-00000030: rank-0.bin crc32c mismatch") &&
                contains(ex.output, "step-00000025: rank-0.bin crc32c mismatch") &&
                !contains(ex.output, "see the warnings"),
            "%s", ex.output.c_str());
  CHECK(snapshot_files(ck) == before);

  // Starting fresh on purpose: both damaged checkpoints end up in trash/, byte for byte.
  const ProcResult fresh = run_worker(
      {"train", "--config", cfg, "--out-dir", out, "--resume", "none", "--quiet", "--no-stdout-metrics"},
      kEnv);
  CHECK_MSG(fresh.exit_code == 0, "--resume none exited %d: %s", fresh.exit_code, fresh.output.c_str());
  int trashed = 0;
  for (const auto& e : fs::directory_iterator(ck + "/trash")) {
    const std::string name = e.path().filename().string();
    const std::string step = name.substr(0, 13);
    CHECK_MSG(step == "step-00000025" || step == "step-00000030", "unexpected %s in trash", name.c_str());
    CHECK(read_file(e.path().string() + "/rank-0.bin") == before.at(step + "/rank-0.bin"));
    ++trashed;
  }
  CHECK_MSG(trashed == 2, "%d checkpoint(s) in trash/, want 2", trashed);
  // The fresh run's own checkpoints verify.
  flotilla::CheckpointStore store(ck);
  std::vector<std::string> warnings;
  auto latest = store.load_latest(0, &warnings);
  CHECK(latest && latest->step == 30 && warnings.empty());
}

// trainer.json rewritten with broken JSON and the MANIFEST's crc32c fixed to match: not a checksum
// fault, but the checkpoint still cannot be resumed. Falls back to step-25 with a clear warning.
void test_broken_trainer_json(const std::string& root) {
  const std::string cfg = root + "/tj.toml", out = root + "/tj";
  write_text(cfg, kConfig);
  finished_run(cfg, out);
  const std::string dir = out + "/checkpoints/step-00000030";
  const std::string broken = "{\"step\": 30, \"tokens\": ";
  write_text(dir + "/trainer.json", broken);
  auto m = nlohmann::json::parse(read_file(dir + "/MANIFEST"));
  for (auto& f : m["files"])
    if (f["name"] == "trainer.json") {
      f["size"] = broken.size();
      f["crc32c"] = flotilla::crc32c_hex(flotilla::crc32c(broken.data(), broken.size()));
    }
  write_text(dir + "/MANIFEST", m.dump(1));
  const ProcResult r = run_worker(
      {"train", "--config", cfg, "--out-dir", out, "--set", "train.steps=35", "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(r.exit_code == 0, "exited %d: %s", r.exit_code, r.output.c_str());
  CHECK_MSG(contains(r.output, "step-00000030: ") && contains(r.output, "trainer.json") &&
                contains(r.output, "falling back to step-00000025"),
            "%s", r.output.c_str());
  CHECK_MSG(!contains(r.output, "[json.exception"), "raw JSON exception text leaked: %s", r.output.c_str());
  CHECK_MSG(contains(r.output, "resumed") || contains(r.output, "step-00000025"), "%s", r.output.c_str());
  CHECK(last_step(out) == 35);
}

// trainer.json with the MANIFEST's crc32c and size fixed to match.
void rewrite_trainer_json(const std::string& dir, const std::string& text) {
  write_text(dir + "/trainer.json", text);
  auto m = nlohmann::json::parse(read_file(dir + "/MANIFEST"));
  for (auto& f : m["files"])
    if (f["name"] == "trainer.json") {
      f["size"] = text.size();
      f["crc32c"] = flotilla::crc32c_hex(flotilla::crc32c(text.data(), text.size()));
    }
  write_text(dir + "/MANIFEST", m.dump(1));
}

// Issue 33 D19 (audit row 72): trainer.json values that parse and pass the checksum but cannot be
// true were believed ("resumed at step 31", tokens -1) or ended the run with exit 5 ("the trainer
// state is damaged") without the fallback a checksum fault gets. Each forgery, in a copy of a
// finished run, must be called damaged and the run resumed from step-25.
void test_forged_trainer_json(const std::string& root) {
  const std::string cfg = root + "/fg.toml", base = root + "/fg";
  write_text(cfg, kConfig);
  finished_run(cfg, base);
  using json = nlohmann::json;
  const auto set_seed = [](json& j) {
    std::string t = j["config_toml"].get<std::string>();
    const size_t at = t.find("\nseed = ");
    CHECK_MSG(at != std::string::npos, "no seed line in config_toml");
    if (at != std::string::npos) t.insert(at + 8, "9");  // seed = 9<old>
    j["config_toml"] = t;
  };
  const auto set_shape = [](json& j) {
    std::string t = j["config_toml"].get<std::string>();
    const size_t at = t.find("n_embd = 32");
    CHECK_MSG(at != std::string::npos, "no n_embd line in config_toml");
    if (at != std::string::npos) t.replace(at, 11, "n_embd = 64");
    j["config_toml"] = t;
  };
  const std::vector<std::pair<std::string, std::function<void(json&)>>> forgeries = {
      {"step 31 in step-30", [](json& j) { j["step"] = 31; }},
      {"tokens -1", [](json& j) { j["tokens"] = -1; }},
      {"tokens fewer than one micro-batch a step", [](json& j) { j["tokens"] = 30; }},
      {"rng.has_spare 7", [](json& j) { j["rng"]["has_spare"] = 7; }},
      {"an all-zero rng",
       [](json& j) {
         j["rng"]["s"] = json::array({0, 0, 0, 0});
       }},
      {"cursor past the end", [](json& j) { j["train_cursor"][4] = int64_t{1000000000000000}; }},
      {"negative cursor", [](json& j) { j["train_cursor"][4] = -5; }},
      {"empty cursor", [](json& j) { j["train_cursor"] = json::array(); }},
      {"parallel.dp 0", [](json& j) { j["parallel"]["dp"] = 0; }},
      {"world_size 3", [](json& j) { j["world_size"] = 3; }},
      {"zero 7", [](json& j) { j["zero"] = 7; }},
      {"best_val_loss -1", [](json& j) { j["best_val_loss"] = -1.0; }},
      {"config_toml with another seed", set_seed},
      {"config_toml with another shape", set_shape},
  };
  int n = 0;
  for (const auto& [what, forge] : forgeries) {
    const std::string out = root + "/forged-" + std::to_string(n++);
    fs::copy(base, out, fs::copy_options::recursive);
    const std::string dir = out + "/checkpoints/step-00000030";
    json j = json::parse(read_file(dir + "/trainer.json"));
    forge(j);
    rewrite_trainer_json(dir, j.dump(2));
    const ProcResult r = run_worker(
        {"train", "--config", cfg, "--out-dir", out, "--set", "train.steps=35", "--no-stdout-metrics"}, kEnv);
    CHECK_MSG(r.exit_code == 0, "%s: exited %d: %s", what.c_str(), r.exit_code, r.output.c_str());
    CHECK_MSG(contains(r.output, "step-00000030: ") && contains(r.output, "trainer.json") &&
                  contains(r.output, "falling back to step-00000025"),
              "%s: no fallback warning: %s", what.c_str(), r.output.c_str());
    CHECK_MSG(contains(r.output, "resumed from " + out + "/checkpoints/step-00000025 at step 25"),
              "%s: not resumed from step-25: %s", what.c_str(), r.output.c_str());
    CHECK_MSG(last_step(out) == 35, "%s: last step %lld", what.c_str(),
              static_cast<long long>(last_step(out)));
  }
}

// The purge keeps keep_last checkpoints that verify and never deletes one that does not
// (KempnerForge#102): step-30 damaged, keep_last = 2, then step-40 is saved. The old purge kept 40
// and the damaged 30 and deleted 20, the last good one; now 30 goes to trash/ intact and 20 stays.
void test_purge_keeps_verified(const std::string& root) {
  const std::string ck = root + "/purge";
  flotilla::CheckpointStore store(ck);
  std::vector<float> params(3000, 0.5f);
  auto request = [&](int64_t step) {
    flotilla::CheckpointSaveRequest r;
    r.step = step;
    r.config_hash = 7;
    params[0] = static_cast<float>(step);
    r.tensors.push_back({"params", {3000}, params.data(), params.size() * 4});
    r.trainer_state_json = "{}";
    return r;
  };
  for (int64_t s : {10, 20, 30}) store.save(request(s), 5);
  flip(ck + "/step-00000030/rank-0.bin", 1000);
  const std::string damaged = read_file(ck + "/step-00000030/rank-0.bin");
  flotilla::CheckpointStore writer(ck);  // a new process's store: knows nothing verified yet
  writer.save(request(40), 2);
  CHECK(fs::exists(ck + "/step-00000040/MANIFEST"));
  CHECK_MSG(fs::exists(ck + "/step-00000020/MANIFEST"),
            "the purge deleted step-20, the last good checkpoint");
  CHECK(!fs::exists(ck + "/step-00000010"));
  CHECK(!fs::exists(ck + "/step-00000030"));
  int in_trash = 0;
  for (const auto& e : fs::directory_iterator(ck + "/trash"))
    if (e.path().filename().string().rfind("step-00000030.damaged", 0) == 0)
      in_trash += read_file(e.path().string() + "/rank-0.bin") == damaged;
  CHECK_MSG(in_trash == 1, "damaged step-30 not kept in trash/ byte for byte");
  bool warned = false;
  for (const auto& w : writer.save_warnings()) warned |= contains(w, "step-00000030 does not verify");
  CHECK(warned);
  // With step-40 damaged too, a resume still finds step-20.
  flip(ck + "/step-00000040/rank-0.bin", 1000);
  auto loaded = flotilla::CheckpointStore(ck).load_latest(0, nullptr);
  CHECK(loaded && loaded->step == 20);
}

}  // namespace

int main() {
  test_purge_keeps_verified(fresh_dir("ckpt-purge-verified"));
  const std::string root = fresh_dir("ckpt-none-verify");
  test_every_checkpoint_damaged(root);
  test_broken_trainer_json(root);
  test_forged_trainer_json(root);
  return flotilla_test::summary("test_checkpoint_none_verify");
}
