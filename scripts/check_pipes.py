#!/usr/bin/python3
"""Finds shell pipelines whose reader may stop before the writer is done.

Under `set -o pipefail` (every script of this project), `cmd | grep -q x`, `cmd | head -1` or
`cmd | awk '... exit'` fail at random: the reader exits at its first match, and a writer that
still has lines to write dies of SIGPIPE, which pipefail makes the pipeline's status (and
`set -e` then ends the script without a word). It happens only when the writer is slow to write
its tail, so under load: `ldd dit_mp | awk '/hdf5/ {print; exit}'` failed 63 times in 300 with
four busy loops beside it, never when idle. The safe forms read everything: match on a captured
string (`grep -q x <<<"$(cmd)"`), `sed -n 1p` instead of `head -1`, `grep -c`, awk without exit.

  scripts/check_pipes.py [ROOT]   # every tracked shell script under ROOT (default: the repository)
  scripts/check_pipes.py --self-test

Exit 0: none found; 1: each one printed as FILE:LINE: the pipeline.
"""
import os
import re
import subprocess
import sys

# A reader that stops early, as the command after a '|' (not '||').
EARLY_READERS = [
    (re.compile(r"^grep\b(?=[^|]*\s(-[a-zA-Z]*[qm]|--quiet|--silent|--max-count))"), "grep -q/-m stops at its first match"),
    (re.compile(r"^head\b"), "head stops after its lines"),
    (re.compile(r"^awk\b[^|]*\bexit\b"), "awk exits before the end of its input"),
    (re.compile(r"^sed\b[^|]*(\d|\$|/)q\b"), "sed q stops reading"),
]


def logical_lines(text):
    """Yields (first line number, line) with backslash continuations joined and comments cut."""
    buf, start = "", None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw
        if re.match(r"^\s*#", line):
            line = ""
        else:
            line = re.sub(r"\s#\s.*$", "", line)  # a trailing comment (' # ...'), not ${#x} or $#
        if start is None:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        yield start, buf + line
        buf, start = "", None
    if buf:
        yield start, buf


def unquoted_pipes(line):
    """Positions of single '|' that bash reads as pipes: outside quotes, or inside a $( ) that
    sits within double quotes ("$(cmd | head -1)")."""
    out, stack, i = [], [None], 0  # stack: None (code), '"', "'", or '(' (code inside $( ))
    while i < len(line):
        c, top = line[i], stack[-1]
        if top == "'":
            if c == "'":
                stack.pop()
        elif top == '"':
            if c == "\\":
                i += 2
                continue
            if c == '"':
                stack.pop()
            elif line.startswith("$(", i):
                stack.append("(")
                i += 2
                continue
        else:
            if c == "\\":
                i += 2
                continue
            if c in "'\"":
                stack.append(c)
            elif line.startswith("$(", i):
                stack.append("(")
                i += 2
                continue
            elif c == "(" and top == "(":
                stack.append("(")
            elif c == ")" and top == "(":
                stack.pop()
            elif c == "|":
                if i + 1 < len(line) and line[i + 1] == "|":
                    i += 2
                    continue
                out.append(i)
        i += 1
    return out


def findings(text):
    for n, line in logical_lines(text):
        for p in unquoted_pipes(line):
            reader = line[p + 1:].lstrip()
            reader = re.sub(r"^(timeout\s+\S+\s+|command\s+|env\s+)", "", reader)
            for pattern, why in EARLY_READERS:
                if pattern.search(reader):
                    yield n, why, line.strip()
                    break


def shell_files(root):
    names = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    for name in names:
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(".sh"):
            yield name, path
            continue
        if "." in os.path.basename(name):
            continue
        with open(path, "rb") as f:
            head = f.read(64)
        if head.startswith(b"#!") and b"sh" in head.split(b"\n")[0]:
            yield name, path


def self_test():
    bad = [
        "x=$(ldd bin | awk '/hdf5/ {print $3; exit}')",
        "cmd | grep -q pattern || fail x",
        "cmd 2>&1 | grep -qw pmix",
        "cmd | grep -Eq 'a|b' && ok",
        "cmd | grep -m1 x",
        "cmd | head -1",
        "a | \\\n  head -n 2",
        "cmd | sed '1q'",
        "cmd | timeout 5 grep -q x",
        "echo \"state: $(sinfo 2>&1 | head -1)\"",
    ]
    good = [
        "grep -q pattern <<<\"$(cmd)\"",
        "cmd | sed -n 1p",
        "cmd | grep -c x",
        "cmd || grep -q x file",
        "echo 'a | head' ",
        "cmd | awk '{print $1}'",
        "# cmd | grep -q x",
        "x=${#arr[@]} # cmd | head",
        "grep -m1 x file",
        "echo \"usage: a | head\"",
    ]
    errors = 0
    for s in bad:
        if not list(findings(s)):
            print(f"self-test: not found in: {s!r}")
            errors += 1
    for s in good:
        if list(findings(s)):
            print(f"self-test: wrongly found in: {s!r}")
            errors += 1
    print(f"self-test: {len(bad)} early readers, {len(good)} safe lines, {errors} wrong")
    return 1 if errors else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    count, files = 0, 0
    for name, path in shell_files(root):
        files += 1
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for n, why, line in findings(text):
            print(f"{name}:{n}: {why}, and pipefail fails the pipeline when the writer then dies of SIGPIPE: {line}")
            count += 1
    print(f"check_pipes: {files} shell scripts, {count} pipelines with a reader that stops early")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main())
