// The data-parallel gradient buckets of the CUDA trainer (grad_buckets, engine/cuda/
// train_model_cuda.h), without CUDA: for the tiny, GPT-2 124M-like and odd shapes the buckets come
// in the order GpuTrainer's backward completes them (layers n_layer-1 .. 0, then the final -1 bucket
// of wte, wpe, lnfw, lnfb); their slices cover every parameter exactly once; each layer bucket
// holds exactly that layer's slices of the 12 per-layer tensors; packed ranges are 256-byte
// aligned, disjoint and inside packed_grad_count. The same for a tensor-parallel shard's local
// layout (local_param_sizes), which the CUDA trainer uses under parallel.tp > 1.
#include <vector>

#include "check.h"
#include "engine/cuda/train_model_cuda.h"
#include "engine/model/param_layout.h"

using namespace flotilla;
using namespace flotilla::cuda;

namespace {

void check_dims(const ModelDims& d, const ModelShard& shard = {}) {
  const ModelShard s = resolve_shard(d, shard);
  const auto sizes = local_param_sizes(d, s);
  const auto buckets = s.whole() ? grad_buckets(d) : grad_buckets(sizes, d.n_layer);
  size_t n = 0;
  for (size_t k : sizes) n += k;
  CHECK(!s.whole() || n == num_parameters(d));
  CHECK(buckets.size() == static_cast<size_t>(d.n_layer) + 1);
  std::vector<int> seen(n, 0);
  size_t prev_end = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const GradBucket& b = buckets[k];
    const int want_layer = k + 1 == buckets.size() ? -1 : d.n_layer - 1 - static_cast<int>(k);
    CHECK(b.layer == want_layer);
    CHECK(b.packed_offset % kBucketAlign == 0 && b.packed_offset >= prev_end);
    prev_end = b.packed_offset + b.count;
    size_t sum = 0;
    for (const GradSlice& s : b.slices) {
      sum += s.count;
      for (size_t i = s.offset; i < s.offset + s.count && i < n; ++i) ++seen[i];
      CHECK(s.offset + s.count <= n);
    }
    CHECK(b.count == sum);
    CHECK(b.slices.size() == (b.layer < 0 ? 4u : 12u));
  }
  CHECK(prev_end <= packed_grad_count(buckets) && packed_grad_count(buckets) < n + buckets.size() * kBucketAlign);
  int bad = 0;
  for (int c : seen) bad += c != 1;
  CHECK_MSG(bad == 0, "%d parameters covered other than once", bad);

  // A layer bucket's first slice is ln1w of that layer: offset of ln1w + l * C.
  const size_t ln1w = sizes[kWte] + sizes[kWpe];
  for (const GradBucket& b : buckets)
    if (b.layer >= 0)
      CHECK(b.slices[0].offset == ln1w + static_cast<size_t>(b.layer) * static_cast<size_t>(d.n_embd) &&
            b.slices[0].count == static_cast<size_t>(d.n_embd));
  // The final bucket starts with all of wte.
  CHECK(buckets.back().slices[0].offset == 0 && buckets.back().slices[0].count == sizes[kWte]);
}

}  // namespace

int main() {
  check_dims(ModelDims{});  // tiny: L4 H4 C256
  ModelDims gpt2;
  gpt2.n_layer = 12;
  gpt2.n_head = 12;
  gpt2.n_embd = 768;
  check_dims(gpt2);
  ModelDims odd{3, 2, 96, 500, 512, 37};
  check_dims(odd);
  ModelDims one{1, 1, 32, 10, 128, 8};
  check_dims(one);
  check_dims(gpt2, make_shard(gpt2, 2, 1, 1, 0));  // tp = 2, second rank: local sizes
  check_dims(odd, make_shard(odd, 2, 0, 1, 0));
  return flotilla_test::summary("nccl_buckets");
}
