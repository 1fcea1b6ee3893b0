// The training loop (see trainer.h for the resumability decision).
//
// Order of one step: zero grads -> for each accumulation micro-step {next batch, forward,
// backward(1/accum)} (with pp > 1: accum/micro_batches rounds of the pipeline schedule) -> tied
// wte gradient summed between the first and last stage -> DP gradient sync -> loss from the last
// stage -> global grad norm (deterministic; over DP, TP and PP) -> clip -> AdamW with the
// scheduled lr -> metrics; then, at the step boundary only, evaluation, sampling, checkpoints and
// stop requests. The layout is described in trainer_loop.h; building the loop (groups, data, model)
// is in trainer_setup.cpp.
#include "engine/train/trainer.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/checkpoint/durable_io.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/core/run_lock.h"
#include "engine/cpu/peak.h"
#include "engine/cpu/peak_cache.h"
#include "engine/core/stop_request.h"
#include "engine/data/chat_format.h"
#include "engine/data/run_tokenizer.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/model_source.h"
#include "engine/interop/peft.h"
#include "engine/interop/weights.h"
#include "engine/plan/memory_check.h"
#include "engine/plan/planner.h"
#include "engine/train/comm_meter.h"
#include "engine/train/sampler.h"
#include "engine/train/signals.h"
#include "engine/train/trainer_loop.h"

