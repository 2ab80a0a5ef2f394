#!/usr/bin/env python3
"""One-token MoE ops' measured time by how long ago their experts were last used.

Joins a GPU replay run with `--time-ops` (its `steps[].ops`: measured per-op times) with the
cost model's description of the same plan (`kvsim predict --time-ops --describe`, its `cost`
section; without DESCRIBED, the run's own `cost` section). Each MoE op's routing carries
`coldest_reuse_bytes`, the reuse distance the model's L2 rule compared with the cache for its
coldest chosen expert (the weights of the experts used since plus the bytes other kernels
streamed since; absent where a chosen expert had no earlier use, or where an op whose routing
the model only expects, over some of the experts, came between). Prints the one-token MoE ops'
measured times by that distance (MiB); the rule holds an expert in L2 up to 40 MiB
(docs/timing-history.md, "A thirteenth blind set").

    kvsim predict PLAN --profile P --time-ops --describe --out described.json
    scripts/timing/moe_l2_distance.py run.ops.gpu.json described.json
"""
import json
import statistics
import sys

MIB = 1024.0 * 1024.0
EDGES = (0, 14.5, 18, 24.5, 28, 34.5, 36, float("inf"))


def one_token_ops(run, described):
    """(coldest reuse distance in MiB, measured µs) of every timed one-token MoE op."""
    moe = [op["routing"] for step in described["cost"]["steps"] for op in step["ops"] if op["kind"] == "moe"]
    if any(r["fresh"] < r["active"] for r in moe) and not any("coldest_reuse_bytes" in r for r in moe):
        # Some expert was resident, so it had a distance: the description predates the field.
        raise SystemExit("the description has no coldest_reuse_bytes: describe the plan with "
                         "`kvsim predict PLAN --time-ops --describe` and pass that file")
    measured = {s["step"]: {o["op"]: o["device_us"] for o in s.get("ops", [])} for s in run["steps"]}
    out = []
    for step in described["cost"]["steps"]:
        for i, op in enumerate(step["ops"]):
            if op["kind"] != "moe" or op["tokens"] != 1 or "counts" not in op["routing"]:
                continue
            us = measured.get(step["step"], {}).get(i)
            if us is None:
                continue
            reuse = op["routing"].get("coldest_reuse_bytes")
            out.append((float("inf") if reuse is None else reuse / MIB, us))
    return out


def main(run_path, described_path):
    with open(run_path) as f:
        run = json.load(f)
    described = run
    if described_path is not None:
        with open(described_path) as f:
            described = json.load(f)
    rows = one_token_ops(run, described)
    print(f"{len(rows)} one-token MoE ops with measured times")
    bins = [(f"coldest reuse distance {lo:5.1f}-{hi:<5} MiB", lambda d, lo=lo, hi=hi: lo <= d < hi)
            for lo, hi in zip(EDGES, EDGES[1:])]
    bins.append(("a chosen expert with no earlier use", lambda d: d == float("inf")))
    for label, inside in bins:
        us = [u for d, u in rows if inside(d)]
        if us:
            print(f"  {label}: {len(us):4} ops, "
                  f"median {statistics.median(us):6.1f} us (min {min(us):6.1f}, max {max(us):6.1f})")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None)
