#!/usr/bin/env bash
# No hang, ever: (1) a rank stopped with SIGSTOP (a stuck or cut-off peer) is caught by the
# watchdog: the ranks waiting on it abort about parallel.timeout_s (2 s here) later with a message naming
# the operation, the peer or its group, the step and the microbatch, and every rank is gone soon
# after; (2) a rank killed with SIGKILL takes the whole job down in well under 30 s, and mpirun
# names the rank. Prints both measured times.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --tp 2 --pp 2 --steps 100000)

now() { date +%s.%N; }
rank_pid() {  # rank_pid MPIRUN_PID RANK: the pid of that world rank
  local p
  for p in $(pgrep -P "$1" -f dit_mp); do
    # (a here-string, not a pipe: under pipefail, grep -q leaving early would fail the pipe)
    grep -qx "OMPI_COMM_WORLD_RANK=$2" <<< "$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null)" && { echo "$p"; return; }
  done
}
alive() {  # alive PID...: prints the pids that still run (zombies count as gone)
  local p
  for p in "$@"; do
    [[ -r /proc/$p/stat ]] && [[ $(awk '{print $3}' "/proc/$p/stat") != Z ]] && echo "$p"
  done
  return 0
}
# start NAME [ARGS]: runs the job in the background until it has logged 5 steps.
start() {
  local name=$1
  shift
  $MPIRUN -n 8 "$DIT_MP" --run-dir "$SCRATCH/$name" "${R[@]}" "$@" > "$SCRATCH/$name.log" 2>&1 &
  JOB=$!
  for _ in $(seq 600); do
    [[ -f "$SCRATCH/$name/metrics.jsonl" ]] && (($(wc -l < "$SCRATCH/$name/metrics.jsonl") >= 5)) && break
    sleep 0.05
  done
  RANKS=$(pgrep -P "$JOB" -f dit_mp | tr '\n' ' ')
  [[ -n $RANKS ]] || { cat "$SCRATCH/$name.log"; fail "$name: the job did not start"; }
}
# ends NAME LIMIT_S T0: waits (up to LIMIT_S) for mpirun, then for every rank, to be gone; prints
# the seconds since T0.
ends() {
  local rc=0
  for _ in $(seq $((${2} * 20))); do
    kill -0 "$JOB" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$JOB" 2>/dev/null; then
    kill -9 $RANKS "$JOB" 2>/dev/null
    cat "$SCRATCH/$1.log" | tail -20
    fail "$1: the job still ran ${2} s later"
  fi
  wait "$JOB" || rc=$?
  [[ $rc != 0 ]] || fail "$1: the job exited 0"
  local left
  for _ in $(seq 100); do  # a rank SIGKILLed by mpirun's teardown may take a moment to exit
    left=$(alive $RANKS)
    [[ -z $left ]] && break
    sleep 0.05
  done
  [[ -z $left ]] || fail "$1: ranks $left outlived mpirun by 5 s"
  echo "$(now) - $3" | bc
}

# (1) SIGSTOP of rank 5 with a 2 s timeout.
start stopped --set parallel.timeout_s=2
victim=$(rank_pid "$JOB" 5)
t0=$(now)
kill -STOP "$victim"
took=$(ends stopped 30 "$t0")
kill -CONT "$victim" 2>/dev/null || true
grep -q "communication timeout: waited [0-9.]* s (parallel.timeout_s = 2)" "$SCRATCH/stopped.log" ||
  { cat "$SCRATCH/stopped.log"; fail "stopped: no watchdog message"; }
timeouts=$(grep "communication timeout" "$SCRATCH/stopped.log")
grep -Eq "world rank 5 |world ranks ([0-9, ]*, )?5[,)]" <<<"$timeouts" ||
  { grep "communication timeout" "$SCRATCH/stopped.log"; fail "stopped: no message names rank 5 or its group"; }
grep -q "during training at step [0-9]*" <<<"$timeouts" ||
  fail "stopped: the message names no step"
# One failure, one line: the lowest waiting rank reports it, the others leave it to that rank.
n=$(grep -c "communication timeout" "$SCRATCH/stopped.log")
[[ $n -eq 1 ]] || { grep "communication timeout" "$SCRATCH/stopped.log"; fail "stopped: $n ranks printed the failure, not one"; }
echo "watchdog: rank 5 stopped -> every rank gone in $took s (timeout 2 s); first message:"
grep -m1 "communication timeout" "$SCRATCH/stopped.log"
python3 -c "import sys; t=float(sys.argv[1]); assert 1 <= t < 15, t" "$took" || fail "stopped: took $took s"

# (2) SIGKILL of rank 3 (default timeout: the watchdog is not what ends this).
start killed
victim=$(rank_pid "$JOB" 3)
t0=$(now)
kill -9 "$victim"
took=$(ends killed 30 "$t0")
grep -q "process rank 3 with PID [0-9]* on node .* exited on signal 9" "$SCRATCH/killed.log" ||
  { cat "$SCRATCH/killed.log"; fail "killed: mpirun does not name rank 3"; }
echo "kill -9 of rank 3 -> every rank gone in $took s"
python3 -c "import sys; t=float(sys.argv[1]); assert t < 30, t" "$took" || fail "killed: took $took s"
echo ok
