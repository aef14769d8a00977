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
import difflib
import itertools
import json
import math
import os
import re
import shlex
import signal
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
    """Write under a temporary name, then rename into place (a crash never leaves half a file). A stop
    signal waits until the file is in place."""
    tmp = f"{path}.tmp{os.getpid()}"
    with signals_held():
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise


# ---- Stopping ---------------------------------------------------------------------------------------
# SIGINT (Ctrl-C), SIGTERM and SIGHUP stop the study: the point running then is ended and not stored
# (an interrupted point is not a result, so a resumed study runs it again); the finished points stay
# in results.json. The trainer runs in a session of its own, so that only the study signals it.

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
END_GRACE_S = 30  # for mpirun to stop its ranks (the trainer checkpoints at its next step) before SIGKILL


class Stopped(BaseException):
    """A stop signal (to the study, or to a point's trainer from outside)."""

    def __init__(self, sig, how=""):
        super().__init__(sig)
        self.sig, self.how, self.output = sig, how, ""


def install_stop_handlers():
    def on_stop(sig, frame):
        raise Stopped(sig)
    for sig in STOP_SIGNALS:
        # SIGINT is handled even when inherited as ignored (a background job of a script), so that
        # `kill -INT` stops the study; a SIGHUP that nohup ignores stays ignored.
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        signal.signal(sig, on_stop)


class signals_held:
    """Stop signals wait (pending) until the block ends: for writing files and ending a child."""

    def __enter__(self):
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        return False


