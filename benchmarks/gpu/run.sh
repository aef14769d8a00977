#!/usr/bin/env bash
# The staged device check (docs/gpu.md). Stages run in the order that proves the most in the first
# minutes, each under its own timeout within one budget (DIT_GPU_BUDGET_S, default 300 s), and each
# writes its row to $OUT/summary.txt as it finishes, so a run killed at any point leaves its table:
#   1 environment: nvidia-smi, unresolved libraries (ldd), library versions as loaded
#   2 one small op test under CUDA_LAUNCH_BLOCKING=1 (the first kernels and copies)
#   3 fp32 conformance            4 bf16/fp16 conformance with DIT_ATTENTION=kernel (no cuDNN)
#   5 the default attention path (cuDNN, its fallback to the composed attention, injected
#     failures; a case cuDNN declines is a NOT SERVED row, not a failure), then bench_attention
#   6 golden verify in fp32 and bf16        7 a 5-step 1-rank bf16 training run, then NCCL at 1 rank
#   8 throughput of DiT-B/2 and DiT-XL/2 beside PyTorch (MFU, host syncs, primitive/gap split)
#   9 the kl-f8 VAE: encode and decode images/s and TFLOP/s at 256x256, fp32 and bf16, beside
#     diffusers' AutoencoderKL on PyTorch when the pack carries its files (time kept for it in 8)
#   bash benchmarks/gpu/run.sh --build .gpu --out $OUT      (device tool: carry [".gpu"])
#   bash benchmarks/gpu/run.sh --build .gpu --out /tmp/o --cpu-smoke   (no GPU: every stage on the CPU)
# --build DIR: a pack from scripts/pack_gpu.sh (env.sh, data/, pack.tar.xz, unpacked first) or a
#   build tree (bin/dit_mp, tests/dit_tests, bin/bench_train; system MPI). Without --build, or when
#   the carried binaries do not start, it builds from source (needs the dependencies' headers).
# --cpu-smoke: where there is no GPU, run each GPU stage's CPU counterpart (cpu backends, a tiny
#   model), so the whole script and its table are exercised.
# --stages LIST: only these stages (e.g. 5,8,9; stage 1 always runs), to rerun part of a check.
# $OUT receives four files (the device tool returns at most 8): summary.txt (the table, rewritten
# after every row), table.md (the same as a Markdown table for docs/gpu.md), logs.tar.gz (every
# step's log, rewritten after every row) and results.json (benchmark numbers, at the end).
# Exit status: 0 when no row failed or timed out, else 1.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=""
OUT=${OUT:-/tmp/dit_gpu_out}
CPU_SMOKE=0
BUDGET=${DIT_GPU_BUDGET_S:-300}
BENCH=("DiT-B/2:256,128" "DiT-XL/2:256,128,64")  # model and batches, largest first; shorter model first
STAGES=all
BENCH_STEPS=${DIT_BENCH_STEPS:-8}
BENCH_WARMUP=${DIT_BENCH_WARMUP:-2}
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --cpu-smoke) CPU_SMOKE=1; shift ;;
    --stages) STAGES=$2; shift 2
      [[ $STAGES =~ ^[1-9](,[1-9])*$ ]] || { echo "run.sh: --stages $STAGES: expected stage numbers 1-9, e.g. 5,8" >&2; exit 2; } ;;
    *) echo "run.sh: unknown argument $1 (expected --build DIR, --out DIR, --cpu-smoke, --stages LIST)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/dit_gpu_work.XXXXXX)
LOGS=$WORK/logs
mkdir -p "$LOGS"
STARTED=$(date -u +%Y-%m-%dT%H:%MZ)
export GTEST_COLOR=no  # plain logs: the rows are read from them (mpirun would otherwise keep colours)

# ---- the table: one row per step, written out after every row --------------------------------
declare -a ROWS=() MD_ROWS=()
OUT_OF_TIME=0  # set when a step was not started for want of time; its row says so
RESERVE=0      # seconds of the budget kept for later stages (stage 8 leaves stage 9 its time)
FAILED_ROWS=0
want() { [[ $STAGES == all || ,$STAGES, == *",$1,"* ]]; }  # is stage $1 selected?
# Every log so far, as one archive: a killed run still returns them (one file of the eight).
archive_logs() {
  tar czf "$OUT/logs.tar.gz.tmp" -C "$WORK" logs 2>/dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}
