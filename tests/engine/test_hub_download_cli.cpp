// `flotilla-worker hub download NAME [--files ...] [--json]` (engine/cli/cmd_hub.cpp) against the
// stand-in Hub: with --json every line is one JSON object (progress events with the design's
// fields, then done with the commit and folder); a cached model answers at once with
// "downloaded": false; --files config fetches config.json alone; a gated model ends with an error
// event and exit 3; a download killed midway (the app's cancel) is resumed by the next run from the
// dead process's partial file; two processes downloading one model at once fetch each blob once; without
// --json the folder is printed; a hostile name is refused with exit 3 before any request.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "check.h"
#include "tests/engine/hub_server_util.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const std::string kCommit = "89abcdef0123456789abcdef0123456789abcdef";

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

int count(const std::vector<HubRequest>& log, const std::string& part) {
  int n = 0;
  for (const HubRequest& r : log)
    if (r.method == "GET" && r.path.find(part) != std::string::npos) ++n;
  return n;
}

}  // namespace

int main() {
  const std::string root = std::string(FLOTILLA_TEST_TMP) + "/hub-cli-" + std::to_string(getpid());
  fs::create_directories(root);
  for (const char* v :
       {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_CACHE"})
    unsetenv(v);
  HubServer hub(root + "/server");
  std::string weights(300000, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>((i * 131) ^ (i >> 7));
  hub.add_file("org/tiny", "config.json", "{\"model_type\": \"llama\"}\n");
  hub.add_file("org/tiny", "tokenizer.json", "{}\n");
  hub.add_file("org/tiny", "model.safetensors", weights);
  hub.repo_json("org/tiny", R"({"commit": ")" + kCommit + R"("})");
  hub.add_file("org/gated", "config.json", "{}\n");
  hub.add_file("org/gated", "model.safetensors", "x");
  hub.repo_json("org/gated", R"({"gated": "auto"})");
  hub.start();
  std::vector<std::string> env = hub.env();
  env.push_back("HF_HOME=" + root + "/hf-home");
  const std::string cache = root + "/cache";
  env.push_back("HF_HUB_CACHE=" + cache);

  // A download with progress (throttled so that it takes ~0.6 s).
  hub.control(R"({"throttle_bps": 500000})");
  ProcResult r = run_worker({"hub", "download", "org/tiny", "--json"}, env);
  hub.control("{}");
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  std::vector<std::string> out = lines(r.output);
  int progress = 0;
  nlohmann::json done;
  for (const std::string& l : out) {
    const nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    CHECK_MSG(j.is_object(), "not JSON: %s", l.c_str());
    if (!j.is_object()) continue;
    if (j.value("event", "") == "progress") {
      ++progress;
      for (const char* k :
           {"file", "file_index", "file_count", "done", "total", "rate_bps", "eta_s", "resumed_bytes"})
        CHECK_MSG(j.contains(k), "no %s in %s", k, l.c_str());
      CHECK_MSG(j.value("total", 0ull) == weights.size() + 24 + 3, "%s", l.c_str());
    }
    if (j.value("event", "") == "done") done = j;
  }
  CHECK_MSG(progress >= 2, "%d progress lines", progress);
  CHECK_MSG(!out.empty() && nlohmann::json::parse(out.back(), nullptr, false).value("event", "") == "done",
            "%s", r.output.c_str());
  CHECK(done.value("commit", "") == kCommit && done.value("repo_id", "") == "org/tiny");
  CHECK(done.value("downloaded", false) == true);
  CHECK(done.value("folder", "") == cache + "/models--org--tiny/snapshots/" + kCommit);
  CHECK(fs::is_regular_file(done.value("folder", "") + "/model.safetensors"));

  // Cached: done at once, no request at all.
  hub.clear_requests();
  r = run_worker({"hub", "download", "org/tiny", "--json"}, env);
  out = lines(r.output);
  CHECK_MSG(r.exit_code == 0 && out.size() == 1, "%s", r.output.c_str());
  if (out.size() == 1) CHECK(nlohmann::json::parse(out[0]).value("downloaded", true) == false);
  CHECK(hub.requests().empty());

  // Without --json: the folder on stdout.
  r = run_worker({"hub", "download", "org/tiny"}, env);
  CHECK_MSG(r.exit_code == 0 &&
                r.output.find(cache + "/models--org--tiny/snapshots/" + kCommit + "\n") != std::string::npos,
            "%s", r.output.c_str());

  // --files config into another cache: config.json alone.
  std::vector<std::string> env2 = env;
  env2.back() = "HF_HUB_CACHE=" + root + "/cache2";
  hub.clear_requests();
  r = run_worker({"hub", "download", "org/tiny", "--files", "config", "--json"}, env2);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const auto log = hub.requests();
  CHECK(count(log, "config.json") == 1 && count(log, "model.safetensors") == 0 &&
        count(log, "tokenizer") == 0);

  // --files tokenizer: the tokenizer and config, never the weights (what data prepare needs).
  {
    std::vector<std::string> envt = env;
    envt.back() = "HF_HUB_CACHE=" + root + "/cache-tok";
    hub.clear_requests();
    r = run_worker({"hub", "download", "org/tiny", "--files", "tokenizer", "--json"}, envt);
    CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
    const auto tlog = hub.requests();
    CHECK(count(tlog, "tokenizer.json") == 1 && count(tlog, "config.json") == 1 &&
          count(tlog, "model.safetensors") == 0);
    r = run_worker({"hub", "download", "org/gated", "--files", "tokenizer", "--json"}, envt);
    CHECK_MSG(r.exit_code == 3 && r.output.find("has no tokenizer files") != std::string::npos, "%s",
              r.output.c_str());
  }

  // Killed mid-download (how the app cancels): the next run resumes the dead process's partial file.
  {
    std::vector<std::string> env3 = env;
    env3.back() = "HF_HUB_CACHE=" + root + "/cache3";
    const fs::path blobs = fs::path(root) / "cache3" / "models--org--tiny" / "blobs";
    hub.control(R"({"throttle_bps": 100000})");
    const pid_t pid =
        spawn({FLOTILLA_WORKER_PATH, "hub", "download", "org/tiny", "--json"}, env3, root + "/killed.log");
    uintmax_t partial = 0;
    std::string partial_name;
    for (int i = 0; i < 200 && partial < 50000; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(blobs, ec))
        if (e.path().extension() == ".incomplete") {
          partial = fs::file_size(e.path(), ec);
          partial_name = e.path().filename().string();
        }
    }
    kill(pid, SIGKILL);
    wait_exit(pid);
    hub.control("{}");
    std::error_code ec;
    partial = fs::file_size(blobs / partial_name, ec);
    CHECK_MSG(partial > 0 && partial < weights.size() &&
                  partial_name.find("." + std::to_string(pid) + ".incomplete") != std::string::npos,
              "%s: %llu", partial_name.c_str(), (unsigned long long)partial);
    // The killed download's pid soon belongs to another program on a busy machine (here a sleep):
    // the partial file is still resumed (only a live Flotilla process at that pid may be its writer).
    const pid_t reused = spawn({"/bin/sleep", "30"}, env3, root + "/sleep.log");
    const std::string reused_name =
        partial_name.substr(0, partial_name.find("." + std::to_string(pid) + ".incomplete")) + "." +
        std::to_string(reused) + ".incomplete";
    fs::rename(blobs / partial_name, blobs / reused_name, ec);
    CHECK(!ec);
    hub.clear_requests();
    r = run_worker({"hub", "download", "org/tiny", "--json"}, env3);
    CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
    bool resumed = false;
    for (const HubRequest& q : hub.requests())
      resumed |= q.path.rfind("/cdn/", 0) == 0 && q.range == "bytes=" + std::to_string(partial) + "-" &&
                 q.status == 206;
    CHECK_MSG(resumed, "no request resumed at %llu", (unsigned long long)partial);
    kill(reused, SIGKILL);
    wait_exit(reused);
    for (const auto& e : fs::directory_iterator(blobs)) CHECK(e.path().extension() != ".incomplete");
    CHECK(read_file(
              (fs::path(root) / "cache3" / "models--org--tiny" / "snapshots" / kCommit / "model.safetensors")
                  .string()) == weights);
  }

  // Two processes download the same model into one cache at once: both succeed, each blob is
  // fetched once (the second waits on the blob's flock, then finds it), no partial file is left.
  {
    std::vector<std::string> env4 = env;
    env4.back() = "HF_HUB_CACHE=" + root + "/cache4";
    hub.control(R"({"throttle_bps": 1000000})");
    hub.clear_requests();
    const pid_t a =
        spawn({FLOTILLA_WORKER_PATH, "hub", "download", "org/tiny", "--json"}, env4, root + "/a.log");
    const pid_t b =
        spawn({FLOTILLA_WORKER_PATH, "hub", "download", "org/tiny", "--json"}, env4, root + "/b.log");
    const int ra = wait_exit(a), rb = wait_exit(b);
    hub.control("{}");
    CHECK_MSG(ra == 0 && rb == 0, "%s\n%s", read_file(root + "/a.log").c_str(),
              read_file(root + "/b.log").c_str());
    CHECK(count(hub.requests(), "/cdn/") == 1);
    const fs::path repo4 = fs::path(root) / "cache4" / "models--org--tiny";
    CHECK(read_file((repo4 / "snapshots" / kCommit / "model.safetensors").string()) == weights);
    for (const auto& e : fs::directory_iterator(repo4 / "blobs"))
      CHECK(e.path().extension() != ".incomplete");
  }

  // Gated: an error event, exit 3, the message says what to do.
  r = run_worker({"hub", "download", "org/gated", "--json"}, env);
  CHECK_MSG(r.exit_code == 3, "%s", r.output.c_str());
  bool error_event = false;
  for (const std::string& l : lines(r.output)) {
    const nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_object() && j.value("event", "") == "error") {
      error_event = j.value("code", 0) == 3 && j.value("message", "").find("accept") != std::string::npos &&
                    j.value("message", "").find("HF_TOKEN") != std::string::npos;
    }
  }
  CHECK_MSG(error_event, "%s", r.output.c_str());

  // A hostile name: refused before any request.
  hub.clear_requests();
  r = run_worker({"hub", "download", "../etc/passwd"}, env);
  CHECK_MSG(r.exit_code == 3 && r.output.find("not a Hugging Face model name") != std::string::npos, "%s",
            r.output.c_str());
  r = run_worker({"hub", "download", "org/tiny", "--files", "everything"}, env);
  CHECK(r.exit_code == 2);
  CHECK(hub.requests().empty());

  hub.stop();
  fs::remove_all(root);
  return summary("test_hub_download_cli");
}
