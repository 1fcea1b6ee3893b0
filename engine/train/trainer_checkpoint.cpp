// Saving and resuming a run (see trainer.h for what makes resume bitwise).
//
// Who writes what: the first DP replica of every shard (dp index 0; rank 0 alone for a plain
// single-shard run) writes "params" (its shard, in the shard's local layout, param_layout.h) and,
// without ZeRO, "adam_m"/"adam_v"; with ZeRO every rank writes its own optimizer shard. On resume
// every rank reads its own file and the DP group broadcasts what only its first replica read.
// On another layout (dp x tp x pp, ZeRO stage) rank 0 gathers the full state and every rank cuts
// its own shard from it (reshard()); the data cursor is regrouped (loader.h set_cursor).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/interop/peft.h"
#include "engine/train/trainer_loop.h"
#include "flotilla/build_info.h"

namespace flotilla::train_detail {

std::string layout_text(int dp, int tp, int pp) {
  return "dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) + " x pp=" + std::to_string(pp);
}

// Every value of a checkpoint's trainer.json checked against its folder, its MANIFEST and this run's
// data, before the checkpoint is chosen: a value that cannot be true (a step other than the
// folder's, negative tokens, a cursor outside the data, a config_toml that is not the one the
// checkpoint was saved with) marks the checkpoint damaged like a checksum fault, so resume falls
// back to the previous one that verifies (docs/reliability.md E3). A checksum only proves the bytes
// are the ones written, not that they were written by this engine. What a user can change on
// purpose (the layout, the batch, the data) is refused later by apply_checkpoint, as before.
void Loop::check_trainer_state(const LoadedCheckpoint& c) {
  const TrainerState st = parse_trainer_state(c.trainer_state_json, c.dir);
  const auto damaged = [&](const std::string& what) {
    throw_checkpoint(c.dir + "/trainer.json " + what + "; the checkpoint is damaged");
  };
  if (st.step != c.step)
    damaged("says step " + std::to_string(st.step) + ", its folder and MANIFEST say " +
            std::to_string(c.step));
  if (st.world_size != c.world_size)
    damaged("says " + std::to_string(st.world_size) + " rank(s), its MANIFEST " +
            std::to_string(c.world_size));
  if (st.dp < 1 || st.tp < 1 || st.pp < 1 || int64_t{st.dp} * st.tp * st.pp != st.world_size)
    damaged("has layout " + layout_text(st.dp, st.tp, st.pp) + ", which is not " +
            std::to_string(st.world_size) + " rank(s)");
  if (st.zero < 0 || st.zero > 2) damaged("has ZeRO stage " + std::to_string(st.zero));
  // Every step reads at least one global micro-batch (the cursor's unit, the same in this run or
  // apply_checkpoint refuses the batch), and a run that made no step read nothing.
  const int64_t unit = train_loader->cursor()[5];
  if (st.tokens < 0 || (st.step == 0) != (st.tokens == 0) || (unit > 0 && st.tokens / unit < st.step))
    damaged("says " + std::to_string(st.tokens) + " tokens for " + std::to_string(st.step) +
            " steps of at least " + std::to_string(unit));
  if (st.rng.has_spare > 1) damaged("has rng.has_spare " + std::to_string(st.rng.has_spare) + " (0 or 1)");
  if (st.rng.s[0] == 0 && st.rng.s[1] == 0 && st.rng.s[2] == 0 && st.rng.s[3] == 0)
    damaged("has an all-zero rng state (a generator that never leaves 0)");
  if (st.rng.has_spare && !std::isfinite(st.rng.spare)) damaged("has a non-finite rng spare");
  if (!std::isfinite(st.best_val_loss) || st.best_val_loss < 0)
    damaged("has best_val_loss " + std::to_string(st.best_val_loss));
  if (!std::isfinite(st.last_save_seconds) || st.last_save_seconds < -1)
    damaged("has last_save_seconds " + std::to_string(st.last_save_seconds));
  // The cursor, tried on this run's loader and put back: one outside the data is damage (a changed
  // batch or changed data is the user's doing, refused as before by apply_checkpoint).
  const std::vector<int64_t> here = train_loader->cursor();
  try {
    train_loader->set_cursor(st.train_cursor, true);
    train_loader->set_cursor(here);
  } catch (const Error& e) {
    if (e.code() == ExitCode::kCheckpoint) damaged(std::string("has a bad train_cursor: ") + e.what());
  }
  // config_toml is the resolved config the checkpoint was saved with: its shape must hash to the
  // MANIFEST's, and (written by this engine version) it must be the config `config` holds.
  if (!st.config_toml.empty()) {
    const bool ours = st.engine_version == FLOTILLA_VERSION_STRING;
    std::optional<RunConfig> saved;
    try {
      saved = parse_config_toml(st.config_toml, c.dir + "/trainer.json config_toml");
    } catch (const Error& e) {
      if (ours) damaged(std::string("has a config_toml this engine cannot read: ") + e.what());
    }
    if (saved && config_hash(*saved) != c.config_hash)
      damaged("has a config_toml whose model shape is not the one its MANIFEST's config hash says");
    if (saved && ours &&
        nlohmann::json::parse(config_to_json(*saved, -1), nullptr, false) !=
            nlohmann::json::parse(st.config_json, nullptr, false))
      damaged("has a config_toml that differs from its config");
  }
}

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_checkpoint("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string zero_text(int zero) { return zero > 0 ? " ZeRO-" + std::to_string(zero) : ""; }

// The trainer.json of the checkpoint `cfg` would resume from, read without verifying (only to
// explain a refusal or keep the global batch; the checkpoint itself is verified before it is used).
std::optional<std::pair<std::string, TrainerState>> peek_resume_state(const RunConfig& cfg) {
  const std::string mode = cfg.checkpoint.resume;
  if (mode == "none") return std::nullopt;
  std::vector<std::string> dirs;
  if (mode == "auto") {
    dirs = CheckpointStore(resolved_out_dir(cfg) + "/checkpoints").list();
  } else {
    dirs.push_back(mode);
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    try {
      const std::string text = read_text_file(*it + "/trainer.json");
      return std::make_pair(*it, parse_trainer_state(text, *it));
    } catch (const Error&) {
      // damaged: resume() skips it (or refuses) with its own message
    }
  }
  return std::nullopt;
}

// The layouts this config could run on `world` ranks (every dp x tp x pp of that product that
// validate() accepts with the config's other settings).
std::string valid_layouts(const RunConfig& cfg, int world) {
  std::string out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp != 0) continue;
      RunConfig c = cfg;
      c.parallel.tp = tp;
      c.parallel.pp = pp;
      c.parallel.dp = world / tp / pp;
      if (!validate(c, world).empty()) continue;
      out += (out.empty() ? "" : ", ") + layout_text(c.parallel.dp, tp, pp);
    }
  }
  return out.empty() ? "none with this config's other settings" : out;
}

}  // namespace

