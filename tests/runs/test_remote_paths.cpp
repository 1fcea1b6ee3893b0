// docs/reliability.md S8, the allowed root: a run on a node writes only inside its run folder. A config
// whose checkpoint.export_hf or checkpoint.export_peft (a LoRA adapter) would write elsewhere
// (absolute, '~', '$HOME', or climbing out with '..') is refused with the key, the value and the fix;
// relative paths inside the folder pass.
#include <cstdio>
#include <string>

#include "engine/config/run_config.h"
#include "engine/core/error.h"
#include "runs/run_setup.h"

namespace {
int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}

// "" when accepted, else the message.
std::string check(const std::string& export_hf, bool peft = false) {
  flotilla::RunConfig c;
  (peft ? c.checkpoint.export_peft : c.checkpoint.export_hf) = export_hf;
  try {
    flotilla::runs::check_remote_write_paths(c, "node gpu-box");
    return "";
  } catch (const flotilla::Error& e) {
    expect(e.code() == flotilla::ExitCode::kConfig, "exit code kConfig for " + export_hf);
    return e.what();
  }
}
}  // namespace

int main() {
  for (const char* ok : {"", "hf-export", "out/hf", "./hf", "a..b/export"})
    expect(check(ok).empty(), std::string("accepted: '") + ok + "'");
  for (const char* bad :
       {"/etc/flotilla", "~/models/out", "$HOME/out", "../other-run/hf", "hf/../../..", ".."}) {
    const std::string m = check(bad);
    expect(m.find("checkpoint.export_hf") != std::string::npos && m.find(bad) != std::string::npos &&
               m.find("node gpu-box") != std::string::npos && m.find("relative path") != std::string::npos,
           std::string("refused with key, value, target and fix: '") + bad + "' -> " + m);
  }
  for (const char* ok : {"adapter", "out/adapter"})
    expect(check(ok, true).empty(), std::string("accepted export_peft: '") + ok + "'");
  for (const char* bad : {"/tmp/adapter", "../x"}) {
    const std::string m = check(bad, true);
    expect(m.find("checkpoint.export_peft") != std::string::npos && m.find(bad) != std::string::npos,
           std::string("export_peft refused with its key: '") + bad + "' -> " + m);
  }
  std::printf("%s\n", failures == 0 ? "test_remote_paths: all passed" : "test_remote_paths: FAILED");
  return failures == 0 ? 0 : 1;
}
