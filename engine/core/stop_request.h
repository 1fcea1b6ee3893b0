// Why a worker was asked to stop, written by whoever asked, before its SIGTERM: a user's Stop, a
// reached budget or time limit, a kill. The worker words its end from it (the summary's `exit` and
// `stop_reason`, the checkpoint's reason, its last line); with no such file a SIGTERM came from the
// system (a spot notice, a scheduler, a closed terminal): a preemption.
//
// Decision: a file in the run folder, not a signal's payload: launch forwards a plain SIGTERM to
// every rank, and every rank and launch read the same folder. A file older than the worker's own
// start is a leftover of an earlier start and is ignored (the runs layer also removes it before it
// starts a worker).
#pragma once

#include <optional>
#include <string>

namespace flotilla {

inline constexpr char kStopRequestFile[] = "stop.request";

struct StopRequest {
  std::string cause;  // "stop" (a user's Stop), "budget" (a cap or time limit), "kill"
  std::string note;   // the words shown ("on request", "budget reached: $0.1512 of $0.15")
  std::string by;     // who asked ("flotilla app", "flotilla run")
};

// Writes <run_dir>/stop.request (a temporary file, then a rename). Returns false when it cannot.
bool write_stop_request(const std::string& run_dir, const StopRequest& request);
// The request in <run_dir>/stop.request, if there is one written at or after `not_before` (Unix
// seconds; 0: any).
std::optional<StopRequest> read_stop_request(const std::string& run_dir, double not_before = 0);
void remove_stop_request(const std::string& run_dir);

// The checkpoint reason a stop is saved under: "stop", "budget", or "preempted" (no request).
std::string stop_checkpoint_reason(const std::optional<StopRequest>& request);
// The words for a checkpoint reason as stored ("periodic", "request", "final", "stop", "budget",
// "preempted"; "preempt", which stood for all three stops before issue 34; anything else as it
// is): "stopped on request", "budget reached", "preempted by the system", "checkpoint now", ...
std::string checkpoint_reason_words(const std::string& reason);

}  // namespace flotilla
