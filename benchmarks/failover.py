"""Failover: how long a team's queue is away when its leader is killed, and what the kill costs.

It builds the HA deployment of "Outgrowing one machine" in a temporary folder: a real PostgreSQL
server (started as the tests start one: common.ThrowawayPostgres), two real `codefy start` replicas
on that one database (each its own data dir and port, one token), and `--agents` real
`codefy agent start` agents (each its own folder and machine id, one run at a time) given both
replicas' URLs (`--control A,B`). Then, `--kills` times:

1. one worker run per agent is submitted to the leader (a chain List -> Sleep x `--naps` -> Mean,
   `target: {worker: any}`), and waited for until every one is running on an agent;
2. the leader gets SIGKILL;
3. timed from the kill: the standby's first 200 answer to `GET runs` (first_answer_s: it has won the
   lease, recovered and serves), and every agent connected to it again (agents_s: the latest
   `connected_at` the new leader stamped, less the kill's wall clock);
4. the killed replica is started again (`codefy start`, same data dir and port): the next standby.

At the end every run submitted is read from the last leader and audited as the loss-checker audits
(benchmarks/chaos_audit.py): a run lost is one acknowledged (201) but missing, or not succeeded (a
worker run outlives its control plane and is adopted when its agent redials); a run duplicated is a
run the benchmark did not submit, or a run whose graph ran twice; events lost, duplicated and seq
gaps are counted across every log. Goal: p50 <= 5 s and max <= 10 s for both times, 0 lost and 0
duplicated. Exit status 1 when it is not met.

    python benchmarks/failover.py [--kills 20] [--agents 2] [--lease-ttl 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import chaos_audit as audit
from chaos import chain, gone
from common import ThrowawayPostgres, free_port, publish, stop_all

from codefy_jupyter.core.store.lease import TTL_S

TARGETS = {"p50_s": 5.0, "max_s": 10.0, "runs_lost": 0, "runs_duplicated": 0}
POLL_S = 0.02  # between looks at a replica during a failover: the resolution of the times measured


def call(url: str, token: str, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """One REST call; (0, reason) when nothing answered (the replica is dead or starting)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}codefy/api/{path}", data=data, method=method,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        with err:
            raw = err.read()
        try:
            return err.code, json.loads(raw) if raw else None
        except ValueError:
            return err.code, raw[:200]
    except OSError as err:
        return 0, str(err)


def wait_for(what: str, check: Callable[[], bool], timeout: float, pause: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(pause)


class Replica:
    """One `codefy start` control plane of the deployment: its data dir, fixed port and process."""

    def __init__(self, name: str, root: Path, env: dict[str, str], token: str) -> None:
        self.name = name
        self.data_dir = root / name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.env = {**env, "CODEFY_LEADER_URL": self.url}
        self.token = token
        self.pid = 0

    def start(self) -> None:
        done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "start", "--data-dir", str(self.data_dir),
                               "--port", str(self.port)], env=self.env, capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise SystemExit(f"codefy start ({self.name}) failed ({done.returncode}):\n{done.stderr or done.stdout}")
        self.pid = json.loads((self.data_dir / "server.json").read_text())["pid"]

    def role(self) -> str:
        code, body = call(self.url, self.token, "GET", "health", timeout=5)
        if code == 200:
            return body["role"]
        if code == 0 or not isinstance(body, dict):
            return "unreachable"
        return body["error"]["params"].get("role") or body["error"]["code"]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        code, answer = call(self.url, self.token, method, path, body, timeout=30)
        if code not in (200, 201):
            raise SystemExit(f"{self.name}: {method} {path}: {code} {answer!r}"[:1000])
        return answer

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        if not gone(self.pid):
            raise SystemExit(f"replica {self.name} (pid {self.pid}) outlived SIGKILL")

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "stop", "--data-dir", str(self.data_dir)],
                       env=self.env, capture_output=True, timeout=120)


