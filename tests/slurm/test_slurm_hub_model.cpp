// A model by name on the real loopback Slurm (docs/models.md, "Node and cluster runs"):
// model.init_from = "org/tiny" with this process's (the app's) cache empty and the login node's
// environment pointing at its own empty cache and the stand-in Hub. The model is fetched on the login
// node before sbatch (its progress and result in the run's events), the job's task loads it from
// that cache (it inherits the login session's environment), and the run completes; the app's cache
// holds config.json at most and the stored config is the name pinned to its commit.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "check.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "flotilla/build_info.h"
#include "runs/service.h"
#include "slurm_fixture.h"
#include "tests/engine/hub_server_util.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> snapshot_files_in(const std::string& hub_cache) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& snap : fs::directory_iterator(hub_cache + "/models--org--tiny/snapshots", ec))
    for (const auto& f : fs::recursive_directory_iterator(snap.path()))
      if (!f.is_directory()) out.push_back(f.path().lexically_relative(snap.path()).string());
  return out;
}

}  // namespace

int main() {
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  if (std::string w = SshdFixture::unavailable(); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  SshdFixture fx("slurm_hub_model");
  HubServer hub(fx.root() + "/hub");
  const std::string golden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/qwen2";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    hub.add_file("org/tiny", f, read_file(golden + "/" + f));
  hub.start();
  const std::string app_cache = fx.root() + "/app-cache", cluster_cache = fx.root() + "/cluster-cache";
  setenv("HF_HUB_CACHE", app_cache.c_str(), 1);
  unsetenv("HF_HUB_OFFLINE");
  hub.apply_env();
  // The login node as start_login_node() makes it, with the Hub and its own cache in its environment.
  std::string env = "SLURM_CONF=" + conf + " OMP_NUM_THREADS=1 HF_HUB_CACHE=" + cluster_cache +
                    " HF_ENDPOINT=" + hub.endpoint() + " FLOTILLA_HF_CA_FILE=" + hub.cert_file();
  for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"})
    if (const char* value = std::getenv(name)) env += std::string(" ") + name + "=" + value;
  if (!fx.start(0, "ed25519", "", "", env)) {
    std::printf("SKIP: sshd cannot run here: %s\n", fx.last_error().c_str());
    return kSkipExit;
  }
  CliWorkspace ws(fx.root());
  if (const std::string w = add_trusted_cluster(ws, fx, "flo"); !w.empty()) {
    std::printf("FAIL: %s\n", w.c_str());
    return 1;
  }
  ::setenv("HOME", (fx.root() + "/client-home").c_str(), 1);
  runs::ServiceOptions o;
  o.ssh.database_path = ws.db();
  o.runs_root = fx.root() + "/ws/runs";
  o.worker_path = FLOTILLA_WORKER_PATH;
  o.version = FLOTILLA_VERSION_STRING;
  o.origin = "test";
  o.no_bind = true;
  runs::RunService service(o);

  runs::RunRequest req;
  req.config = flotilla::parse_config_toml(
      "[run]\nname = \"hub\"\nseed = 7\nthreads = 1\n[model]\ninit_from = "
      "\"org/tiny\"\n[data]\nsynthetic_tokens = "
      "30000\n[train]\nsteps = 10\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 100\n",
      "test");
  req.name = "slurm-hub";
  req.explicit_name = true;
  req.where = runs::Placement::on_cluster("flo");
  req.where.time_limit = "00:10:00";
  req.where.partition = "cpu";
  std::mutex m;
  std::string notes;
  auto run = service.start(req, [&](const std::string& line) {
    std::lock_guard<std::mutex> l(m);
    notes += line + "\n";
  });
  const int64_t id = run->id();
  runs::WatchHooks hooks;
  const runs::WatchResult result = run->watch(hooks);
  const db::Database d(ws.db());
  std::string events;
  for (const db::EventInfo& e : db::list_events(d, id)) events += e.kind + ": " + e.message + "\n";
  CHECK_MSG(result.exit_code == 0 && result.end.status == db::RunStatus::kCompleted, "exit %d\n%s\n%s",
            result.exit_code, notes.c_str(), events.c_str());
  CHECK(db::metric_points(d, id, "loss").size() == 10);
  const std::string pinned = flotilla::parse_config_toml(db::get_run(d, id).config_toml, "t").model.init_from;
  CHECK_MSG(pinned.rfind("org/tiny@", 0) == 0 && pinned.size() == 49, "%s", pinned.c_str());
  const std::string commit = pinned.size() == 49 ? pinned.substr(9) : "";
  CHECK(fs::exists(cluster_cache + "/models--org--tiny/snapshots/" + commit + "/model.safetensors"));
  for (const std::string& f : snapshot_files_in(app_cache))
    CHECK_MSG(f == "config.json" || f == "generation_config.json", "the app's cache holds %s", f.c_str());
  CHECK_MSG(events.find("on cluster flo's login node: downloaded into " + cluster_cache) != std::string::npos,
            "%s", events.c_str());
  return summary("test_slurm_hub_model");
}
