#!/usr/bin/env bash
# Distillation ([distill]): a depth-2 student learns from a trained depth-4 teacher with output KD,
# the recipe's loss and the masked feature loss. Its losses (every term) are layout-invariant: 1 rank
# against tp 2 x pp 2 x dp 2 with sequence parallelism and against pp 2 with interleaving, within
# 1e-5; under ZeRO-3 the teacher is sharded over dp and trains the same bits as zero 1 at dp 2, dp 4
# and pp 2 x dp 2; a run stopped at step 2 resumes bit for bit; the teacher changes none of its files and is in
# no checkpoint; a distilled step costs more than a plain one but the student's EMA samples.
source "$(dirname "$0")/common.sh"
prepare_fashion_test
D=(--data "$SCRATCH/fm_test.h5" "${TINY[@]}" --log-every 1 --sample-every 0)
$MPIRUN -n 2 "$DIT_MP" --tp 1 --pp 2 --steps 12 --run-dir "$SCRATCH/teacher" "${D[@]}" --set model.depth=4 \
  > "$SCRATCH/teacher.log" 2>&1 || { cat "$SCRATCH/teacher.log"; fail "teacher training failed"; }
T="$SCRATCH/teacher/ema.h5"
sum_before=$(sha256sum "$T")
S=("${D[@]}" --set distill.teacher=\""$T"\" --set distill.feature_decay=\"none\" --set distill.feature_weight=0.5)
student() {  # student NP DIR STEPS [ARGS...]
  local np=$1 dir=$2 steps=$3
  shift 3
  $MPIRUN -n "$np" "$DIT_MP" --steps "$steps" --run-dir "$dir" "${S[@]}" "$@" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "student $dir failed"; }
}
student 1 "$SCRATCH/one" 4 --tp 1 --pp 1
student 8 "$SCRATCH/tp2pp2dp2" 4 --tp 2 --pp 2 --set parallel.sequence_parallel=true --set train.recompute=\"selective\"
student 4 "$SCRATCH/pp2v2" 4 --tp 1 --pp 2 --virtual-stages 2 --set model.depth=4 --set distill.teacher_layers=[0,1,2,3] \
  --set distill.student_layers=[0,1,2,3]
student 1 "$SCRATCH/one_d4" 4 --tp 1 --pp 1 --set model.depth=4 --set distill.teacher_layers=[0,1,2,3] --set distill.student_layers=[0,1,2,3]
grep -q "kd " "$SCRATCH/one.log" || fail "the log line names no distillation terms"
python3 - "$SCRATCH" <<'PY'
import json, sys
d = sys.argv[1]
def rows(name):
    return {r["step"]: r for r in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in r}
def same(a, b):
    ra, rb = rows(a), rows(b)
    assert sorted(ra) == sorted(rb) == [1, 2, 3, 4], (a, sorted(ra), b, sorted(rb))
    for s in ra:
        for k in ("loss", "target", "kd", "feature"):
            x, y = ra[s][k], rb[s][k]
            assert abs(x - y) <= 1e-5 * max(abs(x), 1e-12), (a, b, s, k, x, y)
one = rows("one")
for s, r in one.items():
    assert r["kd"] > 0 and r["feature"] > 0 and r["target"] > 0, r
    want = 0.9 * r["kd"] + 0.1 * r["target"] + 0.5 * r["feature"]
    assert abs(r["loss"] - want) <= 1e-5 * want, (s, r["loss"], want)
same("one", "tp2pp2dp2")
same("one_d4", "pp2v2")
print("layout-invariant: 1 rank = tp2 pp2 dp2 sp, pp2 v2 within 1e-5")
PY
[[ $? -eq 0 ]] || fail "distilled losses differ across layouts"
# Each [distill] key changes what it governs (2 steps at 1 rank against the same baseline).
student 1 "$SCRATCH/nomask" 2 --tp 1 --pp 1 --set distill.mask_sigma=0
student 1 "$SCRATCH/decay" 2 --tp 1 --pp 1 --set distill.feature_decay=\"linear\"
student 1 "$SCRATCH/weights" 2 --tp 1 --pp 1 --set distill.output_weight=0.5 --set distill.target_weight=0.7
student 1 "$SCRATCH/pairs" 2 --tp 1 --pp 1 --set distill.student_layers=[1] --set distill.teacher_layers=[2]
python3 - "$SCRATCH" <<'PY' || fail "a [distill] key does not change what it governs"
import json, sys
d = sys.argv[1]
def rows(name):
    return {r["step"]: r for r in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in r}
