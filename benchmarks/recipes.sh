#!/usr/bin/env bash
# The recipe ablation (docs/recipes.md): the demo's model and budget (tp 2 x pp 4 on 8 ranks) with
# the official DiT recipe (configs/fashion_mnist_ddpm.toml) trained with each change of
# LightningDiT's ablation, alone and cumulatively in its order (`lightning`, all of them, is the
# demo's default, configs/fashion_mnist.toml), then judged by `dit_mp evaluate` (FID / floor, precision, recall,
# class accuracy) on 100 samples per class of the EMA weights. One line per setting goes to
# OUT/summary.tsv: name, training minutes (wall clock, start-up and the final grid included),
# images/s, evaluation minutes, class accuracy, FID, floor FID, FID / floor, precision, recall, and
# the settings. The new block costs FLOPs: compare the training minutes, not only the steps.
#
#   benchmarks/recipes.sh [OUT] [NAME...]    (default OUT: sweep_recipes; default: the cumulative
#                                             chain and each change alone)
#
# Run it on an otherwise idle machine: the minutes are what each recipe costs there. A flow model
# samples with an ODE sampler (euler by default here, 50 steps as the demo's DDIM); EVAL_ARGS adds
# flags to every `evaluate` (e.g. EVAL_ARGS="--sampler heun --steps 25").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIT_MP=${DIT_MP:-$root/build/bin/dit_mp}
OUT=${1:-sweep_recipes}
shift || true
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 DIT_PLOTS=0

FLOW='diffusion.objective="flow" model.learn_sigma=false sample.sampler="euler"'
LOGNORM='diffusion.timestep_sampling="logit_normal"'
COS='diffusion.cosine_loss=true'
SWIGLU='model.mlp="swiglu"'
RMS='model.norm="rmsnorm"'
ROPE='model.pos_embed="rope"'
declare -A SETTINGS=(
  [dit]=""                                        # the official recipe: DDPM, epsilon, learned sigma
  [minsnr]='diffusion.loss_weight="min_snr"'      # DDPM with min-SNR-5 weighting
  [flow]="$FLOW"                                  # + rectified flow (SiT)
  [flow_lognorm]="$FLOW $LOGNORM"
  [flow_lognorm_cos]="$FLOW $LOGNORM $COS"
  [flow_lognorm_cos_swiglu]="$FLOW $LOGNORM $COS $SWIGLU"
  [flow_lognorm_cos_swiglu_rms]="$FLOW $LOGNORM $COS $SWIGLU $RMS"
  [lightning]="$FLOW $LOGNORM $COS $SWIGLU $RMS $ROPE"  # every change: LightningDiT's block
  [ddpm_swiglu]="$SWIGLU"                         # each block change alone, on the DDPM demo
  [ddpm_rms]="$RMS"
  [ddpm_rope]="$ROPE"
)
names=("$@")
((${#names[@]})) || names=(dit minsnr flow flow_lognorm flow_lognorm_cos flow_lognorm_cos_swiglu
                          flow_lognorm_cos_swiglu_rms lightning ddpm_swiglu ddpm_rms ddpm_rope)
mkdir -p "$OUT"
[[ -f "$OUT/summary.tsv" ]] ||
  printf "setting\ttrain_min\timg_per_s\teval_min\tclass_acc\tfid\tfloor_fid\tfid_over_floor\tprecision\trecall\tsettings\n" \
    > "$OUT/summary.tsv"
for name in "${names[@]}"; do
  [[ -v "SETTINGS[$name]" ]] || { echo "recipes.sh: no setting '$name' (have: ${!SETTINGS[*]})" >&2; exit 2; }
  sets=()
  for kv in ${SETTINGS[$name]} ${EXTRA_SETS:-}; do sets+=(--set "$kv"); done
  run="$OUT/$name"
  t0=$(date +%s.%N)
  mpirun -q -np 8 -x OMP_NUM_THREADS=1 "$DIT_MP" --config "$root/configs/fashion_mnist_ddpm.toml" --tp 2 --pp 4 \
    --overwrite --set run.dir=\""$run"\" "${sets[@]}" \
    > "$run.train.log" 2>&1 || { tail -3 "$run.train.log"; exit 1; }
  t1=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$DIT_MP" evaluate --run "$run" --per-class 100 ${EVAL_ARGS:-} > "$run.eval.log" 2>&1 ||
    { tail -3 "$run.eval.log"; exit 1; }
  t2=$(date +%s.%N)
  python3 - "$run" "$name" "$t0" "$t1" "$t2" "${SETTINGS[$name]} ${EXTRA_SETS:-}" >> "$OUT/summary.tsv" <<'PY'
import json, sys
run, name = sys.argv[1], sys.argv[2]
t0, t1, t2 = map(float, sys.argv[3:6])
r = json.load(open(f"{run}/eval.json"))
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"images_per_s"' in l]
s, f = r["samples"], r["floor"]
img_s = sum(x["images_per_s"] for x in rows) / len(rows) if rows else float("nan")  # mean over logged steps
print(f"{name}\t{(t1 - t0) / 60:.1f}\t{img_s:.1f}\t{(t2 - t1) / 60:.1f}\t{100 * s['class_accuracy']:.1f}\t"
      f"{s['fid']:.2f}\t{f['fid']:.2f}\t{s['fid'] / f['fid']:.1f}\t{s['precision']:.3f}\t{s['recall']:.3f}\t"
      f"{sys.argv[6].strip() or '(the official recipe)'}")
PY
  tail -1 "$OUT/summary.tsv"
done
