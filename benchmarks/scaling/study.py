#!/usr/bin/python3
"""Scaling studies for dit_mp: sweep layouts and sizes as real mpirun jobs, collect one row per point,
draw the curves and write a markdown report.

  benchmarks/scaling/study.py run STUDY.toml --out DIR     # run (resumes: finished points are skipped)
  benchmarks/scaling/study.py report DIR                   # plots + report.md from DIR/results.json

One entry point in Python rather than a `dit_mp scale` subcommand: a study launches many mpirun jobs,
parses their JSON and draws plots, which is a driver's job, not the trainer's; the trainer stays the
thing being measured. The study file (TOML) is documented in benchmarks/scaling/README.md.
"""

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIELDS = [
    "point", "status", "reason", "model", "kind", "global_batch", "tp", "pp", "dp", "ranks", "schedule",
    "virtual_stages", "microbatches", "micro_batch", "precision", "recompute", "images_per_s",
    "step_s_median", "step_s_min", "step_s_max", "compute_s", "pp_wait_s", "optimizer_s",
    "measured_bubble", "theoretical_bubble", "tp_bytes", "pp_bytes", "dp_bytes", "peak_bytes_per_rank",
    "mean_bytes_per_rank", "wall_s",
]


def fail(msg):
    print(f"study: {msg}", file=sys.stderr)
    sys.exit(2)


def write_atomic(path, text):
    """Write under a temporary name, then rename into place (a crash never leaves half a file)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def parse_layout(text):
    try:
        tp, pp, dp = (int(x) for x in text.split("x"))
    except ValueError:
        fail(f"layout '{text}': expected TPxPPxDP, e.g. 2x2x1")
    if min(tp, pp, dp) < 1:
        fail(f"layout '{text}': every factor must be >= 1")
    return tp, pp, dp


def as_list(v):
    return v if isinstance(v, list) else [v]


def load_study(path):
    try:
        with open(path, "rb") as f:
            s = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{path}: {e}")
    st = s.get("study", {})
    models = {m["name"]: m for m in s.get("model", [])}
    if not models:
        fail(f"{path}: no [[model]] table")
    if not s.get("sweep"):
        fail(f"{path}: no [[sweep]] table")
    return st, models, s["sweep"]


def expand(st, models, sweeps):
    """Every point of every sweep: a dict of settings, named uniquely."""
    points = []
    for i, sw in enumerate(sweeps):
        kind = sw.get("kind", "strong")
        if kind not in ("strong", "weak"):
            fail(f"sweep {i}: kind = '{kind}': expected strong or weak")
        for name in as_list(sw.get("model", list(models)[0])):
            if name not in models:
                fail(f"sweep {i}: model '{name}' is not one of the [[model]] names {sorted(models)}")
            combos = itertools.product(
                as_list(sw.get("batch", 32)), [parse_layout(x) for x in as_list(sw["layouts"])],
                as_list(sw.get("schedule", "1f1b")), as_list(sw.get("microbatches", 1)),
                as_list(sw.get("virtual_stages", 1)), as_list(sw.get("precision", st.get("precision", "fp32"))),
                as_list(sw.get("recompute", st.get("recompute", "none"))))
            for batch, (tp, pp, dp), sched, m, v, prec, rc in combos:
                # strong: `batch` is the global batch; weak: the batch of one data-parallel replica.
                gb = batch if kind == "strong" else batch * dp
                p = dict(model=name, kind=kind, global_batch=gb, tp=tp, pp=pp, dp=dp, ranks=tp * pp * dp,
                         schedule=sched, microbatches=m, virtual_stages=v, precision=prec, recompute=rc,
                         steps=sw.get("steps", st.get("steps", 6)), warmup=sw.get("warmup", st.get("warmup", 2)))
                p["point"] = (f"{name}_{kind}_b{gb}_tp{tp}_pp{pp}_dp{dp}_{sched}_m{m}_v{v}_{prec}_{rc}")
                if p["point"] not in {q["point"] for q in points}:
                    points.append(p)
    return points


def command(st, model, p, run_dir):
    binary = os.environ.get("DIT_MP") or st.get("binary") or os.path.join(ROOT, "build-cpu/bin/dit_mp")
    launcher = shlex.split(st.get("launcher", "mpirun --oversubscribe --allow-run-as-root"))
    mb = p["global_batch"] // max(1, p["dp"] * p["microbatches"])
    args = [*launcher, "-n", str(p["ranks"]), binary, "--tp", str(p["tp"]), "--pp", str(p["pp"]),
            "--schedule", p["schedule"], "--virtual-stages", str(p["virtual_stages"]),
            "--steps", str(p["steps"]), "--log-every", "1", "--precision", p["precision"],
            "--recompute", p["recompute"], "--run-dir", run_dir, "--overwrite",
            "--set", f"train.global_batch={p['global_batch']}", "--set", f"train.micro_batch={mb}",
            "--set", "sample.num_steps=2", "--set", "sample.per_class=1", "--set", "train.warmup=0"]
    if st.get("data"):
        args += ["--data", st["data"]]
    if model.get("preset"):
        args += ["--model", model["preset"]]
    args += [str(a) for a in model.get("args", [])] + [str(a) for a in st.get("args", [])]
    return args, mb


def measure(p, run_dir, wall):
    """One row from the run's metrics.jsonl (per-step times after warm-up) and accounting.json."""
    steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    steps = [r for r in steps if "images_per_s" in r]
    times = [p["global_batch"] / r["images_per_s"] for r in steps[p["warmup"]:] if r["images_per_s"] > 0]
    if not times:
        raise RuntimeError(f"no steps after the {p['warmup']} warm-up steps in metrics.jsonl")
    acct = json.load(open(os.path.join(run_dir, "accounting.json")))
    mean = lambda k: statistics.fmean(r.get(k, 0.0) for r in acct)
    med = statistics.median(times)
    return dict(status="ok", reason="", images_per_s=p["global_batch"] / med, step_s_median=med,
                step_s_min=min(times), step_s_max=max(times), compute_s=mean("compute_s"),
                pp_wait_s=mean("pp_wait_s"), optimizer_s=mean("optimizer_s"),
                measured_bubble=mean("measured_bubble"), theoretical_bubble=mean("theoretical_bubble"),
                tp_bytes=mean("tp_bytes"), pp_bytes=mean("pp_bytes"), dp_bytes=mean("dp_bytes"),
                peak_bytes_per_rank=max(r["total_bytes"] for r in acct), mean_bytes_per_rank=mean("total_bytes"),
                wall_s=wall)


