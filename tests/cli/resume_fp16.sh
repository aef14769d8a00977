#!/usr/bin/env bash
# fp16 dynamic loss scaling survives a checkpoint: with a scale that starts too large and doubles
# after 2 clean steps, the run skips some steps and applies others; stopped at step 6 and resumed,
# it continues bit for bit (losses, the scale and the skipped count of every step), which needs the
# scale AND its count of clean steps restored. Runs on the CPU's fp16 storage with host-staged comms.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --set model.depth=4 --precision fp16
   --set train.loss_scale=4e6 --set train.loss_scale_window=2)
run() {  # run STEPS DIR [ARGS...]
  local steps=$1 dir=$2
  shift 2
  $MPIRUN -n 4 "$DIT_MP" --tp 2 --pp 2 --steps "$steps" --run-dir "$dir" "${R[@]}" "$@" \
    > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $dir failed"; }
}
run 10 "$SCRATCH/full"
run 6 "$SCRATCH/part"
"$DIT_MP" inspect "$SCRATCH/part/ckpt" > "$SCRATCH/inspect.txt" || fail "inspect failed"
grep -q "loss scale" "$SCRATCH/inspect.txt" || fail "inspect does not show the loss scale"
run 10 "$SCRATCH/part" --resume auto
grep -q "resumed from .*step_00000006 at step 6" "$SCRATCH/part.log" || fail "did not resume from step 6"
python3 - "$SCRATCH/full/metrics.jsonl" "$SCRATCH/part/metrics.jsonl" <<'PY'
import json, sys
full = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
res = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}
assert sorted(res) == list(range(1, 11)), sorted(res)
skipped = full[10]["skipped_steps"]
assert 0 < skipped < 10, f"{skipped} skipped steps: the test needs both skipped and applied steps"
assert full[10]["skipped_steps"] > full[6]["skipped_steps"], "no step after the checkpoint was skipped"
for s in range(7, 11):
    for k in ("loss", "loss_scale", "skipped_steps", "grad_norm"):
        assert res[s][k] == full[s][k], (s, k, res[s][k], full[s][k])
print(f"{skipped} of 10 steps skipped; steps 7-10 bit-identical after resuming at step 6, scales",
      [full[s]["loss_scale"] for s in range(1, 11)])
PY
echo ok
