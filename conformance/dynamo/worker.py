"""The harness as a persistent worker: import vLLM and the planner once, then
record many requests, each in a forked child (`harness.py --serve`).

Protocol, one JSON object per line:
  worker -> kvsim, once:  {"ready": true, "pid": N}
  kvsim  -> worker:       {"id": N, "request": {...}, "out_dir": PATH, "timeout_s": S}
  worker -> kvsim:        {"id": N, "exit": CODE | null, "signal": SIG | null, "hung": BOOL}

Each request runs in a child forked from the imported process, so a case
starts from the same pristine interpreter whatever ran before it (recordings
do not depend on which worker ran which case, or in what order), a planner
that crashes the interpreter takes only its child down, and a child still
running after `timeout_s` seconds is killed and reported as hung. The child's
stdout and stderr go to OUT_DIR/harness.log, never into the protocol stream.
"""

import json
import os
import signal
import sys
import time


def preload():
    """Everything a child would import: paid once per worker, not per case."""
    import importlib

    import layout  # noqa: F401
    import recorder  # noqa: F401
    import vllm.config  # noqa: F401
    from vllm.v1.core import kv_cache_utils  # noqa: F401
    from vllm.v1.outputs import ModelRunnerOutput  # noqa: F401
    from vllm.v1.structured_output import StructuredOutputManager  # noqa: F401

    importlib.import_module("dynamo.vllm.instrumented_scheduler")


def run_child(run_request, msg):
    out_dir = msg["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    log = os.open(os.path.join(out_dir, "harness.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = 1
    try:
        code = run_request(msg["request"], out_dir)
    except BaseException:  # the harness itself failed: say so in the log
        import traceback

        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no parent atexit handlers, no thread joins


def wait_child(pid, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFEXITED(status):
                return {"exit": os.WEXITSTATUS(status), "signal": None, "hung": False}
            return {"exit": None, "signal": os.WTERMSIG(status), "hung": False}
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"exit": None, "signal": signal.SIGKILL, "hung": True}
        time.sleep(0.005)


def serve(run_request, request_format):
    # The protocol gets a private copy of stdout; stray prints go to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    preload()
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        reply = {"id": msg.get("id")}
        if msg.get("request", {}).get("format") != request_format:
            reply.update({"exit": 2, "signal": None, "hung": False, "error": f"not a {request_format} request"})
        else:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                run_child(run_request, msg)
            reply.update(wait_child(pid, float(msg.get("timeout_s", 900))))
        proto.write(json.dumps(reply) + "\n")
    return 0
