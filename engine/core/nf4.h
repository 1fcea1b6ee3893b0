// QLoRA's 4-bit NormalFloat base (Dettmers et al. 2023), bit for bit the format bitsandbytes writes
// with quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True) (docs/qlora.md).
//
// A tensor is flattened row-major and cut into blocks of 64 elements (the last may be short). Each
// block keeps its absmax; each element becomes the index (0..15) of the nearest NF4 code value to
// x / absmax, two per byte, the earlier element in the HIGH nibble. With double quantisation the
// block absmaxes (fp32) have their mean (`offset`) subtracted and are quantised again to 8 bits with
// bitsandbytes' signed dynamic map, in blocks of 256 absmaxes, each with its own fp32 absmax.
//
// Dequantisation, with exactly bitsandbytes' rounding (two separate fp32 operations, never a fused
// multiply-add, which rounds once and gives other bits):
//   absmax(b) = dynamic_map[absmax_q[b]] * absmax2[b / 256]  (fp32 multiply), then + offset (fp32 add)
//   w[i]      = kCode[code(i)] * absmax(i / 64)               (fp32), then rounded to the compute dtype
//
// Non-obvious decision: the engine's kernels read a quantised weight through a View of a
// [rows x cols] slice of one module's [out x in] matrix (a tensor-parallel rank's rows or columns),
// whose blocks never cross a row (the module's `in` and the slice's cols are multiples of 64). The
// 8-bit absmax of each slice block stays 8-bit in memory (QLoRA's 4.127 bits per parameter), and its
// group is found from the block's index in the whole module, so a slice needs no re-quantisation and
// every rank holds exactly the bits bitsandbytes would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define FLOTILLA_NF4_HD __host__ __device__ __forceinline__
#else
#define FLOTILLA_NF4_HD inline
#endif

namespace flotilla::nf4 {

constexpr int kBlock = 64;   // elements per absmax block
constexpr int kGroup = 256;  // block absmaxes per double-quantisation block

// The 16 NF4 code values (bitsandbytes' table, index 0 = -1, 7 = 0, 15 = 1).
extern const float kCode[16];
// bitsandbytes' signed dynamic 8-bit map (create_dynamic_map(signed=True)): the nested quant map.
const float* dynamic_map();  // 256 floats

// One quantised tensor as bitsandbytes stores it.
struct Quantized {
  std::vector<int64_t> shape;  // the original tensor's
  int64_t numel = 0;
  std::vector<uint8_t> packed;  // (numel + 1) / 2 bytes, element 2i in the high nibble, 2i+1 in the low
  bool double_quant = true;
  std::vector<float> absmax;      // !double_quant: one fp32 per block (ceil(numel / 64))
  std::vector<uint8_t> absmax_q;  // double_quant: one code per block, into dynamic_map()
  std::vector<float> absmax2;     // double_quant: one per 256 blocks (ceil(blocks / 256))
  float offset = 0;               // double_quant: the mean block absmax, subtracted before quantising

  int64_t blocks() const { return (numel + kBlock - 1) / kBlock; }
  size_t bytes() const;                 // what the quantised data occupies
  float block_absmax(int64_t b) const;  // the dequantised absmax of block b
};

// Quantises numel fp32 values (a bf16/fp16 tensor widened exactly) as bitsandbytes does.
Quantized quantize(const float* x, int64_t numel, std::vector<int64_t> shape, bool double_quant);
// out[0..numel) = the fp32 values the tensor stands for (before rounding to a compute dtype).
void dequantize(const Quantized& q, float* out);

// A [rows x cols] slice of one module's quantised [out x in] weight, as a kernel reads it: the
// slice's rows are module rows row0 .. row0 + rows, its columns module column blocks cb0 ..
// cb0 + cols / 64. Pointers are in the memory of the backend that runs the kernel.
struct View {
  int rows = 0, cols = 0;             // cols % 64 == 0
  const uint8_t* packed = nullptr;    // rows * cols / 2 bytes, slice-local row-major
  const uint8_t* absmax_q = nullptr;  // double quant: rows * cols / 64 codes, slice-local row-major
  const float* absmax = nullptr;      // no double quant: rows * cols / 64 fp32 (absmax_q unused)
  const float* absmax2 = nullptr;     // double quant: the WHOLE module's group absmaxes
  const float* code2 = nullptr;       // double quant: dynamic_map() (256 floats)
  float offset = 0;                   // double quant: the module's offset
  int64_t row0 = 0;                   // the slice's first row in the module
  int cb0 = 0;                        // the slice's first column block in the module
  int module_cblocks = 0;             // the module's in / 64
};

// The dequantised absmax of slice block (r, cb), with bitsandbytes' rounding (see the top).
FLOTILLA_NF4_HD float view_absmax(const View& v, int r, int cb) {
  const int64_t local = static_cast<int64_t>(r) * (v.cols / kBlock) + cb;
  if (v.absmax_q == nullptr) return v.absmax[local];
  const int64_t global = (v.row0 + r) * static_cast<int64_t>(v.module_cblocks) + v.cb0 + cb;
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(v.code2[v.absmax_q[local]], v.absmax2[global / kGroup]), v.offset);
#else
  volatile float scaled = v.code2[v.absmax_q[local]] * v.absmax2[global / kGroup];  // no FMA
  return scaled + v.offset;
#endif
}

// The 4-bit code of slice element (r, c).
FLOTILLA_NF4_HD int view_code(const View& v, int r, int c) {
  const int64_t i = static_cast<int64_t>(r) * v.cols + c;
  const uint8_t byte = v.packed[i >> 1];
  return (i & 1) ? (byte & 0x0F) : (byte >> 4);
}

}  // namespace flotilla::nf4
