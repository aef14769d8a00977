#!/usr/bin/env bash
# Activation recomputation's trade-off, measured (a benchmark, not a test): DiT-B/4 on 32x32
# Fashion-MNIST at 1 rank and at tp 2 pp 2, each recompute mode, side by side in one run. Prints a
# markdown table: peak activation bytes (microbatch arenas + scratch, max over ranks, from
# accounting.json), peak process memory (VmHWM, max over ranks), median step time after the first
# step, and each against `none` at the same layout.
#   benchmarks/recompute.sh [build/bin/dit_mp] [steps] [model]
set -euo pipefail
DIT_MP=${1:-build/bin/dit_mp}
STEPS=${2:-5}
MODEL=${3:-DiT-B/4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
scratch=$(mktemp -d /tmp/dit_recompute.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
"$DIT_MP" prepare-data fashion-mnist --split test --out "$scratch/fm.h5" >/dev/null
ARGS=(--model "$MODEL" --set train.global_batch=16 --set train.micro_batch=4 --set train.warmup=0
      --set sample.num_steps=2 --set sample.per_class=1 --log-every 1 --steps "$STEPS" --data "$scratch/fm.h5")
echo "| layout | recompute | activation MiB | vs none | peak RSS MiB | vs none | step s | vs none |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for layout in "1 1 1 2" "2 2 4 1"; do  # tp pp ranks threads-per-rank
  set -- $layout
  for mode in none selective full; do
    run="$scratch/run_$1_$2_$mode"
    OMP_NUM_THREADS=$4 mpirun -n "$3" --bind-to none "$DIT_MP" --tp "$1" --pp "$2" --recompute "$mode" \
      --run-dir "$run" "${ARGS[@]}" >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
    /usr/bin/python3 - "$run" "tp $1 pp $2" "$mode" "$scratch/base_$1_$2.json" <<'PY'
import json, os, statistics, sys
run, layout, mode, base_path = sys.argv[1:5]
acct = json.load(open(f"{run}/accounting.json"))
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
act = max(r["activation_bytes"] + r["workspace_bytes"] for r in acct)
rss = max(r["peak_mem_bytes"] for r in rows)
batch = 16
step = statistics.median(batch / r["images_per_s"] for r in rows[1:])
now = {"act": act, "rss": rss, "step": step}
if mode == "none":
    json.dump(now, open(base_path, "w"))
base = json.load(open(base_path))
ratio = lambda k: f"{now[k] / base[k]:.2f}x"
print(f"| {layout} | {mode} | {act / 2**20:.1f} | {ratio('act')} | {rss / 2**20:.0f} | {ratio('rss')} | "
      f"{step:.2f} | {ratio('step')} |")
PY
  done
done
