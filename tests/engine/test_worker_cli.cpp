// flotilla-worker's top-level command line: --version, --help listing every command with a
// one-line description, unknown commands refused with exit code 2.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "check.h"
#include "engine/cli/commands.h"

static std::string run(const std::string& cmd, int* code) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *code = WEXITSTATUS(pclose(p));
  return out;
}

int main() {
  const std::string w = FLOTILLA_WORKER_PATH;
  int code = -1;
  std::string out = run(w + " --version", &code);
  CHECK(code == 0);
  CHECK(out.rfind("flotilla-worker ", 0) == 0);

  out = run(w + " --help", &code);
  CHECK(code == 0);
  for (const auto& c : flotilla::cli::commands()) {
    CHECK_MSG(out.find(std::string("  ") + c.name) != std::string::npos, "--help lacks %s", c.name);
    CHECK(std::string(c.summary).size() > 10);
  }
  CHECK(out.find("Exit codes") != std::string::npos);

  out = run(w + " frobnicate", &code);
  CHECK(code == 2);
  CHECK(out.find("unknown command 'frobnicate'") != std::string::npos);

  run(w, &code);
  CHECK(code == 2);
  return flotilla_test::summary("worker_cli");
}
