#!/usr/bin/env python3
"""The recipe ablation's summary (benchmarks/recipes.sh OUT/summary.tsv) as the markdown table of
docs/recipes.md: LightningDiT's changes cumulatively in its order, then each change alone on the
official recipe, with LightningDiT's published FID-50K (DiT-XL/2, ImageNet 256, 80 epochs) beside
each cumulative row. Rows the summary lacks are left out.

    benchmarks/recipes_table.py OUT/summary.tsv
"""
import csv
import sys

ROWS = [  # setting, what it is, LightningDiT's FID-50K
    ("dit", "the official DiT recipe (DDPM, epsilon, learned sigma)", "19.50"),
    ("flow", "+ rectified flow (SiT: linear path, velocity)", "17.20"),
    ("flow_lognorm", "+ logit-normal timesteps", "13.99"),
    ("flow_lognorm_cos", "+ the cosine loss", "12.52"),
    ("flow_lognorm_cos_swiglu", "+ SwiGLU", "10.10"),
    ("flow_lognorm_cos_swiglu_rms", "+ RMSNorm", "9.25"),
    ("lightning", "+ 2-D RoPE: LightningDiT's recipe", "7.13"),
    ("minsnr", "official + min-SNR-5 weighting", ""),
    ("ddpm_swiglu", "official + SwiGLU", ""),
    ("ddpm_rms", "official + RMSNorm", ""),
    ("ddpm_rope", "official + 2-D RoPE", ""),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = {r["setting"]: r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")}
    print("| setting | change | train min | FID | FID / floor | precision | recall | class acc. | published FID |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, what, published in ROWS:
        if name not in rows:
            continue
        r = rows[name]
        print(f"| `{name}` | {what} | {r['train_min']} | {float(r['fid']):.2f} | {r['fid_over_floor']}x | "
              f"{r['precision']} | {r['recall']} | {r['class_acc']}% | {published} |")


if __name__ == "__main__":
    main()
