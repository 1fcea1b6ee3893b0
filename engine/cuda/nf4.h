// QLoRA's matmuls against a 4-bit NF4 weight on the GPU; CPU twin: engine/cpu/nf4_matmul.h (the
// Backend families nf4_matmul_forward / nf4_matmul_backward / nf4_dequantize of backend.h, the
// format and the View in engine/core/nf4.h, whose pointers are device memory here).
//
// Non-obvious decision: a tiled SIMT kernel (128 x 128 output tiles, 8 x 8 per thread, fp32 FMA),
// not tensor cores. The CUDA simulator every test runs on has no WMMA/mma, and no GPU has run this
// code yet, so a tensor-core path could not be checked against its CPU twin anywhere; the SIMT
// kernel computes what a tensor-core one would (bf16 products are exact in fp32, summed in fp32)
// and the simulator checks its indexing, barriers and rounding against the CPU twin. Each 32-deep
// step dequantises its slab of W (128 rows or columns x 32, bitsandbytes' rounding: view_absmax's
// __fmul_rn/__fadd_rn, the code times absmax as one __fmul_rn, then rounded to bf16 for bf16
// storage) into shared memory beside the activation slab, so W never exists dequantised in global
// memory. No atomics and no split of the reduction: every run gives the same bits.
#pragma once

#include "engine/core/nf4.h"
#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (N rows, ldo apart; columns [0, w.rows)) = inp (N, w.cols) W^T + bias (may be null).
template <typename T>
void nf4_matmul_forward(Context& ctx, T* out, int ldo, const T* inp, const nf4::View& w, const T* bias,
                        int N);
// dinp (N, w.cols) = dout (N rows, ldd apart) W, or += (in fp32, then rounded) when accumulate.
template <typename T>
void nf4_matmul_backward(Context& ctx, T* dinp, const T* dout, int ldd, const nf4::View& w, int N,
                         bool accumulate);
// out (w.rows x w.cols) = W, rounded to T.
template <typename T>
void nf4_dequantize(Context& ctx, T* out, const nf4::View& w);

}  // namespace flotilla::cuda
