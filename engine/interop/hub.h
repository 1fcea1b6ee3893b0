// Models by name: "org/name" or "org/name@revision" wherever a Hugging Face folder is accepted,
// resolved in the Hugging Face cache (the layout huggingface_hub writes, shared with every tool that
// uses it) and downloaded from the Hub (or a mirror, HF_ENDPOINT) into that same cache when missing.
//
// The cache layout (huggingface_hub's, used as it is, never copied):
//   <hub>/models--<org>--<name>/refs/<revision>          the commit a branch or tag points at
//   <hub>/models--<org>--<name>/snapshots/<commit>/<file> a symlink to ../../blobs/<etag>
//   <hub>/models--<org>--<name>/blobs/<etag>             the file's bytes (<etag>.incomplete while
//                                                         a download is under way: resumed from there)
//   <hub>/.locks/models--<org>--<name>/<etag>.lock        held (flock) while a blob is written
// <hub> is HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order).
//
// Decision: the run config keeps the name (pinned to its commit: "org/name@<40 hex>") and every
// reader of a model folder maps it to the local snapshot through local_folder(), so the name is what
// the store, the checkpoints and the other nodes see, and each machine resolves it in its own cache.
// A cached snapshot is used without asking the Hub (fast, and offline-safe); `flotilla models pull`
// asks the Hub for the newest commit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flotilla::interop::hub {

// A model's name on the Hub.
struct ModelRef {
  std::string repo_id;   // "org/name"
  std::string revision;  // as given; "" means the default branch, "main"
  std::string rev() const { return revision.empty() ? std::string("main") : revision; }
  bool is_commit() const;    // the revision is a full 40-hex commit id
  std::string text() const;  // "org/name" or "org/name@revision"
};

// Parses "org/name" or "org/name@revision" with no file or network access. Throws
// Error(kConfig) that names `what` (a config key, a flag) and the problem for anything else: an
// absolute path, "..", an empty part, more than one '/', characters outside [A-Za-z0-9._-] in the
// name (revision: also '/'), a name over 96 characters.
ModelRef parse_model_ref(const std::string& text, const std::string& what);

// Whether `text` is meant as a Hub name rather than a path: it parses as one and no file or folder
// of that relative path exists here. (A path that exists always wins; "./org/name" is a path.)
bool is_model_ref(const std::string& text);

// The cache folder and the setting that chose it ("HF_HUB_CACHE", "HF_HOME", "~/.cache").
struct CacheDir {
  std::string path;
  std::string source;
};
CacheDir cache_dir();
// <hub>/models--org--name
std::string repo_folder(const std::string& hub_dir, const std::string& repo_id);

// Which of a repo's files a purpose needs.
enum class FileSet {
  kTraining,    // config.json, generation_config.json, tokenizer files, *.safetensors (+ index)
  kConfigOnly,  // config.json (+ generation_config.json): enough to plan a run's shape
  kAdapter,     // a PEFT adapter: adapter_config.json, adapter_model.safetensors
  kTokenizer,   // a tokenizer: tokenizer.json (or vocab.json + merges.txt), its config files, config.json;
                // what `data prepare --tokenizer NAME` needs, without the weights
};
// Whether a repo file is one `set` takes. Pickled weights (.bin, .pt, .pth, .ckpt, .pkl) never are.
bool wanted_file(const std::string& repo_path, FileSet set);

// A snapshot on this machine.
struct Snapshot {
  std::string folder;  // <hub>/models--org--name/snapshots/<commit>
  std::string commit;  // 40 hex
  ModelRef ref;        // what was asked for
};

// Cache only, no network: the snapshot `ref` names when it holds every file `set` needs (for
// kTraining: config.json and every safetensors shard the index lists, each link resolving to a
// complete blob). nullopt when the ref or any needed file is missing.
std::optional<Snapshot> find_cached(const ModelRef& ref, FileSet set, const std::string& hub_dir);

// The models in the cache (one row per repo, its newest complete snapshot), for the wizard and
// `flotilla models list`.
struct CachedModel {
  std::string repo_id;
  std::string commit;
  std::vector<std::string> refs;  // branches and tags pointing at that commit
  std::string folder;             // the snapshot folder
  std::string model_type;         // config.json's model_type ("llama", "qwen2", ...)
  std::string architecture;       // config.json's architectures[0]
  bool trainable = false;         // Flotilla can fine-tune it (init_from accepts it)
  std::string why_not;            // when not trainable, in words
  uint64_t bytes_on_disk = 0;     // the repo's blobs
  uint64_t parameters = 0;        // from the safetensors headers (0 when no weights are cached)
  int64_t modified_unix = 0;      // newest blob's time
};
std::vector<CachedModel> list_cached_models(const std::string& hub_dir);
// One repo's row, judged as list_cached_models judges it: with no revision the same row as the
// listing's; with one, the snapshot that refs/<revision> (or the commit) names, complete or not.
// nullopt when the repo, or that revision's snapshot, is not in the cache. (`flotilla models show`.)
std::optional<CachedModel> describe_cached(const ModelRef& ref, const std::string& hub_dir);

