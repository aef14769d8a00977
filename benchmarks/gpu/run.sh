#!/usr/bin/env bash
# The one device script of issue 7. On a GPU host: the CUDA conformance suite, golden verify in
# fp32 and bf16, a 1-rank and a 4-ranks-on-one-GPU training run, and the throughput benchmark
# (bench_train) next to the PyTorch DiT (torch_dit_bench.py) on the same GPU; then one short table.
#   bash benchmarks/gpu/run.sh --build .gpu --out $OUT      (device tool: carry [".gpu"])
#   bash benchmarks/gpu/run.sh --build .gpu --out /tmp/o --cpu-smoke   (no GPU: plumbing only)
# --build DIR: a pack from scripts/pack_gpu.sh (env.sh, data/, pack.tar.xz: unpacked into a work
#   folder first) or a build tree (bin/dit_mp, tests/dit_tests, bin/bench_train; system MPI).
#   Without --build, or when the carried binaries do not start, it configures and builds from
#   source: that needs the dependencies' headers and CMake files (scripts/install_deps.sh); the
#   device host has none, so there it only reports why it could not.
# --only LIST: comma-separated subset of conformance,verify,train,bench (default: all).
# --cpu-smoke: also run the training runs and the benchmark pair on the CPU with a tiny model.
# Every step runs under `timeout`, within an overall budget (DIT_GPU_BUDGET_S, default 450 s).
# $OUT receives summary.txt (the table), results.json (benchmark numbers) and logs.tar.gz.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=""
OUT=${OUT:-/tmp/dit_gpu_out}
ONLY="conformance,verify,train,bench"
CPU_SMOKE=0
BUDGET=${DIT_GPU_BUDGET_S:-450}
# Benchmarks: model and the batches to try, largest first (a smaller one after an out-of-memory).
BENCH=("DiT-XL/2:256,128,64" "DiT-B/2:256,128")
BENCH_STEPS=${DIT_BENCH_STEPS:-10}
BENCH_WARMUP=${DIT_BENCH_WARMUP:-3}
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --cpu-smoke) CPU_SMOKE=1; shift ;;
    *) echo "run.sh: unknown argument $1 (expected --build DIR, --out DIR, --only LIST, --cpu-smoke)" >&2
       exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/dit_gpu_work.XXXXXX)
LOGS=$WORK/logs
mkdir -p "$LOGS"
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

declare -a ROWS=()
OUT_OF_TIME=0  # set when a step was not started for want of time; the next row says so
row() {
  local note=$3
  [[ $2 == "NOT RUN" && $OUT_OF_TIME == 1 ]] && note="time budget spent (DIT_GPU_BUDGET_S=$BUDGET)"
  OUT_OF_TIME=0
  ROWS+=("$(printf '%-40s %-9s %s' "$1" "$2" "$note")")
  echo "[$((SECONDS))s] $1: $2 $note"
}
logname() { echo "$LOGS/${1//[^A-Za-z0-9_.-]/_}.log"; }
# limit NAME SECONDS: the step's limit within what is left of the budget (0: none left).
limit() {
  local left=$((BUDGET - SECONDS - 10))
  (( left < 15 )) && { echo 0; return; }
  (( $2 < left )) && echo "$2" || echo "$left"
}
# run NAME SECONDS CMD...: runs under timeout with its log in $LOGS; RC and TOOK are set.
run() {
  local name=$1 lim
  lim=$(limit "$1" "$2"); shift 2
  LOG=$(logname "$name")
  if [[ $lim == 0 ]]; then
    RC=125; TOOK=0; OUT_OF_TIME=1; echo "not run: time budget spent" >"$LOG"; return 125
  fi
  local t0=$SECONDS
  echo "+ $*" >"$LOG"
  timeout -k 10 "$lim" "$@" >>"$LOG" 2>&1
  RC=$?
  TOOK=$((SECONDS - t0))
  [[ $RC == 124 || $RC == 137 ]] && echo "run.sh: timed out after $lim s" >>"$LOG"
  return $RC
}
# status: PASS, or FAIL(rc) / TIMEOUT / NOT RUN from the last run's RC.
status() {
  case $RC in
    0) echo PASS ;; 124|137) echo TIMEOUT ;; 125) echo "NOT RUN" ;; *) echo "FAIL($RC)" ;;
  esac
}
why_failed() { grep -v '^+ ' "$LOG" | grep -m1 -iE "error|fail|what\(\)|not found|cannot|refused" | cut -c1-110; }

