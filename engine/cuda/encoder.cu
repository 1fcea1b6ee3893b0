// Embedding kernels. Non-obvious decision (as llm.c): the wte gradient is a scatter-add where
// several positions may hit one token row; to stay deterministic without float atomics, the
// token ids (B*T ints) are copied to the host, grouped by token in position order there, and one
// block per distinct token sums its rows in that fixed order. The copy costs one stream sync per
// backward, which is small next to the step.
// Packed documents (pos != null): the position of each row comes from pos, and the wpe gradient
// is a scatter-add like wte's (positions repeat within a row).
// Tensor parallelism (vocab-parallel wte, engine/model/vocab_parallel.cpp): a negative id is a token another
// rank's rows hold, so its wte term is 0 and its wte gradient is someone else's; wpe may be null (the
// positional term is added on one rank only, before the all-reduce). x + 0 is exact, so the sum
// over ranks equals the one-GPU lookup bit for bit.
#include <algorithm>
#include <utility>
#include <vector>

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/encoder.h"

namespace flotilla::cuda {
namespace {

template <typename T>
__global__ void encoder_forward_kernel(T* out, const int32_t* inp, const T* wte, const T* wpe,
                                       const int32_t* pos, int Tn, int C, size_t total) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total; idx += stride) {
    const size_t bt = idx / static_cast<size_t>(C);
    const int c = static_cast<int>(idx % static_cast<size_t>(C));
    const int t = pos != nullptr ? pos[bt] : static_cast<int>(bt % static_cast<size_t>(Tn));
    const int32_t id = inp[bt];
    const float w = id >= 0 ? to_f(wte[static_cast<size_t>(id) * C + c]) : 0.0f;
    const float p = wpe != nullptr ? to_f(wpe[static_cast<size_t>(t) * C + c]) : 0.0f;
    out[idx] = from_f<T>(w + p);
  }
}

// 16-byte packs along C (C a multiple of the pack width, pointers aligned).
template <typename T>
__global__ void encoder_forward_packed(T* out, const int32_t* inp, const T* wte, const T* wpe,
                                       const int32_t* pos, int Tn, int C, size_t total_packs) {
  constexpr int K = Pack<T>::kN;
  const int cp = C / K;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total_packs;
       idx += stride) {
    const size_t bt = idx / static_cast<size_t>(cp);
    const int c = static_cast<int>(idx % static_cast<size_t>(cp)) * K;
    const int t = pos != nullptr ? pos[bt] : static_cast<int>(bt % static_cast<size_t>(Tn));
    const int32_t id = inp[bt];
    Pack<T> a{}, b{};
    if (id >= 0) a = load_pack(wte + static_cast<size_t>(id) * C + c);
    if (wpe != nullptr) b = load_pack(wpe + static_cast<size_t>(t) * C + c);
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < K; ++k)
      r.v[k] = from_f<T>((id >= 0 ? to_f(a.v[k]) : 0.0f) + (wpe != nullptr ? to_f(b.v[k]) : 0.0f));
    store_pack(out + bt * C + c, r);
  }
}

// dwpe[t, c] += sum_b dout[b, t, c], b in order.
template <typename T>
__global__ void wpe_backward_kernel(T* dwpe, const T* dout, int B, int Tn, int C) {
  const size_t tc = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t TC = static_cast<size_t>(Tn) * C;
  if (tc >= TC) return;
  float acc = 0.0f;
  for (int b = 0; b < B; ++b) acc += to_f(dout[static_cast<size_t>(b) * TC + tc]);
  dwpe[tc] = from_f<T>(to_f(dwpe[tc]) + acc);
}

// One block row per distinct token u: dwte[tokens[u], c] += sum of dout[positions[offsets[u]..offsets[u+1]),
// c].
template <typename T>
__global__ void wte_backward_kernel(T* dwte, const T* dout, const int32_t* tokens, const int32_t* offsets,
                                    const int32_t* positions, int C) {
  const int u = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int k = offsets[u]; k < offsets[u + 1]; ++k)
    acc += to_f(dout[static_cast<size_t>(positions[k]) * C + c]);
  T* row = dwte + static_cast<size_t>(tokens[u]) * C;
  row[c] = from_f<T>(to_f(row[c]) + acc);
}

}  // namespace

