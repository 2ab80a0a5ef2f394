#!/usr/bin/env python3
"""Summarises `folds.sh`: per set and layout the retained-sample MAPE / step MAPE, then over
every retained sample the MAPE, the layouts within 3 %, the samples inside their bands and
within ±5 %, and the 90th percentile of the absolute error.

usage: folds_summary.py OUT_DIR SET ...
"""
import json
import sys


def main(out, sets):
    errors, inside, layouts, within_3 = [], 0, 0, 0
    for s in sets:
        with open(f"{out}/{s}.compare.json") as f:
            pairs = json.load(f)["pairs"]
        cells = []
        for p in pairs:
            e = [abs(q["retained_error_pct"]) for q in p["points"] if q.get("retained_error_pct") is not None]
            inside += sum(1 for q in p["points"] if q.get("retained_in_band"))
            mape = sum(e) / len(e)
            errors += e
            layouts += 1
            within_3 += mape <= 3.0
            cells.append(f"{p['label']} {mape:.2f} / {p['mape_steps'] or 0:.2f} %")
        print(f"{s:>4}: " + ", ".join(cells))
    errors.sort()
    n = len(errors)
    print(f"retained-sample MAPE {sum(errors) / n:.2f} % over {n}; layouts within 3 %: {within_3} of "
          f"{layouts}; inside their bands {inside} ({100 * inside / n:.1f} %); within ±5 % "
          f"{100 * sum(e <= 5 for e in errors) / n:.1f} %; p90 {errors[int(0.9 * n)]:.2f} %")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
