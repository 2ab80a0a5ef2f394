#!/usr/bin/env python3
"""Retained-sample errors of decode points, per compared layout and pooled: what a profile's
bands and a blind set's MAPE are made of.

    kvsim predict PLAN --profile P --out pred.json
    kvsim compare pred.json run.gpu.json --out cmp.json        # one per layout
    scripts/timing/retained_errors.py cmp1.json [cmp2.json ...]

Prints, per layout of each file, the points, the MAPE, the mean signed error (the layout's bias;
negative: predicted fast) and the 90th percentile of the absolute error; then the same pooled,
and pooled by batch size (1, 2-9, 10-32, 33 and more).
"""
import json
import statistics
import sys

BATCHES = [(1, 1), (2, 9), (10, 32), (33, 1 << 30)]


def quantile(xs, q):
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))]


def line(name, errs):
    if not errs:
        return f"{name:<28} n=  0"
    a = [abs(e) for e in errs]
    return (
        f"{name:<28} n={len(errs):4d}  MAPE {statistics.mean(a):5.2f} %  "
        f"signed {statistics.mean(errs):+5.2f} %  q90 {quantile(a, 0.9):5.2f} %"
    )


def main(paths):
    pooled = []
    for path in paths:
        with open(path) as f:
            cmp = json.load(f)
        for pair in cmp["pairs"]:
            rows = [
                (p["batch"], p["retained_error_pct"])
                for p in pair["points"]
                if p.get("decode_only") and p.get("retained_error_pct") is not None
            ]
            pooled += rows
            print(line(pair["label"], [e for _, e in rows]))
    print(line("all", [e for _, e in pooled]))
    for lo, hi in BATCHES:
        name = f"batch {lo}" if lo == hi else f"batch {lo}-{hi}" if hi < 1 << 30 else f"batch {lo}+"
        print(line(name, [e for b, e in pooled if lo <= b <= hi]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
