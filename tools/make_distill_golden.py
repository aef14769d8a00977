#!/usr/bin/env python3
"""Write a small /config + /distill golden file (the config only names the data shape): the KD loss
terms and gradients of TinyFusion's own training_losses_kd_rep in float64 (tools/distill_golden.py).
  /usr/bin/python3 tools/make_distill_golden.py --learn-sigma --out tests/data/distill_sigma_golden.h5
"""

import argparse
import os
import sys

import h5py
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import distill_golden  # noqa: E402
import make_golden  # noqa: E402  (the /config writer)


def main():
    ap = argparse.ArgumentParser(description="Write a /config + /distill golden file")
    ap.add_argument("--learn-sigma", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--input-size", type=int, default=4)
    ap.add_argument("--patch-size", type=int, default=2)
    ap.add_argument("--in-channels", type=int, default=3)
    ap.add_argument("--hidden-size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--output-weight", type=float, default=0.9)
    ap.add_argument("--feature-weight", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tinyfusion", default=distill_golden.DEFAULT_REPO, help="TinyFusion checkout or git dir")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.batch < 2:
        ap.error("--batch must be >= 2 (t = 0 and t = 1 are both in the batch)")
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(a.seed)
    cfg = argparse.Namespace(input_size=a.input_size, patch_size=a.patch_size,
                             in_channels=a.in_channels, hidden_size=a.hidden_size, depth=3,
                             num_heads=2, mlp_ratio=2.0, num_classes=3, learn_sigma=a.learn_sigma,
                             class_dropout_prob=0.1, seed=a.seed)
    torch.manual_seed(a.seed)
    model = make_golden.perturbed_model(cfg, gen)
    tokens = model.x_embedder.num_patches
    g, attrs = distill_golden.distill_group(gen, a.batch, a.in_channels, a.input_size, tokens, a.hidden_size,
                             a.learn_sigma, a.tinyfusion, a.output_weight, a.feature_weight)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with h5py.File(a.out, "w") as f:
        make_golden.write_config(f, cfg, model)
        f["config"].attrs["source"] = (f"tools/make_distill_golden.py --seed {a.seed}: the data shape "
                                       f"only (the file holds /distill)")
        distill_golden.write_distill(f, g, attrs)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e3:.1f} kB); "
          f"feat_loss {g['feat_loss'].tolist()}, loss {g['loss'].tolist()}")


if __name__ == "__main__":
    main()
