"""Record what the real planner does to vLLM's KV cache as kvsim plan ops.

Hooks wrap the KV-cache manager, its block pool and the few planner methods
whose effect is one kvsim op (shadow registration, copy-on-write release,
point injection, steady steps, the soft-timeout check, shedding chains). Every
other change the planner makes by hand shows up in the per-step table diff
(`observe` ops), which kvsim's engine must reproduce exactly
(spec/plan.md §3, "Recorded plans").

Pool calls made inside a manager or a recognised planner method are that
method's own; a pool call from anywhere else is an edit kvsim has no op for,
and is recorded as such (`unmodelled`), never dropped.
"""

import functools
import inspect

NULL = 0


def block_ids(blocks):
    return [b.block_id for b in blocks]


def set_forks(entry, srcs):
    """A shadow group's copy-on-write sources: `tail[0]`'s, then the rest's."""
    entry["cow_from"] = srcs[0]
    if len(srcs) > 1:
        entry["cow_more"] = srcs[1:]


def free_head(pool, n):
    """The next `n` block ids the pool hands out (the free queue's head)."""
    out = []
    q = pool.free_block_queue
    b = q.fake_free_list_head.next_free_block
    while b is not None and b is not q.fake_free_list_tail and len(out) < n:
        out.append(b.block_id)
        b = b.next_free_block
    return out


