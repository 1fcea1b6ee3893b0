// A run from a Hub name the cache lacks (engine/interop/model_source.h over hub::download): the
// worker, pointed at the stand-in Hub (tests/tools/hub_server.py through HF_ENDPOINT), resolves
// model.init_from = "org/tiny" with config.json alone for the shape, pins the commit the Hub names,
// then fetches the weights and tokenizer of that commit into the cache (each file once, never
// README.md or the pickled .bin beside them) and trains; a second run from the pinned config.toml,
// offline, trains from the cache with no request at all. lora.init_from = "org/adapter" downloads
// the adapter's files only. Without the readers' mapping the first run is refused ("not a folder").
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "check.h"
#include "tests/engine/hub_server_util.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const std::string kCommit = "5555555555555555555555555555555555555555";
const std::string kAdapterCommit = "6666666666666666666666666666666666666666";

std::string golden(const std::string& what) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/" + what;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int gets(const std::vector<HubRequest>& log, const std::string& part) {
  int n = 0;
  for (const HubRequest& r : log)
    if (r.method == "GET" && r.path.find(part) != std::string::npos) ++n;
  return n;
}

std::string config(const std::string& init_from, const std::string& lora = "") {
  return "[run]\nname = \"dl\"\nseed = 4\nthreads = 1\n[model]\ninit_from = \"" + init_from + "\"\n" +
         (lora.empty() ? "" : "[lora]\n" + lora) +
         "[data]\nsynthetic_tokens = 20000\n[train]\nsteps = 2\nmicro_batch = 2\nseq_len = 16\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 1\n[eval]\nevery = 0\nbatches = 1\n";
}

}  // namespace

int main() {
  const std::string root = fresh_dir("hub_names_download");
  for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                        "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"})
    unsetenv(v);
  HubServer hub(root + "/server");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    hub.add_file("org/tiny", f, read_file(golden(std::string("hf/qwen2/") + f)));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    hub.add_file("org/tiny", f, read_file(golden(std::string("tokenizers/qwen/") + f)));
  hub.add_file("org/tiny", "README.md", "# tiny\n");
  hub.add_file("org/tiny", "pytorch_model.bin", "not for us");
  hub.repo_json("org/tiny", R"({"commit": ")" + kCommit + R"("})");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    hub.add_file("org/adapter", f, read_file(golden(std::string("lora/llama/adapter/") + f)));
  hub.add_file("org/adapter", "README.md", "# adapter\n");
  hub.repo_json("org/adapter", R"({"commit": ")" + kAdapterCommit + R"("})");
  hub.start();
  const std::string cache = root + "/hub";
  std::vector<std::string> env = hub.env();
  for (const char* e : {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"}) env.push_back(e);
  env.push_back("HF_HUB_CACHE=" + cache);

  // Not cached: the worker downloads, pins and trains.
  write_text(root + "/first.toml", config("org/tiny"));
  const ProcResult first =
      run_worker({"train", "--config", root + "/first.toml", "--out-dir", root + "/first", "--quiet"}, env);
  CHECK_MSG(first.exit_code == 0, "first run: exit %d\n%s", first.exit_code, first.output.c_str());
  CHECK_MSG(has(read_file(root + "/first/config.toml"), "init_from = \"org/tiny@" + kCommit + "\""),
            "config.toml: %s", read_file(root + "/first/config.toml").c_str());
  const fs::path snap = fs::path(cache) / "models--org--tiny" / "snapshots" / kCommit;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    CHECK_MSG(fs::is_symlink(snap / f) && fs::is_regular_file(snap / f), "%s not linked in the snapshot", f);
  CHECK(!fs::exists(snap / "README.md") && !fs::exists(snap / "pytorch_model.bin"));
  const std::vector<HubRequest> log = hub.requests();
  CHECK_MSG(gets(log, "/config.json") == 1 && gets(log, "/cdn/") == 1 && gets(log, "README") == 0 &&
                gets(log, ".bin") == 0,
            "requests:\n%s", hub.request_log_text().c_str());

  // The pinned config again, offline: from the cache, no request.
  hub.clear_requests();
  std::vector<std::string> offline = env;
  offline.push_back("HF_HUB_OFFLINE=1");
  const ProcResult again = run_worker(
      {"train", "--config", root + "/first/config.toml", "--out-dir", root + "/again", "--quiet"}, offline);
  CHECK_MSG(again.exit_code == 0, "offline run: exit %d\n%s", again.exit_code, again.output.c_str());
  CHECK_MSG(step_losses(root + "/again") == step_losses(root + "/first"), "the cached run trains otherwise");
  CHECK_MSG(hub.requests().empty(), "offline requests:\n%s", hub.request_log_text().c_str());

  // lora.init_from = "org/adapter": the adapter's two files only, pinned.
  hub.clear_requests();
  write_text(root + "/adapter.toml",
             config(golden("hf/llama"), "enabled = true\ninit_from = \"org/adapter\"\n"));
  const ProcResult adapter = run_worker(
      {"train", "--config", root + "/adapter.toml", "--out-dir", root + "/adapter", "--quiet"}, env);
  CHECK_MSG(adapter.exit_code == 0, "adapter run: exit %d\n%s", adapter.exit_code, adapter.output.c_str());
  CHECK(has(read_file(root + "/adapter/config.toml"), "init_from = \"org/adapter@" + kAdapterCommit + "\""));
  CHECK_MSG(gets(hub.requests(), "README") == 0 &&
                fs::is_regular_file(fs::path(cache) / "models--org--adapter" / "snapshots" / kAdapterCommit /
                                    "adapter_model.safetensors"),
            "adapter requests:\n%s", hub.request_log_text().c_str());

  // data prepare --tokenizer with a name the cache lacks: the tokenizer's files, never the weights.
  hub.clear_requests();
  write_text(root + "/docs.jsonl", "{\"text\": \"a small document for the tokenizer\"}\n");
  std::vector<std::string> env_tok = hub.env();
  env_tok.push_back("HF_HUB_CACHE=" + root + "/hub-tok");
  const ProcResult prep = run_worker({"data", "prepare", "--input", root + "/docs.jsonl", "--tokenizer",
                                      "org/tiny", "--out", root + "/shards"},
                                     env_tok);
  CHECK_MSG(prep.exit_code == 0, "data prepare: exit %d\n%s", prep.exit_code, prep.output.c_str());
  CHECK_MSG(gets(hub.requests(), "tokenizer.json") == 1 && gets(hub.requests(), "/cdn/") == 0 &&
                gets(hub.requests(), "model.safetensors") == 0,
            "data prepare requests:\n%s", hub.request_log_text().c_str());
  return flotilla_test::summary("test_hub_names_download");
}
