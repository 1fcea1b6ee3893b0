// SFTP, probe and deploy against a real sshd on loopback: atomic uploads verified by SHA-256,
// downloads, the node probe (no nvidia-smi here: no GPUs, not an error), latency, and the
// worker bundle deployed once, reused, re-uploaded when damaged, and runnable.
#include <unistd.h>

#include <random>

#include "check.h"
#include "remote/deploy.h"
#include "remote/probe.h"
#include "remote/sftp.h"
#include "remote/validate.h"
#include "sshd_fixture.h"

using namespace flotilla::remote;
using namespace flotilla_test;

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("remote_sftp");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  Session s(fx.options(0));
  trust_and_connect(s);
  const std::string home = fx.node(0).home;

  // Upload: content, checksum and mode; an overwrite leaves no temporary file behind.
  {
    std::string data(3'000'001, '\0');
    std::mt19937 rng(7);
    for (char& c : data) c = static_cast<char>(rng());
    const std::string local = fx.root() + "/blob.bin";
    write_text(local, data);
    Sftp sftp(s);
    CHECK(!sftp.stat("~/up/a.bin").exists);
    sftp.mkdir_p("~/up/deep/er", 0750);
    CHECK(sftp.stat("~/up/deep/er").is_dir);
    const std::string sha = sftp.upload_file(local, "~/up/a.bin", 0755);
    CHECK(sha == sha256_file(local) && sha == sha256_hex(data));
    CHECK(read_file(home + "/up/a.bin") == data);
    const RemoteStat st = sftp.stat("~/up/a.bin");
    CHECK(st.size == data.size() && st.mode == 0755);
    CHECK(sftp.remote_sha256("~/up/a.bin") == sha);
    sftp.upload_bytes("second", "~/up/a.bin", 0600);
    CHECK(read_file(home + "/up/a.bin") == "second");
    const auto entries = sftp.list("~/up");
    CHECK_MSG(entries.size() == 2, "%zu entries", entries.size());  // a.bin and deep, no .tmp
    CHECK(sftp.read_range("~/up/a.bin", 2, 3) == "con" && sftp.read_range("~/up/a.bin", 6, 10).empty());
    CHECK(sftp.download("~/up/a.bin", fx.root() + "/back.bin") == sha256_hex("second"));
    CHECK(read_file(fx.root() + "/back.bin") == "second");
    CHECK_THROWS(sftp.download("~/up/missing", fx.root() + "/x"), "no such file");
  }

  // Probe: facts match this machine (the node is this machine).
  {
    const NodeProbe p = probe_node(s);
    CHECK(p.cpus == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
    CHECK(p.memory_total_bytes > (64ull << 20));
    CHECK(p.memory_available_bytes > 0 && p.memory_available_bytes <= p.memory_total_bytes);
    CHECK(p.disk_free_bytes > 0);
    CHECK(!p.os.empty() && !p.kernel.empty() && !p.glibc.empty());
    CHECK(p.arch == binary_needs(FLOTILLA_WORKER_PATH).arch);
    if (system("command -v nvidia-smi >/dev/null 2>&1") != 0) {
      CHECK(p.gpus.empty());
      CHECK_MSG(p.gpu_status.find("no GPU") == 0, "%s", p.gpu_status.c_str());
    }
    const double lat = measure_latency(s, 5);
    CHECK_MSG(lat > 0 && lat < 1, "latency %.4f s", lat);
    std::printf("loopback exec round trip (median of 5): %.2f ms\n", lat * 1e3);
  }

  // Deploy: first upload (forcing one library into the bundle), then reuse, then repair.
  {
    DeployOptions o;
    o.worker_path = FLOTILLA_WORKER_PATH;
    o.version = "0.1.0";
    o.force_libs = {"libtomlplusplus.so.3", "libopenblas.so.0"};  // as for a node without them
    const auto t0 = std::chrono::steady_clock::now();
    const DeployResult d = deploy_worker(s, o);
    const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(!d.reused);
    CHECK(d.dir.rfind(home + "/.flotilla/bin/0.1.0-", 0) == 0);
    CHECK(d.dir.substr(d.dir.size() - 12) == sha256_file(FLOTILLA_WORKER_PATH).substr(0, 12));
    CHECK(std::find(d.bundled_libs.begin(), d.bundled_libs.end(), "libtomlplusplus.so.3") !=
          d.bundled_libs.end());
    CHECK(std::filesystem::exists(d.dir + "/lib/libtomlplusplus.so.3"));
    CHECK(read_file(d.dir + "/MANIFEST").find("lib/libtomlplusplus.so.3") != std::string::npos);
    const ExecResult v = s.exec(shell_quote(d.worker) + " --version");
    CHECK_MSG(v.exit_status == 0 && v.out.find("0.1.0") != std::string::npos, "%s %s", v.out.c_str(),
              v.err.c_str());
    // The bundled library is the one loaded.
    const ExecResult maps = s.exec(
        shell_quote(d.worker) + " probe --json >/dev/null; LD_LIBRARY_PATH=" + shell_quote(d.dir + "/lib") +
        " ldd " + shell_quote(d.dir + "/flotilla-worker.bin"));
    CHECK(maps.out.find(d.dir + "/lib/libtomlplusplus.so.3") != std::string::npos);
    // OpenBLAS (dlopen()ed, so no `ldd` lists it) travels too, and the deployed worker trains with that copy.
    CHECK(std::find(d.bundled_libs.begin(), d.bundled_libs.end(), "libopenblas.so.0") !=
          d.bundled_libs.end());
    CHECK(read_file(d.dir + "/MANIFEST").find("  lib/libopenblas.so.0\n") != std::string::npos);
    const ExecResult blas = s.exec("cd \"$(mktemp -d)\" && LD_DEBUG=libs " + shell_quote(d.worker) +
                                   " demo --steps 1 2>&1 | grep -F 'calling init: '");
    CHECK_MSG(blas.out.find("calling init: " + d.dir + "/lib/libopenblas.so.0") != std::string::npos, "%s",
              blas.out.c_str());
    // The CUDA plugin beside the local worker travels to lib/flotilla/, where the deployed worker
    // finds it (engine/backend/cuda_plugin.h): probe names the deployed copy.
    const std::string local_plugin = std::filesystem::path(FLOTILLA_WORKER_PATH).parent_path().string() +
                                     "/../lib/flotilla/libflotilla-cuda.so";
    if (std::filesystem::exists(local_plugin)) {
      CHECK(std::filesystem::exists(d.dir + "/lib/flotilla/libflotilla-cuda.so"));
      CHECK(read_file(d.dir + "/MANIFEST").find("  lib/flotilla/libflotilla-cuda.so\n") != std::string::npos);
      const ExecResult pj = s.exec(shell_quote(d.worker) + " probe --no-peak");
      CHECK_MSG(pj.out.find("Plugin    " + d.dir + "/lib/flotilla/libflotilla-cuda.so") != std::string::npos,
                "%s", pj.out.c_str());
    }
    const NodeProbe wp = probe_worker(s, d.worker);
    CHECK(wp.cpus == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) && !wp.arch.empty());

    const auto t1 = std::chrono::steady_clock::now();
    const DeployResult again = deploy_worker(s, o);
    const double second = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    CHECK(again.reused && again.dir == d.dir);
    std::printf("deploy: first %.2f s, reuse %.3f s\n", first, second);

    std::ofstream(d.dir + "/flotilla-worker.bin", std::ios::app) << "damage";
    const DeployResult repaired = deploy_worker(s, o);
    CHECK(!repaired.reused);
    CHECK(sha256_file(d.dir + "/flotilla-worker.bin") == sha256_file(FLOTILLA_WORKER_PATH));
  }
  return summary("remote_sftp_probe_deploy");
}
