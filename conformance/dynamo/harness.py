#!/usr/bin/env python3
"""Run Dynamo's shipped FPM benchmark planner (ai-dynamo 1.6.1, vLLM 0.31.0) on
CPU over a kvsim scenario, and record it as a kvsim-plan/1 plan.

    python harness.py --request REQUEST.json --out-dir DIR
    python harness.py --serve          # many requests, one import (worker.py)

REQUEST.json (written by `kvsim dynamo run`, format `kvsim-dynamo-request/1`):
  {"format": ..., "scenario": <a kvsim scenario file: name, scenario, bench>,
   "options": {"warmup": true, "live_state": false, "max_steps": N,
               "planner_source": null | PATH, "clock_scale": 1.0,
               "delay_outputs": null | {"step": S, "by": K},
               "defer_block_free": false, "abort": null | {"step": S, "prefix": P},
               "shrink_pool": null | {"step": S, "rank": R, "blocks": N, "steps": null | K},
               "fail_registration": null | {"step": S, "after": N}}}

DIR receives plan.json, artifact.json (the planner's own artifact, run id and
wall-clock stamps normalised) and report.json. A Python exception inside the
planner is recorded (plan up to it, traceback, artifact as written, pool
state), not raised: the harness exits 0 whenever it produced a recording, and
non-zero only when it could not run at all (bad layout: exit 3; anything else:
exit 1), with the reason in report.json.

The real planner runs on a virtual clock (its module's `time.monotonic`), with
deterministic sampled tokens, loopback ZMQ on a free port, an offline tokenizer
and a generated warm-up dataset (research: dynamo_planner_on_cpu.md).
"""

import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0" and __name__ == "__main__":
    # Request-id sets decide free order inside the planner: fix str hashing.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import socket  # noqa: E402
import time as real_time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore")
sys.dont_write_bytecode = True  # leave no __pycache__ in the checkout
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

REQUEST_FORMAT = "kvsim-dynamo-request/1"
REPORT_FORMAT = "kvsim-dynamo-report/1"
EXIT_BAD_LAYOUT = 3


class VirtualTime:
    """Stands in for the planner module's `time`: monotonic time advances only
    when the driver says a step took time (kvsim's nominal step cost)."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def perf_counter(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds

    def __getattr__(self, name):
        return getattr(real_time, name)


def free_port(count):
    """A base port with `count` consecutive free loopback ports."""
    for _ in range(64):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count >= 65535:
            continue
        ok = True
        for p in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free loopback port")


def write_dataset(path, max_model_len):
    """A ShareGPT-style warm-up dataset: enough collection-half text for one
    chain at the planner's depth cap, deterministic."""
    import random

    from layout import dataset_words

    words = dataset_words()
    rng = random.Random(20261201)
    items, collected, i = [], 0, 0
    need = max_model_len + 2048
    while collected < need:
        body = " ".join(rng.choice(words) for _ in range(256))
        items.append({"conversations": [{"from": "human", "value": body}], "id": f"c{i}"})
        if hashlib.sha256(body.encode()).digest()[0] % 2 == 0:
            collected += 256
        i += 1
    with open(path, "w") as f:
        json.dump(items, f)


def sampled_token(rid, k, vocab):
    """A deterministic, salted stand-in for the k-th sampled token of a request
    (never an EOS/BOS id: the sweep must not stop on a sampled EOS)."""
    d = hashlib.sha256(f"{rid}:{k}".encode()).digest()
    return 3 + int.from_bytes(d[:8], "big") % (vocab - 3)


def load_planner(source):
    """The planner module: the installed 1.6.1 one, or a working copy."""
    import importlib.util

    name = "dynamo.vllm.instrumented_scheduler"
    if source:
        spec = importlib.util.spec_from_file_location(name, source)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    import importlib

    return importlib.import_module(name)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def normalise_artifact(raw, work_dir):
    """Wall-clock stamps, the random run id and the harness's temporary paths
    are the only run-to-run differences of the planner's artifact (the rest runs
    on the virtual clock)."""
    work_dir = os.path.abspath(work_dir)

    def walk(v):
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k in ("started_at", "completed_at", "created_at", "timestamp") and isinstance(x, str):
                    out[k] = "<wall-clock>"
                elif k == "run_id" and isinstance(x, str):
                    out[k] = "<run-id>"
                elif k == "synchronization" and isinstance(x, dict) and isinstance(x.get("port"), int):
                    # Attention-DP: the synchronizer's port is a free one, per run; 0
                    # stands for it (still an integer, as the artifact schema says).
                    out[k] = {**walk(x), "port": 0}
                else:
                    out[k] = walk(x)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str) and work_dir in v:
            return v.replace(work_dir, "<harness-work>")
        return v

    return walk(raw)


