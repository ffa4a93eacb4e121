#!/usr/bin/env bash
# The demo behind `make demo`: the run queue end to end, with nothing but this repository.
#
#   1. codefy start        a headless control plane (jupyter-server with only the codefy extension)
#                          on embedded defaults, its data in .codefy-demo/, on a free port
#   2. codefy run          submits examples/train_mlp.json and streams the run to its end
#   3. codefy agent start  one worker agent on this machine, in the background (folder
#                          .codefy-demo/agent/, log .codefy-demo/agent.log), until it is connected
#   4. codefy run --target any   the same graph again: it goes to the agent (`any` puts this server last)
#   5. prints where to go next (JupyterLab, the notebook in kernels/)
#   6. codefy agent stop, codefy stop   unless --keep was given
#
# Usage: examples/demo.sh [--keep]     (--keep leaves the server and the agent running for a notebook)
# Running it again is fine: a demo server or agent left over from an interrupted run is stopped
# first, and whatever the demo started is stopped when it fails or is interrupted.
set -euo pipefail

cd "$(dirname "$0")/.."
KEEP=0
for arg in "$@"; do
    case "$arg" in
        --keep) KEEP=1 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "demo.sh: unknown argument $arg (only --keep)" >&2; exit 2 ;;
    esac
done

# `make demo` puts .venv/bin on PATH; run directly, the script finds it too.
if ! command -v codefy >/dev/null 2>&1 && [ -x .venv/bin/codefy ]; then
    PATH="$PWD/.venv/bin:$PATH"
fi
# The interpreter codefy runs under (for the few lines of Python below that use its Client).
PY="$(dirname "$(command -v codefy)")/python"
[ -x "$PY" ] || PY=python3

# Every codefy command below finds the demo server through this data dir's server.json; the agent
# takes the server's own token from there too (accepted from this machine only).
export CODEFY_DATA_DIR="$PWD/.codefy-demo"
unset CODEFY_URL CODEFY_TOKEN CODEFY_AGENT_DIR
AGENT_NAME=demo-agent
AGENT_DIR="$CODEFY_DATA_DIR/agent"
AGENT_LOG="$CODEFY_DATA_DIR/agent.log"
# Each run takes ~5-20 s on a 2-core CPU; a demo that hangs (a run that never ends) gives up after this.
RUN_TIMEOUT_S=240

# Leftovers from an interrupted demo: the agent first, so it does not dial a server that is gone.
codefy agent stop --data-dir "$AGENT_DIR" --timeout 15 >/dev/null 2>&1 || true
codefy stop >/dev/null 2>&1 || true