template <typename T>
void encoder_forward(Context& ctx, T* out, const int32_t* inp, const T* wte, const T* wpe, const int32_t* pos,
                     int B, int Tn, int C) {
  const size_t total = static_cast<size_t>(B) * Tn * C;
  if (total == 0) return;
  constexpr int K = Pack<T>::kN;
  if (C % K == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe))
    encoder_forward_packed<T>
        <<<grid_for(total / K, 256), 256, 0, ctx.stream()>>>(out, inp, wte, wpe, pos, Tn, C, total / K);
  else
    encoder_forward_kernel<T>
        <<<grid_for(total, 256), 256, 0, ctx.stream()>>>(out, inp, wte, wpe, pos, Tn, C, total);
  check_launch("encoder_forward");
}

namespace {

// dst[keys[r], c] += dout[r, c] over rows r with keys[r] >= 0 (device keys, N of them), grouped
// by key on the host in row order and summed by one block row per distinct key: deterministic.
template <typename T>
void scatter_rows(Context& ctx, T* dst, const T* dout, const int32_t* keys, size_t N, int C,
                  const char* what) {
  std::vector<int32_t> ids(N);
  check_cuda(cudaMemcpyAsync(ids.data(), keys, N * sizeof(int32_t), cudaMemcpyDeviceToHost, ctx.stream()),
             "cudaMemcpyAsync (embedding ids to host)");
  ctx.synchronize();
  std::vector<std::pair<int32_t, int32_t>> order;  // (key, row), keys held here only
  order.reserve(N);
  for (size_t i = 0; i < N; ++i)
    if (ids[i] >= 0) order.push_back({ids[i], static_cast<int32_t>(i)});
  std::sort(order.begin(), order.end());
  const size_t Nk = order.size();
  if (Nk == 0) return;
  std::vector<int32_t> host;  // [keys (U) | offsets (U+1) | rows (N)]
  host.reserve(3 * Nk + 1);
  std::vector<int32_t> offsets;
  for (size_t i = 0; i < Nk; ++i) {
    if (i == 0 || order[i].first != order[i - 1].first) {
      host.push_back(order[i].first);
      offsets.push_back(static_cast<int32_t>(i));
    }
  }
  const size_t U = host.size();
  offsets.push_back(static_cast<int32_t>(Nk));
  host.insert(host.end(), offsets.begin(), offsets.end());
  for (const auto& p : order) host.push_back(p.second);
  auto* dev = static_cast<int32_t*>(ctx.scratch(host.size() * sizeof(int32_t)));
  check_cuda(
      cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, ctx.stream()),
      "cudaMemcpyAsync (embedding buckets to device)");
  const dim3 grid(static_cast<unsigned>(U), static_cast<unsigned>((C + 127) / 128));
  wte_backward_kernel<T><<<grid, 128, 0, ctx.stream()>>>(dst, dout, dev, dev + U, dev + 2 * U + 1, C);
  check_launch(what);
  ctx.synchronize();  // `host` must outlive the copy
}

}  // namespace

template <typename T>
void encoder_backward(Context& ctx, T* dwte, T* dwpe, const T* dout, const int32_t* inp, const int32_t* pos,
                      int B, int Tn, int C) {
  const size_t N = static_cast<size_t>(B) * Tn;
  if (N == 0) return;
  const size_t TC = static_cast<size_t>(Tn) * C;
  if (dwpe != nullptr && pos == nullptr) {
    wpe_backward_kernel<T><<<grid_for(TC, 256, TC), 256, 0, ctx.stream()>>>(dwpe, dout, B, Tn, C);
    check_launch("encoder_backward (wpe)");
  } else if (dwpe != nullptr) {  // packed documents: positions repeat within a row
    scatter_rows<T>(ctx, dwpe, dout, pos, N, C, "encoder_backward (wpe)");
  }
  scatter_rows<T>(ctx, dwte, dout, inp, N, C, "encoder_backward (wte)");
}

template void encoder_forward<float>(Context&, float*, const int32_t*, const float*, const float*,
                                     const int32_t*, int, int, int);
template void encoder_forward<bf16>(Context&, bf16*, const int32_t*, const bf16*, const bf16*, const int32_t*,
                                    int, int, int);
template void encoder_backward<float>(Context&, float*, float*, const float*, const int32_t*, const int32_t*,
                                      int, int, int);
template void encoder_backward<bf16>(Context&, bf16*, bf16*, const bf16*, const int32_t*, const int32_t*, int,
                                     int, int);

}  // namespace flotilla::cuda
