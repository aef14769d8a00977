#!/usr/bin/env bash
# The run-folder lock: while a run trains, a second run on its folder is refused with one message
# naming the holder, with --overwrite, with --resume auto and with neither, and the first run's
# folder is untouched (every step once in metrics.jsonl); two runs racing for a fresh folder: one
# trains, the other is refused; a stale lock (dead pid on this host) is removed with a note; a lock
# held on another host is respected.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --tp 1 --pp 1)
D="$SCRATCH/run"

$MPIRUN -n 4 "$DIT_MP" --run-dir "$D" "${R[@]}" --steps 100000 > "$SCRATCH/a.log" 2>&1 &
A=$!
for _ in $(seq 600); do
  [[ -f "$D/metrics.jsonl" ]] && (($(wc -l < "$D/metrics.jsonl") >= 3)) && break
  sleep 0.05
done
holder=$(grep '^pid=' "$D.lock" | cut -d= -f2)
[[ -n $holder ]] && grep -qx "host=$(hostname)" "$D.lock" || fail "the lock does not name this host and a pid"
for flags in "--overwrite" "--resume auto" ""; do
  if $MPIRUN -n 4 "$DIT_MP" --run-dir "$D" "${R[@]}" --steps 5 $flags > "$SCRATCH/b.log" 2>&1; then
    fail "a second run ($flags) on a locked folder was allowed"
  fi
  [[ $(grep -c "error" "$SCRATCH/b.log") == 1 ]] || { cat "$SCRATCH/b.log"; fail "not one message ($flags)"; }
  grep -q "run folder $D is in use by another run (host $(hostname), pid $holder, since" "$SCRATCH/b.log" ||
    { cat "$SCRATCH/b.log"; fail "the refusal ($flags) does not name the holder"; }
  kill -0 "$A" || fail "the first run died when a second one ($flags) started"
done
[[ -f "$D/config.toml" ]] || fail "the first run's folder lost config.toml"
kill -USR1 "$A"
rc=0
wait "$A" || rc=$?
[[ $rc == 75 ]] || { cat "$SCRATCH/a.log"; fail "the first run ended with $rc"; }
[[ ! -e "$D.lock" ]] || fail "the lock outlived its run"
python3 - "$D/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == list(range(1, len(steps) + 1)), steps
print(f"first run: steps 1-{len(steps)} each exactly once")
PY
echo "refused while held: --overwrite, --resume auto, plain"

# Two runs racing for one fresh folder.
$MPIRUN -n 2 "$DIT_MP" --run-dir "$SCRATCH/race" "${R[@]}" --steps 40 --overwrite > "$SCRATCH/r1.log" 2>&1 &
P1=$!
$MPIRUN -n 2 "$DIT_MP" --run-dir "$SCRATCH/race" "${R[@]}" --steps 40 --overwrite > "$SCRATCH/r2.log" 2>&1 &
P2=$!
rc1=0 rc2=0
wait $P1 || rc1=$?
wait $P2 || rc2=$?
if [[ $rc1 == 0 ]]; then win=r1 lose=r2 rcl=$rc2; else win=r2 lose=r1 rcl=$rc1; fi
[[ $rcl != 0 ]] || fail "both racing runs trained on one folder"
[[ $rc1 == 0 || $rc2 == 0 ]] || { cat "$SCRATCH/r1.log" "$SCRATCH/r2.log"; fail "neither racing run trained"; }
grep -q "is in use by another run" "$SCRATCH/$lose.log" || { cat "$SCRATCH/$lose.log"; fail "the loser was not refused by the lock"; }
[[ $(wc -l < "$SCRATCH/race/metrics.jsonl") == 40 ]] || fail "the race's winner has a mixed metrics.jsonl"
echo "race: one run trained, the other was refused"

# A stale lock: a pid of this host that no longer runs.
sleep 0 &
dead=$!
wait $dead
printf 'host=%s\npid=%s\nstart_ticks=\njob_id=\nrestart_count=0\nstarted=0\n' "$(hostname)" "$dead" > "$D.lock"
$MPIRUN -n 2 "$DIT_MP" --run-dir "$D" "${R[@]}" --steps 5 --overwrite > "$SCRATCH/stale.log" 2>&1 ||
  { cat "$SCRATCH/stale.log"; fail "a stale lock blocked the run"; }
grep -q "note: removed the stale run lock $D.lock of host $(hostname), pid $dead.*: process $dead no longer runs" \
  "$SCRATCH/stale.log" || { cat "$SCRATCH/stale.log"; fail "no note about the stale lock"; }
# A lock held on another host cannot be checked from here: it is respected.
printf 'host=othernode\npid=1234\nstart_ticks=\njob_id=4321\nrestart_count=0\nstarted=0\n' > "$D.lock"
if $MPIRUN -n 2 "$DIT_MP" --run-dir "$D" "${R[@]}" --steps 5 --resume auto > "$SCRATCH/other.log" 2>&1; then
  fail "a lock held on another host was ignored"
fi
grep -q "in use by another run (host othernode, pid 1234, SLURM job 4321" "$SCRATCH/other.log" ||
  { cat "$SCRATCH/other.log"; fail "the refusal does not name the other host's holder"; }
# ... unless it is an earlier incarnation of this same SLURM job (requeued).
SLURM_JOB_ID=4321 SLURM_RESTART_COUNT=1 $MPIRUN -n 2 -x SLURM_JOB_ID -x SLURM_RESTART_COUNT "$DIT_MP" --run-dir "$D" \
  "${R[@]}" --steps 5 --resume auto > "$SCRATCH/requeued.log" 2>&1 || { cat "$SCRATCH/requeued.log"; fail "requeued job refused"; }
grep -q "an earlier run of this SLURM job" "$SCRATCH/requeued.log" || fail "no note about the requeued job's lock"
# --dry-run: the layout and the rank map, tp fastest, and nothing written.
$MPIRUN -n 8 "$DIT_MP" --dry-run --tp 2 --pp 2 --run-dir "$SCRATCH/dry" > "$SCRATCH/dry.log" 2>&1 ||
  { cat "$SCRATCH/dry.log"; fail "--dry-run failed"; }
[[ ! -e $SCRATCH/dry && ! -e $SCRATCH/dry.lock ]] || fail "--dry-run touched the run folder"
grep -Eq "^  rank   5  node $(hostname) +cores [0-9,-]+ +tp 1 pp 1 dp 0$" "$SCRATCH/dry.log" ||
  { cat "$SCRATCH/dry.log"; fail "--dry-run's rank map lacks rank 5 at tp 1 pp 1 dp 0"; }
echo ok
