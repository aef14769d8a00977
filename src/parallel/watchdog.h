// The communication watchdog: every blocking wait of MpiComm polls with a deadline, and a wait
// that outlives its timeout throws an error naming this rank, the operation, the peer (or
// the group) it waited for, and the step and microbatch the run was at. A stopped or partitioned
// peer therefore ends the job (main prints the line and calls MPI_Abort) instead of holding its
// nodes until the time limit. The app and the pipeline executor keep CommWatch up to date; it is
// plain data read only when a wait runs out, so the normal path pays nothing measurable.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

namespace dit {

struct CommWatch {
  static constexpr double kDefaultTimeout = 600;  // s; parallel.timeout_s's default
  // Phases known to wait on one slow rank (start-up, the first step, which builds plans and
  // touches all memory, checkpoint saves and loads, sampling) get this many times the timeout.
  static constexpr double kSlowPhaseFactor = 10;
  // Once a stop signal has arrived (stop_signal below), no wait lasts longer than this: a rank
  // still waiting then is waiting on a dead peer (srun and SLURM send SIGTERM to the survivors),
  // and the job must end before SLURM's kill, not reach a step boundary that never comes.
  static constexpr double kStopGrace = 10;

  double timeout_s = kDefaultTimeout;  // 0 = off (wait forever)
  std::string timeout_setting;          // where timeout_s was set, for the message ("": the watchdog's limit)
  double factor = kSlowPhaseFactor;    // multiplier of the current phase (start-up is slow)
  std::string phase = "start-up";      // what the run is doing: "training", "checkpoint save", ...
  std::int64_t step = -1;              // the step being taken (from 1), -1 outside steps
  int microbatch = -1;                 // the microbatch whose message is awaited, or -1
  const char* action = "";             // the pipeline's current action ("forward", "backward")
  const volatile std::sig_atomic_t* stop_signal = nullptr;  // set by a signal handler, or null
  bool stop_grace = true;  // kStopGrace applies (not while saving the checkpoint the signal asked for)

  double limit_s() const { return timeout_s * factor; }
  bool stopping() const { return stop_grace && stop_signal && *stop_signal != 0; }
  // "training at step 7, microbatch 2 (backward)", "checkpoint save at step 8" ...
  std::string where() const;
};

// Sets the phase (and its timeout factor) for a scope, restoring the previous one after.
class WatchPhase {
 public:
  WatchPhase(CommWatch* w, std::string phase, double factor);
  ~WatchPhase();
  WatchPhase(const WatchPhase&) = delete;
  WatchPhase& operator=(const WatchPhase&) = delete;

 private:
  CommWatch* w_;
  std::string phase_;
  double factor_;
};

}  // namespace dit
