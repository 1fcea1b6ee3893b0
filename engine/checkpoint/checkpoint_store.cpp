// Saving checkpoints: the tmp-dir, fsync, MANIFEST, rename, LATEST, purge protocol (docs/reliability.md §1).
//
// Decision: the commit point is rename(step-N.tmp-<hex>, step-N) and nothing else. Before it, any
// failure removes the tmp directory and throws; after it, the checkpoint is committed and verified
// by construction, so failures to publish LATEST (a hint) or to purge old checkpoints only become
// save_warnings() instead of reporting a successful save as failed. A failed fsync of the root
// after the rename still throws: the rename may not survive a power cut.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/durable_io.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/rank_file.h"
#include "engine/checkpoint/store_internal.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"

namespace flotilla {
namespace ckpt {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// step-N out of "…/step-00000040.tmp-1a2b…" (the tmp dir begin() made).
int64_t step_of_tmp(const std::string& tmp_dir) {
  const std::string name = base_name(tmp_dir);
  int64_t step = -1;
  if (!is_tmp_dir_name(name) || !parse_step_dir_name(name.substr(0, name.find(".tmp-")), &step))
    throw Error(ExitCode::kInternal, tmp_dir + " is not a checkpoint tmp directory made by begin()");
  return step;
}

ManifestFile write_rank_impl(const std::string& tmp_dir, const CheckpointSaveRequest& req,
                             const CheckpointFaultHook* hook) {
  RankHeader h;
  h.world_size = req.world_size;
  h.rank = req.rank;
  h.step = req.step;
  h.config_hash = req.config_hash;
  h.num_sections = static_cast<uint32_t>(req.tensors.size());
  DurableWriter w(tmp_dir, rank_file_name(req.rank), hook, rank_file_size(req.tensors));
  const std::vector<SectionInfo> infos = write_rank_file(w, h, req.tensors);
  w.finish();
  ManifestFile f{w.name(), w.bytes_written(), w.crc(), {}};
  for (const SectionInfo& s : infos) f.sections.push_back({s.name, dtype_name(s.dtype), s.shape, s.bytes});
  return f;
}

// Reads back a rank file another process wrote into tmp_dir and checks it belongs to this save.
ManifestFile describe_rank_file(const std::string& tmp_dir, int rank, const CheckpointSaveRequest& req,
                                int world_size) {
  const std::string name = rank_file_name(rank);
  if (!exists(tmp_dir + "/" + name))
    throw_checkpoint(name + " is missing in " + tmp_dir + ": rank " + std::to_string(rank) +
                     " did not finish writing its part of the checkpoint");
  FileSource src(tmp_dir + "/" + name);
  const RankFileContents c = read_rank_file(src, src.size(), name, {});
  if (c.header.step != req.step || c.header.world_size != world_size || c.header.rank != rank ||
      c.header.config_hash != req.config_hash)
    throw_checkpoint(name + " in " + tmp_dir + " was written for another save (step " +
                     std::to_string(c.header.step) + ", world size " + std::to_string(c.header.world_size) +
                     ")");
  ManifestFile f{name, src.size(), src.crc(), {}};
  for (const SectionInfo& s : c.sections)
    f.sections.push_back({s.name, dtype_name(s.dtype), s.shape, s.bytes});
  return f;
}

// True when root/name verifies (every file's size and CRC, headers); names already known good skip
// the re-read. A directory that cannot be read counts as not verified.
bool verifies(const std::string& root, const std::string& name, std::vector<std::string>* known_good) {
  if (std::find(known_good->begin(), known_good->end(), name) != known_good->end()) return true;
  try {
    verify_checkpoint_dir(root + "/" + name, 0, [](const std::string&) { return false; });
  } catch (const Error&) {
    return false;
  }
  known_good->push_back(name);
  return true;
}

// Keeps the newest keep_last checkpoints that verify (`keep_name`, the one just committed, is one)
// and deletes the older verified ones. One that does not verify is never deleted and never counts
// as kept: it is moved to trash/ (docs/reliability.md C4, KempnerForge#102: a purge must not leave only
// damaged checkpoints behind, nor destroy what could still be inspected).
// `pinned` (the best checkpoint by a task score, checkpoint.keep_best; "" none) is kept besides
// them and does not count among the keep_last.
void purge(const std::string& root, int keep_last, const std::string& keep_name,
           const CheckpointFaultHook* hook, std::vector<std::string>* known_good,
           std::vector<std::string>* warnings, const std::string& pinned) {
  auto dirs = scan_step_dirs(root);
  std::reverse(dirs.begin(), dirs.end());  // newest first
  int kept = 1;                            // keep_name
  for (const StepDirEntry& e : dirs) {
    if (e.name == keep_name || (!pinned.empty() && e.name == pinned)) continue;
    if (!verifies(root, e.name, known_good)) {
      try {
        const std::string moved = move_to_trash(root, e.name, ".damaged");
        warnings->push_back(e.name + " does not verify; moved to " + moved + " (not deleted)");
      } catch (const Error& ex) {
        warnings->push_back(std::string("could not move a damaged checkpoint to trash: ") + ex.what());
      }
      continue;
    }
    if (kept < std::max(keep_last, 1)) {
      ++kept;
      continue;
    }
    try {
      const std::string note = delete_checkpoint_dir(root + "/" + e.name, hook);
      if (!note.empty()) warnings->push_back(note);
      known_good->erase(std::remove(known_good->begin(), known_good->end(), e.name), known_good->end());
    } catch (const Error& ex) {
      warnings->push_back(std::string("could not purge old checkpoint: ") + ex.what());
    }
  }
}

std::string commit_impl(const std::string& root, const std::string& tmp_dir, const CheckpointSaveRequest& req,
                        int world_size, int keep_last, const CheckpointFaultHook* hook,
                        const std::map<int, ManifestFile>& known, std::vector<std::string>* known_good,
                        std::vector<std::string>* warnings, const std::string& pinned) {
  const int64_t step = step_of_tmp(tmp_dir);
  if (step != req.step)
    throw Error(ExitCode::kInternal,
                "commit of " + tmp_dir + " with a request for step " + std::to_string(req.step));
  const std::string final_name = step_dir_name(step);
  const std::string final_dir = root + "/" + final_name;

  Manifest m;
  m.step = step;
  m.world_size = world_size;
  m.config_hash = req.config_hash;
  m.created = utc_now_iso8601(&m.created_unix);
  m.engine_version = FLOTILLA_VERSION_STRING;
  m.build_type = FLOTILLA_BUILD_TYPE;
  for (int r = 0; r < world_size; ++r) {
    auto it = known.find(r);
    m.files.push_back(it != known.end() ? it->second : describe_rank_file(tmp_dir, r, req, world_size));
  }
  if (!req.trainer_state_json.empty()) {
    const std::string& js = req.trainer_state_json;
    DurableWriter w(tmp_dir, "trainer.json", hook, js.size());
    w.write(js.data(), js.size());
    w.finish();
    m.files.push_back({"trainer.json", w.bytes_written(), w.crc(), {}});
  }
  write_file_atomic(tmp_dir, "MANIFEST", manifest_to_json(m), hook, "rename manifest", "fsync dir");

  if (exists(final_dir))
    throw_checkpoint(final_name + " appeared in " + root +
                     " during the save; another writer uses this directory");
  rename_checked(tmp_dir, final_dir, "rename dir", hook, root, base_name(tmp_dir));
  // Committed. From here on the directory is a valid checkpoint and is never removed by this save.
  fsync_dir(root, "fsync root", hook);

  try {
    if (int err = fault_errno(hook, "latest"); err != 0) throw_io_failure(err, "writing", "LATEST", root, 0);
    write_file_atomic(root, "LATEST", final_name + "\n", hook, "rename LATEST", "fsync root after LATEST");
  } catch (const Error& e) {
    warnings->push_back(std::string("checkpoint committed but LATEST was not updated: ") + e.what());
  }
  known_good->push_back(final_name);
  purge(root, keep_last, final_name, hook, known_good, warnings, pinned);
  return final_dir;
}

}  // namespace
}  // namespace ckpt

