"""Reward-server throughput: single-sample requests/s and latency at several concurrencies and worker counts.

The reward endpoint is measured beside a trivial endpoint of the same stack (same app, middleware,
server and worker count; the body read and a constant returned) in the same run, in alternating
slices so both see the same machine load: the ratio shows how much of the stack's limit the scoring
leaves. Bodies are what the agent sends (prompt + trajectory, prompt, label, metadata with the
searches run). Server CPU per request (all worker processes) is reported beside it. Prints a table
and writes JSON.

    python -m benchmarks.reward_server [--seconds 6] [--concurrency 1 16 64 256] [--workers 1 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from fastapi import FastAPI, Request, Response  # noqa: E402

from benchmarks.loadgen import LoadResult, closed_loop  # noqa: E402
from rollout.service import free_port, wait_healthy  # noqa: E402

TRAJECTORIES = ROOT / "tests/fixtures/r1searcher/hotpotqa_llama.jsonl"
PROMPT = "User:{q}\nAssistant: <think>"
PRESET = "r1searcher-qwen-stage2"
CONSTANT = b'{"rewards": [0.0], "scores": [0.0], "extra_logs": {}}'


def bench_app() -> FastAPI:
    """The reward server's own app (from $SEARCHRL_REWARD_SETTINGS, as `--workers` builds it) plus the baselines."""
    from reward_server.app import RewardRequest, app_from_env
    from searchrl.server import parse_json

    app = app_from_env()

    @app.post("/trivial")
    async def trivial(request: Request) -> Response:
        await request.body()
        return Response(CONSTANT, media_type="application/json")

    @app.post("/trivial_validated")
    async def trivial_validated(request: Request) -> Response:
        RewardRequest.model_validate(parse_json(await request.body()))
        return Response(CONSTANT, media_type="application/json")

    return app


def serve(port: int, workers: int) -> None:
    import uvicorn

    from reward_server.app import SETTINGS_ENV, ServerSettings
    from reward_server.spec import PRESETS
    from searchrl.server import uvicorn_options

    settings = ServerSettings(spec=PRESETS[PRESET], preset=PRESET)
    os.environ[SETTINGS_ENV] = settings.to_env()
    uvicorn.run(
        "benchmarks.reward_server:bench_app",
        factory=True,
        host="127.0.0.1",
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,
        **uvicorn_options(settings.limits),
    )


def process_tree(pid: int) -> list[int]:
    found = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += process_tree(int(child))
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(url: str, pids: list[int], bodies: list[bytes], concurrency: int, seconds: float, rounds: int) -> dict:
    """Alternating slices of each endpoint; requests, latencies and server CPU summed per endpoint."""
    paths = ("/trivial", "/trivial_validated", "/get_reward")
    slices: dict[str, list[LoadResult]] = {p: [] for p in paths}
    cpu = dict.fromkeys(paths, 0.0)
    for _ in range(rounds):
        for path in paths:
            before = cpu_seconds(pids)
            slices[path].append(
                asyncio.run(closed_loop(url, path, bodies, concurrency, seconds / rounds, ok_prefix=b'{"rewards"'))
            )
            cpu[path] += cpu_seconds(pids) - before
    out = {}
    for path, results in slices.items():
        served = sum(r.requests for r in results)
        out[path.strip("/")] = {
            "requests": served,
            "errors": sum(r.errors for r in results),
            "rps": served / seconds,
            # Per-slice percentiles, the worst slice: one figure per endpoint without keeping every latency.
            "p50_ms": max(r.p50_ms for r in results),
            "p99_ms": max(r.p99_ms for r in results),
            "max_ms": max(r.max_ms for r in results),
            "server_cpu_us_per_request": round(1e6 * cpu[path] / served, 1) if served else None,
        }
    return out