namespace flotilla {
namespace {

namespace fs = std::filesystem;

using train_detail::Clock;
using train_detail::Loop;
using train_detail::ms_since;
using train_detail::mib_text;

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

// Resident memory now (not the peak): the process baseline before training allocates anything.
uint64_t current_rss_bytes() {
  long pages_total = 0, pages_resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return static_cast<uint64_t>(pages_resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// This process's share of the run folder's lock (closed, and so released, when training returns).
struct RunFolderHold {
  int fd;
  explicit RunFolderHold(const std::string& dir) : fd(hold_run_folder_shared(dir)) {}
  ~RunFolderHold() { ::close(fd); }
  RunFolderHold(const RunFolderHold&) = delete;
  RunFolderHold& operator=(const RunFolderHold&) = delete;
};

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io("cannot create directory " + dir + ": " + ec.message());
}


int local_threads(const RunConfig& cfg) {
  if (cfg.run.threads > 0) return cfg.run.threads;
  int local_ranks = 1;
  if (const char* lws = std::getenv("LOCAL_WORLD_SIZE")) local_ranks = std::max(1, std::atoi(lws));
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return std::max(1, static_cast<int>(cores) / local_ranks);
}

}  // namespace

namespace train_detail {

float Loop::evaluate() {
  if (!val_loader) return -1;
  val_loader->reset();
  std::vector<MicroBatch> batches;
  const LossMean mean = read_batches(*val_loader, cfg.eval.batches, batches);
  double sum = 0;
  // Evaluation draws no LoRA dropout masks; back to training on return.
  struct Training {
    Loop& loop;
    explicit Training(Loop& l) : loop(l) { set(false); }
    ~Training() { set(true); }
    void set(bool on) {
      loop.model.set_training(on);
      if (loop.device) loop.device->set_training(on);
    }
  } eval_mode(*this);
  if (pipeline) {  // on the host model or the device's stage alike
    sum = pipeline->forward_only(batches.data(), cfg.eval.batches);
    groups.pp->broadcast(&sum, 1, cfg.parallel.pp - 1);  // the last stage has the loss
  } else if (device) {
    sum = device_eval_sum(batches);
  } else {
    for (const MicroBatch& mb : batches)
      sum += model.forward(mb.inputs.data(), mb.targets.data(), cfg.train.micro_batch, cfg.train.seq_len,
                           mb.pos()) *
             mb.loss_weight;
  }
  const float loss = static_cast<float>(dp->mean(mean.of(sum, cfg.eval.batches)));
  if (best_val <= 0 || loss < best_val) best_val = loss;
  metrics.eval({step, tokens, loss, cfg.eval.batches});
  progress.line("eval  step %lld | val loss %.4f", static_cast<long long>(step), loss);
  return loss;
}

void Loop::sample() {
  if (sharded()) return;  // validate() rejects eval.sample_every with tp/pp > 1
  if (!sample_start) {
    // Once: with the run's tokenizer (data/run_tokenizer.h), a sample starts where a document does
    // (BOS, else end-of-text) and ends at the tokenizer's end tokens and its chat format's end of
    // turn; without one (the synthetic demo) it starts at token 0 and runs eval.sample_tokens.
    // Rank 0 decides and every rank takes its ids, so the ranks' RNG streams stay equal.
    std::string ids;
    if (rank == 0) {
      const std::string path = run_tokenizer_path(cfg);
      if (!path.empty()) {
        try {
          const Tokenizer tok = Tokenizer::load(path);
          ids = std::to_string(tok.bos_id().value_or(tok.eot_id()));
          for (uint32_t id : stop_token_ids(tok, default_chat_format(tok)))
            if (static_cast<int>(id) < dims.vocab_size) ids += " " + std::to_string(id);
        } catch (const std::exception& e) {
          progress.line("samples: the tokenizer in %s does not load (%s); samples run %d tokens from token 0",
                        path.c_str(), e.what(), cfg.eval.sample_tokens);
          ids.clear();
        }
      }
    }
    std::istringstream in(broadcast_string(ids));
    int32_t id = 0;
    sample_start.emplace();
    if (in >> id && id < dims.vocab_size) sample_start->push_back(id);
    else sample_start->push_back(0);
    while (in >> id) sample_stop_ids.push_back(id);
  }
  SampleOptions so;
  so.tokens = cfg.eval.sample_tokens;
  so.stop_ids = sample_stop_ids;
  const std::vector<int32_t>& prompt = *sample_start;
  if (device) device->get_params(model.params());  // the host mirror samples
  model.set_training(false);
  const auto ids = sample_tokens(model, prompt, so, rng);  // every rank: keeps RNG streams equal
  model.set_training(true);
  metrics.sample(step, ids, "");
}

double Loop::pipeline_rounds(const std::function<void()>& before_last_backward, StepRecord& r) {
  const int64_t rounds = accum / cfg.parallel.micro_batches;
  PipelineRunner::Timing timing;
  double loss_sum = 0;
  for (int64_t round = 0; round < rounds; ++round)
    loss_sum += pipeline->run(micro.data() + round * cfg.parallel.micro_batches,
                              round == rounds - 1 ? before_last_backward : nullptr, timing);
  r.forward_ms = timing.forward_ms;
  r.backward_ms = timing.backward_ms;
  r.bubble_ms = timing.bubble_ms;
  return loss_sum;
}

// One optimizer step; returns the step record.
StepRecord Loop::train_step() {
  if (device) {
    StepRecord r = device_train_step();
    r.peak_rss_bytes = peak_rss_bytes();
    return r;
  }
  const auto t_step = Clock::now();
  dp->reset_comm_ms();
  const double tp_wait0 = tp_wait_ms();
  StepRecord r;
  r.step = step + 1;
  model.zero_grad();
  model.set_dropout_step(r.step, coord.dp);
  dp->begin_step();
  double loss_sum = 0;
  auto t_data = Clock::now();
  const LossMean loss_mean = read_batches(*train_loader, accum, micro);
  r.data_ms = ms_since(t_data);
  const bool every = dp->syncs_every_micro_step();  // ZeRO-2: layer gradients are only staged
  auto start_sync = [this, every] {  // before the step's last backward: overlap the DP all-reduce
    dp->begin_sync(every ? nullptr : model.grads());
    model.set_layer_backward_hook([this](int layer) {
      if (layer >= 0) dp->layer_done(layer);  // -1: the embedding, reduced in finish_sync
    });
  };
  if (pipeline) {
    loss_sum = pipeline_rounds(start_sync, r);
    model.set_layer_backward_hook(nullptr);
  } else {
    for (int64_t k = 0; k < accum; ++k) {
      const MicroBatch& mb = micro[static_cast<size_t>(k)];
      auto t0 = Clock::now();
      loss_sum += model.forward(mb.inputs.data(), mb.targets.data(), cfg.train.micro_batch, cfg.train.seq_len,
                                mb.pos()) *
                  mb.loss_weight;
      r.forward_ms += ms_since(t0);
      t0 = Clock::now();
      // Gradient accumulation communicates only on the last micro-step (ZeRO-2: on every one).
      const bool sync = every || k == accum - 1;
      if (sync) start_sync();
      model.backward(mb.loss_scale);
      if (sync) model.set_layer_backward_hook(nullptr);
      if (every) dp->end_micro_step();
      r.backward_ms += ms_since(t0);
    }
  }
  const double tp_ms = tp_wait_ms() - tp_wait0;  // the f/g all-reduces inside forward and backward
  double tied_ms = 0;
  if (comm::ProcessGroup* tied = tied_group()) {  // the tied embedding: embedding + LM-head grads
    const auto t0 = Clock::now();
    tied->all_reduce(model.grad_tensor(model.tied_tensor()), model.param_size(model.tied_tensor()));
    tied_ms = ms_since(t0);
  }
  dp->finish_sync();
  if (pipeline) groups.pp->broadcast(&loss_sum, 1, cfg.parallel.pp - 1);  // the last stage has the loss
  r.loss = static_cast<float>(dp->mean(loss_mean.of(loss_sum, accum)));
  const auto t_opt = Clock::now();
  r.grad_norm = static_cast<float>(dp->grad_norm(backend));
  const StepDecision decision = decide(r);
  if (!decision.skip) {
    dp->optimizer_step(model.params(), adamw_hyper(cfg.optim, r.lr), decision.grad_scale, r.step);
    loss_ema = next_loss_ema(loss_ema, r.loss);
  }
  r.comm_ms = dp->comm_ms() + tp_ms + tied_ms;
  r.optimizer_ms = ms_since(t_opt);
  step = r.step;
  tokens += tokens_per_step;
  r.tokens = tokens;
  r.step_ms = ms_since(t_step);
  r.tokens_per_s = static_cast<double>(tokens_per_step) / (r.step_ms / 1000.0);
  r.mfu = cpu::mfu_ratio(flops_per_token * r.tokens_per_s, peak_flops * world_size);
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

StepDecision Loop::decide(StepRecord& r) {
  r.lr = schedule.at(r.step + lr_offset);
  StepDecision d = decide_step(cfg.train, r.step, r.loss, r.grad_norm, loss_ema);
  const bool nonfinite = !std::isfinite(r.loss) || !std::isfinite(r.grad_norm);
  nonfinite_run = nonfinite ? nonfinite_run + 1 : 0;
  if (d.skip) {
    r.skipped = true;
    metrics.event("warning", d.why);
    progress.line("warning: %s", d.why.c_str());  // train.log and stderr too, not only the record
  }
  return d;
}

// Per-rank timings to every rank, plus the stop and checkpoint flags every rank must agree on
// (a signal may reach the ranks between different steps) and rank 0's checkpoint.every = "auto"
// decision. Returns {stop, checkpoint, auto save}.
std::tuple<bool, bool, bool> Loop::exchange(StepRecord& r, bool stop, int requests, bool auto_due) {
  const auto take = [this](int most) {
    if (most <= requests_honoured) return false;
    requests_honoured = most;
    return true;
  };
  if (!world) return {stop, take(requests), auto_due};
  constexpr size_t kFields = 10;
  const float mine[kFields] = {static_cast<float>(r.data_ms),
                               static_cast<float>(r.forward_ms),
                               static_cast<float>(r.backward_ms),
                               static_cast<float>(r.optimizer_ms),
                               static_cast<float>(r.comm_ms),
                               static_cast<float>(r.step_ms),
                               static_cast<float>(r.bubble_ms),
                               stop ? 1.0f : 0.0f,
                               static_cast<float>(requests),  // exact below 2^24
                               auto_due ? 1.0f : 0.0f};
  std::vector<float> all(kFields * static_cast<size_t>(world_size));
  world->all_gather(mine, all.data(), kFields);
  bool any_stop = false;
  int most_requests = 0;
  r.ranks.clear();
  for (int q = 0; q < world_size; ++q) {
    const float* f = all.data() + kFields * static_cast<size_t>(q);
    r.ranks.push_back({f[0], f[1], f[2], f[3], f[4], f[5], f[6]});
    any_stop = any_stop || f[7] > 0;
    most_requests = std::max(most_requests, static_cast<int>(f[8]));
  }
  return {any_stop, take(most_requests), all[9] > 0};  // rank 0 decides the "auto" save
}
}  // namespace train_detail

// checkpoint.export_hf / export_peft: the final checkpoint (gathered from every shard's rank file) as
// a Hugging Face folder (a LoRA run's merged into its base) and as a PEFT adapter folder, written by
// rank 0 once every rank has saved. A failed export leaves the checkpoint intact and says how to
// retry; it is the run's exit status (kIo), since the folder was asked for.
static int export_at_end(train_detail::Loop& loop) {
  loop.barrier();
  const RunConfig& cfg = loop.cfg;
  int code = static_cast<int>(ExitCode::kOk);
  if (loop.rank == 0) {
    const std::string ckpt = loop.out_dir + "/checkpoints";
    std::string what = "checkpoint.export_hf", retry = "--format hf --out " + cfg.checkpoint.export_hf;
    try {
      const ModelCheckpoint c = load_model_checkpoint(ckpt, nullptr);
      if (!cfg.checkpoint.export_peft.empty()) {
        what = "checkpoint.export_peft";
        retry = "--format peft --out " + cfg.checkpoint.export_peft;
        interop::PeftExportOptions o;
        o.base_model_name_or_path = cfg.model.init_from;
        interop::export_peft_adapter(cfg.checkpoint.export_peft, c.dims, c.lora, c.params.data(), o);
        std::error_code ec;
        const std::string where = std::filesystem::absolute(cfg.checkpoint.export_peft, ec).string();
        loop.metrics.event("info", "exported step " + std::to_string(c.step) + "'s LoRA adapter as a PEFT folder to " +
                                       (ec ? cfg.checkpoint.export_peft : where));
        loop.progress.line("exported the adapter of step %lld -> %s", static_cast<long long>(c.step),
                           cfg.checkpoint.export_peft.c_str());
      }
      if (!cfg.checkpoint.export_hf.empty()) {
        what = "checkpoint.export_hf";
        retry = "--format hf --out " + cfg.checkpoint.export_hf;
        interop::HfExportOptions o;
        std::string why;
        o.dtype = cfg.checkpoint.export_dtype == "source" ? interop::source_dtype(cfg.model.init_from, &why)
                                                          : cfg.checkpoint.export_dtype;
        o.source_folder = interop::is_hf_folder(cfg.model.init_from) ? cfg.model.init_from : "";
        const std::vector<float> merged = interop::merged_model_params(c);
        interop::export_hf_folder(cfg.checkpoint.export_hf, c.dims, merged.data(), o);
        const std::string merge = c.lora.enabled() ? ", " + interop::merged_export_note(c.lora) : "";
        std::error_code ec;
        const std::string where = std::filesystem::absolute(cfg.checkpoint.export_hf, ec).string();
        loop.metrics.event("info", "exported step " + std::to_string(c.step) + " as a Hugging Face folder (" +
                                       o.dtype + (why.empty() ? "" : ", as the source: " + why) + merge +
                                       ") to " + (ec ? cfg.checkpoint.export_hf : where));
        loop.progress.line("exported step %lld -> %s%s%s", static_cast<long long>(c.step),
                           cfg.checkpoint.export_hf.c_str(), c.lora.nf4 ? "; " : "",
                           c.lora.nf4 ? interop::merged_export_note(c.lora).c_str() : "");
      }
    } catch (const std::exception& e) {
      loop.metrics.event("error", what + " failed: " + e.what() +
                                      "; the final checkpoint is intact: flotilla-worker export --checkpoint " +
                                      ckpt + " " + retry);
      code = static_cast<int>(ExitCode::kIo);
    }
  }
  int64_t shared = code;
  if (loop.world) loop.world->broadcast(&shared, 1, 0);
  return static_cast<int>(shared);
}

int run_training(const TrainOptions& options) {
  // First: a stop (a budget, a Slurm time limit, a user's Stop) or a checkpoint request (USR1,
  // whose default action would kill us) that arrives while the run is still setting up is then
  // honoured after step 1, with a checkpoint, instead of killing the worker with nothing saved.
  install_stop_signal_handlers();
  // A stop.request older than this start is an earlier start's (the file's time: the real clock,
  // not clk::wall_now's, which tests may shift).
  const double started_wall =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const uint64_t baseline_rss = current_rss_bytes();
  RunConfig cfg = options.config;
  interop::apply_hf_init_from(cfg);    // a Hugging Face folder decides the model's shape
  interop::apply_lora_init_from(cfg);  // a PEFT adapter folder decides the adapters' shape
  const comm::DistEnv env = comm::dist_env_from_environment();
  const std::string layout_note = train_detail::prepare_layout_change(cfg, env.world_size);
  refuse_unsupported_device_training(cfg);  // device_model.h: what CUDA training cannot run yet
  const bool cpu_bf16 = cfg.run.device == "cpu" && cfg.train.dtype == "bf16";
  if (options.check_memory) {                          // before any allocation
    check_run_fits_memory(cfg, env.local_world_size);  // the planner knows CPU bf16's fp32 storage
  }
  const std::string out_dir = resolved_out_dir(cfg);
  make_dirs(out_dir);
  // Held until this process exits: the folder is in use while any rank of the group lives, so a
  // second start there is refused (engine/core/run_lock.h), also after launch was killed.
  const RunFolderHold folder_in_use(out_dir);
  if (env.rank == 0) {
    // Before anything is written here: a save that failed on a full disk (a rank killed mid-save)
    // left a step-N.tmp-* folder that may hold the very space this start needs.
    CheckpointStore(out_dir + "/checkpoints").cleanup_tmp();
  }
  std::unique_ptr<comm::ProcessGroup> world;
  if (env.world_size > 1) {
    const std::string backend =
        cfg.parallel.backend == "auto" ? (cfg.run.device == "cuda" ? "nccl" : "gloo") : cfg.parallel.backend;
    world = comm::init_process_group(backend, env,
                                     comm::Millis(static_cast<int64_t>(cfg.parallel.timeout_s * 1000.0)));
  }
  Loop loop(options, cfg, out_dir, env, std::move(world));
  loop.backend.set_threads(local_threads(cfg));
  if (&loop.backend != &get_backend("cpu"))  // the host mirror (sampling) runs on the CPU backend
    get_backend("cpu").set_threads(local_threads(cfg));
  loop.backend.set_deterministic(cfg.train.deterministic);
  // CPU mixed precision: bf16 matmul operands on the fp32 model (refused, naming train.dtype and
  // the missing CPU feature, where the CPU has no bf16 instructions).
  if (cpu_bf16) loop.backend.set_matmul_dtype(DType::kBF16);
  loop.setup_groups();
  loop.setup_data();
  loop.setup_model();
  loop.setup_tasks();  // before resume: a resumed run's best checkpoint by task score is kept again
  loop.accum = grad_accum_steps(cfg);
  loop.tokens_per_step = tokens_per_step(cfg);
  loop.schedule = LrSchedule{cfg.optim.schedule,     cfg.optim.lr,    cfg.optim.min_lr_ratio,
                             cfg.optim.warmup_steps, cfg.train.steps, cfg.optim.decay_fraction};
  // An orphaned rank (launch killed) saves only when the last save fits preempt_grace_s; past that
  // and a margin the watchdog ends it.
  loop.heartbeat.set_orphan_grace(cfg.checkpoint.preempt_grace_s + 30);
  loop.heartbeat.set_collective_provider([] {
    const auto records = comm::collective_records();
    return !records.empty() && records[0].started && !records[0].finished ? records[0].describe()
                                                                          : std::string();
  });
  if (!layout_note.empty() && env.rank == 0) {
    loop.metrics.event("info", layout_note);
    loop.progress.line("%s", layout_note.c_str());
  }
  const std::string resumed_from = loop.resume();
  if (cfg.checkpoint.every == kCheckpointEveryAuto && env.rank == 0) loop.start_auto_interval();
  // Only now is the start decided: a refused one (no checkpoint verifies, an incompatible one)
  // leaves config.toml, which `flotilla runs resume` reads, as it was.
  if (env.rank == 0)
    ckpt::write_file_atomic(out_dir, "config.toml", config_to_toml(cfg), nullptr, "rename config",
                            "fsync run dir");
  loop.heartbeat.set_step(loop.step);
  loop.flops_per_token = flops_per_token(loop.dims, cfg.train.seq_len, loop.model.lora()).palm;
  const double device_peak = loop.device ? loop.device->peak_flops() : 0.0;
  std::string peak_source = options.peak_flops > 0 ? "given (FLOTILLA_PEAK_FLOPS)" : "device data sheet";
  bool cpu_ceiling = false;  // this rank took the CPU ceiling from engine/cpu/peak_cache.h
  if (options.peak_flops > 0) {
    loop.peak_flops = options.peak_flops;
  } else if (device_peak > 0) {
    loop.peak_flops = device_peak;
  } else if (env.rank == 0 || !loop.world) {
    cpu_ceiling = true;
    // This machine's fp32 FMA (or, for bf16, dot-product) ceiling for this thread count, kept from a quiet
    // measurement (engine/cpu/peak_cache.h); only rank 0 measures, the others take its figure below.
    const cpu::PeakForRun peak = cpu::peak_for_run(loop.backend.threads());
    loop.peak_flops = cpu::ceiling_flops(peak.peak, cpu_bf16 ? "bf16" : "fp32");
    peak_source = std::string(cpu_bf16 ? "bf16 dot-product ceiling, " : "fp32 FMA ceiling, ") + peak.source;
  }
  if (loop.world) {  // MFU against the same peak on every rank: rank 0's measurement
    double peak = loop.peak_flops;
    loop.world->broadcast(&peak, 1, 0);
    loop.peak_flops = peak;
  }

  loop.metrics.run_start(cfg.run.name, config_to_json(cfg, -1), loop.world_size,
                         num_parameters_unpadded(loop.dims), loop.flops_per_token, loop.step, resumed_from,
                         baseline_rss);
  if (env.rank == 0) {
    char peak_text[64];
    std::snprintf(peak_text, sizeof peak_text, "%.1f GFLOP/s per rank", loop.peak_flops / 1e9);
    loop.metrics.event("info", std::string("MFU ceiling: ") + peak_text + " (" + peak_source + ")",
                       {{"peak_flops", std::to_string(loop.peak_flops)}, {"peak_source", peak_source}});
  }
  // This rank's gradient-sized allocations (ZeRO-2 lowers them; tests/engine/test_zero2_memory.cpp).
  if (loop.dp->dp_size() > 1)
    loop.metrics.event(
        "info",
        "gradient memory: " + mib_text(static_cast<double>(loop.model.grad_bytes() + loop.dp->grad_bytes())),
        {{"grad_bytes_model", std::to_string(loop.model.grad_bytes())},
         {"grad_bytes_dp", std::to_string(loop.dp->grad_bytes())}});
  if (loop.device) {
    auto fields = loop.device->memory_report();
    std::string msg = "training on " + loop.device->describe();
    if (fields.count("predicted_bytes"))
      msg += "; device memory predicted " + mib_text(fields["predicted_bytes"]) + " (planner: " +
             mib_text(fields["planner_bytes"]) + "), measured " + mib_text(fields["measured_bytes"]) +
             " (cudaMemGetInfo delta over the allocation)";
    loop.metrics.event("info", msg, fields);
    loop.progress.line("%s", msg.c_str());
  }
  if (!resumed_from.empty())
    loop.progress.line("resumed from %s at step %lld", resumed_from.c_str(),
                       static_cast<long long>(loop.step));
  if (loop.model.lora().enabled()) {
    const LoraSpec& lo = loop.model.lora();
    const size_t trainable = lora_parameter_count(loop.dims, lo), all = num_parameters_unpadded(loop.dims);
    // "4.88M" or, below a million, "148,736".
    const auto count = [](size_t n) {
      char b[32];
      if (n >= 1000000)
        std::snprintf(b, sizeof b, "%.2fM", static_cast<double>(n) / 1e6);
      else
        std::snprintf(b, sizeof b, "%zu,%03zu", n / 1000, n % 1000);
      return std::string(n >= 1000000 || n >= 1000 ? b : std::to_string(n));
    };
    char text[400];
    std::snprintf(text, sizeof text,
                  "%s r %d, alpha %g (scale %.4g%s), dropout %g on %s: %s trainable parameters, %.3f%% of %s "
                  "(the base is frozen%s)",
                  lo.nf4 ? "QLoRA" : "LoRA", lo.rank, lo.alpha, static_cast<double>(lo.scale()), lo.rslora ? ", rsLoRA" : "",
                  static_cast<double>(lo.dropout), lora_targets_text(lo.targets).c_str(), count(trainable).c_str(),
                  100.0 * static_cast<double>(trainable) / static_cast<double>(all), count(all).c_str(),
                  lo.nf4 ? (lo.double_quant ? ", its projections in 4-bit NF4 with double quantisation"
                                            : ", its projections in 4-bit NF4")
                         : "");
    loop.metrics.event("info", text,
                       {{"lora_trainable_params", std::to_string(trainable)},
                        {"lora_rank", std::to_string(lo.rank)},
                        {"lora_targets", lora_targets_text(lo.targets)}});
    loop.progress.line("%s", text);
  }
  // The model as the user chose it: a preset, or the architecture and the folder it came from.
  std::string model_label = cfg.model.preset == "custom" ? "custom " + cfg.model.arch : cfg.model.preset;
  if (!cfg.model.init_from.empty()) model_label += " from " + cfg.model.init_from;
  loop.progress.line(
      "run %s: %s, %.2fM parameters, %lld steps of %lld tokens (%lld micro-batches), %d rank(s) x %d "
      "threads, %s%s, ZeRO-%d, out %s",
      cfg.run.name.c_str(), model_label.c_str(), num_parameters_unpadded(loop.dims) / 1e6,
      static_cast<long long>(cfg.train.steps), static_cast<long long>(loop.tokens_per_step),
      static_cast<long long>(loop.accum), loop.world_size, loop.backend.threads(),
      train_detail::layout_text(cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp).c_str(),
      cfg.parallel.pp > 1 ? (" (" + cfg.parallel.schedule + ")").c_str() : "", loop.dp->zero(),
      out_dir.c_str());

  const auto t_run = Clock::now();
  const int64_t start_step = loop.step;
  double tps_sum = 0, mfu_sum = 0;
  int64_t timed_steps = 0;
  float last_loss = 0;
  std::string exit_reason = "completed", stop_reason;
  int exit_code = static_cast<int>(ExitCode::kOk);
  const int64_t last_step =
      options.stop_after > 0 ? std::min(options.stop_after, cfg.train.steps) : cfg.train.steps;
  bool saved_at_end = false;
  const char* abort_env = std::getenv("FLOTILLA_TEST_ABORT_AT_STEP");
  const int64_t abort_at_step = abort_env ? std::atoll(abort_env) : -1;
  // Test hook: a pause after each step, so a test's tiny run cannot end before the fault it
  // injects mid-run (a fast machine runs thousands of such steps a second).
  const char* pace_env = std::getenv("FLOTILLA_TEST_STEP_SLEEP_MS");
  const int pace_ms = pace_env ? std::atoi(pace_env) : 0;

  // Rank 0's groups' communication per step, a comm record after each step record (comm_meter.h).
  CommMeter comm_meter;
  if (env.rank == 0 && loop.world)
    for (const comm::ProcessGroup* g :
         {loop.groups.dp.get(), loop.groups.tp.get(), loop.groups.pp.get(), loop.embed.get()})
      comm_meter.add_group(g);
  bool reported_activations = false;
  while (loop.step < last_step) {
    comm_meter.begin_step();
    StepRecord r = loop.train_step();
    comm_meter.end_step(r.step_ms);
    if (!reported_activations) {  // arenas are sized by the first step
                                  // (tests/engine/test_model_recompute.cpp)
      reported_activations = true;
      const size_t act = loop.device ? loop.device->activation_bytes() : loop.model.activation_bytes();
      loop.metrics.event(
          "info",
          "activation memory: " + mib_text(static_cast<double>(act)) +
              (cfg.train.recompute ? " (recompute on)" : ""),
          {{"activation_bytes", std::to_string(act)}, {"recompute", cfg.train.recompute ? "true" : "false"}});
    }
    const bool auto_due = loop.auto_interval && loop.auto_interval_due(r);
    const auto [stop_now, checkpoint_now, auto_now] =
        loop.exchange(r, stop_requested(), checkpoint_request_count(), auto_due);
    loop.heartbeat.set_step(loop.step);
    if (loop.step == abort_at_step) std::abort();  // test hook: a crash at a known step (R2)
    if (pace_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pace_ms));
    last_loss = r.loss;
    // cpu::mfu_ratio gives NaN when the step beat the ceiling: that ceiling is wrong for the whole run.
    if (std::isnan(r.mfu)) loop.ceiling_wrong = true;
    if (loop.ceiling_wrong) r.mfu = std::numeric_limits<double>::quiet_NaN();
    if (r.step > 1 || loop.step == 1) {
      tps_sum += r.tokens_per_s;
      if (!loop.ceiling_wrong) mfu_sum += r.mfu;
      ++timed_steps;
    }
    if (cfg.train.log_every > 0 && (r.step % cfg.train.log_every == 0 || r.step == last_step)) {
      loop.metrics.step(r);
      if (!comm_meter.empty()) loop.metrics.comm(comm_meter.take(r.step));
      char mfu_text[48];
      if (loop.ceiling_wrong)
        std::snprintf(mfu_text, sizeof mfu_text, "MFU n/a (ceiling measured under load)");
      else
        std::snprintf(mfu_text, sizeof mfu_text, "MFU %.1f%%", 100.0 * r.mfu);
      loop.progress.line("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %s | %.0f ms",
                         static_cast<long long>(r.step), static_cast<long long>(cfg.train.steps), r.loss,
                         r.lr, r.grad_norm, r.tokens_per_s, mfu_text, r.step_ms);
    }
    // Non-finite losses or gradients: each update is skipped, so the weights stay as they were. After
    // kNonFiniteLimit such steps in a row, or when they are every step this run has made, nothing
    // will change that: the run ends failed (exit 4, never retried) rather than "completed" untrained.
    constexpr int64_t kNonFiniteLimit = 10;
    if (loop.nonfinite_run > 0 && loop.nonfinite_run >= std::min(kNonFiniteLimit, last_step - start_step)) {
      std::string msg = "step " + std::to_string(loop.step) +
                        ": the loss or gradient norm was not finite for " +
                        std::to_string(loop.nonfinite_run) +
                        " step(s) in a row, each update skipped, so the model is not training; the run "
                        "stops as failed. ";
      if (loop.nonfinite_run == loop.step - start_step && start_step == 0)
        msg += cfg.model.init_from.empty()
                   ? "The model gave a non-finite loss from its first step: check the data and lower optim.lr"
                   : "The model gave a non-finite loss from its first step: check the weights of "
                     "model.init_from (" +
                         cfg.model.init_from + ") for NaN or Inf";
      else
        msg += "Lower optim.lr, set train.grad_clip, or resume from an earlier checkpoint";
      loop.metrics.event("error", msg);
      loop.metrics.sync();
      throw_data(msg);
    }
    const bool final_step = loop.step == cfg.train.steps;
    if ((cfg.eval.every > 0 && loop.step % cfg.eval.every == 0) || final_step) {
      loop.evaluate();
      loop.evaluate_tasks();  // eval.tasks, beside the validation loss (trainer_tasks.cpp)
    }
    if (cfg.eval.sample_every > 0 && loop.step % cfg.eval.sample_every == 0) loop.sample();

    if (stop_now) {
      // Who asked (engine/core/stop_request.h): a user's Stop or a budget writes stop.request before
      // its SIGTERM; without one the signal came from the system, a preemption.
      const std::optional<StopRequest> asked = read_stop_request(out_dir, started_wall);
      const std::string why = asked ? (asked->cause == "budget" ? asked->note
                                                                 : "stopped on request" +
                                                                       (asked->by.empty() ? std::string()
                                                                                          : " (" + asked->by + ")"))
                                    : "preempted by the system (signal " + std::to_string(stop_signal()) + ")";
      // Save only when the last measured save fits the grace period (docs/reliability.md C3).
      const double grace = cfg.checkpoint.preempt_grace_s;
      const double expected = loop.last_save_seconds >= 0 ? loop.last_save_seconds : 0.0;
      if (expected < grace * 0.8) {
        loop.save(stop_checkpoint_reason(asked));
      } else {
        loop.metrics.event("warning", why + ": last save took " + std::to_string(expected) +
                                          " s, more than the grace period allows (" + std::to_string(grace) +
                                          " s); exiting without saving");
      }
      exit_reason = asked ? "stopped" : "preempted";
      stop_reason = why;
      exit_code = static_cast<int>(ExitCode::kPreempted);
      saved_at_end = true;
      loop.metrics.event(asked ? "info" : "warning", why + " at step " + std::to_string(loop.step));
      loop.progress.line("%s at step %lld", why.c_str(), static_cast<long long>(loop.step));
      break;
    }
    const bool periodic = (cfg.checkpoint.every > 0 && loop.step % cfg.checkpoint.every == 0) || auto_now;
    const bool at_end = loop.step == last_step && (cfg.checkpoint.save_final || loop.step < cfg.train.steps);
    if (checkpoint_now) {
      loop.save("request");
      saved_at_end = loop.step == last_step;
    } else if (periodic || at_end) {
      loop.save(at_end && !periodic ? (loop.step < cfg.train.steps ? "request" : "final") : "periodic");
      saved_at_end = loop.step == last_step;
    }
  }
  (void)saved_at_end;
  if (exit_code == static_cast<int>(ExitCode::kOk) && loop.step < cfg.train.steps) exit_reason = "stopped";
  if (exit_code == static_cast<int>(ExitCode::kOk) && loop.step == cfg.train.steps &&
      (!cfg.checkpoint.export_hf.empty() || !cfg.checkpoint.export_peft.empty()))
    exit_code = export_at_end(loop);
  const double wall = ms_since(t_run) / 1000.0;
  loop.metrics.summary(loop.step, loop.tokens, last_loss, loop.best_val, wall,
                       timed_steps ? tps_sum / static_cast<double>(timed_steps) : 0,
                       loop.ceiling_wrong ? std::numeric_limits<double>::quiet_NaN()
                       : timed_steps      ? mfu_sum / static_cast<double>(timed_steps)
                                          : 0,
                       exit_reason, stop_reason);
  loop.metrics.sync();
  // The run outran the kept ceiling (its MFU was not reported): the next start measures it again.
  if (cpu_ceiling && loop.ceiling_wrong)
    cpu::mark_peak_beaten(cpu::peak_cache_path(), cpu::cpu_features().brand, loop.backend.threads());
  return exit_code;
}

}  // namespace flotilla
