// Data parallelism (see data_parallel.h for the bucket and shard layouts).
#include "engine/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/backend/registry.h"
#include "engine/model/param_layout.h"

namespace flotilla {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

struct DataParallel::Bucket {
  std::vector<std::pair<size_t, size_t>> slices;  // (flat offset, floats), packed in this order
  std::vector<float> data;
  std::unique_ptr<comm::Work> work;
};

std::vector<std::vector<int>> DataParallel::bucket_layers(const std::vector<size_t>& layer_bytes,
                                                          double bucket_mb) {
  std::vector<std::vector<int>> out;
  const double least = bucket_mb > 0 ? bucket_mb * 1024.0 * 1024.0 : 0;
  double held = 0;
  for (int l = static_cast<int>(layer_bytes.size()) - 1; l >= 0; --l) {
    if (out.empty() || held >= least || least == 0) {
      out.emplace_back();
      held = 0;
    }
    out.back().push_back(l);
    held += static_cast<double>(layer_bytes[static_cast<size_t>(l)]);
  }
  return out;
}

DataParallel::DataParallel(comm::ProcessGroup* dp, Model& model, int zero, double bucket_mb, bool overlap)
    : dp_(dp), model_(model), zero_(dp && dp->size() > 1 ? zero : 0), overlap_(overlap) {
  n_ = model.num_params();
  counted_ = {{0, n_}};
  const int ranks = dp_size();
  if (zero_ == 0) {
    opt_ = std::make_unique<AdamW>(get_backend("cpu"), param_groups(model), 0, n_);
    if (ranks > 1) {
      // Each layer contributes (local) layer l's slice of every per-layer tensor; buckets merge
      // consecutive layers (bucket_layers); the last bucket holds the rest.
      const int layers = model.shard().local_layers();
      const ParamLayout& layout = model.layout();
      auto offset = [&](int i) { return model.param_offset(i); };
      size_t per_layer = 0;
      for (int i = 0; i < layout.size(); ++i)
        if (layout[i].per_layer() && model.param_size(i) > 0)
          per_layer += model.param_size(i) / static_cast<size_t>(layers);
      launch_at_.assign(static_cast<size_t>(std::max(0, layers)), -1);
      const std::vector<size_t> bytes(static_cast<size_t>(std::max(0, layers)), per_layer * sizeof(float));
      for (const auto& group : bucket_layers(bytes, bucket_mb)) {
        auto b = std::make_unique<Bucket>();
        size_t total = 0;
        for (int l : group) {
          for (int i = 0; i < layout.size(); ++i) {
            if (!layout[i].per_layer() || model.param_size(i) == 0) continue;
            const size_t per = model.param_size(i) / static_cast<size_t>(layers);
            b->slices.push_back({offset(i) + static_cast<size_t>(l) * per, per});
            total += per;
          }
        }
        b->data.resize(total);
        launch_at_[static_cast<size_t>(group.back())] = static_cast<int>(buckets_.size());
        buckets_.push_back(std::move(b));
      }
      auto rest = std::make_unique<Bucket>();
      size_t total = 0;
      for (int i = 0; i < layout.size(); ++i) {
        if (layout[i].per_layer() || model.param_size(i) == 0) continue;  // or held by another stage
        rest->slices.push_back({offset(i), model.param_size(i)});
        total += model.param_size(i);
      }
      rest->data.resize(total);
      buckets_.push_back(std::move(rest));
    }
  } else {
    chunk_ = (n_ + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
    state_begin_ = chunk_ * static_cast<size_t>(dp_->rank());
    opt_ = std::make_unique<AdamW>(get_backend("cpu"), param_groups(model), state_begin_, chunk_);
    shard_grad_.assign(chunk_, 0.0f);
    if (zero_ == 1) {
      padded_.assign(chunk_ * static_cast<size_t>(ranks), 0.0f);
    } else {
      const size_t piece = std::min(chunk_, kGatherPiece);
      gather_send_.assign(piece, 0.0f);
      gather_recv_.assign(piece * static_cast<size_t>(ranks), 0.0f);
      model.enable_layer_grad_staging();
    }
  }
}

DataParallel::~DataParallel() {
  auto quiet_wait = [](std::unique_ptr<comm::Work>& w) {
    if (!w) return;
    try {
      w->wait();
    } catch (...) {
    }
  };
  for (auto& b : buckets_) quiet_wait(b->work);
  for (auto& p : pending_) quiet_wait(p.work);
}

size_t DataParallel::grad_bytes() const {
  size_t floats = shard_grad_.size() + padded_.size() + gather_send_.size() + gather_recv_.size();
  for (const auto& b : buckets_) floats += b->data.size();
  return floats * sizeof(float);
}

void DataParallel::begin_step() {
  if (zero_ == 2) std::fill(shard_grad_.begin(), shard_grad_.end(), 0.0f);
}

void DataParallel::add_to_shard(const float* src, size_t flat, size_t count) {
  const size_t a = std::max(flat, state_begin_), b = std::min(flat + count, state_begin_ + chunk_);
  if (a >= b) return;
  const float inv = 1.0f / static_cast<float>(dp_size());
  float* dst = shard_grad_.data() + (a - state_begin_);
  const float* in = src + (a - flat);
  for (size_t i = 0; i < b - a; ++i) dst[i] += in[i] * inv;
}

void DataParallel::drain_slot(int slot) {
  Pending& p = pending_[slot];
  if (!p.work) return;
  const auto t0 = Clock::now();
  p.work->wait();
  comm_ms_ += ms_since(t0);
  p.work.reset();
  float* data = model_.layer_grad_slot(slot);
  const int layers = model_.shard().local_layers();
  size_t pos = 0;
  const ParamLayout& layout = model_.layout();
  for (int i = 0; i < layout.size(); ++i) {
    if (!layout[i].per_layer()) continue;
    const size_t per = model_.param_size(i) / static_cast<size_t>(layers);
    add_to_shard(data + pos, model_.param_offset(i) + static_cast<size_t>(p.layer) * per, per);
    pos += per;
  }
  std::fill(data, data + pos, 0.0f);  // ready for layer p.layer - 2
  p.layer = -1;
}

void DataParallel::end_micro_step() {
  if (zero_ != 2) return;
  drain_slot(1);
  drain_slot(0);
}

int DataParallel::dp_size() const { return dp_ ? dp_->size() : 1; }

void DataParallel::begin_sync(float* grads) { grads_ = grads; }

void DataParallel::launch_bucket(Bucket& b) {
  size_t pos = 0;
  for (const auto& [off, count] : b.slices) {
    std::memcpy(b.data.data() + pos, grads_ + off, count * sizeof(float));
    pos += count;
  }
  b.work = dp_->all_reduce_async(b.data.data(), b.data.size());
}

void DataParallel::layer_done(int layer) {
  if (zero_ == 2) {
    const int slot = layer % 2;
    if (pending_[slot].work) drain_slot(slot);  // defensive: the hook order guarantees it is empty
    pending_[slot].layer = layer;
    pending_[slot].work = dp_->all_reduce_async(model_.layer_grad_slot(slot), model_.layer_grad_floats());
    drain_slot(1 - slot);             // layer + 1: the backward of layer - 1 writes there next
    if (!overlap_) drain_slot(slot);  // no overlap: this layer's sum before the next layer's backward
    return;
  }
  if (zero_ != 0 || dp_size() == 1 || !grads_ || !overlap_) return;
  if (layer >= 0 && static_cast<size_t>(layer) < launch_at_.size() &&
      launch_at_[static_cast<size_t>(layer)] >= 0)
    launch_bucket(*buckets_[static_cast<size_t>(launch_at_[static_cast<size_t>(layer)])]);
}

void DataParallel::wait_all() {
  const float inv = 1.0f / static_cast<float>(dp_size());
  for (auto& b : buckets_) {
    if (!b->work) launch_bucket(*b);  // a layer the hook did not report (no hook: no overlap)
  }
  for (auto& b : buckets_) {
    const auto t0 = Clock::now();
    b->work->wait();
    comm_ms_ += ms_since(t0);
    b->work.reset();
    size_t pos = 0;
    for (const auto& [off, count] : b->slices) {
      float* dst = grads_ + off;
      const float* src = b->data.data() + pos;
      for (size_t i = 0; i < count; ++i) dst[i] = src[i] * inv;
      pos += count;
    }
  }
}

void DataParallel::finish_sync() {
  if (dp_size() == 1) return;
  if (zero_ == 0) {
    wait_all();
    return;
  }
  if (zero_ == 2) {
    end_micro_step();
    // The non-layer tensors (GPT-2: wte, wpe, lnfw, lnfb): one contiguous compact buffer,
    // accumulated over the micro-steps.
    const ParamLayout& layout = model_.layout();
    float* rest = static_cast<float*>(model_.grad_data());
    size_t total = 0;
    for (int i = 0; i < layout.size(); ++i)
      if (!layout[i].per_layer()) total += model_.param_size(i);
    const auto t0 = Clock::now();
    dp_->all_reduce(rest, total);
    comm_ms_ += ms_since(t0);
    size_t pos = 0;
    for (int i = 0; i < layout.size(); ++i) {
      if (layout[i].per_layer()) continue;
      add_to_shard(rest + pos, model_.param_offset(i), model_.param_size(i));
      pos += model_.param_size(i);
    }
    return;
  }
  std::memcpy(padded_.data(), grads_, n_ * sizeof(float));
  std::fill(padded_.begin() + static_cast<long>(n_), padded_.end(), 0.0f);
  const auto t0 = Clock::now();
  dp_->reduce_scatter(padded_.data(), shard_grad_.data(), chunk_);
  comm_ms_ += ms_since(t0);
  const float inv = 1.0f / static_cast<float>(dp_size());
  for (float& g : shard_grad_) g *= inv;
}

void DataParallel::set_norm_reduction(std::vector<std::pair<size_t, size_t>> counted,
                                      std::vector<comm::ProcessGroup*> groups) {
  counted_ = std::move(counted);
  norm_groups_ = std::move(groups);
}

// Sum of squares of g (holding local flat range [begin, end)) over its intersection with counted_.
double DataParallel::sum_squares_counted(Backend& backend, const float* g, size_t begin, size_t end) const {
  double sum = 0;
  for (const auto& [off, count] : counted_) {
    const size_t a = std::max(off, begin), b = std::min(off + count, end);
    if (a < b) sum += backend.sum_squares(g + (a - begin), b - a);
  }
  return sum;
}

double DataParallel::grad_norm(Backend& backend) {
  double sumsq = 0;
  if (zero_ == 0) {
    sumsq = sum_squares_counted(backend, grads_, 0, n_);
  } else {
    sumsq = sum_squares_counted(backend, shard_grad_.data(), state_begin_, state_begin_ + chunk_);
    const auto t0 = Clock::now();
    dp_->all_reduce(&sumsq, 1);
    comm_ms_ += ms_since(t0);
  }
  for (comm::ProcessGroup* g : norm_groups_) {
    if (g == nullptr || g->size() == 1) continue;
    const auto t0 = Clock::now();
    g->all_reduce(&sumsq, 1);
    comm_ms_ += ms_since(t0);
  }
  return std::sqrt(sumsq);
}

void DataParallel::optimizer_step(float* params, const AdamWHyper& h, float grad_scale, int64_t step) {
  const size_t begin = zero_ == 0 ? 0 : state_begin_;
  const size_t end = zero_ == 0 ? n_ : std::min(n_, state_begin_ + chunk_);
  // The optimizer's range is [begin, begin + chunk); the padding past n_ holds no parameter.
  AdamW::Step s;
  s.params = params;
  s.grads = zero_ == 0 ? grads_ : shard_grad_.data();
  s.grad_begin = begin;
  s.grad_scale = grad_scale;
  opt_->step(s, h, step);
  if (zero_ == 0) return;
  if (zero_ == 2) {
    gather_params(params);
    return;
  }
  // Every rank gets every updated slice back.
  float* mine = padded_.data() + state_begin_;
  std::fill(mine, mine + chunk_, 0.0f);
  if (end > begin) std::memcpy(mine, params + begin, (end - begin) * sizeof(float));
  const auto t0 = Clock::now();
  dp_->all_gather(mine, padded_.data(), chunk_);
  comm_ms_ += ms_since(t0);
  std::memcpy(params, padded_.data(), n_ * sizeof(float));
}

// Piece k of every rank's shard in one all-gather; the same piece sequence on every rank.
void DataParallel::gather_params(float* params) {
  const size_t piece = gather_send_.size();
  const auto ranks = static_cast<size_t>(dp_size());
  for (size_t k0 = 0; k0 < chunk_; k0 += piece) {
    const size_t len = std::min(piece, chunk_ - k0);
    const size_t mine = state_begin_ + k0;  // flat offset of this rank's piece
    const size_t have = mine < n_ ? std::min(len, n_ - mine) : 0;
    std::fill(gather_send_.begin(), gather_send_.end(), 0.0f);
    if (have > 0) std::memcpy(gather_send_.data(), params + mine, have * sizeof(float));
    const auto t0 = Clock::now();
    dp_->all_gather(gather_send_.data(), gather_recv_.data(), len);
    comm_ms_ += ms_since(t0);
    for (size_t q = 0; q < ranks; ++q) {
      const size_t at = q * chunk_ + k0;
      if (at >= n_) continue;
      std::memcpy(params + at, gather_recv_.data() + q * len, std::min(len, n_ - at) * sizeof(float));
    }
  }
}

double DataParallel::mean(double value) {
  if (dp_size() == 1) return value;
  const auto t0 = Clock::now();
  dp_->all_reduce(&value, 1);
  comm_ms_ += ms_since(t0);
  return value / dp_size();
}

}  // namespace flotilla
