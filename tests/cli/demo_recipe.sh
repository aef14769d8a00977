#!/usr/bin/env bash
# The demo's own recipe, as a user gets it with no flags: LightningDiT's (rectified flow, logit-normal
# timesteps, the cosine term, SwiGLU, RMSNorm, RoPE). A 20-step run at tp 2 pp 2 of the demo shrunk
# to test size: the run records that recipe in its config.toml, logs the cosine term as `cos` (no
# VB term: a velocity model learns no variance), the loss falls, and `sample --run` picks a flow
# sampler by itself; DDIM on it is refused naming --sampler.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
SMALL=(--set model.hidden_size=64 --set model.depth=2 --set model.num_heads=4 --set train.global_batch=16
       --set train.micro_batch=2 --set train.warmup=0 --set train.lr=2e-3 --set train.lr_schedule=\"constant\"
       --set sample.num_steps=4 --set sample.per_class=1)
$MPIRUN -n 4 "$DIT_MP" --tp 2 --pp 2 --steps 20 --log-every 1 --data "$SCRATCH/fm_test.h5" \
  --run-dir "$SCRATCH/run" "${SMALL[@]}" > "$SCRATCH/log.txt" 2>&1 || { cat "$SCRATCH/log.txt"; fail "training failed"; }
for kv in 'objective = "flow"' 'timestep_sampling = "logit_normal"' 'cosine_loss = true' 'mlp = "swiglu"' \
  'norm = "rmsnorm"' 'pos_embed = "rope"' 'learn_sigma = false' 'sampler = "euler"'; do
  grep -q "^$kv" "$SCRATCH/run/config.toml" || fail "the run's config.toml lacks $kv"
done
grep -q "mse [0-9.]* cos [0-9.]*" "$SCRATCH/log.txt" || fail "the log line does not name the cosine term"
python3 - "$SCRATCH/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 20, f"{len(rows)} rows, expected 20"
assert all(r["cos"] > 0 and "vb" not in r for r in rows), "the cosine term is not logged as cos"
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
print(f"mean loss of steps 1-5: {first:.4f}, of steps 16-20: {last:.4f}")
assert last < 0.9 * first, "the loss did not fall"
PY
"$DIT_MP" sample --run "$SCRATCH/run" --classes 0,1 --per-class 1 --steps 3 --out "$SCRATCH/s.png" \
  > "$SCRATCH/sample.log" 2>&1 || { cat "$SCRATCH/sample.log"; fail "sample --run of the demo's recipe failed"; }
[[ -s "$SCRATCH/s.png" ]] || fail "sample wrote no grid"
out=$("$DIT_MP" sample --run "$SCRATCH/run" --sampler ddim --steps 3 --out "$SCRATCH/d.png" 2>&1) &&
  fail "DDIM sampled a flow model"
grep -q -- "--sampler" <<<"$out" || fail "the DDIM refusal does not name --sampler: $out"
echo "ok"
