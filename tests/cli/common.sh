# Shared set-up of the command-line tests: a scratch folder, the binary, mpirun as root, and a
# small real dataset (the Fashion-MNIST test split, prepared once per test into the scratch folder).
set -eEuo pipefail
# A command that fails under set -e ends the test; say which, so that no test dies without a word.
trap 'rc=$?; [[ $- != *e* ]] || echo "FAIL: ${BASH_SOURCE[0]##*/}:$LINENO: exit $rc from: $BASH_COMMAND" >&2' ERR
DIT_MP=${DIT_MP:?set DIT_MP to the dit_mp binary}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
export DIT_PLOTS=${DIT_PLOTS:-0}  # no plots at the end of every tiny run (plot_run.sh turns them on)
SCRATCH=$(mktemp -d /tmp/dit_cli.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
# python3 is Debian's, the one scripts/install_deps.sh gives numpy, matplotlib, h5py and PyTorch, also
# where PATH puts a version manager's shim first (a shim costs 0.3 s a call here, Debian's 0.03 s).
python3() { /usr/bin/python3 "$@"; }

prepare_fashion_test() {
  "$DIT_MP" prepare-data fashion-mnist --split test --out "$SCRATCH/fm_test.h5" >/dev/null
}

# A small model that trains in seconds on 2 cores. A constant learning rate: a run cut short and
# resumed then follows the same schedule as one run (the demo's cosine spans train.steps). It trains
# the official DiT's recipe and block (DDPM, learned sigma, DDIM), not the demo's LightningDiT
# recipe: the tests of training, resuming and sampling check DDPM's terms and samplers, and the
# flow tests (flow_recipe.sh, lightning_checkpoint.sh) set theirs.
OFFICIAL=(--set diffusion.objective=\"ddpm\" --set diffusion.timestep_sampling=\"uniform\"
          --set diffusion.cosine_loss=false --set model.learn_sigma=true --set model.mlp=\"gelu\"
          --set model.norm=\"layernorm\" --set model.pos_embed=\"sincos\" --set sample.sampler=\"ddim\")
TINY=("${OFFICIAL[@]}" --set model.hidden_size=64 --set model.depth=2 --set model.num_heads=4 --set model.patch_size=4
      --set train.global_batch=16 --set train.micro_batch=2 --set train.warmup=0 --set train.lr=2e-3
      --set train.lr_schedule=\"constant\" --set train.log_every=10
      --set sample.num_steps=4 --set sample.per_class=2)

# A small latent dataset at $1: $2 (default 16) standard-normal latents of 4x8x8, 3 classes
# (fast-DiT's .npy layout, prepared by dit_mp; the .npy folders stay in the scratch folder).
prepare_latents() {
  mkdir -p "$SCRATCH/feat" "$SCRATCH/lab"
  /usr/bin/python3 - "$SCRATCH" "${2:-16}" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
for i in range(int(sys.argv[2])):
    np.save(f"{sys.argv[1]}/feat/{i}.npy", rng.standard_normal((1, 4, 8, 8)).astype(np.float32))
    np.save(f"{sys.argv[1]}/lab/{i}.npy", np.array([i % 3], dtype=np.int64))
PY
  "$DIT_MP" prepare-data latents --features "$SCRATCH/feat" --labels "$SCRATCH/lab" --out "$1" > /dev/null ||
    fail "prepare-data latents failed"
}

# Writes `value` into element `index` of dataset `name` in the checkpoint folder $1's shards (the
# first shard holding it, or every one with `all`), as a damaged file would hold it; HDF5 renews
# the checksum, so only the value is wrong.
poison_checkpoint() {
  /usr/bin/python3 - "$@" <<'PY'
import glob, h5py, sys
folder, name, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
every = len(sys.argv) > 5 and sys.argv[5] == "all"
for path in sorted(glob.glob(f"{folder}/shard_*.h5")):
    with h5py.File(path, "r+") as f:
        if name in f:
            f[name][index] = value
            if not every:
                break
PY
}

# The tests of the python tools: PY (Debian's python3, which has PyTorch and h5py) and TOOLS; without
# them the test prints why and ends as passed, skipped.
python_tools_or_skip() {
  PY=/usr/bin/python3
  TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tools" && pwd)
  if ! $PY -c "import torch, h5py" 2>/dev/null; then
    echo "SKIP: $PY lacks torch or h5py (install python3-torch python3-h5py)"
    exit 0
  fi
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

attr() {  # attr FILE NAME: the value(s) of a weights file's /config@NAME as h5dump prints them
  h5dump -a "/config/$2" "$1" | sed -n '/DATA {/,/}/p' | grep -o '(0).*' | sed 's/(0): //; s/ //g; s/"//g'
}

# expect_teacher_blocks STUDENT TEACHER KEPT: the pruned STUDENT's block j is the TEACHER's block
# KEPT[j] (a comma list), bit for bit, and its final layer is the teacher's.
expect_teacher_blocks() {
  local j=0 k t
  for k in ${3//,/ }; do
    for t in attn.qkv.weight mlp.fc2.bias adaLN_modulation.1.weight; do
      h5diff "$1" "$2" "/weights/blocks.$j.$t" "/weights/blocks.$k.$t" > /dev/null ||
        fail "$1: blocks.$j.$t is not the teacher's blocks.$k.$t"
    done
    j=$((j + 1))
  done
  h5diff "$1" "$2" /weights/final_layer.linear.weight > /dev/null || fail "$1: the final layer is not the teacher's"
}

# Learned pruning of the depth-4 run $SCRATCH/run to depth 2 (prune_learned.sh, prune_lora.sh):
# learned_prune NAME RANKS ARGS... writes $SCRATCH/NAME.h5, the log in $SCRATCH/NAME.txt.
learned_prune() {
  local name=$1 ranks=$2
  shift 2
  $MPIRUN -n "$ranks" "$DIT_MP" prune --run "$SCRATCH/run" --depth 2 --method learned "$@" \
    --out "$SCRATCH/$name.h5" > "$SCRATCH/$name.txt" 2>&1 || { cat "$SCRATCH/$name.txt"; fail "prune --method learned $*"; }
}
learned_logits() { grep "^logits (EMA)" "$1" | sed 's/.*: //'; }  # learned_logits LOG
# logits_differ A B LIMIT: prints the relative L2 difference of two logit lists; true when above LIMIT.
logits_differ() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
assert len(a) == len(b) and a, (a, b)
err = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 / sum(y * y for y in b) ** 0.5
print(f"relative L2 difference {err:.3g}")
sys.exit(0 if err > float(sys.argv[3]) else 1)
PY
}

# compare_resumed_losses FULL RESUMED SAME(0|1): a run resumed at step 2 logged steps 1-4, and its
# losses at steps 3 and 4 equal the uninterrupted run's (SAME=1: bit for bit; 0: within 1e-5).
compare_resumed_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
full = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
res = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(res) == [1, 2, 3, 4], sorted(res)
for s in (3, 4):
    if sys.argv[3] == "1":
        assert res[s] == full[s], (s, res[s], full[s])
    else:
        assert abs(res[s] - full[s]) <= 1e-5 * abs(full[s]), (s, res[s], full[s])
PY
}
