#!/usr/bin/env bash
# No output may overwrite an input, generated from the declarations (issue 34): for every subcommand
# that `dit_mp help files` (and `tools/dit_checkpoint.py files`) lists, every (output, input) pair is
# tried as one file, and a foreign file (a golden file: never an output) is put at every output.
# Each try must be refused before anything runs: a non-zero exit, one line on stderr naming the roles,
# no hang, and the file as it was. A new file option is covered by declaring it; no test to write.
source "$(dirname "$0")/common.sh"
export OMPI_MCA_orte_execute_quiet=1
export OMPI_MCA_ess_singleton_isolated=1  # a process without mpirun starts no daemon (half a second less a try)
prepare_fashion_test
# Small files of each kind: a 1-step tiny run gives weights, raw samples, a checkpoint and a config.
"$DIT_MP" --data "$SCRATCH/fm_test.h5" "${TINY[@]}" --tp 1 --pp 1 --steps 1 --run-dir "$SCRATCH/run" \
  > "$SCRATCH/run.log" 2>&1 || { cat "$SCRATCH/run.log"; fail "the tiny run failed"; }
"$DIT_MP" help files > "$SCRATCH/files.txt" || fail "dit_mp help files failed"
grep -q "^train input --teacher weights - distill.teacher$" "$SCRATCH/files.txt" || fail "help files lacks train's --teacher"
PY=/usr/bin/python3
TOOLS=$(cd "$(dirname "$0")/../../tools" && pwd)
if $PY -c "import torch, h5py" 2>/dev/null; then
  $PY "$TOOLS/dit_checkpoint.py" files | sed 's/^/dit_checkpoint.py /' >> "$SCRATCH/files.txt"
else
  echo "note: $PY lacks torch or h5py: tools/dit_checkpoint.py's files are not tried"
fi
DIT_MP="$DIT_MP" SCRATCH="$SCRATCH" GOLDEN="$DIT_DATA/dit_tiny_golden.h5" TOOL="$PY $TOOLS/dit_checkpoint.py" \
  python3 - "$SCRATCH/files.txt" <<'PY'
import hashlib, os, shutil, subprocess, sys, zipfile

S, GOLDEN = os.environ["SCRATCH"], os.environ["GOLDEN"]
RUN = os.path.join(S, "run")
os.makedirs(os.path.join(S, "imgs", "0"))
open(os.path.join(S, "imgs", "0", "a.txt"), "w").write("not an image\n")
with zipfile.ZipFile(os.path.join(S, "state.pt"), "w") as z:
    z.writestr("archive/data.pkl", b"")
SAMPLE = {  # a file of each input kind (none: the path stays missing)
    "weights": f"{RUN}/ema.h5", "weights_or_checkpoint": f"{RUN}/ema.h5", "dataset": f"{S}/fm_test.h5",
    "raw_samples": f"{RUN}/samples.h5", "checkpoint": f"{RUN}/ckpt/step_00000001", "config": f"{RUN}/config.toml",
    "golden": GOLDEN, "folder": f"{S}/imgs", "zip": f"{S}/state.pt",
}
BASE = {  # options that get each command past its first checks; a pair's own options replace them
    "train": [("--dry-run", None), ("--tp", "1"), ("--pp", "1")],
    "sample": [("--per-class", "1"), ("--steps", "1")],
    "evaluate": [("--samples", f"{RUN}/samples.h5")],
    "prune": [("--weights", f"{RUN}/ema.h5"), ("--depth", "1"), ("--method", "index"), ("--keep", "1"),
              ("--out", f"{S}/missing/pruned.h5")],
    "plan": [("--tp", "1"), ("--pp", "1")],
    "prepare-data": [("@kind", "images"), ("@dir", f"{S}/imgs")],
    "dit_checkpoint.py import": [("@source", f"{S}/state.pt"), ("--num-heads", "4")],
    "dit_checkpoint.py export": [("@source", f"{RUN}/ema.h5")],
    "dit_checkpoint.py seal": [("@source", f"{RUN}/ema.h5")],
    "report": [("@run", RUN)],
}
EXCLUSIVE = [{"--run", "--weights", "--samples"}]  # one source only
TOGETHER = {("evaluate", "--inception"): ("--reference-stats", f"{S}/missing/stats.npz"),  # given as a pair
            ("evaluate", "--reference-stats"): ("--inception", f"{S}/missing/inception.h5")}
