#!/usr/bin/env python3
"""A blind set's three layouts, drawn at random from the ranges blind10-blind13 used: writes
blindN-{swa,mamba,chain}.json, scenario files as in docs/timing/scenarios/, into the current
folder (docs/timing-history.md, "A fourteenth blind set drawn at random").

    draw_blind.py SET DRAW_SEED FIRST_SCENARIO_SEED ORDINAL PROFILE_NOTE [MAX_EXPERTS]

A SET that is not a number (e.g. train1) draws calibration layouts instead, named SET-swa, ...:
measured to be fitted on, never predicted blind (ORDINAL and PROFILE_NOTE then say what for).

Experts are drawn from 12, 16, ... MAX_EXPERTS (default 80). blind14 and blind15 (their files,
byte for byte), blind16, drawn with few experts to test the MoE walk's cold share, the calibration
layouts of h100-c3 and the sets drawn since:

    draw_blind.py 14 20261414 20261242 fourteenth "h100-c1, unchanged"
    draw_blind.py 15 20261515 20261245 fifteenth "h100-c2"
    draw_blind.py 16 20261616 20261248 sixteenth "h100-c2 and h100-c1" 24
    draw_blind.py train1 20261701 20261260 first "h100-c3, with the corpus" 24
    draw_blind.py train2 20261702 20261263 second "h100-c3, with the corpus" 24
    draw_blind.py 17 20261717 20261266 seventeenth "h100-c3 and h100-c2"
    draw_blind.py 18 20261818 20261269 eighteenth "h100-c3 and h100-c2" 24
    draw_blind.py 19 20261919 20261272 nineteenth "h100-c4 and h100-c3"
    draw_blind.py 20 20262020 20261275 twentieth "h100-c4 and h100-c3" 24
    draw_blind.py 21 20262121 20261278 twenty-first "h100-c5 and h100-c4"
    draw_blind.py 22 20262222 20261281 twenty-second "h100-c5 and h100-c4" 24
    draw_blind.py 23 20262323 20261284 twenty-third "h100-c5 and h100-c4"
    draw_blind.py 24 20262424 20261287 twenty-fourth "h100-c5 and h100-c4" 24
    draw_blind.py 25 20262525 20261290 twenty-fifth "h100-c5 and h100-g21"
    draw_blind.py 26 20262626 20261293 twenty-sixth "h100-c5 and h100-g21" 24
    draw_blind.py 27 20262727 20261296 twenty-seventh "h100-c5 and h100-g21"
    draw_blind.py 28 20262828 20261299 twenty-eighth "h100-c5 and h100-g21" 24
    draw_blind.py 29 20262929 20261302 twenty-ninth "h100-c5, priced on the machine measured (calibrate --host-only)"
    draw_blind.py 30 20263030 20261305 thirtieth "h100-c5, priced on the machine measured (calibrate --host-only)" 24
    draw_blind.py 31 20263131 20261308 thirty-first "h100-c5, h100-c5-probed and h100-c6"
    draw_blind.py 32 20263232 20261311 thirty-second "h100-c5, h100-c5-probed and h100-c6" 24
"""
import json
import random
import sys

if len(sys.argv) not in (6, 7):
    raise SystemExit(__doc__)
SET, DRAW_SEED, FIRST_SEED, ORDINAL, PROFILE_NOTE = sys.argv[1:6]
MAX_EXPERTS = int(sys.argv[6]) if len(sys.argv) == 7 else 80
r = random.Random(int(DRAW_SEED))
def caps(n, first):
    xs = sorted(r.sample(range(first + 1, 61), n - 1))
    return [first] + xs
def pool_ok(groups):
    return sum(40000 * g['block_size'] * g['kv_heads'] * g['head_dim'] * 4 * g['layers'] for g in groups if g['kind'] != 'mamba') <= 45e9
def moe():
    e = r.randrange(12, MAX_EXPERTS + 1, 4)
    return e, r.randint(2, min(5, e))
def sched(maxlen):
    return {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "max_model_len": maxlen, "enable_caching": True, "async_scheduling": False, "watermark": 0.0}
