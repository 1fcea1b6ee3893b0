// Hub names and the Hugging Face cache (engine/interop/hub.h): names parse to repo and revision;
// hostile names (.., absolute paths, odd characters, two slashes) are refused naming the problem,
// before any file is touched; an existing relative folder wins over a name; the cache folder
// follows huggingface_hub's environment order; a cache laid out as huggingface_hub lays it out
// (refs, snapshots linked to blobs) resolves by branch, by tag and by commit, and a snapshot with
// a missing shard or a dangling link is not taken for complete.
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/hub.h"

using namespace flotilla;
using namespace flotilla::interop::hub;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// One blob linked into a snapshot as huggingface_hub does (a relative link into ../../blobs).
void put(const fs::path& repo, const std::string& commit, const std::string& file, const std::string& etag,
         const std::string& text) {
  write(repo / "blobs" / etag, text);
  const fs::path link = repo / "snapshots" / commit / file;
  fs::create_directories(link.parent_path());
  fs::create_symlink(fs::path("../../blobs") / etag, link);
}

void test_parse() {
  ModelRef r = parse_model_ref("HuggingFaceTB/SmolLM2-135M", "model.init_from");
  CHECK(r.repo_id == "HuggingFaceTB/SmolLM2-135M");
  CHECK(r.revision.empty() && r.rev() == "main" && !r.is_commit());
  r = parse_model_ref("Qwen/Qwen2.5-0.5B@v1.0", "x");
  CHECK(r.repo_id == "Qwen/Qwen2.5-0.5B" && r.revision == "v1.0" && r.text() == "Qwen/Qwen2.5-0.5B@v1.0");
  r = parse_model_ref("org/name@refs/pr/3", "x");
  CHECK(r.revision == "refs/pr/3");
  const std::string c(40, 'a');
  CHECK(parse_model_ref("org/name@" + c, "x").is_commit());
  CHECK(!parse_model_ref("org/name@" + std::string(40, 'A'), "x").is_commit());  // commits are lowercase

  CHECK_THROWS(parse_model_ref("../etc/passwd", "model.init_from"), "model.init_from = \"../etc/passwd\"");
  CHECK_THROWS(parse_model_ref("../etc/passwd", "k"), "it is a relative path");
  CHECK_THROWS(parse_model_ref("./org/name", "k"), "it is a relative path");
  CHECK_THROWS(parse_model_ref("/abs/path", "k"), "absolute path");
  CHECK_THROWS(parse_model_ref("~/models/x", "k"), "'~'");
  CHECK_THROWS(parse_model_ref("org/..", "k"), "starts with '.'");
  CHECK_THROWS(parse_model_ref("org/a..b", "k"), "\"..\"");
  CHECK_THROWS(parse_model_ref("org/name@../../x", "k"), "revision starts with '.'");
  CHECK_THROWS(parse_model_ref("org/name@main/../../x", "k"), "\"..\"");
  CHECK_THROWS(parse_model_ref("org/name@", "k"), "after '@' is empty");
  CHECK_THROWS(parse_model_ref("org/na me", "k"), "a space");
  CHECK_THROWS(parse_model_ref("org/na$me", "k"), "'$'");
  CHECK_THROWS(parse_model_ref("org/na\nme", "k"), "control character");
  CHECK_THROWS(parse_model_ref("org/n\xc3\xa4me", "k"), "non-ASCII");
  CHECK_THROWS(parse_model_ref("org/name;rm -rf", "k"), "';'");
  CHECK_THROWS(parse_model_ref("justname", "k"), "no '/'");
  CHECK_THROWS(parse_model_ref("a/b/c", "k"), "more than one '/'");
  CHECK_THROWS(parse_model_ref("/", "k"), "absolute");
  CHECK_THROWS(parse_model_ref("org/", "k"), "name is empty");
  CHECK_THROWS(parse_model_ref("org/a--b", "k"), "\"--\"");
  CHECK_THROWS(parse_model_ref("org/model.git", "k"), ".git");
  CHECK_THROWS(parse_model_ref("org/" + std::string(97, 'x'), "k"), "over 96");
}

