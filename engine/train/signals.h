// Stop requests from signals: SIGTERM/SIGINT set a flag that the trainer polls at step
// boundaries (never acting inside the handler), so a preemption notice becomes a clean
// checkpoint-and-exit. The grace-period policy lives in the trainer.
#pragma once

namespace flotilla {

void install_stop_signal_handlers();  // SIGTERM, SIGINT -> stop requested; SIGUSR1 -> checkpoint now
bool stop_requested();
int stop_signal();               // the signal that requested the stop (0 if none)
bool take_checkpoint_request();  // true once after each SIGUSR1
void reset_stop_request();       // for tests

}  // namespace flotilla
