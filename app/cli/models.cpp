// `flotilla models list|show|pull`: the models of this machine's Hugging Face cache, by name
// (docs/models.md).
//
// Decision: these commands never open the run store: the cache is the Hugging Face libraries' own
// folder (engine/interop/hub.h), shared with every tool that uses it, and listing it must work
// with no workspace at all. `list` and `show` read the cache only (no network); `pull` always asks
// the Hub for the revision's current commit (that is what "pull" means: a cached `main` may be
// old) and downloads only the files a run needs, in this process, with a progress line on stderr;
// Ctrl-C stops it and the partial file is resumed by the next pull. With HF_HUB_OFFLINE set, pull
// says what the cache holds instead of failing on the network.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "app/cli/terminal.h"
#include "engine/cli/hub_list.h"
#include "engine/core/error.h"
#include "engine/interop/hub.h"

namespace flotilla::cli {
namespace hub = interop::hub;
namespace fs = std::filesystem;

namespace {

void print_help() {
  std::printf(
      "Usage: flotilla models list [--json] [--search TEXT]\n"
      "       flotilla models show NAME [--json]\n"
      "       flotilla models pull NAME [--files training|config|adapter|tokenizer]\n\n"
      "Models by name (org/name or org/name@revision) in this machine's Hugging Face cache:\n"
      "HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else\n"
      "$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order),\n"
      "shared with transformers and every tool that uses it.\n\n"
      "  list   each cached model: commit, refs, architecture, parameters, size on disk and\n"
      "         whether Flotilla can fine-tune it (the reason when not); --search TEXT keeps the\n"
      "         models whose name, model_type or architecture contains TEXT\n"
      "  show   one model: the cached commit, its files, size, trainable or why not, and the\n"
      "         pinned name to put in a run config\n"
      "  pull   download NAME from the Hub (HF_ENDPOINT for a mirror) into the cache: only the files\n"
      "         a run needs (--files training, the default), the config alone (config), a LoRA\n"
      "         adapter (adapter) or the tokenizer alone (tokenizer); never pickled .bin weights.\n"
      "         Resumes an interrupted download;\n"
      "         the token comes from HF_TOKEN or `huggingface-cli login`'s file.\n\n"
      "Exit status: 0 ok, 2 usage, 3 a bad name or a gated, private or missing model (the message\n"
      "says what to do; also pull offline and not cached), 4 not in the cache (show) or a downloaded\n"
      "file failed its size or hash check (pull; the file is removed), 6 a network or disk failure\n"
      "or Ctrl-C (the partial file is kept: pull again to resume).\n");
}

hub::FileSet file_set(const std::string& text) {
  if (text == "training") return hub::FileSet::kTraining;
  if (text == "config") return hub::FileSet::kConfigOnly;
  if (text == "adapter") return hub::FileSet::kAdapter;
  if (text == "tokenizer") return hub::FileSet::kTokenizer;
  throw UsageError("--files is training, config, adapter or tokenizer, got '" + text + "'");
}

std::string one_name(ArgReader& args, const char* verb) {
  const std::vector<std::string> names = args.positionals();
  if (names.size() != 1)
    throw UsageError(std::string("models ") + verb + " takes one model name (org/name or org/name@revision)");
  return names[0];
}

int list(ArgReader& args) {
  const bool json = args.flag("--json");
  const std::string search = args.value("--search").value_or("");
  if (!args.positionals().empty()) throw UsageError("models list takes no positional arguments");
  const hub::CacheDir dir = hub::cache_dir();
  const auto rows = filter_cached_models(hub::list_cached_models(dir.path), search);
  const std::string text = json ? cached_models_json(rows, dir) : cached_models_table(rows, dir);
  std::fputs(text.c_str(), stdout);
  return kExitOk;
}

// The snapshot's files (links followed): name -> size, or -1 for a link whose blob is missing.
std::vector<std::pair<std::string, long long>> snapshot_files(const std::string& folder) {
  std::vector<std::pair<std::string, long long>> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_directory(e2)) continue;
    const std::string name = it->path().lexically_relative(folder).generic_string();
    const auto size = fs::file_size(it->path(), e2);  // follows the link
    files.emplace_back(name, e2 ? -1 : static_cast<long long>(size));
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The repo's other cached commits, "bc8c8a9 (v1.0)".
std::vector<std::string> other_commits(const std::string& repo_id, const std::string& hub_dir,
                                       const std::string& commit) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path snaps = fs::path(hub::repo_folder(hub_dir, repo_id)) / "snapshots";
  for (fs::directory_iterator it(snaps, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string c = it->path().filename().string();
    if (c == commit || c.size() != 40) continue;
    std::string line = c.substr(0, 7);
    if (const auto d = hub::describe_cached(hub::ModelRef{repo_id, c}, hub_dir); d && !d->refs.empty()) {
      std::string refs;
      for (const std::string& r : d->refs) refs += (refs.empty() ? "" : ", ") + r;
      line += " (" + refs + ")";
    }
    out.push_back(line);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int show(ArgReader& args) {
  const bool as_json = args.flag("--json");
  const std::string name = one_name(args, "show");
  const hub::ModelRef ref = hub::parse_model_ref(name, "models show");
  const hub::CacheDir dir = hub::cache_dir();
  const std::optional<hub::CachedModel> m = hub::describe_cached(ref, dir.path);
  if (!m || m->commit.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "flotilla: %s is not in the cache at %s (from %s)%s%s; `flotilla models pull %s` downloads "
                 "it\n",
                 ref.text().c_str(), dir.path.c_str(), dir.source.c_str(), m ? ": " : "",
                 m ? m->why_not.c_str() : "", ref.text().c_str());
    return kExitNotFound;
  }
  const auto files = snapshot_files(m->folder);
  const std::string pinned = ref.repo_id + "@" + m->commit;
  if (as_json) {
    nlohmann::json j = nlohmann::json::parse(cached_model_json(*m));
    j["cache"] = dir.path;
    j["pinned"] = pinned;
    nlohmann::json fj = nlohmann::json::array();
    for (const auto& [f, size] : files)
      fj.push_back({{"name", f}, {"bytes", size < 0 ? nlohmann::json(nullptr) : nlohmann::json(size)}});
    j["files"] = fj;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::string refs;
  for (const std::string& r : m->refs) refs += (refs.empty() ? "" : ", ") + r;
  std::printf("%s\n", ref.text().c_str());
  std::printf("  cache         %s (from %s)\n", dir.path.c_str(), dir.source.c_str());
  std::printf("  commit        %s%s\n", m->commit.c_str(), refs.empty() ? "" : (" (" + refs + ")").c_str());
  std::printf("  folder        %s\n", m->folder.c_str());
  std::printf("  architecture  %s%s\n", m->architecture.empty() ? "-" : m->architecture.c_str(),
              m->model_type.empty() ? "" : (" (model_type " + m->model_type + ")").c_str());
  std::printf("  parameters    %s\n",
              m->parameters
                  ? (hub_count_text(m->parameters) + " (" + std::to_string(m->parameters) + ")").c_str()
                  : "- (no weights cached)");
  std::printf("  size on disk  %s (every cached revision of the repo)\n",
              hub::bytes_text(m->bytes_on_disk).c_str());
  if (m->trainable)
    std::printf("  trainable     yes: model.init_from = \"%s\" pins this commit\n", pinned.c_str());
  else
    std::printf("  trainable     no: %s\n", m->why_not.c_str());
  std::printf("  files\n");
  size_t w = 0;
  for (const auto& f : files) w = std::max(w, f.first.size());
  for (const auto& [f, size] : files)
    std::printf("    %-*s  %s\n", static_cast<int>(w), f.c_str(),
                size < 0 ? "missing (its blob is not in the cache)"
                         : hub::bytes_text(static_cast<uint64_t>(size)).c_str());
  const auto others = other_commits(ref.repo_id, dir.path, m->commit);
  if (!others.empty()) {
    std::string line;
    for (const std::string& o : others) line += (line.empty() ? "" : ", ") + o;
    std::printf("  also cached   %s\n", line.c_str());
  }
  return kExitOk;
}

// The progress line on stderr: rewritten in place on a terminal, else one line every few seconds.
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(STDERR_FILENO) == 1) {}
  bool update(const hub::Progress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool next_file = p.file_index != last_index_;
    if (!next_file && now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(2)))
      return !StopSignals::requested();
    last_ = now;
    last_index_ = p.file_index;
    const std::string line = hub::progress_text(p);
    if (tty_)
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    shown_ = true;
    return !StopSignals::requested();
  }
  void finish() {
    if (tty_ && shown_) std::fprintf(stderr, "\n");
  }
  bool shown() const { return shown_; }

