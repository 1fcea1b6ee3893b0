// Data parallelism: gradient synchronisation and the (optionally sharded) AdamW step.
//
//   zero = 0: every rank holds all of params, grads, m, v. Gradients are averaged with all-reduce
//             in per-layer buckets, launched while backward is still running (overlap): as soon as
//             layer l's backward is done its 12 gradient slices are final, so they are packed into
//             that layer's bucket and handed to the communication thread; embeddings and the final
//             LayerNorm (wte is shared with the LM head) go last.
//   zero = 1: AdamW m and v are sharded: rank r owns the contiguous flat range
//             [r*chunk, (r+1)*chunk) of the (padded) parameter vector. Gradients are reduce-scattered
//             into the owner's shard, the owner updates its slice of the parameters, and an
//             all-gather puts every slice back on every rank.
//   zero = 2: as zero = 1, but no full-size gradient buffer exists: the model writes each layer's
//             gradients into one of two staging slots (Model::enable_layer_grad_staging); the
//             layer hook all-reduces slot l % 2 in place on the comm thread while layer l-1
//             computes, then drains slot (l+1) % 2 by adding this rank's part (its intersection
//             with [r*chunk, (r+1)*chunk)) into the persistent gradient shard and zeroing it. Every
//             micro-step communicates its layers (accumulation happens in the shard); wte, wpe and
//             the final LayerNorm keep a full-size buffer, accumulate locally and are reduced once,
//             in finish_sync(). The parameter all-gather runs in pieces of kGatherPiece floats.
//             Layer buckets use an in-place all-reduce rather than a reduce-scatter because a
//             layer's slices straddle shard boundaries in uneven parts and the ProcessGroup's
//             reduce-scatter takes equal counts; that keeps the staging at exactly two layers.
// zero = 0 with parallel.bucket_mb > 0: consecutive layers, in backward order (last layer first), are
//             merged into one bucket until it holds at least bucket_mb MiB (bucket_layers); a bucket
//             goes out when its lowest layer's backward is done. Fewer, larger messages pay the link's
//             latency fewer times; per-layer buckets (0) overlap most. parallel.overlap = false
//             launches every bucket after backward instead. bucket_mb applies to zero = 0 only: ZeRO-1
//             reduce-scatters all gradients in one call after backward and ZeRO-2 keeps its two
//             one-layer staging slots (config validation refuses bucket_mb with zero >= 1); under
//             ZeRO-2, overlap = false waits for each staged layer in the hook (no overlap).
// One non-obvious decision: bucket boundaries and the reduce order depend only on the model
// shape and the dp degree, never on timing, so two runs of the same layout are bitwise equal.
// Under tensor/pipeline parallelism the model is this rank's shard (param_layout.h): buckets,
// shards and the optimizer cover the local parameter vector, the DP group holds the ranks with
// the same shard, and the gradient norm is completed over the TP and PP groups
// (set_norm_reduction) counting each replicated tensor once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/process_group.h"
#include "engine/model/model.h"
#include "engine/train/adamw.h"

namespace flotilla {

class DataParallel {
 public:
  // dp may be null (one rank: no communication).
  // zero = 2 with more than one DP rank switches the model to layer-gradient staging.
  DataParallel(comm::ProcessGroup* dp, Model& model, int zero, double bucket_mb = 0, bool overlap = true);

  // The buckets of zero = 0 as lists of layer indexes, in launch order: layers taken from the last
  // down, each bucket closed once its bytes reach bucket_mb MiB (every layer alone when 0). Depends
  // on the shape and the config only. The non-layer tensors form one more bucket, sent last.
  static std::vector<std::vector<int>> bucket_layers(const std::vector<size_t>& layer_bytes,
                                                     double bucket_mb);
  // Gradient all-reduces per step under zero = 0 (the layer buckets and the rest); 0 for one rank.
  size_t bucket_count() const { return buckets_.size(); }
  ~DataParallel();

