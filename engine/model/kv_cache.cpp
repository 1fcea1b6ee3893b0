// Model's KV cache for inference (model.h "Inference with a KV cache"): the cache buffer and
// forward_cached, which runs the architecture's ordinary pass with Impl::kv active, so every kernel
// but attention (and the LM head's row choice) is the training forward's own: LoRA adapters
// (unmerged), QLoRA's NF4 base, qk-norm, biases and RoPE scaling need nothing here.
//
// Decision: positions are absolute within a cache row and passed per token, so a batch may hold
// rows at different lengths (a right-padded prefill, then one token per row per step) and a row can
// be re-prefilled alone (row0) without touching the others.
#include "engine/core/error.h"
#include "engine/model/model.h"
#include "engine/model/model_impl.h"

namespace flotilla {

void Model::enable_kv_cache(int max_rows, int max_len) {
  Impl& m = *impl_;
  if (m.s.tp != 1 || m.s.pp != 1)
    throw Error(ExitCode::kInternal, "Model::enable_kv_cache on a shard (" + m.s.describe() +
                                         "): inference runs a whole model on one device");
  if (max_rows < 1 || max_len < 1 || max_len > m.d.max_seq_len)
    throw Error(ExitCode::kInternal, "Model::enable_kv_cache: " + std::to_string(max_rows) + " rows of " +
                                         std::to_string(max_len) + " positions (model.max_seq_len " +
                                         std::to_string(m.d.max_seq_len) + ")");
  m.kv.buf.reset();
  const size_t per = static_cast<size_t>(max_rows) * static_cast<size_t>(max_len) *
                     static_cast<size_t>(m.d.kv_heads()) * static_cast<size_t>(m.d.hd());
  const size_t bytes = 2 * static_cast<size_t>(m.s.local_layers()) * per * m.es();
  m.kv.buf = BackendBuffer(*m.be, (bytes + 3) / 4);
  m.kv.rows = max_rows;
  m.kv.len = max_len;
  m.kv.per = per;
}

void Model::disable_kv_cache() {
  Impl& m = *impl_;
  m.kv.buf.reset();
  m.kv.rows = m.kv.len = 0;
  m.kv.per = 0;
}

int Model::kv_cache_rows() const { return impl_->kv.rows; }
int Model::kv_cache_len() const { return impl_->kv.len; }
size_t Model::kv_cache_bytes() const { return impl_->kv.buf.size() * 4; }

void Model::forward_cached(const int32_t* inputs, const int32_t* positions, int B, int T, int row0,
                           const int32_t* logit_at) {
  Impl& m = *impl_;
  if (m.kv.rows == 0) throw Error(ExitCode::kInternal, "Model::forward_cached without enable_kv_cache");
  if (B < 1 || T < 1 || row0 < 0 || row0 + B > m.kv.rows || T > m.kv.len || positions == nullptr)
    throw Error(ExitCode::kInternal, "Model::forward_cached: rows " + std::to_string(row0) + ".." +
                                         std::to_string(row0 + B) + " x " + std::to_string(T) +
                                         " tokens do not fit a cache of " + std::to_string(m.kv.rows) +
                                         " rows x " + std::to_string(m.kv.len));
  for (size_t i = 0; i < static_cast<size_t>(B) * static_cast<size_t>(T); ++i)
    if (positions[i] < 0 || positions[i] >= m.kv.len)
      throw Error(ExitCode::kInternal, "Model::forward_cached: position " + std::to_string(positions[i]) +
                                           " outside the cache's " + std::to_string(m.kv.len));
  if (logit_at != nullptr)
    for (int b = 0; b < B; ++b)
      if (logit_at[b] < 0 || logit_at[b] >= T)
        throw Error(ExitCode::kInternal, "Model::forward_cached: logit_at " + std::to_string(logit_at[b]));
  struct Active {  // the passes read m.kv only during this forward, whatever it throws
    Impl::KvCache& kv;
    ~Active() {
      kv.active = false;
      kv.logit_at = nullptr;
    }
  } active{m.kv};
  m.kv.active = true;
  m.kv.row0 = row0;
  m.kv.logit_at = logit_at;
  forward_stage(0, inputs, nullptr, nullptr, B, T, positions);
}

}  // namespace flotilla