// Download progress, reported at most a few times a second.
struct Progress {
  std::string file;    // the repo file being fetched
  int file_index = 0;  // 1-based
  int file_count = 0;
  uint64_t done = 0;           // bytes of all files so far (a resumed file's kept bytes included)
  uint64_t total = 0;          // bytes of all files to fetch
  double rate_bps = 0;         // bytes per second over the last few seconds
  double eta_s = -1;           // seconds left at that rate; < 0 when unknown
  uint64_t resumed_bytes = 0;  // bytes this file kept from an interrupted download
};
using ProgressFn = std::function<bool(const Progress&)>;  // return false to cancel

// The one wording of a download's progress, for the CLIs, the app and the run log:
// "model.safetensors (2/5): 120 of 270 MB, 14.2 MB/s, 11 s left" (three significant digits; the
// done figure in the total's unit; ", resumed from 16.4 kB" when this file kept an earlier part).
std::string progress_text(const Progress& p);
// "1.52 GB", "49.2 kB", "112 kB": three significant digits in the unit that fits.
std::string bytes_text(uint64_t n);
// A ProgressFn that prints `prefix` + progress_text on stderr, at most once a second and at each
// new file (what the worker prints while a run's model downloads).
ProgressFn stderr_progress(const std::string& prefix);

struct DownloadOptions {
  FileSet set = FileSet::kTraining;
  std::string endpoint;  // "" = HF_ENDPOINT, else https://huggingface.co
  std::string hub_dir;   // "" = cache_dir().path
  std::string ca_file;   // "" = FLOTILLA_HF_CA_FILE, CURL_CA_BUNDLE, SSL_CERT_FILE, else the system's
  ProgressFn progress;   // may be empty
  double connect_timeout_s = 20;
  double stall_timeout_s = 60;  // a transfer that moves no byte this long fails (and resumes next time)
};

// One line of `flotilla-worker hub download --json` (docs/models.md), read back by the app's wizard
// and by a node run's fetch: one parser for both.
struct DownloadEvent {
  enum class Kind { kProgress, kDone, kError, kOther } kind = Kind::kOther;
  Progress progress;                    // kProgress
  std::string repo_id, commit, folder;  // kDone
  bool downloaded = false;
  int code = 0;  // kError: the exit code and the worker's message
  std::string message;
};
// kOther for anything that is not such an object; never throws.
DownloadEvent parse_download_event(const std::string& line);

// Whether HF_HUB_OFFLINE is set to a true value (1, ON, YES, TRUE).
bool offline_from_environment();

// The Hub token: HF_TOKEN, else the file HF_TOKEN_PATH, else $HF_HOME/token (what `huggingface-cli
// login` writes). `source` names where it came from; the value is never printed or stored.
struct Token {
  std::string value;
  std::string source;
};
std::optional<Token> find_token();

// Asks the Hub for `ref` (its commit and files) and fetches the files of `options.set` that the
// cache lacks, into the cache layout: resumed from <blob>.incomplete with a range request, each
// checked against the size and hash the Hub states (sha256 for LFS files, the git blob sha1 else)
// before it is linked into the snapshot; refs/<revision> updated last. Throws Error: kConfig for a
// gated, private or unknown model or revision (the message says what to do), kData for a file whose
// hash or size differs (the partial file is removed), kIo for a network failure (the partial file is
// kept, so the next try resumes).
Snapshot download(const ModelRef& ref, const DownloadOptions& options);

// Cache first; when `ref` is not cached (or lacks files of options.set): downloads it, unless offline
// (HF_HUB_OFFLINE), then the error says the model is not in the cache and where the cache is.
struct Resolved {
  Snapshot snapshot;
  bool downloaded = false;
  std::string note;  // one line for a log: "Qwen/Qwen2.5-0.5B: cached commit 1a2b3c4 in ~/.cache/..."
};
Resolved resolve(const ModelRef& ref, const DownloadOptions& options);

// The one call the model readers make: `path_or_ref` unchanged when it is not a Hub name (see
// is_model_ref), else its snapshot folder (resolve() with `set`, progress on stderr). Resolutions
// are remembered for the process's life.
std::string local_folder(const std::string& path_or_ref, FileSet set = FileSet::kTraining);

}  // namespace flotilla::interop::hub