write_table() {
  {
    echo "dit_mp GPU check, started $STARTED, ${SECONDS} s so far (budget $BUDGET s)"
    printf '%-44s %-10s %s\n' step result notes
    for r in "${ROWS[@]}"; do echo "$r"; done
  } >"$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
  {
    echo "GPU check started $STARTED, ${SECONDS} s (budget $BUDGET s)."
    echo
    echo "| step | result | notes |"
    echo "| --- | --- | --- |"
    for r in "${MD_ROWS[@]}"; do echo "$r"; done
  } >"$OUT/table.md.tmp" && mv "$OUT/table.md.tmp" "$OUT/table.md"
  archive_logs
}
row() {
  local note=$3
  [[ $2 == "NOT RUN" && $OUT_OF_TIME == 1 ]] && note="time budget spent (DIT_GPU_BUDGET_S=$BUDGET)"
  OUT_OF_TIME=0
  [[ $2 == FAIL* || $2 == TIMEOUT ]] && FAILED_ROWS=$((FAILED_ROWS + 1))
  ROWS+=("$(printf '%-44s %-10s %s' "$1" "$2" "$note")")
  MD_ROWS+=("| $1 | $2 | ${note//|/\\|} |")
  echo "[${SECONDS}s] $1: $2 $note"
  write_table
}
logname() { echo "$LOGS/${1//[^A-Za-z0-9_.-]/_}.log"; }
# The step's limit within what is left of the budget (0: none left).
limit() {
  local left=$((BUDGET - SECONDS - 5 - RESERVE))
  (( left < 10 )) && { echo 0; return; }
  (( $1 < left )) && echo "$1" || echo "$left"
}
# run NAME SECONDS CMD...: under timeout, its log in $LOGS (archived after every row); sets RC, TOOK.
run() {
  local name=$1 lim
  lim=$(limit "$2"); shift 2
  LOG=$(logname "$name")
  if [[ $lim == 0 ]]; then
    RC=125; TOOK=0; OUT_OF_TIME=1; echo "not run: time budget spent" >"$LOG"; return 125
  fi
  local t0=$SECONDS
  echo "+ $*" >"$LOG"
  timeout -k 5 "$lim" "$@" >>"$LOG" 2>&1
  RC=$?
  TOOK=$((SECONDS - t0))
  [[ $RC == 124 || $RC == 137 ]] && echo "run.sh: timed out after $lim s" >>"$LOG"
  return $RC
}
status() {
  case $RC in
    0) echo PASS ;; 124|137) echo TIMEOUT ;; 125) echo "NOT RUN" ;; *) echo "FAIL($RC)" ;;
  esac
}
why_failed() { grep -v '^+ ' "$LOG" | grep -iE "error|fail|what\(\)|not found|cannot|refused" | sed -n 1p | cut -c1-120; }

# ---- 1. environment --------------------------------------------------------------------------
HAVE_GPU=0
if ! command -v nvidia-smi >/dev/null; then GPU="no nvidia-smi on PATH"
else
  GPU=$(timeout 15 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed -n 1p)
  timeout 15 nvidia-smi -L >/dev/null 2>&1 && HAVE_GPU=1
fi
timeout 15 nvidia-smi >"$LOGS/nvidia-smi_start.log" 2>&1
NO_GPU_WHY="no GPU here ($GPU)"
SMOKE=0; [[ $HAVE_GPU == 0 && $CPU_SMOKE == 1 ]] && SMOKE=1
row "1 gpu (nvidia-smi)" "$([[ $HAVE_GPU == 1 ]] && echo PASS || echo "NO GPU")" "$GPU"
PY=""
for p in python3 /usr/bin/python3 /opt/torch/.venv/bin/python3; do
  if command -v "$p" >/dev/null && timeout 30 "$p" -c "import torch" >/dev/null 2>&1; then PY=$(command -v "$p"); break; fi
