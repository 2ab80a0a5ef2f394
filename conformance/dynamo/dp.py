"""Attention data parallelism: one real `InstrumentedScheduler` per rank, over
the real `_BenchmarkSynchronizer` (ZMQ ROUTER/DEALER on loopback), in lock-step.

vLLM's DP engines step together (every idle step is a dummy forward, a
collective), so the harness runs every rank's engine iteration as two phases
with a barrier after each:

  1. `schedule()`, the runner's view, the forward's sampled tokens;
     barrier: the shared virtual clock advances by kvsim's nominal cost of the
     step (1 ms + 20 ns per token scheduled on any rank: `plan::nominal_step_ns`
     over the step's tokens, as kvsim's executor counts them);
  2. `update_from_output()` (one step late under async scheduling), observe;
     barrier: one lock-step tick.

Each rank runs in its own thread, because the synchronizer's calls block. The
planner's socket is wrapped (never replaced: every byte still goes over ZMQ)
so the harness knows what is in flight: a rank that polls with nothing sent to
it waits on the harness, not on the wall clock. When no rank can move (every
rank is at the barrier or waiting for a message nobody sent), time passes on
the virtual clock only: a lagged message is delivered if it is due before the
earliest poll deadline, else the ranks whose deadline comes first see their
poll time out (the planner raises its own TimeoutError). No wall time, thread
order or hash order reaches the recording.

The lagging channel (`options.message_lag = {"rank": R, "steps": K}`): every
message rank R's synchronizer sends is held and delivered K ticks later. A tick
is one lock-step step, or, while the whole group waits on a held message (1.6.1's
exchanges all block), one idle step's worth of virtual time (1 ms at clock scale
1): the group stalls, as a real group does while a message is late.
"""

import threading
import traceback

import zmq

IDLE_STEP_NS = 1_000_000  # plan::nominal_step_ns(0)
TOKEN_NS = 20
REAL_POLL_GUARD_MS = 120_000  # only for a message known to be in flight


def step_seconds(tokens, scale):
    return scale * (IDLE_STEP_NS + TOKEN_NS * tokens) / 1e9


class Transport:
    """What every rank's synchronizer has sent and read, and the held
    (lagged) messages. All state under one condition variable."""

    def __init__(self, clock, size, lag, tick_seconds):
        self.cond = threading.Condition()
        self.clock = clock
        self.size = size
        self.lag = lag  # (rank, ticks) or None
        self.tick_seconds = tick_seconds
        self.tick = 0
        self.released = [0] * size  # messages put on the wire for rank r
        self.consumed = [0] * size  # messages rank r has read
        self.blocked = {}  # rank -> virtual poll deadline (nothing in flight for it)
        self.timed_out = set()
        self.held = []  # (due tick, sender, dest, send), in send order
        self.closing = {}  # sender -> its socket's close, once its held messages are out
        self.stats = {
            "messages": 0,
            "lagged_messages": 0,
            "stall_ticks": 0,
            "stall_seconds": 0.0,
            "protocol_timeouts": [],
            "dropped": [],
            "transport_errors": [],
        }

    # -- called from rank threads ----------------------------------------

    def send(self, sender, dest, thunk):
        with self.cond:
            self.stats["messages"] += 1
            if self.lag is not None and sender == self.lag[0] and self.lag[1] > 0:
                self.held.append((self.tick + self.lag[1], sender, dest, thunk))
                self.stats["lagged_messages"] += 1
                return None
            result = thunk()  # a ZMQError reaches the planner, as it would
            self.released[dest] += 1
            self.cond.notify_all()
            return result

    def poll(self, rank, sock, timeout_ms, flags):
        with self.cond:
            if self.released[rank] <= self.consumed[rank]:
                wait = float(timeout_ms) / 1000 if timeout_ms is not None and timeout_ms >= 0 else float("inf")
                self.blocked[rank] = self.clock.now + wait
                self.cond.notify_all()
                while self.released[rank] <= self.consumed[rank] and rank not in self.timed_out:
                    self.cond.wait()
                self.blocked.pop(rank, None)
                if rank in self.timed_out:
                    self.timed_out.discard(rank)
                    return 0
        # A message is on its way (sent by a peer thread): wait for ZMQ to land it.
        ready = sock.poll(REAL_POLL_GUARD_MS, flags)
        if not ready:
            with self.cond:
                self.stats["transport_errors"].append(f"rank {rank}: a sent message never arrived")
        return ready

    def close(self, rank, thunk):
        """A socket closed with messages still held: like ZMQ's linger (1.6.1
        closes with linger = the protocol timeout + grace), they still go out;
        the socket closes after the last one."""
        with self.cond:
            if any(h[1] == rank for h in self.held):
                self.closing[rank] = thunk
                return None
        return thunk()

    def shutdown(self):
        """The run is over: close what is still lingering."""
        with self.cond:
            closing, self.closing, self.held = self.closing, {}, []
        for thunk in closing.values():
            thunk()

    def received(self, rank):
        with self.cond:
            self.consumed[rank] += 1

    # -- called by the driver, under self.cond ---------------------------

    def _deliver_due(self):
        keep = []
        for entry in self.held:
            due, sender, dest, thunk = entry
            if due > self.tick:
                keep.append(entry)
                continue
            try:
                thunk()
                self.released[dest] += 1
            except zmq.ZMQError as exc:
                self.stats["dropped"].append(f"tick {self.tick}: rank {sender} -> rank {dest}: {exc}")
        self.held = keep
        for sender in sorted(self.closing):
            if not any(h[1] == sender for h in self.held):
                self.closing.pop(sender)()
        self.cond.notify_all()

    def barrier_tick(self):
        with self.cond:
            self.tick += 1
            self._deliver_due()

    def stuck(self, running):
        """Every running rank waits for a message nobody has sent."""
        return bool(running) and all(
            r in self.blocked and r not in self.timed_out and self.released[r] <= self.consumed[r]
            for r in running
        )

    def resolve(self, running, step):
        """No rank can move: let virtual time pass to the next event."""
        deadline = min(self.blocked[r] for r in running)
        if self.held:
            due = min(h[0] for h in self.held)
            ticks = max(0, due - self.tick)
            at = self.clock.now + ticks * self.tick_seconds
            if at < deadline:
                self.stats["stall_ticks"] += ticks
                self.stats["stall_seconds"] += at - self.clock.now
                self.clock.now = at
                self.tick = max(self.tick, due)
                self._deliver_due()
                return
        if self.clock.now < deadline < float("inf"):
            self.clock.now = deadline
        for r in sorted(running):
            if self.blocked[r] <= deadline:
                self.timed_out.add(r)
                self.stats["protocol_timeouts"].append({"step": step, "rank": r})
        self.cond.notify_all()


