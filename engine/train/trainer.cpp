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
#include "engine/plan/planner.h"
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

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

uint64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io("cannot create directory " + dir + ": " + ec.message());
}

// Resolves the data source to train/val shard patterns, generating the synthetic corpus once.
std::pair<std::string, std::string> data_patterns(const RunConfig& cfg, const std::string& out_dir) {
  if (cfg.data.source == "synthetic") {
    const std::string dir = out_dir + "/data/synthetic-v" + std::to_string(cfg.model.vocab_size) + "-s" +
                            std::to_string(cfg.run.seed) + "-n" + std::to_string(cfg.data.synthetic_tokens);
    if (!fs::exists(dir + "/train_000.bin"))
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

class Progress {
 public:
  explicit Progress(std::FILE* out) : out_(out) {}
  template <typename... A>
  void line(const char* fmt, A... args) {
    if (!out_) return;
    std::fprintf(out_, fmt, args...);
    std::fputc('\n', out_);
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
};

struct Loop {
  const TrainOptions& opt;
  RunConfig cfg;
  std::string out_dir;
  GptDims dims;
  Backend& backend;
  GptModel model;
  std::vector<float> m, v;
  std::unique_ptr<DataLoader> train_loader;
  std::unique_ptr<DataLoader> val_loader;
  CheckpointStore store;
  MetricsWriter metrics;
  Progress progress;
  Rng rng;
  Heartbeat heartbeat;
  LrSchedule schedule;
  int64_t step = 0;        // completed optimizer steps
  int64_t tokens = 0;
  int64_t accum = 1;
  int64_t tokens_per_step = 0;
  float best_val = 0;
  double last_save_seconds = -1;
  double peak_flops = 0;
  double flops_per_token = 0;
  std::vector<int32_t> inputs, targets;

  Loop(const TrainOptions& o, const RunConfig& c, const std::string& dir)
      : opt(o),
        cfg(c),
        out_dir(dir),
        dims(dims_from_config(c.model)),
        backend(get_backend(c.run.device)),
        model(dims),
        store(dir + "/checkpoints"),
        metrics(dir + "/metrics.jsonl", o.metrics_to_stdout),
        progress(o.progress),
        rng(c.run.seed ^ 0x5A17E5ull) {}

  void setup_data() {
    auto [train_pattern, val_pattern] = data_patterns(cfg, out_dir);
    LoaderOptions lo;
    lo.pattern = train_pattern;
    lo.B = cfg.train.micro_batch;
    lo.T = cfg.train.seq_len;
    lo.shuffle = cfg.data.shuffle;
    lo.seed = cfg.run.seed;
    lo.checked = cfg.data.checked;
    lo.vocab_size = cfg.model.vocab_size;
    // Preflight: every shard's header, size and (checked mode) tokens, before any compute.
    for (const auto& path : expand_shards(train_pattern)) inspect_shard(path, cfg.model.vocab_size, cfg.data.checked);
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
    m.assign(model.num_params(), 0.0f);
    v.assign(model.num_params(), 0.0f);
  }

  // Returns the checkpoint directory resumed from ("" for a fresh start).
  std::string resume() {
    store.cleanup_tmp();
    const std::string mode = cfg.checkpoint.resume;
    std::optional<LoadedCheckpoint> ck;
    if (mode == "none") {
      const auto moved = store.set_aside_newer(0);
      if (!moved.empty())
        metrics.event("warning", "checkpoint.resume = none: moved " + std::to_string(moved.size()) +
                                     " earlier checkpoint(s) to " + store.root() + "/trash");
      return "";
    }
    if (mode == "auto") {
      std::vector<std::string> warnings;
      ck = store.load_latest(0, &warnings);
      for (const auto& w : warnings) {
        metrics.event("warning", w);
        progress.line("warning: %s", w.c_str());
      }
      if (!ck) return "";
    } else {
      ck = store.load_dir(mode, 0);
    }
    apply_checkpoint(*ck);
    store.set_aside_newer(ck->step);
    return ck->dir;
  }

  void apply_checkpoint(const LoadedCheckpoint& ck) {
    if (ck.config_hash != config_hash(cfg))
      throw_checkpoint("checkpoint " + ck.dir + " was written for a different model or optimizer shape (config hash " +
                       std::to_string(ck.config_hash) + ", this run " + std::to_string(config_hash(cfg)) +
                       "); resume it with its own config, or set checkpoint.resume = \"none\" or a new run.out_dir");
    if (ck.world_size != 1)
      throw_checkpoint("checkpoint " + ck.dir + " has " + std::to_string(ck.world_size) +
                       " ranks, this run has 1; resume with the same layout");
    const TrainerState st = parse_trainer_state(ck.trainer_state_json, ck.dir);
    const bool skip_moments = opt.skip_restore == "moments";
    for (const auto& t : ck.tensors) {
      std::vector<float>* dst = nullptr;
      float* raw = nullptr;
      if (t.name == "params") raw = model.params();
      if (t.name == "adam_m") dst = &m;
      if (t.name == "adam_v") dst = &v;
      if (dst && skip_moments) continue;
      const size_t expect = model.num_params() * sizeof(float);
      if ((raw || dst) && t.data.size() != expect)
        throw_checkpoint("checkpoint " + ck.dir + ": section '" + t.name + "' has " + std::to_string(t.data.size()) +
                         " bytes, expected " + std::to_string(expect));
      if (raw) std::memcpy(raw, t.data.data(), expect);
      if (dst) std::memcpy(dst->data(), t.data.data(), expect);
    }
    step = st.step;
    tokens = st.tokens;
    best_val = st.best_val_loss;
    last_save_seconds = st.last_save_seconds;
    if (opt.skip_restore != "rng") rng.set_state(st.rng);
    if (opt.skip_restore != "cursor") train_loader->set_cursor(st.train_cursor);
    if (opt.skip_restore == "lr") lr_offset = 1;
  }
  int64_t lr_offset = 0;  // negative control "lr": schedule off by one step after resume

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
    st.world_size = 1;
    st.engine_version = FLOTILLA_VERSION_STRING;
    return st;
  }

  void save(const std::string& reason) {
    const auto t0 = Clock::now();
    CheckpointSaveRequest req;
    req.step = step;
    req.rank = 0;
    req.world_size = 1;
    req.config_hash = config_hash(cfg);
    const int64_t n = static_cast<int64_t>(model.num_params());
    req.tensors.push_back({"params", {n}, model.params(), model.num_params() * sizeof(float)});
    req.tensors.push_back({"adam_m", {n}, m.data(), m.size() * sizeof(float)});
    req.tensors.push_back({"adam_v", {n}, v.data(), v.size() * sizeof(float)});
    // last_save_seconds inside the state is the previous save's duration (known before writing).
    req.trainer_state_json = trainer_state_to_json(current_state());
    const std::string dir = store.save(req, cfg.checkpoint.keep_last);
    last_save_seconds = ms_since(t0) / 1000.0;
    for (const auto& w : store.save_warnings()) metrics.event("warning", w);
    CheckpointRecord rec;
    rec.step = step;
    rec.dir = dir;
    rec.bytes = 3 * model.num_params() * sizeof(float);
    rec.seconds = last_save_seconds;
    rec.reason = reason;
    metrics.checkpoint(rec);
    metrics.sync();
    progress.line("checkpoint step %lld -> %s (%.2f s)", static_cast<long long>(step), dir.c_str(), last_save_seconds);
  }

  float evaluate() {
    if (!val_loader) return -1;
    val_loader->reset();
    double sum = 0;
    for (int b = 0; b < cfg.eval.batches; ++b) {
      val_loader->next_batch(inputs.data(), targets.data());
      sum += model.forward(inputs.data(), targets.data(), cfg.train.micro_batch, cfg.train.seq_len);
    }
    const float loss = static_cast<float>(sum / cfg.eval.batches);
    if (best_val <= 0 || loss < best_val) best_val = loss;
    metrics.eval({step, tokens, loss, cfg.eval.batches});
    progress.line("eval  step %lld | val loss %.4f", static_cast<long long>(step), loss);
    return loss;
  }

  void sample() {
    SampleOptions so;
    so.tokens = cfg.eval.sample_tokens;
    std::vector<int32_t> prompt = {0};
    const auto ids = sample_tokens(model, prompt, so, rng);
    metrics.sample(step, ids, "");
  }

  // One optimizer step; returns the step record.
  StepRecord train_step() {
    const auto t_step = Clock::now();
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
      model.backward(1.0f / static_cast<float>(accum));
      r.backward_ms += ms_since(t0);
    }
    r.loss = static_cast<float>(loss_sum / static_cast<double>(accum));
    const auto t_opt = Clock::now();
    const double sumsq = backend.sum_squares(model.grads(), model.num_params());
    r.grad_norm = static_cast<float>(std::sqrt(sumsq));
    if (cfg.train.grad_clip > 0 && r.grad_norm > cfg.train.grad_clip)
      backend.scale_values(model.grads(), model.num_params(), static_cast<float>(cfg.train.grad_clip / r.grad_norm));
    r.lr = schedule.at(r.step + lr_offset);
    const bool spike = cfg.train.spike_factor > 0 && loss_ema > 0 && r.loss > cfg.train.spike_factor * loss_ema;
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm) || spike) {
      r.skipped = true;
      metrics.event("warning", "step " + std::to_string(r.step) + ": skipped the update (loss " +
                                   std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) + ")");
    } else {
      const auto sizes = param_sizes(dims);
      for (int i = 0; i < kNumParamTensors; ++i) {
        const size_t off = model.param_offset(i);
        const float wd = param_decays(i) ? static_cast<float>(cfg.optim.weight_decay) : 0.0f;
        backend.adamw_update(model.params() + off, model.grads() + off, m.data() + off, v.data() + off, sizes[i],
                             static_cast<float>(r.lr), static_cast<float>(cfg.optim.beta1),
                             static_cast<float>(cfg.optim.beta2), static_cast<float>(cfg.optim.eps), wd, r.step);
      }
      loss_ema = loss_ema <= 0 ? r.loss : 0.95 * loss_ema + 0.05 * r.loss;
    }
    r.optimizer_ms = ms_since(t_opt);
    step = r.step;
    tokens += tokens_per_step;
    r.tokens = tokens;
    r.step_ms = ms_since(t_step);
    r.tokens_per_s = static_cast<double>(tokens_per_step) / (r.step_ms / 1000.0);
    r.mfu = peak_flops > 0 ? flops_per_token * r.tokens_per_s / peak_flops : 0.0;
    r.peak_rss_bytes = peak_rss_bytes();
    return r;
  }
  double loss_ema = 0;
};

}  // namespace

