#!/usr/bin/env bash
# `dit_mp evaluate` end to end on real Fashion-MNIST images (the test split serves as training
# data, reference and floor, to stay fast): the classifier trains and is saved; real images given
# as a samples file score like the real-data floor while noise scores far from it; a trained run
# is evaluated at another layout (JSON written, progress with an ETA printed); train.eval_every
# puts measurements into metrics.jsonl; bad inputs get one line.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
FM="$SCRATCH/fm_test.h5"
EV=(--train-data "$FM" --reference "$FM" --classifier "$SCRATCH/c.h5")

"$DIT_MP" evaluate --train-classifier "${EV[@]}" --classifier-epochs 1 > "$SCRATCH/train_c.txt" 2>&1 ||
  { cat "$SCRATCH/train_c.txt"; fail "classifier training failed"; }
grep -q "classifier test accuracy" "$SCRATCH/train_c.txt" || fail "no classifier accuracy printed"
[[ -f "$SCRATCH/c.h5" ]] || fail "no classifier file"

# Real images (the first 600 of the set) and noise, as samples files.
/usr/bin/python3 - "$FM" "$SCRATCH" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    x = f["images"][:600].astype(np.float32) / 127.5 - 1
    y = f["labels"][:600].astype(np.int32)
for name, data in (("real", x), ("noise", np.random.default_rng(0).uniform(-1, 1, x.shape).astype(np.float32))):
    with h5py.File(f"{sys.argv[2]}/{name}.h5", "w") as g:
        g["samples"] = data
        g["labels"] = y
PY
for name in real noise; do
  "$DIT_MP" evaluate --samples "$SCRATCH/$name.h5" "${EV[@]}" --json "$SCRATCH/$name.json" > "$SCRATCH/$name.txt" 2>&1 ||
    { cat "$SCRATCH/$name.txt"; fail "evaluate --samples $name failed"; }
done
grep -q "real (floor)" "$SCRATCH/real.txt" || fail "no table printed"
/usr/bin/python3 - "$SCRATCH" <<'PY'
import json, sys
real = json.load(open(f"{sys.argv[1]}/real.json"))
noise = json.load(open(f"{sys.argv[1]}/noise.json"))
print("real", real["samples"], "floor", real["floor"], "noise", noise["samples"])
assert real["samples"]["n"] == 600 and real["floor"]["n"] == 600
# Real images are as good as the floor (same distribution) and recognised; noise is neither.
assert real["fid_over_floor"] < 2.5, real
assert real["samples"]["class_accuracy"] > 0.7 and real["samples"]["precision"] > 0.6, real
assert noise["fid_over_floor"] > 20 and noise["samples"]["class_accuracy"] < 0.3, noise
assert noise["samples"]["recall"] < real["samples"]["recall"], (noise, real)
PY

# A trained run: eval rows in metrics.jsonl, then evaluate at another layout.
$MPIRUN -n 2 "$DIT_MP" --tp 1 --pp 2 --steps 4 --data "$FM" --run-dir "$SCRATCH/run" "${TINY[@]}" \
  --set train.eval_every=2 --set eval.per_class=2 --set eval.num_steps=2 \
  --set eval.classifier=\""$SCRATCH/c.h5"\" --set eval.reference=\""$FM"\" > "$SCRATCH/train.txt" 2>&1 ||
  { cat "$SCRATCH/train.txt"; fail "training with train.eval_every failed"; }
[[ $(grep -c '"eval": {"samples"' "$SCRATCH/run/metrics.jsonl") == 2 ]] || fail "expected eval rows at steps 2 and 4"
grep -q "eval step 4: FID" "$SCRATCH/train.txt" || fail "no eval line in the log"
/usr/bin/python3 "$(dirname "$0")/../../tools/plot_run.py" "$SCRATCH/run" > "$SCRATCH/plot.txt" 2>&1 &&
  [[ -s "$SCRATCH/run/quality.png" && -s "$SCRATCH/run/loss.png" ]] || { cat "$SCRATCH/plot.txt"; fail "plot_run.py"; }
$MPIRUN -n 2 "$DIT_MP" evaluate --run "$SCRATCH/run" --per-class 3 --steps 3 --tp 2 "${EV[@]}" \
  > "$SCRATCH/eval_run.txt" 2>&1 || { cat "$SCRATCH/eval_run.txt"; fail "evaluate --run failed"; }
grep -q "sampling 30 images: step 3/3 .*ETA" "$SCRATCH/eval_run.txt" || fail "no sampling progress with an ETA"
/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['samples']['n'] == 30, r" \
  "$SCRATCH/run/eval.json" || fail "eval.json of the run"

# Bad inputs: one line each, non-zero exit.
expect_line() {  # expect_line REGEX ARGS...
  local regex=$1; shift
  if "$DIT_MP" evaluate "$@" > "$SCRATCH/bad.txt" 2>&1; then fail "evaluate $* succeeded"; fi
  grep -q -- "$regex" "$SCRATCH/bad.txt" || { cat "$SCRATCH/bad.txt"; fail "expected '$regex' for: $*"; }
}
expect_line "give one of --run DIR, --weights FILE or --samples FILE"
expect_line "--run $SCRATCH: not a run folder" --run "$SCRATCH"
expect_line "--batch 0: expected 1 to 1000000" --run "$SCRATCH/run" --batch 0 "${EV[@]}"
expect_line "missing.h5: cannot open" --samples "$SCRATCH/missing.h5" "${EV[@]}"
expect_line "go together" --samples "$SCRATCH/real.h5" --inception "$SCRATCH/c.h5"
/usr/bin/python3 -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'w') as g:
    g['samples'] = np.zeros((4, 3, 32, 32), np.float32); g['labels'] = np.zeros(4, np.int32)" "$SCRATCH/rgb.h5"
expect_line "takes 1x32x32" --samples "$SCRATCH/rgb.h5" "${EV[@]}"
expect_line "expected datasets 'samples'" --samples "$FM" "${EV[@]}"
# A 1.6 KB file whose samples (2^31 values) were never written: refused before anything is
# allocated (it used to take 24 GiB and the OOM killer).
expect_line "declares shape (524288, 1, 64, 64) .* stores 0 bytes of it" \
  --samples "$(dirname "$0")/../data/fuzz/samples/never_written_huge.h5" "${EV[@]}"
echo "ok"
