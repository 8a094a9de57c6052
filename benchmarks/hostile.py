"""Hostile input against both servers: status codes, event-loop blocking and memory, per input.

    python -m benchmarks.hostile [--work-dir /tmp/searchrl-hostile] [--big-queries 1024] [--out FILE]

Starts the reward server and the retrieval server (bundled mini index) as their own processes, with
a bearer token, then sends each input of issue 16 and issue 14 item 4 while two threads watch the
server: one asks `GET /health` every 20 ms on its own connection (the longest answer is how long the
event loop was blocked), one samples the process's resident memory every 10 ms (peak growth over
the input, and what stays after it). An input holds when it gets no 5xx, blocks the loop under 1 s
and grows RSS by under 200 MB. Loopback only; writes benchmarks/results/hostile.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port, start_module, stop  # noqa: E402

TOKEN = "probe-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}
PROMPT = "User:Where is the Eiffel Tower?\nAssistant: <think>"
SOLUTION = " Paris. </think><answer> Paris </answer>"
MAX_BLOCK_MS = 1000.0
MAX_RSS_GROWTH_MB = 200.0
# Short deadlines keep the slow-sender inputs quick; the servers' defaults are 10 s and 30 s.
TIMEOUTS = ["--header-timeout", "2", "--body-timeout", "2"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Watch:
    """Heartbeat and memory sampler for one server process, read per input."""

    def __init__(self, url: str, pid: int) -> None:
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.pid = pid
        self.latencies: list[tuple[float, float]] = []  # (time sent, seconds to answer)
        self.rss: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._beat, self._sample)]

    def __enter__(self) -> Watch:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def _beat(self) -> None:
        request = b"GET /health HTTP/1.1\r\nHost: probe\r\n\r\n"
        sock = None
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                if sock is None:
                    sock = socket.create_connection((self.host, self.port), timeout=30)
                sock.sendall(request)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(4096)
                    if not chunk:
                        raise ConnectionError
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                length = int(next(x.split(b":")[1] for x in head.split(b"\r\n") if x.lower().startswith(b"content-l")))
                while len(rest) < length:
                    rest += sock.recv(4096)
            except (OSError, ConnectionError, StopIteration):
                if sock is not None:
                    sock.close()
                sock = None
                continue
            self.latencies.append((t0, time.monotonic() - t0))
            time.sleep(0.02)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.rss.append((time.monotonic(), rss_mb(self.pid)))
            time.sleep(0.01)

    @contextmanager
    def window(self, record: dict):
        time.sleep(0.3)
        start = time.monotonic()
        base = rss_mb(self.pid)
        yield
        time.sleep(0.3)
        end = time.monotonic()
        record["max_loop_block_ms"] = round(1000 * max((d for t, d in self.latencies if start <= t <= end), default=0))
        peak = max((r for t, r in self.rss if start <= t <= end), default=base)
        record["rss_before_mb"] = round(base, 1)
        record["rss_peak_growth_mb"] = round(peak - base, 1)
        record["rss_after_mb"] = round(rss_mb(self.pid), 1)
        record["holds"] = (
            not any(str(s).startswith("5") for s in record["statuses"])
            and record["max_loop_block_ms"] < MAX_BLOCK_MS
            and record["rss_peak_growth_mb"] < MAX_RSS_GROWTH_MB
        )


def statuses(responses: list) -> dict[str, int]:
    return dict(Counter(str(r.status_code) if isinstance(r, httpx.Response) else type(r).__name__ for r in responses))


async def post_many(url: str, bodies: list[bytes], headers: dict, concurrency: int = 16) -> list:
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        sem = asyncio.Semaphore(concurrency)

        async def one(body: bytes):
            async with sem:
                try:
                    return await client.post(url, content=body, headers=headers)
                except httpx.HTTPError as e:
                    return e

        return await asyncio.gather(*(one(b) for b in bodies))


def raw_posts(url: str, path: str, head_extra: str, declared: int, sent: bytes, n: int, hold_s: float) -> list[str]:
    """n connections each announcing `declared` bytes and sending `sent`, then waiting: the status each got."""
    host, port = url.removeprefix("http://").split(":")
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)), timeout=hold_s)
        head = f"POST {path} HTTP/1.1\r\nHost: probe\r\nContent-Type: application/json\r\n{head_extra}"
        try:
            sock.sendall(f"{head}Content-Length: {declared}\r\n\r\n".encode() + sent)
        except OSError:
            pass  # the server answered and closed before taking all of it
        socks.append(sock)
    lines = []
    for sock in socks:
        try:
            lines.append(_status(sock.recv(200)))
        except TimeoutError:
            lines.append("no answer (still open)")
        except OSError as e:
            lines.append(type(e).__name__)
        finally:
            sock.close()
    return lines


def slow_headers(url: str, n: int, hold_s: float) -> list[str]:
    """n connections sending one header byte per second; what each got back."""
    host, port = url.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port)), timeout=0.05) for _ in range(n)]
    for sock in socks:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: probe\r\nX-Slow: ")
    got = ["no answer (still open)"] * n
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline and any(g.startswith("no answer") for g in got):
        for i, sock in enumerate(socks):
            if not got[i].startswith("no answer"):
                continue
            try:
                sock.sendall(b"a")
                got[i] = _status(sock.recv(200))
            except TimeoutError:
                pass
            except OSError:
                got[i] = "closed"
        time.sleep(1.0)
    for sock in socks:
        sock.close()
    return got


def _status(line: bytes) -> str:
    """The status code of a raw HTTP answer's first line, or what happened instead."""
    first = line.split(b"\r\n", 1)[0].decode("latin-1")
    return first.split()[1] if first.startswith("HTTP/") else (first or "closed")


