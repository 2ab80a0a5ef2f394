#!/usr/bin/env python3
"""The MoE GEMMs' probed dealing as the cost model embeds it (`sim/src/cost/deal_h100.bin`, read by
`sim/src/cost/deal_table.rs`): for E = 1..96 experts and then rows of 8 and of 16 CTAs, in the order
(8, E = 1..96), (16, E = 1..96), the SM of each CTA of launch 0 of the grid (E, rows), one byte a
CTA in launch order (CTA e + E * row), as `moe_kernels.cu deal2d` recorded them on an H100
(docs/timing/data/deal2d-h100-2026-12-07.csv.xz; a grid's three launches group its CTAs on SMs
alike, only the SMs' ids differ: `deal2d_summary.py`).

    xz -dc docs/timing/data/deal2d-h100-2026-12-07.csv.xz > deal2d.csv
    deal_table.py deal2d.csv sim/src/cost/deal_h100.bin
"""
import sys

EXPERTS = 96
ROWS = (8, 16)


def main(csv_path, out_path):
    grids = {}
    with open(csv_path) as f:
        for line in f:
            r = line.strip().split(",")
            if r[0] == "deal2d" and r[3] == "0":
                grids[(int(r[1]), int(r[2]))] = [int(s) for s in r[4].split()]
    out = bytearray()
    for rows in ROWS:
        for e in range(1, EXPERTS + 1):
            sms = grids[(e, rows)]
            if len(sms) != e * rows or max(sms) > 255:
                raise SystemExit(f"grid ({e}, {rows}): {len(sms)} CTAs recorded")
            out += bytes(sms)
    with open(out_path, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
