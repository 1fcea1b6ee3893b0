// A Hugging Face model folder's weights: model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {tensor: file}}).
//
// Decision: the index and the shards must agree exactly before any tensor is read: every shard the
// index names exists, every tensor of the index is in the shard it names, and every tensor of every
// shard is listed there (a tensor in two shards is reported as a duplicate). A folder left half
// copied or mixed from two exports fails up front with the file and tensor named, instead of loading
// stale weights. Tensors are read through each file's read-only memory map straight into the
// caller's buffer (SafetensorsFile::read_f32_into), so no second copy of the checkpoint exists.
// Like transformers, a folder with both model.safetensors and an index reads model.safetensors.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/interop/safetensors.h"

namespace flotilla::interop {

// One tensor of the checkpoint.
struct HfTensorInfo {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::string dtype;           // safetensors dtype: "BF16", "F16", "F32", ...
  std::vector<int64_t> shape;  // as stored, e.g. [H·d, C] for q_proj
  std::string file;            // file name inside the folder, e.g. "model-00001-of-00002.safetensors"
  uint64_t bytes = 0;          // stored size
};

// True for tensors a loader may leave unread without complaint: `*.rotary_emb.inv_freq` (a buffer
// old converters saved; RoPE frequencies come from config.json).
bool is_ignorable_hf_tensor(const std::string& name);

class HfCheckpoint {
 public:
  // `path`: the model folder, or its model.safetensors / model.safetensors.index.json. Opens and
  // validates every file (headers only; no tensor data is read). Throws Error(kData) naming the
  // folder, file and tensor at fault and saying what to do.
  explicit HfCheckpoint(const std::string& path);
  ~HfCheckpoint();
  HfCheckpoint(const HfCheckpoint&) = delete;
  HfCheckpoint& operator=(const HfCheckpoint&) = delete;

  const std::string& folder() const { return folder_; }
  bool sharded() const { return sharded_; }
  const std::vector<std::string>& files() const { return file_names_; }  // safetensors files, sorted
  const std::vector<HfTensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const HfTensorInfo* find(const std::string& name) const;               // null when absent

  // Converts tensor `name` (BF16, F16, F32 or F64) to fp32 into dst, which holds numel(expected_shape)
  // floats. Throws Error(kData) when the tensor is missing or its shape is not expected_shape (the
  // message names the tensor, the file, the expected and the found shape). Marks the tensor read.
  // Thread-safe for distinct or equal names.
  void read_f32(const std::string& name, float* dst, const std::vector<int64_t>& expected_shape) const;

  // The stored bytes of tensor `name` (any dtype; e.g. a bitsandbytes U8 weight or quant state).
  // Throws Error(kData) naming the folder and tensor when it is missing. Marks the tensor read.
  std::vector<uint8_t> read_raw(const std::string& name) const;

  // Marks a tensor as consumed without reading it (e.g. a tied lm_head.weight the caller skips).
  void mark_read(const std::string& name) const;

  // Tensors neither read nor marked, sorted, leaving out is_ignorable_hf_tensor() names. A loader
  // calls this after reading everything it expects and refuses the folder if it is not empty.
  std::vector<std::string> unread() const;

  // One paragraph for logs and error messages: folder, layout, files, tensor count, dtypes and bytes,
  // e.g. "/m: 2 shards (model-00001-of-00002.safetensors, ...), 146 tensors (BF16 146), 2.47 GB".
  std::string describe() const;

 private:
  size_t index_of(const std::string& name) const;  // tensors_.size() when absent

  std::string folder_;
  bool sharded_ = false;
  std::vector<std::string> file_names_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // parallel to file_names_
  std::vector<HfTensorInfo> tensors_;
  std::vector<const SafetensorsEntry*> entries_;  // parallel to tensors_
  std::vector<size_t> file_of_;                   // parallel to tensors_: index into files_
  std::unique_ptr<std::atomic<bool>[]> read_;     // parallel to tensors_
};

}  // namespace flotilla::interop
