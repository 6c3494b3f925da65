#!/usr/bin/env bash
# Create .venv at the repo root and install the harness with its pinned dependencies.
# Idempotent: does nothing when .venv already matches pyproject.toml (a stamp holds its hash).
#   PYTHON=python3.11 bash scripts/setup.sh
# torch is installed first, as the CPU build 2.13.0 (on these machines a local wheel; elsewhere set
# TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" to avoid the multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
STAMP=.venv/.harness-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -x .venv/bin/python ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
ver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$ver" != "3.11" ]; then
  echo "error: Python 3.11 is required (found $ver at $(command -v "$PYTHON")); set PYTHON=python3.11" >&2
  exit 2
fi
t0=$(date +%s)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# pip byte-compiles what it installs (half of this script's time); keep it: with PYTHONDONTWRITEBYTECODE set,
# as on this project's machines, --no-compile made every process compile its imports again (README).
# shellcheck disable=SC2086
.venv/bin/python -m pip install -q ${TORCH_PIP_ARGS:-} torch==2.13.0
.venv/bin/python -m pip install -q -e '.[workflow,test,cluster]'
.venv/bin/python -c "import harness.indexes.pyserini_env as e; e.setup()"
echo "$want" > "$STAMP"
echo "setup: .venv ready in $(( $(date +%s) - t0 ))s"
