"""Starting a server process and waiting until its `/health` answers (quickstart, benchmarks, tests)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from routing.llm_router import RouterConfig


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


def start_module(module: str, args: Sequence[str], port: int, log: Path | None = None, timeout_s: float = 60.0):
    """`python -m module args --port PORT` in the background; returns the process once healthy."""
    out = log.open("ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", module, *args, "--port", str(port)], stdout=out, stderr=out)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout_s, proc)
    except Exception:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_loopback(pool: RouterConfig, qa: list[dict[str, Any]], workdir: Path) -> tuple[subprocess.Popen, str]:
    """A loopback LLM pool server (`routing/loopback_pool.py`, free port) knowing `qa` (question, answer),
    skills by price; returns the process and the base URL to give every pool model."""
    from routing.loopback_pool import skills_by_price

    file = workdir / "loopback_qa.jsonl"
    file.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in qa), encoding="utf-8")
    port = free_port()
    skills = [arg for model, p in skills_by_price(pool).items() for arg in ("--skill", f"{model}={p}")]
    proc = start_module("routing.loopback_pool", ["--qa", str(file), *skills], port, workdir / "loopback_pool.log")
    return proc, f"http://127.0.0.1:{port}/v1"
