// The Llama architecture on the CPU against transformers: the three golden models (Llama with
// llama3 RoPE scaling and an untied head, fp32 sharded; Qwen2 with q/k/v biases, tied, bf16; Qwen3
// with q/k RMSNorm and head_dim 16 != C/H, tied, fp16) imported from their Hugging Face folders,
// then logits, masked and unmasked losses, gradients, three AdamW steps and packed documents
// (tests/tools/hf_golden.h). Also: the export writes a folder that imports back bitwise (fp32) or
// as the bf16 rounding of the parameters (bf16), with the source's tokenizer files carried over.
#include <filesystem>

#include "check.h"
#include "engine/interop/hf_checkpoint.h"
#include "hf_golden.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

void export_round_trip(const hf_golden::Golden& g) {
  const std::string out = std::string(FLOTILLA_TEST_TMP) + "/llama-golden-export-" + g.name;
  fs::remove_all(out);
  fs::create_directories(std::string(FLOTILLA_TEST_TMP));
  interop::HfExportOptions o;
  o.dtype = "fp32";
  o.source_folder = g.dir;
  interop::export_hf_folder(out, g.dims, g.full.data(), o);
  const std::vector<float> back = interop::import_hf_weights(out, g.dims);
  CHECK_MSG(back == g.full, "%s: fp32 export -> import is not bitwise identical", g.name.c_str());
  const interop::HfConfig a = interop::read_hf_config(g.dir), b = interop::read_hf_config(out);
  CHECK(a.model_type == b.model_type && a.tie_word_embeddings == b.tie_word_embeddings &&
        a.head_dim == b.head_dim && a.rope.type == b.rope.type && a.rope.theta == b.rope.theta &&
        a.qkv_bias == b.qkv_bias && a.qk_norm == b.qk_norm && a.num_key_value_heads == b.num_key_value_heads);
  CHECK(fs::exists(out + "/generation_config.json"));
  CHECK_MSG(!g.dims.tied_embeddings || interop::HfCheckpoint(out).find("lm_head.weight") == nullptr,
            "%s: a tied export must not store lm_head.weight", g.name.c_str());
  o.dtype = "bf16";
  interop::export_hf_folder(out, g.dims, g.full.data(), o);
  const std::vector<float> half = interop::import_hf_weights(out, g.dims);
  size_t wrong = 0;
  for (size_t i = 0; i < half.size(); ++i) wrong += half[i] != from_bf16(to_bf16(g.full[i])) ? 1 : 0;
  CHECK_MSG(wrong == 0, "%s: bf16 export differs from the rounded parameters in %zu values", g.name.c_str(),
            wrong);
  fs::remove_all(out);
}

}  // namespace

int main() {
  for (const char* name : {"llama", "qwen2", "qwen3"}) {
    const hf_golden::Golden g = hf_golden::load(name);
    Model m(g.dims);
    hf_golden::check_model(g, m);
    export_round_trip(g);
  }
  // A model with tensors its config does not have is refused, naming them.
  {
    const hf_golden::Golden g = hf_golden::load("qwen2");
    ModelDims wrong = g.dims;
    wrong.qkv_bias = false;  // the folder has q/k/v biases
    CHECK_THROWS(interop::import_hf_weights(g.dir, wrong), "self_attn.k_proj.bias");
  }
  return flotilla_test::summary("test_llama_golden");
}
