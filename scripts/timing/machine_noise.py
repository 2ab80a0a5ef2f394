#!/usr/bin/env python3
"""How far one plan's retained samples move between runs on different machines: for each pair of
runs of the same plan, the relative difference of every point's retained sample (the step a
prediction names as the point's `retained_step`), then pooled (docs/timing-history.md, "blind29
and blind30", "Every held-out set together").

    machine_noise.py PRED.json RUN_A.gpu.json RUN_B.gpu.json [RUN_C.gpu.json ...] [-- PRED2 ...]

Groups are separated by `--`; each group is one prediction (any profile: only its retained steps
are read) and two or more runs of its plan. Prints each pair's mean and 90th percentile of the
absolute difference and the share within 5 %, then the same pooled.
"""
import itertools
import json
import statistics
import sys


def q90(xs):
    xs = sorted(xs)
    return xs[int(0.9 * (len(xs) - 1))]


def line(name, diffs):
    a = [abs(d) for d in diffs]
    within = sum(x <= 5 for x in a)
    return (f"{name:<40} n={len(a):4d}  mean {statistics.mean(a):5.2f} %  signed {statistics.mean(diffs):+5.2f} %  "
            f"q90 {q90(a):5.2f} %  within 5 %: {within}/{len(a)}")


def group(pred_path, run_paths):
    with open(pred_path) as f:
        pred = json.load(f)
    retained = [p["retained_step"] for p in pred["points"] if p.get("retained_step") is not None]
    runs = []
    for path in run_paths:
        with open(path) as f:
            run = json.load(f)
        if run["plan_hash"] != pred["plan_hash"]:
            raise SystemExit(f"{path}: plan {run['plan_hash']}, the prediction's is {pred['plan_hash']}")
        runs.append((path, {s["step"]: s["device_us"] for s in run["steps"]}))
    out = []
    for (pa, a), (pb, b) in itertools.combinations(runs, 2):
        diffs = [(b[s] - a[s]) / a[s] * 100 for s in retained if s in a and s in b]
        print(line(f"{'/'.join(pa.split('/')[-2:])} -> {'/'.join(pb.split('/')[-2:])}", diffs))
        out += diffs
    return out


def main(args):
    groups, cur = [], []
    for a in args:
        if a == "--":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    groups.append(cur)
    if any(len(g) < 3 for g in groups):
        raise SystemExit(__doc__)
    pooled = []
    for g in groups:
        pooled += group(g[0], g[1:])
    print(line("pooled", pooled))


if __name__ == "__main__":
    main(sys.argv[1:])