POSITIONAL = {"prepare-data": ["@kind", "@dir"], "report": ["@run"], "dit_checkpoint.py import": ["@source", "@out"],
              "dit_checkpoint.py export": ["@source", "@out"], "dit_checkpoint.py seal": ["@source", "@out"]}

decls = {}
for line in open(sys.argv[1]):
    words = line.split()
    key = words.pop() if words[-1] not in ("-",) and not words[-1].startswith(("dir:", "ext:", "beside:")) else ""
    *cmd, role, option, kind, derive = words
    decls.setdefault(" ".join(cmd), []).append(dict(role=role, option=option, kind=kind, derive=derive, key=key))

def digest(path):
    if not os.path.exists(path):
        return None
    h = hashlib.sha256()
    paths = [path] if os.path.isfile(path) else sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
    for p in paths:
        h.update(p.encode()); h.update(open(p, "rb").read())
    return h.hexdigest()

def value_for(decl, target):  # the option's value whose derived path is `target`
    d = decl["derive"]
    if d.startswith("beside:"):
        return target[: -len(d[7:])]
    if d.startswith("dir:"):
        return os.path.dirname(target)
    if d.startswith("ext:"):
        return os.path.splitext(target)[0] + ".png"
    return target

def argv(cmd, given):
    opts = dict(BASE.get(cmd, []))
    for o in given:
        for group in EXCLUSIVE:
            if o in group:
                for other in group - {o}:
                    opts.pop(other, None)
    opts.update(given)
    for o in given:
        partner = TOGETHER.get((cmd, o))
        if partner and partner[0] not in opts:
            opts[partner[0]] = partner[1]
    tool = cmd.startswith("dit_checkpoint.py")
    args = os.environ["TOOL"].split() + [cmd.split()[1]] if tool else [os.environ["DIT_MP"], cmd]
    for p in POSITIONAL.get(cmd, []):
        if p in opts:
            args.append(opts.pop(p))
    for o, v in opts.items():
        if v is None:
            args.append(o)
        elif o.startswith("--"):
            args += [o, v]
        else:  # a config key
            args += ["--set", f'{o}="{v}"']
    return args

def shown(decl):  # how the message names an option: its config key (train), else the option
    return decl["key"] or decl["option"].lstrip("@")

def place(kind, target):
    src = SAMPLE.get(kind)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if src and os.path.isdir(src):
        shutil.copytree(src, target)
    elif src:
        shutil.copy(src, target)

def complete(cmd, given):  # a folder option's other declared inputs, when missing (a run's config.toml)
    for d in decls[cmd]:
        if d["role"] == "input" and d["option"] in given and d["derive"].startswith("dir:"):
            path = os.path.join(given[d["option"]], d["derive"][4:])
            if not os.path.exists(path):
                place(d["kind"], path)

tries = []  # (what, argv, target, names)
accepted = []  # tries whose files' check must pass: a grid dit_mp wrote, a user's picture with --overwrite

def leaf_of(decl):  # the file name a declaration's derived path ends in ("f.h5" for the value itself)
    d = decl["derive"]
    return d[4:] if d.startswith("dir:") else "f.h5" + d[7:] if d.startswith("beside:") else "f.h5"

def user_png(path):  # a 2x2 grey PNG of another program: the signature, IHDR, IDAT, IEND
    import struct, zlib
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\0" + bytes([40, 200]) for _ in range(2))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
def expect_refused(what, cmd, given, target, names):
    complete(cmd, given)
    tries.append((what, argv(cmd, given), target, names))

