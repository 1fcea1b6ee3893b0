// Async-signal-safe stop flags (sig_atomic_t written in the handler, read by the trainer).
#include "engine/train/signals.h"

#include <csignal>

namespace flotilla {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_checkpoint_requests = 0;  // SIGUSR1s received, counted

void on_stop(int sig) { g_stop_signal = sig; }
void on_checkpoint(int) { g_checkpoint_requests = g_checkpoint_requests + 1; }
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A hang-up stops the run too, unless it was ignored on entry (nohup, a detached remote run):
  // then it stays ignored.
  struct sigaction hup {};
  if (sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, nullptr);
  struct sigaction sc {};
  sc.sa_handler = on_checkpoint;
  sigemptyset(&sc.sa_mask);
  sc.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sc, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal; }
int checkpoint_request_count() { return g_checkpoint_requests; }
void reset_stop_request() {
  g_stop_signal = 0;
  g_checkpoint_requests = 0;
}

}  // namespace flotilla
