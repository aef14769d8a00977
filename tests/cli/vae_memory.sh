#!/usr/bin/env bash
# The VAE's memory is planned against the tightest limit, a memory cgroup's (a SLURM job's --mem, a
# container's) included, in a 100 MiB cgroup made here: `sample --vae` and `prepare-data images
# --vae` with a VAE whose weights alone pass the limit are refused at start in one line (rc 1, not
# the kernel's kill, rc 137), leaving no grid, no lock and no work folder; a preparation whose batch
# does not fit encodes fewer pictures at once and writes the same latents; and a latent run's plots
# at its end (a python3 process of its own) are skipped with a line where they would not fit.
# Skips (77), saying why, where no memory cgroup can be made (not root, no writable controller).
source "$(dirname "$0")/common.sh"
if [[ -w /sys/fs/cgroup/memory && -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
  CG=/sys/fs/cgroup/memory/dit_vae_memory_$$_ LIMIT_FILE=memory.limit_in_bytes
elif [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control; then
  CG=/sys/fs/cgroup/dit_vae_memory_$$_ LIMIT_FILE=memory.max
else
  echo "SKIP: no writable cgroup v1 memory controller or cgroup v2 memory here to make a 100 MiB cgroup in"
  exit 77
fi
trap 'rmdir "$CG"* 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT
VAE="$DIT_DATA/vae_tiny.safetensors"

# in_cgroup MIB NAME CMD...: CMD (exec'd, so the process itself) in a fresh cgroup of MIB MiB;
# stdout and stderr to $SCRATCH/NAME.out and .err; RC its exit status.
in_cgroup() {
  local mib=$1 name=$2
  shift 2
  local cg=$CG$name
  mkdir "$cg" && echo $((mib << 20)) > "$cg/$LIMIT_FILE"
  RC=0
  bash -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cg" "$@" > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" || RC=$?
  # MPI's singleton daemon may outlive the process a moment; the EXIT trap tries again.
  for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break || sleep 0.2; done
}
# refused NAME PATTERN: the command of in_cgroup NAME ended with rc 1 and one line matching PATTERN.
refused() {
  [[ $RC -eq 1 ]] || fail "$1: rc $RC in a 100 MiB cgroup (137: killed by the kernel, not refused): $(cat "$SCRATCH/$1.err")"
  grep -Eq -- "$2" "$SCRATCH/$1.err" || fail "$1: the refusal lacks '$2': $(cat "$SCRATCH/$1.err")"
  [[ $(wc -l < "$SCRATCH/$1.err") -eq 1 ]] || fail "$1: expected one line: $(cat "$SCRATCH/$1.err")"
}

# 16 pictures of 32 x 32 in 3 classes, their latents by the tiny VAE, a latent model of 1 step.
/usr/bin/python3 - "$SCRATCH/imgs" <<'PY'
import os, struct, sys, zlib
import numpy as np
rng = np.random.default_rng(0)
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
for i in range(16):
    folder = os.path.join(sys.argv[1], "abc"[i % 3])
    os.makedirs(folder, exist_ok=True)
    a = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    raw = b"".join(b"\0" + a[r].tobytes() for r in range(32))
    with open(os.path.join(folder, f"{i:02d}.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 32, 32, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
"$DIT_MP" prepare-data images "$SCRATCH/imgs" --vae "$VAE" --size 32 --out "$SCRATCH/lat.h5" > /dev/null
LATENT=("${TINY[@]}" --set model.in_channels=4 --set model.input_size=16 --set model.num_classes=3 --tp 1 --pp 1)
"$DIT_MP" --steps 1 --run-dir "$SCRATCH/run" --data "$SCRATCH/lat.h5" "${LATENT[@]}" > "$SCRATCH/train.out" 2>&1 ||
  { cat "$SCRATCH/train.out"; fail "training the latent model failed"; }

# A VAE of the tiny one's layout at 192/384 channels: 30 million parameters, 114 MiB in fp32 once
# read (its file, bf16 zeros, is sparse).
/usr/bin/python3 - "$VAE" "$SCRATCH/big.safetensors" <<'PY'
import json, struct, sys
src, out = sys.argv[1], sys.argv[2]
d = open(src, "rb").read()
n = struct.unpack("<Q", d[:8])[0]
header, offset = {}, 0
for k, v in json.loads(d[8:8 + n]).items():
    if k == "__metadata__":
        continue
    shape = [{16: 192, 32: 384}.get(x, x) for x in v["shape"]]
    size = 2
    for x in shape:
        size *= x
    header[k] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
    offset += size
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    f.truncate(8 + len(text) + offset)
cfg = json.load(open(src.replace(".safetensors", "_config.json")))
cfg["block_out_channels"] = [192, 384]
json.dump(cfg, open(out.replace(".safetensors", "_config.json"), "w"))
PY
B="[0-9.]+ [KMGT]iB"
CGROUP="in this memory cgroup \(a job's or container's limit\), which allows 100.0 MiB"

# sample --vae: the decode is planned with the sampling, at start.
in_cgroup 100 sample "$DIT_MP" sample --run "$SCRATCH/run" --steps 2 --per-class 2 --vae "$SCRATCH/big.safetensors" \
  --out "$SCRATCH/grid.png"
refused sample "sampling 6 images, 6 at once, needs at least $B per rank \(.*, then the VAE's decode of one latent and the pictures $B \(the VAE's size: no batch lowers it\)\) x 1 ranks $CGROUP"
[[ ! -e "$SCRATCH/grid.png" && ! -e "$SCRATCH/grid.h5" ]] || fail "a refused sample wrote"
echo "ok: sample --vae with a VAE past a 100 MiB cgroup is refused at start"

# prepare-data images --vae: refused before its lock and work folder are made.
in_cgroup 100 prepare "$DIT_MP" prepare-data images "$SCRATCH/imgs" --vae "$SCRATCH/big.safetensors" --size 32 \
  --out "$SCRATCH/big.h5"
refused prepare "encoding one picture of 32 x 32 with the VAE $SCRATCH/big.safetensors needs $B .* more than $B of this memory cgroup's 100.0 MiB"
for f in "$SCRATCH"/big.h5*; do [[ ! -e $f ]] || fail "a refused preparation left $f"; done
echo "ok: prepare-data --vae with a VAE past a 100 MiB cgroup is refused, leaving nothing"

# A batch of 12 pictures of 128 x 128 does not fit at once (about 145 MiB resident outside): fewer
# are encoded at once, into the same latents.
"$DIT_MP" prepare-data images "$SCRATCH/imgs" --vae "$VAE" --size 128 --batch 12 --out "$SCRATCH/free.h5" > /dev/null
in_cgroup 100 sized "$DIT_MP" prepare-data images "$SCRATCH/imgs" --vae "$VAE" --size 128 --batch 12 \
  --out "$SCRATCH/sized.h5"
[[ $RC -eq 0 ]] || fail "a batch too large for the cgroup: rc $RC: $(cat "$SCRATCH/sized.err")"
grep -Eq "^memory: [0-9]+ pictures encoded at once, not a batch's 12, to fit $B of this memory cgroup's 100.0 MiB" \
  "$SCRATCH/sized.out" || fail "no line on the pictures encoded at once: $(cat "$SCRATCH/sized.out")"
h5diff "$SCRATCH/free.h5" "$SCRATCH/sized.h5" /images /images || fail "the latents encoded fewer at once differ"
echo "ok: $(grep -Eo "[0-9]+ pictures encoded at once" "$SCRATCH/sized.out") in a 100 MiB cgroup, the same latents"

# The plots at a run's end: python3 with matplotlib takes about 76 MiB, more than the run leaves.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  in_cgroup 100 plots env DIT_PLOTS=1 "$DIT_MP" --steps 2 --run-dir "$SCRATCH/plotted" --data "$SCRATCH/lat.h5" \
    "${LATENT[@]}" --set data.vae=\""$VAE"\"
  [[ $RC -eq 0 ]] || fail "a latent run in a 100 MiB cgroup: rc $RC: $(tail -3 "$SCRATCH/plots.out") $(cat "$SCRATCH/plots.err")"
  grep -Eq "^plots: skipped: tools/plot_run.py \(python3 and matplotlib\) takes about 128.0 MiB, and $B of this memory cgroup's 100.0 MiB is free" \
    "$SCRATCH/plots.out" || fail "the plots were not skipped: $(tail -3 "$SCRATCH/plots.out")"
  [[ -e "$SCRATCH/plotted/samples.png" && ! -e "$SCRATCH/plotted/plots.log" ]] || fail "the run's grid or plots are not as expected"
  echo "ok: the plots that would not fit a 100 MiB cgroup are skipped with a line"
else
  echo "the plots case not run: no python3 with matplotlib"
fi
echo "ok"
