#!/usr/bin/env python3
"""Do two GPU replays of one plan route every MoE op the same way?

Compares the routing (tokens per expert, as the device counted them) of every MoE op in the
`cost` sections of two `kvsim replay --backend gpu` results. With `--moe-input hidden` the router
reads the attention output, so equal routings mean the attention kernels gave the same bits.
Exit 0 when every routing is identical, 1 otherwise.

    scripts/gpu/same-routing.py run1.gpu.json run2.gpu.json
"""
import json
import sys


def routings(path):
    found = []

    def walk(x):
        if isinstance(x, dict):
            for key, value in x.items():
                if key == "routing":
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(x, list):
            for value in x:
                walk(value)

    with open(path) as f:
        walk(json.load(f)["cost"]["steps"])
    return found


def main(a_path, b_path):
    a, b = routings(a_path), routings(b_path)
    same = sum(x == y for x, y in zip(a, b))
    sources = sorted({r.get("source") for r in a + b})
    print(f"MoE ops {len(a)} / {len(b)} (routing sources {sources}): {same} identical")
    return 0 if len(a) == len(b) and same == len(a) else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
