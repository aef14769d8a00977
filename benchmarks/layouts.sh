#!/usr/bin/env bash
# Step accounting across layouts (not a test): trains the same model for a few steps at each
# (tp, pp, dp) and prints one row per layout from the run's accounting.json: step time, bytes sent
# per kind per rank (mean), measured vs theoretical pipeline bubble (mean over ranks), and the
# optimizer state each rank holds (max; it falls as 1/dp with ZeRO-1).
#   benchmarks/layouts.sh [build/bin/dit_mp] [steps]
set -euo pipefail
DIT_MP=${1:-build/bin/dit_mp}
STEPS=${2:-6}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
scratch=$(mktemp -d /tmp/dit_layouts.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
"$DIT_MP" prepare-data fashion-mnist --split test --out "$scratch/fm.h5" >/dev/null
MODEL=(--set model.hidden_size=128 --set model.depth=8 --set model.num_heads=8 --set model.patch_size=4
       --set train.global_batch=64 --set train.micro_batch=4 --set sample.num_steps=2 --set sample.per_class=1
       --log-every 1000)
printf '%-16s %5s %9s %12s %12s %12s %9s %9s %14s\n' layout ranks step_s tp_B/rank pp_B/rank dp_B/rank bubble theory optim_B/rank
for l in "1 1 1" "2 1 1" "1 2 1" "1 1 2" "1 1 4" "1 1 8" "2 2 2" "2 4 1" "4 2 1" "1 4 2" "1 8 1"; do
  set -- $l
  n=$(( $1 * $2 * $3 ))
  run="$scratch/run_$1_$2_$3"
  mpirun -n $n "$DIT_MP" --tp $1 --pp $2 --steps "$STEPS" --data "$scratch/fm.h5" --run-dir "$run" "${MODEL[@]}" \
    > "$run.log" 2>&1 || { cat "$run.log"; exit 1; }
  python3 - "$run/accounting.json" "tp $1 pp $2 dp $3" "$n" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
mean = lambda k: sum(r[k] for r in rows) / len(rows)
print(f"{sys.argv[2]:<16} {int(sys.argv[3]):5d} {max(r['step_s'] for r in rows):9.3f} "
      f"{mean('tp_bytes'):12.0f} {mean('pp_bytes'):12.0f} {mean('dp_bytes'):12.0f} "
      f"{100 * mean('measured_bubble'):8.1f}% {100 * mean('theoretical_bubble'):8.1f}% "
      f"{max(r['optimizer_state_bytes'] for r in rows):14.0f}")
PY
done
