#!/usr/bin/env bash
# Every config key changes what it claims to change: a tiny 2-step run per key (group), compared
# with a baseline on what that key governs (the losses, the learning rates, the final weights, the
# EMA, the samples, the files written, the per-rank accounting), not only on how it parses.
# A key that is silently ignored (as diffusion.steps once was in training) fails here.
# config_keys.sh [PART]: model_diffusion ([model], [diffusion]), train_run ([train] to [run]), or
# all (the default); ctest runs the two parts side by side.
source "$(dirname "$0")/common.sh"
PART=${1:-all}
[[ $PART == all || $PART == model_diffusion || $PART == train_run ]] || { echo "unknown part $PART"; exit 2; }
prepare_fashion_test
# (all --set: a flag would override a later --set of the same key)
BASE=(--set data.path="$SCRATCH/fm_test.h5" "${TINY[@]}" --set train.steps=2 --set train.log_every=1
      --set parallel.tp=1 --set parallel.pp=1 --set sample.num_steps=2 --set sample.per_class=1
      --set train.grad_clip=0)

# run NAME [ARGS...]: one process (or `-n N` first for N ranks under mpirun) into $SCRATCH/NAME,
# then its fingerprints: NAME.<what> files the checks below compare.
run() {
  local name=$1 np=1
  shift
  if [[ ${1:-} == -n ]]; then np=$2; shift 2; fi
  local d="$SCRATCH/$name" launch=("$DIT_MP")
  ((np == 1)) || launch=($MPIRUN -n "$np" "$DIT_MP")
  "${launch[@]}" "${BASE[@]}" --run-dir "$d" "$@" > "$d.log" 2>&1 || { cat "$d.log"; fail "run $name failed: $*"; }
  fingerprint "$name"
}
fingerprint() {
  local d="$SCRATCH/$1"
  python3 - "$d" <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
open(f"{d}.eval", "w").write("\n".join(json.dumps(r) for r in rows if "eval" in r) + "\n")
rows = [r for r in rows if "eval" not in r]
for key in ["loss", "vb", "cos", "lr", "mfu", "loss_scale"]:  # vb: DDPM's second term, cos: flow's
    if rows and key not in rows[0]:
        continue
    open(f"{d}.{key}", "w").write(" ".join(repr(r[key]) for r in rows) + "\n")
open(f"{d}.rows", "w").write(f"{len(rows)}\n")
try:
    acct = json.load(open(f"{d}/accounting.json"))
    for key in ["tp_bytes", "pp_bytes", "activation_bytes", "optimizer_state_bytes"]:
        open(f"{d}.{key}", "w").write(" ".join(str(r[key]) for r in acct) + "\n")
except FileNotFoundError:
    pass
PY
  local f
  for f in model ema samples; do
    [[ -e "$d/$f.h5" ]] && h5dump "$d/$f.h5" | grep -v '^HDF5 "' > "$d.$f"
  done
  (cd "$d" && find . -type f -not -path './tb/*' | sort) > "$d.files"  # tb/: a file named by time and pid
  [[ -d "$d/ckpt" ]] && (cd "$d/ckpt" && ls) > "$d.ckpts"
  return 0
}
# differs A B WHAT KEY: fingerprint WHAT of runs A and B must differ (KEY changed it).
differs() {
  cmp -s "$SCRATCH/$1.$3" "$SCRATCH/$2.$3" && fail "$4 did not change the $3 ($1 vs $2)"
  echo "ok: $4 changes the $3"
}
# refused REGEX ARGS...: a value the data cannot take is refused, naming it.
refused() {
  local regex=$1 out
  shift
  out=$("$DIT_MP" "${BASE[@]}" --run-dir "$SCRATCH/refused" "$@" 2>&1) && fail "$* ran"
  grep -Eq -- "$regex" <<<"$out" || fail "$*: no /$regex/ in: $out"
  echo "ok: $* is honoured (refused: $regex)"
}

run base
run base2
cmp -s "$SCRATCH/base.model" "$SCRATCH/base2.model" && cmp -s "$SCRATCH/base.loss" "$SCRATCH/base2.loss" &&
  cmp -s "$SCRATCH/base.samples" "$SCRATCH/base2.samples" || fail "two identical runs differ: the checks would be noise"

