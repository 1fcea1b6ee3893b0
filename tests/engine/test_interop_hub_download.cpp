// Downloads from the Hub (engine/interop/hub_download.cpp) against the stand-in Hub
// (tests/tools/hub_server.py, HTTPS with a certificate made at test time):
// - a full download lays the cache out as huggingface_hub does (blobs named by etag, relative
//   links, refs/main), fetches only the files a run needs (no .bin, no README requested), follows
//   the LFS redirect without sending the token to the CDN path, and reports progress to the total;
// - a second download of a cached model requests no file body; a commit revision writes no ref;
// - an interrupted transfer is resumed with a Range request, within one call and across calls
//   (after a cancellation and after the retries ran out), and the final bytes hash right;
// - a corrupted file is refused (kData), nothing is linked, the partial file is removed;
// - a gated model: 401/403 name "accept" and HF_TOKEN, the token's value is in no message, and the
//   download succeeds with HF_TOKEN; missing model and revision are kConfig with clear words; a
//   renamed repo's redirects are followed (relative: the token stays on the host);
// - offline (HF_HUB_OFFLINE=1) uses the cache and refuses a missing model naming the cache;
// - a stalled transfer is detected (stall_timeout_s) and resumed; a mirror without the blob fields
//   of the model info is asked per file with HEAD and checked the same way;
// - two concurrent downloads of one model fetch each blob once and leave it whole.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/hub.h"
#include "tests/engine/hub_server_util.h"

using namespace flotilla;
using namespace flotilla::interop::hub;
using flotilla_test::HubRequest;
using flotilla_test::HubServer;
namespace fs = std::filesystem;

namespace {

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
std::vector<std::string> g_messages;  // every error message seen: none may hold a token

std::string bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string g_root;
int g_cache_counter = 0;
std::string fresh_cache() { return g_root + "/cache" + std::to_string(g_cache_counter++); }

DownloadOptions opts(const std::string& hub_dir) {
  DownloadOptions o;
  o.hub_dir = hub_dir;
  o.stall_timeout_s = 10;
  return o;
}

// The error a download throws (code and message), or kOk.
std::pair<ExitCode, std::string> try_download(const std::string& name, const DownloadOptions& o) {
  try {
    download(parse_model_ref(name, "model"), o);
    return {ExitCode::kOk, ""};
  } catch (const Error& e) {
    g_messages.push_back(e.what());
    return {e.code(), e.what()};
  }
}

int count(const std::vector<HubRequest>& log, const std::string& method, const std::string& part) {
  int n = 0;
  for (const HubRequest& r : log)
    if (r.method == method && r.path.find(part) != std::string::npos) ++n;
  return n;
}

const std::string kWeights = bytes(300000, 1);
const std::string kConfig = "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"]}\n";
const std::string kTokenizer = "{\"model\": {\"type\": \"BPE\"}}\n";

