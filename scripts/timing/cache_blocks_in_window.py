#!/usr/bin/env python3
"""Issue 8 experiment (b): books block registration inside the timed window.

Reads a synthetic-KV sweep plan (kvsim-plan/1) and writes a copy in which every
`cache_blocks` op of a synthetic injection step (fake_compute + cache_blocks, untimed)
moves into the next step of the same rank, right after its `begin_timed`: the
registration then runs inside the admission step's timed window, as vLLM's async
scheduler did before the fix described in seed 001 (update 7). The plan's
`benchmark` record is dropped (the artifact no longer matches it).

usage: cache_blocks_in_window.py IN.plan.json OUT.plan.json
"""
import json
import sys


def main(src, dst):
    plan = json.load(open(src))
    steps = plan["steps"]
    by_key = {(s["step"], s.get("rank", 0)): s for s in steps}
    moved = 0
    for s in steps:
        ops = s["ops"]
        if not any(o["op"] == "fake_compute" for o in ops):
            continue
        cb = [o for o in ops if o["op"] == "cache_blocks"]
        if not cb:
            continue
        nxt = by_key.get((s["step"] + 1, s.get("rank", 0)))
        if nxt is None:
            continue
        at = next((i for i, o in enumerate(nxt["ops"]) if o["op"] == "begin_timed"), None)
        if at is None:
            continue
        s["ops"] = [o for o in ops if o["op"] != "cache_blocks"]
        nxt["ops"][at + 1:at + 1] = cb
        moved += len(cb)
    plan.pop("benchmark", None)
    tmp = dst + ".tmp"
    with open(tmp, "w") as f:
        json.dump(plan, f, indent=1)
        f.write("\n")
    import os
    os.replace(tmp, dst)
    print(f"moved {moved} cache_blocks ops into timed windows", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