std::string prepare_layout_change(RunConfig& cfg, int world_size) {
  const auto peeked = peek_resume_state(cfg);
  if (!peeked) {
    validate_or_throw(cfg, world_size);
    return "";
  }
  const auto& [dir, st] = *peeked;
  const auto& par = cfg.parallel;
  const bool same = st.world_size == world_size && st.dp == par.dp && st.tp == par.tp && st.pp == par.pp;
  std::string note;
  if (!same && cfg.train.global_batch_tokens == 0 && !st.config_toml.empty()) {
    // The default global batch is micro_batch x seq_len x dp: another dp would change what a step
    // is, so the run keeps the checkpoint's (validate() says if this layout cannot make it).
    try {
      const RunConfig saved = parse_config_toml(st.config_toml, dir + "/trainer.json config_toml");
      cfg.train.global_batch_tokens = tokens_per_step(saved);
      note = "train.global_batch_tokens = " + std::to_string(cfg.train.global_batch_tokens) +
             " kept from checkpoint " + dir + " (saved with " + layout_text(st.dp, st.tp, st.pp) +
             "), so a step on this layout reads the same sequences";
    } catch (const Error&) {
      // an unreadable config is the resume's to report
    }
  }
  try {
    validate_or_throw(cfg, world_size);
  } catch (const Error& e) {
    if (same || e.code() != ExitCode::kConfig) throw;
    throw_config(
        std::string(e.what()) + "\ncheckpoint " + dir + " was saved with layout " +
        layout_text(st.dp, st.tp, st.pp) + zero_text(st.zero) + " on " + std::to_string(st.world_size) +
        " rank(s); this run requests " + layout_text(par.dp, par.tp, par.pp) + zero_text(par.zero) + " on " +
        std::to_string(world_size) + " rank(s). It resumes on any layout this config validates for: on " +
        std::to_string(world_size) + " rank(s): " + valid_layouts(cfg, world_size) +
        (world_size != st.world_size
             ? "; on " + std::to_string(st.world_size) + " rank(s): " + valid_layouts(cfg, st.world_size)
             : std::string()));
  }
  return note;
}