done
TORCH=$([[ -n $PY ]] && timeout 30 "$PY" -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -1)
# cuDNN, NCCL, cuBLAS and the CUDA runtime from the pip packages of that python, then the toolkit.
CUDA_LIBS=""
if [[ -n $PY ]]; then
  CUDA_LIBS=$(timeout 30 "$PY" - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = []
for r in roots:
    for so in sorted(glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True)):
        d = os.path.dirname(so)
        if d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
)
fi
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
for d in ${NVCC:+$(dirname "$(dirname "$NVCC")")/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && CUDA_LIBS=${CUDA_LIBS:+$CUDA_LIBS:}$d
done
echo "python: ${PY:-none} torch: ${TORCH:-none}" >"$LOGS/python.log"
echo "CUDA library folders: $CUDA_LIBS" >>"$LOGS/python.log"

# Binaries: the carried pack (unpacked into the work folder), a build tree, or a source build.
PACK_LIB=""
DIT_MPIRUN=$(command -v mpirun || true)
OURS=(env)  # until a build is chosen: nothing to run
DIT_MP="" DIT_TESTS="" DIT_MPI_TESTS="" BENCH_TRAIN="" BENCH_ATTN="" BENCH_VAE=""
use_build() {
  BUILD=$1
  DIT_MP=$BUILD/bin/dit_mp
  DIT_TESTS=$BUILD/bin/dit_tests
  [[ -x $DIT_TESTS ]] || DIT_TESTS=$BUILD/tests/dit_tests
  DIT_MPI_TESTS=$BUILD/bin/dit_mpi_tests
  [[ -x $DIT_MPI_TESTS ]] || DIT_MPI_TESTS=$BUILD/tests/dit_mpi_tests
  BENCH_TRAIN=$BUILD/bin/bench_train
  BENCH_ATTN=$BUILD/bin/bench_attention
  BENCH_VAE=$BUILD/bin/bench_vae
  PACK_LIB=""
  if [[ -f $BUILD/env.sh ]]; then
    # shellcheck disable=SC1091
    source "$BUILD/env.sh"
    PACK_LIB=$DIT_PACK_LIB
  else
    unset "${!OPAL_@}" "${!PMIX_@}" OMPI_MCA_mca_base_component_path OMPI_MCA_mca_base_param_files \
      HWLOC_PLUGINS_PATH DIT_PACK
    DIT_MPIRUN=$(command -v mpirun || true)
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  LIBPATH=${PACK_LIB:+$PACK_LIB:}$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  OURS=(env "LD_LIBRARY_PATH=$LIBPATH")
}
starts() { "${OURS[@]}" "$DIT_MP" --help >/dev/null 2>&1; }
build_from_source() {
  local b=$WORK/build
  run "configure (source build)" 120 cmake -S "$ROOT" -B "$b" -DDIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release || { row "source build" "$(status)" "configure: $(why_failed)"; return 1; }
  run "build (source build)" 300 cmake --build "$b" -j "$(nproc)" --target dit_mp dit_tests dit_mpi_tests bench_train bench_attention \
    bench_vae ||
    { row "source build" "$(status)" "$(why_failed)"; return 1; }
  row "source build" PASS "$TOOK s"
  use_build "$b"
}
unpack() {
  local dst=$WORK/pack
  mkdir -p "$dst"
  cp -r "$BUILD/env.sh" "$BUILD/data" "$dst/" 2>/dev/null
  if command -v xz >/dev/null; then tar xJf "$BUILD/pack.tar.xz" -C "$dst"
  else python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$BUILD/pack.tar.xz" "$dst"; fi
  BUILD=$dst
}
if [[ -n $BUILD && -f $BUILD/pack.tar.xz ]]; then
  t0=$SECONDS
  unpack >"$LOGS/unpack.log" 2>&1 || row "1 unpack" FAIL "$(tail -1 "$LOGS/unpack.log")"
  UNPACK_S=$((SECONDS - t0))
fi
if [[ -n $BUILD ]]; then use_build "$BUILD"; else build_from_source; fi
# Unresolved libraries of every binary, with the library path our programs get.
: >"$LOGS/ldd.log"
for b in "$DIT_MP" "$DIT_TESTS" "$DIT_MPI_TESTS" "$BENCH_TRAIN" "$BENCH_ATTN" "$BENCH_VAE"; do
  [[ -x $b ]] && { echo "== $b" >>"$LOGS/ldd.log"; "${OURS[@]}" ldd "$b" >>"$LOGS/ldd.log" 2>&1; }
done
MISSING=$(grep 'not found' "$LOGS/ldd.log" | awk '{print $1}' | sort -u | tr '\n' ' ')
if [[ -n $MISSING ]]; then row "1 libraries (ldd)" FAIL "unresolved: $MISSING(ldd.log)"
else row "1 libraries (ldd)" PASS "all resolved${UNPACK_S:+; pack unpacked in $UNPACK_S s}; torch: ${TORCH:-none}"; fi
if ! starts; then
  row "1 binaries" FAIL "dit_mp does not start${MISSING:+ (missing $MISSING)}"
  [[ -n $BUILD && ! -d $WORK/build ]] && build_from_source
fi
B=cuda; [[ $SMOKE == 1 ]] && B=cpu  # the backend the conformance stages test
# CPU smoke runs share the cores: one thread per process, or spinning OpenMP threads stall.
[[ $SMOKE == 1 ]] && export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [[ -x ${DIT_TESTS:-} ]]; then
  run "versions" 30 "${OURS[@]}" "$DIT_TESTS" --gtest_filter='GpuVersions.*'
  versions=$(grep -m1 -o 'versions: .*' "$LOG" | sed 's/versions: //')
  # Without a GPU no driver is expected: that one is not a problem here.
  problems=$(grep 'version problem: ' "$LOG" | sed 's/.*version problem: //' |
    { if [[ $HAVE_GPU == 0 ]]; then grep -v '^driver none' || true; else cat; fi } | tr '\n' ';')
  st=$(status); [[ -n $problems ]] && st=FAIL
  [[ -z $versions && $RC == 0 ]] && versions="none listed: this build has no CUDA backend"
  row "1 versions (as loaded)" "$st" "${versions:-$(why_failed)}${problems:+; $problems}"
else
  row "1 versions (as loaded)" "NOT RUN" "no test binary"
fi

# ---- 2-5: conformance ------------------------------------------------------------------------
# gtest_counts: from $LOG, RAN SKIPPED FAILED FIRST (the first failed test), NOT_SERVED (cases a
# fused library declined: their skip message starts with "not served by", not_served.h) and
# NOT_SERVED_WHY (the first such message).
gtest_counts() {
  RAN=$(grep -m1 -oE '[0-9]+ tests? from [0-9]+ test suites? ran' "$LOG" | awk '{print $1}')
  SKIPPED=$(grep -m1 -oE '\[  SKIPPED \] [0-9]+' "$LOG" | awk '{print $NF}')
  FAILED=$(grep -m1 -oE '\[  FAILED  \] [0-9]+ tests?,' "$LOG" | awk '{print $4}')
  FIRST=$(grep -m1 -oE '^\[  FAILED  \] [A-Za-z0-9_/.]+' "$LOG" | awk '{print $NF}')
  NOT_SERVED=$(grep -c '^not served by' "$LOG")
  NOT_SERVED_WHY=$(grep -m1 '^not served by' "$LOG" | cut -c1-160)
}
# conformance NAME LIMIT FILTER [ENV...]: the tests of FILTER; the row counts them and gives the
# worst error as a share of its tolerance. Cases cuDNN declined get a row of their own, NOT SERVED
# with cuDNN's message: a fact about its coverage on this GPU, not a failure.
conformance() {
  local name=$1 lim=$2 filter=$3
  shift 3
  if [[ ! -x ${DIT_TESTS:-} ]]; then row "$name" "NOT RUN" "no test binary"; return; fi
  if [[ $HAVE_GPU == 0 && $SMOKE == 0 ]]; then row "$name" "NOT RUN" "$NO_GPU_WHY"; return; fi
  run "$name" "$lim" env "$@" "${OURS[@]}" "$DIT_TESTS" --gtest_filter="$filter"
  local st worst
  st=$(status)
  gtest_counts
  worst=$(awk '/rel L2/ { for (i = 1; i < NF; ++i) if ($i == "L2") e = $(i+1); t = $NF; gsub(/[()]/, "", t);
    if (t + 0 > 0 && e / t > w) { w = e / t; l = $0 } } END { if (w > 0) printf "worst %.2f of tol: %s", w, l }' "$LOG" |
    sed 's/  */ /g' | cut -c1-90)
  local note="${RAN:-?} ran, ${SKIPPED:-0} skipped, ${FAILED:-0} failed${FIRST:+ (first: $FIRST)}; $TOOK s${worst:+; $worst}"
  [[ $st == PASS && -n $RAN && ${SKIPPED:-0} == "$RAN" && $NOT_SERVED == 0 ]] && st=SKIP
  row "$name" "$st" "$note"
  (( NOT_SERVED > 0 )) && row "$name: declined" "NOT SERVED" "$NOT_SERVED case(s); first: $NOT_SERVED_WHY"
  return 0
}
if want 2; then
  if [[ $HAVE_GPU == 0 && $SMOKE == 0 ]]; then row "2 op test (CUDA_LAUNCH_BLOCKING=1)" "NOT RUN" "$NO_GPU_WHY"
  elif [[ ! -x ${DIT_TESTS:-} ]]; then row "2 op test (CUDA_LAUNCH_BLOCKING=1)" "NOT RUN" "no test binary"
  else
    run "2 op test" 45 env CUDA_LAUNCH_BLOCKING=1 "${OURS[@]}" "$DIT_TESTS" \
      --gtest_filter="Backends/BackendOps.CopyMovesDataAndFillWritesEveryElement/$B:Backends/BackendOps.GemmWithIntegerInputsIsExact/$B"
    st=$(status); [[ $RC == 0 ]] && grep -q '\[  SKIPPED \] [0-9]' "$LOG" && st=SKIP
    note="fill, copies, integer GEMM on $B; $TOOK s"
    [[ $RC != 0 ]] && note="$note; $(why_failed)"
    row "2 op test (CUDA_LAUNCH_BLOCKING=1)" "$st" "$note"
  fi
