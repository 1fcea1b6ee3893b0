// The node-side model fetch's own paths (runs/node_models.h, remote/model_fetch.h) against a loopback
// sshd node, with a stand-in for the worker's `hub download --json` (a shell script printing what the
// worker prints) so the paths the real worker seldom takes are exercised: progress lines that reach
// the log named by node, a clean end, the worker's error event (its exit code and message kept), a
// worker that dies without a word (its stderr in the message), a fetch killed on the node (lost), a
// fetch cancelled from here (stopped there), two nodes in parallel, and a hostile name refused before
// any SSH call. The real worker's fetch is tested end to end in test_node_hub_model_ssh.cpp.
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "check.h"
#include "engine/config/run_config.h"
#include "engine/core/error.h"
#include "runs/node_models.h"
#include "sshd_fixture.h"

using namespace flotilla_test;
namespace runs = flotilla::runs;

namespace {

constexpr const char* kFakeWorker = R"(#!/bin/sh
# args: hub download NAME --files SET --json
case "$3" in
  org/slow*)
    i=1
    while [ $i -le 6 ]; do
      echo "{\"event\":\"progress\",\"file\":\"model.safetensors\",\"file_index\":1,\"file_count\":2,\"done\":$((i * 20000000)),\"total\":120000000,\"rate_bps\":50000000,\"eta_s\":2}"
      sleep 0.3; i=$((i + 1))
    done
    echo "{\"event\":\"done\",\"repo_id\":\"org/slow\",\"commit\":\"c0ffee\",\"folder\":\"$HOME/cache/snap\",\"downloaded\":true}" ;;
  org/cached*)
    echo "{\"event\":\"done\",\"repo_id\":\"org/cached\",\"commit\":\"c0ffee\",\"folder\":\"$HOME/cache/snap\",\"downloaded\":false}" ;;
  org/gated*)
    echo '{"event":"error","code":3,"message":"org/gated is gated: accept the licence on its page, then set HF_TOKEN"}'
    exit 3 ;;
  org/crash*)
    echo "worker: cannot load libcurl.so.4" >&2; exit 127 ;;
  org/hang*)
    sleep 60 ;;
esac
)";

flotilla::RunConfig with_model(const std::string& name) {
  flotilla::RunConfig c;
  c.model.init_from = name;
  return c;
}

