// The training loop (see trainer.h for the resumability decision).
//
// Order of one step: zero grads -> for each accumulation micro-step {next batch, forward,
// backward(1/accum)} -> global grad norm (deterministic) -> clip -> AdamW with the scheduled lr ->
// metrics; then, at the step boundary only, evaluation, sampling, checkpoints and stop requests.
#include "engine/train/trainer.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/registry.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/durable_io.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic.h"
#include "engine/interop/weights.h"
#include "engine/model/gpt.h"
#include "engine/parallel/rendezvous.h"
#include "engine/plan/planner.h"
#include "engine/train/data_parallel.h"
#include "engine/train/heartbeat.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/sampler.h"
#include "engine/train/signals.h"
#include "engine/train/trainer_state.h"
#include "flotilla/build_info.h"

namespace flotilla {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

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

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io("cannot create directory " + dir + ": " + ec.message());
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

int local_threads(const RunConfig& cfg) {
  if (cfg.run.threads > 0) return cfg.run.threads;
  int local_ranks = 1;
  if (const char* lws = std::getenv("LOCAL_WORLD_SIZE")) local_ranks = std::max(1, std::atoi(lws));
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return std::max(1, static_cast<int>(cores) / local_ranks);
}

// Human-readable progress: to the chosen stream (stderr for `train`) and, for rank 0, appended to
// <run dir>/train.log so a run folder carries its own history.
class Progress {
 public:
  Progress(std::FILE* out, const std::string& log_path) : out_(out) {
    if (!log_path.empty()) log_ = std::fopen(log_path.c_str(), "a");
  }
  ~Progress() {
    if (log_) std::fclose(log_);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  template <typename... A>
  void line(const char* fmt, A... args) {
    for (std::FILE* f : {out_, log_}) {
      if (!f) continue;
      std::fprintf(f, fmt, args...);
      std::fputc('\n', f);
      std::fflush(f);
    }
  }

 private:
  std::FILE* out_;
  std::FILE* log_ = nullptr;
};

struct Loop {
  const TrainOptions& opt;
  RunConfig cfg;
  std::string out_dir;
  parallel::DistEnv env;
  std::unique_ptr<parallel::ProcessGroup> world;  // null for a single process
  int rank = 0;
  int world_size = 1;
  GptDims dims;
  Backend& backend;
  GptModel model;
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<DataLoader> train_loader;
  std::unique_ptr<DataLoader> val_loader;
  CheckpointStore store;
  MetricsWriter metrics;
  Progress progress;
  Rng rng;
  Heartbeat heartbeat;
  LrSchedule schedule;
  int64_t step = 0;  // completed optimizer steps
  int64_t tokens = 0;
  int64_t accum = 1;
  int64_t tokens_per_step = 0;
  float best_val = 0;
  double last_save_seconds = -1;
  double peak_flops = 0;
  double flops_per_token = 0;
  double loss_ema = 0;
  int64_t lr_offset = 0;  // negative control "lr": schedule off by one step after resume
  std::vector<int32_t> inputs, targets;

  Loop(const TrainOptions& o, const RunConfig& c, const std::string& dir, const parallel::DistEnv& e,
       std::unique_ptr<parallel::ProcessGroup> w)
      : opt(o),
        cfg(c),
        out_dir(dir),
        env(e),
        world(std::move(w)),
        rank(e.rank),
        world_size(e.world_size),
        dims(dims_from_config(c.model)),
        backend(get_backend(c.run.device)),
        model(dims),
        store(dir + "/checkpoints"),
        metrics(e.rank == 0 ? dir + "/metrics.jsonl" : "", e.rank == 0 && o.metrics_to_stdout, e.rank),
        progress(e.rank == 0 ? o.progress : nullptr, e.rank == 0 ? dir + "/train.log" : ""),
        rng(c.run.seed ^ 0x5A17E5ull) {}

  void barrier() {
    if (world) world->barrier();
  }

