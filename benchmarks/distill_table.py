#!/usr/bin/env python3
"""The pruning and distillation sweep's summary (benchmarks/distill.sh OUT/summary.tsv) as the
markdown table of docs/distill.md: the teacher first, then every pruned student, then the student
trained from scratch; beside each the FID / floor, its ratio to the teacher's, precision, recall,
class accuracy, training minutes, and sampling images/s with the speed-up over the teacher. With
OUT/learned.minutes (the learned method's gated training), the learned rows' minutes include it.
Rows the summary lacks are left out.

    benchmarks/distill_table.py OUT/summary.tsv
"""
import csv
import os
import sys

ORDER = ["teacher"] + [f"{m}_{r}" for m in ("index", "cos", "loss", "learned") for r in ("finetune", "kd", "masked")]
ORDER.append("scratch")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    rows = {r["row"]: r for r in csv.DictReader(open(path), delimiter="\t")}
    if "teacher" not in rows:
        sys.exit(f"{path}: no teacher row")
    learned = os.path.join(os.path.dirname(path), "learned.minutes")
    learn_min = float(open(learned).read()) if os.path.exists(learned) else 0.0
    t = rows["teacher"]
    t_fid, t_speed = float(t["fid_over_floor"]), float(t["sample_img_per_s"])
    print("| row | what | train min | FID | FID / floor | vs teacher | precision | recall | class acc. "
          "| sampling img/s | speed-up |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ORDER:
        r = rows.get(name)
        if r is None:
            continue
        minutes = float(r["train_min"])
        what = r["what"]
        if name.startswith("learned_") and learn_min:
            minutes += learn_min
            what += f" (+ {learn_min:.1f} min learning the gates)"
        fid = float(r["fid_over_floor"])
        speed = float(r["sample_img_per_s"])
        print(f"| `{name}` | {what} | {minutes:.1f} | {float(r['fid']):.2f} | {fid:.1f}x | {fid / t_fid:.2f}x "
              f"| {float(r['precision']):.3f} | {float(r['recall']):.3f} | {float(r['class_acc']):.1f}% "
              f"| {speed:.1f} | {speed / t_speed:.2f}x |")


if __name__ == "__main__":
    main()
