"""A node pack for the agent's tests, loaded by run processes through the `codefy_jupyter.nodes`
entry point (`agent_helpers.install_pack` writes a dist-info folder declaring it), as a third-party pack would be.

`Environ` reports what the run's process sees of its environment; `Stubborn` ignores cancel;
`Segfault` crashes the process; `Say` prints to stdout and stderr; `Threads` reports the CPU thread budget;
`Chatter` sends a stream of large warnings until it is stopped (a run that keeps writing to the disk).
Never import it into the test process: its nodes would join that process's registry.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from codefy_jupyter.engine import node, optional, param

WATCHED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CODEFY_TOKEN", "CODEFY_DB_PATH", "JUPYTER_TOKEN",
           "CODEFY_AGENT_TOKEN", "CODEFY_SOME_SECRET", "ROCR_VISIBLE_DEVICES", "CODEFY_PRESETS_DIR", "KEEP_ME")


@node("Environ", outputs={"ok": "bool"}, cacheable=False)
def environ(ctx):
    seen = {name: os.environ.get(name) for name in WATCHED}
    proc = Path("/proc/self/environ")
    raw = proc.read_bytes().decode(errors="replace") if proc.exists() else ""
    seen["raw_has_token"] = "agent-secret-token" in raw
    ctx.warn("environment", code="environ", **seen)
    return {"ok": True}


@node("Stubborn", inputs={"value": optional("any")}, outputs={"value": "any"},
      params={"seconds": param.float(60.0)}, cacheable=False)
def stubborn(ctx, seconds, value=None):
    print("stubborn: not checking cancel", flush=True)
    time.sleep(seconds)
    return {"value": value}


@node("Segfault", inputs={"value": optional("any")}, outputs={"value": "any"}, cacheable=False)
def segfault(ctx, value=None):
    print("about to crash", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(10)
    return {"value": value}


@node("Say", inputs={"value": optional("any")}, outputs={"value": "any"}, params={"text": param.string("hi")},
      cacheable=False)
def say(ctx, text, value=None):
    import sys

    print(f"out: {text}", flush=True)
    print(f"err: {text}", file=sys.stderr, flush=True)
    return {"value": value}


@node("IgnoreTerm", inputs={"value": optional("any")}, outputs={"value": "any"},
      params={"seconds": param.float(60.0)}, cacheable=False)
def ignore_term(ctx, seconds, value=None):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ignoring SIGTERM", flush=True)
    time.sleep(seconds)
    return {"value": value}


@node("Threads", inputs={"value": optional("any")}, outputs={"threads": "int"}, cacheable=False)
def threads(ctx, value=None):
    """What the run's CPU thread budget looks like from inside a node: the thread variables of its
    process and torch's intra-op count on this node's thread (torch imported here, as nodes do)."""
    import torch

    seen = {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    seen["torch_threads"] = torch.get_num_threads()
    ctx.warn("threads", code="threads", **seen)
    return {"threads": seen["torch_threads"]}


@node("Chatter", inputs={"value": optional("any")}, outputs={"value": "any"},
      params={"rounds": param.int(100000), "bytes": param.int(16384), "pause": param.float(0.02)}, cacheable=False)
def chatter(ctx, rounds, bytes, pause, value=None):
    blob = "x" * bytes
    for i in range(rounds):
        ctx.check_cancelled()
        ctx.warn("chatter", code="chatter", round=i, blob=blob)
        time.sleep(pause)
    return {"value": value}
