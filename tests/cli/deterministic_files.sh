#!/usr/bin/env bash
# The run is deterministic down to its files: two identical 4-step runs (pp 2, two ranks) in the same
# run folder write byte-identical model.h5, ema.h5, samples.h5, samples.png and checkpoint files
# (HDF5 records no object times), and the same losses in metrics.jsonl. A run's identity (run.id,
# recorded in config.toml and every checkpoint index) is random unless given: both runs are given one.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
for n in 1 2; do
  $MPIRUN -n 2 "$DIT_MP" --tp 1 --pp 2 --steps 4 --log-every 1 --data "$SCRATCH/fm_test.h5" \
    --run-dir "$SCRATCH/run" "${TINY[@]}" --set run.id=\"0123456789abcdef0123456789abcdef\" > "$SCRATCH/log$n.txt" 2>&1 || { cat "$SCRATCH/log$n.txt"; fail "run $n failed"; }
  mv "$SCRATCH/run" "$SCRATCH/run$n"
done
files=(model.h5 ema.h5 samples.h5 samples.png ckpt/step_00000004/index.h5
       ckpt/step_00000004/shard_tp0_pp0_dp0.h5 ckpt/step_00000004/shard_tp0_pp1_dp0.h5)
for f in "${files[@]}"; do
  [[ -s "$SCRATCH/run1/$f" ]] || fail "the run folder lacks $f"
  cmp "$SCRATCH/run1/$f" "$SCRATCH/run2/$f" || fail "$f differs between two identical runs"
done
python3 - "$SCRATCH/run1/metrics.jsonl" "$SCRATCH/run2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(line)["loss"] for line in open(p)] for p in sys.argv[1:])
assert len(a) == 4 and a == b, (a, b)
PY
echo "ok: ${#files[@]} files byte-identical, losses identical"
