#!/usr/bin/env bash
# The kl-f8 VAE's encode and decode speed beside PyTorch (a benchmark, not a test): bench_vae
# (the project's Vae on the CPU backend) and vae_torch.py (diffusers' own AutoencoderKL on Debian's
# PyTorch, float32), same config, batch, image size and thread count, alternating in one run
# (REPS repetitions per thread count, the order swapped every repetition), and between them the
# machine's GEMM ceiling (bench_gemm's 1024^3 fp32 GEMM through the backend, same threads).
# Prints a markdown table: images/s of each side (the median over the repetitions, and the best,
# the run least disturbed by other work on the machine), ours / PyTorch of both, each side's
# median GFLOP/s and its share (ours / PyTorch) of three ceilings: the GEMM ceiling measured in the
# run (the backend's Eigen GEMM, AVX2), the one ../shared/ENV.md states (215 GFLOP/s for the 2
# cores, 107.5 per core) and the cores' AVX-512 FMA peak (217 GFLOP/s a core, measured with a loop
# of 12 independent 512-bit FMAs; 256-bit ones give 106), and the 1-minute load average seen
# before the runs.
#   benchmarks/vae.sh [--build build] [--diffusers-src /tmp/diffusers_src] [--threads "1 2"]
#                     [--reps 3] [--iters 1] [--warmup 1] [--size 256] [--batch 1] [--out DIR]
set -euo pipefail
BUILD=build DIFFUSERS=/tmp/diffusers_src THREADS="1 2" REPS=3 ITERS=1 WARMUP=1 SIZE=256 BATCH=1 OUT=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --diffusers-src) DIFFUSERS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "vae.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
for bin in bench_vae bench_gemm; do
  [ -x "$BUILD/bin/$bin" ] || { echo "vae.sh: $BUILD/bin/$bin is not built" >&2; exit 2; }
done
if [ -z "$OUT" ]; then
  OUT=$(mktemp -d /tmp/dit_vae_bench.XXXXXX)
fi
mkdir -p "$OUT"
COMMON=(--batch "$BATCH" --size "$SIZE" --iters "$ITERS" --warmup "$WARMUP")
echo "vae.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), threads $THREADS, $REPS repetitions, batch $BATCH, ${SIZE}x${SIZE}," \
     "warm-up $WARMUP, timed $ITERS per pass; logs in $OUT" >&2
ours() {  # threads rep
  cut -d' ' -f1 /proc/loadavg >>"$OUT/loadavg_t$1"
  OMP_NUM_THREADS=$1 "$BUILD/bin/bench_vae" --backend cpu --threads "$1" "${COMMON[@]}" \
    --json "$OUT/ours_t$1_r$2.json" >"$OUT/ours_t$1_r$2.log" 2>&1 || { cat "$OUT/ours_t$1_r$2.log" >&2; exit 1; }
  grep -E "encode:|decode:" "$OUT/ours_t$1_r$2.log" | sed "s/^/  ours  t$1 r$2/" >&2
}
torch() {
  cut -d' ' -f1 /proc/loadavg >>"$OUT/loadavg_t$1"
  OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 /usr/bin/python3 "$here/vae_torch.py" --diffusers-src "$DIFFUSERS" \
    --threads "$1" "${COMMON[@]}" --json "$OUT/torch_t$1_r$2.json" >"$OUT/torch_t$1_r$2.log" 2>&1 ||
    { cat "$OUT/torch_t$1_r$2.log" >&2; exit 1; }
  grep -E "encode:|decode:" "$OUT/torch_t$1_r$2.log" | sed "s/^/  torch t$1 r$2/" >&2
}
gemm() {
  OMP_NUM_THREADS=$1 "$BUILD/bin/bench_gemm" --benchmark_filter='BM_BackendGemm/1024/1024/1024' \
    --benchmark_min_time=0.5 --benchmark_format=json >"$OUT/gemm_t$1_r$2.json" 2>/dev/null
}
for rep in $(seq 1 "$REPS"); do
  for t in $THREADS; do
    if [ $((rep % 2)) -eq 1 ]; then ours "$t" "$rep"; gemm "$t" "$rep"; torch "$t" "$rep"
    else torch "$t" "$rep"; gemm "$t" "$rep"; ours "$t" "$rep"; fi
  done
done
/usr/bin/python3 - "$OUT" "$THREADS" "$REPS" <<'PY'
import json, statistics, sys
out, threads, reps = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
ENV_PER_CORE = 107.5      # ../shared/ENV.md: ~215 GFLOP/s fp32 for the machine's 2 cores
FMA512_PER_CORE = 217.0   # 12 independent 512-bit FMAs in a loop, one core
med = statistics.median
print("| threads | pass | GFLOP per image | ours images/s (best) | PyTorch images/s (best) | ours / PyTorch (best) | "
      "ours GFLOP/s | PyTorch GFLOP/s | GEMM ceiling GFLOP/s (bench_gemm) | % of it, ours / PyTorch | "
      "% of ENV.md's ceiling | % of AVX-512 FMA peak | load average |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for t in threads:
    ours = [json.load(open(f"{out}/ours_t{t}_r{r}.json")) for r in range(1, reps + 1)]
    torch = [json.load(open(f"{out}/torch_t{t}_r{r}.json")) for r in range(1, reps + 1)]
    ceil = med([b["GFLOP/s"] / 1e9 for r in range(1, reps + 1)
                for b in json.load(open(f"{out}/gemm_t{t}_r{r}.json"))["benchmarks"]])
    load = [float(x) for x in open(f"{out}/loadavg_t{t}").read().split()]
    share = lambda a, b, c: f"{100 * a / c:.0f}% / {100 * b / c:.0f}%"
    for p in ("encode", "decode"):
        gflop = 2 * ours[0][f"{p}_gmac_per_image"]
        assert abs(gflop - 2 * torch[0][f"{p}_gmac_per_image"]) < 1e-5 * gflop, "FLOP counts differ"
        o = [x[f"{p}_images_s"] for x in ours]
        q = [x[f"{p}_images_s"] for x in torch]
        oi, ti = med(o), med(q)
        og, tg = oi * gflop, ti * gflop
        print(f"| {t} | {p} | {gflop:.1f} | {oi:.4f} ({max(o):.4f}) | {ti:.4f} ({max(q):.4f}) | "
              f"{oi / ti:.2f}x ({max(o) / max(q):.2f}x) | {og:.1f} | {tg:.1f} | {ceil:.1f} | {share(og, tg, ceil)} | "
              f"{share(og, tg, ENV_PER_CORE * int(t))} | {share(og, tg, FMA512_PER_CORE * int(t))} | "
              f"{min(load):.1f}-{max(load):.1f} |")
    if not all(x["finite"] for x in ours + torch):
        print(f"| {t} | WARNING: non-finite outputs in a run |")
PY
