// CheckpointStore::set_pinned (checkpoint.keep_best): the purge keeps the pinned step besides the
// keep_last newest and does not count it among them; a pin moved to another step lets the old one
// go at the next purge; -1 pins nothing; a pinned step that does not exist changes nothing.
#include <set>
#include <string>

#include "check.h"
#include "test_checkpoint_util.h"

using namespace flotilla;

namespace {

std::set<int64_t> steps_in(const std::string& root) {
  std::set<int64_t> out;
  for (const auto& e : ckpt_test::fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos)
      out.insert(std::stoll(name.substr(5)));
  }
  return out;
}

}  // namespace

int main() {
  const std::string root = ckpt_test::fresh_dir("ckpt_keep_best");
  CheckpointStore store(root);
  const auto save = [&](int64_t step) { store.save(ckpt_test::State(step, 64).request(), 1); };
  save(1);
  save(2);
  CHECK(steps_in(root) == (std::set<int64_t>{2}));  // keep_last 1, nothing pinned
  store.set_pinned(2);
  CHECK(store.pinned() == 2);
  save(3);
  save(4);
  CHECK(steps_in(root) == (std::set<int64_t>{2, 4}));  // the pinned one besides the newest
  store.set_pinned(4);                                 // a better one: step 2 may go
  save(5);
  CHECK(steps_in(root) == (std::set<int64_t>{4, 5}));
  store.set_pinned(99);  // not there: the purge is as without a pin
  save(6);
  CHECK(steps_in(root) == (std::set<int64_t>{6}));
  store.set_pinned(-1);
  save(7);
  CHECK(steps_in(root) == (std::set<int64_t>{7}));
  return flotilla_test::summary("test_checkpoint_keep_best");
}
