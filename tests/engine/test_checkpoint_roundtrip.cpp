// CheckpointStore round trips: bitwise save/load, the on-disk layout and MANIFEST contents,
// keep_last purging, LATEST as a hint only, refusing to overwrite a verified step-N, moving a damaged
// one aside, the multi-rank begin/write_rank/commit protocol, section filters, set_aside_newer.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace ckpt_test;

static void test_round_trip_and_layout() {
  const std::string root = fresh_dir("ckpt-roundtrip");
  CheckpointStore store(root);
  const State s(40, 3000);
  const std::string dir = store.save(s.request(), 2);
  CHECK(dir == root + "/step-00000040");
  CHECK(store.save_warnings().empty());
  CHECK(fs::exists(dir + "/MANIFEST") && fs::exists(dir + "/rank-0.bin") &&
        fs::exists(dir + "/trainer.json"));
  CHECK(read_file(root + "/LATEST") == "step-00000040\n");
  CHECK(tmp_dirs_in(root).empty());

  // The MANIFEST names every file with its true size and CRC-32C, and the section shapes.
  const auto m = nlohmann::json::parse(read_file(dir + "/MANIFEST"));
  CHECK(m["format"] == "flotilla-checkpoint" && m["format_version"] == 1 && m["step"] == 40 &&
        m["world_size"] == 1);
  CHECK(m["config_hash"] == "000000c0ffee1234");
  CHECK(m.contains("created") && m.contains("engine_version"));
  int files_checked = 0;
  for (const auto& f : m["files"]) {
    const std::string bytes = read_file(dir + "/" + f["name"].get<std::string>());
    CHECK(f["size"].get<size_t>() == bytes.size());
    CHECK(f["crc32c"] == crc32c_hex(crc32c(bytes.data(), bytes.size())));
    if (f["name"] == "rank-0.bin") {
      CHECK(f["sections"].size() == 5);
      CHECK(f["sections"][0]["name"] == "params" && f["sections"][0]["dtype"] == "f32" &&
            f["sections"][0]["shape"][0] == 3000 && f["sections"][0]["bytes"] == 12000);
      CHECK(bytes.compare(0, 8, "FLTCKPT1") == 0);
    }
    ++files_checked;
  }
  CHECK(files_checked == 2);

  std::vector<std::string> warnings;
  auto loaded = store.load_latest(0, &warnings);
  CHECK(loaded.has_value() && s.matches(*loaded));
  CHECK(warnings.empty());
  CHECK(loaded && loaded->world_size == 1 && loaded->config_hash == 0xC0FFEE1234ull && loaded->dir == dir);
  CHECK(s.matches(store.load_dir(dir, 0)));

  // Section filter: only "params" is kept, the rest is still verified.
  const LoadedCheckpoint only = store.load_dir(dir, 0, {"params"});
  CHECK(only.tensors.size() == 1 && only.tensors[0].name == "params" && only.tensors[0].data.size() == 12000);
  CHECK(only.trainer_state_json == s.trainer_json);
}

static void test_keep_last_and_latest_hint() {
  const std::string root = fresh_dir("ckpt-keep");
  CheckpointStore store(root);
  std::vector<State> states;
  for (int64_t step : {10, 20, 30, 40}) states.emplace_back(step, 500);
  for (const State& s : states) store.save(s.request(), 2);
  auto listed = store.list();
  CHECK(listed.size() == 2);
  CHECK(listed.size() == 2 && listed[0] == root + "/step-00000030" && listed[1] == root + "/step-00000040");

  // LATEST is only a hint: deleted, or pointing at an older or missing checkpoint, loading still
  // scans and picks the newest verified one.
  fs::remove(root + "/LATEST");
  auto a = store.load_latest(0, nullptr);
  CHECK(a && states[3].matches(*a));
  write_file(root + "/LATEST", "step-00000030\n");
  auto b = store.load_latest(0, nullptr);
  CHECK(b && b->step == 40);
  write_file(root + "/LATEST", "\xff garbage");
  auto c = store.load_latest(0, nullptr);
  CHECK(c && c->step == 40);

  // keep_last = 1 keeps only the newest.
  const State s50(50, 500);
  store.save(s50.request(), 1);
  listed = store.list();
  CHECK(listed.size() == 1 && listed[0] == root + "/step-00000050");
  auto d = store.load_latest(0, nullptr);
  CHECK(d && s50.matches(*d));
}

