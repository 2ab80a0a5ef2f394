#!/usr/bin/env python3
"""Seeded generator of realistic kvtrace/1 traces (kvtrace-format.md §5), with the
observations real vLLM 0.33.0 gives for them.

    python gen_traces.py --seed S --count N --out DIR [--start K] [--jobs J]

writes DIR/trace_{index:05}.json and DIR/trace_{index:05}.obs.jsonl for
index in [K, K+N). Trace `index` uses layout LAYOUTS[index % 16] and pressure
class PRESSURES[(index // 16) % 3]; everything else comes from an RNG seeded
by (S, index), so a trace is byte-identical whatever N, K or J are.

The generator emulates vLLM's synchronous FCFS scheduler (Scheduler.schedule /
update_from_output, no spec decode, no connector) and needs the manager's
answers while it goes (a null allocate_slots means "preempt the last running
request"; a lookup's hit length sizes the first chunk), so it drives the real
KVCacheManager online through vllm_replay.Replayer; the observation lines are
a by-product. After writing, a sample of traces is replayed from disk with
vllm_replay and compared with the written observations (--verify).
"""

import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0" and __name__ == "__main__":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # keep conformance/ free of __pycache__
import vllm_replay as vr  # noqa: E402

GEN_VERSION = "kvsim-gen/2"

LAYOUTS = [
    "full", "full-nocache", "mla",
    "full+swa", "full+swa-nocache",
    "full+mamba", "full+mamba-none",
    "swa", "swa-nocache",
    "chunked", "chunked-nocache", "full+chunked",
    "full+swa+swa",
    "mamba", "mamba-none",
    "full2x+swa",
]
PRESSURES = ["tight", "medium", "loose"]
PRESSURE_RANGE = {"tight": (1.0, 1.4), "medium": (1.4, 2.5), "loose": (2.5, 5.0)}

VOCAB = 1000


def cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------- configs
def make_config(rng, layout, pressure):
    bs = rng.choice([4, 4, 8, 8, 16])
    mml = bs * rng.randint(8, 24)
    if rng.random() < 0.25:
        mml += rng.randint(1, bs - 1)  # max_model_len not a block multiple
    chunked_prefill = rng.random() < 0.75
    if chunked_prefill:
        budget = rng.randint(max(4, bs), max(max(4, bs), mml // 2))
    else:
        budget = mml  # FORMAT §5: no chunked prefill => budget = max_model_len
    caching = not layout.endswith("nocache") and not layout.endswith("-none")

    def swa_window():
        if rng.random() < 0.5:
            return bs * rng.randint(1, 4)
        return rng.randint(2, 4 * bs + 3)

    groups = []
    if layout in ("full", "full-nocache"):
        groups = [{"kind": "full_attention"}]
    elif layout == "mla":
        groups = [{"kind": "mla"}]
    elif layout in ("full+swa", "full+swa-nocache"):
        groups = [{"kind": "full_attention"},
                  {"kind": "sliding_window", "sliding_window": swa_window()}]
    elif layout == "full+mamba":
        groups = [{"kind": "full_attention"}, {"kind": "mamba", "mamba_cache_mode": "align"}]
    elif layout == "full+mamba-none":
        groups = [{"kind": "full_attention"},
                  {"kind": "mamba", "mamba_cache_mode": "none", "block_size": mml}]
    elif layout in ("swa", "swa-nocache"):
        groups = [{"kind": "sliding_window", "sliding_window": swa_window()}]
    elif layout in ("chunked", "chunked-nocache"):
        groups = [{"kind": "chunked_local", "attention_chunk_size": bs * rng.randint(1, 4)}]
    elif layout == "full+chunked":
        groups = [{"kind": "full_attention"},
                  {"kind": "chunked_local", "attention_chunk_size": bs * rng.randint(1, 4)}]
    elif layout == "full+swa+swa":
        w1 = swa_window()
        w2 = w1 if rng.random() < 0.5 else swa_window()
        groups = [{"kind": "full_attention"},
                  {"kind": "sliding_window", "sliding_window": w1},
                  {"kind": "sliding_window", "sliding_window": w2}]
    elif layout == "mamba":
        groups = [{"kind": "mamba", "mamba_cache_mode": "align"}]
    elif layout == "mamba-none":
        groups = [{"kind": "mamba", "mamba_cache_mode": "none", "block_size": mml}]
    elif layout == "full2x+swa":
        groups = [{"kind": "full_attention", "block_size": 2 * bs},
                  {"kind": "sliding_window", "sliding_window": swa_window()}]
    else:
        raise ValueError(layout)

    # Peak need of one max-length request: sum over groups of
    # max_memory_usage_bytes / page_size_bytes (vLLM's start-up check), with
    # max_in_flight_tokens = budget.
    need = 0
    for g in groups:
        gbs = g.get("block_size", bs)
        k = g["kind"]
        if k in ("full_attention", "mla"):
            need += cdiv(mml, gbs)
        elif k == "sliding_window":
            need += cdiv(min(g["sliding_window"] - 1 + budget, mml), gbs) + 1
        elif k == "chunked_local":
            need += cdiv(min(g["attention_chunk_size"] + budget, mml), gbs)
        elif k == "mamba":
            need += 2 if g["mamba_cache_mode"] == "align" else 1
    lo, hi = PRESSURE_RANGE[pressure]
    factor = round(rng.uniform(lo, hi), 3)
    num_blocks = math.ceil(need * factor) + 1  # + the null block
    config = {
        "num_blocks": num_blocks,
        "enable_caching": caching,
        "max_model_len": mml,
        "block_size": bs,
        "max_in_flight_tokens": budget,
        "groups": groups,
    }
    sched = {
        "budget": budget,
        "chunked_prefill": chunked_prefill,
        "max_num_seqs": rng.randint(2, 8),
        "full_sequence_must_fit": rng.random() < 0.7,
        "pool_need": need,
        "pool_factor": factor,
    }
    return config, sched


def toy_next(tokens):
    """Deterministic toy 'model': identical histories continue identically."""
    h = len(tokens)
    for t in tokens[-8:]:
        h = (h * 1000003 + t + 1) & 0xFFFFFFFF
    return h % VOCAB


class GReq:
    __slots__ = ("id", "max_tokens", "sampled", "n_out", "prompt", "salt")

    def __init__(self, rid, prompt, salt, max_tokens, sampled):
        self.id = rid
        self.prompt = prompt
        self.salt = salt
        self.max_tokens = max_tokens
        self.sampled = sampled
        self.n_out = 0


class TraceGen:
    def __init__(self, seed, index, lookahead=False):
        self.seed = seed
        self.index = index
        self.rng = random.Random(f"kvsim:{seed}:{index}")
        rng = self.rng
        self.layout = LAYOUTS[index % len(LAYOUTS)]
        self.pressure = PRESSURES[(index // len(LAYOUTS)) % len(PRESSURES)]
        self.config, self.sched = make_config(rng, self.layout, self.pressure)
        self.mml = self.config["max_model_len"]
        self.bs = self.config["block_size"]
        self.budget = self.sched["budget"]
        self.mamba_align = any(
            g["kind"] == "mamba" and g["mamba_cache_mode"] == "align"
            for g in self.config["groups"]
        )
        # Mamba align split uses cache_config.block_size == the mamba block size
        self.split_bs = next(
            (g.get("block_size", self.bs) for g in self.config["groups"]
             if g["kind"] == "mamba"), self.bs)
        self.lookahead = rng.choice([1, 2, 3]) if lookahead and rng.random() < 0.3 else 0
        if self.lookahead:
            self.sched["num_lookahead_tokens"] = self.lookahead
        self.target_ops = rng.randint(100, 380)
        self.eos_p = rng.choice([0.0, 0.02, 0.05])
        self.rp, init = vr.make_replayer(
            {"format": "kvtrace/1", "config": self.config, "ops": []})
        assert self.rp is not None, init
        self.lines = [vr.canon(init)]
        self.ops = []
        self.live = {}  # id -> GReq (insertion order)
        self.running = []  # ids, admission order
        self.waiting = deque()  # ids
        self.next_id = 0
        self.free_ids = []  # ids that may be reused
        self.prompts_seen = []  # (prompt, salt)
        self.convs = []  # finished conversations (full token lists)
        maxp = max(1, int(self.mml * 0.7))
        self.families = [
            [rng.randrange(VOCAB) for _ in range(rng.randint(self.bs, max(self.bs, int(maxp * 0.7))))]
            for _ in range(rng.randint(1, 4))
        ]
        self.stats = {"preempt": 0, "null_alloc": 0, "hits": 0, "reset_ok": 0,
                      "reset_refused": 0, "aborts": 0, "mamba_sentinel": 0,
                      "watchdog": 0}

    # ------------------------------------------------------------ emitting
    def emit(self, op):
        i = len(self.ops)
        self.ops.append(op)
        obs, ok = vr.step(self.rp, i, op)
        if not ok:
            raise RuntimeError(
                f"generator produced a failing op (seed {self.seed} index {self.index}): "
                f"{op} -> {obs.get('error')}: {obs.get('message')}")
        self.lines.append(vr.canon(obs))
        return obs["result"]

    def st(self, rid):
        return self.rp.reqs[rid]

    # ------------------------------------------------------------- prompts
    def new_salt(self):
        r = self.rng.random()
        if r < 0.80:
            return None
        return self.rng.choice(["", "a", "b"])

    def new_prompt(self):
        rng = self.rng
        mml = self.mml
        maxp = max(1, int(mml * 0.7))
        r = rng.random()
        if r < 0.15 and self.prompts_seen:
            prompt, salt = rng.choice(self.prompts_seen)
            if rng.random() < 0.2:
                salt = self.new_salt()
            return list(prompt), salt
        if r < 0.32 and self.convs:
            conv, salt = rng.choice(self.convs)
            extra = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 2 * self.bs))]
            p = conv + extra
            if len(p) < mml - 1:
                # the next turn of the same conversation keeps its salt
                return p, (salt if rng.random() < 0.9 else self.new_salt())
        if r < 0.75:
            fam = rng.choice(self.families)
            cut = len(fam) if rng.random() < 0.7 else rng.randint(1, len(fam))
            suffix_len = rng.randint(0, max(0, maxp - cut))
            suffix_len = min(suffix_len, rng.randint(0, 3 * self.bs))
            p = fam[:cut] + [rng.randrange(VOCAB) for _ in range(suffix_len)]
            return p[:maxp], self.new_salt()
        n = rng.randint(1, maxp)
        return [rng.randrange(VOCAB) for _ in range(n)], self.new_salt()

    def new_id(self):
        if self.free_ids and self.rng.random() < 0.1:
            return self.free_ids.pop(self.rng.randrange(len(self.free_ids)))
        rid = f"r{self.next_id}"
        self.next_id += 1
        return rid

    def arrive(self):
        rng = self.rng
        prompt, salt = self.new_prompt()
        rid = self.new_id()
        op = {"op": "add_request", "id": rid, "prompt": prompt}
        if salt is not None or rng.random() < 0.3:
            op["cache_salt"] = salt
        self.emit(op)
        if rng.random() < 0.1:
            max_tokens = rng.randint(1, self.mml)
        else:
            max_tokens = rng.randint(1, 24)
        self.live[rid] = GReq(rid, prompt, salt, max_tokens, rng.random() < 0.2)
        self.waiting.append(rid)
        self.prompts_seen.append((prompt, salt))
        if len(self.prompts_seen) > 64:
            self.prompts_seen.pop(0)

    # ---------------------------------------------------------- lifecycle
    def free(self, rid, finished):
        st = self.st(rid)
        if finished:
            toks = list(st.req.all_token_ids)
            self.convs.append((toks, self.live[rid].salt))
            if len(self.convs) > 32:
                self.convs.pop(0)
        self.emit({"op": "free", "id": rid})
        del self.live[rid]
        if rid in self.running:
            self.running.remove(rid)
        if rid in self.waiting:
            self.waiting.remove(rid)
        self.free_ids.append(rid)

    def mamba_split(self, rid, n, hits):
        """Scheduler._mamba_block_aligned_split for the core subset (no eagle,
        no partial hash hits, no prefill checkpoint blocks, no lookahead hashes,
        no long-prefill threshold)."""
        req = self.st(rid).req
        start = req.num_computed_tokens + hits
        prefill_end = max(req.num_prompt_tokens, req.num_tokens - 1)
        if start >= prefill_end:
            return n
        bs = self.split_bs
        last_cache_position = max((req.num_tokens - 1) // bs * bs, 0)
        end = start + n
        if end < prefill_end:
            aligned_end = end // bs * bs
            if aligned_end > start or bs <= self.budget:
                end = aligned_end
        next_block_boundary = (start // bs + 1) * bs
        junction = req.shared_prefix_boundary
        block_floored = start + (junction - start) // bs * bs
        stops = (
            next_block_boundary if start % bs != 0 else 0,
            last_cache_position,
            block_floored if start < junction < end else 0,
        )
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    def _mamba_sentinel(self):
        """Stats only: does the pending hit end on a Mamba state cached this
        step (vLLM then refuses the allocation)?"""
        pend = self.rp.pending
        if pend is None:
            return False
        for gi, mgr in enumerate(self.rp.manager.coordinator.single_type_managers):
            blocks = pend[1].blocks[gi]
            if hasattr(mgr, "cached_blocks_this_step") and blocks and \
                    blocks[-1].block_hash in mgr.cached_blocks_this_step:
                return True
        return False

    def alloc_op(self, rid, n, **extra):
        op = {"op": "allocate_slots", "id": rid, "num_new_tokens": n}
        if self.lookahead:
            op["num_lookahead_tokens"] = self.lookahead
        op.update(extra)
        return self.emit(op)

    # --------------------------------------------------------------- step
    def schedule_step(self, draining):
        rng = self.rng
        self.emit({"op": "new_step"})
        if not draining:
            k = rng.choice([0, 0, 1, 1, 1, 2, 3])
            if not self.live:
                k = max(k, 1)
            if len(self.live) > 4 * self.sched["max_num_seqs"]:
                k = 0
            for _ in range(k):
                self.arrive()

        budget = self.budget
        scheduled = []  # (rid, n, delayed)
        preempted = False
        # ---- running loop
        idx = 0
        while idx < len(self.running) and budget > 0:
            rid = self.running[idx]
            req = self.st(rid).req
            n = min(req.num_tokens - req.num_computed_tokens, budget,
                    self.mml - req.num_computed_tokens - 1)
            if self.mamba_align:
                n = self.mamba_split(rid, n, 0)
            if n <= 0:
                idx += 1
                continue
            res = None
            while True:
                res = self.alloc_op(rid, n)
                if res is not None:
                    break
                self.stats["null_alloc"] += 1
                victim = self.running.pop()
                self.emit({"op": "preempt", "id": victim})
                self.stats["preempt"] += 1
                self.waiting.appendleft(victim)
                preempted = True
                if victim == rid:
                    break
            if res is None:
                break
            scheduled.append((rid, n, False))
            budget -= n
            idx += 1

        # ---- waiting loop
        if not preempted:
            while budget > 0 and self.waiting:
                if len(self.running) >= self.sched["max_num_seqs"]:
                    break
                rid = self.waiting[0]
                st = self.st(rid)
                r = rng.random()
                mode = "skip" if r < 0.03 else ("nouse" if r < 0.06 else "lookup")
                hits = 0
                sentinel = False
                if mode != "skip":
                    res = self.emit({"op": "get_computed_blocks", "id": rid})
                    if mode == "lookup":
                        hits = res["num_computed_tokens"]
                        sentinel = self.mamba_align and self._mamba_sentinel()
                n = st.req.num_tokens - hits
                if not self.sched["chunked_prefill"] and n > budget:
                    break
                n = min(n, budget)
                if self.mamba_align:
                    n = self.mamba_split(rid, n, hits)
                    if n == 0:
                        break
                extra = {}
                if self.sched["full_sequence_must_fit"] or rng.random() < 0.1:
                    extra["full_sequence_must_fit"] = self.sched["full_sequence_must_fit"]
                delayed = rng.random() < 0.08
                if delayed:
                    extra["delay_cache_blocks"] = True
                if mode == "nouse":
                    extra["use_computed"] = False
                res = self.alloc_op(rid, n, **extra)
                if res is None:
                    self.stats["null_alloc"] += 1
                    if sentinel:
                        self.stats["mamba_sentinel"] += 1
                    break
                if hits:
                    self.stats["hits"] += 1
                self.waiting.popleft()
                self.running.append(rid)
                scheduled.append((rid, n, delayed))
                budget -= n

        # ---- forward pass + update_from_output
        for rid, n, delayed in scheduled:
            st = self.st(rid)
            g = self.live[rid]
            req = st.req
            complete = req.num_computed_tokens + n == req.num_tokens
            outs = []
            if complete:
                toks = list(req.all_token_ids)
                outs = [rng.randrange(VOCAB) if g.sampled else toy_next(toks)]
            op = {"op": "commit", "id": rid, "num_tokens": n}
            if outs or rng.random() < 0.3:
                op["output_tokens"] = outs
            self.emit(op)
            if delayed:
                self.emit({"op": "cache_blocks", "id": rid,
                           "num_tokens": req.num_computed_tokens})
            elif rng.random() < 0.04:
                self.emit({"op": "cache_blocks", "id": rid,
                           "num_tokens": rng.randint(0, req.num_computed_tokens)})
            if complete:
                g.n_out += 1
                if (g.n_out >= g.max_tokens or req.num_tokens >= self.mml
                        or rng.random() < self.eos_p):
                    self.free(rid, finished=True)
        return sum(n for _, n, _ in scheduled)

    def between_steps(self):
        rng = self.rng
        if self.live and rng.random() < 0.03:
            rid = rng.choice(list(self.live))
            self.stats["aborts"] += 1
            self.free(rid, finished=False)
        p_reset = 0.04
        if self.live and not self.running:
            p_reset = 0.25  # everything live is waiting/preempted: may succeed
        if rng.random() < p_reset:
            ok = self.emit({"op": "reset_prefix_cache"})
            self.stats["reset_ok" if ok else "reset_refused"] += 1

    def run(self):
        rng = self.rng
        draining = False
        idle_steps = 0
        steps = 0
        while len(self.ops) < self.target_ops:
            steps += 1
            scheduled = self.schedule_step(draining)
            if scheduled == 0 and self.live:
                idle_steps += 1
                if idle_steps >= 4:
                    # Nothing can make progress (pool too small for the head
                    # request): the client gives up on it.
                    rid = self.waiting[0] if self.waiting else next(iter(self.live))
                    self.stats["watchdog"] += 1
                    self.free(rid, finished=False)
                    idle_steps = 0
            else:
                idle_steps = 0
            self.between_steps()
            if draining and not self.live:
                ok = self.emit({"op": "reset_prefix_cache"})
                self.stats["reset_ok" if ok else "reset_refused"] += 1
                draining = False
            elif not draining and rng.random() < 0.03:
                draining = True
        # end of trace: free the rest in random order, then reset
        rest = list(self.live)
        rng.shuffle(rest)
        for rid in rest:
            self.free(rid, finished=False)
        ok = self.emit({"op": "reset_prefix_cache"})
        assert ok is True
        self.stats["steps"] = steps
        return self

    # ------------------------------------------------------------ output
    def trace_text(self):
        meta = {
            "generator": GEN_VERSION,
            "seed": self.seed,
            "index": self.index,
            "layout": self.layout,
            "pressure": self.pressure,
        }
        meta.update(self.sched)
        head = ('{"format":"kvtrace/1",\n"meta":' + vr.canon(meta) + ',\n"config":'
                + vr.canon(self.config) + ',\n"ops":[\n')
        body = ",\n".join(vr.canon(op) for op in self.ops)
        return head + body + "\n]}\n"

    def obs_text(self):
        return "\n".join(self.lines) + "\n"


def generate_one(args):
    seed, index, outdir, lookahead = args
    g = TraceGen(seed, index, lookahead=lookahead).run()
    base = os.path.join(outdir, f"trace_{index:05}")
    with open(base + ".json", "w") as f:
        f.write(g.trace_text())
    with open(base + ".obs.jsonl", "w") as f:
        f.write(g.obs_text())
    st = dict(g.stats)
    st.update(index=index, layout=g.layout, ops=len(g.ops))
    return st


def verify(outdir, indexes):
    bad = []
    for index in indexes:
        base = os.path.join(outdir, f"trace_{index:05}")
        with open(base + ".json") as f:
            trace = json.load(f)
        with open(base + ".obs.jsonl") as f:
            want = f.read()
        got = "\n".join(vr.replay_lines(trace)) + "\n"
        if got != want:
            bad.append(index)
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description="kvtrace/1 generator (kvtrace-format.md §5)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: cores)")
    ap.add_argument("--verify", type=int, default=16,
                    help="replay this many written traces from disk and diff (-1: all)")
    ap.add_argument("--lookahead", action="store_true",
                    help="extra: ~30%% of traces pass num_lookahead_tokens>0 (outside §5)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    vr._load_vllm()  # import once; forked workers inherit it
    t0 = time.perf_counter()
    indexes = list(range(a.start, a.start + a.count))
    jobs = a.jobs or os.cpu_count() or 1
    work = [(a.seed, i, a.out, a.lookahead) for i in indexes]
    if jobs > 1 and len(work) > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(jobs) as pool:
            stats = list(pool.imap(generate_one, work, chunksize=4))
    else:
        stats = [generate_one(w) for w in work]
    dt = time.perf_counter() - t0
    total_ops = sum(s["ops"] for s in stats)
    summary = {
        "traces": len(stats), "ops": total_ops, "seconds": round(dt, 2),
        "traces_per_sec": round(len(stats) / dt, 1) if dt else None,
        "preempt": sum(s["preempt"] for s in stats),
        "null_alloc": sum(s["null_alloc"] for s in stats),
        "hit_admissions": sum(s["hits"] for s in stats),
        "reset_ok": sum(s["reset_ok"] for s in stats),
        "reset_refused": sum(s["reset_refused"] for s in stats),
        "aborts": sum(s["aborts"] for s in stats),
        "watchdog_aborts": sum(s["watchdog"] for s in stats),
        "mamba_sentinel": sum(s["mamba_sentinel"] for s in stats),
    }
    if a.verify:
        sample = indexes if a.verify < 0 else indexes[:: max(1, len(indexes) // a.verify)]
        t1 = time.perf_counter()
        bad = verify(a.out, sample)
        summary["verified"] = len(sample)
        summary["verify_mismatch"] = bad
        summary["verify_seconds"] = round(time.perf_counter() - t1, 2)
        if bad:
            print(vr.canon(summary))
            print(f"MISMATCH between generator and replayer for {bad}", file=sys.stderr)
            return 1
    print(vr.canon(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
