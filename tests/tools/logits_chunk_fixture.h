// The small models and batch that the chunked LM head tests share (tests/engine/
// test_model_logits_chunk.cpp on the CPU, tests/gpu/test_cuda_logits_chunk.cpp on CUDA): GPT-2 and
// a Llama with grouped-query attention, 200 tokens of vocabulary, and a fixed pseudo-random batch
// with one row that has no loss and one target at the vocabulary's last token; and the comparisons
// both make (largest magnitude, largest difference, the same bits).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/model/gpt.h"
#include "engine/model/model.h"

namespace logits_chunk_fixture {

constexpr int kB = 3, kT = 20, kN = kB * kT;

inline flotilla::ModelDims gpt2_dims(int n_embd) {
  flotilla::ModelDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_embd = n_embd;
  d.vocab_size = 200;
  d.padded_vocab = flotilla::pad_vocab(200);
  d.max_seq_len = 32;
  return d;
}

inline flotilla::ModelDims llama_dims(int n_embd, bool tied) {
  flotilla::ModelDims d = gpt2_dims(n_embd);
  d.arch = flotilla::Arch::kLlama;
  d.n_kv_head = 2;  // GQA
  d.ffn_dim = 2 * n_embd;
  d.tied_embeddings = tied;
  return d;
}

struct Batch {
  std::vector<int32_t> in, tg;
};

inline Batch batch(int vocab) {
  Batch b;
  b.in.resize(kN);
  b.tg.resize(kN);
  uint32_t x = 777;
  for (int i = 0; i < kN; ++i) {
    x = x * 1664525u + 1013904223u;
    b.in[static_cast<size_t>(i)] = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
    x = x * 1664525u + 1013904223u;
    b.tg[static_cast<size_t>(i)] = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  b.tg[3] = flotilla::kIgnoreTarget;  // a row without a loss
  b.tg[kN - 1] = vocab - 1;
  return b;
}

inline double max_abs(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s = std::max(s, std::fabs(static_cast<double>(x)));
  return s;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s = std::max(s, std::fabs(static_cast<double>(a[i]) - b[i]));
  return s;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace logits_chunk_fixture
