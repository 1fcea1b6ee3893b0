// Hugging Face folders saved by transformers with a bitsandbytes 4-bit quantization_config
// (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", ...).save_pretrained).
//
// config.json carries "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true,
// "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true, "bnb_4bit_compute_dtype":
// "float32", "bnb_4bit_quant_storage": "uint8", ...}. Each quantised Linear weight W ([out, in])
// is stored as these tensors (the other tensors, embedding, norms, lm_head, are stored as usual):
//   W                                   U8 [(out*in + 1) / 2, 1]  the packed codes (engine/core/nf4.h)
//   W.absmax                            U8 [blocks] (double quant) or F32 [blocks]
//   W.quant_map                         F32 [16]   the NF4 code table
//   W.nested_absmax                     F32 [ceil(blocks / 256)]  (double quant)
//   W.nested_quant_map                  F32 [256]  the dynamic map (double quant)
//   W.quant_state.bitsandbytes__nf4     U8 [n]     UTF-8 JSON: quant_type, blocksize, dtype, shape,
//                                                  and with double quant nested_blocksize,
//                                                  nested_dtype, nested_offset (the offset)
// Decision: everything that the engine's NF4 format cannot hold bit for bit is refused, naming the
// key or tensor and the file: 8-bit (LLM.int8) folders, fp4, a block size other than 64 (or 256 for
// the nested blocks), a quant storage other than uint8, quant maps that differ from ours, and any
// missing or malformed quant-state tensor. A folder so refused can be replaced by its unquantised
// original, which the engine quantises at load (lora.base_quant = "nf4") to the same bytes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/core/nf4.h"
#include "engine/interop/hf_checkpoint.h"

namespace flotilla::interop {

// What config.json's quantization_config says (the keys the engine reads).
struct BnbQuantConfig {
  std::string quant_type = "nf4";
  bool double_quant = false;              // bnb_4bit_use_double_quant (bitsandbytes' default: false)
  std::string compute_dtype = "float32";  // bnb_4bit_compute_dtype: what bitsandbytes computes in
  std::string quant_storage = "uint8";
  int blocksize = 64;
  std::string config_path;  // FOLDER/config.json, for messages
};

// True when FOLDER/config.json has a quantization_config (of any kind): such a folder must go
// through read_bnb_config, which accepts only bitsandbytes 4-bit NF4. False when there is no
// config.json or no quantization_config. Never throws for a readable folder; a config.json that is
// not JSON throws Error(kData) naming it.
bool has_quantization_config(const std::string& folder);
// True when FOLDER/config.json's quantization_config is bitsandbytes with load_in_4bit (whatever
// its quant type: read_bnb_config refuses fp4 and the rest).
bool is_bnb_4bit_folder(const std::string& folder);

// Reads and validates FOLDER/config.json's quantization_config. Throws Error(kData) naming the key
// and the file, and saying what to do, for anything the engine cannot load bit for bit.
BnbQuantConfig read_bnb_config(const std::string& folder);
// The same on config.json's text; `path` names it in errors.
BnbQuantConfig parse_bnb_config(const std::string& json_text, const std::string& path);

// A bitsandbytes 4-bit folder, read weight by weight. Opens the safetensors index once.
class BnbFolder {
 public:
  // Reads the config (read_bnb_config) and opens the folder's weights (HfCheckpoint).
  explicit BnbFolder(const std::string& folder);
  // The same over a checkpoint the caller already holds (its unread() then counts the quant-state
  // tensors this reader consumes as read). `ckpt` must outlive this object.
  BnbFolder(const std::string& folder, const HfCheckpoint& ckpt);
  ~BnbFolder();

  const BnbQuantConfig& config() const { return config_; }
  const HfCheckpoint& checkpoint() const { return *ckpt_; }

  // True when tensor `weight` (e.g. "model.layers.0.self_attn.q_proj.weight") is stored quantised,
  // i.e. the folder has its quant-state tensor.
  bool quantized(const std::string& weight) const;
  // Every quantised weight's name, sorted.
  std::vector<std::string> quantized_weights() const;

  // Weight `weight` as stored: the packed codes, the block absmaxes or their 8-bit codes, the group
  // absmaxes and the offset. `expected_shape` (when not empty) must equal the quant state's shape.
  // Checks the stored quant maps equal kCode / dynamic_map() bit for bit. Throws Error(kData) naming
  // the tensor and the file for a missing, mis-shaped or malformed tensor. Marks the tensors read.
  nf4::Quantized read(const std::string& weight, const std::vector<int64_t>& expected_shape = {}) const;
  // For a weight that is not quantized(): throws Error(kData) naming its missing quant-state tensor
  // when it is nevertheless stored packed (uint8) or with block absmaxes, i.e. its state was lost.
  void refuse_without_state(const std::string& weight) const;

 private:
  std::string folder_;
  BnbQuantConfig config_;
  std::unique_ptr<HfCheckpoint> owned_;
  const HfCheckpoint* ckpt_ = nullptr;
};

// One weight of a bitsandbytes 4-bit folder (opens the folder for this one read).
nf4::Quantized read_bnb_weight(const std::string& folder, const std::string& weight);

}  // namespace flotilla::interop
