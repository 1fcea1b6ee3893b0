// Worker bundle deploy (see deploy.h for the layout and the reuse rule).
#include "remote/deploy.h"

#include <elf.h>
#include <stdio.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "engine/backend/cuda_plugin.h"
#include "flotilla/bundle_files.h"
#include "remote/sftp.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

// The wrapper and the system-library list are the worker bundle's own (packaging/bundle/), so a
// deployed node and an unpacked bundle archive (packaging/MakeBundle.cmake) hold the same files.
constexpr const char* kWrapper = kBundleWrapper;

// Provided by every node's C library; bundling them would break the node's dynamic loader.
bool is_system_lib(const std::string& soname) {
  std::istringstream list(kBundleSystemLibs);
  for (std::string p; std::getline(list, p);)
    if (!p.empty() && p[0] != '#' && soname.rfind(p, 0) == 0) return true;
  return false;
}

bool plain_name(const std::string& s) {
  return !s.empty() && s[0] != '-' && s[0] != '.' &&
         s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+-") ==
             std::string::npos;
}

std::string run_local(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (!p) throw_io("cannot run `" + command + "` locally");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// OpenBLAS is dlopen()ed by the worker (engine/cpu/blas.h), so `ldd` of the binary never lists it:
// deploy resolves it like a linked library (the local copy is the one the dynamic loader's cache
// names), and the node's own copy is used when its loader cache has one.
constexpr const char* kBlasSoname = "libopenblas.so.0";
const char* const kLdconfig = "{ /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; }";

std::string local_library_path(const std::string& soname) {
  std::istringstream in(run_local(std::string(kLdconfig)));
  for (std::string line; std::getline(in, line);) {
    const auto arrow = line.find(" => ");
    std::string name = line.substr(0, line.find(" ("));
    name.erase(0, name.find_first_not_of(" \t"));
    if (arrow != std::string::npos && name == soname) return line.substr(arrow + 4);
  }
  return "";
}

}  // namespace

int compare_versions(const std::string& a, const std::string& b) {
  std::istringstream x(a), y(b);
  while (x.good() || y.good()) {
    long p = 0, q = 0;
    std::string s, t;
    if (std::getline(x, s, '.')) p = std::atol(s.c_str());
    if (std::getline(y, t, '.')) q = std::atol(t.c_str());
    if (p != q) return p < q ? -1 : 1;
    if (s.empty() && t.empty()) break;
  }
  return 0;
}

BinaryNeeds binary_needs(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_io("cannot read " + path + ": " + errno_string(errno));
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  BinaryNeeds n;
  if (bytes.size() < sizeof(Elf64_Ehdr) || bytes.compare(0, 4, ELFMAG) != 0)
    throw_usage(path + " is not an ELF binary");
  uint16_t machine = 0;
  std::copy_n(bytes.data() + offsetof(Elf64_Ehdr, e_machine), sizeof machine,
              reinterpret_cast<char*>(&machine));
  switch (machine) {
    case EM_X86_64:
      n.arch = "x86_64";
      break;
    case EM_AARCH64:
      n.arch = "aarch64";
      break;
    case EM_386:
      n.arch = "i686";
      break;
    case EM_PPC64:
      n.arch = "ppc64le";
      break;
    default:
      n.arch = "elf-machine-" + std::to_string(machine);
  }
  // Symbol version names (GLIBC_2.34) sit in .dynstr as plain strings.
  for (size_t pos = bytes.find("GLIBC_2."); pos != std::string::npos; pos = bytes.find("GLIBC_2.", pos + 1)) {
    size_t end = pos + 6;
    while (end < bytes.size() && (std::isdigit(static_cast<unsigned char>(bytes[end])) || bytes[end] == '.'))
      ++end;
    const std::string v = bytes.substr(pos + 6, end - pos - 6);
    if (end < bytes.size() && bytes[end] == '\0' && (n.glibc.empty() || compare_versions(v, n.glibc) > 0))
      n.glibc = v;
  }
  return n;
}

