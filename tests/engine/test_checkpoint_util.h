// Helpers shared by the test_checkpoint_*.cpp tests: scratch directories, a deterministic
// checkpoint payload, and byte-level file surgery for damage injection.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

namespace ckpt_test {

namespace fs = std::filesystem;

// A fresh, empty directory unique to this test process.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/" + name + "-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A payload that looks like a trainer's: fp32 params and Adam moments, raw RNG bytes, an empty section.
struct State {
  int64_t step = 0;
  std::vector<float> params, m, v;
  std::vector<uint8_t> rng;
  std::string trainer_json;

  State(int64_t s, size_t n) : step(s), params(n), m(n), v(n), rng(37) {
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(s + 1);
    auto next = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    for (size_t i = 0; i < n; ++i) {
      params[i] = static_cast<float>(static_cast<int64_t>(next() % 2000001) - 1000000) * 1e-6f;
      m[i] = static_cast<float>(next() % 1000) * 1e-7f;
      v[i] = static_cast<float>(next() % 1000) * 1e-9f;
    }
    for (auto& b : rng) b = static_cast<uint8_t>(next());
    trainer_json = "{\"step\": " + std::to_string(s) + ", \"tokens\": " + std::to_string(s * 4096) +
                   ", \"config\": {\"model\": {\"n_layer\": 1}}}";
  }

  flotilla::CheckpointSaveRequest request(int rank = 0, int world = 1,
                                          uint64_t hash = 0xC0FFEE1234ull) const {
    flotilla::CheckpointSaveRequest r;
    r.step = step;
    r.rank = rank;
    r.world_size = world;
    r.config_hash = hash;
    const int64_t n = static_cast<int64_t>(params.size());
    r.tensors.push_back({"params", {n}, params.data(), params.size() * 4});
    r.tensors.push_back({"adam_m", {n}, m.data(), m.size() * 4});
    r.tensors.push_back({"adam_v", {n}, v.data(), v.size() * 4});
    r.tensors.push_back({"rng", {}, rng.data(), rng.size()});
    r.tensors.push_back({"empty", {0}, nullptr, 0});
    r.trainer_state_json = trainer_json;
    return r;
  }

  // True when `c` holds exactly this state's tensors (bitwise) and trainer.json.
  bool matches(const flotilla::LoadedCheckpoint& c) const {
    auto same = [&](const char* name, const void* data, size_t bytes) {
      for (const auto& t : c.tensors)
        if (t.name == name)
          return t.data.size() == bytes && (bytes == 0 || std::memcmp(t.data.data(), data, bytes) == 0);
      return false;
    };
    return c.step == step && c.trainer_state_json == trainer_json && c.tensors.size() == 5 &&
           same("params", params.data(), params.size() * 4) && same("adam_m", m.data(), m.size() * 4) &&
           same("adam_v", v.data(), v.size() * 4) && same("rng", rng.data(), rng.size()) &&
           same("empty", nullptr, 0);
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void flip_byte(const std::string& path, size_t offset) {
  std::string b = read_file(path);
  b[offset] = static_cast<char>(b[offset] ^ 0xFF);
  write_file(path, b);
}

inline std::vector<std::string> tmp_dirs_in(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(e.path().filename().string());
  return out;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

inline bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  for (const auto& s : v)
    if (contains(s, needle)) return true;
  return false;
}

}  // namespace ckpt_test
