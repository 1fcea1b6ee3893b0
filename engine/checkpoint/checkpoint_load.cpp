// Loading checkpoints: verify everything first, then hand out tensors; fall back past damage.
//
// Decision: the rank file is read once. Its CRC-32C is computed while it is parsed; when parsing
// stops on a malformed field the rest is still read so the warning can say "crc32c mismatch" (the
// real cause: damage) rather than a parse detail. Tensors reach the caller only after the CRC,
// size and header checks of every file in the MANIFEST have passed.
#include <sys/stat.h>

#include <cerrno>
#include <memory>
#include <set>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/durable_io.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/rank_file.h"
#include "engine/checkpoint/store_internal.h"
#include "engine/core/checksum.h"
#include "engine/core/error.h"

namespace flotilla {
namespace ckpt {
namespace {

constexpr uint64_t kMaxTrainerJsonBytes = uint64_t{256} << 20;

std::string crc_fault(const std::string& file, uint32_t expected, uint32_t got) {
  return file + " crc32c mismatch (expected " + crc32c_hex(expected) + ", got " + crc32c_hex(got) + ")";
}

// Opens a listed file and checks its size against the MANIFEST.
std::unique_ptr<FileSource> open_listed(const std::string& dir, const ManifestFile& f) {
  struct stat st {};
  if (::stat((dir + "/" + f.name).c_str(), &st) != 0)
    throw_checkpoint(f.name + " listed in MANIFEST is missing (" + errno_string(errno) + ")");
  auto src = std::make_unique<FileSource>(dir + "/" + f.name);
  if (src->size() != f.size)
    throw_checkpoint(f.name + " is " + std::to_string(src->size()) + " bytes, MANIFEST says " +
                     std::to_string(f.size) + (src->size() < f.size ? " (truncated)" : " (overwritten?)"));
  return src;
}

void check_header(const RankHeader& h, const Manifest& m, int rank, const std::string& file) {
  auto mismatch = [&](const char* what, const std::string& got, const std::string& want) {
    throw_checkpoint(file + " header says " + what + " " + got + ", MANIFEST says " + want);
  };
  if (h.rank != rank) mismatch("rank", std::to_string(h.rank), std::to_string(rank));
  if (h.world_size != m.world_size)
    mismatch("world size", std::to_string(h.world_size), std::to_string(m.world_size));
  if (h.step != m.step) mismatch("step", std::to_string(h.step), std::to_string(m.step));
  if (h.config_hash != m.config_hash)
    mismatch("config hash", hash_hex(h.config_hash), hash_hex(m.config_hash));
}

}  // namespace

LoadedCheckpoint verify_checkpoint_dir(const std::string& dir, int rank, const SectionFilter& keep) {
  struct stat st {};
  if (::stat((dir + "/MANIFEST").c_str(), &st) != 0)
    throw_checkpoint("MANIFEST missing (the save never committed)");
  const Manifest m = parse_manifest(read_small_file(dir + "/MANIFEST", kMaxManifestBytes));
  const std::string base = dir.substr(dir.find_last_of('/') + 1);
  int64_t dir_step = -1;
  if (parse_step_dir_name(base, &dir_step) && dir_step != m.step)
    throw_checkpoint("MANIFEST step " + std::to_string(m.step) + " does not match the directory name");
  if (rank < 0 || rank >= m.world_size)
    throw_checkpoint("checkpoint has " + std::to_string(m.world_size) + " rank(s); rank " +
                     std::to_string(rank) + " has no file in it");

  LoadedCheckpoint out;
  out.dir = dir;
  out.step = m.step;
  out.world_size = m.world_size;
  out.config_hash = m.config_hash;
  const std::string own = rank_file_name(rank);
  for (const ManifestFile& f : m.files) {
    auto src = open_listed(dir, f);
    if (f.name == own) {
      RankFileContents contents;
      try {
        contents = read_rank_file(
            *src, f.size, f.name, keep ? keep : [](const std::string&) { return true; });
      } catch (const Error&) {
        src->drain();
        if (src->crc() != f.crc32c) throw_checkpoint(crc_fault(f.name, f.crc32c, src->crc()));
        throw;
      }
      if (src->crc() != f.crc32c) throw_checkpoint(crc_fault(f.name, f.crc32c, src->crc()));
      check_header(contents.header, m, rank, f.name);
      out.tensors = std::move(contents.tensors);
    } else if (f.name == "trainer.json") {
      if (f.size > kMaxTrainerJsonBytes) throw_checkpoint("trainer.json is larger than 256 MiB");
      out.trainer_state_json.resize(static_cast<size_t>(f.size));
      if (!src->read(out.trainer_state_json.data(), out.trainer_state_json.size()))
        throw_checkpoint("trainer.json ended early");
      if (src->crc() != f.crc32c) throw_checkpoint(crc_fault(f.name, f.crc32c, src->crc()));
    } else {
      src->drain();
      if (src->consumed() != f.size) throw_checkpoint(f.name + " changed size while being read");
      if (src->crc() != f.crc32c) throw_checkpoint(crc_fault(f.name, f.crc32c, src->crc()));
    }
  }
  return out;
}

}  // namespace ckpt

namespace {

ckpt::SectionFilter filter_for(const std::vector<std::string>& sections) {
  if (sections.empty()) return {};
  std::set<std::string> names(sections.begin(), sections.end());
  return [names](const std::string& n) { return names.count(n) > 0; };
}

}  // namespace

std::optional<LoadedCheckpoint> CheckpointStore::load_latest(int rank, std::vector<std::string>* warnings) {
  return load_latest(rank, warnings, {});
}

std::optional<LoadedCheckpoint> CheckpointStore::load_latest(int rank, std::vector<std::string>* warnings,
                                                             const std::vector<std::string>& sections) {
  std::vector<std::string> notes;
  for (const std::string& tmp : ckpt::scan_tmp_dirs(root_))
    notes.push_back(tmp + ": incomplete save (never committed), ignored; it is removed at the next start");
  load_faults_.clear();
  std::optional<LoadedCheckpoint> found;
  const auto dirs = ckpt::scan_step_dirs(root_);
  for (auto it = dirs.rbegin(); it != dirs.rend() && !found; ++it) {
    try {
      LoadedCheckpoint c = ckpt::verify_checkpoint_dir(root_ + "/" + it->name, rank, filter_for(sections));
      if (validator_) validator_(c);
      found = std::move(c);
      known_good_.push_back(it->name);
    } catch (const Error& e) {
      load_faults_.push_back({it->name, e.what()});
    }
  }
  if (warnings != nullptr) {
    for (std::string& n : notes) warnings->push_back(std::move(n));
    const std::string then = found
                                 ? "; falling back to " + found->dir.substr(found->dir.find_last_of('/') + 1)
                                 : "; no older checkpoint verifies";
    for (const CheckpointFault& f : load_faults_) warnings->push_back(f.name + ": " + f.reason + then);
  }
  return found;
}

std::string describe_faults(const std::vector<CheckpointFault>& faults) {
  std::string out;
  for (const CheckpointFault& f : faults) out += "  " + f.name + ": " + f.reason + "\n";
  return out;
}

LoadedCheckpoint CheckpointStore::load_dir(const std::string& dir, int rank) {
  return load_dir(dir, rank, {});
}

LoadedCheckpoint CheckpointStore::load_dir(const std::string& dir, int rank,
                                           const std::vector<std::string>& sections) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw_checkpoint("checkpoint directory " + dir + " does not exist; pass an existing step-N directory");
  try {
    LoadedCheckpoint c = ckpt::verify_checkpoint_dir(dir, rank, filter_for(sections));
    if (validator_) validator_(c);
    return c;
  } catch (const Error& e) {
    throw_checkpoint(
        "checkpoint " + dir + " does not verify: " + e.what() +
        "; use an older step-N directory, or the checkpoints directory to take the newest one that "
        "verifies");
  }
}

}  // namespace flotilla
