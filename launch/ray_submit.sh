#!/usr/bin/env bash
# Submit a training stage to Ray:
#   launch/ray_submit.sh stage1|stage2|router_r1|rag_r1|sft [--model configs/models/X.yaml] [key=value ...]
# The same as `searchrl stage submit`; one of --dry-run, --preflight or --rehearse anywhere among the arguments
# runs `searchrl stage dry-run`, `preflight` or `rehearse` instead, each with its own options (`--help`).
# Uses $SEARCHRL_VENV (default .venv) when it exists, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SEARCHRL_VENV:-$ROOT/.venv}"
PY="python3"
# The venv's bin first, so the `ray` CLI of the `train` (or `dev`) extra is found without activating it.
if [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; export PATH="$VENV/bin:$PATH"; fi
cd "$ROOT"
mode=submit
args=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) mode=dry-run ;;
    --preflight) mode=preflight ;;
    --rehearse) mode=rehearse ;;
    *) args+=("$arg") ;;
  esac
done
exec "$PY" -m launch.cli stage "$mode" ${args[@]+"${args[@]}"}
