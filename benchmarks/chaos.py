"""Loss-checker: a study and a sweep under random faults, then every run's log audited.

By default it builds its own deployment in a temporary folder: a real `codefy start` on a fixed
port, and two real `codefy agent start` (`chaos-a`, `chaos-b`, each its own folder, identity and
machine id, one run at a time) that reach the control plane through a small TCP forwarder in this
process (the forwarder is what lets it cut their sockets). Then, round after round while faults
remain, it submits

- a study (`--variants` x `--repetitions`, `"target": {"worker": "any"}`, `max_parallel_runs` 3,
  `resume_policy` auto): its children run on both agents and on the control plane itself;
- a sweep (`--sweep-variants`) with no target: its variants run on the control plane;

every child the chain List -> Sleep x `--naps` -> Mean (a few seconds, one event per step known in
advance), and injects `--faults` faults, one every `--gap` seconds (uniform), chosen with `--seed`:

- control_kill: SIGKILL the control plane, `codefy start` it again on the same data dir and port;
- agent_kill: SIGKILL an agent, start it again with the same name and folder;
- agent_stop: SIGSTOP an agent for 2-6 s, then SIGCONT;
- socket_drop: the forwarder aborts every agent connection (as a network failure would).

Then it waits until every study and sweep has ended (an interrupted study is resumed, as an operator
would, and counted), reads every event of every run (paging with cursor) and reports, per run, events
lost, duplicated and seq gaps, and per study repetition how many runs it had (`chaos_audit.py`).
Goal: 0 / 0 / 0 and exactly one succeeded run per repetition. Exit status 1 when it is not met.

Against your own deployment (`--url URL --token T`): nothing is started; the checker submits the
same study and sweep there (`--target` names where the study's children go, default any) and
injects only what it can reach on this machine: `--control-pid PID` (SIGKILL the control plane, then
wait up to `--recover` s for it to answer again: something such as systemd must restart it) and
`--agent-pid PID` (repeatable: SIGSTOP/SIGCONT, and SIGUSR1, with which an agent drops its own
connection). With neither it only submits, waits `--hold` s while you inject faults by hand, and audits.

    python benchmarks/chaos.py [--faults 30] [--seed 1] [--variants 3] [--repetitions 4] [--out FILE]
    python benchmarks/chaos.py --url https://lab.example.org/ --token T [--control-pid P] [--agent-pid P ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import chaos_audit as audit
from common import free_port, publish, stop_all

KINDS = ("control_kill", "agent_kill", "agent_stop", "socket_drop")
AGENTS = ("chaos-a", "chaos-b")
ACTIVE_STUDY = ("queued", "running", "cancel_requested")
RESUMABLE = ("interrupted", "cancelled", "failed")


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def chain(naps: int, nap_s: float, values: list[float]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    nodes = [{"id": "vals", "type": "List", "params": {"values": values}}]
    edges, prev = [], "vals"
    order = [("vals", "List")]
    for i in range(naps):
        nodes.append({"id": f"nap{i}", "type": "Sleep", "params": {"seconds": nap_s}})
        edges.append(edge(prev, "values" if prev == "vals" else "value", f"nap{i}", "value"))
        prev = f"nap{i}"
        order.append((prev, "Sleep"))
    nodes.append({"id": "m", "type": "Mean"})
    edges.append(edge(prev, "values" if prev == "vals" else "value", "m", "values"))
    order.append(("m", "Mean"))
    return {"nodes": nodes, "edges": edges, "settings": {"device": "cpu"}}, order


class Api:
    """The REST API over urllib, every call retried through a control plane that is away (a refused
    or reset connection, a 503) until `patience` seconds have passed."""

    def __init__(self, url: str, token: str, patience: float = 180.0) -> None:
        self.base = url.rstrip("/") + "/codefy/api/"
        self.token = token
        self.patience = patience
        self.retries = 0

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        deadline = time.monotonic() + self.patience
        data = None if body is None else json.dumps(body).encode()
        while True:
            req = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    code, text = resp.status, resp.read()
            except urllib.error.HTTPError as err:
                code, text = err.code, err.read()
            except (OSError, ConnectionError) as err:  # refused, reset, timed out: the server is away
                code, text = 0, str(err).encode()
            if code in ok:
                return json.loads(text) if text else None
            if code not in (0, 502, 503, 504) or time.monotonic() > deadline:
                raise SystemExit(f"{method} {path}: {code} {text[:500]!r}")
            self.retries += 1
            time.sleep(0.25)

    def pages(self, path: str, key: str) -> list[dict[str, Any]]:
        out, offset = [], 0
        while True:
            sep = "&" if "?" in path else "?"
            page = self.call("GET", f"{path}{sep}limit=50&offset={offset}")
            out.extend(page[key])
            if len(page[key]) < 50:
                return out
            offset += 50

    def events(self, run_id: str) -> list[dict[str, Any]]:
        out, cursor = [], 0
        while True:
            page = self.call("GET", f"runs/{run_id}/events?cursor={cursor}")
            out.extend(page["events"])
            if not page["more"]:
                return out
            cursor = page["cursor"]


class Forwarder:
    """A TCP forwarder (asyncio, in a thread of its own) from a local port to the control plane;
    cut() aborts every connection through it, both sides, without a close handshake."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.transports: set[asyncio.WriteTransport] = set()
        self.cuts = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(30)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()  # the control plane is away: the agent dials again
            return
        pair = {writer.transport, up_writer.transport}
        self.transports |= pair

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ConnectionError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.transports -= pair

    def cut(self) -> int:
        async def abort() -> int:
            live = [t for t in self.transports if not t.is_closing()]
            for t in live:
                t.abort()
            return len(live) // 2

        self.cuts += 1
        return asyncio.run_coroutine_threadsafe(abort(), self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class Sandbox:
    """The checker's own deployment: `codefy start` on a fixed port, the forwarder, two agents."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "control"
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_TOKEN"))}
        # Every run stays (retention off) so that every log can be read at the end.
        # One run at a time on each agent, so that a study's children spread over both agents and
        # this server (`any` takes workers first).
        self.env.update(CODEFY_DATA_DIR=str(self.data_dir), CODEFY_RUN_RETENTION_KEEP_LAST="-1",
                        CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU="2",
                        CODEFY_RUN_QUEUE_MAX_CONCURRENT=",".join(f"{name}/cpu=1" for name in AGENTS))
        self.state = self.start_control()
        self.forwarder = Forwarder(self.port)
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        for name in AGENTS:
            self.start_agent(name)

    def codefy(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], env=env or self.env,
                              capture_output=True, text=True, timeout=180)

    def start_control(self) -> dict[str, Any]:
        done = self.codefy("start", "--data-dir", str(self.data_dir), "--port", str(self.port))
        if done.returncode != 0:
            raise SystemExit(f"codefy start failed ({done.returncode}):\n{done.stderr or done.stdout}")
        state = json.loads((self.data_dir / "server.json").read_text())
        self.url = f"http://127.0.0.1:{self.port}{state['base_url']}"
        return state

    def start_agent(self, name: str) -> None:
        control = f"http://127.0.0.1:{self.forwarder.port}{self.state['base_url']}"
        folder = self.root / name
        folder.mkdir(exist_ok=True)
        log = open(self.root / f"{name}.log", "ab")
        self.agents[name] = subprocess.Popen(
            [sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", control, "--token",
             self.state["token"], "--name", name, "--data-dir", str(folder)],
            # A machine id of its own: not this server's cpu (which same-machine agents share with
            # it, one slot group), a worker as on another box.
            env={**self.env, "JUPYTER_DATA_DIR": str(self.root / f"{name}-jupyter"),
                 "CODEFY_AGENT_MACHINE_ID": f"codefy-chaos-{name}"}, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def close(self) -> None:
        for proc in self.agents.values():
            with_signal(proc.pid, signal.SIGCONT)  # a stopped agent cannot act on the terminate
        stop_all(self.agents.values())
        self.codefy("stop", "--data-dir", str(self.data_dir))
        self.forwarder.close()


def with_signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(0.2)


class Chaos:
    def __init__(self, args: argparse.Namespace, api: Api, sandbox: Sandbox | None) -> None:
        self.args, self.api, self.sandbox = args, api, sandbox
        self.rng = random.Random(args.seed)
        self.graph, order = chain(args.naps, args.nap_s, [1.0, 2.0])
        self.expected = audit.expected_keys(order, ("m", "mean"))
        self.studies: list[str] = []
        self.sweeps: list[str] = []
        self.faults: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.stuck: dict[str, float] = {}  # study id -> when it was first seen interrupted
        self.began = time.monotonic()

    # -- what it can do ------------------------------------------------------------------------------
    def kinds(self) -> list[str]:
        if self.sandbox is not None:
            return list(KINDS)
        out = []
        if self.args.control_pid:
            out.append("control_kill")
        if self.args.agent_pid:
            out += ["agent_stop", "socket_drop"]
        return out

    def connected(self, names: tuple[str, ...] = AGENTS) -> bool:
        workers = self.api.call("GET", "workers")["workers"]
        up = {w["name"] for w in workers if w["state"] == "connected"}
        return all(n in up for n in names)

    # -- the workload -------------------------------------------------------------------------------
    def submit_round(self, n: int) -> None:
        key = f"chaos-{self.args.seed}-{os.getpid()}-{n}"
        body = {"name": f"{key} study", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
                "variants": [{"label": f"v{i}", "graph": chain(self.args.naps, self.args.nap_s, [float(i), i + 1.0])[0]}
                             for i in range(self.args.variants)],
                "repetitions": self.args.repetitions, "seed": self.args.seed,
                "options": {"target": {"worker": self.args.target}},
                "budget": {"max_parallel_runs": 3}, "resume_policy": "auto", "idempotency_key": key}
        self.studies.append(self.api.call("POST", "studies", body)["id"])
        sweep = {"base_graph": self.graph, "name": f"{key} sweep",
                 "sweep_spec": {"params": [{"node_id": "nap0", "param": "seconds",
                                            "values": [round(self.args.nap_s * (1 + i / 10), 3)
                                                       for i in range(self.args.sweep_variants)]}]},
                 "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"}}
        self.sweeps.append(self.api.call("POST", "sweeps", sweep)["sweep_id"])

    def ended(self) -> bool:
        """Every study and sweep has ended. An auto study resumes itself when a fault interrupted
        it; one still interrupted (or failed) after `--stuck` s is resumed here, as an operator
        would, and that counts against the goal."""
        for study_id in self.studies:
            study = self.api.call("GET", f"studies/{study_id}?view=summary")
            if study["status"] in RESUMABLE:
                since = self.stuck.setdefault(study_id, time.monotonic())
                if time.monotonic() - since > self.args.stuck:
                    self.resume(study_id, study)
                return False
            self.stuck.pop(study_id, None)
            if study["status"] in ACTIVE_STUDY:
                return False
        return all(self.api.call("GET", f"sweeps/{s}")["state"] in ("finished", "failed") for s in self.sweeps)

    def resume(self, study_id: str, study: dict[str, Any]) -> None:
        done = self.api.call("POST", f"studies/{study_id}/resume", {"expected_revision": study["revision"]},
                             ok=(200, 201, 409))
        self.stuck.pop(study_id, None)
        self.resumes.append({"study_id": study_id, "from": study["status"], "counts": study.get("counts"),
                             "at_s": round(time.monotonic() - self.began, 1),
                             "answer": None if done is None else done.get("status", done.get("error"))})

    # -- the faults ---------------------------------------------------------------------------------
    def inject(self, kind: str) -> dict[str, Any]:
        started = time.monotonic()
        row: dict[str, Any] = {"kind": kind, "at_s": round(started - self.began, 1)}
        if kind == "control_kill":
            pid = self.sandbox.state["pid"] if self.sandbox else self.args.control_pid
            os.kill(pid, signal.SIGKILL)
            if not gone(pid):
                raise SystemExit(f"the control plane (pid {pid}) outlived SIGKILL")
            if self.sandbox is not None:
                self.sandbox.state = self.sandbox.start_control()
            self.api.call("GET", "runs?limit=1")  # back (a supervisor restarts an operator's)
        elif kind == "agent_kill":
            name = self.rng.choice(AGENTS)
            proc = self.sandbox.agents[name]
            proc.kill()
            proc.wait()
            self.sandbox.start_agent(name)
            row["agent"] = name
        elif kind == "agent_stop":
            pid, name = self.agent_target()
            pause = round(self.rng.uniform(2.0, 6.0), 1)
            with_signal(pid, signal.SIGSTOP)
            time.sleep(pause)  # the fault itself: how long the agent is frozen
            with_signal(pid, signal.SIGCONT)
            row.update(agent=name, stopped_s=pause)
        elif kind == "socket_drop":
            if self.sandbox is not None:
                row["connections"] = self.sandbox.forwarder.cut()
            else:
                pid, name = self.agent_target()
                with_signal(pid, signal.SIGUSR1)
                row["agent"] = name
        row["took_s"] = round(time.monotonic() - started, 1)
        return row

    def agent_target(self) -> tuple[int, str]:
        if self.sandbox is not None:
            name = self.rng.choice(AGENTS)
            return self.sandbox.agents[name].pid, name
        pid = self.rng.choice(self.args.agent_pid)
        return pid, f"pid {pid}"

    def run(self) -> dict[str, Any]:
        if self.sandbox is not None:
            wait_for("both agents to connect", self.connected, self.args.timeout)
        rounds = 0
        self.submit_round(rounds)
        kinds = self.kinds()
        plan = [self.rng.choice(kinds) for _ in range(self.args.faults)] if kinds else []
        # Every kind at least once where there are enough faults for it.
        for i, kind in enumerate(kinds[:len(plan)]):
            plan[i] = kind
        self.rng.shuffle(plan)
        if not plan:
            time.sleep(self.args.hold)  # the operator's own faults
        for kind in plan:
            time.sleep(self.rng.uniform(*self.args.gap))  # spacing between faults, part of the workload
            if self.ended():
                rounds += 1
                self.submit_round(rounds)
            self.faults.append(self.inject(kind))
        wait_for("every study and sweep to end", self.ended, self.args.timeout)
        return self.report(rounds + 1)

    # -- the audit ----------------------------------------------------------------------------------
    def report(self, rounds: int) -> dict[str, Any]:
        runs = self.api.pages("runs", "runs")
        ours_studies, ours_sweeps = set(self.studies), set(self.sweeps)
        mine = [r for r in runs if r.get("study_id") in ours_studies or r.get("sweep_id") in ours_sweeps]
        wait_for("every run to end", lambda: all(
            self.api.call("GET", f"runs/{r['id']}")["status"] in audit.TERMINAL for r in mine), self.args.timeout)
        mine = [self.api.call("GET", f"runs/{r['id']}") for r in mine]
        run_audits = [audit.audit_run(r, self.api.events(r["id"]), self.expected) for r in mine]
        studies = [audit.audit_study(self.api.call("GET", f"studies/{s}"), [r for r in mine if r.get("study_id") == s])
                   for s in self.studies]
        sweeps = [audit.audit_sweep(self.api.call("GET", f"sweeps/{s}"), [r for r in mine if r.get("sweep_id") == s])
                  for s in self.sweeps]
        total = audit.totals(run_audits)
        reps = sum(s["repetition_count"] for s in studies)
        exactly_one = sum(s["exactly_one_per_repetition"] for s in studies)
        problems = [p for s in studies + sweeps for p in s["problems"]]
        problems += [f"study {s['study_id']} ended {s['status']}" for s in studies if s["status"] != "succeeded"]
        problems += [f"study {r['study_id']} stayed {r['from']} for {self.args.stuck:g} s: the checker resumed it"
                     for r in self.resumes]
        met = (total["lost"] == 0 and total["duplicated"] == 0 and total["gaps"] == 0 and not total["bad_runs"]
               and exactly_one == reps and not problems and len(self.faults) >= self.args.faults)
        return {"met": met,
                "summary": {"faults": len(self.faults), "fault_kinds": dict(sorted(
                    {k: sum(1 for f in self.faults if f["kind"] == k) for k in KINDS}.items())),
                    "rounds": rounds, "runs": total["runs"], "events": total["events"], "lost": total["lost"],
                    "duplicated": total["duplicated"], "gaps": total["gaps"], "not_terminal": total["not_terminal"],
                    "run_statuses": total["statuses"], "placement": total["placement"],
                    "repetitions": reps, "repetitions_with_exactly_one_run": exactly_one,
                    "retried_attempts": sum(s["retried_attempts"] for s in studies),
                    "studies_resumed_by_checker": len(self.resumes), "api_retries": self.api.retries,
                    "problems": problems},
                "bad_runs": total["bad_runs"], "faults": self.faults, "resumes": self.resumes,
                "studies": studies, "sweeps": sweeps,
                "runs": [{k: a[k] for k in ("run_id", "status", "end_code", "worker_id", "events", "lost", "duplicated",
                                            "gaps")}
                         for a in run_audits]}


def gap(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    try:
        pair = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gap: expected MIN,MAX seconds, got {text!r}") from None
    if pair[0] < 0 or pair[1] < pair[0]:
        raise argparse.ArgumentTypeError(f"--gap: expected 0 <= MIN <= MAX, got {text!r}")
    return pair


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", type=int, default=30, help="faults to inject (default 30)")
    ap.add_argument("--seed", type=int, default=1, help="chooses the faults, their targets and spacing (default 1)")
    ap.add_argument("--gap", type=gap, default=(1.0, 4.0), metavar="MIN,MAX",
                    help="seconds between faults, uniform (default 1,4)")
    ap.add_argument("--variants", type=int, default=3, help="the study's variants per round (default 3)")
    ap.add_argument("--repetitions", type=int, default=4, help="the study's repetitions (default 4)")
    ap.add_argument("--sweep-variants", type=int, default=4, help="the sweep's variants per round (default 4)")
    ap.add_argument("--naps", type=int, default=8, help="Sleep nodes in every child's chain (default 8)")
    ap.add_argument("--nap-s", type=float, default=0.4, help="seconds each Sleep node takes (default 0.4)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the runs to end (default 600)")
    ap.add_argument("--url", help="audit this deployment instead of starting one (with --token)")
    ap.add_argument("--token", help="with --url: a token that may submit runs, studies and sweeps")
    ap.add_argument("--target", default="any", help="where the study's children go (default any)")
    ap.add_argument("--control-pid", type=int, help="with --url: SIGKILL this control plane (it must be restarted "
                    "by a supervisor within --recover s)")
    ap.add_argument("--agent-pid", type=int, action="append", default=[],
                    help="with --url: SIGSTOP/SIGCONT and SIGUSR1 (drop its connection) this agent (repeatable)")
    ap.add_argument("--recover", type=float, default=180.0, help="seconds a control plane may be away (default 180)")
    ap.add_argument("--stuck", type=float, default=60.0,
                    help="seconds a study may stay interrupted before the checker resumes it (default 60)")
    ap.add_argument("--hold", type=float, default=60.0, help="with --url and no pid: seconds for your own faults")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if (args.url is None) != (args.token is None):
        ap.error("--url and --token go together")
    if args.url is None and (args.control_pid or args.agent_pid):
        ap.error("--control-pid and --agent-pid are for --url (the checker's own deployment is its own to fault)")
    if min(args.variants, args.repetitions, args.sweep_variants, args.naps) < 1 or args.faults < 0:
        ap.error("--variants, --repetitions, --sweep-variants and --naps must be >= 1, --faults >= 0")
    started = time.perf_counter()
    parameters = {k: v for k, v in vars(args).items() if k not in ("token", "out")}
    if args.url is not None:
        result = Chaos(args, Api(args.url, args.token, args.recover), None).run()
    else:
        with tempfile.TemporaryDirectory(prefix="codefy-chaos-") as tmp:
            sandbox = Sandbox(Path(tmp))
            try:
                result = Chaos(args, Api(sandbox.url, sandbox.state["token"], args.recover), sandbox).run()
            except BaseException:
                for name in AGENTS:
                    log = Path(tmp) / f"{name}.log"
                    if log.exists():
                        sys.stderr.write(f"--- {name}.log (end)\n{log.read_text(errors='replace')[-3000:]}\n")
                server_log = Path(tmp) / "control" / "server.log"
                if server_log.exists():
                    sys.stderr.write(f"--- server.log (end)\n{server_log.read_text(errors='replace')[-3000:]}\n")
                raise
            finally:
                sandbox.close()
    publish(args.out, started, parameters=parameters, **result)
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
