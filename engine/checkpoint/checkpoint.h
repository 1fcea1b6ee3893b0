// Crash-safe checkpoints (docs/reliability.md §1 rules 1-9).
//
// Layout under a run's checkpoint root:
//   step-00000100/            one committed checkpoint
//     rank-0.bin ...          one file per rank: header (magic, format version, world size, rank,
//                             step, config hash) + named tensor sections
//     trainer.json            step, tokens, RNG states, data cursors, lr step, config, versions
//     MANIFEST                JSON: every file's name, size and crc32c; written last, via rename
//   LATEST                    hint only; loading scans step-* and verifies
// A save writes step-N.tmp-<uuid>/, fsyncs every file and the directory, renames to step-N,
// fsyncs the root, then rewrites LATEST and purges verified checkpoints beyond keep_last (MANIFEST
// removed first). A checkpoint that does not verify is never deleted: the purge moves it to trash/.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flotilla {

// One named tensor section in a rank file (fp32 or raw bytes).
struct TensorBlob {
  std::string name;            // e.g. "params", "adam_m", "adam_v"
  std::vector<int64_t> shape;  // informational; size = bytes
  const void* data = nullptr;  // for saving
  size_t bytes = 0;
};

struct LoadedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

struct CheckpointSaveRequest {
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  uint64_t config_hash = 0;
  std::vector<TensorBlob> tensors;  // this rank's tensors
  std::string trainer_state_json;   // written by rank 0 only (trainer.json)
};

struct LoadedCheckpoint {
  std::string dir;  // the step-N directory
  int64_t step = 0;
  int world_size = 1;
  uint64_t config_hash = 0;
  std::vector<LoadedTensor> tensors;  // this rank's tensors
  std::string trainer_state_json;
};

// A checkpoint directory that did not verify, and why (newest first in load_faults()).
struct CheckpointFault {
  std::string name;    // "step-00000030"
  std::string reason;  // "rank-0.bin crc32c mismatch (expected …, got …)"
};

// A check beyond the files' sizes and checksums, run on a checkpoint that verified (e.g. the trainer
// parses trainer.json). Throws Error(kCheckpoint) to reject it; load_latest then falls back.
using CheckpointValidator = std::function<void(const LoadedCheckpoint&)>;

// "  step-00000030: <reason>\n  step-00000025: <reason>\n": one line per fault, for error messages.
std::string describe_faults(const std::vector<CheckpointFault>& faults);

// Fault injection for tests (docs/reliability.md C2/C7): called before each I/O operation of a save with
// a label ("write rank-0.bin", "fsync", "rename manifest", "rename dir", "latest", "purge").
// Return false to make that operation fail with the given errno; may also abort() to simulate a kill.
using CheckpointFaultHook = std::function<bool(const std::string& op, int* err)>;
// Full label list (docs/checkpoints.md): "write <file>", "fsync <file>", "close <file>" for every
// file written (rank-R.bin, trainer.json, MANIFEST.tmp, LATEST.tmp), "rename manifest", "fsync dir",
// "rename dir", "fsync root", "latest", "rename LATEST", "fsync root after LATEST", "purge",
// "purge files".

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string root);

  const std::string& root() const { return root_; }

  // Single-process save of all ranks' data handled by this process (world_size 1, or a rank that
  // writes its own file inside a directory prepared by rank 0 — see begin/commit below).
  // Returns the committed directory. Throws Error(kIo / kCheckpoint) with the file and errno;
  // on failure the tmp directory is removed and earlier checkpoints are untouched.
  std::string save(const CheckpointSaveRequest& request, int keep_last);

  // Multi-rank protocol: rank 0 calls begin(step) -> tmp dir name (shared with ranks out of band),
  // every rank calls write_rank(tmp, request), then after a barrier rank 0 calls commit(tmp, ...).
  std::string begin(int64_t step);
  void write_rank(const std::string& tmp_dir, const CheckpointSaveRequest& request);
  std::string commit(const std::string& tmp_dir, const CheckpointSaveRequest& rank0_request, int world_size,
                     int keep_last);

  // Newest checkpoint whose MANIFEST parses and whose files verify; damaged newer ones are
  // skipped with a warning appended to `warnings`. Loads `rank`'s tensors. nullopt when none.
  std::optional<LoadedCheckpoint> load_latest(int rank, std::vector<std::string>* warnings);
  // The directories the last load_latest() rejected, newest first, with the reason of each.
  const std::vector<CheckpointFault>& load_faults() const { return load_faults_; }
  // Run on every candidate load_latest()/load_dir() verified, before it is returned.
  void set_validator(CheckpointValidator validator) { validator_ = std::move(validator); }

  // Loads a specific directory (verifies it); throws Error(kCheckpoint) when it does not verify.
  LoadedCheckpoint load_dir(const std::string& dir, int rank);

  // As above, but only the named sections are kept in memory (every byte is still verified); e.g.
  // export and sample ask for {"params"} and skip the optimizer state.
  std::optional<LoadedCheckpoint> load_latest(int rank, std::vector<std::string>* warnings,
                                              const std::vector<std::string>& sections);
  LoadedCheckpoint load_dir(const std::string& dir, int rank, const std::vector<std::string>& sections);

  // Multi-rank protocol failure path: removes a tmp directory from begin() (rank 0 / supervisor).
  void abort_save(const std::string& tmp_dir);

  // Non-fatal problems of the last save()/commit() after the checkpoint was committed (LATEST could
  // not be rewritten, an old checkpoint could not be purged). Empty when all went well.
  const std::vector<std::string>& save_warnings() const { return save_warnings_; }

  // Moves committed step directories newer than `step` to root/trash/ (a run resumed from an older
  // checkpoint must not collide with them later: rule 8). Returns the new paths.
  std::vector<std::string> set_aside_newer(int64_t step);

  // Committed checkpoint directories, oldest first (not verified).
  std::vector<std::string> list() const;
  // Moves leftover step-*.tmp-* directories out of the way (supervisor / rank 0 only).
  void cleanup_tmp();

  void set_fault_hook(CheckpointFaultHook hook) { hook_ = std::move(hook); }

  // The step whose checkpoint later purges keep besides the keep_last newest (and do not count
  // among them): the best checkpoint by a task score (checkpoint.keep_best). -1 = none.
  void set_pinned(int64_t step);
  int64_t pinned() const { return pinned_step_; }

 private:
  std::string root_;
  CheckpointFaultHook hook_;
  std::vector<std::string> save_warnings_;
  std::vector<CheckpointFault> load_faults_;
  CheckpointValidator validator_;
  std::string pinned_;  // its directory name ("" none)
  int64_t pinned_step_ = -1;
  std::vector<std::string>
      known_good_;  // step dirs this store committed or verified (purge skips re-reading)
};

}  // namespace flotilla
