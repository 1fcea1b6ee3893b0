// flotilla-worker hub download: models by name from the Hugging Face cache or the Hub
// (engine/interop/hub.h); `hub list` (the cached models) joins it here.
//
// Decision: `hub download` is cache first, like every other reader of a name (resolve()): a model
// already in the cache answers at once, with no request, and "downloaded": false. `--refresh` asks
// the Hub for the revision's newest commit (and fetches what the cache lacks of it). With --json the
// app's wizard reads one JSON object per line (progress at most ~5 a second, then done or error) and
// cancels by killing the process: the partial file stays and the next run resumes it.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/cli/hub_list.h"
#include "engine/core/error.h"
#include "engine/interop/hub.h"

namespace flotilla::cli {

namespace {

namespace hub = flotilla::interop::hub;
using Clock = std::chrono::steady_clock;

void print_hub_help() {
  std::printf(
      "Usage: flotilla-worker hub <subcommand> [options]\n\n"
      "Subcommands:\n"
      "  download  resolve a model name in the Hugging Face cache, downloading what it lacks\n"
      "  list      the models in the cache: commit, architecture, size, parameters, trainable or why not\n\n"
      "Run 'flotilla-worker hub <subcommand> --help' for options. Names, the cache, tokens: "
      "docs/models.md.\n");
}

hub::FileSet parse_files(const std::string& text) {
  if (text == "training") return hub::FileSet::kTraining;
  if (text == "config") return hub::FileSet::kConfigOnly;
  if (text == "adapter") return hub::FileSet::kAdapter;
  if (text == "tokenizer") return hub::FileSet::kTokenizer;
  throw_usage("hub download: --files must be training, config, adapter or tokenizer, not \"" + text + "\"");
}

int hub_download(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker hub download NAME [--files training|config|adapter|tokenizer] [--refresh] "
        "[--json]\n\n"
        "Resolves NAME (org/name or org/name@revision) in the Hugging Face cache (HF_HUB_CACHE, HF_HOME,\n"
        "~/.cache/huggingface/hub) and downloads the files it lacks from the Hub (HF_ENDPOINT for a mirror)\n"
        "into that cache: resumable, each file checked against the Hub's size and hash. Prints the snapshot\n"
        "folder. The token comes from HF_TOKEN or the file `huggingface-cli login` writes; it is never\n"
        "printed or stored. HF_HUB_OFFLINE=1: the cache only.\n\n"
        "  --files SET   training (config, tokenizer, safetensors; default), config (config.json only:\n"
        "                enough to plan a run), adapter (a PEFT adapter), tokenizer (its files alone)\n"
        "  --refresh     ask the Hub for the revision's newest commit even when the cache has one\n"
        "  --json        one JSON object per line on stdout: progress events, then done or error\n\n"
        "Exit codes: 3 bad name, gated/private/missing model or revision, offline and not cached;\n"
        "4 a file's size or hash differs from the Hub's (removed); 6 network or disk failure (the\n"
        "partial file is kept and the next run resumes it).\n");
    return 0;
  }
  const std::string files = args.value_or("--files", "training");
  const bool refresh = args.flag("--refresh");
  const bool json = args.flag("--json");
  const std::vector<std::string> names = args.positionals();
  args.finish("hub download");
  if (names.size() != 1) throw_usage("hub download: give one model name (org/name or org/name@revision)");
  hub::DownloadOptions o;
  o.set = parse_files(files);

  const bool tty = !json && ::isatty(2);
  Clock::time_point last{};
  int last_index = 0;
  bool line_open = false;
  o.progress = [&](const hub::Progress& p) {
    const auto now = Clock::now();
    const bool new_file = p.file_index != last_index;
    const auto gap = json ? std::chrono::milliseconds(200) : std::chrono::milliseconds(tty ? 200 : 1000);
    if (!new_file && now - last < gap) return true;
    last = now;
    last_index = p.file_index;
    if (json) {
      const nlohmann::json j = {
          {"event", "progress"},        {"file", p.file},   {"file_index", p.file_index},
          {"file_count", p.file_count}, {"done", p.done},   {"total", p.total},
          {"rate_bps", p.rate_bps},     {"eta_s", p.eta_s}, {"resumed_bytes", p.resumed_bytes}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    } else if (tty) {
      std::fprintf(stderr, "\r%s\033[K", hub::progress_text(p).c_str());
      line_open = true;
    } else {
      std::fprintf(stderr, "%s\n", hub::progress_text(p).c_str());
    }
    return true;
  };

  try {
    const hub::ModelRef ref = hub::parse_model_ref(names[0], "hub download NAME");
    hub::Resolved r;
    if (refresh && !hub::offline_from_environment()) {
      const std::optional<hub::Snapshot> before = hub::find_cached(ref, o.set, hub::cache_dir().path);
      r.snapshot = hub::download(ref, o);
      r.downloaded = !before || before->commit != r.snapshot.commit;
    } else {
      r = hub::resolve(ref, o);
    }
    if (line_open) std::fprintf(stderr, "\n");
    if (json) {
      const nlohmann::json j = {{"event", "done"},
                                {"repo_id", ref.repo_id},
                                {"commit", r.snapshot.commit},
                                {"folder", r.snapshot.folder},
                                {"downloaded", r.downloaded}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      if (!r.note.empty()) std::fprintf(stderr, "%s\n", r.note.c_str());
      std::printf("%s\n", r.snapshot.folder.c_str());
    }
    return 0;
  } catch (const Error& e) {
    if (line_open) std::fprintf(stderr, "\n");
    if (!json) throw;
    const nlohmann::json j = {
        {"event", "error"}, {"code", static_cast<int>(e.code())}, {"message", e.what()}};
    std::printf("%s\n", j.dump().c_str());
    std::fprintf(stderr, "flotilla-worker hub download: %s: %s\n", exit_code_name(e.code()), e.what());
    return static_cast<int>(e.code());
  }
}

}  // namespace

int cmd_hub(const CommandArgs& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_hub_help();
    return args.empty() ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  const std::string sub = args[0];
  Args rest(CommandArgs(args.begin() + 1, args.end()));
  if (sub == "download") return hub_download(rest);
  if (sub == "list") return hub_list(CommandArgs(args.begin() + 1, args.end()));  // hub_list.cpp
  throw_usage("hub: unknown subcommand '" + sub + "' (see flotilla-worker hub --help)");
}

}  // namespace flotilla::cli
