#!/usr/bin/env bash
# A rank killed (SIGKILL) in the middle of a checkpoint save: the job dies, the previous
# checkpoint stays loadable and `latest` points at it, and `--resume auto` continues from it to
# the same losses as a run that was never interrupted (bit for bit, same layout).
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set train.warmup=0 --checkpoint-every 2 --tp 2 --pp 2)
$MPIRUN -n 4 "$DIT_MP" --steps 6 --run-dir "$SCRATCH/full" "${R[@]}" > "$SCRATCH/full.log" 2>&1 ||
  { cat "$SCRATCH/full.log"; fail "uninterrupted run failed"; }
# Rank 3 dies right after writing its shard of the step-4 checkpoint.
if timeout 120 $MPIRUN -n 4 -x DIT_FAULT_KILL_DURING_SAVE=3:4 "$DIT_MP" --steps 6 --run-dir "$SCRATCH/run" "${R[@]}" \
    > "$SCRATCH/killed.log" 2>&1; then
  fail "the job survived a SIGKILL"
fi
[[ $(cat "$SCRATCH/run/ckpt/latest") == step_00000002 ]] || fail "latest is '$(cat "$SCRATCH/run/ckpt/latest")'"
[[ ! -e "$SCRATCH/run/ckpt/step_00000004" ]] || fail "a half-written step_00000004 was published"
"$DIT_MP" inspect "$SCRATCH/run/ckpt" > "$SCRATCH/inspect.txt" || fail "the previous checkpoint does not verify"
$MPIRUN -n 4 "$DIT_MP" --steps 6 --run-dir "$SCRATCH/run" --resume auto "${R[@]}" > "$SCRATCH/resume.log" 2>&1 ||
  { cat "$SCRATCH/resume.log"; fail "resume failed"; }
grep -q "resumed from .*step_00000002 at step 2" "$SCRATCH/resume.log" || fail "did not resume from step 2"
python3 - "$SCRATCH/full/metrics.jsonl" "$SCRATCH/run/metrics.jsonl" <<'PY'
import json, sys
full = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
res = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(res) == list(range(1, 7)), sorted(res)
for s in range(1, 7):
    assert res[s] == full[s], (s, res[s], full[s])
print("after the kill and the resume, steps 1-6 are bit-identical to the uninterrupted run")
PY
echo ok
