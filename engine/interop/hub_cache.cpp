// The cache listing (engine/interop/hub.h): one row per model repo of the Hugging Face cache, for
// the wizard's model list, `flotilla models list|show` and `flotilla-worker hub list`.
//
// Decision: the listing reads the cache as huggingface_hub leaves it and never writes, locks or
// repairs anything (another tool may be writing it right now). Each repo shows one snapshot: the
// one refs/main points at when it is complete, else the newest complete one (by the snapshot
// folder's time), else the newest incomplete one with what it lacks in why_not. "Complete" is what
// find_cached() asks of a training run (config.json and every safetensors shard, each link reaching
// a blob), checked here file by file so that why_not can name the missing one.
//
// Decision: "trainable" is the engine's own acceptance, not a list kept here: config.json goes
// through parse_hf_config() and hf_model_section(), exactly what apply_hf_init_from() runs, and the
// refusal's own words become why_not. A GPT-2 folder is refused the way apply_hf_init_from refuses it
// (GPT-2 weights are given by file). Parameters are counted from the safetensors headers alone (no
// weight is read), every tensor as the files hold it: a tied head the file leaves out is not counted
// twice, one it stores is. Bytes on disk are each blob file once (by device and inode, so a link
// followed twice or a hard link is one file), .incomplete downloads included: they take disk too.
//
// Decision: junk never throws. Folders that are not models-- repos (datasets--, spaces--, .locks,
// version.txt) are skipped; a repo with no snapshot, a dangling link, an unreadable config.json or a
// damaged safetensors header still gets its row, the problem in why_not.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "engine/core/error.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/hub.h"
#include "engine/interop/safetensors.h"

namespace flotilla::interop::hub {
namespace fs = std::filesystem;

namespace {

bool is_hex40(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string read_small(const fs::path& p, size_t limit) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "";
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (!ec) limit = std::min<size_t>(limit, static_cast<size_t>(size));
  std::string s(limit, '\0');
  in.read(s.data(), static_cast<std::streamsize>(limit));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  return s.substr(b);
}

// A path that exists and, links followed, is a regular file (a dangling link is not).
bool regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(fs::status(p, ec)) && !ec;
}

bool is_link(const fs::path& p) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec)) && !ec;
}

// Every refs/<revision> file (revisions may hold '/': refs/refs/pr/3) that names a commit.
std::map<std::string, std::string> read_refs(const fs::path& refs_dir) {
  std::map<std::string, std::string> refs;  // revision -> commit
  std::error_code ec;
  if (!fs::is_directory(refs_dir, ec)) return refs;
  fs::recursive_directory_iterator it(refs_dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 4) continue;
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    const std::string commit = trimmed(read_small(it->path(), 256));
    if (!is_hex40(commit)) continue;
    refs[it->path().lexically_relative(refs_dir).generic_string()] = commit;
  }
  return refs;
}

