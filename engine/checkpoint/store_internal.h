// Pieces of CheckpointStore shared by its save, load and housekeeping files (not a public API).
//
// Decision: verification is one function, verify_checkpoint_dir(), used by loading, by the
// "refuse to overwrite a verified step-N" check and by export, so "verified" means the same thing
// everywhere: MANIFEST parses, every listed file has its size and CRC-32C, and the rank file's header
// agrees with the MANIFEST (magic, version, rank, world size, step, config hash).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

namespace flotilla::ckpt {

// "step-00000040" (at least 8 digits).
std::string step_dir_name(int64_t step);
// True for "step-" followed by 8 or more digits and nothing else; sets *step.
bool parse_step_dir_name(const std::string& name, int64_t* step);
// True for "step-<digits>.tmp-<anything>" (an uncommitted save).
bool is_tmp_dir_name(const std::string& name);

struct StepDirEntry {
  int64_t step = 0;
  std::string name;  // "step-00000040"
};
// Committed-looking step directories under root (not verified), oldest first.
std::vector<StepDirEntry> scan_step_dirs(const std::string& root);
// Names of leftover "step-*.tmp-*" directories under root.
std::vector<std::string> scan_tmp_dirs(const std::string& root);

using SectionFilter = std::function<bool(const std::string&)>;

// Verifies `dir` completely and returns rank `rank`'s sections that pass `keep` (all when keep is
// empty) plus trainer.json. Throws Error(kCheckpoint) with the fault (no directory prefix), e.g.
// "rank-0.bin crc32c mismatch (expected e3069283, got 0badf00d)" or "MANIFEST missing".
LoadedCheckpoint verify_checkpoint_dir(const std::string& dir, int rank, const SectionFilter& keep);

// Moves root/name to root/trash/<name><suffix>-<random> (creating trash/), then fsyncs root.
// Returns the new path. Throws Error(kIo) when the rename fails.
std::string move_to_trash(const std::string& root, const std::string& name, const std::string& suffix);

// Deletes one committed checkpoint so that it is never loadable half-deleted: MANIFEST first,
// fsync(dir), then the other files, then the directory. Hook labels: "purge" before, "purge files"
// after MANIFEST is gone. A step folder that is a symbolic link loses only the link (its target,
// outside the run perhaps, is never touched); the returned note says so ("" otherwise).
std::string delete_checkpoint_dir(const std::string& dir, const CheckpointFaultHook* hook);

// Best-effort recursive removal (failure path cleanup; errors ignored).
void remove_tree_quietly(const std::string& path);

}  // namespace flotilla::ckpt