if [[ $PART != train_run ]]; then
# [model] (the zero-initialized adaLN gates and final layer make the first losses independent of
# the blocks, so the final weights are compared)
# (DiT-S/8's heads and patch with a tiny width and depth: the full preset trains too slowly here)
run preset --set model.preset=DiT-S/8 --set model.hidden_size=48 --set model.depth=2
grep -q "depth 2, hidden 48, heads 6, patch 8" "$SCRATCH/preset.log" || fail "model.preset did not set DiT-S/8's sizes"
differs base preset loss model.preset
refused "model takes 1x16x16" --set model.input_size=16
refused "model takes 3x32x32" --set model.in_channels=3
for kv in patch_size=2 hidden_size=32 depth=1 num_heads=2 mlp_ratio=2.0 class_dropout_prob=0.5 \
  frequency_embedding_size=64 layernorm_eps=0.5 num_classes=12 'mlp="swiglu"' 'norm="rmsnorm"' \
  'pos_embed="rope"' qk_norm=true; do
  run "m_${kv%%=*}" --set "model.$kv"
  differs base "m_${kv%%=*}" model "model.${kv%%=*}"
done
differs base m_num_classes samples model.num_classes  # 12 class rows
run nosigma --set model.learn_sigma=false
grep -Eq "^0(\.0)? 0(\.0)?$" "$SCRATCH/nosigma.vb" || fail "model.learn_sigma=false still has a VB term"
differs base nosigma vb model.learn_sigma

# [diffusion]
run dsteps --set diffusion.steps=100
differs base dsteps loss diffusion.steps
differs base dsteps samples diffusion.steps
# `dit_mp sample` samples on the schedule the weights were trained on (its length is in the file).
out=$("$DIT_MP" sample --run "$SCRATCH/dsteps" --steps 200 --out "$SCRATCH/s200.png" 2>&1) &&
  fail "sample accepted 200 steps of a 100-step model"
grep -q -- "--steps <= 100 " <<<"$out" || fail "sample --steps 200 of a 100-step model: $out"
echo "ok: sample knows the model's diffusion.steps"
# The recipe keys (flow runs have no learned variance; their second term is the cosine term, "cos").
FLOW=(--set model.learn_sigma=false --set diffusion.objective=flow --set sample.sampler=euler)
run flow "${FLOW[@]}"
differs nosigma flow loss diffusion.objective
differs nosigma flow samples diffusion.objective
run flow_ln "${FLOW[@]}" --set diffusion.timestep_sampling=logit_normal
differs flow flow_ln loss diffusion.timestep_sampling
run flow_lnm "${FLOW[@]}" --set diffusion.timestep_sampling=logit_normal --set diffusion.logit_normal_mean=1.5
differs flow_ln flow_lnm loss diffusion.logit_normal_mean
run flow_lns "${FLOW[@]}" --set diffusion.timestep_sampling=logit_normal --set diffusion.logit_normal_std=0.2
differs flow_ln flow_lns loss diffusion.logit_normal_std
run flow_cos "${FLOW[@]}" --set diffusion.cosine_loss=true
differs flow flow_cos cos diffusion.cosine_loss
run snr --set diffusion.loss_weight=min_snr
differs base snr loss diffusion.loss_weight
run snr_g --set diffusion.loss_weight=min_snr --set diffusion.min_snr_gamma=1
differs snr snr_g loss diffusion.min_snr_gamma
run flow_heun "${FLOW[@]}" --set sample.sampler=heun
differs flow flow_heun samples sample.sampler
run flow_em "${FLOW[@]}" --set sample.sampler=euler_maruyama
run flow_em_l "${FLOW[@]}" --set sample.sampler=euler_maruyama --set sample.last_step_size=0.2
differs flow_em flow_em_l samples sample.last_step_size

