// QLoRA's matmuls against a 4-bit NF4 weight on the CPU (Backend::nf4_matmul_* in backend.h; the
// format and the View in engine/core/nf4.h).
//
// Non-obvious decision: the weight is never dequantised whole. Each OpenMP thread dequantises one
// tile of it at a time into its own buffer and multiplies it with the engine's own single-threaded
// GEMM calls (the fp32 sgemm of blas.h, or oneDNN's bf16 gemm with set_matmul_dtype(kBF16)), so
// the product runs at the dense matmul's speed. The tile's shape follows what each GEMM needs
// (measured on a Sapphire Rapids core, 2048 tokens; nf4_matmul.cpp has the figures): fp32, 1 MiB
// (half the 2 MiB L2), 256 deep along the reduction and as wide as that allows (1024 W rows
// forward, columns backward), at the speed of the undivided product, since the sgemm repacks the
// activations once per call and so wants width, not depth. bf16, 2 MiB, 2048 deep (or all of a
// shallower W) and 512 or more wide: oneDNN's AMX kernel re-reads and re-writes its fp32 output
// block at every cut of the depth, so its tile is the L2's size (within 4% of undivided). The
// dequantisation is a table lookup, one permute per 16 values (AVX-512: 5.6 G values/s fp32,
// 12.8 G/s bf16 per core), small next to the GEMM at training's token counts.
//
// Threads split the output, never the reduction: ranges of W's rows (forward) or columns
// (backward) times ranges of the tokens, the grid chosen by a cost model of the GEMM's speed at
// each width and of the repeated dequantisation (a small W is shared by token ranges, a large one
// by W ranges). The split is a pure function of the shape and the thread count; in deterministic
// mode (set_thread_independent_gemm) of the shape alone, 16 items whatever the threads, like the
// dense matmuls (gemm_split.h), so the bits are the same for any thread count.
#pragma once

#include <string>

#include "engine/core/bf16.h"
#include "engine/core/nf4.h"

namespace flotilla::cpu {

// out (N rows, ldo apart; columns [0, w.rows)) = inp (N, w.cols) W^T + bias (w.rows, may be null).
// bf16: the products of bf16-rounded operands (W's values rounded from their exact fp32), summed
// in fp32, as matmul_forward_bf16 (the rounded activations in a scratch per calling thread).
void nf4_matmul_forward(float* out, int ldo, const float* inp, const nf4::View& w, const float* bias, int N,
                        bool bf16);

// dinp (N, w.cols) = dout (N rows, ldd apart; columns [0, w.rows)) W, or += when accumulate.
void nf4_matmul_backward(float* dinp, const float* dout, int ldd, const nf4::View& w, int N, bool accumulate,
                         bool bf16);

// out (w.rows x w.cols, row-major) = W in fp32 (bitsandbytes' values), threaded.
void nf4_dequantize(float* out, const nf4::View& w);

// Rows [r0, r1) and columns [c0, c1) (multiples of 64) of W into dst (ld apart): the fp32 values,
// or those rounded to bf16 (nearest even, as to_bf16). Single-threaded: the kernels' tile step.
void nf4_dequantize_tile(float* dst, int ld, const nf4::View& w, int r0, int r1, int c0, int c1);
void nf4_dequantize_tile(bf16_t* dst, int ld, const nf4::View& w, int r0, int r1, int c0, int c1);

// The instruction set the dequantisation runs with here: "avx512", "avx2" or "scalar" (follows
// FLOTILLA_CPU_PATH like the GEMMs).
const char* nf4_dequant_path();

// Throws Error(kInternal) naming the View's fault when it cannot be a slice of a module (cols not
// a multiple of 64, a null pointer, cb0 + cols / 64 beyond module_cblocks).
void check_nf4_view(const nf4::View& w, const char* who);

}  // namespace flotilla::cpu
