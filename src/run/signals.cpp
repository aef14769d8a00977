// The stop-signal flag and its agreement (see signals.h). The handler does nothing but store to
// sig_atomic_t variables: everything else (MPI, I/O) waits for the step boundary.
#include "run/signals.h"

#include <unistd.h>

#include <csignal>

namespace dit {

namespace {
volatile std::sig_atomic_t g_first_signal = 0;
volatile std::sig_atomic_t g_signals = 0;
volatile std::sig_atomic_t g_deferred = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_deferred == 0) ::_exit(kExitPreempted);  // async-signal-safe; no line (the ranks would all print)
  if (g_first_signal == 0) g_first_signal = sig;
  g_signals = g_signals + 1;
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking I/O (HDF5 writes) continues rather than failing with EINTR
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void defer_stop_signals() { g_deferred = 1; }

const volatile std::sig_atomic_t* stop_signal_flag() { return &g_first_signal; }
int stop_signal() { return g_first_signal; }
int stop_signal_count() { return g_signals; }

int agree_stop(Comm& world) { return static_cast<int>(world.all_reduce_max(double(g_first_signal))); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(sig);
  }
}

}  // namespace dit