fi
if [[ $PART != model_diffusion ]]; then
# [train]
run gb --set train.global_batch=32
differs base gb loss train.global_batch
run mb --set train.micro_batch=4
differs base mb activation_bytes train.micro_batch
run steps --set train.steps=3
[[ $(cat "$SCRATCH/steps.rows") == 3 ]] || fail "train.steps=3 did not train 3 steps"
for kv in lr=1e-2 seed=5; do
  run "t_${kv%%=*}" --set "train.$kv"
  differs base "t_${kv%%=*}" loss "train.${kv%%=*}"
done
for kv in weight_decay=0.5 beta1=0.5 beta2=0.5 eps=0.1 grad_clip=0.01; do
  run "t_${kv%%=*}" --set "train.$kv"
  differs base "t_${kv%%=*}" model "train.${kv%%=*}"
done
run warmup --set train.warmup=5
differs base warmup lr train.warmup
run cosine --set train.lr_schedule=cosine
differs base cosine lr train.lr_schedule
run cosine_min --set train.lr_schedule=cosine --set train.min_lr=1e-4
differs cosine cosine_min lr train.min_lr
run ema_decay --set train.ema_decay=0.05
differs base ema_decay ema train.ema_decay
run ema_warmup --set train.ema_warmup=false
differs base ema_warmup ema train.ema_warmup
run log_every --set train.log_every=2
[[ $(cat "$SCRATCH/log_every.rows") == 1 ]] || fail "train.log_every=2 still logged every step"
run sample_every --set train.sample_every=1
differs base sample_every files train.sample_every
run ckpt_every --set train.checkpoint_every=1
differs base ckpt_every ckpts train.checkpoint_every
run keep --set train.checkpoint_every=1 --set train.keep_checkpoints=1
differs ckpt_every keep ckpts train.keep_checkpoints
run tflops --set train.peak_tflops=1.0
differs base tflops mfu train.peak_tflops
run bf16 --set train.precision=bf16
differs base bf16 loss train.precision
run fp16 --set train.precision=fp16
run fp16_scale --set train.precision=fp16 --set train.loss_scale=1024
differs fp16 fp16_scale loss_scale train.loss_scale
run fp16_window --set train.precision=fp16 --set train.loss_scale_window=1
differs fp16 fp16_window loss_scale train.loss_scale_window
if out=$("$DIT_MP" "${BASE[@]}" --run-dir "$SCRATCH/cuda" --set train.backend=cuda 2>&1); then
  grep -q "cuda backend" <<<"$out" || fail "train.backend=cuda ran on another backend"
else
  grep -q "cuda" <<<"$out" || fail "train.backend=cuda refused without naming cuda: $out"
fi
echo "ok: train.backend is honoured"
# Recomputation changes what is kept, never the numbers.
run rc_sel --set train.recompute=\"selective\"
run rc_full --set train.recompute=\"full\" --set model.depth=2
run rc_full1 --set train.recompute=\"full\" --set train.recompute_blocks=1 --set model.depth=2
differs base rc_sel activation_bytes train.recompute
differs rc_full rc_full1 activation_bytes train.recompute_blocks
cmp -s "$SCRATCH/base.loss" "$SCRATCH/rc_sel.loss" || fail "train.recompute changed the losses"
echo "ok: train.recompute keeps the losses bit for bit"
run bf16_dp2 -n 2 --set train.precision=bf16
run bf16_dp2_r -n 2 --set train.precision=bf16 --set train.grad_reduce=\"bf16\"
python3 - "$SCRATCH" <<'PY' || fail "train.grad_reduce did not lower the gradient bytes"
import json, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/{n}/accounting.json"))[0]["dp_bytes"] for n in ("bf16_dp2", "bf16_dp2_r"))
sys.exit(0 if b < a else 1)
PY
echo "ok: train.grad_reduce changes the dp bytes"

