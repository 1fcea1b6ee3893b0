// A model by name on SSH nodes (docs/models.md, "Node and cluster runs"), against loopback sshd
// nodes, the stand-in Hub (tests/tools/hub_server.py) and the real worker:
// 1. model.init_from = "org/tiny": the app's cache (HF_HUB_CACHE of this process) lacks it, node a's
//    environment points at its own empty cache and at the Hub. The run trains; node a's cache holds
//    the snapshot; the app's cache holds config.json at most; the stored config is the name pinned
//    to its commit; the run's events say the node downloaded it; no request for the weights
//    carried a token (the app's HF_TOKEN does not travel).
// 2. Node b has the model in its cache, HF_HUB_OFFLINE=1 and the Hub is down: it trains from its cache.
// 3. Node c has neither the model nor a way to get it (empty cache, offline): the run fails before
//    any rank starts, with a message and a stored status naming the node and the model; once the
//    model is in c's cache, resuming that run trains it.
// 4. A path keeps working as before: no fetch on the node, the path stored as it was.
#include <filesystem>
#include <map>

#include "check.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "runs/node_run.h"
#include "sshd_fixture.h"
#include "tests/engine/hub_server_util.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 20;
const std::string kGolden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/qwen2";

flotilla::RunConfig config(const std::string& name, const std::string& init_from) {
  return flotilla::parse_config_toml(
      "[run]\nname = \"" + name + "\"\nseed = 7\nthreads = 1\n[model]\ninit_from = \"" + init_from +
          "\"\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = " + std::to_string(kSteps) +
          "\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 100\n",
      "test");
}

runs::StartRequest request(const std::string& name, const std::string& init_from) {
  runs::StartRequest r;
  r.config = config(name, init_from);
  r.name = name;
  r.nproc_per_node = 1;
  r.no_bind = true;
  r.worker_path = FLOTILLA_WORKER_PATH;
  r.version = FLOTILLA_VERSION_STRING;
  r.origin = "test";
  return r;
}

