// Signal flag (the one process-wide state a signal handler needs).
#include "train/signals.h"

#include <csignal>

namespace cnn {

static volatile std::sig_atomic_t g_stop_signal = 0;

static void on_signal(int sig) {
  if (g_stop_signal == sig) std::signal(sig, SIG_DFL);
  g_stop_signal = sig;
}

void install_stop_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

void uninstall_stop_handlers() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

int stop_requested() { return g_stop_signal; }
void request_stop(int signal) { g_stop_signal = signal; }
void clear_stop_request() { g_stop_signal = 0; }

}  // namespace cnn
