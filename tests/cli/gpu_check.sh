#!/usr/bin/env bash
# The GPU check as the device host runs it, on this machine: scripts/pack_gpu.sh packs this build
# (it fails when the pack plus the working tree would pass the 48 MiB the device tool may carry),
# then benchmarks/gpu/run.sh --cpu-smoke runs every stage from the pack. Checked: no row fails,
# every stage has its row, at most 8 files land in $OUT (the device tool returns no more), and
# the rows' meaning: each class of cuDNN refusal forced through stage 5 (DIT_CUDNN_FAIL) is a NOT
# SERVED row, never a failure, while an execution failure fails; a PyTorch baseline out of memory
# is retried at the next smaller batch and the row names the batch each side ran. Stage 9 (the VAE)
# gives images/s and TFLOP/s of ours, and of diffusers on PyTorch from the files the pack carries
# when a diffusers tree is here (DIT_DIFFUSERS_SRC, default /tmp/diffusers_src); from a pack without
# them, ours alone and the row says why.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$(dirname "$DIT_MP")/.." && pwd)
PACK=$SCRATCH/pack
unset OMP_NUM_THREADS  # run.sh sets one thread per process for the smoke itself
# xz preset 1 instead of 9, with the same 64 MiB window (10 s instead of 61 s on 2 cores): how hard
# the pack is compressed is not checked here, and the slightly larger archive makes the carry
# checked below an upper bound of the default pack's.
export DIT_PACK_XZ_LEVEL=${DIT_PACK_XZ_LEVEL:-1}

DIFFUSERS=${DIT_DIFFUSERS_SRC:-/tmp/diffusers_src}
unset DIT_DIFFUSERS_SRC  # the smoke below must take diffusers' files from the pack
WITH_DIFFUSERS=0
if [[ -d $DIFFUSERS ]] && /usr/bin/python3 -c "import torch" 2>/dev/null; then WITH_DIFFUSERS=1; fi
DIT_DIFFUSERS_SRC=$([[ $WITH_DIFFUSERS == 1 ]] && echo "$DIFFUSERS") \
  "$ROOT/scripts/pack_gpu.sh" --from "$BUILD" --pack "$PACK" >"$SCRATCH/pack.log" 2>&1 ||
  { cat "$SCRATCH/pack.log"; fail "pack_gpu.sh failed"; }
grep -E '^(stubs|  lib|  bench_vae|diffusers|carry size|packed)' "$SCRATCH/pack.log"
carry=$(grep -oE 'carry size: [0-9.]+ MiB' "$SCRATCH/pack.log" | grep -oE '[0-9.]+')
[[ -n $carry ]] || fail "pack_gpu.sh printed no carry size"
awk -v c="$carry" 'BEGIN { exit !(c < 48) }' || fail "carry $carry MiB is not under 48 MiB"
# The stubs stand for HDF5's network libraries, and nothing of them (curl, OpenSSL, GnuTLS,
# Kerberos, LDAP) travels.
members=$(tar tJf "$PACK/pack.tar.xz")
for lib in libcurl.so.4 libcrypto.so.3; do grep -q "^lib/$lib\$" <<<"$members" || fail "no stub lib/$lib in the pack"; done
for lib in libssl libgnutls libkrb5 libldap libnghttp2 libssh2; do
  ! grep -q "^lib/$lib" <<<"$members" || fail "$lib travels in the pack"
done
grep -q '^bin/dit_mpi_tests$' <<<"$members" || fail "the pack has no dit_mpi_tests"
grep -q '^bin/bench_vae$' <<<"$members" || fail "the pack has no bench_vae"
if [[ $WITH_DIFFUSERS == 1 ]]; then
  grep -q '^diffusers: [0-9]* files .*vae_torch.py ran from them' "$SCRATCH/pack.log" ||
    fail "pack_gpu.sh did not pack diffusers' files from $DIFFUSERS"
  grep -q '^diffusers/src/diffusers/models/autoencoders/autoencoder_kl.py$' <<<"$members" ||
    fail "the pack has no diffusers/src/diffusers/models/autoencoders/autoencoder_kl.py"
  ! grep -q '^diffusers/src/diffusers/pipelines/' <<<"$members" || fail "diffusers' pipelines travel in the pack"
