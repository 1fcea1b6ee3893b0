// Hub names, the cache's paths, cache lookup and the one resolution every model reader calls
// (engine/interop/hub.h). The network side is hub_download.cpp; the cache listing hub_cache.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/error.h"
#include "engine/interop/hub.h"

namespace flotilla::interop::hub {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_hex40(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

std::string describe_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (c == ' ') return "a space";
  if (u < 0x20 || u == 0x7f) return "a control character";
  if (u >= 0x80) return "a non-ASCII character";
  return "'" + std::string(1, c) + "'";
}

// The problem with one part of a repo id ("org" or "name"), or "".
std::string part_problem(const std::string& part, const char* which) {
  if (part.empty()) return std::string("the ") + which + " is empty";
  for (size_t i = 0; i < part.size(); ++i)
    if (!name_char(part[i])) return std::string("the ") + which + " has " + describe_char(part[i]);
  if (part.front() == '.' || part.front() == '-')
    return std::string("the ") + which + " starts with '" + part.front() + "'";
  if (part.back() == '.' || part.back() == '-')
    return std::string("the ") + which + " ends with '" + part.back() + "'";
  if (part.find("..") != std::string::npos) return std::string("the ") + which + " has \"..\"";
  if (part.find("--") != std::string::npos) return std::string("the ") + which + " has \"--\"";
  return "";
}

std::string revision_problem(const std::string& rev) {
  if (rev.empty()) return "the revision after '@' is empty";
  if (rev.size() > 255) return "the revision is over 255 characters";
  for (char c : rev)
    if (!name_char(c) && c != '/') return "the revision has " + describe_char(c);
  if (rev.front() == '/' || rev.front() == '-' || rev.front() == '.')
    return "the revision starts with '" + std::string(1, rev.front()) + "'";
  if (rev.back() == '/') return "the revision ends with '/'";
  if (rev.find("..") != std::string::npos) return "the revision has \"..\"";
  if (rev.find("//") != std::string::npos) return "the revision has \"//\"";
  return "";
}

std::string read_trimmed(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return "";
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  return s.substr(b);
}

// A snapshot file that exists and whose link (if any) reaches a complete blob.
bool complete_file(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);  // follows the link
  return !ec && fs::is_regular_file(st);
}

}  // namespace

bool ModelRef::is_commit() const { return is_hex40(revision); }

std::string ModelRef::text() const { return revision.empty() ? repo_id : repo_id + "@" + revision; }

ModelRef parse_model_ref(const std::string& text, const std::string& what) {
  const auto refuse = [&](const std::string& problem) -> ModelRef {
    throw Error(ExitCode::kConfig,
                what + " = \"" + text + "\" is not a Hugging Face model name: " + problem +
                    ". A name is org/name or org/name@revision (letters, digits, '.', '_', "
                    "'-'), e.g. HuggingFaceTB/SmolLM2-135M@main; a folder is given as a path");
  };
  if (text.empty()) return refuse("it is empty");
  if (text.front() == '/') return refuse("it is an absolute path");
  if (text.front() == '~') return refuse("it starts with '~'");
  if (text.rfind("../", 0) == 0 || text.rfind("./", 0) == 0) return refuse("it is a relative path");
  const size_t at = text.find('@');
  const std::string id = text.substr(0, at);
  ModelRef ref;
  if (at != std::string::npos) {
    ref.revision = text.substr(at + 1);
    if (const std::string p = revision_problem(ref.revision); !p.empty()) return refuse(p);
  }
  if (id.size() > 96) return refuse("the name is over 96 characters");
  const size_t slash = id.find('/');
  if (slash == std::string::npos) return refuse("it has no '/' between the organisation and the name");
  if (id.find('/', slash + 1) != std::string::npos) return refuse("it has more than one '/'");
  const std::string org = id.substr(0, slash), name = id.substr(slash + 1);
  if (const std::string p = part_problem(org, "organisation"); !p.empty()) return refuse(p);
  if (const std::string p = part_problem(name, "name"); !p.empty()) return refuse(p);
  if (name.size() >= 4 && name.compare(name.size() - 4, 4, ".git") == 0)
    return refuse("the name ends with .git");
  ref.repo_id = id;
  return ref;
}

