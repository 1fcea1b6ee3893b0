// Fused classifier kernels. Non-obvious decision: the forward keeps one running (max, sum) pair
// per thread over its strided columns and merges the pairs at the end (online softmax), so the
// (N, Vp) logits are read once in the forward and once in the backward, and probabilities are
// never stored; the backward can then overwrite the logits in place.
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/global_norm.h"
#include "engine/cuda/softmax_crossentropy.h"

namespace flotilla::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kIgnore = -100;  // engine/backend/backend.h kIgnoreTarget: no loss, no gradient

template <typename T>
__global__ void ce_forward_kernel(float* losses, float* lse, const T* logits, const int32_t* targets, int V,
                                  int Vp) {
  __shared__ float shared[32];
  const size_t row = blockIdx.x;
  const T* x = logits + row * static_cast<size_t>(Vp);
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = to_f(x[j]);
    if (v > m) {
      s = s * __expf(m - v) + 1.0f;
      m = v;
    } else {
      s += __expf(v - m);
    }
  }
  const float M = block_max(m, shared);
  const float part = m == -INFINITY ? 0.0f : s * __expf(m - M);
  const float S = block_sum(part, shared);
  if (threadIdx.x == 0) {
    const float l = M + logf(S);
    lse[row] = l;
    const int target = targets[row];
    losses[row] = target >= 0 ? l - to_f(x[target]) : (target == kIgnore ? 0.0f : l);
  }
}

template <typename T>
__global__ void ce_backward_kernel(T* dlogits, const T* logits, const float* lse, const int32_t* targets,
                                   float dloss, int V, int Vp) {
  const size_t row = blockIdx.x;
  const T* x = logits + row * static_cast<size_t>(Vp);
  T* d = dlogits + row * static_cast<size_t>(Vp);
  const float l = lse[row];
  const int target = targets[row];
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
    float g = 0.0f;
    if (j < V && target != kIgnore) g = dloss * (__expf(to_f(x[j]) - l) - (j == target ? 1.0f : 0.0f));
    d[j] = from_f<T>(g);
  }
}

// out[row] = logits[row, targets[row]], or 0 for a negative target.
template <typename T>
__global__ void target_logit_kernel(float* out, const T* logits, const int32_t* targets, long N, int Vp) {
  const long row = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (row >= N) return;
  const int target = targets[row];
  out[row] = target >= 0 ? to_f(logits[row * static_cast<long>(Vp) + target]) : 0.0f;
}

}  // namespace

template <typename T>
void gather_target_logits(Context& ctx, float* out, const T* logits, const int32_t* targets, long N, int Vp) {
  if (N == 0) return;
  target_logit_kernel<T><<<grid_for(static_cast<size_t>(N), 256), 256, 0, ctx.stream()>>>(out, logits, targets, N,
                                                                                         Vp);
  check_launch("gather_target_logits");
}

template <typename T>
void softmax_crossentropy_forward(Context& ctx, float* losses, float* lse, const T* logits, const int32_t* targets,
                                  long N, int V, int Vp) {
  if (N == 0) return;
  ce_forward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(losses, lse, logits, targets, V, Vp);
  check_launch("softmax_crossentropy_forward");
}

template <typename T>
void softmax_crossentropy_backward(Context& ctx, T* dlogits, const T* logits, const float* lse,
                                   const int32_t* targets, float dloss, long N, int V, int Vp) {
  if (N == 0) return;
  ce_backward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(dlogits, logits, lse, targets,
                                                                                dloss, V, Vp);
  check_launch("softmax_crossentropy_backward");
}

double sum_losses(Context& ctx, const float* losses, long N) {
  return sum_values(ctx, losses, static_cast<size_t>(N));
}

template void softmax_crossentropy_forward<float>(Context&, float*, float*, const float*, const int32_t*, long, int,
                                                  int);
template void softmax_crossentropy_forward<bf16>(Context&, float*, float*, const bf16*, const int32_t*, long, int,
                                                 int);
template void gather_target_logits<float>(Context&, float*, const float*, const int32_t*, long, int);
template void gather_target_logits<bf16>(Context&, float*, const bf16*, const int32_t*, long, int);
template void softmax_crossentropy_backward<float>(Context&, float*, const float*, const float*, const int32_t*,
                                                   float, long, int, int);
template void softmax_crossentropy_backward<bf16>(Context&, bf16*, const bf16*, const float*, const int32_t*, float,
                                                  long, int, int);

}  // namespace flotilla::cuda
