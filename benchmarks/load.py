"""Load on both servers through the project's own clients, every answer checked against the in-process result.

    python -m benchmarks.load [--reward-requests 20000] [--search-requests 3000] [--concurrency 64 256 1000]
                              [--idle-s 10] [--raw] [--libraries]
    python -m benchmarks.load --restart [--restart-rounds 3] [--search-outages-s 1 30] [--label NAME]

What training does: a rollout batch is ~1,000 episodes in flight, each searching through `HttpSearchBackend`
and ending in one `RewardClient.score`. Here `concurrency` callers share one client, each sending its next
request as soon as the last one is answered, at each level in turn; then, after `--idle-s` of silence (longer
than the servers' 5 s keep-alive, so pooled connections go stale), the top level runs again. The reward
server scores R1-Searcher's released trajectories (reward and score compared with the in-process reward); the
retrieval server (result cache off) answers distinct real questions over the bundled mini index (ids compared
with the in-process search). Reports sent, lost (an error or no answer within --limit-s), wrong, p50/p99/max
and req/s per client and level, and writes JSON. `--raw` adds the raw HTTP load generator (the servers alone);
`--libraries` compares one-attempt httpx and aiohttp clients at the top level (why the clients use aiohttp).
`--restart` runs the restart scenario instead: a burst at the top concurrency during which the server is killed
-9 and started again, each server in turn; lost, wrong and (reward) scored-twice counts, the last from the
server's score log, go to benchmarks/results/restart.json. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.loadgen import LoadResult, closed_loop  # noqa: E402
from searchrl.jsonl import read_jsonl  # noqa: E402
from searchrl.metrics import as_golds  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port, start_module, stop  # noqa: E402
from searchrl.reward.scoring import score_solution  # noqa: E402
from searchrl.reward.spec import PRESETS  # noqa: E402
from searchrl.rollout.reward_client import RewardClient  # noqa: E402
from searchrl.search.http_client import HttpSearchBackend  # noqa: E402

PROMPT = "User:{q}\nAssistant: <think>"
TRAJECTORIES = [
    ROOT / "tests/fixtures/r1searcher/hotpotqa_llama.jsonl",
    ROOT / "tests/fixtures/r1searcher/bamboogle_llama.jsonl",
]
QUESTION_SOURCES = [
    ROOT / "tests/fixtures/search/queries_1000.txt",
    *sorted((ROOT / "eval/data").glob("*.jsonl")),
    ROOT / "examples/stage_1.jsonl",
    ROOT / "tests/fixtures/search/kiltmini_queries.jsonl",
    ROOT / "examples/mini_corpus.jsonl",  # passage titles, as short keyword searches
]

Call = Callable[[int], Awaitable[Any]]
Check = Callable[[int, Any], bool]


async def drive(call: Call, check: Check, total: int, concurrency: int, limit_s: float) -> dict[str, Any]:
    """`concurrency` callers share `call`, each making its next call (i = 0, 1, ... total - 1) when the last
    returns; a call that raises, or is still running at `limit_s`, is lost."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    wrong = 0
    issued = 0
    started = time.perf_counter()

    async def caller() -> None:
        nonlocal issued, wrong
        while issued < total:
            i = issued
            issued += 1
            t0 = time.perf_counter()
            try:
                result = await call(i)
            except Exception as exc:  # noqa: BLE001 - every failure is counted, by kind
                key = f"{type(exc).__name__}: {str(exc)[:160]}"
                errors[key] = errors.get(key, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)
            wrong += not check(i, result)

    tasks = [asyncio.ensure_future(caller()) for _ in range(concurrency)]
    done, pending = await asyncio.wait(tasks, timeout=limit_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(q: float) -> float:
        return round(1000 * latencies[int(q * (len(latencies) - 1))], 1) if latencies else 0.0

    return {
        "concurrency": concurrency,
        "sent": total,
        "lost": total - len(latencies),
        "wrong": wrong,
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else 0.0,
        "p99_ms": pct(0.99),
        "max_ms": pct(1.0),
        "rps": round(len(latencies) / elapsed, 1),
        "seconds": round(elapsed, 1),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
    }


def show(name: str, phase: str, row: dict[str, Any]) -> None:
    print(
        f"{name:<18} {phase:<10} c={row['concurrency']:>4}: sent {row['sent']:>6}  lost {row['lost']}  "
        f"wrong {row['wrong']}  p50 {row['p50_ms']:.0f} ms  p99 {row['p99_ms']:.0f} ms  "
        f"max {row['max_ms']:.0f} ms  ({row['rps']:.0f} req/s)"
        + (f"  errors {row['errors']}" if row["errors"] else ""),
        flush=True,
    )


async def project_client_levels(
    name: str, call: Call, check: Check, total: int, levels: list[int], idle_s: float, limit_s: float
) -> list[dict[str, Any]]:
    rows = []
    for c in levels:
        row = {"client": name, "phase": "burst", **await drive(call, check, total, c, limit_s)}
        show(name, "burst", row)
        rows.append(row)
    if idle_s > 0:
        await asyncio.sleep(idle_s)
        row = {
            "client": name,
            "phase": f"after {idle_s:g} s idle",
            **await drive(call, check, total, levels[-1], limit_s),
        }
        show(name, "after idle", row)
        rows.append(row)
    return rows


def raw_levels(
    url: str, path: str, bodies: list[bytes], check, total: int, levels: list[int], prefix: bytes, limit_s: float
) -> list[dict[str, Any]]:
    rows = []
    for c in levels:
        result: LoadResult = asyncio.run(
            closed_loop(url, path, bodies, c, limit_s, ok_prefix=prefix, check=check, max_requests=total)
        )
        row = {
            "client": "raw HTTP",
            "phase": "burst",
            "concurrency": c,
            "sent": result.requests + result.errors,
            "lost": result.errors,
            "wrong": result.wrong,
            "p50_ms": round(result.p50_ms, 1),
            "p99_ms": round(result.p99_ms, 1),
            "max_ms": round(result.max_ms, 1),
            "rps": round(result.rps, 1),
            "errors": {result.first_error: result.errors} if result.first_error else {},
        }
        show("raw HTTP", "burst", row)
        rows.append(row)
    return rows


async def library_rows(
    url: str, bodies: list[bytes], check: Check, total: int, concurrency: int, limit_s: float
) -> list[dict[str, Any]]:
    """One attempt per request, 256 connections: httpx's pool (the clients' old transport) against aiohttp
    behind a semaphore (their transport now)."""
    import aiohttp
    import httpx

    rows = []
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=256)) as client:

        async def with_httpx(i: int) -> bytes:
            response = await client.post(
                url, content=bodies[i % len(bodies)], headers={"Content-Type": "application/json"}
            )
            response.raise_for_status()
            return response.content

        rows.append(
            {
                "client": "httpx, pool of 256",
                "phase": "burst",
                **await drive(with_httpx, check, total, concurrency, limit_s),
            }
        )
        show(rows[-1]["client"], "burst", rows[-1])
    slots = asyncio.Semaphore(256)
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def with_aiohttp(i: int) -> bytes:
            async with (
                slots,
                session.post(
                    url, data=bodies[i % len(bodies)], headers={"Content-Type": "application/json"}
                ) as response,
            ):
                response.raise_for_status()
                return await response.read()

        rows.append(
            {
                "client": "aiohttp, 256 slots",
                "phase": "burst",
                **await drive(with_aiohttp, check, total, concurrency, limit_s),
            }
        )
        show(rows[-1]["client"], "burst", rows[-1])
    return rows