# [optim]: what dp shards changes the bytes held, never the numbers.
# (one microbatch per step and rank: each unit's gradients are final after its one backward; zero 3
# with buckets below a unit's gradients, so each unit's are reduced and handed back on their own:
# the default 25 MiB holds this whole model in one bucket)
Z=(--set train.micro_batch=8 --set model.depth=4)
run z1_dp2 -n 2 "${Z[@]}"
run z3_dp2 -n 2 "${Z[@]}" --set optim.zero=3 --set optim.bucket_mib=0.01
run z1_dp2_b -n 2 "${Z[@]}" --set optim.bucket_mib=0.001
run z1_dp2_off -n 2 "${Z[@]}" --set optim.offload=\"cpu\"
run z1_dp2_nov -n 2 "${Z[@]}" --set optim.overlap=false
python3 - "$SCRATCH" <<'PY' || fail "optim.zero / optim.bucket_mib did not change the bytes held"
import json, sys
d = sys.argv[1]
acct = {n: json.load(open(f"{d}/{n}/accounting.json"))[0] for n in ("z1_dp2", "z3_dp2", "z1_dp2_b")}
one, three, small = acct["z1_dp2"], acct["z3_dp2"], acct["z1_dp2_b"]
assert three["param_bytes"] < one["param_bytes"], (three["param_bytes"], one["param_bytes"])
assert three["grad_bytes"] < one["grad_bytes"], (three["grad_bytes"], one["grad_bytes"])
assert small["grad_bytes"] < one["grad_bytes"], (small["grad_bytes"], one["grad_bytes"])
off = json.load(open(f"{d}/z1_dp2_off/accounting.json"))[0]
assert off["optimizer_state_bytes"] == 0 and off["host_bytes"] >= one["optimizer_state_bytes"], off
PY
grep -q "optimizer offloaded\|offload" "$SCRATCH/z1_dp2_off.log" || fail "the log does not show optim.offload"
for z in z3_dp2 z1_dp2_b z1_dp2_off z1_dp2_nov; do
  cmp -s "$SCRATCH/z1_dp2.loss" "$SCRATCH/$z.loss" || fail "$z changed the losses"
done
echo "ok: optim.zero, optim.bucket_mib, optim.offload change the bytes held, optim.overlap the timing, none the losses"
refused "optim.offload = \"gpu\": expected one of" --set optim.offload=\"gpu\"
refused "optim.zero = 4: expected 1 \\(optimizer state" --set optim.zero=4
refused "optim.bucket_mib = 0: expected a message size in MiB in \\[0.001, 4096\\]" --set optim.bucket_mib=0
refused "optim.bucket_mib = 1e-0?9: expected a message size in MiB in \\[0.001, 4096\\]" --set optim.bucket_mib=1e-9
refused "optim.bucket_mib = 1e\\+12: expected a message size" --set optim.bucket_mib=1e12
refused "optim.zero = 3: expected 1 on the cuda backend" --set optim.zero=3 --set train.backend=\"cuda\"
# train.deterministic selects cuDNN engines: the CPU backend is deterministic either way.
echo "skip: train.deterministic acts on the CUDA backend only (no GPU here)"
# train.tensorboard: the event files in run.dir/tb (their content: tensorboard.sh).
run tb_off --set train.tensorboard=false
[[ -n $(ls "$SCRATCH/base/tb" 2>/dev/null) && ! -e "$SCRATCH/tb_off/tb" ]] || fail "train.tensorboard = false did not stop tb/"
echo "ok: train.tensorboard writes tb/ or not"

# [parallel] (real ranks)
run tp2 -n 2 --set parallel.tp=2
differs base tp2 tp_bytes parallel.tp
run pp2 -n 2 --set parallel.pp=2 --set model.depth=3
run pp2_gpipe -n 2 --set parallel.pp=2 --set model.depth=3 --set parallel.schedule=gpipe
differs base pp2 pp_bytes parallel.pp
differs pp2 pp2_gpipe activation_bytes parallel.schedule
run pp2_layers -n 2 --set parallel.pp=2 --set model.depth=3 --set "parallel.pp_layers=[2,1]"
differs pp2 pp2_layers optimizer_state_bytes parallel.pp_layers
run tp2_sp -n 2 --set parallel.tp=2 --set parallel.sequence_parallel=true
differs tp2 tp2_sp activation_bytes parallel.sequence_parallel
run pp2_v2 -n 2 --set parallel.pp=2 --set model.depth=4 --set parallel.virtual_stages=2
run pp2_v1 -n 2 --set parallel.pp=2 --set model.depth=4
differs pp2_v1 pp2_v2 pp_bytes parallel.virtual_stages
# parallel.timeout_s: a stopped rank is detected after it (tests/cli/no_hang.sh); here, it is read.
out=$($MPIRUN -n 2 "$DIT_MP" "${BASE[@]}" --run-dir "$SCRATCH/to" --set parallel.tp=2 --set parallel.timeout_s=-1 2>&1) &&
  fail "parallel.timeout_s = -1 ran"