SERVER_UP=0
AGENT_UP=0
agent_pid=
DONE=0
cleanup() {
    local code=$?
    trap - EXIT INT TERM
    # --keep keeps both only when the demo got to its end; a failed or interrupted demo leaves nothing.
    if [ "$KEEP" = 1 ] && [ "$DONE" = 1 ]; then
        exit "$code"
    fi
    if [ "$AGENT_UP" = 1 ] || [ "$SERVER_UP" = 1 ]; then
        echo
        echo "== 6. codefy agent stop, codefy stop"
    fi
    if [ "$AGENT_UP" = 1 ]; then
        if kill -0 "$agent_pid" 2>/dev/null; then
            codefy agent stop --data-dir "$AGENT_DIR" --timeout 20 || true
        else
            echo "the agent has exited already (its log: .codefy-demo/agent.log)"
        fi
    fi
    if [ "$SERVER_UP" = 1 ]; then
        codefy stop || true
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== 1. codefy start: a headless control plane, data in .codefy-demo/"
# No --port: jupyter-server takes 8888, or the next free port.
SERVER_UP=1   # before it answers: a start that fails half-way is still stopped
codefy start
URL=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$CODEFY_DATA_DIR/server.json")

echo
echo "== 2. codefy run examples/train_mlp.json"
rc=0
codefy run examples/train_mlp.json --name "make demo" --timeout "$RUN_TIMEOUT_S" || rc=$?
# `codefy run` handles Ctrl+C itself (exit 130): bash then goes on, so stop here.
[ "$rc" = 130 ] && exit 130

if [ "$rc" = 0 ]; then
    echo
    echo "== 3. codefy agent start --control $URL --name $AGENT_NAME (in the background)"
    AGENT_UP=1
    codefy agent start --control "$URL" --name "$AGENT_NAME" --data-dir "$AGENT_DIR" \
        </dev/null >"$AGENT_LOG" 2>&1 &
    agent_pid=$!
    echo "  folder .codefy-demo/agent/, log .codefy-demo/agent.log; waiting until GET codefy/api/workers lists it connected"
    # The agent probes its node catalog in a helper process (imports torch) before it dials.
    "$PY" - "$AGENT_NAME" "$agent_pid" "$AGENT_LOG" <<'EOF'
import os, sys, time
from codefy_jupyter import Client

name, pid, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
client, deadline, started = Client(), time.monotonic() + 90, time.monotonic()
while True:
    doc = client.workers()
    worker = next((w for w in doc["workers"] if w["name"] == name), None)
    if worker and worker["state"] == "connected":
        devices = ", ".join(d["device"] for d in worker["devices"])
        print(f"  ✓ worker {name} connected after {time.monotonic() - started:.1f} s "
              f"(devices: {devices}; same machine: {worker['same_host']})")
        break
    try:
        os.kill(pid, 0)
        gone = False
    except ProcessLookupError:
        gone = True
    if gone or time.monotonic() > deadline:
        why = "exited" if gone else "did not connect within 90 s"
        tail = open(log, encoding="utf-8", errors="replace").read()[-2000:]
        sys.exit(f"error: the agent {why}; the end of {log}:\n{tail}")
    time.sleep(0.5)
EOF

    echo
    echo "== 4. codefy run examples/train_mlp.json --target any: placed on the agent"
    codefy run examples/train_mlp.json --target any --name "make demo, --target any" --timeout "$RUN_TIMEOUT_S" \
        || rc=$?
    [ "$rc" = 130 ] && exit 130
    # Where it ran, as the server recorded it (the newest run is ours: nothing else submits here).
    run_id=$(codefy runs ls --limit 1 --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["id"])')
    worker=$(codefy runs show "$run_id" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("worker_id") or "local")')
    if [ "$worker" = "$AGENT_NAME" ]; then
        echo "  run $run_id ran on worker $worker (codefy runs show $run_id); its console output is in"
        echo "  .codefy-demo/agent/agent-runs/$run_id/output.log"
    else
        echo "error: run $run_id ran on $worker, not on the agent $AGENT_NAME" >&2
        [ "$rc" = 0 ] && rc=1
    fi
fi

echo
echo "== 5. Next"
cat <<'EOF'
  The runs belong to the server, not to the terminal. While a server is up, `codefy runs ls`
  lists its runs and `codefy runs metrics ID --plot` plots a run's metrics.

  In JupyterLab (the extension is enabled wherever codefy-jupyter is installed; pip install jupyterlab):
      jupyter lab kernels/example.ipynb
  The notebook submits the same graph with %codefy run, shows the live run view and plots the
  metrics. `codefy kernel-setup` loads %codefy in every kernel; else %load_ext codefy_jupyter.

  A GPU box runs `codefy agent start --control URL --token T` (README: Worker agents) and takes
  the runs that target it by name, or `any`.
EOF
if [ "$KEEP" = 1 ]; then
    token=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$CODEFY_DATA_DIR/server.json")
    cat <<EOF

  The demo server keeps running (--keep), with its agent when it got that far. Point a notebook, a
  script or codefy run at it with
      export CODEFY_URL=$URL CODEFY_TOKEN=$token
  and stop them with:
      codefy agent stop --data-dir .codefy-demo/agent; CODEFY_DATA_DIR=.codefy-demo codefy stop
EOF
else
    echo "  examples/demo.sh --keep leaves the demo server and its agent running for a notebook."
fi
DONE=1
exit "$rc"
