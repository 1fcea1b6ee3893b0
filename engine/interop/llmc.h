// llm.c model files (gpt2_124M.bin and what llm.c's trainers write).
//
//   header: 256 int32 (1024 bytes): [0] 20240326 magic, [1] version (3 = fp32, 5 = bf16),
//           [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp (padded vocab), rest 0
//   then all parameters in llm.c order: wte (Vp, C), wpe (maxT, C), ln1w, ln1b, qkvw, qkvb,
//   attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb — our layout exactly.
//
// Decision: export always writes version 3 (fp32) with our padded vocab as Vp, which is what
// llm.c's train_gpt2.c loads. Import also reads version 5 (bf16, written by llm.c's CUDA trainer)
// and a file whose Vp differs from ours (only the V real rows are copied; padded rows become zero).
// The file size is checked against the header before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace flotilla::interop {

inline constexpr int32_t kLlmcModelMagic = 20240326;
inline constexpr int32_t kLlmcVersionF32 = 3;
inline constexpr int32_t kLlmcVersionBf16 = 5;

struct LlmcHeader {
  int32_t version = kLlmcVersionF32;
  ModelDims dims;  // padded_vocab = the file's Vp
};

// Reads and checks the header and the file size. Throws Error(kData) naming the file and the fault.
LlmcHeader read_llmc_header(const std::string& path);

// Parameters in our padded layout for `d`; the file's dims must equal d's (Vp may differ).
std::vector<float> import_llmc(const std::string& path, const ModelDims& d);

// Writes version 3 (fp32) crash-safely (tmp file, fsync, rename).
void export_llmc(const std::string& path, const ModelDims& d, const float* params);

}  // namespace flotilla::interop