class SyncSocket:
    """The planner's synchronizer socket, with the harness told of every send
    and read (all calls go through to the real ZMQ socket)."""

    def __init__(self, transport, rank, sock):
        self._t = transport
        self._rank = rank
        self._sock = sock

    def send_json(self, obj, *args, **kwargs):
        # A follower's DEALER talks to rank 0 only.
        return self._t.send(self._rank, 0, lambda: self._sock.send_json(obj, *args, **kwargs))

    def send_multipart(self, frames, *args, **kwargs):
        frames = list(frames)
        dest = int(bytes(frames[0]).decode())  # the ROUTER's identity: the rank
        return self._t.send(self._rank, dest, lambda: self._sock.send_multipart(frames, *args, **kwargs))

    def poll(self, timeout=None, flags=zmq.POLLIN):
        return self._t.poll(self._rank, self._sock, timeout, flags)

    def close(self, *args, **kwargs):
        return self._t.close(self._rank, lambda: self._sock.close(*args, **kwargs))

    def recv_json(self, *args, **kwargs):
        out = self._sock.recv_json(*args, **kwargs)
        self._t.received(self._rank)
        return out

    def recv_multipart(self, *args, **kwargs):
        out = self._sock.recv_multipart(*args, **kwargs)
        self._t.received(self._rank)
        return out

    def __getattr__(self, name):
        return getattr(self._sock, name)


class Rank:
    """One rank's scheduler, recorder and driving state. `Runner`'s
    `model_output`, `runner_view` and `pool_state` run on it (they read
    `sched`, `vocab`, `runner_tables`)."""

    def __init__(self, index, sched, rec, vocab, raw_artifact):
        self.index = index
        self.sched = sched
        self.rec = rec
        self.vocab = vocab
        self.raw_artifact = raw_artifact
        self.runner_tables = {}
        self.queue = []
        self.status = "running"
        self.error = None
        self.traceback = None
        self.tokens = 0
        self.mismatch = None
        self.failed_step = None


