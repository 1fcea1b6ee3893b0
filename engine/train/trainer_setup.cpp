// Building the training loop (trainer_loop.h) before its first step: the rank grid and its
// process groups, the data (preflight and loaders) and the model (random initialisation, imported
// weights, a LoRA or QLoRA base, data parallelism and ZeRO, the device model, the pipeline), and the
// reading of a step's micro-batches with their loss weights. The steps themselves: trainer.cpp.
//
// One non-obvious decision: the device starts from the host model's initialisation, bit for bit,
// and a QLoRA base is built quantised and handed to the device before the host model consumes it,
// so the host never holds the base twice (the planner counts the peak that way).
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/core/error.h"
#include "engine/data/synthetic.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/model_source.h"
#include "engine/interop/peft.h"
#include "engine/interop/weights.h"
#include "engine/model/base_weights.h"
#include "engine/train/data_preflight.h"
#include "engine/train/trainer_loop.h"

namespace flotilla {
namespace {

namespace fs = std::filesystem;

// Where the weights came from, for the log: the value, and for a Hub name also its snapshot folder
// (already resolved by then, so no second lookup reaches the network).
std::string weights_source(const std::string& init_from) {
  if (!interop::is_hub_name(init_from)) return init_from;
  return init_from + " (Hugging Face cache: " + interop::local_model_folder(init_from, "model.init_from") +
         ")";
}

// Resolves the data source to train/val shard patterns, generating the synthetic corpus once.
std::pair<std::string, std::string> data_patterns(const RunConfig& cfg, const std::string& out_dir,
                                                  bool generate) {
  if (cfg.data.source == "synthetic") {
    const std::string dir = out_dir + "/data/synthetic-v" + std::to_string(cfg.model.vocab_size) + "-s" +
                            std::to_string(cfg.run.seed) + "-n" + std::to_string(cfg.data.synthetic_tokens);
    if (generate && !fs::exists(dir + "/train_000.bin"))
      write_synthetic_corpus(dir, cfg.model.vocab_size, cfg.data.synthetic_tokens,
                             std::max<int64_t>(cfg.data.synthetic_tokens / 10, 1), cfg.run.seed);
    return {dir + "/train_*.bin", dir + "/val_*.bin"};
  }
  return {cfg.data.train, cfg.data.val};
}

}  // namespace

namespace train_detail {

std::string mib_text(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024.0 * 1024.0) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  } else if (bytes >= 1024.0 * 1024.0 || bytes <= 0) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  } else {  // a tiny model's sizes: "0.0 MiB" would read as nothing at all
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  }
  return buf;
}
std::string mib_text(const std::string& bytes) {
  try {
    return mib_text(std::stod(bytes));
  } catch (const std::exception&) {
    return bytes + " bytes";
  }
}

Loop::Loop(const TrainOptions& o, const RunConfig& c, const std::string& dir, const comm::DistEnv& e,
           std::unique_ptr<comm::ProcessGroup> w)
    : opt(o),
      cfg(c),
      out_dir(dir),
      env(e),
      world(std::move(w)),
      rank(e.rank),
      world_size(e.world_size),
      grid(e.world_size, c.parallel.dp, c.parallel.tp, c.parallel.pp),
      coord(grid.coord(e.rank)),
      dims(dims_from_config(c.model)),
      backend(get_backend(c.run.device)),
      model(dims, make_shard(dims, c.parallel.tp, coord.tp, c.parallel.pp, coord.pp), nullptr,
            host_model_options(c)),
      store(dir + "/checkpoints"),
      metrics(e.rank == 0 ? dir + "/metrics.jsonl" : "", e.rank == 0 && o.metrics_to_stdout, e.rank),
      progress(e.rank == 0 ? o.progress : nullptr, e.rank == 0 ? dir + "/train.log" : "", &step),
      rng(c.run.seed ^ 0x5A17E5ull) {}

void Loop::barrier() {
  if (world) world->barrier();
}

std::string Loop::broadcast_string(const std::string& s) {
  if (!world) return s;
  int64_t len = static_cast<int64_t>(s.size());
  world->broadcast(&len, 1, 0);
  std::string out = rank == 0 ? s : std::string(static_cast<size_t>(len), '\0');
  if (len > 0) world->broadcast_bytes(out.data(), out.size(), 0);
  return out;
}

comm::ProcessGroup* Loop::tied_group() const {
  if (cfg.parallel.pp == 1 || !model.shard().has_wte() || model.tied_tensor() < 0) return nullptr;
  return cfg.parallel.pp == 2 ? groups.pp.get() : embed.get();
}

void Loop::setup_groups() {
  const comm::Millis timeout(static_cast<int64_t>(cfg.parallel.timeout_s * 1000.0));
  if (world) {
    groups = parallel::make_parallel_groups(*world, grid);
    // pp > 2: the tied embedding's gradient is summed between the first and the last stage.
    if (cfg.parallel.pp > 2 && model.shard().has_wte() && model.tied_tensor() >= 0)
      embed = groups.pp->new_group({0, cfg.parallel.pp - 1}, "embed");
  } else {
    groups.dp = comm::make_solo_group("dp", 0, timeout);
    groups.tp = comm::make_solo_group("tp", 0, timeout);
    groups.pp = comm::make_solo_group("pp", 0, timeout);
  }
  model.set_tensor_parallel_group(groups.tp.get());
}

