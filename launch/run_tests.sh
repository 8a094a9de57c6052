#!/usr/bin/env bash
# The whole test suite on a fresh machine: set up the venv, lint, then pytest (slow runs excluded).
# Extra arguments go to pytest, e.g. `bash launch/run_tests.sh -k reward`. SEARCHRL_TEST_WORKERS (default 2)
# sets how many pytest-xdist workers run the tests; 0 runs them in this process.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" dev
cd "$SEARCHRL_ROOT"
SECONDS=0
"$SEARCHRL_VENV/bin/ruff" check .
"$SEARCHRL_VENV/bin/ruff" format --check .
# CI logs keep how long the suite took and its 20 slowest tests, so a creeping suite shows, and where, before it
# passes the 10-minute budget.
status=0
"$PY" -m pytest -q -n "${SEARCHRL_TEST_WORKERS:-2}" --durations=20 "$@" || status=$?
echo "[run_tests] lint + tests took ${SECONDS} s (exit ${status})"
exit "$status"
