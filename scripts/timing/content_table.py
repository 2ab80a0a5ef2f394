#!/usr/bin/env python3
"""Issue 8 experiment (a): the same decode points on real KV and on synthetic KV held as
zeros, from two `kvsim replay --backend gpu` results (kvsim-replay/1). Prints a markdown
table per point (ordered by KV depth): batch, context per request, the admission window
and the retained (last timed) step of each run, their ratio, and the MoE routing of the
retained step (active experts / most loaded expert's tokens, from the device's counts).

usage: content_table.py REAL_PLAN.json REAL.gpu.json ZERO_PLAN.json ZERO.gpu.json
"""
import json
import sys


def retained(plan):
    last = {}
    for st in plan["steps"]:
        for o in st["ops"]:
            if o["op"] == "begin_timed":
                last[o["point"]] = max(last.get(o["point"], -1), st["step"])
    return last


def points(plan_path, res_path):
    plan, res = json.load(open(plan_path)), json.load(open(res_path))
    idx = {s["step"]: i for i, s in enumerate(res["steps"])}
    out = {}
    for p, step in retained(plan).items():
        w = next((x for x in res["points"] if x["point"] == p), None)
        i = idx[step]
        desc = res["cost"]["steps"][i]
        moe = next((o for o in desc["ops"] if o["kind"] == "moe"), None)
        r = moe["routing"] if moe else None
        out[p] = {
            "batch": desc["batch"],
            "ctx": desc["ctx_tokens"],
            "window": w["device_us"] if w else None,
            "step": res["steps"][i]["device_us"],
            "route": (int(r["active"]), int(r["max_load"])) if r else None,
        }
    return out


def main(rp, rr, zp, zr):
    real, zero = points(rp, rr), points(zp, zr)
    rows = []
    for p in sorted(real):
        if p not in zero:
            continue
        a, b = real[p], zero[p]
        rows.append((a["ctx"] // max(a["batch"], 1), a["batch"], p, a, b))
    rows.sort()
    print("| point | batch | ctx/req | real window µs | zero window µs | window ratio | real step µs | zero step µs | step ratio | routing real | routing zero |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    ratios = []
    for ctx, batch, p, a, b in rows:
        wr = b["window"] / a["window"] if a["window"] and b["window"] else float("nan")
        sr = b["step"] / a["step"]
        ratios.append((ctx, sr))
        print(f"| {p} | {batch} | {ctx} | {a['window']:.1f} | {b['window']:.1f} | {wr:.3f} | {a['step']:.1f} | {b['step']:.1f} | {sr:.3f} | {a['route'][0]}/{a['route'][1]} | {b['route'][0]}/{b['route'][1]} |")
    srt = sorted(r for _, r in ratios)
    print(f"\nretained-step ratio zero/real: median {srt[len(srt) // 2]:.3f}, min {srt[0]:.3f}, max {srt[-1]:.3f} over {len(srt)} points")
    for lo, hi, name in [(0, 64, "< 64"), (64, 1024, "64 .. 1023"), (1024, 1 << 62, ">= 1024")]:
        sel = sorted(r for c, r in ratios if lo <= c < hi)
        if sel:
            print(f"ctx/req {name}: median ratio {sel[len(sel) // 2]:.3f} ({len(sel)} points)")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
