#!/usr/bin/env python3
"""Replay kvtrace/1 files through the REAL vLLM 0.33.0 KVCacheManager (CPU).

Implements spec/kvtrace-format.md (the replayer side, §2-§4):
builds the KV cache config from the trace's `config`, keeps the scheduler-side
request state of §2.2, maps every op of §3 onto vLLM's KVCacheManager and
prints one canonical JSON observation line per op (§4).

Usage:
    python vllm_replay.py TRACE.json                 # observations to stdout
    python vllm_replay.py TRACE.json --out OBS.jsonl
    python vllm_replay.py --out-dir DIR T1.json T2.json ...   # DIR/T1.obs.jsonl ...
    python vllm_replay.py --check T1.json ...        # diff with T1.obs.jsonl beside it
    python vllm_replay.py --bench [--repeat N] T1.json T2.json ...
    python vllm_replay.py --continue-on-error TRACE.json   # debugging only

Run it with the venv made by setup_venv.sh (vllm==0.33.0 importable).
The module is also imported by gen_traces.py (class Replayer).
"""

import os
import sys

# Python's str/bytes hashing must be deterministic: vLLM derives NONE_HASH from
# PYTHONHASHSEED and some of its bookkeeping lives in sets/dicts. Re-exec once
# with PYTHONHASHSEED=0 (cheap: happens before the heavy vLLM import).
if os.environ.get("PYTHONHASHSEED") != "0" and __name__ == "__main__":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

# Keep vLLM's logger off stdout (it logs to stdout by default, e.g. the
# warning printed by a refused reset_prefix_cache) and quiet.
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore")

_VLLM = None  # lazily imported namespace


def _load_vllm():
    """Import the few vLLM pieces we drive. Heavy (a few seconds)."""
    global _VLLM
    if _VLLM is not None:
        return _VLLM
    import types

    # torch/vLLM print deprecation warnings while importing; mute them.
    logging.disable(logging.WARNING)
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.core.kv_cache_coordinator import (
        HybridKVCacheCoordinator,
        KVCacheCoordinatorNoPrefixCache,
        UnitaryKVCacheCoordinator,
    )
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.request import Request, RequestStatus

    logging.disable(logging.NOTSET)
    for name in ("vllm", "torch"):
        logging.getLogger(name).setLevel(logging.ERROR)

    # Hash function: vLLM's own "sha256" (SHA-256 over pickle protocol 5).
    # Deterministic (NONE_HASH = sha256("0") with PYTHONHASHSEED=0, or the fixed
    # "vllm-none-hash" seed otherwise), collision-free in practice, and faster
    # than sha256_cbor here (pickle is C, cbor2 is slower on tuples of ints).
    # Hash values never appear in observations (kvtrace-format.md §2.2), so any
    # deterministic collision-free choice is valid.
    hash_fn = sha256
    kv_cache_utils.init_none_hash(hash_fn)

    _VLLM = types.SimpleNamespace(
        torch=torch,
        SamplingParams=SamplingParams,
        hash_fn=hash_fn,
        get_request_block_hasher=kv_cache_utils.get_request_block_hasher,
        KVCacheManager=KVCacheManager,
        Hybrid=HybridKVCacheCoordinator,
        NoPrefix=KVCacheCoordinatorNoPrefixCache,
        Unitary=UnitaryKVCacheCoordinator,
        ChunkedLocalAttentionSpec=ChunkedLocalAttentionSpec,
        FullAttentionSpec=FullAttentionSpec,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        MambaSpec=MambaSpec,
        MLAAttentionSpec=MLAAttentionSpec,
        SlidingWindowSpec=SlidingWindowSpec,
        Request=Request,
        RequestStatus=RequestStatus,
    )
    return _VLLM