std::string compatibility_problem(const BinaryNeeds& needs, const std::string& node_arch,
                                  const std::string& node_glibc) {
  const bool same_arch = node_arch == needs.arch || (needs.arch == "aarch64" && node_arch == "arm64");
  if (!same_arch)
    return "the node's architecture is " + (node_arch.empty() ? std::string("unknown") : node_arch) +
           " but this worker is built for " + needs.arch + "; build the worker on (or for) a " +
           (node_arch.empty() ? std::string("matching") : node_arch) + " machine";
  if (!needs.glibc.empty()) {
    if (node_glibc.empty())
      return "the node has no GNU C library (getconf GNU_LIBC_VERSION failed), and this worker needs glibc " +
             needs.glibc + " or newer; use a glibc-based Linux distribution on the node";
    if (compare_versions(node_glibc, needs.glibc) < 0)
      return "the node's glibc is " + node_glibc + " but this worker needs " + needs.glibc +
             " or newer; upgrade the node's OS, or build the worker on a system with glibc " + node_glibc +
             " or older";
  }
  return "";
}

std::vector<LocalLib> bundleable_libs(const std::string& binary) {
  std::vector<LocalLib> out;
  std::istringstream in(run_local("ldd " + shell_quote(binary) + " 2>/dev/null"));
  std::string line;
  while (std::getline(in, line)) {
    const auto arrow = line.find(" => ");
    if (arrow == std::string::npos) continue;
    std::string soname = line.substr(0, arrow);
    soname.erase(0, soname.find_first_not_of(" \t"));
    std::string path = line.substr(arrow + 4);
    path = path.substr(0, path.find(" ("));
    if (path.empty() || path[0] != '/' || is_system_lib(soname) || !plain_name(soname)) continue;
    out.push_back({soname, path});
  }
  return out;
}

std::vector<std::string> missing_sonames(const std::string& ldd_output) {
  std::vector<std::string> out;
  std::istringstream in(ldd_output);
  std::string line;
  while (std::getline(in, line)) {
    const auto arrow = line.find(" => not found");
    if (arrow == std::string::npos) continue;
    std::string soname = line.substr(0, arrow);
    soname.erase(0, soname.find_first_not_of(" \t"));
    if (std::find(out.begin(), out.end(), soname) == out.end()) out.push_back(soname);
  }
  return out;
}

