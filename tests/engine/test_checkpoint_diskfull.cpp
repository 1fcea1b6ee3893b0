// docs/reliability.md C7: the disk fills during a save. For every I/O point k of a save (enumerated by a
// dry run), the fault hook fails operation k with ENOSPC. Before the commit rename the save must throw
// Error(kIo) whose message says "No space left on device" and names the file and the statvfs figures,
// the tmp directory must be gone and the previous checkpoint must still load; after the commit the
// new checkpoint must load (a failed root fsync still throws; LATEST / purge failures are warnings).
#include <cerrno>
#include <string>
#include <vector>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace ckpt_test;

namespace {

const State kPrev(10, 3000), kNext(20, 3000);

// The file or object named by a hook label: "write rank-0.bin" -> "rank-0.bin".
std::string object_of(const std::string& label) {
  for (const char* verb : {"write ", "fsync ", "close "})
    if (label.rfind(verb, 0) == 0 && label != "fsync dir" && label.rfind("fsync root", 0) != 0)
      return label.substr(std::string(verb).size());
  return "";
}

}  // namespace

int main() {
  const std::string base = fresh_dir("ckpt-diskfull");
  std::vector<std::string> labels;
  {
    CheckpointStore dry(base + "/dry");
    dry.save(kPrev.request(), 1);
    dry.set_fault_hook([&labels](const std::string& op, int*) {
      labels.push_back(op);
      return true;
    });
    dry.save(kNext.request(), 1);
  }
  size_t commit = 0;
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] == "rename dir") commit = i + 1;

  int thrown = 0, warned = 0;
  for (size_t k = 1; k <= labels.size(); ++k) {
    const std::string root = base + "/k-" + std::to_string(k);
    CheckpointStore store(root);
    store.save(kPrev.request(), 1);
    size_t calls = 0;
    store.set_fault_hook([&calls, k](const std::string&, int* err) {
      if (++calls != k) return true;
      *err = ENOSPC;
      return false;
    });
    const std::string& label = labels[k - 1];
    bool threw = false;
    try {
      store.save(kNext.request(), 1);
    } catch (const Error& e) {
      threw = true;
      ++thrown;
      const std::string msg = e.what();
      CHECK_MSG(e.code() == ExitCode::kIo, "k=%zu (%s): exit code %d", k, label.c_str(),
                static_cast<int>(e.code()));
      CHECK_MSG(contains(msg, "No space left on device") && contains(msg, "from statvfs"), "k=%zu: %s", k,
                msg.c_str());
      const std::string obj = object_of(label);
      if (!obj.empty())
        CHECK_MSG(contains(msg, " " + obj + " in " + root), "k=%zu: '%s' lacks %s", k, msg.c_str(),
                  obj.c_str());
      if (label == "write rank-0.bin") CHECK_MSG(contains(msg, "(needed "), "k=%zu: %s", k, msg.c_str());
    }
    store.set_fault_hook({});
    CHECK_MSG(tmp_dirs_in(root).empty(), "k=%zu (%s): tmp dir left behind", k, label.c_str());
    std::vector<std::string> warnings;
    auto loaded = store.load_latest(0, &warnings);
    if (k < commit) {
      CHECK_MSG(threw, "k=%zu (%s): save did not fail", k, label.c_str());
      CHECK_MSG(loaded && kPrev.matches(*loaded), "k=%zu (%s): previous checkpoint lost", k, label.c_str());
      CHECK(!fs::exists(root + "/step-00000020"));
    } else if (k == commit) {
      CHECK_MSG(threw && loaded && kPrev.matches(*loaded), "k=%zu (%s)", k, label.c_str());
    } else {
      // Committed: the new checkpoint loads. fsync(root) failing is still an error to report.
      CHECK_MSG(loaded && kNext.matches(*loaded), "k=%zu (%s): new checkpoint not loadable", k,
                label.c_str());
      CHECK_MSG(threw == (label == "fsync root"), "k=%zu (%s): threw=%d", k, label.c_str(), threw);
      if (!threw) {
        ++warned;
        CHECK_MSG(any_contains(store.save_warnings(), "No space left on device"), "k=%zu (%s): no warning", k,
                  label.c_str());
      }
    }
    CHECK(warnings.empty());
    fs::remove_all(root);
  }
  std::printf("C7: %zu fault points, %d failed the save, %d became warnings after the commit\n",
              labels.size(), thrown, warned);
  CHECK(thrown >= 15 && warned >= 5);
  return flotilla_test::summary("test_checkpoint_diskfull");
}