void test_is_model_ref(const fs::path& tmp) {
  const fs::path cwd = fs::current_path();
  fs::create_directories(tmp / "cwd" / "models" / "tiny");
  fs::current_path(tmp / "cwd");
  CHECK(is_model_ref("Qwen/Qwen2.5-0.5B"));
  CHECK(!is_model_ref("models/tiny"));  // an existing folder is a path
  CHECK(!is_model_ref("./org/name"));
  CHECK(!is_model_ref("../org/name"));
  CHECK(!is_model_ref("/org/name"));
  CHECK(!is_model_ref("model.safetensors"));
  CHECK(!is_model_ref(""));
  CHECK(local_folder("models/tiny") == "models/tiny");  // a path passes unchanged
  fs::current_path(cwd);
}

void test_cache_dir(const fs::path& tmp) {
  for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"}) unsetenv(v);
  setenv("HOME", (tmp / "home").c_str(), 1);
  CHECK(cache_dir().path == (tmp / "home/.cache/huggingface/hub").string());
  setenv("XDG_CACHE_HOME", (tmp / "xdg").c_str(), 1);
  CHECK(cache_dir().path == (tmp / "xdg/huggingface/hub").string() && cache_dir().source == "XDG_CACHE_HOME");
  setenv("HF_HOME", (tmp / "hf").c_str(), 1);
  CHECK(cache_dir().path == (tmp / "hf/hub").string() && cache_dir().source == "HF_HOME");
  setenv("HUGGINGFACE_HUB_CACHE", (tmp / "legacy").c_str(), 1);
  CHECK(cache_dir().path == (tmp / "legacy").string());
  setenv("HF_HUB_CACHE", (tmp / "hub").c_str(), 1);
  CHECK(cache_dir().path == (tmp / "hub").string() && cache_dir().source == "HF_HUB_CACHE");
  CHECK(repo_folder("/c", "Qwen/Qwen2.5-0.5B") == "/c/models--Qwen--Qwen2.5-0.5B");
}

void test_wanted() {
  CHECK(wanted_file("config.json", FileSet::kTraining));
  CHECK(wanted_file("model-00001-of-00002.safetensors", FileSet::kTraining));
  CHECK(wanted_file("model.safetensors.index.json", FileSet::kTraining));
  CHECK(wanted_file("tokenizer.json", FileSet::kTraining));
  CHECK(!wanted_file("pytorch_model.bin", FileSet::kTraining));
  CHECK(!wanted_file("model.pth", FileSet::kTraining));
  CHECK(!wanted_file("onnx/model.safetensors", FileSet::kTraining));
  CHECK(!wanted_file("README.md", FileSet::kTraining));
  CHECK(wanted_file("config.json", FileSet::kConfigOnly) &&
        !wanted_file("model.safetensors", FileSet::kConfigOnly));
  CHECK(wanted_file("tokenizer.json", FileSet::kTokenizer) &&
        wanted_file("merges.txt", FileSet::kTokenizer) &&
        !wanted_file("model.safetensors", FileSet::kTokenizer));
  CHECK(wanted_file("adapter_model.safetensors", FileSet::kAdapter) &&
        !wanted_file("adapter_model.bin", FileSet::kAdapter));
}

// The one wording every front end shows (the worker, flotilla models pull, the wizard, node fetches).
void test_progress_text() {
  CHECK(bytes_text(0) == "0 B" && bytes_text(999) == "999 B" && bytes_text(49200) == "49.2 kB");
  CHECK(bytes_text(112000) == "112 kB" && bytes_text(62927912) == "62.9 MB" &&
        bytes_text(1520000000) == "1.52 GB");
  Progress p;
  p.file = "model.safetensors";
  p.file_index = 2;
  p.file_count = 5;
  p.total = 270000000;
  p.done = 120300000;
  p.rate_bps = 14200000;
  p.eta_s = 10.6;
  CHECK(progress_text(p) == "model.safetensors (2/5): 120 of 270 MB, 14.2 MB/s, 11 s left");
  p.eta_s = 125;
  p.resumed_bytes = 16400;
  CHECK(progress_text(p) ==
        "model.safetensors (2/5): 120 of 270 MB, 14.2 MB/s, 2 min 5 s left, resumed from 16.4 kB");
  // Before a hundredth of the bytes moved, no rate and no guess of the time left.
  p.done = 0;
  p.resumed_bytes = 0;
  p.eta_s = 36000;
  CHECK(progress_text(p) == "model.safetensors (2/5): 0 of 270 MB");
}