  // Every rank gets rank 0's string.
  std::string broadcast_string(const std::string& s) {
    if (!world) return s;
    int64_t len = static_cast<int64_t>(s.size());
    world->broadcast(&len, 1, 0);
    std::string out = rank == 0 ? s : std::string(static_cast<size_t>(len), '\0');
    if (len > 0) world->broadcast_bytes(out.data(), out.size(), 0);
    return out;
  }

  void setup_data() {
    auto [train_pattern, val_pattern] = data_patterns(cfg, out_dir, rank == 0);
    barrier();  // rank 0 wrote the synthetic corpus
    LoaderOptions lo;
    lo.pattern = train_pattern;
    lo.B = cfg.train.micro_batch;
    lo.T = cfg.train.seq_len;
    lo.rank = rank;  // dp rank (tp = pp = 1)
    lo.world = world_size;
    lo.shuffle = cfg.data.shuffle;
    lo.seed = cfg.run.seed;
    lo.checked = cfg.data.checked;
    lo.vocab_size = cfg.model.vocab_size;
    // Preflight: every shard's header, size and (checked mode) tokens, before any compute.
    for (const auto& path : expand_shards(train_pattern))
      inspect_shard(path, cfg.model.vocab_size, cfg.data.checked);
    train_loader = std::make_unique<DataLoader>(lo);
    if (!val_pattern.empty()) {
      LoaderOptions vo = lo;
      vo.pattern = val_pattern;
      vo.shuffle = false;
      val_loader = std::make_unique<DataLoader>(vo);
    }
    inputs.resize(static_cast<size_t>(lo.B) * static_cast<size_t>(lo.T));
    targets.resize(inputs.size());
  }

  void setup_model() {
    model.init_random(cfg.run.seed);
    if (!cfg.model.init_from.empty()) {
      std::vector<float> p = interop::import_weights(cfg.model.init_from, dims);
      std::copy(p.begin(), p.end(), model.params());
      metrics.event("info", "initialised weights from " + cfg.model.init_from);
    }
    dp = std::make_unique<DataParallel>(world.get(), model, cfg.parallel.zero);
  }

  // Returns the checkpoint directory resumed from ("" for a fresh start). Rank 0 decides which
  // checkpoint (and does every file-system change); the others load their own file from it.
  std::string resume() {
    const std::string mode = cfg.checkpoint.resume;
    std::string chosen;
    std::optional<LoadedCheckpoint> ck;
    if (rank == 0) {
      store.cleanup_tmp();
      if (mode == "none") {
        const auto moved = store.set_aside_newer(0);
        if (!moved.empty())
          metrics.event("warning", "checkpoint.resume = none: moved " + std::to_string(moved.size()) +
                                       " earlier checkpoint(s) to " + store.root() + "/trash");
      } else if (mode == "auto") {
        std::vector<std::string> warnings;
        ck = store.load_latest(0, &warnings);
        for (const auto& w : warnings) {
          metrics.event("warning", w);
          progress.line("warning: %s", w.c_str());
        }
      } else {
        ck = store.load_dir(mode, 0);
      }
      if (ck) chosen = ck->dir;
    }
    chosen = broadcast_string(chosen);
    if (chosen.empty()) return "";
    if (rank != 0) ck = store.load_dir(chosen, rank);
    apply_checkpoint(*ck);
    if (rank == 0) store.set_aside_newer(ck->step);
    barrier();
    return chosen;
  }