def scoring_cost(records: list[dict]) -> float:
    """Microseconds to score one of these samples in process: the work the trivial endpoint does not do."""
    from reward_server.scoring import score_solution
    from reward_server.spec import PRESETS
    from searchrl.metrics import as_golds

    spec = PRESETS[PRESET]
    t0 = time.process_time()
    for _ in range(5):
        for r in records:
            score_solution(r["gen_text_store"], as_golds(r["answer"]), spec, r["metadata"])
    return round(1e6 * (time.process_time() - t0) / (5 * len(records)), 1)


def agent_bodies(records: list[dict]) -> list[bytes]:
    """What the agent sends at the end of an episode, with the searches the environment ran."""
    from searchrl.protocol import parse_solution

    for r in records:
        r["metadata"] = {"num_searches": parse_solution(r["gen_text_store"]).num_document_blocks, "search_errors": 0}
    return [
        json.dumps(
            {
                "query": [PROMPT.format(q=r["question"]) + r["gen_text_store"]],
                "prompts": [PROMPT.format(q=r["question"])],
                "labels": [r["answer"]],
                "metadata": [r["metadata"]],
            }
        ).encode()
        for r in records
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=6.0, help="measuring time per endpoint and point")
    p.add_argument("--rounds", type=int, default=3, help="alternating slices per point")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="server worker processes to measure")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/reward_server.json")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    p.add_argument("--serve-workers", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.serve_workers)
        return 0

    records = [json.loads(line) for line in TRAJECTORIES.open()]
    bodies = agent_bodies(records)
    rows = []
    for workers in args.workers:
        port = free_port()
        cmd = [sys.executable, __file__, "--serve", str(port), "--serve-workers", str(workers)]
        proc = subprocess.Popen(cmd)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, 60, proc)
            time.sleep(1.0 if workers > 1 else 0.0)  # every worker up
            pids = process_tree(proc.pid)
            asyncio.run(closed_loop(base, "/get_reward", bodies, 16, 1.0))  # warm-up
            for c in args.concurrency:
                point = measure(base, pids, bodies, c, args.seconds, args.rounds)
                reward, trivial, validated = point["get_reward"], point["trivial"], point["trivial_validated"]
                row = {
                    "workers": workers,
                    "concurrency": c,
                    "reward": reward,
                    "trivial": trivial,
                    "trivial_validated": validated,
                    "ratio": reward["rps"] / trivial["rps"],
                    "ratio_to_validated": reward["rps"] / validated["rps"],
                    "cpu_ratio": trivial["server_cpu_us_per_request"] / reward["server_cpu_us_per_request"],
                }
                rows.append(row)
                print(
                    f"workers {workers} c={c:>4}  reward {reward['rps']:6.0f} req/s (p50 {reward['p50_ms']:6.1f} ms, "
                    f"p99 {reward['p99_ms']:6.1f} ms, {reward['server_cpu_us_per_request']:.0f} us CPU)  trivial "
                    f"{trivial['rps']:6.0f} ({trivial['server_cpu_us_per_request']:.0f} us)  validated "
                    f"{validated['rps']:6.0f}  ratio {row['ratio']:.2f}  CPU ratio {row['cpu_ratio']:.2f}",
                    flush=True,
                )
        finally:
            proc.terminate()
            proc.wait(20)
    at64 = [r for r in rows if r["concurrency"] == 64]
    result = {
        "benchmark": "reward_server",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "preset": PRESET,
        "body_bytes_mean": sum(map(len, bodies)) / len(bodies),
        "seconds_per_point": args.seconds,
        "rounds_per_point": args.rounds,
        "points": rows,
        "baselines": {
            "trivial": "same app, middleware, server and workers; reads the body, answers a constant",
            "trivial_validated": "as trivial, plus parsing the body into the reward request model",
        },
        "target": "reward endpoint >= 0.8 of the trivial endpoint at concurrency 64, same worker count",
        "target_met": {str(r["workers"]): r["ratio"] >= 0.8 for r in at64},
        "scoring_us_in_process": scoring_cost(records),
        "load_generator": "benchmarks/loadgen.py, raw HTTP/1.1 keep-alive connections on the same machine",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