def reward_load(args: argparse.Namespace, work: Path) -> tuple[list[dict], list[dict]]:
    records = [r for path in TRAJECTORIES for r in read_jsonl(path)]
    spec = PRESETS["r1searcher-qwen-stage2"]
    samples, bodies, expected = [], [], []
    for r in records:
        prompt = PROMPT.format(q=r["question"])
        samples.append((prompt + r["gen_text_store"], prompt, r["answer"]))
        body = {"query": [prompt + r["gen_text_store"]], "prompts": [prompt], "labels": [r["answer"]]}
        bodies.append(json.dumps(body).encode())
        want = score_solution(r["gen_text_store"], as_golds(r["answer"]), spec)
        expected.append((want.reward, want.score))

    def check(i: int, result: Any) -> bool:
        return (result.reward, result.score) == expected[i % len(expected)]

    def check_payload(i: int, payload: bytes) -> bool:
        got = json.loads(payload)
        return (got["rewards"][0], got["scores"][0]) == expected[i % len(expected)]

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_module("reward_server", ["--preset", "r1searcher-qwen-stage2"], port, work / "reward.log")
    try:

        async def run() -> tuple[list[dict], list[dict]]:
            client = RewardClient(url, max_connections=args.max_connections)
            try:
                rows = await project_client_levels(
                    "RewardClient",
                    lambda i: client.score(*samples[i % len(samples)]),
                    check,
                    args.reward_requests,
                    args.concurrency,
                    args.idle_s,
                    args.limit_s,
                )
            finally:
                await client.aclose()
            libraries = []
            if args.libraries:
                total = min(args.reward_requests, 3000)
                libraries = await library_rows(
                    f"{url}/get_reward", bodies, check_payload, total, args.concurrency[-1], min(args.limit_s, 180)
                )
            return rows, libraries

        rows, libraries = asyncio.run(run())
        if args.raw:
            rows += raw_levels(
                url,
                "/get_reward",
                bodies,
                check_payload,
                args.reward_requests,
                args.concurrency,
                b'{"rewards"',
                args.limit_s,
            )
        return rows, libraries
    finally:
        stop(proc)


