#!/usr/bin/env bash
# The main job on embedded defaults: set up the venv, then run launch/quickstart.py (as python -m launch.quickstart) (bundled
# trajectories scored through a real reward server on loopback). Arguments go to quickstart.py.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" dev
cd "$SEARCHRL_ROOT"
exec "$PY" -m launch.quickstart "$@"