one, nomask, decay, w, pairs = (rows(n) for n in ("one", "nomask", "decay", "weights", "pairs"))
assert nomask[1]["feature"] != one[1]["feature"], ("mask_sigma = 0 changes nothing", nomask[1], one[1])
assert nomask[1]["kd"] == one[1]["kd"] and nomask[1]["target"] == one[1]["target"]
# linear decay over 2 steps: the full weight at step 1, none at step 2
assert decay[1]["loss"] == one[1]["loss"], (decay[1], one[1])
want = 0.9 * decay[2]["kd"] + 0.1 * decay[2]["target"]
assert abs(decay[2]["loss"] - want) <= 1e-6 * want, (decay[2], want)
r = w[1]
want = 0.5 * r["kd"] + 0.7 * r["target"] + 0.5 * r["feature"]
assert abs(r["loss"] - want) <= 1e-6 * want and r["kd"] == one[1]["kd"], (r, want)
assert pairs[1]["feature"] != one[1]["feature"], (pairs[1], one[1])
print("mask_sigma, feature_decay, output/target_weight and the pairs each change their terms")
PY
# The plan counts the teacher (its weights and activation arena) as the run measured it.
for case in "one 1 1 1" "tp2pp2dp2 2 2 2"; do
  set -- $case
  "$DIT_MP" plan --data "$SCRATCH/fm_test.h5" "${TINY[@]}" --set distill.teacher=\""$T"\" --set distill.feature_decay=\"none\" \
    --set distill.feature_weight=0.5 --tp "$2" --pp "$3" --dp "$4" \
    $([[ $1 == tp2pp2dp2 ]] && echo --set parallel.sequence_parallel=true --set train.recompute=\"selective\") \
    --json "$SCRATCH/$1/plan.json" > "$SCRATCH/plan_$1.txt" 2>&1 || { cat "$SCRATCH/plan_$1.txt"; fail "plan $1 failed"; }
  grep -q "the distillation teacher holds" "$SCRATCH/plan_$1.txt" || fail "plan $1 names no teacher"
  python3 - "$SCRATCH/$1" <<'PY' || fail "plan differs from the run with a teacher: $1"
import json, sys
acct = json.load(open(f"{sys.argv[1]}/accounting.json"))
plan = json.load(open(f"{sys.argv[1]}/plan.json"))
for r in acct:
    st = plan["stages"][r["pp"]]
    for k in ("teacher_bytes", "total_bytes", "activation_bytes", "param_bytes"):
        assert int(r[k]) == int(st[k]), (r["rank"], k, r[k], st[k])
    assert int(r["teacher_bytes"]) > 0, r
print(f"plan = run with a teacher: {len(acct)} ranks")
PY
done
# ZeRO-3 shards the teacher over dp as it shards the student: the same bits as zero 1 at the same
# layout (every loss term, the EMA weights), the teacher's bytes at dp 4 under 0.7 of whole, and plan = run.
student 2 "$SCRATCH/dp2_z1" 3 --tp 1 --pp 1
student 2 "$SCRATCH/dp2_z3" 3 --tp 1 --pp 1 --set optim.zero=3
student 4 "$SCRATCH/dp4_z1" 3 --tp 1 --pp 1
student 4 "$SCRATCH/dp4_z3" 3 --tp 1 --pp 1 --set optim.zero=3 --set optim.overlap=false
student 4 "$SCRATCH/pp2dp2_z1" 3 --tp 1 --pp 2
student 4 "$SCRATCH/pp2dp2_z3" 3 --tp 1 --pp 2 --set optim.zero=3
for pair in "dp2 1 1 2" "dp4 1 1 4" "pp2dp2 1 2 2"; do
  set -- $pair
  cmp -s "$SCRATCH/$1_z1/ema.h5" "$SCRATCH/$1_z3/ema.h5" || fail "$1: zero 3 with a sharded teacher trains other EMA weights"
  "$DIT_MP" plan --data "$SCRATCH/fm_test.h5" "${TINY[@]}" --set distill.teacher=\""$T"\" --set distill.feature_decay=\"none\" \
    --set distill.feature_weight=0.5 --tp "$2" --pp "$3" --dp "$4" --set optim.zero=3 \
    $([[ $1 == dp4 ]] && echo --set optim.overlap=false) --json "$SCRATCH/$1_z3/plan.json" > "$SCRATCH/plan_$1_z3.txt" 2>&1 ||
    { cat "$SCRATCH/plan_$1_z3.txt"; fail "plan $1 zero 3 failed"; }
  python3 - "$SCRATCH" "$1" <<'PY' || fail "$1: the sharded teacher"
