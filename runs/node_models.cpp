// Models by name on the machines that run a remote run's workers (see node_models.h).
#include "runs/node_models.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "engine/core/error.h"
#include "engine/interop/hub.h"
#include "engine/interop/model_source.h"
#include "remote/model_fetch.h"

namespace flotilla::runs {
namespace {

namespace hub = interop::hub;
using Clock = std::chrono::steady_clock;

// "org/name@1a2b3c4" for a pinned name: the commit shortened as git shows it.
std::string shown(const std::string& name) {
  const auto at = name.find('@');
  if (at == std::string::npos || name.size() - at - 1 != 40) return name;
  return name.substr(0, at + 8);
}

std::string progress_line(const std::string& model, const std::string& where,
                          const remote::ModelFetchEvent& e) {
  return "downloading " + model + " on " + where + ": " + hub::progress_text(e.progress);
}

struct Job {
  const ModelFetchTarget* target = nullptr;
  remote::ModelFetchSpec spec;
  uint64_t offset = 0;
  bool finished = false;
  std::optional<remote::ModelFetchEvent> progress, done, error;
  Clock::time_point noted{};
  bool noted_once = false;
  remote::ModelFetchPoll last;
};

}  // namespace

std::vector<HubModel> hub_models_of(const RunConfig& config) {
  std::vector<HubModel> out;
  if (!config.model.init_from.empty() && interop::is_hub_name(config.model.init_from))
    out.push_back({"model.init_from", config.model.init_from, "training", "model"});
  if (config.lora.enabled && !config.lora.init_from.empty() && interop::is_hub_name(config.lora.init_from))
    out.push_back({"lora.init_from", config.lora.init_from, "adapter", "adapter"});
  return out;
}

std::vector<std::string> fetch_models(const std::vector<ModelFetchTarget>& targets, const std::string& rid,
                                      const RunConfig& config, const Note& note,
                                      const std::function<bool()>& cancelled, double poll_seconds) {
  std::vector<std::string> lines;
  for (const HubModel& m : hub_models_of(config)) {
    hub::parse_model_ref(m.name, m.key);  // a hostile name goes nowhere (throws kConfig)
    const std::string model = shown(m.name);
    std::vector<Job> jobs(targets.size());
    for (size_t i = 0; i < targets.size(); ++i) {
      Job& j = jobs[i];
      j.target = &targets[i];
      j.spec.run_id = rid;
      j.spec.worker = targets[i].worker;
      j.spec.name = m.name;
      j.spec.files = m.files;
      j.spec.tag = m.tag;
      remote::start_model_fetch(*targets[i].session, j.spec);
    }
    for (bool all = false; !all;) {
      if (cancelled && cancelled()) {
        std::string where;
        for (const Job& j : jobs)
          if (!j.finished) {
            where += (where.empty() ? "" : ", ") + j.target->where;
            try {
              remote::stop_model_fetch(*j.target->session, j.spec);
            } catch (const Error&) {
              // It ends with the machine's own timeouts; the next start resumes it.
            }
          }
        throw Error(ExitCode::kPreempted,
                    "stopped while " + where + " fetched model " + model +
                        " (what was downloaded stays there; the next start resumes it)");
      }
      all = true;
      for (Job& j : jobs) {
        if (j.finished) continue;
        remote::ModelFetchPoll p = remote::poll_model_fetch(*j.target->session, j.spec, j.offset);
        j.offset = p.offset;
        for (const auto& e : p.events) {
          if (e.kind == remote::ModelFetchEvent::Kind::kProgress) j.progress = e;
          if (e.kind == remote::ModelFetchEvent::Kind::kDone) j.done = e;
          if (e.kind == remote::ModelFetchEvent::Kind::kError) j.error = e;
        }
        const auto now = Clock::now();
        if (note && j.progress && !j.done && (!j.noted_once || now - j.noted > std::chrono::seconds(2))) {
          note(progress_line(model, j.target->where, *j.progress));
          j.noted = now;
          j.noted_once = true;
          j.progress.reset();
        }
        j.finished = p.finished;
        if (p.finished) j.last = std::move(p);
        all = all && j.finished;
      }
      if (!all) std::this_thread::sleep_for(std::chrono::duration<double>(poll_seconds));
    }
    std::optional<Error> failure;
    for (const Job& j : jobs) {
      const std::string& where = j.target->where;
      if (j.done && j.last.exit_code == 0) {
        const std::string line = "model " + model + " on " + where + ": " +
                                 (j.done->downloaded ? "downloaded into " : "found in its cache at ") +
                                 j.done->folder;
        if (note) note(line);
        lines.push_back(line);
        continue;
      }
      ExitCode code = ExitCode::kComm;
      std::string why;
      if (j.error) {
        code = static_cast<ExitCode>(j.error->code > 0 ? j.error->code : 1);
        why = j.error->message;
      } else if (j.last.lost) {
        why =
            "the download there stopped without an exit status (killed, or the machine restarted); starting "
            "the "
            "run again resumes it";
      } else {
        if (j.last.exit_code > 0) code = static_cast<ExitCode>(j.last.exit_code);
        why = "its worker's `hub download` exited " + std::to_string(j.last.exit_code) +
              (j.last.stderr_tail.empty() ? std::string() : ": " + j.last.stderr_tail);
      }
      const std::string message = where + " cannot get model " + model + " (" + m.key + "): " + why;
      if (note) note(message);
      if (!failure) failure.emplace(code, message);
    }
    if (failure) throw *failure;
  }
  return lines;
}

}  // namespace flotilla::runs
