// Internal to the runs layer's Slurm code (slurm_run.cpp, slurm_resume.cpp): the login-node retry.
#pragma once

#include <string>

#include "remote/session.h"
#include "runs/watch.h"

namespace flotilla::runs::detail {

// Runs `fn` on the login session; on a dropped link reconnects with backoff and tries again.
template <typename F>
auto on_login(remote::Session& s, const Note& note, F&& fn) -> decltype(fn(s)) {
  for (int attempt = 0;; ++attempt) {
    try {
      return fn(s);
    } catch (const remote::ConnectionLost& e) {
      if (attempt >= 3) throw;
      if (note)
        note(std::string("connection to the login node lost (") + e.what() +
             "); the job goes on; reconnecting...");
      s.reconnect({0.5, 2, 10, 8});
    }
  }
}

}  // namespace flotilla::runs::detail