// What a snapshot lacks for training (find_cached's kTraining test), in words; "" when complete.
// `weights` gets the safetensors files the snapshot uses.
std::string training_gap(const fs::path& snap, std::vector<fs::path>* weights) {
  weights->clear();
  const auto missing = [&](const std::string& file) {
    return is_link(snap / file) ? file + " is a link to a blob that is missing (an interrupted download?)"
                                : file + " is missing";
  };
  if (!regular(snap / "config.json")) return missing("config.json");
  if (regular(snap / "model.safetensors.index.json")) {
    const std::string text = read_small(snap / "model.safetensors.index.json", 64u << 20);
    const auto index = nlohmann::json::parse(text, nullptr, false);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return "model.safetensors.index.json has no weight_map";
    std::set<std::string> files;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string() || !wanted_file(file.get<std::string>(), FileSet::kTraining))
        return "model.safetensors.index.json names a file that is not a top-level safetensors file (tensor " +
               tensor + ")";
      files.insert(file.get<std::string>());
    }
    for (const std::string& f : files) {
      if (!regular(snap / f)) return missing(f) + " (model.safetensors.index.json lists it)";
      weights->push_back(snap / f);
    }
    return "";
  }
  if (regular(snap / "model.safetensors")) {
    weights->push_back(snap / "model.safetensors");
    return "";
  }
  for (const char* pickled : {"pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (fs::exists(snap / pickled))
      return std::string("the weights are pickled (") + pickled +
             "), which Flotilla never loads; it needs a revision with model.safetensors";
  if (regular(snap / "adapter_config.json"))
    return "it is a LoRA adapter (adapter_config.json), not a base model: give it as lora.init_from";
  return "no weights are cached (only the config): `flotilla models pull` fetches them";
}

struct Candidate {
  std::string commit;
  fs::path folder;
  int64_t mtime = 0;
  std::string gap;
  std::vector<fs::path> weights;
};

int64_t mtime_of(const fs::path& p, bool follow) {
  struct stat st {};
  const int rc = follow ? ::stat(p.c_str(), &st) : ::lstat(p.c_str(), &st);
  return rc == 0 ? static_cast<int64_t>(st.st_mtime) : 0;
}

// Sums each regular file under `dir` once (links followed, deduplicated by device and inode) into
// *bytes, and its newest mtime into *newest. `seen` spans the whole repo.
void sum_files(const fs::path& dir, std::set<std::pair<uint64_t, uint64_t>>* seen, uint64_t* bytes,
               int64_t* newest) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() > 8) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // dangling, folder
    if (!seen->insert({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}).second) continue;
    *bytes += static_cast<uint64_t>(st.st_size);
    *newest = std::max<int64_t>(*newest, static_cast<int64_t>(st.st_mtime));
  }
}

// "models--org--name" -> "org/name" ("models--gpt2" -> "gpt2", a legacy name with no organisation).
std::string repo_id_of(const std::string& folder_name) {
  std::string rest = folder_name.substr(std::string("models--").size());
  if (const size_t sep = rest.find("--"); sep != std::string::npos) rest.replace(sep, 2, "/");
  return rest;
}

// Fills trainable / why_not / model_type / architecture / parameters from the chosen snapshot.
void judge(CachedModel& m, const Candidate& c) {
  const std::string text = read_small(c.folder / "config.json", 16u << 20);
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!text.empty() && j.is_object()) {
    if (j.contains("model_type") && j["model_type"].is_string())
      m.model_type = j["model_type"].get<std::string>();
    if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
        j["architectures"][0].is_string())
      m.architecture = j["architectures"][0].get<std::string>();
  }
  for (const fs::path& w : c.weights) {
    try {
      const SafetensorsFile f(w.string());
      for (const SafetensorsEntry& e : f.entries()) {
        uint64_t n = 1;
        for (int64_t d : e.shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
        m.parameters += n;
      }
    } catch (const std::exception& e) {
      m.parameters = 0;
      m.why_not = w.filename().string() + " cannot be read: " + e.what();
      return;
    }
  }
  if (!c.gap.empty()) {
    m.why_not = c.gap;
    return;
  }
  if (text.empty() || !j.is_object()) {
    m.why_not = "config.json is not a JSON object (a damaged download?)";
    return;
  }
  if (m.model_type == "gpt2") {
    m.why_not = "a GPT-2 model: GPT-2 weights load by file, so give model.init_from = \"" +
                (c.folder / "model.safetensors").string() + "\" rather than the name";
    return;
  }
  try {
    (void)hf_model_section(parse_hf_config(text, "config.json"));
  } catch (const std::exception& e) {
    m.why_not = e.what();
    return;
  }
  if (m.repo_id.find('/') == std::string::npos) {
    m.why_not = "the name \"" + m.repo_id +
                "\" has no organisation, so it cannot be given by name; give its folder as a path: " +
                c.folder.string();
    return;
  }
  m.trainable = true;
}

