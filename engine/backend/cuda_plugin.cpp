// Loading the CUDA plugin (see cuda_plugin.h). Non-obvious decision: a failed load is cached with
// its reason, so a run that asks for CUDA many times (probe, launch, the trainer) sees one dlopen
// and one consistent message; the reason always names a file and the package that provides it.
#include "engine/backend/cuda_plugin.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "engine/core/error.h"
#include "flotilla/build_info.h"

#ifndef FLOTILLA_CUDA_SONAMES
#define FLOTILLA_CUDA_SONAMES ""  // the plugin's CUDA libraries, ','-separated (CMake)
#endif
#ifndef FLOTILLA_CUDA_PACKAGE_SUFFIX
#define FLOTILLA_CUDA_PACKAGE_SUFFIX "13-0"  // NVIDIA's package names: cuda-cudart-<major>-<minor>
#endif

// Found with dlsym(RTLD_DEFAULT) only in a program that exports its symbols (flotilla-worker,
// ENABLE_EXPORTS): the only kind that can resolve the plugin's references to the engine.
extern "C" __attribute__((visibility("default"), used)) const int flotilla_cuda_plugin_host =
    flotilla::cuda_plugin::kAbiVersion;

namespace flotilla::cuda_plugin {
namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

struct Loaded {
  const CudaApi* table = nullptr;
  std::string path;   // the plugin file tried
  std::string error;  // "" when loaded
};

Loaded load_once() {
  Loaded out;
  if (flotilla_cuda_plugin_api != nullptr) {  // the plugin's objects are linked in (gpu tests)
    out.table = flotilla_cuda_plugin_api();
    out.path = "(linked in)";
    return out;
  }
  if (!built()) {
    out.error = "this worker was built without CUDA (FLOTILLA_CUDA=OFF, or no nvcc at build time)";
    return out;
  }
  if (!host()) {
    out.error =
        "this program cannot load the CUDA plugin (only flotilla-worker exports the engine it needs); "
        "run flotilla-worker probe";
    return out;
  }
  std::vector<std::string> tried;
  if (const char* env = std::getenv(kPluginPathEnv); env != nullptr && *env != '\0') {
    tried.push_back(env);
  } else {
    for (const auto& dir : plugin_candidates(self_exe())) tried.push_back(dir + "/" + kPluginFile);
  }
  for (const auto& p : tried)
    if (exists(p)) {
      char real[PATH_MAX];
      out.path = realpath(p.c_str(), real) != nullptr ? std::string(real) : p;
      break;
    }
  if (out.path.empty()) {
    std::string list;
    for (const auto& p : tried) list += (list.empty() ? "" : ", ") + p;
    out.error = std::string("the CUDA plugin ") + kPluginFile + " is not installed (looked for " + list +
                "); install " + package_hint(kPluginFile);
    return out;
  }
  void* handle = dlopen(out.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const std::string err = dlerror();
    const std::string lib = missing_library(err);
    if (!lib.empty() && lib != out.path && lib.find(kPluginFile) == std::string::npos) {
      out.error = "the CUDA plugin " + out.path + " needs " + lib + ", which is not installed; install " +
                  package_hint(lib) + " (dlopen: " + err + ")";
    } else {
      out.error = "the CUDA plugin " + out.path + " cannot be loaded (dlopen: " + err + "); reinstall " +
                  package_hint(kPluginFile);
    }
    return out;
  }
  using Entry = const CudaApi* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "flotilla_cuda_plugin_api"));
  const CudaApi* table = entry != nullptr ? entry() : nullptr;
  if (table == nullptr || table->abi_version != kAbiVersion ||
      std::string(table->worker_version) != FLOTILLA_VERSION_STRING) {
    out.error = "the CUDA plugin " + out.path + " belongs to another flotilla-worker version (worker " +
                FLOTILLA_VERSION_STRING + ", plugin " +
                (table != nullptr ? table->worker_version : "unknown") +
                "); install the plugin of the same version: " + package_hint(kPluginFile);
    return out;  // the handle stays open: unloading code that may have run constructors is unsafe
  }
  out.table = table;
  return out;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded state;
  std::call_once(once, [] { state = load_once(); });
  return state;
}

}  // namespace

