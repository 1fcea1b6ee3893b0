// `flotilla models list|show|pull` (app/cli/models.cpp) through the real binary, over a copy of the
// cache huggingface_hub wrote (tests/engine/golden/hub-cache; hub-cache.json says what it holds),
// named by HF_HUB_CACHE:
//  - list --json gives every repo with its commit, refs, architecture, trainable or why not, bytes
//    and parameters; --search filters; the table names the cache and each refusal's reason;
//  - show gives a name's cached commit (by name, tag or commit), its files, the pinned name, and
//    "not in the cache at DIR" (exit 4) for a model that is not there; a hostile name exits 3;
//  - pull with HF_HUB_OFFLINE=1 uses the cache and says so, and fails naming the cache when the
//    model is not in it, without any network;
//  - pull against the stand-in Hub (tests/tools/hub_server.py) downloads the tiny Llama into an
//    empty cache with a progress line (bytes, rate), prints the pinned name and the folder, and
//    `models list` then shows it trainable; a missing model exits 3 naming the problem;
//  - flotilla-worker hub list --json says what flotilla models list --json says.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "check.h"
#include "tests/engine/hub_server_util.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string g_root;
int g_calls = 0;

struct Out {
  int code = -1;
  std::string out, err;
};

// Runs `flotilla ARGS` with extra environment; stdout and stderr kept apart.
Out run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  const std::string base = g_root + "/call" + std::to_string(++g_calls);
  std::vector<std::string> argv = {FLOTILLA_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open((base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    for (const auto& kv : env) putenv(strdup(kv.c_str()));
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  Out r;
  r.code = wait_exit(pid);
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  g_root = fresh_dir("models_cli");
  const std::string hub = g_root + "/hub";
  fs::copy(std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hub-cache", hub,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  json manifest;
  {
    std::ifstream in(std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hub-cache.json");
    manifest = json::parse(in);
  }
  const json& llama = manifest["repos"]["flotilla-test/tiny-llama"];
  const std::string main_commit = llama["refs"]["main"], tag_commit = llama["refs"]["v1.0"];
  const std::string bare = llama["commit_only"];
  // This machine's own cache and token never leak in; no endpoint is reachable.
  for (const char* v : {"HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "HF_TOKEN", "HF_HUB_OFFLINE"})
    unsetenv(v);
  setenv("HF_HUB_CACHE", hub.c_str(), 1);
  setenv("HOME", g_root.c_str(), 1);
  setenv("HF_ENDPOINT", "https://127.0.0.1:9", 1);

  // list --json: the three repos, as the listing judges them.
  Out r = run_cli({"models", "list", "--json"});
  CHECK_MSG(r.code == 0, "%s", r.err.c_str());
  json doc = json::parse(r.out, nullptr, false);
  CHECK(doc.is_object() && doc["cache"] == hub && doc["source"] == "HF_HUB_CACHE");
  CHECK(doc["models"].size() == 3);
  for (const json& m : doc["models"]) {
    const std::string id = m["repo_id"];
    CHECK(manifest["repos"].contains(id));
    CHECK(m["parameters"] == manifest["repos"][id]["parameters"]);
    CHECK(m["bytes_on_disk"] == manifest["repos"][id]["blob_bytes"]);
    CHECK(m["commit"] == manifest["repos"][id]["refs"]["main"]);
    CHECK(m["trainable"] == (id == "flotilla-test/tiny-llama"));
    if (id == "flotilla-test/tiny-llama")
      CHECK(m["architecture"] == "LlamaForCausalLM" && m["refs"] == json::array({"main"}) &&
            m["why_not"] == "");
    if (id == "flotilla-test/tiny-bert") CHECK(has(m["why_not"], "model_type \"bert\" is not supported"));
    if (id == "flotilla-test/tiny-gpt2") CHECK(has(m["why_not"], "GPT-2 weights load by file"));
  }
  // --search keeps matching names / types / architectures, case-insensitively.
  r = run_cli({"models", "list", "--search", "LLAMA", "--json"});
  doc = json::parse(r.out, nullptr, false);
  CHECK(r.code == 0 && doc["models"].size() == 1 &&
        doc["models"][0]["repo_id"] == "flotilla-test/tiny-llama");
  r = run_cli({"models", "list", "--search", "bertmodel"});
  CHECK(r.code == 0 && has(r.out, "flotilla-test/tiny-bert") && !has(r.out, "tiny-llama"));
  // The table: the cache and where it came from, one line each, the reasons under it.
  r = run_cli({"models", "list"});
  CHECK(r.code == 0 && has(r.out, "Hugging Face cache: " + hub + " (from HF_HUB_CACHE)"));
  CHECK(has(r.out, "flotilla-test/tiny-llama  " + main_commit.substr(0, 7) + "  main"));
  CHECK(has(r.out, "26.8k") && has(r.out, "Not trainable:"));

  // show: by name, by tag, by commit; files; the pinned name.
  r = run_cli({"models", "show", "flotilla-test/tiny-llama"});
  CHECK_MSG(r.code == 0, "%s", r.err.c_str());
  CHECK(has(r.out, "commit        " + main_commit + " (main)"));
  CHECK(has(r.out, "model.init_from = \"flotilla-test/tiny-llama@" + main_commit + "\""));
  CHECK(has(r.out, "model-00002-of-00003.safetensors") && has(r.out, "config.json"));
  CHECK(has(r.out, "26784") && has(r.out, tag_commit.substr(0, 7) + " (v1.0)"));
  r = run_cli({"models", "show", "flotilla-test/tiny-llama@v1.0", "--json"});
  doc = json::parse(r.out, nullptr, false);
  CHECK(r.code == 0 && doc["commit"] == tag_commit &&
        doc["pinned"] == "flotilla-test/tiny-llama@" + tag_commit);
  CHECK(doc["files"].size() == 6);
  r = run_cli({"models", "show", "flotilla-test/tiny-llama@" + bare, "--json"});
  doc = json::parse(r.out, nullptr, false);
  CHECK(r.code == 0 && doc["commit"] == bare && doc["refs"].empty());
  r = run_cli({"models", "show", "flotilla-test/tiny-bert"});
  CHECK(r.code == 0 && has(r.out, "trainable     no: config.json: model_type \"bert\""));
  r = run_cli({"models", "show", "flotilla-test/absent"});
  CHECK(r.code == 4 && has(r.err, "not in the cache at " + hub) && has(r.err, "flotilla models pull"));
  r = run_cli({"models", "show", "../etc/passwd"});
  CHECK(r.code == 3 && has(r.err, "not a Hugging Face model name"));
  r = run_cli({"models", "show"});
  CHECK(r.code == 2);
  r = run_cli({"models", "pull", "flotilla-test/tiny-llama", "--files", "weights"});
  CHECK(r.code == 2 && has(r.err, "--files is training, config, adapter or tokenizer"));

  // pull offline: the cache, said so; a model not in it fails naming the cache, with no network.
  r = run_cli({"models", "pull", "flotilla-test/tiny-llama@v1.0"}, {"HF_HUB_OFFLINE=1"});
  CHECK_MSG(r.code == 0, "%s", r.err.c_str());
  CHECK(has(r.out, "HF_HUB_OFFLINE is set") && has(r.out, "cached commit " + tag_commit.substr(0, 7)));
  r = run_cli({"models", "pull", "flotilla-test/absent"}, {"HF_HUB_OFFLINE=1"});
  CHECK(r.code == 3 && has(r.err, "not in the Hugging Face cache (" + hub + ")"));

  // The worker's `hub list` prints the same document.
  {
    const ProcResult w = run_worker({"hub", "list", "--json"});
    const size_t brace = w.output.find('{');
    const json wj = json::parse(brace == std::string::npos ? "" : w.output.substr(brace), nullptr, false);
    r = run_cli({"models", "list", "--json"});
    CHECK(w.exit_code == 0 && !wj.is_discarded() && wj == json::parse(r.out, nullptr, false));
  }

  // pull from the stand-in Hub into an empty cache.
  HubServer server(g_root + "/server");
  const std::string src = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/llama";
  for (const char* f : {"config.json", "generation_config.json", "model-00001-of-00003.safetensors",
                        "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
                        "model.safetensors.index.json"})
    server.add_file("org/tiny", f, read_file(src + "/" + f));
  server.add_file("org/tiny", "pytorch_model.bin", "pickled: never fetched");
  server.start();
  server.control(R"({"throttle_bps": 250000})");  // half a second: the line has a rate and time left
  std::vector<std::string> env = server.env();
  const std::string fresh = g_root + "/fresh-hub";
  env.push_back("HF_HUB_CACHE=" + fresh);
  r = run_cli({"models", "pull", "org/tiny"}, env);
  CHECK_MSG(r.code == 0, "%s", r.err.c_str());
  CHECK(has(r.err, "model-0000") && has(r.err, " of 110 kB") && has(r.err, "/s") && has(r.err, " left"));
  const std::string folder = fresh + "/models--org--tiny/snapshots/";
  CHECK(has(r.out, "pin it in a run config: model.init_from = \"org/tiny@") && has(r.out, folder));
  const std::string pulled = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);  // the last line
  CHECK(fs::is_regular_file(pulled.substr(0, pulled.size() - 1) + "/model-00003-of-00003.safetensors"));
  CHECK(!has(r.out, "nothing to download"));
  // A second pull asks the Hub again (same commit) and fetches nothing.
  r = run_cli({"models", "pull", "org/tiny"}, env);
  CHECK(r.code == 0 && has(r.out, "nothing to download") && !has(r.err, "model-0000"));
  r = run_cli({"models", "list", "--json"}, {"HF_HUB_CACHE=" + fresh});
  doc = json::parse(r.out, nullptr, false);
  CHECK(r.code == 0 && doc["models"].size() == 1 && doc["models"][0]["repo_id"] == "org/tiny");
  CHECK(doc["models"][0]["trainable"] == true && doc["models"][0]["parameters"] == llama["parameters"]);
  CHECK(!fs::exists(doc["models"][0]["folder"].get<std::string>() + "/pytorch_model.bin"));
  r = run_cli({"models", "pull", "org/absent"}, env);
  CHECK_MSG(r.code == 3, "%d %s", r.code, r.err.c_str());

  fs::remove_all(g_root);
  return summary("models_cli");
}
