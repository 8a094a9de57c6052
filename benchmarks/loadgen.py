"""A closed-loop HTTP load generator for the benchmarks: `concurrency` keep-alive connections, each
sending one request at a time, for a fixed time.

Requests are raw HTTP/1.1 on asyncio streams: on a 2-core machine a full client library costs more
CPU per request than the servers do, and the load generator must not be what is measured.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoadResult:
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    first_error: str | None = None
    wrong: int = 0
    slow: int = 0


async def closed_loop(
    url: str,
    path: str,
    bodies: list[bytes],
    concurrency: int,
    seconds: float,
    ok_prefix: bytes = b"{",
    check: Callable[[int, bytes], bool] | None = None,
    max_requests: int | None = None,
    slow_s: float = 1.0,
    timeout_s: float = 120.0,
    keyed: bool = False,
) -> LoadResult:
    """POST `bodies` (round robin) to `url + path` for `seconds` or `max_requests`, whichever comes first.

    A 200 whose body starts with `ok_prefix` counts as served; `check(i, payload)`, when given, says
    whether the answer to body i is right (a wrong answer is counted, not retried). A connection whose answer
    takes over `timeout_s` counts an error and stops. `keyed`: each request carries an Idempotency-Key of its own,
    as RewardClient sends them."""
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    latencies: list[float] = []
    errors: list[str] = []
    wrong = 0
    sent = 0
    stop_at = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        nonlocal wrong, sent
        reader, writer = await asyncio.open_connection(host, int(port))
        i = offset
        try:
            while time.perf_counter() < stop_at and (max_requests is None or sent < max_requests):
                sent += 1
                body = bodies[i % len(bodies)]
                t0 = time.perf_counter()
                key = b"Idempotency-Key: %s\r\n" % uuid.uuid4().hex.encode() if keyed else b""
                writer.write(
                    b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s"
                    b"Content-Length: %d\r\n\r\n%s" % (path.encode(), host.encode(), key, len(body), body)
                )
                async with asyncio.timeout(timeout_s):
                    head = await reader.readuntil(b"\r\n\r\n")
                    lines = head.lower().split(b"\r\n")
                    length = int(next(line.split(b":")[1] for line in lines if line.startswith(b"content-length")))
                    payload = await reader.readexactly(length)
                if b"connection: close" in lines:
                    # A server without keep-alive (Flask's development server) closes after each answer.
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, int(port))
                if head.startswith(b"HTTP/1.1 200") and payload.startswith(ok_prefix):
                    latencies.append(time.perf_counter() - t0)
                    wrong += check is not None and not check(i % len(bodies), payload)
                else:
                    errors.append(head.split(b"\r\n")[0].decode())
                i += concurrency
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    if not latencies:
        return LoadResult(0, len(errors), 0.0, 0.0, 0.0, 0.0, errors[0] if errors else None)
    return LoadResult(
        requests=len(latencies),
        errors=len(errors),
        rps=len(latencies) / elapsed,
        p50_ms=1000 * statistics.median(latencies),
        p99_ms=1000 * latencies[int(0.99 * (len(latencies) - 1))],
        max_ms=1000 * latencies[-1],
        first_error=errors[0] if errors else None,
        wrong=wrong,
        slow=sum(t > slow_s for t in latencies),
    )


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants (a server's worker processes)."""
    found = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += process_tree(int(child))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds these processes have used: a cost that other load on the machine barely moves."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
