"""Throughput of vLLM 0.33.0's KVCacheManager on kvtraces, measured like
`kvsim bench-traces`: manager only (ops applied through the replayer, no
observation lines) and with observation lines. Prints one JSON line."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_replay  # noqa: E402


def main() -> None:
    repeat = int(sys.argv[1])
    traces = []
    for p in sys.argv[2:]:
        with open(p) as f:
            traces.append(json.load(f))
    vllm_replay._load_vllm()
    quiet_ops = 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        for tr in traces:
            rp, _ = vllm_replay.make_replayer(tr)
            if rp is None:
                continue
            for op in tr["ops"]:
                quiet_ops += 1
                try:
                    rp.apply(op)
                except Exception:
                    break
    quiet = time.perf_counter() - t0
    ops = 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        for tr in traces:
            ops += sum(1 for _ in vllm_replay.replay_lines(tr)) - 1
    full = time.perf_counter() - t0
    print(json.dumps({"manager_ops_per_sec": round(quiet_ops / quiet, 1), "ops": ops // repeat,
                      "ops_per_sec": round(ops / full, 1), "repeat": repeat, "traces": len(traces)},
                     sort_keys=True, separators=(",", ":")))


if __name__ == "__main__":
    main()