// Returns the checkpoint directory resumed from ("" for a fresh start). Rank 0 decides which
// checkpoint (and does every file-system change); the others load their own file from it.
std::string Loop::resume() {
  const std::string mode = cfg.checkpoint.resume;
  std::string chosen;
  std::optional<LoadedCheckpoint> ck;
  if (rank == 0) {
    // A checkpoint whose trainer.json does not parse, or holds a value that cannot be true, is
    // damaged like one with a bad checksum: skip it.
    store.set_validator([this](const LoadedCheckpoint& c) { check_trainer_state(c); });
    if (mode == "none") {
      store.cleanup_tmp();
      const auto moved = store.set_aside_newer(-1);
      if (!moved.empty())
        metrics.event("warning", "checkpoint.resume = none: moved " + std::to_string(moved.size()) +
                                     " earlier checkpoint(s) to " + store.root() + "/trash");
    } else if (mode == "auto") {
      std::vector<std::string> warnings;
      ck = store.load_latest(0, &warnings);
      // Checkpoints exist and none verifies: starting from step 0 would silently discard the run and
      // its purge would later delete them. Refuse and touch nothing (docs/reliability.md C8).
      if (!ck && !store.load_faults().empty())
        throw_checkpoint(
            "checkpoint.resume = auto: none of the " + std::to_string(store.load_faults().size()) +
            " checkpoint(s) in " + store.root() + " verifies:\n" + describe_faults(store.load_faults()) +
            "Nothing was changed. To start this run from step 0 instead, train with --resume none "
            "(checkpoint.resume = \"none\"), which moves them to " +
            store.root() + "/trash/; to resume from one anyway, pass its directory to --resume.");
      store.cleanup_tmp();
      for (const auto& w : warnings) {
        metrics.event("warning", w);
        progress.line("warning: %s", w.c_str());
      }
    } else {
      store.cleanup_tmp();
      ck = store.load_dir(mode, 0);
    }
    if (ck) chosen = ck->dir;
  }
  chosen = broadcast_string(chosen);
  if (chosen.empty()) return "";
  // Every rank learns the saved layout from rank 0's trainer.json: on the same layout each reads its
  // own file; on another one its file may not exist, and rank 0 gathers (reshard()).
  const std::string state_json = broadcast_string(rank == 0 ? ck->trainer_state_json : std::string());
  if (rank != 0) {
    const SavedLayout saved = saved_layout(state_json);
    if (saved.world == world_size && saved.dp == cfg.parallel.dp && saved.tp == cfg.parallel.tp &&
        saved.pp == cfg.parallel.pp && saved.zero == dp->zero()) {
      ck = store.load_dir(chosen, rank);
    } else {
      int64_t head[3] = {0, 0, 0};  // step, world size, config hash (as rank 0 verified them)
      if (world) world->broadcast(head, 3, 0);
      ck = LoadedCheckpoint{};
      ck->dir = chosen;
      ck->step = head[0];
      ck->world_size = static_cast<int>(head[1]);
      ck->config_hash = static_cast<uint64_t>(head[2]);
      ck->trainer_state_json = state_json;
    }
  } else if (world) {
    const SavedLayout saved = saved_layout(state_json);
    if (!(saved.world == world_size && saved.dp == cfg.parallel.dp && saved.tp == cfg.parallel.tp &&
          saved.pp == cfg.parallel.pp && saved.zero == dp->zero())) {
      int64_t head[3] = {ck->step, ck->world_size, static_cast<int64_t>(ck->config_hash)};
      world->broadcast(head, 3, 0);
    }
  }
  apply_checkpoint(*ck);
  if (rank == 0) store.set_aside_newer(ck->step);
  barrier();
  return chosen;
}

