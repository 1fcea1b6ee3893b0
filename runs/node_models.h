// Models by name for runs elsewhere (SSH nodes, a Slurm cluster): the name is resolved on the
// machine that runs the worker, in that machine's own Hugging Face cache, so a model no longer has
// to sit at the same path on every node (docs/models.md, "Node and cluster runs").
//
// Decision: the app needs only the model's shape, so for a run elsewhere it resolves a Hub name with
// hub::FileSet::kConfigOnly (config.json from its cache, else that file alone downloaded) and stores
// the name pinned to the commit it found ("org/name@<40 hex>"), so every node, a resume and a
// replacement node load the same bytes. Before any rank starts, each node's deployed worker runs
// `hub download NAME@COMMIT --json` there (remote/model_fetch.h) in the node's own environment: a
// cached snapshot is used as it is, a missing one is downloaded into that node's cache with that
// node's token, and the node's progress and errors come back into the run's log and events,
// named by node. Fetching before the start (not inside the workers) keeps one slow download from
// timing out the other nodes' rendezvous, and fails the run before it holds any GPU. The app never
// forwards HF_TOKEN or any other variable of its own environment to a node or a job.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "remote/session.h"
#include "runs/watch.h"

namespace flotilla::runs {

// A Hub name a config asks for: "model.init_from" (the training files) or "lora.init_from" (an
// adapter). Paths are not listed.
struct HubModel {
  std::string key;    // "model.init_from"
  std::string name;   // "org/name@<commit>" as the config holds it
  std::string files;  // "training" | "adapter" (`hub download --files`)
  std::string tag;    // "model" | "adapter": names the fetch's files in the run folder
};
std::vector<HubModel> hub_models_of(const RunConfig& config);

// One machine that runs workers, reached over SSH, with its deployed worker.
struct ModelFetchTarget {
  remote::Session* session = nullptr;
  std::string worker;  // absolute path of the deployed flotilla-worker there
  std::string where;   // "node a", "cluster c's login node": starts every line about it
};

// Makes every Hub model of `config` ready on every target (in parallel across targets): progress
// through `note` ("downloading org/name@1a2b3c4 on node a: 120.3 of 270.1 MB ..."), at most one line
// per target every few seconds. Returns one line per target and model for the run's events
// ("model org/name@1a2b3c4 on node a: found in its cache ..."). Throws flotilla::Error with the
// download's own exit code class (kConfig: gated, private, missing, offline and not cached; kData:
// a damaged file; kIo: the network) and a message naming the machine and the model, e.g. "node a
// cannot get model org/name@1a2b3c4: ...". Nothing happens (no SSH call) for a config without
// Hub names. `cancelled` (may be empty) is polled between polls: true stops every unfinished fetch
// (the partial file stays there: the next fetch resumes it) and throws Error(kPreempted). Blocking.
std::vector<std::string> fetch_models(const std::vector<ModelFetchTarget>& targets, const std::string& rid,
                                      const RunConfig& config, const Note& note,
                                      const std::function<bool()>& cancelled = {}, double poll_seconds = 0.3);

}  // namespace flotilla::runs
