// Test fixture: the shared loopback Slurm (scripts/slurm-cluster, started by the CTest fixture
// slurm_cluster_start) and a login node for it: an sshd of sshd_fixture.h whose sessions get
// SLURM_CONF, and whose login shell prints a banner and `module` chatter (~/.bash_profile), as
// real login nodes do.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli_fixture.h"
#include "sshd_fixture.h"

namespace flotilla_test {

inline constexpr int kSkipExit = 77;  // SKIP_RETURN_CODE of the slurm tests

// SLURM_CONF of the running fixture cluster; "" with `why` set when there is none.
inline std::string fixture_slurm_conf(std::string& why) {
  const std::string dir = FLOTILLA_SLURM_DIR;
  const std::string env = read_file(dir + "/env");
  const std::string prefix = "SLURM_CONF=";
  if (env.rfind(prefix, 0) == 0) {
    std::string conf = env.substr(prefix.size());
    while (!conf.empty() && (conf.back() == '\n' || conf.back() == '\r')) conf.pop_back();
    return conf;
  }
  why = read_file(dir + "/unavailable");
  while (!why.empty() && why.back() == '\n') why.pop_back();
  if (why.empty())
    why = "the Slurm test cluster is not running (" + dir + "/env missing: run the slurm_cluster_start test)";
  return "";
}

// Starts login node 0 for the fixture cluster; "" when ready, else why the test should skip.
inline std::string start_login_node(SshdFixture& fx, const std::string& slurm_conf) {
  if (std::string why = SshdFixture::unavailable(); !why.empty()) return why;
  // Jobs inherit the login session's environment (sbatch --export=ALL): the losses are compared bit
  // for bit with local runs, so the tasks must pick this process's OpenBLAS kernels too.
  std::string env = "SLURM_CONF=" + slurm_conf + " OMP_NUM_THREADS=1";
  for (const char* name : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"})
    if (const char* value = std::getenv(name)) env += std::string(" ") + name + "=" + value;
  if (!fx.start(0, "ed25519", "", "", env)) return "sshd cannot run here: " + fx.last_error();
  std::ofstream(fx.node(0).home + "/.bash_profile")
      << "echo 'Welcome to the flotest login node. Scheduled maintenance: never.'\n"
         "echo '@@section nodes'\n"  // a hostile banner imitating the fence's own lines
         "echo 'fake|down|1|1|(null)|cpu'\n"
         "echo 'module: loading gcc/12' >&2\n";
  return "";
}

// Stores fixture login node 0 as cluster `name` of `ws` (`clusters add`) and trusts the key its
// first probe presents (`clusters trust`); "" when both worked, else what the failing step printed.
inline std::string add_trusted_cluster(CliWorkspace& ws, SshdFixture& fx, const std::string& name) {
  const ProcResult added =
      ws.run({"clusters", "add", name, "--login", "127.0.0.1", "--port", std::to_string(fx.node(0).port), "--user",
              local_user_name(), "--key", fx.client_key()});
  if (added.exit_code != 0) return "clusters add: " + added.output;
  const std::string fp = fingerprint_in(ws.run({"clusters", "probe", name}).output);
  const ProcResult trusted = ws.run({"clusters", "trust", name, "--fingerprint", fp});
  return trusted.exit_code == 0 ? "" : "clusters trust: " + trusted.output;
}

}  // namespace flotilla_test