bool is_model_ref(const std::string& text) {
  if (text.empty() || text.front() == '.' || text.front() == '/' || text.front() == '~') return false;
  try {
    parse_model_ref(text, "name");
  } catch (const Error&) {
    return false;
  }
  std::error_code ec;
  return !fs::exists(fs::path(text), ec);
}

CacheDir cache_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return {v, "HF_HUB_CACHE"};
  if (std::string v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return {v, "HUGGINGFACE_HUB_CACHE"};
  if (std::string v = env("HF_HOME"); !v.empty()) return {(fs::path(v) / "hub").string(), "HF_HOME"};
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty())
    return {(fs::path(v) / "huggingface" / "hub").string(), "XDG_CACHE_HOME"};
  const std::string home = env("HOME");
  return {(fs::path(home.empty() ? "/" : home) / ".cache" / "huggingface" / "hub").string(), "~/.cache"};
}

std::string repo_folder(const std::string& hub_dir, const std::string& repo_id) {
  std::string folder = "models--" + repo_id;
  const size_t slash = folder.find('/');
  if (slash != std::string::npos) folder.replace(slash, 1, "--");
  return (fs::path(hub_dir) / folder).string();
}

bool wanted_file(const std::string& repo_path, FileSet set) {
  const std::string base = fs::path(repo_path).filename().string();
  const auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return base.size() >= s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".bin") || ends(".pt") || ends(".pth") || ends(".ckpt") || ends(".pkl") || ends(".pickle"))
    return false;
  if (repo_path.find('/') != std::string::npos)
    return false;  // sub-folders (onnx/, original/) are not the model's
  switch (set) {
    case FileSet::kConfigOnly:
      return base == "config.json" || base == "generation_config.json";
    case FileSet::kTokenizer:
      return base == "config.json" || base == "generation_config.json" || base == "tokenizer.json" ||
             base == "tokenizer_config.json" || base == "special_tokens_map.json" || base == "vocab.json" ||
             base == "merges.txt" || base == "added_tokens.json" || base == "chat_template.jinja";
    case FileSet::kAdapter:
      return base == "adapter_config.json" || base == "adapter_model.safetensors" ||
             base == "tokenizer.json" || base == "tokenizer_config.json" || base == "special_tokens_map.json";
    case FileSet::kTraining:
      return base == "config.json" || base == "generation_config.json" || base == "tokenizer.json" ||
             base == "tokenizer_config.json" || base == "special_tokens_map.json" || base == "vocab.json" ||
             base == "merges.txt" || base == "added_tokens.json" || base == "chat_template.jinja" ||
             ends(".safetensors") || base == "model.safetensors.index.json";
  }
  return false;
}

