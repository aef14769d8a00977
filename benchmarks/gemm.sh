#!/usr/bin/env bash
# The CPU GEMM against the cores' FMA peak, measured in the same run: bench_gemm at each thread
# count (the peak first, then every kernel and OpenBLAS on the same shapes), printed as one table
# of GFLOP/s and share of the peak. Runs the thread counts --reps times, alternating.
#   benchmarks/gemm.sh [--build build-cpu] [--threads "1 2"] [--reps 2] [--json out.json]
set -euo pipefail
BUILD=build-cpu THREADS="1 2" REPS=2 JSON=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    *) echo "gemm.sh: unknown argument '$1' (expected --build, --threads, --reps or --json)" >&2; exit 2 ;;
  esac
done
BENCH="$BUILD/bin/bench_gemm"
[[ -x "$BENCH" ]] || { echo "gemm.sh: $BENCH not found (build the benchmarks: scripts/build.sh)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for ((rep = 0; rep < REPS; ++rep)); do
  for t in $THREADS; do
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$BENCH" --benchmark_format=json \
      --benchmark_out="$WORK/t${t}_r${rep}.json" --benchmark_out_format=json >/dev/null
  done
done
python3 - "$WORK" "$JSON" "$(cat /proc/loadavg)" <<'EOF'
import glob, json, os, re, sys, statistics
work, out, load = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {}  # (threads, case, kernel) -> [GFLOP/s]
peaks = {}
for f in sorted(glob.glob(os.path.join(work, "*.json"))):
    t = int(re.search(r"t(\d+)_r", f).group(1))
    for b in json.load(open(f))["benchmarks"]:
        g = b["GFLOP/s"] / 1e9
        name = b["name"].replace("/real_time", "")
        if name.startswith("BM_FmaPeak"):
            peaks.setdefault(t, []).append(g)
            continue
        fn, *dims = name.split("/")
        shape = "x".join(dims[:3])
        kernel = {"BM_BackendGemm": "backend (default)", "BM_OpenBlasSgemm": "OpenBLAS"}.get(fn, b.get("label", fn))
        rows.setdefault((t, shape, kernel), []).append(g)
print(f"load average at the end: {load}")
print("| threads | m x n x k | GEMM | GFLOP/s (median of runs) | % of FMA peak |")
print("| ---: | --- | --- | ---: | ---: |")
result = {"peak": {}, "rows": []}
for t in sorted(peaks):
    p = statistics.median(peaks[t])
    result["peak"][t] = p
    print(f"| {t} | FMA peak | {len(peaks[t])} runs | {p:.1f} | 100% |")
    for (tt, shape, kernel), v in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] != "1024x1024x1024", kv[0][1], kv[0][2])):
        if tt != t:
            continue
        g = statistics.median(v)
        result["rows"].append({"threads": t, "shape": shape, "kernel": kernel, "gflops": g, "share_of_peak": g / p})
        print(f"| {t} | {shape} | {kernel} | {g:.1f} | {100 * g / p:.0f}% |")
if out:
    json.dump(result, open(out, "w"), indent=1)
EOF