  void apply_checkpoint(const LoadedCheckpoint& ck) {
    if (ck.config_hash != config_hash(cfg))
      throw_checkpoint(
          "checkpoint " + ck.dir + " was written for a different model or optimizer shape (config hash " +
          std::to_string(ck.config_hash) + ", this run " + std::to_string(config_hash(cfg)) +
          "); resume it with its own config, or set checkpoint.resume = \"none\" or a new run.out_dir");
    if (ck.world_size != world_size)
      throw_checkpoint("checkpoint " + ck.dir + " has " + std::to_string(ck.world_size) +
                       " rank(s), this run has " + std::to_string(world_size) +
                       "; resume with the same layout (resharding is not supported)");
    const TrainerState st = parse_trainer_state(ck.trainer_state_json, ck.dir);
    if (st.zero != dp->zero())
      throw_checkpoint("checkpoint " + ck.dir + " holds ZeRO-" + std::to_string(st.zero) +
                       " optimizer state, this run uses ZeRO-" + std::to_string(dp->zero()) +
                       "; resume with the same parallel.zero");
    const bool skip_moments = opt.skip_restore == "moments";
    for (const auto& t : ck.tensors) {
      float* dst = nullptr;
      size_t expect = 0;
      if (t.name == "params") dst = model.params(), expect = model.num_params();
      if (t.name == "adam_m" && !skip_moments) dst = dp->m().data(), expect = dp->state_size();
      if (t.name == "adam_v" && !skip_moments) dst = dp->v().data(), expect = dp->state_size();
      if (!dst) continue;
      if (t.data.size() != expect * sizeof(float))
        throw_checkpoint("checkpoint " + ck.dir + ": section '" + t.name + "' of rank " +
                         std::to_string(rank) + " has " + std::to_string(t.data.size()) +
                         " bytes, expected " + std::to_string(expect * sizeof(float)));
      std::memcpy(dst, t.data.data(), t.data.size());
    }
    if (rank != 0) {
      // Parameters live in rank 0's file: every rank takes them from there.
      world->broadcast(model.params(), model.num_params(), 0);
    } else if (world) {
      world->broadcast(model.params(), model.num_params(), 0);
    }
    step = st.step;
    tokens = st.tokens;
    best_val = st.best_val_loss;
    last_save_seconds = st.last_save_seconds;
    if (opt.skip_restore != "rng") rng.set_state(st.rng);
    if (opt.skip_restore != "cursor") train_loader->set_cursor(st.train_cursor);
    if (opt.skip_restore == "lr") lr_offset = 1;
  }

  TrainerState current_state() const {
    TrainerState st;
    st.step = step;
    st.tokens = tokens;
    st.rng = rng.state();
    st.train_cursor = train_loader->cursor();
    st.best_val_loss = best_val;
    st.last_save_seconds = last_save_seconds;
    st.config_json = config_to_json(cfg, -1);
    st.config_toml = config_to_toml(cfg);
    st.world_size = world_size;
    st.zero = dp->zero();
    st.engine_version = FLOTILLA_VERSION_STRING;
    return st;
  }

  void save(const std::string& reason) {
    const auto t0 = Clock::now();
    CheckpointSaveRequest req;
    req.step = step;
    req.rank = rank;
    req.world_size = world_size;
    req.config_hash = config_hash(cfg);
    const int64_t n = static_cast<int64_t>(model.num_params());
    const int64_t ns = static_cast<int64_t>(dp->state_size());
    if (rank == 0) req.tensors.push_back({"params", {n}, model.params(), model.num_params() * sizeof(float)});
    // ZeRO: every rank's shard of m and v; plain DP: rank 0's full copy (all ranks hold the same).
    if (rank == 0 || dp->zero() > 0) {
      req.tensors.push_back({"adam_m", {ns}, dp->m().data(), dp->state_size() * sizeof(float)});
      req.tensors.push_back({"adam_v", {ns}, dp->v().data(), dp->state_size() * sizeof(float)});
    }
    // last_save_seconds inside the state is the previous save's duration (known before writing).
    req.trainer_state_json = trainer_state_to_json(current_state());
    std::string dir;
    if (!world) {
      dir = store.save(req, cfg.checkpoint.keep_last);
    } else {
      const std::string tmp = broadcast_string(rank == 0 ? store.begin(step) : "");
      store.write_rank(tmp, req);
      world->barrier();  // every rank's file is durable
      if (rank == 0) dir = store.commit(tmp, req, world_size, cfg.checkpoint.keep_last);
      dir = broadcast_string(dir);
    }
    last_save_seconds = ms_since(t0) / 1000.0;
    for (const auto& w : store.save_warnings()) metrics.event("warning", w);
    CheckpointRecord rec;
    rec.step = step;
    rec.dir = dir;
    rec.bytes = 3 * model.num_params() * sizeof(float);  // parameters + m + v over all ranks
    rec.seconds = last_save_seconds;
    rec.reason = reason;
    metrics.checkpoint(rec);
    metrics.sync();
    progress.line("checkpoint step %lld -> %s (%.2f s)", static_cast<long long>(step), dir.c_str(),
                  last_save_seconds);
  }