bool built() {
#if defined(FLOTILLA_CUDA_PLUGIN)
  return true;
#else
  return flotilla_cuda_plugin_api != nullptr;
#endif
}

bool host() {
  if (flotilla_cuda_plugin_api != nullptr) return true;
  return dlsym(RTLD_DEFAULT, "flotilla_cuda_plugin_host") != nullptr;
}

const CudaApi* api(std::string* why) {
  const Loaded& l = loaded();
  if (l.table == nullptr && why != nullptr) *why = l.error;
  return l.table;
}

const CudaApi& require(const std::string& what) {
  std::string why;
  const CudaApi* t = api(&why);
  if (t == nullptr) throw_config(what + ": " + why);
  return *t;
}

PluginStatus status() {
  PluginStatus s;
  s.built = built();
  s.host = host();
  const Loaded& l = loaded();
  s.loaded = l.table != nullptr;
  s.path = l.path;
  s.error = l.error;
  std::istringstream names(FLOTILLA_CUDA_SONAMES);
  for (std::string soname; std::getline(names, soname, ',');) {
    if (soname.empty()) continue;
    LibraryStatus lib;
    lib.soname = soname;
    lib.package = package_hint(soname);
    // Already loaded by the plugin (found through its RUNPATH), else where the loader finds it now.
    void* h = dlopen(soname.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == nullptr) h = dlopen(soname.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (h != nullptr) {
      link_map* map = nullptr;
      if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr)
        lib.path = map->l_name;
      if (lib.path.empty()) lib.path = soname;
      dlclose(h);
    } else {
      dlerror();
    }
    s.libraries.push_back(lib);
  }
  return s;
}

std::vector<std::string> plugin_candidates(const std::string& exe_path) {
  const std::filesystem::path dir = std::filesystem::path(exe_path).parent_path();
  return {(dir / "../lib/flotilla").lexically_normal().string(),
          (dir / "lib/flotilla").lexically_normal().string()};
}

std::string missing_library(const std::string& text) {
  const auto colon = text.find(": ");
  if (colon == std::string::npos) return "";
  const std::string name = text.substr(0, colon);
  const auto base = name.rfind('/');
  const std::string file = base == std::string::npos ? name : name.substr(base + 1);
  if (file.rfind("lib", 0) != 0 || file.find(".so") == std::string::npos) return "";
  return file;
}

std::string package_hint(const std::string& soname) {
  const std::string suffix = FLOTILLA_CUDA_PACKAGE_SUFFIX;
  const auto starts = [&](const char* prefix) { return soname.rfind(prefix, 0) == 0; };
  if (soname.find(kPluginFile) != std::string::npos)
    return "the flotilla-cuda package (apt install flotilla-cuda), or use the worker bundle, which carries "
           "lib/flotilla/libflotilla-cuda.so";
  if (starts("libcudart.so"))
    return "cuda-cudart-" + suffix +
           " (NVIDIA's CUDA repository for Debian 12), or the CUDA toolkit with its "
           "lib64 on the library path";
  if (starts("libcublasLt.so") || starts("libcublas.so"))
    return "libcublas-" + suffix +
           " (NVIDIA's CUDA repository for Debian 12), or the CUDA toolkit with its "
           "lib64 on the library path";
  if (starts("libnccl.so")) return "libnccl2 (NVIDIA's CUDA repository for Debian 12)";
  if (starts("libcuda.so"))
    return "the NVIDIA driver (Debian: nvidia-driver from non-free; NVIDIA's repository: cuda-drivers)";
  return "the package that provides " + soname + " (apt-file search " + soname + ")";
}

}  // namespace flotilla::cuda_plugin
