// Test helper: the stand-in Hugging Face Hub (tests/tools/hub_server.py) on a free loopback port,
// over HTTPS with a self-signed certificate it makes at start. Qt-free, header-only, so engine, app
// and ui tests share it: #include "tests/engine/hub_server_util.h".
//
//   flotilla_test::HubServer hub;                       // a fresh folder under FLOTILLA_TEST_TMP
//   hub.add_file("org/tiny", "config.json", "{...}");   // the repo's files (one commit)
//   hub.repo_json("org/tiny", R"({"gated": "manual"})"); // optional repo.json (commits, refs, lfs, gated,
//   private) hub.start();                                        // python3 hub_server.py; reads the port
//   hub.apply_env();  or  spawn(..., hub.env())         // HF_ENDPOINT + FLOTILLA_HF_CA_FILE
//   hub.control(R"({"cut": {"model.safetensors": {"after": 4096, "times": 1}}})");
//   for (const HubRequest& r : hub.requests()) ...      // method, path, range, auth (never the token)
//
// The server is started with PR_SET_PDEATHSIG and stopped (SIGTERM, then SIGKILL) by the destructor.
// The token it accepts is HubServer::kToken unless control() sets another.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace flotilla_test {

// One line of the server's request log.
struct HubRequest {
  std::string method;  // GET, HEAD
  std::string path;    // URL path, percent-encoded as sent
  std::string query;   // "blobs=true" or ""
  std::string range;   // the Range header, "" when absent
  bool auth = false;   // an Authorization header was present (its value is never logged)
  int status = 0;
  long long bytes = 0;  // body bytes sent
  bool cut = false;     // the body was cut by the "cut" fault
  std::string error;    // X-Error-Code sent, if any
};

namespace hub_detail {
// The value of "key" in one flat JSON object line as the server writes it (json.dumps): a string
// (unescaped for \" and \\ only), a number, true/false, or "" for null/absent.
inline std::string field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const size_t at = line.find(k);
  if (at == std::string::npos) return "";
  size_t i = at + k.size();
  if (i < line.size() && line[i] == '"') {
    std::string out;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out += line[i];
    }
    return out;
  }
  size_t j = i;
  while (j < line.size() && line[j] != ',' && line[j] != '}') ++j;
  std::string v = line.substr(i, j - i);
  return v == "null" ? "" : v;
}
}  // namespace hub_detail

class HubServer {
 public:
  static constexpr const char* kToken = "hf_test_token";

  // `dir`: where repos/ and state/ go; "" = a fresh folder under FLOTILLA_TEST_TMP (or /tmp).
  explicit HubServer(std::string dir = "") : dir_(std::move(dir)) {
    if (dir_.empty()) {
#ifdef FLOTILLA_TEST_TMP
      std::string base = FLOTILLA_TEST_TMP;
#else
      std::string base = "/tmp";
#endif
      std::filesystem::create_directories(base);
      std::string tmpl = base + "/hub-XXXXXX";
      if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
      dir_ = tmpl;
    }
    std::filesystem::create_directories(repos());
    std::filesystem::create_directories(state());
  }
  ~HubServer() { stop(); }
  HubServer(const HubServer&) = delete;
  HubServer& operator=(const HubServer&) = delete;

  std::string dir() const { return dir_; }
  std::string repos() const { return dir_ + "/repos"; }  // --root
  std::string state() const { return dir_ + "/state"; }  // --state
  std::string repo_dir(const std::string& repo_id) const { return repos() + "/" + repo_id; }

  // Writes <repos>/<org>/<name>/<path> (sub-folders made). Files may change while the server runs.
  void add_file(const std::string& repo_id, const std::string& path, const std::string& content) const {
    write(repo_dir(repo_id) + "/" + path, content);
  }
  void remove_file(const std::string& repo_id, const std::string& path) const {
    std::filesystem::remove(repo_dir(repo_id) + "/" + path);
  }
  void repo_json(const std::string& repo_id, const std::string& json) const {
    write(repo_dir(repo_id) + "/repo.json", json);
  }

  // Starts the server; `extra_args` e.g. {"--cdn-host", "localhost"}. Throws when it does not come up.
  void start(const std::vector<std::string>& extra_args = {}) {
    if (pid_ > 0) return;
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    std::string script = script_path();
    std::vector<std::string> argv = {"python3", script,  "--root",  repos(),
                                     "--state", state(), "--token", kToken};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    const std::string err = state() + "/server.stderr";
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 2);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execvp("python3", args.data());
      _exit(127);
    }
    close(out[1]);
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::count(text.begin(), text.end(), '\n') < 2 && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[512];
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    close(out[0]);
    const size_t nl = text.find('\n');
    if (nl == std::string::npos || text.find('\n', nl + 1) == std::string::npos) {
      stop();
      throw std::runtime_error("the stand-in Hub did not start; see " + err);
    }
    port_ = std::atoi(text.substr(0, nl).c_str());
    cert_ = text.substr(nl + 1, text.find('\n', nl + 1) - nl - 1);
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 50; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port() const { return port_; }
  std::string endpoint() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::string cert_file() const { return cert_; }
  // For spawn()/QProcess: the entries a child needs to download from this server.
  std::vector<std::string> env() const {
    return {"HF_ENDPOINT=" + endpoint(), "FLOTILLA_HF_CA_FILE=" + cert_};
  }
  // In this process: setenv HF_ENDPOINT and FLOTILLA_HF_CA_FILE.
  void apply_env() const {
    setenv("HF_ENDPOINT", endpoint().c_str(), 1);
    setenv("FLOTILLA_HF_CA_FILE", cert_.c_str(), 1);
  }

  // Replaces control.json atomically (the server reads it before every request); "{}" clears faults.
  void control(const std::string& json) const {
    const std::string tmp = state() + "/control.json.tmp";
    write(tmp, json);
    std::filesystem::rename(tmp, state() + "/control.json");
  }

  // The request log so far.
  std::vector<HubRequest> requests() const {
    std::vector<HubRequest> out;
    std::ifstream in(state() + "/requests.log");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line.back() != '}') continue;
      using hub_detail::field;
      HubRequest r;
      r.method = field(line, "method");
      r.path = field(line, "path");
      r.query = field(line, "query");
      r.range = field(line, "range");
      r.auth = field(line, "auth") == "true";
      r.status = std::atoi(field(line, "status").c_str());
      r.bytes = std::atoll(field(line, "bytes").c_str());
      r.cut = field(line, "cut") == "true";
      r.error = field(line, "error");
      out.push_back(r);
    }
    return out;
  }
  std::string request_log_text() const {
    std::ifstream in(state() + "/requests.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Forgets the log so far (the next requests() shows only later requests).
  void clear_requests() const { std::ofstream(state() + "/requests.log", std::ios::trunc); }

 private:
  static void write(const std::string& path, const std::string& content) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
  }
  static std::string script_path() {
#ifdef FLOTILLA_SOURCE_DIR
    return std::string(FLOTILLA_SOURCE_DIR) + "/tests/tools/hub_server.py";
#else
    return "tests/tools/hub_server.py";
#endif
  }

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string cert_;
};

}  // namespace flotilla_test