 private:
  bool tty_;
  bool shown_ = false;
  int last_index_ = -1;
  std::chrono::steady_clock::time_point last_{};
};

int pull(ArgReader& args) {
  const hub::FileSet set = file_set(args.value("--files").value_or("training"));
  const std::string name = one_name(args, "pull");
  const hub::ModelRef ref = hub::parse_model_ref(name, "models pull");
  const hub::CacheDir dir = hub::cache_dir();
  hub::DownloadOptions options;
  options.set = set;
  options.hub_dir = dir.path;
  if (hub::offline_from_environment()) {
    const hub::Resolved r = hub::resolve(ref, options);  // the cache only; says so when it is missing
    std::printf("HF_HUB_OFFLINE is set, so the Hub was not asked: %s\n%s\n", r.note.c_str(),
                r.snapshot.folder.c_str());
    return kExitOk;
  }
  StopSignals stop;
  ProgressLine line;
  options.progress = [&line](const hub::Progress& p) { return line.update(p); };
  hub::Snapshot s;
  try {
    s = hub::download(ref, options);
  } catch (...) {
    line.finish();
    throw;
  }
  line.finish();
  if (!line.shown()) std::printf("nothing to download: the cache already had every file of that commit\n");
  std::printf("%s: commit %s in %s\n", ref.text().c_str(), s.commit.c_str(), dir.path.c_str());
  std::printf("pin it in a run config: model.init_from = \"%s@%s\"\n", ref.repo_id.c_str(), s.commit.c_str());
  std::printf("%s\n", s.folder.c_str());
  return kExitOk;
}

}  // namespace

int cmd_models(const Context& ctx) {
  ArgReader args(ctx.args, "models");
  if (ctx.args.empty() || args.flag("--help")) {
    print_help();
    return ctx.args.empty() ? kExitUsage : kExitOk;
  }
  const std::vector<std::string> all = ctx.args;
  const std::string verb = all[0];
  ArgReader rest(std::vector<std::string>(all.begin() + 1, all.end()), "models " + verb);
  if (verb == "list") return list(rest);
  if (verb == "show") return show(rest);
  if (verb == "pull") return pull(rest);
  throw UsageError("models: unknown subcommand '" + verb + "' (list, show, pull)");
}

}  // namespace flotilla::cli
