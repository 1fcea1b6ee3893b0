// Stop requests from signals: SIGTERM/SIGINT/SIGHUP set a flag that the trainer polls at step
// boundaries (never acting inside the handler), so a preemption notice, or the terminal that
// started the worker closing, becomes a clean checkpoint-and-exit. The grace-period policy lives
// in the trainer.
#pragma once

namespace flotilla {

// SIGTERM, SIGINT, SIGHUP (unless ignored on entry, as under nohup) -> stop requested; SIGUSR1 ->
// checkpoint now.
void install_stop_signal_handlers();
bool stop_requested();
int stop_signal();               // the signal that requested the stop (0 if none)
// SIGUSR1s received so far. A count, not a flag: a request forwarded to every rank (by launch, or
// by Slurm) reaches them at different steps, and the group honours it once (Loop::exchange).
int checkpoint_request_count();
void reset_stop_request();       // for tests

}  // namespace flotilla