void test_full_download(HubServer& hub) {
  const std::string cache = fresh_cache();
  setenv("HF_TOKEN", HubServer::kToken, 1);  // sent to the endpoint, never to the CDN
  hub.clear_requests();
  DownloadOptions o = opts(cache);
  Progress last;
  int reports = 0;
  o.progress = [&](const Progress& p) {
    last = p;
    ++reports;
    return true;
  };
  const Snapshot s = download(parse_model_ref("org/tiny", "model"), o);
  unsetenv("HF_TOKEN");
  const fs::path repo = fs::path(cache) / "models--org--tiny";
  CHECK(s.commit == kCommit);
  CHECK(s.folder == (repo / "snapshots" / kCommit).string());
  CHECK(slurp(repo / "refs" / "main") == kCommit);
  CHECK(slurp(fs::path(s.folder) / "model.safetensors") == kWeights);
  CHECK(slurp(fs::path(s.folder) / "config.json") == kConfig);
  CHECK(slurp(fs::path(s.folder) / "tokenizer.json") == kTokenizer);
  // Relative links into ../../blobs/<etag>: sha256 for the LFS file, git blob sha1 else.
  const fs::path w = fs::read_symlink(fs::path(s.folder) / "model.safetensors");
  CHECK_MSG(w.parent_path() == fs::path("../../blobs") && w.filename().string().size() == 64, "%s",
            w.c_str());
  const fs::path c = fs::read_symlink(fs::path(s.folder) / "config.json");
  CHECK_MSG(c.parent_path() == fs::path("../../blobs") && c.filename().string().size() == 40, "%s",
            c.c_str());
  CHECK(fs::is_regular_file(repo / "blobs" / w.filename()));
  CHECK(!fs::exists(fs::path(s.folder) / "pytorch_model.bin") &&
        !fs::exists(fs::path(s.folder) / "README.md"));
  CHECK(fs::exists(fs::path(cache) / ".locks" / "models--org--tiny" / (w.filename().string() + ".lock")));
  // find_cached takes what was written.
  CHECK(find_cached(parse_model_ref("org/tiny", "m"), FileSet::kTraining, cache).has_value());

  const auto log = hub.requests();
  CHECK(count(log, "GET", "pytorch_model.bin") == 0 && count(log, "HEAD", "pytorch_model.bin") == 0);
  CHECK(count(log, "GET", "README.md") == 0);
  CHECK(count(log, "GET", "/api/models/org/tiny/revision/main") == 1);
  int cdn = 0, resolve_with_auth = 0;
  for (const HubRequest& r : log) {
    if (r.path.rfind("/cdn/", 0) == 0) {
      ++cdn;
      CHECK_MSG(!r.auth, "the token reached the CDN path %s", r.path.c_str());
    }
    if (r.path.find("/resolve/") != std::string::npos && r.auth) ++resolve_with_auth;
  }
  CHECK(cdn == 1);
  CHECK(resolve_with_auth == 3);  // config.json, tokenizer.json, model.safetensors
  // Progress: the last report counts every byte of the three files.
  const uint64_t total = kWeights.size() + kConfig.size() + kTokenizer.size();
  CHECK(reports >= 3);
  CHECK_MSG(last.done == total && last.total == total, "%llu of %llu", (unsigned long long)last.done,
            (unsigned long long)last.total);
  CHECK(last.file_count == 3 && last.file_index == 3);

  // Again: nothing is fetched (one model-info request), the same snapshot comes back.
  hub.clear_requests();
  const Snapshot again = download(parse_model_ref("org/tiny", "model"), opts(cache));
  CHECK(again.folder == s.folder);
  const auto log2 = hub.requests();
  CHECK_MSG(log2.size() == 1 && count(log2, "GET", "/api/models/") == 1, "%zu requests", log2.size());
  CHECK(count(log2, "GET", "/resolve/") == 0 && count(log2, "GET", "/cdn/") == 0);

  // Offline: the cache is used with no request; a missing model is refused naming the cache.
  setenv("HF_HUB_OFFLINE", "1", 1);
  hub.clear_requests();
  const Resolved r = resolve(parse_model_ref("org/tiny", "model"), opts(cache));
  CHECK(!r.downloaded && r.snapshot.folder == s.folder);
  CHECK(download(parse_model_ref("org/tiny", "model"), opts(cache)).folder == s.folder);
  auto [code, msg] = try_download("org/absent", opts(cache));
  CHECK(code == ExitCode::kConfig);
  CHECK_MSG(msg.find(cache) != std::string::npos && msg.find("HF_HUB_OFFLINE") != std::string::npos, "%s",
            msg.c_str());
  CHECK(hub.requests().empty());
  unsetenv("HF_HUB_OFFLINE");
}

