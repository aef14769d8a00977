#!/usr/bin/env bash
# Plots people look at: a real run writes loss.png and throughput.png at its end (tools/plot_run.py
# on its metrics.jsonl); the tool compares two runs in one figure; every figure is a real PNG with
# content (not one colour); a folder without metrics gets one clear message. Skips (77) without
# python3 + matplotlib, saying so.
source "$(dirname "$0")/common.sh"
TOOL=$(cd "$(dirname "$0")/../.." && pwd)/tools/plot_run.py
PY=""
for p in python3 /usr/bin/python3; do
  "$p" -c "import matplotlib" 2>/dev/null && { PY=$p; break; }
done
[[ -n $PY ]] || { echo "SKIP: no python3 with matplotlib (apt-get install python3-matplotlib)"; exit 77; }
prepare_fashion_test
R=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --tp 1 --pp 1 --steps 30)
DIT_PLOTS=1 $MPIRUN -n 2 "$DIT_MP" --run-dir "$SCRATCH/a" "${R[@]}" > "$SCRATCH/a.log" 2>&1 ||
  { cat "$SCRATCH/a.log"; fail "run a failed"; }
grep -q "^plots: $SCRATCH/a/loss.png, $SCRATCH/a/throughput.png" "$SCRATCH/a.log" ||
  { tail -5 "$SCRATCH/a.log"; cat "$SCRATCH/a/plots.log" 2>/dev/null; fail "the run did not write its plots"; }
$MPIRUN -n 2 "$DIT_MP" --run-dir "$SCRATCH/b" "${R[@]}" --lr 5e-4 > "$SCRATCH/b.log" 2>&1 ||
  { cat "$SCRATCH/b.log"; fail "run b failed"; }
[[ ! -e $SCRATCH/b/loss.png ]] || fail "DIT_PLOTS=0 still plotted"
"$PY" "$TOOL" "$SCRATCH/a" "$SCRATCH/b" --out "$SCRATCH/cmp.png" > "$SCRATCH/tool.log" || fail "plot_run.py failed"
"$PY" - "$SCRATCH" <<'PY'
import os, sys
import matplotlib.image as mpimg
s = sys.argv[1]
for f in ("a/loss.png", "a/throughput.png", "b/loss.png", "b/throughput.png", "cmp.png"):
    path = os.path.join(s, f)
    img = mpimg.imread(path)  # fails on anything that is not a PNG
    h, w = img.shape[:2]
    assert h >= 300 and w >= 500, (f, img.shape)
    assert img[..., :3].std() > 0.05, f"{f} is (nearly) one colour"
    print(f"{f}: {w}x{h} PNG with content")
assert not [n for n in os.listdir(os.path.join(s, "a")) if n.endswith(".tmp.png")], "a temporary file was left"
PY
if "$PY" "$TOOL" "$SCRATCH/nothing" > "$SCRATCH/bad.log" 2>&1; then fail "a folder without metrics was plotted"; fi
grep -q "plot_run.py: $SCRATCH/nothing/metrics.jsonl does not exist" "$SCRATCH/bad.log" || { cat "$SCRATCH/bad.log"; fail "unclear message"; }
echo ok