import json, sys
d, name = sys.argv[1], sys.argv[2]
def rows(run):
    return {r["step"]: r for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "loss" in r}
one, three = rows(name + "_z1"), rows(name + "_z3")
assert sorted(one) == sorted(three) == [1, 2, 3], (sorted(one), sorted(three))
for s in one:
    for k in ("loss", "target", "kd", "feature", "grad_norm"):
        assert one[s][k] == three[s][k], (name, s, k, one[s][k], three[s][k])
a1 = json.load(open(f"{d}/{name}_z1/accounting.json"))
a3 = json.load(open(f"{d}/{name}_z3/accounting.json"))
plan = json.load(open(f"{d}/{name}_z3/plan.json"))
for r1, r3 in zip(a1, a3):
    assert r1["rank"] == r3["rank"] and int(r3["teacher_bytes"]) > 0, (r1, r3)
    # The teacher's shard and the units gathered at once beyond it: at dp 4 (one unit at a time,
    # no prefetch) well under whole; at dp 2 with 2 or 3 units a stage, the one running and the one
    # fetched ahead may be all of it, never more.
    if name == "dp4":
        assert int(r3["teacher_bytes"]) < 0.7 * int(r1["teacher_bytes"]), (name, r1["rank"], r1["teacher_bytes"], r3["teacher_bytes"])
    assert int(r3["teacher_bytes"]) <= int(r1["teacher_bytes"]), (name, r1["rank"], r1["teacher_bytes"], r3["teacher_bytes"])
    for k in ("teacher_bytes", "total_bytes", "param_bytes"):
        assert int(r3[k]) == int(plan["stages"][r3["pp"]][k]), (name, r3["rank"], k, r3[k], plan["stages"][r3["pp"]][k])
print(f"{name}: zero 3 = zero 1 bit for bit with the teacher sharded; teacher bytes of rank 0 "
      f"{a3[0]['teacher_bytes']} of {a1[0]['teacher_bytes']}; plan = run")
PY
done
# Resume: stopped at step 2 and resumed, steps 3-4 match the uninterrupted run bit for bit.
student 1 "$SCRATCH/part" 2 --tp 1 --pp 1
cp -r "$SCRATCH/part" "$SCRATCH/resumed"
student 1 "$SCRATCH/resumed" 4 --tp 1 --pp 1 --resume auto
compare_resumed_losses "$SCRATCH/one" "$SCRATCH/resumed" 1 || fail "a resumed distillation differs"
grep -q "teacher_crc32 = \"[0-9a-f]\{8\}\"" "$SCRATCH/one/config.toml" || fail "the run did not record its teacher's checksum"
# Another teacher file (the teacher's raw weights, not its EMA) is refused on resume, naming both.
cp -r "$SCRATCH/part" "$SCRATCH/other_teacher"
if $MPIRUN -n 1 "$DIT_MP" --steps 4 --run-dir "$SCRATCH/other_teacher" "${S[@]}" --tp 1 --pp 1 --resume auto \
     --set distill.teacher=\""$SCRATCH/teacher/model.h5"\" > "$SCRATCH/other_teacher.log" 2>&1; then
  fail "a resume with another teacher was accepted"
fi
grep -q "was distilled from .*ema.h5 (CRC-32 [0-9a-f]\{8\}); resume it with that teacher" "$SCRATCH/other_teacher.log" ||
  { cat "$SCRATCH/other_teacher.log"; fail "the changed teacher's message"; }
[[ "$(sha256sum "$T")" == "$sum_before" ]] || fail "the teacher's file changed"
if grep -q "teacher" <<<"$(h5ls -r "$SCRATCH/one/ckpt/$(cat "$SCRATCH/one/ckpt/latest")/index.h5")"; then
  fail "a checkpoint holds teacher tensors"
fi
"$DIT_MP" sample --run "$SCRATCH/one" --out "$SCRATCH/one_samples.png" > "$SCRATCH/sample.log" 2>&1 ||
  { cat "$SCRATCH/sample.log"; fail "sampling the student failed"; }
echo ok
