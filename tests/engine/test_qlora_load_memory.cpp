// The peak host memory of loading a QLoRA base (interop::load_hf_base) from a real-shaped folder:
// a SmolLM2-135M-shaped bf16 Hugging Face folder (30 layers, C 576, 9 heads of 64, 3 K/V heads,
// F 1536, vocabulary 49152, tied), written by the engine's exporter from a random initialisation.
// The loader streams it tensor by tensor and quantises each projection as it is read, so its peak
// must stay near the quantised base + the non-projection tensors (fp32) + one tensor in flight, far
// below the whole model in fp32 (what import_hf_weights, LoRA's loader, holds). Measured in a child
// process with the kernel's high-water mark reset just before the load (/proc/self/clear_refs,
// VmHWM), so nothing the parent allocated to write the folder counts. Prints the figures
// docs/qlora.md quotes.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/interop/hf_model.h"
#include "engine/model/base_weights.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

ModelDims smollm2_135m() {
  ModelDims d;
  d.arch = Arch::kLlama;
  d.n_layer = 30;
  d.n_head = 9;
  d.n_kv_head = 3;
  d.head_dim = 64;
  d.n_embd = 576;
  d.ffn_dim = 1536;
  d.vocab_size = 49152;
  d.padded_vocab = pad_vocab(49152);
  d.max_seq_len = 2048;
  d.norm_eps = 1e-5f;
  d.rope_theta = 100000;
  d.tied_embeddings = true;
  return d;
}

// kB from /proc/self/status ("VmHWM:", "VmRSS:").
long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::string(key).size()));
  return -1;
}

bool reset_hwm() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f);
}

struct Figures {
  double base_mb = 0, peak_mb = 0, quant_mb = 0, dense_mb = 0, seconds = 0;
};

// The child: loads the folder one way ("qlora": load_hf_base nf4 + double quant, "lora":
// import_hf_weights) with the high-water mark reset just before, and prints its figures.
int child(const std::string& how, const std::string& dir) {
  const ModelDims d = smollm2_135m();
  Figures f;
  const bool reset = reset_hwm();
  f.base_mb = static_cast<double>(status_kb("VmRSS:")) / 1024.0;
  const auto t0 = std::chrono::steady_clock::now();
  if (how == "qlora") {
    const BaseWeights b = interop::load_hf_base(dir, d, true, true);
    f.quant_mb = static_cast<double>(b.quantized_bytes()) / 1048576.0;
    f.dense_mb = static_cast<double>(b.dense_bytes()) / 1048576.0;
  } else {
    (void)interop::import_hf_weights(dir, d);
  }
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.peak_mb = reset ? static_cast<double>(status_kb("VmHWM:")) / 1024.0 : -1;
  std::printf("FIGURES %.6f %.6f %.6f %.6f %.6f\n", f.base_mb, f.peak_mb, f.quant_mb, f.dense_mb, f.seconds);
  return 0;
}

// Runs this binary again as the child (a fresh process: OpenMP's threads do not survive a fork).
Figures measure(const std::string& how, const std::string& dir) {
  const std::string cmd = "/proc/" + std::to_string(getpid()) + "/exe --child " + how + " '" + dir + "'";
  Figures f;
  FILE* p = popen(cmd.c_str(), "r");
  CHECK(p != nullptr);
  if (p == nullptr) return f;
  char line[512];
  bool got = false;
  while (std::fgets(line, sizeof line, p) != nullptr)
    if (std::sscanf(line, "FIGURES %lf %lf %lf %lf %lf", &f.base_mb, &f.peak_mb, &f.quant_mb, &f.dense_mb,
                    &f.seconds) == 5)
      got = true;
  CHECK_MSG(pclose(p) == 0 && got, "the %s child failed", how.c_str());
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--child") return child(argv[2], argv[3]);
  const ModelDims d = smollm2_135m();
  const ParamLayout layout(d);
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/qlora-load-memory";
  fs::remove_all(dir);
  {
    std::vector<float> full(layout.full_params());
    Model m(d);
    m.init_random(3);
    m.params_to_full(full.data());
    interop::HfExportOptions o;
    o.dtype = "bf16";
    interop::export_hf_folder(dir, d, full.data(), o);
  }
  const Figures f = measure("qlora", dir);
  // LoRA's loader for contrast: the whole model in fp32.
  const Figures lora = measure("lora", dir);
  const double full_mb = static_cast<double>(layout.full_params()) * 4 / 1048576.0;
  size_t proj = 0;
  for (int i = 0; i < layout.size(); ++i)
    if (is_projection_tensor(i)) proj += layout.full_size(i);
  const double largest_mb = 1536.0 * 576 * 4 / 1048576.0;  // gate_proj in fp32, the largest module
  const double grew = f.peak_mb - f.base_mb;
  std::printf(
      "SmolLM2-135M-shaped bf16 folder (%zu projection weights of %zu): load_hf_base nf4 + double quant in "
      "%.1f s\n"
      "  quantised projections %.1f MB (%.3f bits per weight), other tensors fp32 %.1f MB, largest module "
      "fp32 "
      "%.1f MB\n"
      "  peak RSS growth while loading %.1f MB (process %.1f -> %.1f MB); the whole base in fp32: %.1f MB\n"
      "  LoRA's import_hf_weights of the same folder: peak RSS growth %.1f MB in %.1f s\n",
      proj, layout.full_params(), f.seconds, f.quant_mb,
      f.quant_mb * 1048576.0 * 8 / static_cast<double>(proj), f.dense_mb, largest_mb, grew, f.base_mb,
      f.peak_mb, full_mb, lora.peak_mb - lora.base_mb, lora.seconds);
  CHECK_MSG(f.peak_mb > 0, "VmHWM could not be reset (/proc/self/clear_refs)");
  // What must be held, plus one module in flight and room for the allocator and page cache.
  CHECK_MSG(grew < f.quant_mb + f.dense_mb + 2 * largest_mb + 48, "peak growth %.1f MB > %.1f + %.1f + slack",
            grew, f.quant_mb, f.dense_mb);
  CHECK_MSG(grew < 0.5 * full_mb, "peak growth %.1f MB is not far below the fp32 base's %.1f MB", grew,
            full_mb);
  fs::remove_all(dir);
  return flotilla_test::summary("qlora_load_memory");
}
