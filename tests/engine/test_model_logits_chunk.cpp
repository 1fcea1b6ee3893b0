// The fused, chunked LM head and loss (issue 39, ModelOptions::logits_chunk_rows, train.logits_chunk_mb):
// the arena holds one chunk of logits rows, never B x T x V, and nothing else changes.
//  1. Equality, in process, against the unchunked model (chunk 0): the loss and every gradient
//     equal within fp32 rounding for chunks of 1, 7, 16 and N-1 rows (several chunks, a short last
//     one, the recomputed middle ones), and BIT-equal for a chunk of N or more rows (one chunk: the
//     same kernels as today). For GPT-2, llama with GQA (tied and untied head), activation
//     recomputation, LoRA (frozen head: only the adapters' gradients), the last pipeline stage (pp=2,
//     its d(input) too), the CPU's bf16 matmuls, and tp=2 (forked Gloo ranks: the vocab-parallel
//     loss with each rank's chunks, against the whole unchunked model's gradients sliced).
//     The loss is also checked against a double-precision cross-entropy of the whole logits.
//  2. Memory: the activation bytes the model allocates drop by exactly (N - rows) x Vl x 4, and
//     equal activation_bytes_for with the same options (what the planner is told).
//  3. Inference on a chunked model: a forward without targets gives every logit, bit-equal to the
//     unchunked model's (a separate buffer, allocated then, counted in activation_bytes); after a
//     chunked forward with targets the logits are refused instead of read past the chunk.
//  4. logits_chunk_rows: MiB to rows (multiple of 64, >= 256, <= N; tp and the value size count).
//  5. Real `train` runs (B 4 x T 96 = 384 rows, vocabulary 256): train.logits_chunk_mb = 0.01 (two
//     chunks of 192 rows) against 0 on one rank and on tp=2 (launch, Gloo): the losses and final parameters
//     of 3 steps equal within the parallel tests' tolerance (test_hybrid_util.h), with evaluation (and
//     on one rank a text sample) on; rank 0's "activation memory" event drops by exactly the planner's drop.
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/comm/rendezvous.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/model/gpt.h"
#include "engine/model/model.h"
#include "engine/model/param_layout.h"
#include "engine/plan/planner.h"
#include "tests/engine/test_comm_util.h"
#include "tests/engine/test_hybrid_util.h"
#include "tests/tools/logits_chunk_fixture.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

using namespace logits_chunk_fixture;

// Model width here (the fixture's FFN is twice it).
constexpr int kEmbd = 32;
ModelDims gpt2_dims() { return logits_chunk_fixture::gpt2_dims(kEmbd); }
ModelDims llama_dims(bool tied) { return logits_chunk_fixture::llama_dims(kEmbd, tied); }

struct Result {
  float loss = 0;
  std::vector<float> grads, dinput;
  size_t act_bytes = 0, planned = 0;
};

struct Case {
  ModelDims d;
  ModelShard shard;  // whole, or the last of two pipeline stages
  bool recompute = false;
  LoraSpec lora;
};

// One forward and backward (scale 0.5) with chunks of `rows` (0: whole).
Result run(const Case& c, int rows) {
  ModelOptions o;
  o.lora = c.lora;
  o.logits_chunk_rows = rows;
  Model m(c.d, c.shard, nullptr, o);
  m.set_recompute(c.recompute);
  m.init_random(5);
  if (c.lora.enabled()) {  // non-zero B so the adapters carry a gradient to everything
    std::vector<float> p(m.num_params());
    for (size_t i = 0; i < p.size(); ++i) p[i] = 0.01f * static_cast<float>(static_cast<int>(i % 13) - 6);
    m.set_params(p.data());
  }
  const Batch b = batch(c.d.vocab_size);
  std::vector<float> stage_in;
  m.zero_grad();
  Result r;
  if (m.shard().first_stage()) {
    r.loss = m.forward(b.in.data(), b.tg.data(), kB, kT);
  } else {
    stage_in.resize(static_cast<size_t>(kN) * static_cast<size_t>(c.d.n_embd));
    for (size_t i = 0; i < stage_in.size(); ++i) stage_in[i] = std::sin(0.37f * static_cast<float>(i));
    r.loss = m.forward_stage(0, nullptr, stage_in.data(), b.tg.data(), kB, kT);
  }
  if (m.shard().first_stage())
    m.backward(0.5f);
  else
    m.backward_stage(0, nullptr, 0.5f);
  r.grads.assign(m.grads(), m.grads() + m.num_params());
  if (!m.shard().first_stage()) r.dinput.assign(m.stage_input_grad(), m.stage_input_grad() + stage_in.size());
  r.act_bytes = m.activation_bytes();
  r.planned = activation_bytes_for(c.d, c.shard, kB, kT, c.recompute, o);
  return r;
}

