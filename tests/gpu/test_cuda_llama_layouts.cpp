// The Llama architecture trained on GPUs through the real worker (`train`, `launch`), every
// layout against one GPU on the same global batch: dp = 2 (the overlapped bucket all-reduce), dp = 2
// with ZeRO-2, tp = 2 (whole K/V heads per rank, the q/k-norm weight gradient summed over the TP
// group), pp = 2 (1F1B, an untied LM head on the last stage only), each within 1e-4 relative per
// step in fp32; one GPU against the CPU model within 2e-3 (kernel sums in another order); bf16 on
// one GPU and with tp = 2 within 3e-2 of each other. The shape uses every optional part at once:
// grouped-query attention, head_dim 16 != C/H, q/k/v biases, per-head q/k RMSNorm, an untied head
// and llama3 RoPE scaling. Needs two GPUs (always available under the CUDA simulator).
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_train_runs.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

constexpr double kFp32Rel = 1e-4, kCpuRel = 2e-3, kBf16Rel = 3e-2;
constexpr int kSteps = 6;

std::string config_text() {
  return R"(
[run]
name = "cuda-llama"
seed = 7
device = "cuda"
[model]
preset = "custom"
arch = "llama"
n_layer = 2
n_head = 4
n_kv_head = 2
head_dim = 16
n_embd = 64
ffn_dim = 96
vocab_size = 300
max_seq_len = 64
qkv_bias = true
qk_norm = true
tie_embeddings = false
rope_theta = 500000.0
rope_scaling = "llama3"
rope_factor = 8.0
rope_original_max_position = 32
[data]
source = "synthetic"
synthetic_tokens = 60000
[train]
steps = 6
micro_batch = 4
seq_len = 32
global_batch_tokens = 128
[optim]
lr = 0.003
warmup_steps = 2
[parallel]
backend = "nccl"
timeout_s = 120
[checkpoint]
every = 0
)";
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_llama_layouts");
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::printf("SKIP: the Llama layouts on GPUs need two devices (%d visible)\n", devices);
    return flotilla_test::summary("gpu_cuda_llama_layouts");
  }
  const std::string dir = fresh_dir("gpu-cuda-llama-layouts");
  const std::string cfg = dir + "/run.toml";
  write_text(cfg, config_text());

  gpu_test::train_single(cfg, dir + "/one", {});
  gpu_test::train_single(cfg, dir + "/cpu", {"--set", "run.device=cpu", "--set", "parallel.backend=auto"});
  const auto one = step_losses(dir + "/one");
  gpu_test::compare_losses("fp32: 1 GPU vs the CPU model", one, step_losses(dir + "/cpu"), kCpuRel, kSteps);

  gpu_test::train_ranks(2, cfg, dir + "/dp2", {"--set", "parallel.dp=2", "--set", "train.micro_batch=2"});
  gpu_test::compare_losses("fp32: dp=2 vs 1 GPU", step_losses(dir + "/dp2"), one, kFp32Rel, kSteps);
  gpu_test::train_ranks(
      2, cfg, dir + "/dp2-zero2",
      {"--set", "parallel.dp=2", "--set", "train.micro_batch=1", "--set", "parallel.zero=2"});
  gpu_test::compare_losses("fp32: dp=2 ZeRO-2 (2 micro-steps) vs 1 GPU", step_losses(dir + "/dp2-zero2"), one,
                           kFp32Rel, kSteps);
  gpu_test::train_ranks(2, cfg, dir + "/tp2", {"--set", "parallel.tp=2"});
  gpu_test::compare_losses("fp32: tp=2 vs 1 GPU", step_losses(dir + "/tp2"), one, kFp32Rel, kSteps);
  gpu_test::train_ranks(
      2, cfg, dir + "/pp2",
      {"--set", "parallel.pp=2", "--set", "parallel.micro_batches=2", "--set", "train.micro_batch=2"});
  gpu_test::compare_losses("fp32: pp=2 (1F1B, untied head) vs 1 GPU", step_losses(dir + "/pp2"), one,
                           kFp32Rel, kSteps);

  gpu_test::train_single(cfg, dir + "/one-bf16", {"--set", "train.dtype=bf16"});
  gpu_test::train_ranks(2, cfg, dir + "/tp2-bf16", {"--set", "parallel.tp=2", "--set", "train.dtype=bf16"});
  gpu_test::compare_losses("bf16: tp=2 vs 1 GPU", step_losses(dir + "/tp2-bf16"),
                           step_losses(dir + "/one-bf16"), kBf16Rel, kSteps);
  gpu_test::compare_losses("bf16 vs fp32 on 1 GPU", step_losses(dir + "/one-bf16"), one, kBf16Rel, kSteps);
  return flotilla_test::summary("gpu_cuda_llama_layouts");
}