std::string error_of(const std::function<void()>& f, flotilla::ExitCode* code = nullptr) {
  try {
    f();
  } catch (const flotilla::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_node_model_fetch");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string worker = fx.root() + "/fake-worker";
  write_text(worker, kFakeWorker);
  chmod(worker.c_str(), 0755);
  flotilla::remote::Session a(fx.options(0)), b(fx.options(1));
  trust_and_connect(a);
  trust_and_connect(b);
  const std::vector<runs::ModelFetchTarget> both = {{&a, worker, "node a"}, {&b, worker, "node b"}};
  const std::vector<runs::ModelFetchTarget> only_a = {{&a, worker, "node a"}};
  std::vector<std::string> notes;
  const runs::Note note = [&](const std::string& l) { notes.push_back(l); };

  // Progress on two nodes in parallel, then done; one line per node for the events.
  {
    const auto t0 = std::chrono::steady_clock::now();
    const auto lines = runs::fetch_models(both, "fetch-1", with_model("org/slow"), note);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_MSG(s < 3.5, "two 1.8 s fetches took %.1f s: not in parallel", s);
    CHECK(lines.size() == 2);
    CHECK(lines.size() == 2 &&
          lines[0] == "model org/slow on node a: downloaded into " + fx.node(0).home + "/cache/snap");
    int progress_a = 0, progress_b = 0;
    for (const auto& n : notes) {
      progress_a += n.rfind("downloading org/slow on node a: ", 0) == 0 &&
                    n.find("model.safetensors (1/2): ") != std::string::npos &&
                    n.find(" of 120 MB, 50.0 MB/s, 2 s left") != std::string::npos;
      progress_b += n.rfind("downloading org/slow on node b: ", 0) == 0;
    }
    CHECK_MSG(progress_a >= 1 && progress_a <= 2 && progress_b >= 1, "progress lines a %d b %d", progress_a,
              progress_b);  // at most one line every 2 s per node
  }
  // Already in the cache: said so.
  {
    const auto lines = runs::fetch_models(only_a, "fetch-2", with_model("org/cached@main"), note);
    CHECK(lines.size() == 1 && lines[0].find("on node a: found in its cache at ") != std::string::npos);
  }
  // The worker's error: its code and message, named by node and model.
  {
    flotilla::ExitCode code{};
    const std::string m =
        error_of([&] { runs::fetch_models(both, "fetch-3", with_model("org/gated"), note); }, &code);
    CHECK_MSG(m.rfind("node a cannot get model org/gated (model.init_from): org/gated is gated", 0) == 0,
              "%s", m.c_str());
    CHECK(code == flotilla::ExitCode::kConfig);
  }
  // A worker that dies without an error line: its exit status and stderr.
  {
    const std::string m =
        error_of([&] { runs::fetch_models(only_a, "fetch-4", with_model("org/crash"), note); });
    CHECK_MSG(m.find("node a cannot get model org/crash") == 0 && m.find("exited 127") != std::string::npos &&
                  m.find("cannot load libcurl.so.4") != std::string::npos,
              "%s", m.c_str());
  }
  // Killed on the node: lost, said so.
  {
    std::thread killer([&] {
      const std::string pidfile = fx.node(0).home + "/.flotilla/runs/fetch-5/model-fetch-model.pid";
      wait_until([&] { return !read_file(pidfile).empty(); }, 10);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const pid_t pid = static_cast<pid_t>(std::atol(read_file(pidfile).c_str()));
      if (pid > 1) kill_session(pid);
    });
    const std::string m =
        error_of([&] { runs::fetch_models(only_a, "fetch-5", with_model("org/hang"), note); });
    killer.join();
    CHECK_MSG(m.find("node a cannot get model org/hang") == 0 &&
                  m.find("without an exit status") != std::string::npos,
              "%s", m.c_str());
  }
  // Cancelled (a Stop, Ctrl-C) while a node downloads: the fetch there is stopped, kPreempted says so.
  {
    const auto t0 = std::chrono::steady_clock::now();
    const auto cancelled = [&] {
      return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(800);
    };
    flotilla::ExitCode code{};
    const std::string m = error_of(
        [&] { runs::fetch_models(only_a, "fetch-8", with_model("org/hang"), note, cancelled); }, &code);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_MSG(
        code == flotilla::ExitCode::kPreempted && m.find("stopped while node a fetched model org/hang") == 0,
        "%s", m.c_str());
    CHECK_MSG(s < 5, "the cancel took %.1f s", s);
    const pid_t pid = static_cast<pid_t>(
        std::atol(read_file(fx.node(0).home + "/.flotilla/runs/fetch-8/model-fetch-model.pid").c_str()));
    CHECK(pid > 1 && wait_until([&] { return !process_alive(pid); }, 5));
  }
  // A hostile name is no Hub name (hub::parse_model_ref refuses it): nothing is fetched, no shell sees
  // it; a path neither.
  {
    const flotilla::RunConfig hostile = with_model("org/x';touch /tmp/pwned;'");
    CHECK(runs::hub_models_of(hostile).empty());
    CHECK(runs::fetch_models(only_a, "fetch-6", hostile, note).empty());
    CHECK(runs::fetch_models(only_a, "fetch-7", with_model("/models/llama"), note).empty());
    CHECK(runs::hub_models_of(with_model("")).empty());
    CHECK(!std::filesystem::exists(fx.node(0).home + "/.flotilla/runs/fetch-6"));
    CHECK(!std::filesystem::exists(fx.node(0).home + "/.flotilla/runs/fetch-7"));
  }
  return summary("test_node_model_fetch_ssh");
}
