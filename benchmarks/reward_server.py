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
from typing import Any

from fastapi import FastAPI, Request, Response  # noqa: E402

from benchmarks.loadgen import LoadResult, closed_loop, cpu_seconds, process_tree  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402
from searchrl.process import free_port, wait_healthy  # noqa: E402

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


def echo_app() -> FastAPI:
    """The speed issue's yardstick: a plain FastAPI app, no guard, whose endpoint returns the JSON body it got."""
    app = FastAPI()

    @app.post("/echo")
    async def echo(body: dict[str, Any]) -> dict[str, Any]:
        return body

    return app


def serve(port: int, workers: int, factory: str = "bench_app") -> None:
    """One of this module's apps (`bench_app`, `echo_app`) with the reward server's options and workers."""
    import uvicorn

    from reward_server.app import SETTINGS_ENV, ServerSettings
    from searchrl.reward.spec import PRESETS
    from searchrl.server import uvicorn_options

    settings = ServerSettings(spec=PRESETS[PRESET], preset=PRESET)
    os.environ[SETTINGS_ENV] = settings.to_env()
    uvicorn.run(
        f"benchmarks.reward_server:{factory}",
        factory=True,
        host="127.0.0.1",
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,
        **uvicorn_options(settings.limits),
    )


def wait_echo(url: str, proc: subprocess.Popen) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.post(f"{url}/echo", json={"query": []}, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url}/echo did not start")


def measure(
    endpoints: dict[str, str], pids: list[int], bodies: list[bytes], concurrency: int, seconds: float, rounds: int
) -> dict:
    """Alternating slices of each endpoint (name -> URL); requests, latencies and server CPU summed per endpoint.
    `pids` are every server process (the reward server's and the echo app's): the idle one costs nothing."""
    slices: dict[str, list[LoadResult]] = {name: [] for name in endpoints}
    cpu = dict.fromkeys(endpoints, 0.0)
    for _ in range(rounds):
        for name, url in endpoints.items():
            base, path = url.rsplit("/", 1)
            ok = b'{"query"' if name.endswith("echo") else b'{"rewards"'
            before = cpu_seconds(pids)
            slices[name].append(
                asyncio.run(closed_loop(base, f"/{path}", bodies, concurrency, seconds / rounds, ok_prefix=ok))
            )
            cpu[name] += cpu_seconds(pids) - before
    out = {}
    for name, results in slices.items():
        served = sum(r.requests for r in results)
        out[name] = {
            "requests": served,
            "errors": sum(r.errors for r in results),
            "rps": served / seconds,
            # Per-slice percentiles, the worst slice: one figure per endpoint without keeping every latency.
            "p50_ms": max(r.p50_ms for r in results),
            "p99_ms": max(r.p99_ms for r in results),
            "max_ms": max(r.max_ms for r in results),
            "server_cpu_us_per_request": round(1e6 * cpu[name] / served, 1) if served else None,
        }
    return out


async def _asgi_post(app: Any, path: str, body: bytes) -> None:
    """One POST through the app's ASGI interface, no sockets: what the app itself costs, not uvicorn and TCP."""
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> dict:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    if status != [200]:
        raise RuntimeError(f"{path} answered {status}")


