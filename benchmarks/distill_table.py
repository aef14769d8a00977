#!/usr/bin/env python3
"""The pruning and distillation sweep's summary (benchmarks/distill.sh OUT/summary.tsv) as the
markdown table of docs/distill.md: the teacher first, then every pruned student, then the student
trained from scratch; beside each the FID / floor, its ratio to the teacher's, precision, recall,
class accuracy, training minutes, and sampling images/s with the speed-up over the teacher. With
OUT/learned.minutes and OUT/lora.minutes (the learned method's gated training, with full updates or
LoRA), the learned and lora rows' minutes include it.
Rows the summary lacks are left out.

    benchmarks/distill_table.py OUT/summary.tsv
"""
import csv
import os
import sys

ORDER = ["teacher"] + [f"{m}_{r}" for m in ("index", "cos", "loss", "learned", "lora") for r in ("finetune", "kd", "masked")]
ORDER.append("scratch")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    rows = {r["row"]: r for r in csv.DictReader(open(path), delimiter="\t")}
    if "teacher" not in rows:
        sys.exit(f"{path}: no teacher row")
    def minutes_of(method):
        f = os.path.join(os.path.dirname(path), f"{method}.minutes")
        return float(open(f).read()) if os.path.exists(f) else 0.0
    learn_min = {m: minutes_of(m) for m in ("learned", "lora")}
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
        method = name.split("_")[0]
        if learn_min.get(method):
            minutes += learn_min[method]
            what += f" (+ {learn_min[method]:.1f} min learning the gates)"
        fid = float(r["fid_over_floor"])
        speed = float(r["sample_img_per_s"])
        print(f"| `{name}` | {what} | {minutes:.1f} | {float(r['fid']):.2f} | {fid:.1f}x | {fid / t_fid:.2f}x "
              f"| {float(r['precision']):.3f} | {float(r['recall']):.3f} | {float(r['class_acc']):.1f}% "
              f"| {speed:.1f} | {speed / t_speed:.2f}x |")


if __name__ == "__main__":
    main()