namespace {

// LoRA adapters are trained against the base as the pass computes it: over a 4-bit NF4 base (QLoRA)
// they learned to correct that base's quantisation error, so resuming them over the unquantised
// weights, or the other way round, or with the absmaxes quantised differently, would silently train
// a different model. The config hash leaves these keys out (they do not change the adapters' shape),
// so they are compared here, by name. A checkpoint from before QLoRA has neither key: "none".
void refuse_other_base_quant(const RunConfig& cfg, const std::string& dir, const TrainerState& st) {
  const auto j = nlohmann::json::parse(st.config_json, nullptr, false);
  std::string quant = "none";
  bool double_quant = true;
  if (j.is_object() && j.contains("lora") && j["lora"].is_object()) {
    const auto& l = j["lora"];
    if (l.contains("base_quant") && l["base_quant"].is_string()) quant = l["base_quant"].get<std::string>();
    if (l.contains("double_quant") && l["double_quant"].is_boolean())
      double_quant = l["double_quant"].get<bool>();
  }
  const auto refuse = [&](const std::string& key, const std::string& saved, const std::string& now) {
    throw_checkpoint("checkpoint " + dir + " holds LoRA adapters trained with " + key + " = " + saved +
                     ", this run sets " + key + " = " + now +
                     "; the adapters were fitted to the base as that setting computes it: resume with " +
                     key + " = " + saved +
                     ", or start a new run (checkpoint.resume = \"none\" or a new run.out_dir)");
  };
  if (quant != cfg.lora.base_quant)
    refuse("lora.base_quant", "\"" + quant + "\"", "\"" + cfg.lora.base_quant + "\"");
  if (quant == "nf4" && double_quant != cfg.lora.double_quant)
    refuse("lora.double_quant", double_quant ? "true" : "false", cfg.lora.double_quant ? "true" : "false");
}

}  // namespace

