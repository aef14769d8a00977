// The stop-signal flag and its agreement (see signals.h). The handler does nothing but store to
// sig_atomic_t variables: everything else (MPI, I/O) waits for the step boundary.
#include "run/signals.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace dit {

namespace {
volatile std::sig_atomic_t g_first_signal = 0;
volatile std::sig_atomic_t g_signals = 0;
volatile std::sig_atomic_t g_deferred = 0;

// The line a stop during start-up prints, one per signal, made before any signal can come (the
// handler may only write(2) it). Empty on ranks other than 0: one line per job, not one per rank.
constexpr int kStartupLineBytes = 256;
char g_startup_line[2][kStartupLineBytes];
int g_startup_len[2] = {0, 0};

// The world rank the launcher gives this process before MPI starts (0 when run alone).
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return 0;
}

void make_startup_lines() {
  if (launcher_rank() != 0) return;
  const int sigs[2] = {SIGTERM, SIGUSR1};
  for (int i = 0; i < 2; ++i) {
    const int n = std::snprintf(g_startup_line[i], kStartupLineBytes,
                                "dit_mp: stopped by %s during start-up, before its first step: nothing was saved "
                                "(no checkpoint yet); exit code %d\n",
                                signal_name(sigs[i]).c_str(), kExitPreempted);
    g_startup_len[i] = n > 0 && n < kStartupLineBytes ? n : 0;
  }
}

extern "C" void on_stop_signal(int sig) {
  if (g_deferred == 0) {  // async-signal-safe: write(2) of a line made beforehand, then _exit
    const int i = sig == SIGTERM ? 0 : 1;
    if (g_startup_len[i] > 0) {
      const ssize_t ignored = ::write(2, g_startup_line[i], std::size_t(g_startup_len[i]));
      (void)ignored;
    }
    ::_exit(kExitPreempted);
  }
  if (g_first_signal == 0) g_first_signal = sig;
  g_signals = g_signals + 1;
}
}  // namespace

void install_stop_handlers() {
  make_startup_lines();
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
