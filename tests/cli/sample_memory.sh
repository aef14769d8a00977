#!/usr/bin/env bash
# Sampling that cannot fit this machine's memory is refused at start, within seconds, with the
# bytes it needs (counted from the sampler's own passes on the planning backend) against the
# machine's: by `sample` and by `evaluate --run` (before its classifier is trained). A request
# that fits runs.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1
prepare_fashion_test
"$DIT_MP" --tp 1 --pp 1 --steps 1 --data "$SCRATCH/fm_test.h5" --run-dir "$SCRATCH/run" "${TINY[@]}" \
  > "$SCRATCH/train.txt" 2>&1 || { cat "$SCRATCH/train.txt"; fail "training failed"; }
# 10 classes x 100000 images at once: terabytes of activations for the doubled (guided) batch.
BIG=(--run "$SCRATCH/run" --per-class 100000 --batch 1000000 --steps 2)
B="[0-9.]+ [KMGT]iB"
NEED="sampling 1000000 images, 1000000 at once, needs at least $B per rank \\(weights $B, the forward pass $B, the sampler's host buffers and samples $B\\) x [12] ranks (on this machine, which has|in this memory cgroup \\(a job's or container's limit\\), which allows) $B; lower --batch"
refused() {  # refused RANKS ARGS...: dit_mp ARGS on RANKS ranks fails within 15 s, one line naming NEED
  local ranks=$1 t0=$SECONDS rc=0
  shift
  timeout 120 $MPIRUN -n "$ranks" "$DIT_MP" "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt" || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "rc $rc for: $*"
  ((SECONDS - t0 <= 15)) || fail "took $((SECONDS - t0)) s to refuse: $*"
  grep -Eq -- "$NEED" "$SCRATCH/err.txt" || fail "stderr of '$*' lacks the numbers: $(cat "$SCRATCH/err.txt")"
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || fail "expected one line: $(cat "$SCRATCH/err.txt")"
  echo "ok: refused on $ranks rank(s): $*"
}
refused 1 sample "${BIG[@]}" --out "$SCRATCH/big.png"
refused 2 sample "${BIG[@]}" --out "$SCRATCH/big.png"
refused 1 evaluate "${BIG[@]}" --json "$SCRATCH/eval.json"
[[ ! -e "$SCRATCH/big.png" && ! -e "$SCRATCH/big.h5" && ! -e "$SCRATCH/eval.json" ]] || fail "a refused request wrote"
# A memory cgroup's limit below the machine's (a SLURM job's --mem) is the one checked: 3000 images
# at once (about 1.5 GiB here) in a 300 MiB cgroup are refused at start, naming the cgroup, instead
# of being killed by the kernel midway.
cgroup_case() {  # cgroup_case DIR LIMIT_FILE VERSION: sample in a new cgroup DIR limited to 300 MiB
  local rc=0
  mkdir "$1" && echo $((300 << 20)) > "$1/$2"
  bash -c "echo \$\$ > '$1/cgroup.procs'; exec '$DIT_MP' sample --run '$SCRATCH/run' --classes 3 --per-class 3000 \
    --batch 3000 --steps 2 --out '$SCRATCH/cg.png'" > "$SCRATCH/cg.txt" 2>&1 || rc=$?
  rmdir "$1" 2>/dev/null || true
  [[ $rc -eq 1 ]] || fail "in a 300 MiB cgroup: rc $rc (137: killed by the kernel, not refused): $(cat "$SCRATCH/cg.txt")"
  grep -Eq "x 1 ranks in this memory cgroup \(a job's or container's limit\), which allows 300.0 MiB; lower --batch" \
    "$SCRATCH/cg.txt" || fail "the cgroup refusal lacks its limit: $(cat "$SCRATCH/cg.txt")"
  [[ ! -e "$SCRATCH/cg.png" ]] || fail "a refused request wrote"
  echo "ok: refused in a 300 MiB memory cgroup ($3)"
}
if [[ -w /sys/fs/cgroup/memory && -e /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
  cgroup_case /sys/fs/cgroup/memory/dit_sample_memory_$$ memory.limit_in_bytes "cgroup v1"
elif [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control; then
  cgroup_case /sys/fs/cgroup/dit_sample_memory_$$ memory.max "cgroup v2"
else
  echo "skipped the memory cgroup case: no writable cgroup v1 memory controller or cgroup v2 memory here"
fi
# One that fits runs, in batches.
"$DIT_MP" sample --run "$SCRATCH/run" --per-class 2 --batch 8 --steps 2 --out "$SCRATCH/ok.png" > "$SCRATCH/ok.txt" 2>&1 ||
  { cat "$SCRATCH/ok.txt"; fail "a sampling request that fits was refused"; }
grep -q "samples *Dataset {20, 1, 32, 32}" <<<"$(h5ls "$SCRATCH/ok.h5")" || fail "the samples that fit are missing"
echo "ok"
