#!/usr/bin/env bash
# The GPU check as the device host runs it, on this machine: scripts/pack_gpu.sh packs this build
# (it fails when the pack plus the working tree would pass the 48 MiB the device tool may carry),
# then benchmarks/gpu/run.sh --cpu-smoke runs every stage from the pack. Checked: no row fails,
# every stage has its row, at most 8 files land in $OUT (the device tool returns no more), and
# the rows' meaning: each class of cuDNN refusal forced through stage 5 (DIT_CUDNN_FAIL) is a NOT
# SERVED row, never a failure, while an execution failure fails; a PyTorch baseline out of memory
# is retried at the next smaller batch and the row names the batch each side ran.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$(dirname "$DIT_MP")/.." && pwd)
PACK=$SCRATCH/pack
unset OMP_NUM_THREADS  # run.sh sets one thread per process for the smoke itself
# xz preset 1 instead of 9, with the same 64 MiB window (10 s instead of 61 s on 2 cores): how hard
# the pack is compressed is not checked here, and the slightly larger archive makes the carry
# checked below an upper bound of the default pack's.
export DIT_PACK_XZ_LEVEL=${DIT_PACK_XZ_LEVEL:-1}

"$ROOT/scripts/pack_gpu.sh" --from "$BUILD" --pack "$PACK" >"$SCRATCH/pack.log" 2>&1 ||
  { cat "$SCRATCH/pack.log"; fail "pack_gpu.sh failed"; }
grep -E '^(stubs|  lib|carry size|packed)' "$SCRATCH/pack.log"
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

# The whole check on the CPU.
out=$SCRATCH/out
bash "$ROOT/benchmarks/gpu/run.sh" --build "$PACK" --out "$out" --cpu-smoke >"$SCRATCH/smoke.log" 2>&1 ||
  { cat "$SCRATCH/smoke.log"; fail "run.sh --cpu-smoke failed"; }
cat "$out/summary.txt"
nfiles=$(find "$out" -type f | wc -l)
(( nfiles <= 8 )) || { find "$out" -type f; fail "$nfiles files in \$OUT (at most 8 come back)"; }
for f in summary.txt table.md logs.tar.gz results.json; do [[ -s $out/$f ]] || fail "no $f in \$OUT"; done
! grep -E '  (FAIL|TIMEOUT)' "$out/summary.txt" || fail "a row failed"
for stage in 1 2 3 4 5 6 7 8; do grep -q "^$stage " "$out/summary.txt" || fail "no row of stage $stage"; done
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
echo "gpu_check: pack ${carry} MiB carried, $nfiles files back, every row as expected"