fi
want 3 && conformance "3 conformance fp32 ($B)" 90 "Backends/*/$B:Shapes/ComposedAttentionConformance.*/${B}_T*"
want 4 && conformance "4 conformance bf16, fp16 (kernel attention)" 90 \
  "Backends/*/${B}_bf16:Backends/*/${B}_fp16:Shapes/ComposedAttentionConformance.*/${B}_bf16_T*" DIT_ATTENTION=kernel
want 5 && conformance "5 default attention path (cuDNN, fallback)" 75 \
  "Paths/CudaAttention.*:AttentionFallback.*:Backends/BackendOps.Attention*/${B}_bf16:Backends/BackendOps.Attention*/${B}_fp16"

# ---- 5. bench_attention: the path training takes, at DiT-XL/2's shapes --------------------------
RESULTS=()
if want 5; then
  if [[ -x ${BENCH_ATTN:-} && ( $HAVE_GPU == 1 || $SMOKE == 1 ) ]]; then
    for shape in "32 256 16 72" "32 256 16 64"; do  # DiT-XL/2 at 256x256 (E 72), and E 64
      set -- $shape
      be=cuda:bf16; [[ $SMOKE == 1 ]] && { be=cpu:bf16; set -- 2 64 4 "$4"; }
      run "attention $be E$4" 25 "${OURS[@]}" "$BENCH_ATTN" --backend "$be" --batch "$1" --tokens "$2" --heads "$3" \
        --head-dim "$4" --reps 5 --json "$LOGS/attention_E$4.json"
      [[ $RC == 0 ]] && RESULTS+=("$LOGS/attention_E$4.json")
      note=$(grep -o 'forward.*' "$LOG" | tail -1 | cut -c1-120)
      [[ $RC != 0 && $RC != 125 ]] && note="${note:+$note; }$(why_failed)"
      row "5 attention fwd/bwd $be N$1 T$2 H$3 E$4" "$(status)" "$note"
    done
  else
    row "5 attention fwd/bwd bf16" "NOT RUN" "$([[ -x ${BENCH_ATTN:-} ]] && echo "$NO_GPU_WHY" || echo "no bench_attention")"
  fi
fi

