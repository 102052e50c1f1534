// SIGINT/SIGTERM become a request to stop at the next step boundary (the trainer then writes a
// checkpoint and exits 130/143). A second signal of the same kind restores the default action,
// so pressing Ctrl-C twice still kills a stuck run.
#pragma once

namespace cnn {

void install_stop_handlers();
void uninstall_stop_handlers();
// 0 when no stop was requested, else the signal number.
int stop_requested();
// For tests: pretend a signal arrived.
void request_stop(int signal);
void clear_stop_request();

}  // namespace cnn
