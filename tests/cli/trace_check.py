"""Checks a profiled run's timeline (<run>/trace.json, run/profile.h) against its schedule.

Usage: trace_check.py TRACE SCHEDULE PP V M  ->  exit 1 with the problems listed, else one "ok" line.

Read independently of the writer, from the Chrome-trace events alone:
  - a named track per rank; every rank's step spans overlap (the clocks are aligned);
  - per rank and step: m x v forward and backward spans, and as many weight spans under a zero-bubble
    schedule (none otherwise); under 1F1B (v = 1) and GPipe the order of the table, derived here;
  - every pipeline message has one send and one receive end, a receive no earlier than its send
    (to 2 ms), and each pipeline sends m (pp v - 1) messages each way a step;
  - each pipeline's bubble per step, 1 - busy / (pp x makespan) of its actions, is the one recorded;
    the schedule simulator on the same tables, with the actions' measured durations and each
    message's measured latency, replays it to within REPLAY_TOL; with no latency (the schedule's own
    idle time) it gives no more than that, to within REPLAY_TOL. (At 8 ranks on 2 cores the measured
    bubble is mostly the cores' sharing, which shows as latency: a loose bound there says nothing.)
"""
import collections
import json
import re
import sys

REPLAY_TOL = 0.02    # absolute: the host's own work between actions is in neither
ORDER_SLACK_S = 2e-3  # a receive's end before its send's: clock alignment's error


def table_1f1b(pp, s, m):
    warm = min(pp - s - 1, m)
    ops = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        ops += [("F", f), ("B", b)]
        f, b = f + 1, b + 1
    ops += [("B", i) for i in range(b, m)]
    return ops


def main(path, schedule, pp, v, m):
    t = json.load(open(path))
    ev = t["traceEvents"]
    other = t["otherData"]
    bad = []
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    world = len(names)
    if sorted(names) != list(range(world)) or world == 0:
        bad.append(f"process names for pids {sorted(names)}")
    coords = {}
    for pid, name in names.items():
        got = re.match(r"rank (\d+): tp (\d+) pp (\d+) dp (\d+) on (\S+)", name)
        if not got or int(got.group(1)) != pid:
            bad.append(f"track name {name!r}")
            continue
        coords[pid] = tuple(int(x) for x in got.group(2, 3, 4))  # tp, pp, dp
    first, last = other["steps"]
    steps = range(first, last + 1)
    spans = [e for e in ev if e["ph"] == "X"]
    acts = collections.defaultdict(list)  # (pid, step) -> actions
    step_spans = collections.defaultdict(dict)
    for e in spans:
        step = e["args"]["step"]
        if e["cat"] in ("forward", "backward", "weight"):
            acts[(e["pid"], step)].append(e)
        if e["cat"] == "step":
            step_spans[step][e["pid"]] = (e["ts"], e["ts"] + e["dur"])
    zero_bubble = schedule in ("zb-h1", "zb-v")
    for pid in range(world):
        for step in steps:
            a = sorted(acts[(pid, step)], key=lambda e: e["ts"])
            count = collections.Counter(e["cat"] for e in a)
            want = {"forward": m * v, "backward": m * v, "weight": m * v if zero_bubble else 0}
            if any(count[k] != n for k, n in want.items()):
                bad.append(f"rank {pid} step {step}: {dict(count)}, expected {want}")
            if v == 1 and schedule in ("1f1b", "gpipe") and pid in coords:
                s = coords[pid][1]
                order = table_1f1b(pp, s, m) if schedule == "1f1b" else [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
                got = [(e["name"][0], e["args"]["mb"]) for e in a]
                if got != order:
                    bad.append(f"rank {pid} (stage {s}) step {step}: order {got}, table {order}")
    for step in steps:
        ranges = step_spans[step]
        if len(ranges) != world:
            bad.append(f"step {step}: step spans on {len(ranges)} of {world} ranks")
        elif max(b for b, _ in ranges.values()) > min(e for _, e in ranges.values()):
            bad.append(f"step {step}: the ranks' step spans do not overlap (clocks not aligned): {ranges}")
    ends = collections.defaultdict(dict)
    for e in ev:
        if e["ph"] in "sf":
            if e["ph"] in ends[e["id"]]:
                bad.append(f"message {e['id']}: two '{e['ph']}' ends")
            ends[e["id"]][e["ph"]] = e
    per_step = collections.Counter()
    for i, pair in ends.items():
        if set(pair) != {"s", "f"}:
            bad.append(f"message {i}: only {sorted(pair)}")
            continue
        s, f = pair["s"], pair["f"]
        if f["ts"] < s["ts"] - ORDER_SLACK_S * 1e6:
            bad.append(f"message {i} ({s['name']}): received at {f['ts']} us before it was sent at {s['ts']} us")
        per_step[s["name"]] += 1
    lanes = world // pp
    want = m * (pp * v - 1) * lanes * len(steps)
    for kind in ("activations", "gradients"):
        if per_step[kind] != want:
            bad.append(f"{per_step[kind]} {kind} messages, expected {want}")
    # The bubble of each pipeline (the ranks of one tp and dp coordinate) and step.
    recorded = {(p["pipeline"], p["step"]): p for p in other["pipelines"]}
    tp_size = 1 + max(c[0] for c in coords.values())
    checked = 0
    for (tp, dp) in sorted({(c[0], c[2]) for c in coords.values()}):
        lane = tp + tp_size * dp
        pids = [pid for pid, c in coords.items() if (c[0], c[2]) == (tp, dp)]
        for step in steps:
            a = [e for pid in pids for e in acts[(pid, step)]]
            lo, hi = min(e["ts"] for e in a), max(e["ts"] + e["dur"] for e in a)
            measured = 1 - sum(e["dur"] for e in a) / (pp * (hi - lo))
            rec = recorded.get((lane, step))
            if rec is None:
                bad.append(f"no recorded bubble for pipeline {lane} step {step}")
                continue
            if abs(rec["measured_bubble"] - measured) > 1e-3:
                bad.append(f"pipeline {lane} step {step}: bubble {measured:.4f} from the events, {rec['measured_bubble']:.4f} recorded")
            if abs(measured - rec["replayed_bubble"]) > REPLAY_TOL:
                bad.append(f"pipeline {lane} step {step}: measured bubble {measured:.3f}, replayed {rec['replayed_bubble']:.3f}")
            if rec["simulated_bubble"] > measured + REPLAY_TOL:
                bad.append(f"pipeline {lane} step {step}: the schedule alone gives {rec['simulated_bubble']:.3f}, "
                           f"more than the {measured:.3f} measured")
            checked += 1
    if bad:
        print("\n".join(bad[:30]))
        return 1
    p = other["pipelines"]
    worst = max(abs(x["measured_bubble"] - x["replayed_bubble"]) for x in p)
    mean = lambda k: sum(x[k] for x in p) / len(p)
    print(f"ok: {schedule} pp {pp} v {v} m {m}: {world} ranks, {len(spans)} spans, {len(ends)} messages, "
          f"{checked} pipeline steps; bubble measured {mean('measured_bubble'):.3f}, replayed within {worst:.4f}, "
          f"the schedule's own {mean('simulated_bubble'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])))
