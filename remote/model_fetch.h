// A model by name made ready on the machine that runs the worker (an SSH node, a Slurm login node):
// the deployed worker's own `hub download NAME --files SET --json` runs there, in that machine's
// environment, so it resolves the name in that machine's Hugging Face cache (its HF_HOME /
// HF_HUB_CACHE) and downloads there what the cache lacks, with that machine's token (HF_TOKEN or its
// token file) and its HF_HUB_OFFLINE / HF_ENDPOINT: nothing of the app's environment travels.
//
// Decision: the download runs detached in the run's folder (setsid nohup, its JSON lines in
// <run dir>/model-fetch-<tag>.jsonl, its exit status in model-fetch-<tag>.exit), and the app polls
// that file by byte offset, one SSH round trip per poll that reads the state and the new lines
// together. A blocking exec would show nothing for minutes (and die with the connection); this way
// the user sees the node's bytes, rate and time left as they move, a dropped connection only delays
// the next poll, and an interrupted download is resumed by the next try (the worker keeps
// <blob>.incomplete). The state is read before the lines, so the lines read after "exited" are all
// of them. Blocking: call from a worker thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/interop/hub.h"
#include "remote/session.h"

namespace flotilla::remote {

// One `hub download --json` line (the worker's protocol: engine/interop/hub.h).
using ModelFetchEvent = interop::hub::DownloadEvent;

struct ModelFetchSpec {
  std::string run_id;  // validate_run_id(); the fetch runs in ~/.flotilla/runs/<run_id>
  std::string worker;  // the deployed worker (absolute)
  std::string name;    // "org/name@<commit>" (checked by the caller: hub::parse_model_ref)
  std::string files;   // "training" | "config" | "adapter"
  std::string tag;     // names its files: model-fetch-<tag>.*; letters, digits, '-'
};

// Starts the fetch detached (a previous fetch's files of that tag are removed first). Throws
// Error(kUsage) for a bad field, Error(kComm) when it cannot be started.
void start_model_fetch(Session& session, const ModelFetchSpec& spec);

struct ModelFetchPoll {
  bool finished = false;  // the fetch ended (exit_code set) or is gone (lost)
  bool lost = false;      // no exit status and no process: killed, or the machine rebooted
  int exit_code = -1;
  std::vector<ModelFetchEvent> events;  // the complete lines since `offset`
  uint64_t offset = 0;                  // where the next poll starts
  std::string stderr_tail;              // when finished: the last 2000 bytes of its stderr
};
// The fetch's state and its new lines from byte `offset`, in one round trip.
ModelFetchPoll poll_model_fetch(Session& session, const ModelFetchSpec& spec, uint64_t offset);

// SIGTERM to the fetch's process group (its own session: setsid); the worker's partial file stays and
// the next fetch resumes it. A no-op when it has ended.
void stop_model_fetch(Session& session, const ModelFetchSpec& spec);

}  // namespace flotilla::remote
