#!/usr/bin/env bash
# The scaling-study driver on the smallest study (benchmarks/scaling/ci.toml): two real mpirun points
# and one that cannot run become three rows (the failed one with the trainer's message), plots and a
# report; a second run skips every finished point.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STUDY=(/usr/bin/python3 "$ROOT/benchmarks/scaling/study.py")
export DIT_MP
"${STUDY[@]}" run "$ROOT/benchmarks/scaling/ci.toml" --out "$SCRATCH/study" > "$SCRATCH/run1.log" 2>&1 ||
  { cat "$SCRATCH/run1.log"; fail "the study failed"; }
grep -q "3 points, 0 finished before (skipped), 2 ok, 1 failed" "$SCRATCH/run1.log" ||
  { cat "$SCRATCH/run1.log"; fail "expected 2 ok and 1 failed point"; }
for f in results.csv results.json report.md throughput.png bubble.png time_share.png memory.png; do
  [[ -s "$SCRATCH/study/$f" ]] || fail "the study did not write $f"
done
python3 - "$SCRATCH/study/results.json" <<'PY'
import json, sys
rows = {r["point"]: r for r in json.load(open(sys.argv[1]))}
one = rows["micro_strong_b8_tp1_pp1_dp1_1f1b_m2_v1_fp32_none"]
two = rows["micro_strong_b8_tp1_pp2_dp1_1f1b_m2_v2_fp32_none"]
bad = rows["micro_strong_b8_tp1_pp1_dp1_1f1b_m2_v2_fp32_none"]
assert one["status"] == two["status"] == "ok", (one, two)
assert one["images_per_s"] > 0 and one["step_s_min"] <= one["step_s_median"] <= one["step_s_max"], one
assert one["pp_bytes"] == 0 and two["pp_bytes"] > 0, (one["pp_bytes"], two["pp_bytes"])
assert abs(two["theoretical_bubble"] - 1 / 5) < 1e-12, two["theoretical_bubble"]  # (p-1)/(vm+p-1), p 2 v 2 m 2
assert 0 <= two["measured_bubble"] < 1 and two["peak_bytes_per_rank"] > 0, two
assert bad["status"] == "failed" and "virtual_stages = 2: expected 1 when parallel.pp = 1" in bad["reason"], bad
PY
grep -q "| micro_strong_b8_tp1_pp2_dp1_1f1b_m2_v2_fp32_none | ok |" "$SCRATCH/study/report.md" ||
  fail "the report has no row for the pp 2 point"
"${STUDY[@]}" run "$ROOT/benchmarks/scaling/ci.toml" --out "$SCRATCH/study" > "$SCRATCH/run2.log" 2>&1 ||
  { cat "$SCRATCH/run2.log"; fail "the resumed study failed"; }
grep -q "3 points, 3 finished before (skipped)" "$SCRATCH/run2.log" || { cat "$SCRATCH/run2.log"; fail "not resumed"; }
echo ok
