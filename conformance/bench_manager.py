"""Throughput of vLLM 0.33.0's KVCacheManager on kvtraces, measured like
`kvsim bench-traces`: manager only (ops applied through the replayer, no
observation lines) and with observation lines. Traces are parsed before the
clock starts; building each trace's manager is timed. After one untimed
warm-up pass, each rate is total ops over total time and `best_*` is the
fastest single pass. Prints one JSON line.

Usage: bench_manager.py REPEAT TRACE.json...
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_replay  # noqa: E402


def replayer(trace):
    """A replayer for the trace, or None where replay stops at init (no ops run)."""
    if trace.get("format") != "kvtrace/1" or not isinstance(trace.get("ops"), list):
        return None
    try:
        return vllm_replay.Replayer(trace["config"])
    except Exception:
        return None


def quiet_pass(traces):
    """Every trace through the manager alone; returns the ops applied."""
    ops = 0
    for tr in traces:
        rp = replayer(tr)
        if rp is None:
            continue
        for op in tr["ops"]:
            ops += 1
            try:
                rp.apply(op)
            except Exception:
                break
    return ops


def full_pass(traces):
    """Every trace with its observation lines; returns the ops applied."""
    return sum(sum(1 for _ in vllm_replay.replay_lines(tr)) - 1 for tr in traces)


def rate(repeat, run):
    """(overall ops/s, fastest pass ops/s, ops per pass) after a warm-up pass."""
    run()
    ops, secs, best = 0, 0.0, 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = run()
        dt = time.perf_counter() - t0
        ops, secs, best = ops + n, secs + dt, max(best, n / dt)
    return ops / secs, best, ops // repeat


def main() -> None:
    repeat = max(1, int(sys.argv[1]))
    traces = []
    for p in sys.argv[2:]:
        with open(p) as f:
            traces.append(json.load(f))
    vllm_replay._load_vllm()
    quiet, quiet_best, _ = rate(repeat, lambda: quiet_pass(traces))
    full, full_best, ops = rate(repeat, lambda: full_pass(traces))
    print(json.dumps({"best_manager_ops_per_sec": round(quiet_best, 1), "best_ops_per_sec": round(full_best, 1),
                      "manager_ops_per_sec": round(quiet, 1), "ops": ops, "ops_per_sec": round(full, 1),
                      "repeat": repeat, "traces": len(traces)},
                     sort_keys=True, separators=(",", ":")))


if __name__ == "__main__":
    main()
