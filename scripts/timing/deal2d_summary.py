#!/usr/bin/env python3
"""Where the device put each CTA of the `deal2d` probe's grids (`moe_kernels.cu deal2d`: grids
(E, 8) and (E, 16) as the MoE GEMMs launch them, and one-dimensional ones, three times each):
whether the busiest SM holds ceil(N / 132) CTAs, how many of the CTA pairs that share an SM launch
order mod 132 pairs too (the cost model's `moe_deal_random_share` prices the rest as balanced
random placement), and how often a grid's three launches were placed alike.

    deal2d_summary.py deal2d.csv          (docs/timing/data/deal2d-h100-2026-12-07.csv.xz, unpacked)
"""
import collections
import math
import sys

SMS = 132


def read(path):
    """(kind, grid...) -> the SM of each CTA, one list per launch."""
    grids = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            r = line.strip().split(",")
            if r[0] == "deal2d":
                key, sms = ("deal2d", int(r[1]), int(r[2])), r[4]
            elif r[0] == "deal1d":
                key, sms = ("deal1d", int(r[1])), r[3]
            else:
                continue
            grids[key].append([int(s) for s in sms.split()])
    return grids


def sharing(sms):
    """The pairs of CTAs (a < b) that one SM holds: a placement, SM ids aside."""
    on_sm = collections.defaultdict(list)
    for cta, sm in enumerate(sms):
        on_sm[sm].append(cta)
    return {(a, b) for ctas in on_sm.values() for i, a in enumerate(ctas) for b in ctas[i + 1:]}


def read_place(path):
    """(kernel, E, pattern) -> (rows of CTAs, the SM of each CTA) from `place` rows."""
    found = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            r = line.strip().split(",")
            if r[0] == "place":
                found[(r[1], int(r[2]), r[3])][int(r[4])] = int(r[5])
    return {key: (len(sm) // key[1], [sm[i] for i in range(len(sm))]) for key, sm in found.items()}


def across(grids, place_path):
    """Each probed grid of the other machine against this file's placement of the same grid."""
    seen = shared_there = shared_both = 0
    for (kernel, e, pattern), (rows, sms) in sorted(read_place(place_path).items()):
        mine = grids.get(("deal2d", e, rows))
        if mine is None:
            continue
        there, here = sharing(sms), sharing(mine[0])
        seen += 1
        shared_there += len(there)
        shared_both += len(there & here)
        print(f"  {kernel:<4} E={e:<3} {pattern:<6} {e * rows:4d} CTAs: {len(there):5d} pairs share an SM there, "
              f"{len(there & here):5d} of them here")
    print(f"other machine: {seen} grids probed, {shared_both} of their {shared_there} CTA pairs sharing an SM "
          f"share one here ({100 * shared_both / max(shared_there, 1):.1f} %)")


def main(path, place_path=None):
    grids = read(path)
    launches = balanced = shared = launch_order = alike = rep_pairs = grouped = 0
    for placements in grids.values():
        for sms in placements:
            launches += 1
            balanced += max(collections.Counter(sms).values()) == math.ceil(len(sms) / SMS)
            pairs = sharing(sms)
            shared += len(pairs)
            launch_order += sum((b - a) % SMS == 0 for a, b in pairs)
        for a in range(len(placements)):
            for b in range(a + 1, len(placements)):
                rep_pairs += 1
                alike += placements[a] == placements[b]
                grouped += sharing(placements[a]) == sharing(placements[b])
    print(f"{launches} launches of {len(grids)} grids; busiest SM holds ceil(N / {SMS}) CTAs in {balanced}")
    print(f"CTA pairs sharing an SM: {shared}, launch order mod {SMS} pairs among them: {launch_order} "
          f"({100 * launch_order / max(shared, 1):.1f} %)")
    print(f"launches of one grid placed alike: {alike} of {rep_pairs} pairs")
    print(f"launches of one grid with the same CTAs sharing SMs (SM ids aside): {grouped} of {rep_pairs} pairs")
    if place_path:
        across(grids, place_path)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