# ---- 0. the machine, python with torch, CUDA libraries -----------------------------------------
HAVE_GPU=0
if ! command -v nvidia-smi >/dev/null; then GPU="no nvidia-smi on PATH"
else
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
  nvidia-smi -L >/dev/null 2>&1 && HAVE_GPU=1
fi
NO_GPU_WHY="no GPU here ($GPU)"
nvidia-smi >"$LOGS/nvidia-smi_start.log" 2>&1
PY=""
for p in python3 /usr/bin/python3 /opt/torch/.venv/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" >/dev/null 2>&1; then PY=$(command -v "$p"); break; fi
done
TORCH=$([[ -n $PY ]] && "$PY" -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -1)
# cuDNN, NCCL (and cuBLAS, the CUDA runtime) from the pip packages of that python, then the toolkit.
CUDA_LIBS=""
if [[ -n $PY ]]; then
  CUDA_LIBS=$("$PY" - <<'PY' 2>/dev/null
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
for d in ${NVCC:+$(dirname "$(dirname "$NVCC")")/lib64} /usr/local/cuda/lib64 \
  /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && CUDA_LIBS=${CUDA_LIBS:+$CUDA_LIBS:}$d
done
row "machine" info "$GPU"
row "python / torch" info "${PY:-no python with torch}${TORCH:+, torch $TORCH}"

# ---- 1. binaries: the carried pack, a build tree, or a build from source -----------------------
PACK_LIB=""
DIT_MPIRUN=$(command -v mpirun || true)
use_build() {  # $1: a pack or a build tree
  BUILD=$1
  DIT_MP=$BUILD/bin/dit_mp
  DIT_TESTS=$BUILD/bin/dit_tests
  [[ -x $DIT_TESTS ]] || DIT_TESTS=$BUILD/tests/dit_tests
  BENCH_TRAIN=$BUILD/bin/bench_train
  BENCH_ATTN=$BUILD/bin/bench_attention
  PACK_LIB=""
  if [[ -f $BUILD/env.sh ]]; then
    # shellcheck disable=SC1091
    source "$BUILD/env.sh"
    PACK_LIB=$DIT_PACK_LIB
  else  # a build tree uses the system's MPI: forget a pack's settings
    unset "${!OPAL_@}" "${!PMIX_@}" OMPI_MCA_mca_base_component_path OMPI_MCA_mca_base_param_files \
      HWLOC_PLUGINS_PATH DIT_PACK
    DIT_MPIRUN=$(command -v mpirun || true)
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  LIBPATH=${PACK_LIB:+$PACK_LIB:}$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  OURS=(env "LD_LIBRARY_PATH=$LIBPATH")
}
# "${OURS[@]}" CMD...: runs one of our programs (or the packed mpirun) with the pack's libraries
# (not exported: python with torch keeps its own).
ours() { "${OURS[@]}" "$@"; }
starts() { ours "$DIT_MP" --help >/dev/null 2>&1; }
build_from_source() {
  local b=$WORK/build
  run "configure (source build)" 120 cmake -S "$ROOT" -B "$b" -DDIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release || { row "source build" "$(status)" "configure: $(why_failed)"; return 1; }
  run "build (source build)" 300 cmake --build "$b" -j "$(nproc)" --target dit_mp dit_tests bench_train bench_attention ||
    { row "source build" "$(status)" "$(why_failed)"; return 1; }
  row "source build" PASS "$TOOK s"
  use_build "$b"
}
# A compressed pack (scripts/pack_gpu.sh) is unpacked into the work folder first.
unpack() {
  local dst=$WORK/pack
  mkdir -p "$dst"
  cp -r "$BUILD/env.sh" "$BUILD/data" "$dst/" 2>/dev/null
  if command -v xz >/dev/null; then tar xJf "$BUILD/pack.tar.xz" -C "$dst"
  else python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    "$BUILD/pack.tar.xz" "$dst"; fi
  BUILD=$dst
}
if [[ -n $BUILD && -f $BUILD/pack.tar.xz ]]; then
  t0=$SECONDS
  if unpack >"$LOGS/unpack.log" 2>&1; then row "unpack" PASS "$((SECONDS - t0)) s"
  else row "unpack" FAIL "$(tail -1 "$LOGS/unpack.log")"; fi
fi
if [[ -n $BUILD ]]; then
  use_build "$BUILD"
  if starts; then
    row "binaries" carried "$BUILD"
  else
    ours ldd "$DIT_MP" >"$LOGS/ldd_dit_mp.log" 2>&1
    missing=$(grep -m2 'not found' "$LOGS/ldd_dit_mp.log" | awk '{print $1}' | tr '\n' ' ')
    row "binaries" FAIL "carried dit_mp does not start${missing:+: missing $missing}(ldd_dit_mp.log)"
    build_from_source
  fi
else
  build_from_source
fi
DIT_MPIRUN=${DIT_MPIRUN:-mpirun}
GOLDEN=$ROOT/tests/data/dit_tiny_golden.h5
if ! starts; then
  row "all GPU steps" "NOT RUN" "no working dit_mp (see the rows above)"
  wants() { false; }
fi
# The training data: the pack's, else 128 random 4x16x16 latents written here (numpy, prepare-data).
make_dataset() {
  local py
  for py in "$PY" python3; do [[ -n $py ]] && "$py" -c "import numpy" 2>/dev/null && break; done
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
  ours "$DIT_MP" prepare-data latents --features "$WORK/npy/features" --labels "$WORK/npy/labels" \
    --out "$WORK/latents16.h5"
}
DATA=""
if [[ -n ${DIT_PACK:-} && -f $DIT_PACK/data/latents16.h5 ]]; then DATA=$DIT_PACK/data/latents16.h5
elif wants train && make_dataset >"$LOGS/make_dataset.log" 2>&1; then DATA=$WORK/latents16.h5; fi

# CPU smoke runs share the cores: one thread per process, or spinning OpenMP threads stall.
[[ $CPU_SMOKE == 1 && $HAVE_GPU == 0 ]] && export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# ---- 2. conformance: every primitive, CUDA (fp32 and bf16) against the reference ---------------
if wants conformance && [[ ! -x $DIT_TESTS ]]; then
  row "conformance cuda (fp32, bf16)" "NOT RUN" "no test binary at $DIT_TESTS"
elif wants conformance; then
  run "conformance cuda" 150 "${OURS[@]}" "$DIT_TESTS" --gtest_filter='*cuda*:*Cuda*:*CUDA*'
  st=$(status)
  ran=$(grep -m1 -oE '[0-9]+ tests? from [0-9]+ test suites? ran' "$LOG" | awk '{print $1}')
  skipped=$(grep -m1 -oE '\[  SKIPPED \] [0-9]+' "$LOG" | awk '{print $NF}')
  failed=$(grep -m1 -oE '\[  FAILED  \] [0-9]+ tests?,' "$LOG" | awk '{print $3}')
  first=$(grep -m1 -oE '^\[  FAILED  \] [A-Za-z0-9_/.]+' "$LOG" | awk '{print $NF}')
  note="${ran:-?} ran, ${skipped:-0} skipped, ${failed:-0} failed${first:+ (first: $first)}; $TOOK s"
  if [[ $st == PASS && -n $ran && ${skipped:-0} == "$ran" ]]; then
    st=SKIP; note="$note; $(grep -m1 -A1 ': Skipped' "$LOG" | tail -1 | cut -c1-90)"
  fi
  row "conformance cuda (fp32, bf16)" "$st" "$note"
fi

# ---- 3. golden verify in fp32 and bf16 -----------------------------------------------------------
verify_note() { # verify's summary line ("143 passed, 0 failed (worst ...)") and the first failures
  local sum fails
  sum=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$LOG" | tail -1)
  fails=$(grep -E ' FAIL$' "$LOG" | head -2 | awk '{print $1 " " $2}' | tr '\n' ' ')
  echo "${sum:-$(why_failed)}${fails:+; first: $fails}; $TOOK s"
}
if wants verify; then
  if ours "$DIT_MP" verify --help 2>/dev/null | grep -q -- '--precision'; then
    V32=(--backend cuda --precision fp32); V16=(--backend cuda --precision bf16)
  else
    V32=(--backend cuda); V16=(--backend cuda:bf16)
  fi
  for prec in fp32 bf16; do
    if [[ $HAVE_GPU == 0 ]]; then row "verify $prec (tiny golden)" "NOT RUN" "$NO_GPU_WHY"; continue; fi
    if [[ $prec == fp32 ]]; then args=("${V32[@]}"); else args=("${V16[@]}"); fi
    run "verify $prec" 60 "${OURS[@]}" "$DIT_MP" verify "${args[@]}" --golden "$GOLDEN"
    row "verify $prec (tiny golden)" "$(status)" "$(verify_note)"
  done
fi

# ---- 4. training: 1 rank and 4 ranks on one GPU ------------------------------------------------------
# A small latent DiT (16x16x4, hidden 128, depth 4, 4 heads) on the carried 128-sample dataset.
train_note() {  # steps, last loss and images/s from the run's metrics.jsonl
  local m=$1/metrics.jsonl
  [[ -s $m ]] || { why_failed; return; }
  python3 - "$m" <<'PY' 2>/dev/null || tail -1 "$m"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = rows[-1]
print(f"{r['step']} steps, loss {rows[0]['loss']:.3f} -> {r['loss']:.3f}, {r['images_per_s']:.0f} img/s", end="")
PY
  echo "; $TOOK s"
}
train() {  # NAME RANKS TP PP BACKEND PRECISION LIMIT
  local name=$1 n=$2 tp=$3 pp=$4 be=$5 prec=$6 lim=$7 dir=$WORK/run_$2
  local args=(train --backend "$be" --precision "$prec" --data "$DATA" --run-dir "$dir" --overwrite
    --tp "$tp" --pp "$pp" --steps 20 --global-batch 32 --micro-batch 8 --log-every 5 --lr 1e-3
    --set model.input_size=16 --set model.in_channels=4 --set model.patch_size=2
    --set model.hidden_size=128 --set model.depth=4 --set model.num_heads=4 --set model.num_classes=10
    --set data.prepare=none --set sample.num_steps=4 --set sample.per_class=1 --set train.peak_tflops=989)
  if [[ $n == 1 ]]; then run "$name" "$lim" "${OURS[@]}" "$DIT_MP" "${args[@]}"
  else run "$name" "$lim" "${OURS[@]}" "$DIT_MPIRUN" -np "$n" -x OMP_NUM_THREADS=1 "$DIT_MP" "${args[@]}"; fi
  row "$name" "$(status)" "$(train_note "$dir")"
  cp "$dir/metrics.jsonl" "$LOGS/${name//[^A-Za-z0-9_.-]/_}.metrics.jsonl" 2>/dev/null
  cp "$dir/accounting.json" "$LOGS/${name//[^A-Za-z0-9_.-]/_}.accounting.json" 2>/dev/null
}
if wants train; then
  if [[ -z $DATA ]]; then
    row "train" "NOT RUN" "no dataset: no data/latents16.h5 in the pack, and none could be made (make_dataset.log)"
  elif [[ $HAVE_GPU == 1 ]]; then
    train "train 1 rank, cuda bf16" 1 1 1 cuda bf16 75
    train "train 4 ranks tp2 pp2, one GPU" 4 2 2 cuda bf16 90
  else
    row "train 1 rank, cuda bf16" "NOT RUN" "$NO_GPU_WHY"
    row "train 4 ranks tp2 pp2, one GPU" "NOT RUN" "$NO_GPU_WHY"
    if [[ $CPU_SMOKE == 1 ]]; then
      train "train 1 rank (cpu smoke)" 1 1 1 cpu fp32 90
      train "train 4 ranks tp2 pp2 (cpu smoke)" 4 2 2 cpu fp32 120
    fi
  fi
fi

# ---- 5. throughput: bench_train next to the PyTorch DiT ------------------------------------------
RESULTS=()
# bench_pair LABEL MODEL INPUT BATCHES BACKEND PRECISION DEVICE STEPS WARMUP LIMIT_OURS LIMIT_TORCH [EXTRA...]
bench_pair() {
  local label=$1 model=$2 input=$3 batches=$4 be=$5 prec=$6 dev=$7 steps=$8 warm=$9 lo=${10} lt=${11}
  shift 11
  local tag=${model//[^A-Za-z0-9]/_} b ok=0 ours_json torch_json used=""
  for b in ${batches//,/ }; do
    ours_json=$LOGS/bench_${tag}_b${b}_ours.json
    run "bench $model b$b ours" "$lo" "${OURS[@]}" "$BENCH_TRAIN" --model "$model" --input-size "$input" --channels 4 \
      --backend "$be" --precision "$prec" --batch "$b" --steps "$steps" --warmup "$warm" --json "$ours_json" "$@"
    if [[ $RC == 0 ]]; then ok=1; used=$b; break; fi
    [[ $RC == 124 || $RC == 137 || $RC == 125 ]] && break  # out of time: no smaller try
    echo "run.sh: batch $b failed (rc $RC), trying a smaller one" >>"$LOG"
  done
  local ours_rc=$RC ours_log=$LOG tb=${used:-${batches%%,*}}
  # PyTorch at the same batch, or a smaller one of the list if that one does not fit.
  RC=125
  local tbs=${batches#*"$tb"}
  for b in $tb ${tbs//,/ }; do
    [[ -n $PY ]] || break
    torch_json=$LOGS/bench_${tag}_b${b}_torch.json
    run "bench $model b$b torch" "$lt" env PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/gpu/torch_dit_bench.py" \
      --model "$model" --input-size "$input" --channels 4 --batch "$b" --steps "$steps" --warmup "$warm" \
      --device "$dev" --precision "$prec" --json "$torch_json" "$@"
    [[ $RC == 0 || $RC == 124 || $RC == 137 || $RC == 125 ]] && break
    echo "run.sh: batch $b failed (rc $RC), trying a smaller one" >>"$LOG"
  done
  local torch_rc=$RC torch_log=$LOG
  [[ $ok == 1 ]] && RESULTS+=("$ours_json")
  [[ $torch_rc == 0 ]] && RESULTS+=("$torch_json")
  local st=PASS
  if [[ $ok == 0 ]]; then RC=$ours_rc; st=$(status); [[ $st == FAIL* ]] && st=FAIL; fi
  local note
  note=$(python3 - "$ours_json" "$torch_json" "$ok" "$torch_rc" <<'PY' 2>&1
import json, sys
def load(p, ok):
    try:
        return json.load(open(p)) if ok else None
    except OSError:
        return None
o, t = load(sys.argv[1], sys.argv[3] == "1"), load(sys.argv[2], sys.argv[4] == "0")
part = []
if o: part.append(f"ours {o['images_per_s']:.1f} img/s {o['ms_per_step']:.0f} ms MFU {100*o['mfu']:.1f}%"
                 f" host syncs/step {o.get('host_syncs_per_step', -1):.0f}"
                 f" in kernels {100 * o.get('kernel_share', -1):.0f}% (gaps {100 - 100 * o.get('kernel_share', -1):.0f}%)")
else: part.append("ours failed")
if t: part.append(f"torch {t['images_per_s']:.1f} img/s MFU {100*t['mfu']:.1f}%"
                 + (f" (batch {t['batch']})" if o and t["batch"] != o["batch"] else ""))
else: part.append("torch " + ("failed" if sys.argv[4] != "125" else "not run"))
if o and t: part.append(f"ratio {o['images_per_s']/t['images_per_s']:.2f}x")
print(", ".join(part), end="")
PY
)
  [[ $ok == 0 ]] && note="$note; ours (rc $ours_rc): $(LOG=$ours_log why_failed)"
  [[ $torch_rc != 0 && $torch_rc != 125 ]] && note="$note; torch (rc $torch_rc): $(LOG=$torch_log why_failed)"
  row "$label b${used:-${batches%%,*}}" "$st" "$note"
}
if wants bench && [[ ! -x $BENCH_TRAIN ]]; then
  row "throughput" "NOT RUN" "no bench_train at $BENCH_TRAIN"
elif wants bench; then
  if [[ $HAVE_GPU == 1 ]]; then
    for spec in "${BENCH[@]}"; do
      bench_pair "throughput ${spec%%:*} bf16" "${spec%%:*}" 32 "${spec#*:}" cuda bf16 cuda \
        "$BENCH_STEPS" "$BENCH_WARMUP" 150 90
    done
  else
    for spec in "${BENCH[@]}"; do row "throughput ${spec%%:*} bf16" "NOT RUN" "$NO_GPU_WHY"; done
  fi
  if [[ $CPU_SMOKE == 1 ]]; then
    bench_pair "throughput DiT-S/4 16x16 (cpu smoke)" DiT-S/4 16 4 cpu fp32 cpu 2 1 120 120 --num-classes 10
  fi
fi

# ---- 6. fused attention TFLOP/s (bf16, the path training takes: cuDNN's SDPA where it has an engine)
if wants bench && [[ -x ${BENCH_ATTN:-} ]]; then
  for shape in "32 256 16 72" "32 256 16 64"; do  # DiT-XL/2 at 256x256 (E 72), and E 64
    set -- $shape
    be=cuda:bf16; [[ $HAVE_GPU == 1 ]] || be=cpu
    if [[ $HAVE_GPU == 1 || $CPU_SMOKE == 1 ]]; then
      [[ $HAVE_GPU == 1 ]] || set -- 2 64 4 "$4"
      run "attention $be E$4" 120 "${OURS[@]}" "$BENCH_ATTN" --backend "$be" --batch "$1" --tokens "$2" --heads "$3" \
        --head-dim "$4" --json "$LOGS/attention_E$4.json"
      row "attention fwd/bwd $be N$1 T$2 H$3 E$4" "$(status)" "$(grep -o 'forward.*' "$LOG" | tail -1)"
    else
      row "attention fwd/bwd bf16 E$4" "NOT RUN" "$NO_GPU_WHY"
    fi
  done
fi

# ---- the table, results.json, logs.tar.gz --------------------------------------------------------
nvidia-smi >"$LOGS/nvidia-smi_end.log" 2>&1
{
  echo "dit_mp GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS)) s"
  printf '%-40s %-9s %s\n' step result notes
  for r in "${ROWS[@]}"; do echo "$r"; done
} >"$OUT/summary.txt"
python3 - "$OUT/results.json" "${RESULTS[@]}" <<'PY' 2>>"$LOGS/results_json.log"
import json, sys
out = [json.load(open(p)) for p in sys.argv[2:]]
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
cp "$OUT/summary.txt" "$LOGS/"
tar czf "$OUT/logs.tar.gz" -C "$WORK" logs
rm -rf "$WORK"
echo
cat "$OUT/summary.txt"
