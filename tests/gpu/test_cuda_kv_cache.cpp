// The KV cache on the GPU: the CUDA attention_cached_forward against its CPU twin (cache writes at
// each token's position in cache row row0 + b, then attention over positions 0..pos of the row), fp32
// and bf16 storage, a prefill chunk at an offset and a decode step; then the Model on the CUDA backend:
// generate() with the cache gives the recompute path's tokens, token for token (Llama with grouped-query
// attention and qk-norm, GPT-2; fp32 greedy and seeded sampling, bf16 greedy), rows past max_seq_len
// included; and the golden Hugging Face models loaded onto the device (load_for_inference, device
// "cuda") give transformers' greedy ids. Skips without a device (the CUDA simulator, tests/cudasim, is one).
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/cpu/attention.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/infer/generate.h"
#include "engine/infer/load.h"
#include "engine/model/gpt.h"
#include "engine/model/model_dims.h"
#include "gpu_test_util.h"

using namespace flotilla;
using gpu_test::bf16;
using gpu_test::DeviceBuf;

namespace {

template <typename T>
void kernel_matches_cpu(Backend& gpu, int T_new, const std::vector<int32_t>& pos, const char* what) {
  const int B = 2, NH = 4, NKV = 2, HD = 16, rows = 3, max_len = 12, row0 = 1;
  const bool half = sizeof(T) == 2;
  const size_t ld = static_cast<size_t>(NH + 2 * NKV) * HD, ldc = static_cast<size_t>(NKV) * HD;
  std::vector<float> qkv = gpu_test::random_vec(B * T_new * ld, 5, 1.0f, half);
  std::vector<float> kc = gpu_test::random_vec(rows * max_len * ldc, 6, 1.0f, half);
  std::vector<float> vc = gpu_test::random_vec(rows * max_len * ldc, 7, 1.0f, half);
  std::vector<float> out(static_cast<size_t>(B) * T_new * NH * HD), kc_want = kc, vc_want = vc;
  cpu::attention_cached_forward(out.data(), qkv.data(), kc_want.data(), vc_want.data(), pos.data(), row0, B,
                                T_new, NH, NKV, HD, max_len);
  DeviceBuf<T> dq(qkv), dk(kc), dv(vc), dout(out.size());
  std::unique_ptr<DeviceBuf<int32_t>> dpos(gpu_test::new_ids(pos));
  auto& cb = static_cast<cuda::CudaBackend&>(gpu);
  cuda::attention_cached_forward(cb.context(), dout.get(), dq.get(), dk.get(), dv.get(), dpos->get(), row0, B,
                                 T_new, NH, NKV, HD, max_len);
  gpu.synchronize();
  gpu_test::compare<T>((std::string(what) + " out").c_str(), dout.download(), out);
  gpu_test::compare<T>((std::string(what) + " k cache").c_str(), dk.download(), kc_want);
  gpu_test::compare<T>((std::string(what) + " v cache").c_str(), dv.download(), vc_want);
}

ModelDims dims_of(const std::vector<std::string>& overrides) {
  RunConfig c;
  apply_overrides(c, overrides);
  validate_or_throw(c);
  return dims_from_config(c.model);
}

void generate_matches_recompute(Backend& gpu, const ModelDims& d, DType dtype, const char* what) {
  ModelOptions o;
  o.dtype = dtype;
  Model m(d, {}, &gpu, o);
  m.init_random(11);
  m.set_training(false);
  Rng r(4);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t n : {3u, 11u, 30u}) {  // the last runs past max_seq_len (32)
    prompts.emplace_back(n);
    for (auto& x : prompts.back()) x = static_cast<int32_t>(r.below(static_cast<uint64_t>(d.vocab_size)));
  }
  for (float temperature : {0.0f, 0.9f}) {
    if (dtype == DType::kBF16 && temperature > 0) continue;
    infer::GenerateOptions g;
    g.max_tokens = 6;
    g.temperature = temperature;
    g.top_k = 40;
    g.seed = 3;
    g.use_cache = false;
    const auto want = infer::generate(m, prompts, g);
    g.use_cache = true;
    const auto got = infer::generate(m, prompts, g);
    for (size_t k = 0; k < prompts.size(); ++k)
      CHECK_MSG(got[k].ids == want[k].ids, "%s, temperature %g, row %zu: cached tokens differ", what,
                static_cast<double>(temperature), k);
  }
}

// load_for_inference(device "cuda") on the golden Hugging Face folders: transformers' greedy ids
// (tests/engine/golden/generate/goldens.json), with the cache.
void goldens_on_the_device() {
  const std::string golden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden";
  std::ifstream in(golden + "/generate/goldens.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  for (const auto& [name, entry] : g["models"].items()) {
    infer::LoadRequest req;
    req.hf_model = golden + "/hf/" + name;
    req.device = "cuda";
    infer::LoadedModel lm = infer::load_for_inference(req);
    CHECK(std::string(lm.model->backend().name()) == "cuda");
    infer::GenerateOptions o;
    o.max_tokens = g["max_new_tokens"];
    o.temperature = 0;
    const auto got = infer::generate(*lm.model, entry["prompts"].get<std::vector<std::vector<int32_t>>>(), o);
    for (size_t k = 0; k < got.size(); ++k)
      CHECK_MSG(got[k].ids == entry["greedy"][k].get<std::vector<int32_t>>(), "%s prompt %zu on the device",
                name.c_str(), k);
  }
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("test_cuda_kv_cache");
  Backend& gpu = get_backend("cuda");
  // A prefill chunk of 4 at positions 3..6 of row 0 (0..2 already cached) and 0..3 of row 1; a decode step.
  const std::vector<int32_t> chunk = {3, 4, 5, 6, 0, 1, 2, 3}, step = {9, 2};
  kernel_matches_cpu<float>(gpu, 4, chunk, "prefill chunk");
  kernel_matches_cpu<float>(gpu, 1, step, "decode step");
  kernel_matches_cpu<bf16>(gpu, 4, chunk, "prefill chunk");
  kernel_matches_cpu<bf16>(gpu, 1, step, "decode step");
  const ModelDims llama =
      dims_of({"model.preset=custom", "model.arch=llama", "model.n_layer=2", "model.n_head=4",
               "model.n_kv_head=2", "model.n_embd=64", "model.ffn_dim=96", "model.vocab_size=300",
               "model.max_seq_len=32", "train.seq_len=32", "model.qk_norm=true"});
  const ModelDims gpt2 =
      dims_of({"model.preset=custom", "model.arch=gpt2", "model.n_layer=2", "model.n_head=4",
               "model.n_embd=64", "model.vocab_size=300", "model.max_seq_len=32", "train.seq_len=32"});
  generate_matches_recompute(gpu, llama, DType::kF32, "llama fp32");
  generate_matches_recompute(gpu, gpt2, DType::kF32, "gpt2 fp32");
  generate_matches_recompute(gpu, llama, DType::kBF16, "llama bf16");
  goldens_on_the_device();
  return flotilla_test::summary("test_cuda_kv_cache");
}