void test_commit_revision(HubServer& hub) {
  const std::string cache = fresh_cache();
  const Snapshot s = download(parse_model_ref("org/tiny@" + kCommit, "model"), opts(cache));
  CHECK(s.commit == kCommit);
  const fs::path refs = fs::path(cache) / "models--org--tiny" / "refs";
  CHECK_MSG(!fs::exists(refs) || fs::is_empty(refs), "a commit revision wrote a ref");
  CHECK(slurp(fs::path(s.folder) / "model.safetensors") == kWeights);
  // A tag resolves through the server and writes refs/<tag>.
  const Snapshot t = download(parse_model_ref("org/tiny@v1.0", "model"), opts(cache));
  CHECK(t.folder == s.folder && slurp(refs / "v1.0") == kCommit);
  (void)hub;
}

void test_resume(HubServer& hub) {
  // Within one call: the body is cut once after 100000 bytes, the next request asks for the rest.
  std::string cache = fresh_cache();
  hub.control(R"({"cut": {"model.safetensors": {"after": 100000, "times": 1}}})");
  hub.clear_requests();
  Snapshot s = download(parse_model_ref("org/tiny", "model"), opts(cache));
  CHECK(slurp(fs::path(s.folder) / "model.safetensors") == kWeights);
  auto log = hub.requests();
  bool cut = false, ranged = false;
  for (const HubRequest& r : log) {
    cut |= r.cut;
    ranged |= r.path.rfind("/cdn/", 0) == 0 && r.range == "bytes=100000-" && r.status == 206;
  }
  CHECK(cut && ranged);

  // Across calls: the retries run out (5 cuts of 40000 bytes): kIo, the partial file is kept...
  cache = fresh_cache();
  hub.control(R"({"cut": {"model.safetensors": {"after": 40000, "times": 5}}})");
  auto [code, msg] = try_download("org/tiny", opts(cache));
  CHECK_MSG(code == ExitCode::kIo, "%s", msg.c_str());
  CHECK_MSG(msg.find("resumes") != std::string::npos && msg.find("model.safetensors") != std::string::npos,
            "%s", msg.c_str());
  const fs::path blobs = fs::path(cache) / "models--org--tiny" / "blobs";
  uint64_t kept = 0;
  for (const auto& e : fs::directory_iterator(blobs))
    if (e.path().extension() == ".incomplete") kept = fs::file_size(e.path());
  CHECK_MSG(kept == 200000, "kept %llu", (unsigned long long)kept);
  CHECK(!fs::exists(fs::path(cache) / "models--org--tiny" / "refs" / "main"));
  // ... and the next call asks for the rest only.
  hub.control("{}");
  hub.clear_requests();
  s = download(parse_model_ref("org/tiny", "model"), opts(cache));
  CHECK(slurp(fs::path(s.folder) / "model.safetensors") == kWeights);
  log = hub.requests();
  CHECK(count(log, "GET", "/cdn/") == 1);
  for (const HubRequest& r : log)
    if (r.path.rfind("/cdn/", 0) == 0)
      CHECK_MSG(r.range == "bytes=200000-" && r.bytes == 100000, "%s", r.range.c_str());

  // A cancellation (the progress callback says stop) keeps the partial file; the next call resumes it.
  cache = fresh_cache();
  hub.control(R"({"throttle_bps": 400000})");
  DownloadOptions o = opts(cache);
  o.progress = [](const Progress& p) { return !(p.file == "model.safetensors" && p.done > 60000); };
  std::tie(code, msg) = try_download("org/tiny", o);
  CHECK_MSG(code == ExitCode::kIo && msg == "cancelled", "%s", msg.c_str());
  kept = 0;
  for (const auto& e : fs::directory_iterator(fs::path(cache) / "models--org--tiny" / "blobs"))
    if (e.path().extension() == ".incomplete") kept = fs::file_size(e.path());
  CHECK_MSG(kept > 0 && kept < kWeights.size(), "kept %llu", (unsigned long long)kept);
  hub.control("{}");
  hub.clear_requests();
  Progress first_of_weights;
  o.progress = [&](const Progress& p) {
    if (p.file == "model.safetensors" && first_of_weights.file.empty()) first_of_weights = p;
    return true;
  };
  s = download(parse_model_ref("org/tiny", "model"), o);
  CHECK(slurp(fs::path(s.folder) / "model.safetensors") == kWeights);
  CHECK(first_of_weights.resumed_bytes == kept);
  // (The cancelled request's own line may land in the log late: the throttled server notices the
  // closed connection after a while.)
  log = hub.requests();
  bool resumed = false;
  for (const HubRequest& r : log)
    resumed |= r.path.rfind("/cdn/", 0) == 0 && r.range == "bytes=" + std::to_string(kept) + "-" &&
               r.status == 206 && r.bytes == static_cast<long long>(kWeights.size() - kept);
  CHECK_MSG(resumed, "no GET asked for bytes=%llu-", (unsigned long long)kept);
}

