#!/usr/bin/env bash
# `dit_mp plan` predicts what a run then reports: for each case, a one-step run writes
# accounting.json, `dit_mp plan` at the same settings writes its JSON, and every memory category of
# every rank must equal the plan of that rank's stage exactly (fp32 runs: the tp/pp/dp bytes too).
# Eight layouts cover fp32, bf16 and fp16, each recompute mode, GPipe, sequence parallelism and
# the bf16 gradient reduction; three ZeRO-2/3; two more run LightningDiT's block variants.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
check() {  # check RANKS DP ARGS...: run on RANKS ranks, plan with --dp DP, compare
  local ranks=$1 dp=$2
  shift 2
  local run="$SCRATCH/run_$RANDOM"
  timeout 300 $MPIRUN -n "$ranks" "$DIT_MP" --data "$SCRATCH/fm_test.h5" "${TINY[@]}" --steps 1 \
    --run-dir "$run" "$@" >"$SCRATCH/out.txt" 2>&1 || { cat "$SCRATCH/out.txt"; fail "run failed: $*"; }
  "$DIT_MP" plan "${TINY[@]}" --dp "$dp" "$@" --json "$run/plan.json" >"$SCRATCH/plan.txt" 2>&1 ||
    { cat "$SCRATCH/plan.txt"; fail "plan failed: $*"; }
  /usr/bin/python3 - "$run" "$*" <<'PY' || fail "plan differs from the run: $*"
import json, sys
run, what = sys.argv[1], sys.argv[2]
acct = json.load(open(f"{run}/accounting.json"))
plan = json.load(open(f"{run}/plan.json"))
keys = ["param_bytes", "grad_bytes", "master_bytes", "exp_avg_bytes", "exp_avg_sq_bytes", "ema_bytes",
        "activation_bytes", "message_bytes", "workspace_bytes", "total_bytes"]
if plan["precision"] == "fp32":
    keys += ["tp_bytes", "pp_bytes", "dp_bytes"]
bad = []
for r in acct:
    stage = plan["stages"][r["pp"]]
    for k in keys:
        if int(r[k]) != int(stage[k]):
            bad.append(f"rank {r['rank']} (stage {r['pp']}) {k}: run {int(r[k])}, plan {int(stage[k])}")
    if int(r["activation_bytes"]) <= 0 or int(r["param_bytes"]) <= 0:
        bad.append(f"rank {r['rank']}: nothing measured")
print(f"{what}: {len(acct)} ranks x {len(keys)} categories, peak {plan['peak_bytes']} bytes",
      "OK" if not bad else "MISMATCH")
for b in bad[:20]:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
}
check 1 1 --tp 1 --pp 1
check 2 1 --tp 1 --pp 2 --recompute selective
check 4 1 --tp 2 --pp 2 --recompute full --precision bf16
check 4 2 --tp 2 --pp 1 --sequence-parallel --precision fp16
check 4 2 --tp 1 --pp 2 --schedule gpipe --recompute full --recompute-blocks 1
check 8 2 --tp 2 --pp 2 --sequence-parallel --recompute selective --precision bf16
check 8 1 --tp 4 --pp 2 --sequence-parallel
check 4 4 --tp 1 --pp 1 --precision bf16 --set train.grad_reduce=bf16
# ZeRO-2 and -3: the gradients and parameters a rank holds at most (one microbatch: units reduce early)
check 4 4 --tp 1 --pp 1 --zero 3 --set train.micro_batch=4
check 8 2 --tp 2 --pp 2 --zero 2 --set optim.bucket_mib=0.01
check 4 2 --tp 1 --pp 2 --zero 3 --precision bf16 --schedule zb-h1
# LightningDiT's block: the q/k norm and RoPE output, the SwiGLU gate and the norm weights' grads
LDIT=(--mlp swiglu --norm rmsnorm --pos-embed rope --set model.qk_norm=true)
check 4 1 --tp 2 --pp 2 --sequence-parallel --recompute selective "${LDIT[@]}"
check 2 1 --tp 2 --pp 1 --precision bf16 "${LDIT[@]}"
echo "ok: plan matches 13 runs"