def run_try(t):  # None, or what went wrong
    what, args, target, names = t
    before = digest(target)
    cwd = os.path.join(S, "cwd")
    os.makedirs(cwd, exist_ok=True)
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd)
    except subprocess.TimeoutExpired:
        return f"{what}: hung: {' '.join(args)}"
    err = r.stderr.strip().splitlines()
    problem = None
    if r.returncode == 0:
        problem = "was not refused"
    elif len(err) != 1:
        problem = f"{len(err)} lines on stderr"
    elif not all(n in err[0] for n in names):
        problem = f"the message does not name {names}"
    elif digest(target) != before:
        problem = f"{target} was changed"
    if problem:
        return f"{what}: {problem}: {' '.join(args)}\n    {r.stderr.strip()[:600]}"
    return None

for cmd, ds in decls.items():
    outs = [d for d in ds if d["role"] == "output"]
    ins = [d for d in ds if d["role"] == "input"]
    for i, o in enumerate(outs):
        for j, inp in enumerate(ins):
            if o["option"] == inp["option"]:
                continue  # one option's files are declared apart (a run's ema.h5 and its eval.json)
            names = {x["derive"][4:] for x in (o, inp) if x["derive"].startswith("dir:")}
            if len(names) > 1 or (names and o["derive"].startswith("ext:") and not next(iter(names)).endswith(o["derive"][4:])):
                continue  # the two can never be one file
            besides = {x["derive"][7:] for x in (o, inp) if x["derive"].startswith("beside:")}
            if besides and (names or len(besides) > 1 or o["derive"].startswith("ext:")):
                continue  # a lock or work folder beside a value is never a file in a folder or another's
            leaf = names.pop() if names else "f.h5" + (besides.pop() if besides else "")
            target = os.path.join(S, "pairs", f"{cmd.replace(' ', '_')}_{i}_{j}", leaf)
            place(inp["kind"], target)
            given = {o["option"]: value_for(o, target), inp["option"]: value_for(inp, target)}
            expect_refused(f"{cmd}: output {o['option']} {o['derive']} = input {inp['option']} {inp['derive']}",
                           cmd, given, target, [shown(o), shown(inp)])
        # A file dit_mp never writes (a golden file) where the output goes.
        name = leaf_of(o)
        target = os.path.join(S, "foreign", f"{cmd.replace(' ', '_')}_{i}", name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(GOLDEN, target)
        expect_refused(f"{cmd}: a foreign file at output {o['option']} {o['derive']}", cmd,
                       {o["option"]: value_for(o, target)}, target, [shown(o), "exists and is a golden file"])
        if o["kind"] == "png":  # a grid's place: a user's picture is refused, unless --overwrite (issue 52)
            name = o["derive"][4:] if o["derive"].startswith("dir:") else "0.png"
            for case in ("picture", "picture_overwrite", "own_grid"):
                target = os.path.join(S, case, f"{cmd.replace(' ', '_')}_{i}", name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if case == "own_grid":
                    shutil.copy(f"{RUN}/samples.png", target)
                else:
                    user_png(target)
                given = {o["option"]: value_for(o, target)}
                if case == "picture":
                    expect_refused(f"{cmd}: a user's PNG at output {o['option']} {o['derive']}", cmd, given, target,
                                   [shown(o), "exists and is a PNG image that dit_mp did not write", "--overwrite"])
                    continue
                if case == "picture_overwrite":
                    given["--overwrite"] = None
                complete(cmd, given)
                accepted.append((f"{cmd}: {case} at output {o['option']} {o['derive']}", argv(cmd, given), target, []))

# Files a command finds or makes on its own (every derived declaration: a run folder's files, the
# locks and work folder beside an output, issue 53): a FIFO there is refused, naming it, never
# opened (no hang); a foreign file (a golden file) where a derived input is found is refused.
found = 0
for cmd, ds in decls.items():
    if cmd.startswith("dit_checkpoint.py"):
        continue
    for i, d in enumerate(ds):
        if d["derive"] == "-":
            continue
        found += 1
        for case in ("fifo", "foreign"):
            if case == "foreign" and d["role"] != "input":
                continue  # a foreign file at every output is tried above
            target = os.path.join(S, "found", case, f"{cmd.replace(' ', '_')}_{i}", leaf_of(d))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if case == "fifo":
                os.mkfifo(target)
            else:
                shutil.copy(GOLDEN, target)
            what = f"{cmd}: a {'FIFO' if case == 'fifo' else 'golden file'} at found {d['role']} {d['option']} {d['derive']}"
            expect_refused(what, cmd, {d["option"]: value_for(d, target)}, target,
                           [target, "is a FIFO" if case == "fifo" else "is a golden file"])
if found < 30:
    print(f"FAIL: only {found} found files declared (expected a run folder's, the locks, a work folder)")
    sys.exit(1)

# A process start costs about a second (MPI and the CUDA libraries), so dit_mp's tries run in one
# process (`dit_mp help check-files`: each command line up to its files' check, the same code), and
# the first try of each command, and the Python tool's, as a user runs them.
def batch(ts):
    before = [digest(t[2]) for t in ts]
    lines = "".join("\t".join(t[1][1:]) + "\n" for t in ts)
    r = subprocess.run([os.environ["DIT_MP"], "help", "check-files"], input=lines, capture_output=True,
                       text=True, timeout=120, cwd=os.path.join(S, "cwd"))
    out = r.stdout.splitlines()
    if r.returncode != 0 or len(out) != len(ts):
        return [f"help check-files: exit {r.returncode}, {len(out)} results for {len(ts)} tries: {r.stderr[-2000:]}"]
    bad = []
    for (what, args, target, names), result, b in zip(ts, out, before):
        if not result.startswith("refused\t"):
            bad.append(f"{what}: not refused ({result}): {' '.join(args)}")
        elif not all(n in result for n in names):
            bad.append(f"{what}: the message does not name {names}: {result}")
        elif digest(target) != b:
            bad.append(f"{what}: {target} was changed")
    return bad

os.makedirs(os.path.join(S, "cwd"), exist_ok=True)
ours = [t for t in tries if t[1][0] == os.environ["DIT_MP"]]
failures = batch(ours)
# Every command that writes a grid declares it, and each grid output was tried.
grids = {cmd for cmd, ds in decls.items() for d in ds if d["role"] == "output" and d["kind"] == "png"}
if not {"train", "sample"} <= grids:
    failures.append(f"the PNG grids of train and sample are not all declared (declared: {sorted(grids)})")
before = [digest(t[2]) for t in accepted]
r = subprocess.run([os.environ["DIT_MP"], "help", "check-files"], input="".join("\t".join(t[1][1:]) + "\n" for t in accepted),
                   capture_output=True, text=True, timeout=120, cwd=os.path.join(S, "cwd"))
for (what, args, target, _), result, b in zip(accepted, r.stdout.splitlines() + [""] * len(accepted), before):
    if result != "passed":
        failures.append(f"{what}: not accepted ({result}): {' '.join(args)}")
    elif digest(target) != b:
        failures.append(f"{what}: {target} was changed by the check")
grid_outputs = sum(d["role"] == "output" and d["kind"] == "png" for ds in decls.values() for d in ds)
if len(accepted) != 2 * grid_outputs:
    failures.append(f"{len(accepted)} accepted tries for {grid_outputs} grid outputs")
firsts = {}
for t in tries:
    firsts.setdefault(" ".join(t[1][:2]), t)
whole = list(firsts.values())
whole += [t for t in tries if t[1][0] != os.environ["DIT_MP"] and t not in whole]
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(3) as pool:
    failures += [f for f in pool.map(run_try, whole) if f]
print(f"{len(tries)} tries over {len(decls)} commands ({len(ours)} in one process, {len(whole)} as processes), "
      f"{len(failures)} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures or len(tries) < 40 else 0)
PY