class Recorder:
    def __init__(self, sched, vocab):
        self.sched = sched
        self.vocab = vocab
        self.kv = sched.kv_cache_manager
        self.pool = self.kv.block_pool
        self.managers = self.kv.coordinator.single_type_managers
        self.steps = []  # finished steps: {"step", "ops"}
        self.ops = []  # the step being recorded
        self.step = 0
        self.depth = 0  # inside a manager call: its pool calls are its own
        self.owned = 0  # inside a planner method whose pool calls make one op
        self.known = {}  # req id -> tokens kvsim's engine has computed
        self.hits = {}  # req id -> prefix-hit tokens from get_computed_blocks this step
        self.shadows = set()
        self.shedding = False
        self.faults = []
        self.deadline_seen = False
        # (clock, timeout seconds) of the harness, when it keeps the clock: the
        # deadline is then the harness's own (start + timeout), not the planner's
        # sampling of it (`set_soft_timeout`).
        self.soft_timeout = None
        self.deadline = None  # virtual-clock deadline, once the planner's timer started
        self.deadline_due = None  # the first step that starts at or after it
        self.point = None  # benchmark point index whose steps are timed
        self.points = []  # injected points: {"point", "batch", "context_lengths", "kind"}
        self.timed_step = False
        self.unmodelled = []
        self.last_tables = {}
        self.owned_draws = []  # get_new_blocks results inside an owned planner method
        self.cows = []  # _apply_cow calls inside an owned planner method
        self.owned_refs = []  # touch / free_blocks block ids inside an owned planner method
        self.fenced_cow = set()  # copy-on-write retentions released through the fence, pending
        self.aborting = False  # inside a harness abort: the `abort` faults are the record
        self.shrinking = False  # inside a harness pool shrink: the fault is the record
        self.held = []  # blocks a `shrink_pool` fault took out of the pool
        self.fail_after = None  # armed `stage_failure`: registrations to let through first
        self.failing = None  # inside the registration the fault fails: draws so far
        self.injected = None  # the exception the fault raised, once it has
        # Attention-DP: every step and point names its rank (spec/plan.md §3);
        # a single-rank recording stays as it was.
        self.rank = int(getattr(sched, "_fpm_dp_rank", 0) or 0)
        self.dp = int(getattr(sched, "_bench_dp_size", 1) or 1) > 1
        self._install()

    # -- hooks ------------------------------------------------------------

    def _hook(self, obj, name, after=None, before=None, manager=False, owns_pool=False, raised=None):
        """Wrap `obj.name`. A manager method (`manager`) reports only its outermost
        call, and the pool calls it makes are its own; a planner method may mark
        the step (`before`), make one op of its result (`after`) or of its failure
        (`raised`), and own its direct pool calls (`owns_pool`)."""
        if not hasattr(obj, name):
            return
        orig = getattr(obj, name)
        sig = inspect.signature(orig)

        @functools.wraps(orig)
        def hooked(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            state = before(bound.arguments) if before else None
            outer = not manager or self.depth == 0
            if owns_pool:
                self.owned_draws, self.cows, self.owned_refs = [], [], []
            self.depth += manager
            self.owned += owns_pool
            try:
                result = orig(*args, **kwargs)
            except Exception as exc:
                if raised:
                    raised(bound.arguments, exc)
                raise
            finally:
                self.depth -= manager
                self.owned -= owns_pool
            if after and outer:
                after(bound.arguments, result) if manager else after(bound.arguments, result, state)
            return result

        setattr(obj, name, hooked)

    def _install(self):
        kv = self.kv
        for name, after in (
            ("get_computed_blocks", self._on_computed_blocks),
            ("allocate_slots", self._on_allocate),
            ("free", self._on_free),
            ("pop_blocks_for_free", self._on_pop_for_free),
            ("cache_blocks", self._on_cache_blocks),
            ("reset_prefix_cache", self._on_reset),
        ):
            self._hook(kv, name, after, manager=True)
        for name in ("get_new_blocks", "free_blocks", "touch"):
            self._hook(self.pool, name, functools.partial(self._on_pool, name), manager=True)
        s = self.sched
        self._hook(s, "_kvwarm_register_shadow", self._on_shadow, owns_pool=True, raised=self._on_shadow_raised)
        self._install_registration_fault()
        self._hook(s, "_kvwarm_take_cow_copies", self._on_take_cow, owns_pool=True, before=self._deferred_count)
        # `defer_block_free`: the fence's releases are kvsim's `process_outputs`
        # (fenced `finish`); a fenced copy-on-write release is a `release_cow`.
        self._hook(s, "_drain_deferred_frees", self._on_drain, owns_pool=True, before=self._deferred_ids)
        self._hook(s, "_bench_inject_fake_decode", before=self._on_inject_fake)
        self._hook(s, "_kvwarm_inject_borrowed", before=self._on_inject_borrowed)
        self._hook(s, "_bench_make_steady_step", self._on_steady)
        self._hook(s, "_bench_soft_timeout_elapsed", self._on_deadline_check)
        self._hook(s, "_bench_start_timing", before=self._on_start_timing)
        for g, mgr in enumerate(self.managers):
            if hasattr(mgr, "_apply_cow"):
                self._wrap_cow(g, mgr)
        shed = getattr(self.sched, "_kvwarm_shed_chains", None)
        if shed is not None:
            self._wrap_shed(shed)

    def _wrap_cow(self, g, mgr):
        """The forks a registration makes: (group, table index, source) in call order."""
        orig = mgr._apply_cow

        @functools.wraps(orig)
        def hooked(request_id, block_idx, source_block, cow_block):
            self.cows.append((g, int(block_idx), source_block.block_id))
            return orig(request_id, block_idx, source_block, cow_block)

        mgr._apply_cow = hooked

    def _wrap_shed(self, orig):
        @functools.wraps(orig)
        def hooked(*args, **kwargs):
            self.shedding = True
            try:
                return orig(*args, **kwargs)
            finally:
                self.shedding = False

        self.sched._kvwarm_shed_chains = hooked

    # -- request bookkeeping ---------------------------------------------

    def _ensure_added(self, request):
        rid = request.request_id
        if rid in self.known:
            return
        import random

        ids = list(request.prompt_token_ids)
        prompt = {"source": "ids", "ids": ids}
        # Dynamo's `_bench_synthetic_token_ids(salt, n)` draws
        # `random.Random(f"dp{rank}:{salt}").choices(range(1, V), k=n)`, salted
        # by the request id or its cache salt: record the draw, not its ids,
        # once it is checked to reproduce them exactly.
        vocab = int(getattr(self.sched, "_bench_vocab_size", 0) or 0)
        rank = getattr(self.sched, "_fpm_dp_rank", 0)
        if vocab > 1 and ids:
            for salt in dict.fromkeys(s for s in (rid, request.cache_salt) if s is not None):
                seed = f"dp{rank}:{salt}"
                if random.Random(seed).choices(range(1, vocab), k=len(ids)) == ids:
                    prompt = {"source": "py_choices", "seed": seed, "len": len(ids), "low": 1, "high": vocab}
                    break
        op = {"op": "add_request", "req": rid, "prompt": prompt}
        if request.cache_salt is not None:
            op["cache_salt"] = request.cache_salt
        self.ops.append(op)
        self.known[rid] = 0

    def _sync_computed(self, request):
        """Tokens the planner marked computed without a forward pass are
        synthetic KV (`fake_compute`); kvsim only knows them that way."""
        rid = request.request_id
        have = self.known.get(rid, 0)
        real = int(request.num_computed_tokens)
        if real > have and have == 0 and rid not in self.shadows:
            self.ops.append({"op": "fake_compute", "req": rid, "tokens": real})
            self.known[rid] = real

    # -- manager hooks ----------------------------------------------------

    def _on_computed_blocks(self, args, result):
        request = args["request"]
        self._ensure_added(request)
        self.hits[request.request_id] = int(result[1])

    def _on_allocate(self, args, result):
        request = args["request"]
        rid = request.request_id
        self._ensure_added(request)
        self._sync_computed(request)
        for key in ("num_lookahead_tokens", "num_external_computed_tokens", "num_encoder_tokens", "reserved_blocks"):
            if int(args.get(key) or 0) != 0:
                self.unmodelled.append(f"step {self.step}: allocate_slots({rid}) with {key}={args[key]}")
        op = {
            "op": "schedule",
            "req": rid,
            "num_new_tokens": int(args["num_new_tokens"]),
        }
        hit = self.hits.pop(rid, None)
        expect = {}
        if hit is None:
            op["use_prefix_cache"] = False
        else:
            expect["hit_tokens"] = int(args.get("num_new_computed_tokens") or 0)
        if args.get("full_sequence_must_fit"):
            op["full_sequence_must_fit"] = True
        if args.get("delay_cache_blocks"):
            op["delay_cache_blocks"] = True
        if result is None:
            expect["refused"] = True
        else:
            expect["tables"] = [list(t) for t in self.kv.get_block_ids(rid)]
            self.known[rid] = self.known.get(rid, 0) + int(args.get("num_new_computed_tokens") or 0)
        op["expect"] = expect
        self.ops.append(op)
        if result is None and rid not in self.sched.requests:
            # A request the planner built itself and drops when the pool refuses
            # it (`_bench_inject_fake_decode` truncates the batch and reuses the
            # id for the next point): it never held a block; kvsim forgets it.
            self.ops.append({"op": "finish", "req": rid})
            self.known.pop(rid, None)

    def _on_free(self, args, result):
        self._retire(args["request"], fenced=False)

    def _on_pop_for_free(self, args, result):
        self._retire(args["request"], fenced=True)

    def _retire(self, request, fenced):
        rid = request.request_id
        if rid not in self.known:
            return  # never allocated: kvsim never saw it
        if self.aborting:
            # The `abort` fault frees it in kvsim's engine at the step's start,
            # one fault per request in the order vLLM freed them (its
            # finish_requests walks a set of the ids: hash order).
            entry = {"fault": "abort", "step": self.step, "req": rid}
            if self.rank:
                entry["rank"] = self.rank
            if fenced:
                entry["fenced"] = True
            self.faults.append(entry)
            self.known.pop(rid, None)
            self.shadows.discard(rid)
            return
        from vllm.v1.request import RequestStatus

        if request.status == RequestStatus.PREEMPTED and not request.is_finished():
            self.ops.append({"op": "preempt", "req": rid})
            self.known[rid] = 0
            return
        op = "shed" if self.shedding else "finish"
        entry = {"op": op, "req": rid}
        if fenced:
            entry["fenced"] = True
        self.ops.append(entry)
        self.known.pop(rid, None)
        self.shadows.discard(rid)

    def _on_cache_blocks(self, args, result):
        request = args["request"]
        self._ensure_added(request)
        self._sync_computed(request)
        self.ops.append(
            {"op": "cache_blocks", "req": request.request_id, "num_tokens": int(args["num_computed_tokens"])}
        )

    def _on_reset(self, args, result):
        self.ops.append({"op": "reset_prefix_cache", "expect": bool(result)})

    def _on_pool(self, name, args, result):
        if self.shrinking:
            return  # the harness's own draw: the `shrink_pool` fault is the record
        if self.owned:
            if name == "get_new_blocks":
                self.owned_draws.append(block_ids(result))
            else:
                blocks = args.get("blocks", args.get("ordered_blocks", ()))
                self.owned_refs.append((name, block_ids(blocks)))
            return
        # A pool call outside every manager method and recognised planner
        # method: a hand edit kvsim has no op for.
        what = {"get_new_blocks": lambda: f"{args.get('num_blocks')} blocks -> {block_ids(result)}"}
        detail = what.get(name, lambda: "")()
        self.unmodelled.append(f"step {self.step}: block_pool.{name} called by the planner directly {detail}")

    # -- planner hooks ----------------------------------------------------

    def _on_shadow(self, args, result, _state):
        shadow, chain, ctx = args["req_id"], args["chain_id"], int(args["ctx_len"])
        tables, _zeroed = result
        chain_tables = self.kv.get_block_ids(chain)
        random_kda = bool(getattr(self.sched, "_bench_random_kda", False))
        groups = []
        cow = False
        for g, table in enumerate(tables):
            mgr = self.managers[g]
            chain_t = list(chain_tables[g])
            n_shared = 0
            while n_shared < len(table) and n_shared < len(chain_t) and table[n_shared] == chain_t[n_shared]:
                n_shared += 1
            random_group = random_kda and self.sched._kvwarm_random_state_manager(mgr)
            if random_group:
                n_shared = sum(1 for b in table if b == NULL)
            tail = list(table[n_shared:])
            entry = {"shared": list(table[:n_shared]), "tail": tail}
            cached = getattr(mgr, "num_cached_block", {}).get(shadow)
            if cached is not None:
                entry["num_cached"] = int(cached)
            srcs = self._forks(g)
            if tail and srcs:
                set_forks(entry, srcs)
                cow = True
            groups.append(entry)
        op = self._shadow_op(args, groups, ok=True, tail="cow" if cow else "zero")
        if random_kda:
            op["random_state"] = True
        self.ops.append(op)
        self.shadows.add(shadow)
        self.known[shadow] = ctx

    def _on_shadow_raised(self, args, exc):
        """The registration raised half-way (1.6.1 stages every group's tail,
        then references and forks group by group): a failed registration with
        what it drew and what it meant to copy; kvsim judges what it left."""
        if self._rolled_back(args["req_id"]):
            # 1.6.1's staging loop raised: every tail it drew went back to the pool,
            # nothing was referenced and no table written. The failed registration
            # left nothing (`groups: []`), which is what kvsim's engine judges.
            self.ops.append(self._shadow_op(args, [], ok=False, tail="cow"))
            return
        chain_tables = self.kv.get_block_ids(args["chain_id"])
        ctx = int(args["ctx_len"])
        groups = []
        for g, mgr in enumerate(self.managers):
            n_shared = ctx // int(mgr.block_size)
            drawn = self.owned_draws[g] if g < len(self.owned_draws) else []
            chain_t = list(chain_tables[g])
            entry = {"shared": chain_t[:n_shared], "tail": drawn}
            srcs = self._forks(g) or chain_t[n_shared : n_shared + len(drawn)]
            if srcs:
                set_forks(entry, srcs)
            groups.append(entry)
        self.ops.append(self._shadow_op(args, groups, ok=False, tail="cow"))

    def _rolled_back(self, shadow):
        """Whether a raising registration undid itself: no block referenced, no
        copy-on-write, every drawn block freed again, no table for the shadow."""
        if self.cows or any(name == "touch" for name, _ in self.owned_refs):
            return False
        drawn = sorted(b for d in self.owned_draws for b in d)
        freed = sorted(b for name, ids in self.owned_refs if name == "free_blocks" for b in ids)
        if drawn != freed:
            return False
        return not any(mgr.req_to_blocks.get(shadow) for mgr in self.managers)

    def _forks(self, g):
        """The sources vLLM's `_apply_cow` forked group `g`'s tail from, in table
        order (1.6.1 forks every tail block: from the chain block at the same
        index, or from the live block in live-state mode)."""
        return [src for (_, _, src) in sorted(c for c in self.cows if c[0] == g)]

    @staticmethod
    def _shadow_op(args, groups, ok, tail):
        return {
            "op": "register_shadow",
            "shadow": args["req_id"],
            "chain": args["chain_id"],
            "ctx": int(args["ctx_len"]),
            "headroom": int(args["headroom"]),
            "tail": tail,
            "groups": groups,
            "ok": ok,
            "covered": True,
        }

    def _deferred_count(self, _args):
        return len(getattr(self.sched, "deferred_frees", ()))

    def _on_take_cow(self, args, result, before):
        if not result:
            return
        deferred = list(getattr(self.sched, "deferred_frees", ()))[before:]
        if deferred and not any(name == "free_blocks" for name, _ in self.owned_refs):
            # Released through the deferred-free fence (`_free_cow_retained_blocks`
            # under `defer_block_free`): the release happens where the fence drains.
            self.fenced_cow.update(b.block_id for _, blocks in deferred for b in blocks)
            return
        self.ops.append({"op": "release_cow"})

    def _deferred_ids(self, _args):
        return [{b.block_id for b in blocks} for _, blocks in getattr(self.sched, "deferred_frees", ())]

    def _on_drain(self, args, result, before):
        # The fence frees its queue's head: what left the queue was freed.
        left = len(getattr(self.sched, "deferred_frees", ()))
        freed = set().union(*before[: len(before) - left]) if len(before) > left else set()
        if not (freed & self.fenced_cow):
            return
        self.fenced_cow -= freed
        op = {"op": "release_cow"}
        ends = [i for i, o in enumerate(self.ops) if o["op"] == "end_timed"]
        if self.timed_step and ends:
            # The update that drains it runs inside this step's measured
            # inter-update window (async: the previous step's output is processed
            # after this step's forward): kvsim's plan has it inside the window.
            self.ops.insert(ends[-1], op)
        else:
            self.ops.append(op)

    def _new_point(self, lengths, kind):
        point = len(self.points)
        entry = {"point": point, "step": self.step, "batch": len(lengths), "context_lengths": [int(c) for c in lengths], "kind": kind}
        if self.dp:
            entry["rank"] = self.rank
        self.points.append(entry)
        self.point = point
        self.timed_step = True
        op = {"op": "inject_point", "point": point}
        current = getattr(self.sched, "_bench_current_point", None)
        if "eager_warmup" in (getattr(current, "sample_reasons", None) or ()):
            # An eager warm-up replica (dynamo_fpm.md §1.6): run, then discarded.
            op["replica"] = True
            entry["replica"] = True
        self.ops.append(op)

    def _on_inject_fake(self, args):
        self._new_point(args["context_lengths"], "synthetic")

    def _on_inject_borrowed(self, args):
        self._new_point(args["context_lengths"], "shadow")

    def _on_steady(self, args, result, _state):
        if result is not None and self.point is not None:
            self.timed_step = True

    def external_abort(self, ids):
        """A harness fault before the step's schedule: abort `ids` in one
        `finish_requests` call, as the engine core does. Each request kvsim's
        engine knows becomes an `abort` fault at this step (`_retire`)."""
        from vllm.v1.request import RequestStatus

        self.aborting = True
        try:
            self.sched.finish_requests(ids, RequestStatus.FINISHED_ABORTED)
        finally:
            self.aborting = False

    def external_shrink(self, blocks, steps=None):
        """A harness fault before the step's schedule: `blocks` free blocks (at most
        every free one) are drawn from the pool and held for the rest of the run,
        a rank whose pool is smaller than the one planned with, or for `steps`
        steps (`external_restore`). Recorded as a `shrink_pool` fault; kvsim's
        engine draws the same blocks (spec/plan.md §4)."""
        entry = {"fault": "shrink_pool", "step": self.step, "blocks": int(blocks)}
        if self.rank:
            entry["rank"] = self.rank
        if steps is not None:
            entry["steps"] = int(steps)
        self.faults.append(entry)
        n = min(int(blocks), self.pool.get_num_free_blocks())
        if not self.held:
            self._hide_held_from_reset()
        self.held.extend(self._harness_draw(n))

    def arm_registration_failure(self, after):
        """A harness fault from this step: the (after+1)-th shadow registration
        fails, its last group's tail draw raising as vLLM's pool does when it is
        short (so the earlier groups' tails were drawn). Recorded as a
        `stage_failure` fault (spec/plan.md §4)."""
        self.faults.append({"fault": "stage_failure", "step": self.step, "rank": self.rank, "after": int(after)})
        self.fail_after = int(after)

    def _install_registration_fault(self):
        """Outer wrappers over the registration and the pool's draw: inert until
        `arm_registration_failure`."""
        s, pool = self.sched, self.pool
        register, draw = s._kvwarm_register_shadow, pool.get_new_blocks
        groups = len(self.managers)

        @functools.wraps(register)
        def registration(*args, **kwargs):
            if self.fail_after is None:
                return register(*args, **kwargs)
            if self.fail_after > 0:
                self.fail_after -= 1
                return register(*args, **kwargs)
            self.fail_after, self.failing = None, 0
            try:
                return register(*args, **kwargs)
            finally:
                self.failing = None

        @functools.wraps(draw)
        def get_new_blocks(num_blocks):
            if self.failing is not None:
                self.failing += 1
                if self.failing == groups:
                    self.injected = ValueError(
                        f"Cannot get {num_blocks} free blocks from the pool (kvsim stage_failure fault)"
                    )
                    raise self.injected
            return draw(num_blocks)

        if hasattr(s, "_kvwarm_register_shadow"):
            s._kvwarm_register_shadow = registration
            pool.get_new_blocks = get_new_blocks

    def external_restore(self):
        """A transient shrink ends before the step's schedule: the held blocks go
        back to the free queue in the order they were taken."""
        held, self.held = self.held, []
        self.shrinking = True
        try:
            self.pool.free_blocks(held)
        finally:
            self.shrinking = False

    def _harness_draw(self, n):
        self.shrinking = True
        try:
            return self.pool.get_new_blocks(n) if n > 0 else []
        finally:
            self.shrinking = False

    def _hide_held_from_reset(self):
        """A smaller pool has no held blocks for `reset_prefix_cache` to count as
        used: around each reset the held blocks go back to the pool and as many
        are drawn again after it, as kvsim's engine does with a shrunk pool."""
        pool, orig = self.pool, self.pool.reset_prefix_cache

        @functools.wraps(orig)
        def reset(*args, **kwargs):
            held, self.held = self.held, []
            self.shrinking = True
            try:
                pool.free_blocks(held)
            finally:
                self.shrinking = False
            try:
                return orig(*args, **kwargs)
            finally:
                self.held = self._harness_draw(len(held))

        pool.reset_prefix_cache = reset

    def set_soft_timeout(self, clock, timeout_seconds):
        """Take the soft deadline from the harness's virtual clock: the planner's
        timer starts at its first `_bench_start_timing` (the `time.monotonic()` read
        that opens the window), the deadline is that plus the configured timeout,
        and it passes at the first step that starts at or after it, whether or not
        the planner samples it there."""
        self.soft_timeout = (clock, float(timeout_seconds))

    def _on_start_timing(self, args):
        if self.soft_timeout is None or self.deadline is not None:
            return
        if getattr(self.sched, "_bench_start_monotonic", None) is not None:
            return
        clock, timeout = self.soft_timeout
        self.deadline = clock.monotonic() + timeout
        if clock.monotonic() >= self.deadline:
            self._deadline_fault(self.step)

    def _deadline_fault(self, step):
        self.deadline_seen = True
        self.faults.append({"fault": "soft_timeout", "step": step})

    def _on_deadline_check(self, args, result, _state):
        if self.deadline is not None:
            return  # the harness's clock decides (`set_soft_timeout`)
        if result and not self.deadline_seen:
            self.deadline_seen = True
            # The planner acts on the deadline from here on; an injection or a
            # registration earlier in this step came before it saw it.
            acted = any(op["op"] in ("inject_point", "register_shadow") for op in self.ops)
            self.faults.append({"fault": "soft_timeout", "step": self.step + (1 if acted else 0)})

    # -- steps ------------------------------------------------------------

    def forward(self, output, sampled):
        """The step's forward pass: what the model runner computes."""
        batch = []
        for rid, n in output.num_scheduled_tokens.items():
            entry = {"req": rid, "tokens": int(n)}
            if sampled.get(rid):
                entry["output"] = [int(t) for t in sampled[rid]]
            batch.append(entry)
            if rid in self.known:
                self.known[rid] += int(n)
        if not batch:
            return
        if self.timed_step and self.point is not None:
            self.ops.append({"op": "begin_timed", "point": self.point})
            self.ops.append({"op": "forward", "batch": batch})
            self.ops.append({"op": "end_timed", "point": self.point})
        else:
            self.ops.append({"op": "forward", "batch": batch})

    def process_outputs(self, lag):
        op = {"op": "process_outputs"}
        if lag:
            op["lag"] = lag
        self.ops.append(op)

    def tables_now(self):
        """Every request's block tables in the real manager."""
        out = {}
        for g, mgr in enumerate(self.managers):
            for rid, blocks in mgr.req_to_blocks.items():
                if not blocks:
                    continue
                out.setdefault(rid, [[] for _ in self.managers])[g] = block_ids(blocks)
        return out

    def observe(self, runner_mismatch=None):
        """The end of a step: the tables that changed, and the pool's free count."""
        now = self.tables_now()
        changed = {rid: t for rid, t in sorted(now.items()) if self.last_tables.get(rid) != t}
        gone = sorted(rid for rid in self.last_tables if rid not in now)
        self.last_tables = now
        op = {
            "op": "observe",
            "free_blocks": int(self.pool.get_num_free_blocks()),
            "free_head": free_head(self.pool, 16),
            "live": len(now),
        }
        if changed:
            op["tables"] = changed
        if gone:
            op["gone"] = gone
        if runner_mismatch:
            op["runner_mismatch"] = runner_mismatch
        if self.unmodelled:
            op["unmodelled"] = list(self.unmodelled)
            self.unmodelled.clear()
        self.ops.append(op)

    def end_step(self):
        if self.deadline_due is not None and not self.deadline_seen and self.deadline_due <= self.step:
            self._deadline_fault(self.deadline_due)
        if self.deadline is not None and self.deadline_due is None and self.soft_timeout[0].monotonic() >= self.deadline:
            # The clock has passed the deadline: the next step starts after it.
            self.deadline_due = self.step + 1
        step = {"step": self.step, "ops": self.ops}
        if self.dp:
            step["rank"] = self.rank
        self.steps.append(step)
        self.ops = []
        self.step += 1
        self.hits.clear()
        self.timed_step = False

    def failed(self, kind, message):
        self.ops.append({"op": "planner_failed", "kind": kind, "error": message})

    def end_sweep(self):
        self.ops.append({"op": "end_sweep"})
