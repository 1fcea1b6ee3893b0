// A local run created from a Hub name (runs/run_setup.h): create_local_run resolves
// model.init_from = "org/tiny" in the Hugging Face cache (HF_HUB_CACHE, offline: no network) and
// stores it pinned to the cached commit, in the returned config, the run's run.toml and the store's
// row, so the worker, a resume and any node load that commit; validate_run_config accepts the name.
// A name in no cache is refused before any row or folder exists, naming the key and the cache.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "check.h"
#include "db/database.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "runs_fixture.h"

namespace fs = std::filesystem;
using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

const std::string kCommit = "4444444444444444444444444444444444444444";

std::string golden(const std::string& what) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/" + what;
}

// The golden tiny Qwen2 folder as huggingface_hub caches it: blobs, a snapshot of relative links,
// refs/main.
void cache_tiny(const std::string& hub) {
  const fs::path repo = fs::path(hub) / "models--org--tiny";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / kCommit);
  fs::create_directories(repo / "refs");
  int i = 0;
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors"}) {
    const std::string etag = "b" + std::to_string(i++);
    fs::copy_file(golden(std::string("hf/qwen2/") + file), repo / "blobs" / etag);
    fs::create_symlink(fs::path("../../blobs") / etag, repo / "snapshots" / kCommit / file);
  }
  std::ofstream(repo / "refs" / "main") << kCommit;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

int main() {
  const std::string dir = scratch("hub_name_run");
  const std::string hub = dir + "/hub";
  cache_tiny(hub);
  setenv("HF_HUB_CACHE", hub.c_str(), 1);
  setenv("HF_HUB_OFFLINE", "1", 1);
  db::Writer writer(dir + "/store.db");

  const std::string toml =
      "[run]\nname = \"named\"\nthreads = 1\n[model]\ninit_from = \"org/tiny\"\n[data]\nsynthetic_tokens = "
      "30000\n[train]\nsteps = 2\nmicro_batch = 2\nseq_len = 16\n";
  runs::validate_run_config(config_of(toml), 1);  // a name passes validation (resolved, not refused)
  runs::NewRunRequest req;
  req.config = config_of(toml);
  req.runs_root = dir + "/runs";
  const runs::NewRun nr = runs::create_local_run(writer, req);
  const std::string pinned = "org/tiny@" + kCommit;
  CHECK_MSG(nr.config.model.init_from == pinned, "created with init_from %s",
            nr.config.model.init_from.c_str());
  CHECK(nr.config.model.arch == "llama" && nr.config.model.n_layer == 2);  // the shape from the cached config
  std::ifstream in(nr.config_path);
  const std::string run_toml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_MSG(has(run_toml, "init_from = \"" + pinned + "\""), "run.toml: %s", run_toml.c_str());
  const auto row = db::find_run(db::Database(writer.path()), "named");
  CHECK(row && has(row->config_toml, "init_from = \"" + pinned + "\""));

  // A name in no cache, offline: refused naming the key and the cache, and nothing created.
  runs::NewRunRequest bad;
  bad.config = config_of(toml);
  bad.config.model.init_from = "org/absent";
  bad.config.run.name = "absent";
  bad.runs_root = dir + "/runs";
  std::string why;
  try {
    runs::create_local_run(writer, bad);
  } catch (const std::exception& e) {
    why = e.what();
  }
  CHECK_MSG(has(why, "model.init_from = \"org/absent\"") && has(why, hub) && has(why, "HF_HUB_OFFLINE"), "%s",
            why.c_str());
  CHECK(!db::find_run(db::Database(writer.path()), "absent") && !fs::exists(dir + "/runs/absent"));
  return flotilla_test::summary("test_hub_name_run");
}
