// Pure pieces of probe and deploy: nvidia-smi CSV, the probe script's output, version
// comparison, compatibility messages, `ldd` "not found" lines, and what the real worker needs.
#include "check.h"
#include "remote/deploy.h"
#include "remote/probe.h"

using namespace flotilla::remote;

int main() {
  const auto gpus = parse_nvidia_smi_csv(
      "0, NVIDIA H100 80GB HBM3, 81559, 1024, 97, 64, 512.33, 550.54.15\n"
      "1, NVIDIA H100 80GB HBM3, 81559, 0, [N/A], 40, [N/A], 550.54.15\n"
      "garbage line\n");
  CHECK(gpus.size() == 2);
  if (gpus.size() == 2) {
    CHECK(gpus[0].name == "NVIDIA H100 80GB HBM3" && gpus[0].memory_total_bytes == 81559ull << 20);
    CHECK(gpus[0].memory_used_bytes == 1024ull << 20);
    CHECK_NEAR(gpus[0].utilization_pct, 97, 0);
    CHECK_NEAR(gpus[0].power_w, 512.33, 1e-9);
    CHECK(gpus[0].driver == "550.54.15");
    CHECK(gpus[1].index == 1 && gpus[1].utilization_pct < 0 && gpus[1].power_w < 0);
  }
  const NodeProbe p = parse_probe_output(
      "arch=x86_64\nkernel=6.1.0\nos=Debian GNU/Linux 12 (bookworm)\nglibc=glibc 2.36\ncpus=16\n"
      "mem_total_kb=1000\nmem_avail_kb=500\ndisk_free_kb=2048\n"
      "gpu:0, A100, 40960, 1, 2, 3, 4, 535.1\nnvidia_smi_status=0\n");
  CHECK(p.arch == "x86_64" && p.glibc == "2.36" && p.cpus == 16 && p.memory_total_bytes == 1024000);
  CHECK(p.disk_free_bytes == 2048 * 1024 && p.gpus.size() == 1 && p.gpu_status == "ok");
  const NodeProbe none = parse_probe_output("arch=aarch64\nnvidia_smi=absent\n");
  CHECK(none.gpus.empty() && none.gpu_status.find("not installed") != std::string::npos);

  CHECK(compare_versions("2.31", "2.36") < 0 && compare_versions("2.36", "2.36") == 0);
  CHECK(compare_versions("2.4", "2.36") < 0 && compare_versions("3.0", "2.99") > 0);
  CHECK(compatibility_problem({"x86_64", "2.34"}, "x86_64", "2.36") == "");
  CHECK(compatibility_problem({"x86_64", "2.34"}, "aarch64", "2.36").find("architecture is aarch64") !=
        std::string::npos);
  CHECK(compatibility_problem({"x86_64", "2.34"}, "x86_64", "2.31").find("glibc is 2.31") != std::string::npos);
  CHECK(compatibility_problem({"x86_64", "2.34"}, "x86_64", "").find("no GNU C library") != std::string::npos);
  CHECK(missing_sonames("\tlibgloo.so.0 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") ==
        std::vector<std::string>{"libgloo.so.0"});

  const BinaryNeeds n = binary_needs(FLOTILLA_WORKER_PATH);
  CHECK(n.arch == "x86_64" || n.arch == "aarch64");
  CHECK_MSG(compare_versions(n.glibc, "2.17") >= 0, "glibc '%s'", n.glibc.c_str());
  const auto libs = bundleable_libs(FLOTILLA_WORKER_PATH);
  CHECK(!libs.empty());
  for (const auto& l : libs) CHECK(l.soname.rfind("libc.so", 0) != 0 && l.path[0] == '/');
  return flotilla_test::summary("remote_probe_parse");
}
