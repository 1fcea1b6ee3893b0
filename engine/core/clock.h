// The project's clock seam: every duration, limit and cost is measured here.
//
// Decision: wall time (system_clock) is for display and for naming days only; it can step by a
// day under NTP, a VM resume or a user's date command. Durations come from monotonic clocks:
// std::chrono::steady_clock within a process, and CLOCK_BOOTTIME (counts suspend, never steps)
// across processes of the same boot, told apart by the kernel's boot id. Where the boot changed,
// a wall difference is all there is: callers clamp it (never negative).
//
// Test seam: FLOTILLA_TEST_WALL_OFFSET_FILE names a file holding a number of seconds added to the
// wall clock (read at every call, so a test steps the wall clock of a running CLI and worker by
// rewriting it); the monotonic clocks are not affected, as with a real step.
#pragma once

#include <string>

namespace flotilla::clk {

// Seconds since the Unix epoch (the wall clock, plus the test offset).
double wall_now();
// Seconds of CLOCK_BOOTTIME: monotonic, comparable between the processes of one boot.
double boot_now();
// This boot's id (/proc/sys/kernel/random/boot_id), "" when unknown (then nothing is compared
// across processes).
const std::string& boot_id();
// A wall time for records that a process writes: the wall clock when the process first asked,
// plus the steady time since. Two such times of one process differ by the true duration even if
// the wall clock stepped in between (a step shows only in a later process's times).
double process_wall_now();

}  // namespace flotilla::clk