void Loop::apply_checkpoint(const LoadedCheckpoint& ck) {
  if (ck.config_hash != config_hash(cfg))
    throw_checkpoint(
        "checkpoint " + ck.dir + " was written for a different model or optimizer shape (config hash " +
        std::to_string(ck.config_hash) + ", this run " + std::to_string(config_hash(cfg)) +
        "); resume it with its own config, or set checkpoint.resume = \"none\" or a new run.out_dir");
  const TrainerState st = parse_trainer_state(ck.trainer_state_json, ck.dir);
  const auto& par = cfg.parallel;
  if (model.lora().enabled()) refuse_other_base_quant(cfg, ck.dir, st);
  if (model.lora().enabled() && !st.base_weights.empty()) {
    const std::string changed = interop::fingerprint_difference(st.base_weights, base_fingerprint);
    if (!changed.empty())
      throw_checkpoint("checkpoint " + ck.dir + " holds LoRA adapters trained on other base weights: " +
                       changed + " in " + st.base_model +
                       "; resume with the base it was trained on (restore the file), "
                       "or start a new run (checkpoint.resume = \"none\" or a new run.out_dir)");
  }
  const bool same_layout = ck.world_size == world_size && st.dp == par.dp && st.tp == par.tp &&
                           st.pp == par.pp && st.zero == dp->zero();
  if (same_layout) {
    restore_own_files(ck);
  } else {
    const std::string what = "checkpoint " + ck.dir + " has " + std::to_string(ck.world_size) +
                             " rank(s), this run has " + std::to_string(world_size) +
                             "; it was saved with layout " + layout_text(st.dp, st.tp, st.pp) +
                             ", this run requests " + layout_text(par.dp, par.tp, par.pp) + " (ZeRO-" +
                             std::to_string(st.zero) + " -> ZeRO-" + std::to_string(dp->zero()) + ")";
    reshard(ck, st);
    if (rank == 0) {
      metrics.event("info", what + ": its parameters and optimizer state were re-cut to this layout");
      progress.line("%s: re-cut to this layout", what.c_str());
    }
  }
  step = st.step;
  tokens = st.tokens;
  best_val = st.best_val_loss;
  restore_keep_best(st);
  last_save_seconds = st.last_save_seconds;
  if (opt.skip_restore != "rng") rng.set_state(st.rng);
  // regroup: another parallel.dp or train.micro_batch continues at the same sequence (loader.h).
  if (opt.skip_restore != "cursor") {
    try {
      train_loader->set_cursor(st.train_cursor, true);
    } catch (const Error& e) {
      if (same_layout) throw;
      throw Error(e.code(), "checkpoint " + ck.dir + " was saved with layout " +
                                layout_text(st.dp, st.tp, st.pp) + ", this run requests " +
                                layout_text(par.dp, par.tp, par.pp) + ": " + e.what());
    }
  }
  if (opt.skip_restore == "lr") lr_offset = 1;
  if (device) push_to_device();
}

// The same layout: this rank's file holds its shard (the first DP replica's parameters and, without
// ZeRO, moments; under ZeRO every rank's optimizer shard), and the DP group broadcasts the rest.
void Loop::restore_own_files(const LoadedCheckpoint& ck) {
  const bool skip_moments = opt.skip_restore == "moments";
  for (const auto& t : ck.tensors) {
    float* dst = nullptr;
    size_t expect = 0;
    if (t.name == "params") dst = model.params(), expect = model.num_params();
    if (t.name == "adam_m" && !skip_moments) dst = dp->m(), expect = dp->state_size();
    if (t.name == "adam_v" && !skip_moments) dst = dp->v(), expect = dp->state_size();
    if (!dst) continue;
    if (t.data.size() != expect * sizeof(float))
      throw_checkpoint("checkpoint " + ck.dir + ": section '" + t.name + "' of rank " + std::to_string(rank) +
                       " has " + std::to_string(t.data.size()) + " bytes, expected " +
                       std::to_string(expect * sizeof(float)) + " (" + model.shard().describe() + ")");
    std::memcpy(dst, t.data.data(), t.data.size());
  }
  // The first DP replica of this shard read the parameters (and, without ZeRO, the moments).
  if (groups.dp->size() > 1) {
    groups.dp->broadcast(model.params(), model.num_params(), 0);
    if (dp->zero() == 0 && !skip_moments) {
      groups.dp->broadcast(dp->m(), dp->state_size(), 0);
      groups.dp->broadcast(dp->v(), dp->state_size(), 0);
    }
  }
}