def run_input(watch: Watch, server: str, name: str, expect: str, fn: Callable[[], list | dict]) -> dict:
    record: dict = {"server": server, "input": name, "expected": expect, "statuses": {}}
    with watch.window(record):
        t0 = time.monotonic()
        out = fn()
        record["seconds"] = round(time.monotonic() - t0, 2)
        if isinstance(out, dict):
            record.update(out)
        elif out and all(isinstance(x, str) for x in out):
            record["statuses"] = dict(Counter(out))
        else:
            record["statuses"] = statuses(out)
    print(
        f"{server:9} {name:58.58} {json.dumps(record['statuses']):32.32} block {record['max_loop_block_ms']:>5} ms"
        f"  rss +{record['rss_peak_growth_mb']:>6} MB  {'holds' if record['holds'] else 'FAILS'}",
        flush=True,
    )
    return record


def reward_inputs(url: str, watch: Watch) -> list[dict]:
    post = f"{url}/get_reward"
    rows = []

    def body(**meta) -> bytes:
        return json.dumps(
            {"query": [PROMPT + SOLUTION], "prompts": [PROMPT], "labels": ["Paris"], "metadata": [meta]}
        ).encode()

    def send(bodies: list[bytes], headers: dict | None = None, concurrency: int = 16) -> list:
        return asyncio.run(post_many(post, bodies, {**JSON, **AUTH} if headers is None else headers, concurrency))

    for raw in (b"-1", b'"2"', b"1" + b"0" * 400, b"1e400", b"NaN", b"Infinity", b"-Infinity"):
        payload = body(num_searches=0).replace(b'"num_searches": 0', b'"num_searches": ' + raw)
        rows.append(
            run_input(watch, "reward", f"num_searches {raw[:12].decode()}", "422", lambda p=payload: send([p]))
        )
    nested = "[" * 1000 + "]" * 1000
    rows.append(
        run_input(
            watch,
            "reward",
            "label: JSON list nested 1,000 deep",
            "422",
            lambda: send([json.dumps({"query": ["x"], "labels": ["L"]}).replace('"L"', nested).encode()]),
        )
    )
    rows.append(
        run_input(
            watch,
            "reward",
            "label: string holding a list nested 1,000 deep",
            "422",
            lambda: send([json.dumps({"query": ["x"], "labels": [nested]}).encode()]),
        )
    )
    for name, raw in [
        ("duplicate key", b'{"query": ["a"], "query": ["b"], "labels": ["x"]}'),
        ("invalid UTF-8", b'{"query": ["caf\xe9"], "labels": ["x"]}'),
        ("lone surrogate escape", b'{"query": ["\\ud800"], "labels": ["x"]}'),
        (
            "metadata nested 10,000 deep",
            b'{"query": ["a"], "labels": ["x"], "metadata": [' + b"[" * 10000 + b"]" * 10000 + b"]}",
        ),
    ]:
        rows.append(run_input(watch, "reward", name, "422", lambda r=raw: send([r])))
    rows.append(
        run_input(
            watch,
            "reward",
            "text/plain body (cross-site form)",
            "415",
            lambda: send([body()], {"content-type": "text/plain", **AUTH}),
        )
    )
    rows.append(run_input(watch, "reward", "no token: POST", "401", lambda: send([body()], JSON)))
    rows.append(
        run_input(
            watch,
            "reward",
            "no token: GET /health, /docs, /openapi.json",
            "200 bare, 401, 401",
            lambda: [httpx.get(f"{url}{p}") for p in ("/health", "/docs", "/openapi.json")],
        )
    )
    rows.append(
        run_input(
            watch,
            "reward",
            "60 MB query, prompt not in it",
            "413",
            lambda: raw_posts(
                url, "/get_reward", f"Authorization: Bearer {TOKEN}\r\n", 60_000_000, b"x" * 1_000_000, 1, 30
            ),
        )
    )
    capped = json.dumps({"query": ["x " * 131_072], "prompts": ["User: absent"], "labels": ["a"]}).encode()
    rows.append(
        run_input(
            watch,
            "reward",
            "largest query allowed (256 Ki chars), prompt not in it",
            "422",
            lambda: send([capped] * 8, concurrency=8),
        )
    )
    answer = "Paris " * 40_000
    allowed = json.dumps(
        {
            "query": [PROMPT + f" x </think><answer>{answer}</answer>"] * 15,
            "prompts": [PROMPT] * 15,
            "labels": ["Paris"] * 15,
        }
    ).encode()
    rows.append(
        run_input(
            watch,
            "reward",
            f"{len(allowed) >> 20} MB body of 15 long samples, scored",
            "200",
            lambda: send([allowed] * 4, concurrency=4),
        )
    )
    rows.append(
        run_input(
            watch,
            "reward",
            "8 unauthenticated 60 MB bodies",
            "401",
            lambda: raw_posts(url, "/get_reward", "", 60_000_000, b"x" * 1_000_000, 8, 30),
        )
    )
    uniq = [
        json.dumps({"query": [f"</think><answer>{i} {'word ' * 40_000}</answer>"], "labels": ["a"]}).encode()
        for i in range(180)
    ]
    rows.append(
        run_input(
            watch,
            "reward",
            "180 unique 200 KB answers (normalisation cache)",
            "200",
            lambda: send(uniq, concurrency=4),
        )
    )
    rows.append(
        run_input(
            watch,
            "reward",
            "slow body: 50 connections, 10 of 100 bytes sent",
            "408",
            lambda: raw_posts(url, "/get_reward", f"Authorization: Bearer {TOKEN}\r\n", 100, b'{"query": ', 50, 10),
        )
    )
    rows.append(
        run_input(watch, "reward", "slow headers: 50 connections, 1 byte/s", "408", lambda: slow_headers(url, 50, 10))
    )
    return rows