// The loss in double from the whole model's logits (a forward without targets).
double reference_loss(const Case& c) {
  ModelOptions o;
  o.lora = c.lora;
  Model m(c.d, c.shard, nullptr, o);
  m.init_random(5);
  if (c.lora.enabled()) {
    std::vector<float> p(m.num_params());
    for (size_t i = 0; i < p.size(); ++i) p[i] = 0.01f * static_cast<float>(static_cast<int>(i % 13) - 6);
    m.set_params(p.data());
  }
  const Batch b = batch(c.d.vocab_size);
  if (!m.shard().first_stage()) return NAN;
  m.forward(b.in.data(), nullptr, kB, kT);
  const float* lg = m.logits();
  double sum = 0;
  int counted = 0;
  for (int r = 0; r < kN; ++r) {
    if (b.tg[static_cast<size_t>(r)] == kIgnoreTarget) continue;
    const float* row = lg + static_cast<size_t>(r) * static_cast<size_t>(c.d.padded_vocab);
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < c.d.vocab_size; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (int v = 0; v < c.d.vocab_size; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    sum += mx + std::log(z) - row[b.tg[static_cast<size_t>(r)]];
    ++counted;
  }
  return sum / counted;
}

void compare(const char* name, const Case& c) {
  const Result whole = run(c, 0);
  const double ref = reference_loss(c);
  if (!std::isnan(ref))
    CHECK_MSG(std::fabs(whole.loss - ref) < 2e-6 * std::fabs(ref), "%s: loss %.8f vs double %.8f", name,
              whole.loss, ref);
  CHECK_MSG(max_abs(whole.grads) > 0, "%s: no gradient", name);
  const size_t Vl = static_cast<size_t>(c.d.padded_vocab / c.shard.tp);
  for (int rows : {kN, kN + 5, kN - 1, 16, 7, 1}) {
    const Result r = run(c, rows);
    const double gd = max_diff(whole.grads, r.grads), scale = max_abs(whole.grads);
    const double dd = max_diff(whole.dinput, r.dinput), dscale = max_abs(whole.dinput);
    const double ld = std::fabs(static_cast<double>(r.loss) - whole.loss);
    std::printf(
        "%-18s chunk %2d rows: loss %.8f (whole %.8f), max grad diff %.2e of %.2e, act bytes %zu -> %zu\n",
        name, rows, r.loss, whole.loss, gd, scale, whole.act_bytes, r.act_bytes);
    if (rows >= kN) {  // one chunk: exactly today's kernels
      CHECK_MSG(std::memcmp(&r.loss, &whole.loss, 4) == 0 && same_bits(r.grads, whole.grads) &&
                    same_bits(r.dinput, whole.dinput),
                "%s chunk %d: not bit-equal to the unchunked pass", name, rows);
      CHECK_MSG(r.act_bytes == whole.act_bytes, "%s chunk %d: bytes %zu vs %zu", name, rows, r.act_bytes,
                whole.act_bytes);
    } else {
      CHECK_MSG(ld <= 1e-6 * std::fabs(whole.loss), "%s chunk %d: loss diff %.3g", name, rows, ld);
      CHECK_MSG(gd <= 1e-5 * scale, "%s chunk %d: grad diff %.3g of %.3g", name, rows, gd, scale);
      CHECK_MSG(dd <= 1e-5 * dscale, "%s chunk %d: d(input) diff %.3g of %.3g", name, rows, dd, dscale);
      const size_t drop = static_cast<size_t>(kN - rows) * Vl * 4;
      CHECK_MSG(whole.act_bytes - r.act_bytes == drop, "%s chunk %d: bytes drop %zu, predicted %zu", name,
                rows, whole.act_bytes - r.act_bytes, drop);
    }
    CHECK_MSG(r.act_bytes == r.planned, "%s chunk %d: allocated %zu, activation_bytes_for %zu", name, rows,
              r.act_bytes, r.planned);
  }
}

void in_process() {
  get_backend("cpu").set_threads(1);
  compare("gpt2", {gpt2_dims(), {}, false, {}});
  compare("llama gqa untied", {llama_dims(false), {}, false, {}});
  compare("llama gqa tied", {llama_dims(true), {}, false, {}});
  compare("gpt2 recompute", {gpt2_dims(), {}, true, {}});
  compare("llama recompute", {llama_dims(false), {}, true, {}});
  LoraSpec lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = parse_lora_targets("all-linear");
  compare("llama lora", {llama_dims(false), {}, false, lora});
  const ModelDims g = gpt2_dims();
  compare("gpt2 pp2 last", {g, make_shard(g, 1, 0, 2, 1), false, {}});
  const ModelDims l = llama_dims(false);
  compare("llama pp2 last", {l, make_shard(l, 1, 0, 2, 1), false, {}});
  bool bf16 = true;
  try {
    get_backend("cpu").set_matmul_dtype(DType::kBF16);
  } catch (const Error& e) {
    bf16 = false;
    std::printf("SKIP bf16 matmuls: %s\n", e.what());
  }
  if (bf16) {
    compare("llama bf16 matmul", {llama_dims(false), {}, false, {}});
    compare("gpt2 bf16 matmul", {gpt2_dims(), {}, false, {}});
    get_backend("cpu").set_matmul_dtype(DType::kF32);
  }
}

void inference() {
  const ModelDims d = llama_dims(false);
  const Batch b = batch(d.vocab_size);
  Model whole(d);
  ModelOptions o;
  o.logits_chunk_rows = 16;
  Model chunked(d, {}, nullptr, o);
  whole.init_random(5);
  chunked.init_random(5);
  chunked.forward(b.in.data(), b.tg.data(), kB, kT);
  bool refused = false;
  try {
    (void)chunked.logits();
  } catch (const Error&) {
    refused = true;
  }
  CHECK_MSG(refused, "logits() after a chunked forward with targets must refuse, not read past the chunk");
  const size_t before = chunked.activation_bytes();
  whole.forward(b.in.data(), nullptr, kB, kT);
  chunked.forward(b.in.data(), nullptr, kB, kT);
  const size_t n = static_cast<size_t>(kN) * static_cast<size_t>(d.padded_vocab);
  CHECK(whole.logits() != nullptr && chunked.logits() != nullptr);
  CHECK_MSG(std::memcmp(whole.logits(), chunked.logits(), n * 4) == 0,
            "a chunked model's forward without targets differs from the unchunked model's logits");
  CHECK_MSG(chunked.activation_bytes() == before + n * 4,
            "the inference logits buffer is not counted: %zu vs %zu", chunked.activation_bytes(),
            before + n * 4);
  // And back to training: the loss is the chunked one again.
  const float l1 = chunked.forward(b.in.data(), b.tg.data(), kB, kT);
  const float l0 = whole.forward(b.in.data(), b.tg.data(), kB, kT);
  CHECK_MSG(std::fabs(l1 - l0) <= 1e-6f * l0, "loss after inference %.8f vs %.8f", l1, l0);
}

void chunk_rows_rule() {
  ModelDims smol = llama_dims(false);
  smol.vocab_size = 49152;
  smol.padded_vocab = 49152;
  const ModelShard whole;
  // 256 MiB of fp32 rows of 49152: 1365.3 rows -> 1344 (a multiple of 64).
  CHECK(logits_chunk_rows(smol, whole, 4, 256, 1 << 20) == 1344);
  CHECK(logits_chunk_rows(smol, whole, 4, 256, 1000) == 1000);  // at most N
  CHECK(logits_chunk_rows(smol, whole, 2, 256, 1 << 20) == 2688);
  ModelShard tp2;
  tp2.tp = 2;
  CHECK(logits_chunk_rows(smol, tp2, 4, 256, 1 << 20) == 2688);
  CHECK(logits_chunk_rows(smol, whole, 4, 0, 4096) == 4096);  // 0: the whole tensor
  CHECK(logits_chunk_rows(smol, whole, 4, 1, 4096) == 256);   // at least 256 rows
  CHECK(logits_chunk_rows(smol, whole, 4, 1, 100) == 100);
  CHECK(logits_chunk_rows(smol, whole, 4, 256, 4096) == 1024);  // 4 even chunks, not 3 x 1344 + 64
  CHECK(logits_chunk_rows(smol, whole, 4, 256, 2048) == 1024);
  CHECK(logits_chunk_rows(smol, whole, 4, 256, 2100) == 1088);  // 2 chunks: 1050 rounded up to 64
}

// tp=2: each rank's chunked shard against the whole unchunked model's gradients, sliced.
void tp_rank(int rank, int port) {
  get_backend("cpu").set_threads(1);
  const ModelDims d = gpt2_dims();
  const Batch b = batch(d.vocab_size);
  Model whole(d);
  whole.init_random(7);
  whole.zero_grad();
  const float loss_whole = whole.forward(b.in.data(), b.tg.data(), kB, kT);
  whole.backward(0.5f);
  auto world = comm::init_process_group("gloo", rank, 2, "127.0.0.1", port, comm::Millis(20000));
  const ModelShard shard = make_shard(d, 2, rank, 1, 0);
  for (int rows : {0, 7}) {
    ModelOptions o;
    o.logits_chunk_rows = rows;
    Model part(d, shard, nullptr, o);
    part.set_tensor_parallel_group(world.get());
    part.init_random(7);
    part.zero_grad();
    const float loss = part.forward(b.in.data(), b.tg.data(), kB, kT);
    part.backward(0.5f);
    std::vector<float> expect(part.num_params());
    full_to_shard(d, shard, whole.grads(), expect.data());
    const std::vector<float> got(part.grads(), part.grads() + part.num_params());
    const double gd = max_diff(expect, got), scale = max_abs(expect);
    std::printf("tp=2 rank %d chunk %d: loss %.8f (whole %.8f), max grad diff %.2e of %.2e\n", rank, rows,
                loss, loss_whole, gd, scale);
    CHECK_MSG(std::fabs(loss - loss_whole) < 2e-6f * std::fabs(loss_whole), "tp=2 rank %d chunk %d: loss",
              rank, rows);
    CHECK_MSG(gd < 1e-5 * scale && scale > 0, "tp=2 rank %d chunk %d: grad diff %.3g", rank, rows, gd);
  }
}

// ---- real runs -----------------------------------------------------------------------------------

std::string run_config(double chunk_mb, const std::string& parallel) {
  char mb[32];
  std::snprintf(mb, sizeof mb, "%g", chunk_mb);
  return std::string("[run]\nname = \"chunk\"\nseed = 5\nthreads = 1\n") +
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 4\nn_embd = 64\nvocab_size = 256\n"
         "max_seq_len = 96\n[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = 3\nmicro_batch = 4\nseq_len = 96\nlogits_chunk_mb = " +
         mb + "\n[optim]\nlr = 0.003\nwarmup_steps = 1\n[parallel]\ntimeout_s = 60\n" + parallel +
         "\n[checkpoint]\nevery = 3\n[eval]\nevery = 3\nbatches = 1\nsample_every = " +
         (parallel.empty() ? "3" : "0") + "\nsample_tokens = 8\n";  // samples need the whole model
}

int64_t reported_activation_bytes(const std::string& run_dir) {
  for (const auto& r : read_metrics(run_dir))
    if (r["type"] == "event" && r.contains("activation_bytes"))
      return std::stoll(r["activation_bytes"].get<std::string>());
  return -1;
}

uint64_t planned_act(const std::string& text) {
  const Plan p = make_plan(parse_config_toml(text, "chunk"), DeviceProfile{"test", 1e12, 1ull << 40, 1e10});
  const MemoryBreakdown& m = p.stages[0].memory;
  return m.activations + m.workspace;
}

void real_runs(const std::string& root, const std::string& name, int ranks, const std::string& parallel) {
  const hybrid_test::Run whole = hybrid_test::train(root, name + "-whole", ranks, run_config(0, parallel));
  const hybrid_test::Run chunked =
      hybrid_test::train(root, name + "-chunked", ranks, run_config(0.01, parallel));
  CHECK_MSG(whole.code == 0 && whole.losses.size() == 3, "%s whole: %s", name.c_str(), whole.output.c_str());
  hybrid_test::expect_close(whole, chunked, (name + " chunked vs whole").c_str());
  const int64_t b_whole = reported_activation_bytes(root + "/" + name + "-whole");
  const int64_t b_chunk = reported_activation_bytes(root + "/" + name + "-chunked");
  const int64_t drop = static_cast<int64_t>(planned_act(run_config(0, parallel))) -
                       static_cast<int64_t>(planned_act(run_config(0.01, parallel)));
  const int64_t vl = 256 / (ranks > 1 ? 2 : 1);
  std::printf("%s rank 0: activation bytes whole %lld, chunked %lld (drop %lld); planner drop %lld\n",
              name.c_str(), static_cast<long long>(b_whole), static_cast<long long>(b_chunk),
              static_cast<long long>(b_whole - b_chunk), static_cast<long long>(drop));
  CHECK_MSG(b_whole - b_chunk == (384 - 192) * vl * 4, "%s: drop %lld", name.c_str(),
            static_cast<long long>(b_whole - b_chunk));
  CHECK_MSG(b_whole - b_chunk == drop, "%s: measured drop %lld, planned %lld", name.c_str(),
            static_cast<long long>(b_whole - b_chunk), static_cast<long long>(drop));
}

}  // namespace

int main() {
  chunk_rows_rule();
  auto r = comm_test::run_ranks(comm_test::iota_ranks(2), [](int rank, int port) { tp_rank(rank, port); });
  comm_test::expect_all_ok(r, "tp=2 chunked shard vs whole model");
  in_process();
  inference();
  const std::string root = fresh_dir("model_logits_chunk");
  real_runs(root, "single", 1, "");
  real_runs(root, "tp2", 2, "tp = 2");
  return summary("model_logits_chunk");
}