void test_find_cached(const fs::path& tmp) {
  const fs::path hub = tmp / "cache";
  const fs::path repo = repo_folder(hub.string(), "org/tiny");
  const std::string c1(40, '1'), c2(40, '2');
  // c1: one safetensors file; c2: two shards, one missing at first.
  put(repo, c1, "config.json", "e-config", "{}");
  put(repo, c1, "model.safetensors", std::string(64, 'a'), "weights");
  write(repo / "refs" / "main", c1);
  write(repo / "refs" / "v1", c1 + "\n");
  put(repo, c2, "config.json", "e-config", "{}");
  put(repo, c2, "model.safetensors.index.json", "e-index",
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  put(repo, c2, "model-00001-of-00002.safetensors", std::string(64, 'b'), "s1");
  write(repo / "refs" / "next", c2);

  auto s = find_cached(parse_model_ref("org/tiny", "k"), FileSet::kTraining, hub.string());
  CHECK(s && s->commit == c1 && s->folder == (repo / "snapshots" / c1).string());
  s = find_cached(parse_model_ref("org/tiny@v1", "k"), FileSet::kTraining, hub.string());
  CHECK(s && s->commit == c1);
  s = find_cached(parse_model_ref("org/tiny@" + c1, "k"), FileSet::kTraining, hub.string());
  CHECK(s && s->commit == c1);
  CHECK(!find_cached(parse_model_ref("org/tiny@v2", "k"), FileSet::kTraining, hub.string()));
  CHECK(!find_cached(parse_model_ref("org/other", "k"), FileSet::kTraining, hub.string()));
  // A tokenizer alone: not a model to train, enough for `data prepare --tokenizer`.
  {
    const std::string c3(40, '3');
    put(repo, c3, "config.json", "e-config", "{}");
    put(repo, c3, "tokenizer.json", "e-tok", "{}");
    write(repo / "refs" / "tok", c3);
    CHECK(find_cached(parse_model_ref("org/tiny@tok", "k"), FileSet::kTokenizer, hub.string()));
    CHECK(!find_cached(parse_model_ref("org/tiny@tok", "k"), FileSet::kTraining, hub.string()));
    CHECK(find_cached(parse_model_ref("org/tiny", "k"), FileSet::kTokenizer, hub.string()) == std::nullopt);
  }
  // A missing shard: not complete for training, complete for planning.
  CHECK(!find_cached(parse_model_ref("org/tiny@next", "k"), FileSet::kTraining, hub.string()));
  CHECK(find_cached(parse_model_ref("org/tiny@next", "k"), FileSet::kConfigOnly, hub.string()));
  put(repo, c2, "model-00002-of-00002.safetensors", std::string(64, 'c'), "s2");
  CHECK(find_cached(parse_model_ref("org/tiny@next", "k"), FileSet::kTraining, hub.string()));
  // A dangling link (its blob still .incomplete) is not a file.
  fs::rename(repo / "blobs" / std::string(64, 'c'), repo / "blobs" / (std::string(64, 'c') + ".incomplete"));
  CHECK(!find_cached(parse_model_ref("org/tiny@next", "k"), FileSet::kTraining, hub.string()));

  // Resolution uses the cache without any network; offline and missing says where the cache is.
  DownloadOptions o;
  o.hub_dir = hub.string();
  const Resolved r = resolve(parse_model_ref("org/tiny", "k"), o);
  CHECK(!r.downloaded && r.snapshot.commit == c1 &&
        r.note.find("cached commit 1111111") != std::string::npos);
  setenv("HF_HUB_OFFLINE", "1", 1);
  CHECK(offline_from_environment());
  CHECK_THROWS(resolve(parse_model_ref("org/other", "k"), o), "HF_HUB_OFFLINE");
  setenv("HF_HUB_CACHE", hub.c_str(), 1);
  CHECK(local_folder("org/tiny") == (repo / "snapshots" / c1).string());
  unsetenv("HF_HUB_OFFLINE");
}

}  // namespace

int main() {
  const fs::path tmp = fs::temp_directory_path() / ("flotilla-hub-ref-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  test_parse();
  test_is_model_ref(tmp);
  test_cache_dir(tmp);
  test_wanted();
  test_progress_text();
  test_find_cached(tmp);
  fs::remove_all(tmp);
  return flotilla_test::summary("interop_hub_ref");
}