grep -q "parallel.timeout_s" <<<"$out" || fail "parallel.timeout_s = -1 refused without naming it: $out"
echo "ok: parallel.timeout_s is read (its effect: no_hang.sh)"

# [data]
refused "none.h5 does not exist" --set data.path="$SCRATCH/none.h5" --set data.prepare=none
prepare_latents "$SCRATCH/lat.h5"
LAT=(--set data.path="$SCRATCH/lat.h5" --set model.in_channels=4 --set model.input_size=8 --set model.patch_size=2
     --set model.num_classes=3)
run lat "${LAT[@]}"
run lat_scale "${LAT[@]}" --set data.latent_scale=1.0
differs lat lat_scale loss data.latent_scale
run lat_official "${LAT[@]}" --set sample.cfg_official=true
differs lat lat_official samples sample.cfg_official
# sample.clip_denoised: auto becomes what the data needs, recorded in config.toml (latents: false,
# as the official DiT samples them; pixels: true); true on latents clamps x0, other samples.
grep -qx 'clip_denoised = "false"' "$SCRATCH/lat/config.toml" || fail "a latent run did not record sample.clip_denoised = false"
grep -qx 'clip_denoised = "true"' "$SCRATCH/base/config.toml" || fail "a pixel run did not record sample.clip_denoised = true"
run lat_clip "${LAT[@]}" --set sample.clip_denoised=true
differs lat lat_clip samples sample.clip_denoised
grep -qx 'clip_denoised = "true"' "$SCRATCH/lat_clip/config.toml" || fail "sample.clip_denoised = true was not recorded"
# `sample` of a latent model clips as the run did, and --clip-denoised overrides it.
for c in auto true; do
  "$DIT_MP" sample --weights "$SCRATCH/lat/ema.h5" --steps 2 --per-class 1 --clip-denoised $c \
    --out "$SCRATCH/lat_w_$c.h5" > "$SCRATCH/lat_w_$c.log" 2>&1 || { cat "$SCRATCH/lat_w_$c.log"; fail "sample --clip-denoised $c"; }
done
cmp -s <(h5dump "$SCRATCH/lat_w_auto.h5" | tail -n +2) <(h5dump "$SCRATCH/lat_w_true.h5" | tail -n +2) && fail "sample --clip-denoised true did not change a latent model's samples"
echo "ok: sample --clip-denoised overrides the latent default"
# A latent run without data.vae writes no grid; its last line names what it wrote.
[[ ! -e "$SCRATCH/lat/samples.png" ]] || fail "a latent run without data.vae wrote samples.png"
grep -q "; samples: .*lat/samples.h5 (latents" "$SCRATCH/lat.log" || fail "the latent run's last line does not name samples.h5: $(tail -1 "$SCRATCH/lat.log")"
echo "ok: a latent run's last line names samples.h5"
# data.vae: the grid is decoded by the VAE (tests/data's tiny one: 8x8 latents, 16x16 pictures),
# and `sample --run` finds it; data.vae_config names its config.json (the LDM-named copy has none).
DATA=$(cd "$(dirname "$0")/../data" && pwd)
run lat_vae "${LAT[@]}" --set data.vae="$DATA/vae_tiny.safetensors"
differs lat lat_vae files data.vae
grep -q "samples.png (decoded by the VAE)" "$SCRATCH/lat_vae.log" || fail "data.vae: no decoded grid"
out=$("$DIT_MP" sample --run "$SCRATCH/lat_vae" --steps 2 --per-class 1 --out "$SCRATCH/lat_vae_s.png" 2>&1) ||
  fail "sample --run of a run with data.vae: $out"