class Runner:
    def __init__(self, request, out_dir):
        self.request = request
        self.out_dir = out_dir
        self.builtin = request["scenario"]
        self.scenario = self.builtin["scenario"]
        self.bench = self.builtin["bench"]
        self.options = request.get("options", {})
        self.vocab = int(self.scenario["model"]["vocab_size"])
        self.report = {"format": REPORT_FORMAT, "scenario": self.builtin["name"]}
        self.runner_tables = {}
        self.dp = None  # attention-DP: every rank's scheduler (dp.Group)

    # -- setup ------------------------------------------------------------

    def setup(self):
        import vllm.platforms as platforms

        # A GPU-less machine gets UnspecifiedPlatform, whose hybrid-KV support
        # is False: vLLM would then merge window layers into full attention.
        # Every GPU platform supports it, so the harness says so too.
        cls = type(platforms.current_platform)
        cls.support_hybrid_kv_cache = classmethod(lambda c: True)

        import layout

        work = os.path.join(self.out_dir, "work")
        os.makedirs(work, exist_ok=True)
        model_dir = os.path.join(work, "model")
        layout.write_model_dir(model_dir, self.scenario, self.bench)
        dataset = os.path.join(work, "warmup.json")
        write_dataset(dataset, int(self.scenario["scheduler"]["max_model_len"]))
        self.raw_artifact = os.path.join(work, "artifact.raw.json")
        os.environ["DYN_FPM_BENCHMARK_OUTPUT_PATH"] = self.raw_artifact
        os.environ["DYN_BENCH_KV_WARMUP_DATASET"] = dataset
        os.environ["DYN_BENCH_KV_WARMUP"] = "on" if self.options.get("warmup", True) else "off"
        os.environ["DYN_BENCH_GIANT_KV_THRESHOLD"] = str(int(self.bench.get("giant_kv_threshold", 1_000_000)))
        os.environ["DYN_BENCH_GIANT_KV_REPEATS"] = str(int(self.bench.get("giant_kv_repeats", 3)))
        # One FPM publisher port per rank, then the DP synchronizer's (base + dp_size).
        dp_ranks = max(1, int(self.scenario.get("dp_ranks", 1)))
        os.environ["DYN_FORWARDPASS_METRIC_PORT"] = str(free_port(dp_ranks + (dp_ranks > 1)))
        if int(self.scenario["scheduler"]["max_model_len"]) > 0:
            os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"

        module = load_planner(self.options.get("planner_source"))
        self.module = module
        self.clock = VirtualTime()
        module.time = self.clock
        # The FPM publisher binds every interface; keep it on loopback.
        pub = module._FpmPublisherThread
        orig_init = pub.__init__

        def loopback_init(this, endpoint, *a, **kw):
            return orig_init(this, endpoint.replace("tcp://*:", "tcp://127.0.0.1:"), *a, **kw)

        pub.__init__ = loopback_init
        source = self.options.get("planner_source") or module.__file__
        self.report["planner"] = {
            "package": "ai-dynamo",
            "version": package_version("ai-dynamo"),
            "vllm": package_version("vllm"),
            "source": os.path.abspath(source),
            "source_sha256": sha256_file(source),
            "installed": not self.options.get("planner_source"),
        }
        self.report["vllm_settings"] = {
            "hybrid_kv_cache_manager": True,
            "prefix_cache_retention_interval": layout.RETENTION_INTERVAL,
            "kv_cache_config": "vllm.v1.core.kv_cache_utils.get_kv_cache_configs",
        }

        shrink = self.options.get("shrink_pool")
        if shrink and not 0 <= int(shrink.get("rank", 0)) < dp_ranks:
            raise layout.LayoutError(f"shrink_pool rank {shrink.get('rank')} is not one of the {dp_ranks} ranks")
        for single in ("defer_block_free", "abort", "fail_registration"):
            if dp_ranks > 1 and self.options.get(single):
                raise layout.LayoutError(f"{single} is single-rank only")
        if dp_ranks > 1:
            import dp

            self.dp = dp.Group(self)
            self.dp.build(module, layout, model_dir, work)
            self.recorded_groups = self.dp.recorded_groups
            self.raw_artifact = self.dp.ranks[0].raw_artifact
            self.sched, self.rec = self.dp.ranks[0].sched, self.dp.ranks[0].rec
            return
        if self.options.get("message_lag") is not None:
            raise layout.LayoutError("message_lag needs attention-DP (dp_ranks > 1)")
        vllm_config, kv_config, block_size = layout.build_configs(
            self.scenario, self.bench, model_dir, self.options
        )
        from vllm.v1.structured_output import StructuredOutputManager

        self.recorded_groups = layout.recorded_groups(kv_config, self.scenario)
        self.sched = module.InstrumentedScheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=block_size,
            log_stats=False,
        )
        from recorder import Recorder

        self.rec = Recorder(self.sched, self.vocab)
        # The soft deadline on the harness's clock, with the timeout layout.py gives the planner.
        self.rec.set_soft_timeout(self.clock, int(self.bench.get("timeout_seconds", 900)))
        if self.options.get("defer_block_free"):
            # What vLLM 0.31's Scheduler.__init__ sets for a KV-consumer connector
            # (Dynamo's disaggregated decode worker: NIXL, kv_consumer) when batches
            # overlap (max_concurrent_batches > 1): the deferred-free fence only. No
            # connector is built; nothing loads KV (spec/dynamo.md §2).
            if vllm_config.max_concurrent_batches <= 1:
                raise layout.LayoutError("defer_block_free needs overlapping batches (async_scheduling)")
            self.sched.defer_block_free = True
            self.report["vllm_settings"]["defer_block_free"] = True

    # -- driving ----------------------------------------------------------

    def model_output(self, output):
        """One sampled token per request that finished its prompt this step."""
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(output.num_scheduled_tokens.keys())
        sampled = {}
        for rid in ids:
            req = self.sched.requests.get(rid)
            if req is None or req.num_computed_tokens < req.num_tokens:
                sampled[rid] = []  # a partial prefill chunk samples nothing
            else:
                k = req.num_output_tokens + req.num_output_placeholders
                sampled[rid] = [sampled_token(rid, k, self.vocab)]
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[sampled[r] for r in ids],
        )
        return mro, sampled

    def runner_view(self, output):
        """The block ids the model runner is handed must be the manager's."""
        problems = []
        for rid in output.finished_req_ids or ():
            self.runner_tables.pop(rid, None)
        for new in output.scheduled_new_reqs:
            self.runner_tables[new.req_id] = [list(g) for g in new.block_ids]
        cached = output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            nb = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                self.runner_tables[rid] = [list(g) for g in (nb or ())]
            elif nb is not None:
                table = self.runner_tables.setdefault(rid, [[] for _ in nb])
                for g, ids in enumerate(nb):
                    table[g].extend(ids)
        for rid in output.num_scheduled_tokens:
            have = self.runner_tables.get(rid)
            want = [list(t) for t in self.sched.kv_cache_manager.get_block_ids(rid)]
            if have is None:
                problems.append(f"{rid}: scheduled but never handed to the runner")
                continue
            for g, (h, w) in enumerate(zip(have, want)):
                if len(h) != len(w) or any(b != 0 and a != b for a, b in zip(h, w)):
                    problems.append(f"{rid} group {g}: runner holds {short(h)}, the manager {short(w)}")
                    break
        return "; ".join(problems) if problems else None

    def extra_in_flight(self, step, async_depth):
        """Delayed outputs (`options.delay_outputs` = {step, by}, async only): from
        `step`, `by` more batches stay in flight for `by` steps — the batch queue
        of a pipelined engine (vLLM's max_concurrent_batches > 2); then the late
        outputs land together."""
        d = self.options.get("delay_outputs")
        if not d or async_depth < 2:
            return 0
        start, by = int(d["step"]), int(d["by"])
        return by if start <= step < start + by else 0

    def abort_due(self, step):
        """`options.abort` = {step, prefix}: before that step's schedule, every live
        request whose id starts with `prefix` is aborted (`finish_requests`,
        FINISHED_ABORTED), as the engine core aborts a lost request; recorded as
        `abort` faults (spec/plan.md §4)."""
        a = self.options.get("abort")
        if not a or int(a["step"]) != step:
            return
        ids = sorted(r for r in self.sched.requests if r.startswith(str(a.get("prefix", ""))))
        self.rec.external_abort(ids)

    def shrink_due(self, rec, rank):
        """`options.shrink_pool` = {step, rank, blocks, steps}: before that step's
        schedule, that rank's pool loses `blocks` free blocks for the rest of the
        run, or until `steps` steps later (`Recorder.external_shrink`, `external_restore`)."""
        d = self.options.get("shrink_pool")
        if not d or int(d.get("rank", 0)) != rank:
            return
        back = d.get("steps")
        if int(d["step"]) == rec.step:
            rec.external_shrink(int(d["blocks"]), None if back is None else int(back))
        elif back is not None and int(d["step"]) + int(back) == rec.step:
            rec.external_restore()

    def fail_due(self, rec):
        """`options.fail_registration` = {step, after}: from that step the
        (after+1)-th shadow registration fails (`Recorder.arm_registration_failure`)."""
        d = self.options.get("fail_registration")
        if d and int(d["step"]) == rec.step:
            rec.arm_registration_failure(int(d.get("after", 0)))

    def run(self):
        if self.dp is not None:
            return self.dp.run()
        sched, rec = self.sched, self.rec
        async_depth = 2 if self.scenario["scheduler"].get("async_scheduling") else 1
        max_steps = int(self.options.get("max_steps", 20000))
        scale = float(self.options.get("clock_scale", 1.0))
        queue = []
        status = "completed"
        error = None
        try:
            while sched._bench_active:
                if rec.step >= max_steps:
                    status = "stalled"
                    error = f"the sweep did not end within {max_steps} steps"
                    break
                self.abort_due(rec.step)
                self.shrink_due(rec, 0)
                self.fail_due(rec)
                output = sched.schedule()
                mismatch = self.runner_view(output)
                mro, sampled = self.model_output(output)
                rec.forward(output, sampled)
                tokens = output.total_num_scheduled_tokens
                # kvsim's nominal step cost (plan::nominal_step_ns) drives the clock.
                self.clock.advance(scale * (1_000_000 + 20 * tokens) / 1e9)
                queue.append((output, mro))
                landed = 0
                while len(queue) >= async_depth + self.extra_in_flight(rec.step, async_depth):
                    if landed:
                        # Late outputs landing together are processed back to back:
                        # each takes host time (1 µs nominal), never none at all.
                        self.clock.advance(scale * 1e-6)
                    done, done_mro = queue.pop(0)
                    rec.process_outputs(lag=len(queue))
                    sched.update_from_output(done, done_mro)
                    landed += 1
                rec.observe(mismatch)
                rec.end_step()
            while queue and status == "completed":
                # The plan's faults apply at every recorded step (a transient
                # shrink may end while the last outputs drain).
                self.shrink_due(rec, 0)
                done, done_mro = queue.pop(0)
                rec.process_outputs(lag=0)
                sched.update_from_output(done, done_mro)
                rec.observe()
                rec.end_step()
        except Exception as exc:  # the planner raised: a finding, not a crash
            # Unless it is the harness's own injected failure, passed on unchanged:
            # the planner's abort path ran on a fault (kvsim judges what it left).
            status = "fault" if exc is rec.injected else "raised"
            error = f"{type(exc).__name__}: {exc}"
            self.report["traceback"] = traceback.format_exc()
        if status == "completed":
            rec.end_sweep()
        else:
            rec.failed(status, error)
        if rec.ops:
            rec.end_step()
        self.report["status"] = status
        if error:
            self.report["error"] = error
        self.report["steps"] = rec.step
        self.report["pool"] = self.pool_state()
        try:
            sched.shutdown()
        except Exception as exc:
            self.report.setdefault("shutdown_error", f"{type(exc).__name__}: {exc}")

    def pool_state(self):
        pool = self.sched.kv_cache_manager.block_pool
        held = [b.block_id for b in pool.blocks if b.ref_cnt > 0 and not b.is_null]
        return {
            "free_blocks": int(pool.get_num_free_blocks()),
            "referenced_blocks": len(held),
            "first_referenced": held[:8],
            "live_requests": sorted(self.sched.requests.keys())[:16],
            "live_request_count": len(self.sched.requests),
        }

    # -- output -----------------------------------------------------------

    def plan(self):
        scenario = dict(self.scenario)
        scenario["model"] = dict(scenario["model"])
        scenario["model"]["groups"] = self.recorded_groups
        plan = {
            "format": "kvsim-plan/1",
            "scenario": scenario,
            "steps": self.dp.steps() if self.dp else self.rec.steps,
            "source": {
                "planner": "dynamo",
                "version": self.report["planner"]["version"],
                "vllm": self.report["planner"]["vllm"],
                "source_sha256": self.report["planner"]["source_sha256"],
                "installed": self.report["planner"]["installed"],
                "points": self.dp.points() if self.dp else self.rec.points,
            },
        }
        faults = self.dp.faults() if self.dp else self.rec.faults
        if faults:
            plan["faults"] = faults
        return plan

    def write(self):
        plan = self.plan()
        with open(os.path.join(self.out_dir, "plan.json"), "w") as f:
            json.dump(plan, f, separators=(",", ":"), sort_keys=True)
        artifact = None
        if os.path.exists(self.raw_artifact):
            with open(self.raw_artifact) as f:
                artifact = normalise_artifact(json.load(f), os.path.join(self.out_dir, "work"))
            with open(os.path.join(self.out_dir, "artifact.json"), "w") as f:
                json.dump(artifact, f, indent=1, sort_keys=True)
        self.report["artifact"] = artifact is not None
        if artifact is not None:
            self.report["artifact_status"] = artifact.get("status")
            self.report["artifact_error"] = artifact.get("error")
        self.report["points"] = len(self.rec.points)
        for rk in self.dp.ranks[1:] if self.dp else ():
            # Rank 0's artifact is artifact.json; every other rank's its own.
            if os.path.exists(rk.raw_artifact):
                with open(rk.raw_artifact) as f:
                    other = normalise_artifact(json.load(f), os.path.join(self.out_dir, "work"))
                with open(os.path.join(self.out_dir, f"artifact.rank{rk.index}.json"), "w") as f:
                    json.dump(other, f, indent=1, sort_keys=True)
                self.report["dp"]["rank_reports"][rk.index]["artifact_status"] = other.get("status")
        with open(os.path.join(self.out_dir, "report.json"), "w") as f:
            json.dump(self.report, f, indent=1, sort_keys=True)


