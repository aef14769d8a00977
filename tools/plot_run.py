#!/usr/bin/env python3
"""Plots of a dit_mp run from its metrics.jsonl.

  plot_run.py RUN_DIR                 writes RUN_DIR/loss.png and RUN_DIR/throughput.png
  plot_run.py RUN_A RUN_B ... [--out FILE]
      the same for each run, plus one figure comparing them (default: comparison.png in the
      current folder): smoothed loss and images/s of every run on shared axes.

quality.png (when the run measured sample quality, train.eval_every): FID against its real-data
floor, and class accuracy, per evaluated step.
loss.png: the loss and its two terms (MSE and the variational bound), raw (thin) and smoothed
(an exponential moving average, thick), on a log scale. throughput.png: images/s and MFU per
logged step. Each file is written under a temporary name and renamed, so a reader never sees half
a picture. Needs matplotlib (Debian: python3-matplotlib); without it the exit code is 3.
"""
import argparse
import json
import os
import sys

NO_MATPLOTLIB = 3


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"plot_run.py: {path} does not exist (is {run_dir} a dit_mp run folder?)")
    rows, evals = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_run.py: {path}:{n}: not JSON ({e})")
            # A resumed run rewrote later steps: the last row of a step counts. Sample-quality
            # rows ({"step", "eval"}) are kept apart.
            (evals if "eval" in r else rows)[r["step"]] = r
    if not rows:
        sys.exit(f"plot_run.py: {path} has no rows yet")
    return [rows[s] for s in sorted(rows)], [evals[s] for s in sorted(evals)]


def smooth(values, span):
    """Exponential moving average with the given span (in logged rows), bias-corrected."""
    alpha = 2.0 / (span + 1.0)
    out, avg, weight = [], 0.0, 0.0
    for v in values:
        avg = (1 - alpha) * avg + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(avg / weight)
    return out


def span_for(n):
    return max(1, min(50, n // 10))


def save(fig, path):
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def plot_loss(plt, rows, run_dir):
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    terms = (("loss", "loss", "C0"), ("mse", "MSE term", "C1"), ("vb", "VB term", "C2"), ("cos", "cosine term", "C2"))
    for key, label, color in terms:
        vals = [r.get(key, 0) for r in rows]
        if key in ("vb", "cos") and not any(vals):
            continue  # no learned sigma (DDPM) or no cosine loss (flow): no second term
        ax.plot(steps, vals, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, smooth(vals, span_for(len(vals))), color=color, linewidth=2, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (thin: raw, thick: smoothed)")
    ax.set_title(f"{os.path.basename(os.path.normpath(run_dir))}: training loss")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save(fig, os.path.join(run_dir, "loss.png"))
    plt.close(fig)


def plot_quality(plt, evals, run_dir):
    steps = [e["step"] for e in evals]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    a1.plot(steps, [e["eval"]["samples"]["fid"] for e in evals], "o-", color="C0", label="samples")
    a1.plot(steps, [e["eval"]["floor"]["fid"] for e in evals], "--", color="C7", label="real data (floor)")
    a1.set_yscale("log")
    a1.set_ylabel("FID (classifier features)")
    a2.plot(steps, [100 * e["eval"]["samples"]["class_accuracy"] for e in evals], "o-", color="C2", label="samples")
    a2.plot(steps, [100 * e["eval"]["floor"]["class_accuracy"] for e in evals], "--", color="C7",
            label="real data")
    a2.set_ylabel("class accuracy (%)")
    a2.set_xlabel("step")
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.legend()
    a1.set_title(f"{os.path.basename(os.path.normpath(run_dir))}: sample quality")
    save(fig, os.path.join(run_dir, "quality.png"))
    plt.close(fig)


def plot_throughput(plt, rows, run_dir):
    steps = [r["step"] for r in rows]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ips = [r["images_per_s"] for r in rows]
    mfu = [100.0 * r["mfu"] for r in rows]
    a1.plot(steps, ips, color="C0", alpha=0.3, linewidth=0.8)
    a1.plot(steps, smooth(ips, span_for(len(ips))), color="C0", linewidth=2)
    a1.set_ylabel("images/s")
    a2.plot(steps, mfu, color="C3", alpha=0.3, linewidth=0.8)
    a2.plot(steps, smooth(mfu, span_for(len(mfu))), color="C3", linewidth=2)
    a2.set_ylabel("MFU (%)")
    a2.set_xlabel("step")
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
    a1.set_title(f"{os.path.basename(os.path.normpath(run_dir))}: throughput (thin: raw, thick: smoothed)")
    save(fig, os.path.join(run_dir, "throughput.png"))
    plt.close(fig)


def plot_comparison(plt, runs, out):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (run_dir, rows) in enumerate(runs):
        name = os.path.basename(os.path.normpath(run_dir))
        steps = [r["step"] for r in rows]
        loss = [r["loss"] for r in rows]
        ips = [r["images_per_s"] for r in rows]
        a1.plot(steps, smooth(loss, span_for(len(loss))), color=f"C{i % 10}", linewidth=2, label=name)
        a2.plot(steps, smooth(ips, span_for(len(ips))), color=f"C{i % 10}", linewidth=2, label=name)
    a1.set_yscale("log")
    a1.set_xlabel("step")
    a1.set_ylabel("loss (smoothed)")
    a2.set_xlabel("step")
    a2.set_ylabel("images/s (smoothed)")
    for a in (a1, a2):
        a.grid(True, which="both", alpha=0.3)
        a.legend()
    fig.suptitle(f"{len(runs)} runs compared")
    save(fig, out)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="dit_mp run folders (with metrics.jsonl)")
    p.add_argument("--out", default="comparison.png", help="the comparison figure (several runs only)")
    args = p.parse_args()
    runs, evals = [], {}
    for d in args.runs:
        rows, evals[d] = read_metrics(d)
        runs.append((d, rows))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_run.py: matplotlib is not installed (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return NO_MATPLOTLIB
    for run_dir, rows in runs:
        plot_loss(plt, rows, run_dir)
        plot_throughput(plt, rows, run_dir)
        print(f"wrote {os.path.join(run_dir, 'loss.png')} and {os.path.join(run_dir, 'throughput.png')}")
        if evals[run_dir]:
            plot_quality(plt, evals[run_dir], run_dir)
            print(f"wrote {os.path.join(run_dir, 'quality.png')}")
    if len(runs) > 1:
        plot_comparison(plt, runs, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
