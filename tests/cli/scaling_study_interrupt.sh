#!/usr/bin/env bash
# A stopped study keeps its finished points and runs the interrupted one again on resume: SIGINT to the
# study during point 2 ends that point's run (no process of it left), prints one line (what stopped it,
# how to resume) and exits 130; results.json then holds point 1 only, and the resume runs point 2.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STUDY=(/usr/bin/python3 "$ROOT/benchmarks/scaling/study.py")
export DIT_MP
prepare_fashion_test
OUT=$SCRATCH/study
cat > "$SCRATCH/study.toml" <<TOML
[study]
data = "$SCRATCH/fm_test.h5"
steps = 4
warmup = 1
args = ["--set", "model.hidden_size=32", "--set", "model.depth=4", "--set", "model.num_heads=2",
        "--set", "model.patch_size=8"]

[[model]]
name = "micro"

[[sweep]]
batch = 8
layouts = ["1x1x1"]
microbatches = 2

[[sweep]]
batch = 8
layouts = ["1x2x1"]
microbatches = 2
steps = 400                  # long enough to be interrupted
TOML
P1=micro_strong_b8_tp1_pp1_dp1_1f1b_m2_v1_fp32_none
P2=micro_strong_b8_tp1_pp2_dp1_1f1b_m2_v1_fp32_none

# wait_training PID POINT: until POINT's run has logged 3 steps (the study PID still running).
wait_training() {
  local deadline=$((SECONDS + 180))
  until [[ -f $OUT/points/$2/metrics.jsonl && $(wc -l < "$OUT/points/$2/metrics.jsonl") -ge 3 ]]; do
    kill -0 "$1" 2>/dev/null || { cat "$SCRATCH/run.log"; fail "the study ended before $2 was interrupted"; }
    ((SECONDS < deadline)) || fail "$2 did not start training in 180 s"
    sleep 0.2
  done
}
# rows: the points and statuses in results.json, one "point status" a line.
rows() {
  /usr/bin/python3 -c 'import json, sys; [print(r["point"], r["status"]) for r in json.load(open(sys.argv[1]))]' \
    "$OUT/results.json"
}
# stopped RC EXPECTED-RC WHAT: the study exited EXPECTED-RC with one line saying WHAT and how to resume,
# and no process of the interrupted point is left.
stopped() {
  local log
  log=$(cat "$SCRATCH/run.log")
  [[ $1 -eq $2 ]] || fail "the stopped study exited $1, expected $2; output: $log"
  [[ $log != *Traceback* ]] || fail "a traceback: $log"
  [[ $(grep -c '^study: ' "$SCRATCH/run.log") -eq 1 ]] || fail "expected one 'study:' line: $log"
  grep -q "^study: $3.*which is not stored and runs again; .*resume with: .*study.py run $SCRATCH/study.toml --out $OUT\$" \
    "$SCRATCH/run.log" || fail "expected '$3' and how to resume in: $log"
  ! pgrep -f -- "--run-dir $OUT/points/" > /dev/null || fail "the interrupted point's processes are still running"
}

# 1. SIGINT to the study while point 2 trains (a background job of this script: started with SIGINT
#    ignored, which the study handles all the same).
rm -rf "$OUT"
"${STUDY[@]}" run "$SCRATCH/study.toml" --out "$OUT" > "$SCRATCH/run.log" 2>&1 &
pid=$!
wait_training $pid $P2
kill -INT $pid
rc=0; wait $pid || rc=$?
stopped $rc 130 "stopped by SIGINT during point 2/2 ($P2)"
[[ $(rows) == "$P1 ok" ]] || fail "results.json after the interrupt: $(rows); expected only $P1 ok"

# 2. The resume runs point 2 (not skipped as failed) and finishes the study.
"${STUDY[@]}" run "$SCRATCH/study.toml" --out "$OUT" > "$SCRATCH/run.log" 2>&1 ||
  { cat "$SCRATCH/run.log"; fail "the resumed study failed"; }
grep -q "2 points, 1 finished before (skipped), 2 ok, 0 failed" "$SCRATCH/run.log" ||
  { cat "$SCRATCH/run.log"; fail "expected point 2 to run again and both points to be ok"; }
[[ $(rows) == "$P1 ok"$'\n'"$P2 ok" ]] || fail "results.json at the end: $(rows)"
echo ok