int run_training(const TrainOptions& options) {
  RunConfig cfg = options.config;
  validate_or_throw(cfg, 1);
  const std::string out_dir = resolved_out_dir(cfg);
  make_dirs(out_dir);
  ckpt::write_file_atomic(out_dir, "config.toml", config_to_toml(cfg), nullptr, "rename config", "fsync run dir");

  Loop loop(options, cfg, out_dir);
  loop.backend.set_threads(local_threads(cfg));
  loop.setup_data();
  loop.setup_model();
  loop.accum = grad_accum_steps(cfg);
  loop.tokens_per_step = tokens_per_step(cfg);
  loop.schedule = LrSchedule{cfg.optim.schedule, cfg.optim.lr,          cfg.optim.min_lr_ratio,
                             cfg.optim.warmup_steps, cfg.train.steps, cfg.optim.decay_fraction};
  const std::string resumed_from = loop.resume();
  loop.heartbeat.set_step(loop.step);
  loop.flops_per_token = flops_per_token(loop.dims, cfg.train.seq_len).palm;
  loop.peak_flops = options.peak_flops > 0 ? options.peak_flops
                                           : cpu_profile_measured(loop.backend.threads(), 0.15).flops_per_s;

  install_stop_signal_handlers();
  loop.metrics.run_start(cfg.run.name, config_to_json(cfg, -1), 1, num_parameters_unpadded(loop.dims),
                         loop.flops_per_token, loop.step, resumed_from);
  if (!resumed_from.empty())
    loop.progress.line("resumed from %s at step %lld", resumed_from.c_str(), static_cast<long long>(loop.step));
  loop.progress.line("run %s: %s, %.2fM parameters, %lld steps of %lld tokens (%lld micro-batches), %d threads, out %s",
                     cfg.run.name.c_str(), cfg.model.preset.c_str(), num_parameters_unpadded(loop.dims) / 1e6,
                     static_cast<long long>(cfg.train.steps), static_cast<long long>(loop.tokens_per_step),
                     static_cast<long long>(loop.accum), loop.backend.threads(), out_dir.c_str());

  const auto t_run = Clock::now();
  double tps_sum = 0, mfu_sum = 0;
  int64_t timed_steps = 0;
  float last_loss = 0;
  std::string exit_reason = "completed";
  int exit_code = static_cast<int>(ExitCode::kOk);
  const int64_t last_step = options.stop_after > 0 ? std::min(options.stop_after, cfg.train.steps) : cfg.train.steps;
  bool saved_at_end = false;
  const char* abort_env = std::getenv("FLOTILLA_TEST_ABORT_AT_STEP");
  const int64_t abort_at_step = abort_env ? std::atoll(abort_env) : -1;

  while (loop.step < last_step) {
    const StepRecord r = loop.train_step();
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
      loop.progress.line("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | MFU %.1f%% | %.0f ms",
                         static_cast<long long>(r.step), static_cast<long long>(cfg.train.steps), r.loss, r.lr,
                         r.grad_norm, r.tokens_per_s, 100.0 * r.mfu, r.step_ms);
    }
    const bool final_step = loop.step == cfg.train.steps;
    if ((cfg.eval.every > 0 && loop.step % cfg.eval.every == 0) || final_step) loop.evaluate();
    if (cfg.eval.sample_every > 0 && loop.step % cfg.eval.sample_every == 0) loop.sample();

    if (stop_requested()) {
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
      loop.progress.line("stopped by signal %d at step %lld", stop_signal(), static_cast<long long>(loop.step));
      break;
    }
    const bool periodic = cfg.checkpoint.every > 0 && loop.step % cfg.checkpoint.every == 0;
    const bool at_end = loop.step == last_step && (cfg.checkpoint.save_final || loop.step < cfg.train.steps);
    if (take_checkpoint_request()) {
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