else
  grep -q '^diffusers: not packed: ' "$SCRATCH/pack.log" || fail "pack_gpu.sh did not say why diffusers is not packed"
fi

# The whole check on the CPU.
out=$SCRATCH/out
bash "$ROOT/benchmarks/gpu/run.sh" --build "$PACK" --out "$out" --cpu-smoke >"$SCRATCH/smoke.log" 2>&1 ||
  { cat "$SCRATCH/smoke.log"; fail "run.sh --cpu-smoke failed"; }
cat "$out/summary.txt"
nfiles=$(find "$out" -type f | wc -l)
(( nfiles <= 8 )) || { find "$out" -type f; fail "$nfiles files in \$OUT (at most 8 come back)"; }
for f in summary.txt table.md logs.tar.gz results.json; do [[ -s $out/$f ]] || fail "no $f in \$OUT"; done
! grep -E '  (FAIL|TIMEOUT)' "$out/summary.txt" || fail "a row failed"
for stage in 1 2 3 4 5 6 7 8 9; do grep -q "^$stage " "$out/summary.txt" || fail "no row of stage $stage"; done
# Stage 9: images/s and TFLOP/s of encode and decode in both rows; PyTorch's beside ours in fp32
# when the pack carries diffusers; results.json holds the pair with positive numbers.
num='[0-9][0-9.e+-]*'
vae_ours="PASS +ours b1 encode $num img/s $num TFLOP/s, decode $num img/s $num TFLOP/s"
row9=$(grep '^9 VAE kl-f8 32x32 fp32' "$out/summary.txt" || true)
grep -qE "$vae_ours" <<<"$row9" || fail "the VAE fp32 row lacks ours' images/s and TFLOP/s: $row9"
grep -qE "$vae_ours" <<<"$(grep '^9 VAE kl-f8 32x32 bf16' "$out/summary.txt" || true)" ||
  fail "the VAE bf16 row lacks ours' images/s and TFLOP/s"
if [[ $WITH_DIFFUSERS == 1 ]]; then
  grep -qE "; torch b1 encode $num img/s $num TFLOP/s, decode $num img/s $num TFLOP/s \(AttnProcessor.*\); ours/torch encode $num" <<<"$row9" ||
    fail "the VAE fp32 row lacks PyTorch's numbers from the packed diffusers: $row9"
else
  grep -q 'torch not run: no diffusers source' <<<"$row9" || fail "the VAE row does not say why PyTorch is missing: $row9"
fi
/usr/bin/python3 - "$out/results.json" "$WITH_DIFFUSERS" <<'PY' || fail "results.json lacks the VAE records"
import json, sys
recs = {r["row"]: r for r in json.load(open(sys.argv[1])) if r.get("bench") == "vae"}
assert len(recs) == 2, sorted(recs)
for r in recs.values():
    assert r["ours_encode_images_s"] > 0 and r["ours_decode_tflop_s"] > 0, r
fp32 = recs["9 VAE kl-f8 32x32 fp32 (cpu smoke)"]
assert (fp32["torch"] is not None) == (sys.argv[2] == "1"), fp32["torch"]
if fp32["torch"]:  # the FLOPs of bench_vae's walk and of PyTorch's hooks agree
    for p in ("encode", "decode"):
        o, t = fp32["ours"][f"{p}_gmac_per_image"], fp32["torch"][f"{p}_gmac_per_image"]
        assert abs(o - t) < 1e-6 * o and fp32["torch_" + p + "_tflop_s"] > 0, (p, o, t)
