#!/usr/bin/env bash
# DiT training on the CPU beside the official DiT's model on PyTorch (a benchmark, not a test):
# bench_train (the project's Trainer, fp32, on the CPU backend with each GEMM kernel asked for)
# and benchmarks/gpu/torch_dit_bench.py --device cpu (tools/torch_dit.py, the same step: hybrid
# loss, AdamW, EMA), same model, latents, batch and thread count, alternating in one run (the
# order rotated every repetition). Prints images/s of each (median of the repetitions, best in
# brackets) and the ratios to PyTorch.
#   benchmarks/train_torch.sh [--build build-cpu] [--models "DiT-S/4 DiT-B/4"] [--threads 2]
#                             [--batch 8] [--steps 4] [--warmup 2] [--reps 3] [--kernels "auto eigen"]
set -euo pipefail
BUILD=build-cpu MODELS="DiT-S/4 DiT-B/4" THREADS=2 BATCH=8 STEPS=4 WARMUP=2 REPS=3 KERNELS="auto eigen" OUT=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --kernels) KERNELS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "train_torch.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
[[ -x "$BUILD/bin/bench_train" ]] || { echo "train_torch.sh: $BUILD/bin/bench_train is not built" >&2; exit 2; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "train_torch.sh: /usr/bin/python3 has no torch (apt install python3-torch)" >&2; exit 2; }
[[ -n "$OUT" ]] || OUT=$(mktemp -d /tmp/dit_train_torch.XXXXXX)
mkdir -p "$OUT"
COMMON=(--input-size 32 --channels 4 --num-classes 1000 --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP")
echo "train_torch.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), models $MODELS, $THREADS threads, batch $BATCH," \
     "$STEPS timed steps after $WARMUP, $REPS repetitions, kernels $KERNELS; logs in $OUT" >&2
run_side() {  # side model rep
  local side=$1 model=$2 rep=$3 tag
  tag="${side}_${model//\//_}_r$rep"
  cut -d' ' -f1 /proc/loadavg >>"$OUT/loadavg"
  if [[ $side == torch ]]; then
    OMP_NUM_THREADS=$THREADS /usr/bin/python3 "$here/gpu/torch_dit_bench.py" --device cpu --model "$model" \
      "${COMMON[@]}" --json "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1 || { cat "$OUT/$tag.log" >&2; exit 1; }
  else
    OMP_NUM_THREADS=$THREADS DIT_CPU_GEMM=${side#ours_} "$BUILD/bin/bench_train" --backend cpu --model "$model" \
      "${COMMON[@]}" --json "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1 || { cat "$OUT/$tag.log" >&2; exit 1; }
  fi
  echo "  $tag: $(grep -m1 -o 'images/s [0-9.]*' "$OUT/$tag.log")" >&2
}
sides=(torch)
for k in $KERNELS; do sides+=("ours_$k"); done
for model in $MODELS; do
  for rep in $(seq 1 "$REPS"); do
    n=${#sides[@]}
    for i in $(seq 0 $((n - 1))); do run_side "${sides[$(((i + rep) % n))]}" "$model" "$rep"; done
  done
done
/usr/bin/python3 - "$OUT" "$MODELS" "$REPS" "$KERNELS" "$THREADS" "$BATCH" <<'PY'
import json, statistics, sys
out, models, reps, kernels, threads, batch = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5], sys.argv[6]
load = [float(x) for x in open(f"{out}/loadavg").read().split()]
print(f"{threads} threads, batch {batch}, 32x32x4 latents, fp32; 1-minute load average {min(load):.1f}-{max(load):.1f}")
head = "| model | PyTorch images/s | " + " | ".join(f"ours ({k}) images/s | ours ({k}) / PyTorch" for k in kernels) + " |"
print(head)
print("|" + " --- |" * (2 + 2 * len(kernels)))
def get(side, model):
    v = [json.load(open(f"{out}/{side}_{model.replace('/', '_')}_r{r}.json"))["images_per_s"] for r in range(1, reps + 1)]
    return statistics.median(v), max(v)
for m in models:
    tm, tb = get("torch", m)
    cells = [f"{tm:.3f} ({tb:.3f})"]
    for k in kernels:
        om, ob = get(f"ours_{k}", m)
        cells += [f"{om:.3f} ({ob:.3f})", f"{om / tm:.2f}x ({ob / tb:.2f}x)"]
    print(f"| {m} | " + " | ".join(cells) + " |")
PY
