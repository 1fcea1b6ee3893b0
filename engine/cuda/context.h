// The execution context every CUDA kernel family takes: one stream, one cuBLASLt handle with a
// fixed workspace, and a growable scratch buffer for reductions.
//
// Non-obvious decision: all work of a backend runs on ONE non-blocking stream and cuBLASLt gets
// one fixed workspace, which is what cuBLAS's reproducibility rules require for bit-identical
// results run to run; the scratch buffer is reused by every op in stream order (an op may use it
// only until it returns to the host, and growth synchronises the stream before freeing).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <tuple>

namespace flotilla::cuda {

using bf16 = __nv_bfloat16;

class Context {
 public:
  // Creates the stream, the cuBLASLt handle and its 32 MiB workspace on the current device.
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* lt_workspace() const { return lt_workspace_; }
  size_t lt_workspace_bytes() const { return kLtWorkspaceBytes; }

  // At least `bytes` of device scratch, 256-byte aligned, valid until the next scratch() call.
  void* scratch(size_t bytes);

  // Waits for the stream; throws on an asynchronous kernel error.
  void synchronize();

  // Deterministic mode: cuBLASLt algorithms without split-K atomics reductions (default on).
  bool deterministic = true;

  // cuBLASLt algorithm per matmul shape, chosen by the heuristic on first use and kept for the
  // context's life (matmul.cu): a shape always runs the same algorithm, whatever the heuristic
  // might answer later, and the per-call heuristic query is skipped. Key: data type, m, n, k,
  // transposes, epilogue, bias/aux presence, deterministic; value: found + algorithm.
  // type, m, n, k, trans_a, trans_b, epilogue, bias, ld_aux, deterministic, lda, ldb, ldd (0: contiguous)
  using LtKey = std::tuple<int, int, int, int, bool, bool, int, bool, int, bool, int, int, int>;
  struct LtChoice {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  std::map<LtKey, LtChoice> lt_algos;

 private:
  static constexpr size_t kLtWorkspaceBytes = 32u << 20;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// Blocks of `threads` covering n items, capped for grid-stride loops.
inline unsigned grid_for(size_t n, int threads, size_t cap = 65535u * 8u) {
  size_t blocks = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<size_t>(p) & 15u) == 0; }

}  // namespace flotilla::cuda