CheckpointStore::CheckpointStore(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string CheckpointStore::begin(int64_t step) {
  if (step < 0) throw Error(ExitCode::kInternal, "checkpoint step must be >= 0");
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (ec) throw Error(ExitCode::kIo, "cannot create checkpoint directory " + root_ + ": " + ec.message());
  const std::string name = ckpt::step_dir_name(step);
  if (ckpt::exists(root_ + "/" + name)) {
    bool verifies = false;
    try {
      ckpt::verify_checkpoint_dir(root_ + "/" + name, 0, [](const std::string&) { return false; });
      verifies = true;
    } catch (const Error&) {
    }
    if (verifies)
      throw_checkpoint(
          name + " already exists in " + root_ +
          " and verifies; refusing to overwrite it (is another run writing here? resume from it, or "
          "move it away)");
    ckpt::move_to_trash(root_, name, ".damaged");
  }
  const std::string tmp = root_ + "/" + name + ".tmp-" + ckpt::random_hex16();
  if (::mkdir(tmp.c_str(), 0755) != 0)
    ckpt::throw_io_failure(errno, "creating", ckpt::base_name(tmp), root_, 0);
  return tmp;
}

void CheckpointStore::write_rank(const std::string& tmp_dir, const CheckpointSaveRequest& request) {
  ckpt::write_rank_impl(tmp_dir, request, &hook_);
}

std::string CheckpointStore::commit(const std::string& tmp_dir, const CheckpointSaveRequest& rank0_request,
                                    int world_size, int keep_last) {
  save_warnings_.clear();
  try {
    return ckpt::commit_impl(root_, tmp_dir, rank0_request, world_size, keep_last, &hook_, {}, &known_good_,
                             &save_warnings_, pinned_);
  } catch (...) {
    if (ckpt::exists(tmp_dir)) ckpt::remove_tree_quietly(tmp_dir);
    throw;
  }
}

void CheckpointStore::set_pinned(int64_t step) {
  pinned_step_ = step;
  pinned_ = step >= 0 ? ckpt::step_dir_name(step) : std::string();
}

void CheckpointStore::abort_save(const std::string& tmp_dir) {
  ckpt::step_of_tmp(tmp_dir);  // refuses anything that is not a tmp dir
  ckpt::remove_tree_quietly(tmp_dir);
}

std::string CheckpointStore::save(const CheckpointSaveRequest& request, int keep_last) {
  if (request.world_size != 1 || request.rank != 0)
    throw Error(ExitCode::kInternal,
                "CheckpointStore::save is for world size 1; use begin/write_rank/commit");
  save_warnings_.clear();
  const std::string tmp = begin(request.step);
  try {
    std::map<int, ckpt::ManifestFile> known;
    known[0] = ckpt::write_rank_impl(tmp, request, &hook_);
    return ckpt::commit_impl(root_, tmp, request, 1, keep_last, &hook_, known, &known_good_, &save_warnings_,
                             pinned_);
  } catch (...) {
    if (ckpt::exists(tmp)) ckpt::remove_tree_quietly(tmp);
    throw;
  }
}

}  // namespace flotilla
