#!/usr/bin/env bash
# Submit a training stage to Ray:
#   launch/ray_submit.sh stage1|stage2|router_r1|rag_r1 [--model configs/models/X.yaml] [--dry-run] [key=value ...]
# Resolves the configs, checks every OpenRLHF flag with OpenRLHF's own parser, checks that the
# retrieval and reward servers answer /health, then runs `ray job submit`. --dry-run prints the
# command and contacts nothing. Uses $SEARCHRL_VENV (default .venv) when it exists, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEARCHRL_VENV:-$ROOT/.venv}"
PY="python3"
# The venv's bin first, so the `ray` CLI of the `train` (or `dev`) extra is found without activating it.
if [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; export PATH="$VENV/bin:$PATH"; fi
cd "$ROOT"
exec "$PY" -m searchrl.job.submit "$@"