def end_child(proc):
    """(stdout, stderr) of a child asked to stop (mpirun passes SIGTERM on to its ranks), its session
    killed when it has not ended after END_GRACE_S."""
    with signals_held():
        for sig, wait_s in ((signal.SIGTERM, END_GRACE_S), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                return proc.communicate(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        proc.wait()  # killed; whatever still holds its output pipes outlived it
        return "", ""


def run_child(args, env=None, timeout=None):
    """(return code, stdout, stderr) of a command run in a session of its own; return code None when
    it ran past `timeout` (seconds) and was ended. A stop signal ends it and raises Stopped."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        out, err = end_child(proc)
        return None, out or "", err or ""
    except BaseException as e:
        out, err = end_child(proc)
        if isinstance(e, Stopped):
            e.output = (out or "") + (err or "")
        raise


def stopped_from_outside(code, log):
    """How a point's run was stopped by a signal from outside the study (someone signalled mpirun or a
    rank), or "" when it was not: the trainer checkpoints and exits 75 on SIGTERM or SIGUSR1, mpirun
    reports a rank that a stop signal ended."""
    if code is None or code == 0:
        return ""
    m = re.search(r"^stopping after step \d+ of \d+: received (\S+)", log, re.M)
    if code == 75 or (m and not re.search(r"\berror\b", log, re.I)):  # not a rank that failed first
        return f"the trainer was stopped from outside the study ({m.group(1) if m else 'exit code 75'})"
    if code < 0 and -code in STOP_SIGNALS:
        return f"the launcher was stopped from outside the study ({signal.Signals(-code).name})"
    m = re.search(r"exited on signal (\d+) \((\w+)\)", log)
    if m and int(m.group(1)) in STOP_SIGNALS:
        return f"a rank was stopped from outside the study (signal {m.group(1)}, {m.group(2)})"
    return ""


def parse_layout(text):
    """(tp, pp, dp) of 'TPxPPxDP', or None when the text is not one."""
    m = re.fullmatch(r"(\d{1,6})x(\d{1,6})x(\d{1,6})", text)
    if not m or min(int(x) for x in m.groups()) < 1:
        return None
    return tuple(int(x) for x in m.groups())


def as_list(v):
    return v if isinstance(v, list) else [v]


# ---- The study file ---------------------------------------------------------------------------------
# load_study checks the whole file against the tables below before anything runs: a typo or a wrong
# type is one message at the start (file, key, what was expected), not a traceback or a failed row an
# hour into the study. Each check returns None when the value is good, else what was expected.

MAX_BYTES = 1 << 20   # a study file is a few hundred bytes
MAX_NESTING = 32      # a study needs 2 ([[sweep]] and a list); tomllib recurses once per level
MAX_COUNT = 2**31 - 1


def show(v):
    """A value as it reads in TOML, shortened."""
    if isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, float) and not math.isfinite(v):
        text = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    elif isinstance(v, dict):
        text = "{...} (a table)"
    elif isinstance(v, (str, int, float, list)):
        try:
            text = json.dumps(v)
        except ValueError:  # a list holding inf or nan
            text = str(v)
    else:
        text = str(v)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def integer(lo, hi=MAX_COUNT):
    def f(v):
        if is_int(v) and lo <= v <= hi:
            return None
        return f"an integer from {lo} to {hi}" if is_int(v) and v > hi else f"an integer >= {lo}"
    return f


def seconds(v):
    ok = (is_int(v) or isinstance(v, float)) and math.isfinite(v) and 0 < v <= 1e7
    return None if ok else "a number of seconds > 0 (at most 1e7), e.g. 600"


def text(v):
    return None if isinstance(v, str) and v.strip() else "a non-empty string"


def name_text(v):
    ok = isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", v)
    return None if ok else "a name of letters, digits and _ . + - (at most 64; it names the points' folders)"


def choice(*values):
    return lambda v: None if isinstance(v, str) and v in values else "one of " + ", ".join(f'"{x}"' for x in values)


def layout(v):
    return None if isinstance(v, str) and parse_layout(v) else 'a layout "TPxPPxDP" with factors >= 1, e.g. "2x2x1"'


def command_line(v):
    if not isinstance(v, str) or not v.strip():
        return 'a command line, e.g. "mpirun --oversubscribe" or "srun"'
    try:
        shlex.split(v)
    except ValueError as e:
        return f"a command line that splits into words ({e})"
    return None


def arg_list(v):
    ok = isinstance(v, list) and all(isinstance(a, str) or (is_int(a) or isinstance(a, float)) for a in v)
    return None if ok else 'a list of command-line words, e.g. ["--set", "model.depth=8"]'


def one_or_list(check):
    """A value, or a non-empty list of them (every combination of a sweep's lists is a point)."""
    def f(v):
        if isinstance(v, list):
            bad = next((x for x in v if check(x)), None) if v else None
            if v and bad is None:
                return None
            return f"{check(bad if v else None)}, or a non-empty list of them"
        err = check(v)
        return None if err is None else f"{err}, or a non-empty list of them"
    return f


PRECISIONS = choice("fp32", "bf16", "fp16")
RECOMPUTE = choice("none", "selective", "full")
STUDY_KEYS = {
    "name": text, "steps": integer(1), "warmup": integer(0), "precision": PRECISIONS, "recompute": RECOMPUTE,
    "args": arg_list, "data": text, "launcher": command_line, "timeout_s": seconds, "binary": text,
}
MODEL_KEYS = {"name": name_text, "preset": text, "args": arg_list}
SWEEP_KEYS = {
    "model": one_or_list(name_text), "kind": choice("strong", "weak"), "batch": one_or_list(integer(1)),
    "layouts": one_or_list(layout), "schedule": one_or_list(choice("1f1b", "gpipe", "zb-h1", "zb-v")),
    "microbatches": one_or_list(integer(1)), "virtual_stages": one_or_list(integer(1)),
    "precision": one_or_list(PRECISIONS), "recompute": one_or_list(RECOMPUTE),
    "steps": integer(1), "warmup": integer(0),
}
REQUIRED = {"model": {"name": "a model name, e.g. name = \"s4\" (a sweep's model = ... refers to it)"},
            "sweep": {"layouts": 'the layouts to run, e.g. layouts = ["1x1x1", "2x2x1"] (tp x pp x dp)'}}
TOP_KEYS = ("study", "model", "sweep")


def nesting_line(src, limit):
    """The line where arrays and inline tables first nest deeper than `limit`, or None. Brackets in
    strings and comments do not count; a table header counts as one or two levels."""
    depth, line, i, n = 0, 1, 0, len(src)
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
        elif c == "#":
            while i + 1 < n and src[i + 1] != "\n":
                i += 1
        elif c in "\"'":
            delim = c * 3 if src.startswith(c * 3, i) else c
            i += len(delim)
            while i < n and not src.startswith(delim, i):
                if len(delim) == 1 and src[i] == "\n":
                    break  # an unterminated one-line string: the parser reports it
                if c == '"' and src[i] == "\\":
                    i += 1
                if i < n and src[i] == "\n":
                    line += 1
                i += 1
            i += len(delim)
            continue
        elif c in "[{":
            depth += 1
            if depth > limit:
                return line
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None


def read_toml(path):
    """The TOML of a study file, or one message: not a file, too big, not UTF-8, nested too deeply,
    or the parser's own message with its line."""
    try:
        if not os.path.isfile(path):
            fail(f"{path}: {'not a regular file' if os.path.exists(path) else 'no such file'}: expected a study TOML")
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        fail(f"{path}: cannot read it: {e.strerror or e}")
    if len(raw) > MAX_BYTES:
        fail(f"{path}: over {MAX_BYTES >> 20} MiB: expected a study TOML of a few hundred bytes")
    try:
        src = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        fail(f"{path}: line {line}: not UTF-8 text: expected a study TOML (UTF-8)")
    line = nesting_line(src, MAX_NESTING)
    if line is not None:
        fail(f"{path}: line {line}: arrays and inline tables nest deeper than {MAX_NESTING} levels "
             f"(a study needs at most 2)")
    try:
        return tomllib.loads(src)
    except tomllib.TOMLDecodeError as e:
        fail(f"{path}: {e}")
    except RecursionError:  # the bound above should keep the parser from this
        fail(f"{path}: nested too deeply to parse")


def check_keys(path, where, table, keys, kind):
    """Every key of `table` is one of `keys` and holds what that key expects; required ones are there."""
    for k, v in table.items():
        if k not in keys:
            near = difflib.get_close_matches(k, list(keys), n=1, cutoff=0.6)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            fail(f"{path}: {where}unknown key '{k}'{hint}: expected one of {', '.join(keys)}")
        err = keys[k](v)
        if err:
            fail(f"{path}: {where}{k} = {show(v)}: expected {err}")
    for k, what in REQUIRED.get(kind, {}).items():
        if k not in table:
            fail(f"{path}: {where}{k} is missing: expected {what}")


def tables(path, s, key, required):
    """The [[key]] tables of the file (an array of tables)."""
    v = s.get(key)
    if v is None:
        if required:
            fail(f"{path}: no [[{key}]] table: expected one or more (see benchmarks/scaling/README.md)")
        return []
    if isinstance(v, dict):
        fail(f"{path}: [{key}] is one table: expected [[{key}]] (double brackets: an array of tables)")
    if not isinstance(v, list) or not v or not all(isinstance(t, dict) for t in v):
        fail(f"{path}: {key} = {show(v)}: expected [[{key}]] tables")
    return v


def load_study(path):
    """(study settings, models by name, sweeps) of a study file, checked in full."""
    s = read_toml(path)
    for k in s:
        if k not in TOP_KEYS:
            near = difflib.get_close_matches(k, TOP_KEYS, n=1, cutoff=0.6)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            fail(f"{path}: unknown key '{k}'{hint}: expected only a [study] table, [[model]] and [[sweep]] tables")
    st = s.get("study", {})
    if isinstance(st, list):
        fail(f"{path}: [[study]] is an array of tables: expected one [study] table (single brackets)")
    if not isinstance(st, dict):
        fail(f"{path}: study = {show(st)}: expected a [study] table")
    check_keys(path, "[study] ", st, STUDY_KEYS, "study")
    models = {}
    for i, m in enumerate(tables(path, s, "model", True), 1):
        check_keys(path, f"[[model]] {i}: ", m, MODEL_KEYS, "model")
        if m["name"] in models:
            fail(f"{path}: [[model]] {i}: name = {show(m['name'])}: expected a name no other [[model]] has")
        models[m["name"]] = m
    sweeps = tables(path, s, "sweep", True)
    for i, sw in enumerate(sweeps, 1):
        where = f"[[sweep]] {i}: "
        check_keys(path, where, sw, SWEEP_KEYS, "sweep")
        for name in as_list(sw.get("model", [])):
            if name not in models:
                fail(f"{path}: {where}model = {show(name)}: expected one of the [[model]] names "
                     f"({', '.join(models)})")
        steps, warmup = sw.get("steps", st.get("steps", 6)), sw.get("warmup", st.get("warmup", 2))
        if warmup >= steps:
            fail(f"{path}: {where}warmup = {warmup} with steps = {steps}: expected warmup < steps "
                 f"(the steps after warm-up are the ones timed)")
    return st, models, sweeps


def expand(st, models, sweeps):
    """Every point of every sweep: a dict of settings, named uniquely."""
    points = []
    for i, sw in enumerate(sweeps):
        kind = sw.get("kind", "strong")
        for name in as_list(sw.get("model", list(models)[0])):
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
    timeout = st.get("timeout_s", 600)
    command_line = " ".join(shlex.quote(a) for a in args)
    try:
        code, out, err = run_child(args, env=env, timeout=timeout)
    except Stopped as e:
        write_atomic(run_dir + ".log", f"{command_line}\n{e.output}\ninterrupted: not a result\n")
        raise
    log = out + err
    timed_out = f"\ntimed out after {timeout} s\n" if code is None else ""
    write_atomic(run_dir + ".log", f"{command_line}\n{log}{timed_out}")
    how = stopped_from_outside(code, log)
    if how:
        raise Stopped(None, how)
    if code is None:
        row.update(status="failed", reason=f"timed out after {timeout} s (timeout_s)")
        return row
    if code != 0:
        lines = [l for l in log.splitlines() if "error" in l.lower()]
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


def load_results(path):
    """The rows of a results.json, or one message."""
    try:
        with open(path) as f:
            rows = json.load(f)
        if not isinstance(rows, list) or not all(isinstance(r, dict) and {"point", "status"} <= r.keys()
                                                 for r in rows):
            raise ValueError("expected a list of rows with point and status")
        return rows
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read the study's results: {getattr(e, 'strerror', None) or e}")


def cmd_run(a):
    st, models, sweeps = load_study(a.study)
    points = expand(st, models, sweeps)
    if st.get("data") and not os.path.isfile(st["data"]):
        fail(f"{a.study}: [study] data = {show(st['data'])}: no such file (expected a dataset .h5)")
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        fail(f"--out {a.out}: cannot create the study folder: {e.strerror or e}")
    resume = " ".join(shlex.quote(x) for x in (sys.argv[0], "run", a.study, "--out", a.out))
    rows, done = [], {}
    try:
        if not st.get("data"):  # the Fashion-MNIST test split (10k images), prepared once per study folder
            st["data"] = os.path.join(os.path.abspath(a.out), "fashion_mnist_test.h5")
            if not os.path.exists(st["data"]):
                binary = os.environ.get("DIT_MP") or st.get("binary") or os.path.join(ROOT, "build-cpu/bin/dit_mp")
                try:
                    code, out, err = run_child([binary, "prepare-data", "fashion-mnist", "--split", "test",
                                                "--out", st["data"]])
                except OSError as e:
                    fail(f"{binary}: cannot run it: {e.strerror or e} (set DIT_MP to the dit_mp binary)")
                if code != 0:
                    fail(f"preparing {st['data']}: {(out + err).strip()}")
        path = os.path.join(a.out, "results.json")
        done = {r["point"]: r for r in load_results(path)} if os.path.exists(path) else {}
        skipped = 0
        for i, p in enumerate(points):
            if p["point"] in done and (done[p["point"]]["status"] == "ok" or not a.retry_failed):
                rows.append(done[p["point"]])
                skipped += 1
                continue
            try:
                row = run_point(st, models[p["model"]], p, a.out)
            except Stopped as e:
                e.point = f"point {i + 1}/{len(points)} ({p['point']})"
                raise
            rows.append(row)
            save(a.out, rows + [r for k, r in done.items() if k not in {x["point"] for x in rows}])
            status = f"{row['images_per_s']:.1f} img/s" if row["status"] == "ok" else "FAILED: " + row["reason"]
            print(f"[{i + 1}/{len(points)}] {p['point']}: {status}", flush=True)
        save(a.out, rows)
        print(f"study: {len(points)} points, {skipped} finished before (skipped), "
              f"{sum(r['status'] == 'ok' for r in rows)} ok, {sum(r['status'] != 'ok' for r in rows)} failed",
              flush=True)
        import report  # noqa: E402 (plots need matplotlib only here)
        report.write_report(a.out, rows, title=st.get("name", os.path.basename(a.study)))
    except Stopped as e:
        what = e.how or f"stopped by {signal.Signals(e.sig).name}"
        during = getattr(e, "point", None)
        during = f" during {during}, which is not stored and runs again" if during else ""
        kept = len({r["point"] for r in rows} | set(done))
        print(f"study: {what}{during}; {kept} finished point{'s' * (kept != 1)} kept in "
              f"{os.path.join(a.out, 'results.json')}; resume with: {resume}", file=sys.stderr, flush=True)
        sys.exit(128 + e.sig if e.sig else 75)


def cmd_report(a):
    import report  # noqa: E402
    rows = load_results(os.path.join(a.out, "results.json"))
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
    install_stop_handlers()
    try:
        a.func(a)
    except Stopped as e:
        print(f"study: {e.how or 'stopped by ' + signal.Signals(e.sig).name}", file=sys.stderr, flush=True)
        sys.exit(128 + e.sig if e.sig else 75)


if __name__ == "__main__":
    main()