def run_point(st, model, p, out):
    run_dir = os.path.join(out, "points", p["point"])
    args, mb = command(st, model, p, run_dir)
    row = {k: p.get(k, "") for k in FIELDS}
    row["micro_batch"] = mb
    if p["global_batch"] % (p["dp"] * p["microbatches"]) != 0:
        row.update(status="failed", reason=f"global batch {p['global_batch']} does not split over dp "
                   f"{p['dp']} x {p['microbatches']} microbatches")
        return row
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    t0 = time.time()
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    try:
        res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=st.get("timeout_s", 600))
        log = res.stdout + res.stderr
        ok = res.returncode == 0
    except subprocess.TimeoutExpired as e:
        log, ok = f"timed out after {e.timeout} s", False
    write_atomic(run_dir + ".log", " ".join(shlex.quote(a) for a in args) + "\n" + log)
    if not ok:
        lines = [l for l in log.splitlines() if "error" in l.lower() or "timed out" in l]
        lines = lines or log.strip().splitlines()[-1:] or ["exited with an error and no output"]
        row.update(status="failed", reason=lines[0].strip()[:300])
        return row
    try:
        row.update(measure(p, run_dir, time.time() - t0))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        row.update(status="failed", reason=f"could not read the run's results: {e}")
    return row


def save(out, rows):
    write_atomic(os.path.join(out, "results.json"), json.dumps(rows, indent=1))
    lines = [",".join(FIELDS)]
    for r in rows:
        lines.append(",".join('"' + str(r.get(k, "")).replace('"', "'") + '"' if k == "reason" else str(r.get(k, ""))
                              for k in FIELDS))
    write_atomic(os.path.join(out, "results.csv"), "\n".join(lines) + "\n")


def cmd_run(a):
    st, models, sweeps = load_study(a.study)
    points = expand(st, models, sweeps)
    os.makedirs(a.out, exist_ok=True)
    if not st.get("data"):  # the Fashion-MNIST test split (10k images), prepared once per study folder
        st["data"] = os.path.join(os.path.abspath(a.out), "fashion_mnist_test.h5")
        if not os.path.exists(st["data"]):
            binary = os.environ.get("DIT_MP") or st.get("binary") or os.path.join(ROOT, "build-cpu/bin/dit_mp")
            res = subprocess.run([binary, "prepare-data", "fashion-mnist", "--split", "test", "--out", st["data"]],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                fail(f"preparing {st['data']}: {(res.stdout + res.stderr).strip()}")
    path = os.path.join(a.out, "results.json")
    done = {r["point"]: r for r in json.load(open(path))} if os.path.exists(path) else {}
    rows, skipped = [], 0
    for i, p in enumerate(points):
        if p["point"] in done and (done[p["point"]]["status"] == "ok" or not a.retry_failed):
            rows.append(done[p["point"]])
            skipped += 1
            continue
        row = run_point(st, models[p["model"]], p, a.out)
        rows.append(row)
        save(a.out, rows + [r for k, r in done.items() if k not in {x["point"] for x in rows}])
        status = f"{row['images_per_s']:.1f} img/s" if row["status"] == "ok" else "FAILED: " + row["reason"]
        print(f"[{i + 1}/{len(points)}] {p['point']}: {status}", flush=True)
    save(a.out, rows)
    print(f"study: {len(points)} points, {skipped} finished before (skipped), "
          f"{sum(r['status'] == 'ok' for r in rows)} ok, {sum(r['status'] != 'ok' for r in rows)} failed")
    import report  # noqa: E402 (plots need matplotlib only here)
    report.write_report(a.out, rows, title=st.get("name", os.path.basename(a.study)))


def cmd_report(a):
    import report  # noqa: E402
    rows = json.load(open(os.path.join(a.out, "results.json")))
    report.write_report(a.out, rows, title=a.title)


def main():
    sys.path.insert(0, HERE)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a study (finished points are skipped)")
    r.add_argument("study")
    r.add_argument("--out", required=True)
    r.add_argument("--retry-failed", action="store_true", help="run failed points again")
    r.set_defaults(func=cmd_run)
    p = sub.add_parser("report", help="plots and report.md from a study's results.json")
    p.add_argument("out")
    p.add_argument("--title", default="scaling study")
    p.set_defaults(func=cmd_report)
    a = ap.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
