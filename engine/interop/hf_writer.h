// Writes a Hugging Face model folder: safetensors weights (one model.safetensors, or shards
// model-00001-of-0000N.safetensors with model.safetensors.index.json), config and tokenizer files.
//
// Decision: the whole folder is built as a sibling DIR.tmp-<hex>/ (every file fsynced, then the
// folder), and only then swapped in for DIR with one renameat2(RENAME_EXCHANGE) (or, where the file
// system lacks it, DIR -> DIR.old-<hex> then DIR.tmp -> DIR); the old export is deleted last. A
// failure or a kill at any point leaves the previous export complete and untouched (at worst a stale
// DIR.tmp-*/ or DIR.old-*/ beside it). Because DIR is replaced as a whole, an existing DIR may hold only
// files an export writes (config, weights, index, tokenizer files): anything else is refused rather
// than deleted.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

namespace flotilla::interop {

// One tensor to write: its Hugging Face name and shape, and a producer that writes numel(shape) fp32
// values (row-major) to dst. Producers run one at a time, in order.
struct HfOutTensor {
  std::string name;            // e.g. "model.layers.0.mlp.down_proj.weight"
  std::vector<int64_t> shape;  // e.g. [C, F]
  std::function<void(float* dst)> produce;
};

// transformers' default max_shard_size "5GB" (decimal, as huggingface_hub counts it).
constexpr uint64_t kHfDefaultMaxShardBytes = 5'000'000'000ull;

struct HfWriteOptions {
  std::string dtype = "bf16";  // "bf16" (round to nearest even) or "fp32"
  // The weight files' name: STEM.safetensors, or STEM-0000k-of-0000n.safetensors shards with
  // STEM.safetensors.index.json ("adapter_model" for a PEFT adapter folder).
  std::string weights_stem = "model";
  uint64_t max_shard_bytes = kHfDefaultMaxShardBytes;  // tensor bytes per shard; more in all -> sharded
  std::map<std::string, std::string> text_files;  // e.g. {"config.json", ...}: written beside the weights
  std::string tokenizer_dir;  // when set, copy_tokenizer_files(tokenizer_dir, <new folder>)
  const CheckpointFaultHook* fault_hook = nullptr;  // tests: "write <file>", "fsync <file>", "close <file>",
                                                    // "fsync dir", "swap", "fsync parent"
};

struct HfWriteResult {
  std::vector<std::string> files;  // everything in the new DIR, sorted
  uint64_t tensor_bytes = 0;       // the index's metadata.total_size
  int shards = 1;
};

// Writes `tensors` (in order; safetensors metadata {"format": "pt"}) and the option's files to `dir`,
// crash-safely as described above. Shards are filled greedily in order; a tensor larger than
// max_shard_bytes gets a shard of its own. Throws Error(kUsage) for a bad request (dtype, duplicate or
// empty tensor name, an existing DIR holding foreign files: nothing is changed) and Error(kIo) for a
// failed write (the previous DIR is untouched).
HfWriteResult write_hf_checkpoint(const std::string& dir, const std::vector<HfOutTensor>& tensors,
                                  const HfWriteOptions& options);
HfWriteResult write_hf_checkpoint(const std::string& dir, const std::vector<HfOutTensor>& tensors,
                                  const std::string& dtype = "bf16",
                                  uint64_t max_shard_bytes = kHfDefaultMaxShardBytes);

// Copies those of tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json,
// merges.txt, added_tokens.json, chat_template.jinja and tokenizer.model (SentencePiece models such as
// Mistral's) that exist in src_dir into dst_dir, each crash-safely (temporary file, fsync, rename).
// Returns the names copied, in that order. Throws Error(kIo) naming the file on failure.
std::vector<std::string> copy_tokenizer_files(const std::string& src_dir, const std::string& dst_dir);

}  // namespace flotilla::interop
