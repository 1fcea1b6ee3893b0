// Downloads from the Hugging Face Hub (or a mirror) into the Hugging Face cache (engine/interop/hub.h),
// the way huggingface_hub does, so either tool uses what the other fetched.
//
// Decisions:
// - One model-info request (`?blobs=true`) gives the commit and every file's size and hash (git blob
//   sha1, or sha256 for LFS files), which are also huggingface_hub's blob names (etags). A file whose
//   snapshot link already reaches a blob is therefore never requested again: a second download of a
//   cached model costs one small request. Only when a mirror omits the blob fields is each file HEADed.
// - Redirects are handled here, not by libcurl (hub_http.h): the token goes to URLs made from the
//   endpoint and to relative redirects, never to an absolute Location (the CDN). Every message is
//   scrubbed of the token's value as a last guard.
// - Every file is written as blobs/<etag>.incomplete under an flock of .locks/<repo>/<etag>.lock
//   (the lock huggingface_hub takes), resumed with `Range: bytes=N-`, checked against the stated
//   size and hash, then renamed and linked (relative symlink); refs/<revision> is written last, so a
//   snapshot that a ref names is always complete. A transfer cut after it moved bytes is resumed at
//   once (up to 5 tries); a failure keeps the partial file for the next call.
#ifdef FLOTILLA_HAVE_HUB_DOWNLOADS
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "engine/core/error.h"
#include "engine/interop/hub.h"
#include "engine/interop/hub_http.h"

