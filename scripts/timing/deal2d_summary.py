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


def main(path):
    grids = read(path)
    launches = balanced = shared = launch_order = alike = rep_pairs = 0
    for placements in grids.values():
        for sms in placements:
            launches += 1
            balanced += max(collections.Counter(sms).values()) == math.ceil(len(sms) / SMS)
            on_sm = collections.defaultdict(list)
            for cta, sm in enumerate(sms):
                on_sm[sm].append(cta)
            for ctas in on_sm.values():
                for a in range(len(ctas)):
                    for b in range(a + 1, len(ctas)):
                        shared += 1
                        launch_order += (ctas[b] - ctas[a]) % SMS == 0
        for a in range(len(placements)):
            for b in range(a + 1, len(placements)):
                rep_pairs += 1
                alike += placements[a] == placements[b]
    print(f"{launches} launches of {len(grids)} grids; busiest SM holds ceil(N / {SMS}) CTAs in {balanced}")
    print(f"CTA pairs sharing an SM: {shared}, launch order mod {SMS} pairs among them: {launch_order} "
          f"({100 * launch_order / max(shared, 1):.1f} %)")
    print(f"launches of one grid placed alike: {alike} of {rep_pairs} pairs")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