DeployResult deploy_worker(Session& session, const DeployOptions& o) {
  if (!plain_name(o.version))
    throw_usage("worker version '" + printable(o.version) + "' is not a plain name");
  session.connect();
  const std::string node = session.target().host;
  // 1. Can the node run this binary at all?
  const ExecResult facts = session.exec("uname -m; getconf GNU_LIBC_VERSION 2>/dev/null || echo", 30);
  std::istringstream fl(facts.out);
  std::string arch, glibc;
  std::getline(fl, arch);
  std::getline(fl, glibc);
  if (glibc.rfind("glibc ", 0) == 0)
    glibc = glibc.substr(6);
  else
    glibc.clear();
  const BinaryNeeds needs = binary_needs(o.worker_path);
  if (std::string p = compatibility_problem(needs, arch, glibc); !p.empty())
    throw Error(ExitCode::kConfig, "cannot deploy the worker to " + node + ": " + p + ".");

  // 2. Reuse a complete, verified bundle of the same build.
  const std::string sha = sha256_file(o.worker_path);
  DeployResult res;
  res.dir = session.remote_home() + "/.flotilla/bin/" + o.version + "-" + sha.substr(0, 12);
  res.worker = res.dir + "/flotilla-worker";
  const std::string qdir = shell_quote(res.dir);
  const std::string verify =
      "cd " + qdir + " 2>/dev/null && test -f MANIFEST && sha256sum -c --quiet --strict MANIFEST";
  if (session.exec(verify + " >/dev/null 2>&1", 300).exit_status == 0) {
    res.reused = true;
    return res;
  }

  // 3. Upload the binary, then whatever libraries `ldd` on the node cannot resolve.
  Sftp sftp(session);
  sftp.mkdir_p(res.dir + "/lib", 0755);
  std::string manifest = sha + "  flotilla-worker.bin\n";
  sftp.upload_file(o.worker_path, res.dir + "/flotilla-worker.bin", 0755);
  // The CUDA plugin beside the worker (engine/backend/cuda_plugin.h) goes to lib/flotilla/, where
  // the deployed worker looks for it; CUDA, cuBLAS and NCCL themselves come from the node.
  for (const std::string& dir : cuda_plugin::plugin_candidates(o.worker_path)) {
    const std::string plugin = dir + "/" + cuda_plugin::kPluginFile;
    if (!std::ifstream(plugin).good()) continue;
    sftp.mkdir_p(res.dir + "/lib/flotilla", 0755);
    manifest += sftp.upload_file(plugin, res.dir + "/lib/flotilla/" + cuda_plugin::kPluginFile, 0644) +
                "  lib/flotilla/" + cuda_plugin::kPluginFile + "\n";
    break;
  }
  std::vector<LocalLib> local = bundleable_libs(o.worker_path);
  if (const std::string blas = local_library_path(kBlasSoname); !blas.empty()) {
    local.push_back({kBlasSoname, blas});
    for (const LocalLib& dep : bundleable_libs(blas))  // libgfortran, libquadmath
      if (std::none_of(local.begin(), local.end(), [&](const LocalLib& l) { return l.soname == dep.soname; }))
        local.push_back(dep);
  }
  const bool node_has_ldd = session.exec("command -v ldd >/dev/null 2>&1", 30).exit_status == 0;
  std::set<std::string> wanted(o.force_libs.begin(), o.force_libs.end());
  const std::string has_blas =
      std::string(kLdconfig) + " | grep -qF " + shell_quote(std::string(kBlasSoname) + " ");
  if (session.exec(has_blas, 30).exit_status != 0) wanted.insert(kBlasSoname);
  for (int round = 0; round < 4; ++round) {
    if (node_has_ldd) {
      // The binary's libraries, and a bundled OpenBLAS's own (it is not linked, so not in the first list).
      const std::string lib = shell_quote(res.dir + "/lib");
      const std::string blas = shell_quote(res.dir + "/lib/" + kBlasSoname);
      const ExecResult l = session.exec(
          "LD_LIBRARY_PATH=" + lib + " ldd " + shell_quote(res.dir + "/flotilla-worker.bin") +
              " 2>&1; if [ -f " + blas + " ]; then LD_LIBRARY_PATH=" + lib + " ldd " + blas + " 2>&1; fi",
          60);
      for (const auto& s : missing_sonames(l.out)) wanted.insert(s);
    } else {
      for (const auto& lib : local) wanted.insert(lib.soname);  // cannot ask: bundle everything
    }
    bool uploaded = false;
    for (const std::string& soname : wanted) {
      if (std::find(res.bundled_libs.begin(), res.bundled_libs.end(), soname) != res.bundled_libs.end())
        continue;
      const auto it =
          std::find_if(local.begin(), local.end(), [&](const LocalLib& l) { return l.soname == soname; });
      if (it == local.end())
        throw Error(ExitCode::kConfig,
                    "cannot deploy the worker to " + node + ": the node lacks " + printable(soname) +
                        ", which cannot be bundled (not found locally, or "
                        "part of the C library); install it on the node" +
                        (soname == kBlasSoname ? std::string(" (Debian: libopenblas0)") : ""));
      const BinaryNeeds lib_needs = binary_needs(it->path);
      if (std::string p = compatibility_problem(lib_needs, arch, glibc); !p.empty())
        throw Error(ExitCode::kConfig, "cannot deploy " + soname + " to " + node + ": " + p + ".");
      manifest += sftp.upload_file(it->path, res.dir + "/lib/" + soname, 0644) + "  lib/" + soname + "\n";
      res.bundled_libs.push_back(soname);
      uploaded = true;
    }
    if (!uploaded) break;
  }
  manifest += sftp.upload_bytes(kWrapper, res.worker, 0755) + "  flotilla-worker\n";
  // 4. The manifest last: its presence marks the bundle complete.
  sftp.upload_bytes(manifest, res.dir + "/MANIFEST", 0644);
  const ExecResult check = session.exec(verify + " 2>&1 && " + shell_quote(res.worker) + " --version", 120);
  if (check.exit_status != 0)
    throw Error(ExitCode::kComm, "the worker bundle on " + node + " (" + res.dir +
                                     ") does not verify or run: " + printable(check.out + check.err));
  return res;
}

}  // namespace flotilla::remote