std::optional<Snapshot> find_cached(const ModelRef& ref, FileSet set, const std::string& hub_dir) {
  const fs::path repo = repo_folder(hub_dir, ref.repo_id);
  std::string commit = ref.is_commit() ? ref.revision : read_trimmed(repo / "refs" / ref.rev());
  if (!is_hex40(commit)) return std::nullopt;
  const fs::path snap = repo / "snapshots" / commit;
  switch (set) {
    case FileSet::kAdapter:
      if (!complete_file(snap / "adapter_config.json") || !complete_file(snap / "adapter_model.safetensors"))
        return std::nullopt;
      break;
    case FileSet::kConfigOnly:
      if (!complete_file(snap / "config.json")) return std::nullopt;
      break;
    case FileSet::kTokenizer:
      if (!complete_file(snap / "tokenizer.json") &&
          !(complete_file(snap / "vocab.json") && complete_file(snap / "merges.txt")))
        return std::nullopt;
      break;
    case FileSet::kTraining: {
      if (!complete_file(snap / "config.json")) return std::nullopt;
      if (complete_file(snap / "model.safetensors.index.json")) {
        try {
          std::ifstream in(snap / "model.safetensors.index.json");
          const nlohmann::json index = nlohmann::json::parse(in);
          for (const auto& [tensor, file] : index.at("weight_map").items())
            if (!file.is_string() || !wanted_file(file.get<std::string>(), FileSet::kTraining) ||
                !complete_file(snap / file.get<std::string>()))
              return std::nullopt;
        } catch (const std::exception&) {
          return std::nullopt;
        }
      } else if (!complete_file(snap / "model.safetensors")) {
        return std::nullopt;
      }
      break;
    }
  }
  return Snapshot{snap.string(), commit, ref};
}

DownloadEvent parse_download_event(const std::string& line) {
  DownloadEvent e;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) return e;
  const auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  };
  const auto num = [&](const char* k, double d) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : d;
  };
  const auto count = [&](const char* k) { return static_cast<uint64_t>(std::max(0.0, num(k, 0))); };
  const std::string kind = j["event"].get<std::string>();
  if (kind == "progress") {
    e.kind = DownloadEvent::Kind::kProgress;
    Progress& p = e.progress;
    p.file = str("file");
    p.file_index = static_cast<int>(num("file_index", 0));
    p.file_count = static_cast<int>(num("file_count", 0));
    p.done = count("done");
    p.total = count("total");
    p.rate_bps = num("rate_bps", 0);
    p.eta_s = num("eta_s", -1);
    p.resumed_bytes = count("resumed_bytes");
  } else if (kind == "done") {
    e.kind = DownloadEvent::Kind::kDone;
    e.repo_id = str("repo_id");
    e.commit = str("commit");
    e.folder = str("folder");
    e.downloaded = j.contains("downloaded") && j["downloaded"].is_boolean() && j["downloaded"].get<bool>();
  } else if (kind == "error") {
    e.kind = DownloadEvent::Kind::kError;
    e.code = static_cast<int>(num("code", 0));
    e.message = str("message");
  }
  return e;
}

bool offline_from_environment() {
  std::string v = env("HF_HUB_OFFLINE");
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::optional<Token> find_token() {
  if (std::string v = env("HF_TOKEN"); !v.empty()) return Token{v, "HF_TOKEN"};
  if (std::string v = env("HUGGING_FACE_HUB_TOKEN"); !v.empty()) return Token{v, "HUGGING_FACE_HUB_TOKEN"};
  std::string file = env("HF_TOKEN_PATH");
  if (file.empty()) {
    std::string home = env("HF_HOME");
    if (home.empty()) {
      const std::string xdg = env("XDG_CACHE_HOME");
      home = xdg.empty() ? (fs::path(env("HOME")) / ".cache" / "huggingface").string()
                         : (fs::path(xdg) / "huggingface").string();
    }
    file = (fs::path(home) / "token").string();
  }
  std::string v = read_trimmed(file);
  if (v.empty()) return std::nullopt;
  return Token{v, file};
}

Resolved resolve(const ModelRef& ref, const DownloadOptions& options) {
  const std::string hub_dir = options.hub_dir.empty() ? cache_dir().path : options.hub_dir;
  if (std::optional<Snapshot> s = find_cached(ref, options.set, hub_dir))
    return Resolved{*s, false, ref.text() + ": cached commit " + s->commit.substr(0, 7) + " in " + hub_dir};
  if (offline_from_environment())
    throw Error(ExitCode::kConfig, ref.text() + " is not in the Hugging Face cache (" + hub_dir +
                                       ") and HF_HUB_OFFLINE is set, so it is not downloaded; download it "
                                       "where the Hub is reachable (flotilla models pull " +
                                       ref.text() +
                                       (options.set == FileSet::kAdapter      ? " --files adapter"
                                        : options.set == FileSet::kConfigOnly ? " --files config"
                                        : options.set == FileSet::kTokenizer  ? " --files tokenizer"
                                                                              : "") +
                                       ") or unset HF_HUB_OFFLINE");
  DownloadOptions o = options;
  o.hub_dir = hub_dir;
  Snapshot s = download(ref, o);
  return Resolved{s, true, ref.text() + ": downloaded commit " + s.commit.substr(0, 7) + " into " + hub_dir};
}

namespace {

// Three significant digits of v (>= 0): "49.2", "112", "1.52".
std::string sig3(double v) {
  char b[32];
  if (v == 0) return "0";
  std::snprintf(b, sizeof b, v >= 99.95 ? "%.0f" : v >= 9.995 ? "%.1f" : "%.2f", v);
  return b;
}

struct Unit {
  double size;
  const char* name;
};
Unit unit_for(double n) {
  if (n >= 999.5e6) return {1e9, "GB"};
  if (n >= 999.5e3) return {1e6, "MB"};
  if (n >= 999.5) return {1e3, "kB"};
  return {1, "B"};
}

std::string duration_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  if (t < 60) return std::to_string(t) + " s";
  if (t < 3600) return std::to_string(t / 60) + " min " + std::to_string(t % 60) + " s";
  return std::to_string(t / 3600) + " h " + std::to_string(t % 3600 / 60) + " min";
}

}  // namespace

