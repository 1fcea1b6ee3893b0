// The bf16 weights rounded once per optimizer step (engine/cpu/matmul_bf16.h, Bf16FixedWeights).
//
// On a CPU with bf16 matmuls: inside a scope, the linear layer's forward and backward over two
// micro-batches give exactly the bits of the per-call rounding (the cache changes no number), and
// the weight's copy is really kept (a change to a fixed weight made inside the scope, against the
// scope's promise, is not seen: the proof that the second call did not round again). After end()
// the changed weight is used at once, and a new scope rounds it afresh (the invalidation the
// optimizer update relies on). A weight outside the scope's ranges is rounded at every call. A
// copy not used in a scope is freed when it ends; a second open scope is a logic error. Skipped
// (passing) where this machine has no bf16 matmuls (test_cpu_bf16_matmul checks the refusal).
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "engine/cpu/matmul_bf16.h"

using namespace flotilla;

namespace {

uint32_t g_seed = 777u;
float rnd() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}
std::vector<float> random_vec(size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = rnd();
  return v;
}

constexpr int N = 37, IC = 70, OC = 45;

struct Result {
  std::vector<float> out, dinp, dw;
  bool operator==(const Result& o) const {
    return out.size() == o.out.size() && std::memcmp(out.data(), o.out.data(), out.size() * 4) == 0 &&
           std::memcmp(dinp.data(), o.dinp.data(), dinp.size() * 4) == 0 &&
           std::memcmp(dw.data(), o.dw.data(), dw.size() * 4) == 0;
  }
};

// Forward and backward of one linear layer with weight w, on fixed inputs.
Result layer(const float* w) {
  g_seed = 31u;
  const auto inp = random_vec(static_cast<size_t>(N) * IC), bias = random_vec(OC),
             dout = random_vec(static_cast<size_t>(N) * OC);
  Result r{std::vector<float>(static_cast<size_t>(N) * OC), std::vector<float>(static_cast<size_t>(N) * IC),
           std::vector<float>(static_cast<size_t>(OC) * IC, 0.0f)};
  std::vector<float> db(OC, 0.0f);
  cpu::matmul_forward_bf16(r.out.data(), inp.data(), w, bias.data(), N, IC, OC);
  cpu::matmul_backward_bf16(r.dinp.data(), r.dw.data(), db.data(), dout.data(), inp.data(), w, N, IC, OC);
  return r;
}

}  // namespace

int main() {
  const std::string why = cpu::bf16_matmul_refusal();
  if (!why.empty()) {
    std::printf("bf16 matmuls not available here (%s): skipped\n", why.c_str());
    return flotilla_test::summary("cpu_bf16_weight_cache");
  }
  // The "parameters": the weight sits inside a larger buffer, as a layer's tensor does.
  g_seed = 5u;
  std::vector<float> params = random_vec(static_cast<size_t>(OC) * IC + 100);
  float* w = params.data() + 13;
  const Result ref = layer(w);  // no scope: rounded at every call

  {
    cpu::Bf16FixedWeights fixed({{params.data(), params.size()}});
    CHECK(layer(w) == ref);  // micro-batch 1: rounds and keeps the copy
    CHECK(layer(w) == ref);  // micro-batch 2: from the copy, the same bits
    CHECK(cpu::bf16_weight_cache_bytes() >= static_cast<size_t>(OC) * IC * 2);
    // Changing a fixed weight breaks the scope's promise; the copy shows it was not rounded again.
    const std::vector<float> saved(params);
    for (int i = 0; i < OC * IC; ++i) w[i] = -w[i] * 1.5f;
    CHECK_MSG(layer(w) == ref, "the fixed weight was rounded again inside the scope (no cache)");
    bool threw = false;
    try {
      cpu::Bf16FixedWeights nested({{params.data(), params.size()}});
    } catch (const std::logic_error&) {
      threw = true;
    }
    CHECK(threw);
    fixed.end();
    // The update is over: the new values are used at once, and by a new scope.
    const Result changed = layer(w);
    CHECK(!(changed == ref));
    {
      cpu::Bf16FixedWeights next({{params.data(), params.size()}});
      CHECK(layer(w) == changed);
      CHECK(layer(w) == changed);
    }
    params = saved;
  }

  // A weight outside the ranges is rounded at every call, inside a scope too.
  {
    std::vector<float> other(params.begin() + 13, params.begin() + 13 + OC * IC);
    cpu::Bf16FixedWeights fixed({{params.data(), 50}});
    CHECK(layer(other.data()) == ref);
    for (auto& x : other) x = -x * 1.5f;
    CHECK(!(layer(other.data()) == ref));
  }
  // That scope used no cached copy: the earlier one is freed.
  CHECK_MSG(cpu::bf16_weight_cache_bytes() == 0, "%zu bytes kept", cpu::bf16_weight_cache_bytes());
  return flotilla_test::summary("cpu_bf16_weight_cache");
}