def canon(obj) -> str:
    """Canonical JSON: sorted keys, no spaces (matches the examples)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class ConfigError(Exception):
    pass


class InvalidOp(Exception):
    pass


def _is_int(x) -> bool:
    return type(x) is int  # bools are not ints here


def _is_bool(x) -> bool:
    return type(x) is bool


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


KINDS = ("full_attention", "mla", "sliding_window", "chunked_local", "mamba")


def resolve_config(config):
    """Validate `config` (kvtrace-format.md §2.1). Returns a dict of derived values
    or raises ConfigError."""
    if not isinstance(config, dict):
        raise ConfigError("config must be an object")

    def need_int(name, lo):
        v = config.get(name)
        if not _is_int(v) or v < lo:
            raise ConfigError(f"config.{name} must be an int >= {lo}")
        return v

    num_blocks = need_int("num_blocks", 2)
    enable_caching = config.get("enable_caching")
    if not _is_bool(enable_caching):
        raise ConfigError("config.enable_caching must be a bool")
    max_model_len = need_int("max_model_len", 2)
    block_size = need_int("block_size", 1)
    if "max_in_flight_tokens" in config and config["max_in_flight_tokens"] is not None:
        max_in_flight = need_int("max_in_flight_tokens", 1)
    else:
        max_in_flight = max_model_len
    groups = config.get("groups")
    if not isinstance(groups, list) or not groups:
        raise ConfigError("config.groups must be a non-empty list")

    gs = []
    for gi, g in enumerate(groups):
        if not isinstance(g, dict):
            raise ConfigError(f"group {gi} must be an object")
        kind = g.get("kind")
        if kind not in KINDS:
            raise ConfigError(f"group {gi}: unknown kind {kind!r}")
        bs = g.get("block_size", block_size)
        if bs is None:
            bs = block_size
        if not _is_int(bs) or bs < 1:
            raise ConfigError(f"group {gi}: block_size must be an int >= 1")
        d = {"kind": kind, "block_size": bs}
        if kind == "sliding_window":
            w = g.get("sliding_window")
            if not _is_int(w) or w < 2:
                raise ConfigError(f"group {gi}: sliding_window must be an int >= 2")
            d["sliding_window"] = w
        elif kind == "chunked_local":
            c = g.get("attention_chunk_size")
            if not _is_int(c) or c < 1:
                raise ConfigError(f"group {gi}: attention_chunk_size must be an int >= 1")
            if c % bs != 0:
                raise ConfigError(
                    f"group {gi}: attention_chunk_size {c} is not a multiple of "
                    f"block_size {bs}"
                )
            d["attention_chunk_size"] = c
        elif kind == "mamba":
            mode = g.get("mamba_cache_mode")
            if mode not in ("none", "align"):
                raise ConfigError(f"group {gi}: mamba_cache_mode must be 'none' or 'align'")
            if (mode == "align") != enable_caching:
                raise ConfigError(
                    f"group {gi}: mamba_cache_mode {mode!r} contradicts "
                    f"enable_caching={enable_caching}"
                )
            d["mamba_cache_mode"] = mode
        gs.append(d)

    sizes = [g["block_size"] for g in gs]
    if len(gs) == 1:
        scheduler_bs = hash_bs = sizes[0]
    else:
        scheduler_bs = 1
        for s in sizes:
            scheduler_bs = _lcm(scheduler_bs, s)
        if not enable_caching:
            hash_bs = scheduler_bs
        else:
            hash_bs = 0
            for s in sizes:
                hash_bs = math.gcd(hash_bs, s)
    if not enable_caching:
        coordinator = "no_prefix_cache"
    elif len(gs) == 1:
        coordinator = "unitary"
    else:
        coordinator = "hybrid"

    if enable_caching:
        for gi, g in enumerate(gs):
            if g["kind"] == "mamba" and g["block_size"] != hash_bs:
                raise ConfigError(
                    f"group {gi}: mamba block_size {g['block_size']} != "
                    f"hash_block_size {hash_bs} (partial hash hits out of scope)"
                )
            if (
                g["kind"] == "chunked_local"
                and coordinator == "hybrid"
                and g["block_size"] != scheduler_bs
            ):
                raise ConfigError(
                    f"group {gi}: chunked_local block_size {g['block_size']} != "
                    f"scheduler_block_size {scheduler_bs} in a hybrid layout"
                )

    return {
        "num_blocks": num_blocks,
        "enable_caching": enable_caching,
        "max_model_len": max_model_len,
        "block_size": block_size,
        "max_in_flight_tokens": max_in_flight,
        "groups": gs,
        "scheduler_block_size": scheduler_bs,
        "hash_block_size": hash_bs,
        "coordinator": coordinator,
    }


class ReqState:
    """Replayer-side request state (kvtrace-format.md §2.2)."""

    __slots__ = ("req", "status", "uncommitted")

    def __init__(self, req):
        self.req = req  # the vLLM Request (tokens, num_computed_tokens, hashes,
        # shared_prefix_boundary live on it)
        self.status = "waiting"
        self.uncommitted = None  # num_new_tokens of the last allocate, until commit


class Replayer:
    """Drives one vLLM KVCacheManager through kvtrace/1 ops."""

    def __init__(self, config):
        self.v = _load_vllm()
        self.cfg = resolve_config(config)  # raises ConfigError
        v = self.v
        c = self.cfg
        specs = []
        common = dict(num_kv_heads=1, head_size=8, dtype=v.torch.float32)
        for g in c["groups"]:
            kind, bs = g["kind"], g["block_size"]
            if kind == "full_attention":
                spec = v.FullAttentionSpec(block_size=bs, **common)
            elif kind == "mla":
                spec = v.MLAAttentionSpec(block_size=bs, **common)
            elif kind == "sliding_window":
                spec = v.SlidingWindowSpec(
                    block_size=bs, sliding_window=g["sliding_window"], **common
                )
            elif kind == "chunked_local":
                spec = v.ChunkedLocalAttentionSpec(
                    block_size=bs, attention_chunk_size=g["attention_chunk_size"], **common
                )
            else:
                spec = v.MambaSpec(
                    block_size=bs,
                    shapes=((8,),),
                    dtypes=(v.torch.float32,),
                    mamba_cache_mode=g["mamba_cache_mode"],
                )
            specs.append(spec)
        kv_config = v.KVCacheConfig(
            num_blocks=c["num_blocks"],
            kv_cache_tensors=[],
            kv_cache_groups=[
                v.KVCacheGroupSpec(layer_names=[f"layer.{i}"], kv_cache_spec=s)
                for i, s in enumerate(specs)
            ],
        )
        self.manager = v.KVCacheManager(
            kv_config,
            max_model_len=c["max_model_len"],
            scheduler_block_size=c["scheduler_block_size"],
            hash_block_size=c["hash_block_size"],
            max_in_flight_tokens=c["max_in_flight_tokens"],
            enable_caching=c["enable_caching"],
        )
        coord = self.manager.coordinator
        if isinstance(coord, v.NoPrefix):
            name = "no_prefix_cache"
        elif isinstance(coord, v.Unitary):
            name = "unitary"
        elif isinstance(coord, v.Hybrid):
            name = "hybrid"
        else:  # pragma: no cover
            name = type(coord).__name__
        assert name == c["coordinator"], (name, c["coordinator"])
        self.pool = self.manager.block_pool
        self.block_hasher = (
            v.get_request_block_hasher(c["hash_block_size"], v.hash_fn)
            if c["enable_caching"]
            else None
        )
        self.sampling_params = v.SamplingParams(max_tokens=1 << 20)
        self.max_model_len = c["max_model_len"]
        self.reqs = {}  # id -> ReqState, insertion order irrelevant (sorted output)
        self.pending = None  # (req_id, KVCacheBlocks, num_tokens) from the last lookup
        self.init_result = {
            "coordinator": name,
            "scheduler_block_size": c["scheduler_block_size"],
            "hash_block_size": c["hash_block_size"],
        }

    # ------------------------------------------------------------------ state
    def state(self):
        pool = self.pool
        free = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        cached_ids = [b.block_id for b in pool.blocks if b._block_hash is not None]
        mgr = self.manager
        requests = {
            rid: [list(g) for g in mgr.get_block_ids(rid)] for rid in sorted(self.reqs)
        }
        return {
            "free_blocks": pool.get_num_free_blocks(),
            "free_queue": free,
            "cached_blocks": len(pool.cached_block_hash_to_block),
            "cached_block_ids": cached_ids,
            "requests": requests,
        }

    # -------------------------------------------------------------- helpers
    def _live(self, op):
        rid = op.get("id")
        if not isinstance(rid, str) or rid not in self.reqs:
            raise InvalidOp(f"request {rid!r} is not live")
        return rid, self.reqs[rid]

    @staticmethod
    def _opt(op, name, default, check, what):
        if name not in op or op[name] is None:
            # `null` is treated like an omitted field (default)
            return default
        val = op[name]
        if not check(val):
            raise InvalidOp(f"{name} must be {what}")
        return val

    # ------------------------------------------------------------------- ops
    def apply(self, op):
        """Apply one op. Returns the op's result. Raises InvalidOp (state
        unchanged) or whatever vLLM raises."""
        if not isinstance(op, dict):
            self.pending = None
            raise InvalidOp("op must be an object")
        name = op.get("op")
        pending, self.pending = self.pending, None  # only the next op may consume it
        fn = _OPS.get(name) if isinstance(name, str) else None
        if fn is None:
            raise InvalidOp(f"unknown op {name!r}")
        return fn(self, op, pending)

    def op_add_request(self, op, pending):
        rid = op.get("id")
        if not isinstance(rid, str) or rid == "":
            raise InvalidOp("id must be a non-empty string")
        if rid in self.reqs:
            raise InvalidOp(f"request {rid!r} is already live")
        prompt = op.get("prompt")
        if not isinstance(prompt, list) or not all(_is_int(t) and t >= 0 for t in prompt):
            raise InvalidOp("prompt must be a list of ints >= 0")
        if not (1 <= len(prompt) < self.max_model_len):
            raise InvalidOp("prompt length must be in [1, max_model_len)")
        salt = op.get("cache_salt")
        if salt is not None and not isinstance(salt, str):
            raise InvalidOp("cache_salt must be a string or null")
        if salt == "":
            salt = None  # "" behaves like null (vLLM only salts on a truthy salt)
        req = self.v.Request(
            request_id=rid,
            prompt_token_ids=list(prompt),
            sampling_params=self.sampling_params,
            pooling_params=None,
            arrival_time=0.0,
            cache_salt=salt,
            block_hasher=self.block_hasher,
        )
        self.reqs[rid] = ReqState(req)
        return None

    def op_new_step(self, op, pending):
        self.manager.new_step_starts()
        return None

    def op_get_computed_blocks(self, op, pending):
        rid, st = self._live(op)
        if st.status == "running":
            raise InvalidOp("get_computed_blocks on a running request")
        if st.req.num_computed_tokens != 0:
            raise InvalidOp("get_computed_blocks needs num_computed_tokens == 0")
        blocks, n, spb = self.manager.get_computed_blocks(st.req)
        st.req.shared_prefix_boundary = spb
        self.pending = (rid, blocks, n)
        return {
            "num_computed_tokens": n,
            "block_ids": [list(g) for g in blocks.get_block_ids()],
            "shared_prefix_boundary": spb,
        }

    def op_allocate_slots(self, op, pending):
        rid, st = self._live(op)
        n = op.get("num_new_tokens")
        if not _is_int(n) or n < 1:
            raise InvalidOp("num_new_tokens must be an int >= 1")
        la = self._opt(op, "num_lookahead_tokens", 0, lambda x: _is_int(x) and x >= 0,
                       "an int >= 0")
        delay = self._opt(op, "delay_cache_blocks", False, _is_bool, "a bool")
        must_fit = self._opt(op, "full_sequence_must_fit", False, _is_bool, "a bool")
        use_computed = self._opt(op, "use_computed", True, _is_bool, "a bool")
        if st.uncommitted is not None:
            raise InvalidOp("request has an uncommitted allocation")
        req = st.req
        hit_blocks, hit_tokens = None, 0
        if use_computed and pending is not None and pending[0] == rid:
            hit_blocks, hit_tokens = pending[1], pending[2]
        if req.num_computed_tokens + hit_tokens + n > req.num_tokens:
            raise InvalidOp("num_computed_tokens + hits + num_new_tokens > num_tokens")
        out = self.manager.allocate_slots(
            req,
            n,
            num_new_computed_tokens=hit_tokens,
            new_computed_blocks=hit_blocks,
            num_lookahead_tokens=la,
            delay_cache_blocks=delay,
            full_sequence_must_fit=must_fit,
        )
        if out is None:
            return None
        req.num_computed_tokens += hit_tokens
        st.status = "running"
        req.status = self.v.RequestStatus.RUNNING
        st.uncommitted = n
        return {"block_ids": [list(g) for g in out.get_block_ids()]}

    def op_commit(self, op, pending):
        rid, st = self._live(op)
        if st.status != "running" or st.uncommitted is None:
            raise InvalidOp("commit needs a running request with an uncommitted allocation")
        n = op.get("num_tokens")
        if not _is_int(n) or n != st.uncommitted:
            raise InvalidOp("commit num_tokens must equal the allocated num_new_tokens")
        outs = self._opt(op, "output_tokens", [],
                         lambda x: isinstance(x, list) and all(_is_int(t) and t >= 0 for t in x),
                         "a list of ints >= 0")
        req = st.req
        if outs:
            if req.num_computed_tokens + n != req.num_tokens:
                raise InvalidOp("output_tokens only allowed when every token is computed")
            if req.num_tokens + len(outs) > self.max_model_len:
                raise InvalidOp("output_tokens would exceed max_model_len")
        req.num_computed_tokens += n
        st.uncommitted = None
        if outs:
            req.append_output_token_ids(list(outs))
        return None

    def op_cache_blocks(self, op, pending):
        rid, st = self._live(op)
        n = op.get("num_tokens")
        if not _is_int(n) or n < 0 or n > st.req.num_computed_tokens:
            raise InvalidOp("cache_blocks num_tokens must be in [0, num_computed_tokens]")
        self.manager.cache_blocks(st.req, n)
        return None

    def op_preempt(self, op, pending):
        rid, st = self._live(op)
        if st.status != "running":
            raise InvalidOp("preempt needs a running request")
        self.manager.free(st.req)
        st.req.num_computed_tokens = 0
        st.req.status = self.v.RequestStatus.PREEMPTED
        st.status = "preempted"
        st.uncommitted = None
        return None

    def op_free(self, op, pending):
        rid, st = self._live(op)
        self.manager.free(st.req)
        del self.reqs[rid]
        return None

    def op_reset_prefix_cache(self, op, pending):
        return bool(self.manager.reset_prefix_cache())


_OPS = {
    "add_request": Replayer.op_add_request,
    "new_step": Replayer.op_new_step,
    "get_computed_blocks": Replayer.op_get_computed_blocks,
    "allocate_slots": Replayer.op_allocate_slots,
    "commit": Replayer.op_commit,
    "cache_blocks": Replayer.op_cache_blocks,
    "preempt": Replayer.op_preempt,
    "free": Replayer.op_free,
    "reset_prefix_cache": Replayer.op_reset_prefix_cache,
}


def make_replayer(trace):
    """Returns (replayer or None, init observation dict)."""
    if not isinstance(trace, dict):
        return None, {"i": -1, "op": "init", "result": None, "error": "ConfigError",
                      "message": "trace must be an object"}
    fmt = trace.get("format")
    config = trace.get("config")
    try:
        if fmt != "kvtrace/1":
            raise ConfigError(f"unsupported format {fmt!r}")
        if not isinstance(trace.get("ops"), list):
            raise ConfigError("ops must be a list")
        rp = Replayer(config)
    except ConfigError as e:
        return None, {"i": -1, "op": "init", "result": None, "error": "ConfigError",
                      "message": str(e)}
    except Exception as e:  # vLLM refused the config
        return None, {"i": -1, "op": "init", "result": None,
                      "error": type(e).__name__, "message": str(e)}
    obs = {"i": -1, "op": "init", "result": rp.init_result}
    obs.update(rp.state())
    return rp, obs


def step(rp, i, op):
    """Apply op i; returns (observation dict, ok)."""
    name = op.get("op") if isinstance(op, dict) else None
    obs = {"i": i, "op": name if isinstance(name, str) else None}
    try:
        result = rp.apply(op)
        obs["result"] = result
        ok = True
    except InvalidOp as e:
        obs["result"] = None
        obs["error"] = "InvalidOp"
        obs["message"] = str(e)
        ok = False
    except Exception as e:  # a vLLM exception: report its type name
        obs["result"] = None
        obs["error"] = type(e).__name__
        obs["message"] = str(e) or repr(e)
        ok = False
    obs.update(rp.state())
    return obs, ok


def replay_lines(trace, continue_on_error=False):
    """Yield canonical observation lines for a parsed trace."""
    rp, init = make_replayer(trace)
    yield canon(init)
    if rp is None:
        return
    for i, op in enumerate(trace["ops"]):
        obs, ok = step(rp, i, op)
        yield canon(obs)
        if not ok and not continue_on_error:
            return


def bench(paths, repeat):
    traces = []
    for p in paths:
        with open(p) as f:
            traces.append(json.load(f))
    _load_vllm()
    total_ops = 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        for tr in traces:
            for _line in replay_lines(tr):
                total_ops += 1
    dt = time.perf_counter() - t0
    # count ops only (not init lines)
    total_ops -= repeat * len(traces)
    return {"ops": total_ops, "seconds": round(dt, 3),
            "ops_per_sec": round(total_ops / dt, 1) if dt > 0 else None,
            "traces": len(traces), "repeat": repeat}


def _obs_name(trace_path):
    base = os.path.basename(trace_path)
    if base.endswith(".json"):
        base = base[:-5]
    return base + ".obs.jsonl"


def check(paths, expect_dir=None):
    """Replay each trace and diff with its expected .obs.jsonl (beside the
    trace, or in expect_dir). Returns the number of mismatches."""
    bad = 0
    for p in paths:
        exp = os.path.join(expect_dir or os.path.dirname(p) or ".", _obs_name(p))
        with open(p) as f:
            trace = json.load(f)
        with open(exp) as f:
            want = f.read().splitlines()
        got = list(replay_lines(trace))
        if got != want:
            bad += 1
            k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
            print(f"MISMATCH {p} at line {k + 1} (i={k - 1})")
            print(f"  vllm:     {got[k] if k < len(got) else '<eof>'}")
            print(f"  expected: {want[k] if k < len(want) else '<eof>'}")
    print(f"{len(paths) - bad} passed, {bad} failed")
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Replay kvtrace/1 traces through vLLM 0.33.0's KVCacheManager")
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--out", help="single trace: write observations here, not stdout")
    ap.add_argument("--out-dir", help="write DIR/<trace>.obs.jsonl for every trace")
    ap.add_argument("--check", action="store_true",
                    help="diff each trace's replay with <trace>.obs.jsonl beside it "
                         "(or in --expect-dir); exit 1 on a mismatch")
    ap.add_argument("--expect-dir")
    ap.add_argument("--bench", action="store_true",
                    help="replay the traces --repeat times; print ops/s JSON")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--continue-on-error", action="store_true",
                    help="debugging only: keep going after an error line")
    a = ap.parse_args(argv)
    if a.bench:
        print(canon(bench(a.traces, a.repeat)))
        return 0
    if a.check:
        return 1 if check(a.traces, a.expect_dir) else 0
    if a.out_dir:
        os.makedirs(a.out_dir, exist_ok=True)
        for p in a.traces:
            with open(p) as f:
                trace = json.load(f)
            with open(os.path.join(a.out_dir, _obs_name(p)), "w") as out:
                for line in replay_lines(trace, a.continue_on_error):
                    out.write(line + "\n")
        return 0
    if len(a.traces) != 1:
        ap.error("several traces need --out-dir, --check or --bench")
    with open(a.traces[0]) as f:
        trace = json.load(f)
    out = open(a.out, "w") if a.out else sys.stdout
    try:
        for line in replay_lines(trace, a.continue_on_error):
            out.write(line + "\n")
    finally:
        if a.out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
