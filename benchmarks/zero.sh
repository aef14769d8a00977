#!/usr/bin/env bash
# ZeRO levels side by side (a benchmark, not a test): DiT-S/4 on 32x32 Fashion-MNIST at dp 4 (4
# ranks, one thread each), optim.zero = 1, 2, 3, each with optim.overlap off and on, in ROUNDS
# rounds whose order rotates, so a drift of the machine's speed falls on every setting alike.
# Prints a markdown table: the median step time over rounds (each round's median after the first
# step), its spread over rounds (min-max), the ratio to zero 1 without overlap, and what rank 0
# holds (parameter and gradient bytes from accounting.json, peak process memory). The losses of
# all settings must agree bit for bit; the script fails otherwise.
#   benchmarks/zero.sh [build/bin/dit_mp] [rounds] [steps] [model]
set -euo pipefail
DIT_MP=${1:-build/bin/dit_mp}
ROUNDS=${2:-3}
STEPS=${3:-5}
MODEL=${4:-DiT-S/4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} DIT_PLOTS=0 OMP_NUM_THREADS=1
scratch=$(mktemp -d /tmp/dit_zero.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
"$DIT_MP" prepare-data fashion-mnist --split test --out "$scratch/fm.h5" >/dev/null
# One microbatch a step per rank: each unit's gradients are final after its backward (zero 2/3 free them then).
ARGS=(--tp 1 --pp 1 --model "$MODEL" --set train.global_batch=8 --set train.micro_batch=2 --set train.warmup=0
      --set sample.num_steps=2 --set sample.per_class=1 --log-every 1 --steps "$STEPS" --data "$scratch/fm.h5")
SETTINGS=("1 false" "1 true" "2 false" "2 true" "3 false" "3 true")
for ((round = 0; round < ROUNDS; ++round)); do
  for ((i = 0; i < ${#SETTINGS[@]}; ++i)); do
    set -- ${SETTINGS[(i + round) % ${#SETTINGS[@]}]}
    run="$scratch/z$1_$2_r$round"
    mpirun -n 4 --bind-to none "$DIT_MP" --zero "$1" --set optim.overlap="$2" --run-dir "$run" "${ARGS[@]}" \
      >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
  done
done
/usr/bin/python3 - "$scratch" "$ROUNDS" <<'PY'
import json, statistics, sys
scratch, rounds = sys.argv[1], int(sys.argv[2])
table, losses = {}, {}
for z in (1, 2, 3):
    for ov in ("false", "true"):
        times, rss = [], 0
        for r in range(rounds):
            run = f"{scratch}/z{z}_{ov}_r{r}"
            rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"eval"' not in l]
            times.append(statistics.median(8 / x["images_per_s"] for x in rows[1:]))
            rss = max(rss, max(x["peak_mem_bytes"] for x in rows))
            losses.setdefault((z, ov), [x["loss"] for x in rows])
            acct = json.load(open(f"{run}/accounting.json"))[0]
        table[(z, ov)] = (statistics.median(times), min(times), max(times), acct["param_bytes"], acct["grad_bytes"], rss)
base = table[(1, "false")][0]
print(f"| zero | overlap | step s (median of {rounds}) | min-max over rounds | vs zero 1, no overlap | "
      "param MiB | grad MiB | peak RSS MiB |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for (z, ov), (med, lo, hi, p, g, rss) in table.items():
    print(f"| {z} | {'on' if ov == 'true' else 'off'} | {med:.3f} | {lo:.3f}-{hi:.3f} | {med / base:.2f}x | "
          f"{p / 2**20:.1f} | {g / 2**20:.1f} | {rss / 2**20:.0f} |")
ref = losses[(1, "false")]
bad = [k for k, v in losses.items() if v != ref]
print("losses: bit-identical across every setting" if not bad else f"losses DIFFER: {bad}")
sys.exit(1 if bad else 0)
PY