def distinct_questions(count: int) -> list[str]:
    seen: dict[str, None] = {}
    for path in QUESTION_SOURCES:
        if path.suffix == ".txt":
            lines = path.read_text(encoding="utf-8").splitlines()
        else:
            lines = [r.get("question") or r.get("query") or r.get("title") or "" for r in read_jsonl(path)]
        for line in lines:
            text = " ".join(line.split())
            if text:
                seen.setdefault(text, None)
    if len(seen) < count:
        raise SystemExit(f"--search-requests: only {len(seen)} distinct questions are bundled")
    return list(seen)[:count]


def search_load(args: argparse.Namespace, work: Path) -> list[dict]:
    from searchrl.search.index.build import build
    from searchrl.search.local_faiss import LocalFaissBackend

    index = work / "index"
    build(ROOT / "examples/mini_corpus.jsonl", "jsonl", index)
    queries = distinct_questions(args.search_requests)
    expected = [[p.id for p in hits] for hits in LocalFaissBackend(index).search_sync(queries, 3)]

    def check(i: int, result: Any) -> bool:
        return [p.id for p in result[0]] == expected[i]

    def check_payload(i: int, payload: bytes) -> bool:
        return [p["id"] for p in json.loads(payload)["results"][0]] == expected[i % len(expected)]

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_args = ["--index", str(index), "--threads", "1", "--cache-size", "0"]
    proc = start_module("search_backend.serve", server_args, port, work / "retrieval.log", 180)
    try:

        async def run() -> list[dict]:
            client = HttpSearchBackend(url, max_connections=args.max_connections)
            try:
                return await project_client_levels(
                    "HttpSearchBackend",
                    lambda i: client.search([queries[i]], 3),
                    check,
                    args.search_requests,
                    args.concurrency,
                    args.idle_s,
                    args.limit_s,
                )
            finally:
                await client.aclose()

        rows = asyncio.run(run())
        if args.raw:
            bodies = [json.dumps({"queries": [q], "top_k": 3}).encode() for q in queries]
            rows += raw_levels(
                url,
                "/search",
                bodies,
                check_payload,
                args.search_requests,
                args.concurrency,
                b'{"results"',
                args.limit_s,
            )
        return rows
    finally:
        stop(proc)


async def burst_with_restart(
    call: Call, check: Check, total: int, concurrency: int, kill_at: int, restart: Callable[[], Any], limit_s: float
) -> tuple[dict[str, Any], float]:
    """`drive` while a server is killed (SIGKILL) once `kill_at` calls are answered; `restart` (run in a thread)
    starts it again. Returns the burst's row and the outage: seconds from the kill until the server was healthy."""
    answered = 0

    async def counted(i: int) -> Any:
        nonlocal answered
        result = await call(i)
        answered += 1
        return result

    async def kill_then_restart() -> float:
        while answered < kill_at:
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        await asyncio.to_thread(restart)
        return time.perf_counter() - t0

    killer = asyncio.ensure_future(kill_then_restart())
    row = await drive(counted, check, total, concurrency, limit_s)
    return row, await asyncio.wait_for(killer, limit_s)


