#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up the venv, lint, then pytest (slow runs excluded).
# Extra arguments go to pytest, e.g. `bash launch/run_tests.sh -k reward`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" dev
cd "$SEARCHRL_ROOT"
"$SEARCHRL_VENV/bin/ruff" check .
exec "$PY" -m pytest -q "$@"
