#!/usr/bin/env bash
# The sweep that chose the demo's model and budget (docs/demo.md), with the official DiT recipe the demo
# trained then (configs/fashion_mnist_ddpm.toml; the demo's recipe is now LightningDiT's, chosen by
# benchmarks/recipes.sh): each setting trains the demo at tp 2 x pp 4
# on 8 ranks, then `dit_mp evaluate` judges 100 samples per class of its EMA weights. One line per
# setting goes to OUT/summary.tsv: name, training minutes (wall clock, start-up and the final grid
# included), evaluation minutes, class accuracy, FID, the real-data floor's FID, precision, recall.
#
#   benchmarks/demo_sweep.sh [OUT] [NAME...]     (default OUT: sweep_demo; default: every setting
#                                                 but steps24k, the 30-minute scaling point)
#
# Run it on an otherwise idle machine: the minutes are what the demo costs there. Each setting is
# --set overrides of configs/fashion_mnist_ddpm.toml; `defaults` is that file as is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIT_MP=${DIT_MP:-$root/build/bin/dit_mp}
OUT=${1:-sweep_demo}
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 DIT_PLOTS=0

# The sweep's table judged every row with CFG 4 at every step (the sampler defaults of the time);
# EVAL_SAMPLER="" judges with the run's own [sample] (now CFG 6 at noise levels [0, 0.5]) instead.
EVAL_SAMPLER=${EVAL_SAMPLER---cfg-scale 4 --cfg-t-min 0 --cfg-t-max 1}
# Overrides of the defaults (hidden 96, global batch 32, 8000 steps, lr 1.5e-3 cosine, warm-up 100).
declare -A SETTINGS=(
  [defaults]=""
  [old_defaults]="model.hidden_size=128 train.global_batch=64 train.steps=1000 train.lr=1e-3 train.lr_schedule=\"constant\" train.warmup=50"
  [h128_b64]="model.hidden_size=128 train.global_batch=64 train.steps=2500 train.lr=2e-3"
  [h128_b32]="model.hidden_size=128 train.steps=5000"
  [h128_b16]="model.hidden_size=128 train.global_batch=16 train.micro_batch=4 train.lr=1e-3"
  [h96_b64]="train.global_batch=64 train.steps=4500 train.lr=2e-3"
  [h96_7000]="train.steps=7000"
  [h64_b64]="model.hidden_size=64 train.global_batch=64 train.steps=6900 train.lr=2e-3"
  [lr3e-3]="train.lr=3e-3"
  [d8_h64]="model.depth=8 model.hidden_size=64 train.steps=7200"
  [steps24k]="train.steps=24000"
)
names=("$@")
((${#names[@]})) || names=(defaults old_defaults h128_b64 h128_b32 h128_b16 h96_b64 h96_7000 h64_b64 lr3e-3 d8_h64)
mkdir -p "$OUT"
[[ -f "$OUT/summary.tsv" ]] || printf "setting\ttrain_min\teval_min\tclass_acc\tfid\tfloor_fid\tprecision\trecall\n" > "$OUT/summary.tsv"
for name in "${names[@]}"; do
  [[ -v "SETTINGS[$name]" ]] || { echo "demo_sweep.sh: no setting '$name' (have: ${!SETTINGS[*]})" >&2; exit 2; }
  sets=()
  for kv in ${SETTINGS[$name]}; do sets+=(--set "$kv"); done
  run="$OUT/$name"
  t0=$(date +%s.%N)
  mpirun -q -np 8 -x OMP_NUM_THREADS=1 "$DIT_MP" --config "$root/configs/fashion_mnist_ddpm.toml" --tp 2 --pp 4 \
    --overwrite --set run.dir=\""$run"\" "${sets[@]}" \
    > "$run.train.log" 2>&1 || { tail -3 "$run.train.log"; exit 1; }
  t1=$(date +%s.%N)
  "$DIT_MP" evaluate --run "$run" --per-class 100 $EVAL_SAMPLER > "$run.eval.log" 2>&1 || { tail -3 "$run.eval.log"; exit 1; }
  t2=$(date +%s.%N)
  python3 - "$run/eval.json" "$name" "$t0" "$t1" "$t2" >> "$OUT/summary.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t0, t1, t2 = map(float, sys.argv[3:6])
s, f = r["samples"], r["floor"]
print(f"{sys.argv[2]}\t{(t1 - t0) / 60:.1f}\t{(t2 - t1) / 60:.1f}\t{100 * s['class_accuracy']:.1f}\t{s['fid']:.2f}\t"
      f"{f['fid']:.2f}\t{s['precision']:.3f}\t{s['recall']:.3f}")
PY
  tail -1 "$OUT/summary.tsv"
done