// The row of one repo folder; `want` (a commit or a revision) picks the snapshot, else the listing's rule.
std::optional<CachedModel> list_repo(const fs::path& repo, const std::string& folder_name,
                                     const std::string& want = "") {
  CachedModel m;
  m.repo_id = repo_id_of(folder_name);
  if (m.repo_id.empty()) return std::nullopt;
  const std::map<std::string, std::string> refs = read_refs(repo / "refs");

  std::vector<Candidate> candidates;
  std::error_code ec;
  const fs::path snaps = repo / "snapshots";
  if (fs::is_directory(snaps, ec)) {
    for (fs::directory_iterator it(snaps, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code e2;
      if (!is_hex40(name) || !it->is_directory(e2)) continue;
      Candidate c;
      c.commit = name;
      c.folder = it->path();
      c.mtime = mtime_of(it->path(), false);
      c.gap = training_gap(c.folder, &c.weights);
      candidates.push_back(std::move(c));
    }
  }

  std::set<std::pair<uint64_t, uint64_t>> seen;
  int64_t newest = 0;
  sum_files(repo / "blobs", &seen, &m.bytes_on_disk, &newest);
  // A cache copied without links (snapshots holding the files themselves) has its bytes there.
  uint64_t snapshot_bytes = 0;
  int64_t snapshot_newest = 0;
  sum_files(snaps, &seen, &snapshot_bytes, &snapshot_newest);
  m.bytes_on_disk += snapshot_bytes;
  m.modified_unix = newest ? newest : snapshot_newest;

  if (candidates.empty()) {
    if (!want.empty()) return std::nullopt;
    m.why_not = refs.empty() ? "no snapshot is cached (an interrupted or removed download?)"
                             : "refs name commits whose snapshots are not cached";
    return m;
  }
  // refs/main's snapshot when complete; else the newest complete; else the newest.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.mtime != b.mtime ? a.mtime > b.mtime : a.commit < b.commit;
  });
  const Candidate* chosen = nullptr;
  if (!want.empty()) {
    const auto ref = refs.find(want);
    const std::string commit = is_hex40(want) ? want : ref != refs.end() ? ref->second : std::string();
    for (const Candidate& c : candidates)
      if (c.commit == commit) chosen = &c;
    if (!chosen) return std::nullopt;
  }
  if (auto main_ref = refs.find("main"); !chosen && main_ref != refs.end())
    for (const Candidate& c : candidates)
      if (c.commit == main_ref->second && c.gap.empty()) chosen = &c;
  if (!chosen)
    for (const Candidate& c : candidates)
      if (c.gap.empty() && !chosen) chosen = &c;
  if (!chosen) chosen = &candidates.front();

  m.commit = chosen->commit;
  m.folder = chosen->folder.string();
  for (const auto& [revision, commit] : refs)
    if (commit == m.commit) m.refs.push_back(revision);
  std::stable_partition(m.refs.begin(), m.refs.end(), [](const std::string& r) { return r == "main"; });
  judge(m, *chosen);
  return m;
}

}  // namespace

std::optional<CachedModel> describe_cached(const ModelRef& ref, const std::string& hub_dir) {
  const fs::path repo = repo_folder(hub_dir, ref.repo_id);
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) return std::nullopt;
  try {
    return list_repo(repo, repo.filename().string(), ref.revision);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<CachedModel> list_cached_models(const std::string& hub_dir) {
  std::vector<CachedModel> rows;
  std::error_code ec;
  if (hub_dir.empty() || !fs::is_directory(hub_dir, ec)) return rows;
  for (fs::directory_iterator it(hub_dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (name.rfind("models--", 0) != 0 || !it->is_directory(e2)) continue;  // datasets--, spaces--, .locks
    try {
      if (std::optional<CachedModel> m = list_repo(it->path(), name)) rows.push_back(std::move(*m));
    } catch (const std::exception&) {
      // A repo that cannot be read at all (permissions changing underneath) is left out.
    }
  }
  std::sort(rows.begin(), rows.end(), [](const CachedModel& a, const CachedModel& b) {
    return a.repo_id != b.repo_id ? a.repo_id < b.repo_id : a.commit < b.commit;
  });
  return rows;
}

}  // namespace flotilla::interop::hub