// The files of every snapshot of org/tiny in `hub_cache` (relative to the snapshot).
std::vector<std::string> snapshot_files_in(const std::string& hub_cache) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& snap : fs::directory_iterator(hub_cache + "/models--org--tiny/snapshots", ec))
    for (const auto& f : fs::recursive_directory_iterator(snap.path()))
      if (!f.is_directory()) out.push_back(f.path().lexically_relative(snap.path()).string());
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string events_text(const db::Database& d, int64_t run_id) {
  std::string out;
  for (const db::EventInfo& e : db::list_events(d, run_id)) out += e.kind + ": " + e.message + "\n";
  return out;
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_node_hub_model");
  HubServer hub(fx.root() + "/hub");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    hub.add_file("org/tiny", f, read_file(kGolden + "/" + f));
  hub.start();
  hub.control(R"({"throttle_bps": 20000})");  // ~2.5 s for the weights: the node's progress is seen

  // This process is the app: its own cache, the Hub, and a token that must stay here.
  const std::string app_cache = fx.root() + "/app-cache";
  setenv("HF_HUB_CACHE", app_cache.c_str(), 1);
  setenv("HF_TOKEN", HubServer::kToken, 1);
  unsetenv("HF_HUB_OFFLINE");
  hub.apply_env();
  const std::string hub_env = "HF_ENDPOINT=" + hub.endpoint() + " FLOTILLA_HF_CA_FILE=" + hub.cert_file();
  const std::string cache_a = fx.root() + "/node-a-cache", cache_b = fx.root() + "/node-b-cache",
                    cache_c = fx.root() + "/node-c-cache";
  if (!fx.start(0, "ed25519", "", "", "HF_HUB_CACHE=" + cache_a + " " + hub_env) ||
      !fx.start(1, "ed25519", "", "", "HF_HUB_CACHE=" + cache_b + " HF_HUB_OFFLINE=1 " + hub_env) ||
      !fx.start(2, "ed25519", "", "", "HF_HUB_CACHE=" + cache_c + " HF_HUB_OFFLINE=1 " + hub_env)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string db_path = fx.root() + "/store.db";
  const std::map<std::string, int> index = {{"a", 0}, {"b", 1}, {"c", 2}};
  {
    db::Database d(db_path);
    for (const auto& [name, i] : index) {
      db::SshNode n;
      n.name = name;
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = local_user_name();
      n.key_path = fx.client_key();
      db::add_ssh_node(d, n);
      flotilla::remote::Session s(fx.options(i));
      trust_and_connect(s);
    }
  }
  const auto connected = [&](const std::string& name) {
    const db::Database d(db_path);
    std::vector<runs::Node> nodes;
    nodes.push_back(runs::Node{db::get_ssh_node(d, name), nullptr, ""});
    runs::connect_nodes(
        nodes, [&](const db::SshNode& r) { return fx.options(index.at(r.name)); }, nullptr);
    return nodes;
  };
  db::Writer writer(db_path);
  std::vector<std::string> notes;
  const runs::Note note = [&](const std::string& line) { notes.push_back(line); };
  std::string commit;

  // 1. Downloaded on the node, config.json only on the app.
  {
    std::vector<runs::Node> nodes = connected("a");
    db::Database d(db_path);
    const runs::Watch watch = runs::start_on_nodes(d, nodes, request("hub-a", "org/tiny"), note);
    const int code = runs::watch_node_run(writer, nodes, watch, {});
    const db::Run r = db::get_run(d, watch.run_id);
    CHECK_MSG(code == 0 && r.status == db::RunStatus::kCompleted, "exit %d, %s (%s)\n%s", code,
              db::to_string(r.status), r.status_note.c_str(), events_text(d, r.id).c_str());
    CHECK(static_cast<int>(db::metric_points(d, r.id, "loss").size()) == kSteps);
    const flotilla::RunConfig stored = flotilla::parse_config_toml(r.config_toml, "stored");
    CHECK_MSG(stored.model.init_from.rfind("org/tiny@", 0) == 0 && stored.model.init_from.size() == 9 + 40,
              "stored init_from %s", stored.model.init_from.c_str());
    commit = stored.model.init_from.substr(9);
    CHECK(stored.model.n_embd == 32 && stored.model.n_layer == 2);  // the shape from config.json
    const std::vector<std::string> on_node = snapshot_files_in(cache_a);
    CHECK_MSG(has(on_node, "model.safetensors") && has(on_node, "config.json"), "node a's cache: %zu files",
              on_node.size());
    CHECK(fs::exists(cache_a + "/models--org--tiny/snapshots/" + commit + "/model.safetensors"));
    const std::vector<std::string> here = snapshot_files_in(app_cache);
    CHECK(has(here, "config.json"));
    for (const std::string& f : here)
      CHECK_MSG(f == "config.json" || f == "generation_config.json", "the app's cache holds %s", f.c_str());
    std::error_code ec;
    for (const auto& b : fs::directory_iterator(app_cache + "/models--org--tiny/blobs", ec))
      CHECK_MSG(fs::file_size(b.path()) < 4096, "a large blob in the app's cache: %s", b.path().c_str());
    const std::string events = events_text(d, r.id);
    CHECK_MSG(events.find("model org/tiny@" + commit.substr(0, 7) + " on node a: downloaded into " +
                          cache_a) != std::string::npos,
              "%s", events.c_str());
    // The node's progress reached the run's log (the Hub is throttled so that it lasts a few polls).
    bool progress = false;
    for (const auto& n : notes)
      progress =
          progress || (n.rfind("downloading org/tiny@" + commit.substr(0, 7) + " on node a: ", 0) == 0 &&
                       n.find(" of 49.2 kB") != std::string::npos);
    std::string all;
    for (const auto& n : notes) all += n + "\n";
    CHECK_MSG(progress, "no progress line among the notes:\n%s", all.c_str());
    // The weights were asked for by the node, without the app's token.
    int weight_requests = 0;
    for (const HubRequest& q : hub.requests())
      if (q.path.find("model.safetensors") != std::string::npos || q.path.rfind("/cdn/", 0) == 0) {
        ++weight_requests;
        CHECK_MSG(!q.auth, "a request for the weights carried a token: %s %s", q.method.c_str(),
                  q.path.c_str());
      }
    CHECK(weight_requests > 0);
  }

  // 2. Node b: in its cache, offline, the Hub down.
  {
    fs::create_directories(cache_b);
    CHECK(std::system(("cp -a '" + cache_a + "/models--org--tiny' '" + cache_b + "/'").c_str()) == 0);
    hub.stop();
    std::vector<runs::Node> nodes = connected("b");
    db::Database d(db_path);
    const runs::Watch watch = runs::start_on_nodes(d, nodes, request("hub-b", "org/tiny"), note);
    const int code = runs::watch_node_run(writer, nodes, watch, {});
    const db::Run r = db::get_run(d, watch.run_id);
    CHECK_MSG(code == 0 && r.status == db::RunStatus::kCompleted, "exit %d, %s (%s)\n%s", code,
              db::to_string(r.status), r.status_note.c_str(), events_text(d, r.id).c_str());
    CHECK(flotilla::parse_config_toml(r.config_toml, "stored").model.init_from == "org/tiny@" + commit);
    const std::string events = events_text(d, r.id);
    CHECK_MSG(events.find("on node b: found in its cache at " + cache_b) != std::string::npos, "%s",
              events.c_str());
  }

  // 3. Node c cannot get it: the run fails before it starts, naming the node and the model.
  {
    std::vector<runs::Node> nodes = connected("c");
    db::Database d(db_path);
    std::string message;
    try {
      runs::start_on_nodes(d, nodes, request("hub-c", "org/tiny"), note);
    } catch (const flotilla::Error& e) {
      message = e.what();
      CHECK(e.code() == flotilla::ExitCode::kConfig);
    }
    CHECK_MSG(message.find("node c") != std::string::npos && message.find("org/tiny") != std::string::npos &&
                  message.find("HF_HUB_OFFLINE") != std::string::npos,
              "message: %s", message.c_str());
    const auto r = db::find_run(d, "hub-c");
    CHECK(r.has_value());
    if (r)
      CHECK_MSG(r->status == db::RunStatus::kFailed && r->status_note.find("node c") != std::string::npos &&
                    r->status_note.find("org/tiny") != std::string::npos,
                "%s (%s)", db::to_string(r->status), r->status_note.c_str());
    CHECK(!fs::exists(fx.node(2).home + "/.flotilla/runs/hub-c-" + std::to_string(r ? r->id : 0) + "/pid"));
    // Once node c has the model (copied into its cache), resuming the failed run trains it there.
    if (r) {
      fs::create_directories(cache_c);
      CHECK(std::system(("cp -a '" + cache_a + "/models--org--tiny' '" + cache_c + "/'").c_str()) == 0);
      std::vector<runs::Node> again;
      std::string rid;
      CHECK(runs::attach_target(d, db::get_run(d, r->id), again, rid, true).empty());
      runs::connect_nodes(
          again, [&](const db::SshNode& n) { return fx.options(index.at(n.name)); }, nullptr);
      runs::Watch w;
      w.run_id = r->id;
      w.name = r->name;
      w.rid = rid;
      runs::Recovery recovery;
      recovery.worker_path = FLOTILLA_WORKER_PATH;
      recovery.version = FLOTILLA_VERSION_STRING;
      recovery.no_bind = true;
      std::vector<db::SshNode> spares;
      const std::string why =
          runs::restart_on_nodes(writer, again, w, recovery, spares, "resumed", false, note);
      CHECK_MSG(why.empty(), "%s", why.c_str());
      CHECK(why.empty() && runs::watch_node_run(writer, again, w, {}) == 0);
      const db::Run done = db::get_run(d, r->id);
      CHECK_MSG(done.status == db::RunStatus::kCompleted, "%s (%s)", db::to_string(done.status),
                done.status_note.c_str());
      CHECK(events_text(d, r->id).find("on node c: found in its cache at " + cache_c) != std::string::npos);
    }
  }

  // 4. A path: used as it is, nothing fetched.
  {
    const std::string folder = fx.root() + "/tiny-folder";
    fs::create_directories(folder);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      fs::copy_file(kGolden + "/" + f, folder + "/" + f);
    std::vector<runs::Node> nodes = connected("a");
    db::Database d(db_path);
    const runs::Watch watch = runs::start_on_nodes(d, nodes, request("path-a", folder), note);
    CHECK(runs::watch_node_run(writer, nodes, watch, {}) == 0);
    const db::Run r = db::get_run(d, watch.run_id);
    CHECK(r.status == db::RunStatus::kCompleted);
    CHECK(flotilla::parse_config_toml(r.config_toml, "stored").model.init_from == folder);
    CHECK(!fs::exists(fx.node(0).home + "/.flotilla/runs/" + watch.rid + "/model-fetch-model.jsonl"));
  }
  return summary("test_node_hub_model_ssh");
}
