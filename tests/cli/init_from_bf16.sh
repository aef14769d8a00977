#!/usr/bin/env bash
# Mixed precision keeps fp32 master weights end to end: an fp32 run's model.h5 starts a bf16 run
# (tp 2, host-staged comms) with --init-from; one step at a learning rate of 1e-12 later, the bf16
# run's model.h5 equals the file it started from to 1e-6, which holds only if the file's values
# reached the fp32 masters unrounded and the final weights are saved from the masters (bf16
# rounding alone would be ~2e-3). The bf16 run's EMA starts at the same weights.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3
if ! $PY -c "import h5py, numpy" 2>/dev/null; then
  echo "SKIP: $PY lacks h5py or numpy (install python3-h5py python3-numpy)"
  exit 0
fi
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}")
$MPIRUN -n 1 "$DIT_MP" --tp 1 --pp 1 --steps 3 --run-dir "$SCRATCH/fp32" "${R[@]}" > "$SCRATCH/fp32.log" 2>&1 ||
  { cat "$SCRATCH/fp32.log"; fail "the fp32 run failed"; }
$MPIRUN -n 2 "$DIT_MP" --tp 2 --pp 1 --steps 1 --run-dir "$SCRATCH/bf16" "${R[@]}" --precision bf16 \
  --set train.lr=1e-12 --init-from "$SCRATCH/fp32/model.h5" > "$SCRATCH/bf16.log" 2>&1 ||
  { cat "$SCRATCH/bf16.log"; fail "the bf16 run failed"; }
grep -q "in bf16" "$SCRATCH/bf16.log" || fail "the bf16 run does not say it trains in bf16"
$PY - "$SCRATCH/fp32/model.h5" "$SCRATCH/bf16/model.h5" "$SCRATCH/bf16/ema.h5" <<'PY'
import sys, h5py, numpy as np
start, end, ema = (h5py.File(p, "r")["weights"] for p in sys.argv[1:])
assert set(start) == set(end) == set(ema), set(start) ^ set(end)
worst = 0.0
for name in start:
    a = start[name][...].astype(np.float64)
    for b in (end[name][...], ema[name][...]):
        ref = np.linalg.norm(a)
        err = np.linalg.norm(b - a) / ref if ref > 0 else np.linalg.norm(b)
        worst = max(worst, err)
print(f"{len(start)} tensors: worst relative change {worst:.2e} after one bf16 step at lr 1e-12")
assert worst <= 1e-6, worst
PY
echo ok
