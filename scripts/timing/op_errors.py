#!/usr/bin/env python3
"""Per-op prediction errors by op kind: measured per-op device times (a GPU replay with
`--time-ops`) against the cost model's time for each op alone (`kvsim predict --time-ops
--describe`, its `cost` section).

    kvsim predict PLAN --profile P --time-ops --describe --out pred.json
    scripts/timing/op_errors.py run.ops.gpu.json pred.json [KIND ...]

Prints, per kind (write_kv, decode, moe, zero_blocks, copy_blocks, ...), the count, the median
signed error and the mean absolute error (%), the MoE ops also by their token count; for each
KIND named, a dozen ops spread over its measured sizes.
"""
import json
import statistics
import sys


def main(gpu_path, pred_path, kinds):
    with open(gpu_path) as f:
        measured_steps = {s["step"]: s for s in json.load(f)["steps"]}
    with open(pred_path) as f:
        described = json.load(f)["cost"]["steps"]
    errors = {}
    for step in described:
        measured = measured_steps.get(step["step"])
        if measured is None:
            continue
        times = {o["op"]: (o["device_us"], o["kind"]) for o in measured.get("ops", [])}
        for i, op in enumerate(step["ops"]):
            if "predicted_us_alone" not in op or i not in times:
                continue
            us, kind = times[i]
            short = {k: v for k, v in op.items() if k != "routing"}
            if "routing" in op:
                short["max_load"] = op["routing"]["max_load"]
            errors.setdefault(kind, []).append(
                (100.0 * (op["predicted_us_alone"] - us) / us, us, op["predicted_us_alone"], short))
    for kind, rows in errors.items():
        signed = [r[0] for r in rows]
        print(f"{kind:<12} {len(rows):>6} ops: median error {statistics.median(signed):+6.1f}%, "
              f"MAPE {statistics.mean(abs(e) for e in signed):5.1f}%")
    # MoE ops by their token count: one token, decode-sized batches, prefills.
    buckets = (("1 token", 1, 1), ("2-80 tokens", 2, 80), ("over 80 tokens", 81, float("inf")))
    for name, lo, hi in buckets:
        signed = [r[0] for r in errors.get("moe", []) if lo <= r[3]["tokens"] <= hi]
        if signed:
            print(f"  moe, {name:<15} {len(signed):>6} ops: median error {statistics.median(signed):+6.1f}%, "
                  f"MAPE {statistics.mean(abs(e) for e in signed):5.1f}%")
    for kind in kinds:
        rows = sorted(errors.get(kind, []), key=lambda r: r[1])
        for e, us, pred, short in rows[:: max(1, len(rows) // 12)]:
            print(f"  {kind} {e:+5.0f}%: measured {us:10.1f} us, predicted {pred:10.1f} us  {json.dumps(short)[:160]}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
