"""Reward-server throughput: single-sample requests/s and latency at several concurrencies.

The reward endpoint is measured beside a trivial endpoint of the same stack (same app, middleware
and server, body read and a constant returned) in the same run: the ratio shows how much of the
stack's limit the scoring leaves. Prints a table and writes JSON.

    python benchmarks/reward_server.py [--seconds 5] [--concurrency 1 16 64 256] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rollout.service import free_port, wait_healthy  # noqa: E402

TRAJECTORIES = ROOT / "tests/fixtures/r1searcher/hotpotqa_llama.jsonl"
PROMPT = "User:{q}\nAssistant: <think>"


def serve(port: int) -> None:
    import uvicorn
    from fastapi import Request

    from reward_server.app import ServerSettings, create_app
    from reward_server.spec import PRESETS

    app = create_app(ServerSettings(spec=PRESETS["r1searcher-qwen-stage2"]))

    @app.post("/trivial")
    async def trivial(request: Request) -> dict:
        await request.body()
        return {"rewards": [0.0], "scores": [0.0], "extra_logs": {}}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def load(url: str, bodies: list[bytes], concurrency: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers={"content-type": "application/json"}) as session:

        async def worker(offset: int) -> None:
            nonlocal errors
            i = offset
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                async with session.post(url, data=bodies[i % len(bodies)]) as resp:
                    await resp.read()
                    errors += resp.status != 200
                latencies.append(time.perf_counter() - t0)
                i += concurrency

        t_start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "max_ms": 1000 * latencies[-1],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0, help="measuring time per point")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reward_server.json")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve)
        return 0

    records = [json.loads(line) for line in TRAJECTORIES.open()]
    bodies = [
        json.dumps(
            {
                "query": [PROMPT.format(q=r["question"]) + r["gen_text_store"]],
                "prompts": [PROMPT.format(q=r["question"])],
                "labels": [r["answer"]],
            }
        ).encode()
        for r in records
    ]
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, 60, proc)
        asyncio.run(load(f"{base}/get_reward", bodies, 16, 1.0))  # warm-up
        rows = []
        for c in args.concurrency:
            trivial = asyncio.run(load(f"{base}/trivial", bodies, c, args.seconds))
            reward = asyncio.run(load(f"{base}/get_reward", bodies, c, args.seconds))
            rows.append(
                {"concurrency": c, "reward": reward, "trivial": trivial, "ratio": reward["rps"] / trivial["rps"]}
            )
            print(
                f"c={c:>4}  reward {reward['rps']:8.0f} req/s (p99 {reward['p99_ms']:7.1f} ms)   "
                f"trivial {trivial['rps']:8.0f} req/s (p99 {trivial['p99_ms']:7.1f} ms)   "
                f"ratio {rows[-1]['ratio']:.2f}"
            )
    finally:
        proc.terminate()
        proc.wait(10)
    result = {
        "benchmark": "reward_server",
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "body_bytes_mean": sum(map(len, bodies)) / len(bodies),
        "seconds_per_point": args.seconds,
        "points": rows,
        "target": "reward endpoint >= 0.8 of the trivial endpoint at concurrency 64",
        "target_met": next((r["ratio"] >= 0.8 for r in rows if r["concurrency"] == 64), None),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
