// Models by name through the real worker (engine/interop/model_source.h): a Hugging Face cache laid
// out as huggingface_hub lays it out (refs/main, snapshots/<commit>/ linked to ../../blobs/) under
// HF_HUB_CACHE, every run with HF_HUB_OFFLINE=1 so nothing can reach a network:
//   - model.init_from = "org/tiny" trains exactly as the folder it was made from (the same first-step
//     loss) and the run's config.toml and checkpoint keep the name pinned to the cached commit;
//   - a LoRA run from the name: its PEFT export names the repo as base_model_name_or_path and the
//     commit as revision (PEFT's own fields); after refs/main moves to other weights, a resume and a
//     sample of that checkpoint read the pinned commit (an unpinned name would read the new weights,
//     whose fingerprint the checkpoint refuses), and pinning in one process follows refs/main as it
//     is at each pin; the merged HF export carries the snapshot's config and tokenizer files;
//   - `data prepare --tokenizer org/tiny`, `export --tokenizer org/tiny` and `sample --tokenizer
//     org/tiny` read the cache;
//   - lora.init_from = "org/adapter" continues the cached PEFT adapter, pinned too;
//   - a name in no cache (offline) is one error naming the key, the name, the cache folder and what to
//     do; a value that is neither a folder nor a name keeps "not a folder" and shows the name form.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const std::string kCommit = "1111111111111111111111111111111111111111";
const std::string kNewCommit = "2222222222222222222222222222222222222222";
const std::string kAdapterCommit = "3333333333333333333333333333333333333333";

std::string golden(const std::string& what) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/" + what;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every file of `folder` as a blob of repo `repo_id` in `hub`, linked into snapshots/<commit>/ with a
// relative link, and refs/main = commit (huggingface_hub's layout).
void cache_repo(const std::string& hub, const std::string& repo_id, const std::string& commit,
                const std::string& folder) {
  std::string name = "models--" + repo_id;
  name.replace(name.find('/'), 1, "--");
  const fs::path repo = fs::path(hub) / name;
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  int i = 0;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string etag =
        commit.substr(0, 8) + "e" + std::to_string(i++) + "0000000000000000000000000000000";
    fs::copy_file(e.path(), repo / "blobs" / etag);
    fs::create_symlink(fs::path("../../blobs") / etag, repo / "snapshots" / commit / e.path().filename());
  }
  write_text((repo / "refs" / "main").string(), commit);
}

