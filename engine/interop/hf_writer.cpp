// Hugging Face folder writer: shard plan, bf16 rounding, build-beside-then-swap (see hf_writer.h).
#include "engine/interop/hf_writer.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/checkpoint/durable_io.h"
#include "engine/core/error.h"
#include "engine/interop/safetensors.h"

namespace flotilla::interop {
namespace {

namespace fs = std::filesystem;

const char* const kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "added_tokens.json",     "chat_template.jinja",     "tokenizer.model"};

bool plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos;
}

// model-00001-of-00002.safetensors (STEM-... for another stem)
bool is_shard_name(const std::string& s, const std::string& stem) {
  const std::string kPattern = stem + "-#####-of-#####.safetensors";
  if (s.size() != kPattern.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (kPattern[i] == '#' ? (s[i] < '0' || s[i] > '9') : s[i] != kPattern[i]) return false;
  return true;
}

// Names an export may leave in DIR (so replacing DIR as a whole loses nothing else).
bool export_file_name(const std::string& name, const std::map<std::string, std::string>& text_files,
                      const std::string& stem) {
  if (name == "config.json" || name == "generation_config.json" || name == stem + ".safetensors" ||
      name == stem + ".safetensors.index.json" || text_files.count(name) != 0 || is_shard_name(name, stem))
    return true;
  for (const char* t : kTokenizerFiles)
    if (name == t) return true;
  return false;
}

void check_existing_dir(const std::string& dir, const std::map<std::string, std::string>& text_files,
                        const std::string& stem) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return;  // absent: fine
  if (S_ISLNK(st.st_mode))
    throw Error(ExitCode::kUsage, dir + " is a symbolic link; give the folder it points to, or a new folder");
  if (!S_ISDIR(st.st_mode))
    throw Error(ExitCode::kUsage, dir + " exists and is not a folder; choose another --out");
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec) || !export_file_name(name, text_files, stem))
      throw Error(ExitCode::kUsage,
                  dir + " holds " + name +
                      ", which is not part of a Hugging Face export, and the export replaces the "
                      "whole folder; export into a new or empty folder (nothing was changed)");
  }
  if (ec) throw Error(ExitCode::kIo, "cannot list " + dir + ": " + ec.message());
}

// Swaps the finished `tmp` folder in for `dir` (absent or an old export). Returns the path now holding
// the old export ("" when there was none), for the caller to delete.
std::string swap_in(const std::string& tmp, const std::string& dir, const std::string& parent,
                    const CheckpointFaultHook* hook) {
  if (int err = ckpt::fault_errno(hook, "swap"); err != 0)
    ckpt::throw_io_failure(err, "moving the new export into place:", fs::path(dir).filename().string(),
                           parent, 0);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      ckpt::throw_io_failure(errno, "renaming", fs::path(tmp).filename().string(), parent, 0);
    return "";
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) return tmp;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    ckpt::throw_io_failure(errno, "exchanging", fs::path(tmp).filename().string() + " with the old export",
                           parent, 0);
  const std::string old = dir + ".old-" + ckpt::random_hex16();  // no atomic exchange on this file system
  if (::rename(dir.c_str(), old.c_str()) != 0)
    ckpt::throw_io_failure(errno, "renaming the old export", fs::path(dir).filename().string(), parent, 0);
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    ::rename(old.c_str(), dir.c_str());  // put the old export back
    ckpt::throw_io_failure(err, "renaming", fs::path(tmp).filename().string(), parent, 0);
  }
  return old;
}

uint64_t numel_of(const HfOutTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || (d != 0 && n > (uint64_t{1} << 60) / static_cast<uint64_t>(d)))
      throw Error(ExitCode::kUsage, "tensor " + t.name + ": bad shape " + shape_string(t.shape));
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// Writes one safetensors file `name` into `dir` from tensors[first, last).
void write_shard(const std::string& dir, const std::string& name, const std::vector<HfOutTensor>& tensors,
                 size_t first, size_t last, bool bf16, const CheckpointFaultHook* hook,
                 std::vector<float>* buf) {
  std::vector<SafetensorsOutTensor> layout;
  for (size_t i = first; i < last; ++i) {
    SafetensorsOutTensor t;
    t.name = tensors[i].name;
    t.dtype = bf16 ? "BF16" : "F32";
    t.shape = tensors[i].shape;
    layout.push_back(std::move(t));
  }
  uint64_t data_bytes = 0;
  const std::string head = safetensors_header_block(layout, {{"format", "pt"}}, &data_bytes);
  ckpt::DurableWriter w(dir, name, hook, head.size() + data_bytes);
  w.write(head.data(), head.size());
  for (size_t i = first; i < last; ++i) {
    const size_t n = static_cast<size_t>(numel_of(tensors[i]));
    if (n == 0) continue;
    buf->resize(std::max(buf->size(), n));
    tensors[i].produce(buf->data());
    if (bf16) {  // in place: element k's two bytes land at 2k, below the floats still to be read
      unsigned char* bytes = reinterpret_cast<unsigned char*>(buf->data());
      for (size_t k = 0; k < n; ++k) {
        const uint16_t h = f32_to_bf16((*buf)[k]);
        std::memcpy(bytes + 2 * k, &h, 2);
      }
    }
    w.write(buf->data(), n * (bf16 ? 2 : 4));
  }
  w.finish();
}

void write_text(const std::string& dir, const std::string& name, const std::string& text,
                const CheckpointFaultHook* hook) {
  ckpt::DurableWriter w(dir, name, hook, text.size());
  w.write(text.data(), text.size());
  w.finish();
}

}  // namespace

