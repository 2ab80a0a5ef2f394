#!/usr/bin/env python3
"""Fits forms of one MoE GEMM's time to `moe_kernels.cu`'s rows (docs/timing-history.md, "The MoE GEMMs
timed alone"): per kernel (up: dots of 1024, down: dots of 512), a fixed cost, a cost per CTA
of the grid, and the slowest SM's (walk^p + rows^p)^(1/p), where an SM's walk is its most loaded
CTA's 16 x tokens row-dots (dearer per element on a linear ramp between LO and HI KiB of token
rows, the L1 miss) and its rows are all its CTAs' 64 x tokens row-dots. CTAs are dealt to SMs
either in launch order mod 132 (the cost model's rule) or where the `place` rows of the same run
saw them land (only for the grid sizes probed). Prints the fitted values and the MAPE by pattern.
With DEAL (the `deal` rows of another run: one-dimensional grids of 1-1 600 CTAs), the grid sizes
probed are fitted a third way, with CTAs where that run's grid of the same size put them. Every
grid is also fitted with the cost model's `moe_deal_random_share` 0.6 (60 % the mean over 16
balanced random dealings, 40 % launch order; the draws are not the model's own, the form is),
and the script prints how many of the CTA pairs the `place` rows saw share an SM launch order
mod 132 puts together (the share behind 0.6).

    moe_kernels_fit.py RUN.csv [DEAL.csv]        (needs numpy and scipy; either may be .xz)
"""
import lzma
import csv
import sys
from collections import defaultdict

import numpy as np
from scipy.optimize import least_squares

SMS = 132


def text(path):
    return lzma.open(path, "rt") if path.endswith(".xz") else open(path)


def read_deal(path):
    """Grid size -> the SM of each CTA, from `deal` rows."""
    tables = {}
    with text(path) as f:
        for line in f:
            kind, n, sms = line.rstrip("\n").split(",", 2)
            if kind == "deal":
                tables[int(n)] = [int(x) for x in sms.split()]
    return tables


def read(path):
    times, placed = [], defaultdict(dict)
    with text(path) as f:
        for r in csv.reader(f):
            if r[0] == "time":
                inner, outer = (1024, 512) if r[1] == "up" else (512, 1024)
                counts = np.array([int(x) for x in r[8].split(";")], float)
                times.append(dict(kernel=r[1], E=int(r[2]), pattern=r[5], us=float(r[6]),
                                  counts=counts, inner=inner, outer=outer))
            elif r[0] == "place":
                placed[(r[1], int(r[2]))][int(r[4])] = int(r[5])
    tables = {len(m): [m[i] for i in range(len(m))] for m in placed.values()}
    return times, tables


def deal(counts, outer, table=None):
    """Per SM: the loads' sum and the largest load of its CTAs."""
    experts = len(counts)
    total, largest = np.zeros(SMS), np.zeros(SMS)
    for y in range(outer // 64):
        for e, n in enumerate(counts):
            i = e + experts * y
            sm = table[i] if table else i % SMS
            total[sm] += n
            largest[sm] = max(largest[sm], n)
    return total, largest


RANDOM_SHARE, DRAWS = 0.6, 16


def deal_mixed(counts, outer):
    """The launch-order dealing and DRAWS balanced random ones (a permutation's position mod
    132), stacked: row 0 launch order, rows 1.. the draws."""
    experts = len(counts)
    n = experts * (outer // 64)
    load = np.array([counts[i % experts] for i in range(n)])
    rng = np.random.default_rng(n)
    total, largest = np.zeros((DRAWS + 1, SMS)), np.zeros((DRAWS + 1, SMS))
    for j in range(DRAWS + 1):
        sm = np.arange(n) % SMS if j == 0 else rng.permutation(n) % SMS
        np.add.at(total[j], sm, load)
        np.maximum.at(largest[j], sm, load)
    return total, largest


def predict(x, d, norm):
    fixed, per_cta, walk_hit, walk_miss, lo, hi, row = np.abs(x)
    total, largest = d["dealt"]
    kib = largest * d["inner"] * 4 / 1024
    miss = np.clip((kib - lo) / max(hi - lo, 1e-6), 0, 1)
    walk = 16 * largest * d["inner"] * (walk_hit + (walk_miss - walk_hit) * miss) / 1000
    rows = 64 * total * d["inner"] * row / 1000
    grid = d["E"] * d["outer"] / 64
    slowest = ((walk ** norm + rows ** norm) ** (1 / norm)).max(axis=-1)
    if slowest.ndim:  # the mixed dealing: launch order, then the draws
        slowest = (1 - RANDOM_SHARE) * slowest[0] + RANDOM_SHARE * slowest[1:].mean()
    return fixed + per_cta * grid / SMS + slowest


def shared_pairs(sms):
    """Pairs of CTAs (i, j) on the same SM."""
    by = defaultdict(list)
    for i, sm in enumerate(sms):
        by[sm].append(i)
    return {(a, b) for v in by.values() for k, a in enumerate(v) for b in v[k + 1:]}


def launch_order_share(tables):
    """Of the CTA pairs the `place` rows saw share an SM, those launch order mod 132 pairs too."""
    seen = together = 0
    for n, sms in sorted(tables.items()):
        pairs = shared_pairs(sms)
        seen += len(pairs)
        together += len(pairs & shared_pairs([i % SMS for i in range(n)]))
    return together, seen


def fit(rows, norm):
    def residuals(x):
        return np.array([(predict(x, d, norm) - d["us"]) / d["us"] for d in rows])
    x = least_squares(residuals, [8, 0.5, 0.9, 1.1, 100, 250, 0.15]).x
    return np.abs(x), residuals(x)


def main(path, deal_path=None):
    times, tables = read(path)
    probed = read_deal(deal_path) if deal_path else None
    together, seen = launch_order_share(tables)
    print(f"CTA pairs the place rows saw share an SM: {seen}, of them launch order mod 132 pairs "
          f"{together} ({100 * together / max(seen, 1):.0f} %)")
    every = ["launch order mod 132", "mixed (random share 0.6)"]
    dealings = every + ["placements seen", "mixed, sizes probed"] + (["deal rows, same size"] if probed else [])
    for kernel in ("up", "down"):
        for dealing in dealings:
            rows = [d for d in times if d["kernel"] == kernel]
            if dealing not in every:
                rows = [d for d in rows if d["E"] * d["outer"] // 64 in tables]
            for d in rows:
                size = d["E"] * d["outer"] // 64
                placed = {"placements seen": tables, "deal rows, same size": probed}.get(dealing)
                table = placed.get(size) if placed else None
                mixed = dealing.startswith("mixed")
                d["dealt"] = deal_mixed(d["counts"], d["outer"]) if mixed else deal(d["counts"], d["outer"], table)
            for norm in (4.0, 40.0):
                x, r = fit(rows, norm)
                by = defaultdict(list)
                for d, e in zip(rows, r):
                    by[d["pattern"]].append(abs(e))
                parts = ", ".join(f"{p} {100 * np.mean(v):.2f} % ({len(v)})" for p, v in sorted(by.items()))
                print(f"{kernel:<4} {dealing:<20} p={norm:>4.0f}: MAPE {100 * np.mean(np.abs(r)):.2f} % [{parts}]")
                print("     fixed {:.2f} us, per CTA/SM {:.3f} us, walk {:.4f}/{:.4f} ns an element"
                      " (ramp {:.0f}-{:.0f} KiB), rows {:.4f} ns an element".format(*x))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