std::vector<std::string> env_for(const std::string& hub) {
  return {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11", "HF_HUB_CACHE=" + hub, "HF_HUB_OFFLINE=1"};
}

std::string config(const std::string& init_from, const std::string& lora = "",
                   const std::string& extra = "") {
  return "[run]\nname = \"hub\"\nseed = 4\nthreads = 1\n[model]\ninit_from = \"" + init_from + "\"\n" +
         (lora.empty() ? "" : "[lora]\n" + lora) +
         "[data]\nsynthetic_tokens = 20000\n[train]\nsteps = 2\nmicro_batch = 2\nseq_len = 16\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 1\n[eval]\nevery = 0\nbatches = 1\n" +
         extra;
}

struct Fixture {
  std::string dir, hub, folder;
  std::vector<std::string> env;
};

ProcResult train(const Fixture& f, const std::string& name, const std::string& text,
                 std::vector<std::string> extra = {}) {
  const std::string cfg = f.dir + "/" + name + ".toml";
  write_text(cfg, text);
  std::vector<std::string> args = {"train", "--config", cfg, "--out-dir", f.dir + "/" + name, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_worker(args, f.env);
}

// model.init_from = "org/tiny" against the folder: the same first step, the name pinned.
void full_from_name(const Fixture& f) {
  const ProcResult a = train(f, "from-folder", config(f.folder));
  const ProcResult b = train(f, "from-name", config("org/tiny"));
  CHECK_MSG(a.exit_code == 0, "from the folder: %s", a.output.c_str());
  CHECK_MSG(b.exit_code == 0, "from the name: %s", b.output.c_str());
  const auto la = step_losses(f.dir + "/from-folder"), lb = step_losses(f.dir + "/from-name");
  CHECK_MSG(!la.empty() && la.count(1) && lb.count(1) && la.at(1) == lb.at(1), "first-step loss %g vs %g",
            la.count(1) ? la.at(1) : -1.0, lb.count(1) ? lb.at(1) : -1.0);
  CHECK_MSG(has(read_file(f.dir + "/from-name/config.toml"), "init_from = \"org/tiny@" + kCommit + "\""),
            "config.toml: %s", read_file(f.dir + "/from-name/config.toml").c_str());
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(f.dir + "/from-name", nullptr);
  CHECK_MSG(ck.init_from == "org/tiny@" + kCommit, "checkpoint init_from %s", ck.init_from.c_str());

  // export --tokenizer org/tiny: the folder run's source has no tokenizer; the cached name gives it.
  const ProcResult e = run_worker({"export", "--checkpoint", f.dir + "/from-folder", "--format", "hf",
                                   "--out", f.dir + "/export-tok", "--tokenizer", "org/tiny"},
                                  f.env);
  CHECK_MSG(e.exit_code == 0 && read_file(f.dir + "/export-tok/tokenizer.json") ==
                                    read_file(golden("tokenizers/qwen/tokenizer.json")),
            "export --tokenizer org/tiny: %s", e.output.c_str());
  // sample --tokenizer org/tiny loads the cached Qwen tokenizer (800 tokens), which this 128-token
  // test model then refuses by its size: the refusal shows the tokenizer was read from the name.
  const ProcResult s = run_worker({"sample", "--checkpoint", f.dir + "/from-name", "--prompt-ids", "1 2",
                                   "--tokenizer", "org/tiny", "--tokens", "2"},
                                  f.env);
  CHECK_MSG(s.exit_code == 2 && has(s.output, "the tokenizer has ") && has(s.output, "the model only 128"),
            "sample --tokenizer org/tiny: exit %d\n%s", s.exit_code, s.output.c_str());
  // The name's run exports with its snapshot's config.json and tokenizer carried over.
  const ProcResult e2 = run_worker(
      {"export", "--checkpoint", f.dir + "/from-name", "--format", "hf", "--out", f.dir + "/export-name"},
      f.env);
  CHECK_MSG(e2.exit_code == 0 && fs::exists(f.dir + "/export-name/tokenizer.json") &&
                has(read_file(f.dir + "/export-name/config.json"), "\"qwen2\""),
            "export of the name's run: %s", e2.output.c_str());
}

// LoRA from the name: PEFT fields, a resume and a sample reading the pinned commit after refs/main moved.
void lora_from_name(const Fixture& f) {
  const std::string lora = "enabled = true\nrank = 2\nalpha = 4.0\n";
  const ProcResult first = train(f, "lora", config("org/tiny", lora), {"--stop-after", "1"});
  CHECK_MSG(first.exit_code == 0 || first.exit_code == 10, "lora: %s", first.output.c_str());
  const std::string run = f.dir + "/lora";
  const ProcResult peft =
      run_worker({"export", "--checkpoint", run, "--format", "peft", "--out", f.dir + "/peft"}, f.env);
  CHECK_MSG(peft.exit_code == 0, "export peft: %s", peft.output.c_str());
  const nlohmann::json ac = nlohmann::json::parse(read_file(f.dir + "/peft/adapter_config.json"));
  CHECK_MSG(ac["base_model_name_or_path"] == "org/tiny" && ac["revision"] == kCommit, "adapter_config: %s",
            ac.dump().c_str());

  // refs/main now points at other weights (same shapes, one value changed): the run's pinned name
  // still reads kCommit.
  const std::string other = f.dir + "/other";
  fs::create_directories(other);
  for (const char* file : {"config.json", "model.safetensors"})
    fs::copy_file(f.folder + "/" + file, other + "/" + file);
  {
    std::fstream w(other + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    w.seekp(-1, std::ios::end);  // the high byte of the last tensor's last value: still finite
    w.put(static_cast<char>(0x01));
  }
  const std::string repo = f.hub + "/models--org--tiny";
  fs::create_directories(repo + "/snapshots/" + kNewCommit);
  for (const auto& e : fs::directory_iterator(other)) {
    const std::string etag = "new-" + e.path().filename().string();
    fs::copy_file(e.path(), repo + "/blobs/" + etag);
    fs::create_symlink(fs::path("../../blobs") / etag,
                       repo + "/snapshots/" + kNewCommit + "/" + e.path().filename().string());
  }
  write_text(repo + "/refs/main", kNewCommit);

  // The resume reads config.toml (the pinned name), as `flotilla runs resume` does.
  const ProcResult again = run_worker(
      {"train", "--config", run + "/config.toml", "--out-dir", run, "--quiet", "--set", "train.steps=2"},
      f.env);
  CHECK_MSG(again.exit_code == 0 && flotilla_test::last_step(run) == 2, "resume: exit %d\n%s",
            again.exit_code, again.output.c_str());
  const ProcResult s = run_worker(
      {"sample", "--checkpoint", run, "--prompt-ids", "1 5 9", "--tokens", "3", "--top-k", "1"}, f.env);
  CHECK_MSG(s.exit_code == 0, "sample of the LoRA run: %s", s.output.c_str());
  // The unpinned name now means the new commit: resuming from it is refused by the base's
  // fingerprint, so the pinning above is what kept the run on its weights.
  const ProcResult unpinned = train(f, "lora", config("org/tiny", lora), {"--set", "train.steps=3"});
  CHECK_MSG(unpinned.exit_code == 5 && has(unpinned.output, "model.safetensors changed content"),
            "resume from the moved name: exit %d\n%s", unpinned.exit_code, unpinned.output.c_str());
  // In one process (the app creates many runs): each pin reads refs/main as it is now, not a
  // resolution remembered from before the cache moved.
  setenv("HF_HUB_CACHE", f.hub.c_str(), 1);
  setenv("HF_HUB_OFFLINE", "1", 1);
  flotilla::RunConfig c;
  c.model.init_from = "org/tiny";
  flotilla::interop::apply_hf_init_from(c);
  CHECK_MSG(c.model.init_from == "org/tiny@" + kNewCommit, "pinned %s", c.model.init_from.c_str());
  write_text(repo + "/refs/main", kCommit);  // back, for the other cases
  c.model.init_from = "org/tiny";
  flotilla::interop::apply_hf_init_from(c);
  CHECK_MSG(c.model.init_from == "org/tiny@" + kCommit, "pinned %s after refs/main moved back",
            c.model.init_from.c_str());

  // The merged HF export of the LoRA run: config.json and tokenizer files from the pinned snapshot.
  const ProcResult hf =
      run_worker({"export", "--checkpoint", run, "--format", "hf", "--out", f.dir + "/merged"}, f.env);
  CHECK_MSG(hf.exit_code == 0 && fs::exists(f.dir + "/merged/tokenizer.json") &&
                fs::exists(f.dir + "/merged/tokenizer_config.json"),
            "merged export: %s", hf.output.c_str());
}

// lora.init_from = "org/adapter": the cached PEFT adapter continued exactly, the name pinned.
void adapter_from_name(const Fixture& f) {
  const ProcResult p =
      train(f, "adapter", config(golden("hf/llama"), "enabled = true\ninit_from = \"org/adapter\"\n"),
            {"--set", "train.steps=1", "--set", "optim.warmup_steps=0", "--set", "optim.lr=1e-30"});
  CHECK_MSG(p.exit_code == 0, "lora.init_from name: %s", p.output.c_str());
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(f.dir + "/adapter", nullptr);
  const std::vector<float> want =
      flotilla::interop::import_peft_adapter(golden("lora/llama/adapter"), ck.dims, ck.lora);
  CHECK_MSG(ck.params == want, "the continued adapters are not the cached PEFT adapter");
  CHECK_MSG(
      has(read_file(f.dir + "/adapter/config.toml"), "init_from = \"org/adapter@" + kAdapterCommit + "\""),
      "config.toml: %s", read_file(f.dir + "/adapter/config.toml").c_str());
}

void tokenizer_from_name(const Fixture& f) {
  write_text(f.dir + "/docs.jsonl",
             "{\"text\": \"hello world, hello cache\"}\n{\"text\": \"a second one\"}\n");
  const ProcResult p = run_worker({"data", "prepare", "--input", f.dir + "/docs.jsonl", "--tokenizer",
                                   "org/tiny", "--out", f.dir + "/data", "--val-fraction", "0"},
                                  f.env);
  CHECK_MSG(p.exit_code == 0 && has(p.output, "tokenizer org/tiny: tokenizer.json"), "data prepare: %s",
            p.output.c_str());
  const ProcResult q =
      run_worker({"data", "prepare", "--input", f.dir + "/docs.jsonl", "--tokenizer",
                  golden("tokenizers/qwen"), "--out", f.dir + "/data-folder", "--val-fraction", "0"},
                 f.env);
  CHECK_MSG(q.exit_code == 0, "data prepare (folder): %s", q.output.c_str());
  const std::string shard = read_file(f.dir + "/data/train_000.bin");
  CHECK_MSG(!shard.empty() && shard == read_file(f.dir + "/data-folder/train_000.bin"),
            "the shards from the name differ from the folder's");
}

// A name in no cache, offline: one error with the key, the name, the cache and what to do.
void missing_names(const Fixture& f) {
  const ProcResult m = train(f, "missing", config("org/missing"));
  CHECK_MSG(m.exit_code == 3 && has(m.output, "model.init_from = \"org/missing\"") &&
                has(m.output, "not in the Hugging Face cache") && has(m.output, f.hub) &&
                has(m.output, "HF_HUB_OFFLINE") && has(m.output, "flotilla models pull org/missing"),
            "missing name: exit %d\n%s", m.exit_code, m.output.c_str());
  CHECK(!fs::exists(f.dir + "/missing/checkpoints"));
  const ProcResult t = run_worker({"data", "prepare", "--input", f.dir + "/docs.jsonl", "--tokenizer",
                                   "org/missing", "--out", f.dir + "/d2"},
                                  f.env);
  CHECK_MSG(t.exit_code == 3 && has(t.output, "--tokenizer = \"org/missing\"") && has(t.output, f.hub),
            "missing tokenizer: exit %d\n%s", t.exit_code, t.output.c_str());
  const ProcResult a = train(f, "missing-adapter",
                             config(golden("hf/llama"), "enabled = true\ninit_from = \"org/no-adapter\"\n"));
  CHECK_MSG(a.exit_code == 3 && has(a.output, "lora.init_from = \"org/no-adapter\"") && has(a.output, f.hub),
            "missing adapter: exit %d\n%s", a.exit_code, a.output.c_str());
  // Neither a folder nor a name: today's message, with the name form shown.
  const ProcResult n = train(f, "nowhere", config("no/such/folder"));
  CHECK_MSG(n.exit_code == 3 && has(n.output, "is not a folder") && has(n.output, "org/name[@revision]"),
            "neither: exit %d\n%s", n.exit_code, n.output.c_str());
}

}  // namespace

int main() {
  Fixture f;
  f.dir = fresh_dir("hub_names_cli");
  f.hub = f.dir + "/hub";
  f.env = env_for(f.hub);
  // The tiny Qwen2 folder with the Qwen tokenizer, as a folder and in the cache.
  f.folder = f.dir + "/tiny";
  fs::create_directories(f.folder);
  for (const char* file : {"config.json", "generation_config.json"})
    fs::copy_file(golden("hf/qwen2/") + file, f.folder + "/" + file);
  fs::copy_file(golden("hf/qwen2/model.safetensors"), f.folder + "/model.safetensors");
  const std::string with_tok = f.dir + "/tiny-with-tokenizer";
  fs::copy(f.folder, with_tok);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(golden("tokenizers/qwen/") + file, with_tok + "/" + file);
  cache_repo(f.hub, "org/tiny", kCommit, with_tok);
  cache_repo(f.hub, "org/adapter", kAdapterCommit, golden("lora/llama/adapter"));

  full_from_name(f);
  lora_from_name(f);
  adapter_from_name(f);
  tokenizer_from_name(f);
  missing_names(f);
  return flotilla_test::summary("test_hub_names_cli");
}