std::string bytes_text(uint64_t n) {
  const Unit u = unit_for(static_cast<double>(n));
  return u.size == 1 ? std::to_string(n) + " B" : sig3(static_cast<double>(n) / u.size) + " " + u.name;
}

std::string progress_text(const Progress& p) {
  const Unit u = unit_for(static_cast<double>(p.total));
  std::string s = p.file + " (" + std::to_string(p.file_index) + "/" + std::to_string(p.file_count) + "): ";
  s += (u.size == 1 ? std::to_string(p.done) : sig3(static_cast<double>(p.done) / u.size)) + " of " +
       bytes_text(p.total);
  // Rate and time left once a hundredth of the bytes moved: before that the rate is the small
  // files' and the requests' latency, and the time left a guess ("10 h left" for a 60 MB model).
  if (p.rate_bps > 0 && p.done * 100 >= p.total) {
    s += ", " + bytes_text(static_cast<uint64_t>(p.rate_bps)) + "/s";
    if (p.eta_s >= 0) s += ", " + duration_text(p.eta_s) + " left";
  }
  if (p.resumed_bytes > 0) s += ", resumed from " + bytes_text(p.resumed_bytes);
  return s;
}

ProgressFn stderr_progress(const std::string& prefix) {
  return [prefix, index = 0, last = std::chrono::steady_clock::time_point()](const Progress& p) mutable {
    const auto now = std::chrono::steady_clock::now();
    if (p.file_index == index && now - last < std::chrono::seconds(1)) return true;
    index = p.file_index;
    last = now;
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), progress_text(p).c_str());
    return true;
  };
}

std::string local_folder(const std::string& path_or_ref, FileSet set) {
  if (!is_model_ref(path_or_ref)) return path_or_ref;
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::string> memo;
  const std::pair<std::string, int> key{path_or_ref, static_cast<int>(set)};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  DownloadOptions o;
  o.set = set;
  o.progress = stderr_progress("downloading " + path_or_ref + ": ");
  const Resolved r = resolve(parse_model_ref(path_or_ref, "model"), o);
  if (r.downloaded) std::fprintf(stderr, "%s\n", r.note.c_str());
  std::lock_guard<std::mutex> lock(mu);
  memo[key] = r.snapshot.folder;
  return r.snapshot.folder;
}

}  // namespace flotilla::interop::hub