// Another layout: rank 0 gathers the whole model's parameters and moments from the saved rank files
// (model_checkpoint.h gather_full_state), then hands them out one tensor at a time; every rank keeps
// its shard's runs of each (param_layout.h shard_runs) and, of the moments, its optimizer range.
// The values are copied, never recomputed, so the state each element resumes with is the one saved.
void Loop::reshard(const LoadedCheckpoint& ck, const TrainerState& st) {
  const bool moments = opt.skip_restore != "moments";
  const ParamLayout& table = model.layout();
  FullState full;
  std::string failure;
  if (rank == 0) {
    try {
      SavedLayout saved;
      saved.world = ck.world_size;
      saved.dp = st.dp;
      saved.tp = st.tp;
      saved.pp = st.pp;
      saved.zero = st.zero;
      gather_full_state(ck, dims, table, saved, moments, full);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  // Nobody waits in a broadcast for a rank 0 that could not read the checkpoint.
  failure = broadcast_string(failure);
  if (!failure.empty())
    throw_checkpoint(rank == 0 ? failure : "rank 0 could not read checkpoint " + ck.dir + ": " + failure);
  const size_t begin = dp->state_begin(), size = dp->state_size();
  std::fill(dp->m(), dp->m() + size, 0.0f);
  std::fill(dp->v(), dp->v() + size, 0.0f);
  std::vector<float> piece;
  size_t full_at = 0;
  for (int i = 0; i < table.size(); ++i) {
    const size_t count = table.full_size(i);
    const size_t local_at = model.param_offset(i);
    const std::vector<ShardRun> runs = shard_runs(table, model.shard(), i);
    for (int which = 0; which < (moments ? 3 : 1); ++which) {
      float* src = nullptr;
      if (rank == 0) {
        src = (which == 0 ? full.params : which == 1 ? full.m : full.v).data() + full_at;
      } else {
        piece.resize(count);
        src = piece.data();
      }
      if (world && count > 0) world->broadcast(src, count, 0);
      for (const ShardRun& run : runs) {
        for (size_t k = 0; k < run.count; ++k) {
          const size_t local = local_at + run.local + k;
          const float value = src[run.full + k];
          if (which == 0) {
            model.params()[local] = value;
          } else if (local >= begin && local < begin + size) {
            (which == 1 ? dp->m() : dp->v())[local - begin] = value;
          }
        }
      }
    }
    full_at += count;
  }
}

TrainerState Loop::current_state() const {
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
  st.dp = cfg.parallel.dp;
  st.tp = cfg.parallel.tp;
  st.pp = cfg.parallel.pp;
  st.zero = dp->zero();
  st.engine_version = FLOTILLA_VERSION_STRING;
  if (model.lora().enabled()) {
    st.base_model = cfg.model.init_from;
    st.base_weights = base_fingerprint;
  }
  if (keep_best_step >= 0) {
    st.best_task_metric = keep_metric;
    st.best_task_step = keep_best_step;
    st.best_task_value = keep_best_value;
  }
  return st;
}

// Every rank calls this after its part of a phase of a multi-rank save, failed or not, so one rank's
// error never leaves the others waiting in a collective (they would only see "peer closed", and
// nobody would remove the tmp folder). When a rank failed, `cleanup` runs on every rank, then each
// rank throws: the failed one its own error, the others the same exit code naming it.
void Loop::agree_on_save(const std::optional<Error>& mine, const std::string& what,
                         const std::function<void()>& cleanup) {
  std::vector<int64_t> codes(static_cast<size_t>(world_size), 0);
  codes[static_cast<size_t>(rank)] = mine ? static_cast<int64_t>(mine->code()) : 0;
  world->all_reduce(codes.data(), codes.size());
  int first = -1;
  for (int q = 0; q < world_size && first < 0; ++q)
    if (codes[static_cast<size_t>(q)] != 0) first = q;
  if (first < 0) return;
  std::string message = rank == first ? std::string(mine->what()) : std::string();
  int64_t len = static_cast<int64_t>(message.size());
  world->broadcast(&len, 1, first);
  message.resize(static_cast<size_t>(len));
  if (len > 0) world->broadcast_bytes(message.data(), message.size(), first);
  try {
    cleanup();
  } catch (const std::exception&) {
    // the save's own failure is what to report; a tmp folder left here is removed at the next start
  }
  const std::string after = "; the unfinished checkpoint of step " + std::to_string(step) +
                            " was removed and the earlier checkpoints in " + store.root() + " are intact";
  if (mine) throw Error(mine->code(), std::string(mine->what()) + after);
  throw Error(static_cast<ExitCode>(codes[static_cast<size_t>(first)]),
              "rank " + std::to_string(first) + " could not " + what + " of step " + std::to_string(step) +
                  ": " + message + after);
}

void Loop::save(const std::string& reason) {
  const auto t0 = Clock::now();
  if (device) pull_from_device();  // the checkpoint is written from the host mirror, CPU format
  CheckpointSaveRequest req;
  req.step = step;
  req.rank = rank;
  req.world_size = world_size;
  req.config_hash = config_hash(cfg);
  const int64_t n = static_cast<int64_t>(model.num_params());
  const int64_t ns = static_cast<int64_t>(dp->state_size());
  const bool first_replica = coord.dp == 0;  // holds this shard's parameters for the checkpoint
  if (first_replica)
    req.tensors.push_back({"params", {n}, model.params(), model.num_params() * sizeof(float)});
  // ZeRO: every rank's shard of m and v; otherwise the first replica's copy (all hold the same).
  if (first_replica || dp->zero() > 0) {
    req.tensors.push_back({"adam_m", {ns}, dp->m(), dp->state_size() * sizeof(float)});
    req.tensors.push_back({"adam_v", {ns}, dp->v(), dp->state_size() * sizeof(float)});
  }
  note_keep_best();  // this step may be the best by checkpoint.keep_best: kept, and said so in the state
  // last_save_seconds inside the state is the previous save's duration (known before writing).
  req.trainer_state_json = trainer_state_to_json(current_state());
  std::string dir;
  if (!world) {
    dir = store.save(req, cfg.checkpoint.keep_last);
  } else {
    std::optional<Error> failed;
    std::string tmp;
    if (rank == 0) {
      try {
        tmp = store.begin(step);
      } catch (const Error& e) {
        failed = e;
      }
    }
    agree_on_save(failed, "start the checkpoint", [] {});
    tmp = broadcast_string(tmp);
    try {
      store.write_rank(tmp, req);
    } catch (const Error& e) {
      failed = e;
    }
    // Also the barrier before the commit: every rank's file is durable once every rank is here.
    // On a failure every rank has stopped writing into tmp, so rank 0 can remove all of it (a full
    // disk gets its space back; earlier checkpoints are untouched).
    agree_on_save(failed, "write its part of the checkpoint", [&] {
      if (rank == 0) store.abort_save(tmp);
    });
    if (rank == 0) {
      try {
        dir = store.commit(tmp, req, world_size, cfg.checkpoint.keep_last);  // removes tmp on failure
      } catch (const Error& e) {
        failed = e;
      }
    }
    agree_on_save(failed, "commit the checkpoint", [] {});
    dir = broadcast_string(dir);
  }
  last_save_seconds = ms_since(t0) / 1000.0;
  for (const auto& w : store.save_warnings()) {
    metrics.event("warning", w);
    progress.line("warning: %s", w.c_str());
  }
  CheckpointRecord rec;
  rec.step = step;
  rec.dir = dir;
  // parameters (the adapters under LoRA) + m + v over all ranks
  rec.bytes = 3 * model.layout().full_params() * sizeof(float);
  rec.seconds = last_save_seconds;
  rec.reason = reason;
  metrics.checkpoint(rec);
  metrics.sync();
  progress.line("checkpoint step %lld -> %s (%.2f s)", static_cast<long long>(step), dir.c_str(),
                last_save_seconds);
  if (auto_interval)
    if (auto changed = auto_interval->after_save(step, last_save_seconds)) report_interval(*changed);
}

void Loop::start_auto_interval() {
  CheckpointInterval::Options o;
  o.run_dir = out_dir;
  o.config_mtbi_s = cfg.checkpoint.mtbi_s;
  o.checkpoint_bytes = 3 * model.layout().full_params() * sizeof(float);  // as the checkpoint record says
  o.last_save_s = last_save_seconds;  // the previous start's (trainer.json), -1 on a fresh run
  o.start_step = step;
  auto_interval = std::make_unique<CheckpointInterval>(o);
}

bool Loop::auto_interval_due(const StepRecord& r) {
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  if (auto chosen = auto_interval->after_step(r.step, now)) report_interval(*chosen);
  return auto_interval->due(r.step);
}

void Loop::report_interval(const IntervalChoice& choice) {
  const std::string text = choice.text();
  metrics.event("info", text, choice.fields());
  progress.line("%s", text.c_str());
}

}  // namespace flotilla::train_detail