static void test_never_overwrite() {
  const std::string root = fresh_dir("ckpt-overwrite");
  CheckpointStore store(root);
  const State s(10, 200), other(10, 300);
  store.save(s.request(), 3);
  // A verified step-N is never overwritten.
  CHECK_THROWS(store.save(other.request(), 3), "already exists");
  auto a = store.load_latest(0, nullptr);
  CHECK(a && s.matches(*a));
  CHECK(tmp_dirs_in(root).empty());
  // A damaged one is moved to trash/ and the new save proceeds.
  fs::remove(root + "/step-00000010/MANIFEST");
  store.save(other.request(), 3);
  auto b = store.load_latest(0, nullptr);
  CHECK(b && other.matches(*b));
  bool in_trash = false;
  for (const auto& e : fs::directory_iterator(root + "/trash"))
    in_trash |= e.path().filename().string().rfind("step-00000010.damaged-", 0) == 0;
  CHECK(in_trash);

  // set_aside_newer: a run resumed from step 10 moves step 20 out of the way.
  const State s20(20, 200);
  store.save(s20.request(), 3);
  const auto moved = store.set_aside_newer(10);
  CHECK(moved.size() == 1);
  CHECK(store.list().size() == 1);
}

static void test_multi_rank_protocol() {
  const std::string root = fresh_dir("ckpt-ranks");
  CheckpointStore store(root);
  const State r0(7, 300), r1(7, 300 + 11);
  const std::string tmp = store.begin(7);
  CHECK(tmp.find("/step-00000007.tmp-") != std::string::npos);
  store.write_rank(tmp, r0.request(0, 2));
  // Rank 1 has not written: commit refuses and removes the tmp directory.
  CHECK_THROWS(store.commit(tmp, r0.request(0, 2), 2, 2), "rank-1.bin is missing");
  CHECK(!fs::exists(tmp));
  CHECK(!store.load_latest(0, nullptr).has_value());

  const std::string tmp2 = store.begin(7);
  store.write_rank(tmp2, r0.request(0, 2));
  store.write_rank(tmp2, r1.request(1, 2));
  CHECK(store.commit(tmp2, r0.request(0, 2), 2, 2) == root + "/step-00000007");
  auto l0 = store.load_latest(0, nullptr);
  auto l1 = store.load_latest(1, nullptr);
  CHECK(l0 && l0->world_size == 2 && r0.matches(*l0));
  CHECK(l1 && l1->world_size == 2 && r1.matches(*l1));
  // Both ranks see trainer.json (written by rank 0).
  CHECK(l1 && l1->trainer_state_json == r0.trainer_json);
  // A rank outside the checkpoint's world size gets no checkpoint (the trainer reports the mismatch).
  std::vector<std::string> warnings;
  CHECK(!store.load_latest(2, &warnings).has_value());
  CHECK(any_contains(warnings, "checkpoint has 2 rank(s)"));

  // abort_save removes a tmp directory and nothing else.
  const std::string tmp3 = store.begin(8);
  store.abort_save(tmp3);
  CHECK(!fs::exists(tmp3) && fs::exists(root + "/step-00000007"));
  CHECK_THROWS(store.abort_save(root + "/step-00000007"), "not a checkpoint tmp directory");
}

static void test_warnings_after_commit() {
  // A failure after the commit point (LATEST) does not fail the save; it becomes a warning.
  const std::string root = fresh_dir("ckpt-latest-fail");
  CheckpointStore store(root);
  store.set_fault_hook([](const std::string& op, int* err) {
    if (op == "latest") {
      *err = ENOSPC;
      return false;
    }
    return true;
  });
  const State s(5, 100);
  CHECK(store.save(s.request(), 2) == root + "/step-00000005");
  CHECK(store.save_warnings().size() == 1 && any_contains(store.save_warnings(), "No space left on device"));
  auto l = store.load_latest(0, nullptr);
  CHECK(l && s.matches(*l));
}

int main() {
  test_round_trip_and_layout();
  test_keep_last_and_latest_hint();
  test_never_overwrite();
  test_multi_rank_protocol();
  test_warnings_after_commit();
  return flotilla_test::summary("test_checkpoint_roundtrip");
}
