// Helpers for the data and tokenizer tests: a fresh scratch folder per test, raw shard files
// with arbitrary (possibly wrong) headers, and running the worker binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace data_test {

// FLOTILLA_TEST_TMP/<name>.<pid>, emptied.
inline std::string scratch(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::path(FLOTILLA_TEST_TMP) / (name + "." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Writes a shard byte by byte: header {magic, version, count}, then `tokens` at `width` bytes each.
inline void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                            const std::vector<uint32_t>& tokens, int width) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  for (uint32_t t : tokens) {
    if (width == 2) {
      const uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      out.write(reinterpret_cast<const char*>(&t), 4);
    }
  }
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Runs a shell command (stderr merged into the output); returns its exit code.
inline int run(const std::string& cmd, std::string* output) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace data_test
