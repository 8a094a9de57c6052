"""Starting a server process and waiting until its `/health` answers (quickstart, benchmarks, tests)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, timeout_s: float = 60.0, proc: subprocess.Popen | None = None) -> dict:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the server process exited with code {proc.returncode} before it was healthy")
        try:
            r = httpx.get(f"{url}/health", timeout=2.0)
            if r.status_code == 200:
                return r.json()
        except httpx.HTTPError as e:
            last = e
        time.sleep(0.1)
    raise TimeoutError(f"{url}/health did not answer within {timeout_s:.0f}s (last error: {last})")


def own_tool(name: str) -> str | None:
    """The command `name` of the environment this Python runs in: its scripts folder first (a virtual environment's
    bin/, found without activating it, where `ray` and `searchrl` sit beside the interpreter), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def searchrl_command(*args: str) -> list[str]:
    """`searchrl ARGS` as this environment installed it: how a library of ours starts a service, as a user would,
    rather than naming the service's module."""
    found = own_tool("searchrl")
    if found is None:
        raise FileNotFoundError(
            f"the `searchrl` command is not installed beside {sys.executable} nor on PATH: run "
            "`bash launch/setup_env.sh` (or `pip install -e .`) in this environment"
        )
    return [found, *args]


def start_module(module: str, args: Sequence[str], port: int, log: Path | None = None, timeout_s: float = 60.0):
    """`python -m module args --port PORT` in the background; returns the process once healthy."""
    return start_command([sys.executable, "-m", module, *args], port, log, timeout_s)


def start_command(cmd: Sequence[str], port: int, log: Path | None = None, timeout_s: float = 60.0):
    """`cmd --port PORT` in the background; returns the process once healthy."""
    out = log.open("ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=out, stderr=out)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout_s, proc)
    except BaseException:
        # SystemExit from `exit_on_sigterm` and Ctrl-C too: a command stopped while its server starts must not
        # leave that server running with no parent to stop it.
        proc.kill()
        proc.wait()
        raise
    return proc


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def exit_on_sigterm() -> None:
    """SIGTERM (`kill`, a scheduler's stop) exits through Python's `finally` blocks, as Ctrl-C does: a command
    that started a Ray head or servers stops them rather than leave them training in the background."""
    if threading.current_thread() is threading.main_thread():  # only the main thread may set a handler
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def venv_first(path: str | None) -> str:
    """`path` (a PATH value) with this interpreter's bin folder first, so that its tools (ray, pip's ninja) win
    over the system's: the Ray head gives its workers this PATH, and whatever builds for them uses it too."""
    return f"{Path(sys.executable).parent}{os.pathsep}{path or ''}"
