#!/usr/bin/env python3
"""Per-SM loop times of the MLA decode (kvsim-gpu-bench --defines LAT_DIAG_TIMELINE logs).

Reads the first `loop by sm` line of each log (the default split of the first variant), then
prints: how the SMs' loop times correlate between runs (is a slow SM slow in every launch?),
and the longest loop under three assignments of the same work: as launched (each CTA its own
split), tiles shared among a request's CTAs at run time, and perfect balance over all CTAs.

    scripts/gpu/per-sm-loop.py docs/gpu-bandwidth/2026-11-29-s6-mla-per-sm-run*-seed7.log
"""
import statistics
import sys


def first_loop_line(path):
    """{sm: (cta, loop_us)} from the first `loop by sm` line of a log."""
    with open(path) as f:
        for line in f:
            if "loop by sm" in line:
                rows = {}
                for entry in line.split()[3:]:
                    sm, cta, us = entry.split(":")
                    rows[int(sm)] = (int(cta), float(us))
                return rows
    raise SystemExit(f"{path}: no `loop by sm` line (a LAT_DIAG_TIMELINE build?)")


def correlation(a, b):
    sms = sorted(set(a) & set(b))
    x, y = [a[s][1] for s in sms], [b[s][1] for s in sms]
    mx, my = statistics.mean(x), statistics.mean(y)
    cov = sum((p - mx) * (q - my) for p, q in zip(x, y))
    return cov / (sum((p - mx) ** 2 for p in x) * sum((q - my) ** 2 for q in y)) ** 0.5


def main(paths, splits_per_request=4):
    runs = [first_loop_line(p) for p in paths]
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            same = sum(runs[i][s][0] == runs[j].get(s, (None,))[0] for s in runs[i])
            by_cta = [{cta: (sm, us) for sm, (cta, us) in r.items()} for r in (runs[i], runs[j])]
            print(f"run {i + 1} vs {j + 1}: loop correlation by SM {correlation(runs[i], runs[j]):.2f}, "
                  f"by CTA {correlation(*by_cta):.2f} ({same} of {len(runs[i])} SMs ran the same CTA)")
    for i, run in enumerate(runs):
        loops = [us for _, us in run.values()]
        rates = {}
        for cta, us in run.values():
            rates.setdefault(cta // splits_per_request, []).append(1.0 / us)
        shared = max(len(r) / sum(r) for r in rates.values())
        balanced = len(loops) / sum(1.0 / us for us in loops)
        print(f"run {i + 1}: loop p50 {statistics.median(loops):.2f} max {max(loops):.2f} us; "
              f"tiles shared in a request: max {shared:.2f} us; perfect balance {balanced:.2f} us")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
