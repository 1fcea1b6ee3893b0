// GpuTrainer's ZeRO-2 gradient path (GpuTrainerOptions::zero2), as DataParallel's zero = 2 on the CPU:
// no full gradient buffer (the Model's layer-gradient staging: two slots of one layer each), an
// fp32 gradient shard per rank.
//
// Non-obvious decisions:
// - A layer's sum is an in-place all-reduce of the whole layer, not a reduce-scatter: a layer's
//   slices straddle the flat shard boundaries in uneven parts, and the ProcessGroup's
//   reduce-scatter takes equal counts (the CPU path's reason too). Each rank then adds only its
//   shard's intersection, scaled by 1/dp, to the fp32 shard. Traffic per micro-step is one
//   all-reduce of the layers, memory is two layers of gradients plus the shard.
// - fp32: the staging slot is all-reduced in place, and drained (the host waits for its sum,
//   adds the shard's part, zeroes the slot) only in the next layer's hook, one layer of compute
//   later, before layer l-2's backward writes the slot again. bf16: the slot is widened into an
//   fp32 slot (`comm`) and zeroed at once, and the fp32 slot is drained the same way.
#include <string>

#include "engine/cuda/gpu_trainer_impl.h"
#include "engine/cuda/residual.h"

namespace flotilla::cuda {

void GpuTrainer::Impl::add_range_to_shard(const float* src, int i, size_t from, size_t count) {
  // Tensor i's flat range [offset(i) + from, + count) against the shard [lo, hi).
  const size_t lo = shard_begin, hi = shard_begin + shard_count;
  const size_t start = offset(i) + from;
  const size_t a = start > lo ? start : lo, b = start + count < hi ? start + count : hi;
  if (a >= b) return;
  residual_forward<float>(*ctx, shard_grad + (a - lo), shard_grad + (a - lo), src + (a - start), b - a);
}

void GpuTrainer::Impl::add_layer_to_shard(const float* src, int l) {
  const ParamLayout& lay = layout();
  for (int i = 0; i < lay.size(); ++i) {
    if (!lay[i].per_layer() || size(i) == 0) continue;
    const size_t per = size(i) / static_cast<size_t>(sh.local_layers());
    add_range_to_shard(src + model->layer_grad_offset(i), i, static_cast<size_t>(l) * per, per);
  }
}

float* GpuTrainer::Impl::zero2_sum_slot(int k) {
  if (comm != nullptr) return comm + static_cast<size_t>(k) * model->layer_grad_floats();
  return static_cast<float*>(model->layer_grad_slot_data(k));  // fp32: in place
}

template <typename S>
void GpuTrainer::Impl::zero2_layer_done(int l) {
  Context& c = *ctx;
  const int k = l % 2;
  const size_t floats = model->layer_grad_floats();
  S* staged = static_cast<S*>(model->layer_grad_slot_data(k));
  float* sum = zero2_sum_slot(k);
  zero2_drain(k);  // normally drained in layer l+1's hook already
  if constexpr (sizeof(S) != sizeof(float)) {
    convert(c, sum, staged, floats);
    check_cuda(cudaMemsetAsync(staged, 0, floats * sizeof(S), c.stream()), "cudaMemsetAsync (ZeRO-2 slot)");
  }
  opt.zero2->set_device_stream(c.stream());  // the sum waits for the backward (and widening) above
  in_flight[k].layer = l;
  in_flight[k].work = opt.zero2->all_reduce_async(sum, floats);
  zero2_drain(1 - k);  // layer l+1's sum has had layer l's backward to finish
}

void GpuTrainer::Impl::zero2_drain(int k) {
  InFlight& f = in_flight[k];
  if (!f.work) return;
  f.work->wait();
  f.work.reset();
  const size_t floats = model->layer_grad_floats();
  float* sum = zero2_sum_slot(k);
  scale_values(*ctx, sum, floats, 1.0f / static_cast<float>(opt.zero2->size()));
  add_layer_to_shard(sum, f.layer);
  if (comm == nullptr)  // fp32 in place: the slot is the next layer-pair's accumulator again
    check_cuda(cudaMemsetAsync(sum, 0, floats * sizeof(float), ctx->stream()),
               "cudaMemsetAsync (ZeRO-2 slot)");
  f.layer = -1;
}

void GpuTrainer::Impl::zero2_backward_done() {
  zero2_drain(0);
  zero2_drain(1);
}

template <typename S>
void GpuTrainer::Impl::zero2_finish() {
  Context& c = *ctx;
  zero2_backward_done();
  // The non-layer tensors (GPT-2: wte, wpe, lnfw, lnfb; llama: embedding, final norm, head):
  // summed in pieces of the two (drained, zero) fp32 slots, which are contiguous (fp32: the
  // staging slots themselves); zeroed again after.
  float* piece = zero2_sum_slot(0);
  const size_t cap = 2 * model->layer_grad_floats();
  const float inv = 1.0f / static_cast<float>(opt.zero2->size());
  const ParamLayout& lay = layout();
  const S* g = static_cast<const S*>(model->grad_data());
  for (int i = 0; i < lay.size(); ++i) {
    const size_t count_all = size(i);
    if (lay[i].per_layer() || count_all == 0) continue;
    for (size_t from = 0; from < count_all; from += cap) {
      const size_t count = count_all - from < cap ? count_all - from : cap;
      const S* src = g + model->grad_offset(i) + from;
      if constexpr (sizeof(S) == sizeof(float))
        check_cuda(cudaMemcpyAsync(piece, src, count * sizeof(float), cudaMemcpyDeviceToDevice, c.stream()),
                   "cudaMemcpyAsync (ZeRO-2 embedding gradients)");
      else
        convert(c, piece, src, count);
      opt.zero2->set_device_stream(c.stream());
      opt.zero2->all_reduce(piece, count);
      scale_values(c, piece, count, inv);
      add_range_to_shard(piece, i, from, count);
    }
  }
  check_cuda(cudaMemsetAsync(piece, 0, cap * sizeof(float), c.stream()), "cudaMemsetAsync (ZeRO-2 slots)");
}

template void GpuTrainer::Impl::zero2_layer_done<float>(int);
template void GpuTrainer::Impl::zero2_layer_done<bf16>(int);
template void GpuTrainer::Impl::zero2_finish<float>();
template void GpuTrainer::Impl::zero2_finish<bf16>();

}  // namespace flotilla::cuda
