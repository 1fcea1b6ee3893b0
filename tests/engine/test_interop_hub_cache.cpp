// The Hugging Face cache as huggingface_hub itself writes it (tests/engine/golden/hub-cache, made by
// tests/reference/make_hub_cache.py with snapshot_download against the stand-in Hub; what it made is
// described in hub-cache.json beside it), read by our code from a copy in a temp folder:
//  - a model resolves by name (refs/main), by tag and by a commit no ref names, without a network
//    (HF_HUB_OFFLINE=1 through resolve and local_folder, HF_HUB_CACHE naming the copy);
//  - list_cached_models shows each repo's snapshot, its refs, architecture, whether it trains and
//    why not (a bert config: unsupported model_type; a gpt2 one: trained by file), its bytes (the
//    blob files' sizes) and its parameters (the tiny Llama's, counted from its shape here);
//  - junk in a cache (datasets--/spaces-- folders, .locks, a repo with no refs, no snapshot, a
//    dangling link, a broken config.json, a damaged safetensors header, a legacy name without an
//    organisation, stray files) is skipped or reported in why_not, never thrown.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/hub.h"

using namespace flotilla;
using namespace flotilla::interop::hub;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kLlama = "flotilla-test/tiny-llama";
const std::string kBert = "flotilla-test/tiny-bert";
const std::string kGpt2 = "flotilla-test/tiny-gpt2";