double Loop::tp_wait_ms() const { return groups.tp->stats().total().wait_s * 1000.0; }

void Loop::setup_data() {
  auto [train_pattern, val_pattern] = data_patterns(cfg, out_dir, rank == 0);
  barrier();  // rank 0 wrote the synthetic corpus
  // The preflight (every shard's header, size and, checked, tokens) and the loaders: the same code
  // the app's wizard runs before it offers the start (engine/train/data_preflight.h).
  RunData data = open_run_data(cfg, train_pattern, val_pattern, coord.dp);
  train_loader = std::move(data.train);
  val_loader = std::move(data.val);
  labeled = train_loader->has_labels() || (val_loader && val_loader->has_labels());
}

// Tests only (FLOTILLA_TEST_TRACE_ROWS=DIR): every training row this DP rank reads, one line each
// ("<step> <token ids>") in DIR/rows-<dp rank>.txt, so a test can check that a resume on another
// layout neither repeats nor skips a sequence. TP and PP peers read the same rows: only the first
// of them writes.
void Loop::trace_rows(const DataLoader& loader, const std::vector<MicroBatch>& batches) const {
  static const char* dir = std::getenv("FLOTILLA_TEST_TRACE_ROWS");
  if (!dir || !*dir || &loader != train_loader.get() || coord.tp != 0 || coord.pp != 0) return;
  const std::string path = std::string(dir) + "/rows-" + std::to_string(coord.dp) + ".txt";
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw_io("cannot open " + path);
  const size_t T = static_cast<size_t>(cfg.train.seq_len);
  for (const MicroBatch& mb : batches)
    for (size_t row = 0; row * T < mb.inputs.size(); ++row) {
      std::fprintf(f, "%lld", static_cast<long long>(step + 1));
      for (size_t t = 0; t < T; ++t) std::fprintf(f, " %d", mb.inputs[row * T + t]);
      std::fputc('\n', f);
    }
  std::fclose(f);
}

LossMean Loop::read_batches(DataLoader& loader, int64_t count, std::vector<MicroBatch>& out) {
  const size_t N = static_cast<size_t>(cfg.train.micro_batch) * static_cast<size_t>(cfg.train.seq_len);
  out.resize(static_cast<size_t>(count));
  double counted = 0;
  for (MicroBatch& mb : out) {
    mb.inputs.resize(N);
    mb.targets.resize(N);
    mb.positions.resize(N);
    loader.next_batch(mb.inputs.data(), mb.targets.data(), mb.positions.data());
    if (!loader.has_labels()) mb.positions.clear();  // 0..T-1 in every row: the model's default
    mb.counted = 0;
    for (int32_t t : mb.targets) mb.counted += t != kIgnoreTarget ? 1 : 0;
    counted += static_cast<double>(mb.counted);
  }
  trace_rows(loader, out);
  // The whole global batch's counted targets (every DP rank reads different rows).
  double global = counted;
  if (groups.dp->size() > 1 && labeled) groups.dp->all_reduce(&global, 1);
  const double dps = static_cast<double>(groups.dp->size());
  const double full = dps * static_cast<double>(count) * static_cast<double>(N);
  step_counted = global;
  if (!labeled || global == full) {  // nothing ignored: the mean of the micro-batch means
    for (MicroBatch& mb : out) {
      mb.loss_scale = 1.0f / static_cast<float>(count);
      mb.loss_weight = 1.0;
    }
    return LossMean{};
  }
  // d(loss) per counted target = dp / global (the DP average divides by dp): the mean over every
  // counted target of the global batch.
  for (MicroBatch& mb : out) {
    mb.loss_scale = global > 0 ? static_cast<float>(static_cast<double>(mb.counted) * dps / global) : 0.0f;
    mb.loss_weight = static_cast<double>(mb.counted);
  }
  return LossMean{true, global > 0 ? dps / global : 0.0};
}

