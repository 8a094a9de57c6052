"""The processes behind `searchrl servers start|stop`: stopping the one a pid file in runs/servers/ names and
waiting until it has exited, and saying whose process holds a port when it is not free.

    python -m launch.server_process stop NAME --run-dir runs/servers
    python -m launch.server_process check-port NAME PORT --host 127.0.0.1 --run-dir runs/servers

Called by launch/start_servers.sh. A restart used to send SIGTERM and test the port at once: the old server
still held it for a moment (3 failures in 6 restarts), and the error blamed "another process".
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path

# What each name's command line runs: a pid file whose process runs something else is stale (the pid was
# reused), and that process is never signalled.
MODULES = {"retrieval": "search_backend.serve", "reward": "reward_server"}
STOP_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 10.0
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def cmdline(pid: int) -> str | None:
    """The process's command line, or None when it has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            if fh.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return None
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    except PermissionError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()


def recorded_pid(run_dir: Path, name: str) -> int | None:
    try:
        return int((run_dir / f"{name}.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def is_ours(pid: int, name: str) -> bool:
    """Whether `pid` still runs the server `name` (and not a process that inherited the pid)."""
    line = cmdline(pid)
    return bool(line) and MODULES[name] in line.split()


def wait_exited(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while cmdline(pid) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop(run_dir: Path, name: str, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """Stop the server the pid file names and return once it has exited (SIGKILL after `timeout_s`); 1 when it
    could not be stopped. The pid and JSON records go either way, unless the process is still there."""
    pid = recorded_pid(run_dir, name)
    if pid is not None and is_ours(pid, name):
        os.kill(pid, signal.SIGTERM)
        if not wait_exited(pid, timeout_s):
            print(f"[servers] {name} (pid {pid}) still running {timeout_s:g} s after SIGTERM; sending SIGKILL")
            os.kill(pid, signal.SIGKILL)
            if not wait_exited(pid, KILL_TIMEOUT_S):
                print(f"error: our own {name} server (pid {pid}) did not exit even after SIGKILL", file=sys.stderr)
                return 1
        print(f"[servers] stopped {name} (pid {pid})")
    elif pid is not None:
        print(f"[servers] {name}: pid {pid} in {run_dir / (name + '.pid')} is no longer our server; left alone")
    for suffix in (".pid", ".json"):
        (run_dir / f"{name}{suffix}").unlink(missing_ok=True)
    return 0


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def listeners(port: int) -> set[int]:
    """Pids of the processes listening on TCP `port` (those this user may inspect)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                pids.add(int(proc.name))
        except (PermissionError, FileNotFoundError, ProcessLookupError):
            continue
    return pids


def port_owner_message(host: str, port: int, name: str, run_dir: Path) -> str | None:
    """None when `host:port` is free; otherwise whose process holds it: one of ours (a pid file in `run_dir`
    names it) or another process, by pid and command line when this user can see it."""
    if port_free(host, port):
        return None
    option = "--search-port" if name == "retrieval" else "--reward-port"
    owners = listeners(port)
    for other in MODULES:
        pid = recorded_pid(run_dir, other)
        if pid in owners:
            return (
                f"{host}:{port} is held by our own {other} server (pid {pid}, {run_dir / (other + '.pid')}); "
                f"give the {name} server another port ({option})"
            )
    if owners:
        pid = min(owners)
        return (
            f"{host}:{port} is in use by another process, not a server this script started (pid {pid}: "
            f"{(cmdline(pid) or '?')[:200]}); stop it or choose another port ({option})"
        )
    return (
        f"{host}:{port} is in use by another process, not a server this script started (another user's: its pid "
        f"is not visible); choose another port ({option})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m launch.server_process", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stop", help="stop the server a pid file names and wait until it has exited")
    s.add_argument("name", choices=sorted(MODULES))
    s.add_argument("--run-dir", type=Path, required=True)
    s.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S, help="seconds after SIGTERM before SIGKILL")
    c = sub.add_parser("check-port", help="exit 1, saying whose process it is, when the port is not free")
    c.add_argument("name", choices=sorted(MODULES))
    c.add_argument("port", type=int)
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--run-dir", type=Path, required=True)
    args = p.parse_args(argv)
    if args.command == "stop":
        return stop(args.run_dir, args.name, args.timeout)
    message = port_owner_message(args.host, args.port, args.name, args.run_dir)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
