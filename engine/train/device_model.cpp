// The device-model factory and the host reference implementation of the seam (device_model.h).
// Non-obvious decision: the reference uses the same calls the CPU trainer path makes, in the same
// order (zero_grad, forward, backward(scale); sum of squares over [0, n); scale_values when
// clipping; AdamW per tensor), so any bitwise difference in a test is a trainer-branch bug.
#include "engine/train/device_model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/backend/cuda_plugin.h"
#include "engine/comm/process_group.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/model/base_weights.h"
#include "engine/model/lora.h"
#include "engine/train/adamw.h"

namespace flotilla {
namespace {

class HostReferenceModel final : public DeviceModel {
 public:
  HostReferenceModel(const RunConfig& cfg, const ModelDims& dims)
      : model_(dims, ModelShard{}, nullptr, host_model_options(cfg)),
        opt_(model_.backend(), param_groups(model_), 0, model_.num_params()),
        B_(cfg.train.micro_batch),
        T_(cfg.train.seq_len) {
    model_.set_recompute(cfg.train.recompute);
  }

  std::string describe() const override { return "host reference (CPU, Model behind the device seam)"; }
  void set_params(const float* host) override {
    std::memcpy(model_.params(), host, model_.num_params() * sizeof(float));
  }
  void get_params(float* host) override {
    std::memcpy(host, model_.params(), model_.num_params() * sizeof(float));
  }
  void set_moments(const float* m, const float* v) override { opt_.set_moments(m, v); }
  void get_moments(float* m, float* v) override { opt_.get_moments(m, v); }
  float forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale, bool accumulate,
                         const int32_t* positions) override {
    if (!accumulate) model_.zero_grad();
    const float loss = model_.forward(inputs, targets, B_, T_, positions);
    model_.backward(loss_scale);
    return loss;
  }
  float forward(const int32_t* inputs, const int32_t* targets, const int32_t* positions) override {
    return model_.forward(inputs, targets, B_, T_, positions);
  }
  void average_grads(comm::ProcessGroup& dp) override {
    dp.all_reduce(model_.grads(), model_.num_params());
    const float inv = 1.0f / static_cast<float>(dp.size());
    float* g = model_.grads();
    for (size_t i = 0; i < model_.num_params(); ++i) g[i] *= inv;
  }
  float grad_norm() override { return global_grad_norm(model_.grads(), model_.num_params()); }
  void update(const AdamWHyper& h, float grad_scale, int64_t t) override {
    AdamW::Step s;
    s.params = model_.params();
    s.grads = model_.grads();
    s.grad_scale = grad_scale;
    opt_.step(s, h, t);
  }
  void set_base_params(const float* full) override { model_.set_base_from_full(full); }
  void set_base(const BaseWeights& base) override { model_.set_base(base); }
  void set_training(bool on) override { model_.set_training(on); }
  void begin_step(int64_t step, int stream) override { model_.set_dropout_step(step, stream); }
  size_t activation_bytes() const override { return model_.activation_bytes(); }

 private:
  Model model_;
  AdamW opt_;
  int B_, T_;
};

}  // namespace

void DeviceModel::set_base(const BaseWeights&) {
  throw_config("lora.base_quant = \"nf4\": " + describe() + " does not hold a quantised base");
}

ModelOptions host_model_options(const RunConfig& cfg) {
  ModelOptions o;
  o.lora = lora_spec(cfg);
  // The fused LM head: train.logits_chunk_mb of fp32 logits (the CPU stores fp32 even under bf16
  // matmuls) per chunk, per TP rank's vocabulary slice.
  ModelShard tp;
  tp.tp = std::max(cfg.parallel.tp, 1);
  o.logits_chunk_rows =
      logits_chunk_rows(dims_from_config(cfg.model), tp, sizeof(float), cfg.train.logits_chunk_mb,
                        static_cast<long>(cfg.train.micro_batch) * cfg.train.seq_len);
  return o;
}

std::vector<ConfigProblem> device_training_problems(const RunConfig& c) {
  std::vector<ConfigProblem> out;
  if (c.run.device != "cuda") return out;
  auto add = [&out](const std::string& path, const std::string& message) { out.push_back({path, message}); };
  const bool explicit_hd = c.model.arch == "llama" && c.model.head_dim > 0;
  const bool whole = c.model.n_head >= 1 && c.model.n_embd >= 1 && c.model.n_embd % c.model.n_head == 0;
  const int hs = explicit_hd ? c.model.head_dim : whole ? c.model.n_embd / c.model.n_head : 0;
  if (hs > 0 && hs != 8 && hs != 16 && hs != 32 && hs != 64 && hs != 128) {
    const std::string what =
        explicit_hd ? "model.head_dim = " + std::to_string(hs)
                    : "head size model.n_embd / model.n_head = " + std::to_string(c.model.n_embd) + " / " +
                          std::to_string(c.model.n_head) + " = " + std::to_string(hs);
    add(explicit_hd ? "model.head_dim" : "model.n_head",
        what + "; the CUDA attention kernel takes head sizes 8, 16, 32, 64 or 128");
  }
  return out;
}

void refuse_unsupported_device_training(const RunConfig& cfg) {
  const auto problems = device_training_problems(cfg);
  if (problems.empty()) return;
  std::string msg = "the run config has " + std::to_string(problems.size()) +
                    (problems.size() == 1 ? " problem" : " problems") +
                    " for training on run.device = " + cfg.run.device + ":";
  for (const auto& p : problems) msg += "\n  " + to_string(p);
  throw_config(msg);
}

std::unique_ptr<DeviceModel> make_host_reference_model(const RunConfig& cfg, const ModelDims& dims) {
  return std::make_unique<HostReferenceModel>(cfg, dims);
}

std::unique_ptr<DeviceModel> make_device_model(const RunConfig& cfg, const ModelDims& dims,
                                               const OptimizerShard& shard, const ModelParallel& model) {
  if (cfg.run.device == "cpu") {
    const char* test = std::getenv("FLOTILLA_TEST_DEVICE_MODEL");
    if (test != nullptr && std::string(test) == "host") {
      if (shard.group != nullptr)
        throw_config("the host reference model does not shard the optimizer (parallel.zero)");
      if (!model.shard.whole())
        throw_config("the host reference model does not shard the model (parallel.tp, parallel.pp)");
      return make_host_reference_model(cfg, dims);
    }
    return nullptr;
  }
  if (cfg.run.device == "cuda" && cuda_plugin::built())
    return cuda_plugin::require("run.device = cuda").make_train_model(cfg, dims, shard, model);
  throw_config("run.device = " + cfg.run.device +
               " cannot train in this build (this worker was built without CUDA): use run.device = \"cpu\", "
               "or a flotilla-worker built with FLOTILLA_CUDA=ON");
}

}  // namespace flotilla