// A transfer that stops moving (the server stalls) fails after stall_timeout_s and is resumed.
void test_stall(HubServer& hub) {
  hub.control(R"({"stall": {"model.safetensors": {"after": 100000, "seconds": 6, "times": 1}}})");
  hub.clear_requests();
  DownloadOptions o = opts(fresh_cache());
  o.stall_timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto [code, msg] = try_download("org/tiny", o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  hub.control("{}");
  CHECK_MSG(code == ExitCode::kOk, "%s", msg.c_str());
  CHECK_MSG(secs < 5, "%.1f s: the stall was waited out, not detected", secs);
  CHECK(count(hub.requests(), "GET", "/cdn/") >= 1);
  bool resumed = false;
  for (const HubRequest& r : hub.requests()) resumed |= r.range == "bytes=100000-" && r.status == 206;
  CHECK(resumed);
}

// A mirror that ignores ?blobs=true: each wanted file is HEADed for its etag and size (X-Linked-*
// for the LFS file), the blobs get the same names, and the checks still run.
void test_no_blobs_mirror(HubServer& hub) {
  const std::string cache = fresh_cache();
  hub.control(R"({"no_blobs": true})");
  hub.clear_requests();
  auto [code, msg] = try_download("org/tiny", opts(cache));
  CHECK_MSG(code == ExitCode::kOk, "%s", msg.c_str());
  CHECK(count(hub.requests(), "HEAD", "/resolve/") == 3);
  const fs::path snap = fs::path(cache) / "models--org--tiny" / "snapshots" / kCommit;
  CHECK(slurp(snap / "model.safetensors") == kWeights);
  CHECK(fs::read_symlink(snap / "model.safetensors").filename().string().size() == 64);
  CHECK(fs::read_symlink(snap / "config.json").filename().string().size() == 40);
  hub.control(R"({"no_blobs": true, "corrupt": ["model.safetensors"]})");
  std::tie(code, msg) = try_download("org/tiny", opts(fresh_cache()));
  hub.control("{}");
  CHECK_MSG(code == ExitCode::kData, "%s", msg.c_str());
}

void test_corrupt(HubServer& hub) {
  const std::string cache = fresh_cache();
  hub.control(R"({"corrupt": ["model.safetensors"]})");
  auto [code, msg] = try_download("org/tiny", opts(cache));
  hub.control("{}");
  CHECK_MSG(code == ExitCode::kData, "%s", msg.c_str());
  CHECK_MSG(msg.find("sha256") != std::string::npos && msg.find("removed") != std::string::npos, "%s",
            msg.c_str());
  const fs::path repo = fs::path(cache) / "models--org--tiny";
  CHECK(!fs::exists(repo / "snapshots" / kCommit / "model.safetensors"));
  CHECK(!fs::exists(repo / "refs" / "main"));
  for (const auto& e : fs::directory_iterator(repo / "blobs"))
    CHECK_MSG(e.path().extension() != ".incomplete" && fs::file_size(e.path()) != kWeights.size(), "%s",
              e.path().c_str());
  // A non-LFS file (git blob sha1) is checked too.
  hub.control(R"({"corrupt": ["config.json"]})");
  std::tie(code, msg) = try_download("org/tiny", opts(fresh_cache()));
  hub.control("{}");
  CHECK_MSG(code == ExitCode::kData && msg.find("git blob sha1") != std::string::npos, "%s", msg.c_str());
}

void test_gated_and_missing(HubServer& hub) {
  std::string cache = fresh_cache();
  auto [code, msg] = try_download("org/gated", opts(cache));
  CHECK_MSG(code == ExitCode::kConfig, "%s", msg.c_str());
  CHECK_MSG(msg.find("accept") != std::string::npos && msg.find("HF_TOKEN") != std::string::npos, "%s",
            msg.c_str());
  setenv("HF_TOKEN", "hf_wrong_secret_value", 1);
  std::tie(code, msg) = try_download("org/gated", opts(cache));
  CHECK_MSG(code == ExitCode::kConfig && msg.find("accept") != std::string::npos &&
                msg.find("no access") != std::string::npos,
            "%s", msg.c_str());
  setenv("HF_TOKEN", HubServer::kToken, 1);
  std::tie(code, msg) = try_download("org/gated", opts(cache));
  CHECK_MSG(code == ExitCode::kOk, "%s", msg.c_str());
  // The token from the file `huggingface-cli login` writes ($HF_HOME/token) works the same.
  unsetenv("HF_TOKEN");
  {
    std::ofstream(std::string(getenv("HF_HOME")) + "/token") << HubServer::kToken << "\n";
    std::tie(code, msg) = try_download("org/gated", opts(fresh_cache()));
    CHECK_MSG(code == ExitCode::kOk, "token file: %s", msg.c_str());
    fs::remove(std::string(getenv("HF_HOME")) + "/token");
  }
  setenv("HF_TOKEN", HubServer::kToken, 1);
  // A private model: not found without the token, downloaded with it.
  std::tie(code, msg) = try_download("org/private", opts(cache));
  CHECK_MSG(code == ExitCode::kOk, "%s", msg.c_str());
  unsetenv("HF_TOKEN");
  std::tie(code, msg) = try_download("org/private", opts(fresh_cache()));
  CHECK_MSG(code == ExitCode::kConfig && msg.find("private model needs HF_TOKEN") != std::string::npos, "%s",
            msg.c_str());
  std::tie(code, msg) = try_download("org/missing", opts(cache));
  CHECK_MSG(code == ExitCode::kConfig && msg.find("was not found") != std::string::npos, "%s", msg.c_str());
  std::tie(code, msg) = try_download("org/tiny@nope", opts(cache));
  CHECK_MSG(code == ExitCode::kConfig && msg.find("no revision \"nope\"") != std::string::npos, "%s",
            msg.c_str());
  // A renamed repo: the API and the files answer 307 to the new name (relative: the token follows),
  // the cache keeps the name asked for, as huggingface_hub's does.
  setenv("HF_TOKEN", HubServer::kToken, 1);
  hub.clear_requests();
  std::tie(code, msg) = try_download("org/old-name", opts(cache));
  unsetenv("HF_TOKEN");
  CHECK_MSG(code == ExitCode::kOk, "%s", msg.c_str());
  CHECK(slurp(fs::path(cache) / "models--org--old-name" / "snapshots" / kCommit / "model.safetensors") ==
        kWeights);
  int moved = 0, new_name_with_token = 0;
  for (const HubRequest& r : hub.requests()) {
    moved += r.status == 307;
    new_name_with_token += r.path.find("/org/tiny/") != std::string::npos && r.auth;
  }
  CHECK(moved == 4 && new_name_with_token == 4);  // model info + 3 files
  // A model with pickled weights only is refused before any file is fetched.
  hub.clear_requests();
  std::tie(code, msg) = try_download("org/pickled", opts(cache));
  CHECK_MSG(code == ExitCode::kConfig && msg.find("safetensors") != std::string::npos, "%s", msg.c_str());
  CHECK(count(hub.requests(), "GET", "/resolve/") == 0);
  // A server error is kIo (retried by the user or the scheduler), the status in the message.
  hub.control(R"({"status": {"model.safetensors": 503}})");
  std::tie(code, msg) = try_download("org/tiny", opts(fresh_cache()));
  hub.control("{}");
  CHECK_MSG(code == ExitCode::kIo && msg.find("HTTP 503") != std::string::npos, "%s", msg.c_str());
  // No server: kIo naming the endpoint.
  DownloadOptions o = opts(cache);
  o.endpoint = "https://127.0.0.1:9";
  std::tie(code, msg) = try_download("org/tiny", o);
  CHECK_MSG(code == ExitCode::kIo && msg.find("https://127.0.0.1:9") != std::string::npos, "%s", msg.c_str());
}

void test_concurrent(HubServer& hub) {
  const std::string cache = fresh_cache();
  hub.control(R"({"throttle_bps": 1500000})");
  hub.clear_requests();
  std::pair<ExitCode, std::string> a, b;
  std::thread t1([&] { a = try_download("org/tiny", opts(cache)); });
  std::thread t2([&] { b = try_download("org/tiny", opts(cache)); });
  t1.join();
  t2.join();
  hub.control("{}");
  CHECK_MSG(a.first == ExitCode::kOk && b.first == ExitCode::kOk, "%s / %s", a.second.c_str(),
            b.second.c_str());
  const fs::path snap = fs::path(cache) / "models--org--tiny" / "snapshots" / kCommit;
  CHECK(slurp(snap / "model.safetensors") == kWeights);
  CHECK(count(hub.requests(), "GET", "/cdn/") == 1);  // the second waited on the lock, then used the blob
  for (const auto& e : fs::directory_iterator(fs::path(cache) / "models--org--tiny" / "blobs"))
    CHECK(e.path().extension() != ".incomplete");
}

}  // namespace

