"""Plots and the markdown report of a scaling study (rows from study.py): throughput and parallel
efficiency vs ranks, measured vs theoretical bubble vs microbatches per pipeline depth (v = 1, 2, ...),
where each layout's step time goes, and memory per rank per layout. Files are written under a
temporary name and renamed into place."""

import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig, path):
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)


def layout_name(r):
    v = f" v{r['virtual_stages']}" if int(r["virtual_stages"]) > 1 else ""
    return f"{r['tp']}x{r['pp']}x{r['dp']} m{r['microbatches']}{v}"


def plot_scaling(ok, path):
    """Best images/s at each rank count per (model, kind, batch); efficiency against the smallest."""
    groups = defaultdict(dict)
    for r in ok:
        key = (r["model"], r["kind"], r["global_batch"] if r["kind"] == "strong" else r["global_batch"] // r["dp"])
        if r["images_per_s"] > groups[key].get(r["ranks"], (0, None))[0]:
            groups[key][r["ranks"]] = (r["images_per_s"], layout_name(r))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    lines = []
    for (model, kind, batch), by_n in sorted(groups.items()):
        ns = sorted(by_n)
        ips = [by_n[n][0] for n in ns]
        label = f"{model} {kind} ({'global' if kind == 'strong' else 'per-replica'} batch {batch})"
        a.plot(ns, ips, "o-", label=label)
        base_n, base = ns[0], ips[0]
        eff = [(x / base) / (n / base_n) for n, x in zip(ns, ips)]
        b.plot(ns, eff, "o-", label=label)
        lines.append((label, ns, ips, eff, [by_n[n][1] for n in ns]))
    a.set(xlabel="ranks", ylabel="images/s (best layout)", title="throughput")
    b.set(xlabel="ranks", ylabel="parallel efficiency", title="efficiency vs the smallest run", ylim=(0, 1.2))
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, path)
    return lines


def plot_bubble(ok, path):
    """Measured (mean over ranks) and theoretical bubble vs microbatches, one line per (pp, v)."""
    series = defaultdict(list)
    for r in ok:
        if r["pp"] > 1 and r["schedule"] == "1f1b":
            series[(r["pp"], r["virtual_stages"], r["tp"], r["dp"])].append(r)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (key, rs) in enumerate(sorted(series.items())):
        rs.sort(key=lambda r: r["microbatches"])
        m = [r["microbatches"] for r in rs]
        col = f"C{i % 10}"
        lab = f"pp {key[0]} v {key[1]} (tp {key[2]} dp {key[3]})"
        ax.plot(m, [r["measured_bubble"] for r in rs], "o-", color=col, label=lab + " measured")
        ax.plot(m, [r["theoretical_bubble"] for r in rs], "--", color=col, label=lab + " (p-1)/(vm+p-1)")
    ax.set(xlabel="microbatches per step", ylabel="bubble (idle share of a rank)", title="pipeline bubble")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    _save(fig, path)
    return series


def plot_time_share(ok, path):
    """Where the step time of each layout goes (mean over ranks): compute (tp collectives inside),
    pipeline wait, optimizer (dp reduce-scatter/all-gather inside), the rest."""
    rs = sorted(ok, key=lambda r: (r["ranks"], layout_name(r)))
    names = [layout_name(r) for r in rs]
    parts = {"compute": [], "pipeline wait": [], "optimizer + dp": [], "other": []}
    for r in rs:
        s = r["step_s_median"]
        c, w, o = r["compute_s"] / s, r["pp_wait_s"] / s, r["optimizer_s"] / s
        for k, x in zip(parts, (c, w, o, max(0.0, 1 - c - w - o))):
            parts[k].append(x)
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rs)), 4))
    bottom = [0.0] * len(rs)
    for k, xs in parts.items():
        ax.bar(names, xs, bottom=bottom, label=k)
        bottom = [b + x for b, x in zip(bottom, xs)]
    ax.set(ylabel="share of the median step", title="where a step goes, per layout (tp x pp x dp)")
    ax.tick_params(axis="x", rotation=75, labelsize=7)
    ax.legend(fontsize=7)
    _save(fig, path)


def plot_memory(ok, path):
    rs = sorted(ok, key=lambda r: (r["ranks"], layout_name(r)))
    names = [layout_name(r) for r in rs]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rs)), 4))
    ax.bar(names, [r["peak_bytes_per_rank"] / 2**20 for r in rs], label="largest rank")
    ax.plot(names, [r["mean_bytes_per_rank"] / 2**20 for r in rs], "k_", markersize=12, label="mean over ranks")
    ax.set(ylabel="MiB per rank (accounting.json total)", title="memory per rank per layout")
    ax.tick_params(axis="x", rotation=75, labelsize=7)
    ax.legend(fontsize=7)
    _save(fig, path)


def write_report(out, rows, title):
    ok = [r for r in rows if r["status"] == "ok"]
    md = [f"# {title}", "",
          f"{len(rows)} points: {len(ok)} measured, {len(rows) - len(ok)} failed. Every point is a real "
          "`mpirun` job; times are medians over the steps after warm-up (spread = min..max).", ""]
    if ok:
        scaling = plot_scaling(ok, os.path.join(out, "throughput.png"))
        plot_bubble(ok, os.path.join(out, "bubble.png"))
        plot_time_share(ok, os.path.join(out, "time_share.png"))
        plot_memory(ok, os.path.join(out, "memory.png"))
        md += ["## Throughput and parallel efficiency", "", "![throughput](throughput.png)", ""]
        for label, ns, ips, eff, lays in scaling:
            md.append(f"- {label}: " + ", ".join(f"{n} ranks {x:.1f} img/s ({100 * e:.0f}%, {l})"
                                                 for n, x, e, l in zip(ns, ips, eff, lays)))
        md += ["", "## Pipeline bubble: measured vs theory", "",
               "Measured: pipeline wait / (wait + compute), mean over ranks, last step. Theory: "
               "(p - 1) / (v m + p - 1) for v virtual stages.", "", "![bubble](bubble.png)", "",
               "## Where a step goes", "", "![time share](time_share.png)", "",
               "## Memory per rank", "", "![memory](memory.png)", ""]
    md += ["## All points", "",
           "| point | status | img/s | step s (min..max) | compute s | pp wait s | optim s | bubble meas/theory | "
           "tp / pp / dp MB per rank | peak MiB/rank |", "|" + " --- |" * 10]
    for r in rows:
        if r["status"] != "ok":
            md.append(f"| {r['point']} | failed: {r['reason']} | | | | | | | | |")
            continue
        md.append(f"| {r['point']} | ok | {r['images_per_s']:.1f} | {r['step_s_median']:.3f} "
                  f"({r['step_s_min']:.3f}..{r['step_s_max']:.3f}) | {r['compute_s']:.3f} | {r['pp_wait_s']:.3f} | "
                  f"{r['optimizer_s']:.3f} | {100 * r['measured_bubble']:.1f}% / {100 * r['theoretical_bubble']:.1f}% | "
                  f"{r['tp_bytes'] / 1e6:.2f} / {r['pp_bytes'] / 1e6:.2f} / {r['dp_bytes'] / 1e6:.2f} | "
                  f"{r['peak_bytes_per_rank'] / 2**20:.1f} |")
    path = os.path.join(out, "report.md")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(tmp, path)
    print(f"study: wrote {path}")
