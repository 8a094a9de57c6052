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
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi import Request, Response  # noqa: E402

from benchmarks.loadgen import closed_loop  # noqa: E402
from rollout.service import free_port, wait_healthy  # noqa: E402

TRAJECTORIES = ROOT / "tests/fixtures/r1searcher/hotpotqa_llama.jsonl"
PROMPT = "User:{q}\nAssistant: <think>"


def serve(port: int) -> None:
    import uvicorn

    from reward_server.app import RewardRequest, ServerSettings, create_app
    from reward_server.spec import PRESETS

    app = create_app(ServerSettings(spec=PRESETS["r1searcher-qwen-stage2"]))

    constant = b'{"rewards": [0.0], "scores": [0.0], "extra_logs": {}}'

    @app.post("/trivial")
    async def trivial(request: Request) -> Response:
        await request.body()
        return Response(constant, media_type="application/json")

    @app.post("/trivial_validated")
    async def trivial_validated(request: Request) -> Response:
        RewardRequest.model_validate_json(await request.body())
        return Response(constant, media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def load(url: str, path: str, bodies: list[bytes], concurrency: int, seconds: float) -> dict:
    result = asyncio.run(closed_loop(url, path, bodies, concurrency, seconds, ok_prefix=b'{"rewards"'))
    return {k: v for k, v in asdict(result).items() if k != "first_error"}


def scoring_cost(records: list[dict]) -> float:
    """Microseconds to score one of these samples in process: the work the trivial endpoint does not do."""
    from eval.metrics import as_golds
    from reward_server.scoring import score_solution
    from reward_server.spec import PRESETS

    spec = PRESETS["r1searcher-qwen-stage2"]
    t0 = time.perf_counter()
    for _ in range(3):
        for r in records:
            score_solution(r["gen_text_store"], as_golds(r["answer"]), spec)
    return round(1e6 * (time.perf_counter() - t0) / (3 * len(records)), 1)


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
        load(base, "/get_reward", bodies, 16, 1.0)  # warm-up
        rows = []
        for c in args.concurrency:
            trivial = load(base, "/trivial", bodies, c, args.seconds)
            validated = load(base, "/trivial_validated", bodies, c, args.seconds)
            reward = load(base, "/get_reward", bodies, c, args.seconds)
            rows.append(
                {
                    "concurrency": c,
                    "reward": reward,
                    "trivial": trivial,
                    "trivial_validated": validated,
                    "ratio": reward["rps"] / trivial["rps"],
                    "ratio_to_validated": reward["rps"] / validated["rps"],
                }
            )
            print(
                f"c={c:>4}  reward {reward['rps']:6.0f} req/s (p50 {reward['p50_ms']:6.1f} ms, "
                f"p99 {reward['p99_ms']:6.1f} ms)"
                f"  trivial {trivial['rps']:6.0f}  trivial+validation {validated['rps']:6.0f}"
                f"  ratios {rows[-1]['ratio']:.2f} / {rows[-1]['ratio_to_validated']:.2f}"
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
        "baselines": {
            "trivial": "same app, middleware and server; reads the body, answers a constant",
            "trivial_validated": "as trivial, plus parsing the body into the reward request model",
        },
        "target": "reward endpoint >= 0.8 of the trivial endpoint at concurrency 64",
        "target_met": next((r["ratio"] >= 0.8 for r in rows if r["concurrency"] == 64), None),
        "scoring_us_in_process": scoring_cost(records),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