int main() {
  g_root = std::string(FLOTILLA_TEST_TMP) + "/hub-download-" + std::to_string(getpid());
  fs::create_directories(g_root);
  // No token from this machine's own Hugging Face login.
  setenv("HF_HOME", (g_root + "/hf-home").c_str(), 1);
  fs::create_directories(g_root + "/hf-home");
  for (const char* v :
       {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_CACHE"})
    unsetenv(v);

  HubServer hub(g_root + "/server");
  hub.add_file("org/tiny", "config.json", kConfig);
  hub.add_file("org/tiny", "tokenizer.json", kTokenizer);
  hub.add_file("org/tiny", "model.safetensors", kWeights);
  hub.add_file("org/tiny", "pytorch_model.bin", bytes(1000, 2));
  hub.add_file("org/tiny", "README.md", "# tiny\n");
  hub.repo_json("org/tiny", R"({"commit": ")" + kCommit + R"(", "refs": {"main": ")" + kCommit +
                                R"(", "v1.0": ")" + kCommit + R"("}})");
  for (const char* name : {"org/gated", "org/private"}) {
    hub.add_file(name, "config.json", kConfig);
    hub.add_file(name, "model.safetensors", bytes(5000, 3));
  }
  hub.repo_json("org/gated", R"({"gated": "manual"})");
  hub.repo_json("org/private", R"({"private": true})");
  hub.repo_json("org/old-name", R"({"moved_to": "org/tiny"})");
  hub.add_file("org/pickled", "config.json", kConfig);
  hub.add_file("org/pickled", "pytorch_model.bin", bytes(1000, 4));
  hub.start();
  hub.apply_env();

  test_full_download(hub);
  test_commit_revision(hub);
  test_resume(hub);
  test_stall(hub);
  test_no_blobs_mirror(hub);
  test_corrupt(hub);
  test_gated_and_missing(hub);
  test_concurrent(hub);
  for (const std::string& m : g_messages)
    CHECK_MSG(m.find(HubServer::kToken) == std::string::npos &&
                  m.find("hf_wrong_secret_value") == std::string::npos,
              "a token in: %s", m.c_str());
  CHECK(hub.request_log_text().find(HubServer::kToken) == std::string::npos);
  hub.stop();
  fs::remove_all(g_root);
  return flotilla_test::summary("test_interop_hub_download");
}
