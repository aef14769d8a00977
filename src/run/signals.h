// Stop requests from the cluster. SLURM (and a user) ask a job to stop with SIGUSR1 (sbatch
// --signal, scancel --signal) or SIGTERM (preemption, time limit, scancel, srun passing it on);
// mpirun forwards SIGUSR1 to every rank. The handler only records the signal; the ranks agree on
// it at the next step boundary (one small all-reduce), write a checkpoint, say why in one line and
// exit with kExitPreempted, which launch/dit_mp.sbatch answers by requeueing the job.
#pragma once

#include <csignal>
#include <string>

#include "parallel/comm.h"

namespace dit {

// EX_TEMPFAIL (sysexits.h): stopped on request after a checkpoint; run again with --resume auto.
constexpr int kExitPreempted = 75;

// Installs the handlers for SIGUSR1 and SIGTERM on this process. Until defer_stop_signals(), a stop
// signal ends the process at once with kExitPreempted (nothing to save yet, and a start-up blocked
// in a read must not wait for a step boundary that never comes), world rank 0 printing one line on
// stderr that says so; after it, the handler sets a flag (later signals, e.g. a second one during
// the checkpoint, only count).
void install_stop_handlers();
// From here on a stop signal is only recorded: training answers it at the next step boundary with a
// checkpoint, and a job that is ending (mpirun stops the other ranks once one has exited) ends with
// its own exit code.
void defer_stop_signals();
// The flag the handler sets (for the communication watchdog, which shortens waits once it is set).
const volatile std::sig_atomic_t* stop_signal_flag();
// The first stop signal this process received, 0 if none, and how many it received in all.
int stop_signal();
int stop_signal_count();
// Collective over `world`: the stop signal any rank received (the highest number), 0 if none.
int agree_stop(Comm& world);
// "SIGUSR1" / "SIGTERM" / "signal N".
std::string signal_name(int sig);

}  // namespace dit