json manifest() {
  std::ifstream in(std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hub-cache.json");
  return json::parse(in);
}

// The committed fixture copied with its links as links.
fs::path copy_fixture(const fs::path& tmp) {
  const fs::path hub = tmp / "hub";
  fs::copy(fs::path(FLOTILLA_SOURCE_DIR) / "tests/engine/golden/hub-cache", hub,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return hub;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const CachedModel* row(const std::vector<CachedModel>& rows, const std::string& id) {
  for (const CachedModel& m : rows)
    if (m.repo_id == id) return &m;
  return nullptr;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The tiny Llama's parameters from its shape (tests/engine/golden/hf/llama/config.json: V 128, C 32,
// F 64, L 2, H 4 of d 8, KV 2, untied head): what the safetensors headers must add up to.
uint64_t tiny_llama_parameters() {
  const uint64_t V = 128, C = 32, F = 64, L = 2, H = 4, KV = 2, d = 8;
  const uint64_t layer = C * H * d + 2 * C * KV * d + H * d * C + 3 * C * F + 2 * C;
  return V * C + L * layer + C + V * C;
}

// Each blob file's size, summed: what bytes_on_disk must be.
uint64_t blob_bytes(const fs::path& repo) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(repo / "blobs")) n += fs::file_size(e.path());
  return n;
}

void test_resolution(const fs::path& hub, const json& m) {
  const json& llama = m.at("repos").at(kLlama);
  const std::string main_commit = llama.at("refs").at("main"), tag_commit = llama.at("refs").at("v1.0");
  const std::string bare_commit = llama.at("commit_only");
  CHECK(main_commit != tag_commit && bare_commit != main_commit && bare_commit != tag_commit);

  // By name: refs/main; by tag; by a commit that no ref names (huggingface_hub writes no ref for it).
  auto s = find_cached(parse_model_ref(kLlama, "k"), FileSet::kTraining, hub.string());
  CHECK(s && s->commit == main_commit);
  CHECK(s && s->folder == (fs::path(repo_folder(hub.string(), kLlama)) / "snapshots" / main_commit).string());
  CHECK(s && contains(read(fs::path(s->folder) / "config.json"), "LlamaForCausalLM"));
  s = find_cached(parse_model_ref(kLlama + "@v1.0", "k"), FileSet::kTraining, hub.string());
  CHECK(s && s->commit == tag_commit);
  s = find_cached(parse_model_ref(kLlama + "@" + bare_commit, "k"), FileSet::kTraining, hub.string());
  CHECK(s && s->commit == bare_commit);
  CHECK(!fs::exists(fs::path(repo_folder(hub.string(), kLlama)) / "refs" / bare_commit));
  CHECK(!find_cached(parse_model_ref(kLlama + "@v9", "k"), FileSet::kTraining, hub.string()));
  // huggingface_hub links snapshot files relatively (../../blobs/<etag>): the copy still resolves.
  const fs::path link =
      fs::path(repo_folder(hub.string(), kLlama)) / "snapshots" / main_commit / "config.json";
  CHECK(fs::is_symlink(fs::symlink_status(link)) && fs::read_symlink(link).is_relative());

  // Through the one call model readers make, from HF_HUB_CACHE, offline: no network is touched.
  setenv("HF_HUB_CACHE", hub.c_str(), 1);
  setenv("HF_HUB_OFFLINE", "1", 1);
  DownloadOptions o;
  const Resolved r = resolve(parse_model_ref(kLlama + "@v1.0", "k"), o);
  CHECK(!r.downloaded && r.snapshot.commit == tag_commit && contains(r.note, "cached commit"));
  CHECK(local_folder(kLlama) == s->folder.substr(0, s->folder.size() - 40) + main_commit);
  CHECK(local_folder(kLlama + "@" + bare_commit) ==
        (fs::path(repo_folder(hub.string(), kLlama)) / "snapshots" / bare_commit).string());
  // Another repo resolves for planning; a model not cached fails offline naming the cache.
  CHECK(find_cached(parse_model_ref(kBert, "k"), FileSet::kConfigOnly, hub.string()));
  CHECK_THROWS(resolve(parse_model_ref("flotilla-test/absent", "k"), o), "not in the Hugging Face cache");
  unsetenv("HF_HUB_OFFLINE");
  unsetenv("HF_HUB_CACHE");
}

void test_listing(const fs::path& hub, const json& m) {
  const std::vector<CachedModel> rows = list_cached_models(hub.string());
  CHECK(rows.size() == 3);
  CHECK(rows.size() == 3 && rows[0].repo_id == kBert && rows[1].repo_id == kGpt2 &&
        rows[2].repo_id == kLlama);

  const CachedModel* llama = row(rows, kLlama);
  CHECK(llama != nullptr);
  if (llama) {
    const json& ml = m.at("repos").at(kLlama);
    CHECK(llama->commit == ml.at("refs").at("main").get<std::string>());
    CHECK(!llama->refs.empty() && llama->refs[0] == "main");
    CHECK(llama->folder ==
          find_cached(parse_model_ref(kLlama, "k"), FileSet::kTraining, hub.string())->folder);
    CHECK(llama->model_type == "llama" && llama->architecture == "LlamaForCausalLM");
    CHECK(llama->trainable && llama->why_not.empty());
    CHECK(llama->parameters == tiny_llama_parameters());
    CHECK(llama->parameters == ml.at("parameters").get<uint64_t>());
    CHECK(llama->bytes_on_disk == blob_bytes(repo_folder(hub.string(), kLlama)));
    CHECK(llama->bytes_on_disk == ml.at("blob_bytes").get<uint64_t>());
    CHECK(llama->modified_unix > 0);
  }
  const CachedModel* bert = row(rows, kBert);
  CHECK(bert && !bert->trainable && bert->model_type == "bert" && bert->architecture == "BertModel");
  CHECK(bert && contains(bert->why_not, "model_type \"bert\" is not supported") &&
        contains(bert->why_not, "Llama family"));
  CHECK(bert && bert->bytes_on_disk == blob_bytes(repo_folder(hub.string(), kBert)));
  CHECK(bert && bert->parameters == m.at("repos").at(kBert).at("parameters").get<uint64_t>());
  const CachedModel* gpt2 = row(rows, kGpt2);
  CHECK(gpt2 && !gpt2->trainable && gpt2->model_type == "gpt2" && contains(gpt2->why_not, "GPT-2"));
  CHECK(gpt2 && contains(gpt2->why_not, "model.safetensors"));
  CHECK(gpt2 && gpt2->parameters == m.at("repos").at(kGpt2).at("parameters").get<uint64_t>());

  // One revision's row (flotilla models show): by tag, by a bare commit; absent ones are nullopt.
  if (!llama || !bert) return;
  const json& refs = m.at("repos").at(kLlama).at("refs");
  auto d = describe_cached(parse_model_ref(kLlama + "@v1.0", "k"), hub.string());
  CHECK(d && d->commit == refs.at("v1.0").get<std::string>() && d->trainable &&
        d->refs == std::vector<std::string>{"v1.0"});
  CHECK(d && d->parameters == tiny_llama_parameters() && d->bytes_on_disk == llama->bytes_on_disk);
  const std::string bare = m.at("repos").at(kLlama).at("commit_only");
  d = describe_cached(parse_model_ref(kLlama + "@" + bare, "k"), hub.string());
  CHECK(d && d->commit == bare && d->refs.empty() && d->trainable);
  d = describe_cached(parse_model_ref(kLlama, "k"), hub.string());
  CHECK(d && d->commit == llama->commit);
  CHECK(!describe_cached(parse_model_ref(kLlama + "@v9", "k"), hub.string()));
  CHECK(!describe_cached(parse_model_ref("flotilla-test/absent", "k"), hub.string()));
  d = describe_cached(parse_model_ref(kBert, "k"), hub.string());
  CHECK(d && !d->trainable && d->why_not == bert->why_not);

  // refs/main's snapshot loses a shard: the listing falls back to the newest complete snapshot.
  const fs::path repo = repo_folder(hub.string(), kLlama);
  const std::string main_commit = m.at("repos").at(kLlama).at("refs").at("main");
  const fs::path shard = repo / "snapshots" / main_commit / "model-00002-of-00003.safetensors";
  const fs::path target = fs::read_symlink(shard);
  fs::remove(shard);
  fs::create_symlink("../../blobs/0000000000000000000000000000000000000000000000000000000000000000", shard);
  const CachedModel* fallback = nullptr;
  const std::vector<CachedModel> again = list_cached_models(hub.string());
  fallback = row(again, kLlama);
  CHECK(fallback && fallback->commit != main_commit && fallback->trainable);
  CHECK(fallback &&
        find_cached(parse_model_ref(kLlama + "@" + fallback->commit, "k"), FileSet::kTraining, hub.string()));
  fs::remove(shard);
  fs::create_symlink(target, shard);
}

void test_junk(const fs::path& hub) {
  const std::string c1(40, '1'), c2(40, '2');
  // Not model repos: skipped.
  write(hub / "datasets--org--data" / "refs" / "main", c1);
  write(hub / "spaces--org--space" / "refs" / "main", c1);
  write(hub / ".locks" / "models--org--x" / "abc.lock", "");
  write(hub / "version.txt", "1");
  write(hub / "models--stray-file", "not a folder");
  // A repo with no refs: its only snapshot is still listed.
  const fs::path llama = repo_folder(hub.string(), kLlama);
  const fs::path norefs = hub / "models--junk--norefs";
  fs::create_directories(norefs / "snapshots");
  fs::copy(llama / "blobs", norefs / "blobs");
  const std::string main_commit = read(llama / "refs" / "main");
  fs::copy(llama / "snapshots" / main_commit, norefs / "snapshots" / c1,
           fs::copy_options::copy_symlinks | fs::copy_options::recursive);
  // No snapshot at all; refs to missing snapshots.
  fs::create_directories(hub / "models--junk--empty");
  write(hub / "models--junk--lostsnap" / "refs" / "main", c2);
  // A dangling link (its blob gone) for config.json.
  fs::create_directories(hub / "models--junk--dangling" / "snapshots" / c1);
  fs::create_symlink("../../blobs/missing",
                     hub / "models--junk--dangling" / "snapshots" / c1 / "config.json");
  write(hub / "models--junk--dangling" / "refs" / "main", c1);
  // A broken config.json beside good weights.
  const fs::path broken = hub / "models--junk--brokenconfig" / "snapshots" / c1;
  write(broken / "config.json", "{not json");
  fs::copy_file(llama / "snapshots" / main_commit / "model-00003-of-00003.safetensors",
                broken / "model.safetensors");
  // A damaged safetensors header.
  const fs::path damaged = hub / "models--junk--damaged" / "snapshots" / c1;
  fs::create_directories(damaged);
  fs::copy_file(llama / "snapshots" / main_commit / "config.json", damaged / "config.json");
  write(damaged / "model.safetensors", std::string("\x10\0\0\0\0\0\0\0{\"a\":", 13));
  // Pickled weights only; a legacy name with no organisation; a snapshot folder that is no commit.
  const fs::path pickled = hub / "models--junk--pickled" / "snapshots" / c1;
  fs::create_directories(pickled);
  fs::copy_file(llama / "snapshots" / main_commit / "config.json", pickled / "config.json");
  write(pickled / "pytorch_model.bin", "pickle");
  const fs::path legacy = hub / "models--gpt9" / "snapshots" / c1;
  fs::create_directories(legacy.parent_path());
  fs::copy(llama / "snapshots" / main_commit, legacy, fs::copy_options::recursive);  // links followed: files
  write(hub / "models--gpt9" / "snapshots" / "not-a-commit" / "config.json", "{}");

  std::vector<CachedModel> rows;
  try {
    rows = list_cached_models(hub.string());
  } catch (const std::exception& e) {
    CHECK(!"list_cached_models threw on junk");
  }
  CHECK(!row(rows, "org/data") && !row(rows, "org/space") && !row(rows, "org/x") && !row(rows, "stray-file"));
  const CachedModel* r = row(rows, "junk/norefs");
  CHECK(r && r->commit == c1 && r->refs.empty() && r->trainable && r->parameters == tiny_llama_parameters());
  r = row(rows, "junk/empty");
  CHECK(r && !r->trainable && contains(r->why_not, "no snapshot"));
  r = row(rows, "junk/lostsnap");
  CHECK(r && !r->trainable && contains(r->why_not, "not cached"));
  r = row(rows, "junk/dangling");
  CHECK(r && !r->trainable && contains(r->why_not, "config.json is a link to a blob that is missing"));
  r = row(rows, "junk/brokenconfig");
  CHECK(r && !r->trainable && contains(r->why_not, "config.json") && r->model_type.empty());
  r = row(rows, "junk/damaged");
  CHECK(r && !r->trainable && contains(r->why_not, "model.safetensors cannot be read") && r->parameters == 0);
  r = row(rows, "junk/pickled");
  CHECK(r && !r->trainable && contains(r->why_not, "pickled"));
  r = row(rows, "gpt9");
  CHECK(r && !r->trainable && r->commit == c1 && contains(r->why_not, "no organisation"));
  CHECK(r && r->bytes_on_disk > 0 && r->parameters == tiny_llama_parameters());
  // The fixture's own repos are still right beside the junk.
  CHECK(row(rows, kLlama) && row(rows, kLlama)->trainable);
  // No cache folder at all: an empty list.
  CHECK(list_cached_models((hub / "absent").string()).empty());
  CHECK(list_cached_models((hub / "version.txt").string()).empty());
}

}  // namespace

int main() {
  const fs::path tmp = fs::temp_directory_path() / ("flotilla-hub-cache-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const json m = manifest();
  const fs::path hub = copy_fixture(tmp);
  test_resolution(hub, m);
  test_listing(hub, m);
  test_junk(hub);
  fs::remove_all(tmp);
  return flotilla_test::summary("interop_hub_cache");
}