grep -q "decoding 3 latents with AutoencoderKL" <<<"$out" || fail "sample --run did not decode with the run's VAE: $out"
run lat_vae_ldm "${LAT[@]}" --set data.vae="$DATA/vae_tiny_ldm.safetensors" \
  --set data.vae_config="$DATA/vae_tiny_config.json"
cmp -s "$SCRATCH/lat_vae/samples.png" "$SCRATCH/lat_vae_ldm/samples.png" ||
  fail "data.vae_config: the LDM-named VAE with the same config decoded another grid"
echo "ok: data.vae_config names the VAE's config.json"
refused "data.vae_config = .*vae_tiny_config.json without data.vae" "${LAT[@]}" \
  --set data.vae_config="$DATA/vae_tiny_config.json"
refused "data.vae .*vae_tiny.safetensors: its latents have 4 channels, the model's samples 1" \
  --set data.vae="$DATA/vae_tiny.safetensors"

# [sample]
refused "sample.cfg_t_max = 0.2: expected a noise level in \[sample.cfg_t_min = 0.5, 1\]" \
  --set sample.cfg_t_min=0.5 --set sample.cfg_t_max=0.2
for kv in num_steps=3 sampler=\"ddpm\" cfg_scale=1.0 per_class=2 classes=[0,1] seed=3 cfg_t_min=0.5 cfg_t_max=1.0; do
  run "s_${kv%%=*}" --set "sample.$kv"
  differs base "s_${kv%%=*}" samples "sample.${kv%%=*}"
done

# train.eval_every and [eval], with a classifier trained for one epoch on the same images
"$DIT_MP" evaluate --train-classifier --train-data "$SCRATCH/fm_test.h5" --reference "$SCRATCH/fm_test.h5" \
  --classifier "$SCRATCH/c.h5" --classifier-epochs 1 > "$SCRATCH/c.log" 2>&1 || { cat "$SCRATCH/c.log"; fail "classifier"; }
EV=(--set train.eval_every=1 --set eval.classifier=\""$SCRATCH/c.h5"\" --set eval.reference=\""$SCRATCH/fm_test.h5"\"
    --set eval.per_class=2 --set eval.num_steps=2)
run ev "${EV[@]}"
[[ $(grep -c '"eval"' "$SCRATCH/ev/metrics.jsonl") == 2 ]] || fail "train.eval_every=1 did not evaluate at steps 1 and 2"
differs base ev eval train.eval_every
run ev_pc "${EV[@]}" --set eval.per_class=3
differs ev ev_pc eval eval.per_class
run ev_steps "${EV[@]}" --set eval.num_steps=3
differs ev ev_steps eval eval.num_steps
refused "eval.classifier .*fm_test.h5 is a dataset, expected a classifier" "${EV[@]}" --set eval.classifier=\""$SCRATCH/fm_test.h5"\"
refused "the reference set .*nowhere.h5 does not exist" "${EV[@]}" --set eval.reference=\""$SCRATCH/nowhere.h5"\" \
  --set data.prepare=\"none\"

# [run]
[[ -s "$SCRATCH/base/model.h5" ]] || fail "run.dir: the run folder lacks model.h5"
run ckdir --set run.checkpoint_dir="$SCRATCH/elsewhere"
[[ -e "$SCRATCH/elsewhere/latest" && ! -e "$SCRATCH/ckdir/ckpt" ]] || fail "run.checkpoint_dir was not used"
echo "ok: run.checkpoint_dir moves the checkpoints"
cp "$SCRATCH/base.loss" "$SCRATCH/base_loss.keep"
run base --set run.overwrite=true  # refused without it (bad_inputs.sh)
echo "ok: run.overwrite replaces the run folder"
run resumed --set train.steps=3 --set run.resume="$SCRATCH/base/ckpt"
grep -q "resumed from .*step_00000002 at step 2" "$SCRATCH/resumed.log" || fail "run.resume did not resume"
[[ $(cat "$SCRATCH/resumed.rows") == 1 ]] || fail "the resumed run trained more than step 3"
run init --set run.init_from="$SCRATCH/base/model.h5"
differs base init loss run.init_from
fi
echo "ok"
