#!/usr/bin/env bash
# Preemption loses nothing: a job signalled as a cluster signals it (SIGUSR1 to mpirun, which
# forwards it; SIGTERM to every rank, as srun and slurmstepd do) agrees at the next step boundary,
# saves that step, says why in one line and exits 75. A flood of further signals during the save
# changes nothing. Each stopped run, resumed with --resume auto, ends with losses bit-identical to
# an uninterrupted run at the same layout, every step exactly once in metrics.jsonl (0 steps lost).
source "$(dirname "$0")/common.sh"
prepare_fashion_test
STEPS=60
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --tp 2 --pp 2 --steps $STEPS --checkpoint-every 25)
$MPIRUN -n 8 "$DIT_MP" --run-dir "$SCRATCH/full" "${R[@]}" > "$SCRATCH/full.log" 2>&1 ||
  { cat "$SCRATCH/full.log"; fail "uninterrupted run failed"; }

rank_pids() {  # the dit_mp ranks started by mpirun $1
  pgrep -P "$1" -f dit_mp || true
}
# interrupt NAME HOW: starts a run, waits for step 8, signals it, checks the stop.
interrupt() {
  local name=$1 how=$2 dir="$SCRATCH/$1"
  $MPIRUN -n 8 "$DIT_MP" --run-dir "$dir" "${R[@]}" > "$dir.log" 2>&1 &
  local mpirun_pid=$!
  for _ in $(seq 600); do
    [[ -f "$dir/metrics.jsonl" ]] && (($(wc -l < "$dir/metrics.jsonl") >= 8)) && break
    sleep 0.05
  done
  case $how in
    usr1_mpirun) kill -USR1 "$mpirun_pid" ;;
    term_ranks) kill -TERM $(rank_pids "$mpirun_pid") ;;
    usr1_flood)  # one signal, then one every 5 ms to every rank until the job is gone
      kill -USR1 "$mpirun_pid"
      while kill -0 "$mpirun_pid" 2>/dev/null; do
        kill -USR1 $(rank_pids "$mpirun_pid") 2>/dev/null || true
        sleep 0.005
      done ;;
  esac
  local rc=0
  wait "$mpirun_pid" || rc=$?
  [[ $rc == 75 ]] || { cat "$dir.log"; fail "$name: exit code $rc, expected 75 (stopped on request)"; }
  local line
  line=$(grep "stopping after step" "$dir.log") || fail "$name: no line saying why it stopped"
  [[ $(grep -c "stopping after step" "$dir.log") == 1 ]] || fail "$name: more than one stop line"
  local step
  step=$(sed -E 's/.*stopping after step ([0-9]+) of.*/\1/' <<< "$line")
  ((step < STEPS)) || fail "$name: the run finished before the signal (step $step)"
  [[ $(cat "$dir/ckpt/latest") == $(printf 'step_%08d' "$step") ]] ||
    fail "$name: stopped after step $step but latest is $(cat "$dir/ckpt/latest")"
  [[ $(tail -1 "$dir/metrics.jsonl" | sed -E 's/.*"step": ([0-9]+),.*/\1/') == "$step" ]] ||
    fail "$name: metrics go past the checkpoint of step $step (steps would be lost)"
  [[ ! -e "$dir.lock" ]] || fail "$name: the run lock was left behind"
  "$DIT_MP" inspect "$dir/ckpt" > "$dir.inspect" || fail "$name: the checkpoint does not verify"
  echo "$name: $line"
  $MPIRUN -n 8 "$DIT_MP" --run-dir "$dir" --resume auto "${R[@]}" > "$dir.resume.log" 2>&1 ||
    { cat "$dir.resume.log"; fail "$name: resume failed"; }
  grep -q "resumed from .*$(printf 'step_%08d' "$step") at step $step" "$dir.resume.log" ||
    fail "$name: did not resume from step $step"
  python3 - "$SCRATCH/full/metrics.jsonl" "$dir/metrics.jsonl" "$name" "$step" <<'PY'
import json, sys
full = [json.loads(l) for l in open(sys.argv[1])]
res = [json.loads(l) for l in open(sys.argv[2])]
steps = [r["step"] for r in res]
assert steps == list(range(1, len(full) + 1)), f"steps not each exactly once: {steps}"
for a, b in zip(full, res):
    assert a["loss"] == b["loss"], (a["step"], a["loss"], b["loss"])
print(f"{sys.argv[3]}: stopped after step {sys.argv[4]}, resumed: all {len(full)} losses bit-identical, 0 steps lost or repeated")
PY
}
interrupt usr1_mpirun usr1_mpirun
interrupt term_ranks term_ranks
interrupt usr1_flood usr1_flood
grep -q "more signal(s) on rank 0 ignored" "$SCRATCH/usr1_flood.log" || fail "usr1_flood: no further signals arrived"
echo ok
