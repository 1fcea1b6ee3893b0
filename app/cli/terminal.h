// The terminal around the runs service (runs/service.h): the one service a command opens, how a
// key's passphrase is asked, how Ctrl-C becomes a stop request, and how a run is watched and
// summed up, the same for a run wherever it executes.
//
// Decision: every run command (`run`, `runs resume|attach|fork|...`) goes through these, so the
// CLI never asks what kind of run it holds: where a run is and what it can do come from the
// service as data or a sentence. The session options are the runs layer's one set
// (runs/ssh_options.h); the CLI adds only what a terminal does: the passphrase is read from the
// controlling terminal with echo off, used once by libssh and never written anywhere
// (docs/reliability.md S10); without a terminal an encrypted key is skipped (ssh-agent still works).
#pragma once

#include <signal.h>

#include <string>

#include "app/cli/cli.h"
#include "runs/service.h"

namespace flotilla::cli {

// How this command reaches stored nodes and clusters: the workspace's known_hosts next to the
// run database, the passphrase asked on the terminal, host-key refusals in the CLI's words.
runs::SshAccess ssh_access(const Context& ctx);

// The service for this command; `origin` ("flotilla run") prefixes the status reasons it records.
runs::ServiceOptions service_options(const Context& ctx, const std::string& origin);

// While alive: SIGINT, SIGTERM and SIGHUP (the terminal closed) only set a flag that the watch
// turns into one stop request; SIGPIPE is ignored (a terminal or pipe that went away must not kill
// the command that is recording the run).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static bool requested();

 private:
  struct sigaction old_[4]{};
};

// "flotilla: TEXT" on stderr.
void note_stderr(const std::string& text);

// Watches `run` until it ends (the caller holds a StopSignals), printing progress unless `quiet`,
// then its summary; returns the worker's exit status (kExitNotFound when its row was deleted
// meanwhile, kExitStore when the store could not keep everything).
int watch_run(const Context& ctx, runs::ActiveRun& run, bool quiet);

}  // namespace flotilla::cli