# ---- 6. golden verify in fp32 and bf16 ---------------------------------------------------------
GOLDEN=$ROOT/tests/data/dit_tiny_golden.h5
verify_note() {
  local sum fails
  sum=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$LOG" | tail -1)
  fails=$(grep -E ' FAIL$' "$LOG" | sed -n 1,2p | awk '{print $1 " " $2}' | tr '\n' ' ')
  echo "${sum:-$(why_failed)}${fails:+; first: $fails}; $TOOK s"
}
if want 6; then
  for prec in fp32 bf16; do
    if [[ $HAVE_GPU == 0 && $SMOKE == 0 ]]; then row "6 verify $prec (tiny golden)" "NOT RUN" "$NO_GPU_WHY"; continue; fi
    run "verify $prec" 45 "${OURS[@]}" "$DIT_MP" verify --backend "$B" --precision "$prec" --golden "$GOLDEN"
    row "6 verify $prec (tiny golden, $B)" "$(status)" "$(verify_note)"
    # A 16-bit failure on the default path: is it the attention? The same with the composed one.
    if [[ $prec == bf16 && $RC != 0 && $RC != 125 ]]; then
      run "verify bf16 composed" 45 env DIT_ATTENTION=composed "${OURS[@]}" "$DIT_MP" verify --backend "$B" \
        --precision bf16 --golden "$GOLDEN"
      row "6 verify bf16, DIT_ATTENTION=composed" "$(status)" "$(verify_note)"
    fi
  done
fi

# ---- 7. a 5-step 1-rank bf16 training run, then NCCL at one rank --------------------------------
make_dataset() {
  local py
  for py in "$PY" python3 /usr/bin/python3; do [[ -n $py ]] && "$py" -c "import numpy" 2>/dev/null && break; done
  "$py" - "$WORK/npy" <<'PY' || return 1
import os, sys
import numpy as np
rng = np.random.default_rng(0)
for sub in ("features", "labels"):
    os.makedirs(os.path.join(sys.argv[1], sub))
for i in range(128):
    np.save(os.path.join(sys.argv[1], "features", f"{i}.npy"), rng.standard_normal((1, 4, 16, 16)).astype("<f4") * 5)
    np.save(os.path.join(sys.argv[1], "labels", f"{i}.npy"), np.array([i % 10], dtype=np.int64))
PY
  "${OURS[@]}" "$DIT_MP" prepare-data latents --features "$WORK/npy/features" --labels "$WORK/npy/labels" \
    --out "$WORK/latents16.h5"
}
train_note() {
  local m=$1/metrics.jsonl acct=$1/accounting.json
  [[ -s $m ]] || { why_failed; return; }
  python3 - "$m" "$acct" <<'PY' 2>/dev/null || tail -1 "$m"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = rows[-1]
print(f"{r['step']} steps, loss {rows[0]['loss']:.3f} -> {r['loss']:.3f}, {r['images_per_s']:.0f} img/s", end="")
try:
    a = json.load(open(sys.argv[2]))
    a = a[0] if isinstance(a, list) and a else a  # one record per rank
    for k in ("attention", "host_syncs_per_step"):
        if k in a:
            print(f", {k} {a[k]}", end="")
except OSError:
    pass
PY
  echo "; $TOOK s"
}
# The tiny latent DiT of stages 7: 16x16x4, hidden 128, depth 4.
TINY_MODEL=(--set model.input_size=16 --set model.in_channels=4 --set model.patch_size=2
  --set model.hidden_size=128 --set model.depth=4 --set model.num_heads=4 --set model.num_classes=10
  --set data.prepare=none --set sample.num_steps=4 --set sample.per_class=1 --set train.peak_tflops=989)
