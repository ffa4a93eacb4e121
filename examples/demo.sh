#!/usr/bin/env bash
# The demo behind `make demo`: the run queue end to end, with nothing but this repository.
#
#   1. codefy start   a headless control plane (jupyter-server with only the codefy extension)
#                     on embedded defaults, its data in .codefy-demo/, on a free port
#   2. codefy run     submits examples/train_mlp.json and streams the run to its end
#   3. prints where to go next (JupyterLab, the notebook in kernels/)
#   4. codefy stop    unless --keep was given
#
# Usage: examples/demo.sh [--keep]     (--keep leaves the server running for a notebook)
# Running it again is fine: a demo server left over from an interrupted run is stopped first.
set -euo pipefail

cd "$(dirname "$0")/.."
KEEP=0
for arg in "$@"; do
    case "$arg" in
        --keep) KEEP=1 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "demo.sh: unknown argument $arg (only --keep)" >&2; exit 2 ;;
    esac
done

# `make demo` puts .venv/bin on PATH; run directly, the script finds it too.
if ! command -v codefy >/dev/null 2>&1 && [ -x .venv/bin/codefy ]; then
    PATH="$PWD/.venv/bin:$PATH"
fi

# Every codefy command below finds the demo server through this data dir's server.json.
export CODEFY_DATA_DIR="$PWD/.codefy-demo"
unset CODEFY_URL CODEFY_TOKEN

codefy stop >/dev/null 2>&1 || true   # a leftover from an interrupted demo

echo "== 1. codefy start: a headless control plane, data in .codefy-demo/"
# No --port: jupyter-server takes 8888, or the next free port.
codefy start

stop_server() {
    echo
    echo "== 4. codefy stop"
    codefy stop
}
if [ "$KEEP" = 0 ]; then
    trap stop_server EXIT
fi

echo
echo "== 2. codefy run examples/train_mlp.json"
rc=0
codefy run examples/train_mlp.json --name "make demo" || rc=$?

echo
echo "== 3. Next"
cat <<'EOF'
  The run belongs to the server, not to the terminal. While a server is up, `codefy runs ls`
  lists its runs and `codefy runs metrics ID --plot` plots a run's metrics.

  In JupyterLab (the extension is enabled wherever codefy-jupyter is installed; pip install jupyterlab):
      jupyter lab kernels/example.ipynb
  The notebook submits the same graph with %codefy run, shows the live run view and plots the
  metrics. `codefy kernel-setup` loads %codefy in every kernel; else %load_ext codefy_jupyter.
EOF
if [ "$KEEP" = 1 ]; then
    state="$CODEFY_DATA_DIR/server.json"
    url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$state")
    token=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$state")
    cat <<EOF

  The demo server keeps running (--keep). Point a notebook, a script or codefy run at it with
      export CODEFY_URL=$url CODEFY_TOKEN=$token
  and stop it with: CODEFY_DATA_DIR=.codefy-demo codefy stop
EOF
else
    echo "  examples/demo.sh --keep leaves the demo server running for a notebook."
fi
exit "$rc"