  float evaluate() {
    if (!val_loader) return -1;
    val_loader->reset();
    double sum = 0;
    for (int b = 0; b < cfg.eval.batches; ++b) {
      val_loader->next_batch(inputs.data(), targets.data());
      sum += model.forward(inputs.data(), targets.data(), cfg.train.micro_batch, cfg.train.seq_len);
    }
    const float loss = static_cast<float>(dp->mean(sum / cfg.eval.batches));
    if (best_val <= 0 || loss < best_val) best_val = loss;
    metrics.eval({step, tokens, loss, cfg.eval.batches});
    progress.line("eval  step %lld | val loss %.4f", static_cast<long long>(step), loss);
    return loss;
  }

  void sample() {
    SampleOptions so;
    so.tokens = cfg.eval.sample_tokens;
    std::vector<int32_t> prompt = {0};
    const auto ids = sample_tokens(model, prompt, so, rng);  // every rank: keeps RNG streams equal
    metrics.sample(step, ids, "");
  }

  // One optimizer step; returns the step record.
  StepRecord train_step() {
    const auto t_step = Clock::now();
    dp->reset_comm_ms();
    StepRecord r;
    r.step = step + 1;
    model.zero_grad();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto t0 = Clock::now();
      train_loader->next_batch(inputs.data(), targets.data());
      r.data_ms += ms_since(t0);
      t0 = Clock::now();
      loss_sum += model.forward(inputs.data(), targets.data(), cfg.train.micro_batch, cfg.train.seq_len);
      r.forward_ms += ms_since(t0);
      t0 = Clock::now();
      const bool last = micro == accum - 1;  // gradient accumulation communicates only here
      if (last) {
        dp->begin_sync(model.grads());
        model.set_layer_backward_hook([this](int layer) { dp->layer_done(layer); });
      }
      model.backward(1.0f / static_cast<float>(accum));
      if (last) {
        model.set_layer_backward_hook(nullptr);
        dp->finish_sync();
      }
      r.backward_ms += ms_since(t0);
    }
    r.loss = static_cast<float>(dp->mean(loss_sum / static_cast<double>(accum)));
    const auto t_opt = Clock::now();
    r.grad_norm = static_cast<float>(dp->grad_norm(backend));
    if (cfg.train.grad_clip > 0 && r.grad_norm > cfg.train.grad_clip)
      dp->scale_grads(backend, static_cast<float>(cfg.train.grad_clip / r.grad_norm));
    r.lr = schedule.at(r.step + lr_offset);
    const bool spike =
        cfg.train.spike_factor > 0 && loss_ema > 0 && r.loss > cfg.train.spike_factor * loss_ema;
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm) || spike) {
      r.skipped = true;
      metrics.event("warning", "step " + std::to_string(r.step) + ": skipped the update (loss " +
                                   std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) +
                                   ")");
    } else {
      AdamHyper h;
      h.lr = static_cast<float>(r.lr);
      h.beta1 = static_cast<float>(cfg.optim.beta1);
      h.beta2 = static_cast<float>(cfg.optim.beta2);
      h.eps = static_cast<float>(cfg.optim.eps);
      h.weight_decay = static_cast<float>(cfg.optim.weight_decay);
      dp->optimizer_step(backend, model.params(), h, r.step);
      loss_ema = loss_ema <= 0 ? r.loss : 0.95 * loss_ema + 0.05 * r.loss;
    }
    r.comm_ms = dp->comm_ms();
    r.optimizer_ms = ms_since(t_opt);
    step = r.step;
    tokens += tokens_per_step;
    r.tokens = tokens;
    r.step_ms = ms_since(t_step);
    r.tokens_per_s = static_cast<double>(tokens_per_step) / (r.step_ms / 1000.0);
    r.mfu = peak_flops > 0 ? flops_per_token * r.tokens_per_s / (peak_flops * world_size) : 0.0;
    r.peak_rss_bytes = peak_rss_bytes();
    return r;
  }

  // Per-rank timings to every rank, plus the stop and checkpoint flags every rank must agree on
  // (a signal may reach the ranks between different steps). Returns {stop, checkpoint}.
  std::pair<bool, bool> exchange(StepRecord& r, bool stop, bool ckpt) {
    if (!world) return {stop, ckpt};
    constexpr size_t kFields = 8;
    const float mine[kFields] = {static_cast<float>(r.data_ms),
                                 static_cast<float>(r.forward_ms),
                                 static_cast<float>(r.backward_ms),
                                 static_cast<float>(r.optimizer_ms),
                                 static_cast<float>(r.comm_ms),
                                 static_cast<float>(r.step_ms),
                                 stop ? 1.0f : 0.0f,
                                 ckpt ? 1.0f : 0.0f};
    std::vector<float> all(kFields * static_cast<size_t>(world_size));
    world->all_gather(mine, all.data(), kFields);
    bool any_stop = false, any_ckpt = false;
    r.ranks.clear();
    for (int q = 0; q < world_size; ++q) {
      const float* f = all.data() + kFields * static_cast<size_t>(q);
      r.ranks.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
      any_stop = any_stop || f[6] > 0;
      any_ckpt = any_ckpt || f[7] > 0;
    }
    return {any_stop, any_ckpt};
  }
};

}  // namespace

