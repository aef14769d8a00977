#!/usr/bin/env bash
# A 20-step run at tp 2 pp 2 dp 2 on real images: metrics.jsonl has 20 valid rows with every
# field, the loss falls, and the run folder holds the config, weights, accounting and a grid.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
$MPIRUN -n 8 "$DIT_MP" --tp 2 --pp 2 --steps 20 --log-every 1 --data "$SCRATCH/fm_test.h5" \
  --run-dir "$SCRATCH/run" "${TINY[@]}" > "$SCRATCH/log.txt" 2>&1 || { cat "$SCRATCH/log.txt"; fail "training failed"; }
for f in config.toml metrics.jsonl model.h5 ema.h5 samples.png accounting.json; do
  [[ -s "$SCRATCH/run/$f" ]] || fail "run folder lacks $f"
done
python3 - "$SCRATCH/run/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 20, f"{len(rows)} rows, expected 20"
keys = ["step", "loss", "mse", "vb", "grad_norm", "lr", "images_per_s", "tflops", "mfu",
        "peak_mem_bytes", "elapsed_s", "loss_scale", "skipped_steps"]
for i, r in enumerate(rows):
    assert r["step"] == i + 1, r
    for k in keys:
        assert k in r and isinstance(r[k], (int, float)) and math.isfinite(r[k]), (k, r)
    assert r["peak_mem_bytes"] > 0 and r["images_per_s"] > 0, r
    assert r["loss_scale"] == 1 and r["skipped_steps"] == 0, r  # fp32: no loss scaling
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
print(f"mean loss of steps 1-5: {first:.4f}, of steps 16-20: {last:.4f}")
assert last < 0.8 * first, "the loss did not fall"
PY
grep -q "tp 2 pp 2 dp 2" "$SCRATCH/log.txt" || fail "the log does not state the layout"
echo "ok"
