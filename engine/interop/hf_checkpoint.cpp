// Hugging Face model folder reader: index/shard consistency, mapped fp32 reads, unread tensors
// (rules in hf_checkpoint.h).
#include "engine/interop/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"
#include "engine/interop/model_source.h"

namespace flotilla::interop {
namespace {

namespace fsys {
bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace fsys

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;
constexpr size_t kMaxListedProblems = 8;

std::string read_text_file(const std::string& path, uint64_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw_data(path + ": cannot open: " + errno_string(errno));
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    text.append(buf, n);
    if (text.size() > max_bytes) {
      std::fclose(f);
      throw_data(path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB; not a safetensors index");
    }
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw_data(path + ": read failed");
  return text;
}

// A weight_map value must name a file in the folder itself (no paths: the index cannot point outside).
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

// weight_map of the index text: tensor -> file. Throws Error(kData) on malformed JSON, a missing or
// non-object weight_map, a non-string or path-like value, or a tensor listed twice.
std::map<std::string, std::string> parse_weight_map(const std::string& text, const std::string& label) {
  using nlohmann::json;
  std::string top_key;
  std::set<std::string> top_seen, wm_seen;
  std::vector<std::string> duplicates;
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev != json::parse_event_t::key) return true;
    const std::string key = parsed.is_string() ? parsed.get<std::string>() : std::string();
    if (depth == 1) {
      top_key = key;
      if (!top_seen.insert(key).second) duplicates.push_back(key);
    } else if (depth == 2 && top_key == "weight_map" && !wm_seen.insert(key).second) {
      duplicates.push_back("weight_map." + key);
    }
    return true;
  };
  const json j = json::parse(text, cb, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw_data(label +
               ": not a JSON object; re-download or re-export the model (it should hold "
               "{\"metadata\": ..., \"weight_map\": {tensor: file}})");
  if (!duplicates.empty())
    throw_data(label + ": key " + duplicates.front() +
               " appears twice; the index is damaged, re-download it");
  const auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    throw_data(label + ": weight_map is missing, empty or not an object; re-download the index");
  if (const auto meta = j.find("metadata"); meta != j.end() && !meta->is_object() && !meta->is_null())
    throw_data(label + ": metadata is not an object");
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      throw_data(label + ": weight_map[\"" + it.key() + "\"] is not a file name string");
    const std::string file = it.value().get<std::string>();
    if (!plain_file_name(file))
      throw_data(label + ": weight_map[\"" + it.key() + "\"] = \"" + file +
                 "\" is not a file name in this folder (shards must lie beside the index)");
    out[it.key()] = file;
  }
  return out;
}

std::string human_bytes(uint64_t b) {
  char buf[64];
  if (b >= 1000000000ull)
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(b) / 1e9);
  else if (b >= 1000000ull)
    std::snprintf(buf, sizeof buf, "%.2f MB", static_cast<double>(b) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

[[noreturn]] void throw_problems(const std::string& head, const std::vector<std::string>& problems) {
  std::string msg = head;
  for (size_t i = 0; i < problems.size() && i < kMaxListedProblems; ++i)
    msg += (i ? "; " : ": ") + problems[i];
  if (problems.size() > kMaxListedProblems)
    msg += "; and " + std::to_string(problems.size() - kMaxListedProblems) + " more";
  throw_data(msg);
}

}  // namespace

bool is_ignorable_hf_tensor(const std::string& name) {
  static const std::string kSuffix = ".rotary_emb.inv_freq";
  return name.size() >= kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

HfCheckpoint::HfCheckpoint(const std::string& path_or_name) {
  const std::string path = local_model_folder(path_or_name, "model.init_from");
  std::string index_path, single_path;
  if (fsys::is_dir(path)) {
    folder_ = path;
    while (folder_.size() > 1 && folder_.back() == '/') folder_.pop_back();
    if (fsys::is_file(folder_ + "/" + kSingleName))
      single_path = folder_ + "/" + kSingleName;
    else if (fsys::is_file(folder_ + "/" + kIndexName))
      index_path = folder_ + "/" + kIndexName;
    else
      throw_data(folder_ + ": no " + kSingleName + " or " + kIndexName +
                 "; only safetensors weights are read (convert a pytorch_model.bin folder with "
                 "transformers: model.save_pretrained(dir, safe_serialization=True))");
  } else if (fsys::is_file(path)) {
    const size_t slash = path.find_last_of('/');
    folder_ = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    (base.size() > 5 && base.compare(base.size() - 5, 5, ".json") == 0 ? index_path : single_path) = path;
  } else {
    throw_data(path +
               ": no such folder or file; model.init_from names a Hugging Face model folder or a Hub name "
               "org/name[@revision]");
  }

  std::map<std::string, std::string> weight_map;  // tensor -> file (sharded only)
  if (!index_path.empty()) {
    sharded_ = true;
    weight_map = parse_weight_map(read_text_file(index_path, kMaxIndexBytes), index_path);
    std::set<std::string> names;
    for (const auto& [tensor, file] : weight_map) names.insert(file);
    file_names_.assign(names.begin(), names.end());
    std::vector<std::string> missing;
    for (const std::string& f : file_names_)
      if (!fsys::is_file(folder_ + "/" + f)) {
        const auto first = std::find_if(weight_map.begin(), weight_map.end(),
                                        [&](const auto& kv) { return kv.second == f; });
        missing.push_back(f + " (listed for " + first->first + ")");
      }
    if (!missing.empty())
      throw_problems(index_path + ": " + std::to_string(missing.size()) + " shard file(s) missing from " +
                         folder_ + "; download or copy the whole folder again",
                     missing);
  } else {
    const size_t slash = single_path.find_last_of('/');
    file_names_.push_back(slash == std::string::npos ? single_path : single_path.substr(slash + 1));
  }
  for (const std::string& f : file_names_)
    files_.push_back(std::make_unique<SafetensorsFile>(folder_ + "/" + f));

  // Every tensor of every file, checked against the index.
  auto file_index = [&](const std::string& name) {
    return static_cast<size_t>(std::find(file_names_.begin(), file_names_.end(), name) - file_names_.begin());
  };
  std::vector<std::string> problems;
  for (size_t fi = 0; fi < files_.size(); ++fi) {
    for (const SafetensorsEntry& e : files_[fi]->entries()) {
      if (sharded_) {
        const auto listed = weight_map.find(e.name);
        if (listed == weight_map.end()) {
          problems.push_back(file_names_[fi] + " holds tensor " + e.name + ", which the index does not list");
          continue;
        }
        if (listed->second != file_names_[fi]) {  // absent from its own file: reported below
          if (files_[file_index(listed->second)]->find(e.name) != nullptr)
            problems.push_back("tensor " + e.name + " is in both " + listed->second + " and " +
                               file_names_[fi] + " (a duplicate; the index names " + listed->second + ")");
          continue;
        }
      }
      tensors_.push_back({e.name, e.dtype, e.shape, file_names_[fi], e.end - e.begin});
      entries_.push_back(&e);
      file_of_.push_back(fi);
    }
  }
  for (const auto& [tensor, file] : weight_map) {
    if (files_[file_index(file)]->find(tensor) != nullptr) continue;
    std::string also;
    for (size_t o = 0; o < files_.size(); ++o)
      if (files_[o]->find(tensor) != nullptr) also = " (it is in " + file_names_[o] + ")";
    problems.push_back("the index lists tensor " + tensor + " in " + file + ", which does not hold it" +
                       also);
  }
  if (!problems.empty())
    throw_problems(folder_ + ": the safetensors files do not match " + std::string(kIndexName) +
                       " (a partial download or a mix of two exports?); download or copy the folder again",
                   problems);

  // Sorted by name, with the parallel arrays permuted alike.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].name < tensors_[b].name; });
  std::vector<HfTensorInfo> t;
  std::vector<const SafetensorsEntry*> e;
  std::vector<size_t> f;
  for (size_t i : order) {
    t.push_back(std::move(tensors_[i]));
    e.push_back(entries_[i]);
    f.push_back(file_of_[i]);
  }
  tensors_ = std::move(t);
  entries_ = std::move(e);
  file_of_ = std::move(f);
  read_ = std::make_unique<std::atomic<bool>[]>(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) read_[i].store(false);
}

HfCheckpoint::~HfCheckpoint() = default;

size_t HfCheckpoint::index_of(const std::string& name) const {
  const auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                   [](const HfTensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? static_cast<size_t>(it - tensors_.begin())
                                                  : tensors_.size();
}

const HfTensorInfo* HfCheckpoint::find(const std::string& name) const {
  const size_t i = index_of(name);
  return i < tensors_.size() ? &tensors_[i] : nullptr;
}

void HfCheckpoint::read_f32(const std::string& name, float* dst,
                            const std::vector<int64_t>& expected_shape) const {
  const size_t i = index_of(name);
  if (i == tensors_.size())
    throw_data(folder_ + ": tensor " + name + " is missing (expected shape " + shape_string(expected_shape) +
               "); the weights do not match config.json, or the folder holds another architecture");
  const HfTensorInfo& t = tensors_[i];
  if (t.shape != expected_shape)
    throw_data(folder_ + "/" + t.file + ": tensor " + name + " has shape " + shape_string(t.shape) +
               ", expected " + shape_string(expected_shape) + " from config.json");
  files_[file_of_[i]]->read_f32_into(*entries_[i], dst);
  read_[i].store(true);
}

std::vector<uint8_t> HfCheckpoint::read_raw(const std::string& name) const {
  const size_t i = index_of(name);
  if (i == tensors_.size()) throw_data(folder_ + ": tensor " + name + " is missing");
  std::vector<uint8_t> out = files_[file_of_[i]]->read_raw(*entries_[i]);
  read_[i].store(true);
  return out;
}

void HfCheckpoint::mark_read(const std::string& name) const {
  const size_t i = index_of(name);
  if (i < tensors_.size()) read_[i].store(true);
}

std::vector<std::string> HfCheckpoint::unread() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!read_[i].load() && !is_ignorable_hf_tensor(tensors_[i].name)) out.push_back(tensors_[i].name);
  return out;
}

std::string HfCheckpoint::describe() const {
  std::map<std::string, size_t> dtypes;
  uint64_t bytes = 0;
  for (const HfTensorInfo& t : tensors_) {
    ++dtypes[t.dtype];
    bytes += t.bytes;
  }
  std::string s = folder_ + ": " +
                  (sharded_ ? std::to_string(file_names_.size()) + " shards listed by " + kIndexName + " ("
                            : std::string("one file ("));
  for (size_t i = 0; i < file_names_.size() && i < 3; ++i) s += (i ? ", " : "") + file_names_[i];
  if (file_names_.size() > 3) s += ", ...";
  s += "), " + std::to_string(tensors_.size()) + " tensors (";
  bool first = true;
  for (const auto& [dtype, n] : dtypes) {
    s += (first ? "" : ", ") + dtype + " " + std::to_string(n);
    first = false;
  }
  return s + "), " + human_bytes(bytes) + " of tensor data";
}

}  // namespace flotilla::interop
