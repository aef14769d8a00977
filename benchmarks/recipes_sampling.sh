#!/usr/bin/env bash
# The sampling half of the recipe tuning (docs/recipes.md): one trained run judged by
# `dit_mp evaluate` (100 samples per class of its EMA weights) under each sampler setting: the
# sampler and its steps, the classifier-free guidance scale and the noise levels it is applied at.
# Training is not repeated; each row costs one evaluation. One line per setting goes to
# OUT/summary.tsv: name, evaluation minutes, class accuracy, FID, floor FID, FID / floor,
# precision, recall and the evaluate flags.
#
#   benchmarks/recipes_sampling.sh RUN [OUT] [NAME...]   (default OUT: RUN/sampling; default: every
#                                                         setting of the flow grid below)
#
# The grid is for a flow model (a DDPM run takes ddim/ddpm instead: name its settings ddim_*).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DIT_MP=${DIT_MP:-$root/build/bin/dit_mp}
RUN=${1:?usage: recipes_sampling.sh RUN [OUT] [NAME...]}
OUT=${2:-$RUN/sampling}
shift $(($# < 2 ? $# : 2))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# The guidance interval: --cfg-t-min/--cfg-t-max are noise levels (0 clean, 1 noise; 1 - t for flow).
declare -A SETTINGS=(
  [euler50_cfg6_half]="--sampler euler --steps 50 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.5"
  [euler50_cfg4_half]="--sampler euler --steps 50 --cfg-scale 4 --cfg-t-min 0 --cfg-t-max 0.5"
  [euler50_cfg3_half]="--sampler euler --steps 50 --cfg-scale 3 --cfg-t-min 0 --cfg-t-max 0.5"
  [euler50_cfg4_all]="--sampler euler --steps 50 --cfg-scale 4 --cfg-t-min 0 --cfg-t-max 1"
  [euler50_cfg6_0.7]="--sampler euler --steps 50 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.7"
  [euler50_nocfg]="--sampler euler --steps 50 --cfg-scale 1"
  [euler100_cfg6_half]="--sampler euler --steps 100 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.5"
  [heun25_cfg6_half]="--sampler heun --steps 25 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.5"
  [sde50_cfg6_half]="--sampler euler_maruyama --steps 50 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.5"
  [ddim_50_cfg6_half]="--sampler ddim --steps 50 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.5"
  [ddim_100_cfg6_half]="--sampler ddim --steps 100 --cfg-scale 6 --cfg-t-min 0 --cfg-t-max 0.5"
)
names=("$@")
((${#names[@]})) || names=(euler50_cfg6_half euler50_cfg4_half euler50_cfg3_half euler50_cfg4_all
                          euler50_cfg6_0.7 euler50_nocfg euler100_cfg6_half heun25_cfg6_half sde50_cfg6_half)
mkdir -p "$OUT"
[[ -f "$OUT/summary.tsv" ]] ||
  printf "setting\teval_min\tclass_acc\tfid\tfloor_fid\tfid_over_floor\tprecision\trecall\tflags\n" > "$OUT/summary.tsv"
for name in "${names[@]}"; do
  [[ -v "SETTINGS[$name]" ]] || { echo "recipes_sampling.sh: no setting '$name' (have: ${!SETTINGS[*]})" >&2; exit 2; }
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$DIT_MP" evaluate --run "$RUN" --per-class 100 ${SETTINGS[$name]} --json "$OUT/$name.json" \
    > "$OUT/$name.log" 2>&1 || { tail -3 "$OUT/$name.log"; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$OUT/$name.json" "$name" "$t0" "$t1" "${SETTINGS[$name]}" >> "$OUT/summary.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t0, t1 = map(float, sys.argv[3:5])
s, f = r["samples"], r["floor"]
print(f"{sys.argv[2]}\t{(t1 - t0) / 60:.1f}\t{100 * s['class_accuracy']:.1f}\t{s['fid']:.2f}\t{f['fid']:.2f}\t"
      f"{s['fid'] / f['fid']:.1f}\t{s['precision']:.3f}\t{s['recall']:.3f}\t{sys.argv[5]}")
PY
  tail -1 "$OUT/summary.tsv"
done