namespace flotilla::interop::hub {
namespace fs = std::filesystem;
using detail::HttpOptions;
using detail::HttpRequest;
using detail::HttpResponse;

namespace {

using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string endpoint_of(const DownloadOptions& o) {
  std::string e = !o.endpoint.empty() ? o.endpoint : env("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

// The CA file: the option, the variables, else the first system bundle found. The probe matters on a
// node that runs the worker bundle (packaging/MakeBundle.cmake): its libcurl is Debian's, built to
// look for /etc/ssl/certs/ca-certificates.crt, which RHEL-family and SUSE nodes name otherwise.
std::string ca_file_of(const DownloadOptions& o) {
  if (!o.ca_file.empty()) return o.ca_file;
  for (const char* name : {"FLOTILLA_HF_CA_FILE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"})
    if (std::string v = env(name); !v.empty()) return v;
  for (const char* path : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                           "/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem",
                           "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem"}) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return path;
  }
  return "";  // libcurl's built-in default
}

bool all_hex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

// huggingface_hub's _normalize_etag: no weak prefix, no quotes.
std::string normalize_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool safe_etag(const std::string& e) {
  if (e.empty() || e.size() > 128) return false;
  for (char c : e)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

std::string mb(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return b;
}

// sha256 or git blob sha1 of a file, hex.
std::string hash_file(const fs::path& path, bool git_sha1) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("cannot read " + path.string() + " to check it");
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, git_sha1 ? EVP_sha1() : EVP_sha256(), nullptr);
  if (git_sha1) {
    const std::string head = "blob " + std::to_string(fs::file_size(path)) + std::string(1, '\0');
    EVP_DigestUpdate(ctx, head.data(), head.size());
  }
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

// An exclusive flock held for the object's life (huggingface_hub's filelock takes the same).
class FileLock {
 public:
  explicit FileLock(const fs::path& path) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_io("cannot open the lock file " + path.string() + ": " + errno_string(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        ::close(fd_);
        throw_io("cannot lock " + path.string() + ": " + errno_string(err));
      }
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Writes `text` to `path` through a temporary file and a rename (readers see old or new, whole).
void write_atomically(const fs::path& path, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw_io("cannot write " + tmp.string() + ": " + errno_string(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw_io("cannot write " + path.string() + ": " + ec.message());
  }
}

// snapshots/<commit>/<file> -> ../../blobs/<etag> (one more ".." per sub-folder of `file`).
void link_into_snapshot(const fs::path& repo, const std::string& commit, const std::string& file,
                        const std::string& etag) {
  static std::atomic<unsigned> counter{0};
  const fs::path link = repo / "snapshots" / commit / file;
  fs::create_directories(link.parent_path());
  fs::path target = "../..";
  for (char c : file)
    if (c == '/') target /= "..";
  target = target / "blobs" / etag;
  std::error_code ec;
  if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec) == target) return;
  const fs::path tmp = link.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw_io("cannot link " + link.string() + " to " + target.string() + ": " + ec.message());
  }
}

// This machine's name as a file-name part.
std::string host_tag() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  std::string s;
  for (const char* c = h; *c; ++c)
    if (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-') s += *c;
  return s.empty() ? std::string("host") : s.substr(0, 40);
}

// Whether process `pid` may still be writing a partial file it named: it exists and runs one of
// Flotilla's programs. The caller holds the blob's flock, which already excludes every writer on
// this host where flock works; this check is for mounts where it does not. Not kill(pid, 0) alone:
// on a busy machine a killed download's pid is soon reused (by a compiler, or as a thread id, which
// kill() also answers), and the partial file would then never be resumed.
bool may_be_writer(pid_t pid) {
  const std::string exe = "/proc/" + std::to_string(pid) + "/exe";
  char target[4096];
  const ssize_t n = ::readlink(exe.c_str(), target, sizeof target - 1);
  if (n < 0) return errno != ENOENT && errno != ESRCH && !(::kill(pid, 0) != 0 && errno == ESRCH);
  target[n] = '\0';
  return fs::path(target).filename().string().rfind("flotilla", 0) == 0;
}

// Takes over the partial file of an interrupted download of blob `etag` by renaming it to `mine`
// (atomic: of two claimants one wins): <etag>.incomplete (left by a download that failed or was
// cancelled, Flotilla's or huggingface_hub 1.x's), else one of this host's whose process is gone
// (killed mid-download: the app cancels by killing `hub download`).
void claim_partial(const fs::path& blobs, const std::string& etag, const fs::path& mine) {
  std::error_code ec;
  if (fs::exists(mine, ec)) return;
  if (::rename((blobs / (etag + ".incomplete")).c_str(), mine.c_str()) == 0) return;
  const std::string prefix = etag + "." + host_tag() + ".";
  const std::string suffix = ".incomplete";
  fs::path best;
  uintmax_t best_size = 0;
  for (const auto& e : fs::directory_iterator(blobs, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() <= prefix.size() + suffix.size() || n.rfind(prefix, 0) != 0 ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string pid_text = n.substr(prefix.size(), n.size() - suffix.size() - prefix.size());
    char* end = nullptr;
    const long pid = std::strtol(pid_text.c_str(), &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (may_be_writer(static_cast<pid_t>(pid))) continue;
    const uintmax_t size = fs::file_size(e.path(), ec);
    if (!ec && (best.empty() || size > best_size)) {
      best = e.path();
      best_size = size;
    }
  }
  if (!best.empty()) ::rename(best.c_str(), mine.c_str());
}

bool absolute_url(const std::string& url) {
  return url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
}

// The next URL after a redirect to `location`. A relative one stays on the host (the token may
// follow: the Hub answers a renamed repo so); an absolute one (the CDN) never gets the token.
void follow_redirect(std::string& url, const std::string& location, bool& send_token) {
  if (absolute_url(location)) {
    url = location;
    send_token = false;
  } else {
    url = detail::url_origin(url) + (location.front() == '/' ? location : "/" + location);
  }
}

struct RemoteFile {
  std::string name;
  uint64_t size = 0;
  std::string etag;  // the blob's name: sha256 (LFS) or git blob sha1
  bool size_known = false;
};

class Download {
 public:
  Download(const ModelRef& ref, const DownloadOptions& o)
      : ref_(ref),
        o_(o),
        endpoint_(endpoint_of(o)),
        hub_dir_(o.hub_dir.empty() ? cache_dir().path : o.hub_dir),
        repo_(repo_folder(hub_dir_, ref.repo_id)),
        token_(find_token()) {
    http_.ca_file = ca_file_of(o);
    http_.connect_timeout_s = o.connect_timeout_s;
    http_.stall_timeout_s = o.stall_timeout_s;
  }

  Snapshot run() {
    if (offline_from_environment()) {
      if (std::optional<Snapshot> s = find_cached(ref_, o_.set, hub_dir_)) return *s;
      throw_config(ref_.text() + " is not in the Hugging Face cache (" + hub_dir_ +
                   ") and HF_HUB_OFFLINE is set, so it is not downloaded; download it where the Hub is "
                   "reachable or unset HF_HUB_OFFLINE");
    }
    std::vector<RemoteFile> files = list_files();
    if (o_.set == FileSet::kTraining) files = loaded_weights_only(files);
    for (RemoteFile& f : files) complete_file(f);
    // What the cache lacks.
    std::vector<const RemoteFile*> fetch;
    std::vector<const RemoteFile*> link_only;
    for (const RemoteFile& f : files) {
      std::error_code ec;
      const fs::path snap_file = repo_ / "snapshots" / commit_ / f.name;
      if (fs::is_regular_file(fs::status(snap_file, ec))) continue;
      if (blob_complete(f)) {
        link_only.push_back(&f);
      } else {
        fetch.push_back(&f);
        progress_.total += f.size;
      }
    }
    for (const RemoteFile* f : link_only) {
      std::error_code ec;  // a partial file of a blob another tool completed is of no more use
      fs::remove(repo_ / "blobs" / (f->etag + ".incomplete"), ec);
      link_into_snapshot(repo_, commit_, f->name, f->etag);
    }
    progress_.file_count = static_cast<int>(fetch.size());
    for (size_t i = 0; i < fetch.size(); ++i) {
      progress_.file_index = static_cast<int>(i) + 1;
      progress_.file = fetch[i]->name;
      fetch_file(*fetch[i]);
      link_into_snapshot(repo_, commit_, fetch[i]->name, fetch[i]->etag);
    }
    if (!ref_.is_commit()) write_atomically(repo_ / "refs" / ref_.rev(), commit_);
    return Snapshot{(repo_ / "snapshots" / commit_).string(), commit_, ref_};
  }

  std::string scrub(std::string text) const {
    if (!token_ || token_->value.size() < 2) return text;
    for (size_t at; (at = text.find(token_->value)) != std::string::npos;)
      text.replace(at, token_->value.size(), "<token>");
    return text;
  }

 private:
  std::vector<std::string> headers(bool with_token) const {
    std::vector<std::string> h;
    if (with_token && token_) h.push_back("Authorization: Bearer " + token_->value);
    return h;
  }

  std::string file_url(const std::string& name) const {
    return endpoint_ + "/" + ref_.repo_id + "/resolve/" + commit_ + "/" + detail::url_encode(name, true);
  }

  bool blob_complete(const RemoteFile& f) const {
    std::error_code ec;
    const fs::path blob = repo_ / "blobs" / f.etag;
    if (!fs::is_regular_file(blob, ec)) return false;
    return !f.size_known || fs::file_size(blob, ec) == f.size;
  }

  [[noreturn]] void fail_network(const HttpResponse& r, const std::string& what) const {
    std::string m =
        "cannot reach the Hugging Face Hub at " + endpoint_ + " (" + what + ": " + r.curl_error + ")";
    if (std::optional<Snapshot> s = find_cached(ref_, o_.set, hub_dir_))
      m += "; " + ref_.text() + " is in the cache (commit " + s->commit.substr(0, 7) + " in " + hub_dir_ +
           ") and is used from there without the network by runs and `flotilla models`";
    else
      m += "; a model already in the cache (" + hub_dir_ +
           ") is used without the network, this one is not there";
    m += ". Check the connection, or set HF_ENDPOINT to a mirror";
    throw_io(m);
  }

  [[noreturn]] void fail_http(const HttpResponse& r, const std::string& what, bool file_request) const {
    const std::string code = r.header("x-error-code");
    const std::string said = r.header("x-error-message");
    const std::string page = endpoint_ + "/" + ref_.repo_id;
    const std::string with_token = token_ ? " (a token from " + token_->source + " was sent)" : "";
    if (code == "GatedRepo" || (r.status == 403 && code.empty() && file_request)) {
      if (r.status == 403 && token_)
        throw_config(
            ref_.repo_id + " is a gated model and the token from " + token_->source +
            " has no access to it yet: accept its licence on " + page +
            " with that account (access may need the authors' approval), or set HF_TOKEN to a token of "
            "an account that has access");
      throw_config(
          ref_.repo_id + " is a gated model: accept its licence on " + page +
          " (signed in), then set HF_TOKEN to a token of that account (or run `huggingface-cli login`) "
          "and try again");
    }
    if (code == "RepoNotFound" || (!file_request && (r.status == 401 || r.status == 404) && code.empty()))
      throw_config(
          ref_.repo_id + " was not found on " + endpoint_ + with_token +
          ": check the name; a private model needs HF_TOKEN (or `huggingface-cli login`) with access "
          "to it");
    if (code == "RevisionNotFound")
      throw_config(ref_.repo_id + " has no revision \"" + ref_.rev() + "\" on " + endpoint_ +
                   ": check the branch, tag or commit after '@'");
    if (code == "EntryNotFound" || (file_request && r.status == 404))
      throw_config(what + " of " + ref_.repo_id + "@" + commit_.substr(0, 7) + " is listed but " + endpoint_ +
                   " has no such file (HTTP " + std::to_string(r.status) + ")");
    if (r.status == 401 || r.status == 403)
      throw_config(endpoint_ + " refused " + what + " of " + ref_.repo_id + " (HTTP " +
                   std::to_string(r.status) + ")" + with_token +
                   ": a private or gated model needs HF_TOKEN with access to it" +
                   (said.empty() ? "" : " (" + said + ")"));
    if (r.status == 429)
      throw_io(endpoint_ + " is limiting requests (HTTP 429) for " + what + " of " + ref_.repo_id +
               ": try again in a few minutes; signed-in requests (HF_TOKEN) get higher limits");
    throw_io(endpoint_ + " answered HTTP " + std::to_string(r.status) + " for " + what + " of " +
             ref_.repo_id + (said.empty() ? "" : " (" + said + ")") + "; try again later");
  }

  // The safetensors files transformers loads, as it picks them: the shards model.safetensors.index.json
  // names when the repo has an index (fetched first), else model.safetensors when present. Other
  // weight files (Mistral's consolidated.safetensors, a duplicate of the shards) are not fetched.
  // The etag and size of a file the model info did not state (HEAD), and a check that the etag can
  // name a blob file.
  void complete_file(RemoteFile& f) {
    if (f.etag.empty()) head_file(f);
    if (!safe_etag(f.etag))
      throw_io(endpoint_ + " stated an unusable hash \"" + f.etag.substr(0, 80) + "\" for " + f.name);
  }

  std::vector<RemoteFile> loaded_weights_only(std::vector<RemoteFile> files) {
    const auto is_weights = [](const RemoteFile& f) {
      return f.name.size() > 12 && f.name.compare(f.name.size() - 12, 12, ".safetensors") == 0;
    };
    RemoteFile* index = nullptr;
    bool has_single = false;
    for (RemoteFile& f : files) {
      if (f.name == "model.safetensors.index.json") index = &f;
      has_single |= f.name == "model.safetensors";
    }
    std::set<std::string> keep;
    if (index) {
      const fs::path local = repo_ / "snapshots" / commit_ / index->name;
      std::error_code ec;
      if (!fs::is_regular_file(fs::status(local, ec))) {
        complete_file(*index);
        fetch_file(*index);  // no progress line: progress_.file is still empty
        link_into_snapshot(repo_, commit_, index->name, index->etag);
      }
      std::ifstream in(local);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw_data(index->name + " of " + ref_.repo_id + "@" + commit_.substr(0, 7) + " has no weight_map");
      for (const auto& [tensor, shard] : j["weight_map"].items())
        if (shard.is_string()) keep.insert(shard.get<std::string>());
      for (const std::string& shard : keep) {
        bool listed = false;
        for (const RemoteFile& f : files) listed |= f.name == shard;
        if (!listed)
          throw_config(ref_.repo_id + "@" + commit_.substr(0, 7) + ": model.safetensors.index.json names " +
                       shard + ", which the repo does not have");
      }
    } else if (has_single) {
      keep.insert("model.safetensors");
    } else {
      return files;
    }
    std::vector<RemoteFile> out;
    for (const RemoteFile& f : files)
      if (!is_weights(f) || keep.count(f.name)) out.push_back(f);
    return out;
  }

  std::vector<RemoteFile> list_files() {
    std::string url = endpoint_ + "/api/models/" + ref_.repo_id + "/revision/" +
                      detail::url_encode(ref_.rev(), false) + "?blobs=true";
    bool send_token = true;
    HttpResponse r;
    for (int hop = 0; hop < 6; ++hop) {  // a renamed repo answers with a redirect to its new name
      HttpRequest req;
      req.url = url;
      req.headers = headers(send_token);
      req.tick = [this] { return tick(); };
      r = detail::http_send(req, http_);
      if (r.curl_code != 0 || r.status < 300 || r.status >= 400 || r.header("location").empty()) break;
      follow_redirect(url, r.header("location"), send_token);
    }
    if (cancelled_) throw_io("cancelled");
    if (r.curl_code != 0) fail_network(r, "model info");
    if (r.status != 200) fail_http(r, "the model info", false);
    nlohmann::json info = nlohmann::json::parse(r.body, nullptr, false);
    if (info.is_discarded() || !info.is_object() || !info.contains("sha") || !info["sha"].is_string())
      throw_io(endpoint_ + " answered the model info of " + ref_.text() +
               " with something that is not model info");
    commit_ = info["sha"].get<std::string>();
    if (commit_.size() != 40 || !all_hex(commit_))
      throw_io(endpoint_ + " stated \"" + commit_.substr(0, 60) + "\" as the commit of " + ref_.text() +
               ", which is not a commit id");
    std::vector<RemoteFile> files;
    bool has_config = false, has_weights = false, has_pickled = false, has_adapter_config = false;
    bool has_tokenizer_json = false, has_vocab = false, has_merges = false;
    for (const nlohmann::json& s : info.value("siblings", nlohmann::json::array())) {
      if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
      const std::string name = s["rfilename"].get<std::string>();
      const std::string ext = fs::path(name).extension().string();
      if (name.find('/') == std::string::npos && (ext == ".bin" || ext == ".pt" || ext == ".pth"))
        has_pickled = true;
      if (!wanted_file(name, o_.set)) continue;
      RemoteFile f;
      f.name = name;
      if (s.contains("lfs") && s["lfs"].is_object() && s["lfs"].contains("sha256")) {
        f.etag = s["lfs"].value("sha256", "");
        f.size = s["lfs"].value("size", s.value("size", uint64_t{0}));
        f.size_known = true;
      } else if (s.contains("blobId") && s["blobId"].is_string() && s.contains("size")) {
        f.etag = s["blobId"].get<std::string>();
        f.size = s["size"].get<uint64_t>();
        f.size_known = true;
      } else {
        // a mirror that ignores ?blobs=true: HEADed (complete_file) once the files are chosen
      }
      has_config |= name == "config.json";
      has_weights |= ext == ".safetensors";
      has_adapter_config |= name == "adapter_config.json";
      has_tokenizer_json |= name == "tokenizer.json";
      has_vocab |= name == "vocab.json";
      has_merges |= name == "merges.txt";
      files.push_back(f);
    }
    const std::string at = ref_.repo_id + "@" + commit_.substr(0, 7);
    if (o_.set == FileSet::kTokenizer) {
      if (!has_tokenizer_json && !(has_vocab && has_merges))
        throw_config(at + " has no tokenizer files (tokenizer.json, or vocab.json + merges.txt)");
    } else if (o_.set == FileSet::kAdapter) {
      if (!has_adapter_config || !has_weights)
        throw_config(at +
                     " is not a PEFT adapter in safetensors (it lacks adapter_config.json or "
                     "adapter_model.safetensors)");
    } else if (!has_config) {
      throw_config(at + " has no config.json: it is not a Hugging Face transformers model");
    } else if (o_.set == FileSet::kTraining && !has_weights) {
      throw_config(
          at + " has no safetensors weights" +
          std::string(has_pickled ? " (only pickled .bin/.pt files, which Flotilla never loads)" : "") +
          ": pick a model that publishes *.safetensors");
    }
    return files;
  }

  // The size and etag of one file from its HEAD (X-Linked-* for LFS files answered with a redirect).
  void head_file(RemoteFile& f) {
    std::string url = file_url(f.name);
    bool send_token = true;
    HttpResponse r;
    for (int hop = 0; hop < 6; ++hop) {  // relative redirects only: an absolute one is the LFS answer
      HttpRequest req;
      req.method = "HEAD";
      req.url = url;
      req.headers = headers(send_token);
      req.tick = [this] { return tick(); };
      r = detail::http_send(req, http_);
      const std::string loc = r.header("location");
      if (r.curl_code != 0 || r.status < 300 || r.status >= 400 || loc.empty() || absolute_url(loc)) break;
      follow_redirect(url, loc, send_token);
    }
    if (cancelled_) throw_io("cancelled");
    if (r.curl_code != 0) fail_network(r, f.name);
    if (r.status >= 400) fail_http(r, f.name, true);
    f.etag =
        normalize_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag") : r.header("etag"));
    const std::string size =
        !r.header("x-linked-size").empty() ? r.header("x-linked-size") : r.header("content-length");
    if (!size.empty() && (r.status < 300 || !r.header("x-linked-size").empty())) {
      f.size = std::strtoull(size.c_str(), nullptr, 10);
      f.size_known = true;
    }
  }

  // Reports progress at most 5 times a second (always when `force`); false once cancelled.
  bool report(bool force) {
    if (cancelled_) return false;
    const auto now = Clock::now();
    if (samples_.empty() || now - samples_.back().first > std::chrono::milliseconds(50))
      samples_.emplace_back(now, progress_.done);
    while (samples_.size() > 2 && now - samples_[1].first > std::chrono::seconds(3)) samples_.pop_front();
    const double dt = std::chrono::duration<double>(now - samples_.front().first).count();
    if (dt > 0.2 && progress_.done >= samples_.front().second)
      progress_.rate_bps = static_cast<double>(progress_.done - samples_.front().second) / dt;
    if (!o_.progress || progress_.file.empty()) return true;  // nothing to report before the first file
    if (!force && now - last_report_ < std::chrono::milliseconds(200)) return true;
    last_report_ = now;
    progress_.eta_s = progress_.rate_bps > 0
                          ? static_cast<double>(progress_.total - std::min(progress_.done, progress_.total)) /
                                progress_.rate_bps
                          : -1;
    if (!o_.progress(progress_)) cancelled_ = true;
    return !cancelled_;
  }
  bool tick() { return report(false); }

  // blobs/<etag>.incomplete, resumed, checked, renamed to blobs/<etag>.
  // The bytes go to this process's own partial file (<etag>.<host>.<pid>.incomplete), claimed from
  // an interrupted download and handed back as <etag>.incomplete when this one fails: even where
  // flock does not hold across machines (some Lustre/NFS mounts), two writers never append to one
  // file, and a writer never appends to a blob another has already checked and renamed.
  void fetch_file(const RemoteFile& f) {
    const fs::path blob = repo_ / "blobs" / f.etag;
    const std::string folder = repo_.filename().string();
    FileLock lock(fs::path(hub_dir_) / ".locks" / folder / (f.etag + ".lock"));
    const uint64_t base = progress_.done;
    if (blob_complete(f)) {  // another process wrote it while this one waited for the lock
      progress_.done = base + f.size;
      return;
    }
    fs::create_directories(blob.parent_path());
    const fs::path partial =
        blob.string() + "." + host_tag() + "." + std::to_string(::getpid()) + ".incomplete";
    claim_partial(blob.parent_path(), f.etag, partial);
    try {
      fetch_into(f, partial, base);
    } catch (...) {
      std::error_code ec;
      if (fs::exists(partial, ec)) fs::rename(partial, blob.string() + ".incomplete", ec);
      throw;
    }
    check_and_keep(f, partial, blob);
    progress_.done = base + f.size;
    report(true);
  }

  void fetch_into(const RemoteFile& f, const fs::path& partial, uint64_t base) {
    std::error_code ec;
    for (int attempt = 0;; ++attempt) {
      uint64_t have = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
      if (f.size_known && have > f.size) {
        fs::remove(partial, ec);
        have = 0;
      }
      if (attempt == 0) progress_.resumed_bytes = have;
      progress_.done = base + have;
      if (have > 0) samples_.clear();  // kept bytes are no transfer: the rate restarts from here
      report(true);
      if (f.size_known && have == f.size && have > 0) break;  // complete, not yet checked
      FILE* out = std::fopen(partial.c_str(), "ab");
      if (!out) throw_io("cannot write " + partial.string() + ": " + errno_string(errno));
      bool write_failed = false;
      int write_errno = 0;
      bool first = true;
      HttpResponse r;
      std::string url = file_url(f.name);
      bool send_token = true;
      for (int hop = 0; hop < 6; ++hop) {
        HttpRequest req;
        req.url = url;
        req.headers = headers(send_token);
        if (have > 0) req.headers.push_back("Range: bytes=" + std::to_string(have) + "-");
        req.tick = [this] { return tick(); };
        req.sink = [&](const HttpResponse& so_far, const char* data, size_t n) {
          if (first) {
            first = false;
            if (so_far.status == 200 && have > 0) {  // the server ignored the range: start over
              if (::ftruncate(::fileno(out), 0) != 0 || std::fseek(out, 0, SEEK_SET) != 0) return false;
              have = 0;
              progress_.done = base;
            }
          }
          if (std::fwrite(data, 1, n, out) != n) {
            write_failed = true;
            write_errno = errno;
            return false;
          }
          progress_.done += n;
          return report(false);  // false once cancelled: stop at once
        };
        r = detail::http_send(req, http_);
        if (r.status < 300 || r.status >= 400) break;
        const std::string loc = r.header("location");
        if (loc.empty()) throw_io(endpoint_ + " redirected " + f.name + " without a Location");
        follow_redirect(url, loc, send_token);
      }
      if (std::fflush(out) != 0 && !write_failed) {
        write_failed = true;
        write_errno = errno;
      }
      std::fclose(out);
      if (write_failed) throw_io("cannot write " + partial.string() + ": " + errno_string(write_errno));
      if (cancelled_) throw_io("cancelled");
      if (r.status == 416 && attempt == 0) {  // the partial file does not fit what the server has
        fs::remove(partial, ec);
        continue;
      }
      if (r.curl_code != 0 && (r.status == 0 || (r.status >= 200 && r.status < 300))) {
        if (r.sink_bytes > 0 && attempt < 4) continue;  // it moved: resume at once
        std::string m = "downloading " + f.name + " of " + ref_.repo_id + " from " + endpoint_ +
                        " failed after " + mb(fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0) +
                        " of " + mb(f.size) + " (" + r.curl_error +
                        "); the partial file is kept and the next try resumes it";
        if (r.status == 0 && r.sink_bytes == 0 && have == 0) fail_network(r, f.name);
        throw_io(m);
      }
      if (r.status >= 300) fail_http(r, f.name, true);
      break;
    }
  }

  void check_and_keep(const RemoteFile& f, const fs::path& partial, const fs::path& blob) {
    std::error_code ec;
    uint64_t got = fs::file_size(partial, ec);
    if (ec) got = 0;
    const std::string at = f.name + " of " + ref_.repo_id + "@" + commit_.substr(0, 7);
    if (f.size_known && got != f.size) {
      fs::remove(partial, ec);
      throw_data(at + " downloaded as " + std::to_string(got) + " bytes but the Hub states " +
                 std::to_string(f.size) +
                 ": the file is removed; try again (or check the mirror, HF_ENDPOINT)");
    }
    const bool sha256 = f.etag.size() == 64 && all_hex(f.etag);
    const bool sha1 = f.etag.size() == 40 && all_hex(f.etag);
    if (sha256 || sha1) {
      const std::string h = hash_file(partial, sha1);
      if (h != f.etag) {
        fs::remove(partial, ec);
        throw_data(at + ": the downloaded bytes' " + (sha1 ? "git blob sha1" : "sha256") + " is " + h +
                   " but the Hub states " + f.etag +
                   ": the file is removed; try again (or check the mirror, "
                   "HF_ENDPOINT)");
      }
    }
    fs::rename(partial, blob, ec);
    if (ec) throw_io("cannot rename " + partial.string() + " to " + blob.string() + ": " + ec.message());
    ::chmod(blob.c_str(), 0644);
  }

  const ModelRef ref_;
  const DownloadOptions o_;
  const std::string endpoint_;
  const std::string hub_dir_;
  const fs::path repo_;
  const std::optional<Token> token_;
  HttpOptions http_;
  std::string commit_;
  Progress progress_;
  std::deque<std::pair<Clock::time_point, uint64_t>> samples_;
  Clock::time_point last_report_{};
  bool cancelled_ = false;
};

}  // namespace

Snapshot download(const ModelRef& ref, const DownloadOptions& options) {
  Download d(ref, options);
  try {
    return d.run();
  } catch (const Error& e) {
    throw Error(e.code(), d.scrub(e.what()));
  } catch (const fs::filesystem_error& e) {
    throw Error(ExitCode::kIo, d.scrub(std::string("downloading ") + ref.text() + ": " + e.what()));
  }
}

}  // namespace flotilla::interop::hub

#else  // built without libcurl/libcrypto (engine/CMakeLists.txt)

#include "engine/core/error.h"
#include "engine/interop/hub.h"

namespace flotilla::interop::hub {

Snapshot download(const ModelRef& ref, const DownloadOptions&) {
  throw Error(ExitCode::kConfig,
              ref.text() +
                  " is not in the Hugging Face cache and this flotilla-worker was built without "
                  "downloads (libcurl4-openssl-dev and libssl-dev were missing): download it into this "
                  "machine's cache with a build that has them (flotilla-worker hub download) or with "
                  "`huggingface-cli download`, or give a folder");
}

}  // namespace flotilla::interop::hub

#endif  // FLOTILLA_HAVE_HUB_DOWNLOADS
