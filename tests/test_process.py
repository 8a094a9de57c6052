"""searchrl/process.py: a command stopped by SIGTERM while a server it started is still coming up stops that
server too (found when a benchmark was killed during a retrieval server's start: the server lived on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from searchrl.process import free_port

SLEEPER = "import os, sys, time\nopen(os.environ['PIDFILE'], 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
DRIVER = textwrap.dedent(
    """
    import sys
    from searchrl.process import exit_on_sigterm, start_module
    exit_on_sigterm()
    start_module("sleeper_server", [], int(sys.argv[1]), None, 120)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child not yet reaped is a zombie: gone for this purpose.
    status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return status != "Z"


def test_sigterm_while_a_server_starts_stops_the_server(tmp_path: Path) -> None:
    (tmp_path / "sleeper_server.py").write_text(SLEEPER)
    pidfile = tmp_path / "server.pid"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["PIDFILE"] = str(pidfile)
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(free_port())], env=env)
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the server never started"
        time.sleep(0.1)
    server = int(pidfile.read_text())
    try:
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server), "the server outlived the command that started it"
    finally:
        if alive(server):
            os.kill(server, signal.SIGKILL)