class Group:
    """Every rank of one attention-DP scenario, built and driven by `Runner`."""

    def __init__(self, runner):
        self.runner = runner
        self.R = type(runner)
        self.ranks = []
        self.threads = []
        self.transport = None
        self.command = None  # (serial, phase name)
        self.serial = 0
        self.done = set()
        self.stop = False
        self.step = 0

    # -- setup -----------------------------------------------------------

    def build(self, module, layout, model_dir, work):
        from recorder import Recorder
        from vllm.v1.structured_output import StructuredOutputManager

        runner = self.runner
        size = int(runner.scenario["dp_ranks"])
        lag = runner.options.get("message_lag")
        if lag is not None:
            lag_rank, lag_steps = int(lag["rank"]), int(lag["steps"])
            if not 0 <= lag_rank < size or lag_steps < 0:
                raise layout.LayoutError(
                    f"message_lag rank {lag_rank} steps {lag_steps}: the scenario has {size} ranks"
                )
            lag = (lag_rank, lag_steps)
        self.lag = lag
        scale = float(runner.options.get("clock_scale", 1.0))
        self.transport = Transport(runner.clock, size, lag, step_seconds(0, scale))
        for r in range(size):
            vllm_config, kv_config, block_size = layout.build_configs(
                runner.scenario, runner.bench, model_dir, {**runner.options, "rank": r}
            )
            # A vLLM DP engine core keeps the global rank in data_parallel_index,
            # which 1.6.1's _resolve_dp_rank reads.
            vllm_config.parallel_config.data_parallel_index = r
            if r == 0:
                self.recorded_groups = layout.recorded_groups(kv_config, runner.scenario)
            sched = module.InstrumentedScheduler(
                vllm_config=vllm_config,
                kv_cache_config=kv_config,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=block_size,
                log_stats=False,
            )
            if sched._fpm_dp_rank != r or sched._bench_synchronizer is None:
                raise RuntimeError(
                    f"rank {r}: the planner resolved dp rank {sched._fpm_dp_rank}, "
                    f"synchronizer {sched._bench_synchronizer!r}"
                )
            sync = sched._bench_synchronizer
            sync._socket = SyncSocket(self.transport, r, sync._socket)
            # 1.6.1 suffixes a follower's path itself (`..._dp{rank}.json`).
            raw = sched._bench_config.output_path
            self.ranks.append(Rank(r, sched, Recorder(sched, runner.vocab), runner.vocab, raw))
        runner.report["dp"] = {
            "ranks": size,
            "synchronizer": "ROUTER/DEALER on 127.0.0.1, FPM base port + dp_size (a free port)",
            "resolved_ranks": [rk.sched._fpm_dp_rank for rk in self.ranks],
            "message_lag": {"rank": lag[0], "steps": lag[1]} if lag else None,
        }

    # -- threads ---------------------------------------------------------

    def _start(self):
        for rk in self.ranks:
            t = threading.Thread(target=self._rank_loop, args=(rk,), name=f"kvsim-dp-rank{rk.index}", daemon=True)
            t.start()
            self.threads.append(t)

    def _rank_loop(self, rk):
        seen = 0
        cond = self.transport.cond
        while True:
            with cond:
                while not self.stop and (self.command is None or self.command[0] == seen or rk.index not in self.command[2]):
                    cond.wait()
                if self.stop:
                    return
                seen, phase, _ = self.command
            try:
                getattr(self, phase)(rk)
            except Exception as exc:  # the planner raised: a finding, not a crash
                rk.status = "raised"
                rk.error = f"{type(exc).__name__}: {exc}"
                rk.traceback = traceback.format_exc()
                rk.failed_step = self.step
            with cond:
                self.done.add(rk.index)
                cond.notify_all()

    def _phase(self, phase, ranks):
        """Run `phase` on every rank of `ranks` concurrently; back when all are done."""
        cond = self.transport.cond
        names = {rk.index for rk in ranks}
        if not names:
            return
        with cond:
            self.serial += 1
            self.done = set()
            self.command = (self.serial, phase, names)
            cond.notify_all()
            while len(self.done) < len(names):
                running = names - self.done
                if self.transport.stuck(running):
                    self.transport.resolve(running, self.step)
                    continue
                cond.wait(timeout=5.0)  # a safety net only: progress always notifies

    # -- phases ----------------------------------------------------------

    def forward_phase(self, rk):
        self.runner.shrink_due(rk.rec, rk.index)
        output = rk.sched.schedule()
        rk.mismatch = self.R.runner_view(rk, output)
        mro, sampled = self.R.model_output(rk, output)
        rk.rec.forward(output, sampled)
        rk.tokens = int(output.total_num_scheduled_tokens)
        rk.queue.append((output, mro))

    def update_phase(self, rk):
        if len(rk.queue) >= self.async_depth:
            done, done_mro = rk.queue.pop(0)
            rk.rec.process_outputs(lag=len(rk.queue))
            rk.sched.update_from_output(done, done_mro)
        rk.rec.observe(rk.mismatch)
        rk.rec.end_step()

    def drain_phase(self, rk):
        self.runner.shrink_due(rk.rec, rk.index)  # faults apply at every recorded step
        if rk.queue:
            done, done_mro = rk.queue.pop(0)
            rk.rec.process_outputs(lag=0)
            rk.sched.update_from_output(done, done_mro)
        rk.rec.observe()
        rk.rec.end_step()

    # -- the sweep -------------------------------------------------------

    def run(self):
        runner = self.runner
        self.async_depth = 2 if runner.scenario["scheduler"].get("async_scheduling") else 1
        max_steps = int(runner.options.get("max_steps", 20000))
        scale = float(runner.options.get("clock_scale", 1.0))
        live = lambda: [rk for rk in self.ranks if rk.status == "running"]  # noqa: E731
        stalled = None
        self._start()
        try:
            while not any(rk.status != "running" for rk in self.ranks):
                if not any(rk.sched._bench_active for rk in self.ranks):
                    break
                if self.step >= max_steps:
                    stalled = f"the sweep did not end within {max_steps} steps"
                    break
                self._phase("forward_phase", live())
                runner.clock.advance(step_seconds(sum(rk.tokens for rk in self.ranks), scale))
                self._phase("update_phase", live())
                self.transport.barrier_tick()
                self.step += 1
            while not any(rk.status != "running" for rk in self.ranks) and stalled is None:
                if not any(rk.queue for rk in self.ranks):
                    break
                self._phase("drain_phase", live())
                self.transport.barrier_tick()
                self.step += 1
        finally:
            with self.transport.cond:
                self.stop = True
                self.transport.cond.notify_all()
            for t in self.threads:
                t.join(timeout=30)
            self.transport.shutdown()
        failed = [rk for rk in self.ranks if rk.status != "running"]
        for rk in self.ranks:
            if stalled is not None:
                rk.status = "stalled"
                rk.error = stalled
                rk.rec.failed("stalled", stalled)
            elif rk.status == "running" and not failed:
                rk.status = "completed"
                rk.rec.end_sweep()
            elif rk.status == "running":
                # A peer failed: the group stops with it (a failed DP engine takes the
                # group down); this rank's recording just ends, nothing of it failed.
                rk.status = "stopped"
                rk.error = "stopped with the group: " + "; ".join(f"rank {f.index} {f.status}" for f in failed)
            else:
                rk.rec.failed(rk.status, rk.error)
            if rk.rec.ops:
                rk.rec.end_step()
        self._report(failed, stalled)
        for rk in self.ranks:
            try:
                rk.sched.shutdown()
            except Exception as exc:
                runner.report.setdefault("shutdown_error", f"rank {rk.index}: {type(exc).__name__}: {exc}")

    def _report(self, failed, stalled):
        report = self.runner.report
        first = failed[0] if failed else None
        if stalled is not None:
            report["status"], report["error"] = "stalled", stalled
        elif first is not None:
            report["status"] = first.status
            report["error"] = f"rank {first.index}: {first.error}"
            report["traceback"] = first.traceback
        else:
            report["status"] = "completed"
        report["steps"] = self.ranks[0].rec.step
        report["pool"] = self.R.pool_state(self.ranks[0])
        stats = dict(self.transport.stats)
        stats["stall_seconds"] = round(stats["stall_seconds"], 9)
        report["dp"]["transport"] = stats
        report["dp"]["rank_reports"] = [
            {
                "rank": rk.index,
                "status": rk.status,
                "error": rk.error,
                "failed_step": rk.failed_step,
                "steps": rk.rec.step,
                "points": len(rk.rec.points),
                "pool": self.R.pool_state(rk),
            }
            for rk in self.ranks
        ]
        tracebacks = {str(rk.index): rk.traceback for rk in self.ranks if rk.traceback}
        if tracebacks:
            report["dp"]["tracebacks"] = tracebacks

    # -- the recording ---------------------------------------------------

    def steps(self):
        """Every rank's steps, in step order, ranks ascending within a step."""
        out = [s for rk in self.ranks for s in rk.rec.steps]
        return sorted(out, key=lambda s: (s["step"], s["rank"]))

    def points(self):
        return [p for rk in self.ranks for p in rk.rec.points]

    def faults(self):
        """The ranks' faults, merged: one soft timeout (the latest rank's step:
        every rank shares one clock, a rank that acted earlier in the step saw it
        one step later), and the lagging channel."""
        out = []
        timeouts = [f["step"] for rk in self.ranks for f in rk.rec.faults if f["fault"] == "soft_timeout"]
        if timeouts:
            out.append({"fault": "soft_timeout", "step": max(timeouts)})
        others = [f for rk in self.ranks for f in rk.rec.faults if f["fault"] != "soft_timeout"]
        out.extend(others)
        if self.lag is not None:
            out.append({"fault": "message_lag", "rank": self.lag[0], "steps": self.lag[1]})
        return out
