// Deploying the worker bundle to a node: ~/.flotilla/bin/<version>-<hash>/.
//
// Decision: the bundle directory is named by the worker's version and the first 12 hex digits of
// the SHA-256 of the worker binary, and it is complete only when its MANIFEST (sha256sum format,
// written last and atomically) exists and `sha256sum -c` passes on the node. So a half-finished
// upload is never reused, a different build never collides with this one, and a second deploy of
// the same build costs one command. The bundle holds the binary (flotilla-worker.bin), the shared
// libraries it needs that the node cannot resolve (lib/, found by running `ldd` on the node
// against the uploaded binary) and a tiny sh wrapper (flotilla-worker) that puts lib/ on
// LD_LIBRARY_PATH; `launch` re-executes /proc/self/exe, so its ranks inherit that path. The CUDA
// plugin, when it is beside the local worker, goes to lib/flotilla/ (engine/backend/cuda_plugin.h).
// OpenBLAS, which the worker dlopen()s and so `ldd` never lists, is uploaded with its own
// libraries when the node's loader cache has no libopenblas.so.0.
// packaging/MakeBundle.cmake writes the same layout as one archive (the worker bundle).
// Blocking: call from a worker thread.
#pragma once

#include <string>
#include <vector>

#include "remote/session.h"

namespace flotilla::remote {

struct DeployOptions {
  std::string worker_path;  // the local flotilla-worker binary
  std::string version;      // e.g. "0.1.0"
  // Sonames to bundle even if the node has them (tests; or a node whose copies are too old).
  std::vector<std::string> force_libs;
};

struct DeployResult {
  std::string dir;     // absolute bundle directory on the node
  std::string worker;  // absolute path of the wrapper to run
  bool reused = false;
  std::vector<std::string> bundled_libs;  // sonames uploaded into lib/ by this deploy
};

// A shared library the local worker links (from local `ldd`).
struct LocalLib {
  std::string soname;
  std::string path;
};

// What the worker binary needs: its architecture (e.g. "x86_64") and the newest GLIBC_x.y symbol
// version it references, read from the file itself.
struct BinaryNeeds {
  std::string arch;
  std::string glibc;  // "2.34"; "" when none found
};

DeployResult deploy_worker(Session& session, const DeployOptions& options);

// --- pieces, exposed for tests ---
BinaryNeeds binary_needs(const std::string& path);
// "" when a node with `node_arch` / `node_glibc` (from probe_node) can run it, else why not and what to do.
std::string compatibility_problem(const BinaryNeeds& needs, const std::string& node_arch,
                                  const std::string& node_glibc);
// Shared libraries of a local binary that travel in a bundle (everything but the C library family
// and the dynamic loader, which must come from the node).
std::vector<LocalLib> bundleable_libs(const std::string& binary);
// Sonames reported "not found" in `ldd` output.
std::vector<std::string> missing_sonames(const std::string& ldd_output);
// Compares dotted versions ("2.31" < "2.36"); -1, 0, 1.
int compare_versions(const std::string& a, const std::string& b);

}  // namespace flotilla::remote
