// Deterministic random numbers for initialisation, shuffling, dropout-free sampling.
//
// One non-obvious decision: we use our own generator (xoshiro256** seeded by splitmix64) rather
// than std::mt19937 + std::normal_distribution, because the standard distributions are not
// specified bit-for-bit across library versions, and checkpoints must restore the exact stream.
// The whole state is 4 x uint64 and is saved in checkpoints.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace flotilla {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : state_) s = splitmix64(x);
    has_spare_ = false;
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 24 bits (exactly representable in float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [0, 1) with 53 bits.
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; tiny bias is irrelevant here).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

  // Standard normal by Box-Muller in double precision (deterministic: no std distribution).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform_double();
    double u2 = uniform_double();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 6.283185307179586476925 * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

  // Serialisable state (the spare normal is part of it).
  struct State {
    std::array<uint64_t, 4> s{};
    uint64_t has_spare = 0;
    double spare = 0;
  };
  State state() const { return State{state_, has_spare_ ? 1u : 0u, spare_}; }
  void set_state(const State& st) {
    state_ = st.s;
    has_spare_ = st.has_spare != 0;
    spare_ = st.spare;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  std::array<uint64_t, 4> state_{};
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace flotilla