def stage_costs(bodies: list[bytes], rounds: int = 3, passes: int = 10) -> dict[str, float]:
    """Where a reward request's microseconds go: each app through its ASGI interface without sockets, and each
    step of the reward endpoint alone, in this process (CPU µs per single-sample request, median of rounds)."""
    from reward_server.app import (
        SETTINGS_ENV,
        RewardRequest,
        ServerSettings,
        _handle,
        _score_batch,
        _scored_answer,
        _validate_shape,
    )
    from searchrl.reward.spec import PRESETS
    from searchrl.server import parse_json

    settings = ServerSettings(spec=PRESETS[PRESET], preset=PRESET)
    os.environ[SETTINGS_ENV] = settings.to_env()
    apps = {"reward endpoint": (bench_app(), "/get_reward"), "trivial endpoint": (bench_app(), "/trivial")}
    apps["FastAPI echo endpoint"] = (echo_app(), "/echo")
    parsed = [parse_json(b) for b in bodies]
    requests = [RewardRequest.model_validate(d) for d in parsed]
    golds = [_validate_shape(r, settings) for r in requests]
    scored = [_score_batch(r, g, settings.spec) for r, g in zip(requests, golds, strict=True)]
    steps = {
        "strict JSON parse": lambda i: parse_json(bodies[i]),
        "validation into the request model": lambda i: RewardRequest.model_validate(parsed[i]),
        "shape checks and golds": lambda i: _validate_shape(requests[i], settings),
        "scoring (prompt split, parse, rules, metrics)": lambda i: _score_batch(requests[i], golds[i], settings.spec),
        "answer encoding": lambda i: _scored_answer(scored[i]),
        # The endpoint's work end to end without the framework: above the sum of the steps by what running
        # them in turn costs (each evicting the others' code and data), below the app by the framework.
        "every step in turn, without the app": lambda i: _scored_answer(_handle(bodies[i], settings)[2]),
    }

    async def through_app(app: Any, path: str) -> None:
        for _ in range(passes):
            for body in bodies:
                await _asgi_post(app, path, body)

    def each_step(step: Any) -> None:
        for _ in range(passes):
            for i in range(len(bodies)):
                step(i)

    samples: dict[str, list[float]] = {name: [] for name in [*apps, *steps]}
    n = passes * len(bodies)
    for _ in range(rounds):
        for name, (app, path) in apps.items():
            t0 = time.process_time()
            asyncio.run(through_app(app, path))
            samples[name].append(1e6 * (time.process_time() - t0) / n)
        for name, step in steps.items():
            t0 = time.process_time()
            each_step(step)
            samples[name].append(1e6 * (time.process_time() - t0) / n)
    return {name: round(sorted(v)[len(v) // 2], 1) for name, v in samples.items()}


def agent_bodies(records: list[dict]) -> list[bytes]:
    """What the agent sends at the end of an episode, with the searches the environment ran."""
    from searchrl.protocols.r1_searcher import parse_solution

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
    p.add_argument(
        "--breakdown-only",
        action="store_true",
        help="only re-measure the in-process breakdown (no sockets) into the existing --out file",
    )
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    p.add_argument("--serve-echo", type=int, help=argparse.SUPPRESS)
    p.add_argument("--serve-workers", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.serve_workers)
        return 0
    if args.serve_echo:
        serve(args.serve_echo, args.serve_workers, "echo_app")
        return 0

    records = [json.loads(line) for line in TRAJECTORIES.open()]
    bodies = agent_bodies(records)
    if args.breakdown_only:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        result["in_process_us_per_request"] = stage_costs(bodies)
        args.out.write_text(json.dumps(result, indent=2))
        print(json.dumps(result["in_process_us_per_request"], indent=1))
        return 0
    rows = []
    procs: list[subprocess.Popen] = []
    endpoints: dict[str, str] = {}
    try:
        # Every worker count's servers run at once, their slices interleaved, so each sees the same machine load.
        for workers in args.workers:
            urls = {}
            for flag in ("--serve", "--serve-echo"):
                port = free_port()
                cmd = [sys.executable, "-m", "benchmarks.reward_server", flag, str(port)]
                procs.append(subprocess.Popen([*cmd, "--serve-workers", str(workers)], cwd=ROOT))
                urls[flag] = f"http://127.0.0.1:{port}"
            wait_healthy(urls["--serve"], 60, procs[-2])
            wait_echo(urls["--serve-echo"], procs[-1])
            base = urls["--serve"]
            for name in ("get_reward", "trivial", "trivial_validated"):
                endpoints[f"{workers} {name}"] = f"{base}/{name}"
            endpoints[f"{workers} echo"] = f"{urls['--serve-echo']}/echo"
            asyncio.run(closed_loop(base, "/get_reward", bodies, 16, 1.0))  # warm-up
            asyncio.run(closed_loop(urls["--serve-echo"], "/echo", bodies, 16, 1.0, ok_prefix=b'{"query"'))
        time.sleep(1.0)  # every worker up
        pids = [pid for proc in procs for pid in process_tree(proc.pid)]
        for c in args.concurrency:
            point = measure(endpoints, pids, bodies, c, args.seconds, args.rounds)
            for workers in args.workers:
                reward, trivial, validated, echo = (
                    point[f"{workers} {k}"] for k in ("get_reward", "trivial", "trivial_validated", "echo")
                )
                row = {
                    "workers": workers,
                    "concurrency": c,
                    "reward": reward,
                    "trivial": trivial,
                    "trivial_validated": validated,
                    "echo": echo,
                    "ratio": reward["rps"] / trivial["rps"],
                    "ratio_to_validated": reward["rps"] / validated["rps"],
                    "ratio_to_echo": reward["rps"] / echo["rps"],
                    "cpu_ratio": trivial["server_cpu_us_per_request"] / reward["server_cpu_us_per_request"],
                    "cpu_ratio_to_echo": echo["server_cpu_us_per_request"] / reward["server_cpu_us_per_request"],
                }
                rows.append(row)
                print(
                    f"workers {workers} c={c:>4}  reward {reward['rps']:6.0f} req/s (p50 {reward['p50_ms']:6.1f} ms, "
                    f"{reward['server_cpu_us_per_request']:.0f} us CPU)  trivial {trivial['rps']:6.0f} "
                    f"({trivial['server_cpu_us_per_request']:.0f} us)  validated {validated['rps']:6.0f}  echo "
                    f"{echo['rps']:6.0f} ({echo['server_cpu_us_per_request']:.0f} us)  ratio to echo "
                    f"{row['ratio_to_echo']:.2f}, to trivial {row['ratio']:.2f}",
                    flush=True,
                )
    finally:
        for proc in procs:
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
            "echo": "a plain FastAPI app (no guard), same server options and workers: `async def echo(body: dict) -> "
            "dict: return body`",
        },
        "target": "reward endpoint >= 0.8 of the FastAPI echo endpoint at concurrency 64, same worker count",
        "target_met": {str(r["workers"]): r["ratio_to_echo"] >= 0.8 for r in at64},
        "in_process_us_per_request": stage_costs(bodies),
        "load_generator": "benchmarks/loadgen.py, raw HTTP/1.1 keep-alive connections on the same machine",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