class Deployment:
    """Two replicas on one PostgreSQL database and the agents, all in `root`."""

    def __init__(self, root: Path, store_url: str, args: argparse.Namespace) -> None:
        self.root, self.args = root, args
        self.token = secrets.token_hex(16)
        self.agent_names = [f"failover-{i}" for i in range(args.agents)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_TOKEN"))}
        # Both replicas run on this machine, where each reaches the other's data dir. Every run stays
        # (retention off) for the audit; one run at a time on each agent, so each run is on an agent.
        env.update(CODEFY_STORE_URL=store_url, CODEFY_RUN_FILES_SHARED="1", JUPYTER_TOKEN=self.token,
                   CODEFY_RUN_RETENTION_KEEP_LAST="-1", CODEFY_LEASE_TTL_S=str(args.lease_ttl),
                   CODEFY_LEASE_RENEW_S=str(args.lease_renew),
                   CODEFY_RUN_QUEUE_MAX_CONCURRENT=",".join(f"{n}/cpu=1" for n in self.agent_names))
        self.env = env
        self.replicas = [Replica(name, root, env, self.token) for name in ("a", "b")]
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        first, second = self.replicas
        first.start()
        wait_for("replica a to lead", lambda: first.role() == "leader", self.args.timeout)
        second.start()
        wait_for("replica b to stand by", lambda: second.role() == "standby", self.args.timeout)
        controls = ",".join(r.url for r in self.replicas)
        for name in self.agent_names:
            folder = self.root / name
            folder.mkdir()
            log = open(self.root / f"{name}.log", "ab")
            self.agents[name] = subprocess.Popen(
                [sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", controls,
                 "--token", self.token, "--name", name, "--data-dir", str(folder)],
                # A machine id of its own: a worker as on another box, not a share of this one's cpu.
                env={**self.env, "JUPYTER_DATA_DIR": str(self.root / f"{name}-jupyter"),
                     "CODEFY_AGENT_MACHINE_ID": f"codefy-failover-{name}"},
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.close()
        wait_for("every agent to connect", lambda: self.connected(first, 0.0), self.args.timeout)

    def leader(self) -> tuple[Replica, Replica]:
        a, b = self.replicas
        return (a, b) if a.role() == "leader" else (b, a)

    def connected(self, replica: Replica, since: float) -> bool:
        """Every agent connected to `replica`, by a hello it stamped at or after `since` (wall clock)."""
        code, body = call(replica.url, self.token, "GET", "workers", timeout=5)
        if code != 200:
            return False
        up = {w["name"]: w.get("connected_at") or 0.0 for w in body["workers"] if w["state"] == "connected"}
        return all(name in up and up[name] >= since for name in self.agent_names)

    def connected_at(self, replica: Replica) -> float:
        workers = replica.api("GET", "workers")["workers"]
        return max(w["connected_at"] for w in workers if w["name"] in self.agent_names)

    def close(self) -> None:
        stop_all(self.agents.values())
        for replica in self.replicas:
            replica.stop()


class Failover:
    def __init__(self, deployment: Deployment, args: argparse.Namespace) -> None:
        self.d, self.args = deployment, args
        self.graph, order = chain(args.naps, args.nap_s, [1.0, 2.0])
        self.expected = audit.expected_keys(order, ("m", "mean"))
        self.submitted: list[str] = []
        self.kills: list[dict[str, Any]] = []

    def cycle(self, n: int) -> dict[str, Any]:
        leader, standby = self.d.leader()
        ids = []
        for i in range(self.args.agents):
            run = leader.api("POST", "runs", {"graph": self.graph, "name": f"failover {n}.{i}",
                                              "options": {"target": {"worker": "any"}}})
            ids.append(run["id"])
        self.submitted += ids

        def running() -> bool:
            runs = [leader.api("GET", f"runs/{rid}") for rid in ids]
            return all(r["status"] == "running" and r.get("worker_id") for r in runs)

        wait_for(f"kill {n}: its runs to run on the agents", running, self.args.timeout)
        kill_wall, t0 = time.time(), time.monotonic()
        leader.kill()

        def answers() -> bool:
            return call(standby.url, self.d.token, "GET", "runs?limit=1", timeout=5)[0] == 200

        wait_for(f"kill {n}: {standby.name} to answer as the leader", answers, self.args.timeout, POLL_S)
        first_answer = time.monotonic() - t0
        wait_for(f"kill {n}: every agent to reconnect to {standby.name}",
                 lambda: self.d.connected(standby, kill_wall), self.args.timeout, POLL_S)
        agents_seen = time.monotonic() - t0
        agents = self.d.connected_at(standby) - kill_wall
        leader.start()  # the killed replica comes back: the next standby
        wait_for(f"kill {n}: {leader.name} to stand by", lambda: leader.role() == "standby", self.args.timeout)
        row = {"kill": n, "killed": leader.name, "first_answer_s": round(first_answer, 3),
               "agents_s": round(agents, 3), "agents_seen_s": round(agents_seen, 3), "runs": ids}
        print(json.dumps({k: v for k, v in row.items() if k != "runs"}), file=sys.stderr, flush=True)
        return row

    def run(self) -> dict[str, Any]:
        for n in range(1, self.args.kills + 1):
            self.kills.append(self.cycle(n))
        leader, _ = self.d.leader()
        wait_for("every run to end", lambda: all(
            leader.api("GET", f"runs/{rid}")["status"] in audit.TERMINAL for rid in self.submitted), self.args.timeout)
        return self.report(leader)

    def report(self, leader: Replica) -> dict[str, Any]:
        listed, offset = [], 0
        while True:
            page = leader.api("GET", f"runs?limit=50&offset={offset}")
            listed += page["runs"]
            if len(page["runs"]) < 50:
                break
            offset += 50
        known = {r["id"] for r in listed}
        missing = [rid for rid in self.submitted if rid not in known]
        strays = sorted(known - set(self.submitted))
        audits = []
        for rid in self.submitted:
            if rid in missing:
                continue
            run, events, cursor = leader.api("GET", f"runs/{rid}"), [], 0
            while True:
                page = leader.api("GET", f"runs/{rid}/events?cursor={cursor}")
                events += page["events"]
                if not page["more"]:
                    break
                cursor = page["cursor"]
            audits.append(audit.audit_run(run, events, self.expected))
        total = audit.totals(audits)
        not_succeeded = [a["run_id"] for a in audits if a["status"] != "succeeded"]
        ran_twice = [a["run_id"] for a in audits if a["duplicate_events"]]
        runs_lost = len(missing) + len(not_succeeded)
        runs_duplicated = len(strays) + len(ran_twice)
        results = {}
        for key in ("first_answer_s", "agents_s"):
            values = [k[key] for k in self.kills]
            results[key] = {"p50": round(statistics.median(values), 3), "max": round(max(values), 3),
                            "min": round(min(values), 3)}
        met = {f"{key}_p50": results[key]["p50"] <= TARGETS["p50_s"] for key in results}
        met |= {f"{key}_max": results[key]["max"] <= TARGETS["max_s"] for key in results}
        met |= {"runs_lost": runs_lost == 0, "runs_duplicated": runs_duplicated == 0,
                "events": total["lost"] == 0 and total["duplicated"] == 0 and total["gaps"] == 0}
        results |= {"runs": len(self.submitted), "runs_lost": runs_lost, "runs_duplicated": runs_duplicated,
                    "missing_runs": missing, "not_succeeded_runs": not_succeeded, "stray_runs": strays,
                    "runs_that_ran_twice": ran_twice, "run_statuses": total["statuses"],
                    "events": total["events"], "events_lost": total["lost"],
                    "events_duplicated": total["duplicated"], "event_gaps": total["gaps"],
                    "bad_runs": total["bad_runs"]}
        return {"met": met, "results": results,
                "kills": [{k: v for k, v in row.items() if k != "runs"} for row in self.kills]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs of the leader (default 20)")
    ap.add_argument("--agents", type=int, default=2, help="agents, each running one run at every kill (default 2)")
    ap.add_argument("--naps", type=int, default=12, help="Sleep nodes in every run's chain (default 12)")
    ap.add_argument("--nap-s", type=float, default=0.25, help="seconds each Sleep node takes (default 0.25)")
    ap.add_argument("--lease-ttl", type=float, default=TTL_S,
                    help=f"the replicas' lease_ttl_s (default {TTL_S:g}, the setting's default)")
    ap.add_argument("--lease-renew", type=float, default=1.0,
                    help="the replicas' lease_renew_s (default 1, the setting's default)")
    ap.add_argument("--store-url", default="",
                    help="an empty postgresql:// database to use instead of a throwaway server")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step (default 180)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if args.kills < 1 or args.agents < 1 or args.naps < 1 or args.nap_s <= 0:
        ap.error("--kills, --agents and --naps must be >= 1, --nap-s > 0")
    if not 0 < args.lease_renew <= args.lease_ttl / 2:
        ap.error("--lease-renew must be positive and at most half of --lease-ttl")
    started = time.perf_counter()
    parameters = {k: v for k, v in vars(args).items() if k not in ("out", "store_url", "timeout")}
    pg = None if args.store_url else ThrowawayPostgres().__enter__()
    try:
        store_url = args.store_url or pg.create_database()
        parameters["postgresql"] = pg.version() if pg else "given (--store-url)"
        with tempfile.TemporaryDirectory(prefix="codefy-failover-") as tmp:
            deployment = Deployment(Path(tmp), store_url, args)
            try:
                deployment.start()
                result = Failover(deployment, args).run()
            except BaseException:
                for log in sorted(Path(tmp).glob("*.log")) + sorted(Path(tmp).glob("*/server.log")):
                    sys.stderr.write(f"--- {log.relative_to(tmp)} (end)\n{log.read_text(errors='replace')[-3000:]}\n")
                raise
            finally:
                deployment.close()
    finally:
        if pg is not None:
            pg.__exit__(None, None, None)
    publish(args.out, started, parameters=parameters, targets=TARGETS, **result)
    return 0 if all(result["met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