int run_training(const TrainOptions& options) {
  const uint64_t baseline_rss = current_rss_bytes();
  RunConfig cfg = options.config;
  const parallel::DistEnv env = parallel::dist_env_from_environment();
  validate_or_throw(cfg, env.world_size);
  if (cfg.parallel.tp > 1 || cfg.parallel.pp > 1)
    throw_config(
        "parallel.tp = " + std::to_string(cfg.parallel.tp) +
        ", parallel.pp = " + std::to_string(cfg.parallel.pp) +
        ": tensor and pipeline parallelism are not in this build yet; use parallel.dp (with zero) for now");
  const std::string out_dir = resolved_out_dir(cfg);
  if (env.rank == 0) {
    make_dirs(out_dir);
    ckpt::write_file_atomic(out_dir, "config.toml", config_to_toml(cfg), nullptr, "rename config",
                            "fsync run dir");
  }
  std::unique_ptr<parallel::ProcessGroup> world;
  if (env.world_size > 1) {
    const std::string backend =
        cfg.parallel.backend == "auto" ? (cfg.run.device == "cuda" ? "nccl" : "gloo") : cfg.parallel.backend;
    world = parallel::init_process_group(
        backend, env, parallel::Millis(static_cast<int64_t>(cfg.parallel.timeout_s * 1000.0)));
  }
  Loop loop(options, cfg, out_dir, env, std::move(world));
  loop.backend.set_threads(local_threads(cfg));
  loop.setup_data();
  loop.setup_model();
  loop.accum = grad_accum_steps(cfg);
  loop.tokens_per_step = tokens_per_step(cfg);
  loop.schedule = LrSchedule{cfg.optim.schedule,     cfg.optim.lr,    cfg.optim.min_lr_ratio,
                             cfg.optim.warmup_steps, cfg.train.steps, cfg.optim.decay_fraction};
  loop.heartbeat.set_collective_provider([] {
    const auto records = parallel::collective_records();
    return !records.empty() && records[0].started && !records[0].finished ? records[0].describe() : std::string();
  });
  const std::string resumed_from = loop.resume();
  loop.heartbeat.set_step(loop.step);
  loop.flops_per_token = flops_per_token(loop.dims, cfg.train.seq_len).palm;
  loop.peak_flops = options.peak_flops > 0 ? options.peak_flops
                                           : cpu_profile_measured(loop.backend.threads(), 0.15).flops_per_s;
  if (loop.world) {  // MFU against the same peak on every rank: rank 0's measurement
    double peak = loop.peak_flops;
    loop.world->broadcast(&peak, 1, 0);
    loop.peak_flops = peak;
  }

  install_stop_signal_handlers();
  loop.metrics.run_start(cfg.run.name, config_to_json(cfg, -1), loop.world_size,
                         num_parameters_unpadded(loop.dims), loop.flops_per_token, loop.step, resumed_from,
                         baseline_rss);
  if (!resumed_from.empty())
    loop.progress.line("resumed from %s at step %lld", resumed_from.c_str(),
                       static_cast<long long>(loop.step));
  loop.progress.line(
      "run %s: %s, %.2fM parameters, %lld steps of %lld tokens (%lld micro-batches), %d rank(s) x %d "
      "threads, ZeRO-%d, out %s",
      cfg.run.name.c_str(), cfg.model.preset.c_str(), num_parameters_unpadded(loop.dims) / 1e6,
      static_cast<long long>(cfg.train.steps), static_cast<long long>(loop.tokens_per_step),
      static_cast<long long>(loop.accum), loop.world_size, loop.backend.threads(), loop.dp->zero(),
      out_dir.c_str());

  const auto t_run = Clock::now();
  double tps_sum = 0, mfu_sum = 0;
  int64_t timed_steps = 0;
  float last_loss = 0;
  std::string exit_reason = "completed";
  int exit_code = static_cast<int>(ExitCode::kOk);
  const int64_t last_step =
      options.stop_after > 0 ? std::min(options.stop_after, cfg.train.steps) : cfg.train.steps;
  bool saved_at_end = false;
  const char* abort_env = std::getenv("FLOTILLA_TEST_ABORT_AT_STEP");
  const int64_t abort_at_step = abort_env ? std::atoll(abort_env) : -1;

  while (loop.step < last_step) {
    StepRecord r = loop.train_step();
    const auto [stop_now, checkpoint_now] = loop.exchange(r, stop_requested(), take_checkpoint_request());
    loop.heartbeat.set_step(loop.step);
    if (loop.step == abort_at_step) std::abort();  // test hook: a crash at a known step (R2)
    last_loss = r.loss;
    if (r.step > 1 || loop.step == 1) {
      tps_sum += r.tokens_per_s;
      mfu_sum += r.mfu;
      ++timed_steps;
    }
    if (cfg.train.log_every > 0 && (r.step % cfg.train.log_every == 0 || r.step == last_step)) {
      loop.metrics.step(r);
      loop.progress.line(
          "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | MFU %.1f%% | %.0f ms",
          static_cast<long long>(r.step), static_cast<long long>(cfg.train.steps), r.loss, r.lr, r.grad_norm,
          r.tokens_per_s, 100.0 * r.mfu, r.step_ms);
    }
    const bool final_step = loop.step == cfg.train.steps;
    if ((cfg.eval.every > 0 && loop.step % cfg.eval.every == 0) || final_step) loop.evaluate();
    if (cfg.eval.sample_every > 0 && loop.step % cfg.eval.sample_every == 0) loop.sample();

    if (stop_now) {
      // Preemption: save only when the last measured save fits the grace period (RELIABILITY C3).
      const double grace = cfg.checkpoint.preempt_grace_s;
      const double expected = loop.last_save_seconds >= 0 ? loop.last_save_seconds : 0.0;
      if (expected < grace * 0.8) {
        loop.save("preempt");
      } else {
        loop.metrics.event("warning", "stop requested: last save took " + std::to_string(expected) +
                                          " s, more than the grace period allows (" + std::to_string(grace) +
                                          " s); exiting without saving");
      }
      exit_reason = "preempted";
      exit_code = static_cast<int>(ExitCode::kPreempted);
      saved_at_end = true;
      loop.progress.line("stopped by signal %d at step %lld", stop_signal(),
                         static_cast<long long>(loop.step));
      break;
    }
    const bool periodic = cfg.checkpoint.every > 0 && loop.step % cfg.checkpoint.every == 0;
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
  const double wall = ms_since(t_run) / 1000.0;
  loop.metrics.summary(loop.step, loop.tokens, last_loss, loop.best_val, wall,
                       timed_steps ? tps_sum / static_cast<double>(timed_steps) : 0,
                       timed_steps ? mfu_sum / static_cast<double>(timed_steps) : 0, exit_reason);
  loop.metrics.sync();
  return exit_code;
}

}  // namespace flotilla