HfWriteResult write_hf_checkpoint(const std::string& dir, const std::vector<HfOutTensor>& tensors,
                                  const std::string& dtype, uint64_t max_shard_bytes) {
  HfWriteOptions o;
  o.dtype = dtype;
  o.max_shard_bytes = max_shard_bytes;
  return write_hf_checkpoint(dir, tensors, o);
}

HfWriteResult write_hf_checkpoint(const std::string& dir_in, const std::vector<HfOutTensor>& tensors,
                                  const HfWriteOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "fp32")
    throw Error(ExitCode::kUsage, "export dtype \"" + o.dtype + "\" is not supported; use bf16 or fp32");
  if (tensors.empty()) throw Error(ExitCode::kUsage, "export of " + dir_in + ": no tensors to write");
  const bool bf16 = o.dtype == "bf16";
  std::set<std::string> names;
  std::vector<uint64_t> bytes;
  for (const HfOutTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second || !t.produce)
      throw Error(ExitCode::kUsage,
                  "export: tensor \"" + t.name + "\" is empty, reserved, listed twice or has no producer");
    bytes.push_back(numel_of(t) * (bf16 ? 2 : 4));
  }
  for (const auto& [name, text] : o.text_files)
    if (!plain_name(name) || name.find(".safetensors") != std::string::npos)
      throw Error(ExitCode::kUsage, "export: \"" + name + "\" is not a plain file name for a side file");

  // Shard plan: [begin, end) tensor ranges.
  std::vector<std::pair<size_t, size_t>> shards;
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (shards.empty() || (in_shard > 0 && in_shard + bytes[i] > o.max_shard_bytes)) {
      shards.push_back({i, i});
      in_shard = 0;
    }
    shards.back().second = i + 1;
    in_shard += bytes[i];
    total += bytes[i];
  }
  std::vector<std::string> shard_names;
  if (shards.size() == 1) {
    shard_names.push_back(o.weights_stem + ".safetensors");
  } else {
    char buf[64];
    for (size_t s = 0; s < shards.size(); ++s) {
      std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      shard_names.push_back(o.weights_stem + buf);
    }
  }

  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!plain_name(o.weights_stem))
    throw Error(ExitCode::kUsage, "export: bad weights name " + o.weights_stem);
  check_existing_dir(dir, o.text_files, o.weights_stem);
  const fs::path parent_path = fs::absolute(fs::path(dir)).parent_path();
  const std::string parent = parent_path.string();
  std::error_code ec;
  fs::create_directories(parent_path, ec);
  if (ec) throw Error(ExitCode::kIo, "cannot create " + parent + ": " + ec.message());
  const std::string tmp = dir + ".tmp-" + ckpt::random_hex16();
  if (::mkdir(tmp.c_str(), 0755) != 0)
    ckpt::throw_io_failure(errno, "creating", fs::path(tmp).filename().string(), parent, total);

  HfWriteResult result;
  try {
    std::vector<float> buf;
    for (size_t s = 0; s < shards.size(); ++s)
      write_shard(tmp, shard_names[s], tensors, shards[s].first, shards[s].second, bf16, o.fault_hook, &buf);
    buf = {};
    if (shards.size() > 1) {
      nlohmann::json index;
      index["metadata"] = {{"total_size", total}};
      index["weight_map"] = nlohmann::json::object();
      for (size_t s = 0; s < shards.size(); ++s)
        for (size_t i = shards[s].first; i < shards[s].second; ++i)
          index["weight_map"][tensors[i].name] = shard_names[s];
      write_text(tmp, o.weights_stem + ".safetensors.index.json", index.dump(2) + "\n", o.fault_hook);
    }
    for (const auto& [name, text] : o.text_files) write_text(tmp, name, text, o.fault_hook);
    if (!o.tokenizer_dir.empty()) copy_tokenizer_files(o.tokenizer_dir, tmp);
    ckpt::fsync_dir(tmp, "fsync dir", o.fault_hook);
    for (const fs::directory_entry& e : fs::directory_iterator(tmp, ec))
      result.files.push_back(e.path().filename().string());
    if (ec) throw Error(ExitCode::kIo, "cannot list " + tmp + ": " + ec.message());
    const std::string old = swap_in(tmp, dir, parent, o.fault_hook);
    ckpt::fsync_dir(parent, "fsync parent", o.fault_hook);
    if (!old.empty()) fs::remove_all(old, ec);  // the previous export; a leftover is harmless
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  std::sort(result.files.begin(), result.files.end());
  result.tensor_bytes = total;
  result.shards = static_cast<int>(shards.size());
  return result;
}

std::vector<std::string> copy_tokenizer_files(const std::string& src_dir, const std::string& dst_dir) {
  std::vector<std::string> copied;
  for (const char* name : kTokenizerFiles) {
    const std::string src = src_dir + "/" + name;
    struct stat st {};
    if (::stat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(ExitCode::kIo, src + ": cannot open: " + errno_string(errno));
    try {
      ckpt::replace_file_durably(
          dst_dir + "/" + name, static_cast<uint64_t>(st.st_size), [&](ckpt::DurableWriter& w) {
            std::vector<char> buf(size_t{1} << 20);
            for (;;) {
              const ssize_t n = ::read(fd, buf.data(), buf.size());
              if (n < 0 && errno == EINTR) continue;
              if (n < 0) throw Error(ExitCode::kIo, src + ": read failed: " + errno_string(errno));
              if (n == 0) break;
              w.write(buf.data(), static_cast<size_t>(n));
            }
          });
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    copied.push_back(name);
  }
  return copied;
}

}  // namespace flotilla::interop
