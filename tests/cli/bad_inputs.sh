#!/usr/bin/env bash
# Bad input to `train` and `sample`: one message naming the problem, a non-zero exit on every rank,
# nothing half-written, and a NaN loss stops the run with the step and the rank after the metrics.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
expect_fail() {  # expect_fail REGEX ARGS...: mpirun -n 4 dit_mp ARGS must fail saying REGEX
  local regex=$1
  shift
  local out rc=0
  out=$(timeout 120 $MPIRUN -n 4 "$DIT_MP" "$@" 2>&1) || rc=$?
  [[ $rc -ne 0 ]] || fail "expected a failure: $*"
  [[ $rc -ne 124 ]] || fail "hung: $*"
  grep -Eq -- "$regex" <<<"$out" || fail "output of '$*' lacks /$regex/: $out"
  local n
  n=$(grep -c "error:" <<<"$out" || true)
  [[ $n -eq 1 ]] || fail "expected one error message, got $n: $out"
  echo "ok: $regex"
}
D=(--data "$SCRATCH/fm_test.h5")
expect_fail "cannot open config file '/nonexistent/x.toml'" --config /nonexistent/x.toml --run-dir "$SCRATCH/r1"
expect_fail "config file '$SCRATCH' is a directory" --config "$SCRATCH" --run-dir "$SCRATCH/r1"
printf '[train]\nsteps = "ten"\n' > "$SCRATCH/bad.toml"
expect_fail "train.steps: expected an integer" --config "$SCRATCH/bad.toml" --run-dir "$SCRATCH/r1"
printf '[train\nsteps = 3\n' > "$SCRATCH/syntax.toml"
expect_fail "syntax.toml" --config "$SCRATCH/syntax.toml" --run-dir "$SCRATCH/r1"
expect_fail "unknown key train.lrr" "${D[@]}" --set train.lrr=1 --run-dir "$SCRATCH/r1"
expect_fail "input_size = 32 is not divisible by model.patch_size = 5" "${D[@]}" --set model.patch_size=5 --tp 1 --pp 1 --run-dir "$SCRATCH/r1"
expect_fail "does not exist" --data "$SCRATCH/none.h5" --set data.prepare=none --tp 1 --pp 1 --run-dir "$SCRATCH/r1"
# A file of the wrong schema: a golden file has no 'images' dataset.
expect_fail "dataset 'images' is missing" --data "$DIT_DATA/dit_tiny_golden.h5" --tp 1 --pp 1 --run-dir "$SCRATCH/r1"
expect_fail "job has 4 ranks, which is not a multiple of tp x pp = 1 x 3 = 3" "${D[@]}" --tp 1 --pp 3 --run-dir "$SCRATCH/r1"
expect_fail "global_batch = 18 is not divisible" "${D[@]}" --tp 1 --pp 1 --global-batch 18 --micro-batch 4 --run-dir "$SCRATCH/r1"
[[ ! -e "$SCRATCH/r1" ]] || fail "a failed start left a run folder behind"
# An existing run folder is refused (and left as it was) unless --overwrite.
mkdir -p "$SCRATCH/exists" && echo keep > "$SCRATCH/exists/notes.txt"
expect_fail "run folder .*exists already exists" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 --run-dir "$SCRATCH/exists"
[[ $(cat "$SCRATCH/exists/notes.txt") == keep ]] || fail "the existing run folder was touched"
expect_fail "sample: give exactly one of --run DIR or --weights FILE" sample --out "$SCRATCH/x.png"
# Sizes that cannot fit are refused at once, naming the setting, before anything is allocated.
quick_fail() {  # quick_fail REGEX ARGS...: as expect_fail, and within 15 s
  local t0=$SECONDS
  expect_fail "$@"
  ((SECONDS - t0 <= 15)) || fail "took $((SECONDS - t0)) s to refuse: ${*:2}"
}
T=("${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 1 --run-dir "$SCRATCH/r2")
quick_fail "train.global_batch = 100000000 is 50000000 microbatches" "${T[@]}" --global-batch 100000000
quick_fail "train.global_batch = 1000000000 is 500000000 microbatches" "${T[@]}" --global-batch 1000000000
quick_fail "diffusion.steps = 100000000: expected an integer in \\[1, 100000\\]" "${T[@]}" --set diffusion.steps=100000000
quick_fail "needs at least .* per rank .*training activations" "${T[@]}" --set train.micro_batch=1000000 \
  --set train.global_batch=1000000
quick_fail "needs at least .* per rank \\(parameters and optimizer state [0-9.]+ TiB" "${T[@]}" \
  --set model.hidden_size=65536 --set model.num_heads=64 --set model.depth=256
quick_fail "needs at least .* per rank .*sampling" "${T[@]}" --set sample.per_class=100000000
[[ ! -e "$SCRATCH/r2" ]] || fail "a refused start left a run folder behind"
# A diverging run stops with the step and the rank, after writing its metrics.
out=$(timeout 120 $MPIRUN -n 4 "$DIT_MP" "${D[@]}" --tp 2 --pp 2 "${TINY[@]}" --steps 30 --log-every 100 \
  --lr 1e30 --set train.grad_clip=0 --run-dir "$SCRATCH/nan" 2>&1) && fail "a NaN run succeeded"
grep -Eq "NaN or Inf at step [0-9]+ on rank [0-9]+" <<<"$out" || fail "no NaN message: $out"
[[ -s "$SCRATCH/nan/metrics.jsonl" ]] || fail "the NaN run wrote no metrics"
echo "ok: NaN stop"