PY
grep -q '^7 NCCL, 1 rank.*communication mpi' "$out/summary.txt" || fail "the NCCL stage's step did not run"
logs=$(tar tzf "$out/logs.tar.gz")
grep -q '^logs/verify_fp32.log$' <<<"$logs" || fail "the logs archive lacks verify_fp32.log"
grep -q '^| 6 verify fp32' "$out/table.md" || fail "table.md lacks the verify row"

# The variants below run single stages from the pack unpacked once (run.sh takes an unpacked
# pack as it is).
UNPACKED=$SCRATCH/unpacked
mkdir -p "$UNPACKED"
tar xJf "$PACK/pack.tar.xz" -C "$UNPACKED"
cp -r "$PACK/env.sh" "$PACK/data" "$UNPACKED/"

# Each refusal class is NOT SERVED with cuDNN's message; an execution failure is a failure.
for kind in library ineligible graph "no engine" plan execute; do
  o=$SCRATCH/out_${kind// /_}
  set +e
  DIT_CUDNN_FAIL=$kind bash "$ROOT/benchmarks/gpu/run.sh" --build "$UNPACKED" --out "$o" --cpu-smoke --stages 5 \
    >"$SCRATCH/stage5.log" 2>&1
  rc=$?
  set -e
  row5=$(grep '^5 default attention path' "$o/summary.txt" || true)
  if [[ $kind == execute ]]; then
    [[ $rc != 0 ]] || fail "run.sh exited 0 after an injected execute failure"
    grep -q 'FAIL' <<<"$row5" || fail "execute: stage 5 did not fail: $row5"
    echo "execute: $row5"
    continue
  fi
  [[ $rc == 0 ]] || { cat "$SCRATCH/stage5.log"; fail "$kind: run.sh exited $rc"; }
  echo "[$SECONDS s] $kind"
  ! grep -E '  (FAIL|TIMEOUT)' "$o/summary.txt" || fail "$kind: a row failed"
  declined=$(grep '^5 default attention path.*: declined *NOT SERVED' "$o/summary.txt" || true)
  [[ -n $declined ]] || { cat "$o/summary.txt"; fail "$kind: no NOT SERVED row"; }
  grep -q "($kind): DIT_ATTENTION=cudnn" <<<"$declined" || fail "$kind: the row does not carry cuDNN's message: $declined"
  echo "$kind: $declined"
done

# The PyTorch baseline out of memory at the batch ours ran: retried smaller, each batch named.
DIT_BENCH_OOM_ABOVE=2 bash "$ROOT/benchmarks/gpu/run.sh" --build "$UNPACKED" --out "$SCRATCH/out_oom" --cpu-smoke \
  --stages 8 >"$SCRATCH/oom.log" 2>&1 || { cat "$SCRATCH/oom.log"; fail "run.sh --stages 8 failed"; }
row8=$(grep '^8 throughput' "$SCRATCH/out_oom/summary.txt")
echo "$row8"
grep -q 'ours b4 ' <<<"$row8" && grep -q 'torch b2 ' <<<"$row8" || fail "the row does not name batches 4 and 2: $row8"
# A pack without diffusers' files: stage 9 times ours alone, passes, and says why PyTorch is missing
# (the smoke above already was that case when no diffusers tree is here).
if [[ $WITH_DIFFUSERS == 1 ]]; then
  rm -rf "$UNPACKED/diffusers"
  bash "$ROOT/benchmarks/gpu/run.sh" --build "$UNPACKED" --out "$SCRATCH/out_vae" --cpu-smoke --stages 9 \
    >"$SCRATCH/vae.log" 2>&1 || { cat "$SCRATCH/vae.log"; fail "run.sh --stages 9 failed"; }
  row9=$(grep '^9 VAE kl-f8 32x32 fp32' "$SCRATCH/out_vae/summary.txt" || true)
  echo "$row9"
  grep -qE "$vae_ours; torch not run: no diffusers source" <<<"$row9" ||
    fail "without diffusers the VAE row does not give ours alone and the reason: $row9"
fi
echo "gpu_check: pack ${carry} MiB carried, $nfiles files back, every row as expected"