void Loop::setup_model() {
  model.set_recompute(cfg.train.recompute);
  const bool lora = model.lora().enabled();
  // QLoRA: the base is built quantised (base_weights.h), for the host model and a device alike,
  // never as a whole fp32 model; the random initialisation's base only without model.init_from.
  const bool nf4 = model.nf4_base();
  model.init_random(cfg.run.seed, !nf4);
  std::vector<float> base;  // LoRA: the whole frozen base, for the device (below)
  std::unique_ptr<BaseWeights> qbase;
  if (nf4) {
    const ModelShard& s = model.shard();
    const bool dq = model.lora().double_quant;
    const std::string& from = cfg.model.init_from;
    if (from.empty()) {
      qbase = std::make_unique<BaseWeights>(
          random_base_weights(dims, cfg.run.seed, true, dq, s.layer_begin, s.layer_end));
    } else if (interop::is_hf_folder(from)) {
      qbase = std::make_unique<BaseWeights>(
          interop::load_hf_base(from, dims, true, dq, s.layer_begin, s.layer_end));
    } else {
      const std::vector<float> p = interop::import_weights(from, dims);
      qbase = std::make_unique<BaseWeights>(base_weights_from_full(dims, p.data(), true, dq));
    }
    const std::string what = std::string(" (NF4") + (dq ? ", double quantisation" : "") + ": " +
                             mib_text(static_cast<double>(qbase->quantized_bytes())) +
                             " quantised projections, " +
                             mib_text(static_cast<double>(qbase->dense_bytes())) + " other tensors)";
    const std::string line = std::string("frozen 4-bit base from ") +
                             (from.empty() ? "random initialisation" : weights_source(from)) + what;
    metrics.event("info", line);
    progress.line("%s", line.c_str());
  } else if (!cfg.model.init_from.empty()) {
    std::vector<float> p = interop::is_hf_folder(cfg.model.init_from)
                               ? interop::import_hf_weights(cfg.model.init_from, dims)
                               : interop::import_weights(cfg.model.init_from, dims);
    if (lora) {
      model.set_base_from_full(p.data());
      base = std::move(p);
    } else {
      model.set_params_from_full(p.data());
    }
    metrics.event("info", std::string(lora ? "frozen base weights from " : "initialised weights from ") +
                              weights_source(cfg.model.init_from));
  }
  if (lora) {
    // What the checkpoints record of the base, so a resume on changed weights is refused: rank 0
    // reads the files once and every rank gets its fingerprint.
    base_fingerprint =
        broadcast_string(rank == 0 ? interop::base_weights_fingerprint(cfg.model.init_from) : "");
    if (!cfg.lora.init_from.empty()) {
      const std::vector<float> a = interop::import_peft_adapter(cfg.lora.init_from, dims, model.lora());
      model.set_params_from_full(a.data());
      metrics.event("info", "LoRA adapters continued from " + cfg.lora.init_from);
    }
    if (base.empty() && !nf4) {  // a weights file without a folder: the host model holds the base
      base.assign(model.base_layout().full_params(), 0.0f);
      model.base_to_full(base.data());
    }
  }
  dp = std::make_unique<DataParallel>(groups.dp.get(), model, cfg.parallel.zero, cfg.parallel.bucket_mb,
                                      cfg.parallel.overlap);
  if (dp->zero() == 0 && dp->dp_size() > 1) {  // what the gradient sync does, for the advice to match
    char mib[32];
    std::snprintf(mib, sizeof mib, "%g", cfg.parallel.bucket_mb);
    const std::string how = cfg.parallel.bucket_mb > 0
                                ? "layers merged to parallel.bucket_mb = " + std::string(mib) + " MiB"
                                : std::string("one per layer");
    const std::string when =
        cfg.parallel.overlap ? "overlapping backward" : "after backward (parallel.overlap = false)";
    metrics.event("info",
                  "data parallel: " + std::to_string(dp->bucket_count()) +
                      " gradient all-reduces per step (" + how + ", then the rest), " + when,
                  {{"buckets", std::to_string(dp->bucket_count())}});
  }
  if (sharded()) {
    // Count each replicated tensor once in the gradient norm, then sum over TP and PP.
    std::vector<std::pair<size_t, size_t>> counted;
    for (int i = 0; i < model.layout().size(); ++i)
      if (model.param_size(i) > 0 && counts_once(model.layout(), model.shard(), i))
        counted.push_back({model.param_offset(i), model.param_size(i)});
    dp->set_norm_reduction(counted, {groups.tp.get(), groups.pp.get()});
  }
  // The device starts from the host's initialisation, bit for bit (resume overwrites both).
  OptimizerShard shard;
  if (cfg.parallel.zero > 0 && groups.dp->size() > 1)
    shard = OptimizerShard{groups.dp.get(), dp->state_begin(), dp->state_size()};
  device =
      make_device_model(cfg, dims, shard, ModelParallel{model.shard(), groups.tp.get(), groups.pp.get()});
  if (device && qbase)
    device->set_base(*qbase);
  else if (device && lora)
    device->set_base_params(base.data());
  // The host model takes the quantised base last, consuming it: the host never holds it twice.
  if (qbase) {
    model.set_base(std::move(*qbase));
    qbase.reset();
    // The loader's many freed tensors stay in glibc's heap otherwise (18-26 MiB on a 135M model):
    // give them back before training, so the peak is the model's, as the planner counts it.
    malloc_trim(0);
  }
  if (device) push_to_device();
  if (cfg.parallel.pp > 1) {
    if (device)  // the stages run on the device; the host model stays a mirror
      pipeline = std::make_unique<PipelineRunner>(*device->pipeline_stage(), *groups.pp,
                                                  cfg.parallel.schedule, cfg.parallel.micro_batches,
                                                  cfg.train.micro_batch, cfg.train.seq_len);
    else
      pipeline = std::make_unique<PipelineRunner>(model, *groups.pp, cfg.parallel.schedule,
                                                  cfg.parallel.micro_batches, cfg.train.micro_batch,
                                                  cfg.train.seq_len);
  }
}

}  // namespace train_detail
}  // namespace flotilla