def bench(ep, sizes):
    return {"mode": "decode", "expert_parallel": ep, "random_kda": False, "decode_capture_sizes": sizes,
            "samples": {"prefill_max_new_token_samples": 64, "prefill_max_kv_read_token_samples": 16, "decode_max_kv_read_token_samples": 5, "decode_max_batch_size_samples": 5, "prefix_max_batch_size_samples": 3},
            "giant_kv_threshold": 1000000, "giant_kv_repeats": 3, "timeout_seconds": 900}
out = {}
while True:
    b = r.choice([16, 32, 64, 128]); kv = r.randint(1, 8); d = r.choice([64, 96, 128])
    g = [{"kind": "full_attention", "block_size": b, "layers": r.randint(3, 5), "kv_heads": kv, "head_dim": d},
         {"kind": "sliding_window", "block_size": b, "layers": r.randint(7, 9), "kv_heads": kv, "head_dim": d, "sliding_window": r.randrange(512, 2049, 128)}]
    if pool_ok(g): break
e, k = moe()
out['swa'] = (g, e, k, False, 16384, caps(6, 1))
while True:
    b = r.choice([16, 32, 64])
    g = [{"kind": "full_attention", "block_size": b, "layers": r.randint(2, 4), "kv_heads": r.randint(1, 8), "head_dim": r.choice([64, 96, 128])},
         {"kind": "mamba", "block_size": b, "layers": r.randint(8, 11), "kv_heads": r.randint(4, 12), "head_dim": r.choice([64, 96, 128])}]
    if pool_ok(g): break
e, k = moe()
out['mamba'] = (g, e, k, True, 16384, caps(6, 1))
while True:
    g = [{"kind": "full_attention", "block_size": r.choice([16, 32, 64, 128]), "layers": r.randint(7, 10), "kv_heads": r.randint(1, 8), "head_dim": r.choice([64, 96, 128])}]
    if pool_ok(g): break
e, k = moe()
out['chain'] = (g, e, k, True, 8192, caps(6, 1))
seeds = {name: int(FIRST_SEED) + i for i, name in enumerate(('swa', 'mamba', 'chain'))}
for name, (g, e, k, ep, maxlen, sizes) in out.items():
    full = g[0]
    def heads(n, d): return f"{n} KV head{'s' if n > 1 else ''} of {d}"
    if name == 'swa':
        what = (f"full attention + a {g[1]['sliding_window']}-token window, {heads(full['kv_heads'], full['head_dim'])}, "
                f"blocks of {full['block_size']}, {e} experts top-{k}")
    elif name == 'mamba':
        what = f"full attention + a Mamba group, {heads(full['kv_heads'], full['head_dim'])}, {g[1]['kv_heads']} state heads of {g[1]['head_dim']}, blocks of {full['block_size']}, {e} experts top-{k} under EP"
    else:
        what = f"chain plan, {heads(full['kv_heads'], full['head_dim'])}, blocks of {full['block_size']} over {full['layers']} layers, {e} experts top-{k} under EP"
    ranges = f"the ranges of blind10-blind13{'' if MAX_EXPERTS == 80 else f' with at most {MAX_EXPERTS} experts'}"
    if SET.isdigit():
        full_name = f"blind{SET}-{name}"
        about = f"{ORDINAL} blind timing layout, drawn at random (seed {DRAW_SEED}) from {ranges}, its predictions ({PROFILE_NOTE}) committed before its one measurement (issue 21)"
    else:
        full_name = f"{SET}-{name}"
        about = f"{ORDINAL} calibration layout, drawn at random (seed {DRAW_SEED}) from {ranges}, measured to be fitted on ({PROFILE_NOTE}; issue 21)"
    doc = {"name": full_name,
           "description": f"{about}: {what}",
           "scenario": {"name": full_name, "model": {"groups": g, "experts": e, "top_k": k, "vocab_size": 129280},
                        "pool_blocks": 40000, "scheduler": sched(maxlen), "dp_ranks": 1, "seed": seeds[name]},
           "bench": bench(ep, sizes)}
    with open(f"{full_name}.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(name, what, sizes)
