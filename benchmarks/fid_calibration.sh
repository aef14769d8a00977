#!/usr/bin/env bash
# What an FID in the classifier's feature space means: `dit_mp evaluate --samples` on real
# Fashion-MNIST training images (100 per class, as many as the demo's evaluation draws) that were
# damaged in known ways: Gaussian pixel noise of a given standard deviation (pixels in [-1, 1],
# clipped), and a 2-tap vertical blur. One line per set goes to OUT/calibration.tsv; docs/demo.md
# sets the demo's FID beside them.
#
#   benchmarks/fid_calibration.sh [OUT]      (default OUT: fid_calibration; run where data/ is)
#
# Needs data/fashion_mnist.h5 and the classifier (data/fashion_mnist_classifier.h5, trained by the
# first `dit_mp evaluate` when missing) and a python3 with h5py and numpy (PYTHON; default /usr/bin/python3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIT_MP=${DIT_MP:-$root/build/bin/dit_mp}
OUT=${1:-fid_calibration}
PY=${PYTHON:-/usr/bin/python3}  # Debian's, which has h5py
mkdir -p "$OUT"
"$PY" - "$OUT" <<'PY'
import sys, h5py, numpy as np
out = sys.argv[1]
with h5py.File("data/fashion_mnist.h5", "r") as f:
    y = f["labels"][:]
    # the last 100 images of each class: the floor draws its rows at random from all 60000
    idx = np.sort(np.concatenate([np.where(y == c)[0][-100:] for c in range(10)]))
    x = f["images"][idx].astype(np.float32) / 127.5 - 1
    y = y[idx].astype(np.int32)
rng = np.random.default_rng(1)
sets = {f"noise_{s:g}": np.clip(x + s * rng.standard_normal(x.shape).astype(np.float32), -1, 1)
        for s in (0, 0.02, 0.05, 0.1, 0.2)}
blur = x.copy()
blur[..., 1:, :] = (x[..., 1:, :] + x[..., :-1, :]) / 2
sets["blur_2tap"] = blur
for name, v in sets.items():
    with h5py.File(f"{out}/{name}.h5", "w") as g:
        g["samples"] = v
        g["labels"] = y
PY
printf "set\tFID\tprecision\trecall\tclass_acc\n" > "$OUT/calibration.tsv"
for name in noise_0 noise_0.02 noise_0.05 noise_0.1 noise_0.2 blur_2tap; do
  "$DIT_MP" evaluate --samples "$OUT/$name.h5" --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 ||
    { tail -3 "$OUT/$name.log"; exit 1; }
  "$PY" -c "
import json, sys
s = json.load(open(sys.argv[1]))['samples']
print('%s\t%.2f\t%.3f\t%.3f\t%.1f%%' % (sys.argv[2], s['fid'], s['precision'], s['recall'], 100 * s['class_accuracy']))
" "$OUT/$name.json" "$name" >> "$OUT/calibration.tsv"
done
column -t "$OUT/calibration.tsv"
