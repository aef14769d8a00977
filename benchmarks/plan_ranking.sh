#!/usr/bin/env bash
# Does `dit_mp plan`'s time model rank layouts as this machine does? (A benchmark, not a test.)
# Trains the demo model at several layouts for a few steps, takes the median step time after the
# first, asks `dit_mp plan --hardware cpu` for the model's step time at the same settings, and
# prints both with the Spearman rank correlation. The time model is a ranking aid: its absolute
# times are not expected to match.
#   benchmarks/plan_ranking.sh [build/bin/dit_mp] [steps]
set -euo pipefail
DIT_MP=${1:-build/bin/dit_mp}
STEPS=${2:-6}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
scratch=$(mktemp -d /tmp/dit_ranking.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
"$DIT_MP" prepare-data fashion-mnist --split test --out "$scratch/fm.h5" >/dev/null
ARGS=(--set train.global_batch=32 --set sample.num_steps=2 --set sample.per_class=1 --set train.warmup=0
      --log-every 1 --steps "$STEPS")
: >"$scratch/rows.txt"
for l in "1 1 1 8" "2 1 1 8" "1 2 1 8" "1 1 2 8" "2 2 1 4" "2 4 1 4" "4 2 1 4" "1 4 2 2" "1 1 4 2" "2 2 2 2"; do
  set -- $l  # tp pp dp micro
  n=$(( $1 * $2 * $3 ))
  run="$scratch/run_$1_$2_$3"
  mpirun -n $n "$DIT_MP" --tp $1 --pp $2 --micro-batch $4 --data "$scratch/fm.h5" --run-dir "$run" "${ARGS[@]}" \
    >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
  "$DIT_MP" plan --tp $1 --pp $2 --dp $3 --micro-batch $4 "${ARGS[@]:0:8}" --hardware cpu --json "$run/plan.json" >/dev/null
  echo "$1 $2 $3 $4 $run" >>"$scratch/rows.txt"
done
/usr/bin/python3 - "$scratch/rows.txt" <<'PY'
import json, statistics, sys
rows = []
for line in open(sys.argv[1]):
    tp, pp, dp, micro, run = line.split()
    m = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    measured = statistics.median(32 / r["images_per_s"] for r in m[1:])
    model = json.load(open(f"{run}/plan.json"))["model_step_s"]
    rows.append((f"tp {tp} pp {pp} dp {dp} micro {micro}", measured, model))
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    for k, i in enumerate(order):
        r[i] = k + 1.0
    return r
a, b = ranks([r[1] for r in rows]), ranks([r[2] for r in rows])
n = len(rows)
rho = 1 - 6 * sum((x - y) ** 2 for x, y in zip(a, b)) / (n * (n * n - 1))
print("| layout | measured s/step | rank | model s/step | rank |")
print("| --- | ---: | ---: | ---: | ---: |")
for (name, meas, mod), ra, rb in zip(rows, a, b):
    print(f"| {name} | {meas:.3f} | {ra:.0f} | {mod:.3f} | {rb:.0f} |")
print(f"\nSpearman rank correlation over {n} layouts: {rho:.2f}")
PY
