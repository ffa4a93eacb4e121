"""What a single-user server that passes its codefy routes on to the team control plane
(`service_url`, README "JupyterHub") adds to a request.

It starts two headless servers on loopback in temporary data dirs, with one token: the team's
control plane, and a forwarding server whose `CODEFY_SERVICE_URL` names it (as a Hub's single-user
server would be; off a Hub, the request's own token is what goes on, so no Hub is needed to time
the hop itself). One client on one kept-alive connection times, `--repeat` times each, directly
and through the forwarding server: `GET codefy/api/runs?limit=1`, and the submit of a one-node run
(`POST codefy/api/runs`). Both servers are always stopped.

Under a Hub the service checks each new token with the Hub once (then from its cache, 5 minutes);
that request is not in these figures.

    python benchmarks/hub_forward.py [--repeat 300] [--out FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from common import codefy, free_port, publish

TOKEN = "bench-forward-" + "0" * 32
GRAPH = {"graph": {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}}], "edges": []}}


def start(env: dict[str, str], data_dir: Path) -> str:
    done = codefy(env, "start", "--data-dir", str(data_dir), "--port", str(free_port()), "--token", TOKEN)
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    return json.loads((data_dir / "server.json").read_text())["url"]


def timings(url: str, method: str, path: str, body: Any, repeat: int) -> list[float]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Authorization": f"token {TOKEN}", "Content-Type": "application/json"}
    payload = json.dumps(body).encode() if body is not None else None
    times = []
    try:
        for i in range(repeat + 10):  # the first 10 warm up both servers
            t0 = time.perf_counter()
            conn.request(method, parts.path + path, body=payload, headers=headers)
            response = conn.getresponse()
            response.read()
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status >= 300:
                raise SystemExit(f"{method} {url}{path}: {response.status}")
            if i >= 10:
                times.append(elapsed)
    finally:
        conn.close()
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--out")
    args = parser.parse_args()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="codefy-bench-forward-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
        env.update(JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_DATA_DIR=str(root / "data"),
                   JUPYTER_RUNTIME_DIR=str(root / "runtime"), JUPYTER_PLATFORM_DIRS="0")
        team_dir, user_dir = root / "team", root / "user"
        try:
            team = start(env, team_dir)
            user = start({**env, "CODEFY_SERVICE_URL": team}, user_dir)
            results = {}
            for name, method, path, body in (("list", "GET", "codefy/api/runs?limit=1", None),
                                             ("submit", "POST", "codefy/api/runs", GRAPH)):
                direct = summary(timings(team, method, path, body, args.repeat))
                forwarded = summary(timings(user, method, path, body, args.repeat))
                results[name] = {"direct": direct, "forwarded": forwarded,
                                 "added_p50_ms": round(forwarded["p50_ms"] - direct["p50_ms"], 2)}
        finally:
            for data_dir in (user_dir, team_dir):
                if (data_dir / "server.json").exists():
                    codefy(env, "stop", "--data-dir", str(data_dir))
    publish(args.out, began, repeat=args.repeat, forward=results)


if __name__ == "__main__":
    main()
