#!/usr/bin/env python3
"""Issue 8 experiment (b): block registration booked inside the timed window. Compares the
admission windows of two `kvsim replay --backend gpu` results of the same synthetic sweep,
one with `cache_blocks` in the untimed injection step and one with it inside the window
(scripts/timing/cache_blocks_in_window.py), and, when given, the cost model's predictions of
both (`kvsim predict`). Prints a markdown table per point: batch, context per request, the
blocks registered, the host work the lowering measured, the device and wall times of the
window in both runs and the inflation.

usage: hostwork_table.py BASE.gpu.json INWIN.gpu.json [BASE.sim.json INWIN.sim.json]
"""
import json
import sys


def window_rows(res):
    idx = {s["step"]: i for i, s in enumerate(res["steps"])}
    out = {}
    for p in res["points"]:
        i = idx[p["step_begin"]]
        d = res["cost"]["steps"][i]
        hw = [o for o in d["ops"] if o["kind"] == "host_work"]
        out[p["point"]] = {
            "batch": d["batch"],
            "ctx": d["ctx_tokens"],
            "device": p["device_us"],
            "wall": p.get("wall_us"),
            "host_ns": sum(o.get("measured_ns") or 0 for o in hw),
            "tokens": sum(o["tokens"] for o in hw),
        }
    return out


def main(base_p, inwin_p, base_s=None, inwin_s=None):
    base, inwin = window_rows(json.load(open(base_p))), window_rows(json.load(open(inwin_p)))
    pred = {}
    if base_s and inwin_s:
        bs, ws = json.load(open(base_s)), json.load(open(inwin_s))
        b = {p["point"]: p["device_us"] for p in bs["points"]}
        w = {p["point"]: p["device_us"] for p in ws["points"]}
        pred = {p: (b[p], w[p]) for p in b if p in w}
    head = "| point | batch | ctx/req | tokens registered | host work µs (measured) | window µs untimed reg. | window µs reg. in window | inflation µs | inflation % |"
    sep = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if pred:
        head += " predicted inflation µs |"
        sep += "---:|"
    print(head)
    print(sep)
    infl = []
    rows = sorted(base.items(), key=lambda kv: (kv[1]["ctx"] * 1.0 / max(kv[1]["batch"], 1), kv[1]["batch"]))
    for p, a in rows:
        if p not in inwin:
            continue
        b = inwin[p]
        d = b["device"] - a["device"]
        infl.append((a["batch"], d, 100 * d / a["device"]))
        line = f"| {p} | {a['batch']} | {a['ctx'] // max(a['batch'], 1)} | {b['tokens']} | {b['host_ns'] / 1000:.1f} | {a['device']:.1f} | {b['device']:.1f} | {d:+.1f} | {100 * d / a['device']:+.1f}% |"
        if pred:
            pb, pw = pred.get(p, (0, 0))
            line += f" {pw - pb:+.1f} |"
        print(line)
    pcts = sorted(x[2] for x in infl)
    print(f"\nwindow inflation: median {pcts[len(pcts) // 2]:+.1f}%, max {pcts[-1]:+.1f}% over {len(pcts)} points")
    if pred:
        big = [(d, pred[p][1] - pred[p][0]) for p, (_, d, _) in zip([p for p, _ in rows if p in inwin], infl) if d > 100]
        if big:
            errs = sorted(abs(pr - d) / d * 100 for d, pr in big)
            print(f"predicted vs measured inflation where it exceeds 100 µs: median error {errs[len(errs) // 2]:.1f}%, max {errs[-1]:.1f}% ({len(errs)} points)")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:])
