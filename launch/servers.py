"""`searchrl servers start|stop`: the retrieval and reward servers in the background, via launch/start_servers.sh.

The script owns the start-up (pid files, logs, port checks, waiting for /health) and is what the preflight
reads back from runs/servers/; this module only hands it the arguments, so both ways of starting agree.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "start_servers.sh"


def start(argv: list[str] | None = None) -> int:
    return subprocess.run(["bash", str(SCRIPT), *(argv or [])]).returncode


def stop(argv: list[str] | None = None) -> int:
    return start(["stop", *(argv or [])])