def search_inputs(url: str, watch: Watch, big_queries: int) -> list[dict]:
    post = f"{url}/search"
    rows = []

    def send(bodies: list[bytes], headers: dict | None = None, concurrency: int = 64) -> list:
        return asyncio.run(post_many(post, bodies, {**JSON, **AUTH} if headers is None else headers, concurrency))

    queries = (ROOT / "tests/fixtures/search/queries_1000.txt").read_text(encoding="utf-8").splitlines()
    batch = [json.dumps({"queries": [q], "top_k": 3}).encode() for q in queries[:60]]
    batch.insert(30, b'{"queries": ["fine", "bad \\ud800"], "top_k": 3}')
    rows.append(
        run_input(
            watch, "retrieval", "lone surrogate among 60 concurrent queries", "422 x1, 200 x60", lambda: send(batch)
        )
    )
    for name, raw in [
        ("parse error", b"{bad"),
        ("duplicate key", b'{"queries": ["a"], "queries": ["b"]}'),
        ("top_k NaN", b'{"queries": ["a"], "top_k": NaN}'),
        ("top_k 1e400", b'{"queries": ["a"], "top_k": 1e400}'),
        ("top_k 10**400", b'{"queries": ["a"], "top_k": 1' + b"0" * 400 + b"}"),
        ("invalid UTF-8", b'{"queries": ["caf\xe9"]}'),
        ("nested 10,000 deep", b'{"queries": ' + b"[" * 10000 + b"]" * 10000 + b"}"),
        ("query of 600 chars", json.dumps({"queries": ["word " * 120]}).encode()),
    ]:
        rows.append(run_input(watch, "retrieval", name, "422", lambda r=raw: send([r])))
    rows.append(run_input(watch, "retrieval", "no token: parse error", "401", lambda: send([b"{bad"], JSON)))
    rows.append(
        run_input(
            watch,
            "retrieval",
            "no token: GET /health, /docs, /openapi.json",
            "200 bare, 401, 401",
            lambda: [httpx.get(f"{url}{p}") for p in ("/health", "/docs", "/openapi.json")],
        )
    )
    rows.append(
        run_input(
            watch,
            "retrieval",
            "text/plain body",
            "415",
            lambda: send([batch[0]], {"content-type": "text/plain", **AUTH}),
        )
    )
    rows.append(
        run_input(
            watch,
            "retrieval",
            "8 unauthenticated 60 MB bodies",
            "401",
            lambda: raw_posts(url, "/search", "", 60_000_000, b"x" * 1_000_000, 8, 30),
        )
    )

    def long_queries(n: int, chars: int) -> list[str]:
        return [f"{i} " + " ".join(queries[(i + j) % 1000] for j in range(12))[: chars - 6] for i in range(n)]

    issue_input = json.dumps({"queries": long_queries(1024, 1000), "top_k": 100}).encode()
    rows.append(
        run_input(watch, "retrieval", "1,024 queries of 1 KB at top_k 100", "422", lambda: send([issue_input]))
    )

    def starve() -> dict:
        top_k = max(1, 10_000 // big_queries)
        big = json.dumps({"queries": long_queries(big_queries, 512), "top_k": top_k}).encode()

        async def run() -> dict:
            async with httpx.AsyncClient(timeout=900, headers={**JSON, **AUTH}) as client:
                t0 = time.monotonic()
                big_task = asyncio.ensure_future(client.post(post, content=big))
                await asyncio.sleep(1.0)
                t1 = time.monotonic()
                small = await client.post(post, content=json.dumps({"queries": ["Alan Turing"], "top_k": 3}).encode())
                small_s = time.monotonic() - t1
                large = await big_task
                return {
                    "statuses": statuses([large, small]),
                    "large_request_s": round(time.monotonic() - t0, 1),
                    "small_query_wait_s": round(small_s, 2),
                    "large_queries": big_queries,
                    "large_top_k": top_k,
                }

        return asyncio.run(run())

    rows.append(
        run_input(
            watch,
            "retrieval",
            f"largest allowed: {big_queries} x 512-char queries, top_k {max(1, 10_000 // big_queries)}, then a small",
            "200 both, small not starved",
            starve,
        )
    )
    rows.append(
        run_input(
            watch,
            "retrieval",
            "slow body: 50 connections, 10 of 100 bytes sent",
            "408",
            lambda: raw_posts(url, "/search", f"Authorization: Bearer {TOKEN}\r\n", 100, b'{"queries"', 50, 10),
        )
    )
    rows.append(
        run_input(
            watch, "retrieval", "slow headers: 50 connections, 1 byte/s", "408", lambda: slow_headers(url, 50, 10)
        )
    )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/searchrl-hostile"))
    p.add_argument("--big-queries", type=int, default=1024, help="queries in the maximum-size search request")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/hostile.json")
    p.add_argument("--skip-search", action="store_true")
    p.add_argument("--skip-reward", action="store_true")
    args = p.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    os.environ["SEARCHRL_REWARD_TOKEN"] = TOKEN
    os.environ["SEARCHRL_SEARCH_TOKEN"] = TOKEN
    rows: list[dict] = []

    if not args.skip_reward:
        port = free_port()
        proc = start_module(
            "reward_server", ["--preset", "stage2-answer", *TIMEOUTS], port, args.work_dir / "reward.log"
        )
        try:
            url = f"http://127.0.0.1:{port}"
            with Watch(url, proc.pid) as watch:
                rows += reward_inputs(url, watch)
        finally:
            stop(proc)

    if not args.skip_search:
        from searchrl.search.index.build import build

        index = args.work_dir / "index"
        if not (index / "manifest.json").exists():
            build(ROOT / "examples/mini_corpus.jsonl", "jsonl", index)
        port = free_port()
        proc = start_module(
            "search_backend.serve",
            ["--index", str(index), "--threads", "1", "--cache-size", "0", *TIMEOUTS],
            port,
            args.work_dir / "retrieval.log",
            180,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            with Watch(url, proc.pid) as watch:
                rows += search_inputs(url, watch, args.big_queries)
        finally:
            stop(proc)

    result = {
        "benchmark": "hostile",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "criteria": {"no_5xx": True, "max_loop_block_ms": MAX_BLOCK_MS, "max_rss_growth_mb": MAX_RSS_GROWTH_MB},
        "server_timeouts": {"header_timeout_s": 2, "body_timeout_s": 2},
        "inputs": rows,
        "all_hold": all(r["holds"] for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"{sum(r['holds'] for r in rows)}/{len(rows)} inputs hold; wrote {args.out}")
    return 0 if result["all_hold"] else 1


if __name__ == "__main__":
    sys.exit(main())