def short(table):
    return table if len(table) <= 8 else table[:4] + ["..."] + table[-2:]


def package_version(name):
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return "unknown"


def run_request(request, out_dir):
    """Record one request into `out_dir`; the exit code the CLI mode returns."""
    os.makedirs(out_dir, exist_ok=True)
    logging.disable(logging.WARNING)
    t0 = real_time.monotonic()
    runner = Runner(request, out_dir)
    try:
        import layout

        try:
            runner.setup()
        except layout.LayoutError as exc:
            return fail(out_dir, "layout", str(exc), EXIT_BAD_LAYOUT)
    except Exception as exc:
        return fail(out_dir, "setup", f"{type(exc).__name__}: {exc}", 1, traceback.format_exc())
    t1 = real_time.monotonic()
    runner.run()
    runner.report["setup_seconds"] = round(t1 - t0, 3)
    runner.report["run_seconds"] = round(real_time.monotonic() - t1, 3)
    runner.write()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--request")
    ap.add_argument("--out-dir")
    ap.add_argument("--serve", action="store_true", help="serve requests as JSON lines (worker.py)")
    args = ap.parse_args()
    if args.serve:
        import worker

        return worker.serve(run_request, REQUEST_FORMAT)
    if not (args.request and args.out_dir):
        ap.error("--request and --out-dir are required (or --serve)")
    with open(args.request) as f:
        request = json.load(f)
    if request.get("format") != REQUEST_FORMAT:
        print(f"harness: {args.request} is not a {REQUEST_FORMAT} request", file=sys.stderr)
        return 2
    return run_request(request, args.out_dir)


def fail(out_dir, stage, message, code, tb=None):
    report = {"format": REPORT_FORMAT, "status": "harness_error", "stage": stage, "error": message}
    if tb:
        report["traceback"] = tb
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    print(f"harness: {stage}: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