def scored_twice(log: Path) -> tuple[int, int]:
    """(samples the score log holds more than once, counted once per extra line; lines torn by a kill)."""
    times: dict[str, int] = {}
    torn = 0
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            query = json.loads(line)["query"]
        except (ValueError, KeyError, TypeError):
            torn += 1
            continue
        times[query] = times.get(query, 0) + 1
    return sum(n - 1 for n in times.values()), torn


class KilledServer:
    """A server (`python -m module args`) on a port of its own, which `restart` kills -9 and starts again there
    after `down_s`, as a crash and a supervisor would."""

    def __init__(self, module: str, args: list[str], log: Path, down_s: float, start_timeout_s: float = 180) -> None:
        self.module, self.args, self.log, self.down_s, self.timeout_s = module, args, log, down_s, start_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs = [start_module(module, args, self.port, log, start_timeout_s)]

    def restart(self) -> None:
        self.procs[-1].kill()
        self.procs[-1].wait()
        time.sleep(self.down_s)
        self.procs.append(start_module(self.module, self.args, self.port, self.log, self.timeout_s))

    def stop(self) -> None:
        for proc in self.procs:
            stop(proc)


def restart_round(
    args: argparse.Namespace, server: KilledServer, client: Any, call: Call, check: Check, total: int
) -> tuple[dict[str, Any], float]:
    """One burst of `total` calls through `client` at the top concurrency, the server killed once a fifth are
    answered; the server is stopped and the client closed after."""

    async def run() -> tuple[dict[str, Any], float]:
        try:
            kill_at = total // 5
            return await burst_with_restart(
                call, check, total, args.concurrency[-1], kill_at, server.restart, args.limit_s
            )
        finally:
            await client.aclose()

    try:
        return asyncio.run(run())
    finally:
        server.stop()


