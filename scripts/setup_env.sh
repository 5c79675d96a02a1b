#!/usr/bin/env bash
# Build (or reuse) the project's virtual environment: venv + one pinned `pip install`.
# Idempotent: a stamp with the hash of requirements.txt skips the install when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.requirements.sha256
want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -c1-64)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "[setup] environment up to date ($VENV)"
  exit 0
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -U pip 2>&1 | grep -v "^WARNING: Location" || true
# torch==2.13.0 is pinned inside requirements.txt, so pip takes the local CPU wheel, no CUDA packages
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -m pip check
"$VENV/bin/python" -c "import torch, transformers, papermill, jupytext, rlib; print('[setup] torch', torch.__version__, '| transformers', transformers.__version__)"
echo "$want" > "$STAMP"
echo "[setup] environment built in $(( $(date +%s) - start )) s"
