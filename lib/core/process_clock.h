// Seconds since the OS started this process, so a start-up breakdown counts exec, dynamic loading
// and the shared libraries' initialisers (libcudart, cuDNN, cuBLAS are loaded before main).
// Trap: Linux records a process's start in clock ticks (/proc/self/stat starttime, 1/_SC_CLK_TCK s,
// 10 ms), so the start is known to within one tick (the estimate takes the tick's middle); every
// later point is read on the steady clock and is exact. Without /proc the clock starts at the
// first static initialiser of this library, and process_start_known() says so.
#pragma once

namespace cnn {

// Seconds from the process start to now.
double process_seconds();
// Seconds from the process start to this library's first static initialiser (what loading and
// the shared libraries' initialisers took); 0 when the OS start time is unknown.
double process_static_init_seconds();
bool process_start_known();
// Resolution of the OS start time (seconds; one clock tick), 0 when unknown.
double process_start_resolution();

}  // namespace cnn