def reward_restarts(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Each round: `--reward-requests` distinct samples at the top concurrency through `RewardClient`, the reward
    server killed -9 once a fifth are answered and started again `--restart-after-s` later on the same score log."""
    records = [r for path in TRAJECTORIES for r in read_jsonl(path)]
    spec = PRESETS["r1searcher-qwen-stage2"]
    wants = [score_solution(r["gen_text_store"], as_golds(r["answer"]), spec) for r in records]
    samples, expected = [], []
    for i in range(args.reward_requests):
        r = records[i % len(records)]
        prompt = PROMPT.format(q=f"{i}. {r['question']}")  # distinct, so the log shows a sample scored twice
        samples.append((prompt + r["gen_text_store"], prompt, r["answer"]))
        expected.append((wants[i % len(records)].reward, wants[i % len(records)].score))

    rows = []
    for n in range(args.restart_rounds):
        log = work / f"restart-scored-{n}.jsonl"
        log.unlink(missing_ok=True)
        server_args = ["--preset", "r1searcher-qwen-stage2", "--log-jsonl", str(log)]
        server = KilledServer("reward_server", server_args, work / "reward.log", args.restart_after_s)
        client = RewardClient(server.url, max_connections=args.max_connections)
        row, outage = restart_round(
            args,
            server,
            client,
            lambda i, client=client: client.score(*samples[i]),
            lambda i, result: (result.reward, result.score) == expected[i],
            len(samples),
        )
        twice, torn = scored_twice(log)
        row = {"client": "RewardClient", "round": n + 1, **row, "down_s": server.down_s, "outage_s": round(outage, 1)}
        row.update(scored_twice=twice, torn_lines=torn)
        show("RewardClient", "restart", row)
        print(f"  outage {outage:.1f} s, scored twice {twice}, torn lines {torn}", flush=True)
        rows.append(row)
    return rows


def search_restarts(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """`--search-requests` distinct searches at the top concurrency through `HttpSearchBackend` as configured by
    default, the retrieval server (real index, encoder loaded at start) killed -9 once a fifth are answered and
    started again after each of `--search-outages-s` (its model load comes on top)."""
    from searchrl.search.index.build import build
    from searchrl.search.local_faiss import LocalFaissBackend

    index = work / "index"
    build(ROOT / "examples/mini_corpus.jsonl", "jsonl", index)
    queries = distinct_questions(args.search_requests)
    expected = [[p.id for p in hits] for hits in LocalFaissBackend(index).search_sync(queries, 3)]

    rows = []
    for down_s in args.search_outages_s:
        server_args = ["--index", str(index), "--threads", "1", "--cache-size", "0"]
        server = KilledServer("search_backend.serve", server_args, work / "retrieval.log", down_s)
        client = HttpSearchBackend(server.url, max_connections=args.max_connections)
        row, outage = restart_round(
            args,
            server,
            client,
            lambda i, client=client: client.search([queries[i]], 3),
            lambda i, result: [p.id for p in result[0]] == expected[i],
            len(queries),
        )
        row = {"client": "HttpSearchBackend", "round": len(rows) + 1, **row, "down_s": down_s}
        row["outage_s"] = round(outage, 1)
        row.update(scored_twice=None, torn_lines=None)
        show("HttpSearchBackend", "restart", row)
        print(f"  outage {outage:.1f} s", flush=True)
        rows.append(row)
    return rows


def restart_main(args: argparse.Namespace) -> int:
    """The restart scenario alone; its rows go to `--restart-out` under `--label` (other labels are kept, so a
    run of another version of the code can sit beside this one)."""
    started = time.time()
    reward = [] if args.skip_reward else reward_restarts(args, args.work_dir)
    search = [] if args.skip_search else search_restarts(args, args.work_dir)
    out = args.restart_out
    result = json.loads(out.read_text()) if out.exists() else {"benchmark": "restart", "runs": {}}
    result["runs"][args.label] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        "seconds": round(time.time() - started, 1),
        "concurrency": args.concurrency[-1],
        "restart_after_s": args.restart_after_s,
        "rows": reward + search,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    rows = reward + search
    lost, wrong, twice = (sum(r[k] or 0 for r in rows) for k in ("lost", "wrong", "scored_twice"))
    print(f"{args.label}: lost {lost}, wrong {wrong}, scored twice {twice}; wrote {out}")
    return 0 if lost == wrong == twice == 0 else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reward-requests", type=int, default=20_000, help="reward requests per level")
    p.add_argument("--search-requests", type=int, default=3_000, help="distinct searches per level")
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1000])
    p.add_argument("--idle-s", type=float, default=10.0, help="silence before the top level runs again (0: skip)")
    p.add_argument("--limit-s", type=float, default=600.0, help="time cap per level; calls still running are lost")
    p.add_argument("--max-connections", type=int, default=256, help="the clients' bound on requests in flight")
    p.add_argument("--raw", action="store_true", help="also drive the servers with the raw load generator")
    p.add_argument("--libraries", action="store_true", help="also compare one-attempt httpx and aiohttp clients")
    p.add_argument("--skip-search", action="store_true")
    p.add_argument("--skip-reward", action="store_true")
    p.add_argument(
        "--restart",
        action="store_true",
        help="only the restart scenario: each server killed -9 and restarted mid-burst at the top concurrency",
    )
    p.add_argument("--restart-rounds", type=int, default=3, help="--restart: reward-server kills, one burst each")
    p.add_argument("--restart-after-s", type=float, default=1.0, help="--restart: reward server down this long")
    p.add_argument(
        "--search-outages-s",
        type=float,
        nargs="+",
        default=[1.0, 30.0],
        help="--restart: retrieval server down this long per round, before its own start-up (model load)",
    )
    p.add_argument("--label", default="this branch", help="--restart: the name of this run in the JSON")
    p.add_argument("--restart-out", type=Path, default=ROOT / "benchmarks/results/restart.json")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs/bench_load")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/load.json")
    args = p.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.restart:
        return restart_main(args)
    started = time.time()
    reward, libraries = ([], []) if args.skip_reward else reward_load(args, args.work_dir)
    search = [] if args.skip_search else search_load(args, args.work_dir)
    checked = reward + search
    result = {
        "benchmark": "load",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        "seconds": round(time.time() - started, 1),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "reward": reward,
        "search": search,
        "libraries": libraries,
        "lost": sum(r["lost"] for r in checked),
        "wrong": sum(r["wrong"] for r in checked),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"lost {result['lost']}, wrong {result['wrong']}; wrote {args.out}")
    return 0 if result["lost"] == 0 and result["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
