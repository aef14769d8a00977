#!/usr/bin/env bash
# The flow recipe from the command line: a tiny SiT-style run (velocity, logit-normal timesteps,
# the cosine term) trains at tp 2 x pp 2, stopped and resumed bit for bit; a resume that changes
# diffusion.objective is refused naming it; its weights sample with every flow sampler, and a DDPM
# sampler on them (or a flow sampler on a DDPM model) is refused naming --sampler.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
F=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --objective flow --sampler heun
   --timestep-sampling logit_normal --set model.learn_sigma=false --set diffusion.cosine_loss=true
   --set sample.cfg_t_max=0.85)
run() {  # run N STEPS DIR [ARGS...]
  local n=$1 steps=$2 dir=$3
  shift 3
  $MPIRUN -n "$n" "$DIT_MP" --tp 2 --pp 2 --steps "$steps" --run-dir "$dir" "${F[@]}" "$@" \
    > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $dir failed"; }
}
run 4 4 "$SCRATCH/full"
run 4 2 "$SCRATCH/part" --checkpoint-every 2
cp -r "$SCRATCH/part" "$SCRATCH/again"
run 4 4 "$SCRATCH/again" --resume auto
python3 - "$SCRATCH/full/metrics.jsonl" "$SCRATCH/again/metrics.jsonl" <<'PY'
import json, math, sys
full = {r["step"]: r for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
res = {r["step"]: r for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
for s in (3, 4):
    assert res[s]["loss"] == full[s]["loss"], (s, res[s]["loss"], full[s]["loss"])
assert all(math.isfinite(r["loss"]) for r in full.values())
assert all(r["cos"] > 0 and "vb" not in r for r in full.values()), "the cosine term is not logged as cos"
print("flow resume: steps 3-4 bit-identical")
PY
# A changed objective on resume: one message naming the key.
cp -r "$SCRATCH/part" "$SCRATCH/changed"
out=$($MPIRUN -n 4 "$DIT_MP" --tp 2 --pp 2 --steps 4 --run-dir "$SCRATCH/changed" --data "$SCRATCH/fm_test.h5" \
      "${TINY[@]}" --set model.learn_sigma=false --resume auto 2>&1) && fail "a resume as ddpm of a flow run ran"
grep -q 'diffusion.objective = "ddpm" in this run.s config but "flow" in the checkpoint .*step_00000002' <<<"$out" ||
  { echo "$out"; fail "the refusal does not name diffusion.objective"; }
echo "ok: resume refuses a changed objective"
# Every flow sampler on the trained weights, at 1 rank and at tp 2 x pp 2; the same images at both.
for s in euler heun euler_maruyama; do
  "$DIT_MP" sample --weights "$SCRATCH/full/ema.h5" --sampler $s --steps 4 --per-class 1 --classes 0,1 \
    --cfg-scale 2 --out "$SCRATCH/$s.png" > "$SCRATCH/$s.log" 2>&1 || { cat "$SCRATCH/$s.log"; fail "sample $s"; }
  $MPIRUN -n 4 "$DIT_MP" sample --weights "$SCRATCH/full/ema.h5" --sampler $s --steps 4 --per-class 1 \
    --classes 0,1 --cfg-scale 2 --tp 2 --pp 2 --out "$SCRATCH/${s}_tp2.png" > "$SCRATCH/${s}_tp2.log" 2>&1 ||
    { cat "$SCRATCH/${s}_tp2.log"; fail "sample $s at tp 2 pp 2"; }
  /usr/bin/python3 - "$SCRATCH/$s.h5" "$SCRATCH/${s}_tp2.h5" <<'PY'
import h5py, numpy as np, sys
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
key = [k for k in a.keys() if a[k].ndim == 4][0]
x, y = a[key][()], b[key][()]
assert np.isfinite(x).all() and np.abs(x).max() > 0
err = np.linalg.norm(x - y) / np.linalg.norm(x)
assert err < 1e-4, err
print(f"{sys.argv[1]}: tp 2 x pp 2 within {err:.1e} of one rank")
PY
done
out=$("$DIT_MP" sample --weights "$SCRATCH/full/ema.h5" --sampler ddim --out "$SCRATCH/x.png" 2>&1) &&
  fail "ddim ran on a flow model"
grep -q -- 'sample.sampler = "ddim": expected euler, heun or euler_maruyama for diffusion.objective = "flow" (--sampler)' <<<"$out" ||
  { echo "$out"; fail "ddim on flow: wrong message"; }
"$DIT_MP" --data "$SCRATCH/fm_test.h5" "${TINY[@]}" --steps 1 --tp 1 --pp 1 --run-dir "$SCRATCH/ddpm" > "$SCRATCH/ddpm.log" 2>&1 ||
  { cat "$SCRATCH/ddpm.log"; fail "ddpm run"; }
out=$("$DIT_MP" sample --weights "$SCRATCH/ddpm/ema.h5" --sampler euler --out "$SCRATCH/y.png" 2>&1) &&
  fail "euler ran on a ddpm model"
grep -q -- 'sample.sampler = "euler": expected ddim or ddpm for diffusion.objective = "ddpm" (--sampler)' <<<"$out" ||
  { echo "$out"; fail "euler on ddpm: wrong message"; }
echo ok