  int zero() const { return zero_; }
  int dp_size() const;
  // The optimizer state this rank holds: all parameters (zero 0) or its shard.
  size_t state_begin() const { return opt_->begin(); }  // flat offset of m[0]
  size_t state_size() const { return opt_->size(); }
  float* m() { return opt_->m(); }  // state_size() floats, host memory
  float* v() { return opt_->v(); }

  // Call before the backward of the last micro-step (overlap is only for that one), then
  // layer_done(l) from the model's hook as each layer's backward finishes, then finish() after
  // backward: on return the gradients this rank needs are averaged over the DP group.
  // ZeRO-2 (zero() == 2) instead: begin_step() after zero_grad(); begin_sync(nullptr) before EVERY
  // micro-step's backward, with the hook installed, and end_micro_step() after it; finish_sync()
  // after the last.
  void begin_sync(float* grads);
  void layer_done(int layer);
  void finish_sync();
  bool syncs_every_micro_step() const { return zero_ == 2; }
  void begin_step();
  void end_micro_step();

  // Bytes of gradient-sized buffers this object allocated (shard, scratch, buckets); the model's
  // own are Model::grad_bytes().
  size_t grad_bytes() const;
  static constexpr size_t kGatherPiece = size_t{1} << 18;  // floats per ZeRO-2 all-gather piece

  // Which local flat ranges [offset, offset+count) count toward the global gradient norm, and
  // the groups (beyond DP) whose ranks hold the other parts of the model: the partial sums of
  // squares are all-reduced over each, in order. Default: everything, no groups.
  void set_norm_reduction(std::vector<std::pair<size_t, size_t>> counted,
                          std::vector<comm::ProcessGroup*> groups);

  // Global gradient L2 norm (every rank gets the same value).
  double grad_norm(Backend& backend);
  // AdamW (engine/train/adamw.h) on what this rank owns, the gradients multiplied by grad_scale
  // (clipping); with ZeRO also all-gathers the updated parameters.
  void optimizer_step(float* params, const AdamWHyper& h, float grad_scale, int64_t step);

  // Mean of a per-rank scalar over the DP group (loss reporting).
  double mean(double value);

  double comm_ms() const { return comm_ms_; }  // time waiting on communication, since reset
  void reset_comm_ms() { comm_ms_ = 0; }

 private:
  struct Bucket;
  void launch_bucket(Bucket& b);
  void wait_all();
  void drain_slot(int slot);  // zero 2: wait, add this rank's part to the shard, zero
  void add_to_shard(const float* src, size_t flat, size_t count);  // shard += src * (1/dp) on overlap
  void gather_params(float* params);  // zero 2: all-gather in kGatherPiece pieces

  comm::ProcessGroup* dp_;
  Model& model_;
  int zero_;
  size_t n_ = 0;      // real parameter count
  size_t chunk_ = 0;  // shard size (zero >= 1): ceil(n / dp)
  size_t state_begin_ = 0;
  std::unique_ptr<AdamW> opt_;                    // m and v of what this rank owns, on the CPU backend
  std::vector<float> padded_;                     // dp * chunk scratch (zero >= 1)
  std::vector<float> shard_grad_;                 // chunk (zero >= 1)
  std::vector<std::unique_ptr<Bucket>> buckets_;  // layer buckets in launch order, then the rest (zero 0)
  std::vector<int> launch_at_;                    // per layer: the bucket its backward completes, else -1
  bool overlap_ = true;
  float* grads_ = nullptr;
  struct Pending {
    int layer = -1;
    std::unique_ptr<comm::Work> work;
  };
  Pending pending_[2];                            // zero 2: in-flight staging slots
  std::vector<float> gather_send_, gather_recv_;  // zero 2: kGatherPiece and dp * kGatherPiece
  double comm_ms_ = 0;
  std::vector<std::pair<size_t, size_t>> counted_;  // norm ranges (local flat offsets)
  std::vector<comm::ProcessGroup*> norm_groups_;    // TP, PP
  double sum_squares_counted(Backend& backend, const float* g, size_t begin, size_t end) const;
};

}  // namespace flotilla
