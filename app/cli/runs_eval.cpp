// `flotilla runs eval RUN --task FILE [--step N] [--kind K] [--name N] [--dev FILE --fewshot N]
// [--limit N] [--stride N] [--regex R] [--max-tokens N] [--batch N] [--json]`: a checkpoint of the
// run scored on a task file by `flotilla-worker eval --json`, the scores printed and stored as the
// run's metrics "task/<task>/<score>" at the checkpoint's step: what the app's Evaluate dialog does.
//
// Decision: the worker runs as a child with its stdout on a pipe (the one JSON line, parsed by
// runs::parse_eval_json, the dialog's parser) and its stderr on ours (its progress shows as it
// comes); the store is written after it succeeded, through runs::store_eval (one transaction), so a
// failed or interrupted evaluation stores nothing.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/terminal.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/quality.h"
#include "runs/sample_text.h"
#include "runs/service.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

// Runs the worker with `args`, its stdout captured into *out, its stderr passed through; returns
// its exit status.
int run_captured(const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> argv{runs::find_worker()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0)
    throw Error(ExitCode::kIo, std::string("cannot make a pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::fflush(stdout);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, c[0], &actions, nullptr, c.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    throw Error(ExitCode::kIo, "cannot start " + argv[0] + ": " + std::strerror(err));
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int whole(ArgReader& args, const std::string& name, int lo, int hi) {
  const std::optional<double> v = args.number(name);
  if (!v) return 0;
  if (*v < lo || *v > hi || *v != static_cast<double>(static_cast<int64_t>(*v)))
    throw UsageError(name + " needs a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(*v);
}

}  // namespace

int runs_eval(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  const std::optional<double> step_arg = args.number("--step");
  runs::EvalRequest request;
  request.task = args.value("--task").value_or("");
  request.kind = args.value("--kind").value_or("");
  request.name = args.value("--name").value_or("");
  request.dev = args.value("--dev").value_or("");
  request.fewshot = whole(args, "--fewshot", 0, 1000);
  request.limit = whole(args, "--limit", 0, 1000000000);
  request.stride = whole(args, "--stride", 0, 1000000000);
  request.regex = args.value("--regex").value_or("");
  request.max_tokens = whole(args, "--max-tokens", 0, 1000000);
  request.batch = whole(args, "--batch", 0, 1000000);
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs eval needs one RUN (a name or an id)");
  if (request.task.empty()) throw UsageError("runs eval needs --task FILE (docs/eval.md)");
  if (!std::filesystem::is_regular_file(request.task))
    throw UsageError("--task: no such file: " + request.task);
  if (request.fewshot > 0 && request.dev.empty())
    throw UsageError("--fewshot needs --dev FILE (the examples)");
  if (!request.dev.empty() && request.fewshot == 0) throw UsageError("--dev needs --fewshot N");
  if (!request.kind.empty() && request.kind != "multiple_choice" && request.kind != "perplexity" &&
      request.kind != "generate")
    throw UsageError("--kind takes multiple_choice, perplexity or generate, not '" + request.kind + "'");
  std::optional<int64_t> step;
  if (step_arg) {
    if (*step_arg < 0 || *step_arg != static_cast<double>(static_cast<int64_t>(*step_arg)))
      throw UsageError("--step needs a step number (flotilla runs checkpoints RUN lists them)");
    step = static_cast<int64_t>(*step_arg);
  }
  request.task = std::filesystem::absolute(request.task).string();
  if (!request.dev.empty()) request.dev = std::filesystem::absolute(request.dev).string();

  const std::string origin = "flotilla runs eval";
  db::Database db = open_store(ctx, origin);
  const db::Run run = db::get_run(db, pos[0]);
  runs::RunService service(service_options(ctx, origin));
  if (step) {
    bool found = false;
    std::string steps;
    for (const auto& c : service.checkpoints(run.id)) {
      found = found || c.step == *step;
      steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
    }
    if (!found)
      throw UsageError("run " + run.name + " has no checkpoint at step " + std::to_string(*step) +
                       (steps.empty() ? std::string(" (it has none)") : " (it has " + steps + ")"));
  }
  request.checkpoint = service.fetch_checkpoint(run.id, step);
  // The run's own tokenizer, as `runs sample` passes it (the worker's guess for a fetched checkpoint
  // could miss it); none found here: the worker looks for one itself.
  try {
    const RunConfig config = parse_config_toml(run.config_toml, "run " + run.name);
    request.tokenizer = runs::run_tokenizer_path(config);
    if (!request.tokenizer.empty() && !std::filesystem::exists(request.tokenizer)) request.tokenizer.clear();
  } catch (const Error&) {  // the demo and older runs keep no config
  }

  std::string out;
  const int code = run_captured(runs::eval_worker_args(request), &out);
  if (code != 0) return code;  // the worker said why on stderr; nothing is stored
  const runs::EvalOutcome outcome = runs::parse_eval_json(out);
  const int64_t at = outcome.step >= 0 ? outcome.step : step.value_or(-1);
  if (at < 0)
    throw Error(ExitCode::kData, "the worker did not say which step checkpoint " + request.checkpoint +
                                     " holds: nothing was stored");
  const std::vector<std::string> names = runs::store_eval(db, run.id, at, outcome);

  if (as_json) {
    nlohmann::json j = nlohmann::json::object();
    j["run"] = run.name;
    j["run_id"] = run.id;
    j["step"] = at;
    j["task"] = outcome.task;
    j["kind"] = outcome.kind;
    j["source"] = outcome.source;
    j["seconds"] = outcome.seconds;
    j["examples_per_s"] = outcome.examples_per_s;
    nlohmann::json scores = nlohmann::json::object();
    for (const auto& [name, value] : outcome.scores) scores[name] = value;
    j["scores"] = scores;
    j["metrics"] = names;
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::printf("run %s, step %lld, task %s (%s): %.1f examples/s\n", run.name.c_str(),
              static_cast<long long>(at), outcome.task.c_str(), outcome.kind.c_str(), outcome.examples_per_s);
  for (const auto& [name, value] : outcome.scores) {
    if (name == "n" || name == "tokens" || name == "bytes")
      std::printf("  %-18s %12.0f\n", name.c_str(), value);
    else
      std::printf("  %-18s %12.4f\n", name.c_str(), value);
  }
  std::string stored;
  for (const auto& n : names) stored += (stored.empty() ? "" : ", ") + n;
  std::printf("stored at step %lld as %s\n", static_cast<long long>(at), stored.c_str());
  return kExitOk;
}

}  // namespace flotilla::cli