if want 7; then
  DATA=""
  if [[ -n ${DIT_PACK:-} && -f $DIT_PACK/data/latents16.h5 ]]; then DATA=$DIT_PACK/data/latents16.h5
  elif make_dataset >"$LOGS/make_dataset.log" 2>&1; then DATA=$WORK/latents16.h5; fi
  TRAIN_ROW="7 train 5 steps, 1 rank, bf16 ($B)"
  if [[ -z $DATA ]]; then row "$TRAIN_ROW" "NOT RUN" "no dataset (make_dataset.log)"
  elif [[ $HAVE_GPU == 0 && $SMOKE == 0 ]]; then row "$TRAIN_ROW" "NOT RUN" "$NO_GPU_WHY"
  else
    dir=$WORK/run_1
    run "train 1 rank" 60 "${OURS[@]}" "$DIT_MP" train --backend "$B" --precision bf16 --data "$DATA" \
      --run-dir "$dir" --overwrite --tp 1 --pp 1 --steps 5 --global-batch 16 --micro-batch 8 --log-every 1 --lr 1e-3 \
      "${TINY_MODEL[@]}"
    cp "$dir/metrics.jsonl" "$LOGS/train_1_rank.metrics.jsonl" 2>/dev/null
    cp "$dir/accounting.json" "$LOGS/train_1_rank.accounting.json" 2>/dev/null
    row "$TRAIN_ROW" "$(status)" "$(train_note "$dir")"
  fi
  # NCCL at one rank: the one-rank collectives (a real one-rank NCCL communicator through every
  # collective call) and one training step whose communicators are NCCL's (DIT_COMM=nccl; on the
  # CPU smoke, MPI's: NCCL needs a GPU).
  NCCL_ROW="7 NCCL, 1 rank (collectives, 1 train step)"
  if [[ ! -x ${DIT_MPI_TESTS:-} ]]; then row "$NCCL_ROW" "NOT RUN" "no dit_mpi_tests in the build"
  elif [[ $HAVE_GPU == 0 && $SMOKE == 0 ]]; then row "$NCCL_ROW" "NOT RUN" "$NO_GPU_WHY"
  elif [[ -z $DIT_MPIRUN ]]; then row "$NCCL_ROW" "NOT RUN" "no mpirun"
  else
    run "nccl one rank tests" 60 "${OURS[@]}" "$DIT_MPIRUN" -np 1 "$DIT_MPI_TESTS" \
      --gtest_filter='NcclComm.OneRankCollectives:NcclPlacement.*'
    tests_rc=$RC; tests_took=$TOOK; gtest_counts
    tests_note="tests: ${RAN:-?} ran, ${SKIPPED:-0} skipped, ${FAILED:-0} failed${FIRST:+ (first: $FIRST)}"
    [[ $tests_rc != 0 && -z $RAN ]] && tests_note="tests: $(why_failed)"
    comm=nccl; [[ $HAVE_GPU == 0 ]] && comm=mpi
    if [[ -n ${DATA:-} ]]; then
      run "train nccl" 60 env DIT_COMM=$comm "${OURS[@]}" "$DIT_MPIRUN" -np 1 "$DIT_MP" train --backend "$B" \
        --precision bf16 --data "$DATA" --run-dir "$WORK/run_nccl" --overwrite --tp 1 --pp 1 --steps 1 \
        --global-batch 8 --micro-batch 8 --log-every 1 "${TINY_MODEL[@]}"
      train_rc=$RC
      used=$(sed -n 's/.*(communication: \(.*\)), model .*/\1/p' "$LOG" | sed -n 1p)
      train_note="1 step, DIT_COMM=$comm: communication ${used:-?}"
      [[ $train_rc != 0 ]] && train_note="1 step, DIT_COMM=$comm: $(why_failed)"
      [[ $train_rc == 0 && $comm == nccl && $used != nccl ]] && { train_rc=1; train_note="$train_note (expected nccl)"; }
    else
      train_rc=125; train_note="no dataset for the step"
    fi
    RC=$tests_rc; [[ $RC == 0 && $train_rc != 0 && $train_rc != 125 ]] && RC=$train_rc
    row "$NCCL_ROW" "$(status)" "$tests_note; $train_note; $((tests_took + TOOK)) s"
  fi
fi

