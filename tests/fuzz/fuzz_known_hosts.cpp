// libFuzzer target (docs/reliability.md F1): our known_hosts reader and editor (remote/known_hosts.cpp): the
// fingerprints shown for a node and `flotilla nodes forget-key`, which rewrites the file. The input is
// written as the app's known_hosts file. Invariants: no crash; after forget_host_key(NAME) the file yields
// no fingerprint for NAME; the lines for other hosts (and comments) are kept in order, byte for byte.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "remote/session.h"
#include "remote/session_impl.h"

namespace {
std::string dir_for_files() {
  return std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/flotilla-fuzz-kh-" +
         std::to_string(getpid());
}
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = dir_for_files();
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
  }
  const std::string name = "[127.0.0.1]:2222";
  (void)flotilla::remote::known_fingerprints(path, "gpu-box");
  (void)flotilla::remote::known_fingerprints(path, name);
  const std::vector<std::string> before = lines_of(text);
  int removed = 0;
  try {
    removed = flotilla::remote::forget_host_key(path, name);
  } catch (const std::exception&) {
    std::abort();  // a writable file in a writable folder: rewriting it cannot fail
  }
  if (!flotilla::remote::known_fingerprints(path, name).empty()) std::abort();
  std::ifstream f(path, std::ios::binary);
  const std::string after_text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::vector<std::string> after = lines_of(after_text);
  if (removed == 0 && after_text != text) std::abort();  // nothing to forget: the file is untouched
  if (after.size() + static_cast<size_t>(removed) != before.size()) std::abort();
  size_t j = 0;  // the kept lines are the input's, in order
  for (const std::string& line : before)
    if (j < after.size() && line == after[j]) ++j;
  if (j != after.size()) std::abort();
  return 0;
}
