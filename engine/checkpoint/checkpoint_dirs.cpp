// Checkpoint directory housekeeping: names, scanning, trash, deletion, tmp cleanup, listing.
//
// Decision: anything that is not a committed checkpoint is moved under root/trash/ by rename before
// it is deleted, so a crash in the middle of a recursive delete never leaves a half-deleted folder
// under a name the loader scans.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/durable_io.h"
#include "engine/checkpoint/store_internal.h"
#include "engine/core/error.h"

namespace flotilla {
namespace ckpt {
namespace fs = std::filesystem;

std::string step_dir_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

static bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool parse_step_dir_name(const std::string& name, int64_t* step) {
  if (name.rfind("step-", 0) != 0) return false;
  const std::string digits = name.substr(5);
  if (digits.size() < 8 || digits.size() > 18 || !all_digits(digits)) return false;
  *step = std::stoll(digits);
  return true;
}

bool is_tmp_dir_name(const std::string& name) {
  const size_t dot = name.find(".tmp-");
  if (name.rfind("step-", 0) != 0 || dot == std::string::npos) return false;
  return all_digits(name.substr(5, dot - 5));
}

std::vector<StepDirEntry> scan_step_dirs(const std::string& root) {
  std::vector<StepDirEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    StepDirEntry e;
    e.name = it->path().filename().string();
    if (parse_step_dir_name(e.name, &e.step) && it->is_directory(ec)) out.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const StepDirEntry& a, const StepDirEntry& b) { return a.step < b.step; });
  return out;
}

std::vector<std::string> scan_tmp_dirs(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_tmp_dir_name(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string move_to_trash(const std::string& root, const std::string& name, const std::string& suffix) {
  const std::string trash = root + "/trash";
  if (::mkdir(trash.c_str(), 0755) != 0 && errno != EEXIST)
    throw_io_failure(errno, "creating", "trash/", root, 0);
  const std::string dest = trash + "/" + name + suffix + "-" + random_hex16();
  if (::rename((root + "/" + name).c_str(), dest.c_str()) != 0)
    throw_io_failure(errno, "moving to trash", name, root, 0);
  fsync_dir(root, "fsync root (trash)", nullptr);
  return dest;
}

std::string delete_checkpoint_dir(const std::string& dir, const CheckpointFaultHook* hook) {
  // A step folder that is a symbolic link was put there by the user (an archived checkpoint linked
  // back in): deleting through it would destroy files outside the run. Only the link goes.
  struct stat lst {};
  if (::lstat(dir.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(dir, ec);
    const std::string root = dir.substr(0, dir.find_last_of('/')), name = dir.substr(root.size() + 1);
    if (::unlink(dir.c_str()) != 0) throw_io_failure(errno, "unlinking", name, root, 0);
    fsync_dir(root, "fsync root (purge link)", nullptr);
    return name + " is a symbolic link" + (ec ? std::string() : " to " + target.string()) +
           ": removed the link only; the checkpoint it points to was left untouched";
  }
  if (int err = fault_errno(hook, "purge"); err != 0) throw_io_failure(err, "purging", "MANIFEST", dir, 0);
  const std::string manifest = dir + "/MANIFEST";
  if (::unlink(manifest.c_str()) != 0 && errno != ENOENT)
    throw_io_failure(errno, "deleting", "MANIFEST", dir, 0);
  fsync_dir(dir, "fsync dir (purge)", nullptr);
  if (int err = fault_errno(hook, "purge files"); err != 0) throw_io_failure(err, "purging", "files", dir, 0);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) throw Error(ExitCode::kIo, "cannot delete old checkpoint " + dir + ": " + ec.message());
  return "";
}

void remove_tree_quietly(const std::string& path) {
  // remove_all does not follow a symbolic link named by `path` (nor any inside it): a linked
  // folder loses its link, never its target's files.
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace ckpt

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::string> out;
  for (const ckpt::StepDirEntry& e : ckpt::scan_step_dirs(root_)) out.push_back(root_ + "/" + e.name);
  return out;
}

void CheckpointStore::cleanup_tmp() {
  for (const std::string& name : ckpt::scan_tmp_dirs(root_)) {
    std::string moved;
    try {
      moved = ckpt::move_to_trash(root_, name, "");
    } catch (const Error&) {
      // A full disk may have no room for trash/ itself; a tmp name is never loaded, so deleting it
      // in place cannot leave a half-deleted checkpoint behind.
      moved = root_ + "/" + name;
    }
    ckpt::remove_tree_quietly(moved);
  }
  ::unlink((root_ + "/LATEST.tmp").c_str());  // a save killed while publishing LATEST
}

std::vector<std::string> CheckpointStore::set_aside_newer(int64_t step) {
  std::vector<std::string> moved;
  for (const ckpt::StepDirEntry& e : ckpt::scan_step_dirs(root_))
    if (e.step > step) moved.push_back(ckpt::move_to_trash(root_, e.name, ".newer"));
  return moved;
}

}  // namespace flotilla
