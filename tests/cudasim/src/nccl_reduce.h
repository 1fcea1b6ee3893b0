// cudasim's NCCL reductions: dst = op over the ranks' buffers, in rank order, for every NCCL
// data type. 16-bit floats (fp16, bf16) accumulate in float and round once at the end, so the
// result is bit-identical on every rank and every run. Used by nccl_sim.cpp only.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <vector>

namespace cudasim_nccl {

// dst[0, len) = op over q of srcs[q][0, len) (elements of t), reduced in the order of srcs.
void reduce_into(char* dst, const std::vector<const char*>& srcs, size_t len, ncclDataType_t t,
                 ncclRedOp_t op);

}  // namespace cudasim_nccl
