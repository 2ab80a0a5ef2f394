#!/usr/bin/env python3
"""One-token MoE ops' measured time by how long ago their experts were last used.

Reads a GPU replay run with `--time-ops` (its `cost` section is the model's description of
every op, its `steps[].ops` the measured per-op times) and replays, op by op, what the cost
model's L2 rule counts (`sim/src/cost/routing.rs`, `ExpertCache`): an expert's reuse distance
is the weights of the experts used since its last use (its own included) plus the bytes other
kernels streamed since (`sim/src/cost/desc.rs`: K/V written, K/V read by decodes, state
updates, zeroed and copied blocks). For each one-token MoE op it takes the larger distance of
its experts and prints the measured times by distance (MiB): the rule holds an expert in L2
up to 40 MiB (docs/timing.md, "A thirteenth blind set").

    scripts/timing/moe_l2_distance.py run.ops.gpu.json
"""
import json
import statistics
import sys

MIB = 1024.0 * 1024.0
EDGES = (0, 14.5, 18, 24.5, 28, 34.5, 36, float("inf"))


def streamed(op):
    """Bytes an op moves through L2 between MoE ops, as the description counts them."""
    kind = op["kind"]
    if kind == "write_kv":
        return 2.0 * op["elems"]
    if kind == "decode":
        return float(sum(launch["bytes"] for launch in op["launches"]))
    if kind in ("state_update", "zero_blocks", "copy_blocks"):
        return float(op.get("bytes", 0))
    return 0.0


def one_token_ops(run):
    """(larger reuse distance in MiB, measured µs) of every timed one-token MoE op."""
    measured = {s["step"]: {o["op"]: o["device_us"] for o in s.get("ops", [])} for s in run["steps"]}
    last_use = {}  # expert -> (MoE op index, bytes streamed until then)
    ops = 0
    total = 0.0
    out = []
    for step in run["cost"]["steps"]:
        for i, op in enumerate(step["ops"]):
            if op["kind"] != "moe":
                total += streamed(op)
                continue
            counts = op["routing"].get("counts")
            if counts is None:
                last_use.clear()
                continue
            expert_bytes = 4.0 * op["hidden"] * op["ffn"]
            distances = []
            for e, n in enumerate(counts):
                if n == 0:
                    continue
                if e not in last_use:
                    distances.append(float("inf"))
                    continue
                t, at = last_use[e]
                since = sum(1 for u, _ in last_use.values() if u >= t)
                distances.append((since * expert_bytes + total - at) / MIB)
            for e, n in enumerate(counts):
                if n:
                    last_use[e] = (ops, total)
            ops += 1
            us = measured.get(step["step"], {}).get(i)
            if op["tokens"] == 1 and us is not None:
                out.append((max(distances), us))
    return out


def main(path):
    with open(path) as f:
        rows = one_token_ops(json.load(f))
    print(f"{len(rows)} one-token MoE ops with measured times")
    for lo, hi in zip(EDGES, EDGES[1:]):
        us = [u for d, u in rows if lo <= d < hi]
        if us:
            print(f"  larger reuse distance {lo:5.1f}-{hi:<5} MiB: {len(us):4} ops, "
                  f"median {statistics.median(us):6.1f} us (min {min(us):6.1f}, max {max(us):6.1f})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