# ---- 8. throughput beside PyTorch (shorter model first: a timeout loses the least) ----------------
is_oom() { grep -qiE 'out of memory|OutOfMemoryError|cudaErrorMemoryAllocation' "$1"; }
# bench_pair LABEL MODEL INPUT BATCHES BACKEND PRECISION DEVICE STEPS WARMUP LIMIT_OURS LIMIT_TORCH [EXTRA...]
# Ours tries BATCHES largest first; PyTorch starts at the batch ours ran and, when it runs out of
# memory, tries the smaller ones. The row names the batch each ran.
bench_pair() {
  local label=$1 model=$2 input=$3 batches=$4 be=$5 prec=$6 dev=$7 steps=$8 warm=$9 lo=${10} lt=${11}
  shift 11
  local tag=${model//[^A-Za-z0-9]/_} b ok=0 ours_json="" torch_json="" used="" tb=""
  for b in ${batches//,/ }; do
    ours_json=$LOGS/bench_${tag}_b${b}_ours.json
    run "bench $model b$b ours" "$lo" "${OURS[@]}" "$BENCH_TRAIN" --model "$model" --input-size "$input" --channels 4 \
      --backend "$be" --precision "$prec" --batch "$b" --steps "$steps" --warmup "$warm" --json "$ours_json" "$@"
    if [[ $RC == 0 ]]; then ok=1; used=$b; break; fi
    [[ $RC == 124 || $RC == 137 || $RC == 125 ]] && break  # out of time: no smaller try
  done
  local ours_rc=$RC ours_log=$LOG start=${used:-${batches%%,*}} torch_ok=0
  RC=125
  if [[ -n $PY ]]; then
    for b in ${batches//,/ }; do
      (( b > start )) && continue
      torch_json=$LOGS/bench_${tag}_b${b}_torch.json
      run "bench $model b$b torch" "$lt" env PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/gpu/torch_dit_bench.py" \
        --model "$model" --input-size "$input" --channels 4 --batch "$b" --steps "$steps" --warmup "$warm" \
        --device "$dev" --precision "$prec" --json "$torch_json" "$@"
      if [[ $RC == 0 ]]; then torch_ok=1; tb=$b; break; fi
      is_oom "$LOG" || break  # only running out of memory is worth a smaller batch
    done
  fi
  local torch_rc=$RC torch_log=$LOG
  [[ $ok == 1 ]] && RESULTS+=("$ours_json")
  [[ $torch_ok == 1 ]] && RESULTS+=("$torch_json")
  local st=PASS
  if [[ $ok == 0 ]]; then RC=$ours_rc; st=$(status); fi
  local note
  note=$(python3 - "$ours_json" "$torch_json" "$ok" "$torch_ok" "$used" "$tb" <<'PY' 2>&1
import json, sys
def load(p, ok):
    try:
        return json.load(open(p)) if ok == "1" else None
    except OSError:
        return None
o, t = load(sys.argv[1], sys.argv[3]), load(sys.argv[2], sys.argv[4])
ob, tb = sys.argv[5], sys.argv[6]
part = []
if o:
    k = o.get("kernel_share", -1)
    part.append(f"ours b{ob} {o['images_per_s']:.1f} img/s {o['ms_per_step']:.0f} ms MFU {100*o['mfu']:.1f}%"
                f" syncs/step {o.get('host_syncs_per_step', -1):.0f} primitives {100*k:.0f}% gaps {100-100*k:.0f}%")
else: part.append("ours failed")
if t: part.append(f"torch b{tb} {t['images_per_s']:.1f} img/s MFU {100*t['mfu']:.1f}%")
if o and t: part.append(f"ratio {o['images_per_s']/t['images_per_s']:.2f}x" + ("" if ob == tb else f" (img/s, b{ob} vs b{tb})"))
print(", ".join(part), end="")
PY
)
  [[ $ok == 0 ]] && note="$note; ours (rc $ours_rc): $(LOG=$ours_log why_failed)"
  if [[ $torch_ok == 0 ]]; then
    case $torch_rc in
      125) note="$note; torch not run${PY:+ (time budget spent)}${PY:-: no python with torch}" ;;
      *) note="$note; torch (rc $torch_rc): $(LOG=$torch_log why_failed)" ;;
    esac
  fi
  row "$label" "$st" "$note"
}
VAE_RESERVE=60  # stage 9's estimate on a GPU (four processes) with room: stage 8 leaves it that much
want 9 && RESERVE=$VAE_RESERVE
if want 8; then
  if [[ ! -x ${BENCH_TRAIN:-} ]]; then
    row "8 throughput" "NOT RUN" "no bench_train"
  elif [[ $HAVE_GPU == 1 ]]; then
    bench_pair "8 throughput DiT-B/2 bf16" DiT-B/2 32 "${BENCH[0]#*:}" cuda bf16 cuda "$BENCH_STEPS" "$BENCH_WARMUP" 45 40
    bench_pair "8 throughput DiT-XL/2 bf16" DiT-XL/2 32 "${BENCH[1]#*:}" cuda bf16 cuda "$BENCH_STEPS" "$BENCH_WARMUP" 75 60
  elif [[ $SMOKE == 1 ]]; then
    bench_pair "8 throughput DiT-S/4 16x16 (cpu smoke)" DiT-S/4 16 4,2 cpu fp32 cpu 1 1 60 60 --num-classes 10
  else
    for spec in "${BENCH[@]}"; do row "8 throughput ${spec%%:*} bf16" "NOT RUN" "$NO_GPU_WHY"; done
  fi
fi
RESERVE=0

# ---- 9. the kl-f8 VAE's encode and decode beside diffusers' AutoencoderKL on PyTorch -------------
# bench_vae (random weights, its own FLOP count: 136.36 GMAC to encode and 311.09 to decode one
# 256x256 image) and benchmarks/vae_torch.py (the same architecture, weights drawn the same way,
# same batch; its hooks count the same FLOPs) with diffusers' files from the pack (pack_gpu.sh with
# DIT_DIFFUSERS_SRC) or DIT_DIFFUSERS_SRC here. Ours tries its batches largest first, a smaller one
# only after running out of memory; PyTorch starts at the batch ours ran. TFLOP/s = images/s x
# bench_vae's FLOPs per image, for both sides.
VAE_DIFFUSERS=""
for d in "${BUILD:-}/diffusers" "${DIT_DIFFUSERS_SRC:-}"; do
  [[ -n $d && ( -d $d/src/diffusers || -d $d/diffusers ) ]] && { VAE_DIFFUSERS=$d; break; }
done
# vae_pair LABEL BACKEND PRECISION DEVICE SIZE BATCHES ITERS WARMUP LIMIT_OURS LIMIT_TORCH [TORCH]
# (TORCH 0: ours alone; the CPU smoke runs PyTorch once, in fp32, to keep the stage short.)
vae_pair() {
  local label=$1 be=$2 prec=$3 dev=$4 size=$5 batches=$6 iters=$7 warm=$8 lo=$9 lt=${10} with_torch=${11:-1}
  local b ok=0 used="" tb="" torch_ok=0 ours_json="" torch_json="" tf32=()
  for b in ${batches//,/ }; do
    ours_json=$LOGS/vae_${prec}_b${b}_ours.json
    run "vae $prec b$b ours" "$lo" "${OURS[@]}" "$BENCH_VAE" --backend "$be" --batch "$b" --size "$size" \
      --iters "$iters" --warmup "$warm" --json "$ours_json"
    if [[ $RC == 0 ]]; then ok=1; used=$b; break; fi
    is_oom "$LOG" || break  # only running out of memory is worth a smaller batch
  done
  local ours_rc=$RC ours_log=$LOG start=${used:-${batches%%,*}}
  RC=125
  [[ ${DIT_TF32:-0} == 1 && $prec == fp32 ]] && tf32=(--tf32)
  if [[ -n $PY && -n $VAE_DIFFUSERS && $with_torch == 1 ]]; then
    for b in ${batches//,/ }; do
      (( b > start )) && continue
      torch_json=$LOGS/vae_${prec}_b${b}_torch.json
      run "vae $prec b$b torch" "$lt" env PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/vae_torch.py" \
        --diffusers-src "$VAE_DIFFUSERS" --device "$dev" --precision "$prec" "${tf32[@]}" --batch "$b" \
        --size "$size" --iters "$iters" --warmup "$warm" --threads "${OMP_NUM_THREADS:-1}" --json "$torch_json"
      if [[ $RC == 0 ]]; then torch_ok=1; tb=$b; break; fi
      is_oom "$LOG" || break
    done
  fi
  local torch_rc=$RC torch_log=$LOG st=PASS note
  if [[ $ok == 0 ]]; then RC=$ours_rc; st=$(status); fi
  # The row's note, and one record of the pair (FLOPs, images/s, TFLOP/s of each side) for results.json.
  note=$(python3 - "$ours_json" "$torch_json" "$ok" "$torch_ok" "$LOGS/vae_$prec.json" "$label" <<'PY' 2>&1
import json, sys
def load(p, ok):
    try:
        return json.load(open(p)) if ok == "1" else None
    except (OSError, ValueError):
        return None
o, t = load(sys.argv[1], sys.argv[3]), load(sys.argv[2], sys.argv[4])
ref = o or t
rec = {"bench": "vae", "row": sys.argv[6], "ours": o, "torch": t}
part = []
for side, r in (("ours", o), ("torch", t)):
    if not r:
        continue
    cells = []
    for p in ("encode", "decode"):
        tflops = r[f"{p}_images_s"] * 2 * ref[f"{p}_gmac_per_image"] / 1e3
        rec[f"{side}_{p}_images_s"], rec[f"{side}_{p}_tflop_s"] = r[f"{p}_images_s"], tflops
        cells.append(f"{p} {r[f'{p}_images_s']:.4g} img/s {tflops:.3g} TFLOP/s")
    extra = f" ({r['attention']})" if side == "torch" and "attention" in r else ""
    part.append(f"{side} b{r['batch']} " + ", ".join(cells) + extra)
if o and t:
    part.append("ours/torch " + ", ".join(f"{p} {o[f'{p}_images_s'] / t[f'{p}_images_s']:.2f}x"
                                          for p in ("encode", "decode")))
if ref:
    rec.update(size=ref["size"], encode_gmac_per_image=ref["encode_gmac_per_image"],
               decode_gmac_per_image=ref["decode_gmac_per_image"])
    json.dump(rec, open(sys.argv[5], "w"), indent=1)
print("; ".join(part) if part else "ours failed", end="")
PY
)
  [[ -s $LOGS/vae_$prec.json ]] && RESULTS+=("$LOGS/vae_$prec.json")
  [[ $ok == 0 ]] && note="$note; ours (rc $ours_rc): $(LOG=$ours_log why_failed)"
  if [[ $torch_ok == 0 ]]; then
    if [[ $with_torch == 0 ]]; then note="$note; torch not run: the CPU smoke runs it in fp32 only"
    elif [[ -z $PY ]]; then note="$note; torch not run: no python with torch"
    elif [[ -z $VAE_DIFFUSERS ]]; then
      note="$note; torch not run: no diffusers source (pack it: DIT_DIFFUSERS_SRC=DIR scripts/pack_gpu.sh)"
    elif [[ $torch_rc == 125 ]]; then note="$note; torch not run (time budget spent)"
    else note="$note; torch (rc $torch_rc): $(LOG=$torch_log why_failed)"; fi
  fi
  row "$label" "$st" "$note"
}
if want 9; then
  if [[ ! -x ${BENCH_VAE:-} ]]; then
    row "9 VAE kl-f8 encode/decode" "NOT RUN" "no bench_vae"
  elif [[ $HAVE_GPU == 1 ]]; then
    vae_pair "9 VAE kl-f8 256x256 fp32" cuda fp32 cuda 256 16,8,4 3 1 40 50
    vae_pair "9 VAE kl-f8 256x256 bf16" cuda:bf16 bf16 cuda 256 16,8,4 3 1 40 50
  elif [[ $SMOKE == 1 ]]; then
    vae_pair "9 VAE kl-f8 32x32 fp32 (cpu smoke)" cpu fp32 cpu 32 1 1 1 60 60
    vae_pair "9 VAE kl-f8 32x32 bf16 (cpu smoke)" cpu:bf16 bf16 cpu 32 1 1 1 60 60 0
  else
    for prec in fp32 bf16; do row "9 VAE kl-f8 256x256 $prec" "NOT RUN" "$NO_GPU_WHY"; done
  fi
fi

# ---- results.json, the final table ---------------------------------------------------------------
timeout 15 nvidia-smi >"$LOGS/nvidia-smi_end.log" 2>&1
python3 - "$OUT/results.json" "${RESULTS[@]}" <<'PY' 2>>"$LOGS/results_json.log"
import json, sys
json.dump([json.load(open(p)) for p in sys.argv[2:]], open(sys.argv[1], "w"), indent=1)
PY
write_table
rm -rf "$WORK"
echo
cat "$OUT/summary.txt"
echo "files in $OUT: $(find "$OUT" -type f | wc -l) (the device tool returns at most 8)"
(( FAILED_ROWS == 0 ))
